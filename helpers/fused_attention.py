"""Multi-head attention whose q, k and v projections are stored as one (3C, C) matrix, as GPT-2 stores them.

GPT-2's ``c_attn``, nanoGPT's ``c_attn`` and `nn.MultiheadAttention`'s ``in_proj_weight`` all hold
W_q, W_k and W_v stacked along the output dimension. For self-attention that is one matrix
multiply of width 3C instead of three of width C, and one Linear node in the backward pass instead
of three: the same function (each output column depends only on its own row of weights).
`MultiHeadAttention` keeps three Linears because notebook 04 teaches them as three matrices;
`GPT`'s blocks use this one.

``q_proj``, ``k_proj`` and ``v_proj`` are still there, as `RowBlock` views of the fused matrix:
code written for `MultiHeadAttention` (the KV cache, an explorer, a learner's own loop) reads and
calls them unchanged, and an in-place write to one of them (under ``torch.no_grad()``) changes
the fused weight. Weights saved before the fusion (three matrices per layer) still load:
`fuse_legacy_qkv` stacks them, and ``load_state_dict`` does it by itself.

Shapes: B batch, T length, C = d_model, H heads, hs = C // H.
    FusedMultiHeadAttention(C, H)(x, x, x)   (B, T, C) -> (B, T, C)   (one (3C, C) projection)
    .qkv_proj.weight                         (3C, C): rows [W_q; W_k; W_v]
    .q_proj / .k_proj / .v_proj              RowBlock: .weight (C, C) view, callable like nn.Linear

Example:
    >>> attn = FusedMultiHeadAttention(d_model=8, n_heads=2)
    >>> attn.qkv_proj.weight.shape, attn.k_proj.weight.shape
    (torch.Size([24, 8]), torch.Size([8, 8]))
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention

PARTS = ("q_proj", "k_proj", "v_proj")  # the row blocks of qkv_proj, in order


class RowBlock:
    """Rows i·C .. (i + 1)·C of a fused (3C, C) projection, read and called like an ``nn.Linear(C, C)``."""

    __slots__ = ("_proj", "_rows")

    def __init__(self, proj: nn.Linear, i: int):
        C = proj.in_features
        self._proj, self._rows = proj, slice(i * C, (i + 1) * C)

    @property
    def weight(self) -> torch.Tensor:
        return self._proj.weight[self._rows]  # (3C, C) -> (C, C), a view: writes reach the fused matrix

    @property
    def bias(self) -> torch.Tensor | None:
        b = self._proj.bias
        return None if b is None else b[self._rows]  # (3C,) -> (C,)

    @property
    def in_features(self) -> int:
        return self._proj.in_features

    @property
    def out_features(self) -> int:
        return self._proj.in_features  # a block of C rows: (C, C), square

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)  # (..., C) -> (..., C)

    def __repr__(self) -> str:
        return f"RowBlock(rows {self._rows.start}..{self._rows.stop - 1} of {self._proj!r})"


class FusedMultiHeadAttention(MultiHeadAttention):
    """`MultiHeadAttention` with W_q, W_k, W_v stored stacked in ``qkv_proj`` (a Linear C -> 3C)."""

    def _make_in_projections(self, d_model: int, bias: bool) -> None:
        # One Linear(C, 3C) draws as many random numbers as three Linear(C, C), so a model built
        # after it starts from the same generator state as with the unfused attention.
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.register_load_state_dict_pre_hook(_fuse_on_load)

    q_proj = property(lambda self: RowBlock(self.qkv_proj, 0), doc="W_q's rows of qkv_proj, as a Linear view")
    k_proj = property(lambda self: RowBlock(self.qkv_proj, 1), doc="W_k's rows of qkv_proj, as a Linear view")
    v_proj = property(lambda self: RowBlock(self.qkv_proj, 2), doc="W_v's rows of qkv_proj, as a Linear view")

    def project(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        """As `MultiHeadAttention.project`; self-attention (one tensor passed three times) in one multiply."""
        if not (query is key is value):  # cross-attention: each row block on its own input
            return super().project(query, key, value)
        # split, not a view to (B, T, 3, H, hs) and unbind: the backward of split writes the three
        # gradients straight into one (B, T, 3C) tensor; unbind's stacks them and then copies again
        q, k, v = self.qkv_proj(query).split(self.d_model, dim=-1)  # (B, T, C) -> (B, T, 3C) -> 3 x (B, T, C)
        return self._split(q), self._split(k), self._split(v)  # 3 x (B, H, T, hs)


def fuse_legacy_qkv(state: dict, expected: Mapping[str, torch.Tensor]) -> dict:
    """``state`` with each ``….q_proj/k_proj/v_proj.{weight,bias}`` triple stacked into ``….qkv_proj.…``.

    ``expected`` is the state dict (or the named parameters) of the model it is for. A triple is
    stacked only where ``expected`` asks for a ``qkv_proj`` key that ``state`` lacks and all three
    parts are tensors of a third of its shape; anything else is left as it is, so a file that does
    not fit is still named by the loader's own key check, and nothing larger than the model's own
    matrix is ever built from a file. Returns a new dict; ``state`` is not changed.
    """
    state = dict(state)
    for key, want in expected.items():
        head, found, tail = key.rpartition("qkv_proj.")
        if not found or tail not in ("weight", "bias") or key in state:
            continue
        parts = [f"{head}{p}.{tail}" for p in PARTS]
        third = (want.shape[0] // 3, *want.shape[1:])  # (3C, C) -> (C, C); (3C,) -> (C,)
        if all(isinstance(state.get(p), torch.Tensor) and tuple(state[p].shape) == third for p in parts):
            state[key] = torch.cat([state.pop(p) for p in parts])  # 3 x (C, C) -> (3C, C); 3 x (C,) -> (3C,)
    return state


def _fuse_on_load(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """load_state_dict's pre-hook: stack an older file's three matrices into qkv_proj, in place."""
    expected = {f"{prefix}qkv_proj.{n}": p for n, p in module.qkv_proj.named_parameters()}
    fused = fuse_legacy_qkv({k: state_dict[k] for k in state_dict if k.startswith(prefix)}, expected)
    for k in [k for k in state_dict if k.startswith(prefix) and k not in fused]:
        del state_dict[k]
    state_dict.update(fused)


__all__ = ["FusedMultiHeadAttention", "RowBlock", "fuse_legacy_qkv"]
