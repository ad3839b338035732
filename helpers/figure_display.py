"""How a notebook shows a matplotlib `Figure`: at most as wide as JupyterLab's output area, so
no picture is scaled down and no text drawn at 8 pt or more shows smaller than 8 px.

JupyterLab shrinks a picture wider than the output area (577 px at 1024 × 768 with the file browser
open) to fit: an 11-inch figure at 100 dpi (1,111 px) showed at 52 %, its axis text about 5 px.
`use` makes a kernel draw every figure at `DPI`; a figure wider than `WIDTH_PX` whose layout engine
re-fits its axes (``layout="constrained"`` or "compressed", which every course figure uses) is drawn
at that width, its axes re-fitted and its text at its own size; another figure is drawn at the dpi
that makes it fit. The figure itself is left as it was (its size, and so its text/plain repr
``<Figure size 1100x300 with 3 Axes>``, which strict nbval compares, do not change).
"""

from __future__ import annotations

import base64
import io

from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine

WIDTH_PX = 560  # the 577-px output area, less its padding
DPI = 80  # 8 pt = 8.9 px
PAD_IN = 0.1  # the margin bbox_inches="tight" adds on each side (IPython's default)


def png(fig: Figure) -> str | None:
    """The figure as base64 PNG, drawn as the module doc says (None for an empty figure, as IPython does)."""
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not fig.axes and not fig.texts and not fig.images and not fig.lines and not fig.patches:
        return None
    size, dpi = fig.get_size_inches().copy(), DPI
    refits = isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    if (size[0] + 2 * PAD_IN) * DPI > WIDTH_PX:
        if refits:
            fig.set_size_inches(WIDTH_PX / DPI - 2 * PAD_IN, size[1], forward=False)
        else:
            dpi = WIDTH_PX / (size[0] + 2 * PAD_IN)
    buf = io.BytesIO()
    try:
        # bbox_inches="tight" as IPython's inline backend; the crop only narrows the picture.
        fig.canvas.print_figure(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=PAD_IN, facecolor=fig.get_facecolor(),
                                edgecolor=fig.get_edgecolor(), metadata={"Software": None})  # fmt: skip
    finally:
        fig.set_size_inches(size, forward=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def use() -> bool:
    """Show figures with `png` in the running IPython kernel (True), or do nothing outside one (False)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    shell.display_formatter.formatters["image/png"].for_type(Figure, png)
    return True
