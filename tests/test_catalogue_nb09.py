"""The check catalogue of notebook 09 (tests/catalogue.py): each check against the reference, answers
written differently and plausible wrong ones. The old checks (main) had none of these: a new notebook."""

import math

import torch
import torch.nn.functional as F
from catalogue import Catalogue, Wrong, assert_catalogue

import helpers.llama as llama
from helpers.checks.nb09 import (
    check_exercise_1,
    check_exercise_2,
    check_gqa,
    check_rms_norm,
    check_swiglu,
)


# ------------------------------------------------------------------------------------ RMSNorm
def rms_norm_ref(x, weight, eps):
    ms = x.pow(2).mean(dim=-1, keepdim=True)
    return weight * x * torch.rsqrt(ms + eps)


def rms_norm_float64(x, weight, eps):
    x64 = x.double()
    return (x64 / (x64.square().sum(-1, keepdim=True) / x.shape[-1] + eps).sqrt() * weight.double()).float()


def rms_norm_linalg(x, weight, eps):
    rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
    return x / torch.sqrt(rms ** 2 + eps) * weight


def test_rms_norm_catalogue():
    assert_catalogue(Catalogue(check_rms_norm, rms_norm_ref, correct=[rms_norm_float64, rms_norm_linalg], wrong=[
        Wrong(lambda x, w, eps: F.layer_norm(x, x.shape[-1:], w, None, eps), "LayerNorm", "subtracts the mean"),
        Wrong(lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps), "weight", "no scale"),
        Wrong(lambda x, w, eps: w * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps), "inside", "eps outside the root"),
        Wrong(lambda x, w, eps: w * x / x.pow(2).mean(-1, keepdim=True).sqrt(), "eps", "no eps"),
        Wrong(lambda x, w, eps: w * x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps), "sum", "sum, not mean"),
        Wrong(lambda x, w, eps: w * x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + eps), "dimension", "wrong axis"),
        Wrong(lambda x, w, eps: llama.RMSNorm(x.shape[-1], eps)(x), "calls", "calls our helper"),
        Wrong(lambda x, w, eps: x.mul_(w), "in place", "changes its input"),
    ]))


# ------------------------------------------------------------------------------------ SwiGLU
def swiglu_ref(x, w_gate, w_up, w_down):
    hidden = F.silu(x @ w_gate.T) * (x @ w_up.T)
    return hidden @ w_down.T


def swiglu_linear(x, w_gate, w_up, w_down):
    gate = F.linear(x, w_gate)
    return F.linear(gate * torch.sigmoid(gate) * F.linear(x, w_up), w_down)


def swiglu_einsum(x, w_gate, w_up, w_down):
    a, b = torch.einsum("btc,fc->btf", x, w_gate), torch.einsum("btc,fc->btf", x, w_up)
    return torch.einsum("btf,cf->btc", a / (1 + torch.exp(-a)) * b, w_down)


def test_swiglu_catalogue():
    assert_catalogue(Catalogue(check_swiglu, swiglu_ref, correct=[swiglu_linear, swiglu_einsum], wrong=[
        Wrong(lambda x, g, u, d: (F.silu(x @ u.T) * (x @ g.T)) @ d.T, "swapped", "gate and up swapped"),
        Wrong(lambda x, g, u, d: (F.gelu(x @ g.T) * (x @ u.T)) @ d.T, "SiLU", "GELU"),
        Wrong(lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "sigmoid", "GLU's sigmoid"),
        Wrong(lambda x, g, u, d: F.silu(x @ u.T) @ d.T, "gate", "no gate"),
        Wrong(lambda x, g, u, d: F.silu((x @ g.T) * (x @ u.T)) @ d.T, "product", "silu of the product"),
        Wrong(lambda x, g, u, d: (F.silu(x @ g) * (x @ u)) @ d, "transpose", "weights used as (in, out)"),
    ]))


def test_swiglu_refuses_our_helper():
    def via_helper(x, g, u, d):
        m = llama.SwiGLU(x.shape[-1], g.shape[0])
        return m(x)

    assert_catalogue(Catalogue(check_swiglu, swiglu_ref, correct=[swiglu_linear, swiglu_einsum], wrong=[
        Wrong(via_helper, "calls"), Wrong(lambda x, g, u, d: x, "differs"), Wrong(lambda x, g, u, d: x.zero_(), "in place")]))


# ------------------------------------------------------------------------------------ GQA
def gqa_ref(q, k, v):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    T = q.shape[2]
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return scores.softmax(dim=-1) @ v


def gqa_sdpa(q, k, v):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)


def gqa_grouped_view(q, k, v):
    B, H, T, hs = q.shape
    Hkv = k.shape[1]
    qg = q.view(B, Hkv, H // Hkv, T, hs)  # (B, Hkv, group, T, hs): consecutive query heads share a kv head
    s = qg @ k[:, :, None].transpose(-2, -1) / hs ** 0.5
    s = s + torch.full((T, T), float("-inf")).triu(1)
    return (s.softmax(-1) @ v[:, :, None]).reshape(B, H, T, hs)


def test_gqa_catalogue():
    def tiled(q, k, v):
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1), is_causal=True)

    def no_mask(q, k, v):
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))

    def unscaled(q, k, v):
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                              is_causal=True, scale=1.0)

    def model_width(q, k, v):
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                              is_causal=True, scale=1 / math.sqrt(q.shape[1] * q.shape[3]))

    assert_catalogue(Catalogue(check_gqa, gqa_ref, correct=[gqa_sdpa, gqa_grouped_view], wrong=[
        Wrong(tiled, "repeat each kv head in place", "tiles the kv heads (h % H_kv)"),
        Wrong(no_mask, "causal", "no mask"),
        Wrong(unscaled, "not scaled", "no 1/√hs"),
        Wrong(model_width, "√(H·hs)", "scaled by the model width"),
        Wrong(lambda q, k, v: llama.grouped_query_attention(q, k, v), "calls", "calls our helper"),
        Wrong(lambda q, k, v: q, "differs", "returns q"),
    ]))


# ------------------------------------------------------------------------------------ exercises
def tokens_ref(config, budget):
    per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * 4
    return budget // per_token


def test_exercise_1_catalogue():
    assert_catalogue(Catalogue(check_exercise_1, tokens_ref, correct=[
        lambda c, b: int(b / llama.kv_cache_bytes(c, 1)) if b % llama.kv_cache_bytes(c, 1) else b // llama.kv_cache_bytes(c, 1),
        lambda c, b: b // (c.n_layers * 2 * c.n_kv_heads * (c.d_model // c.n_heads) * torch.finfo(torch.float32).bits // 8),
    ], wrong=[
        Wrong(lambda c, b: b // (c.n_layers * c.n_kv_heads * c.head_dim * 4), "value", "keys only"),
        Wrong(lambda c, b: b // (c.n_layers * 2 * c.n_heads * c.head_dim * 4), "kv heads", "query heads"),
        Wrong(lambda c, b: b // (2 * c.n_kv_heads * c.head_dim * 4), "layer", "one layer"),
        Wrong(lambda c, b: b // (c.n_layers * 2 * c.n_kv_heads * c.head_dim), "4 bytes", "one byte a number"),
        Wrong(lambda c, b: b / (c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4), "int", "a float"),
    ]))


def q8_ref(block):
    d = block[:2].view(torch.float16).float()
    return d * block[2:].view(torch.int8).float()


def test_exercise_2_catalogue():
    import numpy as np

    assert_catalogue(Catalogue(check_exercise_2, q8_ref, correct=[
        lambda b: torch.from_numpy(np.frombuffer(b.numpy().tobytes()[2:], np.int8).astype(np.float32)
                                   * np.frombuffer(b.numpy().tobytes()[:2], np.float16).astype(np.float32)),
        lambda b: (b[2:].to(torch.int16) - 256 * (b[2:] > 127).to(torch.int16)).float() * b[:2].view(torch.float16).float(),
    ], wrong=[
        Wrong(lambda b: b[:2].view(torch.float16).float() * b[2:].float(), "signed", "bytes read unsigned"),
        Wrong(lambda b: b[2:].view(torch.int8).float(), "scale", "no scale"),
        Wrong(lambda b: b[0].float() * b[2:].view(torch.int8).float(), "two bytes", "scale from one byte"),
        Wrong(lambda b: b[:2].view(torch.float16).float() * b[2:].view(torch.int8).float() + 1, "differ", "off by one"),
    ]))
