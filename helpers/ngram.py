"""Count-based baselines for a character model with a large vocabulary (thousands of characters).

`BigramModel(ids, vocab_size, lam)` counts which character follows which in the training
ids. Its next-character distribution interpolates the bigram with an add-one unigram,

    p(b | a) = lam * c(a, b) / c(a) + (1 - lam) * p_uni(b),   p_uni(b) = (c(b) + 1) / (N + V),

so no character ever gets probability 0 (an unseen pair still has the unigram's share). Only
the pairs that occur are stored (sorted keys ``a * V + b``): a dense V x V table for
V = 6,099 would take 149 MB.

Shapes: ids (N,) int64; `nll` returns nats per character; `sample` returns ids (n,).

Example:
    >>> m = BigramModel(torch.tensor([0, 1, 0, 1, 0, 1]), vocab_size=2, lam=1.0)
    >>> round(m.nll(torch.tensor([0, 1, 0])), 6)
    0.0
"""

from __future__ import annotations

import math

import torch

from helpers.embeddings import check_token_ids
from helpers.validate import check_int, check_tensor


class BigramModel:
    def __init__(self, ids: torch.Tensor, vocab_size: int, lam: float = 0.7):
        check_tensor("ids", ids, ndim=1, floating=False)
        check_int("vocab_size", vocab_size, minimum=1)
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be a number in [0, 1], got {lam!r}")
        if len(ids) < 2:
            raise ValueError(f"ids must hold at least 2 tokens to count a pair, got {len(ids)}")
        ids = check_token_ids(ids, vocab_size, name="ids")
        self.vocab_size, self.lam = vocab_size, float(lam)
        self.keys, self.counts = torch.unique(ids[:-1] * vocab_size + ids[1:], return_counts=True)  # (P,), sorted
        self.row_counts = torch.bincount(ids[:-1], minlength=vocab_size)  # c(a): (V,)
        self.unigram = (torch.bincount(ids, minlength=vocab_size) + 1.0) / (len(ids) + vocab_size)  # (V,)

    def prob(self, prev: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        """p(nxt | prev) for pairs of id tensors of one shape."""
        # an id of -1 or V would index another row silently (wrapped or a neighbour's key)
        prev = check_token_ids(check_tensor("prev", prev, floating=False), self.vocab_size, name="prev")
        nxt = check_token_ids(check_tensor("nxt", nxt, floating=False), self.vocab_size, name="nxt")
        if prev.shape != nxt.shape:
            raise ValueError(f"prev and nxt must have one shape, got {tuple(prev.shape)} and {tuple(nxt.shape)}")
        key = prev * self.vocab_size + nxt
        pos = torch.searchsorted(self.keys, key).clamp(max=len(self.keys) - 1)
        pair = torch.where(self.keys[pos] == key, self.counts[pos], 0).double()
        row = self.row_counts[prev].double()
        p_bi = torch.where(row > 0, pair / row.clamp(min=1), self.unigram[nxt].double())  # unseen a: unigram
        return self.lam * p_bi + (1 - self.lam) * self.unigram[nxt].double()

    def nll(self, ids: torch.Tensor) -> float:
        """Mean negative log-likelihood of each character given the one before it (nats)."""
        ids = check_token_ids(check_tensor("ids", ids, ndim=1, floating=False), self.vocab_size, name="ids")
        if len(ids) < 2:
            raise ValueError("ids must hold at least 2 tokens")
        return -torch.log(self.prob(ids[:-1], ids[1:])).mean().item()

    def unigram_nll(self, ids: torch.Tensor) -> float:
        """Mean negative log-likelihood under the add-one unigram alone (nats)."""
        ids = check_token_ids(check_tensor("ids", ids, ndim=1, floating=False), self.vocab_size, name="ids")
        return -torch.log(self.unigram.double()[ids]).mean().item()

    def next_distribution(self, prev: int) -> torch.Tensor:
        """The whole row p(. | prev): (V,), sums to 1."""
        check_int("prev", prev, minimum=0)
        if prev >= self.vocab_size:
            raise ValueError(f"prev must be below vocab_size={self.vocab_size}, got {prev}")
        lo, hi = (torch.searchsorted(self.keys, torch.tensor(prev * self.vocab_size + d)).item() for d in (0, self.vocab_size))
        row = torch.zeros(self.vocab_size, dtype=torch.float64)
        row[self.keys[lo:hi] - prev * self.vocab_size] = self.counts[lo:hi].double()
        n = self.row_counts[prev].item()
        p_bi = row / n if n > 0 else self.unigram.double()
        return self.lam * p_bi + (1 - self.lam) * self.unigram.double()

    def sample(self, prompt: list[int], n: int, temperature: float = 1.0,
               generator: torch.Generator | None = None) -> list[int]:
        """``n`` ids drawn one by one after ``prompt``, each from p(. | previous) ** (1 / temperature)."""
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise ValueError("prompt must be a non-empty list of ids")
        check_int("n", n, minimum=0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
                temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        out, prev = [], prompt[-1]
        for _ in range(n):
            # In log space: p ** (1 / T) underflows to all zeros at a low T (then multinomial fails).
            logp = torch.log(self.next_distribution(prev)) / temperature  # (V,)
            prev = int(torch.multinomial(torch.softmax(logp, dim=0), 1, generator=generator))
            out.append(prev)
        return out
