"""Where tensors live, and how to make a run repeatable.

`get_device()` picks CUDA, then Apple's MPS, then the CPU. Set the environment
variable ``HELPERS_DEVICE`` to ``cpu``, ``cuda`` or ``mps`` to force one (the test
suite forces ``cpu`` so stored notebook outputs reproduce on any machine).

Example:
    >>> import os; os.environ["HELPERS_DEVICE"] = "cpu"
    >>> get_device()
    device(type='cpu')
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

ENV_VAR = "HELPERS_DEVICE"
_KNOWN = ("cpu", "cuda", "mps")


def _available(name: str) -> bool:
    if name == "cuda":
        return torch.cuda.is_available()
    if name == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return True


def get_device() -> torch.device:
    """Return the best available device, or the one named by ``$HELPERS_DEVICE``."""
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced:
        if forced not in _KNOWN:
            raise ValueError(f"{ENV_VAR}={forced!r} is not one of {', '.join(_KNOWN)}")
        if not _available(forced):
            raise ValueError(f"{ENV_VAR}={forced!r} was asked for, but that device is not available here")
        return torch.device(forced)
    for name in ("cuda", "mps"):
        if _available(name):
            return torch.device(name)
    return torch.device("cpu")


def set_seed(seed: int, threads: int | None = 1) -> None:
    """Seed Python, NumPy and torch, and fix torch's CPU thread count.

    The thread count is fixed because float32 reductions give different last digits
    with different numbers of threads; one thread is also the steadiest choice on a
    busy 2-core laptop. Pass ``threads=None`` to leave it alone.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads < 2**31:
            raise ValueError(f"threads must be a positive int or None, got {threads!r}")
        torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (seeding the legacy global generator is the point)
    torch.manual_seed(seed)  # also seeds every CUDA device
