"""Checks for notebook 09 (from GPT-2 to a modern LLM): RMSNorm, SwiGLU, grouped-query attention,
and the two exercises (KV-cache budget, a Q8_0 block by hand).

Each check compares on inputs that reveal the classic mistake (rows with a mean, a tiny row where
eps matters, non-square weights, several kv heads shared by several query heads), computes what
it expects in float64 from the originals, passes the learner copies (`call_unchanged`) and
refuses an answer that calls our helper for the very piece (`refuse_calls`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import helpers.llama as llama
from helpers.exercises import call_unchanged, refuse_calls

TOL = 1e-5  # float32 inputs of size ~1: a float32 computation lands within ~1e-6 of float64


def _close(got, want, scale: float = 1.0) -> bool:
    return (isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point()
            and bool(torch.isfinite(got).all()) and (got.double() - want).abs().max().item() <= TOL * scale)


def _tensor(name: str, got, shape) -> None:
    assert isinstance(got, torch.Tensor), f"{name}: expected a tensor, got {type(got).__name__}"
    assert tuple(got.shape) == tuple(shape), (
        f"{name}: expected shape {tuple(shape)}, got {tuple(got.shape)}")
    assert got.is_floating_point(), f"{name}: expected a floating-point tensor, got {got.dtype}"


def _run(name, fn, *args, targets=()):
    try:
        with refuse_calls(fn, *targets, label=name):
            return call_unchanged(fn, *args, label=name)
    except NotImplementedError:  # the stub (a RuntimeError too): `attempt` says "not done yet"
        raise
    except RuntimeError as e:  # a shape mismatch inside the learner's code: say which convention
        raise AssertionError(f"{name}: your function raised {type(e).__name__}: {str(e)[:160]}. Weights are stored "
                             "(out, in), as nn.Linear stores them (x times the transpose); heads are dimension 1 "
                             "of (B, H, T, hs)") from None


# ------------------------------------------------------------------------------------ RMSNorm
def check_rms_norm(fn) -> None:
    """fn(x, weight, eps) -> x / sqrt(mean of x² over the last dimension + eps) · weight."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 8, generator=g) + 0.7  # rows with a mean: RMSNorm must keep it
    x[1, 2] *= 0.01  # a tiny row, where eps matters
    w = torch.rand(8, generator=g) + 0.5
    eps = 1e-3
    got = _run("rms_norm", fn, x, w, eps, targets=(llama.RMSNorm, (F, "rms_norm"), (torch.nn, "RMSNorm")))
    _tensor("rms_norm", got, x.shape)
    x64, w64 = x.double(), w.double()
    ms = x64.pow(2).mean(-1, keepdim=True)  # (2, 3, 1)
    want = w64 * x64 / torch.sqrt(ms + eps)
    if _close(got, want):
        print("rms_norm: correct")
        return
    centred = x64 - x64.mean(-1, keepdim=True)
    diagnoses = [
        (w64 * centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps),
         "it subtracts each row's mean: that is LayerNorm. RMSNorm keeps the mean and divides by the root mean square"),
        (x64 / torch.sqrt(ms + eps), "the learned scale `weight` is missing (multiply by it after normalising)"),
        (w64 * x64 / (torch.sqrt(ms) + eps), "eps must be added to the mean square inside the square root, not after it"),
        (w64 * x64 / torch.sqrt(ms), "eps is missing: on the tiny row x[1, 2] it decides the result"),
        (w64 * x64 / torch.sqrt(x64.pow(2).sum(-1, keepdim=True) + eps),
         "it uses the sum of squares: RMSNorm uses their mean (divide by the number of features)"),
        (w64 * x64 / torch.sqrt(x64.pow(2).mean(1, keepdim=True) + eps),
         "the mean is taken over the wrong dimension: one mean square per position, over the last dimension"),
    ]
    for wrong, why in diagnoses:
        if _close(got, wrong):
            raise AssertionError(f"rms_norm: {why}")
    err = (got.double() - want).abs().max().item()
    raise AssertionError(f"rms_norm: differs from x / sqrt(mean(x²) + eps) · weight by up to {err:.3g} "
                         f"(tolerance {TOL}); row x[1, 2] is tiny, so eps matters there")


# ------------------------------------------------------------------------------------ SwiGLU
def check_swiglu(fn) -> None:
    """fn(x, w_gate, w_up, w_down) -> (silu(x w_gateᵀ) ⊙ (x w_upᵀ)) w_downᵀ; weights stored (out, in)."""
    g = torch.Generator().manual_seed(10)
    C, Fd = 6, 10  # not square: a missing transpose cannot pass
    x = torch.randn(2, 5, C, generator=g)
    wg, wu, wd = torch.randn(Fd, C, generator=g), torch.randn(Fd, C, generator=g), torch.randn(C, Fd, generator=g)
    got = _run("swiglu", fn, x, wg, wu, wd, targets=(llama.SwiGLU,))
    _tensor("swiglu", got, x.shape)
    x64, g64, u64, d64 = x.double(), wg.double(), wu.double(), wd.double()
    a, b = x64 @ g64.T, x64 @ u64.T  # (2, 5, F) x 2

    def out(h):
        return h @ d64.T  # (2, 5, F) -> (2, 5, C)

    want = out(F.silu(a) * b)
    scale = want.abs().max().item()
    if _close(got, want, scale):
        print("swiglu: correct")
        return
    diagnoses = [
        (out(F.silu(b) * a), "gate and up are swapped: silu goes on the gate's projection, the up projection is not activated"),
        (out(F.gelu(a) * b), "it uses GELU: SwiGLU's gate goes through SiLU, x · sigmoid(x)"),
        (out(torch.sigmoid(a) * b), "it uses sigmoid(x): SiLU is x · sigmoid(x) (that is GLU, not SwiGLU)"),
        (out(F.relu(a) * b), "it uses ReLU: SwiGLU's gate goes through SiLU, x · sigmoid(x)"),
        (out(F.silu(b)), "there is no gate: the activated gate projection multiplies the up projection element by element"),
        (out(F.silu(a * b)), "silu is applied to the product: only the gate projection is activated, then multiplied"),
    ]
    for wrong, why in diagnoses:
        if _close(got, wrong, scale):
            raise AssertionError(f"swiglu: {why}")
    err = (got.double() - want).abs().max().item()
    raise AssertionError(f"swiglu: differs from down(silu(gate(x)) ⊙ up(x)) by up to {err:.3g} "
                         f"(tolerance {TOL * scale:.2g}); each weight is (out, in): multiply by its transpose")


# ------------------------------------------------------------------------------ grouped-query attention
def _attend(q, k, v, causal=True, scale=None):
    T, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))  # (..., T, S)
    if causal:
        s = s.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
    return s.softmax(-1) @ v  # (..., T, hs)


def check_gqa(fn) -> None:
    """fn(q, k, v) -> causal attention where query head h reads kv head h // (H / H_kv)."""
    g = torch.Generator().manual_seed(11)
    B, H, Hkv, T, hs = 2, 6, 2, 5, 4  # groups of 3 query heads; tiling (h % 2) differs from grouping (h // 3)
    q, k, v = (torch.randn(B, h, T, hs, generator=g) for h in (H, Hkv, Hkv))
    got = _run("gqa", fn, q, k, v, targets=(llama.grouped_query_attention,))
    _tensor("gqa", got, q.shape)
    q64, k64, v64 = q.double(), k.double(), v.double()
    group = H // Hkv
    reads = [h // group for h in range(H)]

    def with_kv(kv_of):
        return torch.stack([_attend(q64[:, h], k64[:, kv_of[h]], v64[:, kv_of[h]]) for h in range(H)], 1)

    want = with_kv(reads)
    if _close(got, want):
        print("gqa: correct")
        return
    for h in range(H):  # which kv head (if any) does each query head read?
        seen = [j for j in range(Hkv) if _close(got[:, h], _attend(q64[:, h], k64[:, j], v64[:, j]))]
        if seen and seen[0] != reads[h]:
            raise AssertionError(f"gqa: query head {h} reads kv head {seen[0]}; with {group} query heads per kv head it "
                                 f"must read kv head {reads[h]} (heads 0-{group - 1} share kv head 0, the next {group} "
                                 "kv head 1): repeat each kv head in place, do not tile the whole set")
    diagnoses = [
        (torch.stack([_attend(q64[:, h], k64[:, reads[h]], v64[:, reads[h]], causal=False) for h in range(H)], 1),
         "there is no causal mask: position t must not see positions after t"),
        (torch.stack([_attend(q64[:, h], k64[:, reads[h]], v64[:, reads[h]], scale=1.0) for h in range(H)], 1),
         "the scores are not scaled: divide q·k by √hs (hs = the head size, the last dimension)"),
        (torch.stack([_attend(q64[:, h], k64[:, reads[h]], v64[:, reads[h]], scale=1 / math.sqrt(H * hs))
                      for h in range(H)], 1),
         "the scores are scaled by √(H·hs): divide by √hs, the size of one head"),
    ]
    for wrong, why in diagnoses:
        if _close(got, wrong):
            raise AssertionError(f"gqa: {why}")
    err = (got.double() - want).abs().max().item()
    raise AssertionError(f"gqa: differs from causal softmax(q kᵀ/√hs) v with query head h reading kv head "
                         f"h // {group} by up to {err:.3g} (tolerance {TOL})")


# ------------------------------------------------------------------------------------ exercises
def check_exercise_1(fn) -> None:
    """fn(config, budget_bytes) -> how many tokens a float32 KV cache of that budget holds (an int)."""
    cases = [(llama.LlamaConfig(), 1 << 30), (llama.LlamaConfig(n_kv_heads=9), 1 << 30),
             (llama.LlamaConfig(d_model=64, n_layers=3, n_heads=8, n_kv_heads=2, vocab_size=10, d_ff=8), 10_000)]
    for config, budget in cases:
        got = fn(config, budget)
        per_token = config.n_layers * 2 * config.n_kv_heads * config.head_dim * 4  # bytes, the tested rule
        want = budget // per_token
        assert isinstance(got, int) and not isinstance(got, bool), (
            f"exercise 1: expected a whole number of tokens (an int), got {type(got).__name__}")
        if got == want:
            continue
        c = config
        wrongs = [(budget // (c.n_layers * c.n_kv_heads * c.head_dim * 4), "a token stores a key AND a value in every layer"),
                  (budget // (c.n_layers * 2 * c.n_heads * c.head_dim * 4), "the cache stores the kv heads (n_kv_heads), not the query heads"),
                  (budget // (2 * c.n_kv_heads * c.head_dim * 4), "every layer keeps its own keys and values"),
                  (budget // (c.n_layers * 2 * c.n_kv_heads * c.head_dim), "a float32 number takes 4 bytes")]
        for w, why in wrongs:
            if got == w:
                raise AssertionError(f"exercise 1: {why} (config with n_layers={c.n_layers}, n_kv_heads={c.n_kv_heads})")
        raise AssertionError(f"exercise 1: for n_layers={c.n_layers}, n_heads={c.n_heads}, n_kv_heads={c.n_kv_heads}, "
                             f"head_dim={c.head_dim} and {budget} bytes, expected {want} tokens, got {got}")
    print("exercise 1: correct")


def check_exercise_2(fn) -> None:
    """fn(block) -> the 32 float32 numbers of one Q8_0 block (34 uint8: float16 scale, 32 int8)."""
    g = torch.Generator().manual_seed(12)
    for d in (0.0371, -0.5):
        q = torch.randint(-128, 128, (32,), generator=g, dtype=torch.int8)
        q[:2] = torch.tensor([-128, 127], dtype=torch.int8)  # the extremes: a byte read unsigned shows here
        block = torch.cat([torch.tensor([d], dtype=torch.float16).view(torch.uint8), q.view(torch.uint8)])  # (34,)
        got = _run("exercise 2", fn, block)
        _tensor("exercise 2", got, (32,))
        d16 = float(torch.tensor(d, dtype=torch.float16))
        want = d16 * q.double()
        if _close(got, want):
            continue
        wrongs = [(d16 * q.view(torch.uint8).double(), "the 32 codes are signed bytes (int8): -128..127, not 0..255"),
                  (q.double(), "each code must be multiplied by the block's scale d (the first two bytes, float16)"),
                  (float(block[0]) * q.double(), "the scale is the first TWO bytes read as one float16, not one byte")]
        for w, why in wrongs:
            if _close(got, w):
                raise AssertionError(f"exercise 2: {why}")
        raise AssertionError(f"exercise 2: for a block with scale {d16} the numbers differ by up to "
                             f"{(got.double() - want).abs().max().item():.3g}")
    print("exercise 2: correct")
