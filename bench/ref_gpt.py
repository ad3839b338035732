"""A minimal GPT written the way production code writes it (nanoGPT style), as a speed reference.

One fused (C, 3C) q/k/v projection and ``F.scaled_dot_product_attention(is_causal=True)``;
no argument checks. `copy_from(ours)` loads the weights of a `helpers.gpt.GPT`, so both
compute the same function and their speeds can be compared fairly.

Shapes: B batch, T ≤ block_size, C = d_model, H heads, hs = C // H, V vocab.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # (B, T, C) -> 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))  # -> (B, H, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, H, T, hs) -> (B, T, C)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln_2 = nn.LayerNorm(d_model)
        self.c_fc = nn.Linear(d_model, d_ff)
        self.c_proj = nn.Linear(d_ff, d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))  # (B, T, C) -> (B, T, d_ff) -> (B, T, C)


class RefGPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, d_model: int, n_heads: int, n_layers: int, d_ff: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.h = nn.ModuleList(Block(d_model, n_heads, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as GPT-2

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, C) -> (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def copy_from(self, ours) -> RefGPT:
        """Load the weights of a `helpers.gpt.GPT` with the same sizes."""
        self.wte.weight.copy_(ours.tok_emb.weight)
        self.wpe.weight.copy_(ours.pos_emb.embedding.weight)
        for mine, theirs in zip(self.h, ours.blocks, strict=True):
            a = theirs.self_attn
            mine.attn.c_attn.weight.copy_(a.qkv_proj.weight)
            mine.attn.c_attn.bias.copy_(a.qkv_proj.bias)
            for dst, src in ((mine.attn.c_proj, a.out_proj), (mine.c_fc, theirs.ff.linear1),
                             (mine.c_proj, theirs.ff.linear2), (mine.ln_1, theirs.norm1), (mine.ln_2, theirs.norm2)):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
        self.ln_f.weight.copy_(ours.ln_f.weight)
        self.ln_f.bias.copy_(ours.ln_f.bias)
        return self
