"""In a real kernel, a failed check's traceback shows the notebook's lines and the message, not helpers' frames."""

from __future__ import annotations

import re

import nbformat
from nbclient import NotebookClient

from helpers.tracebacks import without_helpers

CHECK = '''import torch
from helpers import attempt, check_close

def check_exercise_1(fn):
    check_close("fn on a (2, 3) input", fn(torch.ones(2, 3)), torch.zeros(2, 3))
    print("exercise 1: correct")'''
WRONG = '''def fn(x):
    return x  # wrong: should be zeros

attempt(check_exercise_1, fn)'''


def test_failed_check_in_a_kernel_shows_the_notebooks_lines_only(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CHECK), nbformat.v4.new_code_cell(WRONG)])
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    client.execute()
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))  # without colours
    assert error.ename == "AssertionError" and "fn on a (2, 3) input: max abs diff" in error.evalue
    assert "attempt(check_exercise_1, fn)" in text  # the learner's line
    assert "check_close(" in text  # the check's line
    assert "helpers/" not in text and "compare.py" not in text and "exercises.py" not in text, text


def test_without_helpers_keeps_other_frames_and_never_empties():
    def outer():
        from helpers import check_close

        check_close("x", 1.0, 2.0)

    try:
        outer()
    except AssertionError as err:
        tb = err.__traceback__
    names = []
    t = without_helpers(tb)
    while t is not None:
        names.append(t.tb_frame.f_code.co_name)
        t = t.tb_next
    assert names == ["test_without_helpers_keeps_other_frames_and_never_empties", "outer"]
