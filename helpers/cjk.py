"""Chinese in pictures: the course ships its own CJK font, so stored and live pictures agree.

Matplotlib's default font (DejaVu Sans) has no CJK glyphs, and which CJK font a machine has
(if any) differs from learner to learner. ``helpers/fonts/course-cjk-sans.otf`` is a subset of
Noto Sans CJK SC (SIL OFL 1.1; see helpers/fonts/README.md) with the 3,755 most common
characters of modern Chinese and every one the course draws. Importing `helpers.plots`
registers it and puts it after DejaVu Sans in matplotlib's font list, so Latin text keeps
DejaVu Sans and each CJK character falls back to this font, in every Figure and pyplot plot.

A character neither font has would be drawn as an empty box with a warning; `missing_glyphs`
names such characters, and `check_drawable` turns them into a clear ValueError first.

Example:
    >>> missing_glyphs("我爱你 cat")
    []
    >>> missing_glyphs("鑫🤖")
    ['🤖']
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import matplotlib
from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

FONT_PATH = Path(__file__).resolve().parent / "fonts" / "course-cjk-sans.otf"
FAMILY = "Course CJK Sans"
# The few characters of the Song ci corpus (so of char_gpt_zh's vocabulary) that Noto Sans CJK
# lacks (CJK Extension B: U+20FCF and five more) come from a second subset, of HanaMinB.
EXT_PATH = FONT_PATH.parent / "course-cjk-ext.ttf"
EXT_FAMILY = "Course CJK Ext"
DRAWN_AS_SPACE = "\n\t"  # matplotlib breaks the line / leaves a gap: never a box
LATIN = "DejaVu Sans"  # matplotlib's default, shipped with it


@functools.cache
def _charmaps() -> tuple[frozenset[int], ...]:
    latin = font_manager.findfont(font_manager.FontProperties(family=LATIN), fallback_to_default=False)
    return tuple(frozenset(FT2Font(str(p)).get_charmap()) for p in (latin, FONT_PATH, EXT_PATH))


def register() -> None:
    """Make the course font known to matplotlib and the fallback after DejaVu Sans (idempotent)."""
    for path, family in ((FONT_PATH, FAMILY), (EXT_PATH, EXT_FAMILY)):
        if not path.is_file():
            raise FileNotFoundError(f"the course's CJK font is missing: {path} (run tools/make_cjk_font.py)")
        if family not in {f.name for f in font_manager.fontManager.ttflist}:
            font_manager.fontManager.addfont(str(path))
            # The subset has one weight. A bold title (architecture diagrams) would make matplotlib warn
            # "Failed to find font weight bold" on stderr; the same glyphs stand in for bold, unbolded.
            regular = next(f for f in font_manager.fontManager.ttflist if f.name == family)
            font_manager.fontManager.ttflist.append(dataclasses.replace(regular, weight=700))
    # Named families, not "sans-serif": matplotlib falls back glyph by glyph only along the
    # font.family list itself (a generic name resolves to a single font).
    matplotlib.rcParams["font.family"] = [LATIN, FAMILY, EXT_FAMILY]


def missing_glyphs(text: str) -> list[str]:
    """The distinct characters of ``text``, in order of appearance, that no font of the course can draw.

    Only a newline and a tab are never reported (matplotlib lays them out); any other character
    no font maps (NUL, a private-use or unassigned code point, a lone surrogate) would be drawn as
    a box, or make the draw fail, and is reported.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    have = _charmaps()
    seen: dict[str, None] = {}
    for ch in text:
        if ch not in DRAWN_AS_SPACE and not any(ord(ch) in m for m in have):
            seen.setdefault(ch)
    return list(seen)


def check_drawable(name: str, texts) -> None:
    """Raise ValueError naming ``name`` and each character no font of the course can draw."""
    missing = missing_glyphs("".join(str(t) for t in texts))
    if missing:
        shown = ", ".join(f"{ascii(ch)} (U+{ord(ch):04X})" if not ch.isprintable() else f"{ch!r} (U+{ord(ch):04X})"
                          for ch in missing)
        raise ValueError(f"{name}: the course's fonts have no glyph for {shown}; it would be drawn as an empty "
                         "box. Leave it out, or replace it with a description (helpers/cjk.py lists what the "
                         "CJK font holds)")  # fmt: skip
