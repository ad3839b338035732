"""SmolLM2 on the learner's own prompt: what it predicts next, and where one head of one layer looks.

Left: the ``n_bars`` most likely next tokens, the model's probability in grey and the distribution
actually sampled (after temperature, top-k and top-p, `helpers.generation.filter_logits`) in colour.
Right: the last token's attention weights over the prompt's tokens for the chosen layer and head;
the title gives the share on token 0 (the attention sink) and on the token just before.

The model runs once per prompt (hooks on its attention modules keep each layer's input); every
slider only re-filters the stored logits or picks another stored row, so a drag redraws live.
The weights are recomputed from the hooked inputs with the module's own q_proj, k_proj and
`apply_rope` (grouped-query: query head h reads kv head h // (H / H_kv)); the tests check that
these weights times the values give the model's own attention output.

The prompt is read with ``allow_special=True``: ChatML's <|im_start|> and <|im_end|> typed in it
are the special tokens. Token labels are the characters each token completes (a Chinese character
spans several byte tokens: it appears on the last; the others show their bytes in hex).

Shapes: T prompt tokens (≤ max_tokens), V vocabulary, L layers, H query heads.
    explorer.logits     (V,)         the model's next-token logits at the last position
    explorer.probs      (V,)         the sampled distribution (filtered)
    explorer.attention  (L, H, T)    the last position's attention weights, every layer and head

Example:
    >>> model, tok = load_pretrained("smollm2")                           # doctest: +SKIP
    >>> ex = llm_explorer(model, tok, prompt="The cat sat on the")        # doctest: +SKIP
    >>> tuple(ex.attention.shape)                                         # doctest: +SKIP
    (30, 9, 5)
"""

from __future__ import annotations

import codecs
import time

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers.cjk import EXT_FAMILY, FAMILY, LATIN
from helpers.generation import filter_logits
from helpers.llama import Llama, apply_rope
from helpers.plots import plain_text
from helpers.smollm_tokenizer import SmolLMTokenizer
from helpers.validate import check_int
from helpers.widgets.base import (
    Explorer,
    Panels,
    StatusLine,
    check_pixels,
    finite_only,
    lock_when_single,
    show_char,
    stale_notice,
)
from helpers.widgets.throttle import Throttle

PROMPT = "The little girl opened the old wooden box and found a golden"


@torch.no_grad()
def last_token_attention(model: Llama, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass of ids (1, T) -> (last logits (V,), attention of the last position (L, H, T))."""
    inputs = []

    def grab(module, args):  # LlamaAttention.forward(x, cos, sin, ...): its normed input and rope tables
        inputs.append((module, *args[:3]))

    hooks = [block.attn.register_forward_pre_hook(grab) for block in model.blocks]
    try:
        logits = model(ids)  # (1, T) -> (1, T, V)
    finally:
        for hook in hooks:
            hook.remove()
    rows = []
    for attn, x, cos, sin in inputs:
        B, T, _ = x.shape
        q = attn.q_proj(x[:, -1:]).view(B, 1, attn.n_heads, attn.head_dim).transpose(1, 2)  # (1, H, 1, hs)
        k = attn.k_proj(x).view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)  # (1, H_kv, T, hs)
        q, k = apply_rope(q, cos[-1:], sin[-1:]), apply_rope(k, cos, sin)
        k = k.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=1)  # (1, H_kv, T, hs) -> (1, H, T, hs)
        scores = q @ k.transpose(-2, -1) / attn.head_dim**0.5  # (1, H, 1, T): the last query sees every key
        rows.append(scores.softmax(-1)[0, :, 0])  # (H, T)
    return logits[0, -1], torch.stack(rows)  # (V,), (L, H, T)


def token_labels(tokenizer: SmolLMTokenizer, ids: list[int]) -> list[str]:
    """One label per token: the characters it completes (space and newline made visible), or its bytes
    in hex when it completes none (the first bytes of a character that spans several tokens)."""
    decoder, labels = codecs.getincrementaldecoder("utf-8")(errors="replace"), []
    for i in ids:
        raw = tokenizer.token_bytes(i)
        text = tokenizer.decode([i]) if i in tokenizer.special_tokens.values() else decoder.decode(raw)
        labels.append("".join(visible(c) for c in text) if text else "<" + raw.hex(" ") + ">")
    return labels


def visible(c: str) -> str:
    """A character as a label shows it: space, newline and tab made visible, other control characters escaped."""
    shown = show_char(c)
    return shown if shown != c or c.isprintable() else c.encode("unicode_escape").decode("ascii")


def label_ticks(ax, labels: list[str], positions) -> None:
    """Vertical 8-pt tick labels, each in DejaVu Sans alone or with the course's CJK font where it needs
    one (the family is chosen per label: a prompt's labels change, and the fallback costs draw time)."""
    ax.set_xticks(positions, [plain_text(label[:10]) for label in labels], rotation=90, fontsize=8)
    for text, label in zip(ax.get_xticklabels(), labels, strict=True):
        text.set_fontfamily([LATIN, FAMILY, EXT_FAMILY] if any(ord(ch) >= 0x2E80 for ch in label) else [LATIN])


class LLMExplorer(Explorer):
    """Controls, figure and state; ``.widget`` is what Jupyter shows."""

    def __init__(self, model: Llama, tokenizer: SmolLMTokenizer, prompt: str, n_bars: int, max_tokens: int,
                 layer: int, head: int, width: int, height: int, dpi: int = 80):  # fmt: skip
        self.model, self.tokenizer, self.dpi = model.eval(), tokenizer, dpi
        self.n_bars, self.max_tokens = n_bars, max_tokens
        c = model.config
        live = {"continuous_update": True, "style": {"description_width": "initial"},
                "layout": widgets.Layout(min_width="220px", flex="1 1 220px")}  # fmt: skip
        self.prompt = widgets.Textarea(value=prompt, description="prompt", rows=min(6, max(2, prompt.count("\n") + 1)),
                                       continuous_update=False, layout=widgets.Layout(width="98%"))  # fmt: skip
        self.temperature = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=0.7, step=0.02,
                                                  description="temperature", readout_format=".2f", **live)  # fmt: skip
        self.top_k = widgets.IntSlider(value=0, min=0, max=min(100, c.vocab_size), description="top-k (0: off)", **live)
        self.top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01, description="top-p", **live)
        self.layer = widgets.IntSlider(value=layer, min=0, max=c.n_layers - 1, description="layer", **live)
        self.head = widgets.IntSlider(value=head, min=0, max=c.n_heads - 1, description="head", **live)
        lock_when_single(self.layer, self.head)  # a 1-layer or 1-head model: greyed out, it says so
        finite_only(self.temperature, self.top_p)  # before the redraw observers: a NaN never reaches them
        self.status = StatusLine()
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)  # = the PNG dpi: one renderer
        FigureCanvasAgg(self.figure)
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        self.prompt.observe(self._on_prompt, names="value")
        for control in (self.temperature, self.top_k, self.top_p, self.layer, self.head):
            control.observe(lambda _change: self._redraw(), names="value")
        row = widgets.Layout(display="flex", flex_flow="row wrap")
        self._build_axes()
        self.panels = Panels(self.figure, [[self.ax_bar], [self.ax_att]])
        self.widget = widgets.VBox([stale_notice(), self.prompt,
                                    widgets.HBox([self.temperature, self.top_k, self.top_p], layout=row),
                                    widgets.HBox([self.layer, self.head], layout=row), self.status,
                                    self.panels.widget])  # fmt: skip
        self._run_model()
        self.update()

    def _run_model(self) -> None:
        """Tokenize the prompt and run the model once; keeps the last picture if the prompt is empty."""
        start = time.perf_counter()
        ids = self.tokenizer.encode(self.prompt.value, allow_special=True)
        notes = []
        if not ids:
            if hasattr(self, "logits"):
                self.status.text = "the prompt is empty: the picture shows the last prompt"
                return
            ids, notes = [self.tokenizer.bos_id], ["empty prompt: the model reads <|im_start|> alone"]
        if len(ids) > self.max_tokens:
            notes.append(f"{len(ids)} tokens: the explorer reads the last {self.max_tokens}")
            ids = ids[-self.max_tokens :]
        w = self.model.tok_emb.weight
        logits, attention = last_token_attention(self.model, torch.tensor([ids], device=w.device))
        self.ids, self.logits, self.attention = ids, logits.float().cpu(), attention.float().cpu()
        self.labels = token_labels(self.tokenizer, ids)
        self.status.text = "; ".join([f"{len(ids)} tokens: " + " | ".join(self.labels), *notes])
        self.last_model_s = time.perf_counter() - start

    def _on_prompt(self, _change) -> None:
        self._run_model()
        self._redraw()

    def _build_axes(self) -> None:
        """Axes and bars made once; `update` changes their data (the attention bars per prompt)."""
        grid = {"width_ratios": [1.0, 1.3], "left": 0.07, "right": 0.98, "bottom": 0.3, "top": 0.88, "wspace": 0.22}
        self.ax_bar, self.ax_att = self.figure.subplots(1, 2, gridspec_kw=grid)
        x = np.arange(self.n_bars)
        self.raw_bars = self.ax_bar.bar(x - 0.2, np.zeros(self.n_bars), width=0.4, color="0.75", label="model (τ = 1)")
        self.bars = self.ax_bar.bar(x + 0.2, np.zeros(self.n_bars), width=0.4, color="tab:blue", label="sampled from")
        self.ax_bar.set_ylabel("probability", fontsize=8)
        self.ax_bar.tick_params(labelsize=8)
        self.ax_bar.legend(loc="upper right", fontsize=8, frameon=False)
        self.ax_att.set_ylim(0, 1)
        self.ax_att.set_ylabel("weight", fontsize=8)
        self.ax_att.tick_params(labelsize=8)
        self.att_bars, self._shown_ids = [], None

    def _show_prompt(self) -> None:
        """A new prompt's labels: its n_bars likeliest next tokens (the grey bars' order, fixed by the logits)
        and, on the attention axes, one bar per prompt token."""
        self.order = torch.argsort(self.logits, descending=True)[: self.n_bars].tolist()
        names = [token_labels(self.tokenizer, [i])[0] for i in self.order]  # each on its own: a lone byte: hex
        label_ticks(self.ax_bar, names, range(self.n_bars))
        for bar in self.att_bars:
            bar.remove()
        T = len(self.ids)
        self.att_bars = list(self.ax_att.bar(np.arange(T), np.zeros(T), width=0.8, color="tab:orange"))
        self.ax_att.set_xlim(-0.6, T - 0.4)
        every = -(-T // 40)  # at most 40 labels: more would overlap at 8 pt
        shown = range(T - 1, -1, -every)[::-1]  # always label the last token
        label_ticks(self.ax_att, [self.labels[i] for i in shown], shown)
        self._shown_ids = self.ids

    def update(self) -> None:
        """Re-filter the stored logits, pick the chosen head's stored row, redraw the PNG."""
        start = time.perf_counter()
        raw = torch.softmax(self.logits.double(), dim=-1)  # (V,)
        self.probs = torch.softmax(filter_logits(self.logits, self.temperature.value, self.top_k.value or None,
                                                 self.top_p.value if self.top_p.value < 1.0 else None), -1)  # (V,)
        if self._shown_ids is not self.ids:  # a new prompt: new bars and labels (the sliders keep both)
            self._show_prompt()
        order = self.order
        for bar, p in zip(self.raw_bars, raw[order].tolist(), strict=True):
            bar.set_height(p)
        for bar, p in zip(self.bars, self.probs[order].tolist(), strict=True):
            bar.set_height(p)
        tallest = max(float(raw[order].max()), float(self.probs[order].max()))
        self.ax_bar.set_ylim(0, min(1.0, max(0.02, tallest * 1.15)))
        kept = int((self.probs > 0).sum())
        self.ax_bar.set_title(f"next token · {kept:,} of {len(raw):,} can be sampled", fontsize=10)
        layer, h = self.layer.value, self.head.value
        row = self.attention[layer, h].tolist()  # (T,)
        for bar, w in zip(self.att_bars, row, strict=True):
            bar.set_height(w)
        previous = f", previous token {row[-2]:.0%}" if len(row) > 1 else ""
        self.ax_att.set_title(f"last token's attention · layer {layer}, head {h}: token 0 {row[0]:.0%}{previous}",
                              fontsize=10)  # fmt: skip
        self.figure.canvas.draw()
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def __repr__(self) -> str:
        return (f"LLMExplorer(prompt={self.prompt.value[-30:]!r}, temperature={self.temperature.value:.2f}, "
                f"top_k={self.top_k.value}, top_p={self.top_p.value:.2f}, layer={self.layer.value}, "
                f"head={self.head.value})")  # fmt: skip


def llm_explorer(model: Llama | None = None, tokenizer: SmolLMTokenizer | None = None, prompt: str = PROMPT, *,
                 n_bars: int = 12, max_tokens: int = 64, layer: int | None = None, head: int = 0, width: int = 960,
                 height: int = 230) -> LLMExplorer:  # fmt: skip
    """Build the explorer for a `Llama` and its `SmolLMTokenizer` (see the module doc).

    Args:
        model, tokenizer: both None (the default) loads SmolLM2-135M-Instruct (``load_pretrained("smollm2")``).
        prompt: the starting text; ChatML special tokens written in it count as special tokens.
        n_bars: how many of the most likely next tokens get a bar.
        max_tokens: the explorer reads at most the last ``max_tokens`` tokens of the prompt.
        layer, head: where the layer and head sliders start; layer None is 16 (SmolLM2's layer 16, head 0
            reads the previous token), or the last layer of a model with fewer.
        width, height: the plot's size in pixels.
    """
    if model is None and tokenizer is None:
        from helpers.pretrained import load_pretrained

        model, tokenizer = load_pretrained("smollm2")
    if not isinstance(model, Llama):
        raise TypeError(f"model must be a helpers Llama, got {type(model).__name__}")
    if not isinstance(tokenizer, SmolLMTokenizer):
        raise TypeError(f"tokenizer must be a SmolLMTokenizer, got {type(tokenizer).__name__}")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                         f"{model.config.vocab_size}")  # fmt: skip
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    check_int("n_bars", n_bars, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    c = model.config
    layer = min(16, c.n_layers - 1) if layer is None else layer
    for name, value, top in (("layer", layer, c.n_layers), ("head", head, c.n_heads)):
        if not 0 <= check_int(name, value) < top:
            raise ValueError(f"{name} must be in [0, {top}), got {value}")
    check_pixels(width, height, 400, 150)
    return LLMExplorer(model, tokenizer, prompt, min(n_bars, c.vocab_size), min(max_tokens, c.context_length),
                       layer, head, width, height)
