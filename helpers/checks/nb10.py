"""Checks for notebook 10 (past one process): averaging the replicas' gradients by hand, and the
two exercises (shards of unequal size, gradient accumulation).

The gradient checks hand the learner three replicas (two would hide a division by 2), each with
its own random gradients, a frozen parameter whose gradient is None, and weights that must not
move. What is expected is computed in float64 from copies the learner never sees.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from helpers.exercises import call_unchanged
from helpers.models import GPT, GPTConfig

TOL = 1e-6  # float32 gradients of size ~1 averaged in float32 land within ~1e-7 of float64


class _Tiny(nn.Module):
    """Two layers with biases and one parameter that does not train (its .grad stays None)."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(4, 3), nn.Linear(3, 2)
        self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)

    def forward(self, x):
        return self.lin2(torch.tanh(self.lin1(x))) * self.frozen


def _replicas(n: int, seed: int) -> list[nn.Module]:
    g = torch.Generator().manual_seed(seed)
    base = _Tiny()
    with torch.no_grad():
        for p in base.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    replicas = [copy.deepcopy(base) for _ in range(n)]
    for m in replicas:  # each replica's own gradient: its own shard of the batch
        for p in m.parameters():
            if p.requires_grad:
                p.grad = torch.randn(p.shape, generator=g)
    return replicas


def _grads(models) -> list[list[torch.Tensor | None]]:
    return [[None if p.grad is None else p.grad.detach().clone() for p in m.parameters()] for m in models]


def _weights(models) -> list[list[torch.Tensor]]:
    return [[p.detach().clone() for p in m.parameters()] for m in models]


def _trainable(model) -> list[int]:
    return [i for i, p in enumerate(model.parameters()) if p.requires_grad]


def _match(got: list, want: list, idx: list[int]) -> bool:
    return all(isinstance(got[i], torch.Tensor) and got[i].shape == want[i].shape
               and (got[i].double() - want[i]).abs().max().item() <= TOL for i in idx)  # fmt: skip


def _call(name: str, fn, *args):
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except (RuntimeError, ValueError) as e:  # torch raises either when no group exists
        if "process group" in str(e):
            raise AssertionError(f"{name}: torch.distributed has no process group in this notebook: this build "
                                 "averages the replicas' gradients by hand, in one process") from None
        if isinstance(e, ValueError):
            raise
        raise AssertionError(f"{name}: your function raised {type(e).__name__}: {str(e)[:160]}") from None
    except (AttributeError, TypeError) as e:  # None.add_(...), torch.stack([None, ...])
        if "NoneType" in str(e):
            raise AssertionError(f"{name}: a parameter that does not train has no gradient (p.grad is None): "
                                 "skip it") from None
        raise


def _diagnose_average(name: str, models, before_w, before_g, after_g, want, weights: list[float]) -> None:
    """Raise with the cause when the replicas' gradients are not ``want`` (the same list for every replica)."""
    idx = _trainable(models[0])
    frozen = [i for i, p in enumerate(models[0].parameters()) if not p.requires_grad]
    for r, m in enumerate(models):
        for p, w in zip(m.parameters(), before_w[r], strict=True):
            assert torch.equal(p.detach(), w), (
                f"{name}: replica {r}'s weights changed: average the gradients (p.grad), not the parameters; "
                "the optimizer moves the weights afterwards")
        for i in frozen:
            assert after_g[r][i] is None, (
                f"{name}: replica {r}'s parameter {i} does not train (requires_grad=False): its gradient "
                "must stay None")
    ok = [_match(after_g[r], want, idx) for r in range(len(models))]
    if all(ok):
        return
    n = len(models)
    stacked = [torch.stack([before_g[r][i].double() for r in range(n)]) if i in idx else None
               for i in range(len(want))]  # fmt: skip
    total = [s.sum(0) if s is not None else None for s in stacked]
    unchanged = [all(torch.equal(after_g[r][i], before_g[r][i]) for i in idx) for r in range(n)]
    if all(unchanged):
        raise AssertionError(f"{name}: no replica's gradient changed: write the average into every replica's "
                             "p.grad (in place, or assign a new tensor)")
    if all(_match(after_g[r], total, idx) for r in range(n)):
        raise AssertionError(f"{name}: the gradients were summed, not averaged: an all-reduce sums, so divide "
                             "by the total")
    if weights == [1.0] * n:
        if all(_match(after_g[r], [t / 2 if t is not None else None for t in total], idx) for r in range(n)):
            raise AssertionError(f"{name}: divided by 2: divide by the number of replicas, len(replicas) "
                                 f"({n} here)")
    else:
        plain = [s.mean(0) if s is not None else None for s in stacked]
        if all(_match(after_g[r], plain, idx) for r in range(n)):
            raise AssertionError(f"{name}: a plain mean treats every replica alike, but the shards hold "
                                 f"{weights} examples: weight each replica's gradient by its count")
        per_w = [None if s is None else (s * torch.tensor(weights, dtype=s.dtype).view(-1, *[1] * (s.dim() - 1))).sum(0)
                 for s in stacked]  # fmt: skip
        if all(_match(after_g[r], [None if t is None else t / n for t in per_w], idx) for r in range(n)):
            raise AssertionError(f"{name}: weighted by the counts but divided by the number of replicas ({n}): "
                                 f"divide by the total count ({sum(weights):g})")
    if ok[0] and not all(ok):
        bad = ok.index(False)
        if unchanged[bad]:
            raise AssertionError(f"{name}: only some replicas hold the average (replica {bad} still has its "
                                 "own gradient): every replica must, or the copies drift apart after one step")
        raise AssertionError(f"{name}: replica 0 is right but replica {bad} is not: was its average computed "
                             "after replica 0's gradient had been overwritten? Compute the average first, "
                             "then write it into every replica")
    bias_rows = [i for i in idx if want[i].dim() == 1]
    if all(_match(after_g[r], want, [i for i in idx if i not in bias_rows]) for r in range(n)):
        raise AssertionError(f"{name}: the weight matrices are right but the biases (1-D parameters) are "
                             "not: average every trainable parameter")
    err = max((after_g[r][i].double() - want[i]).abs().max().item() for r in range(n) for i in idx
              if isinstance(after_g[r][i], torch.Tensor) and after_g[r][i].shape == want[i].shape)  # fmt: skip
    raise AssertionError(f"{name}: a replica's gradient differs from the expected average by up to {err:.3g} "
                         f"(tolerance {TOL})")


def _run_average(name: str, fn, n: int, seed: int, counts: list[int] | None) -> None:
    models = _replicas(n, seed)
    before_w, before_g = _weights(models), _grads(models)
    weights = [1.0] * n if counts is None else [float(c) for c in counts]
    idx = _trainable(models[0])
    want = [None] * len(before_g[0])
    for i in idx:
        stacked = torch.stack([before_g[r][i].double() for r in range(n)])  # (n, *shape)
        w = torch.tensor(weights, dtype=torch.float64).view(-1, *[1] * (stacked.dim() - 1))  # (n, 1, ...)
        want[i] = (stacked * w).sum(0) / sum(weights)
    if counts is None:
        _call(name, fn, models)
    else:
        given = list(counts)
        _call(name, fn, models, given)
        assert given == counts, f"{name}: your function changed the list of counts it was given"
    _diagnose_average(name, models, before_w, before_g, _grads(models), want, weights)


# ------------------------------------------------------------------------------------ build 1
def check_average_gradients(fn) -> None:
    """fn(replicas) leaves in every replica's p.grad the mean of the replicas' gradients."""
    for n, seed in ((3, 10), (2, 11)):
        _run_average("average_gradients", fn, n, seed, None)
    print("average_gradients: correct")


# ------------------------------------------------------------------------------------ exercise 1
def check_exercise_1(fn) -> None:
    """fn(replicas, counts): shards of unequal sizes; every replica ends with the whole batch's gradient."""
    for counts, seed in (([5, 2, 1], 12), ([1, 3], 13)):
        _run_average("exercise 1", fn, len(counts), seed, counts)
    print("exercise 1: correct")


# ------------------------------------------------------------------------------------ exercise 2
def _gpt(seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=1))


def check_exercise_2(fn) -> None:
    """fn(model, x, y, n_micro): model's .grad ends as the gradient of the whole batch's mean loss,
    reached by n_micro forward/backward passes of equal micro-batches."""
    g = torch.Generator().manual_seed(14)
    B, T, n_micro = 12, 8, 3
    x, y = torch.randint(11, (B, T), generator=g), torch.randint(11, (B, T), generator=g)  # (B, T) each
    reference = _gpt(5)
    reference(x, y)[1].backward()
    want = [p.grad.double() for p in reference.parameters()]
    model = _gpt(5)
    for p in model.parameters():  # what an earlier step left behind
        p.grad = torch.randn(p.shape, generator=g)
    stale = [p.grad.double().clone() for p in model.parameters()]
    seen, backwards = [], []

    def record(_module, args, kwargs):
        idx = args[0] if args else kwargs.get("idx")
        seen.append(tuple(idx.shape) if isinstance(idx, torch.Tensor) else ())

    hooks = [model.register_forward_pre_hook(record, with_kwargs=True),  # model(x, y) or model(idx=..., targets=...)
             model.tok_emb.weight.register_post_accumulate_grad_hook(lambda p: backwards.append(1))]  # once a backward
    try:
        call_unchanged(lambda *a: _call("exercise 2", fn, *a), model, x, y, n_micro, label="exercise 2")
    finally:
        for h in hooks:
            h.remove()
    if any(s[1] != T for s in seen):
        raise AssertionError(f"exercise 2: the model saw inputs of shape {seen}: cut the batch along its first "
                             f"dimension (examples), not along time: every window keeps its {T} tokens")
    if len(seen) != n_micro or any(s[0] != B // n_micro for s in seen):
        raise AssertionError(f"exercise 2: the model saw {len(seen)} batch(es) of shapes {seen}: accumulation "
                             f"runs {n_micro} micro-batches of {B // n_micro} windows, one forward and backward each")
    if len(backwards) != n_micro:
        raise AssertionError(f"exercise 2: {len(backwards)} backward pass(es) for {n_micro} micro-batches: one "
                             "backward over the summed losses keeps every micro-batch's graph in memory at once; "
                             "call backward once per micro-batch, right after its forward")
    got = [None if p.grad is None else p.grad.double() for p in model.parameters()]
    assert all(t is not None for t in got), "exercise 2: some parameters have no gradient after your function"
    scale = max(w.abs().max().item() for w in want)

    def close(cand):
        return all((a - b).abs().max().item() <= 1e-5 * scale for a, b in zip(got, cand, strict=True))

    if close(want):
        print("exercise 2: correct")
        return
    diagnoses = [
        ([w + s for w, s in zip(want, stale, strict=True)],
         "the gradient still holds what .grad held before: backward adds to it, so zero it first"),
        ([w * n_micro for w in want], f"the gradient is {n_micro}x too large: each micro-batch's loss is a mean over "
                                      f"its own windows; scale it by 1/{n_micro} before backward"),
    ]  # fmt: skip
    for cand, why in diagnoses:
        if close(cand):
            raise AssertionError(f"exercise 2: {why}")
    last = _gpt(5)
    (last(x[-B // n_micro:], y[-B // n_micro:])[1] / n_micro).backward()
    if close([p.grad.double() for p in last.parameters()]) or close([p.grad.double() * n_micro for p in last.parameters()]):
        raise AssertionError("exercise 2: only the last micro-batch's gradient is left: zero the gradients once, "
                             "before the loop, not inside it")
    err = max((a - b).abs().max().item() for a, b in zip(got, want, strict=True))
    raise AssertionError(f"exercise 2: the gradient differs from the whole batch's by up to {err:.3g} "
                         f"(largest gradient {scale:.3g})")
