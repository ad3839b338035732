"""What every explorer shares: how it shows itself in a notebook.

An explorer holds its controls and one `widgets.Image` in ``.widget``. Its display bundle
carries three views of the same state, and each front end picks the one it can render:
- the live widget (JupyterLab with a running kernel);
- ``image/png``, the current picture (GitHub, nbviewer, any reader without widgets), so a
  notebook needs no second, static copy of the plot above the explorer;
- a short ``text/plain`` (``repr``), which strict nbval compares; the widget's own would
  spell out the PNG bytes.
"""

from __future__ import annotations

import base64
import html
import math

import ipywidgets as widgets

from helpers.validate import check_int

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


def known_text(tokenizer, text: str, max_len: int) -> tuple[str, str]:
    """The last ``max_len`` characters of ``text`` that the tokenizer knows (never empty), and a
    status line naming the characters that were skipped ("" when none were)."""
    known = "".join(ch for ch in text if ch in tokenizer)
    unknown = sorted(set(text) - set(known))
    notes = [f"not in the vocabulary, skipped: {' '.join(unknown)}"] if unknown else []
    if len(known) > max_len:
        notes.append(f"{len(known)} characters: the model reads the last {max_len} (its context)")
    return (known or tokenizer.chars[0])[-max_len:], "; ".join(notes)


def lock_when_single(*sliders) -> None:
    """Grey out a slider while it has one value only (a 1-layer model's layer, a 1-character
    text's query), now and whenever its range changes: a learner cannot move it, and it says so."""
    for slider in sliders:
        slider.disabled = slider.min == slider.max
        slider.observe(lambda change: setattr(change["owner"], "disabled", change["owner"].min == change["owner"].max),
                       names=["min", "max"])  # fmt: skip


class StatusLine(widgets.HTML):
    """A line of plain text under the controls that wraps at the output's width (a `Label`
    cuts it off with an ellipsis). Read and write it as ``.text``; ``.value`` is the escaped HTML."""

    @property
    def text(self) -> str:
        return html.unescape(self.value)

    @text.setter
    def text(self, value: str) -> None:
        self.value = html.escape(value)


class Explorer:
    """Mixin: subclasses set ``self.widget`` and ``self.image`` and define ``__repr__``."""

    def _repr_mimebundle_(self, **kwargs):
        show = getattr(self.widget, "_repr_mimebundle_", None)
        bundle = dict(show(**kwargs) or {}) if callable(show) else {}
        bundle["text/plain"] = repr(self)
        if self.image.value:
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle


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
