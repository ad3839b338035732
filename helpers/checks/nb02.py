"""The checks of notebook 02 (embeddings): three builds and two exercises.

Each check gives the learner's code copies of its inputs (`call_unchanged`: an answer that
overwrites its input is named, never compared against its own output), compares with autograd or
with plain formulas on inputs chosen to reveal the classic mistakes, and refuses an answer that
just calls the piece it reproduces (`refuse_calls`). Proven by tests/test_catalogue_nb02.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import helpers.embeddings
from helpers.compare import check_close
from helpers.exercises import call_unchanged, refuse_calls

# Autograd and the lookup layer: a backward pass written with them is not written by hand.
_AUTOGRAD = ((F, "embedding"), (torch.Tensor, "backward"), (torch.autograd, "backward"), (torch.autograd, "grad"))


def _backward_cases(seed, with_pad):
    g = torch.Generator().manual_seed(seed)
    cases = [(torch.tensor([[1, 4, 1], [0, 4, 4]]), 6, 3, 0, torch.float32),   # (B, T): ids repeat
             (torch.tensor([2, 2, 5, 0, 2]), 7, 4, 2, torch.float32),            # (T,)
             (torch.tensor([[3, 1], [1, 6], [6, 3]]), 8, 2, 7, torch.float64)]   # float64; pad id 7 unused
    for ids, V, C, pad, dtype in cases:
        w = torch.randn(V, C, generator=g, dtype=dtype, requires_grad=True)
        grad_out = torch.randn(*ids.shape, C, generator=g, dtype=dtype)  # (*ids.shape, C)
        F.embedding(ids, w, padding_idx=pad if with_pad else None).backward(grad_out)  # autograd's answer
        yield ids, V, C, pad, grad_out, w.grad


def _call(fn, label, *args):
    with refuse_calls(fn, *_AUTOGRAD, label=label):
        try:
            return call_unchanged(fn, *args, label=label)
        except NotImplementedError:
            raise  # the stub: attempt() says "not done yet"
        except (IndexError, RuntimeError) as err:
            raise AssertionError(
                f"{label}{tuple(tuple(a.shape) if torch.is_tensor(a) else a for a in args)} raised "
                f"{type(err).__name__}: {str(err).splitlines()[0]} (are ids flattened to (B·T,) and grad_out to "
                "(B·T, C) before the rows are added?)") from None


def check_embedding_backward(embedding_backward):
    for ids, V, C, _, grad_out, expected in _backward_cases(0, with_pad=False):
        got = _call(embedding_backward, "embedding_backward", ids, grad_out, V)
        assert torch.is_tensor(got) and tuple(got.shape) == (V, C), (
            f"ids of shape {tuple(ids.shape)}, V={V}: expected a ({V}, {C}) gradient, got "
            f"{tuple(got.shape) if torch.is_tensor(got) else type(got).__name__}")
        assert got.dtype == grad_out.dtype, f"grad_out is {grad_out.dtype}: expected a {grad_out.dtype} gradient, got {got.dtype}"
        for v in range(V):
            n = int((ids == v).sum())
            if not torch.allclose(got[v], expected[v], atol=1e-6):
                note = ""
                if n > 1:
                    note = " (every occurrence must add its row of grad_out: a sum, not the last write nor a mean)"
                elif n == 0:
                    note = " (an id that does not occur gets a zero row)"
                raise AssertionError(f"row {v} (id {v} occurs {n} times in {ids.tolist()}): expected "
                                     f"{[round(x, 4) for x in expected[v].tolist()]}, got {[round(x, 4) for x in got[v].tolist()]}{note}")
    print("embedding_backward: correct")


def _build(ScaledEmbedding, padding_idx, seed=0):
    with torch.random.fork_rng():  # the layer draws from the global generator: leave its state alone
        torch.manual_seed(seed)
        with refuse_calls(ScaledEmbedding, helpers.embeddings.TokenEmbedding, label="ScaledEmbedding"):
            return ScaledEmbedding(1000, 64, padding_idx=padding_idx)


def check_scaled_embedding(ScaledEmbedding):
    for padding_idx in (0, None, 7):
        layer = _build(ScaledEmbedding, padding_idx)
        where = f"ScaledEmbedding(1000, 64, padding_idx={padding_idx})"
        assert isinstance(getattr(layer, "embedding", None), nn.Embedding), (
            f"{where}: layer.embedding must be an nn.Embedding, got {type(getattr(layer, 'embedding', None)).__name__}")
        weight = layer.embedding.weight
        assert tuple(weight.shape) == (1000, 64), f"{where}: expected a (1000, 64) table, got {tuple(weight.shape)}"
        assert layer.embedding.padding_idx == padding_idx, (
            f"{where}: the nn.Embedding must get padding_idx={padding_idx}, it has {layer.embedding.padding_idx}")
        n_params = len(list(layer.parameters()))
        assert n_params == 1, f"{where}: the table must be the only parameter, found {n_params}"
        rows = [r for r in range(1000) if r != padding_idx]
        std = (weight.detach()[rows] * 8).std().item()
        zero_rows = int((weight.detach().abs().amax(1) == 0).sum())
        assert zero_rows == (padding_idx is not None), (
            f"{where}: {zero_rows} rows of the table are zero after the initialisation, expected "
            f"{int(padding_idx is not None)}" + (" (with padding_idx=None no row is a pad: is the pad row zeroed only "
                                                 "if padding_idx is not None?)" if padding_idx is None else ""))
        assert abs(std - 1) < 0.05, f"{where}: std of the non-pad rows times sqrt(d_model): expected 1 ± 0.05, got {std:.3f}"
        pad = 0 if padding_idx is None else padding_idx
        ids = torch.tensor([[3, pad, 999], [5, 5, 1]])  # (B, T) = (2, 3), with the pad id
        with refuse_calls(ScaledEmbedding, helpers.embeddings.TokenEmbedding, label="ScaledEmbedding"):
            out = call_unchanged(layer, ids, label=f"{where}.forward")
        assert tuple(out.shape) == (2, 3, 64), f"{where}: ids (2, 3): expected output (2, 3, 64), got {tuple(out.shape)}"
        check_close(f"{where}: forward(ids) vs embedding(ids) * sqrt(64)", out, layer.embedding(ids) * 8, atol=1e-6, quiet=True)
        if padding_idx is not None:
            out.sum().backward()
            assert weight.grad[padding_idx].abs().max() == 0, f"{where}: the pad row must get a zero gradient"
    layer = _build(ScaledEmbedding, 0)
    for bad in (1000, -1, 1005):
        try:
            call_unchanged(layer, torch.tensor([[1, bad]]), label="ScaledEmbedding.forward")
        except (AssertionError, NotImplementedError):
            raise
        except ValueError as e:
            assert str(bad) in str(e), f"the ValueError for id {bad} must name it, got: {e}"
        except Exception as e:  # noqa: BLE001 - torch's own error means the check on ids is missing or off by one
            raise AssertionError(f"id {bad}: expected your ValueError naming it, got {type(e).__name__} from torch "
                                 "(is your bound `< vocab_size`, and are negative ids checked?)") from None
        else:
            raise AssertionError(f"an id {bad} outside [0, 1000) must raise ValueError"
                                 + (" (are negative ids checked?)" if bad < 0 else ""))
    print("ScaledEmbedding: correct")


def check_nearest(nearest):
    table = torch.tensor([[1.0, 0.0], [10.0, 1.0], [0.0, 1.0], [-1.0, 0.3], [0.9, 0.5], [0.2, 0.0]])  # (V, C) = (6, 2)
    cases = [(0, 3, [5, 1, 4]), (2, 2, [4, 3]), (3, 1, [2]), (5, 5, [0, 1, 4, 2, 3])]  # row 1 is long
    for i, k, expected in cases:
        got = call_unchanged(nearest, table, i, k, label="nearest")
        assert isinstance(got, list) and all(isinstance(j, int) for j in got), f"expected a list of ints, got {got!r}"
        assert i not in got, f"nearest(table, {i}, {k}) = {got}: leave out row {i} itself"
        assert len(got) == k, f"nearest(table, {i}, {k}): expected {k} indices, got {len(got)}"
        note = ""
        if sorted(got) == sorted(expected):
            note = " (the right rows in the wrong order: most similar first)"
        elif 1 in got and 1 not in expected:
            note = " (row 1 is long: rank by the cosine, the dot product of rows scaled to length 1)"
        assert got == expected, f"nearest(table, {i}, {k}): expected {expected} (by cosine, most similar first), got {got}{note}"
    print("nearest: correct")


def check_exercise_1(mean_pool):
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[4, 2, 7, 0, 0], [3, 3, 3, 3, 3], [0, 5, 0, 6, 0]])  # (B, T) = (3, 5), pad id 0
    vectors = torch.randn(3, 5, 4, generator=g)  # (B, T, C)
    for pad in (0, 5):  # 5: the pad id need not be 0, and id 0 is then a real token
        got = call_unchanged(mean_pool, vectors, ids, pad, label="mean_pool")
        assert tuple(got.shape) == (3, 4), f"pad id {pad}: expected shape (3, 4), one vector per row, got {tuple(got.shape)}"
        for b in range(3):
            keep = ids[b] != pad
            check_close(f"pad id {pad}, row {b} (ids {ids[b].tolist()}): the mean of its {int(keep.sum())} non-pad vectors "
                        "(sum them, divide by their count)", got[b], vectors[b][keep].mean(0), atol=1e-6, quiet=True)
    print("exercise 1: correct")


def check_exercise_2(tied_backward):
    g = torch.Generator().manual_seed(1)
    for ids, V, C, dtype in ((torch.tensor([1, 4, 1, 0, 4, 4]), 6, 3, torch.float32),   # repeats; rows 2, 3, 5 unused
                             (torch.tensor([2, 2, 5, 0]), 7, 4, torch.float64)):
        W = torch.randn(V, C, generator=g, dtype=dtype, requires_grad=True)
        grad_logits = torch.randn(len(ids), V, generator=g, dtype=dtype)  # (T, V)
        (F.embedding(ids, W) @ W.T).backward(grad_logits)  # autograd's answer lands in W.grad
        got = _call(tied_backward, "tied_backward", ids, grad_logits, W.detach())
        assert torch.is_tensor(got) and tuple(got.shape) == (V, C), (
            f"ids {ids.tolist()}, W ({V}, {C}): expected a ({V}, {C}) gradient, got "
            f"{tuple(got.shape) if torch.is_tensor(got) else type(got).__name__}")
        h = W.detach()[ids]  # (T, C)
        through_output = grad_logits.T @ h  # (V, T) @ (T, C) -> (V, C)
        through_lookup = W.grad - through_output
        note = ""
        if torch.allclose(got, through_output, atol=1e-5):
            note = (" (that is the output layer's path only: W is also the lookup, so add the gradient that "
                    "reaches h, added at the rows ids)")
        elif torch.allclose(got, through_lookup, atol=1e-5):
            note = " (that is the lookup's path only: W.T is also the output layer, whose gradient adds a second term)"
        elif not torch.allclose(got[ids], W.grad[ids], atol=1e-5) and torch.allclose(got[2:3], W.grad[2:3], atol=1e-5):
            note = " (an id used several times must add every one of its rows)"
        assert torch.allclose(got, W.grad, atol=1e-5), (
            f"ids {ids.tolist()}, {dtype}: the gradient differs from autograd's, max abs diff "
            f"{(got - W.grad).abs().max().item():.3g}{note}")
    print("exercise 2: correct")
