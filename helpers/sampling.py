"""From next-token logits to the distribution that is sampled: temperature, top-k, top-p.

    p = softmax(filter(logits / τ))

- temperature τ > 0 divides the logits: τ < 1 sharpens, τ > 1 flattens, τ → 0 is greedy.
  The largest logit is subtracted first, so even τ = 1e-40 gives a one-hot, never NaN.
- top_k keeps the k largest logits (ties with the k-th are kept too).
- top_p (nucleus) keeps the smallest set of most likely tokens whose probability adds up to
  at least p (the token that crosses p is kept), so at least one token always survives.

Shapes: (..., V) -> (..., V).

Example:
    >>> import torch
    >>> p = next_token_probs(torch.tensor([2.0, 1.0, 0.0, -1.0]), top_p=0.7)
    >>> [round(v, 3) for v in p.tolist()]
    [0.731, 0.269, 0.0, 0.0]
"""

from __future__ import annotations

import math

import torch

from helpers.validate import check_int, check_tensor


def check_sampling_args(temperature, top_k, top_p, vocab_size: int) -> None:
    """Raise ValueError/TypeError naming the argument when one is out of range."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise TypeError(f"temperature must be a float, got {type(temperature).__name__}")
    if not (temperature > 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    if top_k is not None and not 1 <= check_int("top_k", top_k) <= vocab_size:
        raise ValueError(f"top_k must be in [1, vocab_size={vocab_size}] or None, got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, int | float):
            raise TypeError(f"top_p must be a float or None, got {type(top_p).__name__}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """The sampling distribution (..., V) for next-token ``logits`` (..., V); see the module doc."""
    check_tensor("logits", logits, floating=True)
    if logits.dim() < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a last dimension V >= 1, got shape {tuple(logits.shape)}")
    check_sampling_args(temperature, top_k, top_p, logits.shape[-1])
    if not torch.isfinite(logits).all():
        raise ValueError("logits must be finite (no NaN or inf)")
    z = (logits - logits.amax(dim=-1, keepdim=True)) / temperature  # (..., V), max is 0
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]  # (..., V) -> (..., 1)
        z = z.masked_fill(z < kth, -math.inf)
    if top_p is not None and top_p < 1.0:
        p_sorted, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)  # (..., V) each
        before = p_sorted.cumsum(dim=-1) - p_sorted  # mass of the more likely tokens
        drop_sorted = before >= top_p  # the first token has before = 0 < top_p: always kept
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        z = z.masked_fill(drop, -math.inf)
    return torch.softmax(z, dim=-1)
