"""Scaled dot-product attention, its masks, and multi-head attention.

Masks are bool and **True = may attend** (the convention of
`F.scaled_dot_product_attention`). Beware: `nn.MultiheadAttention`'s `key_padding_mask`
and bool `attn_mask` use the opposite convention (True = blocked).

A query row with no allowed key (e.g. every query of a source that is all padding) gets
**zero weights and a zero attention output**, never NaN, on both paths of
`MultiHeadAttention` and whatever the backend: softmax over nothing is 0/0, and the
reference code in `F.scaled_dot_product_attention`'s docstring (like older PyTorch
releases and some CUDA kernels) returns NaN there, even though torch 2.13's CPU kernels
return 0. (`MultiHeadAttention` then adds ``out_proj``'s bias, so its output is the bias.)

Shapes: B batch, H heads, T_q / T_k query / key lengths, C = d_model, hs = C // H.
    scaled_dot_product_attention(q, k, v)  (..., T_q, d), (..., T_k, d), (..., T_k, d_v)
                                           -> out (..., T_q, d_v), weights (..., T_q, T_k)
                                           (scores scaled by 1/√d, or by ``scale=`` if given)
    causal_mask(T)                         -> (T, T)
    padding_mask(ids (B, T), pad_id)       -> (B, 1, 1, T)
    MultiHeadAttention(C, H)(q, k, v)      (B, T_q, C), (B, T_k, C), (B, T_k, C) -> (B, T_q, C)
                                           (``rope=(cos, sin)``, each (T, hs/2): rotary positions)

Example:
    >>> causal_mask(3)
    tensor([[ True, False, False],
            [ True,  True, False],
            [ True,  True,  True]])
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from helpers.positional import apply_rope
from helpers.validate import check_bool, check_int, check_probability, check_tensor


def check_mask(mask, scores_shape: torch.Size, name: str = "mask") -> torch.Tensor:
    """Return ``mask`` if it is a bool tensor that broadcasts to ``scores_shape`` (..., T_q, T_k)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True = may attend), got {mask.dtype}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(scores_shape)} (..., T_q, T_k); was it cut to the sequence length?"
        )
    return mask


def check_rope(rope, T: int, head_dim: int, dtype: torch.dtype, name: str = "rope") -> tuple[torch.Tensor, torch.Tensor]:
    """``rope`` must be ``(cos, sin)``, two tensors of ``dtype`` and shape (T, head_dim / 2) (`positional.rope_tables`)."""
    if not (isinstance(rope, tuple) and len(rope) == 2 and all(isinstance(t, torch.Tensor) for t in rope)):
        raise TypeError(f"{name} must be a tuple (cos, sin) of two tensors, got {type(rope).__name__}")
    if head_dim % 2:
        raise ValueError(f"{name} rotates pairs of dimensions: the head size must be even, got {head_dim}")
    for part, t in zip(("cos", "sin"), rope, strict=True):
        if t.dtype != dtype or tuple(t.shape) != (T, head_dim // 2):
            raise ValueError(f"{name}'s {part} must be a {dtype} tensor of shape (T={T}, head_dim/2={head_dim // 2}) "
                             f"(one row per position, the queries' dtype), got {t.dtype} {tuple(t.shape)}")
    return rope


def _check_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, floating=True)
        if t.dim() < 2 or t.shape[-2] < 1 or t.shape[-1] < 1:
            raise ValueError(f"{name} must have shape (..., T, d) with T >= 1 and d >= 1, got {tuple(t.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension d, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length T_k, got {k.shape[-2]} and {v.shape[-2]}")


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p: float = 0.0, *, scale: float | None = None):
    """softmax(q kᵀ · scale + mask) v, step by step; returns ``(out, weights)``.

    scale: multiplies the scores; None means 1/√d, d = q.shape[-1] (the head size). It is
        applied before the product (√scale to q and to k), so float16 scores do not overflow.
    A query row with no allowed key gets zero weights and a zero output, never NaN.
    """
    _check_qkv(q, k, v)
    check_probability("dropout_p", dropout_p)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (0 < scale < math.inf):
        raise ValueError(f"scale must be a positive finite number or None, got {scale!r}")
    scale = float(scale)  # a numpy or 0-d scalar becomes a Python float, as PyTorch's own scale does
    # Scale before the product, √scale on each side as PyTorch's reference does: in float16,
    # q·kᵀ itself can pass 65,504 (→ inf → NaN) while the scaled scores fit. Half-precision
    # scores and softmax are computed in float32 (as PyTorch's CPU kernels do), then cast back.
    root, dtype = math.sqrt(scale), q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k = q.float(), k.float()
    scores = (q * root) @ (k * root).transpose(-2, -1)  # (..., T_q, d) @ (..., d, T_k) -> (..., T_q, T_k)
    if mask is not None:
        mask = check_mask(mask, scores.shape)
        # -inf (not -1e9) gives exactly zero weight and cannot overflow in float16.
        scores = scores.masked_fill(~mask, float("-inf"))
        any_allowed = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        # Rows with nothing allowed would be softmax(-inf, ..., -inf) = NaN: compute on 0s, then zero them.
        scores = torch.where(any_allowed, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    weights = torch.softmax(scores, dim=-1).to(dtype)
    if mask is not None:
        weights = weights.masked_fill(~any_allowed, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p)
    return weights @ v, weights  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal: position t sees positions 0..t."""
    check_int("T", T, minimum=1)
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, 1, 1, T) bool, True for real tokens: broadcasts over heads and queries."""
    check_tensor("ids", ids, ndim=2, floating=False)
    check_int("pad_id", pad_id, minimum=0)
    return (ids != pad_id)[:, None, None, :]  # (B, T) -> (B, 1, 1, T)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate q/k/v/out projections.

    ``forward`` uses PyTorch's fused kernel unless the weights are asked for; both
    paths compute the same function (the tests assert it).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_int("n_heads", n_heads, minimum=1)
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout = check_probability("dropout", dropout)
        check_bool("bias", bias)
        self._make_in_projections(d_model, bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _make_in_projections(self, d_model: int, bias: bool) -> None:
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, T, C) -> (B, H, T, hs)

    def project(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        """The heads' queries, keys and values: (B, T_q, C), (B, T_k, C) x 2 -> (B, H, T_q, hs), (B, H, T_k, hs) x 2."""
        return self._split(self.q_proj(query)), self._split(self.k_proj(key)), self._split(self.v_proj(value))

    def forward(self, query, key, value, mask=None, return_weights: bool = False, is_causal: bool = False,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None):
        """Attend from ``query`` (B, T_q, C) to ``key``/``value`` (B, T_k, C).

        mask: bool, broadcastable to (B, H, T_q, T_k), True = may attend. A query row with no
            allowed key gives a zero attention output (so ``out_proj.bias``), never NaN.
        is_causal: add the causal mask (query t sees keys 0..t).
        rope: ``(cos, sin)`` of the positions, each (T, hs/2) (`helpers.positional.rope_tables`):
            every head's queries and keys are rotated by them (`apply_rope`) before the scores;
            self-attention only (T_q == T_k = T). None (default): no rotation, no cost.
        """
        check_bool("return_weights", return_weights)
        check_bool("is_causal", is_causal)  # a truthy string such as "no" would turn the mask on
        # self-attention passes one tensor three times: check it once (this runs at every layer, every step)
        named = (("query", query),) if query is key is value else (("query", query), ("key", key), ("value", value))
        for name, t in named:
            check_tensor(name, t, ndim=3, floating=True)
            if t.shape[-1] != self.d_model or t.shape[1] < 1:
                raise ValueError(f"{name} must have shape (B, T>=1, d_model={self.d_model}), got {tuple(t.shape)}")
        dtypes = {query.dtype, key.dtype, value.dtype, self.out_proj.weight.dtype}
        if len(dtypes) > 1:
            raise TypeError(f"query, key, value and the weights must share one dtype, got {sorted(map(str, dtypes))}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"query, key and value must share the batch size and key/value their length, got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        B, T_q, C = query.shape
        T_k = key.shape[1]
        if mask is not None:  # checked before combining, so a wrong mask is named, not broadcast away
            mask = check_mask(mask, torch.Size((B, self.n_heads, T_q, T_k)))
        if is_causal and T_q != T_k:
            raise ValueError(f"is_causal needs T_q == T_k, got {T_q} and {T_k}")
        if rope is not None:
            if T_q != T_k:
                raise ValueError(f"rope rotates queries and keys at the same positions: it needs T_q == T_k, "
                                 f"got {T_q} and {T_k}")
            check_rope(rope, T_q, self.head_dim, query.dtype)
        if is_causal and (mask is not None or return_weights):
            causal = causal_mask(T_q, device=query.device)
            mask = causal if mask is None else mask & causal
            is_causal = False  # now inside the mask
        q, k, v = self.project(query, key, value)  # (B, T, C) -> (B, H, T, hs) each
        if rope is not None:  # rotary positions: q·k then depends on the distance of the two positions only
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # (B, H, T, hs) each
        p = self.dropout if self.training else 0.0
        if return_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)
        elif mask is None:  # alone, is_causal lets the kernel skip the blocks above the diagonal
            out, weights = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=is_causal), None
        else:
            # any(dim=-1), through uint8 because bool any() is ~10x slower on CPU (0.4 vs 0.04 ms here)
            any_allowed = mask.view(torch.uint8).amax(dim=-1, keepdim=True).bool()  # (..., T_q, T_k) -> (..., T_q, 1)
            if bool(any_allowed.all()):  # the usual case: one cheap reduction, then the mask as is
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            else:
                # A row with no allowed key may come out NaN (0/0), depending on the backend: let it
                # attend everywhere (finite values and gradients), then zero it, as the weights path.
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~any_allowed, dropout_p=p)
                out = out.masked_fill(~any_allowed, 0.0)
            weights = None
        out = out.transpose(1, 2).reshape(B, T_q, C)  # (B, H, T_q, hs) -> (B, T_q, C)
        out = self.out_proj(out)
        return (out, weights) if return_weights else out

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy a ``batch_first`` `nn.MultiheadAttention` so both compute the same outputs."""
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"m must be an nn.MultiheadAttention, got {type(m).__name__}")
        if not m.batch_first:
            raise ValueError("m must be built with batch_first=True (our layout is (B, T, C))")
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            raise ValueError("only plain nn.MultiheadAttention (same q/k/v width, no bias_k, no add_zero_attn)")
        bias = m.in_proj_bias is not None
        # Cast before copying: copying float64 weights into float32 ones would round them.
        ours = cls(m.embed_dim, m.num_heads, dropout=m.dropout, bias=bias)
        ours = ours.to(device=m.in_proj_weight.device, dtype=m.in_proj_weight.dtype)
        with torch.no_grad():
            for i, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
                # in_proj_weight stacks W_q, W_k, W_v along dim 0: (3C, C) -> three (C, C)
                proj.weight.copy_(m.in_proj_weight[i * m.embed_dim : (i + 1) * m.embed_dim])
                if bias:
                    proj.bias.copy_(m.in_proj_bias[i * m.embed_dim : (i + 1) * m.embed_dim])
            ours.out_proj.weight.copy_(m.out_proj.weight)
            if bias:
                ours.out_proj.bias.copy_(m.out_proj.bias)
        return ours.train(m.training)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, head_dim={self.head_dim}, dropout={self.dropout}"
