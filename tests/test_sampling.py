"""The sampling distribution softmax(filter_logits(...)): temperature, top-k and top-p against
their direct definitions (properties over random logits)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.generation import filter_logits


def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
    return torch.softmax(filter_logits(logits, temperature, top_k, top_p), -1)

finite = st.floats(-20, 20, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=12), st.floats(0.05, 5.0))
def test_temperature_is_softmax_of_scaled_logits(values, tau):
    logits = torch.tensor(values, dtype=torch.float32)
    torch.testing.assert_close(next_token_probs(logits, tau), torch.softmax(logits / tau, -1))


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=12), st.floats(0.01, 1.0))
def test_top_p_keeps_the_smallest_prefix_reaching_p(values, p):
    logits = torch.tensor(values, dtype=torch.float32)
    probs = next_token_probs(logits, top_p=p)
    full = torch.softmax(logits, -1)
    kept = probs > 0
    # Every kept token is at least as likely as every dropped one, and the kept mass reaches p...
    if (~kept).any():
        assert full[kept].min() >= full[~kept].max() - 1e-12
    assert full[kept].sum() >= p - 1e-6  # float32 sums: a few ulps of 1.0
    # ...and dropping the least likely kept token would fall below p (the set is the smallest).
    smallest = full[kept].min()
    assert full[kept].sum() - smallest < p + 1e-6 or (full[kept] == smallest).sum() > 1 or smallest < 1e-6
    torch.testing.assert_close(probs[kept], full[kept] / full[kept].sum())


def test_top_k_keeps_k_and_renormalises():
    probs = next_token_probs(torch.tensor([3.0, 1.0, 2.0, 0.0]), top_k=2)
    expected = torch.softmax(torch.tensor([3.0, 2.0]), -1)
    torch.testing.assert_close(probs, torch.stack([expected[0], torch.tensor(0.0), expected[1], torch.tensor(0.0)]))


def test_tiny_temperature_is_greedy_not_nan():
    probs = next_token_probs(torch.tensor([[1.0, 5.0, 2.0]]), temperature=1e-40)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0]]))


@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"temperature": 0.0}, ValueError, "temperature"), ({"temperature": math.inf}, ValueError, "temperature"),
    ({"temperature": "1"}, TypeError, "temperature"), ({"top_k": 0}, ValueError, "top_k"),
    ({"top_k": 9}, ValueError, "top_k"), ({"top_p": 0.0}, ValueError, "top_p"), ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_p": True}, TypeError, "top_p"),
])  # fmt: skip
def test_bad_arguments_are_named(kw, err, match):
    with pytest.raises(err, match=match):
        next_token_probs(torch.zeros(4), **kw)
