"""A Llama-architecture decoder (SmolLM2, Llama 2/3, Qwen ...): GPT-2's decoder with five changes.

Each block is pre-norm, as our GPT: ``x = x + attn(norm1(x)); x = x + ffn(norm2(x))``. What differs:

- `RMSNorm` instead of LayerNorm: x / sqrt(mean(x²) + eps) · weight. No mean subtracted, no bias.
- Rotary positions (`apply_rope`) instead of a learned position table: q and k of each head are
  rotated pair by pair by the angle pos·θ_i, θ_i = base^(-2i/hs) (`helpers.positional.inverse_frequencies`),
  so q·k depends on the distance between two positions only. Nothing is added to x.
  (`rope_tables` and `apply_rope` live in `helpers.positional`, shared with `GPTConfig(positional="rope")`;
  this module re-exports them.)
- `SwiGLU` feed-forward instead of GELU: down(silu(gate(x)) ⊙ up(x)), three matrices.
- Grouped-query attention (`grouped_query_attention`): H query heads share H_kv key/value heads,
  query head h reading kv head h // (H / H_kv). The KV cache stores H_kv heads, not H.
- No biases anywhere; the output head is the token embedding (tied).

RoPE's pairs: this module rotates *adjacent* pairs (0, 1), (2, 3), ... of a head, as llama.cpp and
Meta's original code do, and as GGUF files store q and k. Hugging Face's `rotate_half` pairs
dimension i with i + hs/2 instead; its checkpoints store q and k rows permuted to match
(`unpermute_rows` goes from the GGUF's order to Hugging Face's). q·k is the same either way.

Shapes: B batch, T positions, C = d_model, H query heads, H_kv kv heads, hs = C / H, V vocab.
    Llama(config)(idx)               (B, T) -> logits (B, T, V)
    Llama.forward_cached(idx, cache) (B, t) -> last logits (B, V)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.generation import KVCache, check_sampling, sample_next
from helpers.positional import apply_rope, rope_tables
from helpers.validate import Revalidated, check_int, check_positive, check_tensor


@dataclass
class LlamaConfig(Revalidated):
    vocab_size: int = 49152
    d_model: int = 576
    n_layers: int = 30
    n_heads: int = 9
    n_kv_heads: int = 3
    d_ff: int = 1536
    norm_eps: float = 1e-5
    rope_base: float = 100000.0
    context_length: int = 8192

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "context_length"):
            check_int(name, getattr(self, name), minimum=1)
        check_positive("norm_eps", self.norm_eps)
        check_positive("rope_base", self.rope_base)
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of an even size")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_gguf(cls, meta: dict) -> LlamaConfig:
        """The config a GGUF file's metadata states (architecture ``llama``)."""
        if meta.get("general.architecture") != "llama":
            raise ValueError(f"not a llama model: general.architecture is {meta.get('general.architecture')!r}")
        keys = {"vocab_size": "llama.vocab_size", "d_model": "llama.embedding_length", "n_layers": "llama.block_count",
                "n_heads": "llama.attention.head_count", "n_kv_heads": "llama.attention.head_count_kv",
                "d_ff": "llama.feed_forward_length", "norm_eps": "llama.attention.layer_norm_rms_epsilon",
                "rope_base": "llama.rope.freq_base", "context_length": "llama.context_length"}
        missing = [k for k in keys.values() if k not in meta]
        if missing:
            raise ValueError(f"the GGUF metadata lacks {missing}")
        try:
            return cls(**{f: meta[k] for f, k in keys.items()})
        except (TypeError, ValueError) as e:
            raise ValueError(f"the GGUF metadata states an impossible llama config: {e}") from None


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight over the last dimension (no mean subtracted, no bias)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))  # (..., C)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) ⊙ up(x)): a gated feed-forward of width d_ff, no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (..., C) -> (..., F) -> (..., C)


def unpermute_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """q or k weight rows in GGUF's order (adjacent pairs) -> Hugging Face's (pair i with i + hs/2), per head."""
    out_dim = w.shape[0]
    return w.reshape(n_heads, out_dim // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Attention of H query heads (B, H, t, hs) to H_kv shared kv heads (B, H_kv, P + t, hs) -> (B, H, t, hs).

    Query head h reads kv head h // (H / H_kv). With ``causal`` the t queries are the last t positions.
    """
    t, s = q.shape[2], k.shape[2]
    mask = None
    if causal and t > 1:
        mask = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(diagonal=s - t)  # query i sees keys <= s - t + i
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, H, t, hs)


class LlamaAttention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        C, hs = config.d_model, config.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, hs
        self.q_proj = nn.Linear(C, config.n_heads * hs, bias=False)
        self.k_proj = nn.Linear(C, config.n_kv_heads * hs, bias=False)
        self.v_proj = nn.Linear(C, config.n_kv_heads * hs, bias=False)
        self.o_proj = nn.Linear(config.n_heads * hs, C, bias=False)

    def forward(self, x, cos, sin, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        B, t, C = x.shape
        q = self.q_proj(x).view(B, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, t, C) -> (B, H, t, hs)
        k = self.k_proj(x).view(B, t, self.n_kv_heads, self.head_dim).transpose(1, 2)  # -> (B, H_kv, t, hs)
        v = self.v_proj(x).view(B, t, self.n_kv_heads, self.head_dim).transpose(1, 2)  # -> (B, H_kv, t, hs)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, H_kv, P + t, hs) x 2
        out = grouped_query_attention(q, k, v)  # (B, H, t, hs)
        return self.o_proj(out.transpose(1, 2).reshape(B, t, C))  # (B, H, t, hs) -> (B, t, C)


class LlamaBlock(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.attn = LlamaAttention(config)
        self.ffn_norm = RMSNorm(config.d_model, config.norm_eps)
        self.ffn = SwiGLU(config.d_model, config.d_ff)

    def forward(self, x, cos, sin, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, layer)  # (B, t, C)
        return x + self.ffn(self.ffn_norm(x))  # (B, t, C)


class Llama(nn.Module):
    """Token embedding -> n_layers `LlamaBlock` -> RMSNorm -> tied head."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(LlamaBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one matrix reads tokens in and writes them out
        self._rope = (torch.zeros(0, config.head_dim // 2),) * 2

    def _rope_at(self, start: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope[0].shape[0] < start + t:  # grow the table in powers of two, up to the context length
            n = min(self.config.context_length, max(256, 1 << (start + t - 1).bit_length()))
            self._rope = rope_tables(n, self.config.head_dim, self.config.rope_base)
        cos, sin = self._rope
        return cos[start : start + t], sin[start : start + t]  # (t, hs/2) x 2

    def _check_idx(self, idx, start: int = 0) -> torch.Tensor:
        check_tensor("idx", idx, ndim=2, floating=False)
        if idx.dtype == torch.bool:
            raise TypeError("idx must hold integer token ids, got a bool tensor")
        if not 1 <= start + idx.shape[1] <= self.config.context_length:
            raise ValueError(f"positions {start} + T={idx.shape[1]} must fit the context of "
                             f"{self.config.context_length} (and T >= 1)")
        if idx.numel() and not (0 <= int(idx.min()) and int(idx.max()) < self.config.vocab_size):
            raise ValueError(f"idx holds ids outside [0, {self.config.vocab_size})")
        return idx.long()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of every position: (B, T) -> (B, T, V)."""
        idx = self._check_idx(idx)
        cos, sin = self._rope_at(0, idx.shape[1])
        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))  # (B, T, C) -> (B, T, V)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty KV cache for ``batch`` sequences of up to ``max_len`` tokens: H_kv heads per layer."""
        check_int("max_len", max_len, minimum=1)
        c, w = self.config, self.tok_emb.weight
        return KVCache(c.n_layers, batch, c.n_kv_heads, min(max_len, c.context_length), c.head_dim, w.device, w.dtype)

    def forward_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run only the new tokens idx (B, t) after the ``cache.length`` cached ones: -> last logits (B, V)."""
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (see new_cache), got {type(cache).__name__}")
        idx = self._check_idx(idx, cache.length)
        c, w = self.config, self.tok_emb.weight
        cache.check_fits(c.n_layers, idx.shape[0], c.n_kv_heads, c.head_dim, w.dtype, w.device)
        cos, sin = self._rope_at(cache.length, idx.shape[1])
        x = self.tok_emb(idx)  # (B, t) -> (B, t, C)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, cache, i)
        cache.advance(idx.shape[1])
        return self.head(self.norm(x[:, -1]))  # only the last position: (B, C) -> (B, V)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, generator: torch.Generator | None = None,
                 stop_id: int | None = None) -> torch.Tensor:
        """Sample up to ``max_new_tokens`` after ``idx`` (B, T) with a KV cache -> (B, T + n).

        The sampler is the course's (`helpers.generation.sample_next`: temperature, top-k, top-p;
        ``top_k=1`` is greedy). With ``stop_id`` (one row only) generation ends after that token.
        """
        check_tensor("idx", idx, ndim=2, floating=False)
        check_int("max_new_tokens", max_new_tokens, minimum=0)
        check_sampling(temperature, top_k, top_p, self.config.vocab_size)
        if stop_id is not None:
            check_int("stop_id", stop_id, minimum=0)
            if idx.shape[0] != 1:
                raise ValueError(f"stop_id needs a single row (B=1), got B={idx.shape[0]}")
        idx = self._check_idx(idx)
        if max_new_tokens == 0:
            return idx
        cache = self.new_cache(idx.shape[0], idx.shape[1] + max_new_tokens)
        was_training = self.training
        self.eval()
        try:
            logits = self.forward_cached(idx, cache)  # the prompt at once: (B, T) -> (B, V)
            for step in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, top_p, generator)  # (B, V) -> (B, 1)
                idx = torch.cat([idx, nxt], dim=1)  # (B, T) -> (B, T + 1)
                if (stop_id is not None and int(nxt) == stop_id) or step == max_new_tokens - 1:
                    break
                logits = self.forward_cached(nxt, cache)  # the newest token only: (B, 1) -> (B, V)
        finally:
            self.train(was_training)
        return idx


def llama_from_gguf(gguf) -> Llama:
    """A `Llama` holding a GGUF file's dequantised weights (`helpers.gguf_reader.read_gguf`), in eval mode."""
    from helpers.gguf_reader import (
        dequantize,  # the file format sits below; imported here to keep llama.py light
    )

    config = LlamaConfig.from_gguf(gguf.metadata)
    names = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "norm.weight"}
    per_block = {"attn_norm": "attn_norm", "attn_q": "attn.q_proj", "attn_k": "attn.k_proj", "attn_v": "attn.v_proj",
                 "attn_output": "attn.o_proj", "ffn_norm": "ffn_norm", "ffn_gate": "ffn.gate", "ffn_up": "ffn.up",
                 "ffn_down": "ffn.down"}
    for i in range(config.n_layers):
        names.update({f"blk.{i}.{a}.weight": f"blocks.{i}.{b}.weight" for a, b in per_block.items()})
    if "output.weight" in gguf.tensors:
        raise ValueError("this GGUF file has its own output.weight; this model ties the head to the embedding")
    missing, extra = set(names) - set(gguf.tensors), set(gguf.tensors) - set(names)
    if missing or extra:
        raise ValueError(f"the GGUF tensors do not fit a {config.n_layers}-layer llama: missing "
                         f"{sorted(missing)[:3]}, unexpected {sorted(extra)[:3]}")
    with torch.device("meta"):
        model = Llama(config)  # no memory yet: the file's tensors are assigned below
    state = {}
    for gname, ours in names.items():
        w = dequantize(gguf.tensors[gname])
        want = model.get_parameter(ours).shape
        if w.shape != want:
            raise ValueError(f"GGUF tensor {gname} has shape {tuple(w.shape)}, a {ours} needs {tuple(want)}")
        state[ours] = w
    model.load_state_dict(state, strict=False, assign=True)
    model.head.weight = model.tok_emb.weight  # re-tie after assign
    model._rope = (torch.zeros(0, config.head_dim // 2),) * 2
    return model.eval()


def kv_cache_bytes(config: LlamaConfig, n_positions: int, kv_heads: int | None = None, bytes_per_number: int = 4) -> int:
    """Bytes of a KV cache of ``n_positions`` tokens: L × 2 (k, v) × H_kv × hs × positions × bytes."""
    kv = config.n_kv_heads if kv_heads is None else kv_heads
    return config.n_layers * 2 * kv * config.head_dim * n_positions * bytes_per_number


__all__ = ["Llama", "LlamaConfig", "RMSNorm", "SwiGLU", "apply_rope", "grouped_query_attention", "kv_cache_bytes",
           "llama_from_gguf", "rope_tables", "unpermute_rows"]
