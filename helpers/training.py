"""A short, model-agnostic training loop: AdamW, warm-up + cosine, clipping, early stopping.

The loop knows nothing about the model. It asks two callables:

- ``get_batch(split) -> batch`` with ``split`` in ``("train", "val")``; fresh random
  batches each call (seed the generator you sample them with).
- ``loss_fn(model, batch) -> scalar loss``; the default calls ``model(*batch)`` and
  takes the loss from ``(logits, loss)`` (the GPT convention) or a bare tensor.

Shapes (for the default ``loss_fn`` with a GPT): B batch, T block size, V vocab.
    batch = (x, y)                     (B, T) int64, (B, T) int64
    model(x, y) -> (logits, loss)      (B, T, V), ()

Example:
    >>> cfg = TrainConfig(max_steps=200, lr=3e-3, eval_interval=50, progress=False)
    >>> history = train(model, get_batch, cfg)          # doctest: +SKIP
    >>> history.val_loss[-1] < history.val_loss[0]      # doctest: +SKIP
    True
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm.auto import tqdm

from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.validate import Revalidated, check_bool, check_sequence


def _check_loop_args(model, get_batch, loss_fn, optimizer=None) -> None:
    """The loop's callables and objects, checked up front: named errors, not one deep inside a step."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for name, fn in (("get_batch", get_batch), ("loss_fn", loss_fn)):
        if not callable(fn):
            raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None (e.g. torch.optim.AdamW(...)), "
                        f"got {type(optimizer).__name__}")

__all__ = [
    "TrainConfig", "History", "cosine_lr", "default_loss_fn", "estimate_loss", "make_optimizer", "train_step", "train",
    "save_checkpoint", "load_checkpoint",
]


def _positive(name: str, value, *, integer: bool, allow_zero: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    if integer and value >= 2**63:
        raise ValueError(f"{name} must be below 2**63, got {value}")


@dataclass
class TrainConfig(Revalidated):  # an edit after construction is validated again (or undone)
    max_steps: int = 1000  # optimizer steps in total
    lr: float = 1e-3  # peak learning rate (after warm-up)
    min_lr: float | None = None  # cosine-decay to this by max_steps; None keeps lr constant
    warmup_steps: int = 0  # linear ramp from lr/warmup_steps to lr: big early steps can diverge
    weight_decay: float = 0.1  # AdamW's decoupled decay, only on matrices (see train)
    betas: tuple[float, float] = (0.9, 0.99)  # 0.99 rather than 0.999: small batches are noisy
    grad_clip: float | None = 1.0  # max global gradient L2 norm; None = no clipping
    eval_interval: int = 100  # estimate train/val loss every this many steps (and at 0 and the end)
    eval_iters: int = 20  # batches averaged per estimate: one batch is too noisy to compare
    patience: int | None = None  # stop after this many evaluations without a better val loss
    min_delta: float = 0.0  # an improvement must beat the best val loss by more than this
    restore_best: bool = False  # load the best-val weights back when training ends
    progress: bool = True  # tqdm bar (TQDM_DISABLE=1 in the environment still hides it)

    def __post_init__(self):
        _positive("max_steps", self.max_steps, integer=True)
        _positive("lr", self.lr, integer=False)
        if self.min_lr is not None:
            _positive("min_lr", self.min_lr, integer=False, allow_zero=True)
            if self.min_lr > self.lr:
                raise ValueError(f"min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        _positive("warmup_steps", self.warmup_steps, integer=True, allow_zero=True)
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be <= max_steps ({self.max_steps})")
        _positive("weight_decay", self.weight_decay, integer=False, allow_zero=True)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2 or not all(
                not isinstance(b, bool) and isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.grad_clip is not None:
            _positive("grad_clip", self.grad_clip, integer=False)
        _positive("eval_interval", self.eval_interval, integer=True)
        _positive("eval_iters", self.eval_iters, integer=True)
        if self.patience is not None:
            _positive("patience", self.patience, integer=True)
        _positive("min_delta", self.min_delta, integer=False, allow_zero=True)
        check_bool("restore_best", self.restore_best)
        check_bool("progress", self.progress)


@dataclass
class History:
    """What happened: one entry per step (``step_loss``, ``lr``, ``grad_norm``) or per evaluation."""

    eval_steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)  # estimate_loss on "train" at eval_steps
    val_loss: list[float] = field(default_factory=list)
    step_loss: list[float] = field(default_factory=list)  # the loss of each training batch
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)  # global norm BEFORE clipping
    best_val: float = math.inf
    best_step: int = -1
    stopped_early: bool = False

    @property
    def steps(self) -> int:
        return len(self.step_loss)


def progress_disabled(progress: bool) -> bool:
    """True if no bar should be drawn: ``progress=False`` or ``$TQDM_DISABLE`` set (not "", "0", "false").

    tqdm's notebook bar turns ``disable=None`` into False and so ignores ``TQDM_DISABLE``;
    reading it here keeps test and CI runs free of bars in notebooks too.
    """
    return not progress or os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")


def cosine_lr(step: int, config: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warm-up, then cosine decay.

    With ``min_lr=None`` the rate stays at ``lr`` after warm-up.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    _positive("step", step, integer=True, allow_zero=True)
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.min_lr is None:
        return config.lr
    span = max(config.max_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    return config.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.lr - config.min_lr)


def default_loss_fn(model: nn.Module, batch) -> torch.Tensor:
    """``model(*batch)``; if that returns ``(logits, loss)`` use the loss."""
    out = model(*batch) if isinstance(batch, (tuple, list)) else model(batch)
    loss = out[1] if isinstance(out, tuple) else out
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise ValueError("loss_fn must give a scalar tensor; pass loss_fn= for models that return something else")
    return loss


@torch.no_grad()
def estimate_loss(model: nn.Module, get_batch: Callable, eval_iters: int = 20,
                  loss_fn: Callable = default_loss_fn, splits=("train", "val")) -> dict[str, float]:
    """Mean loss over ``eval_iters`` batches of each split, in eval mode (no dropout).

    ``splits`` is a list of split names (a lone str such as "val" is refused: it would read as 3 splits).
    """
    _check_loop_args(model, get_batch, loss_fn)
    _positive("eval_iters", eval_iters, integer=True)
    splits = check_sequence("splits", splits)
    if not splits:
        raise ValueError("splits must name at least one split, e.g. ('train', 'val')")
    was_training = model.training
    model.eval()
    try:
        return {s: sum(float(loss_fn(model, get_batch(s))) for _ in range(eval_iters)) / eval_iters for s in splits}
    finally:
        model.train(was_training)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW that decays only matrices (weights, embeddings), never biases or LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # The fused kernel (one pass over each tensor instead of several) is faster on CPU and
    # CUDA and gives the same updates to rounding (tests/test_training.py); other devices
    # (MPS before torch 2.5, XLA...) fall back to the default implementation.
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=fused or None)


def train_step(model, batch, optimizer, loss_fn: Callable = default_loss_fn,
               grad_clip: float | None = None) -> tuple[float, float]:
    """One forward/backward/update; returns ``(loss, grad_norm before clipping)``."""
    _check_loop_args(model, lambda: None, loss_fn)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if grad_clip is not None:
        _positive("grad_clip", grad_clip, integer=False)
    loss = loss_fn(model, batch)
    value = loss.item()  # read once: the check and the return value
    if not math.isfinite(value):
        raise FloatingPointError(f"the loss is {value}: lower lr or check the data")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    # clip_grad_norm_ returns the norm before clipping; with max_norm=inf it only measures it.
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip is not None else math.inf)
    optimizer.step()
    return value, norm.item()


def _checked_rate(lr, step: int) -> float:
    """An ``lr_schedule``'s answer: a finite number >= 0, or a named error instead of a silent NaN step."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr_schedule({step}) must give a finite number >= 0, got {lr!r}")
    return float(lr)


def train(model: nn.Module, get_batch: Callable, config: TrainConfig, *,
          loss_fn: Callable = default_loss_fn, optimizer: torch.optim.Optimizer | None = None,
          callback: Callable | None = None, lr_schedule: Callable | None = None) -> History:
    """Train ``model`` in place and return its `History`.

    ``optimizer`` defaults to `make_optimizer` (AdamW); its learning rate is set from
    `cosine_lr` at every step, or from ``lr_schedule(step)`` if given (another schedule, such as
    the 2017 paper's warm-up then 1/sqrt(step)). ``callback(step, history, model)``, if given,
    runs after every evaluation (draw a curve, print a sample, save a checkpoint).
    """
    _check_loop_args(model, get_batch, loss_fn, optimizer)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
    if lr_schedule is not None and not callable(lr_schedule):
        raise TypeError(f"lr_schedule must be callable or None (step -> rate), got {type(lr_schedule).__name__}")
    optimizer = optimizer if optimizer is not None else make_optimizer(model, config)
    hist, best_state, bad_evals = History(), None, 0
    bar = tqdm(total=config.max_steps, disable=progress_disabled(config.progress))
    model.train()
    for step in range(config.max_steps + 1):
        if step % config.eval_interval == 0 or step == config.max_steps:
            losses = estimate_loss(model, get_batch, config.eval_iters, loss_fn)
            hist.eval_steps.append(step)
            hist.train_loss.append(losses["train"])
            hist.val_loss.append(losses["val"])
            bar.set_postfix(train=f"{losses['train']:.4f}", val=f"{losses['val']:.4f}")
            if losses["val"] < hist.best_val - config.min_delta:
                hist.best_val, hist.best_step, bad_evals = losses["val"], step, 0
                if config.restore_best:
                    best_state = copy.deepcopy(model.state_dict())
            else:
                bad_evals += 1
            if callback is not None:
                callback(step, hist, model)
            if config.patience is not None and bad_evals >= config.patience:
                hist.stopped_early = True
                break
        if step == config.max_steps:
            break
        lr = cosine_lr(step, config) if lr_schedule is None else _checked_rate(lr_schedule(step), step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss, norm = train_step(model, get_batch("train"), optimizer, loss_fn, config.grad_clip)
        hist.step_loss.append(loss)
        hist.lr.append(lr)
        hist.grad_norm.append(norm)
        bar.update(1)
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    return hist
