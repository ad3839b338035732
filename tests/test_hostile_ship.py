"""Issue 38: nothing a learner makes or ships is lost, and no small file can exhaust the machine.

Items 1 (tools/pretrain.py), 2 (stored bytes), 3 (load_corpus), 5 (atomic_write) and 6 (the seed shift).
"""

from __future__ import annotations

import bz2
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers.data as data_mod
from helpers.data import load_corpus
from helpers.fileio import atomic_write
from helpers.models import GPT, GPTConfig
from helpers.pretrained import FORMAT, PRETRAINED, PRETRAINED_DIR, read_pretrained

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import pretrain  # noqa: E402
import seed_shift  # noqa: E402

# --- 1. tools/pretrain.py never overwrites a shipped, hash-pinned model by default -------------------

def shipped_hashes() -> dict[str, str]:
    return {f: hashlib.sha256((PRETRAINED_DIR / f).read_bytes()).hexdigest() for f, _ in PRETRAINED.values()}


def test_pretrain_writes_elsewhere_by_default():
    args = pretrain.parse_args(["--steps", "2"])
    assert not args.out.resolve().is_relative_to(PRETRAINED_DIR.resolve())
    out = subprocess.run(["git", "check-ignore", "-q", str(args.out)], cwd=ROOT)
    assert out.returncode == 0, f"{args.out} would show in git status"
    zh = pretrain.parse_args(["--model", "char_gpt_zh", "--steps", "2"])
    assert not zh.out.resolve().is_relative_to(PRETRAINED_DIR.resolve())


@pytest.mark.parametrize("argv", [
    ["--out", "pretrained"], ["--out", "pretrained/"], ["--out", str(PRETRAINED_DIR)],
    ["--out", "pretrained/char_gpt.pt"], ["--out", "pretrained/char_gpt_zh.pt"],
    ["--steps", "0"], ["--lr", "nan"], ["--lr", "-1"], ["--batch", "0"], ["--block", "0"], ["--heads", "3"],
    ["--dropout", "1.5"], ["--out", "README.md/x.pt"], ["--out", "model.txt"],
    ["--overwrite-shipped", "--out", "x.pt"],
])
def test_pretrain_refuses_bad_arguments_before_reading_the_corpus(argv, monkeypatch, capsys):
    monkeypatch.setattr(pretrain, "load_corpus", lambda *a: pytest.fail("the corpus was read"))
    with pytest.raises(SystemExit) as exc:
        pretrain.main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_pretrain_refuses_a_link_to_a_shipped_file(tmp_path, monkeypatch):
    link = tmp_path / "mine.pt"
    link.symlink_to(PRETRAINED_DIR / "char_gpt.pt")
    monkeypatch.setattr(pretrain, "load_corpus", lambda *a: pytest.fail("the corpus was read"))
    with pytest.raises(SystemExit):
        pretrain.main(["--out", str(link)])


def test_overwrite_shipped_is_the_only_way_to_the_shipped_file():
    args = pretrain.parse_args(["--overwrite-shipped"])
    assert args.out == PRETRAINED_DIR / "char_gpt.pt"
    hint = pretrain.install_hint(Path("artifacts/pretrained/char_gpt.pt"), "char_gpt", "ab" * 32, shipped=False)
    assert "cp artifacts/pretrained/char_gpt.pt pretrained/char_gpt.pt" in hint and "ab" * 32 in hint


def test_pretrain_smoke_run_leaves_the_shipped_models_alone(tmp_path, capsys):
    before = shipped_hashes()
    out = tmp_path / "smoke.pt"
    pretrain.main(["--steps", "1", "--d-model", "16", "--layers", "1", "--heads", "2", "--block", "8",
                   "--batch", "2", "--out", str(out)])
    assert shipped_hashes() == before
    model, tok, meta = read_pretrained(out)
    printed = capsys.readouterr().out
    assert hashlib.sha256(out.read_bytes()).hexdigest() in printed and "to install it" in printed
    assert not out.with_suffix(".partial.pt").exists()


# --- 2. a size guard counts stored bytes ------------------------------------------------------------

def pretrained_bytes(state: dict, config: GPTConfig, chars: list[str]) -> bytes:
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "config": vars(config) | {}, "chars": chars, "state": state, "meta": {}}, buf)
    return buf.getvalue()


def test_a_stride_0_tensor_cannot_claim_gigabytes(tmp_path):
    cfg = GPTConfig(vocab_size=3, block_size=4, d_model=4, n_heads=1, n_layers=1)
    state = {k: v.half() for k, v in GPT(cfg).state_dict().items() if k != "head.weight"}
    state["tok_emb.weight"] = torch.zeros(1, 1, dtype=torch.float16).expand(3, 4)
    state["huge"] = torch.zeros(1, dtype=torch.float16).expand(2**33)  # 16 GB once converted to float32
    import dataclasses
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "config": dataclasses.asdict(cfg), "chars": ["a", "b", "c"], "state": state,
                "meta": {}}, buf)
    path = tmp_path / "bomb.pt"
    path.write_bytes(buf.getvalue())
    assert path.stat().st_size < 20_000
    with pytest.raises(ValueError, match="stored bytes"):
        read_pretrained(path)


def test_one_storage_under_many_names_is_counted_once(tmp_path):
    import dataclasses
    cfg = GPTConfig(vocab_size=3, block_size=4, d_model=4, n_heads=1, n_layers=1)
    state = {k: v.half() for k, v in GPT(cfg).state_dict().items() if k != "head.weight"}
    big = torch.zeros(4096, dtype=torch.float16)
    state.update({f"copy{i}": big for i in range(64)})  # one storage, named 64 times
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "config": dataclasses.asdict(cfg), "chars": ["a", "b", "c"], "state": state,
                "meta": {}}, buf)
    path = tmp_path / "many.pt"
    path.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="claim"):
        read_pretrained(path)


# --- 3. load_corpus reads through the bounded reader --------------------------------------------------

@pytest.fixture
def fake_data(tmp_path, monkeypatch):
    monkeypatch.setattr(data_mod, "DATA_DIR", tmp_path)
    return tmp_path


def test_a_bz2_bomb_stops_just_past_the_corpus_size(fake_data):
    comp = bz2.BZ2Compressor(9)
    chunk = b"\0" * (1 << 20)
    bomb = b"".join(comp.compress(chunk) for _ in range(64)) + comp.flush()  # 64 MB of zeros in a few kB
    (fake_data / "songci.txt.bz2").write_bytes(bomb)
    import tracemalloc
    tracemalloc.start()
    with pytest.raises(ValueError, match="decompresses to more than"):
        load_corpus("songci")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40 << 20, f"{peak / 1e6:.0f} MB held while refusing it"


def test_a_truncated_bz2_corpus_is_called_damaged(fake_data):
    good = (ROOT / "data" / "songci.txt.bz2").read_bytes()
    (fake_data / "songci.txt.bz2").write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match="not a complete bz2 file"):
        load_corpus("songci")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_a_fifo_corpus_is_refused_not_waited_on(fake_data):
    os.mkfifo(fake_data / "pydoc_topics.txt")
    with pytest.raises(ValueError, match="regular file"):
        load_corpus("pydoc")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_link_to_dev_zero_is_refused(fake_data):
    (fake_data / "pydoc_topics.txt").symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="regular file"):
        load_corpus("pydoc")


def test_an_oversized_corpus_is_refused_before_it_is_read(fake_data):
    with open(fake_data / "pydoc_topics.txt", "wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GB that take no disk
    with pytest.raises(ValueError, match="more than"):
        load_corpus("pydoc")


def test_the_shipped_corpora_still_load():
    assert len(load_corpus("songci")) == 2_059_792 and len(load_corpus("pydoc")) == 465_048


# --- 5. atomic_write ---------------------------------------------------------------------------------

def test_atomic_write_writes_through_a_symlink(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with atomic_write(link, "w") as f:
        f.write("new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_atomic_write_through_a_dangling_link_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "sub" / "new.txt")
    with atomic_write(link, "w") as f:
        f.write("x")
    assert link.is_symlink() and (tmp_path / "sub" / "new.txt").read_text() == "x"


@pytest.mark.parametrize("name", ["dir/", "dir" + os.sep])
def test_atomic_write_refuses_a_folder_name(tmp_path, name):
    with pytest.raises(ValueError, match="separator"), atomic_write(str(tmp_path) + "/" + name, "w") as f:
        f.write("x")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_names_a_nul_byte(tmp_path):
    with pytest.raises(ValueError, match="NUL byte"), atomic_write(tmp_path / "a\0b", "w"):
        pass


def test_temporary_files_are_ignored_by_git():
    out = subprocess.run(["git", "check-ignore", "-q", "pretrained/.char_gpt.pt.k3j_x9.tmp"], cwd=ROOT)
    assert out.returncode == 0


# --- 6. the seed shift -------------------------------------------------------------------------------

PROBE = """
import json, pickle, random
import numpy as np
import torch
from helpers.data import get_batch
S = SEED
out = {}
torch.manual_seed(np.int64(S)); out["torch_np"] = torch.rand(1).item()
out["gen_neg"] = torch.rand(1, generator=torch.Generator().manual_seed(-S)).item()
np.random.seed(np.uint32(S)); out["np_np"] = np.random.rand()
random.seed(S)
out["random"] = [random.expovariate(1.0), random.triangular(), random.betavariate(2, 3), random.paretovariate(2),
                 random.weibullvariate(1, 2), random.vonmisesvariate(0, 1), random.lognormvariate(0, 1),
                 random.binomialvariate(5, 0.5) if hasattr(random, "binomialvariate") else 0]
out["random_neg"] = random.Random(-S).random()
g = torch.Generator().manual_seed(3)
out["isinstance"] = [isinstance(torch.default_generator, torch.Generator), isinstance(g, torch.Generator),
                     isinstance(np.random.mtrand._rand, np.random.RandomState), isinstance(random._inst, random.Random)]
out["pickle"] = pickle.loads(pickle.dumps(g)).initial_seed() == g.initial_seed()
out["batch"] = get_batch(torch.arange(10), 2, 1, generator=torch.default_generator)[0].shape[1]
print(json.dumps(out))
"""


def probe(shift, seed: int = 5) -> dict:
    env = {**os.environ, "SEED_SHIFT": str(shift), "PYTHONPATH": str(seed_shift.SITE)}
    out = subprocess.run([sys.executable, "-c", PROBE.replace("SEED", str(seed))], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_seed_shift_moves_every_kind_of_seed_and_nothing_else():
    plain, shifted, again = probe(0), probe(2), probe(2)
    assert shifted == again  # every draw is seeded: the same shift gives the same numbers
    for key in ("torch_np", "gen_neg", "np_np", "random_neg"):
        assert shifted[key] != plain[key], key
    assert all(a != b for a, b in zip(shifted["random"][:7], plain["random"][:7], strict=True)), "random.*"
    assert shifted["torch_np"] == probe(0, seed=7)["torch_np"]  # seed 5 shifted by 2 is seed 7
    assert shifted["isinstance"] == [True] * 4 and shifted["pickle"] and shifted["batch"] == 2


def test_a_bad_seed_shift_stops_python():
    env = {**os.environ, "SEED_SHIFT": "one", "PYTHONPATH": str(seed_shift.SITE)}
    out = subprocess.run([sys.executable, "-c", "print('ran unshifted')"], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "ran unshifted" not in out.stdout and "SEED_SHIFT" in out.stderr


def test_a_folder_without_notebooks_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        seed_shift.main([str(tmp_path)])
    assert exc.value.code == 2 and "no notebooks" in capsys.readouterr().err
