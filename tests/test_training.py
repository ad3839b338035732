"""The training loop: it learns, clips, stops early, schedules, and checks its config."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.training import (
    History,
    TrainConfig,
    cosine_lr,
    estimate_loss,
    make_optimizer,
    progress_disabled,
    train,
    train_step,
)

V = 7


class Bigram(nn.Module):
    """A lookup table of next-token logits: the smallest model the loop can train."""

    def __init__(self, vocab_size=V):
        super().__init__()
        self.table = nn.Embedding(vocab_size, vocab_size)
        self.seen_training = []

    def forward(self, x, y=None):
        self.seen_training.append(self.training)
        logits = self.table(x)  # (B, T) -> (B, T, V)
        loss = None if y is None else F.cross_entropy(logits.flatten(0, 1), y.flatten())
        return logits, loss


def make_get_batch(val_shift=1, seed=0):
    """Train data: y = x + 1 (mod V). Val data: y = x + val_shift (mod V)."""
    g = torch.Generator().manual_seed(seed)

    def get_batch(split):
        x = torch.randint(0, V, (4, 8), generator=g)
        return x, (x + (1 if split == "train" else val_shift)) % V

    return get_batch


def quiet(**kw):
    return TrainConfig(progress=False, **kw)


def test_loop_lowers_the_loss_on_a_tiny_problem():
    torch.manual_seed(0)
    model = Bigram()
    hist = train(model, make_get_batch(), quiet(max_steps=150, lr=0.1, eval_interval=50, eval_iters=5))
    assert isinstance(hist, History)
    assert hist.eval_steps == [0, 50, 100, 150]
    assert hist.steps == len(hist.lr) == len(hist.grad_norm) == 150
    assert hist.val_loss[0] > 1.5  # about ln 7 = 1.95 at the start
    assert hist.val_loss[-1] < 0.1 * hist.val_loss[0]
    assert hist.train_loss[-1] < hist.train_loss[0]
    assert hist.best_val == min(hist.val_loss) and not hist.stopped_early


def test_evaluation_at_the_end_when_not_a_multiple_of_the_interval():
    hist = train(Bigram(), make_get_batch(), quiet(max_steps=7, eval_interval=5, eval_iters=1))
    assert hist.eval_steps == [0, 5, 7]


@pytest.mark.parametrize("clip", [0.05, 0.3])
def test_gradient_clipping_bounds_the_update(clip):
    # With plain SGD at lr=1 the update IS minus the gradient, so its norm is the clipped norm.
    model = Bigram()
    with torch.no_grad():  # confident and wrong for every token (it predicts x + 3, not x + 1): for any
        # batch of 32 tokens the gradient norm is at least sqrt(2)/32 * sqrt(32**2 / V) = 0.53 > clip
        model.table.weight.copy_(30 * torch.nn.functional.one_hot((torch.arange(V) + 3) % V, V).float())
    before = model.table.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    loss, norm = train_step(model, make_get_batch()("train"), opt, grad_clip=clip)
    assert norm > clip  # clipping had something to do
    step = (model.table.weight.detach() - before).norm().item()
    # clip_grad_norm_ scales by max_norm / (norm + 1e-6): at most the clip, and equal to 1e-4.
    # w - before is a difference of float32 numbers near 30: the measured step is exact to about 1e-4.
    assert step <= clip * (1 + 1e-4) and step == pytest.approx(clip, rel=1e-4)


def test_no_clipping_leaves_the_gradient_alone():
    torch.manual_seed(0)
    model = Bigram()
    before = model.table.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    _, norm = train_step(model, make_get_batch()("train"), opt, grad_clip=None)
    assert (model.table.weight.detach() - before).norm().item() == pytest.approx(norm, rel=1e-5)


def test_train_passes_the_clip_to_each_step():
    torch.manual_seed(0)
    model = Bigram()
    with torch.no_grad():
        model.table.weight.mul_(30)
    w0 = model.table.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    hist = train(model, make_get_batch(), quiet(max_steps=1, lr=1.0, grad_clip=0.25, eval_iters=1), optimizer=opt)
    assert hist.grad_norm[0] > 0.25
    assert (model.table.weight.detach() - w0).norm().item() == pytest.approx(0.25, rel=1e-4)


def test_early_stopping_triggers_when_val_gets_worse():
    # Learning y = x + 1 makes the val task y = x - 1 worse at every evaluation.
    torch.manual_seed(0)
    model = Bigram()
    w0 = model.table.weight.detach().clone()
    cfg = quiet(max_steps=1000, lr=0.1, eval_interval=10, eval_iters=2, patience=3, restore_best=True)
    hist = train(model, make_get_batch(val_shift=-1), cfg)
    assert hist.stopped_early
    assert hist.eval_steps == [0, 10, 20, 30]  # the best at 0, then 3 evaluations without improvement
    assert hist.steps == 30 and hist.best_step == 0
    assert torch.equal(model.table.weight, w0)  # restore_best brought back the step-0 weights


def test_without_patience_training_runs_to_the_end():
    hist = train(Bigram(), make_get_batch(val_shift=-1), quiet(max_steps=40, lr=0.1, eval_interval=10, eval_iters=1))
    assert not hist.stopped_early and hist.steps == 40


def test_cosine_schedule_warms_up_then_decays_to_min_lr():
    cfg = quiet(max_steps=110, lr=1.0, warmup_steps=10, min_lr=0.1)
    lrs = [cosine_lr(s, cfg) for s in range(cfg.max_steps)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55)  # half-way: (lr + min_lr) / 2
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert cosine_lr(110, cfg) == pytest.approx(0.1)
    assert cosine_lr(50, quiet(max_steps=110, lr=0.3)) == 0.3  # min_lr=None: constant


def test_train_uses_the_schedule():
    cfg = quiet(max_steps=20, lr=0.5, warmup_steps=5, min_lr=0.05, eval_interval=100, eval_iters=1)
    hist = train(Bigram(), make_get_batch(), cfg)
    assert hist.lr == pytest.approx([cosine_lr(s, cfg) for s in range(20)])


def test_estimate_loss_runs_in_eval_mode_and_restores_training_mode():
    model = Bigram().train()
    out = estimate_loss(model, make_get_batch(), eval_iters=3)
    assert sorted(out) == ["train", "val"] and all(math.isfinite(v) for v in out.values())
    assert model.seen_training == [False] * 6 and model.training


def test_optimizer_decays_matrices_only():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    opt = make_optimizer(model, quiet(weight_decay=0.2))
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.2 and [p.shape for p in decayed["params"]] == [(4, 3)]
    assert plain["weight_decay"] == 0.0 and len(plain["params"]) == 3


def test_diverging_loss_raises():
    class Nan(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x, y):
            return None, self.w.sum() * float("nan")

    with pytest.raises(FloatingPointError, match="loss is nan"):
        train(Nan(), make_get_batch(), quiet(max_steps=2, eval_interval=100, eval_iters=1))


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"max_steps": 0}, ValueError, "max_steps"),
        ({"max_steps": 1.5}, TypeError, "max_steps"),
        ({"lr": 0.0}, ValueError, "lr"),
        ({"lr": float("nan")}, ValueError, "lr"),
        ({"lr": 1e-3, "min_lr": 1e-2}, ValueError, "min_lr"),
        ({"warmup_steps": -1}, ValueError, "warmup_steps"),
        ({"max_steps": 10, "warmup_steps": 11}, ValueError, "warmup_steps"),
        ({"weight_decay": -0.1}, ValueError, "weight_decay"),
        ({"betas": (0.9, 1.0)}, ValueError, "betas"),
        ({"grad_clip": 0}, ValueError, "grad_clip"),
        ({"eval_interval": 0}, ValueError, "eval_interval"),
        ({"eval_iters": True}, TypeError, "eval_iters"),
        ({"patience": 0}, ValueError, "patience"),
        ({"min_delta": -1.0}, ValueError, "min_delta"),
    ],
)
def test_bad_config_values_raise(kw, err, match):
    with pytest.raises(err, match=match):
        TrainConfig(**kw)


def test_train_wants_a_config():
    with pytest.raises(TypeError, match="TrainConfig"):
        train(Bigram(), make_get_batch(), {"max_steps": 3})


def test_loss_curves_plots_the_history():
    from matplotlib.figure import Figure

    from helpers.plots import figure_to_png, loss_curves

    hist = History(eval_steps=[0, 5], train_loss=[2.0, 1.0], val_loss=[2.1, 1.2], step_loss=[2.0, 1.8, 1.5, 1.2, 1.1])
    fig = loss_curves(hist, baseline=1.5, baseline_label="bigram")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    ys = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert ys["train (estimate)"] == [2.0, 1.0] and ys["val (estimate)"] == [2.1, 1.2]
    assert ys["bigram"] == [1.5, 1.5] and ys["train (one batch)"] == hist.step_loss
    assert figure_to_png(fig)[:4] == b"\x89PNG"
    with pytest.raises(TypeError, match="history"):
        loss_curves({"train_loss": [1.0]})
    with pytest.raises(ValueError, match="equal length"):
        loss_curves(History(eval_steps=[0], train_loss=[1.0, 2.0], val_loss=[1.0]))


@pytest.mark.parametrize(("env", "progress", "disabled"), [
    (None, True, False), ("1", True, True), ("0", True, False), ("", True, False), (None, False, True),
])
def test_progress_bar_honours_tqdm_disable(monkeypatch, env, progress, disabled):
    if env is None:
        monkeypatch.delenv("TQDM_DISABLE", raising=False)
    else:
        monkeypatch.setenv("TQDM_DISABLE", env)
    assert progress_disabled(progress) is disabled


def test_lr_schedule_replaces_the_cosine():
    """train(lr_schedule=) sets each step's rate from the given function (notebook 07's Noam schedule)."""
    cfg = quiet(max_steps=12, lr=0.5, warmup_steps=5, min_lr=0.05, eval_interval=100, eval_iters=1)
    noam = lambda step: 16 ** -0.5 * min((step + 1) ** -0.5, (step + 1) * 4 ** -1.5)  # noqa: E731
    opt_rates = []
    model = Bigram()
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    hist = train(model, make_get_batch(), cfg, optimizer=optimizer, lr_schedule=noam,
                 callback=lambda step, h, m: opt_rates.append(optimizer.param_groups[0]["lr"]))
    assert hist.lr == pytest.approx([noam(s) for s in range(12)]) and max(hist.lr) == pytest.approx((16 * 4) ** -0.5)
    assert opt_rates[-1] == pytest.approx(noam(11))  # the optimizer really ran at that rate
    with pytest.raises(TypeError, match="lr_schedule"):
        train(Bigram(), make_get_batch(), cfg, lr_schedule=0.1)
    for bad in (float("nan"), -1.0, "0.1"):
        with pytest.raises(ValueError, match=r"lr_schedule\(0\)"):
            train(Bigram(), make_get_batch(), cfg, lr_schedule=lambda step, bad=bad: bad)


def test_callback_runs_after_every_evaluation():
    calls = []
    cfg = TrainConfig(max_steps=10, lr=0.1, eval_interval=4, eval_iters=1, progress=False)
    hist = train(Bigram(), make_get_batch(), cfg, callback=lambda step, h, m: calls.append((step, len(h.val_loss))))
    assert calls == [(s, i + 1) for i, s in enumerate(hist.eval_steps)] == [(0, 1), (4, 2), (8, 3), (10, 4)]
    with pytest.raises(TypeError, match="callback"):
        train(Bigram(), make_get_batch(), cfg, callback="print")


def test_adamw_is_fused_on_cpu_and_matches_the_default_implementation():
    from helpers.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2))
    twin = GPT(GPTConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2))
    twin.load_state_dict(model.state_dict())
    cfg = TrainConfig(lr=1e-3)  # at 1e-2 rounding differences grow chaotically past 1e-5 within 20 steps
    fused = make_optimizer(model, cfg)
    assert fused.defaults["fused"] is True
    plain = torch.optim.AdamW([
        {"params": [p for p in twin.parameters() if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in twin.parameters() if p.dim() < 2], "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas)
    assert not plain.defaults["fused"]
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        x = torch.randint(11, (4, 8), generator=g)
        a, _ = train_step(model, (x, x.roll(1, 1)), fused, grad_clip=1.0)
        b, _ = train_step(twin, (x, x.roll(1, 1)), plain, grad_clip=1.0)
        assert a == pytest.approx(b, abs=1e-5)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0)
