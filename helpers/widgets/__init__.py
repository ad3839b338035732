"""Interactive explorers, built by functions that tests can call headless."""

from helpers.widgets.attention import attention_explorer
from helpers.widgets.cross_attention import cross_attention_explorer
from helpers.widgets.gpt_attention import gpt_attention_explorer
from helpers.widgets.llm_explorer import llm_explorer
from helpers.widgets.next_token import next_token_explorer
from helpers.widgets.pe import pe_explorer

__all__ = ["attention_explorer", "cross_attention_explorer", "gpt_attention_explorer", "llm_explorer",
           "next_token_explorer",
           "pe_explorer"]
