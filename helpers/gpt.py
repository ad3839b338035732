"""A decoder-only language model (GPT-2 style): no encoder, no cross-attention, causal mask only.

Token embedding (+ position embedding) -> L pre-LN blocks (causal self-attention, GELU
feed-forward) -> final LayerNorm -> linear head to V logits. A GPT block is exactly an
`EncoderLayer(norm_first=True)` run with ``is_causal=True``, so the fused attention
kernel is used unless weights are asked for. Its W_q, W_k, W_v are stored as one (3C, C)
matrix, ``self_attn.qkv_proj`` (``fused_qkv=True``, `helpers.fused_attention`), as GPT-2 stores
``c_attn``: one multiply instead of three. Files saved before that (three matrices) still load.

Positions: ``positional="learned"`` (GPT-2, the default) adds a trained vector per position,
``"sinusoidal"`` the paper's fixed table. ``"rope"`` adds nothing and has no position table:
every block rotates each head's queries and keys by their positions (rotary position
embeddings, adjacent pairs, base `ROPE_BASE`: `helpers.positional.apply_rope`, as
`helpers.llama`), so a score depends on how far apart two characters are, not where they sit.
The rotation is applied on every path: forward, ``attention_weights`` and the KV cache.

Initialisation (GPT-2): every Linear/Embedding weight ~ N(0, 0.02), biases 0, and the
two projections that write into the residual stream (attention ``out_proj`` and the
feed-forward ``linear2``) ~ N(0, 0.02 / √(2L)), so the stream's variance does not grow
with depth. Tokens use plain `nn.Embedding` (no √C scale, as GPT-2); with
``tie_weights`` the head shares the token embedding's (V, C) matrix.

Shapes: B batch, T ≤ block_size, C = d_model, H heads, L layers, V vocab.
    GPT(cfg)(idx)                     (B, T) int -> logits (B, T, V), loss or None
    GPT(cfg).attention_weights(idx)   (B, T) -> (L, B, H, T, T)
    GPT(cfg).generate(idx, n)         (B, T) -> (B, T + n)   (KV cache on; use_cache=False without)
    GPT(cfg).forward_cached(idx, cache)  (B, t) new tokens -> last logits (B, V)

Example:
    >>> model = GPT(GPTConfig(vocab_size=10, block_size=8, d_model=16, n_heads=2, n_layers=1))
    >>> model(torch.tensor([[1, 2, 3]]))[0].shape
    torch.Size([1, 3, 10])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.embeddings import check_token_ids
from helpers.generation import KVCache, cached_attention, check_sampling, sample_next
from helpers.layers import EncoderLayer
from helpers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, rope_tables
from helpers.validate import (
    Revalidated,
    check_ids_dtype,
    check_int,
    check_probability,
    check_tensor,
)

IGNORE_INDEX = -100  # targets equal to this are left out of the loss (F.cross_entropy's default)
ROPE_BASE = 10000.0  # positional="rope": θ_i = ROPE_BASE**(-2i / hs), RoFormer's and Llama 2's base
POSITIONALS = ("learned", "sinusoidal", "rope")


@dataclass
class GPTConfig(Revalidated):  # an edit after construction is validated again (or undone)
    vocab_size: int  # V: number of distinct token ids
    block_size: int  # longest context the model sees (T ≤ block_size)
    d_model: int = 128  # C: width of the residual stream
    n_heads: int = 4  # H: must divide d_model
    n_layers: int = 4  # L: number of blocks
    d_ff: int | None = None  # hidden width of the feed-forward; None means 4·d_model
    dropout: float = 0.0  # 0 for small data and for exact reproducibility
    positional: str = "learned"  # "learned" (GPT-2), "sinusoidal" (the paper) or "rope" (rotary, on q and k)
    tie_weights: bool = True  # head.weight is the token embedding matrix
    bias: bool = True  # biases in Linear layers (GPT-2 has them)
    activation: str = "gelu"  # feed-forward: "gelu" (exact erf) or "gelu_tanh" (GPT-2's approximation)

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "d_model", "n_heads", "n_layers"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_int("d_ff", self.d_ff, minimum=1)
        check_probability("dropout", self.dropout)
        if self.positional not in POSITIONALS:
            raise ValueError(f"positional must be one of {', '.join(map(repr, POSITIONALS))}, got {self.positional!r}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"positional='sinusoidal' needs an even d_model, got {self.d_model}")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"positional='rope' rotates pairs of dimensions: the head size d_model / n_heads must "
                             f"be even, got {self.d_model} / {self.n_heads} = {self.d_model // self.n_heads}")
        if self.activation not in ("gelu", "gelu_tanh"):
            raise ValueError(f"activation must be 'gelu' or 'gelu_tanh', got {self.activation!r}")
        for name in ("tie_weights", "bias"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        if c.positional == "learned":
            self.pos_emb = LearnedPositionalEmbedding(c.block_size, c.d_model)
        elif c.positional == "sinusoidal":
            self.pos_emb = SinusoidalPositionalEncoding(c.d_model, max_len=c.block_size)
        else:  # "rope": no table added to x; the blocks rotate q and k (see _rope_at)
            self.pos_emb = None
        self._rope = {}  # (device, dtype) -> (cos, sin), each (block_size, hs/2); not state: recomputed
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout, norm_first=True, activation=c.activation, bias=c.bias,
                         fused_qkv=True)  # q, k, v in one (3C, C) matrix, as GPT-2
            for _ in range(c.n_layers)
        )
        self.ln_f = nn.LayerNorm(c.d_model)  # pre-LN blocks leave the residual stream un-normalised
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        for block in self.blocks:  # GPT-2's scaled init of the residual projections
            for w in (block.self_attn.out_proj.weight, block.ff.linear2.weight):
                nn.init.normal_(w, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layers))
        if c.tie_weights:
            self.head.weight = self.tok_emb.weight

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def _check_idx(self, idx) -> torch.Tensor:
        check_tensor("idx", idx, ndim=2, floating=False)
        T = idx.shape[1]
        if not 1 <= T <= self.config.block_size:
            raise ValueError(f"sequence length T={T} must be in [1, block_size={self.config.block_size}]")
        return check_token_ids(idx, self.config.vocab_size, name="idx")

    def _rope_at(self, start: int, t: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rotary angles of positions start .. start + t - 1: (cos, sin), each (t, hs/2); None unless rope."""
        if self.pos_emb is not None:
            return None
        w = self.tok_emb.weight
        tables = self._rope.get((w.device, w.dtype))
        if tables is None:  # once per device and dtype, in float64 then rounded (a float64 model gets float64 angles)
            c = self.config
            with torch.inference_mode(False):  # made under inference_mode they could not be used in training later
                cos, sin = rope_tables(c.block_size, c.d_model // c.n_heads, ROPE_BASE, dtype=torch.float64)
                tables = self._rope[(w.device, w.dtype)] = (cos.to(w.device, w.dtype), sin.to(w.device, w.dtype))
        cos, sin = tables
        return cos[start : start + t], sin[start : start + t]  # (block_size, hs/2) -> (t, hs/2) x 2

    def _trunk(self, idx, return_weights: bool):
        if self.pos_emb is None:  # rope: positions enter at every block, through q and k
            x, rope = self.drop(self.tok_emb(idx)), self._rope_at(0, idx.shape[1])  # (B, T) -> (B, T, C)
        else:
            x, rope = self.drop(self.pos_emb(self.tok_emb(idx))), None  # (B, T) -> (B, T, C)
        weights = []
        for block in self.blocks:
            if return_weights:
                x, w = block(x, is_causal=True, return_weights=True, rope=rope)
                weights.append(w)
            else:
                x = block(x, is_causal=True, rope=rope)  # the fused kernel applies the causal mask
        return self.ln_f(x), weights

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) -> ``(logits (B, T, V), loss)``; loss is the mean cross-entropy, or None.

        ``targets`` (B, T) are the next tokens; entries equal to -100 are ignored (at least one
        must count: a mean over none would be NaN).
        """
        idx = self._check_idx(idx)  # any integer dtype -> int64
        if targets is not None:
            check_tensor("targets", targets, ndim=2, floating=False)
            if targets.shape != idx.shape:
                raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
            check_ids_dtype("targets", targets)
            # one pass; ignored entries (-100) are below 0; an empty batch goes to the error below
            lo, hi = (int(v) for v in torch.aminmax(targets)) if targets.numel() else (-1, -1)
            if lo < 0 or hi >= self.config.vocab_size:
                ignored = targets == IGNORE_INDEX
                if bool(ignored.all()):  # the mean over no targets is 0/0 = NaN
                    raise ValueError(f"targets must hold at least one token that is not {IGNORE_INDEX} (ignored)")
                check_token_ids(targets[~ignored], self.config.vocab_size, name="targets")  # names a bad id
            targets = targets.long()  # F.cross_entropy needs int64 targets
        x, _ = self._trunk(idx, return_weights=False)
        logits = self.head(x)  # (B, T, C) -> (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)  # (B*T, V)
        return logits, loss

    def attention_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """The causal self-attention weights of every block and head: (B, T) -> (L, B, H, T, T)."""
        idx = self._check_idx(idx)
        _, weights = self._trunk(idx, return_weights=True)
        return torch.stack(weights)  # L x (B, H, T, T) -> (L, B, H, T, T)

    def _embed(self, idx, start: int = 0) -> torch.Tensor:
        """Token + position embeddings of ids at positions start, start + 1, ...: (B, t) -> (B, t, C).

        With rope, token embeddings only: the positions are rotated into q and k (`_rope_at`)."""
        x = self.tok_emb(idx)  # (B, t) -> (B, t, C)
        t = idx.shape[1]
        if self.pos_emb is None:
            return self.drop(x)
        if isinstance(self.pos_emb, LearnedPositionalEmbedding):
            pos = self.pos_emb.embedding(torch.arange(start, start + t, device=idx.device))  # (t, C)
        else:
            pos = self.pos_emb.table[start : start + t].to(x.dtype)  # (t, C)
        return self.drop(x + pos)  # (B, t, C) + (t, C) -> (B, t, C)

    def new_cache(self, batch: int) -> KVCache:
        """An empty KV cache for ``batch`` sequences of up to block_size tokens."""
        c, w = self.config, self.tok_emb.weight
        return KVCache(c.n_layers, batch, c.n_heads, c.block_size, c.d_model // c.n_heads, w.device, w.dtype)

    def forward_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run only the new tokens idx (B, t) after the ``cache.length`` cached ones: -> last logits (B, V).

        Their keys and values are added to the cache. Equals ``self(whole)[0][:, -1]`` up to rounding
        in eval mode (it is for generation: attention dropout is not applied here). With rope the new
        tokens sit at positions cache.length, cache.length + 1, ...; their keys are cached rotated.
        """
        check_token_ids(check_tensor("idx", idx, ndim=2, floating=False), self.config.vocab_size, name="idx")
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (see new_cache), got {type(cache).__name__}")
        c, w = self.config, self.tok_emb.weight
        cache.check_fits(c.n_layers, idx.shape[0], c.n_heads, c.d_model // c.n_heads, w.dtype, w.device)
        if idx.shape[1] < 1:
            raise ValueError("idx must hold at least one new token per row, got T=0")
        if not 1 <= cache.length + idx.shape[1] <= cache.max_len:
            raise ValueError(f"cache.length={cache.length} + T={idx.shape[1]} must be in [1, {cache.max_len}]")
        x = self._embed(idx, start=cache.length)  # (B, t) -> (B, t, C)
        rope = self._rope_at(cache.length, idx.shape[1])  # None unless rope: (t, hs/2) x 2
        for i, block in enumerate(self.blocks):  # a pre-LN EncoderLayer, its self-attention cached
            x = x + block.dropout1(cached_attention(block.self_attn, block.norm1(x), cache, i, rope=rope))
            x = x + block.dropout2(block.ff(block.norm2(x)))
        cache.advance(idx.shape[1])
        return self.head(self.ln_f(x[:, -1]))  # only the last position: (B, C) -> (B, V)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, top_p: float | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``idx`` (B, T) -> (B, T + max_new_tokens).

        Each step sees only the last ``block_size`` tokens, divides the logits by
        ``temperature``, keeps the ``top_k`` largest (``top_k=1`` is greedy) and then the
        ``top_p`` nucleus (`helpers.generation.filter_logits`). Dropout is off while
        generating; the same ``generator`` state gives the same tokens. An empty batch (B = 0)
        gives (0, T + max_new_tokens). Logits that are NaN or +inf raise ValueError.

        ``use_cache`` (default) keeps every layer's keys and values, so each step runs one
        token through the model. Position embeddings are absolute: once the context is longer
        than block_size the window slides, every kept token changes position, and the cache
        is rebuilt from the window at each step (exact, but no faster than ``use_cache=False``).
        A rope model does the same: the window's positions restart at 0 (as in training, where
        no window is longer than block_size), its keys are rotated again and the cache rebuilt,
        so both settings of ``use_cache`` give the same tokens past block_size too.
        """
        check_tensor("idx", idx, ndim=2, floating=False)
        if idx.shape[1] < 1:
            raise ValueError("idx must hold at least one token per row, got T=0")
        idx = check_token_ids(idx, self.config.vocab_size, name="idx")  # any integer dtype -> int64
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        check_sampling(temperature, top_k, top_p, self.config.vocab_size)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}")
        bs, cache = self.config.block_size, None
        was_training = self.training
        self.eval()
        try:
            for _ in range(max_new_tokens):
                window = idx[:, -bs:]  # crop: (B, T) -> (B, ≤block_size)
                if not use_cache:
                    x, _ = self._trunk(window, return_weights=False)  # (B, T, C)
                    logits = self.head(x[:, -1])  # only the last position: (B, C) -> (B, V)
                elif cache is None or idx.shape[1] > bs:  # first step, or the window slid: (re)build
                    cache = cache or self.new_cache(idx.shape[0])
                    cache.reset()
                    logits = self.forward_cached(window, cache)  # (B, T) -> (B, V)
                else:
                    logits = self.forward_cached(idx[:, -1:], cache)  # the newest token only: (B, 1) -> (B, V)
                nxt = sample_next(logits, temperature, top_k, top_p, generator)  # (B, V) -> (B, 1)
                idx = torch.cat([idx, nxt], dim=1)  # (B, T) -> (B, T + 1)
        finally:
            self.train(was_training)
        return idx
