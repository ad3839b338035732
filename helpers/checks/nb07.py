"""Checks for notebook 07 (training): the training loop, early stopping, and the two exercises.

Each check builds its own small problem (the digit-reversal task of §2, a tiny GPT on random
characters), so it runs the same after a kernel restart and at any ``SCALE``. Messages say what
differs and where to look, never the answer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.device import set_seed
from helpers.exercises import call_unchanged
from helpers.models import GPT, GPTConfig, Transformer
from helpers.training import History, TrainConfig, default_loss_fn, train

__all__ = ["check_early_stopping", "check_exercise_1", "check_exercise_2", "check_training_loop", "has_passed"]

_PASSED: list = []  # the training loops that passed check_training_loop in this kernel (the objects themselves)


def has_passed(training_loop) -> bool:
    """True if this very function passed `check_training_loop` (an edited loop is a new function: check it again)."""
    return any(fn is training_loop for fn in _PASSED)

# The reversal task of §2 at SCALE = "cpu": 8 digits, <BOS> = 10, <EOS> = 11.
N_DIGITS, BOS, EOS = 8, 10, 11


def reversal_batch(batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(0, 10, (batch_size, N_DIGITS), generator=generator)  # (B, n)
    bos, eos = torch.full((batch_size, 1), BOS), torch.full((batch_size, 1), EOS)
    return src, torch.cat([bos, src.flip(1), eos], dim=1)  # (B, n + 2)


def seq2seq_loss(model, batch) -> torch.Tensor:
    src, tgt = batch
    logits = model(src, tgt[:, :-1])  # (B, n), (B, n+1) -> (B, n+1, V)
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())  # (B*(n+1), V)


def _reversal_model(dropout: float, d_model: int, n_heads: int) -> Transformer:
    set_seed(0)  # the same weights for the learner's loop and for train()
    return Transformer(12, 12, d_model=d_model, n_heads=n_heads, n_layers=1, d_ff=2 * d_model,
                       dropout=dropout, max_len=N_DIGITS + 2, norm_first=True)


def _run(loop, config: TrainConfig, dropout: float, d_model: int, n_heads: int, batch_size: int):
    model, gen = _reversal_model(dropout, d_model, n_heads), torch.Generator().manual_seed(1)
    return model, loop(model, lambda split: reversal_batch(batch_size, gen), config, seq2seq_loss)


def check_training_loop(training_loop) -> None:
    """Step for step against ``train`` on a 12-step problem with dropout, then a real run."""
    small = TrainConfig(max_steps=12, lr=3e-3, warmup_steps=4, min_lr=3e-4, grad_clip=0.5, eval_interval=5,
                        eval_iters=2, progress=False)
    _, want = _run(lambda m, g, c, f: train(m, g, c, loss_fn=f), small, 0.1, 32, 2, 16)
    _, got = _run(training_loop, small, 0.1, 32, 2, 16)
    assert isinstance(got, History), f"training_loop must return a History, got {type(got).__name__}"
    assert got.eval_steps == want.eval_steps, f"evaluations at steps {got.eval_steps}, expected {want.eval_steps}"
    for name in ("train_loss", "val_loss"):  # step 0's evaluation comes before any update
        a, b = getattr(got, name)[0], getattr(want, name)[0]
        assert abs(a - b) < 1e-4, (f"{name} at step 0: {a:.4f}, train() gives {b:.4f}; nothing has trained yet: "
                                   "is dropout off (eval mode) and are the batches drawn train first, then val?")
    assert len(got.step_loss) == small.max_steps, f"{len(got.step_loss)} step losses, expected {small.max_steps}"
    for k, (a, b) in enumerate(zip(got.step_loss, want.step_loss, strict=True)):
        if k == 0:
            why = ("; no weight has changed yet, so the difference is in the step itself: is dropout on "
                   "(the model back in train() mode after the evaluation)?")
        else:
            why = f"; steps 0 to {k - 1} agree, so look at what changed the weights in step {k - 1}"
        assert abs(a - b) < 1e-4, f"the loss of step {k}: {a:.4f}, train() gives {b:.4f}{why}"
    for name in ("train_loss", "val_loss"):
        for step, a, b in zip(want.eval_steps, getattr(got, name), getattr(want, name), strict=True):
            assert abs(a - b) < 1e-4, f"{name} of the evaluation at step {step}: {a:.4f}, train() gives {b:.4f}"
    _check_callback(training_loop, small, want)
    real = TrainConfig(max_steps=300, lr=3e-3, warmup_steps=30, min_lr=3e-4, weight_decay=0.01, eval_interval=75,
                       eval_iters=2, progress=False)
    model, _ = _run(training_loop, real, 0.0, 64, 4, 64)
    test_src, test_tgt = reversal_batch(500, torch.Generator().manual_seed(12345))  # never trained on
    pred = model.greedy_decode(test_src, max_len=N_DIGITS + 2, bos_id=BOS, eos_id=EOS)  # (500, n + 2)
    exact = (pred == test_tgt).all(dim=1).float().mean().item()
    assert exact >= 0.99, f"exact match {exact:.1%} on 500 sequences after {real.max_steps} steps; expected ≥ 99 %"
    _PASSED.append(training_loop)
    print("training loop: correct, step for step")


def _check_callback(training_loop, config: TrainConfig, want: History) -> None:
    """``callback(step, history, model)`` runs once after each evaluation is recorded, as in ``train``."""
    calls = []

    def record(step, hist, model):
        calls.append((step, len(hist.eval_steps), hist.val_loss[-1] if hist.val_loss else None, model))

    def with_callback(m, g, c, f):
        try:
            return training_loop(m, g, c, f, callback=record)
        except TypeError as e:
            if "callback" not in str(e):
                raise
            raise AssertionError("training_loop must take a keyword argument callback=None and, when it is given, "
                                 f"call callback(step, history, model) after each evaluation ({e})") from None

    model, _ = _run(with_callback, config, 0.1, 32, 2, 16)
    steps = [c[0] for c in calls]
    assert steps == want.eval_steps, (f"callback ran at steps {steps}; expected once after each evaluation, at "
                                      f"{want.eval_steps}")
    for k, (step, n, val, seen) in enumerate(calls):
        assert n == k + 1 and val is not None and abs(val - want.val_loss[k]) < 1e-4, (
            f"when callback ran for step {step}, the history it got held {n} evaluations (last val loss {val}); "
            f"expected {k + 1}, the last one this step's: call it after recording the evaluation, with the History "
            "you return")
        assert seen is model, f"callback for step {step} got {type(seen).__name__}, not the model being trained"


# (val losses, patience, min_delta, the evaluation update() stops at, the best evaluation)
_STOP_CASES = [([3.0, 2.5, 2.6, 2.4, 2.45, 2.5, 2.55, 2.3], 3, 0.0, 6, 3),
               ([3.0, 2.5, 2.47, 2.46, 2.45, 2.0], 3, 0.05, 4, 1),
               ([3.0, 2.5, 2.47, 2.44, 2.43, 2.42, 2.41], 3, 0.05, 6, 3),  # 2.44 beats 2.5 by more than 0.05
               ([2.0, 2.0, 1.9], 1, 0.0, 1, 0)]


def check_early_stopping(EarlyStopping) -> None:  # noqa: N803 - the learner's class
    net = torch.nn.Linear(2, 2)
    for vals, patience, min_delta, stop_at, best_at in _STOP_CASES:
        stopper, where = EarlyStopping(patience, min_delta), f"patience={patience}, min_delta={min_delta}"
        for i, v in enumerate(vals):
            with torch.no_grad():
                net.weight.fill_(i)  # evaluation i has weights all equal to i
            stop = stopper.update(v, net)
            if stop != (i == stop_at):
                hint = ""
                if min_delta > 0:
                    hint = (f"; with min_delta={min_delta} an evaluation improves only if it beats the best so far "
                            "by more than min_delta, and only such an evaluation becomes the new best")
                raise AssertionError(f"val losses {vals[:i + 1]}, {where}: update returned {stop} at the last{hint}")
            if stop:
                break
        stopper.restore(net)
        got = net.weight[0, 0].item()
        assert got == best_at, (f"{where}, val losses {vals[:stop_at + 1]}: after restore the weights are those of "
                                f"evaluation {got:g}, expected the best, evaluation {best_at}"
                                + (" (what you kept changed with the model)" if got == stop_at else ""))
    print("early stopping: correct")


def _flat_grads(model) -> torch.Tensor:
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in model.parameters()])


def check_exercise_1(accumulate_gradients) -> None:
    """Gradient accumulation against one big batch: the error over all parameters together,
    relative to the gradient's total norm (a single parameter whose exact gradient is 0, such as
    a key bias, holds only rounding noise, which must not count as a relative error)."""
    vocab = 20
    set_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=16, d_model=32, n_heads=2, n_layers=1))
    gen = torch.Generator().manual_seed(0)
    text = torch.randint(0, vocab, (4000,), generator=gen)  # (N,): random characters
    for k, size in ((4, 4), (1, 8), (3, 2)):
        starts = torch.randint(0, len(text) - 17, (k, size), generator=gen)  # (k, B)
        batches = [(text[s[:, None] + torch.arange(16)], text[s[:, None] + torch.arange(1, 17)]) for s in starts]
        model.zero_grad()
        big = default_loss_fn(model, (torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])))
        big.backward()  # what one big batch gives
        want = _flat_grads(model).clone()
        got_loss = accumulate_gradients(model, batches, default_loss_fn)  # .grad still holds the big batch's
        assert isinstance(got_loss, float), f"return the mean loss as a float, got {type(got_loss).__name__}"
        assert math.isclose(got_loss, big.item(), rel_tol=1e-5), (
            f"{k} batches of {size}: loss {got_loss:.5f}, expected the mean over all of them, {big.item():.5f}")
        err = ((_flat_grads(model) - want).norm() / want.norm()).item()
        assert err < 1e-4, (f"{k} batches of {size}: the gradients differ from one big batch's by {err:.1%} of their "
                            "total size" + (f" (about {k}x: the sum of the losses, not their mean?)"
                                            if abs(err - (k - 1)) < 0.01 and k > 1 else
                                            " (did .grad start from zero?)" if k > 1 or err > 0.5 else ""))
    print("exercise 1: correct")


def _refusing_smoothing(original):
    def cross_entropy(*args, **kwargs):
        if kwargs.get("label_smoothing") or (len(args) > 7 and args[7]):
            raise AssertionError("exercise 2: your answer calls F.cross_entropy(..., label_smoothing=...), the piece "
                                 "it asks you to write; build the smoothed target's loss from log_softmax yourself")
        return original(*args, **kwargs)
    return cross_entropy


def check_exercise_2(smoothed_loss) -> None:
    g = torch.Generator().manual_seed(0)
    original = F.cross_entropy
    F.cross_entropy = _refusing_smoothing(original)  # torch.nn.CrossEntropyLoss goes through it too
    try:
        for n, v, eps in ((5, 12, 0.1), (7, 3, 0.3), (4, 12, 0.0)):
            logits, targets = 3 * torch.randn(n, v, generator=g), torch.randint(0, v, (n,), generator=g)
            got = call_unchanged(smoothed_loss, logits, targets, eps, label="smoothed_loss")
            want = original(logits, targets, label_smoothing=eps)
            assert torch.is_tensor(got) and got.dim() == 0, "return a scalar tensor (backward needs it)"
            hint = ""
            if abs(got.item() - n * want.item()) < 1e-3 * n:
                hint = " (the sum over the rows, not their mean?)"
            elif eps > 0:
                hint = " (eps spread evenly over all V tokens, the right one included: eps / V on each?)"
            assert torch.isclose(got, want, atol=1e-5), (
                f"N={n}, V={v}, eps={eps}: {got.item():.4f}, expected {want.item():.4f}{hint}")
        uniform = smoothed_loss(torch.zeros(3, 12), torch.tensor([0, 5, 11]), 0.1)
        assert math.isclose(uniform.item(), math.log(12), rel_tol=1e-5), (
            f"uniform logits: {uniform.item():.4f}, expected ln 12 (every target distribution costs ln V there)")
    finally:
        F.cross_entropy = original
    print("exercise 2: correct")
