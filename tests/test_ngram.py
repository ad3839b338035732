"""helpers.ngram.BigramModel: interpolated probabilities that sum to one, its baselines and its sampler."""

import math

import pytest
import torch

from helpers.ngram import BigramModel

IDS = torch.tensor([0, 1, 0, 1, 2, 0, 1, 0])


def dense(ids, V, lam):
    """The same model as a dense V x V table (fine for a tiny V)."""
    c = torch.zeros(V, V, dtype=torch.float64)
    c.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64), accumulate=True)
    uni = (torch.bincount(ids, minlength=V) + 1.0).double() / (len(ids) + V)
    row = c.sum(1, keepdim=True)
    bi = torch.where(row > 0, c / row.clamp(min=1), uni)
    return lam * bi + (1 - lam) * uni


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7, 1.0])
def test_matches_a_dense_table_and_rows_sum_to_one(lam):
    V = 4  # id 3 never occurs: its row falls back to the unigram
    m, table = BigramModel(IDS, V, lam), dense(IDS, V, lam)
    for a in range(V):
        assert torch.allclose(m.next_distribution(a), table[a])
        assert m.next_distribution(a).sum().item() == pytest.approx(1.0)
    prev, nxt = torch.tensor([0, 1, 2, 3]), torch.tensor([1, 0, 3, 3])
    assert torch.allclose(m.prob(prev, nxt), table[prev, nxt])
    val = torch.tensor([0, 1, 3, 2, 0])
    assert m.nll(val) == pytest.approx(-table[val[:-1], val[1:]].log().mean().item())


def test_unigram_is_add_one():
    m = BigramModel(IDS, 4)
    assert m.unigram_nll(torch.tensor([3])) == pytest.approx(-math.log(1 / (len(IDS) + 4)))


def test_sample_follows_the_table_and_the_generator():
    m = BigramModel(torch.tensor([0, 1] * 50), 3, lam=1.0)
    out = m.sample([0], 20, generator=torch.Generator().manual_seed(0))
    assert out == [1, 0] * 10  # with lam=1 the only seen successors are certain
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    m2 = BigramModel(IDS, 4)
    assert m2.sample([0], 30, 0.8, g1) == m2.sample([0], 30, 0.8, g2)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"ids": torch.tensor([1.0, 2.0])}, TypeError, "ids"),
    ({"ids": torch.tensor([0])}, ValueError, "at least 2"),
    ({"ids": torch.tensor([0, 5])}, ValueError, "ids"),
    ({"lam": 1.5}, ValueError, "lam"),
    ({"vocab_size": 0}, ValueError, "vocab_size"),
])
def test_constructor_errors(kwargs, error, match):
    args = {"ids": IDS, "vocab_size": 4, "lam": 0.7, **kwargs}
    with pytest.raises(error, match=match):
        BigramModel(**args)


def test_sample_errors():
    m = BigramModel(IDS, 4)
    with pytest.raises(ValueError, match="prompt"):
        m.sample([], 3)
    with pytest.raises(ValueError, match="temperature"):
        m.sample([0], 3, temperature=0)
    with pytest.raises(TypeError, match="generator"):
        m.sample([0], 3, generator=0)
    with pytest.raises(ValueError, match="prev"):
        m.next_distribution(4)
