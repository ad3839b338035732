"""check_close: the portable verdict, and that it can fail."""

import numpy as np
import pytest
import torch

from helpers.compare import check_close


def test_prints_only_the_verdict_and_returns_the_difference(capsys):
    diff = check_close("a vs b", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 3e-7]))
    out = capsys.readouterr().out
    assert out == "a vs b: max abs diff ≤ 1e-06 ✓\n" and "e-07" not in out
    assert 2e-7 < diff < 4e-7


def test_fails_with_the_real_difference():
    with pytest.raises(AssertionError, match=r"a: max abs diff 1\.000e-03 exceeds atol=1e-06"):
        check_close("a", [0.0, 1e-3], [0.0, 0.0])


def test_rtol_and_numpy_and_numbers(capsys):
    check_close("rel", np.array([100.0]), np.array([100.001]), atol=0.0, rtol=1e-4)
    assert capsys.readouterr().out == "rel: max abs diff ≤ 0 + 0.0001·|expected| ✓\n"
    assert check_close("n", 1.0, 1.0, quiet=True) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), [1.0, float("nan")]])
def test_nan_fails(bad):
    with pytest.raises(AssertionError, match="NaN"):
        check_close("x", bad, bad, quiet=True)


def test_shapes_must_match_without_broadcasting():
    with pytest.raises(ValueError, match=r"actual has shape \(3,\), expected has shape \(1,\)"):
        check_close("x", torch.zeros(3), torch.zeros(1))


@pytest.mark.parametrize("kw", [{"atol": -1.0}, {"atol": float("inf")}, {"rtol": True}, {"atol": "1e-6"}])
def test_bad_tolerances_are_named(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        check_close("x", 0.0, 0.0, **kw)


@pytest.mark.parametrize("bad", ["abc", None, {"a": 1}, True])
def test_bad_values_are_named(bad):
    with pytest.raises(TypeError, match="actual must be"):
        check_close("x", bad, 0.0)
    with pytest.raises(TypeError, match="label must be a str"):
        check_close(1, 0.0, 0.0)


@pytest.mark.parametrize("module", ["helpers.compare", "helpers.widgets.throttle",
                                    "helpers.widgets.next_token", "helpers.widgets.gpt_attention"])  # fmt: skip
def test_doctests_of_the_new_modules(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
