"""The check catalogue of notebook 07: every build and exercise check against correct answers
written differently from the reference and plausible wrong ones (tests/catalogue.py)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checks.nb07 import (
    check_early_stopping,
    check_exercise_1,
    check_exercise_2,
    check_training_loop,
)
from helpers.training import History, cosine_lr, make_optimizer
from tests.catalogue import Catalogue, Wrong, assert_catalogue


# --- the training loop ---------------------------------------------------------------------------
def reference_training_loop(model, get_batch, config, loss_fn, evaluate_in_eval_mode=True, back_to_train=True,
                            clip_after_step=False, zero_grad=True, last_eval=True, val_first=False, callback=None,
                            callback_when="after"):
    optimizer, hist = make_optimizer(model, config), History()
    model.train()
    for step in range(config.max_steps + 1):
        if step % config.eval_interval == 0 or (last_eval and step == config.max_steps):
            model.train(not evaluate_in_eval_mode)
            with torch.no_grad():
                order = ("val", "train") if val_first else ("train", "val")
                losses = {split: sum(loss_fn(model, get_batch(split)).item() for _ in range(config.eval_iters))
                          / config.eval_iters for split in order}
            if back_to_train:
                model.train()
            if callback is not None and callback_when == "before":
                callback(step, hist, model)
            hist.eval_steps.append(step)
            hist.train_loss.append(losses["train"])
            hist.val_loss.append(losses["val"])
            if callback is not None and callback_when == "after":
                callback(step, hist, model)
            elif callback is not None and callback_when == "copy":
                callback(step, copy.deepcopy(hist), copy.deepcopy(model))
        if step == config.max_steps:
            break
        if callback is not None and callback_when == "every step" and step % config.eval_interval:
            callback(step, hist, model)
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, config)
        loss = loss_fn(model, get_batch("train"))
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None and not clip_after_step:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        if config.grad_clip is not None and clip_after_step:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        hist.step_loss.append(loss.item())
    return hist


def while_loop(model, get_batch, config, loss_fn, callback=None):  # while, inference_mode, the rate after backward
    opt = make_optimizer(model, config)
    h = History(eval_steps=[], train_loss=[], val_loss=[], step_loss=[])
    step = 0
    while True:
        if step == config.max_steps or step % config.eval_interval == 0:
            model.eval()
            with torch.inference_mode():
                tr = [loss_fn(model, get_batch("train")).item() for _ in range(config.eval_iters)]
                va = [loss_fn(model, get_batch("val")).item() for _ in range(config.eval_iters)]
            model.train()
            h.eval_steps.append(step)
            h.train_loss.append(sum(tr) / len(tr))
            h.val_loss.append(sum(va) / len(va))
            if callback:
                callback(step, h, model)
        if step >= config.max_steps:
            return h
        batch = get_batch("train")
        opt.zero_grad()
        loss = loss_fn(model, batch)
        loss.backward()
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, config)
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=config.grad_clip)
        opt.step()
        h.step_loss.append(float(loss.detach()))
        step += 1


def evaluate_then_step(model, get_batch, config, loss_fn, callback=None):  # evaluate(), clip_grad_norm_ by hand
    def evaluate(split):
        return sum(float(loss_fn(model, get_batch(split))) for _ in range(config.eval_iters)) / config.eval_iters

    opt, hist = make_optimizer(model, config), History()
    for step in range(config.max_steps + 1):
        if step % config.eval_interval == 0 or step == config.max_steps:
            model.eval()
            with torch.no_grad():
                tr = evaluate("train")
                va = evaluate("val")
            model.train()
            hist.eval_steps += [step]
            hist.train_loss += [tr]
            hist.val_loss += [va]
            _ = callback and callback(step, hist, model)
        if step < config.max_steps:
            lr = cosine_lr(step, config)
            for group in opt.param_groups:
                group.update(lr=lr)
            for p in model.parameters():
                p.grad = None
            loss = loss_fn(model, get_batch("train"))
            loss.backward()
            if config.grad_clip is not None:
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
                scale = torch.clamp(config.grad_clip / (norm + 1e-6), max=1.0)
                for g in grads:
                    g.mul_(scale)
            opt.step()
            hist.step_loss.append(loss.item())
    return hist


def loop_wrong(**kw):
    def loop(model, get_batch, config, loss_fn, callback=None):
        return reference_training_loop(model, get_batch, config, loss_fn, callback=callback, **kw)
    loop.__name__ = "loop_" + "_".join(f"{k}" for k in kw)
    return loop


def no_callback_argument(model, get_batch, config, loss_fn):
    return reference_training_loop(model, get_batch, config, loss_fn)


def ignores_callback(model, get_batch, config, loss_fn, callback=None):
    return reference_training_loop(model, get_batch, config, loss_fn)


LOOP = Catalogue(check_training_loop, reference_training_loop, correct=[while_loop, evaluate_then_step], wrong=[
    Wrong(loop_wrong(evaluate_in_eval_mode=False), ("eval mode", "dropout"), "evaluates with dropout on"),
    Wrong(loop_wrong(back_to_train=False), ("train() mode", "dropout"), "left in eval() after the evaluation"),
    Wrong(loop_wrong(clip_after_step=True), "what changed the weights", "clips after optimizer.step()"),
    Wrong(loop_wrong(zero_grad=False), "step 1", "never clears the gradients"),
    Wrong(loop_wrong(last_eval=False), "evaluations at steps", "no evaluation at max_steps"),
    Wrong(loop_wrong(val_first=True), ("train first", "nothing has trained"), "val batches drawn before train"),
    Wrong(no_callback_argument, "callback=None", "takes no callback (the loop of the checks before issue 36)"),
    Wrong(ignores_callback, "callback ran at steps []", "takes callback but never calls it"),
    Wrong(loop_wrong(callback_when="before"), "after recording the evaluation", "calls callback before recording"),
    Wrong(loop_wrong(callback_when="every step"), "once after each evaluation", "calls callback at every step"),
    Wrong(loop_wrong(callback_when="copy"), "not the model being trained", "passes copies to callback"),
])


# --- early stopping ------------------------------------------------------------------------------
class ReferenceEarlyStopping:
    def __init__(self, patience, min_delta=0.0):
        self.patience, self.min_delta = patience, min_delta
        self.best, self.best_state, self.bad = math.inf, None, 0

    def update(self, val_loss, model):
        if val_loss < self.best - self.min_delta:
            self.best, self.bad = val_loss, 0
            self.best_state = copy.deepcopy(model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience

    def restore(self, model):
        model.load_state_dict(self.best_state)


class HistoryStopper:  # a list of every loss, clones in a dict, copy_ on restore
    def __init__(self, patience, min_delta=0.0):
        self.patience, self.min_delta, self.history, self.kept = patience, min_delta, [], {}

    def update(self, val_loss, model):
        best = min([math.inf] + [v for v, improved in self.history if improved])
        improved = val_loss < best - self.min_delta
        self.history.append((val_loss, improved))
        if improved:
            self.kept = {k: v.detach().clone() for k, v in model.state_dict().items()}
        since = next((i for i, (_, imp) in enumerate(reversed(self.history)) if imp), len(self.history))
        return since >= self.patience

    def restore(self, model):
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(self.kept[k])


class StepCounter:  # remembers the index of the best evaluation, counts from it
    def __init__(self, patience, min_delta=0.0):
        self.patience, self.min_delta, self.i, self.best_i, self.best, self.state = patience, min_delta, -1, -1, None, None

    def update(self, val_loss, model):
        self.i += 1
        if self.best is None or self.best - val_loss > self.min_delta:
            self.best, self.best_i = val_loss, self.i
            self.state = copy.deepcopy(model).state_dict()
        return self.i - self.best_i >= self.patience

    def restore(self, model):
        model.load_state_dict(self.state)


class LessOrEqual(ReferenceEarlyStopping):  # a tie counts as an improvement
    def update(self, val_loss, model):
        if val_loss <= self.best - self.min_delta:
            self.best, self.bad = val_loss, 0
            self.best_state = copy.deepcopy(model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience


class NoReset(ReferenceEarlyStopping):  # never resets the count after an improvement
    def update(self, val_loss, model):
        if val_loss < self.best - self.min_delta:
            self.best = val_loss
            self.best_state = copy.deepcopy(model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience


class LiveView(ReferenceEarlyStopping):  # keeps state_dict() itself: live tensors
    def update(self, val_loss, model):
        stop = super().update(val_loss, model)
        if self.bad == 0:
            self.best_state = model.state_dict()
        return stop


class MovesBestWithinDelta(ReferenceEarlyStopping):  # the review's: best moves on any decrease
    def update(self, val_loss, model):
        if val_loss < self.best:
            if val_loss < self.best - self.min_delta:
                self.bad = 0
                self.best_state = copy.deepcopy(model.state_dict())
            else:
                self.bad += 1
            self.best = val_loss
        else:
            self.bad += 1
        return self.bad >= self.patience


class DeltaWrongSide(ReferenceEarlyStopping):  # val_loss < best + min_delta
    def update(self, val_loss, model):
        if val_loss < self.best + self.min_delta:
            self.best, self.bad = val_loss, 0
            self.best_state = copy.deepcopy(model.state_dict())
        else:
            self.bad += 1
        return self.bad >= self.patience


STOP = Catalogue(check_early_stopping, ReferenceEarlyStopping, correct=[HistoryStopper, StepCounter], wrong=[
    Wrong(LessOrEqual, "update returned", "<= : a tie is an improvement"),
    Wrong(NoReset, "update returned", "the count never resets"),
    Wrong(LiveView, "changed with the model", "keeps live tensors"),
    Wrong(MovesBestWithinDelta, "min_delta", "moves best on a decrease within min_delta"),
    Wrong(DeltaWrongSide, ("min_delta", "update returned"), "min_delta on the wrong side"),
])


# --- exercise 1: gradient accumulation -----------------------------------------------------------
def reference_accumulate_gradients(model, batches, loss_fn):
    model.zero_grad(set_to_none=True)
    total = 0.0
    for batch in batches:
        loss = loss_fn(model, batch) / len(batches)
        loss.backward()
        total += loss.item()
    return total


def sum_then_divide(model, batches, loss_fn):  # the review's correct answer the old check called 93 % wrong
    model.zero_grad()
    losses = []
    for b in batches:
        loss = loss_fn(model, b)
        loss.backward()
        losses.append(loss.item())
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= len(batches)
    return sum(losses) / len(losses)


def weighted_by_size(model, batches, loss_fn):  # weights each batch by its share of the examples
    for p in model.parameters():
        p.grad = None
    n = sum(len(x) for x, _ in batches)
    total = 0.0
    for x, y in batches:
        loss = loss_fn(model, (x, y)) * (len(x) / n)
        loss.backward()
        total += float(loss.detach())
    return total


def summed_accumulation(model, batches, loss_fn):
    return reference_accumulate_gradients(model, batches, lambda m, b: loss_fn(m, b) * len(batches)) / len(batches)


def no_zero_grad(model, batches, loss_fn):
    total = 0.0
    for batch in batches:
        loss = loss_fn(model, batch) / len(batches)
        loss.backward()
        total += loss.item()
    return total


def zero_grad_inside(model, batches, loss_fn):
    total = 0.0
    for batch in batches:
        model.zero_grad()
        loss = loss_fn(model, batch) / len(batches)
        loss.backward()
        total += loss.item()
    return total


def returns_tensor(model, batches, loss_fn):
    model.zero_grad()
    total = 0.0
    for batch in batches:
        loss = loss_fn(model, batch) / len(batches)
        loss.backward()
        total = total + loss.detach()
    return total


EX1 = Catalogue(check_exercise_1, reference_accumulate_gradients, correct=[sum_then_divide, weighted_by_size], wrong=[
    Wrong(summed_accumulation, ("sum of the losses", "mean"), "the sum: k times too large"),
    Wrong(no_zero_grad, "start from zero", "adds to the previous gradients"),
    Wrong(zero_grad_inside, "differ", "clears the gradient of earlier batches"),
    Wrong(returns_tensor, "float", "returns a tensor"),
])


# --- exercise 2: label smoothing -----------------------------------------------------------------
def reference_smoothed_loss(logits, targets, eps):
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    return ((1 - eps) * nll - eps * logp.mean(dim=-1)).mean()


def explicit_target(logits, targets, eps):  # the target distribution written out
    v = logits.shape[-1]
    q = torch.full_like(logits, eps / v)
    q[torch.arange(len(targets)), targets] += 1 - eps
    return -(q * torch.log_softmax(logits, -1)).sum(-1).mean()


def softmax_then_log(logits, targets, eps):  # log of softmax, one_hot
    p = torch.softmax(logits.double(), dim=1)
    q = (1 - eps) * F.one_hot(targets, logits.shape[1]).double() + eps / logits.shape[1]
    return (-(q * p.log()).sum(dim=1).mean()).float()


def summed_rows(logits, targets, eps):
    return reference_smoothed_loss(logits, targets, eps) * len(targets)


def eps_times_sum(logits, targets, eps):
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    return ((1 - eps) * nll - eps * logp.sum(dim=-1)).mean()


def over_the_others(logits, targets, eps):
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, targets[:, None]).squeeze(1)
    others = (logp.sum(dim=-1) + nll) / (logits.shape[-1] - 1)
    return ((1 - eps) * nll - eps * others).mean()


def torch_one_liner(logits, targets, eps):
    return F.cross_entropy(logits, targets, label_smoothing=eps)


def returns_float(logits, targets, eps):
    return reference_smoothed_loss(logits, targets, eps).item()


def in_place_logits(logits, targets, eps):
    logits -= logits.max(dim=-1, keepdim=True).values  # a "stable" shift, done in place on the caller's tensor
    return reference_smoothed_loss(logits, targets, eps)


EX2 = Catalogue(check_exercise_2, reference_smoothed_loss, correct=[explicit_target, softmax_then_log], wrong=[
    Wrong(summed_rows, "sum over the rows", "sums over the rows"),
    Wrong(eps_times_sum, "eps / V", "eps times the sum, not the mean"),
    Wrong(over_the_others, "eps / V", "eps over the V - 1 wrong tokens"),
    Wrong(torch_one_liner, "label_smoothing", "calls torch's label_smoothing"),
    Wrong(returns_float, "scalar tensor", "returns a float"),
    Wrong(in_place_logits, "in place", "changes the caller's logits"),
])


@pytest.mark.parametrize("cat", [STOP, EX1, EX2, LOOP], ids=["early_stopping", "exercise_1", "exercise_2", "loop"])
def test_catalogue(cat):
    counts = assert_catalogue(cat)
    assert counts["correct"] >= 2 and counts["wrong"] >= 3
