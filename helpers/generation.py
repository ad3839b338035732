"""Generation tools shared by `GPT.generate` and `Transformer.greedy_decode`: a KV cache and a sampler.

KV cache: at step t a decoder needs the keys and values of positions 0..t-1 at every layer,
and they do not change (causal attention: a position never sees later ones). So compute
each position's k and v once, store them, and run only the *new* token through the model:
one query row against the stored keys instead of a full (t, t) pass. The cache holds
L × 2 × B × H × T × hs numbers (layers, k and v, batch, heads, positions, head size).

Sampler: logits -> divide by the temperature -> keep the top-k -> keep the top-p nucleus
-> softmax -> draw. Temperature is applied to ``logits - max`` so a tiny temperature sends
every non-maximal logit to -inf (greedy) instead of overflowing to inf - inf = NaN.

Shapes: B batch, H heads, t new positions, P cached positions, S source length, hs head size, V vocab.
    KVCache(L, B, H, T_max, hs).append(i, k, v)   (B, H, t, hs) x 2 -> (B, H, P + t, hs) x 2
    cached_attention(attn, x, cache, i)            (B, t, C) -> (B, t, C)   (rope=(cos, sin), each (t, hs/2))
    filter_logits(logits, temperature, top_k, top_p) (..., V) -> (..., V), -inf where removed
    sample_next(logits, ...)                       (B, V) -> (B, 1)

Example:
    >>> filter_logits(torch.tensor([2.0, 1.0, 0.0]), top_k=2)
    tensor([2., 1., -inf])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from helpers.attention import MultiHeadAttention, check_rope
from helpers.positional import apply_rope
from helpers.validate import check_int


class KVCache:
    """Keys and values of every layer, preallocated for ``max_len`` positions and filled to ``length``."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int,
                 device=None, dtype=torch.float32):
        for name, v in (("n_layers", n_layers), ("batch", batch), ("n_heads", n_heads), ("max_len", max_len),
                        ("head_dim", head_dim)):
            check_int(name, v, minimum=0 if name == "batch" else 1)  # an empty batch is a valid batch
        shape = (n_layers, batch, n_heads, max_len, head_dim)  # (L, B, H, T_max, hs)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # positions stored in every layer (advanced by `advance` after a full pass)

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def check_fits(self, n_layers: int, batch: int, n_heads: int, head_dim: int, dtype, device) -> None:
        """ValueError unless this cache was made for this model and batch (`GPT.new_cache` makes one)."""
        L, B, H, _, hs = self.k.shape
        for what, have, want in (("layers", L, n_layers), ("batch rows", B, batch), ("heads", H, n_heads),
                                 ("head size", hs, head_dim)):
            if have != want:
                raise ValueError(f"cache has {have} {what}, the model and input need {want}: "
                                 "make a new one with model.new_cache(batch)")
        if self.k.dtype != dtype or self.k.device != torch.device(device):
            raise ValueError(f"cache holds {self.k.dtype} on {self.k.device}, the model computes {dtype} on {device}: "
                             "make a new one with model.new_cache(batch)")

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store layer ``layer``'s new k, v (B, H, t, hs) after the cached ones; return all (B, H, P + t, hs).

        k and v must have exactly the cache's B, H and hs (one row is never broadcast into four).
        """
        L, B, H, _, hs = self.k.shape
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < L:
            raise ValueError(f"layer must be an int in [0, {L}), got {layer!r}")
        for name, x in (("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (B, H, hs):
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name} must have shape (B={B}, H={H}, t, hs={hs}) to fit the cache, got {got}")
            if x.dtype != self.k.dtype or x.device != self.k.device:
                raise ValueError(f"{name} is {x.dtype} on {x.device}, the cache {self.k.dtype} on {self.k.device}")
        if k.shape != v.shape:
            raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
        P, t = self.length, k.shape[2]
        if P + t > self.max_len:
            raise ValueError(f"the cache holds at most {self.max_len} positions, got {P} + {t}")
        self.k[layer, :, :, P : P + t] = k
        self.v[layer, :, :, P : P + t] = v
        return self.k[layer, :, :, : P + t], self.v[layer, :, :, : P + t]  # (B, H, P + t, hs)

    def advance(self, t: int) -> None:
        self.length += t

    def reset(self) -> None:
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds when full: L × 2 × B × H × T_max × hs × bytes per number."""
        return 2 * self.k.numel() * self.k.element_size()


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    B, t, C = x.shape
    return x.view(B, t, n_heads, C // n_heads).transpose(1, 2)  # (B, t, C) -> (B, H, t, hs)


def attend(q, k, v, mask=None, is_causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ/√hs) v on the fused kernel; a row with no allowed key gives 0, as `MultiHeadAttention`."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # (B, H, t, hs)
    any_allowed = mask.any(dim=-1, keepdim=True)  # (..., t, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~any_allowed)
    return out.masked_fill(~any_allowed, 0.0)


def cached_attention(attn: MultiHeadAttention, x: torch.Tensor, cache: KVCache, layer: int,
                     key_mask: torch.Tensor | None = None,
                     rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Causal self-attention of the t new positions x (B, t, C) to the cached ones and to themselves.

    ``key_mask`` (B, P + t) bool, True = may attend, hides keys (pad tokens) on top of causality.
    ``rope`` (cos, sin), each (t, hs/2): the rotary angles of the new positions P .. P + t - 1; their
    queries and keys are rotated, and the keys stored rotated (a cached key keeps its position).
    """
    B, t, C = x.shape
    q, k, v = attn.project(x, x, x)  # (B, t, C) -> (B, H, t, hs) x 3 (one multiply if attn is fused)
    if rope is not None:
        check_rope(rope, t, attn.head_dim, x.dtype)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # (B, H, t, hs) each
    k, v = cache.append(layer, k, v)  # (B, H, P + t, hs) x 2
    P = k.shape[2] - t  # positions cached before this call
    if key_mask is not None and (not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool
                                 or tuple(key_mask.shape) != (B, P + t)):
        got = f"{key_mask.dtype} {tuple(key_mask.shape)}" if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
        raise ValueError(f"key_mask must be a bool tensor of shape (B={B}, P + t={P + t}), got {got}")
    if key_mask is None and (t == 1 or P == 0):  # one new query sees every key; or a plain causal prefill
        out = attend(q, k, v, is_causal=t > 1)  # (B, H, t, hs)
    else:
        mask = torch.ones(t, P + t, dtype=torch.bool, device=x.device).tril(diagonal=P)  # new row i sees keys <= P + i
        if key_mask is not None:
            mask = mask & key_mask[:, None, None, :]  # (t, P + t) & (B, 1, 1, P + t) -> (B, 1, t, P + t)
        out = attend(q, k, v, mask=mask)
    return attn.out_proj(out.transpose(1, 2).reshape(B, t, C))  # (B, H, t, hs) -> (B, t, C)


def check_sampling(temperature, top_k, top_p, vocab_size: int | None) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a float, got {type(temperature).__name__}")
    try:
        finite = math.isfinite(float(temperature))
    except OverflowError:  # an int too large for a float
        finite = False
    if not (temperature > 0 and finite):
        raise ValueError(f"temperature must be a finite number > 0 (use top_k=1 for greedy), got {temperature}")
    if top_k is not None:
        check_int("top_k", top_k)
        if top_k < 1 or (vocab_size is not None and top_k > vocab_size):
            raise ValueError(f"top_k must be in [1, vocab_size={vocab_size}] or None, got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"top_p must be a float, got {type(top_p).__name__}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] or None, got {top_p}")


def _check_logits(logits: torch.Tensor) -> None:
    """-inf marks a token that cannot be drawn; NaN, +inf, or a row with nothing left make no distribution."""
    for bad, what in ((torch.isnan(logits), "NaN"), (logits == float("inf"), "+inf")):
        if bool(bad.any()):
            where = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise ValueError(f"logits hold {what} (first at index {where}): no probability can be computed "
                             "from it; check the model's weights and inputs")
    dead = (logits == float("-inf")).all(-1)  # (...,)
    if bool(dead.any()):
        where = tuple(int(i) for i in torch.nonzero(dead)[0])
        raise ValueError(f"every logit of row {where} is -inf: no token can be sampled (all of them masked)")


def filter_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """(..., V) float logits -> (..., V) logits to sample from: scaled, and -inf where removed.

    top-k keeps the k largest (ties with the k-th stay); top-p keeps the most likely tokens
    until their probability reaches ``top_p`` (the first token always stays). A logit of -inf
    is a token that cannot be drawn; NaN, +inf, or a row that is all -inf raise ValueError
    (softmax would turn them into NaN probabilities).
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() < 1 or not logits.shape[-1]:
        got = f"{logits.dtype} of shape {tuple(logits.shape)}" if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise TypeError(f"logits must be a floating-point tensor (..., V) with V >= 1, got {got}")
    check_sampling(temperature, top_k, top_p, logits.shape[-1])
    _check_logits(logits)
    logits = logits.float()
    shifted = logits - logits.amax(-1, keepdim=True)  # (..., V), max 0
    # 0 stays 0 even when τ rounds to 0 in float32 (0/0 would be NaN); the rest -> -inf at worst
    logits = torch.where(shifted == 0, shifted, shifted / float(temperature))
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., V) -> (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        probs, order = torch.softmax(logits, -1).sort(-1, descending=True)  # (..., V), most likely first
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each one
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before >= top_p)  # vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row: logits (B, V) -> ids (B, 1)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must have shape (B, V), got {got}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if logits.shape[0] == 0:  # an empty batch draws nothing (multinomial refuses 0 rows)
        return torch.empty(0, 1, dtype=torch.long, device=logits.device)
    probs = torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, V) -> (B, 1)
