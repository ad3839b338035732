"""The checks of notebook 05 (encoder and decoder layers): its builds and exercises.

Each check compares the learner's answer with PyTorch's module on inputs chosen to reveal a classic
mistake, says which one when it can, passes the learner copies of its inputs (``call_unchanged``)
and refuses an answer that calls the module it reproduces (``refuse_calls``).
Proven by tests/test_catalogue_nb05.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention, causal_mask, padding_mask
from helpers.compare import check_close
from helpers.exercises import call_unchanged, refuse_calls
from helpers.layers import DecoderLayer, EncoderLayer

__all__ = ["B", "C", "H", "S", "SRC_IDS", "TGT_IDS", "check_exercise_1", "check_exercise_2", "check_exercise_3",
           "check_exercise_4", "check_exercise_5", "load_from_torch"]

B, S, T, C, H = 2, 6, 4, 16, 4
SRC_IDS = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])  # (B, S), 0 = padding
TGT_IDS = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])  # (B, T), 0 = padding
_NORMS = ((F, "layer_norm"), (torch, "layer_norm"), (nn.LayerNorm, "forward"))
_LAYERS = ((nn.TransformerEncoderLayer, "forward"), (nn.TransformerDecoderLayer, "forward"),
           (EncoderLayer, "forward"), (DecoderLayer, "forward"))


def _call(fn, *args, case, label, targets, owner=None, **kwargs):
    __tracebackhide__ = True
    try:
        with refuse_calls(fn if owner is None else owner, *targets, label=label):
            return call_unchanged(fn, *args, label=label, **kwargs)
    except NotImplementedError:
        raise  # the stub: attempt() says 'not done yet'
    except (RuntimeError, ValueError) as err:
        text = str(err).splitlines()[0]
        hint = ("is_causal belongs to the self-attention only: the cross-attention is never causal" if "is_causal" in text
                else "check which tensor gives the queries and which the keys and values, and the shapes")
        raise AssertionError(f"{case}: {label} raised {type(err).__name__} ({text}); {hint}") from err


def load_from_torch(mine, ref):
    """Copy a PyTorch nn.TransformerEncoderLayer's weights into an encoder layer with attn, ff, norm1, norm2."""
    mine.attn = MultiHeadAttention.from_torch(ref.self_attn)
    with torch.no_grad():
        for dst, src in ((mine.ff[0], ref.linear1), (mine.ff[2], ref.linear2), (mine.norm1, ref.norm1), (mine.norm2, ref.norm2)):
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    return mine.eval()


def check_exercise_1(layer_norm):
    """Exercise 1: LayerNorm from its formula, against nn.LayerNorm, with γ and β that count."""
    g = torch.Generator().manual_seed(0)
    for shape, spread in [((2, 5, 16), 3.0), ((3, 4), 3.0), ((1, 2, 3, 8), 3.0), ((2, 16), 1e-3)]:
        case = f"x {shape}" + (", low variance (σ² ≈ 1e-6 < ε)" if spread < 1 else "")
        Cx = shape[-1]
        ref = nn.LayerNorm(Cx)
        with torch.no_grad():  # random gamma and beta, so the check covers them too
            ref.weight.copy_(torch.randn(Cx, generator=g) + 2)  # away from 0, so undoing γ is safe
            ref.bias.copy_(torch.randn(Cx, generator=g))
        x = torch.randn(*shape, generator=g) * spread + (1 if spread > 1 else 0)
        gamma, beta = ref.weight.detach().clone(), ref.bias.detach().clone()
        with torch.no_grad():
            expected = ref(x)
            got = _call(layer_norm, x, gamma, beta, case=case, label="layer_norm", targets=_NORMS)
        assert got.shape == expected.shape, f"{case}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if (got - expected).abs().max() <= 1e-5:
            continue
        mu = x.mean(-1, keepdim=True)
        var = (x - mu).pow(2).mean(-1, keepdim=True)
        plain = (x - mu) / (var + 1e-5).sqrt()
        if torch.allclose(got, plain, atol=1e-4) or torch.allclose(got, plain + beta, atol=1e-4):
            raise AssertionError(f"{case}: your output is not scaled by γ: LN(x) = γ ⊙ normalised + β")
        if torch.allclose(got, gamma * plain, atol=1e-4):
            raise AssertionError(f"{case}: your output is not shifted by β: LN(x) = γ ⊙ normalised + β")
        if torch.allclose(got, gamma * (x - mu) / (var.sqrt() + 1e-5) + beta, atol=1e-4):
            raise AssertionError(f"{case}: ε is added outside the square root; it goes inside, √(σ² + ε)")
        if torch.allclose(got, beta * plain + gamma, atol=1e-4):
            raise AssertionError(f"{case}: γ and β are swapped: γ scales, β shifts")
        z = (got - beta) / gamma  # your normalised x, before gamma and beta
        assert torch.allclose(z.mean(-1), torch.zeros(()), atol=1e-3), (
            f"{case}: after undoing γ and β your features do not have mean 0 per token: check the axis (the last), "
            "the centring (x - μ), and γ ⊙ ... + β")
        ms = z.pow(2).mean(-1)  # 1 for LayerNorm (up to eps), (C - 1) / C with the unbiased variance
        assert spread < 1 or not torch.allclose(ms, torch.full_like(ms, (Cx - 1) / Cx), atol=1e-3), (
            f"{case}: your normalised features have mean square (C-1)/C = {(Cx - 1) / Cx:.3f}: the variance divides "
            "by C - 1 (torch.var's default); LayerNorm's divides by C")
        assert spread > 1, (f"{case}: off by up to {(got - expected).abs().max():.3g}: where the variance is as small "
                            "as ε, ε's place matters: it goes inside the square root, √(σ² + ε)")
        check_close(f"layer_norm, {case} (check ε's place, inside √(σ² + ε))", got, expected, atol=1e-5, quiet=True)
    print("exercise 1: correct")


def _torch_encoder(seed: int, norm_first: bool) -> nn.TransformerEncoderLayer:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        ref = nn.TransformerEncoderLayer(C, H, 32, batch_first=True, norm_first=norm_first).eval()
        with torch.no_grad():  # make norm1 and norm2 differ (both start as γ = 1, β = 0)
            for p in (*ref.norm1.parameters(), *ref.norm2.parameters()):
                p.add_(0.3 * torch.randn_like(p))
    return ref


def _encoder_diagnosis(got, ref, x, key_pad, norm_first) -> str:
    """Which known variant (computed with PyTorch's own layer) the answer equals, if any."""
    with torch.no_grad():
        other = nn.TransformerEncoderLayer(C, H, 32, batch_first=True, norm_first=not norm_first).eval()
        other.load_state_dict(ref.state_dict())
        variants = {
            "the other norm placement": other(x, src_key_padding_mask=key_pad),
            "a causal mask (an encoder sees the whole source; only the pads are hidden)":
                ref(x, src_mask=~causal_mask(S), src_key_padding_mask=key_pad),
        }
        if key_pad is not None:
            variants["no padding mask (the mask must reach the attention)"] = ref(x)
    for name, out in variants.items():
        if torch.allclose(got, out, atol=1e-4):
            return f"your layer computes {name}"
    return ""


def _check_encoder(cls, placements, label, make):
    src_mask = padding_mask(SRC_IDS, 0)  # (B, 1, 1, S)
    g = torch.Generator().manual_seed(0)
    for norm_first in placements:
        for case, mask in (("no padding", None), ("padded batch", src_mask)):
            name = f"{'pre' if norm_first else 'post'}-LN, {case}"
            ref = _torch_encoder(1 + norm_first, norm_first)
            x = torch.randn(B, S, C, generator=g)
            key_pad = None if mask is None else ~mask[:, 0, 0]
            with torch.no_grad():
                expected = ref(x, src_key_padding_mask=key_pad)
            mine = load_from_torch(make(cls, norm_first), ref)
            with torch.no_grad():
                got = _call(mine, x, case=name, label=label, targets=_LAYERS, owner=cls, mask=mask)
            assert got.shape == expected.shape, f"{name}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
            err = (got - expected).abs().max().item()
            if err > 1e-5:
                why = _encoder_diagnosis(got, ref, x, key_pad, norm_first)
                if not why:
                    why = ({"post": "post-LN: LN1(x + attention(x)), then LN2(that + FFN(that)); each norm after its addition",
                            "pre": "pre-LN: x + attention(LN1(x)) with q, k and v all from LN1(x), then x + FFN(LN2(x)); "
                                   "no norm after the last addition"}["pre" if norm_first else "post"])
                raise AssertionError(f"{name}: off by up to {err:.3g}; {why}")


def check_exercise_2(cls):
    """Exercise 2: a post-LN encoder layer, against nn.TransformerEncoderLayer, without and with padding."""
    _check_encoder(cls, (False,), "MyEncoderLayer", lambda c, nf: c(C, H, 32))
    print("exercise 2: correct")


def check_exercise_3(cls):
    """Exercise 3: a decoder layer in both norm placements, against nn.TransformerDecoderLayer."""
    hints = {"post-LN, no masks": "check the three sub-layers' order and which of x and memory each attention reads",
             "post-LN, causal + padding": "without masks you match: do is_causal and self_mask reach the self-attention, "
                                          "and memory_mask the cross-attention (never causal)?",
             "pre-LN, no masks": "post-LN matches: in pre-LN each norm goes inside its branch, x + f(norm(x))",
             "pre-LN, causal + padding": "pre-LN without masks matches: in your pre-LN branch, do is_causal and self_mask "
                                         "reach the self-attention, and memory_mask the cross-attention?"}
    g = torch.Generator().manual_seed(0)
    src_mask = padding_mask(SRC_IDS, 0)
    for i, case in enumerate(hints):
        norm_first, masks = case.startswith("pre"), "padding" in case
        with torch.random.fork_rng():
            torch.manual_seed(10 + i)
            ref = nn.TransformerDecoderLayer(C, H, 32, batch_first=True, norm_first=norm_first).eval()
            with torch.no_grad():
                for p in (*ref.norm1.parameters(), *ref.norm2.parameters(), *ref.norm3.parameters()):
                    p.add_(0.3 * torch.randn_like(p))  # three different LayerNorms
        mine, y_, mem = cls.from_torch(ref), torch.randn(B, T, C, generator=g), torch.randn(B, S, C, generator=g)
        with torch.no_grad():
            if masks:
                expected = ref(y_, mem, tgt_mask=~causal_mask(T), tgt_key_padding_mask=TGT_IDS == 0,
                               memory_key_padding_mask=SRC_IDS == 0, tgt_is_causal=True)
                got = _call(mine, y_, mem, case=case, label="MyDecoderLayer.forward", targets=_LAYERS, owner=cls,
                            self_mask=padding_mask(TGT_IDS, 0), memory_mask=src_mask, is_causal=True)
            else:
                expected = ref(y_, mem)
                got = _call(mine, y_, mem, case=case, label="MyDecoderLayer.forward", targets=_LAYERS, owner=cls)
        assert got.shape == expected.shape, f"{case}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        assert torch.allclose(got, expected, atol=1e-5), f"{case}: off by up to {(got - expected).abs().max():.3f}; {hints[case]}"
    print("exercise 3: correct")


def check_exercise_4(rms_norm):
    """Exercise 4: RMSNorm, against nn.RMSNorm; a mismatch is matched against the classic slips."""
    g = torch.Generator().manual_seed(0)
    for shape in [(2, 5, 16), (3, 4)]:
        case = f"x {shape}"
        Cx = shape[-1]
        gamma = torch.randn(Cx, generator=g) + 2
        ref = nn.RMSNorm(Cx, eps=1e-6)
        with torch.no_grad():
            ref.weight.copy_(gamma)
        x = torch.randn(*shape, generator=g) + 2  # a mean far from 0, so subtracting it shows
        with torch.no_grad():
            expected = ref(x)
            got = _call(rms_norm, x, gamma, case=case, label="rms_norm",
                        targets=((F, "rms_norm"), (nn.RMSNorm, "forward"), *_NORMS))
        assert got.shape == expected.shape, f"{case}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        err = (got - expected).abs().max().item()
        if err <= 1e-5:
            continue
        z = got / gamma  # your normalised x, before gamma
        rms = z.pow(2).mean(-1).sqrt()
        assert not torch.allclose(z.mean(-1), torch.zeros(()), atol=1e-3), (
            f"{case}: the mean came out 0: RMSNorm does not subtract the mean (that is LayerNorm, or the std)")
        assert not torch.allclose(rms, torch.full_like(rms, Cx**-0.5), atol=1e-3), (
            f"{case}: your rows have norm 1: that divides by the L2 norm (root of the *sum* of squares); "
            "RMSNorm divides by the root of the *mean* square")
        assert not torch.allclose(got.pow(2).mean(-1), torch.ones(()), atol=1e-3), (
            f"{case}: your rows have RMS 1 before γ is applied: multiply by γ")
        assert torch.allclose(rms, torch.ones(()), atol=1e-3), (
            f"{case}: after undoing γ your rows' root mean square is not 1 (got {rms.flatten()[:3].tolist()}): "
            "the mean of squares runs over the last axis, under a square root")
        raise AssertionError(f"{case}: off by up to {err:.3g}")
    print("exercise 4: correct")


class _Block(nn.Module):
    """The modules of the notebook's encoder layer (exercise 2, ``Block`` in §5): attn, ff, norm1, norm2."""

    def __init__(self, C: int, H: int, d_ff: int):
        super().__init__()
        self.attn = MultiHeadAttention(C, H)
        self.ff = nn.Sequential(nn.Linear(C, d_ff), nn.ReLU(), nn.Linear(d_ff, C))
        self.norm1, self.norm2 = nn.LayerNorm(C), nn.LayerNorm(C)


_STREAM_WRITERS = ("attn.out_proj.weight", "ff.2.weight")  # the Linear weights whose output is added to the stream


def check_exercise_5(scale_residual_init_):
    """Exercise 5: GPT-2's init, the weights that write into the residual stream scaled by 1/√(2L), in place.

    The task is to change the given blocks, so this check does not pass copies: it builds fresh blocks,
    keeps their parameters, calls the answer on them and compares every parameter afterwards.
    """
    g = torch.Generator().manual_seed(0)
    for n_layers in (3, 8):
        case = f"L = {n_layers} blocks"
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=g)))
            blocks = nn.ModuleList(_Block(C, H, 32) for _ in range(n_layers))
            with torch.no_grad():
                for name, p in blocks.named_parameters():
                    if "norm" in name:  # LayerNorms away from γ = 1, β = 0, so a scaled norm shows
                        p.add_(0.3 * torch.randn_like(p))
        before = {name: p.detach().clone() for name, p in blocks.named_parameters()}
        try:
            scale_residual_init_(blocks)
        except NotImplementedError:
            raise
        except (RuntimeError, AttributeError, TypeError, IndexError) as err:
            text = str(err).splitlines()[0]
            raise AssertionError(f"{case}: scale_residual_init_ raised {type(err).__name__} ({text}); it receives an "
                                 "nn.ModuleList of blocks with .attn (our MultiHeadAttention) and .ff (an nn.Sequential), "
                                 "and changes their weights under torch.no_grad()") from err
        after = dict(blocks.named_parameters())
        assert set(after) == set(before), f"{case}: the blocks' parameter names changed: {sorted(set(after) ^ set(before))[:3]}"
        want = 1 / math.sqrt(2 * n_layers)
        changed = [name for name in before if not torch.equal(after[name].detach(), before[name])]
        assert changed, (f"{case}: no parameter changed: scale the weights of the given blocks in place (under "
                         "torch.no_grad(), e.g. with mul_); returning new tensors leaves the blocks as they were")
        for name in changed:
            suffix = name.split(".", 1)[1]  # "0.attn.out_proj.weight" -> "attn.out_proj.weight"
            if suffix.endswith("bias"):
                raise AssertionError(f"{case}: {name} changed: GPT-2 scales the weights only; biases stay as they are")
            if suffix not in _STREAM_WRITERS:
                raise AssertionError(f"{case}: {name} changed: its output is not added to the residual stream directly "
                                     "(scale only the last Linear of each sub-layer, the one whose output is added to x)")
        for i in range(n_layers):
            for suffix in _STREAM_WRITERS:
                name = f"{i}.{suffix}"
                new, old = after[name].detach(), before[name]
                ratio = (new * old).sum().item() / old.pow(2).sum().item()  # least-squares factor new ≈ ratio · old
                assert name in changed, (f"{case}: {name} is unchanged: " + (
                    "the attention's output projection also writes into the stream" if "attn" in suffix
                    else "the FFN's last Linear also writes into the stream"))
                if not torch.allclose(new, old * ratio, rtol=1e-4, atol=1e-7):
                    raise AssertionError(f"{case}: {name} is not the old weight times one factor: scale it, "
                                         "do not re-draw it")
                if abs(ratio - want) > 1e-4 * want:
                    known = {1 / math.sqrt(n_layers): "1/√L: N counts the residual connections, two per block (attention and FFN)",
                             1 / (2 * n_layers): "1/(2L): the factor is a square root, 1/√N",
                             1 / n_layers: "1/L: N = 2L residual connections, and the factor is 1/√N"}
                    why = next((w for f, w in known.items() if abs(ratio - f) < 1e-4 * f), "expected 1/√(2L), L = len(blocks)")
                    raise AssertionError(f"{case}: {name} was scaled by {ratio:.4g}, not {want:.4g}: {why}")
    print("exercise 5: correct")
