"""The checks of notebook 04 (attention): its builds and exercises.

Each check compares the learner's answer with ``helpers.attention`` or PyTorch on inputs chosen to
reveal a classic mistake, says which one when it can, passes the learner copies of its inputs
(``call_unchanged``) and refuses an answer that calls the helper it reproduces (``refuse_calls``).
Proven by tests/test_catalogue_nb04.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import helpers.attention as attention
from helpers.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from helpers.compare import check_close
from helpers.exercises import call_unchanged, refuse_calls
from helpers.positional import sinusoidal_table

__all__ = ["check_attention_head", "check_exercise_1", "check_exercise_2", "check_exercise_3", "check_exercise_4"]

# The helpers an answer must not call: they compute what the exercises ask for.
_ATTENTION = (attention.scaled_dot_product_attention, (F, "scaled_dot_product_attention"),
              (MultiHeadAttention, "forward"), (nn.MultiheadAttention, "forward"),
              (F, "multi_head_attention_forward"))


def _call(fn: Callable, *args, case: str, label: str, targets=_ATTENTION, owner=None):
    """fn(*copies of args), refusing calls to ``targets``; a torch error becomes a message that names its cause.

    owner: the learner's function or class whose module-level names are patched (default: fn).
    """
    __tracebackhide__ = True
    try:
        with refuse_calls(fn if owner is None else owner, *targets, label=label):
            return call_unchanged(fn, *args, label=label)
    except NotImplementedError:
        raise  # the stub: attempt() says 'not done yet'
    except RuntimeError as err:
        text = str(err)
        if "without overflow" in text:
            cause = ("a finite fill such as -1e9 does not fit in float16 (largest magnitude 65504): "
                     "fill blocked scores with float('-inf'), exact in every dtype")
        elif "in-place" in text or "inplace" in text:
            cause = "it changes its input in place (masked_fill_, +=...): compute a new tensor"
        elif "must match the size" in text or "broadcast" in text:
            cause = ("shapes do not line up: a mask made for another length than T, or a sum or max over the last "
                     "axis that dropped it (keepdim=True)?")
        else:
            cause = "see torch's message"
        raise AssertionError(f"{case}: {label} raised RuntimeError ({text.splitlines()[0]}); {cause}") from err


def _reference_weights(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The helpers' masked softmax of exactly these scores, in float32: q = scores, k = I, scale 1."""
    s = scores.detach().float()
    eye = torch.eye(s.shape[-1])  # (T_k, T_k): s @ eyeᵀ = s exactly
    return scaled_dot_product_attention(s, eye, eye, mask=mask, scale=1.0)[1]


def check_exercise_1(masked_softmax):
    """Exercise 1: a NaN-safe masked softmax, compared with the helpers' on the very scores passed in."""
    g = torch.Generator().manual_seed(0)
    keep_rows = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])  # (3, 4): row 1 allows nothing
    pad = torch.tensor([[True, True, False, False], [False] * 4])[:, None, None]  # (2, 1, 1, 4): sentence 1 all pad
    cases = [("a fully masked row", keep_rows, torch.float32, 0.0), ("padding over heads", pad, torch.float32, 0.0),
             ("a blocked key 200 above the allowed ones", keep_rows, torch.float32, 200.0),
             ("float16", keep_rows, torch.float16, 0.0)]
    for case, mask, dtype, lift in cases:
        q, k = torch.randn(2, 2, 3, 8, generator=g) * 3, torch.randn(2, 2, 4, 8, generator=g) * 3  # (B, H, T_q|T_k, d)
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)  # (B, H, 3, 4)
        scores[..., 1] += lift  # key 1: blocked in row 0, allowed in row 2
        scores = scores.to(dtype)
        expected = _reference_weights(scores, mask)  # float32, from the same (rounded) scores the learner gets
        got = _call(masked_softmax, scores.requires_grad_(), mask, case=case, label="masked_softmax")
        assert isinstance(got, torch.Tensor), f"{case}: expected a tensor, got {type(got).__name__}"
        assert got.shape == scores.shape, f"{case}: expected shape {tuple(scores.shape)}, got {tuple(got.shape)}"
        assert got.dtype == dtype, f"{case}: expected dtype {dtype} (the scores' dtype), got {got.dtype}"
        blocked = ~mask.expand_as(got)  # (B, H, 3, 4)
        empty = blocked.all(-1, keepdim=True)  # (B, H, 3, 1): rows with nothing allowed
        nan_rows = got.detach().isnan().any(-1, keepdim=True)  # (B, H, 3, 1)
        assert not (nan_rows & empty).any(), (
            f"{case}: NaN in the rows with no allowed key (softmax of all -inf is 0/0): such a row must be all zeros")
        assert not nan_rows.any(), f"{case}: NaN in rows that have allowed keys"
        got = got.detach()
        assert (got[blocked & ~empty] == 0).all(), f"{case}: blocked keys must get exactly 0 weight"
        assert (got[empty.expand_as(got)] == 0).all(), (
            f"{case}: a row with no allowed key must be all zeros (not uniform weights over forbidden keys), "
            f"got {got[empty.squeeze(-1)][0].tolist()}")
        dead = ~empty.squeeze(-1) & (got.float().sum(-1) < 0.5)  # (B, H, 3): rows with allowed keys and ~no weight
        assert not dead.any(), (
            f"{case}: the allowed keys got (almost) no weight in {int(dead.sum())} rows: a softmax taken before masking "
            "underflows to 0 when a blocked key's score is far above the allowed ones; mask the scores first")
        # float16: the weights are rounded to float16 (eps 9.8e-4) after a few roundings of exp and the sum.
        atol = 4 * torch.finfo(torch.float16).eps if dtype == torch.float16 else 1e-6
        check_close(f"{case}: weights", got.float(), expected, atol=atol, quiet=True)
        leaf = scores.detach().clone().requires_grad_()
        with refuse_calls(masked_softmax, *_ATTENTION, label="masked_softmax"):
            masked_softmax(leaf, mask.clone()).float().pow(2).sum().backward()
        assert leaf.grad is not None and leaf.grad.isfinite().all(), (
            f"{case}: the backward pass gives NaN or inf in the gradient of the scores "
            "(0 * NaN: a NaN or inf inside the graph survives even where the output was fixed afterwards)")
    print("exercise 1: correct")


def _head_mistakes(q, k, v, x, causal):
    """What the classic mistakes of the single head compute from its own q, k, v: (output, cause) pairs.

    Each is torch's kernel with one argument changed (the weights themselves come out of it with the
    identity as values), so this file shows the mistakes, not the computation the build asks for.
    """
    T, hs, C = q.shape[-2], k.shape[-1], x.shape[-1]
    sdpa, eye, lower = F.scaled_dot_product_attention, torch.eye(T), causal_mask(T)  # lower: (T, T), key s <= t
    yield sdpa(q, k, v, is_causal=causal, scale=1.0), (
        "no scale: divide the scores by √hs (d_k is the head size), or the softmax saturates")
    yield sdpa(q, k, v, is_causal=causal, scale=1 / hs), (
        "scaled by 1/hs: the scale is 1/√hs, the square root of the head size")
    yield sdpa(q, k, v, is_causal=causal, scale=C**-0.5), (
        "scaled by 1/√C (the width C): the scale is 1/√hs, the head size (k's last axis)")
    over_queries = sdpa(k, q, eye, attn_mask=lower.T if causal else None).transpose(-2, -1)  # (B, T, T)
    yield over_queries @ v, ("the softmax runs over the queries (axis -2): take the softmax over the keys (the last "
                             "axis), so that each query's weights sum to 1")
    yield sdpa(k, q, v, is_causal=causal), (
        "the scores are k qᵀ: score[t, s] must be q_t · k_s, the query of t against the key of s")
    yield sdpa(q, k, k, is_causal=causal), "k used as the values: the weights multiply v = self.value(x)"
    if C == hs:
        yield sdpa(q, k, x, is_causal=causal), "x used as the values: the weights multiply v = self.value(x), not x"
    if causal:
        yield sdpa(q, k, v), "causal=True is ignored: key s > t must get exactly 0 weight (-inf before the softmax)"
        yield sdpa(q, k, v, attn_mask=torch.ones(T, T, dtype=torch.bool).tril(1)), (
            "the causal mask is off by one: query t may see keys s <= t, not t + 1")
        yield sdpa(q, k, eye) * lower @ v, ("the mask came after the softmax: fill the blocked scores with -inf "
                                            "before it, so that the allowed weights sum to 1")
    else:
        yield sdpa(q, k, v, is_causal=True), "masked with causal=False: mask only when causal is True"


def check_attention_head(cls):
    """The single-head build: cls(C, hs, bias)(x, causal) against F.scaled_dot_product_attention on its projections.

    The class keeps the three projections the stub makes, ``self.query``, ``self.key`` and
    ``self.value`` (each ``nn.Linear(C, hs, bias=bias)``); ``forward(x, causal=False)`` takes x (B, T, C)
    and returns (B, T, hs). A wrong answer that matches a classic mistake is told which one.
    """
    g = torch.Generator().manual_seed(0)
    hints = {"head size = width": "check q, k, v (one projection each), q kᵀ, the softmax over the keys (the last axis), "
                                  "times v",
             "head size 4 < width 12": "with hs = C you matched: the scale is 1/√hs, the head size (k's last axis), "
                                       "not 1/√C",
             "causal, head size 4 < width 12": "without the mask you match: with causal=True, key s > t must get "
                                               "exactly 0 weight (-inf before the softmax)",
             "causal, one token": "one token sees only itself"}
    for case, (B, T, C, hs), causal, bias in [("head size = width", (2, 5, 8, 8), False, False),
                                              ("head size 4 < width 12", (2, 6, 12, 4), False, True),
                                              ("causal, head size 4 < width 12", (2, 6, 12, 4), True, True),
                                              ("causal, one token", (3, 1, 12, 4), True, False)]:
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=g)))
            head = cls(C, hs, bias=bias)
        for name in ("query", "key", "value"):
            lin = getattr(head, name, None)
            assert isinstance(lin, nn.Linear) and (lin.in_features, lin.out_features) == (C, hs), (
                f"{case}: keep the stub's __init__: self.{name} must be nn.Linear(C, hs, bias=bias) = "
                f"nn.Linear({C}, {hs}), got {lin!r}")
        x = torch.randn(B, T, C, generator=g) * 2
        with torch.no_grad():
            q, k, v = head.query(x), head.key(x), head.value(x)  # (B, T, hs) each
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            got = _call(head, x, causal, case=case, label="SelfAttentionHead.forward", owner=cls)
        assert isinstance(got, torch.Tensor), f"{case}: expected a tensor, got {type(got).__name__}"
        assert tuple(got.shape) == (B, T, hs), f"{case}: expected shape {(B, T, hs)} = (B, T, hs), got {tuple(got.shape)}"
        got = got.detach().float()
        assert not got.isnan().any(), (
            f"{case}: NaN in the output: a softmax row with every key blocked (all -inf) is 0/0; with causal=True "
            "query t keeps the keys s <= t, the diagonal included")
        err = (got - expected).abs().max().item()
        if err > 1e-5:
            with torch.no_grad():
                cause = next((why for out, why in _head_mistakes(q, k, v, x, causal)
                              if out.shape == got.shape and (got - out).abs().max() <= 1e-5), hints[case])
            raise AssertionError(f"{case}: off by up to {err:.3g}; {cause}")
    print("the attention head: correct")


def check_exercise_2(multi_head_attention):
    """Exercise 2: multi-head attention by hand, against nn.MultiheadAttention; failures narrow down the step."""
    g = torch.Generator().manual_seed(0)
    cases = [("one head", 2, 5, 8, 1), ("one token, 3 heads", 2, 1, 12, 3), ("equal scores, 3 heads", 2, 5, 12, 3),
             ("3 heads", 2, 5, 12, 3), ("4 heads, odd sizes", 3, 7, 16, 4)]
    hints = {"one head": "even with one head (no split to get wrong): check the projections, the biases, the softmax "
                         "axis (over the keys), the scale 1/√hs and W_O",
             "one token, 3 heads": "with one token each head attends to it alone: check that the heads are concatenated "
                                   "in order",
             "equal scores, 3 heads": "with W_K = 0 every score is equal, so the split of q, k and the scale do not "
                                      "matter: check how v is split into heads and merged back",
             "3 heads": "the split or the scale: does each head get hs consecutive features of *every* token, "
                        "and is the scale 1/√hs (the head size)?",
             "4 heads, odd sizes": "the split, the scale or the merge at other sizes"}
    for case, B, T, C, H in cases:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            ref = nn.MultiheadAttention(C, H, batch_first=True).eval()
            with torch.no_grad():
                ref.in_proj_bias.normal_()  # PyTorch starts the biases at 0: make them count
                ref.out_proj.bias.normal_()
                if case.startswith("equal"):
                    ref.in_proj_weight[C : 2 * C] = 0  # W_K = 0: every key the same
        x = torch.randn(B, T, C, generator=g)
        with torch.no_grad():
            expected = ref(x, x, x, need_weights=False)[0]
            got = _call(multi_head_attention, x, ref, case=case, label="multi_head_attention")
        assert isinstance(got, torch.Tensor), f"{case}: expected a tensor, got {type(got).__name__}"
        assert got.shape == expected.shape, f"{case}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        assert torch.allclose(got, expected, atol=1e-5), (
            f"{case}: off by up to {(got - expected).abs().max():.3f}; {hints[case]}")
    print("exercise 2: correct")


def check_exercise_3(two_back_scores):
    """Exercise 3: a head's scores that peak at key t - 2, built from the position table alone."""
    for T, C in [(8, 16), (12, 32), (6, 64)]:
        pe = sinusoidal_table(T, C)  # (T, C)
        scores = _call(two_back_scores, pe, case=f"T={T}, C={C}", label="two_back_scores", targets=())
        assert isinstance(scores, torch.Tensor), f"T={T}, C={C}: expected a tensor, got {type(scores).__name__}"
        assert tuple(scores.shape) == (T, T), f"T={T}, C={C}: expected shape ({T}, {T}), got {tuple(scores.shape)}"
        # A head's score is q_t · k_s with q_t = p_t W_Q and k_s = p_s W_K: it depends on rows t and s of pe only,
        # so permuting the rows of pe permutes the scores. A shift of the score matrix, or keys taken from
        # another table than pe, is not a head.
        perm = torch.randperm(T, generator=torch.Generator().manual_seed(T))
        shuffled = _call(two_back_scores, pe[perm], case=f"T={T}, C={C}", label="two_back_scores", targets=())
        assert torch.allclose(shuffled, scores[perm][:, perm], atol=1e-4), (
            f"T={T}, C={C}: this is not a head: score[t, s] must be q_t · k_s, computed from the rows p_t and p_s of "
            "pe alone (q = pe W_Q, k = pe W_K); permuting pe's rows must permute the scores, and yours change otherwise "
            "(a shifted or rolled score matrix, or keys from another table, is not a head)")
        w = torch.softmax((8 * scores.float()).masked_fill(~causal_mask(T), float("-inf")), dim=-1)  # (T, T)
        rows = torch.arange(2, T)
        on_target = w[rows, rows - 2]  # (T - 2,)
        assert on_target.min() > 0.9, (f"T={T}, C={C}: query t should put ≥ 0.9 on key t-2; it puts "
                                       f"{[round(v, 2) for v in on_target.tolist()]} (argmax per query "
                                       f"{w.argmax(-1).tolist()})")
    print("exercise 3: correct")


class _NoFullScores(TorchDispatchMode):
    """Fails as soon as an operation produces a floating tensor whose last two axes are (T_q, T_k)."""

    def __init__(self, T_q: int, T_k: int):
        super().__init__()
        self.shape, self.culprit = (T_q, T_k), None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2
                    and tuple(t.shape[-2:]) == self.shape and self.culprit is None):
                self.culprit = str(func)
        return out


def check_exercise_4(masked_online_attention):
    """Exercise 4: the online softmax with a mask, block by block, against the helpers' attention."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 10, 8, generator=g).unbind(0)  # (B, T, d) each
    pad = torch.tensor([False] * 6 + [True] * 4)  # (T_k,): six left pads, so block 0 is all pad
    cases = {"causal": causal_mask(10), "left padding & causal": causal_mask(10) & pad}  # the second: rows 0-5 see nothing
    for case, mask in cases.items():
        empty = ~mask.any(-1)  # (T_q,): rows with nothing allowed
        for block in (3, 4, 16):
            name = f"{case}, block={block}"
            expected = scaled_dot_product_attention(q, k, v, mask=mask)[0]  # (B, T, d)
            watch = _NoFullScores(10, 10)
            with watch:
                got = _call(masked_online_attention, q, k, v, mask, block, case=name, label="masked_online_attention")
            assert block >= 10 or watch.culprit is None, (
                f"{name}: your code built a full (T_q, T_k) = (10, 10) matrix of scores or weights ({watch.culprit}): "
                "the online softmax holds only one block of `block` keys at a time")
            assert isinstance(got, torch.Tensor), f"{name}: expected a tensor, got {type(got).__name__}"
            assert got.shape == expected.shape, f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
            nan_rows = got.isnan().any(-1).any(0)  # (T_q,)
            assert not (nan_rows & ~empty).any(), (
                f"{name}: NaN in rows {nan_rows.nonzero().flatten().tolist()} that do have allowed keys: "
                "while every key so far was masked, the running max is -inf and exp(-inf - (-inf)) is NaN")
            assert not nan_rows.any(), (
                f"{name}: NaN in rows {nan_rows.nonzero().flatten().tolist()}, which allow no key at all: their running "
                "sum ℓ stays 0, and acc / ℓ is 0 / 0; such a row's output must be 0")
            err = (got - expected).abs().max().item()
            assert err <= 1e-5, (
                f"{name}: off by up to {err:.3g}; when a block raises the running max, what was summed so far (ℓ and "
                "the weighted values) must be rescaled by exp(m_old - m_new), and each block uses its own slice of the mask")
    print("exercise 4: correct")
