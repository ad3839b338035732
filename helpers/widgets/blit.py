"""Redraw only what changed: a figure drawn in layers, each kept as the background of the next.

A full draw of an explorer's figure costs 50-100 ms, most of it text (tick labels, titles),
although a slider changes only a few artists. `Blitter` takes the artists that change, grouped
by how often they change (say: those that change with the source text, then those a slider
changes). It draws the rest once and keeps the picture; ``render(k)`` restores the picture
kept before layer ``k`` and draws layers ``k..`` on it (blitting), then encodes the PNG as
`helpers.plots.figure_to_png` does with ``fast=True``. Whatever is not in a layer is drawn on
the first call only (or with ``full=True``). The result is the picture a full draw
gives, pixel for pixel, as long as each layer's artists are listed in z-order, the layers are
listed bottom-up, and whatever lies on top of a layer's artists (an axes' spines over an image)
is listed after them (tests/test_widgets_blit.py compares the two). Tick marks touching an
image's edge are such things too: they differ by a few anti-aliased pixels unless listed.

Layer artists must belong to an axes: a figure-level artist (``fig.suptitle``) that is
animated is missing from a savefig; put a text with ``transform=fig.transFigure`` in an
axes instead.

Example:
    >>> from matplotlib.backends.backend_agg import FigureCanvasAgg
    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(2, 1), dpi=50)
    >>> canvas = FigureCanvasAgg(fig)
    >>> (line,) = fig.add_subplot().plot([0, 1], [0, 1])
    >>> blit = Blitter(fig, [[line]])
    >>> png = blit.render(); line.set_ydata([1, 0]); blit.render(0) != png
    True
"""

from __future__ import annotations

import io

import matplotlib.image
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


class Blitter:
    """PNGs of ``figure`` redrawing only ``layers[k:]`` (see the module doc)."""

    def __init__(self, figure: Figure, layers: list[list[Artist]]):
        if not isinstance(figure, Figure) or not isinstance(figure.canvas, FigureCanvasAgg):
            raise TypeError(f"figure must be a matplotlib Figure with a FigureCanvasAgg, got {type(figure).__name__}")
        if not isinstance(layers, list) or not layers or not all(isinstance(layer, list) for layer in layers):
            raise TypeError("layers must be a non-empty list of lists of artists")
        for layer in layers:
            for artist in layer:
                if not isinstance(artist, Artist) or artist.axes is None:
                    raise ValueError(f"layers must hold artists of an axes of the figure, got {artist!r}")
                artist.set_animated(True)  # left out of the full draw: drawn by render()
        self.figure, self.layers = figure, layers
        self._renderer = None
        self._kept: list = [None] * len(layers)  # _kept[k]: the picture before layer k is drawn

    def render(self, first_changed: int = 0, full: bool = False) -> bytes:
        """Redraw layers ``first_changed..`` on the kept picture and return PNG bytes. ``full`` (and
        the first call) draws the rest of the figure too: needed when something outside the layers changed."""
        self.draw(first_changed, full)
        buf = io.BytesIO()  # as matplotlib's savefig writes it, with figure_to_png(fast=True)'s settings
        matplotlib.image.imsave(buf, self.figure.canvas.buffer_rgba(), format="png", dpi=self.figure.dpi,
                                metadata={"Software": None}, pil_kwargs={"compress_level": 1})  # fmt: skip
        return buf.getvalue()

    def draw(self, first_changed: int = 0, full: bool = False) -> None:
        """As `render`, leaving the picture on the canvas (``figure.canvas.buffer_rgba()``) unencoded."""
        canvas, fig, n = self.figure.canvas, self.figure, len(self.layers)
        if isinstance(first_changed, bool) or not isinstance(first_changed, int) or not 0 <= first_changed < n:
            raise ValueError(f"first_changed must be an int in [0, {n}), got {first_changed!r}")
        if not isinstance(full, bool):
            raise TypeError(f"full must be a bool, got {type(full).__name__}")
        start = first_changed
        if full or canvas.get_renderer() is not self._renderer:  # a savefig at another dpi makes a new one
            canvas.draw()  # everything but the layers
            self._renderer, start = canvas.get_renderer(), 0
            self._kept[0] = canvas.copy_from_bbox(fig.bbox)
        else:
            canvas.restore_region(self._kept[start])
        for k in range(start, n):
            if k > start:
                self._kept[k] = canvas.copy_from_bbox(fig.bbox)
            for artist in self.layers[k]:
                fig.draw_artist(artist)
