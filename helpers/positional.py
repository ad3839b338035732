"""Positional encodings: the fixed sinusoidal table of the paper, a learned table, and rotary positions.

    PE[pos, 2i]   = sin(pos / base**(2i / d_model))
    PE[pos, 2i+1] = cos(pos / base**(2i / d_model))

Shapes (one alphabet across helpers): B batch, T sequence length, C = d_model.
    inverse_frequencies(C)               -> (C/2,)   theta_i = base**(-2i / C)
    wavelengths(C)                       -> (C/2,)   2 pi / theta_i, a geometric progression
    sinusoidal_table(T, C)               -> (T, C)
    relative_rotation(k, C)              -> (C, C)   PE[pos + k] = M_k @ PE[pos]
    SinusoidalPositionalEncoding(C)(x)   (B, T, C) -> (B, T, C)
    LearnedPositionalEmbedding(L, C)(x)  (B, T, C) -> (B, T, C)
    rope_tables(T, hs)                   -> cos, sin (T, hs/2) each
    apply_rope(x, cos, sin)              (..., T, hs) -> (..., T, hs)

Rotary positions (RoPE) add nothing to x: they rotate each head's queries and keys, adjacent
pairs (x[2i], x[2i+1]) by the angle pos·θ_i, θ_i = base**(-2i / hs), so a query·key product
depends on the two positions' distance only (`helpers.llama` and `GPTConfig(positional="rope")`).

Example:
    >>> sinusoidal_table(2, 4)
    tensor([[0.0000, 1.0000, 0.0000, 1.0000],
            [0.8415, 0.5403, 0.0100, 0.9999]])
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers.validate import check_int, check_probability, check_tensor


def _check_d_model(d_model) -> int:
    check_int("d_model", d_model, minimum=1)
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin and cos come in pairs), got {d_model}")
    return d_model


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number, got {type(base).__name__}")
    if not (base > 0 and math.isfinite(base)):
        raise ValueError(f"base must be a positive finite number, got {base}")
    return float(base)


def inverse_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The float64 angular frequencies theta_i = base**(-2i / d_model), i = 0 .. d_model/2 - 1."""
    _check_d_model(d_model)
    base = _check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (C/2,)
    return base ** (-two_i / d_model)  # (C/2,)


def wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The float64 wavelengths 2 pi / theta_i: from 2 pi up to (almost) 2 pi * base, ratio base**(2/d_model)."""
    return 2 * math.pi / inverse_frequencies(d_model, base)  # (C/2,)


def sinusoidal_table(seq_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (seq_len, d_model) float32 sinusoidal table, computed in float64 for accuracy."""
    check_int("seq_len", seq_len, minimum=1)
    theta = inverse_frequencies(d_model, base)  # (C/2,)
    pos = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    angle = pos * theta  # (T, 1) * (C/2,) -> (T, C/2)
    table = torch.empty(seq_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.to(torch.float32)


def relative_rotation(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The float64 (d_model, d_model) matrix M_k with PE[pos + k] = M_k @ PE[pos] for every pos.

    M_k is block-diagonal; block i rotates the pair (sin a, cos a) by the angle k * theta_i,
    by sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b.
    It depends on the offset k only, never on pos: that is what makes relative positions easy.
    """
    check_int("k", k)
    b = k * inverse_frequencies(d_model, base)  # (C/2,)
    cos, sin = torch.cos(b), torch.sin(b)
    blocks = torch.stack(
        [torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2
    )  # (C/2, 2, 2)
    return torch.block_diag(*blocks)  # (C/2, 2, 2) -> (C, C)


def _check_input(x, d_model: int, max_len: int) -> torch.Tensor:
    check_tensor("x", x, ndim=3, floating=True)
    if x.shape[-1] != d_model:
        raise ValueError(
            f"x must have width d_model={d_model} in its last dimension, got shape {tuple(x.shape)}"
        )
    if not 1 <= x.shape[1] <= max_len:
        raise ValueError(f"sequence length T={x.shape[1]} must be in [1, max_len={max_len}]")
    return x


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to its input; the table is a buffer, not a parameter."""

    def __init__(
        self, d_model: int, max_len: int = 5000, base: float = 10000.0, dropout: float = 0.0
    ):
        super().__init__()
        self.d_model = _check_d_model(d_model)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.base = _check_base(base)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        # A buffer follows .to(device) but is never trained; non-persistent: it is recomputed, not saved.
        self.register_buffer("table", sinusoidal_table(max_len, d_model, base), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len)
        T = x.shape[1]
        return self.dropout(x + self.table[:T].to(x.dtype))  # (B, T, C) + (T, C) -> (B, T, C)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base:g}"


class LearnedPositionalEmbedding(nn.Module):
    """A trainable vector per position (GPT-2 style). It cannot go past ``max_len``."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len)
        pos = torch.arange(x.shape[1], device=x.device)  # (T,)
        return x + self.embedding(pos)  # (B, T, C) + (T, C) -> (B, T, C)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


def rope_tables(n_positions: int, head_dim: int, base: float = 10000.0,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos·θ_i for pos = 0 .. n_positions - 1, computed in float64: (n_positions, head_dim / 2) each."""
    check_int("n_positions", n_positions, minimum=1)
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * inverse_frequencies(head_dim, base)  # (T, hs/2)
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs (x[2i], x[2i+1]) of the last dimension by the angles of cos, sin (T, hs/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, hs) -> (..., T, hs/2) x 2
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)  # -> (..., T, hs)
