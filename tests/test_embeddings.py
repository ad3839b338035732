"""helpers.embeddings: scale, padding row, id checks, and shapes at odd sizes."""

import math

import pytest
import torch
from torch import nn

from helpers.embeddings import TokenEmbedding, check_token_ids


def test_shape_at_odd_sizes():
    emb = TokenEmbedding(vocab_size=7, d_model=12)
    ids = torch.randint(0, 7, (2, 5))
    assert emb(ids).shape == (2, 5, 12)  # (B, T) -> (B, T, C)


def test_scale_is_sqrt_d_model_over_nn_embedding():
    torch.manual_seed(0)
    emb = TokenEmbedding(10, 16)
    ids = torch.tensor([[0, 3, 9]])
    assert torch.allclose(emb(ids), emb.embedding(ids) * 4.0)
    assert emb.scale == math.sqrt(16)
    plain = TokenEmbedding(10, 16, scale=False)
    assert torch.equal(plain(ids), plain.embedding(ids))


def test_lookup_equals_one_hot_matmul():
    emb = TokenEmbedding(6, 4, scale=False)
    ids = torch.tensor([[5, 0, 2]])
    one_hot = nn.functional.one_hot(ids, 6).float()  # (B, T, V)
    assert torch.allclose(emb(ids), one_hot @ emb.weight)  # (B, T, V) @ (V, C) -> (B, T, C)


def test_padding_row_is_zero_and_gets_zero_gradient():
    emb = TokenEmbedding(5, 3, padding_idx=0)
    ids = torch.tensor([[0, 1, 0, 4]])
    out = emb(ids)
    assert torch.equal(out[0, 0], torch.zeros(3)) and torch.equal(out[0, 2], torch.zeros(3))
    out.sum().backward()
    assert torch.equal(emb.weight.grad[0], torch.zeros(3))
    assert torch.allclose(emb.weight.grad[1], torch.ones(3) * math.sqrt(3))
    assert torch.equal(emb.weight.grad[2], torch.zeros(3))  # unused rows get nothing either


@pytest.mark.parametrize("ids, error, message", [
    (torch.tensor([[5]]), ValueError, "token id 5, outside the vocabulary \\[0, 5\\)"),
    (torch.tensor([[-1]]), ValueError, "token id -1"),
    (torch.tensor([[1.0]]), TypeError, "integer token ids"),
    ([[1]], TypeError, "torch.Tensor"),
])
def test_bad_ids(ids, error, message):
    with pytest.raises(error, match=message):
        TokenEmbedding(5, 3)(ids)


def test_empty_ids_are_fine():
    assert TokenEmbedding(5, 3)(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 3)
    assert check_token_ids(torch.zeros(0, dtype=torch.long), 1).numel() == 0


@pytest.mark.parametrize("kwargs, error", [
    (dict(vocab_size=0, d_model=3), ValueError), (dict(vocab_size=5, d_model=0), ValueError),
    (dict(vocab_size=5.0, d_model=3), TypeError), (dict(vocab_size=5, d_model=3, padding_idx=5), ValueError),
    (dict(vocab_size=5, d_model=3, padding_idx=-1), ValueError),
])
def test_bad_construction(kwargs, error):
    with pytest.raises(error):
        TokenEmbedding(**kwargs)
