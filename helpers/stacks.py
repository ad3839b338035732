"""Stacks of layers: `Encoder` (N encoder layers) and `Decoder` (N decoder layers).

Each stack ends with an optional LayerNorm. Pre-LN stacks need it (otherwise the
last layer's residual stream reaches the head un-normalised); `nn.Transformer` adds
one to both stacks whatever the norm placement, so ``final_norm=True`` is the default.
Layers are built independently (fresh random weights each), unlike
`nn.TransformerEncoder(layer, N)`, which deep-copies one layer N times.

Shapes: B batch, T / S target / source length, C = d_model, H heads, L layers.
    Encoder(L, C, H, d_ff)(x)           (B, S, C) -> (B, S, C)   [weights (L, B, H, S, S)]
    Decoder(L, C, H, d_ff)(x, memory)   (B, T, C), (B, S, C) -> (B, T, C)
                                        [self (L, B, H, T, T), cross (L, B, H, T, S)]

Example:
    >>> enc = Encoder(n_layers=2, d_model=8, n_heads=2, d_ff=16, dropout=0.0)
    >>> enc(torch.zeros(1, 3, 8)).shape
    torch.Size([1, 3, 8])
"""

from __future__ import annotations

import torch
from torch import nn

from helpers.layers import DecoderLayer, EncoderLayer, _copy_norm
from helpers.validate import check_bool, check_int


def _final_norm(m, d_model: int, eps: float):
    return nn.LayerNorm(d_model, eps=eps) if m else None


class Encoder(nn.Module):
    """``n_layers`` encoder layers, then an optional final LayerNorm."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", final_norm: bool = True,
                 layer_norm_eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_int("n_layers", n_layers, minimum=1)
        check_bool("final_norm", final_norm)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, bias)
            for _ in range(n_layers)
        )
        self.norm = _final_norm(final_norm, d_model, layer_norm_eps)

    def forward(self, x, mask=None, is_causal: bool = False, return_weights: bool = False):
        """x (B, S, C) -> (B, S, C); with ``return_weights`` also weights (L, B, H, S, S)."""
        weights = []
        for layer in self.layers:
            if return_weights:
                x, w = layer(x, mask=mask, is_causal=is_causal, return_weights=True)
                weights.append(w)
            else:
                x = layer(x, mask=mask, is_causal=is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return (x, torch.stack(weights)) if return_weights else x  # L x (B, H, S, S) -> (L, B, H, S, S)

    @classmethod
    def from_torch(cls, m: nn.TransformerEncoder) -> Encoder:
        """Copy a ``batch_first`` `nn.TransformerEncoder` (its layers and its final norm, if any)."""
        if not isinstance(m, nn.TransformerEncoder):
            raise TypeError(f"m must be an nn.TransformerEncoder, got {type(m).__name__}")
        if len(m.layers) == 0:
            raise ValueError("m has no layers (num_layers=0); an Encoder needs n_layers >= 1")
        first = m.layers[0]
        d_model = first.self_attn.embed_dim
        ours = cls(len(m.layers), d_model, first.self_attn.num_heads, first.linear1.out_features,
                   final_norm=m.norm is not None, layer_norm_eps=first.norm1.eps)
        ours.layers = nn.ModuleList(EncoderLayer.from_torch(layer) for layer in m.layers)
        if m.norm is not None:
            ours.norm = nn.LayerNorm(d_model, eps=m.norm.eps)
            with torch.no_grad():
                _copy_norm(ours.norm, m.norm)
        return ours.to(device=first.linear1.weight.device, dtype=first.linear1.weight.dtype).train(m.training)


class Decoder(nn.Module):
    """``n_layers`` decoder layers attending to the same ``memory``, then an optional LayerNorm."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", final_norm: bool = True,
                 layer_norm_eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_int("n_layers", n_layers, minimum=1)
        check_bool("final_norm", final_norm)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, bias)
            for _ in range(n_layers)
        )
        self.norm = _final_norm(final_norm, d_model, layer_norm_eps)

    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal: bool = False,
                return_weights: bool = False):
        """x (B, T, C), memory (B, S, C) -> (B, T, C).

        With ``return_weights`` returns ``(x, self_weights (L, B, H, T, T), cross_weights (L, B, H, T, S))``.
        """
        w_self, w_cross = [], []
        for layer in self.layers:
            if return_weights:
                x, ws, wc = layer(x, memory, self_mask, memory_mask, is_causal, return_weights=True)
                w_self.append(ws)
                w_cross.append(wc)
            else:
                x = layer(x, memory, self_mask, memory_mask, is_causal)
        if self.norm is not None:
            x = self.norm(x)
        if return_weights:
            return x, torch.stack(w_self), torch.stack(w_cross)  # L x (B, H, T, *) -> (L, B, H, T, *)
        return x

    @classmethod
    def from_torch(cls, m: nn.TransformerDecoder) -> Decoder:
        """Copy a ``batch_first`` `nn.TransformerDecoder` (its layers and its final norm, if any)."""
        if not isinstance(m, nn.TransformerDecoder):
            raise TypeError(f"m must be an nn.TransformerDecoder, got {type(m).__name__}")
        if len(m.layers) == 0:
            raise ValueError("m has no layers (num_layers=0); a Decoder needs n_layers >= 1")
        first = m.layers[0]
        d_model = first.self_attn.embed_dim
        ours = cls(len(m.layers), d_model, first.self_attn.num_heads, first.linear1.out_features,
                   final_norm=m.norm is not None, layer_norm_eps=first.norm1.eps)
        ours.layers = nn.ModuleList(DecoderLayer.from_torch(layer) for layer in m.layers)
        if m.norm is not None:
            ours.norm = nn.LayerNorm(d_model, eps=m.norm.eps)
            with torch.no_grad():
                _copy_norm(ours.norm, m.norm)
        return ours.to(device=first.linear1.weight.device, dtype=first.linear1.weight.dtype).train(m.training)
