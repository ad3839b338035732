"""Comparisons whose printed verdict is the same on every machine.

Notebooks prove "ours equals PyTorch's" many times. The raw difference (8.94e-08 here,
1.19e-07 on another CPU) changes with the instruction set, the BLAS and the thread count, so
a stored output that prints it fails strict nbval elsewhere. `check_close` asserts the
tolerance and prints only the verdict, which is portable (README: portable-output policy).

Example:
    >>> import torch
    >>> diff = check_close("x + 0 vs x", torch.ones(3) + 0, torch.ones(3))
    x + 0 vs x: max abs diff ≤ 1e-06 ✓
    >>> diff
    0.0
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from helpers.tracebacks import install as install_tracebacks


def _is_complex(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_complex()
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "c"
    return isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real)


def _as_float64(name: str, value) -> torch.Tensor:
    if _is_complex(value):
        # Casting to float64 would drop the imaginary part, and the verdict with it.
        raise TypeError(f"{name} is complex; check_close compares real numbers: compare .real and .imag "
                        "(or torch.view_as_real(x)) separately")
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64)
    if isinstance(value, np.ndarray | numbers.Real | list | tuple) and not isinstance(value, bool):
        try:
            if np.asarray(value).dtype.kind == "c":  # a list holding a complex number
                raise TypeError(f"{name} holds complex numbers; check_close compares real numbers: compare "
                                ".real and .imag separately")
            return torch.as_tensor(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name} must be numeric (a tensor, array, list or number): {err}") from None
    raise TypeError(f"{name} must be a tensor, array, list or number, got {type(value).__name__}")


def check_close(label: str, actual, expected, atol: float = 1e-6, rtol: float = 0.0,
                quiet: bool = False) -> float:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` everywhere; print a portable verdict.

    Prints ``"{label}: max abs diff ≤ {atol} ✓"`` (never the raw difference) unless ``quiet``,
    and returns the max abs difference as a float for further asserts. Shapes must match
    exactly (no broadcasting: a silently broadcast comparison proves nothing). NaN anywhere
    fails. An infinity equals the same infinity at the same place (masked scores of -inf agree)
    and nothing else. Complex inputs are refused (TypeError): compare .real and .imag. Raises
    AssertionError, with the real difference, when the values are not close.
    """
    __tracebackhide__ = True  # IPython ends a failure's traceback at the caller's line
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    if not isinstance(quiet, bool):
        raise TypeError(f"quiet must be a bool, got {type(quiet).__name__}")
    for name, tol in (("atol", atol), ("rtol", rtol)):
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not math.isfinite(tol) or tol < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {tol!r}")
    atol, rtol = float(atol), float(rtol)  # a huge int would overflow inside torch
    a, e = _as_float64("actual", actual), _as_float64("expected", expected)
    if a.shape != e.shape:
        raise ValueError(f"{label}: actual has shape {tuple(a.shape)}, expected has shape {tuple(e.shape)}")
    if torch.isnan(a).any() or torch.isnan(e).any():
        raise AssertionError(f"{label}: NaN in {'actual' if torch.isnan(a).any() else 'expected'} (for example a "
                             "softmax over a row whose entries are all -inf)")  # fmt: skip
    same_inf = torch.isinf(a) & (a == e)  # -inf where both mask the same score: equal, not inf - inf = NaN
    one_inf = (torch.isinf(a) | torch.isinf(e)) & ~same_inf
    if bool(one_inf.any()):
        i = tuple(int(j) for j in torch.nonzero(one_inf)[0])
        raise AssertionError(f"{label}: actual is {float(a[i])} where expected is {float(e[i])} (at index {i})")
    diff = (a - e).abs().masked_fill(same_inf, 0.0)
    worst = float(diff.max()) if diff.numel() else 0.0
    bound = atol + rtol * e.abs().masked_fill(same_inf, 0.0)
    if not bool((diff <= bound).all()):
        raise AssertionError(f"{label}: max abs diff {worst:.3e} exceeds atol={atol:g}, rtol={rtol:g}")
    if not quiet:
        tol = f"{atol:g}" + (f" + {rtol:g}·|expected|" if rtol else "")
        print(f"{label}: max abs diff ≤ {tol} ✓")
    return worst


install_tracebacks()  # in IPython: a failed check shows the learner's line and the message, not our frames
