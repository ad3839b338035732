"""The catalogue harness and the exercise guards catch what they promise (tests/catalogue.py)."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from catalogue import Catalogue, Wrong, accepted_wrong, assert_catalogue

import helpers.attention
from helpers import exercises
from helpers.exercises import call_unchanged, refuse_calls


def test_doctests():
    assert doctest.testmod(exercises).failed == 0


def check_square(fn):
    x = torch.tensor([1.0, -2.0, 3.0])
    got = call_unchanged(fn, x, label="square")
    assert torch.equal(got, x * x), f"square: expected x times itself, got {got}"


def reference(x):
    squared = x * x
    return squared


def test_catalogue_passes_a_good_check():
    cat = Catalogue(check_square, reference, correct=[lambda x: x ** 2, lambda x: torch.square(x)],
                    wrong=[Wrong(lambda x: x + x, "times itself"), Wrong(lambda x: x.abs(), "expected"),
                           Wrong(lambda x: x.mul_(x), "in place")])
    assert assert_catalogue(cat) == {"correct": 2, "wrong": 3}


def test_catalogue_fails_when_a_wrong_answer_passes():
    cat = Catalogue(check_square, reference, correct=[lambda x: x ** 2, torch.square],
                    wrong=[Wrong(lambda x: x + x, "x"), Wrong(lambda x: x.abs(), "x"),
                           Wrong(lambda x: x * x + 0, "x", why="actually right")])
    with pytest.raises(AssertionError, match="accepts the wrong answer"):
        assert_catalogue(cat)
    assert len(accepted_wrong(cat)) == 1


def test_catalogue_fails_on_a_hint_that_names_nothing():
    cat = Catalogue(check_square, reference, correct=[lambda x: x ** 2, torch.square],
                    wrong=[Wrong(lambda x: x + x, "softmax"), Wrong(lambda x: x, "x"), Wrong(lambda x: -x, "x")])
    with pytest.raises(AssertionError, match="names none of"):
        assert_catalogue(cat)


def test_catalogue_fails_when_the_message_shows_the_reference():
    def leaky(fn):
        assert torch.equal(fn(torch.ones(2)), torch.ones(2)), "hint: squared = x * x"

    cat = Catalogue(leaky, reference, correct=[lambda x: x ** 2, torch.square],
                    wrong=[Wrong(lambda x: x + x, "hint"), Wrong(lambda x: x * 3, "hint"), Wrong(lambda x: x * 4, "hint")])
    with pytest.raises(AssertionError, match="shows the reference's code"):
        assert_catalogue(cat)


def test_catalogue_needs_enough_answers():
    with pytest.raises(AssertionError, match="two correct"):
        assert_catalogue(Catalogue(check_square, reference, correct=[torch.square], wrong=[]))


def test_call_unchanged_passes_copies_and_reports_in_place_changes():
    x = torch.arange(3.0)
    with pytest.raises(AssertionError, match="argument 0 in place"):
        call_unchanged(lambda t: t.fill_(0), x)
    assert torch.equal(x, torch.arange(3.0))
    with pytest.raises(AssertionError, match="'w' in place"):
        call_unchanged(lambda t, w: t * w.add_(1), x, w=torch.ones(3))
    leaf = torch.ones(2, requires_grad=True)
    out = call_unchanged(lambda t: (t * 2).sum(), leaf)
    out.backward()  # the copy keeps requires_grad, so a learner's backward still works
    assert call_unchanged(lambda ts: ts[0] + ts[1], [x, x]).tolist() == [0.0, 2.0, 4.0]
    with pytest.raises(AssertionError, match="in place"):
        call_unchanged(lambda ts: ts[1].zero_(), [x, x])


def test_refuse_calls_through_every_path_and_restores():
    sdpa = helpers.attention.scaled_dot_product_attention
    q = torch.randn(1, 2, 4)

    def direct(q):
        return sdpa(q, q, q)[0]

    def through_module(q):
        return helpers.attention.scaled_dot_product_attention(q, q, q)[0]

    def through_torch(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    def honest(q):
        return torch.softmax(q @ q.transpose(-2, -1) / 2, -1) @ q

    for fn in (direct, through_module):
        with pytest.raises(AssertionError, match="calls helpers.attention.scaled_dot_product_attention"):
            with refuse_calls(fn, sdpa, label="the build"):
                fn(q)
    with pytest.raises(AssertionError, match="calls torch.nn.functional.scaled_dot_product_attention"):
        with refuse_calls(through_torch, (torch.nn.functional, "scaled_dot_product_attention")):
            through_torch(q)
    with refuse_calls(honest, sdpa, (torch.nn.functional, "scaled_dot_product_attention")):
        honest(q)
    assert helpers.attention.scaled_dot_product_attention is sdpa
    assert direct.__globals__["sdpa"] is sdpa if "sdpa" in direct.__globals__ else True
    assert torch.nn.functional.scaled_dot_product_attention(q, q, q).shape == q.shape
    with pytest.raises(TypeError, match="targets"):
        with refuse_calls(honest, 3):
            pass
    with pytest.raises(TypeError, match="targets"):
        with refuse_calls(honest, (math, "no_such")):
            pass


class Head(torch.nn.Module):
    def forward(self, x):
        return helpers.attention.scaled_dot_product_attention(x, x, x)[0]


def test_refuse_calls_sees_a_class_methods():
    with pytest.raises(AssertionError, match="calls"):
        with refuse_calls(Head, helpers.attention.scaled_dot_product_attention):
            Head()(torch.randn(1, 2, 4))


def test_refuse_calls_puts_back_classmethods_and_inherited_attributes_exactly():
    class Base:
        @classmethod
        def make(cls):
            return cls

        @staticmethod
        def one():
            return 1

    class Child(Base):
        pass

    before = dict(vars(Base))
    for name in ("make", "one"):
        with refuse_calls(lambda: None, (Base, name)), pytest.raises(AssertionError, match="your answer calls"):
            getattr(Base, name)()
    assert dict(vars(Base)) == before  # the classmethod object itself, not a bound method, is back
    with refuse_calls(lambda: None, (Child, "make")), pytest.raises(AssertionError):
        Child.make()
    assert "make" not in vars(Child) and Child.make() is Child  # inherited again, not shadowed


def test_call_unchanged_sees_a_list_of_ints_edited_in_place():
    def merge_in_place(ids):
        ids[0:2] = [256]
        return ids

    with pytest.raises(AssertionError, match="in place"):
        call_unchanged(merge_in_place, [1, 2, 3])
    assert call_unchanged(lambda ids: [*ids, 4], [1, 2, float("nan")])[-1] == 4
