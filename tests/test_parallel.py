"""helpers.parallel and helpers/ddp_train.py: shards, the process group from torchrun's environment,
and two real gloo processes whose DDP gradient equals one process's on the whole batch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import ddp_train
from helpers.checkpoint import load_checkpoint
from helpers.models import GPT, GPTConfig
from helpers.parallel import DistInfo, init_distributed, shard
from helpers.pretrained import read_pretrained

ROOT = Path(__file__).resolve().parents[1]


def test_shards_cover_the_batch_once_in_order():
    x, y = torch.arange(24).view(12, 2), torch.arange(12)
    parts = [shard((x, y), r, 3) for r in range(3)]
    assert all(p[0].shape == (4, 2) and p[1].shape == (4,) for p in parts)
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    assert torch.equal(shard(x, 1, 2)[0], x[6:])  # a lone tensor is a batch too


@pytest.mark.parametrize(("args", "error", "words"), [
    (((torch.zeros(10, 2),), 0, 3), ValueError, "split evenly"),
    (((torch.zeros(4), torch.zeros(5)), 0, 2), ValueError, "first dimension"),
    (((torch.zeros(4),), 2, 2), ValueError, "rank"),
    (((torch.zeros(4),), -1, 2), ValueError, "rank"),
    (((torch.zeros(4),), 0, 0), ValueError, "world_size"),
    ((([1, 2],), 0, 1), TypeError, "batch"),
    (((torch.tensor(1.0),), 0, 1), TypeError, "batch"),
])  # fmt: skip
def test_shard_refuses_bad_input(args, error, words):
    with pytest.raises(error, match=words):
        shard(*args)


def test_one_process_without_torchrun(monkeypatch):
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    info = init_distributed()
    assert info == DistInfo(0, 1, 0, torch.device("cpu"), None) and info.is_main


def test_torchrun_environment_must_be_whole(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="RANK"):
        init_distributed()


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--batch", "-1"], ["--lr", "5"], ["--out", "."]])
def test_script_refuses_bad_arguments_before_training(argv, capsys):
    with pytest.raises(SystemExit):
        ddp_train.parse_args(argv)
    assert "must" in capsys.readouterr().err


def test_script_alone_is_one_process(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    report = ddp_train.main(["--steps", "2", "--batch", "8", "--block", "16", "--check", "--report",
                             str(tmp_path / "r.json")])  # fmt: skip
    assert report["world_size"] == 1 and report["grad_max_diff"] == 0.0 and len(report["losses"]) == 2
    assert json.loads((tmp_path / "r.json").read_text()) == report
    assert capsys.readouterr().out.startswith("DDP_REPORT ")


def test_two_gloo_processes_equal_one_process_on_the_whole_batch(tmp_path):
    """torchrun, 2 ranks x 2 micro-batches (no_sync on the first): step 0's gradient is the whole
    batch's, every rank ends with the same weights, and rank 0 alone writes a loadable checkpoint."""
    out = tmp_path / "ddp.pt"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "helpers.ddp_train", "--steps", "3", "--batch", "8", "--block", "16",
                           "--accum", "2", "--check", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("DDP_REPORT ")]
    assert len(reports) == 1, done.stdout  # rank 0 only
    r = reports[0]
    assert r["world_size"] == 2 and r["backend"] == "gloo" and r["replicas_equal"]
    assert r["grad_max_diff"] <= 1e-5 * r["grad_max"]
    saved = torch.load(out, weights_only=True)
    model = GPT(GPTConfig(**saved["meta"]["config"]))
    meta = load_checkpoint(out, model)
    assert meta["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp.pt"]  # no temp file left behind


def test_a_batch_that_does_not_split_is_refused(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit, match="split evenly"):
        ddp_train.main(["--steps", "1", "--batch", "9", "--accum", "2"])


def _pretrain(tmp_path, name: str, nproc: int | None) -> dict:
    out = tmp_path / f"{name}.pt"
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc else []
    done = subprocess.run([sys.executable, *launcher, str(ROOT / "tools" / "pretrain.py"), "--steps", "6",
                           "--d-model", "16", "--layers", "1", "--heads", "2", "--block", "16", "--batch", "4",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1  # rank 0 alone writes and prints
    return read_pretrained(out)[2]


def test_pretrain_under_torchrun_trains_as_one_process(tmp_path):
    """`torchrun --nproc_per_node 2 tools/pretrain.py`: each rank a slice of the same batch, rank 0
    writes one file (no partial left behind), and the losses are the one-process run's to rounding."""
    two = _pretrain(tmp_path, "two", 2)
    one = _pretrain(tmp_path, "one", None)
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["eval_steps"] == one["eval_steps"]
    for a, b in zip(two["val_loss"] + two["train_loss"], one["val_loss"] + one["train_loss"], strict=True):
        assert abs(a - b) < 1e-3, (two, one)
    assert abs(two["loss_fp32"]["val"] - one["loss_fp32"]["val"]) < 1e-3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.pt", "two.pt"]
