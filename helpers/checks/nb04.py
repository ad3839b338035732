"""The checks of notebook 04 (attention): its builds and exercises.

Each check compares the learner's answer with ``helpers.attention`` or PyTorch on inputs chosen to
reveal a classic mistake, says which one when it can, passes the learner copies of its inputs
(``call_unchanged``) and refuses an answer that calls the helper it reproduces (``refuse_calls``).
Proven by tests/test_catalogue_nb04.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial, reduce

import torch
import torch.nn.functional as F
from torch import nn

import helpers.attention as attention
from helpers.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from helpers.compare import check_close
from helpers.exercises import call_unchanged, refuse_calls

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


def _newline_mistakes(weights: torch.Tensor, text: str):
    """What the classic mistakes of exercise 3 compute: (scores (L, H), cause) pairs, for the message."""
    T = len(text)
    pos = torch.arange(T)  # (T,)
    nl = torch.tensor([c == "\n" for c in text])  # (T,) bool
    before = nl[None, :] & (pos[None, :] < pos[:, None])  # (T, T): key s is a newline strictly before query t
    upto = nl[None, :] & (pos[None, :] <= pos[:, None])  # (T, T): the query's own newline counts too
    first = torch.where(before, pos, T).amin(-1)  # (T,): the earliest newline before t (T if none)
    latest = torch.where(before, pos, -1).amax(-1)  # (T,): the latest newline before t (-1 if none)
    has = latest >= 0  # (T,)
    rows = has.nonzero().flatten()  # the queries that count

    def mean_on(w, target, queries=rows):  # (L, H, T, T), (T,) -> (L, H)
        return w[..., queries, target[queries]].mean(-1)

    own = torch.where(upto, pos, -1).amax(-1)  # (T,)
    yield mean_on(weights, own, (own >= 0).nonzero().flatten()), (
        "a query that is itself a newline counts its own position: take the latest newline strictly before t")
    yield mean_on(weights, first), "the first newline of the text: take the latest one before t (the current line's)"
    yield weights[..., pos, latest.clamp(min=0)].masked_fill(~has, 0).mean(-1), (
        "averaged over every query: average only over the queries that have a newline before them")
    yield mean_on(weights.transpose(-2, -1), latest), (
        "weights[l, h, t, s] is what query t (a row) puts on key s (a column): the axes are swapped")
    after = latest + 1  # the first character of the line
    yield mean_on(weights, after, (has & (after <= pos)).nonzero().flatten()), (
        "the character after the newline: score the newline character itself")
    yield (weights * before).sum(-1)[..., rows].mean(-1), (
        "the weight on every newline before t, summed: score only the latest one")
    yield weights[..., rows, latest[rows]].sum(-1), "a sum over the queries: take their mean"


def check_exercise_3(newline_scores):
    """Exercise 3: per head, the mean weight a query puts on the latest newline before it.

    newline_scores(weights (L, H, T, T), text of T characters) -> (L, H). Compared on random causal
    weights (a head's rows: each sums to 1 over keys s <= t) and texts with consecutive newlines, a
    newline first and last, and long runs without one.
    """
    g = torch.Generator().manual_seed(0)
    texts = ["ab\ncd\n\nef g", "\nx = 1\ny = 2\n", "no newline for a while, then\none\n\n\nand more text",
             "def f(x):\n    return x\n\nprint(f(2))"]
    for text in texts:
        case = f"text {text!r}"
        T, L, H = len(text), 2, 3
        causal = causal_mask(T)  # (T, T)
        weights = torch.softmax((torch.randn(L, H, T, T, generator=g) * 2).masked_fill(~causal, float("-inf")), -1)
        pos = torch.arange(T)
        nl = torch.tensor([c == "\n" for c in text])  # (T,)
        latest = torch.where(nl[None, :] & (pos[None, :] < pos[:, None]), pos, -1).amax(-1)  # (T,)
        rows = (latest >= 0).nonzero().flatten()
        expected = weights[..., rows, latest[rows]].mean(-1)  # (L, H)
        got = _call(newline_scores, weights, text, case=case, label="newline_scores", targets=())
        assert isinstance(got, torch.Tensor), f"{case}: expected a tensor, got {type(got).__name__}"
        assert tuple(got.shape) == (L, H), (
            f"{case}: expected shape ({L}, {H}) = (layers, heads), one score per head, got {tuple(got.shape)}")
        got = got.detach().double()
        assert got.isfinite().all(), f"{case}: NaN or inf in the scores: a mean over no query, or a division by 0?"
        err = (got - expected.double()).abs().max().item()
        if err > 1e-5:
            cause = next((why for wrong, why in _newline_mistakes(weights, text)
                          if wrong.shape == got.shape and (got - wrong.double()).abs().max() <= 1e-5),
                         "for each query t, find the latest newline s < t; average weights[l, h, t, s] over "
                         "the queries that have one")
            raise AssertionError(f"{case}: off by up to {err:.3g}; {cause}")
    print("exercise 3: correct")


def _chunk_state(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor):
    """The online-softmax state (m, ell, acc) of one chunk of keys; m = -inf, ell = 0, acc = 0 where none is allowed."""
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))  # (B, T_q, n)
    m = s.amax(-1, keepdim=True)  # (B, T_q, 1)
    p = torch.exp(s - m.clamp(min=torch.finfo(s.dtype).min))  # (B, T_q, n): exp(-inf) = 0 where blocked
    return m, p.sum(-1, keepdim=True), p @ v  # (B, T_q, 1), (B, T_q, 1), (B, T_q, d_v)


def _merge_call(merge, a, b, case):
    __tracebackhide__ = True
    got = _call(merge, a, b, case=case, label="merge")
    assert isinstance(got, tuple) and len(got) == 3 and all(isinstance(t, torch.Tensor) for t in got), (
        f"{case}: merge must return a tuple of three tensors (m, ell, acc), got {type(got).__name__}")
    for name, t, ref in zip(("m", "ell", "acc"), got, a, strict=True):
        assert t.shape == ref.shape, f"{case}: {name} should keep its shape {tuple(ref.shape)}, got {tuple(t.shape)}"
    return got


def check_exercise_4(merge):
    """Exercise 4: merge two online-softmax states (m, ell, acc) of disjoint key chunks, masks included.

    The chunks' states are merged in several orders (left to right, right to left, a tree, swapped
    arguments); acc / ell of the result must equal the helpers' masked attention over all keys, rows
    with no allowed key giving 0.
    """
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, 8, generator=g) * 2 for n in (10, 12, 12))  # (B, T_q, d), (B, T_k, d) twice
    pad = torch.tensor([False] * 6 + [True] * 6)  # (T_k,): six left pads, so the first chunks are all pad
    wide = torch.ones(10, 12, dtype=torch.bool).tril(2)  # (T_q, T_k): causal, keys 2 ahead (T_k = T_q + 2)
    cases = {"causal": wide, "left padding & causal": wide & pad}  # the second: rows 0-3 see no key at all
    # one merge, checked directly: the larger max, and both sums moved onto it
    a = (torch.tensor([[0.0], [float("-inf")], [2.0]]), torch.tensor([[2.0], [0.0], [1.0]]), torch.tensor([[4.0], [0.0], [3.0]]))
    b = (torch.tensor([[1.0], [float("-inf")], [float("-inf")]]), torch.tensor([[1.0], [0.0], [0.0]]),
         torch.tensor([[5.0], [0.0], [0.0]]))
    m, ell, acc = _merge_call(merge, a, b, "one merge")
    bad = ~(ell.isfinite() & acc.isfinite()).squeeze(-1)  # (3,): row 1 has both states empty
    assert not bad[1], (
        "one merge: NaN where both states are empty (m = -inf, ell = 0, acc = 0 in both: no allowed key yet); the "
        "merged state must be empty too. Each factor exp(m_x - m) is at most 1 (m is the larger max), but here it "
        "gives NaN (exp(-inf - (-inf)) = NaN, or 0 · inf): make it 0, nothing was summed")
    assert not bad.any(), (
        f"one merge: NaN or inf in rows {bad.nonzero().flatten().tolist()}, where at most one state is empty: "
        "rescale each state by exp(m_x - m) with m the larger max, a factor of at most 1 (0 for an empty state)")
    assert torch.equal(m[[0, 2]], torch.tensor([[1.0], [2.0]])), (
        f"one merge: the merged m must be the larger of the two maxima, got {m.flatten().tolist()}")
    want_ell = torch.tensor([[2 * math.exp(-1) + 1.0], [0.0], [1.0]])
    want_acc = torch.tensor([[4 * math.exp(-1) + 5.0], [0.0], [3.0]])
    if not torch.allclose(ell, want_ell, atol=1e-6):
        raise AssertionError(
            f"one merge: m_a = 0, ell_a = 2 and m_b = 1, ell_b = 1 should give ell = 2·e^(0-1) + 1·e^(1-1) = "
            f"{want_ell[0, 0]:.4f}, got {ell[0, 0]:.4f} (a row with one state empty keeps the other: "
            f"{ell[2, 0]:.4f}, want 1): each state is summed against its own max; rescale ell and acc of both "
            "by exp(m_x - m) onto the merged max m before adding")
    if not torch.allclose(acc, want_acc, atol=1e-6):
        raise AssertionError(
            f"one merge: ell is right but acc is not: acc_a = 4, acc_b = 5 should give 4·e^(0-1) + 5·e^(1-1) = "
            f"{want_acc[0, 0]:.4f}, got {acc[0, 0]:.4f}: rescale acc by the same factors exp(m_x - m) as ell")
    for case, mask in cases.items():
        expected = scaled_dot_product_attention(q, k, v, mask=mask)[0]  # (B, T_q, d)
        empty = ~mask.any(-1)  # (T_q,)
        for sizes in ((3, 3, 3, 3), (4, 5, 3), (6, 6)):
            chunks = [_chunk_state(q, kc, vc, mc) for kc, vc, mc in
                      zip(k.split(sizes, 1), v.split(sizes, 1), mask.split(sizes, -1), strict=True)]
            for order, fold in _ORDERS.items():
                name = f"{case}, chunks of {sizes}, merged {order}"
                m, ell, acc = fold(chunks, partial(_merge_call, merge, case=name))
                nan_rows = (ell.isnan() | acc.isnan().any(-1, keepdim=True)).squeeze(-1).any(0)  # (T_q,)
                assert not (nan_rows & ~empty).any(), (
                    f"{name}: NaN in rows {nan_rows.nonzero().flatten().tolist()} that do have allowed keys: a chunk "
                    "with no allowed key has m = -inf, and merging two such states computes exp(-inf - (-inf)) = NaN; "
                    "the factor of a state with m = -inf must be 0")
                assert not nan_rows.any(), (
                    f"{name}: NaN in rows {nan_rows.nonzero().flatten().tolist()}, which allow no key at all: their "
                    "ell and acc must stay 0 (exp(-inf - (-inf)) is NaN, the factor must be 0)")
                out = acc / ell.clamp(min=torch.finfo(ell.dtype).tiny)  # (B, T_q, d): empty rows 0 / tiny = 0
                err = (out - expected).abs().max().item()
                assert err <= 1e-5, (
                    f"{name}: acc / ell is off by up to {err:.3g}; each state was summed against its own max: "
                    "rescale both by exp(m_x - m) onto m = max(m_a, m_b)")
    print("exercise 4: correct")


_ORDERS = {  # ways to fold the chunks' states with merge(a, b): all must give the same attention
    "left to right": lambda states, mg: reduce(mg, states),
    "right to left": lambda states, mg: reduce(lambda x, y: mg(y, x), states[::-1]),
    "as a tree": lambda states, mg: _tree(states, mg),
}


def _tree(items, merge):
    """Merge neighbours pairwise until one is left: ((c0 c1) (c2 c3)) ..."""
    while len(items) > 1:
        items = [merge(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]
