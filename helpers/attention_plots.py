"""Drawing attention weights: per-head heatmaps, one query's weights as bars, token labels.

Tokens are often Chinese ("我 爱 你"). Matplotlib's default font (DejaVu Sans) has no CJK
glyphs, so the course ships one (`helpers.cjk`, registered by `helpers.plots`): tick labels
draw the tokens themselves on every machine, and a token with a character no course font
has is refused with a ValueError that names it, rather than drawn as an empty box.

Shapes: H heads, T_q / T_k query / key lengths.
    attention_heads_figure(weights (H, T_q, T_k), tokens)  -> Figure with H heatmaps
    draw_query_bars(ax, row (T_k,), tokens)                 bars on an existing Axes

Example:
    >>> token_labels(["the", "cat"])
    ['the', 'cat']
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure

from helpers.cjk import EXT_FAMILY, FAMILY, LATIN, check_drawable
from helpers.plots import check_plot_args, heatmap, plain_text


def cjk_font() -> str:
    """The name of the course's CJK font (always registered: see `helpers.cjk`)."""
    return FAMILY


def token_labels(tokens: Sequence[str]) -> list[str]:
    """The tokens as tick labels (``$`` escaped, so matplotlib never reads them as TeX); ValueError
    if a character has no glyph in the course's fonts."""
    check_plot_args(tokens=tokens)
    labels = [str(t) for t in tokens]
    check_drawable("tokens", labels)
    return [plain_text(t) for t in labels]


def style_token_ticks(ax) -> None:
    """Tick labels in DejaVu Sans with the course's CJK font for Chinese (the default already;
    kept so a notebook that sets another font family still draws its tokens)."""
    for label in (*ax.get_xticklabels(), *ax.get_yticklabels()):
        label.set_fontfamily([LATIN, FAMILY, EXT_FAMILY])


def _as_tensor(name: str, value) -> torch.Tensor:
    try:
        return torch.as_tensor(value).detach().to("cpu", torch.float64)
    except (TypeError, ValueError, RuntimeError) as e:  # torch's message would not name the argument
        raise TypeError(f"{name} must be numbers (a tensor, array or nested lists): {e}") from None


def draw_weights(ax, weights, tokens: Sequence[str], *, title: str | None = None, annotate: bool = True) -> None:
    """One (T_q, T_k) weight matrix on ``ax``: rows are queries, columns keys, scale 0..1."""
    labels = token_labels(tokens)
    heatmap(weights, ax=ax, xticklabels=labels, yticklabels=labels, vmin=0.0, vmax=1.0, annotate=annotate,
            colorbar=False, title=title, xlabel="key", ylabel="query")  # fmt: skip
    style_token_ticks(ax)


def draw_query_bars(ax, row, tokens: Sequence[str], *, title: str | None = None) -> None:
    """The weights of one query over the keys as bars (they sum to 1 unless all are masked)."""
    row = _as_tensor("row", row)
    if row.dim() != 1 or row.numel() != len(tokens):
        raise ValueError(f"row must have shape ({len(tokens)},) (one weight per token), got {tuple(row.shape)}")
    ax.bar(range(len(tokens)), row.numpy(), color="tab:blue")
    ax.set_xticks(range(len(tokens)), labels=token_labels(tokens))
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("weight")
    if title:
        ax.set_title(title)
    style_token_ticks(ax)


def attention_heads_figure(weights, tokens: Sequence[str], *, figsize: tuple[float, float] | None = None) -> Figure:
    """One heatmap per head of ``weights`` (H, T_q, T_k) for a self-attention over ``tokens``."""
    check_plot_args(tokens=tokens, **({} if figsize is None else {"figsize": figsize}))
    weights = _as_tensor("weights", weights)
    if weights.dim() != 3 or weights.shape[1:] != (len(tokens), len(tokens)):
        raise ValueError(
            f"weights must have shape (H, {len(tokens)}, {len(tokens)}) for {len(tokens)} tokens, "
            f"got {tuple(weights.shape)}"
        )
    H = weights.shape[0]
    fig = Figure(figsize=figsize or (min(8.0, 2.2 * H), 2.6), layout="constrained")
    for h, ax in enumerate(fig.subplots(1, H, squeeze=False)[0]):
        draw_weights(ax, weights[h], tokens, title=f"head {h}", annotate=len(tokens) <= 6)
        if h:
            ax.set_ylabel("")
    return fig
