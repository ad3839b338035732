"""Notebook 03's checks against correct answers written differently and plausible wrong ones."""

from __future__ import annotations

import math

import pytest
import torch
from catalogue import Catalogue, Wrong, assert_catalogue
from torch import nn

from helpers.checks import nb03
from helpers.exercises import attempt
from helpers.positional import (
    SinusoidalPositionalEncoding,
    inverse_frequencies,
    relative_rotation,
    sinusoidal_table,
)


def pe_loop(seq_len, d_model, base):  # as the notebook's, which the learner's cells can see
    pe = [[0.0] * d_model for _ in range(seq_len)]
    for pos in range(seq_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos][2 * i], pe[pos][2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


# ----------------------------------------------------------------------------- pe_table
def reference_pe_table(seq_len, d_model, base=10000.0):
    pos = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    theta = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = pos * theta
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def pe_outer_stack(seq_len, d_model, base=10000.0):
    theta = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(base) / d_model))
    angle = torch.outer(torch.arange(seq_len, dtype=torch.float64), theta)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(seq_len, d_model)


def pe_interleave(seq_len, d_model, base=10000.0):
    i = torch.arange(d_model, dtype=torch.float64)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] / base ** ((i - i % 2) / d_model)  # (T, C)
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))


def pe_halves(seq_len, d_model, base=10000.0):
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, d_model, 2) / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)


def pe_i_over_d(seq_len, d_model, base=10000.0):
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * base ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def pe_swapped(seq_len, d_model, base=10000.0):
    pe = reference_pe_table(seq_len, d_model, base)
    return pe.reshape(seq_len, -1, 2).flip(-1).reshape(seq_len, d_model)


def pe_base_fixed(seq_len, d_model, base=10000.0):
    return reference_pe_table(seq_len, d_model)


def pe_float32(seq_len, d_model, base=10000.0):
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    angle = pos * torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    return torch.stack([angle.sin(), angle.cos()], -1).flatten(1).double()


def pe_calls_helper(seq_len, d_model, base=10000.0):
    return sinusoidal_table(seq_len, d_model, base).double()


def pe_calls_loop(seq_len, d_model, base=10000.0):
    return torch.tensor(pe_loop(seq_len, d_model, base), dtype=torch.float64)


PE_TABLE = Catalogue(
    nb03.check_pe_table, reference_pe_table, correct=[pe_outer_stack, pe_interleave],
    wrong=[Wrong(pe_halves, "first half", "torch.cat: all sines, then all cosines"),
           Wrong(pe_i_over_d, "max abs diff", "exponent i/d instead of 2i/d"),
           Wrong(pe_swapped, "cosines in the even", "cos and sin swapped"),
           Wrong(pe_base_fixed, "base=100", "ignores base"),
           Wrong(pe_float32, "float32", "built in float32, then cast"),
           Wrong(pe_calls_helper, "write it yourself", "calls sinusoidal_table"),
           Wrong(pe_calls_loop, "write it yourself", "calls the notebook's loop")])


# ----------------------------------------------------------------------------- PositionalEncoding
class ReferencePositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len, persistent=True):
        super().__init__()
        self.register_buffer("pe", reference_pe_table(max_len, d_model).float(), persistent=persistent)

    def forward(self, x):
        if x.shape[1] > self.pe.shape[0]:
            raise ValueError(f"sequence length T={x.shape[1]} exceeds max_len={self.pe.shape[0]}")
        return x + self.pe[: x.shape[1]]


class HelperTableBuffer(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model))

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"T={T} is longer than max_len={self.max_len}")
        return x + self.pe[:T].unsqueeze(0)


class NarrowBuffer(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.register_buffer("pe", pe_outer_stack(max_len, d_model).to(torch.float32))

    def forward(self, x):
        B, T, C = x.shape
        if T > len(self.pe):
            raise ValueError(f"max_len {len(self.pe)} < {T}")
        return torch.add(x, self.pe.narrow(0, 0, T)[None])


def _pe_variant(name, *, param=False, plain=False, strict_bound=False, dtype=torch.float32, check_len=True,
                in_place=False, persistent=True):
    class Variant(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            table = reference_pe_table(max_len, d_model).to(dtype)
            if param:
                self.pe = nn.Parameter(table, requires_grad=False)
            elif plain:
                self.pe = table
            else:
                self.register_buffer("pe", table, persistent=persistent)

        def forward(self, x):
            T = x.shape[1]
            if check_len and (T >= self.pe.shape[0] if strict_bound else T > self.pe.shape[0]):
                raise ValueError(f"T={T} exceeds max_len={self.pe.shape[0]}")
            if in_place:
                x += self.pe[:T]
                return x
            return x + self.pe[:T]
    Variant.__name__ = name
    return Variant


class WrapsHelper(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        self.inner = SinusoidalPositionalEncoding(d_model, max_len)
        self.register_buffer("pe", self.inner.table)

    def forward(self, x):
        return self.inner(x)


POSITIONAL_ENCODING = Catalogue(
    nb03.check_positional_encoding, ReferencePositionalEncoding, correct=[HelperTableBuffer, NarrowBuffer],
    wrong=[Wrong(_pe_variant("FrozenParameter", param=True), "parameter", "a frozen parameter"),
           Wrong(_pe_variant("PlainAttribute", plain=True), "persistent buffer", "a plain tensor attribute"),
           Wrong(_pe_variant("NotPersistent", persistent=False), "persistent buffer", "persistent=False"),
           Wrong(_pe_variant("StrictBound", strict_bound=True), "max_len fits", "raises at T == max_len"),
           Wrong(_pe_variant("Float64Buffer", dtype=torch.float64), "float32", "a float64 buffer"),
           Wrong(_pe_variant("NoLengthCheck", check_len=False), "compare T with max_len", "no length check"),
           Wrong(_pe_variant("InPlace", in_place=True), "in place", "x += pe overwrites the input"),
           Wrong(WrapsHelper, "write it yourself", "wraps SinusoidalPositionalEncoding")])


# ----------------------------------------------------------------------------- apply_rope
def reference_apply_rope(x, positions, base=10000.0):
    angle = positions.to(torch.float64)[:, None] * inverse_frequencies(x.shape[-1], base)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos + odd * sin
    out[..., 1::2] = -even * sin + odd * cos
    return out


def rope_roformer(x, positions, base=10000.0):  # x0·cos − x1·sin, x0·sin + x1·cos (RoFormer, LLaMA)
    theta = base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    angle = positions.double()[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_rotate_half_interleaved(x, positions, base=10000.0):  # x·cos + rot(x)·sin with rot(x0, x1) = (x1, −x0)
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    cos = angle.cos().repeat_interleave(2, -1).to(x.dtype)
    sin = angle.sin().repeat_interleave(2, -1).to(x.dtype)
    rot = torch.stack([x[..., 1::2], -x[..., 0::2]], -1).flatten(-2)
    return x * cos + rot * sin


def rope_complex_form(x, positions, base=10000.0):
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), -angle)).flatten(-2).to(x.dtype)


def rope_arange(x, positions, base=10000.0):
    return reference_apply_rope(x, torch.arange(x.shape[-2]), base)


def rope_half_split(x, positions, base=10000.0):  # Hugging Face's LLaMA layout: pairs (i, i + C/2)
    C = x.shape[-1]
    angle = positions.double()[:, None] * inverse_frequencies(C, base)
    cos, sin = torch.cat([angle.cos()] * 2, -1).to(x.dtype), torch.cat([angle.sin()] * 2, -1).to(x.dtype)
    rot = torch.cat([-x[..., C // 2:], x[..., : C // 2]], -1)
    return x * cos + rot * sin


def rope_2d_only(x, positions, base=10000.0):
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    out = torch.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * cos + x[:, 1::2] * sin
    out[:, 1::2] = -x[:, 0::2] * sin + x[:, 1::2] * cos
    return out


def rope_same_sign(x, positions, base=10000.0):  # not a rotation: both rows add the sin term
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos + x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def rope_in_place(x, positions, base=10000.0):
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = even * cos + odd * sin
    x[..., 1::2] = -even * sin + odd * cos
    return x


def rope_matrix(x, positions, base=10000.0):  # the (C, C) matrices, not the elementwise form
    return torch.stack([relative_rotation(int(m), x.shape[-1], base).to(x.dtype) @ x[..., t, :].unsqueeze(-1)
                        for t, m in enumerate(positions)], -3).squeeze(-1)


def rope_float32_angles(x, positions, base=10000.0):  # float32 angles: fine to float32 precision only
    angle = positions.float()[:, None] * inverse_frequencies(x.shape[-1], base).float()
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos + x1 * sin, -x0 * sin + x1 * cos], -1).flatten(-2)


APPLY_ROPE = Catalogue(
    nb03.check_apply_rope, reference_apply_rope, correct=[rope_roformer, rope_rotate_half_interleaved, rope_complex_form],
    wrong=[Wrong(rope_arange, "row number", "arange(T) instead of positions"),
           Wrong(rope_half_split, "rotate-half", "Hugging Face's half-split pairs"),
           Wrong(rope_2d_only, "leading dimensions", "x[:, 0::2] works for 2-D x only"),
           Wrong(rope_same_sign, "opposite signs", "both rows add sin: not a rotation"),
           Wrong(rope_in_place, "in place", "overwrites x"),
           Wrong(rope_matrix, "write it yourself", "calls relative_rotation"),
           Wrong(rope_float32_angles, "matches neither", "angles in float32 on float64 x")])


# ----------------------------------------------------------------------------- exercise 1
def reference_rope_complex(x, positions, base=10000.0, sign=-1):
    angle = positions.to(torch.float64)[:, None] * inverse_frequencies(x.shape[-1], base)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(angle), sign * angle)
    return torch.view_as_real(rotated).flatten(-2)


def rope_complex_roformer(x, positions, base=10000.0):  # e^{+imθ}: RoFormer's and LLaMA's sign
    return reference_rope_complex(x, positions, base, sign=1)


def rope_complex_cos_sin(x, positions, base=10000.0):
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    z = torch.complex(x[..., 0::2].contiguous(), x[..., 1::2].contiguous())
    w = z * torch.complex(angle.cos(), -angle.sin())
    return torch.stack([w.real, w.imag], -1).flatten(-2)


def rope_complex_half_split(x, positions, base=10000.0):
    C = x.shape[-1]
    angle = positions.double()[:, None] * inverse_frequencies(C, base)
    z = torch.complex(x[..., : C // 2], x[..., C // 2:]) * torch.polar(torch.ones_like(angle), -angle)
    return torch.cat([z.real, z.imag], -1)


def rope_complex_arange(x, positions, base=10000.0):
    return reference_rope_complex(x, torch.arange(x.shape[-2]), base)


def rope_complex_returns_complex(x, positions, base=10000.0):
    angle = positions.double()[:, None] * inverse_frequencies(x.shape[-1], base)
    return torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous()) * torch.polar(torch.ones_like(angle), -angle)


def rope_complex_base_fixed(x, positions, base=10000.0):
    return reference_rope_complex(x, positions)


def rope_complex_matrix(x, positions, base=10000.0):
    return torch.stack([relative_rotation(int(m), x.shape[-1], base) @ x[t] for t, m in enumerate(positions)])


EXERCISE_1 = Catalogue(
    nb03.check_exercise_1, reference_rope_complex, correct=[rope_complex_roformer, rope_complex_cos_sin],
    wrong=[Wrong(rope_complex_half_split, "rotate-half", "half-split pairs"),
           Wrong(rope_complex_arange, "row number", "arange(T)"),
           Wrong(rope_complex_returns_complex, "real tensor", "returns the complex tensor"),
           Wrong(rope_complex_base_fixed, "base", "ignores base"),
           Wrong(rope_complex_matrix, "write it yourself", "calls relative_rotation")])


# ----------------------------------------------------------------------------- exercise 2
def reference_half_offset(d_model, base=10000.0):
    table = sinusoidal_table(3000, d_model, base).double()
    dots = table @ table[0]
    return int(torch.nonzero(dots < dots[0] / 2)[0])


def half_offset_loop(d_model, base=10000.0):
    thetas = [base ** (-2 * i / d_model) for i in range(d_model // 2)]
    k = 1
    while sum(math.cos(k * t) for t in thetas) >= d_model / 4:
        k += 1
    return k


def half_offset_closed_form(d_model, base=10000.0):
    ks = torch.arange(1, 5000, dtype=torch.float64)
    g = torch.cos(ks[:, None] * inverse_frequencies(d_model, base)).sum(-1)
    return int(ks[(g < d_model / 4).nonzero()[0]].item())


def half_offset_threshold_d(d_model, base=10000.0):  # half of d_model, as if PE(m)·PE(m) were d_model
    table = sinusoidal_table(3000, d_model, base).double()
    return int(torch.nonzero(table @ table[0] < d_model / 2)[0])


EXERCISE_2 = Catalogue(
    nb03.check_exercise_2, reference_half_offset, correct=[half_offset_loop, half_offset_closed_form],
    wrong=[Wrong(half_offset_threshold_d, "still ≥ half", "threshold d_model/2"),
           Wrong(lambda d, base=10000.0: reference_half_offset(d, base) - 1, "still ≥ half", "the last offset above half"),
           Wrong(lambda d, base=10000.0: torch.tensor(reference_half_offset(d, base)), "int", "returns a tensor"),
           Wrong(lambda d, base=10000.0: reference_half_offset(d), "base=100.0", "ignores base")])

CATALOGUES = {"pe_table": PE_TABLE, "positional_encoding": POSITIONAL_ENCODING, "apply_rope": APPLY_ROPE,
              "exercise_1": EXERCISE_1, "exercise_2": EXERCISE_2}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    counts = assert_catalogue(CATALOGUES[name])
    assert counts["correct"] >= 2 and counts["wrong"] >= 3


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_an_untouched_stub_is_not_done_yet(name, capsys):
    """The stub's NotImplementedError reaches attempt(), never turned into a wrong answer's message."""
    reference = CATALOGUES[name].reference
    if isinstance(reference, type):
        class Stub(reference):
            def __init__(self, *args, **kwargs):
                raise NotImplementedError("write it")
        stub = Stub
    else:
        def stub(*args, **kwargs):
            raise NotImplementedError("write it")
    attempt(CATALOGUES[name].check, stub)
    assert "not done yet" in capsys.readouterr().out
