"""Fully masked query rows (e.g. a source that is all padding) and bad masks, through every layer.

Convention (helpers.attention): a query row with no allowed key gets zero attention output
and zero weights, on the fused path as on the weights path, never NaN.

On torch 2.13 CPU `F.scaled_dot_product_attention` itself already returns 0 for such rows,
but its documented reference implementation (softmax over all -inf = 0/0) returns NaN, and
so did older releases and some CUDA kernels (pytorch/pytorch#103749, #109517). The
``backend`` fixture runs every test twice: with torch's kernel, and with that NaN-giving
reference patched in, so our guarantee does not rest on one backend's choice.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import helpers.attention as attention_module
from helpers.attention import MultiHeadAttention, padding_mask
from helpers.layers import DecoderLayer, EncoderLayer
from helpers.models import GPT, GPTConfig, Transformer
from helpers.stacks import Decoder, Encoder

DTYPES = [torch.float32, torch.float64]
TORCH_SDPA = F.scaled_dot_product_attention


def reference_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """The reference implementation in F.scaled_dot_product_attention's docstring: NaN on empty rows."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale  # (B, H, T_q, T_k)
    if is_causal:
        assert attn_mask is None
        T_q, T_k = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(T_q, T_k, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = F.dropout(torch.softmax(scores, dim=-1), dropout_p)
    return weights @ value


@pytest.fixture(params=["torch", "reference"])
def backend(request, monkeypatch):
    if request.param == "reference":
        monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", reference_sdpa)
    return request.param


def tol(dtype):
    return 1e-6 if dtype == torch.float32 else 1e-12


def test_reference_backend_really_gives_nan_and_torch_2_13_gives_zero():
    """The fixture can make the tests fail: the reference gives NaN where torch (2.13, CPU) gives 0."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 3, 4, generator=g) for _ in range(3))
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 1, :] = False
    assert torch.isnan(reference_sdpa(q, k, v, attn_mask=mask)[..., 1, :]).all()
    out = TORCH_SDPA(q, k, v, attn_mask=mask)
    print(f"torch {torch.__version__} F.scaled_dot_product_attention on a fully masked row: {out[0, 0, 1].tolist()}")
    torch.testing.assert_close(out[..., [0, 2], :], reference_sdpa(q, k, v, attn_mask=mask)[..., [0, 2], :])


# ---------------------------------------------------------------- MultiHeadAttention
@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_fused_path_zero_for_fully_masked_rows(backend, dtype):
    torch.manual_seed(0)
    m = MultiHeadAttention(12, 3).to(dtype)
    x = torch.randn(3, 5, 12, dtype=dtype, requires_grad=True)
    mask = torch.rand(3, 3, 5, 5) < 0.7
    mask[..., 0] = True  # every row can see something ...
    mask[1, 2, 3, :] = False  # ... except one row of one head,
    mask[2] = False  # and the whole of batch row 2
    fused = m(x, x, x, mask=mask)
    weighted, w = m(x, x, x, mask=mask, return_weights=True)
    assert torch.isfinite(fused).all() and torch.isfinite(weighted).all()
    torch.testing.assert_close(fused, weighted, rtol=0, atol=tol(dtype))
    assert (w[1, 2, 3] == 0).all() and (w[2] == 0).all()
    # batch row 2 sees nothing in any head: attention output 0, so the layer output is out_proj's bias
    torch.testing.assert_close(fused[2], m.out_proj.bias.expand(5, 12), rtol=0, atol=0)
    # the other rows are what PyTorch's kernel gives with the mask as is (the code before the fix)
    q, k, v = (m._split(p(x)) for p in (m.q_proj, m.k_proj, m.v_proj))
    before = m.out_proj(TORCH_SDPA(q, k, v, attn_mask=mask).transpose(1, 2).reshape(3, 5, 12))
    torch.testing.assert_close(fused[:2], before[:2], rtol=0, atol=tol(dtype))
    fused.square().sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in m.parameters())


@pytest.mark.parametrize("dtype", DTYPES)
def test_mha_padding_mask_with_is_causal_and_empty_rows(backend, dtype):
    torch.manual_seed(1)
    m = MultiHeadAttention(8, 2).to(dtype).eval()
    x = torch.randn(2, 4, 8, dtype=dtype)
    mask = padding_mask(torch.tensor([[0, 0, 3, 4], [1, 2, 3, 4]]), pad_id=0)  # row 0: queries 0, 1 see nothing
    fused = m(x, x, x, mask=mask, is_causal=True)
    weighted, _ = m(x, x, x, mask=mask, is_causal=True, return_weights=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, weighted, rtol=0, atol=tol(dtype))
    torch.testing.assert_close(fused[0, :2], m.out_proj.bias.expand(2, 8), rtol=0, atol=0)


def test_is_causal_fast_path_equals_explicit_mask(backend):
    torch.manual_seed(2)
    m = MultiHeadAttention(16, 4).double().eval()
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    explicit = m(x, x, x, mask=torch.ones(9, 9, dtype=torch.bool).tril())
    weighted, _ = m(x, x, x, is_causal=True, return_weights=True)
    torch.testing.assert_close(m(x, x, x, is_causal=True), explicit, rtol=0, atol=1e-12)
    torch.testing.assert_close(m(x, x, x, is_causal=True), weighted, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- layers and stacks
def _batch_with_empty_row(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, 16, generator=g, dtype=dtype)
    memory = torch.randn(3, 6, 16, generator=g, dtype=dtype)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[0, 4:] = False  # row 0: ordinary padding
    keep[1] = False  # row 1: nothing but padding
    return x, memory, keep[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_fully_padded_row(backend, dtype, norm_first):
    torch.manual_seed(0)
    enc = Encoder(2, 16, 4, 24, dropout=0.0, norm_first=norm_first).to(dtype).eval()
    _, src, keep = _batch_with_empty_row(dtype)
    out = enc(src, mask=keep)
    out_w, w = enc(src, mask=keep, return_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    torch.testing.assert_close(out, out_w, rtol=0, atol=tol(dtype))
    assert (w[:, 1] == 0).all()
    alone = enc(src[[0, 2]], mask=keep[[0, 2]])  # the normal rows without the empty one
    torch.testing.assert_close(out[[0, 2]], alone, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_cross_attention_fully_padded_memory_row(backend, dtype, norm_first):
    torch.manual_seed(0)
    dec = Decoder(2, 16, 4, 24, dropout=0.0, norm_first=norm_first).to(dtype).train()
    x, memory, keep = _batch_with_empty_row(dtype)
    x.requires_grad_()
    out = dec(x, memory, memory_mask=keep, is_causal=True)
    out_w, _, w_cross = dec(x, memory, memory_mask=keep, is_causal=True, return_weights=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, out_w, rtol=0, atol=tol(dtype))
    assert (w_cross[:, 1] == 0).all()
    alone = dec(x[[0, 2]], memory[[0, 2]], memory_mask=keep[[0, 2]], is_causal=True)
    torch.testing.assert_close(out[[0, 2]], alone, rtol=0, atol=1e-6)
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(p.grad).all() for p in dec.parameters())


@pytest.mark.parametrize("dtype", DTYPES)
def test_layers_fully_padded_row(backend, dtype):
    torch.manual_seed(0)
    x, memory, keep = _batch_with_empty_row(dtype)
    el = EncoderLayer(16, 4, 24, dropout=0.0).to(dtype).eval()
    dl = DecoderLayer(16, 4, 24, dropout=0.0).to(dtype).eval()
    assert torch.isfinite(el(memory, mask=keep)).all()
    assert torch.isfinite(dl(x, memory, memory_mask=keep)).all()


# ---------------------------------------------------------------- Transformer and GPT
def _transformer(dtype, norm_first=False):
    torch.manual_seed(0)
    args = dict(d_model=16, n_heads=4, n_layers=2, d_ff=24, dropout=0.0, max_len=16, pad_id=0)
    return Transformer(11, 13, norm_first=norm_first, **args).to(dtype).eval()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_fully_padded_source_row(backend, dtype, norm_first):
    model = _transformer(dtype, norm_first)
    src = torch.tensor([[3, 4, 5, 0, 0], [0, 0, 0, 0, 0], [6, 7, 8, 9, 10]])  # row 1 is all padding
    tgt = torch.tensor([[1, 5, 6], [1, 7, 8], [1, 2, 0]])
    logits = model(src, tgt)
    logits_w, w = model(src, tgt, return_weights=True)
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(t).all() for t in w)
    torch.testing.assert_close(logits, logits_w, rtol=0, atol=10 * tol(dtype))
    assert (w.encoder[:, 1] == 0).all() and (w.decoder_cross[:, 1] == 0).all()
    alone = model(src[[0, 2]], tgt[[0, 2]])
    torch.testing.assert_close(logits[[0, 2]], alone, rtol=0, atol=1e-6)
    ys = model.greedy_decode(src, max_len=4, bos_id=1, eos_id=2)
    assert ys.shape[0] == 3 and ys[:, 0].eq(1).all()


def test_transformer_fully_padded_source_row_trains(backend):
    model = _transformer(torch.float32).train()
    src = torch.tensor([[3, 4, 0], [0, 0, 0]])
    tgt = torch.tensor([[1, 5, 6], [1, 7, 8]])
    loss = F.cross_entropy(model(src, tgt).flatten(0, 1), tgt.roll(-1, 1).flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ---------------------------------------------------------------- bad masks and empty inputs
@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(src_mask=[[True]]), TypeError, "src_mask"),
        (dict(src_mask=torch.ones(2, 1, 1, 3)), TypeError, "src_mask"),
        (dict(src_mask=torch.ones(2, 1, 1, 3, dtype=torch.long)), TypeError, "src_mask"),
        (dict(src_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool)), ValueError, "src_mask"),
        (dict(src_mask=torch.ones(3, 1, 1, 3, dtype=torch.bool)), ValueError, "src_mask"),
        (dict(tgt_mask=torch.ones(2, 2)), TypeError, "tgt_mask"),
        (dict(tgt_mask=torch.ones(3, 1, 2, 2, dtype=torch.bool)), ValueError, "tgt_mask"),
        (dict(memory_mask=torch.ones(2, 1, 1, 3)), TypeError, "memory_mask"),
        (dict(memory_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool)), ValueError, "memory_mask"),
        (dict(memory_mask="all"), TypeError, "memory_mask"),
    ],
)
def test_transformer_bad_masks_are_named(kwargs, err, match):
    model = _transformer(torch.float32)
    src, tgt = torch.tensor([[3, 4, 0], [5, 6, 7]]), torch.tensor([[1, 2], [1, 3]])
    with pytest.raises(err, match=match):
        model(src, tgt, **kwargs)


def test_transformer_decode_checks_memory():
    model = _transformer(torch.float32)
    tgt = torch.tensor([[1, 2], [1, 3]])
    with pytest.raises(ValueError, match="memory"):
        model.decode(tgt, torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="memory"):
        model.decode(tgt, torch.zeros(2, 0, 16))
    with pytest.raises(TypeError, match="memory"):
        model.decode(tgt, torch.zeros(2, 3, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="memory_mask"):
        model.decode(tgt, torch.zeros(2, 3, 16), memory_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))


def test_empty_sequences_raise():
    model = _transformer(torch.float32)
    ok = torch.ones(2, 3, dtype=torch.long)
    empty = torch.ones(2, 0, dtype=torch.long)
    for call in (lambda: model(empty, ok), lambda: model(ok, empty), lambda: model.greedy_decode(empty, 3, 1, 2)):
        with pytest.raises(ValueError, match="length 0"):
            call()
    gpt = GPT(GPTConfig(vocab_size=10, block_size=8, d_model=12, n_heads=3, n_layers=1))
    for call in (lambda: gpt(empty), lambda: gpt.attention_weights(empty), lambda: gpt.generate(empty, 2)):
        with pytest.raises(ValueError, match="T=0"):
            call()


def test_layer_masks_are_named():
    x = torch.randn(2, 3, 16)
    el, dl = EncoderLayer(16, 4, 24, dropout=0.0), DecoderLayer(16, 4, 24, dropout=0.0)
    with pytest.raises(TypeError, match="mask"):
        el(x, mask=torch.ones(2, 1, 1, 3))
    with pytest.raises(ValueError, match="self_mask"):
        dl(x, x, self_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="memory_mask"):
        dl(x, x, memory_mask=torch.ones(2, 1, 1, 3))
    with pytest.raises(ValueError, match="memory_mask"):
        Decoder(1, 16, 4, 24)(x, x, memory_mask=torch.ones(3, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="memory"):
        dl(x, x.tolist())
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        dl(x[0], x)


def test_gpt_loss_with_no_counted_target_raises():
    """Mean cross-entropy over zero targets is 0/0 = NaN: say so instead."""
    gpt = GPT(GPTConfig(vocab_size=10, block_size=8, d_model=12, n_heads=3, n_layers=1))
    idx = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="targets"):
        gpt(idx, torch.full((2, 3), -100))
    with pytest.raises(ValueError, match="targets"):
        gpt(idx[:0], idx[:0])
    targets = torch.full((2, 3), -100)
    targets[0, 0] = 4
    _, loss = gpt(idx, targets)
    assert torch.isfinite(loss)
