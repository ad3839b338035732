"""Build helpers/fonts/course-cjk-sans.otf: the course's subset of Noto Sans CJK SC (SIL OFL 1.1).

    apt-get install -y fonts-noto-cjk      # Debian: NotoSansCJK-Regular.ttc, version 2.004
    python tools/make_cjk_font.py

Which characters (about 6,600; measured: 3.4 MB, against 16 MB for the whole SC face):
- GB 2312 level 1, the 3,755 most common characters of modern Chinese (rows 16-55 of the
  standard, read through Python's ``gb2312`` codec, so the list needs no download);
- every CJK character in the notebooks, helpers and tests, and the Song ci tune names;
- every character of the Song ci corpus (data/songci.txt.bz2), so whatever char_gpt_zh writes
  draws as itself in notebook 08 and its explorers;
- CJK punctuation (U+3000-303F) and the full-width forms (U+FF01-FF5E).
The family is renamed (a subset is a Modified Version under the OFL); the output is the same
bytes on every run (fontTools' subsetter, no timestamps: head.modified is fixed). Then record the
sha256 it prints in helpers/fonts/README.md.
"""

from __future__ import annotations

import bz2
import hashlib
import os
import sys
from pathlib import Path

from fontTools import subset
from fontTools.ttLib import TTCollection

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(os.environ.get("NOTO_CJK", "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"))
FACE = "Noto Sans CJK SC"
OUT = ROOT / "helpers" / "fonts" / "course-cjk-sans.otf"
FAMILY = "Course CJK Sans"
# What Noto Sans CJK lacks (six Extension B characters of the Song ci corpus) comes from HanaMinB
# (GlyphWiki project, SIL OFL 1.1 or the Hanazono licence; Debian: apt-get install fonts-hanazono).
EXT_SOURCE = Path(os.environ.get("HANAMIN_B", "/usr/share/fonts/truetype/hanazono/HanaMinB.ttf"))
EXT_OUT = ROOT / "helpers" / "fonts" / "course-cjk-ext.ttf"
EXT_FAMILY = "Course CJK Ext"  # "HanaMinB" is a Reserved Font Name: a subset must be renamed
TUNES = "浣溪沙菩萨蛮鹧鸪天西江月"  # the Song ci tune names (a notebook draws them)


def gb2312_level1() -> str:
    chars = []
    for row in range(0xB0, 0xD8):  # rows 16..55: level 1, ordered by pinyin
        for col in range(0xA1, 0xFF):
            try:
                chars.append(bytes([row, col]).decode("gb2312"))
            except UnicodeDecodeError:  # row 55 ends at col 0xF9
                pass
    return "".join(chars)


def course_characters() -> str:
    found = set()
    for pattern in ("notebooks/*.ipynb", "helpers/**/*.py", "tests/*.py", "tests_browser/*.py"):
        for path in ROOT.glob(pattern):
            found |= {ch for ch in path.read_text(encoding="utf-8") if 0x2E80 <= ord(ch) <= 0x9FFF or 0xF900 <= ord(ch) <= 0xFFEF}
    return "".join(sorted(found))


def _cjk(ch: str) -> bool:
    """A character of the CJK blocks, the supplementary planes included (Extension B is U+20000..)."""
    return 0x2E80 <= ord(ch) <= 0x9FFF or 0xF900 <= ord(ch) <= 0xFFEF or ord(ch) >= 0x20000


def songci_characters() -> str:
    text = bz2.decompress((ROOT / "data" / "songci.txt.bz2").read_bytes()).decode("utf-8")
    return "".join(sorted({ch for ch in text if _cjk(ch)}))


def vocabulary_characters() -> str:
    """Every character the shipped models can write: their tokenizers' own vocabularies."""
    sys.path.insert(0, str(ROOT))
    from helpers.pretrained import PRETRAINED, PRETRAINED_DIR, read_pretrained

    chars = set()
    for filename, sha256 in PRETRAINED.values():
        chars |= set(read_pretrained(PRETRAINED_DIR / filename, sha256)[1].chars)
    return "".join(sorted(ch for ch in chars if _cjk(ch)))


def wanted() -> str:
    extra = "".join(map(chr, range(0x3000, 0x3040))) + "".join(map(chr, range(0xFF01, 0xFF5F)))
    return "".join(sorted(set(gb2312_level1() + course_characters() + songci_characters() + vocabulary_characters()
                              + TUNES + extra)))


def _reproducible_save(font, out: Path) -> bytes:
    font["head"].modified = font["head"].created  # no build timestamp: reproducible bytes
    font.recalcTimestamp = False
    out.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(out))
    return out.read_bytes()


def build_ext(text: str, have: set[int]) -> None:
    """course-cjk-ext.ttf: the characters of ``text`` that the main subset (``have``) cannot draw."""
    from fontTools.ttLib import TTFont

    need = "".join(ch for ch in text if ord(ch) not in have and ord(ch) > 0x7F)
    font = TTFont(str(EXT_SOURCE))
    options = subset.Options()
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]
    options.notdef_outline = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=need)
    subsetter.subset(font)
    for record in font["name"].names:
        if record.nameID in (1, 3, 4, 6, 16, 17):
            old = record.toUnicode()
            record.string = old.replace("HanaMinB", EXT_FAMILY if record.nameID != 6 else "CourseCJKExt")
    font["OS/2"].usWeightClass = 400  # HanaMinB says 500; matplotlib would warn for "normal" text
    data = _reproducible_save(font, EXT_OUT)
    lacking = [f"U+{ord(ch):04X}" for ch in need if ord(ch) not in font.getBestCmap()]
    print(f"{EXT_OUT.relative_to(ROOT)}: {len(font.getBestCmap())} characters ({', '.join(f'U+{ord(c):04X}' for c in need)}), "
          f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}; source {EXT_SOURCE}, sha256 "
          f"{hashlib.sha256(EXT_SOURCE.read_bytes()).hexdigest()}" + (f"; NOT IN ANY FONT: {lacking}" if lacking else ""))


def main() -> int:
    for source, package in ((SOURCE, "fonts-noto-cjk"), (EXT_SOURCE, "fonts-hanazono")):
        if not source.is_file():
            print(f"{source} not found: apt-get install -y {package}", file=sys.stderr)
            return 1
    font = next(f for f in TTCollection(str(SOURCE)).fonts if f["name"].getDebugName(4) == FACE)
    text = wanted()
    options = subset.Options()
    options.layout_features = ["*"]
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]
    options.notdef_outline = True
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)
    names = font["name"]
    for record in names.names:
        old = record.toUnicode()
        if record.nameID in (1, 3, 4, 6):
            record.string = (old.replace(FACE, FAMILY).replace("NotoSansCJKsc", "CourseCJKSans")
                             .replace("Noto Sans CJK", FAMILY))  # fmt: skip
    font["CFF "].cff.fontNames = ["CourseCJKSans-Regular"]
    data = _reproducible_save(font, OUT)
    cmap = font.getBestCmap()
    print(f"{OUT.relative_to(ROOT)}: {len(cmap)} characters, {len(data) / 1e6:.2f} MB, "
          f"sha256 {hashlib.sha256(data).hexdigest()}")
    print(f"source {SOURCE} ({FACE}), sha256 {hashlib.sha256(SOURCE.read_bytes()).hexdigest()}, "
          f"{font['name'].getDebugName(5)}")
    build_ext(text, set(cmap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
