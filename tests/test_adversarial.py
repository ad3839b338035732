"""Adversarial tests (issue 16): hostile arguments, damaged files, failing writes.

The contract checked here for the public API: every call either returns a correct result
(no NaN) or raises ValueError/TypeError whose message names the offending parameter;
never another exception, never a hang (each call runs under a time limit), and a save
that fails leaves the old file intact and no temporary file behind.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import enum
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import helpers
from helpers import (
    GPT,
    BPETokenizer,
    CharTokenizer,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    GPTConfig,
    MultiHeadAttention,
    TrainConfig,
    Transformer,
    WordTokenizer,
    load_checkpoint,
    save_checkpoint,
)
from helpers.attention_plots import attention_heads_figure, token_labels
from helpers.bpe import SPLIT_PATTERN
from helpers.embeddings import TokenEmbedding
from helpers.fileio import atomic_write
from helpers.plots import figure_to_png, heatmap, loss_curves
from helpers.positional import relative_rotation
from helpers.tokenizers import check_ids
from helpers.training import History, cosine_lr, estimate_loss, train, train_step
from helpers.widgets import attention_explorer, pe_explorer

torch.set_num_threads(1)  # the project's rule; tiny ops are slower with threads on a busy machine
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ID_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
BAD_ID_DTYPES = [torch.uint16, torch.uint32, torch.uint64]


@contextlib.contextmanager
def time_limit(seconds: float = 5.0):
    """Fail (not hang) when the block runs longer than ``seconds``."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir() if p.name.endswith(".tmp"))


def tiny_gpt(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, d_model=8, n_heads=2, n_layers=1, **kw))


# --- checkpoints: what save accepts, load accepts -------------------------------------------------


class Mode(str, enum.Enum):
    FAST = "fast"


class Level(enum.IntEnum):
    HIGH = 3


Point = collections.namedtuple("Point", "x y")


class Opaque:
    pass


@dataclasses.dataclass
class Cfg:
    width: int = 4
    rate: float = 0.5


def plain(value):
    """What a meta value is expected to come back as."""
    if dataclasses.is_dataclass(value):
        return plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    return value


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8),
    st.sampled_from([np.float64(1.5), np.float32(0.25), np.int64(-3), np.int8(7), np.bool_(True), Mode.FAST,
                     Level.HIGH, torch.tensor([1.0, 2.0]), torch.arange(3, dtype=torch.int16), Cfg()]),
)
hostile_leaves = st.sampled_from([{1, 2}, b"raw", object(), np.array([1.0, 2.0]), 1 + 2j, Path("x"), print,
                                  Opaque()])
metas = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner, inner), st.builds(Point, inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-5, 5)), inner, max_size=3),
        st.builds(collections.OrderedDict, st.dictionaries(st.text(max_size=4), inner, max_size=2)),
    ),
    max_leaves=8,
)


@FAST
@given(meta=metas, extra=st.one_of(st.none(), hostile_leaves))
def test_save_refuses_what_load_would_refuse(tmp_path_factory, meta, extra):
    """Round trip: a meta that saves loads back as its plain equivalent; else save raises and keeps the old file."""
    d = tmp_path_factory.mktemp("ck")
    path = save_checkpoint(d / "ck.pt", nn.Linear(2, 2), old=True)
    before = path.read_bytes()
    payload = {"m": meta} if extra is None else {"m": meta, "bad": [extra]}
    try:
        with time_limit():
            save_checkpoint(path, nn.Linear(2, 2), **payload)
    except (TypeError, ValueError) as e:
        assert extra is not None or "meta" in str(e), e
        assert path.read_bytes() == before
    else:
        assert extra is None, "a hostile meta value was saved"
        assert same(load_checkpoint(path, nn.Linear(2, 2)), plain(payload))
    assert leftovers(d) == []


def test_issue_examples_round_trip(tmp_path):
    losses = np.array([2.0, 1.0])
    path = save_checkpoint(tmp_path / "ck.pt", nn.Linear(2, 2), best=np.mean(losses), mode=Mode.FAST, level=Level.HIGH,
                           size=torch.Size([2, 3]), where=Point(1, 2))  # fmt: skip
    meta = load_checkpoint(path, nn.Linear(2, 2))
    assert meta == {"best": 1.5, "mode": "fast", "level": 3, "size": torch.Size([2, 3]), "where": (1, 2)}
    assert type(meta["best"]) is float and type(meta["mode"]) is str and type(meta["level"]) is int


class WithState(nn.Linear):
    def __init__(self, state):
        super().__init__(2, 2)
        self.state = state

    def get_extra_state(self):
        return self.state

    def set_extra_state(self, state):
        self.state = state


def test_extra_state_plain_round_trips_and_objects_are_refused_at_save(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", WithState({"calls": [1, 2], "name": "x"}))
    target = WithState(None)
    load_checkpoint(path, target)
    assert target.state == {"calls": [1, 2], "name": "x"}
    before = path.read_bytes()
    for state in (Opaque(), lambda: 1):
        with pytest.raises(ValueError, match="save_checkpoint refused"):
            save_checkpoint(path, WithState(state))
        assert path.read_bytes() == before and leftovers(tmp_path) == []


def test_optimizer_of_another_class_is_refused_on_load(tmp_path):
    model = nn.Linear(2, 2)
    path = save_checkpoint(tmp_path / "ck.pt", model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="SGD.*AdamW"):
        load_checkpoint(path, model, torch.optim.AdamW(model.parameters()))
    for bad in ("adamw", 1, torch.optim.AdamW):
        with pytest.raises(TypeError, match="optimizer"):
            load_checkpoint(path, model, bad)
        with pytest.raises(TypeError, match="optimizer"):
            save_checkpoint(path, model, bad)


@pytest.mark.parametrize("field, value", [("model", [1, 2]), ("meta", "x"), ("optimizer", 3), ("model", None),
                                          ("optimizer_type", 5)])
def test_damaged_checkpoint_fields_are_named(tmp_path, field, value):
    payload = {"format": "helpers-checkpoint/1", "model": nn.Linear(2, 2).state_dict(), "optimizer": None,
               "meta": {}, field: value}  # fmt: skip
    torch.save(payload, tmp_path / "ck.pt")
    with pytest.raises(ValueError, match=f"ck.pt.*{field}"):
        load_checkpoint(tmp_path / "ck.pt", nn.Linear(2, 2))


@FAST
@given(cut=st.floats(0.0, 0.999), flips=st.lists(st.tuples(st.floats(0, 0.999), st.integers(1, 255)), max_size=3))
def test_truncated_or_flipped_checkpoints_raise_value_errors(tmp_path_factory, cut, flips):
    d = tmp_path_factory.mktemp("ck")
    model, opt = nn.Linear(3, 2), None
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(1, 3)).sum().backward()
    opt.step()
    path = save_checkpoint(d / "ck.pt", model, opt, step=1)
    raw = bytearray(path.read_bytes())
    for where, xor in flips:
        raw[int(where * len(raw))] ^= xor
    if not flips:
        raw = raw[: int(cut * len(raw))]
    path.write_bytes(bytes(raw))
    try:
        with time_limit():
            load_checkpoint(path, nn.Linear(3, 2), torch.optim.SGD(nn.Linear(3, 2).parameters(), lr=0.1, momentum=0.9))
    except ValueError as e:
        assert "ck.pt" in str(e)
    else:
        assert flips, "a truncated file loaded"


@pytest.mark.parametrize("path, error", [(None, TypeError), (3, TypeError), (b"x.pt", TypeError), ("", ValueError),
                                         (".", ValueError)])
def test_checkpoint_path_of_the_wrong_kind(path, error):
    with pytest.raises(error, match="path"):
        save_checkpoint(path, nn.Linear(2, 2))
    with pytest.raises(error, match="path"):
        load_checkpoint(path, nn.Linear(2, 2))


# --- atomic writes and fault injection ------------------------------------------------------------


SAVERS = {
    "checkpoint": lambda p, n: save_checkpoint(p, nn.Linear(n, 4)),
    "char": lambda p, n: CharTokenizer([chr(0x4E00 + i) for i in range(n)]).save(p),
    "word": lambda p, n: WordTokenizer([f"w{i}" for i in range(n)]).save(p),
    "bpe": lambda p, n: BPETokenizer([(97, 97)] * 1 + [(256, 97)] * (n - 1)).save(p),
}


@pytest.mark.parametrize("kind", SAVERS)
def test_failed_replace_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch, kind):
    path = tmp_path / "out.bin"
    SAVERS[kind](path, 4)
    before = path.read_bytes()

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="No space"):
        SAVERS[kind](path, 40)
    monkeypatch.undo()
    assert path.read_bytes() == before and leftovers(tmp_path) == []


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupted_write_keeps_the_old_file(tmp_path, exc):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(exc), atomic_write(path, "w") as f:
        f.write("half of the new")
        raise exc()
    assert path.read_text() == "old" and leftovers(tmp_path) == []


def test_write_failing_midway_by_file_size_limit(tmp_path):
    """A real failing write: RLIMIT_FSIZE in a subprocess makes write() fail with EFBIG midway."""
    resource = pytest.importorskip("resource")
    paths = {kind: tmp_path / f"{kind}.out" for kind in SAVERS}
    for kind, path in paths.items():
        SAVERS[kind](path, 3)
    before = {kind: path.read_bytes() for kind, path in paths.items()}
    code = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from test_adversarial import SAVERS
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG, not a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        for kind, path in {({k: str(p) for k, p in paths.items()})!r}.items():
            try:
                SAVERS[kind](path, 3000)  # far more than 4096 bytes
            except OSError as e:
                print(kind, "failed with", type(e).__name__, e.errno)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(helpers.__file__).resolve().parent.parent)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("failed with OSError 27") == len(SAVERS), result.stdout  # 27: EFBIG
    assert all(paths[kind].read_bytes() == before[kind] for kind in SAVERS)
    assert leftovers(tmp_path) == [] and resource.RLIMIT_FSIZE


def test_a_pickler_failing_midway_keeps_the_old_file(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", nn.Linear(2, 2))
    before = path.read_bytes()
    real = atomic_write

    @contextlib.contextmanager
    def failing(*args, **kwargs):
        with real(*args, **kwargs) as f:
            f.write(b"half a checkpoint")
            raise OSError(28, "No space left on device")
            yield f

    monkeypatch.setattr("helpers.checkpoint.atomic_write", failing)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(path, nn.Linear(20, 20))
    assert path.read_bytes() == before and leftovers(tmp_path) == []


def test_unwritable_places_are_reported_with_the_path(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match="file"):
        save_checkpoint(blocker / "ck.pt", nn.Linear(2, 2))
    with pytest.raises(NotADirectoryError, match="file"):
        CharTokenizer.from_text("ab").save(blocker / "sub" / "tok.json")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", denied)
    with pytest.raises(PermissionError, match=r"ck\.pt.*writable"):
        save_checkpoint(tmp_path / "ck.pt", nn.Linear(2, 2))
    assert leftovers(tmp_path) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="ck.pt"):
            save_checkpoint(ro / "ck.pt", nn.Linear(2, 2))
    finally:
        ro.chmod(0o700)


def test_saved_files_get_ordinary_permissions(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", nn.Linear(2, 2))
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# --- tokenizer files are untrusted ---------------------------------------------------------------


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_catastrophic_pattern_is_refused_not_run(tmp_path):
    path = write_json(tmp_path / "tok.json", {"type": "bpe", "version": 1, "pattern": "(a+)+$", "merges": []})
    with time_limit(2.0), pytest.raises(ValueError, match="tok.json.*pattern"):
        BPETokenizer.load(path)
    for ok in (SPLIT_PATTERN, None):
        write_json(path, {"type": "bpe", "version": 1, "pattern": ok, "merges": [[97, 97]]})
        assert BPETokenizer.load(path).encode("aa") == [256]


def test_doubling_merges_cannot_exhaust_memory(tmp_path):
    merges = [[97, 97]] + [[256 + k, 256 + k] for k in range(60)]  # token k: 2**(k+1) bytes
    path = write_json(tmp_path / "tok.json", {"type": "bpe", "version": 1, "pattern": None, "merges": merges})
    with time_limit(2.0), pytest.raises(ValueError, match="tok.json.*merges.*bytes"):
        BPETokenizer.load(path)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-300, 600), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=10,
)
VALID = {
    "char": {"type": "char", "version": 1, "chars": ["a", "b"]},
    "word": {"type": "word", "version": 1, "vocab": ["a", "<unk>"], "unk_token": "<unk>"},
    "bpe": {"type": "bpe", "version": 1, "pattern": SPLIT_PATTERN, "merges": [[97, 98]]},
}
LOADERS = {"char": CharTokenizer, "word": WordTokenizer, "bpe": BPETokenizer}


@FAST
@given(kind=st.sampled_from(sorted(VALID)), field=st.sampled_from(["chars", "vocab", "unk_token", "pattern", "merges",
                                                                    "type", "version"]), value=json_values)
def test_damaged_tokenizer_files_raise_value_errors_naming_the_file(tmp_path_factory, kind, field, value):
    path = write_json(tmp_path_factory.mktemp("tok") / "tok.json", {**VALID[kind], field: value})
    try:
        with time_limit():
            tok = LOADERS[kind].load(path)
    except ValueError as e:
        assert "tok.json" in str(e), e
    else:  # what loads must work (a damaged "chars" can still be a valid vocabulary without "a")
        text = "a" if kind != "char" or "a" in tok.chars else "".join(tok.chars[:3])
        assert tok.decode(tok.encode(text)) == text or kind == "word"


@pytest.mark.parametrize("raw", [b"\xff\xfe garbage", b'{"type": "char", "version": 1, "chars": ["a"', b"[" * 100000,
                                 b"", b"null"])
def test_unreadable_tokenizer_files(tmp_path, raw):
    path = tmp_path / "tok.json"
    path.write_bytes(raw)
    for cls in LOADERS.values():
        with time_limit(), pytest.raises(ValueError, match="tok.json"):
            cls.load(path)


def test_tokenizer_load_path_of_the_wrong_kind(tmp_path):
    with pytest.raises(TypeError, match="path"):
        CharTokenizer.load(None)
    with pytest.raises(ValueError, match="directory"):
        CharTokenizer.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        CharTokenizer.load(tmp_path / "missing.json")


# --- arguments of the wrong kind ------------------------------------------------------------------


def test_a_str_where_a_list_is_expected():
    with pytest.raises(TypeError, match="specials"):
        WordTokenizer.from_texts(["a b"], specials="<eos>")
    with pytest.raises(TypeError, match="vocab"):
        WordTokenizer("abc")
    with pytest.raises(TypeError, match="merges"):
        BPETokenizer("ab")
    with pytest.raises(TypeError, match="splits"):
        estimate_loss(nn.Linear(2, 2), lambda s: torch.zeros(2), 1, loss_fn=lambda m, b: b.sum(), splits="train")
    assert WordTokenizer.from_texts(["a b"], specials=["<eos>"]).vocab == ["<eos>", "a", "b"]


@pytest.mark.parametrize("eps", [-1e-5, 0.0, float("nan"), float("inf"), True, "1e-5", None])
@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer])
def test_layer_norm_eps_must_be_positive(cls, eps):
    with pytest.raises((TypeError, ValueError), match="layer_norm_eps"):
        cls(8, 2, 16, layer_norm_eps=eps)


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer, Encoder, Decoder])
def test_flags_must_be_bools(cls):
    args = (1, 8, 2, 16) if cls in (Encoder, Decoder) else (8, 2, 16)
    for name in ("norm_first", "bias"):
        with pytest.raises(TypeError, match=name):
            cls(*args, **{name: "False"})


def test_configs_are_validated_again_when_edited():
    cfg = GPTConfig(vocab_size=11, block_size=8, d_model=8, n_heads=2)
    with pytest.raises(ValueError, match="n_heads"):
        cfg.n_heads = 3
    assert cfg.n_heads == 2  # the refused edit was undone
    cfg.n_heads = 4
    assert GPT(cfg).blocks[0].self_attn.n_heads == 4
    tc = TrainConfig()
    for field, bad in (("betas", 0.9), ("betas", (0.9,)), ("lr", -1.0), ("warmup_steps", 10**6), ("progress", "no")):
        with pytest.raises((TypeError, ValueError), match=field):
            setattr(tc, field, bad)
    assert tc == TrainConfig()
    with pytest.raises((TypeError, ValueError), match="betas"):
        TrainConfig(betas=0.9)
    assert dataclasses.asdict(tc) == dataclasses.asdict(TrainConfig())  # no hidden field leaks out
    clone = copy.deepcopy(cfg)
    assert clone == cfg and pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(ValueError, match="d_model"):
        clone.d_model = 0  # a copy is guarded too


train_fields = {
    "max_steps": st.one_of(st.integers(-2, 10), st.floats(), st.none(), st.booleans()),
    "lr": st.one_of(st.floats(), st.integers(-1, 2), st.none(), st.text(max_size=2)),
    "min_lr": st.one_of(st.none(), st.floats()),
    "warmup_steps": st.one_of(st.integers(-2, 12), st.floats()),
    "betas": st.one_of(st.floats(), st.tuples(st.floats(), st.floats()), st.lists(st.floats(0, 1), max_size=3),
                       st.text(max_size=2)),
    "grad_clip": st.one_of(st.none(), st.floats(), st.booleans()),
    "patience": st.one_of(st.none(), st.integers(-1, 3), st.floats()),
    "restore_best": st.one_of(st.booleans(), st.integers(0, 1), st.text(max_size=2)),
}


@FAST
@given(field=st.sampled_from(sorted(train_fields)), data=st.data())
def test_train_config_fields_accept_valid_or_name_themselves(field, data):
    value = data.draw(train_fields[field])
    try:
        cfg = TrainConfig(**{field: value})
    except (TypeError, ValueError) as e:
        assert field in str(e) or (field in ("min_lr", "warmup_steps") and "must" in str(e)), e
    else:
        assert getattr(cfg, field) == value
        if isinstance(value, float):
            assert math.isfinite(value)


def test_train_loop_arguments_are_checked_up_front():
    model = tiny_gpt()
    batch = lambda split: (torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long))  # noqa: E731
    cfg = TrainConfig(max_steps=1, eval_iters=1, progress=False)
    with pytest.raises(TypeError, match="model"):
        train(None, batch, cfg)
    with pytest.raises(TypeError, match="get_batch"):
        train(model, None, cfg)
    with pytest.raises(TypeError, match="optimizer"):
        train(model, batch, cfg, optimizer="adamw")
    with pytest.raises(TypeError, match="loss_fn"):
        train(model, batch, cfg, loss_fn="mse")
    with pytest.raises(TypeError, match="optimizer"):
        train_step(model, batch("train"), "adamw")
    with pytest.raises(TypeError, match="model"):
        estimate_loss(None, batch)
    assert train(model, batch, cfg).steps == 1


# --- integer ids of every dtype -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ID_DTYPES)
def test_every_integer_id_dtype_gives_the_int64_result(dtype):
    torch.manual_seed(0)
    model = tiny_gpt().eval()
    idx = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 10]])
    logits, loss = model(idx.to(dtype), idx.flip(1).to(dtype))
    ref_logits, ref_loss = model(idx, idx.flip(1))
    assert torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss)
    assert torch.equal(model.attention_weights(idx.to(dtype)), model.attention_weights(idx))
    g = torch.Generator().manual_seed(0)
    out = model.generate(idx.to(dtype), 3, generator=g)
    assert out.dtype == torch.int64 and torch.equal(out, model.generate(idx, 3, generator=torch.Generator().manual_seed(0)))
    tr = Transformer(11, 11, d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0, pad_id=0).eval()
    assert torch.equal(tr(idx.to(dtype), idx.to(dtype)), tr(idx, idx))
    assert torch.equal(tr.greedy_decode(idx.to(dtype), 4, 1, 2), tr.greedy_decode(idx, 4, 1, 2))
    emb = TokenEmbedding(11, 4)
    assert torch.equal(emb(idx.to(dtype)), emb(idx))
    assert torch.equal(helpers.padding_mask(idx.to(dtype), 0), helpers.padding_mask(idx, 0))
    x, y = helpers.get_batch(torch.arange(10).to(dtype), 3, 2, generator=torch.Generator().manual_seed(1))
    assert x.dtype == y.dtype == torch.int64
    tok = CharTokenizer([chr(97 + i) for i in range(11)])
    assert tok.decode(idx[0].to(dtype)) == tok.decode(idx[0].numpy().astype(np.int16)) == "bcde"


@pytest.mark.parametrize("dtype", BAD_ID_DTYPES + [torch.bool, torch.float16])
def test_unsupported_id_dtypes_are_refused_by_name(dtype):
    idx = torch.ones(1, 3, dtype=dtype)
    with pytest.raises(TypeError, match="idx"):
        tiny_gpt()(idx)
    with pytest.raises(TypeError, match="targets"):
        tiny_gpt()(torch.ones(1, 3, dtype=torch.long), idx)
    with pytest.raises(TypeError, match="src"):
        Transformer(11, 11, d_model=8, n_heads=2, n_layers=1, d_ff=16)(idx, torch.ones(1, 3, dtype=torch.long))


@FAST
@given(ids=st.lists(st.integers(0, 99), max_size=20), kind=st.sampled_from(["list", "tuple", "np", "torch", "npscalars"]),
       dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8"]))
def test_check_ids_accepts_any_integer_container(ids, kind, dtype):
    if kind == "np":
        arg = np.array(ids, dtype=dtype)
    elif kind == "torch":
        arg = torch.tensor(ids, dtype=getattr(torch, dtype))
    elif kind == "npscalars":
        arg = [np.dtype(dtype).type(i) for i in ids]
    else:
        arg = list(ids) if kind == "list" else tuple(ids)
    out = check_ids(arg, 100)
    assert out == ids and all(type(i) is int for i in out)


@pytest.mark.parametrize("bad", [[1.0], [True], ["1"], [None], "12", 5, None, [np.float64(1)], [[1]]])
def test_check_ids_refuses_non_integers(bad):
    with pytest.raises(TypeError, match="ids"):
        check_ids(bad, 100)


# --- generate ------------------------------------------------------------------------------------


@FAST
@given(t=st.one_of(st.floats(), st.integers(-3, 3), st.none(), st.text(max_size=2), st.booleans()))
def test_generate_temperature_returns_valid_tokens_or_names_it(t):
    model = tiny_gpt()
    try:
        with time_limit():
            out = model.generate(torch.tensor([[1, 2]]), 3, temperature=t, generator=torch.Generator().manual_seed(0))
    except (TypeError, ValueError) as e:
        assert "temperature" in str(e)
        assert not (isinstance(t, (int, float)) and not isinstance(t, bool) and 1e-4 <= t <= 1e6)
    else:
        assert out.shape == (1, 5) and int(out.min()) >= 0 and int(out.max()) < 11


def test_generate_tiny_temperature_from_the_issue_is_greedy_not_nan():
    model = tiny_gpt()
    tiny = model.generate(torch.tensor([[1]]), 4, temperature=1e-40, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tiny, model.generate(torch.tensor([[1]]), 4, top_k=1))


# --- float16 attention ----------------------------------------------------------------------------


@FAST
@given(magnitude=st.floats(20, 120), seed=st.integers(0, 100), head=st.sampled_from([8, 16, 32]))
def test_float16_step_by_step_attention_stays_finite_where_pytorch_does(magnitude, seed, head):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 5, head, generator=g) for _ in range(3))
    q = (q * magnitude).half()
    k = (k * magnitude).half()
    v = v.half()
    ref = F.scaled_dot_product_attention(q, k, v)
    out, w = helpers.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(ref).all()
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)


def test_float16_scores_beyond_65504_from_the_issue():
    q = torch.full((1, 1, 2, 16), 80.0, dtype=torch.float16)
    k = torch.full((1, 1, 2, 16), 80.0, dtype=torch.float16)  # q·k = 102,400 > 65,504; /4 fits
    v = torch.randn(1, 1, 2, 16).half()
    assert not torch.isfinite(q @ k.transpose(-2, -1)).all()  # the old order overflowed here
    out, _ = helpers.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-3, rtol=0)


def test_float16_multi_head_attention_paths_agree():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    with torch.no_grad():
        for p in (mha.q_proj, mha.k_proj):
            p.weight.mul_(60)
    mha = mha.half()
    x = torch.randn(2, 5, 16).half()
    fused = mha(x, x, x, is_causal=True)
    stepwise, _ = mha(x, x, x, is_causal=True, return_weights=True)
    assert torch.isfinite(fused).all() and torch.isfinite(stepwise).all()
    torch.testing.assert_close(stepwise.float(), fused.float(), atol=2e-2, rtol=0)


# --- layers and from_torch ------------------------------------------------------------------------


def test_layers_check_width_and_dtype_of_their_input():
    ff = FeedForward(8, 16)
    for layer, call in ((ff, lambda x: ff(x)),
                        (EncoderLayer(8, 2, 16, norm_first=True), None),
                        (EncoderLayer(8, 2, 16), None)):  # fmt: skip
        call = call or layer
        with pytest.raises(ValueError, match="x .*8"):
            call(torch.randn(1, 3, 7))
        with pytest.raises(TypeError, match="x .*dtype"):
            call(torch.randn(1, 3, 8, dtype=torch.float64))
        with pytest.raises(TypeError, match="x"):
            call(torch.ones(1, 3, 8, dtype=torch.long))
    dec = DecoderLayer(8, 2, 16, norm_first=True)
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(1, 3, 8), torch.randn(1, 4, 6))
    with pytest.raises(TypeError, match="memory"):
        dec(torch.randn(1, 3, 8), torch.randn(1, 4, 8).double())
    assert ff(torch.randn(5, 8)).shape == (5, 8)  # any leading shape still works


@pytest.mark.parametrize("norm_first", [False, True])
def test_from_torch_without_biases(norm_first):
    torch.manual_seed(0)
    kw = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, batch_first=True, bias=False, norm_first=norm_first)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), 2, norm=nn.LayerNorm(8, bias=False),
                                enable_nested_tensor=False).eval()  # fmt: skip
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), 2, norm=nn.LayerNorm(8, bias=False)).eval()
    x, mem = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    torch.testing.assert_close(Encoder.from_torch(enc).eval()(x), enc(x), atol=1e-5, rtol=0)
    torch.testing.assert_close(Decoder.from_torch(dec).eval()(x, mem), dec(x, mem), atol=1e-5, rtol=0)
    torch.testing.assert_close(EncoderLayer.from_torch(enc.layers[0]).eval()(x), enc.layers[0](x), atol=1e-5, rtol=0)


def test_from_torch_of_empty_stacks():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    with pytest.raises(ValueError, match="no layers"):
        Encoder.from_torch(nn.TransformerEncoder(layer, 0, enable_nested_tensor=False))
    with pytest.raises(ValueError, match="no layers"):
        Decoder.from_torch(nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, batch_first=True), 0))


# --- plots, widgets, seeds ------------------------------------------------------------------------


def test_plot_helpers_name_the_argument():
    with pytest.raises(TypeError, match="data"):
        heatmap("abc")
    with pytest.raises(TypeError, match="data"):
        heatmap([[1, "a"], [2, 3]])
    with pytest.raises(ValueError, match="data"):
        heatmap([1, 2, 3])
    with pytest.raises(TypeError, match="weights"):
        attention_heads_figure("xyz", ["a"])
    with pytest.raises((TypeError, ValueError), match="dpi"):
        figure_to_png(heatmap([[1.0]]), dpi=0)
    with pytest.raises(TypeError, match="baseline"):
        loss_curves(History([0], [1.0], [1.0]), baseline="2")
    with pytest.raises(TypeError, match="train_loss"):
        loss_curves(History([0], ["1.0"], [1.0]))


def test_pe_widget_puts_back_a_refused_value():
    from helpers.widgets import pe_explorer

    ex = pe_explorer(seq_len=16, d_model=16)
    state = repr(ex)
    table = ex.table.clone()
    with pytest.raises(ValueError, match="d_model"):
        ex.controls["d_model"].value = 7  # the slider's step is 2, but code can set anything
    assert repr(ex) == state and torch.equal(ex.table, table)
    ex.controls["d_model"].value = 8  # and it still works afterwards
    assert ex.table.shape == (16, 8)


@pytest.mark.parametrize("seed", [2**64, 2**63, -1, 1.5, "0", None, True])
def test_seeds_out_of_range(seed):
    from helpers.widgets.attention import build_demo_model

    with pytest.raises((TypeError, ValueError), match="seed"):
        helpers.set_seed(seed)
    with pytest.raises((TypeError, ValueError), match="seed"):
        build_demo_model(["a b"], seed=seed)


# --- a hostile-argument sweep over the public API -------------------------------------------------


HOSTILE = [None, "x", "", -1, 0, 2**64, float("nan"), float("inf"), -0.5, True, [], [1], object(), np.int64(2),
           torch.tensor(1.0), torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, 8)]


def _qkv():
    torch.manual_seed(0)
    return {"q": torch.randn(1, 2, 3, 4), "k": torch.randn(1, 2, 3, 4), "v": torch.randn(1, 2, 3, 4)}


IDX = torch.tensor([[1, 2]])
X = torch.randn(1, 3, 8)


def _gpt_forward(idx=IDX, targets=None):
    return tiny_gpt()(idx, targets)


def _generate(idx=IDX, max_new_tokens=2, temperature=1.0, top_k=None, generator=None):
    return tiny_gpt().generate(idx, max_new_tokens, temperature, top_k, generator)


def _mha_forward(query=X, key=X, value=X, mask=None, return_weights=False, is_causal=False):
    torch.manual_seed(0)
    return MultiHeadAttention(8, 2)(query, key, value, mask, return_weights, is_causal)


SRC, TGT = torch.tensor([[1, 2, 0]]), torch.tensor([[1, 3]])


def _transformer_forward(src=SRC, tgt=TGT, src_mask=None, tgt_mask=None, memory_mask=None):
    torch.manual_seed(0)
    model = Transformer(11, 11, d_model=8, n_heads=2, n_layers=1, d_ff=16, pad_id=0)
    return model(src, tgt, src_mask, tgt_mask, memory_mask)


def _greedy(src=IDX, max_len=3, bos_id=1, eos_id=2):
    return Transformer(11, 11, d_model=8, n_heads=2, n_layers=1, d_ff=16).greedy_decode(src, max_len, bos_id, eos_id)


API = {
    "causal_mask": (helpers.causal_mask, {"T": 3}),
    "padding_mask": (helpers.padding_mask, {"ids": torch.tensor([[1, 0]]), "pad_id": 0}),
    "scaled_dot_product_attention": (helpers.scaled_dot_product_attention,
                                     {**_qkv(), "mask": None, "dropout_p": 0.0, "scale": None}),
    "MultiHeadAttention": (MultiHeadAttention, {"d_model": 8, "n_heads": 2, "dropout": 0.0, "bias": True}),
    "MultiHeadAttention.forward": (_mha_forward, {"query": torch.randn(1, 3, 8), "mask": None,
                                                  "return_weights": False, "is_causal": False}),
    "FeedForward": (FeedForward, {"d_model": 8, "d_ff": 16, "dropout": 0.0, "activation": "relu", "bias": True}),
    "EncoderLayer": (EncoderLayer, {"d_model": 8, "n_heads": 2, "d_ff": 16, "dropout": 0.1, "norm_first": False,
                                    "activation": "relu", "layer_norm_eps": 1e-5, "bias": True}),
    "DecoderLayer": (DecoderLayer, {"d_model": 8, "n_heads": 2, "d_ff": 16, "layer_norm_eps": 1e-5}),
    "Encoder": (Encoder, {"n_layers": 1, "d_model": 8, "n_heads": 2, "d_ff": 16, "final_norm": True}),
    "Decoder": (Decoder, {"n_layers": 1, "d_model": 8, "n_heads": 2, "d_ff": 16, "layer_norm_eps": 1e-5}),
    "GPTConfig": (GPTConfig, {"vocab_size": 11, "block_size": 8, "d_model": 8, "n_heads": 2, "n_layers": 1,
                              "d_ff": None, "dropout": 0.0, "positional": "learned", "tie_weights": True,
                              "bias": True}),
    "GPT.forward": (_gpt_forward, {"idx": torch.tensor([[1, 2]]), "targets": None}),
    "GPT.generate": (_generate, {"idx": torch.tensor([[1, 2]]), "max_new_tokens": 2, "temperature": 1.0,
                                 "top_k": None, "generator": None}),
    "Transformer": (Transformer, {"src_vocab": 11, "tgt_vocab": 11, "d_model": 8, "n_heads": 2, "n_layers": 1,
                                  "d_ff": 16, "max_len": 16, "pad_id": None, "activation": "relu"}),
    "Transformer.forward": (_transformer_forward, {"src": torch.tensor([[1, 2, 0]]), "tgt": torch.tensor([[1, 3]]),
                                                   "src_mask": None, "tgt_mask": None, "memory_mask": None}),
    "Transformer.greedy_decode": (_greedy, {"src": torch.tensor([[1, 2]]), "max_len": 3, "bos_id": 1, "eos_id": 2}),
    "TokenEmbedding": (TokenEmbedding, {"vocab_size": 11, "d_model": 4, "padding_idx": None}),
    "SinusoidalPositionalEncoding": (helpers.SinusoidalPositionalEncoding,
                                     {"d_model": 8, "max_len": 16, "base": 10000.0, "dropout": 0.0}),
    "LearnedPositionalEmbedding": (helpers.LearnedPositionalEmbedding, {"max_len": 16, "d_model": 8}),
    "sinusoidal_table": (helpers.sinusoidal_table, {"seq_len": 4, "d_model": 8, "base": 10000.0}),
    "get_batch": (helpers.get_batch, {"data": torch.arange(20), "block_size": 4, "batch_size": 2, "generator": None}),
    "train_val_split": (helpers.train_val_split, {"data": list(range(10)), "val_fraction": 0.2}),
    "load_corpus": (helpers.load_corpus, {"name": "pydoc"}),
    "set_seed": (helpers.set_seed, {"seed": 0, "threads": 1}),
    "count_parameters": (helpers.count_parameters, {"model": nn.Linear(2, 2)}),
    "parameter_breakdown": (helpers.parameter_breakdown, {"model": nn.Linear(2, 2)}),
    "check_close": (helpers.check_close, {"label": "x", "actual": [1.0], "expected": [1.0], "atol": 1e-6,
                                          "rtol": 0.0}),
    "CharTokenizer": (CharTokenizer, {"chars": ["a", "b"]}),
    "CharTokenizer.from_text": (CharTokenizer.from_text, {"text": "ab"}),
    "WordTokenizer": (WordTokenizer, {"vocab": ["a", "<unk>"], "unk_token": "<unk>"}),
    "WordTokenizer.from_texts": (WordTokenizer.from_texts, {"texts": ["a b"], "specials": ["<unk>"],
                                                            "unk_token": "<unk>"}),
    "BPETokenizer": (BPETokenizer, {"merges": [(97, 98)], "pattern": SPLIT_PATTERN}),
    "BPETokenizer.train": (BPETokenizer.train, {"text": "abab abab", "vocab_size": 258, "pattern": SPLIT_PATTERN}),
    "CharTokenizer.decode": (CharTokenizer(["a", "b"]).decode, {"ids": [0, 1]}),
    "BPETokenizer.encode": (BPETokenizer([(97, 98)]).encode, {"text": "ab"}),
    "TrainConfig": (TrainConfig, {"max_steps": 10, "lr": 1e-3, "min_lr": None, "warmup_steps": 0, "betas": (0.9, 0.99),
                                  "grad_clip": 1.0, "eval_interval": 5, "eval_iters": 2, "patience": None,
                                  "restore_best": False, "progress": False}),
    "heatmap": (heatmap, {"data": [[1.0, 2.0]], "title": None, "xticklabels": None, "cmap": "viridis", "vmin": None,
                          "annotate": False, "fmt": "{:.2f}", "colorbar": True, "figsize": (2.0, 2.0)}),
    "figure_to_png": (figure_to_png, {"fig": heatmap([[1.0]]), "dpi": 20}),
    "loss_curves": (loss_curves, {"history": History([0], [1.0], [1.0]), "baseline": None, "title": "t",
                                  "show_steps": True, "figsize": (2.0, 2.0)}),
    "attention_heads_figure": (attention_heads_figure, {"weights": torch.ones(1, 2, 2) / 2, "tokens": ["a", "b"],
                                                        "figsize": None}),
    "token_labels": (token_labels, {"tokens": ["a"]}),
    "get_batch:device": (helpers.get_batch, {"data": torch.arange(20), "block_size": 4, "batch_size": 2,
                                             "device": None}),
    "count_parameters:flags": (helpers.count_parameters, {"model": nn.Linear(2, 2), "non_embedding": False,
                                                          "trainable_only": False}),
    "check_close:quiet": (helpers.check_close, {"label": "x", "actual": [1.0], "expected": [1.0], "quiet": True}),
    "Transformer:flags": (Transformer, {"src_vocab": 11, "tgt_vocab": 11, "d_model": 8, "n_heads": 2, "n_layers": 1,
                                        "d_ff": 16, "norm_first": False, "share_embeddings": False,
                                        "tie_weights": False}),
    "estimate_loss": (estimate_loss, {"model": nn.Linear(2, 2), "get_batch": lambda s: torch.zeros(2), "eval_iters": 1,
                                      "loss_fn": lambda m, b: m(b).sum(), "splits": ("train",)}),
    "cosine_lr": (cosine_lr, {"step": 0, "config": TrainConfig()}),
    "pe_explorer": (pe_explorer, {"seq_len": 8, "d_model": 8, "base": 100.0, "dim": None, "position": None}),
    "attention_explorer": (attention_explorer, {"sentences": ["a b"], "d_model": 8, "n_heads": 2, "seed": 0,
                                                "width": 200, "height": 120}),
    "MultiHeadAttention.from_torch": (MultiHeadAttention.from_torch, {"m": nn.MultiheadAttention(8, 2, batch_first=True)}),
    "EncoderLayer.from_torch": (EncoderLayer.from_torch, {"m": nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)}),
    "Encoder.from_torch": (Encoder.from_torch, {"m": nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1, enable_nested_tensor=False)}),
    "relative_rotation": (relative_rotation, {"k": 1, "d_model": 4, "base": 10000.0}),
    "GPT": (GPT, {"config": GPTConfig(11, 8, 8, 2, 1)}),
    "BPETokenizer.decode": (BPETokenizer().decode, {"ids": [1]}),
    "BPETokenizer.token_bytes": (BPETokenizer().token_bytes, {"i": 1}),
    "WordTokenizer.token_to_id": (WordTokenizer(["a"]).token_to_id, {"token": "a"}),
    "WordTokenizer.id_to_token": (WordTokenizer(["a"]).id_to_token, {"i": 0}),
}
SWEEP = [(name, param) for name, (_, base) in API.items() for param in base]


@pytest.mark.parametrize("name, param", SWEEP, ids=[f"{n}:{p}" for n, p in SWEEP])
def test_hostile_argument_sweep(name, param):
    """Each hostile value for each parameter: a valid result, or TypeError/ValueError naming the parameter."""
    fn, base = API[name]
    escaped = []
    for bad in HOSTILE:
        try:
            with time_limit(), torch.no_grad(), contextlib.redirect_stdout(None):
                out = fn(**{**base, param: bad})
        except (TypeError, ValueError) as e:
            if param not in str(e):
                escaped.append(f"{bad!r}: {type(e).__name__} without the name: {e}")
        except Exception as e:  # noqa: BLE001 (that is the point: anything else is a failure)
            escaped.append(f"{bad!r}: {type(e).__name__}: {e}")
        else:
            if isinstance(base[param], bool) and not isinstance(bad, bool):
                escaped.append(f"{bad!r}: accepted for the flag {param} (a truthy str would be misread)")
            results = out if isinstance(out, tuple) else (out,)
            for r in results:
                if isinstance(r, torch.Tensor) and r.is_floating_point() and not torch.isfinite(r).all():
                    escaped.append(f"{bad!r}: returned non-finite values")
    assert not escaped, "\n".join(escaped)


def test_fileio_docstring_example_runs():
    import doctest

    import helpers.fileio

    result = doctest.testmod(helpers.fileio)
    assert result.attempted > 0 and result.failed == 0


def test_a_config_holds_only_its_fields():
    # Notebook 07 rebuilds configs with GPTConfig(**{**vars(cfg), "dropout": p}): no hidden state.
    cfg = GPTConfig(vocab_size=11, block_size=8, d_model=8, n_heads=2)
    assert set(vars(cfg)) == {f.name for f in dataclasses.fields(cfg)}
    assert GPTConfig(**{**vars(cfg), "dropout": 0.2}).dropout == 0.2
    assert set(vars(TrainConfig())) == {f.name for f in dataclasses.fields(TrainConfig)}
