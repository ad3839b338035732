"""GPTConfig(positional="rope"): rotary positions on q and k in every attention path of the GPT.

An independent float64 reference (pairs as complex numbers, not `apply_rope`) checks the forward
pass; the fused, the weights and the KV-cache paths are checked against each other; the learned
default is checked to be built exactly as before (same parameters, same draws from the generator).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import helpers.llama as llama
import helpers.positional as positional
from helpers.attention import MultiHeadAttention
from helpers.fused_attention import fuse_legacy_qkv
from helpers.generation import cached_attention
from helpers.gpt import ROPE_BASE
from helpers.gpt2 import convert_gpt2_state_dict, parameter_map
from helpers.layers import EncoderLayer
from helpers.models import GPT, GPTConfig
from helpers.positional import LearnedPositionalEmbedding, apply_rope, rope_tables
from helpers.pretrained import read_pretrained, save_pretrained
from helpers.tokenizers import CharTokenizer

ROOT = Path(__file__).resolve().parent.parent
BLOCK = 8


def rope_gpt(seed=0, scale=8.0, **cfg) -> GPT:
    """A small rope GPT with weights far from the init (×scale), so wrong positions change the tokens."""
    fields = dict(vocab_size=11, block_size=BLOCK, d_model=24, n_heads=3, n_layers=2, positional="rope")
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**{**fields, **cfg}))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model.eval()


def ids(B, T, vocab=11, seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- config


def test_config_accepts_rope_and_refuses_an_odd_head_size():
    assert GPTConfig(vocab_size=5, block_size=4, d_model=8, n_heads=2, positional="rope").positional == "rope"
    with pytest.raises(ValueError, match=r"head size d_model / n_heads must be even, got 12 / 4 = 3"):
        GPTConfig(vocab_size=5, block_size=4, d_model=12, n_heads=4, positional="rope")
    with pytest.raises(ValueError, match="'learned', 'sinusoidal', 'rope'"):
        GPTConfig(vocab_size=5, block_size=4, d_model=8, n_heads=2, positional="alibi")
    cfg = GPTConfig(vocab_size=5, block_size=4, d_model=12, n_heads=4)  # head size 3: fine for learned positions
    with pytest.raises(ValueError, match="must be even"):
        cfg.positional = "rope"  # an edit is validated again
    assert cfg.positional == "learned"


def test_a_rope_model_has_no_position_table():
    learned = GPT(GPTConfig(vocab_size=11, block_size=BLOCK, d_model=24, n_heads=3, n_layers=2))
    model = rope_gpt()
    assert model.pos_emb is None
    assert not [k for k in model.state_dict() if "pos" in k]
    assert set(model.state_dict()) == set(learned.state_dict()) - {"pos_emb.embedding.weight"}
    n = sum(p.numel() for p in model.parameters())
    assert n == sum(p.numel() for p in learned.parameters()) - BLOCK * 24
    assert not list(model.buffers())  # the angles are recomputed, never state


# ---------------------------------------------------------------- an independent reference


def reference_logits(model: GPT, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rope GPT's forward pass written out in float64 from its weights: (logits, weights (L, B, H, T, T)).

    Rotation as complex multiplication: pair (x[2i], x[2i+1]) is x[2i] + j·x[2i+1], times e^{j·pos·θ_i}."""
    c = model.config
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    B, T = idx.shape
    H, hs = c.n_heads, c.d_model // c.n_heads
    theta = torch.tensor([ROPE_BASE ** (-2 * i / hs) for i in range(hs // 2)], dtype=torch.float64)  # (hs/2,)
    turn = torch.polar(torch.ones(T, hs // 2, dtype=torch.float64),
                       torch.arange(T, dtype=torch.float64)[:, None] * theta)  # (T, hs/2) complex

    def rotate(x):  # (B, H, T, hs) -> (B, H, T, hs)
        z = torch.view_as_complex(x.reshape(B, H, T, hs // 2, 2).contiguous()) * turn
        return torch.view_as_real(z).reshape(B, H, T, hs)

    def linear(x, name):
        return x @ sd[name + ".weight"].T + sd[name + ".bias"]

    def norm(x, name):
        return F.layer_norm(x, (c.d_model,), sd[name + ".weight"], sd[name + ".bias"], eps=1e-5)

    def heads(x):
        return x.reshape(B, T, H, hs).transpose(1, 2)  # (B, T, C) -> (B, H, T, hs)

    x = sd["tok_emb.weight"][idx]  # (B, T, C): nothing added for positions
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    all_weights = []
    for i in range(c.n_layers):
        b = f"blocks.{i}."
        h = norm(x, b + "norm1")
        qkv = h @ sd[b + "self_attn.qkv_proj.weight"].T + sd[b + "self_attn.qkv_proj.bias"]  # (B, T, 3C): W_q; W_k; W_v
        q, k, v = (heads(part) for part in qkv.split(c.d_model, dim=-1))
        scores = rotate(q) @ rotate(k).transpose(-2, -1) / math.sqrt(hs)  # (B, H, T, T)
        w = scores.masked_fill(future, -math.inf).softmax(-1)
        all_weights.append(w)
        x = x + linear((w @ v).transpose(1, 2).reshape(B, T, c.d_model), b + "self_attn.out_proj")
        x = x + linear(F.gelu(linear(norm(x, b + "norm2"), b + "ff.linear1")), b + "ff.linear2")
    return norm(x, "ln_f") @ sd["head.weight"].T, torch.stack(all_weights)


def test_forward_equals_an_independent_float64_reference():
    model = rope_gpt(scale=4.0).double()
    x = ids(3, BLOCK)
    want, want_w = reference_logits(model, x)
    got = model(x)[0]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(model.attention_weights(x), want_w, atol=1e-12, rtol=1e-10)
    # and it differs from what the same weights give without the rotation (the test can fail)
    plain = rope_gpt(scale=4.0).double()
    plain._rope_at = lambda start, t: None
    plain.pos_emb = None
    assert not torch.allclose(plain(x)[0], want, atol=1e-3)


def test_float32_forward_matches_the_reference_and_the_angles_follow_the_dtype():
    model = rope_gpt(scale=4.0)
    x = ids(2, BLOCK, seed=3)
    got = model(x)[0]  # float32 first: its tables are made in float32
    want, _ = reference_logits(model, x)
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=1e-5)
    model.double()
    torch.testing.assert_close(model(x)[0], want, atol=1e-10, rtol=1e-10)  # float64 tables now, not float32 ones
    cos, sin = model._rope_at(0, BLOCK)
    assert cos.dtype == sin.dtype == torch.float64 and cos.shape == (BLOCK, 4)


def test_fused_path_equals_the_weights_path():
    model = rope_gpt(seed=3)
    x = ids(4, BLOCK, seed=2)
    with torch.no_grad():
        fused, _ = model._trunk(x, return_weights=False)  # F.scaled_dot_product_attention
        stepwise, w = model._trunk(x, return_weights=True)  # helpers' softmax(q kᵀ/√d) v
    torch.testing.assert_close(fused, stepwise, atol=1e-4, rtol=1e-5)  # weights ×8: activations ~ 10, float32 rounding
    assert len(w) == 2 and w[0].shape == (4, 3, BLOCK, BLOCK)


def test_scores_depend_on_the_offset_only():
    hs, T, shift = 8, 6, 5
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, T, hs, generator=g, dtype=torch.float64), torch.randn(2, T, hs, generator=g, dtype=torch.float64)
    cos, sin = rope_tables(T + shift, hs, ROPE_BASE, dtype=torch.float64)  # (T + shift, hs/2)
    at0 = apply_rope(q, cos[:T], sin[:T]) @ apply_rope(k, cos[:T], sin[:T]).transpose(-2, -1)
    moved = apply_rope(q, cos[shift:], sin[shift:]) @ apply_rope(k, cos[shift:], sin[shift:]).transpose(-2, -1)
    torch.testing.assert_close(moved, at0, atol=1e-12, rtol=1e-12)  # both shifted: every score the same
    only_q = apply_rope(q, cos[shift:], sin[shift:]) @ apply_rope(k, cos[:T], sin[:T]).transpose(-2, -1)
    assert not torch.allclose(only_q, at0, atol=1e-3)  # one shifted: the offsets change, and so do the scores
    # the model's own tables are these angles: the rows of position p are p·θ_i
    model = rope_gpt()
    mc, ms = model._rope_at(2, 3)
    torch.testing.assert_close(mc, cos[2:5].float())
    torch.testing.assert_close(ms, sin[2:5].float())


def test_a_token_attends_by_distance_wherever_the_text_sits():
    """In layer 0, a query's scores to its keys are the same whether the text starts at position 0 or later."""
    model = rope_gpt(seed=4, n_layers=1)
    text = ids(1, 4, seed=5)
    prefixed = torch.cat([ids(1, 3, seed=6), text], dim=1)  # the same 4 tokens at positions 3..6
    attn = model.blocks[0].self_attn
    scores = []
    for x, start in ((text, 0), (prefixed, 3)):
        h = model.blocks[0].norm1(model.tok_emb(x))[:, start:]  # (1, 4, C)
        cos, sin = model._rope_at(start, 4)
        q, k = (apply_rope(attn._split(p(h)), cos, sin) for p in (attn.q_proj, attn.k_proj))  # (1, H, 4, hs)
        scores.append(q @ k.transpose(-2, -1))
    torch.testing.assert_close(scores[1], scores[0], atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------- KV cache and generation


@pytest.mark.parametrize("prefill", [1, 3, BLOCK])
def test_forward_cached_step_by_step_equals_the_full_forward(prefill):
    model = rope_gpt(seed=1)
    x = ids(2, BLOCK, seed=7)
    full = model(x)[0]  # (B, T, V)
    cache = model.new_cache(2)
    rows = [model.forward_cached(x[:, :prefill], cache)]
    for t in range(prefill, BLOCK):
        rows.append(model.forward_cached(x[:, t : t + 1], cache))
    assert cache.length == BLOCK
    torch.testing.assert_close(torch.stack(rows, 1), full[:, prefill - 1 :], atol=1e-4, rtol=1e-5)


def test_cached_keys_are_stored_rotated():
    model = rope_gpt(seed=1)
    x = ids(1, 5, seed=8)
    cache = model.new_cache(1)
    model.forward_cached(x, cache)
    attn, h = model.blocks[0].self_attn, model.blocks[0].norm1(model.tok_emb(x))
    k = apply_rope(attn._split(attn.k_proj(h)), *model._rope_at(0, 5))  # (1, H, 5, hs)
    torch.testing.assert_close(cache.k[0, :, :, :5], k, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("B,T0,n", [(1, 1, 3), (2, 3, BLOCK - 3), (3, 2, 3 * BLOCK), (2, BLOCK + 2, 5)])
def test_generate_with_and_without_cache_gives_the_same_greedy_tokens(B, T0, n):
    """Below, at and past block_size (the window restarts at position 0 and the cache is rebuilt)."""
    model = rope_gpt(seed=2)
    x = ids(B, T0, seed=9)
    fast = model.generate(x, n, top_k=1)
    assert torch.equal(fast, model.generate(x, n, top_k=1, use_cache=False))
    assert fast.shape == (B, T0 + n)


@pytest.mark.parametrize("kw", [dict(), dict(temperature=0.7, top_k=5), dict(top_p=0.9)])
def test_generate_with_and_without_cache_gives_the_same_samples(kw):
    model = rope_gpt(seed=5)
    x = ids(4, 2, seed=10)
    a = model.generate(x, 3 * BLOCK, generator=torch.Generator().manual_seed(5), **kw)
    b = model.generate(x, 3 * BLOCK, generator=torch.Generator().manual_seed(5), use_cache=False, **kw)
    assert torch.equal(a, b)


def test_generation_past_the_block_uses_the_window_from_position_0():
    """Past block_size the next token is the full forward's on the last block_size tokens (positions 0..)."""
    model = rope_gpt(seed=6)
    x = ids(2, BLOCK + 3, seed=11)
    nxt = model.generate(x, 1, top_k=1)[:, -1]
    assert torch.equal(nxt, model(x[:, -BLOCK:])[0][:, -1].argmax(-1))


# ---------------------------------------------------------------- the pieces: attention, layer, cache


def test_multi_head_attention_rope_argument():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    cos, sin = rope_tables(5, 8)
    plain = mha(x, x, x, is_causal=True)
    assert torch.equal(mha(x, x, x, is_causal=True, rope=None), plain)
    fused = mha(x, x, x, is_causal=True, rope=(cos, sin))
    out, w = mha(x, x, x, is_causal=True, rope=(cos, sin), return_weights=True)
    torch.testing.assert_close(fused, out, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(fused, plain, atol=1e-4)
    zero = (torch.ones(5, 4), torch.zeros(5, 4))  # angle 0 everywhere: no rotation
    torch.testing.assert_close(mha(x, x, x, is_causal=True, rope=zero), plain)
    with pytest.raises(ValueError, match=r"rope's cos must be a torch.float32 tensor of shape \(T=5, head_dim/2=4\)"):
        mha(x, x, x, rope=rope_tables(6, 8))
    m64, x64 = MultiHeadAttention(16, 2).double(), x.double()
    with pytest.raises(ValueError, match="rope's cos must be a torch.float64"):
        m64(x64, x64, x64, rope=(cos, sin))  # float32 angles would turn float64 queries into float32
    with pytest.raises(TypeError, match=r"rope must be a tuple \(cos, sin\)"):
        mha(x, x, x, rope=[cos, sin])
    with pytest.raises(ValueError, match="needs T_q == T_k"):
        mha(x[:, :2], x, x, rope=(cos[:2], sin[:2]))
    odd = MultiHeadAttention(6, 2)
    with pytest.raises(ValueError, match="head size must be even, got 3"):
        odd(torch.randn(1, 2, 6), torch.randn(1, 2, 6), torch.randn(1, 2, 6), rope=(torch.ones(2, 1), torch.ones(2, 1)))


def test_encoder_layer_passes_rope_to_its_self_attention():
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 32, dropout=0.0, norm_first=True).eval()
    x = torch.randn(1, 4, 16)
    cos, sin = rope_tables(4, 8)
    h = layer.norm1(x)
    want = x + layer.self_attn(h, h, h, is_causal=True, rope=(cos, sin))
    want = want + layer.ff(layer.norm2(want))
    torch.testing.assert_close(layer(x, is_causal=True, rope=(cos, sin)), want)


def test_cached_attention_checks_its_rope():
    model = rope_gpt()
    cache = model.new_cache(1)
    x = torch.randn(1, 2, 24)
    with pytest.raises(ValueError, match=r"rope's cos must be a torch.float32 tensor of shape \(T=2"):
        cached_attention(model.blocks[0].self_attn, x, cache, 0, rope=model._rope_at(0, 3))


def test_rope_helpers_are_still_importable_from_llama():
    assert llama.apply_rope is positional.apply_rope and llama.rope_tables is positional.rope_tables
    cos, _ = rope_tables(3, 4, 100.0)
    assert cos.dtype == torch.float32  # the default dtype, as before the move


def test_rope_model_trains_and_survives_inference_mode():
    model = rope_gpt(scale=1.0, dropout=0.1).train()
    x = ids(2, BLOCK)
    with torch.inference_mode():  # the tables made here must still serve a training step
        model(x)
    _, loss = model(x, x)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


# ---------------------------------------------------------------- files, tools, widgets


def test_save_and_read_pretrained_round_trip(tmp_path):
    model = rope_gpt(scale=1.0)
    tok = CharTokenizer(list("abcdefghijk"))
    save_pretrained(tmp_path / "rope.pt", model, tok, note="rope")
    loaded, tok2, meta = read_pretrained(tmp_path / "rope.pt")
    assert loaded.config == model.config and loaded.config.positional == "rope" and meta == {"note": "rope"}
    assert loaded.pos_emb is None and tok2.chars == tok.chars
    half = rope_gpt(scale=1.0)
    with torch.no_grad():
        for p in half.parameters():
            p.copy_(p.half().float())  # what the float16 file holds
    x = ids(2, BLOCK)
    torch.testing.assert_close(loaded(x)[0], half(x)[0])
    g = loaded.generate(x[:, :2], 10, top_k=1)
    assert torch.equal(g, loaded.generate(x[:, :2], 10, top_k=1, use_cache=False))


def test_pretrain_flag_parses_with_its_defaults():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import pretrain
    finally:
        sys.path.remove(str(ROOT / "tools"))
    assert pretrain.parse_args([]).config.positional == "learned"
    assert pretrain.parse_args(["--model", "char_gpt_zh"]).config.positional == "rope"  # the Song ci model: rotary
    assert pretrain.parse_args(["--model", "char_gpt_zh", "--positional", "learned"]).config.positional == "learned"
    assert pretrain.parse_args(["--positional", "rope"]).config.positional == "rope"
    with pytest.raises(SystemExit):  # head size 128 / 128 = 1: refused before any work
        pretrain.parse_args(["--positional", "rope", "--heads", "128"])
    with pytest.raises(SystemExit):
        pretrain.parse_args(["--positional", "sinusoidal"])


def test_pretrain_script_writes_a_rope_model_that_loads_and_samples(tmp_path):
    out = tmp_path / "tiny_rope.pt"
    cmd = [sys.executable, str(ROOT / "tools" / "pretrain.py"), "--steps", "2", "--d-model", "16", "--layers", "1",
           "--heads", "2", "--block", "16", "--batch", "2", "--positional", "rope", "--out", str(out)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    model, tok, meta = read_pretrained(out)
    assert model.config.positional == "rope" and model.pos_emb is None and meta["steps"] == 2
    prompt = torch.tensor([tok.encode("def ")])
    fast = model.generate(prompt, 20, generator=torch.Generator().manual_seed(0))
    slow = model.generate(prompt, 20, generator=torch.Generator().manual_seed(0), use_cache=False)
    assert torch.equal(fast, slow) and fast.shape == (1, 24)
    assert len(tok.decode(fast[0].tolist())) == 24


def test_the_attention_explorer_shows_a_rope_models_own_weights():
    from helpers.widgets.gpt_attention import gpt_attention_explorer

    tok = CharTokenizer.from_text("def f(x):\n    return x + 1\n")
    torch.manual_seed(0)
    model = GPT(GPTConfig(tok.vocab_size, block_size=16, d_model=16, n_heads=2, n_layers=2, positional="rope"))
    with torch.no_grad():  # sharper than the init, so positions matter visibly
        for block in model.blocks:
            block.self_attn.q_proj.weight.normal_(0, 0.5)
            block.self_attn.k_proj.weight.normal_(0, 0.5)
    ex = gpt_attention_explorer(model, tok, text="return x")
    with torch.no_grad():
        expected = model.attention_weights(torch.tensor([tok.encode("return x")]))[:, 0]  # (L, H, T, T)
    torch.testing.assert_close(ex.weights, expected, atol=1e-6, rtol=0)
    ex.layer.value, ex.head.value, ex.query.value, ex.key.value = 1, 1, 5, 2
    assert math.isclose(float(ex.terms.sum()), ex.score, rel_tol=1e-5, abs_tol=1e-6)


def test_a_gpt2_checkpoint_refuses_a_rope_config():
    cfg = GPTConfig(vocab_size=5, block_size=4, d_model=8, n_heads=2, n_layers=1, positional="rope")
    with pytest.raises(ValueError, match="positional='learned'"):
        convert_gpt2_state_dict({}, cfg)
    with pytest.raises(ValueError, match="positional='learned'"):
        parameter_map(config=cfg)


# ---------------------------------------------------------------- the default is untouched


def _main_gpt(c: GPTConfig) -> dict[str, torch.Tensor]:
    """The learned GPT as built before rope existed, written out: its modules in the same order, the same init."""
    modules = nn.ModuleDict()
    modules["tok_emb"] = nn.Embedding(c.vocab_size, c.d_model)
    modules["pos_emb"] = LearnedPositionalEmbedding(c.block_size, c.d_model)
    modules["blocks"] = nn.ModuleList(EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, norm_first=True,
                                                   activation=c.activation, bias=c.bias) for _ in range(c.n_layers))
    modules["ln_f"] = nn.LayerNorm(c.d_model)
    modules["head"] = nn.Linear(c.d_model, c.vocab_size, bias=False)

    def init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    modules.apply(init)
    for block in modules["blocks"]:
        for w in (block.self_attn.out_proj.weight, block.ff.linear2.weight):
            nn.init.normal_(w, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layers))
    if c.tie_weights:
        modules["head"].weight = modules["tok_emb"].weight
    return modules.state_dict()


@pytest.mark.parametrize("tie", [True, False])
def test_the_learned_default_is_built_bit_for_bit_as_before(tie):
    cfg = GPTConfig(vocab_size=13, block_size=9, d_model=24, n_heads=3, n_layers=2, tie_weights=tie)
    assert cfg.positional == "learned"
    torch.manual_seed(123)
    want = _main_gpt(cfg)
    rng_after_main = torch.get_rng_state()
    torch.manual_seed(123)
    model = GPT(cfg)
    assert torch.equal(torch.get_rng_state(), rng_after_main)  # the same draws, no more
    got = model.state_dict()
    want = fuse_legacy_qkv(want, got)  # the same numbers; q, k, v now stored as one (3C, C) matrix
    assert sorted(got) == sorted(want) and "blocks.0.self_attn.qkv_proj.weight" in got
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert model._rope_at(0, 4) is None and not list(model.buffers())
