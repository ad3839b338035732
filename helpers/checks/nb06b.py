"""Checks of notebook 06b (the bug clinic). Here the learner writes checks; these check the checks.

- ``check_exercise_1``: ``leaks_future(attn)``, a causality detector, against one right attention and
  six whose masks leak in different places (a single row, a single far position, ...).
- ``check_exercise_2``: ``pe_is_right(add_pe)``, a positional-encoding check that Bug 5 (``size(0)``
  for ``size(1)``) cannot pass.
"""

from __future__ import annotations

import torch

from helpers.positional import sinusoidal_table

__all__ = ["check_exercise_1", "check_exercise_2", "table_pe"]

table_pe = sinusoidal_table(16, 32)  # (max_len, C): the table of Bug 5


def _attention(mask, Wq, Wk, Wv, C):
    """One head whose (T, T) mask says what each row may read (True = may)."""

    def attn(x):  # (B, T, C) -> (B, T, C)
        t = x.shape[1]
        s = (x @ Wq) @ (x @ Wk).transpose(-2, -1) / C**0.5  # (B, t, t)
        return s.masked_fill(~mask[:t, :t], float("-inf")).softmax(-1) @ (x @ Wv)

    return attn


def check_exercise_1(leaks_future):
    """Seven attentions over T = 6 positions, C = 8: causal (no leak) and six masks that leak."""
    T, C = 6, 8
    g = torch.Generator().manual_seed(0)
    Wq, Wk, Wv = (torch.randn(C, C, generator=g) / C**0.5 for _ in range(3))
    ones = torch.ones(T, T, dtype=torch.bool)

    def leak(row, col, only=False):
        m = ones.tril().clone()
        if only:
            m[row] = False
        m[row, col] = True
        return m

    cases = [("causal", ones.tril(), False, "no row reads a later position"),
             ("no mask", ones, True, "every row reads every position"),
             ("one step ahead", ones.tril(1), True, "row t also reads t + 1"),
             ("only row 0 leaks", leak(0, 1), True, "row 0 also reads position 1"),
             ("only row 3 leaks", leak(3, 4), True, "row 3 also reads position 4; rows 0-2 and 4-5 are causal"),
             ("row 0 reads position 5 only", leak(0, 5, only=True), True,
              "row 0 reads position 5 and nothing else: a leak five positions ahead"),
             ("the future only", ones.triu(), True, "row t reads t and everything after it")]
    for name, mask, leaks, what in cases:
        got = leaks_future(_attention(mask, Wq, Wk, Wv, C))
        assert isinstance(got, bool), f"return a bool, got {type(got).__name__}"
        assert got == leaks, (f"{name} attention ({what}): expected leaks_future = {leaks}, got {got}"
                              + (" — change one input position at a time, every position, and look at every "
                                 "earlier output row" if leaks else
                                 " — only rows *before* the position you changed must stay put; the row at that "
                                 "position itself may move"))
    print("exercise 1: correct")


def check_exercise_2(pe_is_right):
    """Four ways to add a positional table: right, Bug 5 (size(0)), shifted by one, first sequence only."""
    cases = [("right", lambda x: x + table_pe[: x.size(1)], True, ""),
             ("Bug 5, size(0)", lambda x: x + table_pe[: x.size(0)], False,
              " — a batch and a length that differ (B ≠ T, B > 1) make Bug 5 show: it crashes or gives wrong rows"),
             ("shifted by one position", lambda x: x + table_pe[1 : x.size(1) + 1], False,
              " — compare what was added at position t with row t of table_pe itself"),
             ("first sequence only", lambda x: torch.cat([x[:1] + table_pe[: x.size(1)], x[1:]]), False,
              " — look at every sequence of the batch, not only the first (and use B > 1)")]
    for name, add_pe, right, hint in cases:
        try:
            got = pe_is_right(add_pe)
        except (AssertionError, NotImplementedError):  # a failed assert, or the stub not done yet
            raise
        except Exception as err:  # noqa: BLE001 - any crash of the learner's check is reported as such
            raise AssertionError(f"{name}: your pe_is_right raised {type(err).__name__} ({err}); a crash of add_pe "
                                 "must count as False: catch it") from err
        assert isinstance(got, bool), f"return a bool, got {type(got).__name__}"
        assert got == right, f"{name}: expected pe_is_right = {right}, got {got}{hint}"
    print("exercise 2: correct")
