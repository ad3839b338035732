"""Notebook 05's checks, proven: each accepts correct answers written differently from the reference
and rejects plausible wrong ones with a message that names the cause (tests/catalogue.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from catalogue import Catalogue, Wrong, assert_catalogue
from torch import nn

from helpers.attention import MultiHeadAttention
from helpers.checks.nb05 import (
    check_exercise_1,
    check_exercise_2,
    check_exercise_3,
    check_exercise_4,
    check_exercise_5,
)
from helpers.layers import DecoderLayer

# ---- exercise 1: LayerNorm ---------------------------------------------------------------------------


def ln_reference(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


def ln_rsqrt(x, gamma, beta, eps=1e-5):
    var, mu = torch.var_mean(x, -1, keepdim=True, unbiased=False)
    return (x - mu) * torch.rsqrt(var + eps) * gamma + beta


def ln_moments(x, gamma, beta, eps=1e-5):  # E[x²] - μ²
    mu = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mu * mu
    return gamma * (x - mu) / (var + eps).sqrt() + beta


def ln_unbiased(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) + beta


def ln_eps_outside(x, gamma, beta, eps=1e-5):  # the Annotated Transformer's form
    mu = x.mean(-1, keepdim=True)
    return gamma * (x - mu) / (((x - mu) ** 2).mean(-1, keepdim=True).sqrt() + eps) + beta


def ln_no_gamma(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) + beta


def ln_swapped(x, gamma, beta, eps=1e-5):
    return ln_reference(x, beta, gamma, eps)


def ln_axis0(x, gamma, beta, eps=1e-5):
    mu = x.mean(0, keepdim=True)
    return gamma * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(0, keepdim=True) + eps) + beta


def ln_no_centring(x, gamma, beta, eps=1e-5):
    return gamma * x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) + beta


def ln_in_place(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    x -= mu
    return gamma * x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) + beta


def ln_calls_torch(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


CAT_1 = Catalogue(check_exercise_1, ln_reference, correct=[ln_rsqrt, ln_moments], wrong=[
    Wrong(ln_unbiased, "C - 1", "unbiased variance"),
    Wrong(ln_eps_outside, "outside the square root", "ε outside the square root"),
    Wrong(ln_no_gamma, "γ", "no γ"),
    Wrong(ln_swapped, "swapped", "γ and β swapped"),
    Wrong(ln_axis0, "axis", "normalised over axis 0"),
    Wrong(ln_no_centring, "centring", "no x - μ"),
    Wrong(ln_in_place, "in place", "overwrites x"),
    Wrong(ln_calls_torch, "calls", "calls F.layer_norm"),
])

# ---- exercise 2: the encoder layer -----------------------------------------------------------


class EncBase(nn.Module):
    def __init__(self, C, H, d_ff, norm_first=False):
        super().__init__()
        self.attn = MultiHeadAttention(C, H)
        self.ff = nn.Sequential(nn.Linear(C, d_ff), nn.ReLU(), nn.Linear(d_ff, C))
        self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.norm_first = norm_first


class EncReference(EncBase):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, h, h, mask=mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, x, x, mask=mask))
        return self.norm2(x + self.ff(x))


class EncSteps(EncBase):  # step by step, explicit ReLU
    def forward(self, x, mask=None):
        if self.norm_first:
            a = self.attn(*(3 * [self.norm1(x)]), mask=mask)
            y = x + a
            return y + self.ff[2](torch.relu(self.ff[0](self.norm2(y))))
        a = self.attn(x, x, x, mask=mask)
        y = self.norm1(a + x)
        f = self.ff[2](torch.relu(self.ff[0](y)))
        return self.norm2(f + y)


class EncLoop(EncBase):  # one loop over (sub-layer, norm)
    def forward(self, x, mask=None):
        for f, norm in ((lambda h: self.attn(h, h, h, mask=mask), self.norm1), (self.ff, self.norm2)):
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


class EncPreOnly(EncBase):  # always pre-LN
    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, mask=mask)
        return x + self.ff(self.norm2(x))




class EncNoMask(EncReference):
    def forward(self, x, mask=None):
        return super().forward(x, None)


class EncCausal(EncBase):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, h, h, mask=mask, is_causal=True)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, x, x, mask=mask, is_causal=True))
        return self.norm2(x + self.ff(x))


class EncOneNorm(EncBase):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, h, h, mask=mask)
            return x + self.ff(self.norm1(x))
        x = self.norm1(x + self.attn(x, x, x, mask=mask))
        return self.norm1(x + self.ff(x))








class EncInPlace(EncBase):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x += self.attn(h, h, h, mask=mask)
            return x + self.ff(self.norm2(x))
        x += self.attn(x, x, x, mask=mask)
        x = self.norm1(x)
        return self.norm2(x + self.ff(x))


class EncCallsTorch(EncBase):
    def forward(self, x, mask=None):
        return nn.TransformerEncoderLayer.forward(self, x)


def encoder2(cls):  # exercise 2 builds it as cls(C, H, d_ff)
    return type(cls.__name__, (cls,), {"__init__": lambda self, C, H, d_ff: cls.__init__(self, C, H, d_ff)})


CAT_2 = Catalogue(check_exercise_2, encoder2(EncReference), correct=[encoder2(EncSteps), encoder2(EncLoop)], wrong=[
    Wrong(encoder2(EncPreOnly), "other norm placement", "pre-LN"),
    Wrong(encoder2(EncNoMask), "padding mask", "mask dropped"),
    Wrong(encoder2(EncCausal), "causal", "encoder made causal"),
    Wrong(encoder2(EncOneNorm), "post-LN", "norm1 twice"),
    Wrong(encoder2(EncInPlace), "in place", "x += ... changes the input"),
    Wrong(encoder2(EncCallsTorch), "calls", "calls PyTorch's layer"),
])


# ---- exercise 3: the decoder layer -----------------------------------------------------------------


class DecReference(DecoderLayer):
    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=False, *, drop_masks_pre=False,
                causal_cross=False, no_memory_mask=False, norm_memory=False):
        pre_drop = drop_masks_pre and self.norm_first
        sm, mm, ic = (None, None, False) if pre_drop else (self_mask, None if no_memory_mask else memory_mask, is_causal)
        sublayers = [(lambda h: self.self_attn(h, h, h, mask=sm, is_causal=ic), self.norm1),
                     (lambda h: self.cross_attn(h, self.norm2(memory) if norm_memory else memory,
                                                self.norm2(memory) if norm_memory else memory, mask=mm,
                                                is_causal=causal_cross), self.norm2),
                     (self.ff, self.norm3)]
        for f, norm in sublayers:
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


def dec_variant(**kw):
    return type("DecVariant", (DecReference,), {"forward": lambda self, *a, **k: DecReference.forward(self, *a, **k, **kw)})


class DecExplicit(DecoderLayer):  # three branches written out
    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=False):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=self_mask, is_causal=is_causal)
            x = x + self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask)
            return x + self.ff(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, mask=self_mask, is_causal=is_causal))
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=memory_mask))
        return self.norm3(x + self.ff(x))


class DecWithTorchCausal(DecoderLayer):  # the causal mask folded into self_mask
    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=False):
        T = x.shape[1]
        m = torch.ones(T, T, dtype=torch.bool).tril() if is_causal else torch.ones(T, T, dtype=torch.bool)
        m = m if self_mask is None else m & self_mask
        for f, norm in ((lambda h: self.self_attn(h, h, h, mask=m), self.norm1),
                        (lambda h: self.cross_attn(h, memory, memory, mask=memory_mask), self.norm2), (self.ff, self.norm3)):
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


class DecQueriesFromMemory(DecoderLayer):
    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=False):
        x = self.norm1(x + self.self_attn(x, x, x, mask=self_mask, is_causal=is_causal))
        x = self.norm2(x + self.cross_attn(memory, x, x, mask=memory_mask))
        return self.norm3(x + self.ff(x))


class DecCallsSuper(DecoderLayer):
    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=False):
        return DecoderLayer.forward(self, x, memory, self_mask=self_mask, memory_mask=memory_mask, is_causal=is_causal)


CAT_3 = Catalogue(check_exercise_3, DecReference, correct=[DecExplicit, DecWithTorchCausal], wrong=[
    Wrong(dec_variant(drop_masks_pre=True), "pre-LN without masks matches", "pre-LN branch drops the masks"),
    Wrong(dec_variant(causal_cross=True), "never causal", "causal cross-attention"),
    Wrong(dec_variant(no_memory_mask=True), "memory_mask", "memory_mask dropped"),
    Wrong(dec_variant(norm_memory=True), ("which of x and memory", "inside its branch"), "memory normalised"),
    Wrong(DecQueriesFromMemory, "queries", "queries from memory"),
    Wrong(DecCallsSuper, "calls", "calls the helper's layer"),
])

# ---- exercise 4: RMSNorm ----------------------------------------------------------------------------


def rms_reference(x, gamma, eps=1e-6):
    return gamma * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rms_rsqrt(x, gamma, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * gamma


def rms_norm_div(x, gamma, eps=1e-6):  # ‖x‖ / √C
    C = x.shape[-1]
    return gamma * x / (x.norm(dim=-1, keepdim=True) ** 2 / C + eps).sqrt()


CAT_4 = Catalogue(check_exercise_4, rms_reference, correct=[rms_rsqrt, rms_norm_div], wrong=[
    Wrong(lambda x, gamma, eps=1e-6: gamma * x / (x.pow(2).sum(-1, keepdim=True) + eps).sqrt(), "L2 norm", "sum, not mean"),
    Wrong(lambda x, gamma, eps=1e-6: gamma * (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + eps).sqrt(),
          "subtract the mean", "the std"),
    Wrong(lambda x, gamma, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt(), "multiply by γ", "no γ"),
    Wrong(lambda x, gamma, eps=1e-6: gamma * x / (x.pow(2).mean(-1, keepdim=True) + eps), "square root", "no sqrt"),
    Wrong(lambda x, gamma, eps=1e-6: gamma * x / (x.pow(2).mean(0, keepdim=True) + eps).sqrt(), "last axis", "axis 0"),
    Wrong(lambda x, gamma, eps=1e-6: F.rms_norm(x, x.shape[-1:], gamma, eps), "calls", "calls F.rms_norm"),
])

# ---- exercise 5: GPT-2's residual-projection init ----------------------------------------------------


def scale_reference(blocks):
    with torch.no_grad():
        for block in blocks:
            for linear in (block.attn.out_proj, block.ff[2]):
                linear.weight.mul_(1 / math.sqrt(2 * len(blocks)))


def scale_by_name(blocks):  # by parameter name, dividing
    n = 2 * len(blocks)
    with torch.no_grad():
        for name, p in blocks.named_parameters():
            if name.endswith(("attn.out_proj.weight", "ff.2.weight")):
                p /= math.sqrt(n)


def scale_new_parameter(blocks):  # replaces the Parameter objects with scaled ones
    s = (2 * len(blocks)) ** -0.5
    for block in blocks:
        block.attn.out_proj.weight = nn.Parameter(block.attn.out_proj.weight.detach() * s)
        block.ff[-1].weight = nn.Parameter(block.ff[-1].weight.detach() * s)


def scale_factor(factor):  # the right weights, another factor
    def wrong(blocks):
        with torch.no_grad():
            for block in blocks:
                for linear in (block.attn.out_proj, block.ff[2]):
                    linear.weight.mul_(factor(len(blocks)))
    return wrong


def scale_modules(pick, with_bias=False):  # the factor 1/√(2L), on other modules
    def wrong(blocks):
        with torch.no_grad():
            for block in blocks:
                for linear in pick(block):
                    linear.weight.mul_(1 / math.sqrt(2 * len(blocks)))
                    if with_bias:
                        linear.bias.mul_(1 / math.sqrt(2 * len(blocks)))
    return wrong


def scale_out_of_place(blocks):  # computes the scaled weights, never stores them
    return [b.attn.out_proj.weight * (2 * len(blocks)) ** -0.5 for b in blocks]


def scale_redraw(blocks):  # nanoGPT's re-draw with std 0.02/√(2L), not a scaling of the given weights
    with torch.no_grad():
        for block in blocks:
            for linear in (block.attn.out_proj, block.ff[2]):
                nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * len(blocks)))


def scale_fixed_12(blocks):  # L hard-coded as 12
    with torch.no_grad():
        for block in blocks:
            for linear in (block.attn.out_proj, block.ff[2]):
                linear.weight.mul_(1 / math.sqrt(24))


CAT_5 = Catalogue(check_exercise_5, scale_reference, correct=[scale_by_name, scale_new_parameter], wrong=[
    Wrong(scale_factor(lambda L: L**-0.5), "two per block", "1/√L"),
    Wrong(scale_factor(lambda L: 1 / (2 * L)), "square root", "1/(2L)"),
    Wrong(scale_fixed_12, "expected 1/√(2L)", "L hard-coded"),
    Wrong(scale_modules(lambda b: (b.attn.q_proj, b.attn.k_proj, b.attn.v_proj, b.attn.out_proj, b.ff[0], b.ff[2])),
          "not added to the residual stream", "every Linear scaled"),
    Wrong(scale_modules(lambda b: (b.attn.out_proj, b.ff[0])), "not added to the residual stream", "the FFN's first Linear"),
    Wrong(scale_modules(lambda b: (b.attn.out_proj,)), "FFN's last Linear", "only the attention"),
    Wrong(scale_modules(lambda b: (b.attn.out_proj, b.ff[2]), with_bias=True), "biases", "biases scaled too"),
    Wrong(scale_out_of_place, "in place", "nothing stored"),
    Wrong(scale_redraw, "re-draw", "re-drawn, not scaled"),
])

CATALOGUES = {"exercise 1": CAT_1, "exercise 2": CAT_2, "exercise 3": CAT_3, "exercise 4": CAT_4, "exercise 5": CAT_5}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    assert_catalogue(CATALOGUES[name])
