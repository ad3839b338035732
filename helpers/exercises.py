"""Run a learner's exercise against its check, so a notebook still runs with the stubs in place.

An exercise in the notebooks is three cells: a check (``check_exercise_N(fn)``, which prints
``exercise N: correct`` or raises AssertionError saying what it expected and what it got), a
stub whose body raises ``NotImplementedError`` followed by ``attempt(check_exercise_N, fn)``,
and a collapsed reference solution that runs ``verify(check_exercise_N, reference)`` (the
check passes, its output muted) and proves the check rejects a wrong answer with
``assert rejects(check_exercise_N, wrong)``.

Which NotImplementedError means "not done yet": only one raised by the solution's own code
(the body of the function, or a method of the class, that was passed in). One raised deeper,
in code the solution calls (a torch kernel, a helper the learner wrote), is a real error and
propagates, so it is never hidden behind "not done yet".

Example:
    >>> def check_exercise_1(fn):
    ...     assert fn(2) == 4, f"expected 4, got {fn(2)}"
    ...     print("exercise 1: correct")
    >>> def double(x):
    ...     raise NotImplementedError("exercise 1: write double")
    >>> attempt(check_exercise_1, double)
    exercise 1: not done yet — fill in double above and re-run this cell
    >>> attempt(check_exercise_1, lambda x: 2 * x)
    exercise 1: correct
    >>> rejects(check_exercise_1, lambda x: x + 1)
    True
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import re
import sys
from collections.abc import Callable
from types import CodeType, ModuleType

from helpers.tracebacks import install as install_tracebacks

_NUMBER = re.compile(r"check_exercise_(\d+)$")


def _validate(check, solutions) -> None:
    if not callable(check):
        raise TypeError(f"check must be a callable (a check_exercise_N function), got {type(check).__name__}")
    if not solutions:
        raise TypeError("solutions: pass at least one function or class to check")
    for i, fn in enumerate(solutions):
        if not callable(fn):
            raise TypeError(f"solutions[{i}] must be a function or class, got {type(fn).__name__}")


def _own_code(fn) -> set[CodeType]:
    """The code objects written for ``fn`` itself: its body, or every method a class defines."""
    if isinstance(fn, functools.partial):
        return _own_code(fn.func)
    if inspect.isclass(fn):
        codes = set()
        for value in vars(fn).values():
            for member in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
                if inspect.isfunction(member):
                    codes.add(member.__code__)
        return codes
    fn = inspect.unwrap(fn)
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        return {fn.__code__}
    call = inspect.getattr_static(type(fn), "__call__", None)  # an object with __call__
    return {call.__code__} if inspect.isfunction(call) else set()


def _raised_by_stub(err: NotImplementedError, solutions) -> bool:
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:  # the innermost frame raised it
        tb = tb.tb_next
    codes = set().union(*(_own_code(fn) for fn in solutions))
    return tb is not None and tb.tb_frame.f_code in codes


def _label(check) -> str:
    m = _NUMBER.search(getattr(check, "__name__", ""))
    return f"exercise {m.group(1)}" if m else getattr(check, "__name__", "exercise")


def attempt(check: Callable, *solutions) -> None:
    """Run ``check(*solutions)``; if a solution is still the stub, say so in one line instead.

    Args:
        check: a ``check_exercise_N`` function; it prints ``exercise N: correct`` or raises.
        solutions: the learner's function(s) or class, passed to ``check`` in this order.

    Prints ``exercise N: not done yet — fill in NAME above and re-run this cell`` when a
    solution's own body raised NotImplementedError. Anything else propagates: the check's
    AssertionError on a wrong answer, and a NotImplementedError raised deeper down.
    """
    __tracebackhide__ = True  # IPython starts a wrong answer's traceback at the check, not here
    _validate(check, solutions)
    try:
        check(*solutions)
    except NotImplementedError as err:
        if not _raised_by_stub(err, solutions):
            raise
        names = " and ".join(getattr(fn, "__name__", type(fn).__name__) for fn in solutions)
        print(f"{_label(check)}: not done yet — fill in {names} above and re-run this cell")


def verify(check: Callable, *solutions) -> None:
    """Run ``check(*solutions)`` on a reference solution with the check's own output muted
    (it may print the answer); print one line that it passed. A failure propagates.

    For the collapsed reference cells: under the learner's stub, "exercise N: correct" would read
    as if the learner's own function had passed, and a printed number would give the answer away.
    """
    __tracebackhide__ = True  # IPython shows the check's frame, not this one
    _validate(check, solutions)
    with contextlib.redirect_stdout(io.StringIO()):
        check(*solutions)
    print(f"{_label(check)}: the reference solution passes the check")


def rejects(check: Callable, *solutions) -> bool:
    """True if ``check(*solutions)`` fails with AssertionError, False if it passes; output is muted.

    Proves a check can fail: ``assert rejects(check_exercise_1, plausible_wrong_answer)``.
    Any other exception propagates, NotImplementedError included: a wrong answer must be
    caught by the check's asserts, not by an accident such as a TypeError or a stub.
    """
    _validate(check, solutions)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # a failing check may print partial verdicts
            check(*solutions)
    except AssertionError:
        return True
    return False


def _owner_functions(fn) -> list:
    """The plain functions whose globals a solution's code reads: its body, or a class's methods."""
    if isinstance(fn, functools.partial):
        return _owner_functions(fn.func)
    if inspect.isclass(fn):
        out = []
        for value in vars(fn).values():
            for member in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
                if inspect.isfunction(member):
                    out.append(member)
        return out
    fn = inspect.unwrap(fn)
    if inspect.ismethod(fn):
        fn = fn.__func__
    return [fn] if inspect.isfunction(fn) else []


def _target_name(target) -> str:
    if isinstance(target, tuple):
        owner, attr = target
        return f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
    module = getattr(target, "__module__", None) or ""
    return f"{module}.{getattr(target, '__qualname__', repr(target))}".lstrip(".")


@contextlib.contextmanager
def refuse_calls(solutions, *targets, label: str = "this exercise"):
    """While the block runs, calling any of ``targets`` raises AssertionError naming it.

    A check wraps only the learner's call in it: an answer that just calls the helper it is
    meant to reproduce (``helpers.attention.scaled_dot_product_attention``, torch's own
    ``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``...) is refused with a message
    that says so, however it reaches the helper: a name in the notebook, ``helpers.x.y``, or
    another helper that calls it.

    Args:
        solutions: the learner's function or class, or a tuple of them (their globals are
            patched: that is where a notebook's imported names live).
        targets: callables, or ``(owner, "attribute")`` pairs for a method or a torch function.
        label: who is asking, for the message ("exercise 3", "the attention build").

    Example:
        >>> import math
        >>> def my_sqrt(x):
        ...     return math.sqrt(x)
        >>> with refuse_calls(my_sqrt, (math, "sqrt"), label="exercise 9"):
        ...     my_sqrt(4.0)
        Traceback (most recent call last):
        ...
        AssertionError: exercise 9: your answer calls math.sqrt, the piece it asks you to write; write it yourself with plain tensor operations
    """
    if not isinstance(solutions, tuple):
        solutions = (solutions,)
    originals, patches = [], []  # (namespace dict or object, key, old value)
    for target in targets:
        if isinstance(target, tuple):
            owner, attr = target
            if not isinstance(attr, str) or not hasattr(owner, attr):
                raise TypeError(f"targets: {target!r} is not an (owner, existing attribute name) pair")
            original = getattr(owner, attr)
        elif callable(target):
            owner, attr, original = None, None, target
        else:
            raise TypeError(f"targets: expected callables or (owner, 'name') pairs, got {type(target).__name__}")
        name = _target_name(target)

        def raiser(*args, _name=name, **kwargs):
            raise AssertionError(
                f"{label}: your answer calls {_name}, the piece it asks you to write; "
                "write it yourself with plain tensor operations")

        originals.append((original, raiser))
        if owner is not None:  # put back what the owner itself held (a classmethod, not its bound method;
            # nothing, for an inherited attribute), so the owner is exactly as it was afterwards
            own = vars(owner).get(attr, _INHERITED) if hasattr(owner, "__dict__") else original
            patches.append((owner, attr, own, raiser))
    namespaces: list[dict] = [fn.__globals__ for s in solutions for fn in _owner_functions(s)]
    namespaces += [vars(m) for n, m in list(sys.modules.items())
                   if isinstance(m, ModuleType) and (n == "helpers" or n.startswith("helpers."))]
    seen = set()
    for ns in namespaces:
        if id(ns) in seen:
            continue
        seen.add(id(ns))
        for key, value in list(ns.items()):
            for original, raiser in originals:
                if value is original:
                    patches.append((ns, key, original, raiser))
    for fn in (f for s in solutions for f in _owner_functions(s)):
        for cell in fn.__closure__ or ():  # a name the solution closes over
            for original, raiser in originals:
                with contextlib.suppress(ValueError):  # an empty cell
                    if cell.cell_contents is original:
                        patches.append((cell, "cell_contents", original, raiser))
    done = []
    try:
        for where, key, original, raiser in patches:
            if isinstance(where, dict):
                where[key] = raiser
            else:
                setattr(where, key, raiser)
            done.append((where, key, original))
        yield
    finally:
        for where, key, original in reversed(done):
            if isinstance(where, dict):
                where[key] = original
            elif original is _INHERITED:
                delattr(where, key)
            else:
                setattr(where, key, original)


_INHERITED = object()  # marks an attribute the owner only inherited: restored by deleting the patch


def _copy(value):
    import torch  # only here: the rest of this module runs without torch

    if isinstance(value, torch.Tensor):
        c = value.detach().clone()
        return c.requires_grad_(value.requires_grad) if value.is_leaf else c
    if isinstance(value, list | tuple):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and bool(torch.equal(a.detach(), b.detach()) or
                         (a.is_floating_point() and torch.isnan(a).any() and
                          torch.equal(torch.nan_to_num(a.detach()), torch.nan_to_num(b.detach())))))
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, int | float | str | bytes | type(None)):  # inside a list the learner may have edited
        return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN equals NaN here
    return True  # modules, generators...: a check that hands them over tests them itself


def call_unchanged(fn: Callable, *args, label: str = "your function", **kwargs):
    """Call ``fn`` on copies of its tensor arguments and return its result; AssertionError if it
    changed one of them in place.

    A check computes its expected value from the originals, which ``fn`` never sees, so an answer
    such as ``x.fill_(0)`` can neither pass by changing what it is compared against nor go
    unnoticed.

    Example:
        >>> import torch
        >>> x = torch.ones(3)
        >>> call_unchanged(lambda t: t * 2, x)
        tensor([2., 2., 2.])
        >>> call_unchanged(lambda t: t.mul_(2), x, label="double")
        Traceback (most recent call last):
        ...
        AssertionError: double changed its argument 0 in place (fill_, +=, mul_, an out= argument...): compute a new tensor and leave the input as it was
        >>> x
        tensor([1., 1., 1.])
    """
    copies = [_copy(a) for a in args]
    kw_copies = {k: _copy(v) for k, v in kwargs.items()}
    result = fn(*copies, **kw_copies)
    for i, (a, c) in enumerate(zip(args, copies, strict=True)):
        if not _same(a, c):
            raise AssertionError(
                f"{label} changed its argument {i} in place (fill_, +=, mul_, an out= argument...): "
                "compute a new tensor and leave the input as it was")
    for k in kwargs:
        if not _same(kwargs[k], kw_copies[k]):
            raise AssertionError(
                f"{label} changed its argument {k!r} in place (fill_, +=, mul_, an out= argument...): "
                "compute a new tensor and leave the input as it was")
    return result


install_tracebacks()  # in IPython: a failed check shows the learner's line and the message, not our frames
