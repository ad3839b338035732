"""Check catalogue of notebook 06b: each check against correct answers written differently and wrong ones.

The checks are the very functions the notebook imports (helpers/checks/nb06b.py); the references
are the notebook's collapsed solutions, copied here.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checks import nb06b
from helpers.checks.nb06b import Patient, patient_with_two_bugs, table_pe
from tests.catalogue import Catalogue, Wrong, assert_catalogue

# ---------------------------------------------------------------- exercise 1


def reference_leaks_future(attn, T=6, C=8):
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))  # (B, T, C)
    base = attn(x)
    for s in range(1, T):  # change position s; rows before s must not move
        y = x.clone()
        y[:, s] += 1.0
        if not torch.allclose(attn(y)[:, :s], base[:, :s]):
            return True
    return False


def jacobian(attn, T=6, C=8):  # d out[t] / d x[s] for every pair, by autograd
    x = torch.randn(1, T, C, generator=torch.Generator().manual_seed(3))
    J = torch.autograd.functional.jacobian(lambda z: attn(z), x)  # (1, T, C, 1, T, C)
    dep = J.abs().sum(dim=(0, 2, 3, 5)) > 0  # (T out, T in)
    return bool(dep.triu(1).any())


def one_hot_probe(attn, T=6, C=8):  # a big change at one position at a time, rows compared exactly
    x = torch.zeros(1, T, C)
    base = attn(x)
    for s in range(T):
        y = x.clone()
        y[0, s] = 5.0
        if not torch.equal(attn(y)[:, :s], base[:, :s]):
            return True
    return False


def row0_only(attn, T=6, C=8):  # wrong: perturbs everything after 0 and looks at row 0 only
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[:, 1:] += 1.0
    return not torch.allclose(attn(y)[:, 0], attn(x)[:, 0])


def adjacent_only(attn, T=6, C=8):  # wrong: looks one position ahead only
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    base = attn(x)
    for s in range(1, T):
        y = x.clone()
        y[:, s] += 1.0
        if not torch.allclose(attn(y)[:, s - 1], base[:, s - 1]):
            return True
    return False


def last_position_only(attn, T=6, C=8):  # wrong: changes only the last position
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[:, -1] += 1.0
    return not torch.allclose(attn(y)[:, :-1], attn(x)[:, :-1])


def rows_up_to_s(attn, T=6, C=8):  # wrong: the row at s itself may move, and it is counted
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    base = attn(x)
    for s in range(1, T):
        y = x.clone()
        y[:, s] += 1.0
        if not torch.allclose(attn(y)[:, : s + 1], base[:, : s + 1]):
            return True
    return False


def any_output_moves(attn, T=6, C=8):  # wrong: any change anywhere
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    return not torch.allclose(attn(x + 1.0), attn(x))


ex1 = Catalogue(
    check=nb06b.check_exercise_1,
    reference=reference_leaks_future,
    correct=[jacobian, one_hot_probe],
    wrong=[
        Wrong(row0_only, "only row 3", "looks at row 0 only"),
        Wrong(adjacent_only, "position 5 only", "looks one position ahead only"),
        Wrong(last_position_only, ("every position", "only row"), "changes the last position only"),
        Wrong(rows_up_to_s, ("causal", "itself"), "counts the changed row itself"),
        Wrong(any_output_moves, ("causal", "itself"), "any output that moves"),
    ],
)

# ---------------------------------------------------------------- exercise 2


def reference_pe_is_right(add_pe, B=2, T=5):  # B != T, B > 1: a batch/time mix-up cannot hide
    x = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(0))  # (B, T, C)
    try:
        out = add_pe(x)
    except RuntimeError:  # a broadcasting error is a failed check, not a crash of the check
        return False
    return out.shape == x.shape and torch.allclose(out - x, table_pe[:T].expand(B, T, 32), atol=1e-6)


def zeros_probe(add_pe):  # zeros in, the table out, for B = 3, T = 7
    try:
        out = add_pe(torch.zeros(3, 7, 32))
    except Exception:  # noqa: BLE001
        return False
    return tuple(out.shape) == (3, 7, 32) and all(torch.equal(out[b], table_pe[:7]) for b in range(3))


def long_batch(add_pe):  # several sizes, every row compared
    for B, T in ((2, 16), (3, 4)):
        try:
            out = add_pe(torch.ones(B, T, 32))
        except RuntimeError:
            return False
        if out.shape != (B, T, 32) or not torch.allclose(out - 1, table_pe[:T].expand(B, T, 32), atol=1e-6):
            return False
    return True


def first_sequence_only(add_pe, B=2, T=5):  # wrong: looks at sequence 0 only
    x = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(0))
    try:
        out = add_pe(x)
    except RuntimeError:
        return False
    return torch.allclose(out[0] - x[0], table_pe[:T], atol=1e-6)


def no_try(add_pe, B=2, T=5):  # wrong: Bug 5's broadcasting error escapes
    x = torch.randn(B, T, 32, generator=torch.Generator().manual_seed(0))
    return bool(torch.allclose(add_pe(x) - x, table_pe[:T].expand(B, T, 32), atol=1e-6))


ex2 = Catalogue(
    check=nb06b.check_exercise_2,
    reference=reference_pe_is_right,
    correct=[zeros_probe, long_batch],
    wrong=[
        Wrong(lambda add_pe: reference_pe_is_right(add_pe, B=5, T=5), "B ≠ T", "B = T hides Bug 5"),
        Wrong(lambda add_pe: reference_pe_is_right(add_pe, B=1, T=5), ("B > 1", "every sequence"), "B = 1"),
        Wrong(first_sequence_only, "every sequence", "compares the first sequence only"),
        Wrong(no_try, "catch", "a crash escapes"),
        Wrong(lambda add_pe: add_pe(torch.zeros(2, 5, 32)).shape == (2, 5, 32), ("row t", "catch", "B ≠ T"),
              "checks the shape only"),
    ],
)

# ---------------------------------------------------------------- exercise 3


def reference_healthy(model):
    g = torch.Generator().manual_seed(0)
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx = torch.randint(1, V, (2, T), generator=g)  # (B, T)
    with torch.no_grad():
        logits = model(idx)[0]  # (B, T, V)
        for s in range(1, T):  # promise 2: change token s; no logits before s may move
            other = idx.clone()
            other[:, s] = other[:, s] % (V - 1) + 1
            if not torch.allclose(model(other)[0][:, :s], logits[:, :s], atol=1e-5):
                return False
        targets = torch.randint(1, V, (2, T), generator=g)  # (B, T)
        targets[:, T // 2 :] = pad  # promise 3: padded targets must not count
        spec_loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad)
        return bool(torch.allclose(model(idx, targets)[1], spec_loss, atol=1e-5))


def _prefix_causal(model, idx):  # the logits of every prefix equal the first rows of the full logits
    full = model(idx)[0]
    return all(torch.allclose(model(idx[:, :t])[0], full[:, :t], atol=1e-5) for t in range(1, idx.shape[1]))


def prefix_and_appended_padding(model):  # causality by prefixes; padding appended must not move the loss
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx, n = torch.randint(1, V, (3, T)), T // 2
    targets = torch.randint(1, V, (3, n))
    with torch.no_grad():
        if not _prefix_causal(model, idx):
            return False
        short = model(idx[:, :n], targets)[1]
        padded = model(idx, torch.cat([targets, torch.full((3, T - n), pad)], dim=1))[1]
    return bool(torch.allclose(short, padded, atol=1e-5))


def gradient_and_masked_mean(model):  # causality by backprop (the Recipe), the loss by a masked mean
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx = torch.randint(1, V, (2, T))
    grads = {}
    hook = model.tok.register_forward_hook(lambda m, i, out: grads.update(x=out) or out.retain_grad())
    try:
        for t in range(T):
            model(idx)[0][:, t].sum().backward()
            if grads["x"].grad[:, t + 1 :].abs().sum() > 0:
                return False
    finally:
        hook.remove()
    targets = torch.randint(0, V, (2, T))
    targets[0, -3:] = pad
    with torch.no_grad():
        logits, loss = model(idx, targets)
        nll = -logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T)
        keep = (targets != pad).float()
        return abs(loss.item() - ((nll * keep).sum() / keep.sum()).item()) < 1e-5


def causality_only(model):  # wrong: never looks at the loss
    V, T = model.vocab_size, model.block_size
    with torch.no_grad():
        return _prefix_causal(model, torch.randint(1, V, (2, T)))


def loss_only(model):  # wrong: never looks at causality
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx, targets = torch.randint(1, V, (2, T)), torch.randint(1, V, (2, T))
    targets[:, -3:] = pad
    with torch.no_grad():
        logits, loss = model(idx, targets)
        want = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad)
    return bool(torch.allclose(loss, want, atol=1e-5))


def loss_at_init_only(model):  # wrong: every patient's loss at init is about ln V
    idx = torch.randint(1, model.vocab_size, (4, model.block_size))
    with torch.no_grad():
        return abs(model(idx, idx)[1].item() - math.log(model.vocab_size)) < 0.5


def padding_counted(model):  # wrong: the reference loss counts padding too, so the clean patient fails
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx, targets = torch.randint(1, V, (2, T)), torch.randint(1, V, (2, T))
    targets[:, -3:] = pad
    with torch.no_grad():
        logits, loss = model(idx, targets)
        ok = torch.allclose(loss, F.cross_entropy(logits.flatten(0, 1), targets.flatten()), atol=1e-5)
    return bool(ok) and _prefix_causal(model, idx)


def no_padding_in_the_test(model):  # wrong: compares the loss on targets that hold no padding
    V, T, pad = model.vocab_size, model.block_size, model.pad_id
    idx, targets = torch.randint(1, V, (2, T)), torch.randint(1, V, (2, T))  # ids from 1: never pad
    with torch.no_grad():
        logits, loss = model(idx, targets)
        want = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad)
    return bool(torch.allclose(loss, want, atol=1e-5)) and _prefix_causal(model, idx)


ex3 = Catalogue(
    check=nb06b.check_exercise_3,
    reference=reference_healthy,
    correct=[prefix_and_appended_padding, gradient_and_masked_mean],
    wrong=[
        Wrong(causality_only, "loss", "never checks the loss"),
        Wrong(loss_only, ("positions", "later token"), "never checks causality"),
        Wrong(loss_at_init_only, ("positions", "later token"), "the loss at init only"),
        Wrong(padding_counted, ("clean", "which positions count"), "counts padding in its own loss"),
        Wrong(no_padding_in_the_test, ("loss", "padded"), "tests the loss without padded targets"),
        Wrong(lambda model: False, "clean", "flags every model"),
    ],
)


def test_patient_bugs_are_silent():
    """The two-bug patient runs, has the right shapes, and its loss at init is within 0.4 nats of ln V."""
    idx, targets = torch.randint(1, 12, (16, 8)), torch.randint(1, 12, (16, 8))
    logits, loss = patient_with_two_bugs()(idx, targets)
    assert logits.shape == (16, 8, 12) and abs(loss.item() - math.log(12)) < 0.4
    assert reference_healthy(Patient()) and not reference_healthy(patient_with_two_bugs())

CATALOGUES = {"exercise 1": ex1, "exercise 2": ex2, "exercise 3": ex3}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    assert_catalogue(CATALOGUES[name])
