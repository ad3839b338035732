"""What every explorer shares: how it shows itself in a notebook.

An explorer holds its controls and one `widgets.Image` in ``.widget``. Its display bundle
carries three views of the same state, and each front end picks the one it can render:
- the live widget (JupyterLab with a running kernel);
- ``image/png``, the current picture (GitHub, nbviewer, any reader without widgets), so a
  notebook needs no second, static copy of the plot above the explorer;
- a short ``text/plain`` (``repr``), which strict nbval compares; the widget's own would
  spell out the PNG bytes.

Live, the picture is shown by `Panels`: one image per panel in a wrapping row, so an explorer fits
the width JupyterLab gives it without scaling its text down; ``.image`` (a `Picture`) is the whole
figure. `stale_notice` says so when the kernel behind an explorer is gone.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math

import ipywidgets as widgets
import matplotlib
import numpy as np
import PIL.Image
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers.cjk import EXT_FAMILY, FAMILY, LATIN, register
from helpers.validate import check_int
from helpers.widgets.keep import keeper

register()  # the explorers draw Chinese with the course's font (helpers/cjk.py)


def with_fonts(method):
    """Run an explorer's drawing method with DejaVu Sans alone when none of ``self.font_texts`` needs
    CJK, else with the course's CJK font as its fallback. Measured: the fallback list costs about
    50 ms per redraw of the text-heavy GPT explorer (matplotlib resolves both fonts for every text)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        cjk = any(ord(ch) >= 0x2E80 for text in getattr(self, "font_texts", ()) for ch in str(text))
        with matplotlib.rc_context({"font.family": [LATIN, FAMILY, EXT_FAMILY] if cjk else [LATIN]}):
            return method(self, *args, **kwargs)

    return wrapper


def char_model_or_pretrained(model, tokenizer):
    """``(model, tokenizer)``, or the shipped character GPT when both are None: an explorer cell then
    runs on its own, after a kernel restart too."""
    if model is None and tokenizer is None:
        from helpers.pretrained import load_pretrained

        return load_pretrained("char_gpt")
    check_char_model(model, tokenizer)
    return model, tokenizer

MAX_PIXELS = 4096  # a side of an explorer's picture: a 4K screen; more would allocate gigabytes


def check_char_model(model, tokenizer) -> None:
    """The trained-model explorers need a helpers `GPT` and the `CharTokenizer` it was trained with."""
    from helpers.models import GPT
    from helpers.tokenizers import CharTokenizer

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a helpers GPT, got {type(model).__name__}")
    if not isinstance(tokenizer, CharTokenizer):
        raise TypeError(f"tokenizer must be a CharTokenizer, got {type(tokenizer).__name__}")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} characters but the model's vocab_size is "
                         f"{model.config.vocab_size}")  # fmt: skip


VISIBLE = {"\n": "\\n", " ": "␣", "\t": "\\t"}


def show_char(c: str) -> str:
    """A printable label for a character (newline, space and tab made visible)."""
    return VISIBLE.get(c, c)


def known_text(tokenizer, text: str, max_len: int) -> tuple[str, str]:
    """The last ``max_len`` characters of ``text`` that the tokenizer knows ("" if none), and a
    status line naming the characters that were skipped, in the order typed ("" when none were)."""
    known = "".join(ch for ch in text if ch in tokenizer)
    unknown = list(dict.fromkeys(ch for ch in text if ch not in tokenizer))  # as typed, each once
    notes = [f"not in the vocabulary, skipped: {' '.join(show_char(c) for c in unknown)}"] if unknown else []
    if not known and text:
        notes = [f"none of the {len(text)} characters typed is in the vocabulary (skipped: "
                 f"{' '.join(show_char(c) for c in unknown)}); the picture shows the last text the model could read"]
    if len(known) > max_len:
        notes.append(f"{len(text)} characters typed: the model reads the last {max_len} it knows (its context)")
    return known[-max_len:], "; ".join(notes)


def first_text(tokenizer) -> str:
    """What an explorer reads when it starts with nothing it knows: a space if the tokenizer has one."""
    return " " if " " in tokenizer else tokenizer.chars[0]


def lock_when_single(*sliders) -> None:
    """Grey out a slider while it has one value only (a 1-layer model's layer, a 1-character
    text's query), now and whenever its range changes: a learner cannot move it, and it says so."""
    for slider in sliders:
        slider.disabled = slider.min == slider.max
        slider.observe(lambda change: setattr(change["owner"], "disabled", change["owner"].min == change["owner"].max),
                       names=["min", "max"])  # fmt: skip


class StatusLine(widgets.HTML):
    """A line of plain text under the controls that wraps at the output's width (a `Label`
    cuts it off with an ellipsis). Read and write it as ``.text``; ``.value`` is the escaped HTML.
    An empty line keeps its height, so the picture below does not jump when a note comes and goes."""

    def __init__(self, **kwargs):
        kwargs.setdefault("layout", widgets.Layout(min_height="1.6em"))
        super().__init__(**kwargs)

    @property
    def text(self) -> str:
        return html.unescape(self.value)

    @text.setter
    def text(self, value: str) -> None:
        self.value = html.escape(value)


class Explorer:
    """Mixin: subclasses set ``self.widget`` and ``self.panels`` (a `Panels`) and define ``__repr__``."""

    @property
    def image(self) -> Picture:
        """The whole figure as last shown (``.value``: PNG bytes)."""
        return self.panels.picture

    def _repr_mimebundle_(self, **kwargs):
        show = getattr(self.widget, "_repr_mimebundle_", None)
        bundle = dict(show(**kwargs) or {}) if callable(show) else {}
        bundle["text/plain"] = repr(self)
        if self.panels.keep is None:  # displayed: under `make lab`, its last picture is kept for the save hook
            self.panels.keep = keeper(self.widget)
        if self.image.value:
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle


STALE_CSS = (  # ipywidgets marks each view of a model whose kernel is gone with .jupyter-widgets-disconnected
    "<style>.jupyter-widgets-disconnected .course-stale{display:block!important}"
    ".widget-image.jupyter-widgets-disconnected{opacity:.45}</style>"
)
STALE_TEXT = ("This explorer's kernel is gone (restarted or shut down), so its controls no longer redraw. "
              "Run this cell again: it loads what it needs.")  # fmt: skip


def stale_notice() -> widgets.HTML:
    """An empty line while the kernel lives; after a restart (or on a saved page) it says the explorer
    is stale and greys its pictures. Pure CSS on the class ipywidgets sets, so it needs no kernel."""
    return widgets.HTML(f'{STALE_CSS}<div class="course-stale" style="display:none;color:#b00;font-weight:bold">'
                        f"{html.escape(STALE_TEXT)}</div>")  # fmt: skip


class Picture:
    """The whole figure as PNG bytes (``.value``, encoded on first read), and its size in pixels as
    ``.width`` / ``.height`` strings, like a `widgets.Image`: what GitHub and nbval see."""

    def __init__(self, rgba: np.ndarray):
        self._rgba, self._png = rgba, None
        self.height, self.width = str(rgba.shape[0]), str(rgba.shape[1])

    @property
    def value(self) -> bytes:
        if self._png is None:
            self._png = encode_png(self._rgba)
        return self._png


def encode_png(rgba: np.ndarray) -> bytes:
    """PNG bytes of an (H, W, 4) uint8 array, no metadata (same bytes every run), fast zlib level."""
    buf = io.BytesIO()
    PIL.Image.fromarray(np.ascontiguousarray(rgba), "RGBA").save(buf, format="png", compress_level=1)
    return buf.getvalue()


class Panels:
    """Show a figure as one picture per panel, in a row that wraps: side by side where the output
    area is wide, stacked where it is narrow (577 px at 1024 with JupyterLab's file browser open),
    and never scaled, so no text shrinks below the size it was drawn at.

    ``groups`` lists the axes of each panel, left to right; the figure is cut halfway between the
    drawn extents (tick labels and titles included) of neighbouring groups, once, on the first
    `show`; each panel keeps the rows its own drawing spans. Everything above ``above``'s bottom edge (an artist: say a title across the whole figure
    that the status line repeats) is left out of the panels; `picture` (the whole figure) keeps it.
    """

    def __init__(self, figure: Figure, groups: list[list], above=None):
        if not isinstance(figure, Figure):
            raise TypeError(f"figure must be a matplotlib Figure, got {type(figure).__name__}")
        if (not isinstance(groups, (list, tuple)) or not groups
                or not all(isinstance(g, (list, tuple)) and g for g in groups)):
            raise ValueError("groups must be a non-empty list of non-empty lists of axes, e.g. [[ax1], [ax2, ax3]]")
        strays = [ax for g in groups for ax in g if not isinstance(ax, Axes) or ax.figure is not figure]
        if strays:
            raise ValueError(f"groups must hold only axes of this figure, got {strays[0]!r}")
        self.figure, self.groups, self.above, self.top = figure, groups, above, 0
        self.images = [widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
                       for _ in groups]  # fmt: skip
        self.widget = widgets.HBox(self.images, layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        self.cuts: list[int] | None = None
        self.picture: Picture | None = None
        self.keep = None  # called with each new picture once the explorer is displayed (helpers.widgets.keep)

    def _find_cuts(self) -> list[int]:
        renderer = self.figure.canvas.get_renderer()
        boxes, hidden = [], self.above is not None and self.above.get_visible()
        if hidden:  # a figure-wide title held by one axes would stretch that panel across the figure
            self.above.set_visible(False)
        try:
            for group in self.groups:
                extents = [ax.get_tightbbox(renderer) for ax in group]
                boxes.append((min(b.x0 for b in extents), max(b.x1 for b in extents),
                              min(b.y0 for b in extents), max(b.y1 for b in extents)))  # fmt: skip
        finally:
            if hidden:
                self.above.set_visible(True)
        width, height = int(round(self.figure.bbox.width)), int(round(self.figure.bbox.height))
        inner = [int(round((a[1] + b[0]) / 2)) for a, b in zip(boxes, boxes[1:], strict=False)]
        for text in self.figure.texts:  # figure-level labels and titles belong to the panel under their centre
            if text is self.above or not text.get_visible():
                continue
            e = text.get_window_extent(renderer)
            k = sum(c <= (e.x0 + e.x1) / 2 for c in inner)
            x0, x1, y0, y1 = boxes[k]
            boxes[k] = (x0, x1, min(y0, e.y0), max(y1, e.y1))
        # Rows: each panel's own drawn height with a small margin (pixel rows count from the top).
        self.rows = [(max(0, height - int(b[3]) - 6), min(height, height - int(b[2]) + 6)) for b in boxes]
        return [0, *(min(max(c, 1), width - 1) for c in inner), width]

    def show(self) -> None:
        """Cut the canvas's current picture (drawn by the caller) into the panels' PNGs."""
        if not isinstance(self.figure.canvas, FigureCanvasAgg):  # a bare Figure() has no pixels to cut
            FigureCanvasAgg(self.figure)
        if getattr(self.figure.canvas, "renderer", None) is None:  # never drawn yet: draw it, or there is no picture
            self.figure.canvas.draw()
        rgba = np.array(self.figure.canvas.buffer_rgba())  # (H, W, 4), a copy: the canvas is drawn again later
        if self.cuts is None:
            self.cuts = self._find_cuts()
            if self.above is not None and self.above.get_text():
                box = self.above.get_window_extent(self.figure.canvas.get_renderer())
                self.top = max(0, int(self.figure.bbox.height - box.y0) + 2)
        self.picture = Picture(rgba)
        for image, x0, x1, (y0, y1) in zip(self.images, self.cuts, self.cuts[1:], self.rows, strict=False):
            crop = rgba[max(y0, self.top):y1, x0:x1]
            image.width, image.height = str(crop.shape[1]), str(crop.shape[0])
            image.value = encode_png(crop)  # unchanged bytes are not sent again
        if self.keep is not None:
            self.keep(self.picture)
def check_pixels(width, height, min_width: int, min_height: int) -> None:
    """The picture's size in pixels: ints from the minimum to `MAX_PIXELS` (a huge size from code
    would make matplotlib allocate gigabytes for the canvas)."""
    for name, value, low in (("width", width, min_width), ("height", height, min_height)):
        if not low <= check_int(name, value) <= MAX_PIXELS:
            raise ValueError(f"{name} must be in [{low}, {MAX_PIXELS}] pixels, got {value}")


def finite_only(*controls) -> None:
    """Refuse NaN and infinities set from code on float controls (a slider clamps inf, not NaN, and a
    NaN would break every later redraw): the old value is put back and ValueError names the control.
    Call before any other observer is registered on these controls, so none of them sees the value."""
    def guard(change):
        if not math.isfinite(change["new"]):
            change["owner"].value = change["old"]
            raise ValueError(f"{change['owner'].description} must be a finite number, got {change['new']}; "
                             f"kept {change['old']}")

    for control in controls:
        control.observe(guard, names="value")
