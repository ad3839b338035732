"""The time estimate at the top of every notebook is the one tools/lesson_time.py computes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import lesson_time  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _nb(tmp_path: Path, cells: list[tuple[str, str, bool]]) -> Path:
    """A notebook from (cell_type, source, hidden) triples."""
    nb = {"cells": [{"cell_type": t, "metadata": {"jupyter": {"source_hidden": True}} if h else {},
                     "source": s, **({"outputs": [], "execution_count": None} if t == "code" else {})}
                    for t, s, h in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_counts_main_path_only(tmp_path):
    path = _nb(tmp_path, [
        ("markdown", "# T\n\n**Time:** old\n\n" + "word " * 296, False),  # 298 words: the Time line is not prose
        ("code", "def f():\n    raise NotImplementedError\n", False),  # a build: 2 lines
        ("code", "def ref():\n    return 1\n", True),  # a collapsed reference: not read
        ("markdown", "## Appendix A: proofs\n" + "skip " * 500, False),
        ("code", "x = 1\n" * 40, False),  # appendix code: not counted
        ("markdown", "## Summary\nten words here and there and so on and on", False),
        ("markdown", "## Exercises\nnot counted", False),
        ("code", "def g():\n    raise NotImplementedError\n", False),
    ])
    t = lesson_time.measure(path)
    assert (t.words, t.code_lines, t.builds, t.exercises) == (298 + 12, 2, 1, 1)
    assert t.appendix_words == 504
    assert t.main_minutes == 5 * round((310 / 150 + 2 / 10 + 8) / 5)  # 10.27 -> 10
    assert lesson_time.write(path) and not lesson_time.write(path)  # a second write changes nothing
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert "about 10 min for the main path with its 1 builds" in first and "**Time:** old" not in first


def test_numbered_appendix_heading_counts_as_appendix(tmp_path):
    path = _nb(tmp_path, [("markdown", "# T\n**Time:** x", False), ("markdown", "## 9. Appendix: errors\n" + "a " * 90, False),
                          ("markdown", "## 10. Back on the main path\nb c", False)])
    t = lesson_time.measure(path)
    assert t.appendix_words == 94 and t.words == 2 + 9


def test_write_refuses_a_notebook_without_a_place_for_the_estimate(tmp_path):
    path = _nb(tmp_path, [("markdown", "# T\nno estimate", False)])
    with pytest.raises(ValueError, match=r"\*\*Time:\*\*"):
        lesson_time.write(path)


def test_write_adds_an_estimate_before_the_goals_and_replaces_a_whole_paragraph(tmp_path):
    path = _nb(tmp_path, [("markdown", "# T\n\n**Learning goals**\n1. x", False)])
    assert lesson_time.write(path)
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert first.index("**Time:**") < first.index("**Learning goals**")
    path = _nb(tmp_path, [("markdown", "# T\n\n**Time.** old,\nstill old.\n\nkept", False)])
    assert lesson_time.write(path)
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert "old" not in first and first.endswith("\n\nkept")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stated_time_is_the_computed_one(path):
    first = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])
    assert lesson_time.measure(path).line() in first, (
        f"{path.name}: its **Time:** line is stale; run `.venv/bin/python tools/lesson_time.py --write {path}`")
