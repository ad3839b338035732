"""Generation speed with and without the KV cache (`GPT.generate(use_cache=...)`).

    .venv/bin/python bench/bench_kv.py              # T = 64, 256, 1024 and 400 new tokens (a few minutes, 1 thread)
    .venv/bin/python bench/bench_kv.py --lengths 64 256 --repeats 1

Model: the course's GPT (n_layers=4, n_heads=4, d_model=128, V=103 as the pydoc character
vocabulary), random weights (speed does not depend on them). For each T the model's
block_size is T and generation starts from one token and fills the block (T - 1 new tokens),
so the last step attends over T positions. Then 400 new tokens: with block_size 512 (all
inside the block) and with block_size 64 (the window slides after 63 tokens: the cache is
rebuilt at every step, so no gain is expected). Both paths must give the same greedy tokens.
Not a test: numbers depend on the machine and its load (bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from helpers.device import set_seed
from helpers.models import GPT, GPTConfig


def model_for(block_size: int) -> GPT:
    set_seed(0)
    return GPT(GPTConfig(vocab_size=103, block_size=block_size, d_model=128, n_heads=4, n_layers=4)).eval()


def tokens_per_s(model, n_new: int, use_cache: bool, repeats: int) -> tuple[float, torch.Tensor]:
    start_ids = torch.zeros(1, 1, dtype=torch.long)
    best = float("inf")
    for _ in range(repeats):  # best of `repeats`: the least disturbed run on a shared machine
        t0 = time.perf_counter()
        out = model.generate(start_ids, n_new, top_k=1, use_cache=use_cache)
        best = min(best, time.perf_counter() - t0)
    return n_new / best, out


def compare(label: str, block_size: int, n_new: int, repeats: int) -> None:
    model = model_for(block_size)
    fast, a = tokens_per_s(model, n_new, True, repeats)
    slow, b = tokens_per_s(model, n_new, False, repeats)
    assert torch.equal(a, b), "cached and uncached greedy tokens differ"
    print(f"| {label} | {block_size} | {n_new} | {slow:,.0f} | {fast:,.0f} | **{fast / slow:.1f}×** |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    set_seed(0)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), load average {os.getloadavg()[0]:.2f}")
    print("| case | block_size | new tokens | no cache tok/s | cache tok/s | speed-up |")
    print("|---|---|---|---|---|---|")
    for T in args.lengths:
        compare(f"fill T = {T}", T, T - 1, args.repeats)
    compare("400 new, inside the block", 512, 400, args.repeats)
    compare("400 new, window slides", 64, 400, args.repeats)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
