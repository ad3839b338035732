"""Drawing attention weights: per-head heatmaps, one query's weights as bars, token labels.

Tokens are often Chinese ("我 爱 你"). Matplotlib's default font (DejaVu Sans) has no CJK
glyphs: drawing them prints a "Glyph ... missing" warning and shows empty boxes. So tick
labels use an installed CJK font when there is one, and otherwise fall back to pinyin
(or ``U+XXXX`` for characters not in the small table), which DejaVu Sans can draw.

Shapes: H heads, T_q / T_k query / key lengths.
    attention_heads_figure(weights (H, T_q, T_k), tokens)  -> Figure with H heatmaps
    draw_query_bars(ax, row (T_k,), tokens)                 bars on an existing Axes

Example:
    >>> token_labels(["the", "cat"])
    ['the', 'cat']
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.font_manager import fontManager

from helpers.plots import check_plot_args, heatmap, plain_text

# Checked in this order; the first one installed is used for CJK tick labels.
CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Microsoft YaHei", "SimHei", "PingFang SC", "Heiti SC", "Arial Unicode MS",
)  # fmt: skip
# Pinyin for the characters of the course's example sentences (tone marks are in DejaVu Sans).
PINYIN = {
    "我": "wǒ", "你": "nǐ", "他": "tā", "她": "tā", "爱": "ài", "喜": "xǐ", "欢": "huan", "猫": "māo",
    "狗": "gǒu", "吃": "chī", "鱼": "yú", "不": "bù", "是": "shì", "的": "de", "很": "hěn", "好": "hǎo",
    "学": "xué", "习": "xí", "中": "zhōng", "文": "wén", "。": ".", "，": ",", "？": "?", "！": "!",
}  # fmt: skip


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The name of an installed font that draws Chinese, or None."""
    installed = {f.name for f in fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in installed), None)


def _needs_cjk(text: str) -> bool:
    return any(ord(ch) >= 0x2E80 for ch in text)  # CJK radicals onwards: not in DejaVu Sans


def token_labels(tokens: Sequence[str]) -> list[str]:
    """Labels that draw without missing glyphs: the tokens themselves, or their pinyin (``$`` escaped)."""
    check_plot_args(tokens=tokens)
    if cjk_font() is not None:
        return [plain_text(t) for t in tokens]
    return [
        plain_text("".join(PINYIN.get(ch, f"U+{ord(ch):04X}" if _needs_cjk(ch) else ch) for ch in str(t)))
        for t in tokens
    ]


def style_token_ticks(ax) -> None:
    """Use the CJK font (if any) for an Axes' tick labels, with DejaVu Sans for the rest."""
    font = cjk_font()
    if font is not None:
        for label in (*ax.get_xticklabels(), *ax.get_yticklabels()):
            label.set_fontfamily([font, "DejaVu Sans"])


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
