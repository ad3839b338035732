"""Issue 38 item 4: after a failed check, IPython's debugger state is the one IPython itself would leave."""

from __future__ import annotations

import re
import sys

import pytest

pytest.importorskip("IPython")
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

from helpers import tracebacks  # noqa: E402

FAIL = "from helpers import check_close\ndef learner():\n    check_close('x', 1.0, 2.0)\nlearner()\n"


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    sh.set_custom_exc((AssertionError,), tracebacks.show_assertion)
    saved = {k: getattr(sys, k) for k in ("last_type", "last_value", "last_traceback") if hasattr(sys, k)}
    yield sh
    sh.set_custom_exc((), None)
    sh.call_pdb = False
    for k in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, k):
            delattr(sys, k)
    for k, v in saved.items():
        setattr(sys, k, v)


def test_failed_check_records_the_error_for_debug(shell, capsys):
    shell.run_cell("raise KeyError('earlier error')")
    capsys.readouterr()
    result = shell.run_cell(FAIL)
    assert isinstance(result.error_in_exec, AssertionError)
    assert sys.last_type is AssertionError and sys.last_value is result.error_in_exec  # what %debug opens
    names = []
    tb = sys.last_traceback
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert "learner" in names and "check_close" in names  # the whole traceback, for the debugger
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "learner()" in out and "compare.py" not in out  # the display still leaves our frames out


def test_pdb_on_drops_into_the_debugger_after_a_failed_check(shell, monkeypatch):
    calls = []
    monkeypatch.setattr(shell, "debugger", lambda force=False: calls.append((force, sys.last_value)))
    shell.call_pdb = True
    result = shell.run_cell(FAIL)
    assert calls == [(True, result.error_in_exec)]
