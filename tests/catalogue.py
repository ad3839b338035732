"""The check catalogue: every build and exercise check is proven against answers other than ours.

Rule (README, "Exercises"): each check a learner's cell calls is tested here with
- the reference solution, which passes;
- at least two correct answers written differently (another algorithm, idiom or dtype path),
  which pass;
- at least three plausible wrong answers (the classic mistakes of that piece, and the ones expert
  reviewers found), each rejected with an AssertionError whose message names the cause (a keyword
  of the intended hint) and does not contain a line of the reference's code.

A test file per notebook, ``tests/test_catalogue_nbNN.py``, calls :func:`assert_catalogue` with the
very check function the notebook's cell calls (the checks live in ``helpers/checks/nbNN.py``,
which the notebook imports).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Wrong:
    """A plausible wrong answer and the word(s) its rejection message must contain (any of them)."""

    solution: Callable | tuple
    hint: str | tuple[str, ...]
    why: str = ""  # the mistake, for the test's own failure message


@dataclass
class Catalogue:
    check: Callable
    reference: Callable | tuple
    correct: Sequence[Callable | tuple] = field(default_factory=list)
    wrong: Sequence[Wrong] = field(default_factory=list)
    args: tuple = ()  # extra arguments the notebook passes after the solution(s)


def _as_tuple(solution) -> tuple:
    return solution if isinstance(solution, tuple) else (solution,)


def _run(check: Callable, solution, args: tuple) -> str:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        check(*_as_tuple(solution), *args)
    return out.getvalue()


def _code_lines(solution) -> list[str]:
    """Lines of the reference's body worth hiding (not `return x`, not a signature)."""
    lines = []
    for fn in _as_tuple(solution):
        try:
            src = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        for line in src.splitlines():
            s = line.strip()
            if (len(s) >= 12 and not s.startswith(("def ", "class ", "#", '"""', "@", "return "))
                    and re.search(r"[=(\[]", s)):
                lines.append(s)
    return lines


def _name(solution) -> str:
    return " + ".join(getattr(f, "__name__", type(f).__name__) for f in _as_tuple(solution))


def assert_catalogue(cat: Catalogue) -> dict:
    """Run the catalogue; raise AssertionError on the first answer the check gets wrong.

    Returns counts, for the notes: {"correct": n, "wrong": n}.
    """
    assert len(cat.correct) >= 2, f"{cat.check.__name__}: at least two correct alternatives needed"
    assert len(cat.wrong) >= 3, f"{cat.check.__name__}: at least three plausible wrong answers needed"
    _run(cat.check, cat.reference, cat.args)  # the reference passes
    for sol in cat.correct:
        try:
            _run(cat.check, sol, cat.args)
        except AssertionError as err:
            raise AssertionError(
                f"{cat.check.__name__} rejects a correct answer {_name(sol)}: {err}") from err
    hidden = _code_lines(cat.reference)
    for w in cat.wrong:
        try:
            _run(cat.check, w.solution, cat.args)
        except AssertionError as err:
            msg = str(err)
            hints = (w.hint,) if isinstance(w.hint, str) else w.hint
            assert any(h.lower() in msg.lower() for h in hints), (
                f"{cat.check.__name__} rejects {_name(w.solution)} ({w.why}) but its message "
                f"names none of {hints}: {msg!r}")
            leaked = [line for line in hidden if line in msg]
            assert not leaked, f"{cat.check.__name__}: message for {_name(w.solution)} shows the reference's code {leaked}"
        else:
            raise AssertionError(
                f"{cat.check.__name__} accepts the wrong answer {_name(w.solution)} ({w.why})")
    return {"correct": len(cat.correct), "wrong": len(cat.wrong)}


def accepted_wrong(cat: Catalogue) -> list[str]:
    """The wrong answers a check accepts (for counting what an old check let through)."""
    out = []
    for w in cat.wrong:
        try:
            _run(cat.check, w.solution, cat.args)
        except Exception:  # noqa: BLE001 - any failure counts as a rejection here
            continue
        out.append(f"{_name(w.solution)} ({w.why})")
    return out
