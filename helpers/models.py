"""Whole models and how to count them.

Re-exports `Transformer` (encoder-decoder, `helpers.transformer`) and `GPTConfig`/`GPT`
(decoder-only, `helpers.gpt`), and adds parameter counting that is honest about tied
weights: a tensor shared by two modules is counted once.

Example:
    >>> count_parameters(nn.Linear(3, 2))
    8
"""

from __future__ import annotations

from torch import nn

from helpers.attention import MultiHeadAttention
from helpers.gpt import GPT, GPTConfig
from helpers.layers import FeedForward
from helpers.transformer import AttentionWeights, Transformer
from helpers.validate import check_bool

__all__ = ["Transformer", "AttentionWeights", "GPTConfig", "GPT", "count_parameters", "parameter_breakdown"]

CATEGORIES = ("embeddings", "attention", "feed-forward", "norms", "output head", "other")


def _unique(params):
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def count_parameters(model: nn.Module, non_embedding: bool = False, trainable_only: bool = False) -> int:
    """Number of scalars in ``model``'s parameters, each shared tensor counted once.

    ``non_embedding=True`` leaves out the parameters of every `nn.Embedding` (token and
    learned position tables; a head tied to the token table goes with it), the count
    scaling laws use.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    check_bool("non_embedding", non_embedding)
    check_bool("trainable_only", trainable_only)
    params = _unique(model.parameters())
    if trainable_only:
        params = [p for p in params if p.requires_grad]
    if non_embedding:
        emb = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
        params = [p for p in params if id(p) not in emb]
    return sum(p.numel() for p in params)


def _category(name: str, m: nn.Module) -> str | None:
    if isinstance(m, nn.Embedding):
        return "embeddings"
    if isinstance(m, (MultiHeadAttention, nn.MultiheadAttention)):
        return "attention"
    if isinstance(m, FeedForward) or name.rsplit(".", 1)[-1] in ("linear1", "linear2"):
        return "feed-forward"  # our FeedForward, or the linear1/linear2 of PyTorch's layers
    if isinstance(m, nn.LayerNorm):
        return "norms"
    if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in ("head", "lm_head", "generator"):
        return "output head"
    return None


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters per kind: embeddings / attention / feed-forward / norms / output head / other.

    Works for our models and for PyTorch's Transformer modules. A tied tensor is counted
    under the first module that owns it (the embedding, as modules are visited in order of
    registration), so the values sum to `count_parameters(model)`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    counts = dict.fromkeys(CATEGORIES, 0)
    seen: set[int] = set()
    for name, m in model.named_modules():
        cat = _category(name, m)
        if cat is None:
            continue
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                counts[cat] += p.numel()
    counts["other"] = sum(p.numel() for p in _unique(model.parameters()) if id(p) not in seen)
    return counts
