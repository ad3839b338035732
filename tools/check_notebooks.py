"""Check that every notebook's stored outputs are complete and fresh.

Strict nbval compares only cells that have stored outputs, so a notebook whose outputs
were cleared (or never produced) would pass it. This check closes that gap: every code
cell was executed, in order 1..N, in one run, from the code as it is now, with no error
stored (unless the cell is tagged ``raises-exception``), no stderr in a cell whose
output nbval compares, and no live-widget view stored where a picture can stand in.

    python tools/check_notebooks.py notebooks

When a notebook differs from the last commit, its problems are reported as a learner's edits (a
session saved from JupyterLab: cells run out of order, code changed), with how to get the
shipped notebook back; a notebook unchanged since the commit that fails is reported as broken.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbmeta import META_KEY, WIDGET_MIME, code_fingerprint  # noqa: E402

FIX = "run `make notebooks` (or tools/execute_notebooks.py on it)"


def problems(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code:
        found.append("has no code cells")
    counts = [c.execution_count for c in code]
    if counts != list(range(1, len(code) + 1)):
        found.append(f"execution counts are {counts}, expected 1..{len(code)} in order")
    for i, cell in enumerate(code):
        if not cell.source.strip():
            found.append(f"code cell {i} is empty")
        tags = set(cell.metadata.get("tags", []))
        if cell.metadata.get("jupyter", {}).get("outputs_hidden") and cell.metadata.get("collapsed") is not True:
            found.append(f'code cell {i} hides its outputs without "collapsed": true (JupyterLab adds it on opening '
                         "and marks the notebook modified)")  # fmt: skip
        ignored = "NBVAL_IGNORE_OUTPUT" in cell.source or "nbval-ignore-output" in tags
        for out in cell.outputs:
            if out.output_type == "error" and "raises-exception" not in tags:
                found.append(f"code cell {i} stores an error: {out.ename}")
            if "image/png" in out.get("data", {}) and WIDGET_MIME in out.get("data", {}):
                found.append(f"code cell {i} stores a live-widget view beside its picture (JupyterLab shows "
                             "'Error displaying widget' until the cell runs)")  # fmt: skip
            if out.output_type == "stream" and out.name == "stderr" and not ignored:
                found.append(f"code cell {i} stores stderr output: {out.text[:80]!r}")
    stored = nb.metadata.get(META_KEY, {}).get("code_sha256")
    if stored != code_fingerprint(nb):
        found.append("code changed since the outputs were stored (fingerprint differs)")
    if nb.metadata.get("kernelspec", {}).get("name") != "python3":
        found.append("kernelspec is not python3")
    if "version" in nb.metadata.get("language_info", {}):
        found.append("language_info stores a Python version (a diff per machine; `make lab` adds it when serving)")
    return found


def edited(path: Path) -> bool | None:
    """True if ``path`` differs from git's last commit, False if not, None without git."""
    try:
        r = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path.name], cwd=path.parent,
                           capture_output=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {0: False, 1: True}.get(r.returncode)


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else Path("notebooks")
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks under {folder}", file=sys.stderr)
        return 1
    bad = 0
    for path in paths:
        found = problems(path)
        if found and edited(path):
            print(f"{path}: changed since the last commit, by your own edits or a session saved from JupyterLab "
                  f"(not a broken notebook): {'; '.join(found)}. To check the notebook as shipped, put your "
                  f"version aside with `git stash` (or drop it: `git checkout -- {path}`); to keep it and make "
                  "its outputs fresh, re-run it with tools/execute_notebooks.py", file=sys.stderr)  # fmt: skip
        else:
            for p in found:
                print(f"{path}: {p}; {FIX}", file=sys.stderr)
        bad += len(found)
    print(f"checked {len(paths)} notebooks: {'all fresh' if not bad else f'{bad} problem(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
