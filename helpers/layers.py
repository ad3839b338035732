"""One Transformer layer: position-wise feed-forward, encoder layer, decoder layer.

Each sub-layer is wrapped in a residual connection and a LayerNorm, placed either
after the addition (post-LN, the paper and PyTorch's default, ``norm_first=False``)
or before the sub-layer (pre-LN, GPT-2 style, ``norm_first=True``)::

    post-LN:  x = norm(x + sublayer(x))
    pre-LN:   x = x + sublayer(norm(x))

The layers mirror `nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`
(same dropout placement, same LayerNorm eps) and ``from_torch`` copies their weights.
Masks are bool with **True = may attend**; PyTorch's bool masks mean the opposite.
``memory_mask`` (decoder) is the cross-attention's one mask, broadcast to (B, H, T, S): it
carries **both** of PyTorch's, ``memory_mask`` (T, S) and ``memory_key_padding_mask`` (B, S),
as ``~memory_mask & ~memory_key_padding_mask[:, None, None, :]``; source padding alone is
``padding_mask(src_ids, pad)`` (notebook 05 §7 checks the mapping).
The stacks `Encoder` and `Decoder` live in `helpers.stacks` (which imports this module).

Shapes: B batch, T / S target / source length, C = d_model, H heads, L layers.
    FeedForward(C, d_ff)(x)               (B, T, C) -> (B, T, C)
    EncoderLayer(C, H, d_ff)(x)           (B, T, C) -> (B, T, C)   [weights (B, H, T, T)]
    DecoderLayer(C, H, d_ff)(x, memory)   (B, T, C), (B, S, C) -> (B, T, C)
                                          [self weights (B, H, T, T), cross (B, H, T, S)]

Example:
    >>> layer = EncoderLayer(d_model=8, n_heads=2, d_ff=16, dropout=0.0)
    >>> layer(torch.zeros(2, 5, 8)).shape
    torch.Size([2, 5, 8])
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention, check_mask
from helpers.fused_attention import FusedMultiHeadAttention
from helpers.validate import check_bool, check_int, check_positive, check_probability, check_tensor

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}
_ACTIVATIONS["gelu_tanh"] = partial(F.gelu, approximate="tanh")  # GPT-2's GELU


def _check_activation(activation) -> str:
    if not isinstance(activation, str) or activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    return activation


def _torch_activation(m) -> str:
    act = m.activation  # F.relu / F.gelu when built from a string, or a module / callable
    if act is F.relu or (isinstance(act, nn.ReLU)):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    raise ValueError(f"only relu or (exact) gelu activations can be copied, got {act!r}")


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    if src.bias is not None:
        dst.bias.copy_(src.bias)


def _copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    # A torch norm built with bias=False (or elementwise_affine=False) has None there: the
    # same function as our gain 1 / shift 0.
    for ours, theirs, default in ((dst.weight, src.weight, 1.0), (dst.bias, src.bias, 0.0)):
        if theirs is None:
            ours.fill_(default)
        else:
            ours.copy_(theirs)


def check_input(name: str, x, dtype: torch.dtype, d_model: int) -> torch.Tensor:
    """``x`` must be a float tensor (B, T>=1, d_model) of the layer's ``dtype``: named errors, not torch's."""
    check_tensor(name, x, ndim=3, floating=True)
    if x.shape[-1] != d_model or x.shape[1] < 1:
        raise ValueError(f"{name} must have shape (B, T>=1, d_model={d_model}), got {tuple(x.shape)}")
    if x.dtype != dtype:
        raise TypeError(f"{name} must have the layer's dtype {dtype}, got {x.dtype}")
    return x


def _check_layer_args(norm_first, layer_norm_eps, bias) -> None:
    check_bool("norm_first", norm_first)
    check_positive("layer_norm_eps", layer_norm_eps)  # eps <= 0 gives NaN on a constant row
    check_bool("bias", bias)


class FeedForward(nn.Module):
    """linear2(dropout(act(linear1(x)))): the same two-layer MLP applied at every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True):
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.d_ff = check_int("d_ff", d_ff, minimum=1)
        self.activation = _check_activation(activation)
        check_bool("bias", bias)
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., C) float of the layer's dtype -> (..., C)."""
        check_tensor("x", x, floating=True)
        if x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must have width d_model={self.d_model} in its last dimension, got {tuple(x.shape)}")
        if x.dtype != self.linear1.weight.dtype:
            raise TypeError(f"x must have the layer's dtype {self.linear1.weight.dtype}, got {x.dtype}")
        h = _ACTIVATIONS[self.activation](self.linear1(x))  # (B, T, C) -> (B, T, d_ff)
        return self.linear2(self.dropout(h))  # (B, T, d_ff) -> (B, T, C)

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with a residual connection and a LayerNorm.

    ``fused_qkv=True`` stores the attention's W_q, W_k, W_v as one (3C, C) matrix
    (`FusedMultiHeadAttention`, what GPT uses); the function computed is the same.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        fused_qkv: bool = False,
    ):
        super().__init__()
        check_probability("dropout", dropout)
        _check_layer_args(norm_first, layer_norm_eps, bias)
        check_bool("fused_qkv", fused_qkv)
        self.norm_first = bool(norm_first)
        # fused_qkv: W_q, W_k, W_v stored as one (3C, C) matrix, as GPT-2 does (`helpers.fused_attention`)
        attention = FusedMultiHeadAttention if fused_qkv else MultiHeadAttention
        self.self_attn = attention(d_model, n_heads, dropout=dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)  # on each sub-layer's output, before the residual add
        self.dropout2 = nn.Dropout(dropout)

    def _sa(self, x, mask, is_causal, return_weights, rope):
        out = self.self_attn(x, x, x, mask=mask, is_causal=is_causal, return_weights=return_weights, rope=rope)
        out, w = out if return_weights else (out, None)
        return self.dropout1(out), w

    def forward(self, x, mask=None, is_causal: bool = False, return_weights: bool = False, rope=None):
        """x (B, T, C) -> (B, T, C); with ``return_weights`` also the attention weights (B, H, T, T).

        ``rope`` (cos, sin), each (T, hs/2): rotary positions for the self-attention (`MultiHeadAttention`).
        """
        check_input("x", x, self.norm1.weight.dtype, self.self_attn.d_model)  # pre-LN: norm1 would fail first, unnamed
        if self.norm_first:
            a, w = self._sa(self.norm1(x), mask, is_causal, return_weights, rope)
            x = x + a
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, w = self._sa(x, mask, is_causal, return_weights, rope)
            x = self.norm1(x + a)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return (x, w) if return_weights else x

    @classmethod
    def from_torch(cls, m: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy a ``batch_first`` `nn.TransformerEncoderLayer` (relu or gelu, either norm placement)."""
        if not isinstance(m, nn.TransformerEncoderLayer):
            raise TypeError(f"m must be an nn.TransformerEncoderLayer, got {type(m).__name__}")
        ours = cls(
            m.self_attn.embed_dim, m.self_attn.num_heads, m.linear1.out_features, dropout=m.dropout.p,
            norm_first=m.norm_first, activation=_torch_activation(m), layer_norm_eps=m.norm1.eps,
            bias=m.linear1.bias is not None,
        )
        ours.self_attn = MultiHeadAttention.from_torch(m.self_attn)  # checks batch_first
        with torch.no_grad():
            _copy_linear(ours.ff.linear1, m.linear1)
            _copy_linear(ours.ff.linear2, m.linear2)
            _copy_norm(ours.norm1, m.norm1)
            _copy_norm(ours.norm2, m.norm2)
        return ours.to(device=m.linear1.weight.device, dtype=m.linear1.weight.dtype).train(m.training)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to ``memory``, feed-forward; each residual + LayerNorm."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
    ):
        super().__init__()
        check_probability("dropout", dropout)
        _check_layer_args(norm_first, layer_norm_eps, bias)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _attn(self, attn, drop, x, mem, mask, is_causal, rw):
        out = attn(x, mem, mem, mask=mask, is_causal=is_causal, return_weights=rw)
        out, w = out if rw else (out, None)
        return drop(out), w

    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal: bool = False,
                return_weights: bool = False):
        """x (B, T, C), memory (B, S, C) -> (B, T, C).

        ``self_mask`` broadcasts to (B, H, T, T), ``memory_mask`` to (B, H, T, S) (True = may
        attend; it holds what PyTorch splits into ``memory_mask`` and ``memory_key_padding_mask``,
        see the module doc); ``is_causal`` adds the causal mask to the self-attention. With ``return_weights`` returns
        ``(x, self_weights (B, H, T, T), cross_weights (B, H, T, S))``.
        """
        check_input("x", x, self.norm1.weight.dtype, self.self_attn.d_model)
        check_input("memory", memory, self.norm1.weight.dtype, self.self_attn.d_model)
        (B, T, _), S, H = x.shape, memory.shape[1], self.self_attn.n_heads
        if self_mask is not None:  # named here: inside, both masks are just the attention's "mask"
            check_mask(self_mask, torch.Size((B, H, T, T)), "self_mask")
        if memory_mask is not None:
            check_mask(memory_mask, torch.Size((B, H, T, S)), "memory_mask")
        sa = (self.self_attn, self.dropout1)
        ca = (self.cross_attn, self.dropout2)
        if self.norm_first:
            h = self.norm1(x)
            a, w_self = self._attn(*sa, h, h, self_mask, is_causal, return_weights)
            x = x + a
            a, w_cross = self._attn(*ca, self.norm2(x), memory, memory_mask, False, return_weights)
            x = x + a
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, w_self = self._attn(*sa, x, x, self_mask, is_causal, return_weights)
            x = self.norm1(x + a)
            a, w_cross = self._attn(*ca, x, memory, memory_mask, False, return_weights)
            x = self.norm2(x + a)
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return (x, w_self, w_cross) if return_weights else x

    @classmethod
    def from_torch(cls, m: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Copy a ``batch_first`` `nn.TransformerDecoderLayer` (relu or gelu, either norm placement)."""
        if not isinstance(m, nn.TransformerDecoderLayer):
            raise TypeError(f"m must be an nn.TransformerDecoderLayer, got {type(m).__name__}")
        ours = cls(
            m.self_attn.embed_dim, m.self_attn.num_heads, m.linear1.out_features, dropout=m.dropout.p,
            norm_first=m.norm_first, activation=_torch_activation(m), layer_norm_eps=m.norm1.eps,
            bias=m.linear1.bias is not None,
        )
        ours.self_attn = MultiHeadAttention.from_torch(m.self_attn)
        ours.cross_attn = MultiHeadAttention.from_torch(m.multihead_attn)
        with torch.no_grad():
            _copy_linear(ours.ff.linear1, m.linear1)
            _copy_linear(ours.ff.linear2, m.linear2)
            for name in ("norm1", "norm2", "norm3"):
                _copy_norm(getattr(ours, name), getattr(m, name))
        return ours.to(device=m.linear1.weight.device, dtype=m.linear1.weight.dtype).train(m.training)


__all__ = ["FeedForward", "EncoderLayer", "DecoderLayer"]
