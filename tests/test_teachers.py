"""The teachers' extra: the student edition (tools/student.py) and `make grade` (tools/grade.py).

Runs under `make test-teachers` (CI), which installs the pinned nbgrader (requirements-teachers.txt)
first; `make unit` skips it (learners' set-up has no nbgrader).

- The student edition of every notebook is built by nbgrader's generate_assignment; no reference's
  code is in it (every token 4-gram that only a reference cell has is absent), every build has a
  solution cell and a locked graded test cell that calls the check, never `attempt`.
- One student edition (GRADED, below) runs top to bottom with its stubs untouched (nbval-lax).
- A synthetic class on GRADED, graded by `make grade`: untouched scores 0, every reference pasted
  back scores full marks, two plausible wrong answers (the reference cells' own rejected ones) lose
  exactly those two builds with the check's message in the report, and a hostile submission (an
  infinite loop, os.remove of a file outside its scratch folder, a huge print) is contained.
"""

from __future__ import annotations

import ast
import copy
import csv
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402 (tools/ is not a package)

pytestmark = pytest.mark.skipif(os.environ.get("TN_TEACHERS") != "1",
                                reason="teachers' extra: run by `make test-teachers`, which installs nbgrader")
GRADED = "02_embeddings"  # five builds, about 10 s to execute: the synthetic class is graded on it
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
TOKEN = re.compile(r"\w+|[^\w\s]")


def _run_make(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("course")
    done = _run_make("student", f"COURSE={folder}")
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def _grams(text: str) -> set[tuple[str, ...]]:
    toks = TOKEN.findall(text)
    return {tuple(toks[i:i + 4]) for i in range(len(toks) - 3)}


def _cell_text(cell) -> str:
    parts = [cell.source]
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") if isinstance(out.get("text", ""), str) else "")
        parts += [v for k, v in out.get("data", {}).items() if k.startswith("text/") and isinstance(v, str)]
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_edition_has_no_reference(course, path):
    nb = nbformat.read(path, 4)
    builds = student.find_builds(nb)
    refs = {b.reference for b in builds if b.reference is not None}
    attempts = sum(c.source.count("\nattempt(") + c.source.startswith("attempt(") for c in nb.cells
                   if c.cell_type == "code")
    assert builds and len(builds) == attempts, f"{path.name}: every attempt(...) is a build tools/student.py found"
    assert len(refs) == len(builds), f"{path.name}: every build has a collapsed reference"
    # what the full edition shows outside its references (an error message a reference raises and a
    # later cell's stored output shows, a signature the stub shares) is not a leak
    others = set().union(*(_grams(_cell_text(nb.cells[i])) for i in range(len(nb.cells)) if i not in refs))
    release = nbformat.read(course / "release" / path.stem / path.name, 4)
    shown = set().union(*(_grams(_cell_text(c)) for c in release.cells))
    for i in sorted(refs):
        own = _grams(nb.cells[i].source) - others  # what only the reference shows
        assert len(own) >= 5, f"{path.name} cell {i}: too little of the reference to test"
        leaked = own & shown
        assert not leaked, f"{path.name}: reference cell {i} leaks {sorted(leaked)[:3]}"
    solutions = [c for c in release.cells if c.metadata["nbgrader"]["solution"]]
    tests = [c for c in release.cells if c.metadata["nbgrader"]["grade"]]
    assert len(solutions) == len(tests) == len(builds)
    for cell in solutions:
        assert "# YOUR CODE HERE" in cell.source and "attempt(" not in cell.source
    for cell, b in zip(tests, builds, strict=True):
        assert cell.metadata["nbgrader"]["locked"] and cell.metadata["nbgrader"]["points"] > 0
        assert cell.source == f"{b.check}({', '.join(b.solutions)})"
    others = [c for c in release.cells if not (c.metadata["nbgrader"]["solution"] or c.metadata["nbgrader"]["grade"])]
    assert all(c.metadata["nbgrader"]["locked"] for c in others)
    pictures = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    kept = sum("image/png" in o.get("data", {}) for c in release.cells if c.cell_type == "code" for o in c.outputs)
    assert kept == pictures, "every stored picture is kept in the student edition"


def test_student_edition_runs_with_untouched_stubs(course):
    path = course / "release" / GRADED / f"{GRADED}.ipynb"
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p",
                           "no:cacheprovider", "-q", str(path)], cwd=path.parent, capture_output=True, text=True,
                          timeout=900, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


# --- the synthetic class ------------------------------------------------------------------------

def _reference_answers(nb) -> dict[str, tuple[str, dict[str, str], dict[str, str]]]:
    """check -> (its reference cell's code without verify/rejects, {reference: learner's name},
    {learner's name: the expression of a wrong answer the reference cell proves the check rejects})."""
    out = {}
    for b in student.find_builds(nb):
        src = nb.cells[b.reference].source
        lines, wrongs = src.split("\n"), {}
        for stmt in ast.parse(src).body:
            call = stmt.test if isinstance(stmt, ast.Assert) else getattr(stmt, "value", None)
            name = getattr(getattr(call, "func", None), "id", "")
            if isinstance(call, ast.Call) and name in ("verify", "rejects"):
                lines[stmt.lineno - 1: stmt.end_lineno] = [""] * (stmt.end_lineno - stmt.lineno + 1)
                if name == "rejects" and len(call.args) == 1 + len(b.solutions) and not wrongs:
                    wrongs = {mine: ast.get_source_segment(src, a)
                              for mine, a in zip(b.solutions, call.args[1:], strict=True)}
        out[b.check] = ("\n".join(lines), b.aliases, wrongs)
    return out


def _independent(nb) -> list[str]:
    """The checks of builds that no later reference builds on (a wrong answer there costs only itself)."""
    builds = student.find_builds(nb)
    later = [" ".join(nb.cells[c.reference].source for c in builds[k + 1:]) for k in range(len(builds))]
    return [b.check for b, rest in zip(builds, later, strict=True)
            if not any(re.search(rf"\b{name}\b", rest) for name in b.aliases)]


def _submission(release, original, wrong: set[str] = frozenset(), hostile: dict[str, str] | None = None):
    """The released notebook with every solution cell answered: the reference pasted back, or a wrong one;
    hostile code, if any, runs first in its cell."""
    hostile = hostile or {}
    answers = _reference_answers(original)
    nb = copy.deepcopy(release)
    for cell in nb.cells:
        meta = cell.metadata["nbgrader"]
        if not meta["solution"]:
            continue
        check = meta["grade_id"].removeprefix("build-")
        src, aliases, wrongs = answers[check]
        back = "\n".join(f"{mine} = {ref}" for ref, mine in aliases.items())
        if check in wrong:
            back = "\n".join(f"{mine} = {expr}" for mine, expr in wrongs.items())
        cell.source = f"{hostile.get(check, '')}\n{cell.source}\n\n{src}\n{back}\n"
    return nb


def test_make_grade_scores_the_synthetic_class(course, tmp_path):
    original = nbformat.read(ROOT / "notebooks" / f"{GRADED}.ipynb", 4)
    release = nbformat.read(course / "release" / GRADED / f"{GRADED}.ipynb", 4)
    checks = [b.check for b in student.find_builds(original)]
    answers = _reference_answers(original)
    independent = _independent(original)
    wrong = [c for c in independent if answers[c][2]][:2]  # two whose reference cell rejects a wrong answer
    assert len(wrong) == 2 and len(independent) >= 3
    canary = tmp_path / "canary.txt"  # outside the scratch folder: the hostile student tries to delete it
    canary.write_text("still here")
    hostile = {independent[0]: "while True:\n    pass",
               independent[1]: f"import os\nos.remove({str(canary)!r})",
               independent[2]: "print('x' * 50_000_000)"}
    subs = tmp_path / "submissions"
    subs.mkdir()
    nbformat.write(release, subs / "untouched.ipynb")  # a flat folder of NAME.ipynb
    nbformat.write(_submission(release, original), subs / "reference.ipynb")
    nbformat.write(_submission(release, original, set(wrong)), subs / "wrong.ipynb")
    nbformat.write(_submission(release, original, hostile=hostile), subs / "hostile.ipynb")
    crash = _submission(release, original, hostile={checks[-1]: "import os\nos._exit(1)"})
    nbformat.write(crash, subs / "crash.ipynb")  # the kernel dies: nbgrader cannot grade the notebook
    out = tmp_path / "grades"
    start = time.monotonic()
    done = _run_make("grade", f"SUBMISSIONS={subs}", f"COURSE={course}", f"GRADES={out}", "CELL_TIMEOUT=20",
                     timeout=1200)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    print(done.stdout)
    print(f"5 students graded in {took:.0f} s")
    rows = list(csv.DictReader(open(out / "report.csv", encoding="utf-8")))
    score = {s: sum(float(r["points"]) for r in rows if r["student"] == s) for s in
             ("untouched", "reference", "wrong", "hostile", "crash")}
    full = float(len(checks))
    assert score["untouched"] == score["crash"] == 0 and score["reference"] == full, score
    assert score["wrong"] == full - 2, score
    by = {(r["student"], r["check"]): r for r in rows}
    for c in wrong:
        row = by[("wrong", c)]
        assert row["status"] == "failed" and row["message"].startswith("AssertionError: "), row
        assert len(row["message"]) > len("AssertionError: ") + 10, "the check's own message is in the report"
    assert canary.read_text() == "still here"
    assert "CellTimeoutError" in by[("hostile", independent[0])]["message"], by[("hostile", independent[0])]
    assert "PermissionError" in by[("hostile", independent[1])]["message"], by[("hostile", independent[1])]
    assert by[("crash", checks[0])]["status"] == "not graded" and "died" in by[("crash", checks[0])]["message"]
    assert score["hostile"] == full - 2, score  # the huge print alone costs nothing: the build is right after it
    graded = out / "autograded" / "hostile" / GRADED / f"{GRADED}.ipynb"
    assert graded.stat().st_size < 5 << 20, "the huge print was cut"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| wrong |" in report and "most common failure" in report
    print(report)
