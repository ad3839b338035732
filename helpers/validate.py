"""Argument checks shared by the building blocks: clear errors instead of deep torch ones."""

from __future__ import annotations

import dataclasses
import math

import torch


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool), at least ``minimum`` and below 2**63.

    2**63 and above overflow torch's int64 (an unnamed "Overflow when unpacking long").
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must fit in int64 (below 2**63 in size), got {value}")
    return value


def check_probability(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_tensor(name: str, value, *, ndim: int | None = None, floating: bool | None = None) -> torch.Tensor:
    """Check that ``value`` is a tensor with ``ndim`` dims and the right kind of dtype."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if floating is True and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {value.dtype}")
    if floating is False and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise TypeError(f"{name} must hold integer token ids, got {value.dtype}")
    if floating is False:
        check_ids_dtype(name, value)
    return value


# Integer dtypes torch fully supports (indexing, min/max, cat); uint16/32/64 are
# "limited support" dtypes whose kernels are missing, so they are refused by name.
ID_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def check_ids_dtype(name: str, value: torch.Tensor) -> torch.Tensor:
    """Refuse integer dtypes torch cannot index with (uint16/32/64); callers then convert with ``.long()``."""
    if value.dtype not in ID_DTYPES:
        raise TypeError(f"{name} must have an integer dtype ({', '.join(str(d)[6:] for d in ID_DTYPES)}), "
                        f"got {value.dtype}; convert with .long()")
    return value


def check_bool(name: str, value) -> bool:
    """Return ``value`` if it is a bool (a string such as "False" would be truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_positive(name: str, value) -> float:
    """Return ``value`` as a float if it is a finite number > 0 (a bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not (0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value}")
    return float(value)


def check_sequence(name: str, value, item=str) -> list:
    """Return ``value`` as a list, refusing a lone str (``"<eos>"`` would read as 5 one-character items)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a list of {item.__name__}, not a single {type(value).__name__} (wrap it in a list)")
    if isinstance(value, (dict, set, frozenset)):  # a dict would give its keys, a set no order
        raise TypeError(f"{name} must be a list of {item.__name__}, got {type(value).__name__}")
    try:  # a 0-d tensor is an Iterable that cannot be iterated: ask, don't check
        value = list(value)
    except TypeError:
        raise TypeError(f"{name} must be a list of {item.__name__}, got {type(value).__name__}") from None
    for i, v in enumerate(value):
        if not isinstance(v, item):
            raise TypeError(f"{name}[{i}] must be a {item.__name__}, got {type(v).__name__} ({v!r})")
    return value


_RUNNING: set[int] = set()  # ids of Revalidated configs inside __post_init__ right now


class Revalidated:
    """Mixin for validated ``@dataclass`` configs: an edit after construction is checked again.

    ``cfg.n_heads = 3`` re-runs ``__post_init__``; if that refuses the new value, the old
    one is put back and the ValueError/TypeError propagates, so a config never holds a
    combination its constructor would have refused.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        post_init = cls.__dict__.get("__post_init__")
        if post_init is None:
            return

        def __post_init__(self):
            # The "being checked" state lives outside the instance, so vars(cfg) shows only fields.
            _RUNNING.add(id(self))
            try:
                post_init(self)
            finally:
                _RUNNING.discard(id(self))

        cls.__post_init__ = __post_init__

    def __setattr__(self, name, value):
        # Plain assignment while __init__ fills the fields and while __post_init__ runs; a copy
        # or an unpickled config has every field already, so its edits are checked too.
        if id(self) in _RUNNING or not all(f.name in self.__dict__ for f in dataclasses.fields(self)):
            object.__setattr__(self, name, value)
            return
        old = dict(self.__dict__)
        object.__setattr__(self, name, value)
        try:
            self.__post_init__()
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(old)
            raise
