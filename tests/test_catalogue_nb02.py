"""Notebook 02's checks against correct answers written differently and plausible wrong ones."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from catalogue import Catalogue, Wrong, assert_catalogue
from torch import nn

from helpers.checks import nb02
from helpers.embeddings import TokenEmbedding
from helpers.exercises import attempt


# ----------------------------------------------------------------------------- embedding_backward
def reference_embedding_backward(ids, grad_out, vocab_size):
    C = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, C, dtype=grad_out.dtype)
    return grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, C))


def backward_one_hot(ids, grad_out, vocab_size):  # out = onehot(ids) @ W, so dL/dW = onehot(ids)^T @ grad_out
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(grad_out.dtype)  # (B*T, V)
    return one_hot.T @ grad_out.reshape(-1, grad_out.shape[-1])


def backward_loop(ids, grad_out, vocab_size):
    flat, rows = ids.reshape(-1).tolist(), grad_out.reshape(-1, grad_out.shape[-1])
    grad = torch.zeros(vocab_size, rows.shape[1], dtype=grad_out.dtype)
    for t, v in enumerate(flat):
        grad[v] += rows[t]
    return grad


def backward_last_write_wins(ids, grad_out, vocab_size):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype)
    grad[ids.reshape(-1)] = grad_out.reshape(-1, grad_out.shape[-1])
    return grad


def backward_mean(ids, grad_out, vocab_size):
    grad = reference_embedding_backward(ids, grad_out, vocab_size)
    counts = torch.bincount(ids.reshape(-1), minlength=vocab_size).clamp(min=1)
    return grad / counts[:, None]


def backward_unflattened(ids, grad_out, vocab_size):
    return torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype).index_add_(0, ids, grad_out)


def backward_float32(ids, grad_out, vocab_size):
    C = grad_out.shape[-1]
    return torch.zeros(vocab_size, C).index_add_(0, ids.reshape(-1), grad_out.reshape(-1, C).float())


def backward_autograd(ids, grad_out, vocab_size):
    w = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, requires_grad=True)
    F.embedding(ids, w).backward(grad_out)
    return w.grad


def backward_nn_embedding(ids, grad_out, vocab_size):
    emb = nn.Embedding(vocab_size, grad_out.shape[-1]).to(grad_out.dtype)
    torch.autograd.backward(emb(ids), grad_out)
    return emb.weight.grad


EMBEDDING_BACKWARD = Catalogue(
    nb02.check_embedding_backward, reference_embedding_backward, correct=[backward_one_hot, backward_loop],
    wrong=[Wrong(backward_last_write_wins, "every occurrence", "assignment keeps one occurrence"),
           Wrong(backward_mean, "not the last write nor a mean", "mean instead of sum"),
           Wrong(backward_unflattened, "flattened", "index_add_ on unflattened (B, T) ids"),
           Wrong(backward_float32, "float64", "always float32"),
           Wrong(backward_autograd, "write it yourself", "calls autograd through F.embedding"),
           Wrong(backward_nn_embedding, "write it yourself", "calls nn.Embedding and autograd")])


# ----------------------------------------------------------------------------- ScaledEmbedding
class ReferenceScaledEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.vocab_size, self.scale = vocab_size, math.sqrt(d_model)
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        if padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[padding_idx].zero_()

    def forward(self, ids):
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < self.vocab_size:
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        return self.embedding(ids) * self.scale


class FromPretrained(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        w = torch.randn(vocab_size, d_model) / d_model**0.5
        if padding_idx is not None:
            w[padding_idx] = 0
        self.embedding = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=padding_idx)
        self.d = d_model

    def forward(self, ids):
        bad = ids[(ids < 0) | (ids >= self.embedding.num_embeddings)]
        if len(bad):
            raise ValueError(f"ids out of range: {bad.tolist()}")
        return self.embedding(ids) * self.d**0.5


class InitInPlace(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        with torch.no_grad():
            self.embedding.weight.normal_(0, 1 / math.sqrt(d_model))
            if padding_idx is not None:
                self.embedding.weight[padding_idx] = 0
        self.V, self.s = vocab_size, math.sqrt(d_model)

    def forward(self, ids):
        for i in ids.flatten().tolist():
            if not 0 <= i < self.V:
                raise ValueError(f"id {i} not in [0, {self.V})")
        return self.s * self.embedding(ids)


def _variant(name, *, init_std=None, guard=True, scale=True, bound=None, negatives=True, mutate=False, pad_passed=True):
    class Variant(ReferenceScaledEmbedding):
        def __init__(self, vocab_size, d_model, padding_idx=None):
            nn.Module.__init__(self)
            self.vocab_size, self.scale = vocab_size, math.sqrt(d_model) if scale else 1.0
            self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx if pad_passed else None)
            nn.init.normal_(self.embedding.weight, std=d_model**-0.5 if init_std is None else init_std)
            if padding_idx is not None or not guard:
                with torch.no_grad():
                    self.embedding.weight[padding_idx] = 0

        def forward(self, ids):
            limit = self.vocab_size if bound is None else bound
            if mutate:
                ids.clamp_(0, self.vocab_size - 1)
            if ids.numel() and (int(ids.max()) >= limit or (negatives and int(ids.min()) < 0)):
                raise ValueError(f"id {int(ids.max()) if int(ids.max()) >= limit else int(ids.min())} outside the vocabulary")
            return self.embedding(ids) * self.scale
    Variant.__name__ = name
    return Variant


class CallsTokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, padding_idx=None):
        super().__init__()
        self.inner = TokenEmbedding(vocab_size, d_model, padding_idx=padding_idx)
        self.embedding = self.inner.embedding

    def forward(self, ids):
        return self.inner(ids)


SCALED_EMBEDDING = Catalogue(
    nb02.check_scaled_embedding, ReferenceScaledEmbedding, correct=[FromPretrained, InitInPlace],
    wrong=[Wrong(_variant("NoNoneGuard", guard=False), "is not None", "weight[padding_idx] = 0 without the None guard"),
           Wrong(_variant("StdOne", init_std=1.0), "std", "N(0, 1) initialisation"),
           Wrong(_variant("StdOneOverD", init_std=1 / 64), "std", "std 1/d instead of 1/sqrt(d)"),
           Wrong(_variant("NoScale", scale=False), "sqrt(64)", "forgets the sqrt(d_model) factor"),
           Wrong(_variant("OffByOneBound", bound=1001), "< vocab_size", "bound > V instead of >= V"),
           Wrong(_variant("NoNegatives", negatives=False), "negative", "negative ids not checked"),
           Wrong(_variant("ClampsIds", mutate=True), "in place", "clamps the caller's ids in place"),
           Wrong(_variant("PadNotPassed", pad_passed=False), "padding_idx", "nn.Embedding built without padding_idx"),
           Wrong(CallsTokenEmbedding, "write it yourself", "wraps helpers.embeddings.TokenEmbedding")])


# ----------------------------------------------------------------------------- nearest
def reference_nearest(table, i, k):
    unit = table / table.norm(dim=1, keepdim=True)
    cos = unit @ unit[i]
    cos[i] = -math.inf
    return cos.topk(k).indices.tolist()


def nearest_cosine_argsort(table, i, k):
    cos = F.cosine_similarity(table, table[i : i + 1], dim=1)
    order = [int(j) for j in torch.argsort(cos, descending=True, stable=True) if int(j) != i]
    return order[:k]


def nearest_sorted_python(table, i, k):
    def cos(a, b):
        return float(a @ b) / float(a.norm() * b.norm())
    others = sorted((j for j in range(len(table)) if j != i), key=lambda j: -cos(table[i], table[j]))
    return others[:k]


def nearest_dot(table, i, k):
    dots = table @ table[i]
    dots[i] = -math.inf
    return dots.topk(k).indices.tolist()


def nearest_euclid(table, i, k):
    d = (table - table[i]).norm(dim=1)
    d[i] = math.inf
    return (-d).topk(k).indices.tolist()


def nearest_tensor(table, i, k):
    unit = table / table.norm(dim=1, keepdim=True)
    cos = unit @ unit[i]
    cos[i] = -math.inf
    return cos.topk(k).indices


def nearest_with_self(table, i, k):
    unit = table / table.norm(dim=1, keepdim=True)
    return (unit @ unit[i]).topk(k).indices.tolist()


def nearest_column_normalised(table, i, k):
    unit = table / table.norm(dim=0, keepdim=True)
    cos = unit @ unit[i]
    cos[i] = -math.inf
    return cos.topk(k).indices.tolist()


def nearest_in_place(table, i, k):  # normalises the caller's table
    table /= table.norm(dim=1, keepdim=True)
    cos = table @ table[i]
    cos[i] = -math.inf
    return cos.topk(k).indices.tolist()


def nearest_ascending(table, i, k):
    unit = table / table.norm(dim=1, keepdim=True)
    cos = unit @ unit[i]
    cos[i] = -math.inf
    return sorted(cos.topk(k).indices.tolist())


NEAREST = Catalogue(
    nb02.check_nearest, reference_nearest, correct=[nearest_cosine_argsort, nearest_sorted_python],
    wrong=[Wrong(nearest_dot, "cosine", "dot product favours long rows"),
           Wrong(nearest_euclid, "expected", "Euclidean distance"),
           Wrong(nearest_tensor, "list of ints", "returns a tensor"),
           Wrong(nearest_with_self, "leave out", "includes the row itself"),
           Wrong(nearest_column_normalised, "expected", "normalises columns"),
           Wrong(nearest_in_place, "in place", "normalises the caller's table in place"),
           Wrong(nearest_ascending, "most similar first", "sorted by index")])


# ----------------------------------------------------------------------------- exercise 1
def reference_mean_pool(vectors, ids, pad_id):
    keep = (ids != pad_id).unsqueeze(-1).to(vectors.dtype)
    return (vectors * keep).sum(1) / keep.sum(1)


def mean_pool_rows(vectors, ids, pad_id):
    return torch.stack([v[i != pad_id].mean(0) for v, i in zip(vectors, ids, strict=True)])


def mean_pool_masked_fill(vectors, ids, pad_id):
    mask = ids == pad_id
    total = vectors.masked_fill(mask[..., None], 0.0).sum(dim=1)
    return total / (~mask).sum(dim=1, keepdim=True)


MEAN_POOL = Catalogue(
    nb02.check_exercise_1, reference_mean_pool, correct=[mean_pool_rows, mean_pool_masked_fill],
    wrong=[Wrong(lambda v, ids, pad: (v * (ids != pad).unsqueeze(-1)).mean(1), "divide by their count", "divides by T"),
           Wrong(lambda v, ids, pad: v.mean((0, 1)), "one vector per row", "one vector for the batch"),
           Wrong(lambda v, ids, pad: (v * (ids != pad)[..., None]).sum(1) / (ids == pad).sum(1, keepdim=True).clamp(min=1),
                 "divide by their count", "divides by the pad count"),
           Wrong(lambda v, ids, pad: (v * (ids != 0)[..., None]).sum(1) / (ids != 0).sum(1, keepdim=True),
                 "pad id 5", "hard-codes pad id 0"),
           Wrong(lambda v, ids, pad: v.mul_((ids != pad)[..., None]).sum(1) / (ids != pad).sum(1, keepdim=True),
                 "in place", "zeroes the pads of the caller's vectors")])


# ----------------------------------------------------------------------------- exercise 2
def reference_tied_backward(ids, grad_logits, W):
    h = W[ids]
    through_output = grad_logits.T @ h
    through_lookup = reference_embedding_backward(ids, grad_logits @ W, W.shape[0])
    return through_output + through_lookup


def tied_one_hot(ids, grad_logits, W):
    X = F.one_hot(ids, W.shape[0]).to(W.dtype)  # (T, V)
    return grad_logits.T @ (X @ W) + X.T @ (grad_logits @ W)


def tied_loop(ids, grad_logits, W):
    grad = torch.zeros_like(W)
    for t, v in enumerate(ids.tolist()):
        grad += grad_logits[t][:, None] * W[v][None, :]  # output path: row u gets G[t, u] * h_t
        grad[v] += grad_logits[t] @ W                    # lookup path: dL/dh_t added at row v
    return grad


def tied_output_only(ids, grad_logits, W):
    return grad_logits.T @ W[ids]


def tied_lookup_only(ids, grad_logits, W):
    return reference_embedding_backward(ids, grad_logits @ W, W.shape[0])


def tied_last_write(ids, grad_logits, W):
    grad = grad_logits.T @ W[ids]
    lookup = torch.zeros_like(W)
    lookup[ids] = grad_logits @ W
    return grad + lookup


def tied_autograd(ids, grad_logits, W):
    W = W.clone().requires_grad_(True)
    (F.embedding(ids, W) @ W.T).backward(grad_logits)
    return W.grad


EXERCISE_2 = Catalogue(
    nb02.check_exercise_2, reference_tied_backward, correct=[tied_one_hot, tied_loop],
    wrong=[Wrong(tied_output_only, "output layer's path only", "forgets the lookup path"),
           Wrong(tied_lookup_only, "lookup's path only", "forgets the output path"),
           Wrong(tied_last_write, "every one of its rows", "lookup path by assignment"),
           Wrong(tied_autograd, "write it yourself", "calls autograd")])

CATALOGUES = {"embedding_backward": EMBEDDING_BACKWARD, "scaled_embedding": SCALED_EMBEDDING, "nearest": NEAREST,
              "exercise_1": MEAN_POOL, "exercise_2": EXERCISE_2}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    counts = assert_catalogue(CATALOGUES[name])
    assert counts["correct"] >= 2 and counts["wrong"] >= 3


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_an_untouched_stub_is_not_done_yet(name, capsys):
    """The stub's NotImplementedError reaches attempt(), never turned into a wrong answer's message."""
    reference = CATALOGUES[name].reference
    if isinstance(reference, type):
        class Stub(reference):
            def __init__(self, *args, **kwargs):
                raise NotImplementedError("write it")
        stub = Stub
    else:
        def stub(*args, **kwargs):
            raise NotImplementedError("write it")
    attempt(CATALOGUES[name].check, stub)
    assert "not done yet" in capsys.readouterr().out
