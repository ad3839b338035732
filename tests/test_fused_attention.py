"""The fused q/k/v attention GPT uses: the same function as three matrices, views that write through, old files load."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention
from helpers.checkpoint import load_checkpoint, save_checkpoint
from helpers.fused_attention import FusedMultiHeadAttention, RowBlock, fuse_legacy_qkv
from helpers.generation import cached_attention
from helpers.layers import EncoderLayer
from helpers.models import GPT, GPTConfig, Transformer
from helpers.positional import rope_tables

C, H = 24, 3


def pair(dtype=torch.float64, bias=True, seed=0):
    """An unfused attention with random weights and a fused one holding the same numbers."""
    torch.manual_seed(seed)
    plain = MultiHeadAttention(C, H, bias=bias).to(dtype)
    fused = FusedMultiHeadAttention(C, H, bias=bias).to(dtype)
    with torch.no_grad():
        fused.qkv_proj.weight.copy_(torch.cat([plain.q_proj.weight, plain.k_proj.weight, plain.v_proj.weight]))
        if bias:
            fused.qkv_proj.bias.copy_(torch.cat([plain.q_proj.bias, plain.k_proj.bias, plain.v_proj.bias]))
        fused.out_proj.load_state_dict(plain.out_proj.state_dict())
    return plain, fused


def unfused_state(state: dict) -> dict:
    """A fused state dict written the way files were before the fusion: three matrices per layer."""
    old = {}
    for k, v in state.items():
        head, found, tail = k.rpartition("qkv_proj.")
        if found:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), v.chunk(3), strict=True):
                old[f"{head}{name}.{tail}"] = part.clone()
        else:
            old[k] = v
    return old


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["causal", "mask", "weights", "rope", "cross"])
def test_the_fused_attention_computes_what_three_matrices_compute(kind, bias):
    plain, fused = pair(bias=bias)
    x, mem = torch.randn(2, 7, C, dtype=torch.float64), torch.randn(2, 5, C, dtype=torch.float64)
    mask = torch.rand(2, 1, 7, 7) > 0.3
    cos, sin = rope_tables(7, C // H, dtype=torch.float64)
    calls = {"causal": ((x, x, x), {"is_causal": True}), "mask": ((x, x, x), {"mask": mask}),
             "weights": ((x, x, x), {"is_causal": True, "return_weights": True}),
             "rope": ((x, x, x), {"is_causal": True, "rope": (cos, sin)}), "cross": ((x, mem, mem), {})}
    args, kwargs = calls[kind]
    want, got = plain(*args, **kwargs), fused(*args, **kwargs)
    for w, g in zip(*(o if isinstance(o, tuple) else (o,) for o in (want, got)), strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


def test_the_gradients_are_the_three_matrices_gradients_stacked():
    plain, fused = pair()
    x = torch.randn(3, 6, C, dtype=torch.float64)
    plain(x, x, x, is_causal=True).square().sum().backward()
    fused(x, x, x, is_causal=True).square().sum().backward()
    stacked = torch.cat([plain.q_proj.weight.grad, plain.k_proj.weight.grad, plain.v_proj.weight.grad])
    torch.testing.assert_close(fused.qkv_proj.weight.grad, stacked, rtol=0, atol=1e-12)
    stacked_b = torch.cat([plain.q_proj.bias.grad, plain.k_proj.bias.grad, plain.v_proj.bias.grad])
    torch.testing.assert_close(fused.qkv_proj.bias.grad, stacked_b, rtol=0, atol=1e-12)


def test_float32_self_attention_matches_the_unfused_module_to_rounding():
    plain, fused = pair(dtype=torch.float32)
    x = torch.randn(4, 16, C)
    torch.testing.assert_close(fused(x, x, x, is_causal=True), plain(x, x, x, is_causal=True), rtol=0, atol=1e-6)


def test_q_k_v_proj_are_views_that_read_call_and_write_through():
    _, fused = pair()
    q, k, v = fused.q_proj, fused.k_proj, fused.v_proj
    assert isinstance(k, RowBlock) and (k.in_features, k.out_features) == (C, C)
    assert k.weight.shape == (C, C) and k.bias.shape == (C,)
    assert k.weight.data_ptr() == fused.qkv_proj.weight[C].data_ptr()  # rows C .. 2C: the same memory
    x = torch.randn(2, 5, C, dtype=torch.float64)
    torch.testing.assert_close(torch.cat([q(x), k(x), v(x)], -1), fused.qkv_proj(x), rtol=0, atol=0)
    with torch.no_grad():
        v.weight.zero_()
    assert fused.qkv_proj.weight[2 * C :].eq(0).all() and fused.qkv_proj.weight[: 2 * C].ne(0).any()
    assert fused.v_proj.bias is not None and FusedMultiHeadAttention(C, H, bias=False).q_proj.bias is None
    assert not any("q_proj" in n for n, _ in fused.named_parameters())  # one stored matrix, not four
    assert [n for n, _ in fused.named_parameters()] == ["qkv_proj.weight", "qkv_proj.bias", "out_proj.weight",
                                                        "out_proj.bias"]


def test_copy_from_nn_multihead_attention():
    torch.manual_seed(1)
    theirs = nn.MultiheadAttention(C, H, batch_first=True).eval()
    ours = FusedMultiHeadAttention.from_torch(theirs)
    assert isinstance(ours, FusedMultiHeadAttention)
    assert torch.equal(ours.qkv_proj.weight, theirs.in_proj_weight)  # the same (3C, C) layout
    x = torch.randn(2, 6, C)
    want, _ = theirs(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x, x, x), want, rtol=0, atol=1e-6)


def test_gpt_stores_q_k_v_fused_and_the_encoder_decoder_does_not():
    gpt = GPT(GPTConfig(vocab_size=11, block_size=8, d_model=C, n_heads=H, n_layers=2))
    assert all(isinstance(b, EncoderLayer) and isinstance(b.self_attn, FusedMultiHeadAttention) for b in gpt.blocks)
    assert "blocks.1.self_attn.qkv_proj.weight" in gpt.state_dict()
    t = Transformer(11, 11, d_model=C, n_heads=H, n_layers=1, d_ff=32)
    assert not any(isinstance(m, FusedMultiHeadAttention) for m in t.modules())  # notebooks 04-06 teach three
    with pytest.raises(TypeError, match="fused_qkv"):
        EncoderLayer(C, H, 32, fused_qkv="yes")


def test_the_kv_cache_reads_the_fused_projection():
    gpt = GPT(GPTConfig(vocab_size=11, block_size=8, d_model=C, n_heads=H, n_layers=1)).eval()
    ids = torch.randint(0, 11, (2, 6))
    with torch.no_grad():
        full = gpt(ids)[0][:, -1]
        cache = gpt.new_cache(2)
        gpt.forward_cached(ids[:, :4], cache)
        gpt.forward_cached(ids[:, 4:5], cache)
        torch.testing.assert_close(gpt.forward_cached(ids[:, 5:], cache), full, rtol=0, atol=1e-5)
    assert callable(cached_attention)


def make_gpt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=11, block_size=8, d_model=C, n_heads=H, n_layers=2) | kw
    return GPT(GPTConfig(**cfg)).eval()


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_a_state_dict_saved_before_the_fusion_still_loads(positional):
    src, dst = make_gpt(0, positional=positional), make_gpt(1, positional=positional)
    old = unfused_state(src.state_dict())
    assert "blocks.0.self_attn.q_proj.weight" in old and not any("qkv" in k for k in old)
    dst.load_state_dict(old)  # the pre-hook stacks the three matrices
    ids = torch.randint(0, 11, (2, 8))
    assert torch.equal(dst(ids)[0], src(ids)[0])
    assert old["blocks.0.self_attn.q_proj.weight"] is not None  # the caller's dict is not emptied


def test_a_checkpoint_saved_before_the_fusion_still_loads(tmp_path):
    src, dst = make_gpt(0), make_gpt(1)
    path = tmp_path / "old.pt"
    save_checkpoint(path, src, step=3)
    payload = torch.load(path, weights_only=True)
    payload["model"] = unfused_state(payload["model"])
    torch.save(payload, path)
    assert load_checkpoint(path, dst) == {"step": 3}
    assert all(torch.equal(a, b) for a, b in zip(src.state_dict().values(), dst.state_dict().values(), strict=True))


def test_a_file_with_part_of_a_triple_is_still_refused_by_name(tmp_path):
    src, dst = make_gpt(0), make_gpt(1)
    old = unfused_state(src.state_dict())
    del old["blocks.1.self_attn.v_proj.weight"]
    kept = fuse_legacy_qkv(old, dst.state_dict())
    assert "blocks.1.self_attn.qkv_proj.weight" not in kept and "blocks.1.self_attn.q_proj.weight" in kept
    assert "blocks.0.self_attn.qkv_proj.weight" in kept  # the whole triple of layer 0 is stacked
    path = tmp_path / "partial.pt"
    save_checkpoint(path, src)
    payload = torch.load(path, weights_only=True)
    payload["model"] = old
    torch.save(payload, path)
    with pytest.raises(ValueError, match=r"missing keys: blocks\.1\.self_attn\.qkv_proj\.weight"):
        load_checkpoint(path, dst)


def test_the_fused_split_gives_each_head_its_own_columns():
    """A wrong split (heads interleaved with q/k/v) would still be a permutation: pin the layout."""
    _, fused = pair()
    x = torch.randn(1, 4, C, dtype=torch.float64)
    q, k, v = fused.project(x, x, x)
    hs = C // H
    want_k = F.linear(x, fused.qkv_proj.weight[C : 2 * C], fused.qkv_proj.bias[C : 2 * C])  # (1, 4, C)
    torch.testing.assert_close(k, want_k.view(1, 4, H, hs).transpose(1, 2), rtol=0, atol=0)
    assert q.shape == k.shape == v.shape == (1, H, 4, hs)


def test_a_damaged_old_file_is_named_not_stacked(tmp_path):
    """Parts of the wrong shape (or a shape bomb: a stride-0 view claiming a huge matrix) are left alone."""
    src, dst = make_gpt(0), make_gpt(1)
    for bad in (torch.zeros(C, C + 1), torch.zeros(1).expand(10**9, C)):
        old = unfused_state(src.state_dict())
        old["blocks.0.self_attn.k_proj.weight"] = bad
        kept = fuse_legacy_qkv(old, dst.state_dict())
        assert "blocks.0.self_attn.qkv_proj.weight" not in kept and kept["blocks.0.self_attn.k_proj.weight"] is bad
        with pytest.raises(RuntimeError, match="qkv_proj.weight"):  # torch's own message names the missing key
            dst.load_state_dict(old)
    assert "blocks.0.self_attn.qkv_proj.bias" in kept  # the biases, whole, are still stacked
