"""helpers.pretrained: the shipped character model loads offline, safely, and is as good as its record."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import helpers.pretrained as pretrained
from helpers.data import document_starts, get_batch, load_corpus, train_val_split
from helpers.models import GPT, GPTConfig
from helpers.pretrained import PRETRAINED, load_pretrained, read_pretrained, save_pretrained
from helpers.tokenizers import CharTokenizer
from helpers.training import estimate_loss

ROOT = Path(__file__).resolve().parent.parent


def fixed_batch_loss(model, block, iters=50, batch=32):
    """The measurement tools/pretrain.py records: 50 fixed batches of 32 windows per split."""
    tok = CharTokenizer.from_text(load_corpus())
    train, val = train_val_split(torch.tensor(tok.encode(load_corpus())), 0.1, chunks=10)
    gen = torch.Generator().manual_seed(1234)
    batches = {s: [get_batch(d, block, batch, generator=gen) for _ in range(iters)]
               for s, d in (("train", train), ("val", val))}
    it = {s: iter(b) for s, b in batches.items()}
    return estimate_loss(model, lambda s: next(it[s]), eval_iters=iters)


def test_the_shipped_file_is_registered_and_not_ignored_by_git():
    filename, sha = PRETRAINED["char_gpt"]
    path = ROOT / "pretrained" / filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert path.stat().st_size < 5e6  # small enough for git
    if shutil.which("git") and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT)
        assert ignored.returncode == 1, ".gitignore hides the shipped weights"


def test_load_pretrained_gives_a_model_and_the_corpus_tokenizer():
    model, tok = load_pretrained("char_gpt")
    assert isinstance(model, GPT) and not model.training
    assert tok.chars == CharTokenizer.from_text(load_corpus()).chars
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.one_draw  # the recorded loss is on fixed windows (fixed weights: only rounding differs by machine)
def test_the_loss_after_loading_is_the_recorded_one_and_meets_the_goal():
    torch.set_num_threads(1)
    model, _, meta = load_pretrained("char_gpt", with_meta=True)
    loss = fixed_batch_loss(model, model.config.block_size)
    assert loss["val"] == pytest.approx(meta["loss_fp16"]["val"], abs=2e-3)
    assert loss["train"] == pytest.approx(meta["loss_fp16"]["train"], abs=2e-3)
    assert abs(meta["loss_fp16"]["val"] - meta["loss_fp32"]["val"]) < 5e-3  # float16 storage costs ~nothing
    assert meta["loss_fp16"]["val"] <= 1.40


def test_unknown_name_and_bad_types():
    with pytest.raises(ValueError, match="char_gpt"):
        load_pretrained("gpt2")
    with pytest.raises(TypeError, match="name"):
        load_pretrained(3)
    with pytest.raises(TypeError, match="with_meta"):
        load_pretrained("char_gpt", with_meta="yes")


def test_a_damaged_file_is_refused(tmp_path, monkeypatch):
    filename, _ = PRETRAINED["char_gpt"]
    raw = bytearray((ROOT / "pretrained" / filename).read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / filename).write_bytes(bytes(raw))
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", tmp_path)
    with pytest.raises(ValueError, match="sha256"):
        load_pretrained("char_gpt")


def test_a_missing_file_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="make pretrain"):
        load_pretrained("char_gpt")


def small_model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=5, block_size=8, d_model=16, n_heads=2, n_layers=1))


def test_round_trip_stores_float16_and_returns_float32(tmp_path):
    model, tok = small_model(), CharTokenizer(list("abcde"))
    sha = save_pretrained(tmp_path / "m.pt", model, tok, note="hi")
    loaded, tok2, meta = read_pretrained(tmp_path / "m.pt", sha)
    assert meta == {"note": "hi"} and tok2.chars == tok.chars
    for (k, a), b in zip(model.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a.half().float(), b), k
    with pytest.raises(ValueError, match="sha256"):
        read_pretrained(tmp_path / "m.pt", "0" * 64)


def test_save_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError, match="model"):
        save_pretrained(tmp_path / "m.pt", torch.nn.Linear(2, 2), CharTokenizer(list("ab")))
    with pytest.raises(ValueError, match="characters"):
        save_pretrained(tmp_path / "m.pt", small_model(), CharTokenizer(list("ab")))


RAN = []


class Payload:
    def __reduce__(self):
        return (RAN.append, ("ran",))


def test_pickled_code_is_refused_without_running(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": pretrained.FORMAT, "state": Payload()}, path)
    with pytest.raises(ValueError, match="nothing in it was run"):
        read_pretrained(path)
    assert RAN == []


def test_pretrain_script_smoke_run(tmp_path):
    out = tmp_path / "tiny.pt"
    cmd = [sys.executable, str(ROOT / "tools" / "pretrain.py"), "--steps", "2", "--d-model", "16", "--layers", "1",
           "--heads", "2", "--block", "16", "--batch", "2", "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    model, tok, meta = read_pretrained(out)
    assert meta["steps"] == 2 and model.config.d_model == 16 and "sha256" in done.stdout


def test_a_tied_head_is_stored_once_and_re_tied(tmp_path):
    model, tok = small_model(), CharTokenizer(list("abcde"))
    save_pretrained(tmp_path / "m.pt", model, tok)
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    assert "head.weight" not in payload["state"] and "tok_emb.weight" in payload["state"]
    loaded, _, _ = read_pretrained(tmp_path / "m.pt")
    assert loaded.head.weight is loaded.tok_emb.weight
    assert torch.equal(loaded.head.weight, model.tok_emb.weight.half().float())
    untied = GPT(GPTConfig(vocab_size=5, block_size=8, d_model=16, n_heads=2, n_layers=1, tie_weights=False))
    save_pretrained(tmp_path / "u.pt", untied, tok)
    assert "head.weight" in torch.load(tmp_path / "u.pt", weights_only=True)["state"]
    assert torch.equal(read_pretrained(tmp_path / "u.pt")[0].head.weight, untied.head.weight.half().float())


def test_the_song_ci_model_is_shipped_small_and_loads_with_the_corpus_tokenizer():
    filename, sha = PRETRAINED["char_gpt_zh"]
    path = ROOT / "pretrained" / filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert path.stat().st_size < 4e6
    if shutil.which("git") and (ROOT / ".git").exists():
        assert subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT).returncode == 1
    model, tok, meta = load_pretrained("char_gpt_zh", with_meta=True)
    assert tok.chars == CharTokenizer.from_text(load_corpus("songci")).chars
    assert model.config.tie_weights and model.head.weight is model.tok_emb.weight
    assert meta["split"] == {"val_fraction": 0.1, "by": "document"}
    assert meta["train_cpu_seconds"] < 2 * 3600  # the budget: at most two hours of one CPU thread
    assert meta["windows"] == "a ci start at a random offset (shifted_starts)"
    assert model.config.positional == "rope" and model.pos_emb is None  # rotary positions, no position table


def test_make_pretrain_zh_defaults_are_the_shipped_recipe():
    """`make pretrain-zh` (tools/pretrain.py --model char_gpt_zh) trains what is shipped."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import pretrain
    finally:
        sys.path.remove(str(ROOT / "tools"))
    args = pretrain.parse_args(["--model", "char_gpt_zh"])
    model, _, meta = load_pretrained("char_gpt_zh", with_meta=True)
    c = model.config
    assert (args.positional, args.windows, args.steps, args.batch) == ("rope", "shifted", meta["steps"], meta["batch_size"])
    assert (args.block, args.d_model, args.layers, args.heads) == (c.block_size, c.d_model, c.n_layers, c.n_heads)


def test_the_song_ci_model_beats_the_bigram_on_held_out_ci():
    from helpers.data import split_documents
    from helpers.ngram import BigramModel

    torch.set_num_threads(1)
    model, tok, meta = load_pretrained("char_gpt_zh", with_meta=True)
    train_text, val_text = split_documents(load_corpus("songci"), 0.1)
    train, val = torch.tensor(tok.encode(train_text)), torch.tensor(tok.encode(val_text))
    T = model.config.block_size
    # The first 200 validation ci, each read from the blank line before it, as the model was trained.
    starts = document_starts(val_text, T)[:200]                              # (200,)
    idx = starts[:, None] + torch.arange(T)                                  # (200, T)
    with torch.no_grad():
        loss = sum(model(val[idx[i:i + 50]], val[idx[i:i + 50] + 1])[1].item() for i in range(0, 200, 50)) / 4
    bigram = BigramModel(train, tok.vocab_size, 0.7)
    assert meta["baselines"]["bigram_val"] == pytest.approx(bigram.nll(val), abs=1e-6)
    assert loss < bigram.nll(val[: int(starts[-1]) + T + 1]) - 0.3


def test_the_song_ci_model_writes_the_form_wherever_the_prompt_sits():
    """Notebook 08's form test, on fewer samples: prompted with a tune name after the blank line of a
    ci start, without it, or after an earlier ci, the model writes the tune's line lengths in at
    least half of its samples (a bigram: none; the model trained on windows from ci starts only:
    0-0.3 % away from the blank line). The margin holds for any seed: over 300 samples per tune and
    placement the shipped model scored 87-89 % (浣溪沙) and 85-91 % (菩萨蛮), and 40 draws at
    85 % fall below 20 (0.5) with a probability of about 1 in 30 million."""
    from helpers.ci_form import placed_form_share, tune_patterns
    from helpers.data import DOCUMENT_SEPARATOR, split_documents

    torch.set_num_threads(1)
    model, tok = load_pretrained("char_gpt_zh")
    train_text, val_text = split_documents(load_corpus("songci"), 0.1)
    patterns = tune_patterns(train_text, ["浣溪沙", "菩萨蛮"])
    earlier = next(d for d in val_text.split(DOCUMENT_SEPARATOR) if 20 <= len(d) <= 44)   # a short ci
    for tune, p in patterns.items():
        for prefix in (DOCUMENT_SEPARATOR, "", DOCUMENT_SEPARATOR + earlier + DOCUMENT_SEPARATOR):
            share = placed_form_share(model, tok, tune, p.pattern, [prefix], n_each=40)
            assert share >= 0.5, f"{tune} after {prefix!r}: {share:.0%} of 40 samples follow {p.pattern}"


def test_pretrain_script_smoke_run_song_ci(tmp_path):
    out = tmp_path / "tiny_zh.pt"
    cmd = [sys.executable, str(ROOT / "tools" / "pretrain.py"), "--model", "char_gpt_zh", "--steps", "2",
           "--d-model", "16", "--layers", "1", "--heads", "2", "--block", "16", "--batch", "2", "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    model, tok, meta = read_pretrained(out)
    assert tok.vocab_size == 6_099 and model.config.block_size == 16 and meta["steps"] == 2
    assert meta["baselines"]["bigram_val"] == pytest.approx(5.072, abs=1e-3)
    assert meta["train_cpu_seconds"] > 0
