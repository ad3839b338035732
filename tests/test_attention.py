"""helpers.attention against PyTorch's own attention, plus masks, causality and bad inputs."""

import doctest

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import helpers.attention as attention_module
from helpers.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)

# (B, H, T_q, T_k, d, d_v): square, T_q != T_k both ways, one head, T = 1, d != d_v.
SDPA_SHAPES = [(2, 3, 5, 5, 4, 4), (1, 1, 1, 1, 8, 8), (2, 2, 3, 7, 4, 6), (3, 1, 7, 2, 5, 5), (1, 4, 1, 6, 3, 2)]


def _qkv(B, H, T_q, T_k, d, d_v, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T_q, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, T_k, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, T_k, d_v, generator=g, dtype=dtype)
    return q, k, v


def _random_mask(shape, seed, full_rows=True):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(shape, generator=g) < 0.6
    if full_rows:
        mask[..., 0, :] = False  # at least one query row with nothing to attend to
    return mask


def test_doctest():
    assert doctest.testmod(attention_module).failed == 0


@pytest.mark.parametrize("shape", SDPA_SHAPES)
@pytest.mark.parametrize("mask_kind", ["none", "random", "causal", "broadcast"])
def test_sdpa_matches_torch(shape, mask_kind):
    B, H, T_q, T_k, d, d_v = shape
    q, k, v = _qkv(*shape)
    mask = {
        "none": None,
        "random": _random_mask((B, H, T_q, T_k), seed=1),
        "causal": torch.ones(T_q, T_k, dtype=torch.bool).tril(),
        "broadcast": _random_mask((B, 1, 1, T_k), seed=2, full_rows=False),
    }[mask_kind]
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.shape == (B, H, T_q, d_v) and weights.shape == (B, H, T_q, T_k)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


def test_sdpa_float32_and_scale_match_torch():
    q, k, v = _qkv(2, 3, 4, 6, 8, 5, dtype=torch.float32)
    for scale in (None, 0.1, 2.0):
        out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale), rtol=0, atol=1e-5)


def test_fully_masked_rows_give_zero_output_zero_weights_and_finite_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv(2, 2, 4, 5, 3, 3))
    mask = _random_mask((2, 2, 4, 5), seed=3)
    mask[1, 0, 2, :] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    empty = ~mask.any(dim=-1)  # (B, H, T_q)
    assert empty.sum() >= 2
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (out[empty] == 0).all() and (weights[empty] == 0).all()
    (out.square().sum() + weights.sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), T_q=st.integers(1, 6), T_k=st.integers(1, 6))
def test_weights_rows_sum_to_one_where_anything_is_allowed(seed, T_q, T_k):
    q, k, v = _qkv(2, 2, T_q, T_k, 4, 4, seed=seed)
    mask = _random_mask((2, 2, T_q, T_k), seed=seed, full_rows=False)
    _, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    allowed = mask.any(dim=-1)
    torch.testing.assert_close(weights.sum(-1)[allowed], torch.ones(int(allowed.sum()), dtype=weights.dtype))
    assert (weights[~mask.expand_as(weights)] == 0).all()  # -inf gives exactly zero, not just small


def test_causal_mask_and_padding_mask():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    assert causal_mask(1).shape == (1, 1) and causal_mask(1).item()
    ids = torch.tensor([[5, 6, 7], [5, 0, 0]])
    keep = padding_mask(ids, pad_id=0)
    assert keep.shape == (2, 1, 1, 3) and keep.dtype == torch.bool
    assert keep[:, 0, 0].tolist() == [[True, True, True], [True, False, False]]


# (B, T_q, T_k, C, H): odd sizes, one head, T = 1, cross-attention with T_q != T_k.
MHA_SHAPES = [(2, 5, 5, 12, 3), (1, 1, 1, 4, 1), (2, 3, 6, 8, 2), (3, 7, 2, 6, 6)]


def _torch_mha(C, H, seed, bias=True):
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(C, H, bias=bias, batch_first=True).double().eval()
    with torch.no_grad():  # non-zero biases, so a bias copied to the wrong place shows up
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


MHA_CASES = [
    (shape, kind)
    for shape in MHA_SHAPES
    for kind in ("none", "padding", "causal", "random")
    if kind != "causal" or shape[1] == shape[2]  # causal needs T_q == T_k
]


@pytest.mark.parametrize(("shape", "mask_kind"), MHA_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_mha_matches_nn_multiheadattention(shape, mask_kind, bias):
    B, T_q, T_k, C, H = shape
    ref = _torch_mha(C, H, seed=B * 100 + T_q * 10 + T_k, bias=bias)
    ours = MultiHeadAttention.from_torch(ref)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(B, T_q, C, generator=g, dtype=torch.float64)
    mem = torch.randn(B, T_k, C, generator=g, dtype=torch.float64)
    keep, kwargs = None, {}
    if mask_kind == "padding":
        keep = torch.ones(B, 1, 1, T_k, dtype=torch.bool)
        keep[0, ..., T_k // 2 + 1 :] = False
        kwargs["key_padding_mask"] = ~keep[:, 0, 0]  # nn.MultiheadAttention: True = ignore
    elif mask_kind == "causal":
        keep = causal_mask(T_q)
        kwargs["attn_mask"] = ~keep  # bool attn_mask: True = blocked
    elif mask_kind == "random":
        keep = _random_mask((T_q, T_k), seed=5, full_rows=False)
        keep[:, 0] = True  # nn.MultiheadAttention gives NaN on fully masked rows
        kwargs["attn_mask"] = ~keep
    ref_out, ref_w = ref(x, mem, mem, need_weights=True, average_attn_weights=False, **kwargs)
    out, w = ours(x, mem, mem, mask=keep, return_weights=True)
    fused = ours(x, mem, mem, mask=keep)
    assert out.shape == (B, T_q, C) and w.shape == (B, H, T_q, T_k)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(fused, ref_out, rtol=0, atol=1e-12)


def test_mha_float32_close_to_torch():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(12, 3, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 5, 12)
    ref_out, ref_w = ref(x, x, x, average_attn_weights=False)
    out, w = ours(x, x, x, return_weights=True)
    assert (out - ref_out).abs().max() < 1e-6 and (w - ref_w).abs().max() < 1e-6


def test_fused_path_equals_weights_path_including_empty_rows_and_is_causal():
    torch.manual_seed(0)
    m = MultiHeadAttention(12, 3).double().eval()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    keep = _random_mask((2, 3, 5, 5), seed=9)  # row 0 fully masked in every head
    for kwargs in ({}, {"mask": keep}, {"is_causal": True}, {"mask": padding_mask(torch.tensor([[1, 2, 3, 0, 0]] * 2), 0), "is_causal": True}):
        out, _ = m(x, x, x, return_weights=True, **kwargs)
        torch.testing.assert_close(m(x, x, x, **kwargs), out, rtol=0, atol=1e-12)
        assert torch.isfinite(out).all()
    explicit = m(x, x, x, mask=causal_mask(5))
    torch.testing.assert_close(m(x, x, x, is_causal=True), explicit, rtol=0, atol=0)


def test_mha_gradients_finite_with_fully_masked_rows():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8, requires_grad=True)
    keep = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    keep[0, :, 1] = False
    for return_weights in (False, True):
        out = m(x, x, x, mask=keep, return_weights=return_weights)
        out = out[0] if return_weights else out
        out.sum().backward()
        assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in m.parameters())
        x.grad = None
        m.zero_grad()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), T=st.integers(1, 8), data=st.data())
def test_causality_later_tokens_never_change_earlier_outputs(seed, T, data):
    t = data.draw(st.integers(0, T - 1), label="t")
    torch.manual_seed(seed)
    m = MultiHeadAttention(12, 3).eval()
    x = torch.randn(2, T, 12)
    y = x.clone()
    y[:, t + 1 :] = torch.randn(2, T - t - 1, 12) * 10  # anything at all after position t
    for return_weights in (False, True):
        a = m(x, x, x, is_causal=True, return_weights=return_weights)
        b = m(y, y, y, is_causal=True, return_weights=return_weights)
        a, b = (a[0], b[0]) if return_weights else (a, b)
        assert torch.equal(a[:, : t + 1], b[:, : t + 1])


def test_shapes_at_odd_sizes():
    B, T, C, H = 2, 5, 12, 3
    m = MultiHeadAttention(C, H)
    x = torch.randn(B, T, C)
    out, w = m(x, x, x, mask=causal_mask(T), return_weights=True)
    assert out.shape == (B, T, C) and w.shape == (B, H, T, T) and m.head_dim == C // H
    out, w = scaled_dot_product_attention(torch.randn(B, H, T, C // H), torch.randn(B, H, 7, C // H), torch.randn(B, H, 7, 2))
    assert out.shape == (B, H, T, 2) and w.shape == (B, H, T, 7)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)
    with pytest.raises(TypeError, match="n_heads"):
        MultiHeadAttention(12, 3.0)
    m = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    with pytest.raises(ValueError, match="cut to the sequence length"):
        m(x, x, x, mask=causal_mask(8))  # a block_size buffer not cut to T
    with pytest.raises(ValueError, match="does not broadcast"):
        m(x, x, x, mask=torch.ones(4, 5, 5, dtype=torch.bool), is_causal=True)
    with pytest.raises(TypeError, match="bool"):
        m(x, x, x, mask=causal_mask(5).float())
    with pytest.raises(TypeError, match="bool"):
        m(x, x, x, mask=causal_mask(5).long(), is_causal=True)
    with pytest.raises(ValueError, match="T>=1"):
        m(x[:, :0], x[:, :0], x[:, :0])
    with pytest.raises(ValueError, match="d_model=12"):
        m(torch.randn(2, 5, 8), x, x)
    with pytest.raises(TypeError, match="dtype"):
        m(x.double(), x.double(), x.double())
    with pytest.raises(ValueError, match="is_causal"):
        m(x, torch.randn(2, 4, 12), torch.randn(2, 4, 12), is_causal=True)
    with pytest.raises(ValueError, match="T must be >= 1"):
        causal_mask(0)
    with pytest.raises(TypeError, match="T must be an int"):
        causal_mask(2.0)
    with pytest.raises(TypeError, match="ids"):
        padding_mask(torch.ones(2, 3), 0)
    q = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="T >= 1"):
        scaled_dot_product_attention(q[:, :0], q, q)
    with pytest.raises(ValueError, match="last dimension"):
        scaled_dot_product_attention(q, torch.randn(2, 5, 3), q)
    with pytest.raises(ValueError, match="T_k"):
        scaled_dot_product_attention(q, q, torch.randn(2, 4, 4))
    with pytest.raises(TypeError, match="one dtype"):
        scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(ValueError, match="scale"):
        scaled_dot_product_attention(q, q, q, scale=0.0)
    with pytest.raises(ValueError, match="dropout_p"):
        scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(TypeError, match="mask"):
        scaled_dot_product_attention(q, q, q, mask=[[True]])
    with pytest.raises(TypeError, match="from_torch|nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="batch_first"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2))
