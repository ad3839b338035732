"""Beam search with GNMT's length penalty: the decoder of "Attention Is All You Need" (beam 4, α = 0.6).

Greedy decoding keeps one hypothesis and takes the most likely token at each step; a likely first
token can lead to a spread of unlikely continuations, so the most likely *sequence* can be missed.
Beam search keeps the ``beam_size`` best prefixes by summed log-probability and extends each by every
token at each step. A prefix that ends with ``eos_id`` is finished: it is set aside and takes no place
in the next step's beam. The answer is the finished hypothesis (or, if none finished within
``max_len`` tokens, the live one) with the best penalised score

    score(Y) = log P(Y | X) / lp(|Y|),   lp(n) = ((5 + n) / 6) ** alpha     (Wu et al., 2016, "GNMT")

where |Y| counts the tokens after ``bos_id``, ``eos_id`` included. Without the penalty (alpha = 0)
every extra token adds a negative log-probability, so short hypotheses win.

What it guarantees: with ``beam_size`` 1 it is greedy decoding. A wider beam does *not* guarantee a
better score than greedy's: greedy's prefix can be pushed out of the beam by prefixes that later
turn out worse. It returns the best of the hypotheses it kept; when the beam is at least as wide as
the number of prefixes of every length (V ** (max_len - 1)), nothing is pruned and the search is exact.

The model is seen only through ``next_log_probs(prefixes)``: (k, t) token ids -> (k, V) log-probabilities
of the next token, so the same function decodes an encoder-decoder (the source encoded once, outside)
or a GPT. Real implementations also reorder a KV cache by each hypothesis's parent; this one re-runs
the prefixes, which is enough for short outputs.

Example:
    >>> table = torch.log(torch.tensor([[0.0, 0.6, 0.4], [0.0, 1.0, 0.0]]) + 1e-30)
    >>> beam_search(lambda p: table[(p[:, -1] == 2).long()], bos_id=0, eos_id=1, beam_size=2, max_len=3)[0]
    [0, 1]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from helpers.validate import check_int

__all__ = ["beam_search", "length_penalty"]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(|Y|) = ((5 + |Y|) / 6) ** alpha; 1 for alpha = 0."""
    check_int("length", length, minimum=1)
    return ((5 + length) / 6) ** _check_alpha(alpha)


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a float, got {type(alpha).__name__}")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    return float(alpha)


def _step(next_log_probs, prefixes: torch.Tensor) -> torch.Tensor:
    out = next_log_probs(prefixes)
    if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.dim() != 2 \
            or out.shape[0] != prefixes.shape[0]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"next_log_probs must return a floating (k, V) tensor for k = {prefixes.shape[0]} "
                         f"prefixes, got {got}")
    return out.detach().double().cpu()


@torch.no_grad()
def beam_search(next_log_probs: Callable[[torch.Tensor], torch.Tensor], bos_id: int, eos_id: int,
                beam_size: int = 4, max_len: int = 32, alpha: float = 0.6) -> tuple[list[int], float]:
    """The best hypothesis found and its penalised score: ``(tokens starting with bos_id, score)``.

    Args:
        next_log_probs: (k, t) int64 prefixes -> (k, V) log-probabilities of the next token.
        bos_id, eos_id: the start token (every prefix begins with it) and the end token.
        beam_size: hypotheses kept per step (1 = greedy).
        max_len: most tokens in a hypothesis, ``bos_id`` included (>= 2).
        alpha: the length penalty's exponent (0 = none; the paper's 0.6).
    """
    if not callable(next_log_probs):
        raise TypeError(f"next_log_probs must be callable, got {type(next_log_probs).__name__}")
    bos_id, eos_id = check_int("bos_id", bos_id, minimum=0), check_int("eos_id", eos_id, minimum=0)
    beam_size, max_len = check_int("beam_size", beam_size, minimum=1), check_int("max_len", max_len, minimum=2)
    alpha = _check_alpha(alpha)
    live, finished = [([bos_id], 0.0)], []  # (tokens, summed log-prob)
    for _ in range(max_len - 1):
        log_probs = _step(next_log_probs, torch.tensor([seq for seq, _ in live]))  # (k, t) -> (k, V)
        if not 0 <= eos_id < log_probs.shape[1]:
            raise ValueError(f"eos_id must be in [0, V={log_probs.shape[1]}), got {eos_id}")
        total = torch.tensor([s for _, s in live], dtype=torch.float64)[:, None] + log_probs  # (k, V): summed
        top = total.flatten().topk(min(beam_size, total.numel()))  # the beam_size best extensions of all
        parents, V, live = live, total.shape[1], []
        for score, index in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            if score == -math.inf:  # a token the model rules out is no hypothesis
                continue
            seq = parents[index // V][0] + [index % V]
            (finished if index % V == eos_id else live).append((seq, score))
        if not live:
            break
    candidates = finished or live
    if not candidates:
        raise ValueError("next_log_probs ruled out every token (all -inf)")
    tokens, total = max(candidates, key=lambda h: h[1] / length_penalty(len(h[0]) - 1, alpha))
    return tokens, total / length_penalty(len(tokens) - 1, alpha)
