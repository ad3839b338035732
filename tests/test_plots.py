"""helpers.plots.heatmap: annotations readable on every cell, the colorbar labelled."""

import numpy as np
import pytest

from helpers.plots import heatmap


@pytest.mark.parametrize("cmap, vmin, vmax", [("RdBu_r", -1.0, 1.0), ("viridis", 0.0, 1.0), ("Blues", None, None)])
def test_annotation_colour_follows_the_cell_colour(cmap, vmin, vmax):
    """Black text on light cells and white on dark ones, judged from the colour itself: a
    near-zero cosine on RdBu_r from -1 to 1 is near-white and needs black, whatever the data's midpoint."""
    data = np.array([[1.0, 0.02, -0.05], [0.03, 1.0, 0.9], [-0.9, 0.5, 0.0]])
    fig = heatmap(data, cmap=cmap, vmin=vmin, vmax=vmax, annotate=True)
    ax, im = fig.axes[0], fig.axes[0].images[0]
    for text in ax.texts:
        r, g, b, _ = im.cmap(im.norm(float(text.get_text())))
        luma = 0.299 * r + 0.587 * g + 0.114 * b
        assert text.get_color() == ("black" if luma > 0.5 else "white"), (text.get_text(), luma)
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    if cmap == "RdBu_r":  # the case the old midpoint rule got wrong: white on near-white
        assert colours["0.02"] == colours["-0.05"] == colours["0.00"] == "black" and colours["1.00"] == "white"


def test_colorbar_label():
    fig = heatmap(np.eye(2), colorbar_label="cosine")
    assert fig.axes[1].get_ylabel() == "cosine"
    with pytest.raises(TypeError, match="colorbar_label"):
        heatmap(np.eye(2), colorbar_label=3)
