"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

src ids -> TokenEmbedding (× √C) + sinusoidal PE -> Encoder -> memory
tgt ids -> TokenEmbedding (× √C) + sinusoidal PE -> Decoder(memory) -> Linear -> logits
The target side is causal by default; with ``pad_id`` set, pad tokens are masked as keys
in every attention. Both stacks end with a LayerNorm, as in `nn.Transformer`. Matrices are
initialised with Xavier-uniform (as `nn.Transformer` and the reference implementations).

Shapes: B batch, S source length, T target length, C = d_model, H heads, L layers, V vocab.
    encode(src)              (B, S) -> memory (B, S, C)
    decode(tgt, memory)      (B, T), (B, S, C) -> (B, T, C)
    forward(src, tgt)        (B, S), (B, T) -> logits (B, T, V_tgt)
    greedy_decode(src, n)    (B, S) -> (B, ≤ n), starting with bos_id (KV cache on; use_cache=False without)
    weights (return_weights=True): encoder (L, B, H, S, S), decoder_self (L, B, H, T, T),
                                   decoder_cross (L, B, H, T, S)

Example:
    >>> m = Transformer(11, 13, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0)
    >>> m(torch.tensor([[1, 2, 3]]), torch.tensor([[0, 4]])).shape
    torch.Size([1, 2, 13])
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from helpers.attention import check_mask, padding_mask
from helpers.embeddings import TokenEmbedding, check_token_ids
from helpers.generation import KVCache, attend, cached_attention, split_heads
from helpers.positional import SinusoidalPositionalEncoding
from helpers.stacks import Decoder, Encoder
from helpers.validate import check_bool, check_int, check_tensor


class AttentionWeights(NamedTuple):
    encoder: torch.Tensor  # (L, B, H, S, S)
    decoder_self: torch.Tensor  # (L, B, H, T, T)
    decoder_cross: torch.Tensor  # (L, B, H, T, S): which source token each target position reads


class Transformer(nn.Module):
    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 512, n_heads: int = 8, n_layers: int = 6,
                 d_ff: int = 2048, dropout: float = 0.1, max_len: int = 512, norm_first: bool = False,
                 pad_id: int | None = None, activation: str = "relu", share_embeddings: bool = False,
                 tie_weights: bool = False):
        super().__init__()
        self.src_vocab = check_int("src_vocab", src_vocab, minimum=1)
        self.tgt_vocab = check_int("tgt_vocab", tgt_vocab, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)
        if pad_id is not None and not 0 <= check_int("pad_id", pad_id) < min(src_vocab, tgt_vocab):
            raise ValueError(f"pad_id must be in [0, {min(src_vocab, tgt_vocab)}), got {pad_id}")
        check_bool("share_embeddings", share_embeddings)
        check_bool("tie_weights", tie_weights)
        if share_embeddings and src_vocab != tgt_vocab:
            raise ValueError(f"share_embeddings needs src_vocab == tgt_vocab, got {src_vocab} and {tgt_vocab}")
        self.pad_id = pad_id
        args = dict(d_model=d_model, n_heads=n_heads, d_ff=d_ff, dropout=dropout, norm_first=norm_first,
                    activation=activation, final_norm=True)
        self.encoder = Encoder(n_layers, **args)  # validates d_model, n_heads, dropout
        self.decoder = Decoder(n_layers, **args)
        self.src_emb = TokenEmbedding(src_vocab, d_model)
        self.tgt_emb = TokenEmbedding(tgt_vocab, d_model)
        self.pos = SinusoidalPositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.head = nn.Linear(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if share_embeddings:  # the paper shares one matrix between both embeddings and the head
            self.tgt_emb.embedding.weight = self.src_emb.embedding.weight
        if tie_weights:
            self.head.weight = self.tgt_emb.embedding.weight

    def _check_ids(self, name: str, ids, vocab: int) -> torch.Tensor:
        check_tensor(name, ids, ndim=2, floating=False)
        if not 1 <= ids.shape[1] <= self.max_len:
            raise ValueError(f"{name} length {ids.shape[1]} must be in [1, max_len={self.max_len}]")
        return check_token_ids(ids, vocab, name=name)

    def _check_mask(self, name: str, mask, B: int, T_q: int, T_k: int):
        """None, or a bool mask that broadcasts to (B, H, T_q, T_k); errors name the argument."""
        if mask is None:
            return None
        return check_mask(mask, torch.Size((B, self.encoder.layers[0].self_attn.n_heads, T_q, T_k)), name)

    def src_key_mask(self, src: torch.Tensor) -> torch.Tensor | None:
        """(B, 1, 1, S) True at real source tokens, or None without a pad id."""
        return None if self.pad_id is None else padding_mask(src, self.pad_id)

    def encode(self, src, src_mask=None, return_weights: bool = False):
        """src (B, S) -> memory (B, S, C). ``src_mask`` defaults to the source padding mask."""
        self._check_ids("src", src, self.src_vocab)
        B, S = src.shape
        if src_mask is None:
            src_mask = self.src_key_mask(src)
        self._check_mask("src_mask", src_mask, B, S, S)
        x = self.pos(self.src_emb(src))  # (B, S) -> (B, S, C)
        return self.encoder(x, mask=src_mask, return_weights=return_weights)

    def decode(self, tgt, memory, memory_mask=None, tgt_mask=None, causal: bool = True,
               return_weights: bool = False):
        """tgt (B, T), memory (B, S, C) -> (B, T, C), before the head.

        The self-attention mask is ``tgt_mask`` & target padding & (if ``causal``) the causal
        mask; ``memory_mask`` (e.g. ``src_key_mask(src)``) hides source positions. Unlike PyTorch's
        ``memory_mask`` (a (T, S) pair mask only), ours is True = may attend and also carries the
        source padding (PyTorch's ``memory_key_padding_mask``); see `helpers.layers`.
        """
        self._check_ids("tgt", tgt, self.tgt_vocab)
        check_tensor("memory", memory, ndim=3, floating=True)
        (B, T), C = tgt.shape, self.head.in_features
        if memory.shape[0] != B:
            raise ValueError(f"tgt and memory batch sizes differ: {B} and {memory.shape[0]}")
        if memory.shape[1] < 1 or memory.shape[2] != C:
            raise ValueError(f"memory must have shape (B, S>=1, d_model={C}), got {tuple(memory.shape)}")
        if memory.dtype != self.head.weight.dtype:
            raise TypeError(f"memory must have the model's dtype {self.head.weight.dtype}, got {memory.dtype}")
        self._check_mask("tgt_mask", tgt_mask, B, T, T)  # before combining, so a wrong one is named
        self._check_mask("memory_mask", memory_mask, B, T, memory.shape[1])
        if self.pad_id is not None:
            pad = padding_mask(tgt, self.pad_id)  # (B, 1, 1, T)
            tgt_mask = pad if tgt_mask is None else tgt_mask & pad
        y = self.pos(self.tgt_emb(tgt))  # (B, T) -> (B, T, C)
        return self.decoder(y, memory, self_mask=tgt_mask, memory_mask=memory_mask, is_causal=causal,
                            return_weights=return_weights)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, return_weights: bool = False):
        """src (B, S), tgt (B, T) -> logits (B, T, V_tgt); with ``return_weights`` also `AttentionWeights`.

        Defaults: ``src_mask`` and ``memory_mask`` are the source padding mask; the target side is causal.
        """
        check_tensor("src", src, ndim=2, floating=False)
        check_tensor("tgt", tgt, ndim=2, floating=False)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt batch sizes differ: {src.shape[0]} and {tgt.shape[0]}")
        self._check_mask("src_mask", src_mask, src.shape[0], src.shape[1], src.shape[1])
        if memory_mask is None:
            memory_mask = src_mask if src_mask is not None and src_mask.dim() == 4 and src_mask.shape[-2] == 1 \
                else self.src_key_mask(src)
        enc = self.encode(src, src_mask, return_weights=return_weights)
        memory, w_enc = enc if return_weights else (enc, None)
        dec = self.decode(tgt, memory, memory_mask=memory_mask, tgt_mask=tgt_mask, return_weights=return_weights)
        if not return_weights:
            return self.head(dec)  # (B, T, C) -> (B, T, V)
        y, w_self, w_cross = dec
        return self.head(y), AttentionWeights(w_enc, w_self, w_cross)

    def _decode_step(self, tok, cache: KVCache, memory_kv, memory_mask, key_mask) -> torch.Tensor:
        """The newest target token tok (B, 1) through the decoder, its self-attention cached -> logits (B, V).

        ``memory_kv`` holds each layer's cross-attention keys/values of the source, computed once.
        """
        P = cache.length
        y = self.pos.dropout(self.tgt_emb(tok) + self.pos.table[P : P + 1].to(self.head.weight.dtype))  # (B, 1, C)
        for i, layer in enumerate(self.decoder.layers):
            def cross(h, layer=layer, i=i):
                q = split_heads(layer.cross_attn.q_proj(h), layer.cross_attn.n_heads)  # (B, 1, C) -> (B, H, 1, hs)
                out = attend(q, *memory_kv[i], mask=memory_mask)  # (B, H, 1, S) @ (B, H, S, hs) -> (B, H, 1, hs)
                return layer.cross_attn.out_proj(out.transpose(1, 2).flatten(2))  # (B, H, 1, hs) -> (B, 1, C)

            def self_attn(h, layer=layer, i=i):
                return cached_attention(layer.self_attn, h, cache, i, key_mask)

            if layer.norm_first:
                y = y + layer.dropout1(self_attn(layer.norm1(y)))
                y = y + layer.dropout2(cross(layer.norm2(y)))
                y = y + layer.dropout3(layer.ff(layer.norm3(y)))
            else:
                y = layer.norm1(y + layer.dropout1(self_attn(y)))
                y = layer.norm2(y + layer.dropout2(cross(y)))
                y = layer.norm3(y + layer.dropout3(layer.ff(y)))
        cache.advance(1)
        if self.decoder.norm is not None:
            y = self.decoder.norm(y)
        return self.head(y[:, -1])  # (B, C) -> (B, V)

    def _memory_kv(self, memory):
        """Each decoder layer's cross-attention keys and values of ``memory``: L x 2 x (B, H, S, hs)."""
        return [tuple(split_heads(proj(memory), layer.cross_attn.n_heads)
                      for proj in (layer.cross_attn.k_proj, layer.cross_attn.v_proj))
                for layer in self.decoder.layers]

    @torch.no_grad()
    def greedy_decode(self, src, max_len: int, bos_id: int, eos_id: int, use_cache: bool = True) -> torch.Tensor:
        """Most likely token at each step: src (B, S) -> (B, ≤ max_len) ids starting with ``bos_id``.

        Stops early once every row has produced ``eos_id``; positions after a row's eos hold
        ``pad_id`` (or ``eos_id`` without a pad id). Runs in eval mode (no dropout).
        ``use_cache`` (default): the decoder's self-attention keys/values are cached and the
        source's cross-attention keys/values computed once, so each step runs one token.
        """
        check_int("max_len", max_len, minimum=1)
        if max_len > self.max_len:
            raise ValueError(f"max_len={max_len} exceeds the model's max_len={self.max_len}")
        for name, v in (("bos_id", bos_id), ("eos_id", eos_id)):
            if not 0 <= check_int(name, v) < self.tgt_vocab:
                raise ValueError(f"{name} must be in [0, tgt_vocab={self.tgt_vocab}), got {v}")
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}")
        fill = self.pad_id if self.pad_id is not None else eos_id
        was_training = self.training
        self.eval()
        try:
            memory = self.encode(src)  # (B, S) -> (B, S, C), computed once
            memory_mask = self.src_key_mask(src)  # (B, 1, 1, S) or None
            B = src.shape[0]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
            done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
            if use_cache:
                sa = self.decoder.layers[0].self_attn
                cache = KVCache(len(self.decoder.layers), B, sa.n_heads, max_len, sa.head_dim, memory.device,
                                memory.dtype)
                memory_kv = self._memory_kv(memory)
            for _ in range(max_len - 1):
                if use_cache:  # decode's padding mask, over the keys cached so far and the new one
                    key_mask = None if self.pad_id is None else ys != self.pad_id  # (B, T)
                    logits = self._decode_step(ys[:, -1:], cache, memory_kv, memory_mask, key_mask)  # (B, V)
                else:
                    logits = self.head(self.decode(ys, memory, memory_mask=memory_mask)[:, -1])  # (B, T, C) -> (B, V)
                nxt = torch.where(done, fill, logits.argmax(dim=-1))  # (B,)
                ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, T) -> (B, T + 1)
                done |= nxt == eos_id
                if bool(done.all()):
                    break
        finally:
            self.train(was_training)
        return ys
