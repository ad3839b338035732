"""helpers.beam: beam search with GNMT's length penalty."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from helpers.beam import beam_search, length_penalty

BOS, EOS, V = 0, 1, 4


def random_model(seed):
    """next_log_probs of a random fixed table: the next token's distribution depends on the whole prefix."""
    g = torch.Generator().manual_seed(seed)
    cache = {}

    def next_log_probs(prefixes):
        rows = []
        for r in prefixes.tolist():
            key = tuple(r)
            if key not in cache:
                logits = 2 * torch.randn(V, generator=g, dtype=torch.float64)
                logits[BOS] = -math.inf  # <bos> never follows
                cache[key] = logits.log_softmax(0)
            rows.append(cache[key])
        return torch.stack(rows)

    return next_log_probs


def exhaustive(f, max_len, alpha):
    """The best finished hypothesis of up to max_len tokens (else the best of max_len tokens), by brute force."""
    finished, live = [], []
    for n in range(1, max_len):
        for tail in itertools.product(range(1, V), repeat=n):
            if EOS in tail[:-1] or (tail[-1] != EOS and n < max_len - 1):
                continue  # nothing follows <eos>; an unfinished hypothesis counts only at max_len
            seq = [BOS, *tail]
            total = sum(f(torch.tensor([seq[: i + 1]]))[0, seq[i + 1]].item() for i in range(n))
            (finished if tail[-1] == EOS else live).append((total / length_penalty(n, alpha), seq))
    score, seq = max(finished or live)
    return seq, score


@pytest.mark.parametrize("seed", range(4))
def test_beam_of_one_is_greedy(seed):
    f = random_model(seed)
    seq = [BOS]
    while seq[-1] != EOS and len(seq) < 6:
        seq.append(int(f(torch.tensor([seq]))[0].argmax()))
    assert beam_search(f, BOS, EOS, beam_size=1, max_len=6, alpha=0.0)[0] == seq


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_beam_that_never_prunes_is_exact(seed, alpha):
    f = random_model(seed)
    tokens, score = beam_search(f, BOS, EOS, beam_size=V**4, max_len=5, alpha=alpha)
    best, best_score = exhaustive(f, 5, alpha)
    assert math.isclose(score, best_score, abs_tol=1e-9) and tokens == best


def test_the_score_is_the_penalised_log_prob():
    table = torch.tensor([[-math.inf, math.log(0.3), math.log(0.7), -math.inf],  # after <bos>
                          [-math.inf, math.log(0.9), -math.inf, math.log(0.1)]])  # after token 2

    def f(prefixes):
        return table[(prefixes[:, -1] == 2).long()]

    tokens, score = beam_search(f, BOS, EOS, beam_size=2, max_len=4, alpha=0.6)
    assert tokens == [BOS, 2, EOS]
    assert math.isclose(score, math.log(0.63) / ((5 + 2) / 6) ** 0.6, rel_tol=1e-6)
    assert length_penalty(3, 0.0) == 1.0 and math.isclose(length_penalty(1, 1.0), 1.0)


def test_nothing_finishes_returns_the_best_live_hypothesis():
    def f(prefixes):  # <eos> is impossible
        return torch.log(torch.tensor([[0.0, 0.0, 0.6, 0.4]])).expand(len(prefixes), -1)

    tokens, score = beam_search(f, BOS, EOS, beam_size=3, max_len=4, alpha=0.0)
    assert tokens == [BOS, 2, 2, 2] and math.isclose(score, 3 * math.log(0.6), rel_tol=1e-6)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(beam_size=0), ValueError, "beam_size"),
    (dict(beam_size=2.0), TypeError, "beam_size"),
    (dict(max_len=1), ValueError, "max_len"),
    (dict(alpha=-0.1), ValueError, "alpha"),
    (dict(alpha=float("nan")), ValueError, "alpha"),
    (dict(alpha="0.6"), TypeError, "alpha"),
    (dict(eos_id=9), ValueError, "eos_id"),
    (dict(bos_id=-1), ValueError, "bos_id"),
])
def test_bad_arguments_are_named(kwargs, error, name):
    args = dict(bos_id=BOS, eos_id=EOS, beam_size=2, max_len=4, alpha=0.6) | kwargs
    with pytest.raises(error, match=name):
        beam_search(random_model(0), **args)


def test_a_bad_model_is_named():
    with pytest.raises(ValueError, match="next_log_probs"):
        beam_search(lambda p: torch.zeros(len(p)), BOS, EOS)  # (k,), not (k, V)
    with pytest.raises(ValueError, match="ruled out"):
        beam_search(lambda p: torch.full((len(p), V), -math.inf), BOS, EOS)
    with pytest.raises(TypeError, match="next_log_probs"):
        beam_search("model", BOS, EOS)
