"""Train a small character GPT on several processes with DistributedDataParallel (notebook 10).

    torchrun --standalone --nproc_per_node 2 -m helpers.ddp_train --steps 30   # two CPU processes (gloo)
    python -m helpers.ddp_train --steps 30 --threads 2                        # one process, no group
    torchrun --standalone --nproc_per_node 8 -m helpers.ddp_train ...         # one machine, 8 GPUs (NCCL)
    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 --rdzv_backend c10d \\
             --rdzv_endpoint HOST:29500 -m helpers.ddp_train ...              # two machines (run on each)

A module of the package, not a file beside the notebooks, so it runs from any folder (a student
edition, a copy of the notebooks): ``-m helpers.ddp_train``.

The same code runs alone or as one of W ranks. Each step every rank draws the same global batch
of ``--batch`` windows (one seeded generator), keeps its slice (`helpers.parallel.shard`), cuts
the slice into ``--accum`` micro-batches, and backpropagates each; DDP averages the gradients
across ranks during the last micro-batch's backward (the earlier ones run under ``no_sync``: no
communication until the gradient is complete). With ``--check`` every rank also keeps a plain
copy of the model, computes the gradient of the *whole* global batch in one process, and reports
the largest difference from the averaged DDP gradient. Rank 0 alone prints and writes files.

Rank 0 prints one line ``DDP_REPORT {json}``: world size, backend, the check's differences, the
losses (averaged over ranks), tokens/s, and whether every rank ends with the same weights.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from helpers.checkpoint import save_checkpoint
from helpers.data import get_batch, load_corpus, train_val_split
from helpers.fileio import atomic_write
from helpers.models import GPT, GPTConfig
from helpers.parallel import close_distributed, init_distributed, shard
from helpers.tokenizers import CharTokenizer


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=32, help="global batch: windows per step over all ranks")
    p.add_argument("--block", type=int, default=64, help="window length (tokens)")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per rank per step")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for the forward pass")
    p.add_argument("--check", action="store_true", help="compare step 0's gradient with one process on the whole batch")
    p.add_argument("--out", type=Path, help="rank 0 writes the final checkpoint here (atomically)")
    p.add_argument("--report", type=Path, help="rank 0 also writes the report here as JSON (atomically)")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "block", "accum", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not 0 < args.lr < 1:
        p.error(f"--lr must be in (0, 1), got {args.lr}")
    for name in ("out", "report"):
        path = getattr(args, name)
        if path is not None and path.is_dir():
            p.error(f"--{name} must name a file, got the folder {path}")  # refused before any step
    return args


def max_grad_difference(model: torch.nn.Module, reference: torch.nn.Module) -> tuple[float, float]:
    """(largest |difference| between the two models' gradients, largest |gradient| of the reference)."""
    diff = scale = 0.0
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        diff = max(diff, float((p.grad - q.grad).abs().max()))
        scale = max(scale, float(q.grad.abs().max()))
    return diff, scale


def main(argv=None) -> dict:
    args = parse_args(argv)
    info = init_distributed()
    world, rank = info.world_size, info.rank
    if args.batch % (world * args.accum):
        sys.exit(f"--batch {args.batch} must split evenly into {world} ranks x {args.accum} micro-batches")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same seed on every rank: the same initial weights
    text = load_corpus("pydoc")
    tok = CharTokenizer.from_text(text)
    train_data, _ = train_val_split(torch.tensor(tok.encode(text)), 0.1, chunks=10)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block, d_model=64, n_heads=4, n_layers=2)
    model = GPT(config).to(info.device)
    # DDP broadcasts rank 0's weights at construction and registers the hooks that all-reduce
    # each bucket of gradients as soon as backward has produced it.
    net = DistributedDataParallel(model, device_ids=[info.device] if info.device.type == "cuda" else None) \
        if info.backend else model
    reference = copy.deepcopy(model) if args.check else None  # after the broadcast: one process, the whole batch
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1)  # the same on every rank: the same global batch
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=args.bf16)
    losses, check, start, timed_from = [], None, time.perf_counter(), 0
    for step in range(args.steps):
        x, y = get_batch(train_data, args.block, args.batch, generator=gen)  # (B, T) each, on every rank
        xs, ys = shard((x, y), rank, world)  # (B/W, T) each: this rank's slice
        total = torch.zeros((), device=info.device)
        for i, (mx, my) in enumerate(zip(xs.chunk(args.accum), ys.chunk(args.accum), strict=True)):
            last = i == args.accum - 1
            # no_sync: keep this micro-batch's gradient local; the last backward all-reduces the sum
            quiet = net.no_sync() if info.backend and not last else contextlib.nullcontext()
            with quiet:  # the forward and its backward both inside: DDP decides at the forward
                with autocast:
                    _, loss = net(mx.to(info.device), my.to(info.device))
                (loss / args.accum).backward()
            total += loss.detach() / args.accum
        if info.backend:
            dist.all_reduce(total)  # for the log only: the mean loss of the whole batch
            total /= world
        losses.append(float(total))
        if step == 0 and reference is not None:
            with autocast:
                _, full = reference(x.to(info.device), y.to(info.device))
            full.backward()
            check = max_grad_difference(model, reference)
            reference = None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0:  # the first step pays for set-up and the check: timed from the second
            start, timed_from = time.perf_counter(), 1
    seconds = time.perf_counter() - start
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()  # (n_params,)
    same = True
    if info.backend:
        low, high = flat.clone(), flat.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        same = bool(torch.equal(low, high))  # every rank's weights, bit for bit
    report = {
        "world_size": world, "backend": info.backend or "none", "threads": args.threads, "accum": args.accum,
        "bf16": args.bf16, "grad_max_diff": check[0] if check else None, "grad_max": check[1] if check else None,
        "losses": losses, "replicas_equal": same,
        "tokens_per_s": (args.steps - timed_from) * args.batch * args.block / seconds if args.steps > 1 else None,
    }  # fmt: skip
    if info.is_main:
        if args.out is not None:
            save_checkpoint(args.out, model, optimizer, config=config, step=args.steps)  # atomic
        if args.report is not None:
            with atomic_write(args.report, "w", encoding="utf-8", name="report") as f:
                json.dump(report, f)
        print("DDP_REPORT " + json.dumps(report), flush=True)
    if info.backend:
        del net  # the DDP wrapper's reducer holds gloo work: gone before the group is
        close_distributed()
    return report


if __name__ == "__main__":
    main()
