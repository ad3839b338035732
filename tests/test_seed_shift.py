"""The seed-shift check (tools/seed_shift.py) really shifts every seed, and fails a seed-bound assert."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import seed_shift  # noqa: E402

DRAWS = """
import json, random
import numpy as np
import torch
torch.manual_seed(5); a = torch.rand(1).item()
b = torch.rand(1, generator=torch.Generator().manual_seed(5)).item()
np.random.seed(5); c = np.random.rand()
d = np.random.default_rng(5).random()
e = np.random.RandomState(5).rand()
random.seed(5); f = random.random()
g = random.Random(5).random()
from helpers import set_seed
set_seed(5); h = torch.rand(1).item()
print(json.dumps([a, b, c, d, e, f, g, h]))
"""


def draws(shift: int, seed_in_code: int = 5) -> list[float]:
    env = {**os.environ, "SEED_SHIFT": str(shift), "PYTHONPATH": str(seed_shift.SITE)}
    out = subprocess.run([sys.executable, "-c", DRAWS.replace("5", str(seed_in_code))], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return json.loads(out)


def test_every_generator_is_shifted():
    shifted, plain_next = draws(shift=2, seed_in_code=5), draws(shift=0, seed_in_code=7)
    assert shifted == plain_next  # seed 5 under shift 2 draws exactly what seed 7 draws
    assert draws(shift=0) != shifted


def notebook(tmp_path: Path, source: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_claim_true_for_one_seed_only_fails(tmp_path):
    # The value seed 0 draws, unshifted (this test may itself run under `make seed-shift`).
    code = "import torch; torch.manual_seed(0); print(torch.randint(0, 2**31, (1,)).item())"
    value = int(subprocess.run([sys.executable, "-c", code], env={**os.environ, "SEED_SHIFT": "0"},
                               capture_output=True, text=True, check=True).stdout)  # fmt: skip
    path = notebook(tmp_path, f"import torch\ntorch.manual_seed(0)\nassert torch.randint(0, 2**31, (1,)).item() == {value}")
    found, _ = seed_shift.failures(path, 1, timeout=120)
    assert len(found) == 1 and "AssertionError" in found[0] and "code cell 0" in found[0]
    robust = notebook(tmp_path, "import torch\ntorch.manual_seed(0)\nassert 0 <= torch.rand(1).item() < 1")
    assert seed_shift.failures(robust, 1, timeout=120)[0] == []


def test_cli_refuses_shift_zero_and_non_notebooks(tmp_path):
    with pytest.raises(SystemExit):
        seed_shift.main(["--shift", "0", str(tmp_path)])
    with pytest.raises(SystemExit):
        seed_shift.main([str(tmp_path / "missing.ipynb")])
    with pytest.raises(SystemExit):
        seed_shift.main(["--jobs", "0", str(tmp_path)])


def test_two_jobs_run_every_notebook_under_every_shift(tmp_path, capsys):
    # Each kernel must see its own shift: notebook a leaves a file named after the shift it was given.
    a = "import os\nopen(f\"seen_{os.environ['SEED_SHIFT']}\", 'w').close()"
    for name, source in {"a": a, "b": "assert False, 'seed-bound'"}.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source)]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    assert seed_shift.main(["--jobs", "2", "--shift", "1", "--shift", "2", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    for k in (1, 2):
        assert f"shift {k}: a.ipynb: ok" in out and f"shift {k}: b.ipynb: 1 cell(s) failed" in out
    assert "2 failing cell(s)" in out
    assert sorted(p.name for p in tmp_path.glob("seen_*")) == ["seen_1", "seen_2"]
