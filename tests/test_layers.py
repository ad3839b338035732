"""Tests for helpers.layers / helpers.stacks: shapes, and equality with PyTorch's four classes.

Run with ``pytest -s`` to see the max absolute error of every equivalence.
Masks: ours are True = may attend; PyTorch's bool masks are True = blocked, hence the ``~``.
"""

import itertools
import warnings

import pytest
import torch
from torch import nn

from helpers.layers import DecoderLayer, EncoderLayer, FeedForward
from helpers.stacks import Decoder, Encoder

B, S, T, C, H, F, L = 2, 7, 5, 16, 4, 24, 2  # odd-ish sizes; H=4 lets PyTorch's nested-tensor path run
TOL = 1e-5
CASES = list(itertools.product([False, True], ["relu", "gelu"]))  # (norm_first, activation)


def report(name, a, b):
    err = (a - b).abs().max().item()
    print(f"{name}: max abs error {err:.2e}")
    assert err < TOL, f"{name}: {err}"
    return err


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, C, generator=g)
    memory = torch.randn(B, S, C, generator=g)
    src = torch.randn(B, S, C, generator=g)
    pad = torch.zeros(B, S, dtype=torch.bool)  # PyTorch: True = padding
    pad[0, 4:] = True
    tgt_pad = torch.zeros(B, T, dtype=torch.bool)
    tgt_pad[1, 3:] = True
    return x, memory, src, pad, tgt_pad


def torch_causal(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # True = blocked (future)


def keep(pad):
    return (~pad)[:, None, None, :]  # (B, S) True=pad -> (B, 1, 1, S) True=may attend


def test_feedforward_shape_and_positionwise():
    ff = FeedForward(C, F, activation="gelu")
    x = torch.randn(B, T, C)
    out = ff(x)
    assert out.shape == (B, T, C)
    assert torch.allclose(out[:, 2], ff(x[:, 2:3])[:, 0], atol=1e-6)  # each position on its own


def test_bad_arguments():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(C, F, activation="tanh")
    with pytest.raises(ValueError, match="divisible"):
        EncoderLayer(10, 3, 20)
    with pytest.raises(ValueError, match="n_layers"):
        Encoder(0, C, H, F)
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        EncoderLayer.from_torch(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="TransformerDecoder"):
        Decoder.from_torch(nn.TransformerEncoder(nn.TransformerEncoderLayer(C, H, F, batch_first=True), 1))
    with pytest.raises(ValueError, match="batch_first"):
        EncoderLayer.from_torch(nn.TransformerEncoderLayer(C, H, F))
    with pytest.raises(ValueError, match="relu or"):
        EncoderLayer.from_torch(nn.TransformerEncoderLayer(C, H, F, activation=torch.tanh, batch_first=True))


@pytest.mark.parametrize("norm_first, activation", CASES)
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(1)
    ref = nn.TransformerEncoderLayer(C, H, F, 0.1, activation, batch_first=True, norm_first=norm_first).eval()
    ours = EncoderLayer.from_torch(ref).eval()
    x, _, src, pad, _ = inputs()
    tag = f"EncoderLayer norm_first={norm_first} {activation}"
    report(f"{tag} no mask", ours(src), ref(src))
    report(f"{tag} padding", ours(src, mask=keep(pad)), ref(src, src_key_padding_mask=pad))
    report(f"{tag} causal", ours(x, is_causal=True), ref(x, src_mask=torch_causal(T), is_causal=True))
    with torch.no_grad():  # PyTorch's fused "fast path" runs here: different kernels, same function
        report(f"{tag} fast path", ours(src, mask=keep(pad)), ref(src, src_key_padding_mask=pad))


@pytest.mark.parametrize("norm_first, activation", CASES)
def test_decoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(2)
    ref = nn.TransformerDecoderLayer(C, H, F, 0.1, activation, batch_first=True, norm_first=norm_first).eval()
    ours = DecoderLayer.from_torch(ref).eval()
    x, memory, _, pad, tgt_pad = inputs()
    tag = f"DecoderLayer norm_first={norm_first} {activation}"
    report(f"{tag} no mask", ours(x, memory), ref(x, memory))
    mine = ours(x, memory, self_mask=keep(tgt_pad), memory_mask=keep(pad), is_causal=True)
    theirs = ref(x, memory, tgt_mask=torch_causal(T), tgt_key_padding_mask=tgt_pad,
                 memory_key_padding_mask=pad, tgt_is_causal=True)
    report(f"{tag} causal+padding", mine, theirs)
    # An explicit (T, S) memory mask instead of the key-padding form.
    mem_block = torch.rand(T, S, generator=torch.Generator().manual_seed(5)) < 0.3
    mem_block[:, 0] = False  # every query keeps at least one key
    report(f"{tag} memory mask", ours(x, memory, memory_mask=~mem_block), ref(x, memory, memory_mask=mem_block))


@pytest.mark.parametrize("norm_first, activation", CASES)
@pytest.mark.parametrize("final_norm", [False, True])
def test_encoder_matches_torch(norm_first, activation, final_norm):
    torch.manual_seed(3)
    layer = nn.TransformerEncoderLayer(C, H, F, 0.1, activation, batch_first=True, norm_first=norm_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "enable_nested_tensor is True, but ... norm_first was True"
        ref = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(C) if final_norm else None).eval()
    for p in ref.parameters():  # the clones start identical: make the layers differ
        nn.init.normal_(p, std=0.2)
    ours = Encoder.from_torch(ref).eval()
    assert (ours.norm is None) != final_norm
    _, _, src, pad, _ = inputs()
    tag = f"Encoder norm_first={norm_first} {activation} final_norm={final_norm}"
    report(f"{tag} no mask", ours(src), ref(src))
    report(f"{tag} padding", ours(src, mask=keep(pad)), ref(src, src_key_padding_mask=pad))
    report(f"{tag} causal", ours(src, is_causal=True), ref(src, mask=torch_causal(S), is_causal=True))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors ... prototype stage"
        mine, theirs = ours(src, mask=keep(pad)), ref(src, src_key_padding_mask=pad)
    # Caveat: in eval + no_grad, post-LN PyTorch packs the batch into a nested tensor and
    # returns 0 at padded positions (the final norm's bias, LayerNorm(0), with a final norm);
    # the real positions agree.
    report(f"{tag} fast path, real positions", mine[~pad], theirs[~pad])
    if not norm_first:
        filler = ref.norm.bias if final_norm else torch.zeros(C)
        assert torch.equal(theirs[pad], filler.expand_as(theirs[pad]))
        assert not torch.allclose(mine[pad], theirs[pad])


@pytest.mark.parametrize("norm_first, activation", CASES)
@pytest.mark.parametrize("final_norm", [False, True])
def test_decoder_matches_torch(norm_first, activation, final_norm):
    torch.manual_seed(4)
    layer = nn.TransformerDecoderLayer(C, H, F, 0.1, activation, batch_first=True, norm_first=norm_first)
    ref = nn.TransformerDecoder(layer, L, norm=nn.LayerNorm(C) if final_norm else None).eval()
    for p in ref.parameters():
        nn.init.normal_(p, std=0.2)
    ours = Decoder.from_torch(ref).eval()
    x, memory, _, pad, tgt_pad = inputs()
    tag = f"Decoder norm_first={norm_first} {activation} final_norm={final_norm}"
    report(f"{tag} no mask", ours(x, memory), ref(x, memory))
    mine = ours(x, memory, self_mask=keep(tgt_pad), memory_mask=keep(pad), is_causal=True)
    theirs = ref(x, memory, tgt_mask=torch_causal(T), tgt_key_padding_mask=tgt_pad,
                 memory_key_padding_mask=pad, tgt_is_causal=True)
    report(f"{tag} causal+padding", mine, theirs)
    with torch.no_grad():
        report(f"{tag} no_grad", ours(x, memory, is_causal=True), ref(x, memory, tgt_mask=torch_causal(T)))


def test_stack_weights_shapes_and_values():
    enc = Encoder(L, C, H, F, dropout=0.0).eval()
    dec = Decoder(L, C, H, F, dropout=0.0).eval()
    x, memory, src, pad, _ = inputs()
    out, w = enc(src, mask=keep(pad), return_weights=True)
    assert out.shape == (B, S, C) and w.shape == (L, B, H, S, S)
    assert torch.allclose(out, enc(src, mask=keep(pad)), atol=1e-6)
    assert w[:, 0, :, :, 4:].eq(0).all()  # padded keys get no weight
    y, ws, wc = dec(x, memory, memory_mask=keep(pad), is_causal=True, return_weights=True)
    assert y.shape == (B, T, C) and ws.shape == (L, B, H, T, T) and wc.shape == (L, B, H, T, S)
    assert torch.allclose(y, dec(x, memory, memory_mask=keep(pad), is_causal=True), atol=1e-6)
    assert ws.triu(1).eq(0).all() and torch.allclose(wc.sum(-1), torch.ones(()), atol=1e-6)


def test_layers_are_independent_and_dropout_is_active_in_train():
    enc = Encoder(L, C, H, F, dropout=0.5)
    w0, w1 = (layer.ff.linear1.weight for layer in enc.layers)
    assert not torch.equal(w0, w1)  # unlike nn.TransformerEncoder's deep copies
    x = torch.randn(B, T, C)
    assert not torch.equal(enc.train()(x), enc(x))
    assert torch.equal(enc.eval()(x), enc(x))


def test_pre_ln_keeps_the_residual_stream_unnormalised():
    layer = EncoderLayer(C, H, F, dropout=0.0, norm_first=False).eval()
    out = layer(torch.randn(B, T, C) * 10)
    assert torch.allclose(out.mean(-1), torch.zeros(()), atol=1e-5)  # post-LN: normalised output
    pre = EncoderLayer(C, H, F, dropout=0.0, norm_first=True).eval()
    assert pre(torch.randn(B, T, C) * 10).std() > 5  # pre-LN: the stream keeps its scale


def test_from_torch_keeps_training_mode():
    ref = nn.TransformerDecoder(nn.TransformerDecoderLayer(C, H, F, batch_first=True), L)
    assert Decoder.from_torch(ref.eval()).training is False
    assert all(not m.training for m in Decoder.from_torch(ref.eval()).modules())
    assert EncoderLayer.from_torch(nn.TransformerEncoderLayer(C, H, F, batch_first=True)).training


@pytest.mark.parametrize("norm_first", [False, True])
def test_our_memory_mask_carries_both_of_torch_memory_masks(norm_first):
    # Ours: one bool mask, True = may attend. PyTorch: memory_mask (T, S) and
    # memory_key_padding_mask (B, S), both True = blocked. ours = ~memory_mask & ~padding.
    g = torch.Generator().manual_seed(0)
    ref = nn.TransformerDecoderLayer(C, H, F, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    x, memory = torch.randn(B, T, C, generator=g), torch.randn(B, S, C, generator=g)
    pairs = torch.rand(T, S, generator=g) < 0.3  # (T, S), True = blocked
    pairs[:, 0] = False  # no empty row (PyTorch would give NaN there)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[0, -2:] = True  # (B, S), True = padding
    theirs = ref(x, memory, memory_mask=pairs, memory_key_padding_mask=pad)
    ours = DecoderLayer.from_torch(ref)
    report("memory_mask mapping", ours(x, memory, memory_mask=~pairs & ~pad[:, None, None, :]), theirs)
    only_pad = ours(x, memory, memory_mask=~pad[:, None, None, :])
    assert not torch.allclose(only_pad, theirs, atol=1e-3)  # the pair mask is not dropped silently


def test_one_import_path_for_the_stacks():
    import helpers
    import helpers.layers
    import helpers.stacks

    assert not hasattr(helpers.layers, "Encoder") and not hasattr(helpers.layers, "Decoder")
    assert helpers.Encoder is helpers.stacks.Encoder and helpers.Decoder is helpers.stacks.Decoder
