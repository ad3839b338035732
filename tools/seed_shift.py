"""Re-run notebooks with every seed shifted: do the claims they assert hold for other seeds?

    python tools/seed_shift.py notebooks                 # shifts 1 and 2, every notebook
    python tools/seed_shift.py --shift 3 notebooks/07_training.ipynb
    python tools/seed_shift.py --jobs 2 notebooks        # two notebooks at a time (one thread each)

For anything trained, sampled or randomly initialised, another machine (another instruction
set, BLAS or thread count) is in effect another seed. This check runs each notebook top to
bottom in a fresh kernel with every seed shifted by K (`seed_shift_site/sitecustomize.py`
shifts torch, `torch.Generator`, NumPy and `random`), and reports each cell that raises:
an `assert` that held only for the notebook's own seed, or an error. Outputs are not
compared (they are expected to change); the notebooks on disk are not written.
Exit status 0 when every cell of every notebook passed for every shift.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
from nbclient import NotebookClient

SITE = Path(__file__).resolve().parent / "seed_shift_site"


def failures(path: Path, shift: int, timeout: int) -> tuple[list[str], float]:
    """The cells of one notebook that raise under a seed shift, as 'cell N: Error: message' lines."""
    nb = nbformat.read(path, as_version=4)
    env = {**os.environ, "SEED_SHIFT": str(shift), "PYTHONHASHSEED": "0", "TQDM_DISABLE": "1",
           "HELPERS_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent.resolve())}})  # fmt: skip
    start = time.perf_counter()
    with _environment(env):
        client.execute()
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        expected = "raises-exception" in cell.metadata.get("tags", [])
        for out in cell.get("outputs", []):
            if out.output_type == "error" and not expected:
                line = _failing_line(cell.source, out.get("traceback", []))
                found.append(f"code cell {i}: {out.ename}: {str(out.evalue)[:200]}" + (f"  [{line[:120]}]" if line else ""))
    return found, time.perf_counter() - start


def _failing_line(source: str, traceback: list[str]) -> str:
    """The line of the cell that raised, from IPython's traceback ('Cell In[12], line 5')."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(traceback))
    m = re.search(r"Cell In\[\d+\], line (\d+)", text)
    lines = source.splitlines()
    return lines[int(m.group(1)) - 1].strip() if m and 0 < int(m.group(1)) <= len(lines) else ""


class _environment:
    """Set os.environ for the kernel that nbclient starts (it inherits this process's environment)."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def __enter__(self):
        self.saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)

    def __exit__(self, *exc):
        os.environ.clear()
        os.environ.update(self.saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks, or folders of notebooks")
    parser.add_argument("--shift", type=int, action="append", help="seed shift (repeatable; default 1 and 2)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at a time (default 1)")
    args = parser.parse_args(argv)
    shifts = args.shift or [1, 2]
    if any(k == 0 for k in shifts):
        parser.error("--shift 0 is the notebooks' own seeds: strict nbval checks those")
    notebooks = []
    for p in args.paths:
        if p.is_dir():
            found = sorted(p.glob("*.ipynb"))
            if not found:
                parser.error(f"the folder {p} holds no notebooks (*.ipynb)")
            notebooks += found
        elif p.suffix == ".ipynb" and p.is_file():
            notebooks.append(p)
        else:
            parser.error(f"not a notebook or a folder of notebooks: {p}")
    if not notebooks:  # nothing run must not read as "every cell passed"
        parser.error(f"no notebooks found in {', '.join(map(str, args.paths))}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    # Bigger notebooks first, so that a long one does not start last and leave a worker idle.
    tasks = [(path, k) for path in sorted(notebooks, key=lambda p: -p.stat().st_size) for k in shifts]
    bad, total = 0, time.perf_counter()
    # Each job is its own process: the kernel inherits the environment that failures() sets, which
    # is process-wide, so two kernels must never be started from one process at the same time.
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = {pool.submit(failures, path, k, args.timeout): (path, k) for path, k in tasks}
        for run in as_completed(runs):
            (path, k), (found, seconds) = runs[run], run.result()
            verdict = "ok" if not found else f"{len(found)} cell(s) failed"
            print(f"shift {k}: {path.name}: {verdict} ({seconds:.0f} s)", flush=True)
            for line in found:
                print(f"    {line}", flush=True)
            bad += len(found)
    print(f"seed shift {shifts}: {bad} failing cell(s) in {time.perf_counter() - total:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
