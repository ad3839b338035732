"""What every explorer shares: panels that fit a narrow output area, text no smaller than 8 pt,
and a notice for when its kernel is gone."""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import pytest
from matplotlib.text import Text

from helpers.models import GPT, GPTConfig, Transformer
from helpers.tokenizers import CharTokenizer
from helpers.widgets import (
    attention_explorer,
    cross_attention_explorer,
    gpt_attention_explorer,
    llm_explorer,
    next_token_explorer,
    pe_explorer,
)
from helpers.widgets.base import STALE_TEXT, Panels
from tests.tiny_llama import byte_tokenizer, tiny_llama

NARROW = 577 - 2 * 8  # JupyterLab's output area at 1024 px with the file browser open, less margins
TOK = CharTokenizer.from_text("abc def(x):")
BYTE_TOK = byte_tokenizer()
BUILD = {
    "pe": lambda: pe_explorer(),
    "attention": lambda: attention_explorer(),
    "next_token": lambda: next_token_explorer(GPT(GPTConfig(TOK.vocab_size, 32, 16, 4, 4)), TOK, prompt="def f(x):"),
    "gpt_attention": lambda: gpt_attention_explorer(GPT(GPTConfig(TOK.vocab_size, 32, 16, 4, 4)), TOK, text="def f(x):"),
    # SmolLM2's own shape (30 layers, 9 heads: the sliders' ranges) but a byte vocabulary and a narrow width:
    # loading the real model takes half a minute; tests/test_widgets_llm.py runs it once.
    "llm": lambda: llm_explorer(tiny_llama(BYTE_TOK, d_model=36, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=32),
                                BYTE_TOK, prompt="The cat sat on the 我"),
    "cross_attention": lambda: cross_attention_explorer(
        Transformer(12, 12, d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0, max_len=10), source="31415926"),
}


def _walk(w):
    yield w
    for child in getattr(w, "children", ()):
        yield from _walk(child)


@pytest.mark.parametrize("name", sorted(BUILD))
def test_panels_tile_the_figure_and_each_fits_a_narrow_output_area(name):
    ex = BUILD[name]()
    cuts, full = ex.panels.cuts, ex.panels.picture
    assert cuts[0] == 0 and cuts[-1] == int(full.width) and all(a < b for a, b in zip(cuts, cuts[1:], strict=False))
    for image in ex.panels.images:
        assert 0 < int(image.width) <= NARROW, f"{name}: a panel {image.width} px wide is scaled down at 1024 px"
        assert image.layout.max_width == "100%" and image.layout.height == "auto"  # never wider than the area
    # every picture's text at 8 pt or more (80 dpi: about 9 px)
    small = [t.get_text() for t in ex.figure.findobj(Text) if t.get_visible() and t.get_text() and t.get_fontsize() < 8]
    assert not small, f"{name}: text below 8 pt: {small[:5]}"
    # the controls' rows never ask for more than the area (a 100% width plus margins overflowed by 4 px)
    assert not any(getattr(w, "layout", None) is not None and w.layout.width == "100%" for w in _walk(ex.widget))


@pytest.mark.parametrize("name", sorted(BUILD))
def test_every_explorer_says_when_its_kernel_is_gone(name):
    ex = BUILD[name]()
    notes = [w for w in _walk(ex.widget) if isinstance(w, widgets.HTML) and "jupyter-widgets-disconnected" in w.value]
    assert len(notes) == 1 and html.escape(STALE_TEXT) in notes[0].value
    assert 'style="display:none' in notes[0].value  # hidden while the kernel lives


def test_panels_crop_the_canvas_and_refuse_bad_groups():
    ex = BUILD["attention"]()
    rgba = np.asarray(ex.figure.canvas.buffer_rgba())
    from io import BytesIO

    from PIL import Image

    first = np.asarray(Image.open(BytesIO(ex.panels.images[0].value)))
    (y0, y1), x1 = ex.panels.rows[0], ex.panels.cuts[1]
    assert np.array_equal(first, rgba[y0:y1, :x1])
    with pytest.raises(ValueError, match="groups"):
        Panels(ex.figure, [])


def _controls(w):
    return [c for c in _walk(w) if isinstance(c, widgets.IntSlider | widgets.FloatSlider | widgets.FloatLogSlider
                                              | widgets.Checkbox | widgets.Dropdown) and not c.disabled]


PANELS_BUDGET_PX = 470  # a 647-px view less the control blocks measured at 1024 px (166 px for 04's GPT explorer)


def _move(control) -> None:
    """One move a learner can make: a checkbox flipped, the next option, a slider to its middle (or its start)."""
    if isinstance(control, widgets.Checkbox):
        control.value = not control.value
    elif isinstance(control, widgets.Dropdown):
        control.index = (control.index + 1) % len(control.options)
    elif isinstance(control, widgets.FloatLogSlider):
        mid = 10 ** ((control.min + control.max) / 2)
        control.value = mid if abs(control.value - mid) > 1e-6 else 10**control.min
    else:
        mid = control.min + round((control.max - control.min) / 2 / control.step) * control.step
        # a two-value slider (0..1) has its middle at 0: move it to the other end, as a learner would
        other = control.max if control.value == control.min else control.min
        control.value = mid if control.value != mid else other


@pytest.mark.parametrize("name", sorted(BUILD))
def test_each_control_changes_a_panel_that_fits_under_the_controls(name):
    """Stacked in a narrow output area (1024 px, file browser open), the panels a control changes must start
    close enough under the controls that the first of them fits in a 647-px view with the controls."""
    ex = BUILD[name]()
    heights = [int(image.height) for image in ex.panels.images]
    for control in _controls(ex.widget):
        if control.disabled:  # one value only now (a key slider when the query is 0)
            continue
        before = [image.value for image in ex.panels.images]
        _move(control)
        changed = [k for k, image in enumerate(ex.panels.images) if image.value != before[k]]
        assert changed, f"{name}: {control.description} changes no panel"
        reach = sum(heights[: changed[0] + 1])
        assert reach <= PANELS_BUDGET_PX, (f"{name}: {control.description} first changes panel {changed[0]}, "
                                           f"{reach} px of panels below the controls (heights {heights})")
