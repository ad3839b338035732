"""The shipped CJK font: its bytes, what it covers, and that pictures really use it."""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import helpers.plots  # noqa: F401  (registers the font)
from helpers.attention_plots import token_labels
from helpers.cjk import FAMILY, FONT_PATH, check_drawable, missing_glyphs

ROOT = Path(__file__).resolve().parents[1]
SHA256 = "409a05cbf0a080032a28705debdc30895edbd27a4be24414de12cc7bda1896e6"  # as helpers/fonts/README.md


def test_font_is_the_recorded_subset_with_its_licence():
    data = FONT_PATH.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256
    assert len(data) < 4_000_000, f"the font grew to {len(data) / 1e6:.2f} MB"
    licence = (FONT_PATH.parent / "LICENSE-OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Noto Sans CJK" in licence
    assert SHA256 in (FONT_PATH.parent / "README.md").read_text(encoding="utf-8")


def test_font_covers_every_chinese_character_of_the_course():
    text = "".join(json.dumps(json.loads(p.read_text(encoding="utf-8")), ensure_ascii=False)
                   for p in sorted((ROOT / "notebooks").glob("*.ipynb")))  # fmt: skip
    chinese = {ch for ch in text if 0x4E00 <= ord(ch) <= 0x9FFF}
    assert chinese, "the notebooks have Chinese examples"
    assert missing_glyphs("".join(sorted(chinese))) == []
    assert missing_glyphs("浣溪沙 菩萨蛮 鹧鸪天 西江月，。！？“”") == []


def test_missing_glyphs_and_the_refusal_name_the_character():
    assert missing_glyphs("我爱你 the cat\n") == []
    assert missing_glyphs("a🤖b🤖") == ["🤖"]
    with pytest.raises(ValueError, match=r"tokens: .*'🤖' \(U\+1F916\)"):
        token_labels(["我", "🤖"])
    with pytest.raises(TypeError, match="text must be a str"):
        missing_glyphs(None)
    check_drawable("labels", ["ok", "好"])  # no error


def _draw(text: str) -> np.ndarray:
    fig = Figure(figsize=(1, 0.5), dpi=80)
    FigureCanvasAgg(fig)
    fig.text(0.1, 0.3, text, fontsize=14)
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., 0]


def test_chinese_draws_as_glyphs_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font" would be a warning
        a, b = _draw("我"), _draw("爱")
    assert (a < 128).sum() > 20 and not np.array_equal(a, b)  # ink, and two different glyphs (not one box twice)
    fig = Figure()
    FigureCanvasAgg(fig)
    fig.text(0, 0, "我 cat")
    fig.savefig(io.BytesIO(), format="png")
    assert fig.texts[0].get_fontfamily() == ["DejaVu Sans", FAMILY, "Course CJK Ext"]  # Latin first, Chinese falls back


EXT_SHA256 = "411ca3089b699f52cc9d0c85e238fec4e427eb48c06bdbcddb46c2d5c1ced25a"  # as helpers/fonts/README.md


def test_extension_font_is_the_recorded_subset_with_its_licence():
    from helpers.cjk import EXT_PATH

    assert hashlib.sha256(EXT_PATH.read_bytes()).hexdigest() == EXT_SHA256
    licence = (EXT_PATH.parent / "LICENSE-OFL-HanaMin.txt").read_text(encoding="utf-8")
    assert "SIL Open Font License, Version 1.1" in licence and "GlyphWiki" in licence
    assert EXT_SHA256 in (EXT_PATH.parent / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["char_gpt", "char_gpt_zh"])
def test_every_character_a_shipped_model_can_write_is_drawable(name):
    """Issue 38 item 7: derived from the tokenizer itself, not from a list of blocks."""
    from helpers.pretrained import load_pretrained

    _, tok = load_pretrained(name)
    assert missing_glyphs("".join(tok.chars)) == []


def test_extension_b_characters_draw_as_glyphs():
    blank = _draw("")
    for ch in "𠺕𠿏𥱧𦟂𧣴𩉾𩘟":
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert (_draw(ch) != blank).any(), f"U+{ord(ch):04X} drew nothing"


@pytest.mark.parametrize("ch", ["\0", "\r", "\x7f", "\ue000", "\U000e0001", "\U0010fffd", "\ud800", "\u0378"])
def test_non_printables_that_would_draw_as_boxes_are_reported(ch):
    assert missing_glyphs(f"a{ch}b") == [ch]
    with pytest.raises(ValueError, match="no glyph"):
        check_drawable("labels", [f"x{ch}"])


def test_newline_and_tab_are_not_reported():
    assert missing_glyphs("a\nb\tc") == []
