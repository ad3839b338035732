"""Training speed of our GPT against nanoGPT's own model.py, in one process, at 1 and 2 threads.

    .venv/bin/python bench/bench_nanogpt.py --nanogpt PATH/TO/nanoGPT     # a checkout of karpathy/nanoGPT

nanoGPT (MIT licence) is imported from that folder at run time only; nothing of it is copied
here. Config as bench_gpt.py: char-level pydoc, 4 layers, 4 heads, width 128, block 64,
batch 12, dropout 0. nanoGPT gets our weights (so the logits match), the same batches, and
is trained the way its train.py does it on a CPU: ``configure_optimizers`` (AdamW, fused only
on CUDA), clipping at 1.0. Ours uses ``helpers.training.make_optimizer`` (fused AdamW on CPU)
and ``train_step``. A third variant, ours with nanoGPT's optimizer settings, separates the
model from the optimizer.

Timing: rounds of ``--steps`` steps alternate between the variants, their order reversed every
other round, so a machine whose speed drifts slows all alike. Each round is timed twice: wall
clock, and the CPU time of this process (``time.process_time``: the time it actually ran, so on
a shared machine it leaves out the time it waited for a core). Reported: the median over rounds,
and the ratio ours / nanoGPT of each round's pair with its median, lowest and highest.

MFU: model FLOPs per token 6N + 12·L·T·C (nanoGPT's ``estimate_mfu`` formula; N without the
position embeddings) against the float32 matmul peak measured in this run at the same
thread count (a square ``torch.mm``, the best of a few tries, on the same clock).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import statistics
import time
from pathlib import Path

import torch

from helpers.data import get_batch, load_corpus, train_val_split
from helpers.device import set_seed
from helpers.models import GPT, GPTConfig
from helpers.tokenizers import CharTokenizer
from helpers.training import TrainConfig, make_optimizer, train_step

BLOCK, BATCH, LR, BETAS, WD = 64, 12, 1e-3, (0.9, 0.99), 0.1


def import_nanogpt(folder: Path):
    spec = importlib.util.spec_from_file_location("nanogpt_model", folder / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@torch.no_grad()
def copy_ours_into_nanogpt(ours: GPT, theirs) -> None:
    t = theirs.transformer
    t.wte.weight.copy_(ours.tok_emb.weight)  # nanoGPT ties lm_head to wte, as ours ties head to tok_emb
    t.wpe.weight.copy_(ours.pos_emb.embedding.weight)
    for mine, block in zip(t.h, ours.blocks, strict=True):
        a = block.self_attn
        mine.attn.c_attn.weight.copy_(a.qkv_proj.weight)  # (3C, C)
        mine.attn.c_attn.bias.copy_(a.qkv_proj.bias)  # (3C,)
        for dst, src in ((mine.attn.c_proj, a.out_proj), (mine.mlp.c_fc, block.ff.linear1),
                         (mine.mlp.c_proj, block.ff.linear2), (mine.ln_1, block.norm1), (mine.ln_2, block.norm2)):
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    t.ln_f.weight.copy_(ours.ln_f.weight)
    t.ln_f.bias.copy_(ours.ln_f.bias)


def nanogpt_step(model, batch, optimizer) -> float:
    """One step the way nanoGPT's train.py takes it (no grad accumulation, no scaler on CPU)."""
    x, y = batch
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def matmul_peak(threads: int, clock, n: int = 1024, tries: int = 5) -> float:
    """Best float32 FLOP/s of an n x n matmul at this thread count, timed on ``clock``."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = 0.0
    for _ in range(tries):
        start = clock()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2 * n**3 / (clock() - start))
    return best


def spread(xs) -> str:
    q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0], None, xs[0])
    return (f"median {statistics.median(xs):.3f} (middle half {q1:.3f}-{q3:.3f}, lowest {min(xs):.3f}, "
            f"highest {max(xs):.3f}, {len(xs)} rounds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nanogpt", type=Path, default=os.environ.get("NANOGPT_DIR"),
                    help="folder holding nanoGPT's model.py (or set NANOGPT_DIR)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=1,
                    help="training steps per timing round (1: the variants alternate step by step, which a "
                         "shared machine disturbs least)")
    ap.add_argument("--rounds", type=int, default=400)
    args = ap.parse_args()
    if args.nanogpt is None or not (Path(args.nanogpt) / "model.py").is_file():
        raise SystemExit("pass --nanogpt PATH (a checkout of https://github.com/karpathy/nanoGPT holding model.py)")
    nano = import_nanogpt(Path(args.nanogpt))
    set_seed(0)
    print(f"torch {torch.__version__}; load average at start {os.getloadavg()[0]:.2f}")

    text = load_corpus("pydoc")
    tok = CharTokenizer.from_text(text)
    train_data, _ = train_val_split(torch.tensor(tok.encode(text)), 0.1, chunks=10)
    g = torch.Generator().manual_seed(0)
    pool = [get_batch(train_data, BLOCK, BATCH, generator=g) for _ in range(max(args.steps, 32))]
    batches = pool[: args.steps]
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=BLOCK, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
    ours = GPT(cfg)
    theirs = nano.GPT(nano.GPTConfig(block_size=BLOCK, vocab_size=tok.vocab_size, n_layer=4, n_head=4, n_embd=128,
                                     dropout=0.0, bias=True))
    copy_ours_into_nanogpt(ours, theirs)
    x, y = batches[0]
    with torch.no_grad():
        diff = (ours(x)[0] - theirs(x, y)[0]).abs().max().item()
    print(f"max |logits ours - nanoGPT| with copied weights: {diff:.1e}")

    def nano_opt(m):
        return m.configure_optimizers(WD, LR, BETAS, "cpu")

    def plain_opt(m):  # ours with nanoGPT's optimizer settings: same groups, not fused on CPU
        # Only the params and the decay of each group: a group dict carries every option of the
        # optimizer it came from, fused=True included, which would win over the new defaults.
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]}
                  for g in make_optimizer(m, TrainConfig(lr=LR, betas=BETAS, weight_decay=WD)).param_groups]
        opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS)
        assert not any(g["fused"] for g in opt.param_groups)
        return opt

    variants = {
        "ours": (copy.deepcopy(ours), lambda m: make_optimizer(m, TrainConfig(lr=LR, betas=BETAS, weight_decay=WD)),
                 lambda m, b, o: train_step(m, b, o, grad_clip=1.0)),
        "ours, unfused AdamW": (copy.deepcopy(ours), plain_opt, lambda m, b, o: train_step(m, b, o, grad_clip=1.0)),
        "nanoGPT": (copy.deepcopy(theirs), nano_opt, nanogpt_step),
    }
    n_params = sum(p.numel() for p in ours.parameters()) - ours.pos_emb.embedding.weight.numel()
    flops_per_token = 6 * n_params + 12 * cfg.n_layers * BLOCK * cfg.d_model
    tokens = args.steps * BATCH * BLOCK
    for threads in args.threads:
        torch.set_num_threads(threads)
        models = {k: (copy.deepcopy(m), step) for k, (m, _, step) in variants.items()}
        opts = {k: variants[k][1](m) for k, (m, _) in models.items()}
        rates = {c: {k: [] for k in models} for c in CLOCKS}
        for k, (m, step) in models.items():  # warm-up round: first calls allocate
            for b in pool[:3]:
                step(m, b, opts[k])
        for r in range(args.rounds):
            start = r * args.steps % len(pool)  # every variant gets the same batches in a round
            batches = (pool + pool)[start : start + args.steps]
            for k in (list(models) if r % 2 == 0 else list(models)[::-1]):
                m, step = models[k]
                wall, cpu = time.perf_counter(), time.process_time()
                for b in batches:
                    step(m, b, opts[k])
                rates["cpu"][k].append(tokens / (time.process_time() - cpu))
                rates["wall"][k].append(tokens / (time.perf_counter() - wall))
        print(f"\n{threads} thread(s); load average {os.getloadavg()[0]:.2f}")
        for c, clock in CLOCKS.items():
            peak = matmul_peak(threads, clock)
            print(f"  {c} time: matmul peak {peak / 1e9:.1f} GFLOP/s")
            for k, v in rates[c].items():
                med = statistics.median(v)
                each = f"   rounds: {', '.join(f'{x:.0f}' for x in v)}" if len(v) <= 20 else ""
                print(f"    {k:20s} {med:8.0f} tokens/s  MFU {100 * med * flops_per_token / peak:5.1f} %{each}")
            for k in models:
                if k != "nanoGPT":
                    ratios = [a / b for a, b in zip(rates[c][k], rates[c]["nanoGPT"], strict=True)]
                    print(f"    {k} / nanoGPT, round by round: {spread(ratios)}")

if __name__ == "__main__":
    main()
