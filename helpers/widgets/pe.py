"""An interactive explorer of the sinusoidal positional encoding (ipywidgets).

Three panels: the table PE (T, C) as a heatmap; the curves of a chosen dimension and its
sin/cos partner against the position; and PE(m) . PE(n) against the offset n - m, with
the closed form sum_i cos((n - m) theta_i) drawn through it.

Built for JupyterLab *and* strict nbval: the plot is one persistent matplotlib Figure,
rendered to PNG bytes into a `widgets.Image` and redrawn in place when a control
changes (no `Output` widget, no `interact`, whose outputs nbval would see). In plain
Python, setting a control's ``.value`` runs the update at once, so tests drive it headless
and read the plotted data from the attributes below.

Shapes: T = seq_len, C = d_model.
    explorer.table    (T, C) float32     the plotted table
    explorer.curves   {dim: (T,)}        the plotted columns
    explorer.offsets  (T,) int           n - m for n = 0 .. T-1
    explorer.dots     (T,) float64       PE(m) . PE(n)

Example:
    >>> ex = pe_explorer(seq_len=16, d_model=8)  # dim 8 - 2 = 6, position 16 // 2 = 8
    >>> ex.controls["d_model"].value = 16  # redraws at once
    >>> tuple(ex.table.shape), sorted(ex.curves), int(ex.offsets[0])
    ((16, 16), [6, 7], -8)
"""

from __future__ import annotations

import math
import time

import ipywidgets as widgets
import numpy as np
from matplotlib import patheffects, transforms
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers.positional import inverse_frequencies, sinusoidal_table
from helpers.validate import check_int
from helpers.widgets.base import Explorer, Panels, finite_only, stale_notice, with_fonts
from helpers.widgets.throttle import Throttle

MAX_LEN, MAX_D_MODEL, BASE_EXP = 256, 512, (1.0, 5.0)  # base from 10 to 100000
FIGSIZE, DPI = (10.0, 3.6), 80  # 800 x 288 pixels: readable text in a notebook and on GitHub


def _check_range(name: str, value: int, low: int, high: int) -> int:
    check_int(name, value)
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


class PEExplorer(Explorer):
    """The explorer's state, controls, figure and image; ``.widget`` is what Jupyter shows."""

    def __init__(
        self,
        seq_len: int = 64,
        d_model: int = 128,
        base: float = 10000.0,
        dim: int | None = None,
        position: int | None = None,
    ):
        # Defaults that fit any size: dimension 10 (a wavelength of about 13 at base 10000)
        # or the last sine one, and the middle position.
        dim = min(10, d_model - 2) if dim is None and isinstance(d_model, int) else dim
        position = seq_len // 2 if position is None and isinstance(seq_len, int) else position
        _check_range("seq_len", seq_len, 2, MAX_LEN)
        _check_range("d_model", d_model, 2, MAX_D_MODEL)
        if d_model % 2:
            raise ValueError(f"d_model must be even (sin and cos come in pairs), got {d_model}")
        if isinstance(base, bool) or not isinstance(base, (int, float)):
            raise TypeError(f"base must be a number, got {type(base).__name__}")
        low, high = 10 ** BASE_EXP[0], 10 ** BASE_EXP[1]
        if not low <= base <= high:
            raise ValueError(f"base must be in [{low:g}, {high:g}], got {base}")
        _check_range("dim", dim, 0, d_model - 1)
        _check_range("position", position, 0, seq_len - 1)
        # Live while dragging (throttled); rows wrap, so the sliders keep their width at 1024 px.
        common = {"continuous_update": True, "style": {"description_width": "70px"},
                  "layout": widgets.Layout(min_width="250px", flex="1 1 250px")}
        self.controls = {
            "seq_len": widgets.IntSlider(
                seq_len, min=2, max=MAX_LEN, description="seq_len", **common
            ),
            "d_model": widgets.IntSlider(
                d_model, min=2, max=MAX_D_MODEL, step=2, description="d_model", **common
            ),
            "base": widgets.FloatLogSlider(
                float(base),
                base=10,
                min=BASE_EXP[0],
                max=BASE_EXP[1],
                step=0.25,
                description="base",
                **common,
            ),
            "dim": widgets.IntSlider(
                dim, min=0, max=d_model - 1, description="dimension", **common
            ),
            "position": widgets.IntSlider(
                position, min=0, max=seq_len - 1, description="position m", **common
            ),
        }
        c = self.controls
        row = widgets.Layout(display="flex", flex_flow="row wrap")  # no width 100%: its margins would overflow
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        self._build_figure()
        # The colour bar is the table's; the figure-level labels and titles fall within their axes' panel.
        self.panels = Panels(self.figure, [[self._axes[0], self._colorbar.ax], [self._axes[1]], [self._axes[2]]])
        self.widget = widgets.VBox(
            [
                stale_notice(),
                widgets.HBox([c["seq_len"], c["d_model"], c["base"]], layout=row),
                widgets.HBox([c["dim"], c["position"]], layout=row),
                self.panels.widget,
            ]
        )
        self._busy = False
        self.last_update_s = 0.0
        self.update()
        finite_only(self.controls["base"])  # first: a NaN base from code never reaches _on_change
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

    @with_fonts
    def _build_figure(self) -> None:
        self.figure = Figure(figsize=FIGSIZE, dpi=DPI)
        # A permanent Agg canvas keeps one renderer, so text layouts stay cached between redraws
        # (savefig on a bare Figure makes a new canvas, and so a cold cache, every time).
        FigureCanvasAgg(self.figure)
        # Fixed margins, and labels/titles as figure text at fixed places: otherwise matplotlib
        # measures every tick label on each draw to place them, most of the redraw time.
        self.figure.subplots_adjust(left=0.065, right=0.985, bottom=0.19, top=0.86, wspace=0.34)
        self._axes = ax_map, ax_curve, ax_dot = self.figure.subplots(1, 3)
        self._im = ax_map.imshow(
            np.zeros((2, 2)), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest"
        )
        colorbar = self._colorbar = self.figure.colorbar(self._im, ax=ax_map, fraction=0.06, pad=0.02, ticks=[-1, 0, 1])
        colorbar.ax.tick_params(labelsize=10)
        self._titles = []
        for ax, xlabel in zip(
            self._axes, ("dimension", "position", "offset k = n - m"), strict=True
        ):
            middle = (ax.get_position().x0 + ax.get_position().x1) / 2
            self.figure.text(middle, 0.02, xlabel, ha="center", fontsize=11)
            self._titles.append(self.figure.text(middle, 0.915, "", ha="center", fontsize=11))
            ax.tick_params(labelsize=10)
            ax.locator_params(nbins=4)  # each tick label costs render time
        self.figure.text(0.005, 0.5, "position", rotation=90, va="center", fontsize=11)
        # Black markers with a white edge: gold vanished against the red-white-blue table, and a
        # thin dashed black line among the fast red/blue stripes of the low dimensions.
        edge = [patheffects.withStroke(linewidth=4.5, foreground="white")]
        self._row = ax_map.axhline(0, color="black", lw=2, path_effects=edge)
        self._col = ax_map.axvline(0, color="black", lw=2, path_effects=edge)
        # Among dense stripes even an edged line can hide: a caret above the table points at it too.
        above = transforms.blended_transform_factory(ax_map.transData, ax_map.transAxes)
        self._caret = ax_map.plot([0], [1.0], "v", ms=8, color="black", transform=above, clip_on=False)[0]
        self._lines = [
            ax_curve.plot([], [], lw=1.2, label=label)[0] for label in ("sin (even)", "cos (odd)")
        ]
        ax_curve.set_ylim(-1.1, 1.45)  # room for the legend above the curves
        ax_curve.legend(loc="upper right", fontsize=10, ncol=2, frameon=False, handlelength=1.2, columnspacing=0.8)
        self._closed = ax_dot.plot([], [], color="0.6", lw=1)[0]  # the closed form, every offset
        self._dots = ax_dot.plot([], [], "o", ms=2.5, color="C3")[0]  # the dot products, for this m

    def _on_change(self, change) -> None:
        if self._busy:  # a bound we moved clamped another slider: one redraw is enough
            return
        before = {name: control.value for name, control in self.controls.items()}
        try:
            self._redraw()  # deferred only while the browser drags; code gets its redraw at once
        except (TypeError, ValueError):
            # A refused value (e.g. an odd d_model set from code) must not stay in the control,
            # nor the clamps it caused: put every old value back, redraw, and report the error.
            c, self._busy = self.controls, True
            try:
                change["owner"].value = change["old"]
                c["dim"].max, c["position"].max = c["d_model"].value - 1, c["seq_len"].value - 1
                for name, value in before.items():
                    if c[name] is not change["owner"]:
                        c[name].value = value
            finally:
                self._busy = False
            self.update()
            raise

    @with_fonts
    def update(self) -> None:
        """Recompute the data from the controls, redraw, and put the new PNG into the image."""
        start = time.perf_counter()
        c = self.controls
        self._busy = True
        try:
            # Shrinking seq_len or d_model clamps the position or the dimension to the new range.
            c["dim"].max = c["d_model"].value - 1
            c["position"].max = c["seq_len"].value - 1
        finally:
            self._busy = False
        T, C, base = c["seq_len"].value, c["d_model"].value, c["base"].value
        dim, m = c["dim"].value, c["position"].value
        self.table = sinusoidal_table(T, C, base)  # (T, C)
        table = self.table.double().numpy()
        pair = (dim - dim % 2, dim - dim % 2 + 1)  # the sin and cos columns of one frequency
        self.curves = {d: table[:, d] for d in pair}
        self.offsets = np.arange(T) - m  # (T,)
        self.dots = table @ table[m]  # (T, C) @ (C,) -> (T,)
        k = np.arange(-(T - 1), T)  # every offset the panel can show
        closed = np.cos(np.outer(k, inverse_frequencies(C, base).numpy())).sum(
            axis=1
        )  # (2T-1, C/2) -> (2T-1,)
        self._draw(T, C, base, dim, m, pair, k, closed)
        self.figure.canvas.draw()
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def _draw(self, T, C, base, dim, m, pair, k, closed) -> None:
        ax_map, ax_curve, ax_dot = self._axes
        self._im.set_data(self.table.numpy())
        self._im.set_extent((-0.5, C - 0.5, T - 0.5, -0.5))
        self._row.set_ydata([m, m])
        self._col.set_xdata([dim, dim])
        self._caret.set_xdata([dim])
        self._titles[0].set_text(f"PE table {T}×{C}, base {base:.5g}")
        pos = np.arange(T)
        wavelength = 2 * math.pi * base ** (pair[0] / C)
        for line, d in zip(self._lines, pair, strict=True):
            line.set_data(pos, self.curves[d])
        ax_curve.set_xlim(0, T - 1)
        self._titles[1].set_text(
            f"dims {pair[0]}, {pair[1]}: wavelength {wavelength:.4g}"
        )
        self._closed.set_data(k, closed)
        self._dots.set_data(self.offsets, self.dots)
        ax_dot.set_xlim(-(T - 1) - 0.5, T - 0.5)
        ax_dot.set_ylim(min(closed.min(), 0) - 0.05 * C, 0.6 * C)
        self._titles[2].set_text(f"PE({m})·PE(n); line: Σcos(kθ)")

    def __repr__(self) -> str:
        c = self.controls
        return (
            f"PEExplorer(seq_len={c['seq_len'].value}, d_model={c['d_model'].value}, "
            f"base={c['base'].value:g}, dim={c['dim'].value}, position={c['position'].value})"
        )


def pe_explorer(
    seq_len: int = 64,
    d_model: int = 128,
    base: float = 10000.0,
    dim: int | None = None,
    position: int | None = None,
) -> PEExplorer:
    """Build the explorer; show it by leaving it as a cell's last expression (``.widget`` is the VBox).

    ``dim`` defaults to 10 (or d_model - 2 if smaller), ``position`` to seq_len // 2.
    """
    return PEExplorer(seq_len, d_model, base, dim, position)
