"""Checks of notebook 06b (the bug clinic). Here the learner writes checks; these check the checks.

- ``check_exercise_1``: ``leaks_future(attn)``, a causality detector, against one right attention and
  six whose masks leak in different places (a single row, a single far position, ...).
- ``check_exercise_2``: ``pe_is_right(add_pe)``, a positional-encoding check that Bug 5 (``size(0)``
  for ``size(1)``) cannot pass.
- ``check_exercise_3``: ``healthy(model)``, the learner's diagnosis of a `Patient` (a small causal language
  model with a four-promise spec) against a clean patient and three with hidden bugs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from helpers.positional import sinusoidal_table

__all__ = ["PAD", "Patient", "check_exercise_1", "check_exercise_2", "check_exercise_3", "patient_with_two_bugs",
           "table_pe"]

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


# ---------------------------------------------------------------- exercise 3: the patient
# Read below this line only after your diagnosis: the patient's source says what is wrong with it.

PAD = 0  # the padding id of the patient's vocabulary


class Patient(nn.Module):
    """A small causal language model with a spec; some patients break it (exercise 3).

    The spec (what a healthy patient keeps):
    1. ``model(idx)`` takes ids (B, T) in ``[0, vocab_size)``, T ≤ ``block_size``, and returns
       ``(logits (B, T, vocab_size), None)``; ``model(idx, targets)`` returns ``(logits, loss)``.
    2. Causal: the logits at position t depend on ``idx[:, :t + 1]`` only.
    3. The loss is the mean next-token cross-entropy of ``logits`` against ``targets`` over the
       positions whose target is not ``pad_id`` (padding does not count).
    4. Each sequence of the batch is computed independently of the others.
    """

    vocab_size, block_size, pad_id = 12, 8, PAD

    def __init__(self, seed: int = 0, *, _softmax_then_mask: bool = False, _count_padding: bool = False):
        super().__init__()
        C = 16  # two heads of size 8
        with torch.random.fork_rng():  # the caller's random stream is left as it was
            torch.manual_seed(seed)
            self.tok, self.pos = nn.Embedding(self.vocab_size, C), nn.Embedding(self.block_size, C)
            self.ln1, self.ln2, self.ln_f = nn.LayerNorm(C), nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))
            self.head = nn.Linear(C, self.vocab_size)
            nn.init.normal_(self.qkv.weight, std=0.5)  # sharper attention than PyTorch's default init
        self._late_mask, self._pads_count = _softmax_then_mask, _count_padding

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        h = self.tok(idx) + self.pos(torch.arange(T))  # (B, T, C)
        q, k, v = self.qkv(self.ln1(h)).view(B, T, 3, 2, -1).permute(2, 0, 3, 1, 4)  # 3 × (B, 2, T, 8)
        s = q @ k.transpose(-2, -1) / 8**0.5  # (B, 2, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
        if self._late_mask:  # masked after the softmax: the row's normaliser still sums later scores
            w = s.softmax(-1).masked_fill(~causal, 0.0)
        else:
            w = s.masked_fill(~causal, float("-inf")).softmax(-1)  # (B, 2, T, T)
        h = h + self.proj((w @ v).transpose(1, 2).reshape(B, T, -1))  # (B, T, C)
        logits = self.head(self.ln_f(h + self.mlp(self.ln2(h))))  # (B, T, V)
        if targets is None:
            return logits, None
        ignore = -100 if self._pads_count else self.pad_id  # -100 matches nothing: padding counts
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore)


def patient_with_two_bugs(seed: int = 0) -> Patient:
    """The patient of exercise 3: it runs, its shapes are right, its loss at init is within 0.4 nats of ln V."""
    return Patient(seed, _softmax_then_mask=True, _count_padding=True)


def check_exercise_3(healthy):
    """``healthy(model) -> bool``: True for a patient that keeps the spec, False for one with a bug."""
    cases = [("the clean patient", {}, True,
              " — one of your checks fails on a correct model: compare with what the spec says exactly "
              "(which positions count in the loss?) and use a tolerance for float rounding (1e-5)"),
             ("patient A (one hidden bug)", {"_softmax_then_mask": True}, False,
              " — its bug breaks a promise about positions: change one later token and watch earlier logits"),
             ("patient B (one hidden bug)", {"_count_padding": True}, False,
              " — its bug breaks a promise about the loss: compute the loss the spec describes from its logits "
              "(with padded targets) and compare"),
             ("the patient with two bugs", {"_softmax_then_mask": True, "_count_padding": True}, False, "")]
    for seed in (0, 1):
        for name, bugs, right, hint in cases:
            got = healthy(Patient(seed, **bugs))
            assert isinstance(got, bool), f"return a bool, got {type(got).__name__}"
            assert got == right, f"{name}, seed {seed}: expected healthy = {right}, got {got}{hint}"
    print("exercise 3: correct")
