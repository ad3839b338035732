"""Shift every seed by SEED_SHIFT: loaded at start-up by any Python that has this folder on PYTHONPATH.

`tools/seed_shift.py` puts this folder on the kernel's PYTHONPATH. With SEED_SHIFT=k, each of
`torch.manual_seed`, `torch.Generator(...).manual_seed`, `numpy.random.seed`,
`numpy.random.default_rng`, `numpy.random.RandomState`, `random.seed` and `random.Random`
receives seed + k instead of seed, so a notebook runs as it would on a machine whose random
streams (or whose training end points) differ from ours. Unset or 0: nothing is changed.
"""

from __future__ import annotations

import os


def _shifted(seed, k: int):
    # Only plain integer seeds are shifted: None (fresh entropy), arrays and SeedSequences pass through.
    if isinstance(seed, int) and not isinstance(seed, bool):
        return (seed + k) % 2**32 if seed >= 0 else seed
    return seed


def install(k: int) -> None:
    import random

    import numpy as np
    import torch

    torch_manual_seed = torch.manual_seed

    def manual_seed(seed):
        return torch_manual_seed(_shifted(int(seed), k))

    torch.manual_seed = torch.random.manual_seed = manual_seed

    class Generator(torch.Generator):
        def manual_seed(self, seed):
            return super().manual_seed(_shifted(int(seed), k))

    torch.Generator = Generator

    np_seed, np_default_rng = np.random.seed, np.random.default_rng

    def seed(seed=None):
        return np_seed(_shifted(seed, k))

    def default_rng(seed=None):
        return np_default_rng(_shifted(seed, k))

    class RandomState(np.random.RandomState):
        def __init__(self, seed=None):
            super().__init__(_shifted(seed, k))

        def seed(self, seed=None):
            return super().seed(_shifted(seed, k))

    np.random.seed, np.random.default_rng, np.random.RandomState = seed, default_rng, RandomState

    class Random(random.Random):
        def seed(self, a=None, version=2):
            return super().seed(_shifted(a, k), version)

    shared = Random()
    random.Random = Random
    for name in ("seed", "random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
                 "uniform", "gauss", "normalvariate", "getrandbits", "getstate", "setstate"):
        setattr(random, name, getattr(shared, name))


_k = int(os.environ.get("SEED_SHIFT", "0") or 0)
if _k:
    install(_k)
