"""Token embeddings: `nn.Embedding` plus the two things it lacks for this course.

1. The paper multiplies embeddings by √d_model (section 3.4; it gives no reason). With small
   initial weights (Google's reference code: N(0, 1/d_model)) that puts them on the scale of
   the positional encoding added next. Beware: the table keeps `nn.Embedding`'s N(0, 1)
   default, which ×√d_model drowns the encoding; `helpers.transformer.Transformer`
   re-initialises it (xavier_uniform_). Used alone, initialise it small yourself.
2. Ids are checked: an id outside the vocabulary raises a ValueError naming the
   vocabulary size, instead of an IndexError from deep inside torch.

Shapes: B batch, T sequence length, C = d_model, V = vocab_size.
    TokenEmbedding(V, C)(ids)  (B, T) int64 -> (B, T, C)

Example:
    >>> emb = TokenEmbedding(10, 4)
    >>> emb(torch.tensor([[1, 2, 3]])).shape
    torch.Size([1, 3, 4])
"""

from __future__ import annotations

import math

import torch
from torch import nn

from helpers.validate import check_int, check_tensor


def check_token_ids(ids, vocab_size: int, name: str = "ids") -> torch.Tensor:
    """Raise a clear error unless ``ids`` is an integer tensor with values in [0, vocab_size).

    Returns ``ids`` as int64: int8, int16, int32, int64 and uint8 are accepted (what
    `nn.Embedding` and `F.cross_entropy` need is int64); uint16/32/64, float and bool
    tensors raise TypeError naming ``name``.
    """
    check_tensor(name, ids, floating=False)
    if ids.numel():
        lo, hi = (int(v) for v in torch.aminmax(ids))  # one pass, not min() then max()
        if lo >= 0 and hi < vocab_size:
            return ids.long()
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} contains token id {bad}, outside the vocabulary [0, {vocab_size}) of size {vocab_size}")
    return ids.long()


class TokenEmbedding(nn.Module):
    """A trainable lookup table, optionally scaled by √d_model, with checked ids."""

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None, scale: bool = True):
        super().__init__()
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        if padding_idx is not None and not 0 <= check_int("padding_idx", padding_idx) < vocab_size:
            raise ValueError(f"padding_idx must be in [0, {vocab_size}), got {padding_idx}")
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = check_token_ids(ids, self.vocab_size)  # any integer dtype -> int64
        return self.embedding(ids) * self.scale  # (B, T) -> (B, T, C)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"
