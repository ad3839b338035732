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
from collections.abc import Callable
from types import CodeType

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


install_tracebacks()  # in IPython: a failed check shows the learner's line and the message, not our frames
