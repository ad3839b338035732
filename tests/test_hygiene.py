"""Notebook hygiene: what a learner meets when they open a notebook, checked without running it.

Every check is a function `check_<name>(nb) -> list[str]` that returns problems as
"cell N: ..." strings (N is the 0-based cell index shown by `nb.cells[N]`). The parametrized
test runs each check on each committed notebook; the self-tests prove that every check fails
on a bad synthetic notebook and passes on a good one, so no check is vacuous.

Thresholds (why):
- images: at most 200_000 bytes decoded each (STYLE: "under ~200 KB"; the repo stays small).
- code cells: at most 30 non-blank lines each, and a median of at most 12 per notebook. The
  rhythm is "short code cells, ~4-10 lines"; 30 (3x the upper end) leaves room for the import
  and set-up cell and for a comparison function next to its loop, which splitting would hurt.
"""

from __future__ import annotations

import ast
import base64
import builtins
import json
import re
import statistics
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

MAX_IMAGE_BYTES = 200_000
MAX_CELL_LINES = 30
MAX_MEDIAN_CELL_LINES = 12
GOALS_WITHIN_CELLS = 3  # "near the top": the learning goals sit in one of the first 3 cells
IGNORE_MARKER = "# NBVAL_IGNORE_OUTPUT"
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
BASE64_MIMES = ("image/png", "image/jpeg")
# A path of somebody's machine. The lookbehind skips URLs and relative paths ("org/home/").
AUTHOR_PATH = re.compile(
    r"(?<![\w./-])/(?:work|home|Users|root|tmp)/|[A-Za-z]:\\+Users|site-packages|dist-packages|file://"
)
WRITE_CALLS = {"write_bytes", "write_text", "savefig", "imsave", "save", "open", "mkdir"}
FIGURE_TEXT = re.compile(r"^<Figure size \d+x\d+ with \d+ Axes>$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+\S")
EXERCISE_NUMBER = re.compile(
    r"^\s{0,1}(\d+)[.)]\s+\S"  # "1. Write ..."
    r"|^\*\*(?:Exercise\s+)?(\d+)[.)]?\*\*"  # "**1.** Write ..." or "**Exercise 1**"
    r"|^#{1,6}\s+Exercise\s+(\d+)",  # "### Exercise 1"
    re.IGNORECASE,
)
_transformer = TransformerManager()


# ---------------------------------------------------------------------------- helpers
def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _markdown_lines(source: str) -> list[str]:
    """The lines of a markdown cell outside fenced code blocks (a `# x` there is no heading)."""
    lines, fenced = [], False
    for line in source.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _headings(nb) -> list[tuple[int, int, int, str]]:
    """(cell index, line index, level, text) of every markdown heading, in order."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for j, line in enumerate(_markdown_lines(cell.source)):
                m = HEADING.match(line)
                if m:
                    found.append((i, j, len(m.group(1)), m.group(2)))
    return found


def _parse(source: str) -> ast.Module | None:
    """Parse a code cell; IPython magics (`%matplotlib`, `!ls`) are turned into Python first."""
    try:
        return ast.parse(_transformer.transform_cell(source))
    except SyntaxError:
        return None


def _code_cells(nb) -> list[tuple[int, nbformat.NotebookNode]]:
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]


def _has_assert(tree: ast.AST | None) -> bool:
    return tree is not None and any(isinstance(n, ast.Assert) for n in ast.walk(tree))


def _names(tree: ast.AST) -> set[str]:
    """Every name a piece of code reads or binds (functions, classes and imports included)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _imported_names(nb) -> set[str]:
    names = set()
    for _, cell in _code_cells(nb):
        tree = _parse(cell.source)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _derive(tree: ast.AST, names: set[str]) -> set[str]:
    """`names` plus every name assigned from them (`final = estimate(lm)` derives `final`)."""
    derived = set(names)
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For)]
    for _ in range(3):  # a few passes settle chains like a = f(x); b = g(a)
        for node in assigns:
            value = node.iter if isinstance(node, ast.For) else node.value
            if value is not None and _names(value) & derived:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                derived |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return derived


def _asserted_names(tree: ast.AST) -> set[str]:
    return {
        n.id
        for a in ast.walk(tree)
        if isinstance(a, ast.Assert)
        for n in ast.walk(a)
        if isinstance(n, ast.Name)
    }


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _raises(cell) -> bool:
    return "raises-exception" in _tags(cell) or any(
        ln.strip() == "# NBVAL_RAISES_EXCEPTION" for ln in cell.source.split("\n")
    )


# ---------------------------------------------------------------------------- checks
def check_title(nb) -> list[str]:
    if not nb.cells:
        return ["the notebook has no cells"]
    first = nb.cells[0]
    if first.cell_type != "markdown" or not first.source.lstrip().startswith("# "):
        return [f"cell 0: must be a markdown cell starting with a '# ' title, got {first.source[:60]!r}"]
    return []


def check_learning_goals(nb) -> list[str]:
    for i, cell in enumerate(nb.cells[:GOALS_WITHIN_CELLS]):
        if cell.cell_type != "markdown":
            continue
        lines = _markdown_lines(cell.source)
        for j, line in enumerate(lines):
            s = line.strip()
            if "learning goals" in s.lower() and (s.startswith("#") or s.startswith("**")):
                after = lines[j + 1 :]
                nxt = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
                if not any(LIST_ITEM.match(ln) for ln in after) and nxt and nxt.cell_type == "markdown":
                    after = _markdown_lines(nxt.source)  # the list may sit in the next cell
                items = []
                for ln in after:
                    if HEADING.match(ln) or (ln.startswith("**") and items):
                        break
                    items += [ln] if LIST_ITEM.match(ln) else []
                if len(items) < 2:
                    return [f"cell {i}: 'Learning goals' must be followed by a list of at least 2 goals, found {len(items)}"]
                return []
    return [f"no 'Learning goals' heading or bold line in the first {GOALS_WITHIN_CELLS} cells"]


CHECKS_DIR = Path(__file__).resolve().parent.parent / "helpers" / "checks"


def _exercise_functions(nb) -> dict[str, ast.FunctionDef]:
    """The notebook's own functions, and those it imports from its checks module
    (``from helpers.checks.nbNN import check_exercise_1``): the learner can open both."""
    defs = {}
    for _, cell in _code_cells(nb):
        tree = _parse(cell.source)
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.FunctionDef):
                defs[node.name] = node
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers.checks."):
                path = CHECKS_DIR / (node.module.rsplit(".", 1)[1] + ".py")
                module = _parse(path.read_text(encoding="utf-8")) if path.is_file() else None
                for fn in ast.walk(module) if module else ():
                    if isinstance(fn, ast.FunctionDef):
                        defs.setdefault(fn.name, fn)
    return defs


def _asserting_functions(defs: dict[str, ast.FunctionDef]) -> set[str]:
    """Functions of the notebook that assert, directly or through another notebook function."""
    asserting = {name for name, fn in defs.items() if _has_assert(fn)}
    changed = True
    while changed:
        changed = False
        for name, fn in defs.items():
            calls = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            if name not in asserting and calls & asserting:
                asserting.add(name)
                changed = True
    return asserting


def check_summary_and_exercises(nb) -> list[str]:
    heads = _headings(nb)
    summary = [h for h in heads if re.match(r"summary\b", h[3], re.IGNORECASE)]
    exercises = [h for h in heads if re.match(r"exercises?\b", h[3], re.IGNORECASE)]
    if not summary or not exercises:
        return ["needs a 'Summary' heading and an 'Exercises' heading near the end"]
    s, e = summary[-1], exercises[-1]
    problems = []
    if (s[0], s[1]) > (e[0], e[1]):
        problems.append(f"cell {s[0]}: 'Summary' must come before 'Exercises' (cell {e[0]})")
    between = [h for h in heads if (s[0], s[1]) < (h[0], h[1]) < (e[0], e[1]) and h[2] <= s[2]]
    after = [h for h in heads if (h[0], h[1]) > (e[0], e[1]) and h[2] <= e[2]]
    for h in between + after:
        problems.append(f"cell {h[0]}: section {h[3]!r} sits between or after Summary/Exercises; they must end the notebook")
    # Exercises: the markdown after the heading, and the code cells after it.
    numbers = set()
    for i in range(e[0], len(nb.cells)):
        cell = nb.cells[i]
        if cell.cell_type == "markdown":
            lines = _markdown_lines(cell.source)[e[1] + 1 if i == e[0] else 0 :]
            for line in lines:
                m = EXERCISE_NUMBER.match(line)
                if m:
                    numbers.add(int(next(g for g in m.groups() if g)))
    if len(numbers) < 2:
        problems.append(f"cell {e[0]}: 'Exercises' needs at least 2 numbered exercises, found {sorted(numbers)}")
    after_code = [(i, _parse(c.source)) for i, c in _code_cells(nb) if i > e[0]]
    if not any(_has_assert(tree) for _, tree in after_code):
        problems.append(f"cell {e[0]}: no code cell after 'Exercises' contains an assert (the exercise checks)")
    asserting = _asserting_functions(_exercise_functions(nb))
    calls = [
        n for _, tree in after_code if tree is not None for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]  # fmt: skip
    # A check runs on a right answer when called directly or through verify(check, reference)
    # (attempt(check, stub) does not count: with the stub in place it never reaches the asserts).
    called = {n.func.id for n in calls} | {
        n.args[0].id for n in calls if n.func.id == "verify" and n.args and isinstance(n.args[0], ast.Name)
    }
    for k in sorted(numbers):
        name = f"check_exercise_{k}"
        if name not in called:
            problems.append(f"cell {e[0]}: exercise {k} is never checked: call {name}(...) after the 'Exercises' heading")
        elif name not in asserting:
            problems.append(f"cell {e[0]}: {name} must assert (directly or through a notebook function that does)")
    return problems


def check_no_errors_or_stderr(nb) -> list[str]:
    problems = []
    for i, cell in _code_cells(nb):
        if _raises(cell):
            continue
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                problems.append(f"cell {i}: stored error output {out.get('ename')}: {out.get('evalue')}")
            elif out.output_type == "stream" and out.get("name") == "stderr":
                problems.append(f"cell {i}: stderr output {_text(out.text)[:120]!r}")
    return problems


def _image_sizes(cell):
    """(what, bytes) for every image in a cell's outputs and attachments."""
    bundles = [out.get("data", {}) for out in cell.get("outputs", [])]
    bundles += list(cell.get("attachments", {}).values())
    for data in bundles:
        for mime in IMAGE_MIMES:
            if mime in data:
                raw = _text(data[mime])
                size = len(base64.b64decode(raw)) if mime in BASE64_MIMES else len(raw.encode())
                yield mime, size


def check_image_sizes(nb) -> list[str]:
    return [
        f"cell {i}: {mime} of {size:,} bytes (limit {MAX_IMAGE_BYTES:,}): lower figsize or dpi"
        for i, cell in enumerate(nb.cells)
        for mime, size in _image_sizes(cell)
        if size > MAX_IMAGE_BYTES
    ]


def check_figures_render(nb) -> list[str]:
    """A Figure left as a cell's last expression must reach the reader as an image.

    Without an inline backend (`%matplotlib inline`, or importing helpers.plots) Jupyter
    shows only the text `<Figure size 600x300 with 1 Axes>`, and nbval cannot notice.
    """
    return [
        f"cell {i}: {_text(out.data['text/plain'])!r} is shown as text only: "
        "add `%matplotlib inline` to the set-up cell"
        for i, cell in _code_cells(nb)
        for out in cell.get("outputs", [])
        if FIGURE_TEXT.match(_text(out.get("data", {}).get("text/plain", "")))
        and not any(m in out.data for m in IMAGE_MIMES)
    ]


def _output_texts(out):
    for key in ("text", "ename", "evalue"):
        if key in out:
            yield key, _text(out[key])
    if "traceback" in out:
        yield "traceback", "\n".join(out.traceback)
    for mime, value in out.get("data", {}).items():
        if mime not in BASE64_MIMES:
            yield mime, value if isinstance(value, str) else json.dumps(value)
    yield "output metadata", json.dumps(out.get("metadata", {}))


def check_no_author_paths(nb) -> list[str]:
    problems = []
    m = AUTHOR_PATH.search(json.dumps(nb.metadata))
    if m:
        problems.append(f"notebook metadata contains the machine path {m.group()!r}")
    for i, cell in enumerate(nb.cells):
        m = AUTHOR_PATH.search(json.dumps(cell.get("metadata", {})))
        if m:
            problems.append(f"cell {i}: cell metadata contains the machine path {m.group()!r}")
        for out in cell.get("outputs", []):
            for where, text in _output_texts(out):
                m = AUTHOR_PATH.search(text)
                if m:
                    context = text[max(0, m.start() - 30) : m.end() + 30]
                    problems.append(f"cell {i}: {where} output contains the machine path {m.group()!r}: ...{context}...")
    return problems


# A float in scientific notation: the signature of a raw difference such as 8.94e-08.
SCI_FLOAT = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?[eE][-+]?\d+)\b")
# ...unless it is a tolerance: "<= 1e-06", "≤ 1e-6", "< 1e-5", "atol=1e-6", "tol 1e-6".
TOLERANCE_BEFORE = re.compile(r"(?:[<≤]=?|\btol\w*\s*[=:]?|\batol\s*=|\brtol\s*=|\beps\w*\s*[=:]?)\s*$", re.IGNORECASE)
FRAGILE_BELOW = 1e-4


def check_portable_floats(nb) -> list[str]:
    """No raw tiny float in a compared output: it changes with the CPU (portable-output policy).

    A number printed in scientific notation whose size is below 1e-4 (zero included: a
    `0.00e+00` on one CPU is a `1.49e-07` on another) must be a tolerance ("≤ 1e-6") or sit
    in a `# NBVAL_IGNORE_OUTPUT` cell, whose claim an assert then carries.
    """
    problems = []
    for i, cell in _code_cells(nb):
        if IGNORE_MARKER in cell.source.split("\n") or "nbval-ignore-output" in _tags(cell):
            continue
        for out in cell.get("outputs", []):
            for where, text in _output_texts(out):
                for m in SCI_FLOAT.finditer(text):
                    if abs(float(m.group(1))) >= FRAGILE_BELOW or TOLERANCE_BEFORE.search(text[: m.start()]):
                        continue
                    context = text[max(0, m.start() - 40) : m.end() + 10].replace("\n", " ")
                    problems.append(f"cell {i}: {where} output prints the raw tiny float {m.group(1)} "
                                    f"(...{context}...); print a verdict with its tolerance, or ignore the "
                                    "output and assert")
    return problems


def check_ignored_output_is_asserted(nb) -> list[str]:
    """An ignored output hides its claim from nbval: an assert right there must carry it.

    The assert sits in the same cell (after the marker) or in the next code cell, and it must
    use a name the ignored cell reads or binds (or one derived from those by assignment),
    not counting builtins and imported modules.
    """
    problems = []
    code = _code_cells(nb)
    generic = set(dir(builtins)) | _imported_names(nb)
    for k, (i, cell) in enumerate(code):
        lines = cell.source.split("\n")
        marked = [j for j, ln in enumerate(lines) if ln.strip() == IGNORE_MARKER]
        if not marked and "nbval-ignore-output" not in _tags(cell):
            continue
        tree = _parse("\n".join(lines[(marked[0] if marked else 0) :]))
        if tree is None:
            problems.append(f"cell {i}: cannot parse this NBVAL_IGNORE_OUTPUT cell")
            continue
        trees = [tree]
        if k + 1 < len(code) and _parse(code[k + 1][1].source) is not None:
            trees.append(_parse(code[k + 1][1].source))
        relevant = _names(tree) - generic
        for t in trees:
            relevant = _derive(t, relevant)
        asserted = set().union(*(_asserted_names(t) for t in trees))
        where = f"cell {i} or the next code cell" + (f" (cell {code[k + 1][0]})" if k + 1 < len(code) else "")
        if not any(_has_assert(t) for t in trees):
            problems.append(f"cell {i}: output ignored by NBVAL_IGNORE_OUTPUT but no assert in {where} carries its claim")
        elif not asserted & relevant:
            problems.append(
                f"cell {i}: the asserts in {where} use none of the names this ignored cell computes or reads "
                f"{sorted(_names(tree) - generic)}: they do not carry its claim"
            )
    return problems


def _cell_lines(cell) -> int:
    return sum(1 for ln in cell.source.split("\n") if ln.strip())


def check_cells_nonempty_and_short(nb) -> list[str]:
    problems = [f"cell {i}: empty {c.cell_type} cell" for i, c in enumerate(nb.cells) if not c.source.strip()]
    code = [(i, _cell_lines(c)) for i, c in _code_cells(nb) if c.source.strip()]
    problems += [
        f"cell {i}: {n} non-blank lines of code (limit {MAX_CELL_LINES}): split it at a natural step"
        for i, n in code
        if n > MAX_CELL_LINES
    ]
    if code:
        median = statistics.median(n for _, n in code)
        if median > MAX_MEDIAN_CELL_LINES:
            longest = max(code, key=lambda t: t[1])
            problems.append(
                f"median code cell has {median} lines (limit {MAX_MEDIAN_CELL_LINES}); "
                f"longest is cell {longest[0]} with {longest[1]}"
            )
    return problems


def check_kernelspec(nb) -> list[str]:
    spec = nb.metadata.get("kernelspec", {})
    problems = []
    if spec.get("name") != "python3":
        problems.append(f"kernelspec name must be 'python3', got {spec.get('name')!r}")
    if spec.get("language") != "python":
        problems.append(f"kernelspec language must be 'python', got {spec.get('language')!r}")
    lang = nb.metadata.get("language_info", {}).get("name", "python")
    if lang != "python":
        problems.append(f"language_info name must be 'python', got {lang!r}")
    return problems


def check_no_figure_writes(nb) -> list[str]:
    """Only `make figures` writes figures/; a notebook shows its figures inline."""
    trees = [(i, _parse(c.source)) for i, c in _code_cells(nb)]
    figure_names = set()
    for _, tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Assign) and "figures" in ast.unparse(node.value).lower():
                figure_names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    problems = []
    for i, tree in trees:
        for node in ast.walk(tree) if tree else ():
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in WRITE_CALLS:
                continue
            text = ast.unparse(node)
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if "figures" in text.lower() or names & figure_names:
                problems.append(f"cell {i}: writes into figures/ ({text[:80]}); only `make figures` may")
    return problems


CHECKS = [
    check_title,
    check_learning_goals,
    check_summary_and_exercises,
    check_no_errors_or_stderr,
    check_image_sizes,
    check_figures_render,
    check_no_author_paths,
    check_ignored_output_is_asserted,
    check_cells_nonempty_and_short,
    check_kernelspec,
    check_no_figure_writes,
    check_portable_floats,
]


def _check_id(check) -> str:
    return check.__name__.removeprefix("check_")


# ---------------------------------------------------------------------------- the real notebooks
def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 8, f"expected the 8 course notebooks (01-07 and 06b) in {NOTEBOOK_DIR}, found {len(NOTEBOOKS)}"


@pytest.mark.parametrize("check", CHECKS, ids=_check_id)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_hygiene(path, check):
    nb = nbformat.read(path, as_version=4)
    problems = check(nb)
    assert not problems, f"{path.name}: " + "\n  ".join([f"{len(problems)} problem(s)", *problems])


# ---------------------------------------------------------------------------- self-tests
GOOD_CELLS = [
    ("markdown", "# 99 · A tiny notebook\n\n**Learning goals**\n\n1. Add numbers.\n2. Check them."),
    ("code", "import time\n\nx = 1 + 1"),
    ("code", f"{IGNORE_MARKER}\nstart = time.perf_counter()\nelapsed = time.perf_counter() - start\nprint(elapsed)"),
    ("code", "assert elapsed >= 0  # the timing above is a real duration"),
    ("markdown", "## Summary\n\n- Two plus two.\n\n## Exercises\n\n1. Add.\n2. Subtract."),
    ("code", "def check_exercise_1(fn):\n    assert fn(1, 1) == 2\n\n\ncheck_exercise_1(lambda a, b: a + b)"),
    ("code", "def check_exercise_2(fn):\n    check_exercise_1(lambda a, b: fn(a, -b))\n\n\ncheck_exercise_2(lambda a, b: a - b)"),
]


def _notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, source in cells:
        nb.cells.append(nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source))
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def _png(n_bytes: int) -> str:
    return base64.b64encode(b"\x89PNG" + bytes(n_bytes - 4)).decode()


def _bad_notebook() -> nbformat.NotebookNode:
    nb = _notebook(
        [
            ("code", "print('no title')"),
            ("markdown", "Some text, but no goals."),
            ("code", "1 / 0"),
            ("code", "fig"),
            ("code", f"{IGNORE_MARKER}\nelapsed = 3.2\nprint(elapsed)"),
            ("code", "print('no assert here')  # assert elapsed > 0"),
            ("code", f"{IGNORE_MARKER}\nloss = 0.5"),
            ("code", "other = 1\nassert other == 1"),
            ("markdown", "   "),
            ("code", "\n".join(f"y{k} = {k}" for k in range(MAX_CELL_LINES + 1))),
            ("code", 'FIGS = Path("../figures")\n(FIGS / "x.png").write_bytes(b"")\nfig.savefig("../figures/y.png")'),
            ("markdown", "## Exercises\n\n1. Only one exercise, and no check.\n\n## Summary\n\n- Too late."),
            ("code", "print('exercise checked by eye')"),
        ]
    )
    nb.cells[2].outputs = [
        nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[]),
        nbformat.v4.new_output("stream", name="stderr", text='File "/home/alice/nb.py", line 1\n'),
    ]
    nb.cells[3].outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": _png(300_000), "text/plain": "<Figure>"}),
        nbformat.v4.new_output("execute_result", data={"text/plain": "<Figure size 600x300 with 1 Axes>"}),
    ]
    nb.cells[4].outputs = [nbformat.v4.new_output("stream", name="stdout", text="saved to /Users/bob/x.png\n")]
    nb.cells[7].outputs = [nbformat.v4.new_output("stream", name="stdout", text="max abs diff 8.94e-08\n")]
    nb.metadata["kernelspec"] = {"display_name": "R", "language": "R", "name": "ir"}
    nb.metadata["language_info"] = {"name": "R", "path": "C:\\Users\\carol\\nb"}
    return nb


def test_self_test_good_notebook_passes_every_check():
    nb = _notebook(GOOD_CELLS)
    nb.cells[1].outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": _png(150_000), "text/plain": "<Figure size 640x480 with 1 Axes>"})
    ]
    nb.cells[3].outputs = [nbformat.v4.new_output(
        "stream", name="stdout",
        text="see https://example.org/home/x and data/tmp/y\nmax abs diff ≤ 1e-06: equal; lr 3.0e-04; atol=1e-8\n")]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="8.94e-08\n")]  # ignored cell
    for check in CHECKS:
        assert check(nb) == [], (check.__name__, check(nb))


@pytest.mark.parametrize("check", CHECKS, ids=_check_id)
def test_self_test_bad_notebook_fails_every_check(check):
    assert check(_bad_notebook()), f"{check.__name__} found nothing wrong in a notebook built to fail it"


def test_self_test_messages_name_the_cell_and_the_fault():
    nb = _bad_notebook()
    joined = "\n".join(p for check in CHECKS for p in check(nb))
    for expected in [
        "cell 0: must be a markdown cell",
        "cell 2: stored error output ZeroDivisionError",
        "cell 2: stderr output",
        "cell 3: image/png of 300,000 bytes",
        "cell 3: '<Figure size 600x300 with 1 Axes>' is shown as text only",
        "'/home/'",
        "'/Users/'",
        "notebook metadata contains the machine path 'C:",
        "cell 4: output ignored by NBVAL_IGNORE_OUTPUT but no assert",  # the assert is in a comment
        "cell 6: the asserts in cell 6 or the next code cell (cell 7) use none of the names",
        "cell 8: empty markdown cell",
        f"cell 9: {MAX_CELL_LINES + 1} non-blank lines",
        "cell 10: writes into figures/ ((FIGS / 'x.png').write_bytes",
        "cell 10: writes into figures/ (fig.savefig('../figures/y.png'))",
        "'Summary' must come before 'Exercises'",
        "at least 2 numbered exercises",
        "no code cell after 'Exercises' contains an assert",
        "exercise 1 is never checked",
        "kernelspec name must be 'python3'",
        "language_info name must be 'python'",
    ]:
        assert expected in joined, f"expected {expected!r} among:\n{joined}"


def test_self_test_portable_floats_catches_each_fragile_form():
    for text in ("diff 1.19e-07", "0.00e+00", "tensor([ 1.2e-08, -3.0e-09])", "err=-5e-05"):
        nb = _notebook([("code", "x = 1")])
        nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
        assert check_portable_floats(nb), text
    for text in ("lr 6.0e-04", "1e+03 steps", "≤ 1e-6", "tol=1e-07", "< 1e-05", "version 2e10x"):
        nb = _notebook([("code", "x = 1")])
        nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
        assert not check_portable_floats(nb), text


def test_self_test_assert_in_a_string_is_not_an_assert():
    nb = _notebook(GOOD_CELLS)
    nb.cells[3].source = 'print("assert elapsed >= 0")'
    assert check_ignored_output_is_asserted(nb) == ["cell 2: output ignored by NBVAL_IGNORE_OUTPUT but no assert in cell 2 or the next code cell (cell 3) carries its claim"]


def test_self_test_exercise_check_must_assert_transitively():
    nb = _notebook(GOOD_CELLS)
    nb.cells[5].source = "def check_exercise_1(fn):\n    print(fn(1, 1))\n\n\ncheck_exercise_1(lambda a, b: a + b)"
    problems = check_summary_and_exercises(nb)
    assert any("check_exercise_1 must assert" in p for p in problems), problems
    assert any("check_exercise_2 must assert" in p for p in problems), problems  # it only calls exercise 1's


def test_self_test_magics_do_not_break_parsing():
    nb = _notebook(GOOD_CELLS)
    nb.cells[2].source = f"{IGNORE_MARKER}\n%matplotlib inline\nelapsed = 0.1\n!echo {{elapsed}}"
    assert check_ignored_output_is_asserted(nb) == []
