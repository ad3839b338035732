"""Failed checks read as the learner's: IPython tracebacks of an AssertionError leave out helpers' frames.

A wrong answer to an exercise fails inside `check_close` or a check the notebook defines, called
through `attempt`. IPython would print our frames too (``helpers/compare.py``, even with
``__tracebackhide__``, which it ignores for the frame that raised). Importing `helpers` registers
`show_assertion` for AssertionError in a running IPython (nothing happens elsewhere): the
traceback keeps every frame that is not in the helpers package (the learner's line, the check's
line) and the message, so the failure reads "your line, the check's line, what was expected".
Other exceptions, and anything outside IPython (pytest, nbval's comparison of the error's type
and message), are unchanged.
"""

from __future__ import annotations

import types
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _ours(tb: types.TracebackType) -> bool:
    try:
        return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE)
    except (OSError, ValueError):
        return False


def without_helpers(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The same traceback less the frames of code in the helpers package (all of it if every frame is ours)."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    kept = [e for e in entries if not _ours(e)] or entries
    chained = None
    for e in reversed(kept):
        chained = types.TracebackType(chained, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return chained


def show_assertion(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler (``set_custom_exc``): show the traceback without our frames.

    Everything else is what IPython's own ``showtraceback`` does: ``sys.last_*`` record the
    error with its whole traceback (so ``%debug`` opens it, helpers' frames included), and
    ``%pdb on`` drops into the debugger.
    """
    shell._get_exc_info((etype, value, tb))  # sets sys.last_type/value/traceback (and last_exc)
    stb = shell.InteractiveTB.structured_traceback(etype, value, without_helpers(tb), tb_offset=tb_offset)
    shell.InteractiveTB.tb = None  # the debugger then reads sys.last_traceback: the whole traceback
    shell._showtraceback(etype, value, stb)
    if shell.call_pdb:
        shell.debugger(force=True)
    return stb


def install() -> bool:
    """Register `show_assertion` in the running IPython shell; False (and nothing done) outside one,
    or when the shell already has a custom handler of someone else's."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    current = getattr(shell, "CustomTB", None)
    if getattr(shell, "custom_exceptions", ()) and getattr(current, "__func__", None) is not show_assertion:
        return False
    shell.set_custom_exc((AssertionError,), show_assertion)
    return True
