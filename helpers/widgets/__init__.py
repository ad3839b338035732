"""Interactive explorers (ipywidgets) that also run headless and under strict nbval."""

from helpers.widgets.pe import pe_explorer

__all__ = ["pe_explorer"]
