"""Figures are shown no wider than JupyterLab's output area at 1024 px (helpers/figure_display.py)."""

from __future__ import annotations

import base64
import io

import PIL.Image
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers import figure_display


def _size(b64: str) -> tuple[int, int]:
    return PIL.Image.open(io.BytesIO(base64.b64decode(b64))).size


def _figure(width_in: float, layout: str | None) -> Figure:
    fig = Figure(figsize=(width_in, 3), layout=layout)
    FigureCanvasAgg(fig)
    for k, ax in enumerate(fig.subplots(1, 3)):
        ax.plot([1, 2, 3], [k, 1, 0])
        ax.set(title=f"panel {k}", xlabel="step", ylabel="loss")
    return fig


@pytest.mark.parametrize("layout", ["constrained", "compressed", None])
def test_a_wide_figure_is_drawn_at_the_output_width_and_left_as_it_was(layout):
    fig = _figure(11, layout)
    before = repr(fig)
    w, h = _size(figure_display.png(fig))
    assert w <= figure_display.WIDTH_PX
    assert w >= figure_display.WIDTH_PX - (40 if layout else 120)  # the tight crop narrows it a little
    assert repr(fig) == before == "<Figure size 1100x300 with 3 Axes>"  # what strict nbval compares
    if layout is not None:  # re-fitted: the text keeps its size, so the picture keeps its height
        assert h >= 3 * figure_display.DPI - 20


def test_a_narrow_figure_keeps_its_size_at_the_course_dpi():
    w, h = _size(figure_display.png(_figure(5, "constrained")))
    assert 5 * figure_display.DPI - 30 <= w <= (5 + 2 * figure_display.PAD_IN) * figure_display.DPI


def test_the_formatter_is_installed_in_a_kernel_only():
    from IPython.core.interactiveshell import InteractiveShell

    assert figure_display.use() is False  # plain Python: nothing to install
    shell = InteractiveShell.instance()
    try:
        assert figure_display.use() is True
        data, _ = shell.display_formatter.format(_figure(11, "constrained"))
        assert _size(data["image/png"])[0] <= figure_display.WIDTH_PX
        assert data["text/plain"] == "<Figure size 1100x300 with 3 Axes>"
    finally:
        InteractiveShell.clear_instance()
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        figure_display.png("not a figure")
