"""Training speed of our GPT against a minimal nanoGPT-style model on the fused attention kernel.

    .venv/bin/python bench/bench_gpt.py                  # equivalence checks + tokens/s
    .venv/bin/python bench/bench_gpt.py --iters 2000     # ... + our val loss after 2000 steps

Config (the issue's): char-level pydoc corpus, n_layers=4, n_heads=4, d_model=128,
block_size=64, batch_size=12, dropout=0. Both models get the same weights (copied), the
same batches and the same AdamW; timing rounds alternate between them so a busy machine
slows both alike. Not a test: numbers depend on the machine (see bench/README.md).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_gpt import RefGPT  # noqa: E402

from helpers.data import get_batch, load_corpus, train_val_split  # noqa: E402
from helpers.device import set_seed  # noqa: E402
from helpers.models import GPT, GPTConfig  # noqa: E402
from helpers.tokenizers import CharTokenizer  # noqa: E402
from helpers.training import TrainConfig, estimate_loss, make_optimizer, train, train_step  # noqa: E402

BLOCK, BATCH = 64, 12


class StepByStepGPT(GPT):
    """Our GPT forced onto the step-by-step attention (softmax(qkᵀ/√d)v with explicit weights)."""

    def forward(self, idx, targets=None):
        x, _ = self._trunk(idx, return_weights=True)  # the path that materialises the weights
        logits = self.head(x)  # (B, T, C) -> (B, T, V)
        loss = None if targets is None else torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def losses_after(model, batches) -> list[float]:
    opt = make_optimizer(model, TrainConfig(lr=1e-3))
    return [train_step(model, b, opt, grad_clip=1.0)[0] for b in batches]


def timed_round(model, opt, batches) -> float:
    start = time.perf_counter()
    for b in batches:
        train_step(model, b, opt, grad_clip=1.0)
    return len(batches) * BATCH * BLOCK / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is steadiest on a busy machine)")
    ap.add_argument("--steps", type=int, default=40, help="training steps per timing round")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per model (alternating); median reported")
    ap.add_argument("--iters", type=int, default=0, help="also train ours this many steps and report val loss")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    set_seed(0, threads=args.threads)
    dev = torch.device(args.device)
    print(f"torch {torch.__version__}, device {dev}, threads {torch.get_num_threads()}, "
          f"load average at start {os.getloadavg()[0]:.2f}")

    text = load_corpus("pydoc")
    tok = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tok.encode(text)), 0.1)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=BLOCK, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
    g = torch.Generator().manual_seed(0)
    batches = [get_batch(train_data, BLOCK, BATCH, device=dev, generator=g) for _ in range(args.steps)]

    ours = GPT(cfg).to(dev)
    ref = RefGPT(cfg.vocab_size, BLOCK, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff).to(dev).copy_from(ours)
    slow = StepByStepGPT(cfg).to(dev)
    slow.load_state_dict(ours.state_dict())
    print(f"V={tok.vocab_size}, train {len(train_data):,} / val {len(val_data):,} tokens, "
          f"{sum(p.numel() for p in ours.parameters()):,} parameters")

    x, y = batches[0]
    with torch.no_grad():
        lo, lr_, ls = ours(x)[0], ref(x)[0], slow(x)[0]
    print(f"max |logits ours(fused) - ours(step by step)| = {(lo - ls).abs().max():.2e}")
    print(f"max |logits ours - reference|                 = {(lo - lr_).abs().max():.2e}")
    n = min(20, len(batches))
    traj = {name: losses_after(copy.deepcopy(m), batches[:n]) for name, m in
            (("fused", ours), ("step-by-step", slow), ("reference", ref))}
    for name in ("step-by-step", "reference"):
        diff = max(abs(a - b) for a, b in zip(traj["fused"], traj[name], strict=True))
        print(f"loss after {n} AdamW steps: ours(fused) {traj['fused'][-1]:.6f}, {name} {traj[name][-1]:.6f}, "
              f"max step-wise difference {diff:.1e}")

    rates = {"ours": [], "reference": []}
    models = {"ours": copy.deepcopy(ours), "reference": copy.deepcopy(ref)}
    opts = {k: make_optimizer(m, TrainConfig(lr=1e-3)) for k, m in models.items()}
    for k in models:  # warm-up: first calls allocate
        timed_round(models[k], opts[k], batches[:3])
    for _ in range(args.rounds):
        for k in models:
            rates[k].append(timed_round(models[k], opts[k], batches))
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in rates.items():
        print(f"{k:9s} tokens/s median {med[k]:8.0f}  ({1000 * BATCH * BLOCK / med[k]:.1f} ms/step)"
              f"  rounds: {', '.join(f'{r:.0f}' for r in v)}")
    print(f"ratio ours / reference = {med['ours'] / med['reference']:.3f}   load average now {os.getloadavg()[0]:.2f}")

    if args.iters:
        set_seed(0, threads=args.threads)
        model = GPT(cfg).to(dev)
        gen = torch.Generator().manual_seed(1)
        splits = {"train": train_data, "val": val_data}

        def batch(split):
            return get_batch(splits[split], BLOCK, BATCH, device=dev, generator=gen)

        # nanoGPT's shakespeare_char schedule: lr 1e-3, 100 warm-up steps, cosine to 1e-4, beta2 0.99.
        tc = TrainConfig(max_steps=args.iters, lr=1e-3, min_lr=1e-4, warmup_steps=100, weight_decay=0.1,
                         betas=(0.9, 0.99), grad_clip=1.0, eval_interval=250, eval_iters=50, progress=False)
        start = time.perf_counter()
        hist = train(model, batch, tc)
        secs = time.perf_counter() - start
        for s, tl, vl in zip(hist.eval_steps, hist.train_loss, hist.val_loss, strict=True):
            print(f"step {s:5d}: train {tl:.4f}  val {vl:.4f}")
        final = estimate_loss(model, batch, eval_iters=200)
        print(f"after {args.iters} steps ({secs:.0f} s incl. evals, {1000 * secs / args.iters:.0f} ms/step): "
              f"train {final['train']:.4f}, val {final['val']:.4f} (200 batches each); "
              f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
