"""Tests for helpers.models: GPT, Transformer, parameter counting."""

import math

import pytest
import torch
from torch import nn

from helpers.models import GPT, GPTConfig, Transformer, count_parameters, parameter_breakdown
from helpers.stacks import Decoder, Encoder


def small_gpt(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=37, block_size=8, d_model=12, n_heads=3, n_layers=2)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


def small_transformer(**kw):
    torch.manual_seed(0)
    args = dict(d_model=12, n_heads=3, n_layers=2, d_ff=20, dropout=0.0, max_len=16)
    args.update(kw)
    return Transformer(11, 13, **args).eval()


# ---------------------------------------------------------------- GPT
@pytest.mark.parametrize("T", [1, 5, 8])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope"])
def test_gpt_shapes(T, positional):
    model = small_gpt(positional=positional)
    idx = torch.randint(0, 37, (2, T))
    logits, loss = model(idx)
    assert logits.shape == (2, T, 37) and loss is None
    assert model.attention_weights(idx).shape == (2, 2, 3, T, T)


@pytest.mark.parametrize("t", [0, 3, 7])
def test_gpt_is_causal(t):
    model = small_gpt()
    idx = torch.randint(0, 37, (2, 8))
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % 37
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.equal(a[:, :t], b[:, :t])  # earlier positions untouched, bit for bit
    assert not torch.allclose(a[:, t:], b[:, t:])


def test_gpt_weights_path_equals_fused_path():
    model = small_gpt()
    idx = torch.randint(0, 37, (2, 8))
    w = model.attention_weights(idx)
    assert torch.allclose(w.sum(-1), torch.ones(()), atol=1e-6)
    assert (w.triu(1) == 0).all()  # nothing above the diagonal: causal


def test_gpt_loss_at_init_is_ln_vocab():
    # The final LayerNorm output has unit-variance entries and the head's weights are N(0, 0.02²),
    # so each logit has std σ ≈ 0.02·√C ≈ 0.14 (C=48): softmax is near uniform, and with random
    # targets E[loss] ≈ ln V + σ²/2 ≈ ln V + 0.01. A 0.05-nat tolerance covers that and sampling noise.
    V = 500
    model = small_gpt(vocab_size=V, d_model=48, n_heads=4)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, V, (16, 8), generator=g)
    targets = torch.randint(0, V, (16, 8), generator=g)
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(V)) < 0.05


def test_gpt_tied_weights_and_init():
    model = small_gpt(d_model=64, n_heads=4, vocab_size=1000)
    assert model.head.weight is model.tok_emb.weight
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.001
    untied = small_gpt(tie_weights=False)
    assert count_parameters(untied) - count_parameters(small_gpt()) == 37 * 12


def test_generate_top1_is_argmax_loop():
    model = small_gpt()
    idx = torch.randint(0, 37, (3, 2))
    out = model.generate(idx, 10, top_k=1)  # crosses block_size=8: the context is cropped
    ref = idx
    for _ in range(10):
        logits, _ = model(ref[:, -8:])
        ref = torch.cat([ref, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ref)


def test_generate_reproducible_with_generator():
    model = small_gpt()
    idx = torch.zeros(2, 1, dtype=torch.long)
    a = model.generate(idx, 12, temperature=1.5, generator=torch.Generator().manual_seed(3))
    b = model.generate(idx, 12, temperature=1.5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.shape == (2, 13)
    assert torch.equal(model.generate(idx, 0), idx)


def test_generate_keeps_training_mode():
    model = small_gpt().train()
    model.generate(torch.zeros(1, 1, dtype=torch.long), 2)
    assert model.training


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
        (dict(max_new_tokens=2, temperature=0.0), ValueError, "temperature"),
        (dict(max_new_tokens=2, top_k=0), ValueError, "top_k"),
        (dict(max_new_tokens=2, top_k=38), ValueError, "top_k"),
        (dict(max_new_tokens=2, generator=3), TypeError, "generator"),
    ],
)
def test_generate_bad_args(kwargs, err, match):
    with pytest.raises(err, match=match):
        small_gpt().generate(torch.zeros(1, 1, dtype=torch.long), **kwargs)


def test_gpt_bad_inputs():
    model = small_gpt()
    with pytest.raises(ValueError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="37"):
        model(torch.tensor([[1, 37]]))
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="shape"):
        model(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))


@pytest.mark.parametrize(
    "kw, err",
    [
        (dict(n_heads=5), ValueError),
        (dict(vocab_size=0), ValueError),
        (dict(positional="alibi"), ValueError),
        (dict(d_model=9, n_heads=3, positional="rope"), ValueError),  # rope needs an even head size
        (dict(dropout=1.0), ValueError),
        (dict(block_size=2.0), TypeError),
        (dict(d_model=9, n_heads=3, positional="sinusoidal"), ValueError),
    ],
)
def test_gpt_config_validation(kw, err):
    cfg = dict(vocab_size=10, block_size=4, d_model=12, n_heads=3)
    cfg.update(kw)
    with pytest.raises(err):
        GPTConfig(**cfg)


def test_gpt_config_default_d_ff():
    assert GPTConfig(vocab_size=5, block_size=4, d_model=16, n_heads=2).d_ff == 64


# ---------------------------------------------------------------- Transformer
def test_transformer_shapes_and_weights():
    model = small_transformer()
    src, tgt = torch.randint(0, 11, (2, 7)), torch.randint(0, 13, (2, 5))
    logits, w = model(src, tgt, return_weights=True)
    assert logits.shape == (2, 5, 13)
    assert w.encoder.shape == (2, 2, 3, 7, 7)
    assert w.decoder_self.shape == (2, 2, 3, 5, 5)
    assert w.decoder_cross.shape == (2, 2, 3, 5, 7)
    assert torch.allclose(logits, model(src, tgt), atol=1e-5)


def test_transformer_target_side_is_causal():
    model = small_transformer()
    src, tgt = torch.randint(0, 11, (2, 7)), torch.randint(0, 13, (2, 5))
    changed = tgt.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 13
    a, b = model(src, tgt), model(src, changed)
    assert torch.equal(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_transformer_source_matters():
    model = small_transformer()
    src, tgt = torch.randint(0, 11, (2, 7)), torch.randint(0, 13, (2, 5))
    changed = src.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    a, b = model(src, tgt), model(changed, tgt)
    assert (a - b).abs().amax(dim=-1).min() > 0  # every target position reads the whole source


def test_transformer_padding_is_ignored():
    model = small_transformer(pad_id=0)
    src = torch.tensor([[3, 4, 5, 0, 0]])
    tgt = torch.tensor([[1, 6, 7]])
    a = model(src, tgt)
    b = model(src[:, :3], tgt)  # same sentence without the pads
    assert torch.allclose(a, b, atol=1e-5)


def test_greedy_decode_matches_step_by_step_argmax():
    model = small_transformer()
    src = torch.randint(3, 11, (3, 6))
    out = model.greedy_decode(src, max_len=9, bos_id=1, eos_id=2)
    assert out[:, 0].eq(1).all() and out.shape[1] <= 9
    ys = torch.full((3, 1), 1)
    for _ in range(out.shape[1] - 1):
        ys = torch.cat([ys, model(src, ys)[:, -1].argmax(-1, keepdim=True)], dim=1)
    for b in range(3):  # equal up to and including the first eos; eos (no pad id) after it
        row = ys[b]
        stop = (row == 2).nonzero()
        end = int(stop[0]) + 1 if len(stop) else len(row)
        assert torch.equal(out[b, :end], row[:end])
        assert out[b, end:].eq(2).all()


def test_transformer_bad_inputs():
    model = small_transformer()
    ok = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="batch"):
        model(ok, torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=16"):
        model(torch.zeros(2, 17, dtype=torch.long), ok)
    with pytest.raises(ValueError, match="size 13"):
        model(ok, torch.full((2, 3), 13))
    with pytest.raises(ValueError, match="size 11"):
        model(torch.full((2, 3), 11), ok)
    with pytest.raises(TypeError, match="integer"):
        model(ok.float(), ok)
    with pytest.raises(ValueError, match="divis"):
        Transformer(5, 5, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="max_len"):
        model.greedy_decode(ok, 17, 1, 2)


# ---------------------------------------------------------------- counting
def test_count_parameters_sum_of_parts():
    model = small_gpt(tie_weights=False)
    parts = parameter_breakdown(model)
    assert sum(parts.values()) == count_parameters(model)
    C, V, L, T = 12, 37, 2, 8
    assert parts["embeddings"] == V * C + T * C
    assert parts["attention"] == L * (4 * C * C + 4 * C)
    assert parts["feed-forward"] == L * (2 * C * 4 * C + 4 * C + C)
    assert parts["norms"] == (2 * L + 1) * 2 * C
    assert parts["output head"] == V * C
    assert count_parameters(model, non_embedding=True) == count_parameters(model) - V * C - T * C


def test_transformer_count_matches_nn_transformer():
    C, H, L, F, V = 16, 2, 2, 24, 11
    ours = Transformer(V, V, d_model=C, n_heads=H, n_layers=L, d_ff=F)
    ref = nn.Transformer(C, H, L, L, F, batch_first=True)
    parts = parameter_breakdown(ours)
    assert count_parameters(ours) - parts["embeddings"] - parts["output head"] == count_parameters(ref)
    assert parameter_breakdown(ref)["other"] == 0


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_equals_nn_transformer_with_same_weights(norm_first):
    """Our encode/decode/forward = our embeddings + nn.Transformer.forward + our head."""
    torch.manual_seed(5)
    C, H, L, F = 16, 4, 2, 24
    ref = nn.Transformer(C, H, L, L, F, dropout=0.1, batch_first=True, norm_first=norm_first).eval()
    ours = Transformer(11, 13, d_model=C, n_heads=H, n_layers=L, d_ff=F, pad_id=0, norm_first=norm_first).eval()
    ours.encoder = Encoder.from_torch(ref.encoder)
    ours.decoder = Decoder.from_torch(ref.decoder)
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 4, 3]])
    tgt = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])
    T = tgt.shape[1]
    theirs = ref(
        ours.pos(ours.src_emb(src)), ours.pos(ours.tgt_emb(tgt)),
        tgt_mask=nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool),  # True = blocked
        src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0, memory_key_padding_mask=src == 0,
        tgt_is_causal=True,
    )
    err = (ours(src, tgt) - ours.head(theirs)).abs().max().item()
    print(f"Transformer norm_first={norm_first} vs nn.Transformer: max abs error {err:.2e}")
    assert err < 1e-5
