from helpers.widgets.attention import attention_explorer

__all__ = ["attention_explorer"]
