"""helpers.exercises: `attempt` tells a stub from a wrong answer, `rejects` proves a check can fail."""

from __future__ import annotations

import doctest
import functools

import pytest
import torch
from torch import nn

import helpers
from helpers import exercises
from helpers.exercises import attempt, rejects, verify


def check_exercise_3(fn):
    got = fn(3)
    assert got == 9, f"square(3): expected 9, got {got}"
    print("exercise 3: correct")


def square_stub(x):
    raise NotImplementedError("exercise 3: write square")


def test_doctest():
    assert doctest.testmod(exercises).failed == 0


def test_reexported():
    assert helpers.attempt is attempt and helpers.rejects is rejects
    assert {"attempt", "rejects"} <= set(helpers.__all__)


def test_stub_prints_not_done_and_does_not_raise(capsys):
    assert attempt(check_exercise_3, square_stub) is None
    assert capsys.readouterr().out == (
        "exercise 3: not done yet — fill in square_stub above and re-run this cell\n")


def test_right_answer_runs_the_check(capsys):
    attempt(check_exercise_3, lambda x: x * x)
    assert capsys.readouterr().out == "exercise 3: correct\n"


def test_wrong_answer_assertion_propagates_with_its_message(capsys):
    with pytest.raises(AssertionError, match=r"expected 9, got 6"):
        attempt(check_exercise_3, lambda x: x + x)
    assert "not done" not in capsys.readouterr().out


def test_not_implemented_deep_inside_a_real_solution_propagates(capsys):
    def helper(x):
        raise NotImplementedError("a helper the learner has not written")

    def square(x):  # filled in, but calls something unfinished
        return helper(x) * x

    with pytest.raises(NotImplementedError, match="helper the learner"):
        attempt(check_exercise_3, square)
    assert capsys.readouterr().out == ""


def test_not_implemented_from_torch_propagates():
    class NoForward(nn.Module):  # torch's own "missing forward" is a NotImplementedError
        pass

    def check_exercise_4(cls):
        cls()(torch.zeros(1))

    with pytest.raises(NotImplementedError, match="forward"):
        attempt(check_exercise_4, NoForward)


def test_stub_method_of_a_class_counts_as_not_done(capsys):
    class Layer(nn.Module):
        def forward(self, x):
            raise NotImplementedError("exercise 5: write forward")

    def check_exercise_5(cls):
        assert cls()(torch.ones(2)).sum() == 2

    attempt(check_exercise_5, Layer)
    assert capsys.readouterr().out.startswith("exercise 5: not done yet — fill in Layer above")


def test_several_solutions_are_named_and_any_stub_counts(capsys):
    def pre(x):
        return x

    def post(x):
        raise NotImplementedError

    def check_exercise_1(a, b):
        assert a(1) == b(1) == 1

    attempt(check_exercise_1, pre, post)
    assert capsys.readouterr().out.startswith("exercise 1: not done yet — fill in pre and post above")


def test_partial_and_callable_objects_are_looked_through(capsys):
    def power(x, n):
        raise NotImplementedError

    class Stub:
        def __call__(self, x):
            raise NotImplementedError

    attempt(check_exercise_3, functools.partial(power, n=2))
    attempt(check_exercise_3, Stub())
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("not done yet" in line for line in out)


def test_label_falls_back_to_the_check_name(capsys):
    def my_check(fn):
        fn()

    def stub():
        raise NotImplementedError

    attempt(my_check, stub)
    assert capsys.readouterr().out.startswith("my_check: not done yet")


def test_rejects_true_on_assertion_false_on_pass_and_mutes_output(capsys):
    assert rejects(check_exercise_3, lambda x: x + x) is True
    assert rejects(check_exercise_3, lambda x: x * x) is False
    assert capsys.readouterr().out == ""  # the passing check's "correct" was muted


def test_rejects_lets_other_errors_through():
    with pytest.raises(NotImplementedError):
        rejects(check_exercise_3, square_stub)  # a stub is not a wrong answer
    with pytest.raises(TypeError):
        rejects(check_exercise_3, lambda x: None + x)


@pytest.mark.parametrize("fn", [attempt, rejects])
def test_argument_validation(fn):
    with pytest.raises(TypeError, match="check must be a callable"):
        fn("check_exercise_3", square_stub)
    with pytest.raises(TypeError, match="at least one"):
        fn(check_exercise_3)
    with pytest.raises(TypeError, match=r"solutions\[1\] must be a function or class"):
        fn(check_exercise_3, square_stub, 3)


def test_verify_mutes_the_check_and_prints_one_neutral_line(capsys):
    def check_exercise_4(fn):
        assert fn(3) == 9, f"expected 9, got {fn(3)}"
        print("exercise 4: correct (the answer is 9)")

    verify(check_exercise_4, lambda x: x * x)
    assert capsys.readouterr().out == "exercise 4: the reference solution passes the check\n"
    with pytest.raises(AssertionError, match="expected 9, got 6"):
        verify(check_exercise_4, lambda x: 2 * x)
    with pytest.raises(TypeError, match="check"):
        verify(None, lambda x: x)
