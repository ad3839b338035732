"""Re-execute notebooks in place so their stored outputs are fresh and diffs stay clean.

    python tools/execute_notebooks.py notebooks/03_positional_encoding.ipynb [...]

Runs each notebook top to bottom in a fresh `python3` kernel on the CPU with the same
environment the test suite uses, then removes what changes from run to run (timings,
widget state, random widget ids, the exact Python version), stores an explorer's
picture rather than its live-widget view (see `nbmeta.picture_instead_of_widget`), stores the
metadata JupyterLab adds on opening (`nbmeta.as_lab_leaves_it`) and records a fingerprint
of the code so `tools/check_notebooks.py` can tell when outputs are stale.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from helpers.fileio import atomic_write

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nbmeta import (  # noqa: E402
    META_KEY,
    WIDGET_MIME,
    as_lab_leaves_it,
    code_fingerprint,
    picture_instead_of_widget,
)

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# What ipykernel reports, less the exact Python version (which would make a diff per machine).
# JupyterLab marks a notebook modified when the kernel reports other language_info than the
# stored one; `make lab` (tools/jupyter_lab_config.py) serves each notebook with this Python's
# version added and removes it again on save, so opening one changes nothing on 3.11-3.14 alike.
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}


def _deterministic_widget_ids(nb, name: str) -> None:
    mapping: dict[str, str] = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_MIME)
            if view and "model_id" in view:
                old = view["model_id"]
                if old not in mapping:
                    mapping[old] = uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{len(mapping)}").hex
                view["model_id"] = mapping[old]


def _coalesce_streams(nb) -> None:
    """Merge runs of same-name stream outputs: how a print is chunked depends on timing."""
    for cell in nb.cells:
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if prev and out.output_type == prev.output_type == "stream" and out.name == prev.name:
                prev.text += out.text
            else:
                merged.append(out)
        if "outputs" in cell:
            cell.outputs = merged


def execute(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        cell["id"] = cell.get("id") or f"cell-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        allow_errors=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    picture_instead_of_widget(nb)
    as_lab_leaves_it(nb)  # "collapsed": true on collapsed cells, as JupyterLab would add it
    _deterministic_widget_ids(nb, path.name)
    _coalesce_streams(nb)
    nb.metadata = {
        "kernelspec": KERNELSPEC,
        "language_info": LANGUAGE_INFO,
        META_KEY: {"code_sha256": code_fingerprint(nb)},
    }
    nbformat.validate(nb)
    with atomic_write(path, "w", encoding="utf-8") as f:  # an interrupted write never leaves half a notebook
        nbformat.write(nb, f)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args()
    os.environ.update({"PYTHONHASHSEED": "0", "TQDM_DISABLE": "1", "HELPERS_DEVICE": "cpu"})
    for path in args.notebooks:
        if not path.is_file():
            print(f"no such notebook: {path}", file=sys.stderr)
            return 2
        print(f"{path}: executed in {execute(path, args.timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
