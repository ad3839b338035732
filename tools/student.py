"""The student edition: every notebook as an nbgrader assignment, references removed, checks graded.

    python tools/student.py [--course build/course] [notebooks/04_attention.ipynb ...]

Writes an nbgrader course folder (default ``build/course``, not committed): ``source/NN_x/NN_x.ipynb``
(the teacher's version, read by nbgrader), ``release/NN_x/NN_x.ipynb`` (the student edition, made by
nbgrader's own ``generate_assignment``) and ``gradebook.db``. One assignment per notebook.

How a notebook becomes an assignment, from the pattern every build and exercise follows
(helpers/exercises.py): a stub cell (a function or class whose body raises NotImplementedError,
then ``attempt(check_x, fn)``) followed by a collapsed reference cell (``verify(check_x, ref)``
and ``assert rejects(check_x, wrong)``).

- The stub cell becomes a solution cell: each ``raise NotImplementedError(...)`` sits between
  nbgrader's solution markers (the student sees ``# YOUR CODE HERE``); the ``attempt`` line leaves it.
- A new locked, graded test cell calls the check itself, ``check_x(fn)``, which raises on a wrong
  answer and on an untouched stub (``attempt`` would print "not done yet" and score it 1/1).
- The reference cell is removed entirely. In its place a locked cell binds the reference's name to
  the student's build (``reference_x = x``): the notebook goes on with what the student wrote.
- Every other cell is locked and keeps its stored outputs and pictures (``ClearOutput`` is off).
- A cell that cannot run until a build above is done (it uses a build's name, or a value computed
  from one) is tagged ``raises-exception``, so "Run All" and nbval go on past it on untouched stubs.

The references stay in notebooks/ (the full edition): see README, "Teaching with these notebooks".
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
POINTS = 1  # per build or exercise: each check is one graded test cell
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CONFIG = """\
c = get_config()  # noqa: F821 (nbgrader's config loader defines it)
c.CourseDirectory.course_id = "transformer-notebooks"
c.CourseDirectory.root = {root!r}
# The student edition keeps every stored output and picture (nbgrader clears them by default).
c.ClearOutput.enabled = False
"""


@dataclass
class Build:
    """One build or exercise: its stub cell, its reference cell, its check and the names they bind."""

    stub: int  # cell index of the stub
    reference: int | None  # cell index of the collapsed reference, if there is one
    check: str  # the check's name, as the stub's attempt(...) calls it
    solutions: list[str]  # what the stub passes to attempt after the check (the learner's names), in order
    aliases: dict[str, str] = field(default_factory=dict)  # reference name -> the learner's name


def _parse(source: str) -> ast.Module | None:
    # IPython magics (%matplotlib, !pip) are not Python: blank them so the rest still parses
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.split("\n")]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _top_call(tree: ast.Module, name: str) -> list[ast.Expr]:
    return [s for s in tree.body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
            and isinstance(s.value.func, ast.Name) and s.value.func.id == name]


def _is_hidden(cell) -> bool:
    return bool(cell.metadata.get("jupyter", {}).get("source_hidden", False))


def _raises_not_implemented(tree: ast.AST) -> list[ast.Raise]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                out.append(node)
    return out


def find_builds(nb) -> list[Build]:
    """Every stub cell (NotImplementedError + a top-level attempt(check, ...)) and the reference after it."""
    builds = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or _is_hidden(cell):
            continue
        tree = _parse(cell.source)
        if tree is None or not _raises_not_implemented(tree):
            continue
        calls = _top_call(tree, "attempt")
        if len(calls) != 1 or not calls[0].value.args or not isinstance(calls[0].value.args[0], ast.Name):
            continue
        args = [ast.get_source_segment(cell.source, a) for a in calls[0].value.args]
        build = Build(stub=i, reference=None, check=args[0], solutions=args[1:])
        nxt = next((j for j in range(i + 1, len(nb.cells)) if nb.cells[j].cell_type == "code"), None)
        if nxt is not None and _is_hidden(nb.cells[nxt]):
            ref_tree = _parse(nb.cells[nxt].source)
            verifies = [] if ref_tree is None else [
                c.value for c in _top_call(ref_tree, "verify")
                if c.value.args and isinstance(c.value.args[0], ast.Name) and c.value.args[0].id == build.check]
            if verifies:
                build.reference = nxt
                for ref, mine in zip(verifies[0].args[1:], build.solutions, strict=False):
                    if isinstance(ref, ast.Name) and ref.id != mine:
                        build.aliases[ref.id] = mine
        builds.append(build)
    return builds


def _names(tree: ast.AST) -> tuple[set[str], set[str], set[str], set[str]]:
    """(names loaded, names bound, variables assigned, names passed to a call or whose method is called)."""
    loads, stores, assigned, passed = set(), set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else assigned).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stores.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stores.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Call):
            for a in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(a, ast.Name):
                    passed.add(a.id)
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                passed.add(node.func.value.id)  # obj.method(...) may change obj in place
    return loads, stores | assigned, assigned, passed


def _taint(tree: ast.Module, tainted: set[str], variables: set[str]) -> bool:
    """Follow a cell statement by statement; True if it may raise on an untouched stub.

    A statement that reads a tainted name (a build, or a value computed from one) is tainted, and so is
    what it binds and any variable it passes to a call (which may have changed it in place). Once one
    statement may raise, the rest of the cell may not run: what they bind is tainted too.
    """
    raised = False
    for stmt in tree.body:
        loads, stores, assigned, passed = _names(stmt)
        if raised or loads & tainted:
            raised = True
            tainted |= stores | (passed & variables)
        else:
            tainted -= stores
            variables |= assigned
    return raised


def _solution_source(source: str, tree: ast.Module, attempt_call: ast.Expr) -> str:
    """The stub cell without its attempt(...) line, each NotImplementedError between solution markers."""
    lines = source.split("\n")
    drop = set(range(attempt_call.lineno - 1, attempt_call.end_lineno))
    wrap = {r.lineno - 1: (r.end_lineno - 1, r.col_offset) for r in _raises_not_implemented(tree)}
    out = []
    for k, line in enumerate(lines):
        if k in drop:
            continue
        if k in wrap:
            out.append(" " * wrap[k][1] + BEGIN)
        out.append(line)
        ends = [start for start, (end, _) in wrap.items() if end == k]
        for start in ends:
            out.append(" " * wrap[start][1] + END)
    return "\n".join(out).rstrip() + "\n"


def _meta(kind: str, grade_id: str, points: int = 0) -> dict:
    solution, grade, locked = {"solution": (True, False, False), "test": (False, True, True),
                               "locked": (False, False, True)}[kind]
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _tag(cell, tag: str) -> None:
    tags = list(cell.metadata.get("tags", []))
    if tag not in tags:
        cell.metadata["tags"] = [*tags, tag]


def source_notebook(nb) -> tuple[nbformat.NotebookNode, list[Build]]:
    """The teacher's nbgrader source version of a notebook (nbgrader makes the student edition from it)."""
    builds = find_builds(nb)
    by_stub = {b.stub: b for b in builds}
    references = {b.reference: b for b in builds if b.reference is not None}
    out = copy.deepcopy(nb)
    out.cells = []
    tainted: set[str] = set()  # names that may be unbound or wrong while a build above is a stub
    variables: set[str] = set()  # variables assigned so far (a call may change them in place)
    used_ids: set[str] = set()

    def add(cell, kind: str, grade_id: str, points: int = 0) -> None:
        base, k = re.sub(r"[^\w-]", "-", grade_id), 1
        while grade_id in used_ids:
            k += 1
            grade_id = f"{base}-{k}"
        used_ids.add(grade_id)
        cell.metadata["nbgrader"] = _meta(kind, grade_id, points)
        cell["id"] = grade_id
        out.cells.append(cell)

    for i, cell in enumerate(nb.cells):
        cell = copy.deepcopy(cell)
        if i in by_stub:
            b = by_stub[i]
            tree = _parse(cell.source)
            cell.source = _solution_source(cell.source, tree, _top_call(tree, "attempt")[0])
            cell.outputs, cell.execution_count = [], None
            add(cell, "solution", f"build-{b.check}")
            tainted |= _names(tree)[1] - {"attempt", "verify", "rejects"}
            test = nbformat.v4.new_code_cell(f"{b.check}({', '.join(b.solutions)})")
            test.metadata["tags"] = ["raises-exception"]  # raises until the build above is done
            add(test, "test", f"test-{b.check}", POINTS)
        elif i in references:
            b = references[i]
            if b.aliases:
                body = "\n".join(f"{ref} = {mine}" for ref, mine in b.aliases.items())
                alias = nbformat.v4.new_code_cell(
                    "# From here on the notebook uses your build in place of the reference solution.\n" + body)
                add(alias, "locked", f"uses-{b.check}")
                tainted |= set(b.aliases)
        else:
            if cell.cell_type == "code":
                tree = _parse(cell.source)
                if tree is not None and _taint(tree, tainted, variables):
                    _tag(cell, "raises-exception")
            add(cell, "locked", f"cell-{i:03d}")
    return out, builds


def reference_sources(nb) -> list[str]:
    """The source of every reference cell in a notebook (what the student edition must not contain)."""
    return [nb.cells[b.reference].source for b in find_builds(nb) if b.reference is not None]


def nbgrader_cmd() -> list[str]:
    return [sys.executable, "-m", "nbgrader"]


def tool_env() -> dict[str, str]:
    """nbgrader runs `alembic` (its gradebook's migrations) from PATH: the venv's bin goes first."""
    return {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}


def write_course(notebooks: list[Path], course: Path) -> list[str]:
    """Write the nbgrader course (config and source versions); return the assignment names."""
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course.resolve())))
    names = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        src, builds = source_notebook(nb)
        if not builds:
            continue
        folder = course / "source" / path.stem
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        nbformat.write(src, folder / path.name)
        names.append(path.stem)
    return names


def generate(course: Path, assignments: list[str]) -> None:
    """nbgrader's own generate_assignment, per assignment, into course/release/ (one process for all)."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    os.environ["PATH"] = tool_env()["PATH"]
    config = Config()
    config.CourseDirectory.root = str(course.resolve())
    config.CourseDirectory.course_id = "transformer-notebooks"
    config.ClearOutput.enabled = False
    api = NbGraderAPI(config=config)
    for name in assignments:
        result = api.generate_assignment(name, force=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n{result.get('log', '')}{result.get('error', '')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--course", type=Path, default=ROOT / "build" / "course")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    names = write_course(notebooks, args.course)
    generate(args.course, names)
    for name in names:
        print(f"student edition: {args.course / 'release' / name / (name + '.ipynb')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
