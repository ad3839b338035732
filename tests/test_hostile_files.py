"""Files from the internet are hostile: small files with huge claims, paths that lead out of the
cache, refusals that name the file and never teach the unsafe option, and saves that keep what
they should (issue 23, classes 1, 3, 4, 5)."""

from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers.bpe import BPETokenizer
from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.fileio import atomic_write
from helpers.gpt import GPT, GPTConfig
from helpers.gpt2 import load_gpt2, read_state_dict
from helpers.gpt2_tokenizer import GPT2Tokenizer, gpt2_pattern
from helpers.pretrained import read_pretrained, save_pretrained
from helpers.safetensors_io import read_safetensors
from helpers.tokenizers import CharTokenizer, WordTokenizer

REPO = Path(__file__).resolve().parent.parent
HOSTILE_MAX = 6 * 1024  # bytes: every hostile file below is at most this
ALLOWED_MB = 300  # address space a loader may add on top of the imports


def safetensors_bytes(entries: dict, data: bytes = b"") -> bytes:
    header = json.dumps(entries).encode()
    return struct.pack("<Q", len(header)) + header + data


def tiny_gpt2_tensors(n_layers: int = 1, C: int = 4, V: int = 3, P: int = 2) -> dict[str, torch.Tensor]:
    sd = {"wte.weight": torch.zeros(V, C), "wpe.weight": torch.zeros(P, C), "ln_f.weight": torch.ones(C),
          "ln_f.bias": torch.zeros(C)}
    for i in range(n_layers):
        h = f"h.{i}."
        sd.update({h + "ln_1.weight": torch.ones(C), h + "ln_1.bias": torch.zeros(C),
                   h + "attn.c_attn.weight": torch.zeros(C, 3 * C), h + "attn.c_attn.bias": torch.zeros(3 * C),
                   h + "attn.c_proj.weight": torch.zeros(C, C), h + "attn.c_proj.bias": torch.zeros(C),
                   h + "ln_2.weight": torch.ones(C), h + "ln_2.bias": torch.zeros(C),
                   h + "mlp.c_fc.weight": torch.zeros(C, 4 * C), h + "mlp.c_fc.bias": torch.zeros(4 * C),
                   h + "mlp.c_proj.weight": torch.zeros(4 * C, C), h + "mlp.c_proj.bias": torch.zeros(C)})
    return sd


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], extra: dict | None = None) -> Path:
    entries, data = {}, b""
    for k, t in tensors.items():
        raw = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        entries[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    entries.update(extra or {})
    path.write_bytes(safetensors_bytes(entries, data))
    return path


def hostile_files(d: Path) -> dict[str, tuple[str, str]]:
    """name -> (loader call as Python source, file the error must name): each a few kB claiming gigabytes."""
    cases = {}
    # 1. A header length of almost 100 MB (under the format's limit) in a 40-byte file.
    p = d / "long_header.safetensors"
    p.write_bytes(struct.pack("<Q", 99_999_999) + b"{}" + bytes(30))
    cases["header length"] = (f"read_safetensors({str(p)!r})", str(p))
    # 2. A tensor claiming a terabyte over 8 bytes of data.
    p = d / "huge_tensor.safetensors"
    p.write_bytes(safetensors_bytes({"w": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 8]}}, bytes(8)))
    cases["huge shape"] = (f"read_safetensors({str(p)!r})", str(p))
    # 3. A block index of a billion in a tensor name (an empty tensor: costs no data).
    g = d / "names"
    g.mkdir()
    write_safetensors(g / "model.safetensors", tiny_gpt2_tensors(),
                      {"h.999999999.ln_1.weight": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})
    cases["layer count in names"] = (f"load_gpt2({str(g)!r})", "h.999999999")
    # 4. config.json claiming a billion layers, over a one-block file.
    g = d / "config_layers"
    g.mkdir()
    write_safetensors(g / "model.safetensors", tiny_gpt2_tensors())
    (g / "config.json").write_text(json.dumps({"vocab_size": 3, "n_positions": 2, "n_embd": 4, "n_head": 1,
                                               "n_layer": 10**9}))
    cases["layer count in config"] = (f"load_gpt2({str(g)!r})", str(g / "model.safetensors"))
    # 5. config.json claiming huge widths and vocabulary.
    g = d / "config_sizes"
    g.mkdir()
    write_safetensors(g / "model.safetensors", tiny_gpt2_tensors())
    (g / "config.json").write_text(json.dumps({"vocab_size": 2**40, "n_positions": 2**40, "n_embd": 2**30,
                                               "n_head": 2**24, "n_layer": 1, "n_inner": 2**40}))
    cases["sizes in config"] = (f"load_gpt2({str(g)!r})", str(g / "model.safetensors"))
    # 6. A .bin of zero-stride views: every GPT-2 tensor at width 2**15 over 4 stored bytes (4 GB each).
    sd = {k: torch.zeros(1).expand(*(2**15 * (d // 4) for d in t.shape))
          for k, t in tiny_gpt2_tensors(C=4, V=4, P=4).items()}
    g = d / "strided"
    g.mkdir()
    torch.save(sd, g / "pytorch_model.bin")
    cases["zero-stride .bin"] = (f"load_gpt2({str(g)!r})", str(g / "pytorch_model.bin"))
    # 7. A pretrained file whose config claims a million layers of width 1024.
    p = d / "pretrained.pt"
    torch.save({"format": "helpers-pretrained/1", "config": {"vocab_size": 2, "block_size": 4, "d_model": 1024,
                "n_heads": 1, "n_layers": 10**6}, "chars": ["a", "b"], "state": {"w": torch.zeros(2)}, "meta": {}}, p)
    cases["pretrained config"] = (f"read_pretrained({str(p)!r})", str(p))
    # 8. A BPE file whose merges double a token 60 times (2**60 bytes).
    p = d / "bpe.json"
    merges = [[97, 97]] + [[256 + k, 256 + k] for k in range(60)]
    p.write_text(json.dumps({"type": "bpe", "version": 1, "pattern": None, "merges": merges}))
    cases["bpe doubling"] = (f"BPETokenizer.load({str(p)!r})", str(p))
    # 9. config.json with a 4300-digit number and a deep nesting.
    g = d / "config_digits"
    g.mkdir()
    write_safetensors(g / "model.safetensors", tiny_gpt2_tensors())
    (g / "config.json").write_text('{"n_layer": ' + "9" * 5000 + "}")
    cases["config digits"] = (f"load_gpt2({str(g)!r})", str(g / "config.json"))
    return cases


CHILD = textwrap.dedent("""
    import json, resource, sys
    import torch
    from helpers.bpe import BPETokenizer
    from helpers.gpt2 import load_gpt2
    from helpers.pretrained import read_pretrained
    from helpers.safetensors_io import read_safetensors
    torch.set_num_threads(1)

    def vm_kb():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1])

    base = vm_kb() * 1024
    limit = base + {allowed} * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    results = {{}}
    for name, (call, _) in json.loads(sys.argv[1]).items():
        try:
            eval(call)
            results[name] = ["no error", ""]
        except BaseException as e:
            results[name] = [type(e).__name__, str(e)[:500]]
    peak = int(open("/proc/self/status").read().split("VmPeak:")[1].split()[0]) * 1024
    print(json.dumps({{"results": results, "base_mb": base / 2**20, "peak_mb": peak / 2**20}}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_small_hostile_files_cannot_take_gigabytes(tmp_path):
    cases = hostile_files(tmp_path)
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert f.stat().st_size <= HOSTILE_MAX, f
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", CHILD.format(allowed=ALLOWED_MB), json.dumps(cases)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"hostile files: address space {report['base_mb']:.0f} MB after imports, peak {report['peak_mb']:.0f} MB")
    for name, (kind, message) in report["results"].items():
        assert kind == "ValueError", f"{name}: {kind}: {message}"
        assert cases[name][1] in message, f"{name}: the error does not name {cases[name][1]}: {message}"
        assert "weights_only=False" not in message
    assert report["peak_mb"] - report["base_mb"] <= ALLOWED_MB


# --- class 3: paths from file content stay in the cache --------------------------------------

def hf_repo(root: Path) -> Path:
    repo = root / "models--openai-community--gpt2"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    write_safetensors(snap / "model.safetensors", tiny_gpt2_tensors())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return repo


def test_hf_cache_layout_loads(tmp_path):
    model = load_gpt2(hf_repo(tmp_path))
    assert model.config.n_layers == 1 and model.config.d_model == 4


@pytest.mark.parametrize("ref", ["../../outside", "/etc", "..", "abc123/../../../outside", "a\\..\\..\\x"])
def test_a_ref_cannot_lead_outside_the_snapshots(tmp_path, ref):
    repo = hf_repo(tmp_path / "cache")
    outside = tmp_path / "outside"
    outside.mkdir()
    write_safetensors(outside / "model.safetensors", tiny_gpt2_tensors(n_layers=2))
    (repo / "refs" / "main").write_text(ref)
    with pytest.raises(ValueError, match="refusing to follow it"):
        load_gpt2(repo)


def test_a_snapshot_link_out_of_the_cache_is_refused(tmp_path):
    repo = hf_repo(tmp_path / "cache")
    outside = tmp_path / "elsewhere.safetensors"
    write_safetensors(outside, tiny_gpt2_tensors(n_layers=2))
    target = repo / "snapshots" / "abc123" / "model.safetensors"
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(ValueError, match="leads outside the cache folder"):
        load_gpt2(repo)
    # The normal layout: snapshot files are links into the repo's own blobs/ folder.
    (repo / "blobs").mkdir()
    blob = repo / "blobs" / "deadbeef"
    write_safetensors(blob, tiny_gpt2_tensors())
    target.unlink()
    target.symlink_to(Path("..") / ".." / "blobs" / "deadbeef")
    assert load_gpt2(repo).config.n_layers == 1


def test_a_snapshot_link_that_is_a_folder_outside_is_not_chosen(tmp_path):
    repo = hf_repo(tmp_path / "cache")
    (repo / "refs" / "main").unlink()
    (tmp_path / "evil").mkdir()
    (repo / "snapshots" / "evil").symlink_to(tmp_path / "evil")
    assert load_gpt2(repo).config.n_layers == 1  # the one real snapshot is used


# --- class 4: refusals name the file and never teach the unsafe option ------------------------

class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("loader", ["gpt2", "pretrained", "checkpoint"])
def test_a_pickle_with_code_is_refused_without_advice_to_turn_the_safety_off(tmp_path, loader):
    name = {"gpt2": "pytorch_model.bin", "pretrained": "p.pt", "checkpoint": "c.pt"}[loader]
    path = tmp_path / name
    torch.save({"wte.weight": torch.zeros(2), "x": Payload()}, path)
    with pytest.raises(ValueError) as info:
        if loader == "gpt2":
            read_state_dict(path)
        elif loader == "pretrained":
            read_pretrained(path)
        else:
            load_checkpoint(path, torch.nn.Linear(2, 2))
    message = str(info.value)
    assert str(path) in message and "nothing in it was run" in message
    assert "weights_only=False" not in message and "can still be loaded" not in message
    assert "posix.system" in message or "os.system" in message or "nt.system" in message


def test_damaged_text_files_name_the_file(tmp_path):
    g = tmp_path / "gpt2"
    g.mkdir()
    write_safetensors(g / "model.safetensors", tiny_gpt2_tensors())
    cfg = g / "config.json"
    for text, words in (("{not json", "invalid JSON"), ('{"n_layer": NaN}', "NaN"),
                        ('{"n_layer": 1, "n_layer": 2}', "twice"), ("[1]", "must be a dict"),
                        ('{"vocab_size": "3", "n_positions": 2, "n_embd": 4, "n_head": 1, "n_layer": 1}',
                         "'vocab_size' must be an integer")):
        cfg.write_text(text)
        with pytest.raises((ValueError, TypeError)) as info:
            load_gpt2(g)
        assert str(cfg) in str(info.value) or "hf must be a dict" in str(info.value), str(info.value)
        assert words in str(info.value), str(info.value)
    cfg.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ValueError, match=r"config\.json is not a GPT-2 config\.json: byte 0 is not UTF-8"):
        load_gpt2(g)
    vocab, merges = tmp_path / "vocab.json", tmp_path / "merges.txt"
    vocab.write_text("{")
    merges.write_text("#version: 0.2\n")
    with pytest.raises(ValueError, match=r"vocab\.json is not a GPT-2 vocab\.json"):
        GPT2Tokenizer.from_files(vocab, merges)
    vocab.write_text(json.dumps({chr(c): i for i, c in enumerate(range(0x100, 0x200))}))
    merges.write_bytes(b"#version: 0.2\n\xff \xfe\n")
    with pytest.raises(ValueError, match=r"merges\.txt is not a GPT-2 merges\.txt: byte 14 is not UTF-8"):
        GPT2Tokenizer.from_files(vocab, merges)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match=r"junk\.bin is not a readable PyTorch weights file"):
        read_state_dict(junk)
    tok = tmp_path / "tok.json"
    tok.write_text('{"type": "char", "version": 1, "chars": ["a"], "chars": ["b"]}')
    with pytest.raises(ValueError, match=r"tok\.json.*twice"):
        CharTokenizer.load(tok)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    import signal

    def on_alarm(signum, frame):
        raise TimeoutError("the loader waited on a FIFO")

    fifo, tok = tmp_path / "model.safetensors", tmp_path / "tok.json"
    os.mkfifo(fifo)
    os.mkfifo(tok)
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 5.0)  # fail, not hang, if open() blocks
    try:
        with pytest.raises(ValueError, match="not a regular file"):
            read_safetensors(fifo)
        with pytest.raises(ValueError, match="not a regular file"):
            WordTokenizer.load(tok)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_pretrained_hashes_the_bytes_it_loads(tmp_path, monkeypatch):
    """The file is read once: swapping it after the hash check cannot slip another model in."""
    import helpers.pretrained as pretrained

    tok = CharTokenizer(["a", "b"])
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=2, block_size=4, d_model=8, n_heads=2, n_layers=1))
    good = save_pretrained(tmp_path / "p.pt", model, tok)
    other = GPT(GPTConfig(vocab_size=2, block_size=4, d_model=8, n_heads=2, n_layers=1))
    save_pretrained(tmp_path / "evil.pt", other, tok)
    real_load = pretrained.torch_load

    def swap_then_load(data, *args):  # an attacker replaces the file right after it was hashed
        (tmp_path / "evil.pt").replace(tmp_path / "p.pt")
        return real_load(data, *args)

    monkeypatch.setattr(pretrained, "torch_load", swap_then_load)
    loaded, _, _ = read_pretrained(tmp_path / "p.pt", good)
    assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight.half().float())


# --- class 5: saving keeps what it should -------------------------------------------------------

@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("save", ["atomic_write", "checkpoint", "tokenizer", "pretrained"])
def test_a_save_over_a_private_file_keeps_it_private(tmp_path, save):
    path = tmp_path / "private.bin"
    path.write_bytes(b"old")
    os.chmod(path, 0o600)
    if save == "atomic_write":
        with atomic_write(path) as f:
            f.write(b"new")
    elif save == "checkpoint":
        save_checkpoint(path, torch.nn.Linear(2, 2))
    elif save == "tokenizer":
        CharTokenizer(["a"]).save(path)
    else:
        tok = CharTokenizer(["a", "b"])
        save_pretrained(path, GPT(GPTConfig(vocab_size=2, block_size=4, d_model=8, n_heads=2, n_layers=1)), tok)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() != b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["private.bin"]  # no temp file left


def test_a_long_legal_file_name_can_be_saved(tmp_path):
    for name in ("a" * 255, "é" * 127 + ".", "模" * 85):  # 255, 255 and 255 bytes in UTF-8
        path = tmp_path / name
        assert len(os.fsencode(path.name)) == 255
        CharTokenizer(["x", "y"]).save(path)
        assert CharTokenizer.load(path).chars == ["x", "y"]
        save_checkpoint(path, torch.nn.Linear(1, 1))
        path.unlink()


def test_bpe_trained_with_gpt2_pattern_round_trips(tmp_path):
    text = "Hello world, hello 世界! It's 2024 — tokens: 123 and   spaces\n"
    tok = BPETokenizer.train(text * 3, vocab_size=280, pattern=gpt2_pattern())
    tok.save(tmp_path / "gpt2_bpe.json")
    back = BPETokenizer.load(tmp_path / "gpt2_bpe.json")
    assert back.merges == tok.merges and back.pattern == tok.pattern
    assert back.encode(text) == tok.encode(text) and back.decode(back.encode(text)) == text


def test_save_refuses_a_pattern_load_would_refuse(tmp_path):
    path = tmp_path / "tok.json"
    path.write_text("keep")
    with pytest.raises(ValueError, match="split pattern is not one of the known"):
        BPETokenizer(pattern=r"(a+)+$").save(path)
    assert path.read_text() == "keep"
