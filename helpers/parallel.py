"""Data parallelism: one batch cut across processes, and the process group `torchrun` starts.

Every process (a *rank*) holds a full copy of the model and reads its own slice of the global
batch. The loss is a mean over examples, so with equal slices the mean of the ranks' gradients
is the gradient of the whole batch: averaging gradients (an *all-reduce*) is all it takes for
every copy to take the same step. `torch.nn.parallel.DistributedDataParallel` does exactly that,
in buckets, while backward still runs.

Shapes: B global batch, W world size (number of ranks), T block size.
    shard((x, y), rank, W)   (B, T) each -> (B/W, T) each

`torchrun` sets RANK, LOCAL_RANK and WORLD_SIZE for each process it starts; `init_distributed`
reads them (gloo on CPUs, NCCL when every rank has a GPU) and, without them, describes one
process that needs no group at all.
"""

from __future__ import annotations

import gc
import os
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist

from helpers.validate import check_int


@dataclass(frozen=True)
class DistInfo:
    rank: int  # this process, 0 .. world_size - 1
    world_size: int  # how many processes share the work
    local_rank: int  # this process on its machine (picks its GPU)
    device: torch.device
    backend: str | None  # "gloo", "nccl", or None for a single process without a group

    @property
    def is_main(self) -> bool:
        """Rank 0 alone logs and writes checkpoints: W processes would write one file W times."""
        return self.rank == 0


def shard(batch, rank: int, world_size: int) -> tuple:
    """Rank ``rank``'s contiguous slice of every tensor in ``batch`` (dimension 0, equal sizes)."""
    check_int("world_size", world_size, minimum=1)
    check_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, {world_size - 1}] for world_size={world_size}, got {rank}")
    tensors = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    if not tensors or not all(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in tensors):
        raise TypeError("batch must be a tensor or a tuple of tensors with a batch dimension")
    size = tensors[0].shape[0]
    if any(t.shape[0] != size for t in tensors):
        raise ValueError(f"batch tensors must share their first dimension, got {[t.shape[0] for t in tensors]}")
    if size % world_size:
        # Unequal slices would make the mean of the ranks' mean losses differ from the batch's mean.
        raise ValueError(f"the batch of {size} must split evenly across world_size={world_size} ranks")
    per = size // world_size
    return tuple(t[rank * per:(rank + 1) * per] for t in tensors)  # (B/W, ...) each


def init_distributed() -> DistInfo:
    """Join the process group `torchrun` describes in the environment, or describe one lone process."""
    if "WORLD_SIZE" not in os.environ:
        return DistInfo(0, 1, 0, torch.device("cpu"), None)
    try:
        rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    except (KeyError, ValueError) as e:
        raise ValueError(f"RANK, WORLD_SIZE and LOCAL_RANK must all be set to integers (torchrun sets them): {e}") from None
    # Every rank must choose alike (one NCCL rank beside gloo ranks would hang): GPUs only when this
    # machine has one for each of its ranks, and never when HELPERS_DEVICE=cpu asks for the CPU.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    use_gpu = (os.environ.get("HELPERS_DEVICE", "") in ("", "cuda") and torch.cuda.is_available()
               and torch.cuda.device_count() >= local_world)
    if torch.cuda.is_available() and not use_gpu and rank == 0:
        warnings.warn(f"{torch.cuda.device_count()} GPU(s) visible for {local_world} processes on this machine "
                      "(or HELPERS_DEVICE asks for another device): every rank runs on the CPU with gloo",
                      stacklevel=2)  # fmt: skip
    device = torch.device("cuda", local) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    backend = "nccl" if use_gpu else "gloo"  # NCCL moves GPU memory directly; gloo runs on any CPU
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return DistInfo(rank, world, local, device, backend)


def close_distributed() -> None:
    """Leave the process group cleanly: wait for every rank, collect what still holds gloo work (drop
    your DDP wrapper first: ``del net``), then destroy the group. Without the first two, a rank
    sometimes aborted at exit here ("terminate called without an active exception")."""
    if not dist.is_initialized():
        return
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
