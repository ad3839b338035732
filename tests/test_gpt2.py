"""helpers.gpt2: GPT-2 weights in Hugging Face layout load into our GPT and compute the same.

Offline: the reference is a randomly initialised `transformers` GPT2LMHeadModel built here
from a small local config (nothing is downloaded); the real GPT-2 small is built on the
meta device, which has shapes but no memory.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from helpers.device import set_seed
from helpers.gpt import GPT, GPTConfig
from helpers.gpt2 import (
    GPT2_SMALL_PARAMETERS,
    config_from_hf,
    config_from_state_dict,
    convert_gpt2_state_dict,
    expected_shapes,
    gpt2_config,
    hf_cache_folder,
    load_gpt2,
    parameter_map,
    read_state_dict,
)
from helpers.models import count_parameters
from helpers.safetensors_io import read_safetensors

# 64-wide heads, as in every GPT-2, so the config can also be read off the tensor shapes.
SMALL = dict(vocab_size=101, n_positions=24, n_embd=128, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0,
             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2)
TOL = 2e-5  # float32; the exact-erf GELU instead of GPT-2's tanh one is off by far more (test below)


@pytest.fixture(scope="module")
def hf():
    set_seed(0)  # also 1 thread: two threads on a busy 2-core machine run this ~50x slower
    return GPT2LMHeadModel(GPT2Config(**SMALL)).eval()


@pytest.fixture(scope="module")
def saved(hf, tmp_path_factory):
    """The reference saved by `transformers` itself: config.json + model.safetensors."""
    folder = tmp_path_factory.mktemp("gpt2_small")
    hf.save_pretrained(folder)
    return folder


def ids(n=2, t=17, seed=1):
    return torch.randint(0, SMALL["vocab_size"], (n, t), generator=torch.Generator().manual_seed(seed))


def max_logit_diff(ours, hf, idx):
    with torch.no_grad():
        return (ours(idx)[0] - hf(idx, attention_mask=torch.ones_like(idx)).logits).abs().max().item()


def test_logits_match_transformers(hf, saved):
    assert {p.name for p in saved.iterdir()} >= {"config.json", "model.safetensors"}
    ours = load_gpt2(saved)
    assert ours.config.activation == "gelu_tanh" and not ours.training
    idx = ids()
    with torch.no_grad():
        scale = hf(idx).logits.abs().max().item()
    assert scale > 1.0  # large enough weights that a wrong GELU or a missing transpose shows
    diff = max_logit_diff(ours, hf, idx)
    print(f"max |logit difference| vs transformers: {diff:.1e} (logits up to {scale:.1f})")
    assert diff <= TOL


def test_greedy_tokens_match_transformers(hf, saved):
    ours = load_gpt2(saved)
    theirs = prompt = ids(n=2, t=4, seed=2)
    with torch.no_grad():  # greedy decoding with their model (hf.generate does the same, ~10 s slower to start)
        for _ in range(16):
            nxt = hf(theirs, attention_mask=torch.ones_like(theirs)).logits[:, -1].argmax(-1)  # (B, T, V) -> (B,)
            theirs = torch.cat([theirs, nxt[:, None]], dim=1)  # (B, T) -> (B, T + 1)
    mine = ours.generate(prompt, 16, top_k=1)  # top_k=1: the largest logit, as greedy decoding
    assert mine.shape == theirs.shape == (2, 20)
    assert torch.equal(mine, theirs)
    assert len(set(mine[0, 4:].tolist())) > 1  # not a trivial repetition of one token


def test_exact_gelu_does_not_match(hf, saved):
    cfg = config_from_hf(json.loads((saved / "config.json").read_text()))
    cfg.activation = "gelu"
    ours = GPT(cfg)
    ours.load_state_dict(convert_gpt2_state_dict(hf.state_dict(), cfg))
    assert max_logit_diff(ours.eval(), hf, ids()) > 10 * TOL  # GPT-2 needs activation="gelu_tanh"


def test_bin_file_and_shapes_only_config(hf, tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save(hf.state_dict(), path)
    cfg = config_from_state_dict(read_state_dict(path))  # no config.json: read off the shapes
    want = config_from_hf(hf.config.to_dict())
    assert cfg == want
    assert max_logit_diff(load_gpt2(path), hf, ids()) <= TOL


def test_hub_layout_without_prefix_with_buffers(hf, tmp_path):
    """The hub's own file: no 'transformer.' prefix, old causal-mask buffers, lm_head stored too."""
    sd = {k.removeprefix("transformer."): v.clone() for k, v in hf.state_dict().items()}
    n = SMALL["n_positions"]
    sd["h.0.attn.bias"] = torch.ones(1, 1, n, n).tril()
    sd["h.1.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(sd, tmp_path / "model.safetensors")
    ours = load_gpt2(tmp_path / "model.safetensors", config=config_from_hf(hf.config.to_dict()))
    assert max_logit_diff(ours, hf, ids()) <= TOL


def test_hf_cache_folder(hf, saved, tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--someone--tiny-gpt2"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in ("config.json", "model.safetensors"):
        (snap / f).write_bytes((saved / f).read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hf_cache_folder("someone/tiny-gpt2") == snap
    assert max_logit_diff(load_gpt2(repo), hf, ids()) <= TOL
    with pytest.raises(FileNotFoundError, match="models--openai-community--gpt2"):
        hf_cache_folder()


def test_gpt2_small_maps_on_meta_device():
    with torch.device("meta"):  # shapes without memory: nothing is allocated or downloaded
        theirs = GPT2LMHeadModel(GPT2Config())
        ours = GPT(gpt2_config())
    sd = theirs.state_dict()
    assert sum(p.numel() for p in theirs.parameters()) == GPT2_SMALL_PARAMETERS == 124_439_808
    assert count_parameters(ours) == GPT2_SMALL_PARAMETERS
    assert sum(torch.Size(s).numel() for s in expected_shapes(gpt2_config()).values()) == GPT2_SMALL_PARAMETERS
    converted, target = convert_gpt2_state_dict(sd, gpt2_config()), ours.state_dict()
    assert converted.keys() == target.keys()
    assert all(converted[k].shape == target[k].shape for k in target)
    assert config_from_hf(GPT2Config().to_dict()) == gpt2_config()
    rows = parameter_map(1)
    assert {r[0].split(".")[0] for r in rows} >= {"wte", "wpe", "h", "ln_f"}


def test_converter_errors_name_file_and_key(hf):
    cfg, sd = config_from_hf(hf.config.to_dict()), dict(hf.state_dict())
    broken = {k: v for k, v in sd.items() if k != "transformer.h.1.mlp.c_fc.bias"}
    with pytest.raises(ValueError, match=r"model\.bin lacks 1 .*'h\.1\.mlp\.c_fc\.bias'"):
        convert_gpt2_state_dict(broken, cfg, source="model.bin")
    with pytest.raises(ValueError, match=r"model\.bin has 1 unexpected .*'h\.2\.ln_1\.weight'"):
        convert_gpt2_state_dict({**sd, "h.2.ln_1.weight": torch.ones(128)}, cfg, source="model.bin")
    bad = {**sd, "transformer.h.0.attn.c_attn.weight": sd["transformer.h.0.attn.c_attn.weight"].t()}
    with pytest.raises(ValueError, match=r"'h\.0\.attn\.c_attn\.weight' has shape \(384, 128\), expected \(128, 384\)"):
        convert_gpt2_state_dict(bad, cfg)
    with pytest.raises(ValueError, match="lm_head"):
        convert_gpt2_state_dict({**sd, "lm_head.weight": torch.zeros(101, 128)}, cfg)
    with pytest.raises(TypeError, match="config"):
        convert_gpt2_state_dict(sd, dict(SMALL))
    with pytest.raises(ValueError, match="positional"):
        convert_gpt2_state_dict(sd, GPTConfig(101, 24, 128, 2, 2, positional="sinusoidal"))
    with pytest.raises(ValueError, match="activation_function"):
        config_from_hf({**hf.config.to_dict(), "activation_function": "relu"})


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.safetensors"):
        load_gpt2(tmp_path / "nothing.safetensors")
    (tmp_path / "w.npz").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"w\.npz.*\.safetensors or \.bin"):
        read_state_dict(tmp_path / "w.npz")
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match=r"junk\.safetensors is not a \.safetensors file"):
        load_gpt2(tmp_path / "junk.safetensors")
    with pytest.raises(FileNotFoundError, match="none of model.safetensors"):
        load_gpt2(tmp_path)
    with pytest.raises(TypeError, match="path"):
        load_gpt2(3)
    with pytest.raises(ValueError, match="activation"):
        GPTConfig(10, 8, activation="tanh")


def test_safetensors_reader_matches_library(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {
        "f32": torch.randn(3, 5, generator=g), "f16": torch.randn(4, generator=g).half(),
        "bf16": torch.randn(2, 2, generator=g).bfloat16(), "i64": torch.arange(-3, 3),
        "u8": torch.arange(7, dtype=torch.uint8), "b": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4),
    }
    save_file(tensors, tmp_path / "t.safetensors", metadata={"format": "pt"})
    ours, theirs = read_safetensors(tmp_path / "t.safetensors"), load_file(tmp_path / "t.safetensors")
    assert ours.keys() == theirs.keys() == tensors.keys()
    for k in tensors:
        assert ours[k].dtype == theirs[k].dtype and torch.equal(ours[k], theirs[k]), k
    data = (tmp_path / "t.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-8])  # the data section ends too early
    with pytest.raises(ValueError, match=r"cut\.safetensors: the tensors' data_offsets cover .* truncated"):
        read_safetensors(tmp_path / "cut.safetensors")


def test_gelu_tanh_is_gpt2s_formula():
    """GPT-2's GELU, written as in its code: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))."""
    from helpers.layers import FeedForward

    ff = FeedForward(4, 8, activation="gelu_tanh")
    with torch.no_grad():
        ff.linear1.weight.copy_(torch.eye(8, 4))  # hidden = x in the first 4 units
        ff.linear1.bias.zero_()
        x = torch.linspace(-5, 5, 4 * 9).view(1, 9, 4)
        h = ff.linear1(x)
        gpt2 = 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3)))
        assert torch.allclose(ff.linear2(gpt2), ff(x), atol=1e-6)
        exact = FeedForward(4, 8, activation="gelu")
        exact.load_state_dict(ff.state_dict())
        assert (exact(x) - ff(x)).abs().max() > 1e-5  # the two GELUs do differ
