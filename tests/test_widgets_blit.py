"""`Blitter`: redrawing only the changed layers gives the picture a full draw gives."""

import doctest
import io

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

import helpers.widgets.blit as module
from helpers.plots import figure_to_png
from helpers.widgets.blit import Blitter


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def scene():
    fig = Figure(figsize=(3, 2), dpi=60)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(xticks=[], yticks=[])  # a tick mark touching the image would be another thing on top
    image = ax.imshow(np.zeros((3, 3)), vmin=0, vmax=1)
    (line,) = ax.plot([0, 2], [0, 2], color="red")
    title = ax.set_title("a")
    return fig, ax, image, line, title


def test_each_layer_redraw_equals_a_full_draw():
    fig, ax, image, line, title = scene()
    blit = Blitter(fig, [[image, *ax.spines.values()], [line, title]])  # the spines lie on the image
    first = blit.render()
    assert np.array_equal(pixels(first), pixels(figure_to_png(fig, dpi=60, fast=True)))
    line.set_ydata([2, 0])
    title.set_text("b")
    second = blit.render(1)  # the image is kept, the line and title drawn again
    assert second != first
    assert np.array_equal(pixels(second), pixels(figure_to_png(fig, dpi=60, fast=True)))
    image.set_data(np.eye(3))
    assert np.array_equal(pixels(blit.render(0)), pixels(figure_to_png(fig, dpi=60, fast=True)))
    ax.set_xlabel("x")  # outside the layers: only a full redraw shows it
    assert np.array_equal(pixels(blit.render(0, full=True)), pixels(figure_to_png(fig, dpi=60, fast=True)))


def test_a_stale_layer_below_is_not_redrawn():
    fig, _, image, line, _ = scene()
    blit = Blitter(fig, [[image], [line]])
    kept = blit.render()
    image.set_data(np.eye(3))
    assert blit.render(1) == kept  # layer 0 was not asked for: the kept picture stays


def test_bad_arguments_are_named():
    fig, _, image, _, _ = scene()
    with pytest.raises(TypeError, match="figure"):
        Blitter(None, [[image]])
    with pytest.raises(TypeError, match="layers"):
        Blitter(fig, [image])
    with pytest.raises(ValueError, match="layers"):
        Blitter(fig, [[fig.suptitle("t")]])  # figure-level: a savefig would leave it out
    blit = Blitter(fig, [[image]])
    for bad in (1, -1, True, "0"):
        with pytest.raises(ValueError, match="first_changed"):
            blit.render(bad)
    with pytest.raises(TypeError, match="full"):
        blit.render(0, full=1)


def test_doctest():
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
