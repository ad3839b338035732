"""The checks of notebook 03 (positional encoding): three builds and two exercises.

Each check gives the learner's code copies of its inputs (`call_unchanged`), compares with the
plain formulas on inputs chosen to reveal the classic mistakes, and refuses an answer that just
calls the helper it reproduces (`refuse_calls`). RoPE comes in two directions: this course's M_m
(the shift of its (sin, cos) pairs, e^{-imθ}) and RoFormer's (LLaMA's) e^{+imθ}, M_m's transpose;
both give scores that depend on the offset only, and the checks accept both and say which one the
learner wrote. Proven by tests/test_catalogue_nb03.py.
"""

from __future__ import annotations

import math

import torch

from helpers.compare import check_close
from helpers.exercises import call_unchanged, refuse_calls
from helpers.positional import (
    SinusoidalPositionalEncoding,
    inverse_frequencies,
    relative_rotation,
    sinusoidal_table,
)


def _pe_loop(seq_len, d_model, base):  # the definition, one entry at a time, in Python floats
    pe = [[0.0] * d_model for _ in range(seq_len)]
    for pos in range(seq_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos][2 * i], pe[pos][2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def _notebook_loop(fn):
    """The notebook's own `pe_loop`, if the learner's function can see it (calling it is a loop)."""
    loop = getattr(fn, "__globals__", {}).get("pe_loop")
    return (loop,) if callable(loop) else ()


def check_pe_table(pe_table):
    for T, C, base in ((4, 4, 10000.0), (9, 12, 100.0), (50, 64, 10000.0)):
        with refuse_calls(pe_table, sinusoidal_table, *_notebook_loop(pe_table), label="pe_table"):
            got = pe_table(T, C, base)
        assert torch.is_tensor(got) and tuple(got.shape) == (T, C), (
            f"pe_table({T}, {C}): expected a tensor of shape ({T}, {C}), got {getattr(got, 'shape', type(got).__name__)}")
        assert got.dtype == torch.float64, f"expected float64, got {got.dtype}"
        expected = torch.tensor(_pe_loop(T, C, base), dtype=torch.float64)
        if torch.allclose(got[:, : C // 2], expected[:, 0::2], atol=1e-9):
            raise AssertionError("the sines fill the first half of the columns: they go to the even columns 0::2, "
                                 "the cosines to the odd columns 1::2")
        if torch.allclose(got[:, 0::2], expected[:, 1::2], atol=1e-9):
            raise AssertionError("cosines in the even columns: the sines go to 0::2, the cosines to 1::2")
        diff = (got - expected).abs().max().item()
        if 1e-12 < diff < 1e-6:
            raise AssertionError(f"pe_table({T}, {C}, base={base}): max abs diff {diff:.1e}: differences near 1e-8 mean "
                                 "float32 somewhere (positions, frequencies or angles): compute in float64 throughout")
        check_close(f"pe_table({T}, {C}, base={base}) vs the definition sin/cos(pos / base^(2i/d))", got, expected,
                    atol=1e-12, quiet=True)
    print("pe_table: correct")


def check_positional_encoding(PositionalEncoding):
    with refuse_calls(PositionalEncoding, SinusoidalPositionalEncoding, label="PositionalEncoding"):
        module = PositionalEncoding(8, 16)
    params = [n for n, _ in module.named_parameters()]
    assert params == [], f"the table must not be a parameter (the optimizer would train it): found {params}"
    keys = list(module.state_dict())
    assert keys == ["pe"], f"state_dict keys: expected ['pe'] (a persistent buffer named pe), got {keys}"
    assert module.pe.dtype == torch.float32, f"the buffer pe must be float32 (the model's dtype), got {module.pe.dtype}"
    g = torch.Generator().manual_seed(0)
    for T in (5, 16):  # 16 = max_len: the longest sequence the table covers
        x = torch.randn(2, T, 8, generator=g)  # (B, T, C)
        try:
            out = call_unchanged(module, x, label="PositionalEncoding.forward")
        except NotImplementedError:
            raise
        except (ValueError, RuntimeError, IndexError) as err:
            raise AssertionError(f"x of shape (2, {T}, 8) with max_len=16 raised {type(err).__name__}: {err} "
                                 f"(T = max_len fits: the table has max_len rows)") from None
        assert tuple(out.shape) == (2, T, 8), f"x (2, {T}, 8): expected output (2, {T}, 8), got {tuple(out.shape)}"
        assert out.dtype == x.dtype, f"x is {x.dtype}: expected a {x.dtype} output, got {out.dtype}"
        check_close(f"T={T}: forward(x) vs x + sinusoidal_table({T}, 8)", out, x + sinusoidal_table(T, 8), atol=1e-6, quiet=True)
    moved = module.to("meta")
    assert moved.pe.device.type == "meta", f".to('meta') must move the table, it stayed on {moved.pe.device}"
    try:
        PositionalEncoding(8, 16)(torch.zeros(1, 17, 8))
    except NotImplementedError:
        raise
    except ValueError as e:
        assert "16" in str(e) or "max_len" in str(e), f"the ValueError for T=17 must name max_len (16), got: {e}"
    except Exception as e:  # noqa: BLE001 - torch's own error: the length is not checked
        raise AssertionError(f"T = 17 > max_len = 16 must raise your ValueError naming max_len, got {type(e).__name__} "
                             "from torch (compare T with max_len before slicing)") from None
    else:
        raise AssertionError("T = 17 > max_len = 16 must raise ValueError")
    print("PositionalEncoding: correct")


_CONVENTIONS = {-1: "this course's M_m (e^{-imθ}: a (sin, cos) pair turns as the position advances)",
                1: "RoFormer's convention (e^{+imθ}, as in LLaMA: M_m's transpose)"}


def _rotate(x, positions, sign, base=10000.0, half_split=False):
    """Each pair of x (T, C) turned by sign·m·θ_i: sign -1 is M_m, +1 is RoFormer's (float64)."""
    C = x.shape[-1]
    angle = positions.double()[:, None] * inverse_frequencies(C, base)  # (T, C/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    a, b = (x[..., : C // 2], x[..., C // 2:]) if half_split else (x[..., 0::2], x[..., 1::2])
    first = a * cos + b * sin if sign == -1 else a * cos - b * sin
    second = -a * sin + b * cos if sign == -1 else a * sin + b * cos
    if half_split:
        return torch.cat([first, second], -1)
    return torch.stack([first, second], -1).flatten(-2)  # (T, C/2, 2) -> (T, C)


def _rope_verdict(name, got, x, positions, base=10000.0):
    """The convention `got` follows (-1 or +1); AssertionError naming the cause if neither."""
    for sign in (-1, 1):
        if torch.allclose(got, _rotate(x, positions, sign, base), atol=1e-9, rtol=0):
            return sign
    for row, m in enumerate(positions.tolist()):  # noqa: B007 - row and m name the first bad row below
        if not any(torch.allclose(got[row], _rotate(x, positions, s, base)[row], atol=1e-9) for s in (-1, 1)):
            break
    rows = torch.arange(len(positions))
    if any(torch.allclose(got, _rotate(x, rows, s, base), atol=1e-9) for s in (-1, 1)):
        raise AssertionError(f"{name}: row {row} sits at position {m}, and you rotated it by its row number {row}: "
                             "use the angles positions[t]·θ_i, not arange(T)")
    if any(torch.allclose(got, _rotate(x, positions, s, base, half_split=True), atol=1e-9) for s in (-1, 1)):
        raise AssertionError(f"{name}: you paired x_i with x_(i+C/2) (the rotate-half layout of Hugging Face's LLaMA); "
                             "here a pair is two neighbours (x_2i, x_2i+1), as in M_m")
    turned = {s for r, p in enumerate(positions.tolist()) if p for s in (-1, 1)
              if torch.allclose(got[r], _rotate(x, positions, s, base)[r], atol=1e-9)}
    if turned == {-1, 1}:
        raise AssertionError(f"{name}: some rows turn one way and some the other (position {m}): pick one direction")
    raise AssertionError(f"{name}: position {m}: your row matches neither M_m x nor RoFormer's rotation: each pair "
                         "(x_2i, x_2i+1) must be rotated by the angle m·θ_i (cos on the diagonal, ±sin off it, "
                         "opposite signs), with θ_i = base^(-2i/C)")


def check_apply_rope(apply_rope):
    g = torch.Generator().manual_seed(0)
    x, positions = torch.randn(6, 8, dtype=torch.float64, generator=g), torch.tensor([0, 1, 2, 7, 100, 3])

    def run(*args):
        with refuse_calls(apply_rope, relative_rotation, label="apply_rope"):
            try:
                return call_unchanged(apply_rope, *args, label="apply_rope")
            except NotImplementedError:
                raise  # the stub: attempt() says "not done yet"
            except (RuntimeError, IndexError) as err:
                shape = tuple(args[0].shape)
                raise AssertionError(f"apply_rope on x of shape {shape} raised {type(err).__name__}: "
                                     f"{str(err).splitlines()[0]} (any leading dimensions: slice the last one with "
                                     "x[..., 0::2] and x[..., 1::2])") from None

    got = run(x, positions)
    assert torch.is_tensor(got) and tuple(got.shape) == (6, 8), f"x (6, 8): expected output (6, 8), got {getattr(got, 'shape', got)}"
    sign = _rope_verdict("apply_rope", got, x, positions)
    batch = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=g)  # (B, H, T, C)
    got_batch = run(batch, torch.arange(5))
    check_close("a (2, 3, 5, 8) batch vs one row at a time", got_batch,
                _rotate(batch.reshape(6, 5, 8), torch.arange(5), sign).reshape(2, 3, 5, 8), atol=1e-12, quiet=True)
    x32 = x.float()
    got32 = run(x32, positions)
    assert got32.dtype == torch.float32, f"x in float32: expected a float32 result, got {got32.dtype}"
    check_close("float32 x vs the float64 rotation", got32, _rotate(x, positions, sign), atol=1e-5, quiet=True)
    q, k = torch.randn(2, 8, dtype=torch.float64, generator=g)

    def score(m, n):
        return run(q[None], torch.tensor([m]))[0] @ run(k[None], torch.tensor([n]))[0]
    assert abs(score(3, 5) - score(100, 102)) < 1e-9, "the score of positions (3, 5) and (100, 102) must be the same"
    print(f"apply_rope: correct ({_CONVENTIONS[sign]})")


def check_exercise_1(rope_complex):
    g = torch.Generator().manual_seed(2)
    x, positions = torch.randn(5, 12, dtype=torch.float64, generator=g), torch.tensor([0, 1, 4, 50, 999])
    signs = []
    for base in (10000.0, 100.0):
        with refuse_calls(rope_complex, relative_rotation, label="exercise 1"):
            got = call_unchanged(rope_complex, x, positions, base, label="rope_complex")
        assert torch.is_tensor(got) and not got.is_complex(), (
            f"expected a real tensor (torch.view_as_real, then flatten the last two dimensions), got "
            f"{getattr(got, 'dtype', type(got).__name__)}")
        assert tuple(got.shape) == (5, 12) and got.dtype == torch.float64, (
            f"expected a real (5, 12) float64 tensor, got {tuple(got.shape)} {got.dtype}")
        signs.append(_rope_verdict(f"rope_complex (base={base})", got, x, positions, base))
    assert signs[0] == signs[1], "base 10000 and base 100 turn the pairs opposite ways: one sign throughout"
    print(f"exercise 1: correct ({_CONVENTIONS[signs[0]]})")


def check_exercise_2(half_offset):
    for d_model, base in ((128, 10000.0), (32, 10000.0), (16, 100.0)):
        k = half_offset(d_model, base)
        assert isinstance(k, int) and not isinstance(k, bool) and k > 0, f"expected an int > 0, got {k!r}"
        ks = torch.arange(k + 1, dtype=torch.float64)  # (k+1,)
        dots = torch.cos(ks[:, None] * inverse_frequencies(d_model, base)).sum(-1)  # (k+1, C/2) -> (k+1,), §5
        half = dots[0].item() / 2
        assert dots[k] < half, (f"d_model={d_model}, base={base}: at k={k} the dot product is still ≥ half "
                                f"of its value at k = 0 (which is d_model/2 = {dots[0].item():g})")
        assert (dots[:k] >= half).all(), (f"d_model={d_model}, base={base}: {k} is not the first offset below half "
                                          f"of PE(m)·PE(m) = {dots[0].item():g}")
    print(f"exercise 2: correct (k = {half_offset(128)} for d_model = 128)")
