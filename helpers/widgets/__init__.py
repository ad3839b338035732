"""Interactive explorers, built by functions so tests can drive them headless."""

from helpers.widgets.attention import attention_explorer

__all__ = ["attention_explorer"]
