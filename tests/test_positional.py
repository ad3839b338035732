import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    inverse_frequencies,
    relative_rotation,
    sinusoidal_table,
    wavelengths,
)


def loop_table(seq_len, d_model, base):
    """The paper's formula, one entry at a time, in Python floats (float64)."""
    rows = []
    for pos in range(seq_len):
        row = []
        for j in range(d_model):
            angle = pos / base ** ((j - j % 2) / d_model)  # 2i = j for sin, j - 1 for cos
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("seq_len, d_model", [(1, 2), (4, 4), (5, 12), (50, 64), (3, 130)])
@pytest.mark.parametrize("base", [10000.0, 100.0, 10, 2.5])
def test_table_equals_formula_and_loop(seq_len, d_model, base):
    table = sinusoidal_table(seq_len, d_model, base)
    assert table.shape == (seq_len, d_model) and table.dtype == torch.float32
    torch.testing.assert_close(
        table.double(), loop_table(seq_len, d_model, base), rtol=0, atol=1e-7
    )


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.floats(1.5, 1e5))
def test_table_formula_property(seq_len, half, base):
    d_model = 2 * half
    table = sinusoidal_table(seq_len, d_model, base).double()
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]  # (T, 1)
    theta = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (C/2,)
    torch.testing.assert_close(table[:, 0::2], torch.sin(pos * theta), rtol=0, atol=1e-7)
    torch.testing.assert_close(table[:, 1::2], torch.cos(pos * theta), rtol=0, atol=1e-7)
    # Every position has the same norm sqrt(C/2): sin^2 + cos^2 = 1 per pair.
    torch.testing.assert_close(
        table.norm(dim=1), torch.full((seq_len,), math.sqrt(half), dtype=torch.float64)
    )


def test_wavelengths_are_a_geometric_progression():
    lam = wavelengths(128)
    assert lam[0].item() == pytest.approx(2 * math.pi)
    torch.testing.assert_close(
        lam[1:] / lam[:-1], torch.full((63,), 10000 ** (2 / 128), dtype=torch.float64)
    )
    assert lam[-1].item() == pytest.approx(2 * math.pi * 10000 ** (126 / 128))
    torch.testing.assert_close(
        inverse_frequencies(4, 100.0), torch.tensor([1.0, 0.1], dtype=torch.float64)
    )


@pytest.mark.parametrize("k", [0, 1, 3, -2, 17])
@pytest.mark.parametrize("d_model, base", [(4, 10000.0), (12, 100.0), (64, 10000.0)])
def test_relative_rotation_identity(k, d_model, base):
    T = 40
    table = sinusoidal_table(T + 20, d_model, base).double()  # (T + 20, C)
    M = relative_rotation(k, d_model, base)  # (C, C)
    pos = torch.arange(max(0, -k), T)
    # PE[pos + k] = M_k PE[pos] for every pos, with one M_k that does not depend on pos.
    torch.testing.assert_close(table[pos + k], table[pos] @ M.T, rtol=0, atol=1e-6)
    torch.testing.assert_close(M @ M.T, torch.eye(d_model, dtype=torch.float64))  # a rotation
    torch.testing.assert_close(
        M @ relative_rotation(5, d_model, base), relative_rotation(k + 5, d_model, base)
    )
    off_diagonal_blocks = M.clone()
    for i in range(0, d_model, 2):
        off_diagonal_blocks[i : i + 2, i : i + 2] = 0
    assert off_diagonal_blocks.abs().max() == 0


def test_dot_products_depend_only_on_offset():
    C = 64
    table = sinusoidal_table(50, C).double()  # (T, C)
    gram = table @ table.T  # (T, C) @ (C, T) -> (T, T)
    offset = torch.arange(50)[:, None] - torch.arange(50)[None, :]  # (T, T)
    closed = torch.cos(offset[..., None] * inverse_frequencies(C)).sum(-1)  # (T, T, C/2) -> (T, T)
    torch.testing.assert_close(gram, closed, rtol=0, atol=1e-5)
    assert gram.diagonal().sub(C / 2).abs().max() < 1e-5  # the largest value sits at offset 0


def test_module_adds_the_table_with_odd_sizes():
    B, T, C = 2, 5, 12
    pe = SinusoidalPositionalEncoding(C, max_len=7, base=100.0)
    x = torch.randn(B, T, C)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(T, C, 100.0))
    assert pe(x).shape == (B, T, C)
    assert pe(x.double()).dtype == torch.float64
    assert "base=100" in repr(pe)


def test_buffer_is_not_a_parameter_and_follows_to():
    pe = SinusoidalPositionalEncoding(8, max_len=10)
    assert list(pe.parameters()) == []
    assert "table" in dict(pe.named_buffers())
    assert pe.to(torch.float64).table.dtype == torch.float64
    assert pe.to("meta").table.device.type == "meta"
    if torch.cuda.is_available():
        assert pe.to("cuda").table.device.type == "cuda"


def test_dropout_is_applied_in_training_only():
    pe = SinusoidalPositionalEncoding(8, max_len=10, dropout=0.5)
    x = torch.zeros(4, 10, 8)
    torch.manual_seed(0)
    assert (pe.train()(x) == 0).float().mean() > 0.2
    torch.testing.assert_close(pe.eval()(x), x + pe.table)


def test_learned_embedding_is_trained_and_bounded():
    emb = LearnedPositionalEmbedding(max_len=6, d_model=5)
    x = torch.zeros(2, 6, 5)
    out = emb(x)
    assert out.shape == (2, 6, 5)
    out.sum().backward()
    assert emb.embedding.weight.grad is not None
    with pytest.raises(ValueError, match="max_len=6"):
        emb(torch.zeros(1, 7, 5))
    # The sinusoidal table has no such limit: any length can be computed.
    assert sinusoidal_table(7, 6).shape == (7, 6)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: sinusoidal_table(4, 5), ValueError, "even"),
        (lambda: sinusoidal_table(4, 0), ValueError, "d_model"),
        (lambda: sinusoidal_table(4, -2), ValueError, "d_model"),
        (lambda: sinusoidal_table(0, 4), ValueError, "seq_len"),
        (lambda: sinusoidal_table(-1, 4), ValueError, "seq_len"),
        (lambda: sinusoidal_table(4, 4, base=0), ValueError, "base"),
        (lambda: sinusoidal_table(4, 4, base=-10.0), ValueError, "base"),
        (lambda: sinusoidal_table(4, 4, base=float("nan")), ValueError, "base"),
        (lambda: sinusoidal_table(4, 4, base=float("inf")), ValueError, "base"),
        (lambda: sinusoidal_table(4, 4, base="10000"), TypeError, "base"),
        (lambda: sinusoidal_table(4.0, 4), TypeError, "seq_len"),
        (lambda: sinusoidal_table(4, True), TypeError, "d_model"),
        (lambda: relative_rotation(1.5, 4), TypeError, "k"),
        (lambda: SinusoidalPositionalEncoding(7), ValueError, "even"),
        (lambda: SinusoidalPositionalEncoding(8, max_len=0), ValueError, "max_len"),
        (lambda: SinusoidalPositionalEncoding(8, dropout=1.0), ValueError, "dropout"),
        (
            lambda: SinusoidalPositionalEncoding(8, max_len=4)(torch.zeros(1, 5, 8)),
            ValueError,
            "max_len=4",
        ),
        (lambda: SinusoidalPositionalEncoding(8)(torch.zeros(1, 3, 6)), ValueError, "d_model=8"),
        (lambda: SinusoidalPositionalEncoding(8)(torch.zeros(3, 8)), ValueError, "3 dimensions"),
        (
            lambda: SinusoidalPositionalEncoding(8)(torch.zeros(1, 3, 8, dtype=torch.long)),
            TypeError,
            "floating",
        ),
        (lambda: SinusoidalPositionalEncoding(8)([[0.0] * 8]), TypeError, "torch.Tensor"),
        (lambda: LearnedPositionalEmbedding(0, 8), ValueError, "max_len"),
        (lambda: LearnedPositionalEmbedding(4, 8)(torch.zeros(1, 3, 6)), ValueError, "d_model=8"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_table_is_float32_accurate_far_from_the_origin():
    # Built in float32 (as the Annotated Transformer does) the angles lose ~1e-4 by position
    # 5000; the helper computes in float64 and only rounds the final values.
    T, C = 5000, 512
    pos = torch.arange(T, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    angle = pos * 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)  # (T, C/2)
    exact = torch.stack([torch.sin(angle), torch.cos(angle)], -1).flatten(1)  # (T, C)
    assert (sinusoidal_table(T, C).double() - exact).abs().max() < 1e-7


def test_module_buffer_is_not_saved_and_stops_at_max_len():
    pe = SinusoidalPositionalEncoding(8, max_len=16)
    assert "table" not in pe.state_dict() and list(pe.state_dict()) == []
    with pytest.raises(ValueError, match="max_len=16"):
        pe(torch.zeros(1, 17, 8))
    torch.testing.assert_close(SinusoidalPositionalEncoding(8, max_len=32)(torch.zeros(1, 17, 8))[0],
                               sinusoidal_table(17, 8))
