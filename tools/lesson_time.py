"""How long a notebook takes a learner, estimated the same way for every notebook.

    .venv/bin/python tools/lesson_time.py notebooks/*.ipynb          # a table
    .venv/bin/python tools/lesson_time.py --write notebooks/03_*.ipynb  # rewrite each "**Time:**" line

The main path is every cell up to "## Summary", without the sections whose heading is an appendix
("## Appendix ..." or "## 9. Appendix ...": side proofs a learner may skip). Its time: prose read at 150 words a minute, code
read and run at 10 visible lines a minute (a collapsed reference counts for nothing: the learner
writes the build instead), and 8 minutes per build (a stub that raises NotImplementedError).
Exercises (after "## Exercises") add 10 minutes each. The numbers are a reading-speed model,
not a stopwatch: a teacher should time one learner and scale.

`--write` replaces the paragraph that starts with "**Time:**" in the first cell (markdown only, so the
stored outputs stay fresh: the freshness check fingerprints code cells). tests/test_hygiene.py
checks that every notebook's stated line is the one this tool computes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

WORDS_PER_MIN, LINES_PER_MIN, MIN_PER_BUILD, MIN_PER_EXERCISE = 150, 10, 8, 10
TIME_LINE = re.compile(r"^\*\*(?:Time[:.]\*\*|Length:).*?(?=\n\n|\Z)", re.M | re.S)  # the paragraph, up to a blank line


@dataclass(frozen=True)
class LessonTime:
    words: int  # prose of the main path
    code_lines: int  # visible code lines of the main path
    builds: int  # stubs on the main path
    exercises: int  # stubs after "## Exercises"
    appendix_words: int

    @property
    def main_minutes(self) -> int:
        minutes = self.words / WORDS_PER_MIN + self.code_lines / LINES_PER_MIN + MIN_PER_BUILD * self.builds
        return 5 * round(minutes / 5)

    @property
    def exercise_minutes(self) -> int:
        return MIN_PER_EXERCISE * self.exercises

    def line(self) -> str:
        return (f"**Time:** about {self.main_minutes} min for the main path with its {self.builds} builds, "
                f"plus about {self.exercise_minutes} min for the {self.exercises} exercises; the appendices are "
                f"optional (estimated by `tools/lesson_time.py`: {self.words:,} words of prose at "
                f"{WORDS_PER_MIN} a minute, {self.code_lines} visible lines of code at {LINES_PER_MIN} a minute, "
                f"{MIN_PER_BUILD} minutes a build, {MIN_PER_EXERCISE} an exercise).")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def measure(path: Path) -> LessonTime:
    """Count the main path's prose, visible code and builds, and the exercises."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    part = "main"  # main, appendix, summary, exercises
    words = lines = builds = stubs_in_exercises = appendix_words = 0
    numbered: set[str] = set()  # "**Exercise N" headings: one exercise may hold two stubs
    for cell in cells:
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            for heading in re.findall(r"^## +(.+)$", src, re.M):
                if re.match(r"(?:[\w.]+\s+)?Appendix", heading):
                    part = "appendix"
                elif heading.startswith("Summary"):
                    part = "summary"
                elif heading.startswith("Exercises"):
                    part = "exercises"
                elif part == "appendix":
                    part = "main"
            n = len(TIME_LINE.sub("", src).split())  # the estimate itself is not read as prose
            if part == "exercises":
                numbered |= set(re.findall(r"\*\*Exercise (\d+)", src))
            if part == "appendix":
                appendix_words += n
            elif part in ("main", "summary"):
                words += n
            continue
        if cell["cell_type"] != "code":
            continue
        stub = "NotImplementedError" in src
        if part == "exercises":
            stubs_in_exercises += stub
        elif part in ("main", "summary"):
            builds += stub
            hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False)
            if not hidden:
                lines += sum(1 for ln in src.splitlines() if ln.strip())
    return LessonTime(words, lines, builds, len(numbered) or stubs_in_exercises, appendix_words)


def write(path: Path) -> bool:
    """Rewrite the first cell's "**Time:**" line; True if the file changed."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    src = _source(first)
    if TIME_LINE.search(src):
        new = TIME_LINE.sub(lambda _: measure(path).line(), src, count=1)
    elif "**Learning goals**" in src:  # a notebook without an estimate gets one before its goals
        new = src.replace("**Learning goals**", measure(path).line() + "\n\n**Learning goals**", 1)
    else:
        raise ValueError(f"{path}: its first cell has neither a '**Time:**' paragraph nor '**Learning goals**'")
    if new == src:
        return False
    first["source"] = new.splitlines(keepends=True)
    text = json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True) + "\n"  # nbformat's own layout
    tmp = path.with_suffix(".ipynb.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # atomic on one file system
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--write", action="store_true", help="rewrite each notebook's **Time:** line")
    args = ap.parse_args(argv)
    print(f"{'notebook':32} {'main':>5} {'ex':>4} {'words':>6} {'code':>5} {'builds':>6} {'exerc':>5} {'app. words':>10}")
    for path in args.notebooks:
        t = measure(path)
        print(f"{path.name:32} {t.main_minutes:5} {t.exercise_minutes:4} {t.words:6,} {t.code_lines:5} "
              f"{t.builds:6} {t.exercises:5} {t.appendix_words:10,}")
        if args.write and write(path):
            print(f"  wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
