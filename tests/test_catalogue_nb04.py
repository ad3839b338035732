"""Notebook 04's checks, proven: each accepts correct answers written differently from the reference
and rejects plausible wrong ones with a message that names the cause (tests/catalogue.py)."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from catalogue import Catalogue, Wrong, assert_catalogue
from torch import nn

import helpers.attention
from helpers.attention import causal_mask
from helpers.checks.nb04 import (
    check_attention_head,
    check_exercise_1,
    check_exercise_2,
    check_exercise_3,
    check_exercise_4,
)

# ---- exercise 1: masked softmax -------------------------------------------------------------------


def ms_reference(scores, mask):
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
    scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores.masked_fill(~any_allowed, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~any_allowed, 0.0)


def ms_where(scores, mask):
    mask = mask.expand_as(scores)
    s = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    s = torch.where(mask.any(-1, keepdim=True), s, torch.zeros_like(s))
    return torch.where(mask, s.softmax(-1), torch.zeros_like(s))


def ms_manual_float32(scores, mask):  # exp and sum by hand in float32, cast back
    s = scores.float().masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)  # rows with nothing allowed: any finite max
    e = torch.exp(s - m)
    return (e / e.sum(-1, keepdim=True).clamp(min=1e-30)).to(scores.dtype)


def ms_nan_to_num(scores, mask):  # NaN rows from a softmax of all -inf, zeroed afterwards
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)


def ms_plain(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)


def ms_finfo_min(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), -1)


def ms_minus_1e9(scores, mask):
    w = torch.softmax(scores.masked_fill(~mask, -1e9), -1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def ms_blocked_as_zero(scores, mask):  # a blocked score of 0 is not a weight of 0
    w = torch.softmax(scores.masked_fill(~mask, 0.0), -1)
    return w.masked_fill(~mask.any(-1, keepdim=True), 0.0)


def ms_renormalise(scores, mask):  # softmax first, zero the blocked keys, renormalise (cells 25-26)
    w = torch.softmax(scores, -1) * mask
    return w / w.sum(-1, keepdim=True).clamp(min=torch.finfo(w.dtype).tiny)


def ms_float32_out(scores, mask):
    return ms_reference(scores.float(), mask)


def ms_no_keepdim(scores, mask):
    any_allowed = mask.any(dim=-1)  # forgot keepdim
    s = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_allowed, 0.0)
    return s.softmax(-1)


def ms_log_mask(scores, mask):  # additive log(mask) then nan_to_num: the backward meets NaN
    return torch.softmax(scores + torch.log(mask.to(scores.dtype)), -1).nan_to_num(0.0)


def ms_in_place(scores, mask):
    any_allowed = mask.any(dim=-1, keepdim=True)
    scores.masked_fill_(~mask, float("-inf"))
    return torch.softmax(scores.masked_fill(~any_allowed, 0.0), -1).masked_fill(~any_allowed, 0.0)


def ms_calls_helper(scores, mask):
    eye = torch.eye(scores.shape[-1], dtype=scores.dtype)
    return helpers.attention.scaled_dot_product_attention(scores, eye, eye, mask=mask, scale=1.0)[1]


CAT_1 = Catalogue(check_exercise_1, ms_reference, correct=[ms_where, ms_manual_float32, ms_nan_to_num], wrong=[
    Wrong(ms_plain, "0/0", "softmax of all -inf gives NaN rows"),
    Wrong(ms_finfo_min, "uniform", "finfo.min leaks uniform weight into empty rows"),
    Wrong(ms_minus_1e9, "-1e9", "-1e9 overflows float16"),
    Wrong(ms_blocked_as_zero, "exactly 0", "blocked score 0 instead of -inf"),
    Wrong(ms_renormalise, "underflow", "softmax then renormalise underflows"),
    Wrong(ms_float32_out, "dtype", "returns float32 for float16 scores"),
    Wrong(ms_no_keepdim, "keepdim", "any() without keepdim"),
    Wrong(ms_log_mask, "backward", "log-mask: NaN gradient"),
    Wrong(ms_in_place, "in place", "overwrites the scores"),
    Wrong(ms_calls_helper, "calls", "calls the helper"),
])

# ---- the single-head build --------------------------------------------------------------------------


class HeadBase(nn.Module):
    def __init__(self, C, hs, bias=False):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(C, hs, bias=bias) for _ in range(3))


class HeadReference(HeadBase):
    def forward(self, x, causal=False):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if causal:
            scores = scores.masked_fill(~causal_mask(x.shape[1]), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class HeadEinsum(HeadBase):
    def forward(self, x, causal=False):
        q, k, v = self.query(x), self.key(x), self.value(x)
        s = torch.einsum("btd,bsd->bts", q * q.shape[-1] ** -0.5, k)
        if causal:
            s = s + torch.full(s.shape[-2:], float("-inf")).triu(1)
        return torch.einsum("bts,bsd->btd", s.softmax(-1), v)


class HeadTril(HeadBase):  # Karpathy's buffer style
    def forward(self, x, causal=False):
        T = x.shape[1]
        wei = self.query(x) @ self.key(x).mT * self.key.out_features ** -0.5
        if causal:
            wei = wei.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        return F.softmax(wei, dim=-1) @ self.value(x)


class HeadMaskAfterSoftmax(HeadBase):  # softmax, zero the future, renormalise: equal at these scores
    def forward(self, x, causal=False):
        q, k, v = self.query(x), self.key(x), self.value(x)
        w = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / k.size(-1) ** 0.5, dim=2)
        if causal:
            w = w * causal_mask(x.size(1))
            w = w / w.sum(-1, keepdim=True)
        return torch.bmm(w, v)


class HeadScaleC(HeadBase):
    def forward(self, x, causal=False):
        scores = self.query(x) @ self.key(x).mT / math.sqrt(x.shape[-1])
        if causal:
            scores = scores.masked_fill(~causal_mask(x.shape[1]), float("-inf"))
        return scores.softmax(-1) @ self.value(x)


def _head_wrong(x, q, k, v, causal, scale=None, dim=-1, allowed=None):
    scale = k.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.mT * scale
    if causal:
        keep = causal_mask(x.shape[1]) if allowed is None else allowed
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(dim) @ v


class HeadUnscaled(HeadBase):
    def forward(self, x, causal=False):
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), causal, scale=1.0)


class HeadScaleHs(HeadBase):  # 1/hs: "divide by d_k"
    def forward(self, x, causal=False):
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), causal, scale=1 / self.key.out_features)


class HeadSwappedScores(HeadBase):  # k qᵀ: score[t, s] = k_t · q_s
    def forward(self, x, causal=False):
        return _head_wrong(x, self.key(x), self.query(x), self.value(x), causal)


class HeadValuesX(HeadBase):  # the weights times x (same shape when hs = C)
    def forward(self, x, causal=False):
        return _head_wrong(x, self.query(x), self.key(x), x, causal)


class HeadMaskNoDiagonal(HeadBase):  # triu(0) blocked: the token cannot see itself, row 0 has no key
    def forward(self, x, causal=False):
        T = x.shape[1]
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), causal, allowed=causal_mask(T).tril(-1))


class HeadMaskOffByOne(HeadBase):  # tril(1): query t also sees key t + 1
    def forward(self, x, causal=False):
        T = x.shape[1]
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), causal, allowed=torch.ones(T, T).tril(1) > 0)


class HeadMaskFromBatch(HeadBase):  # causal_mask(x.shape[0]): B instead of T
    def forward(self, x, causal=False):
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), causal, allowed=causal_mask(x.shape[0]))


class HeadAlwaysCausal(HeadBase):
    def forward(self, x, causal=False):
        return _head_wrong(x, self.query(x), self.key(x), self.value(x), True)


class HeadNoMask(HeadBase):
    def forward(self, x, causal=False):
        return (self.query(x) @ self.key(x).mT / math.sqrt(self.key.out_features)).softmax(-1) @ self.value(x)


class HeadSoftmaxQueries(HeadBase):
    def forward(self, x, causal=False):
        scores = self.query(x) @ self.key(x).mT / math.sqrt(self.key.out_features)
        if causal:
            scores = scores.masked_fill(~causal_mask(x.shape[1]), float("-inf"))
        return scores.softmax(-2).nan_to_num() @ self.value(x)


class HeadMaskAfterNoRenorm(HeadBase):  # softmax, zero the future, no renormalisation
    def forward(self, x, causal=False):
        w = (self.query(x) @ self.key(x).mT / math.sqrt(self.key.out_features)).softmax(-1)
        return (w * causal_mask(x.shape[1]) if causal else w) @ self.value(x)


class HeadKeyAsValue(HeadBase):
    def forward(self, x, causal=False):
        k = self.key(x)
        return F.scaled_dot_product_attention(self.query(x), k, k, is_causal=causal)


class HeadCallsTorch(HeadBase):
    def forward(self, x, causal=False):
        return F.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), is_causal=causal)


class HeadCallsHelper(HeadBase):  # the helpers' attention, reached through the module
    def forward(self, x, causal=False):
        mask = causal_mask(x.shape[1]) if causal else None
        return helpers.attention.scaled_dot_product_attention(self.query(x), self.key(x), self.value(x), mask=mask)[0]


class HeadCallsMHA(HeadBase):  # a one-head MultiHeadAttention loaded with the three projections
    def forward(self, x, causal=False):
        mha = helpers.attention.MultiHeadAttention(x.shape[-1], n_heads=1, bias=False)
        return mha(x, x, x, is_causal=causal)


class HeadFusedInit(nn.Module):  # one fused projection: the check reads self.query, self.key, self.value
    def __init__(self, C, hs, bias=False):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * hs, bias=bias)

    def forward(self, x, causal=False):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return F.softmax(q @ k.mT / k.shape[-1] ** 0.5, -1) @ v


CAT_HEAD = Catalogue(check_attention_head, HeadReference, correct=[HeadEinsum, HeadTril, HeadMaskAfterSoftmax], wrong=[
    Wrong(HeadScaleC, "1/√hs", "scaled by the width C"),
    Wrong(HeadUnscaled, "no scale", "no 1/√d_k"),
    Wrong(HeadScaleHs, "1/hs", "scaled by 1/hs, no square root"),
    Wrong(HeadSwappedScores, "q_t · k_s", "k qᵀ instead of q kᵀ"),
    Wrong(HeadValuesX, "self.value", "the weights times x"),
    Wrong(HeadNoMask, "causal", "ignores the causal flag"),
    Wrong(HeadAlwaysCausal, "causal=False", "masks even when causal is False"),
    Wrong(HeadMaskNoDiagonal, "diagonal", "the causal mask blocks the token itself"),
    Wrong(HeadMaskOffByOne, "off by one", "the causal mask lets t see t + 1"),
    Wrong(HeadMaskFromBatch, "another length", "the mask made from x.shape[0]"),
    Wrong(HeadMaskAfterNoRenorm, "after the softmax", "masked after the softmax, not renormalised"),
    Wrong(HeadSoftmaxQueries, "softmax over the keys", "softmax over the queries"),
    Wrong(HeadKeyAsValue, "calls", "k as values, through torch's kernel"),
    Wrong(HeadCallsTorch, "calls", "calls F.scaled_dot_product_attention"),
    Wrong(HeadCallsHelper, "calls", "calls helpers.attention.scaled_dot_product_attention"),
    Wrong(HeadCallsMHA, "calls", "calls helpers' MultiHeadAttention"),
    Wrong(HeadFusedInit, "__init__", "a fused projection instead of the stub's three"),
])

# ---- exercise 2: multi-head attention ---------------------------------------------------------------


def mha_reference(x, ref, merge_heads_first=True, scale_by_c=False, view_bug=False, bias=True, out_bias=True,
                  swap_kv=False, softmax_dim=-1, scale_hs=False):
    B, T, C = x.shape
    H = ref.num_heads
    hs = C // H
    Ws, bs = ref.in_proj_weight.chunk(3), ref.in_proj_bias.chunk(3)
    q, k, v = (x @ W.T + (b if bias else 0) for W, b in zip(Ws, bs, strict=True))
    if swap_kv:
        k, v = v, k
    if view_bug:
        q, k, v = (t.view(B, H, T, hs) for t in (q, k, v))
    else:
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))
    scale = 1 / math.sqrt(C) if scale_by_c else (1 / hs if scale_hs else 1 / math.sqrt(hs))
    heads = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=softmax_dim) @ v
    if merge_heads_first:
        heads = heads.transpose(1, 2)
    out = heads.reshape(B, T, C) @ ref.out_proj.weight.T
    return out + ref.out_proj.bias if out_bias else out


def mha_fused(x, ref):  # one F.linear for the three projections, einsum for the heads
    B, T, C = x.shape
    H = ref.num_heads
    qkv = F.linear(x, ref.in_proj_weight, ref.in_proj_bias).view(B, T, 3, H, C // H)
    q, k, v = qkv.unbind(2)  # (B, T, H, hs) each
    w = torch.einsum("bthd,bshd->bhts", q, k).div(math.sqrt(C // H)).softmax(-1)
    return ref.out_proj(torch.einsum("bhts,bshd->bthd", w, v).reshape(B, T, C))


def mha_loop(x, ref):  # one head at a time, then concatenate
    C = x.shape[-1]
    H = ref.num_heads
    hs = C // H
    Wq, Wk, Wv = ref.in_proj_weight.chunk(3)
    bq, bk, bv = ref.in_proj_bias.chunk(3)
    heads = []
    for h in range(H):
        r = slice(h * hs, (h + 1) * hs)
        q, k, v = x @ Wq[r].T + bq[r], x @ Wk[r].T + bk[r], x @ Wv[r].T + bv[r]
        heads.append(torch.softmax(q @ k.mT / hs**0.5, -1) @ v)
    return F.linear(torch.cat(heads, -1), ref.out_proj.weight, ref.out_proj.bias)


def mha_calls_ref(x, ref):
    return ref(x, x, x, need_weights=False)[0]


def mha_calls_helper(x, ref):
    return helpers.attention.MultiHeadAttention.from_torch(ref)(x, x, x)


CAT_2 = Catalogue(check_exercise_2, mha_reference, correct=[mha_fused, mha_loop], wrong=[
    Wrong(partial(mha_reference, scale_by_c=True), "scale", "scale 1/√C"),
    Wrong(partial(mha_reference, scale_hs=True), "scale", "scale 1/hs"),
    Wrong(partial(mha_reference, view_bug=True), "split", "view(B, H, T, hs) without the transpose"),
    Wrong(partial(mha_reference, merge_heads_first=False), ("merge", "concatenated"), "merge without the transpose"),
    Wrong(partial(mha_reference, bias=False), "biases", "no in-projection bias"),
    Wrong(partial(mha_reference, out_bias=False), ("biases", "W_O"), "no output bias"),
    Wrong(partial(mha_reference, swap_kv=True), "projections", "K and V swapped"),
    Wrong(partial(mha_reference, softmax_dim=-2), "softmax axis", "softmax over the queries"),
    Wrong(mha_calls_ref, "calls", "calls ref"),
    Wrong(mha_calls_helper, "calls", "calls helpers' MultiHeadAttention"),
])

# ---- exercise 3: the newline head's score ----------------------------------------------------------


def nl_reference(weights, text, own=False, first=False, every_query=False, after=False, transpose=False):
    latest, last, earliest = [], -1, -1
    for t, ch in enumerate(text):
        if own and ch == "\n":
            last = t
        latest.append(earliest if first else last)
        if ch == "\n":
            last = t
            earliest = t if earliest < 0 else earliest
    latest = torch.tensor(latest)
    if after:
        latest = torch.where((latest >= 0) & (latest + 1 <= torch.arange(len(text))), latest + 1, -1)
    w = weights.transpose(-2, -1) if transpose else weights
    if every_query:
        return w[..., torch.arange(len(text)), latest.clamp(min=0)].masked_fill(latest < 0, 0).mean(-1)
    queries = (latest >= 0).nonzero().flatten()
    return w[..., queries, latest[queries]].mean(-1)


def nl_rfind_loops(weights, text):  # str.rfind per query, plain loops over layers and heads
    L, H = weights.shape[:2]
    out = torch.zeros(L, H)
    queries = [(t, text.rfind("\n", 0, t)) for t in range(len(text)) if text.rfind("\n", 0, t) >= 0]
    for layer in range(L):
        for h in range(H):
            out[layer, h] = sum(weights[layer, h, t, s].item() for t, s in queries) / len(queries)
    return out


def nl_one_hot(weights, text):  # a (T, T) one-hot of each query's target, in float64
    T = len(text)
    target = torch.zeros(T, T, dtype=torch.float64)
    for t in range(T):
        s = text.rfind("\n", 0, t)
        if s >= 0:
            target[t, s] = 1.0
    has = target.sum(-1) > 0  # (T,)
    return ((weights.double() * target).sum(-1)[..., has]).mean(-1)


def nl_every_newline(weights, text):  # the weight on every newline before t, summed
    T = len(text)
    nl = torch.tensor([c == "\n" for c in text])
    before = nl[None, :] & (torch.arange(T)[None, :] < torch.arange(T)[:, None])  # (T, T)
    has = before.any(-1)
    return (weights * before).sum(-1)[..., has].mean(-1)


def nl_sum_queries(weights, text):
    return nl_reference(weights, text) * sum(1 for t in range(len(text)) if text.rfind("\n", 0, t) >= 0)


def nl_in_place(weights, text):  # zeroes the queries without a newline in the caller's tensor
    for t in range(len(text)):
        if text.rfind("\n", 0, t) < 0:
            weights[..., t, :] = 0
    return nl_reference(weights, text)


CAT_3 = Catalogue(check_exercise_3, nl_reference, correct=[nl_rfind_loops, nl_one_hot], wrong=[
    Wrong(partial(nl_reference, own=True), "strictly before", "a newline query counts itself"),
    Wrong(partial(nl_reference, first=True), "latest", "the first newline of the text"),
    Wrong(partial(nl_reference, every_query=True), "only over the queries", "zeros averaged in"),
    Wrong(partial(nl_reference, transpose=True), "swapped", "weights[..., s, t]"),
    Wrong(partial(nl_reference, after=True), "newline character itself", "the line's first character"),
    Wrong(nl_every_newline, "only the latest", "every newline before t"),
    Wrong(nl_sum_queries, "mean", "a sum over the queries"),
    Wrong(nl_in_place, "in place", "changes the caller's weights"),
])

# ---- exercise 4: merging two online-softmax states ----------------------------------------------------


def mg_reference(a, b, safe=True, rescale=True, rescale_acc=True, keep_first_max=False, sign=1):
    (m_a, ell_a, acc_a), (m_b, ell_b, acc_b) = a, b
    m = m_a if keep_first_max else torch.maximum(m_a, m_b)
    base = m.nan_to_num(neginf=0.0) if safe else m
    f_a, f_b = torch.exp(sign * (m_a - base)), torch.exp(sign * (m_b - base))
    if not rescale:
        f_a, f_b = torch.ones_like(f_a), torch.ones_like(f_b)
    g_a, g_b = (f_a, f_b) if rescale_acc else (torch.ones_like(f_a), torch.ones_like(f_b))
    return m, ell_a * f_a + ell_b * f_b, acc_a * g_a + acc_b * g_b


def mg_where(a, b):  # factors 0 by torch.where where a state is empty
    m = torch.maximum(a[0], b[0])
    empty = torch.isneginf(m)
    f_a = torch.where(empty, torch.zeros_like(m), torch.exp(a[0] - m))
    f_b = torch.where(empty, torch.zeros_like(m), torch.exp(b[0] - m))
    return m, a[1] * f_a + b[1] * f_b, a[2] * f_a + b[2] * f_b


def mg_floor(a, b):  # a finite floor for the max: exp(-inf - floor) = 0
    m = torch.maximum(a[0], b[0]).clamp(min=torch.finfo(a[0].dtype).min)
    f_a, f_b = (a[0] - m).exp(), (b[0] - m).exp()
    return m, a[1] * f_a + b[1] * f_b, a[2] * f_a + b[2] * f_b


def mg_sorted(a, b):  # the state with the larger max keeps its sums; the other is moved onto it
    swap = a[0] < b[0]  # (..., 1)
    hi = [torch.where(swap, y, x) for x, y in zip(a, b, strict=True)]
    lo = [torch.where(swap, x, y) for x, y in zip(a, b, strict=True)]
    f = torch.exp(lo[0] - hi[0]).nan_to_num(0.0)  # both -inf: NaN -> 0, nothing was summed
    return hi[0], hi[1] + lo[1] * f, hi[2] + lo[2] * f


def mg_in_place(a, b):
    m = torch.maximum(a[0], b[0])
    base = m.nan_to_num(neginf=0.0)
    f_a, f_b = torch.exp(a[0] - base), torch.exp(b[0] - base)
    return m, a[1].mul_(f_a) + b[1] * f_b, a[2].mul_(f_a) + b[2] * f_b


def mg_calls_helper(a, b):  # recomputes from nothing it has: the helpers' attention cannot be reached from states
    helpers.attention.scaled_dot_product_attention(torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1))
    return mg_reference(a, b)


CAT_4 = Catalogue(check_exercise_4, mg_reference, correct=[mg_where, mg_floor, mg_sorted], wrong=[
    Wrong(partial(mg_reference, safe=False), "exp(-inf - (-inf))", "naive: NaN where both states are empty"),
    Wrong(partial(mg_reference, rescale=False), "rescale", "sums added without rescaling"),
    Wrong(partial(mg_reference, rescale_acc=False), "acc by the same factors", "ell rescaled, acc not"),
    Wrong(partial(mg_reference, keep_first_max=True), "larger of the two maxima", "m = m_a"),
    Wrong(partial(mg_reference, sign=-1), "at most 1", "exp(m - m_x): the factor inverted"),
    Wrong(mg_in_place, "in place", "rescales the caller's state in place"),
    Wrong(mg_calls_helper, "calls", "calls the helpers' attention"),
])

CATALOGUES = {"exercise 1": CAT_1, "attention head": CAT_HEAD, "exercise 2": CAT_2, "exercise 3": CAT_3,
              "exercise 4": CAT_4}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    assert_catalogue(CATALOGUES[name])
