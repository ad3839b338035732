"""The check catalogue of notebook 10 (tests/catalogue.py): each check against the reference, answers
written differently and plausible wrong ones (a new notebook: no old checks)."""

import pytest
import torch
import torch.distributed as dist
from catalogue import Catalogue, Wrong, assert_catalogue

from helpers.checks.nb10 import check_average_gradients, check_exercise_1, check_exercise_2


def _trainable(m):
    return [p for p in m.parameters() if p.requires_grad]


# ------------------------------------------------------------------------------------ build 1
def average_ref(replicas):
    for params in zip(*(m.parameters() for m in replicas), strict=True):
        if params[0].grad is None:
            continue
        mean = torch.stack([p.grad for p in params]).mean(0)
        for p in params:
            p.grad.copy_(mean)


def average_sum_then_divide(replicas):
    n = len(replicas)
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        total = sum(p.grad for p in params)
        for p in params:
            p.grad = total / n


def average_by_name(replicas):
    named = [dict(m.named_parameters()) for m in replicas]
    for name, p0 in named[0].items():
        if p0.grad is not None:
            mean = torch.mean(torch.stack([d[name].grad.double() for d in named]), dim=0).float()
            for d in named:
                d[name].grad = mean.clone()


def average_sum(replicas):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        total = sum(p.grad for p in params)
        for p in params:
            p.grad = total.clone()


def average_by_two(replicas):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        mean = sum(p.grad for p in params) / 2
        for p in params:
            p.grad = mean.clone()


def average_only_first(replicas):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        params[0].grad = torch.stack([p.grad for p in params]).mean(0)


def average_running(replicas):  # overwrites replica 0 first, then averages again with the new value
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        for p in params:
            p.grad = torch.stack([q.grad for q in params]).mean(0)


def average_weights(replicas):
    with torch.no_grad():
        for params in zip(*(m.parameters() for m in replicas), strict=True):
            mean = torch.stack([p.data for p in params]).mean(0)
            for p in params:
                p.copy_(mean)


def average_not_none_safe(replicas):
    for params in zip(*(m.parameters() for m in replicas), strict=True):
        mean = torch.stack([p.grad for p in params]).mean(0)
        for p in params:
            p.grad = mean.clone()


def average_weights_only(replicas):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        if params[0].dim() > 1:
            mean = torch.stack([p.grad for p in params]).mean(0)
            for p in params:
                p.grad = mean.clone()


def average_returns_new(replicas):
    return [torch.stack([p.grad for p in params]).mean(0) for params in zip(*(_trainable(m) for m in replicas), strict=True)]


def average_all_reduce(replicas):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        for p in params:
            dist.all_reduce(p.grad)


def test_average_gradients_catalogue():
    assert_catalogue(Catalogue(check_average_gradients, average_ref, correct=[average_sum_then_divide, average_by_name],
                               wrong=[
        Wrong(average_sum, "summed", "an all-reduce's sum"),
        Wrong(average_by_two, ("divided by 2", "len(replicas)"), "two replicas assumed"),
        Wrong(average_only_first, "every replica", "only replica 0"),
        Wrong(average_running, "overwritten", "running average with the updated replica 0"),
        Wrong(average_weights, "weights", "averages the parameters"),
        Wrong(average_not_none_safe, ("None", "skip"), "a frozen parameter's None gradient"),
        Wrong(average_weights_only, "biases", "matrices only"),
        Wrong(average_returns_new, "changed", "returns the averages, writes nothing"),
        Wrong(average_all_reduce, "process group", "needs a process group"),
    ]))  # fmt: skip


# ------------------------------------------------------------------------------------ exercise 1
def weighted_ref(replicas, counts):
    total = sum(counts)
    for params in zip(*(m.parameters() for m in replicas), strict=True):
        if params[0].grad is None:
            continue
        mean = sum(c * p.grad for c, p in zip(counts, params, strict=True)) / total
        for p in params:
            p.grad = mean.clone()


def weighted_tensor(replicas, counts):
    w = torch.tensor(counts, dtype=torch.float64)
    w = w / w.sum()
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        g = torch.stack([p.grad.double() for p in params])  # (n, ...)
        mean = torch.tensordot(w, g, dims=1).float()
        for p in params:
            p.grad.copy_(mean)


def weighted_sum_of_sums(replicas, counts):  # each replica's gradient times its count is its shard's summed loss
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        summed = torch.zeros_like(params[0].grad)
        for c, p in zip(counts, params, strict=True):
            summed += p.grad * c
        for p in params:
            p.grad = summed / sum(counts)


def weighted_by_replicas(replicas, counts):
    for params in zip(*(_trainable(m) for m in replicas), strict=True):
        mean = sum(c * p.grad for c, p in zip(counts, params, strict=True)) / len(replicas)
        for p in params:
            p.grad = mean.clone()


def weighted_inverse(replicas, counts):
    weighted_ref(replicas, [1 / c for c in counts])


def weighted_sorts_counts(replicas, counts):
    counts.sort()
    weighted_ref(replicas, counts)


def test_exercise_1_catalogue():
    assert_catalogue(Catalogue(check_exercise_1, weighted_ref, correct=[weighted_tensor, weighted_sum_of_sums], wrong=[
        Wrong(lambda r, c: average_ref(r), ("plain mean", "weight each"), "ignores the counts"),
        Wrong(weighted_by_replicas, "total count", "divides by the number of replicas"),
        Wrong(weighted_inverse, "differs", "weights 1/count"),
        Wrong(weighted_sorts_counts, "counts", "sorts the counts in place"),
        Wrong(lambda r, c: None, ("no replica", "changed"), "does nothing"),
    ]))  # fmt: skip


# ------------------------------------------------------------------------------------ exercise 2
def accumulate_ref(model, x, y, n_micro):
    model.zero_grad()
    for mx, my in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True):
        _, loss = model(mx, my)
        (loss / n_micro).backward()


def accumulate_split(model, x, y, n_micro):
    for p in model.parameters():
        p.grad = None
    size = x.shape[0] // n_micro
    for i in range(n_micro):
        _, loss = model(x[i * size:(i + 1) * size], y[i * size:(i + 1) * size])
        loss.div(n_micro).backward()


def accumulate_sum_then_scale(model, x, y, n_micro):  # sum of micro-means, scaled once at the end
    model.zero_grad(set_to_none=False)
    for mx, my in zip(torch.split(x, x.shape[0] // n_micro), torch.split(y, y.shape[0] // n_micro), strict=True):
        model(mx, my)[1].backward()
    for p in model.parameters():
        p.grad /= n_micro


def accumulate_no_zero(model, x, y, n_micro):
    for mx, my in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True):
        (model(mx, my)[1] / n_micro).backward()


def accumulate_unscaled(model, x, y, n_micro):
    model.zero_grad()
    for mx, my in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True):
        model(mx, my)[1].backward()


def accumulate_zero_inside(model, x, y, n_micro):
    for mx, my in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True):
        model.zero_grad()
        (model(mx, my)[1] / n_micro).backward()


def accumulate_time(model, x, y, n_micro):
    model.zero_grad()
    for mx, my in zip(x.chunk(n_micro, dim=1), y.chunk(n_micro, dim=1), strict=True):
        (model(mx, my)[1] / n_micro).backward()


def accumulate_whole(model, x, y, n_micro):
    model.zero_grad()
    model(x, y)[1].backward()


def accumulate_kwargs(model, x, y, n_micro):
    model.zero_grad(set_to_none=True)
    for mx, my in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True):
        model(idx=mx, targets=my)[1].div(n_micro).backward()


def accumulate_one_backward(model, x, y, n_micro):
    model.zero_grad(set_to_none=True)
    sum(model(a, b)[1] for a, b in zip(x.chunk(n_micro), y.chunk(n_micro), strict=True)).div(n_micro).backward()


def accumulate_in_place(model, x, y, n_micro):
    y[:, 0] = 0
    accumulate_ref(model, x, y, n_micro)


def test_exercise_2_catalogue():
    assert_catalogue(Catalogue(check_exercise_2, accumulate_ref, correct=[accumulate_split, accumulate_sum_then_scale, accumulate_kwargs],
                               wrong=[
        Wrong(accumulate_no_zero, "zero it first", "stale gradients"),
        Wrong(accumulate_unscaled, "too large", "no 1/n_micro"),
        Wrong(accumulate_zero_inside, "last micro-batch", "zero_grad inside the loop"),
        Wrong(accumulate_time, "along time", "cut along T"),
        Wrong(accumulate_whole, "micro-batches", "one big batch: not accumulation"),
        Wrong(accumulate_in_place, "in place", "changes the targets"),
        Wrong(accumulate_one_backward, "backward once", "one backward over the summed losses"),
    ]))  # fmt: skip


@pytest.mark.parametrize("check", [check_average_gradients, check_exercise_1, check_exercise_2])
def test_stub_says_not_done(check):
    from helpers.exercises import attempt

    def stub(*_args):
        raise NotImplementedError("build: not done")

    attempt(check, stub)  # prints "not done yet", raises nothing
