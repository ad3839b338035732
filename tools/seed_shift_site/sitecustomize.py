"""Shift every seed by SEED_SHIFT: loaded at start-up by any Python that has this folder on PYTHONPATH.

`tools/seed_shift.py` puts this folder on the kernel's PYTHONPATH. With SEED_SHIFT=k, each of
`torch.manual_seed`, `torch.Generator(...).manual_seed`, `numpy.random.seed`,
`numpy.random.default_rng`, `numpy.random.RandomState`, `random.seed` and `random.Random`
receives seed + k instead of seed (any integer: negative, NumPy integers), so a notebook runs
as it would on a machine whose random streams (or whose training end points) differ from ours.
Unset or 0: nothing is changed. A SEED_SHIFT that is not an integer stops Python at start-up
(exit status 2) instead of running unshifted.

Only seeds change. `random`: `Random.seed` itself is wrapped, so the module's functions (all of
them: they share one instance) and every `Random` are shifted, and no class is replaced. torch's
and NumPy's generators are C types whose methods cannot be wrapped: `torch.Generator` and
`numpy.random.RandomState` become subclasses that shift their seed, under a metaclass that keeps
``isinstance(torch.default_generator, torch.Generator)`` true, and pickle under the original name.
Not shifted: a seed given to an object made before start-up (``torch.default_generator.manual_seed``).
"""

from __future__ import annotations

import numbers
import os
import sys


def _shifted(seed, k: int, *, modulus: int | None = None, mirror: bool = False):
    """``seed + k`` for an integer seed (bool, None, arrays and SeedSequences pass through).

    ``modulus``: wrap non-negative seeds into [0, modulus) (an API that takes only those; an
    out-of-range seed is passed on unchanged, to fail as it would unshifted). ``mirror``: move a
    negative seed away from zero (``random`` seeds with abs(seed): -1 + 2 would be 1 again).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        return seed
    seed = int(seed)
    if modulus is not None:
        return (seed + k) % modulus if 0 <= seed < modulus else seed
    if mirror and seed < 0:
        return seed - k
    return seed + k


def _torch(k: int) -> None:
    import torch

    base, torch_manual_seed = torch.Generator, torch.manual_seed

    def shift64(seed):
        seed = int(seed) if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) else seed
        # torch takes [-2**63, 2**64): wrap a non-negative seed in the unsigned range
        return _shifted(seed, k, modulus=2**64) if isinstance(seed, int) and seed >= 0 else _shifted(seed, k)

    def manual_seed(seed):
        return torch_manual_seed(shift64(seed))

    torch.manual_seed = torch.random.manual_seed = manual_seed

    class Meta(type(base)):
        def __instancecheck__(cls, obj):  # torch.default_generator (made before us) is still a Generator
            return isinstance(obj, base)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, base)

    class Generator(base, metaclass=Meta):
        def manual_seed(self, seed):
            return super().manual_seed(shift64(seed))

    Generator.__module__, Generator.__qualname__ = "torch", "Generator"  # pickles as torch.Generator
    torch.Generator = Generator


def _numpy(k: int) -> None:
    import numpy as np

    np_seed, np_default_rng, base = np.random.seed, np.random.default_rng, np.random.RandomState

    def seed(seed=None):
        return np_seed(_shifted(seed, k, modulus=2**32))

    def default_rng(seed=None):
        return np_default_rng(_shifted(seed, k) if not isinstance(seed, numbers.Integral) or seed >= 0 else seed)

    class Meta(type(base)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, base)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, base)

    class RandomState(base, metaclass=Meta):
        def __init__(self, seed=None):
            super().__init__(_shifted(seed, k, modulus=2**32))

        def seed(self, seed=None):
            return super().seed(_shifted(seed, k, modulus=2**32))

    RandomState.__module__, RandomState.__qualname__ = "numpy.random", "RandomState"
    np.random.seed, np.random.default_rng, np.random.RandomState = seed, default_rng, RandomState


def _random(k: int) -> None:
    import random

    original = random.Random.seed

    def seed(self, a=None, version=2):
        return original(self, _shifted(a, k, mirror=True), version)

    random.Random.seed = seed  # Random.__init__ calls it; SystemRandom overrides it (no seed)
    random.seed = random._inst.seed  # the module's functions are bound methods of this one instance


def install(k: int) -> None:
    _random(k)
    _numpy(k)
    _torch(k)


def shift_from_environment(value: str | None) -> int:
    """SEED_SHIFT as an int (unset or empty: 0); anything else is an error, never a silent 0."""
    try:
        return int(value or 0)
    except ValueError:
        raise ValueError(f"SEED_SHIFT must be an integer, got {value!r}") from None


try:
    _k = shift_from_environment(os.environ.get("SEED_SHIFT"))
except ValueError as err:  # site.py would print and go on unshifted: stop instead
    print(f"seed shift: {err}", file=sys.stderr, flush=True)
    os._exit(2)
if _k:
    install(_k)
