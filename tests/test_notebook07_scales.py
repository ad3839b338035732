"""Notebook 07's "gpu" sizes, run on the CPU for a few steps: the code path at that scale works.

The cells are taken from the notebook itself (found by what they define), so a change to the
notebook is what gets tested. The full "gpu" runs have not been made on a real GPU.
"""

import dataclasses
from pathlib import Path

import nbformat
import pytest
import torch

NB = Path(__file__).resolve().parent.parent / "notebooks" / "07_training.ipynb"


def cell_defining(cells, marker: str) -> str:
    found = [c.source for c in cells if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"expected one cell with {marker!r}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_reversal_cells_run_at_both_scales(scale):
    cells = nbformat.read(NB, as_version=4).cells
    imports = "\n".join(line for line in cells[1].source.splitlines() if not line.startswith("%"))
    ns = {}
    exec(imports, ns)  # noqa: S102  (the notebook's own code)
    ns["device"] = torch.device("cpu")
    exec(cell_defining(cells, "SIZES = {"), ns)  # noqa: S102
    ns["S"] = ns["SIZES"][scale]
    exec(cell_defining(cells, "def reversal_batch"), ns)  # noqa: S102
    exec(cell_defining(cells, "def seq2seq_loss"), ns)  # noqa: S102
    cfg = dataclasses.replace(ns["rev_config"], max_steps=3, warmup_steps=1, eval_interval=3, progress=False)
    hist = ns["train"](ns["rev_model"], lambda split: ns["reversal_batch"](8, ns["train_gen"]), cfg,
                       loss_fn=ns["seq2seq_loss"])
    assert hist.steps == 3 and all(torch.isfinite(torch.tensor(hist.val_loss)))
    n = ns["S"]["rev_len"]
    src, _ = ns["reversal_batch"](4, torch.Generator().manual_seed(0))
    pred = ns["rev_model"].greedy_decode(src, max_len=n + 2, bos_id=ns["BOS"], eos_id=ns["EOS"])
    # A model trained 3 steps may write <EOS> anywhere: decoding stops once every row has ended.
    assert pred.shape[0] == 4 and 2 <= pred.shape[1] <= n + 2, pred.shape
    if pred.shape[1] < n + 2:
        assert (pred == ns["EOS"]).any(dim=1).all(), "decoding stopped before every row wrote <EOS>"
    assert ns["rev_config"].max_steps == ns["SIZES"][scale]["rev_steps"]
