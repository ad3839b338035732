"""Attention of a trained character GPT on the learner's own text: every layer and head at
once, one of them large, and what makes up a single weight.

Left: the selected head large, with the characters on both axes and the chosen (query, key)
cell framed. Middle: the chosen pre-softmax score split into its head-dimension terms,
q_d · k_d / √hs, whose sum is the score; the title gives the score and the weight. Right: a
grid of every layer × head (rows: layers); the selected head has a red frame. (Narrow, the
panels stack in that order: what every control changes comes first, under the controls.)

Queries, keys and weights are read from the model's own attention modules with forward
hooks (nothing is recomputed by a second implementation), and the weights are checked
against ``GPT.attention_weights`` in the tests. For a rope model (``positional="rope"``) the
queries and keys are the rotated ones the scores are made of (the rotation the model's
blocks were given, through `helpers.positional.apply_rope`), so the terms still add up to the score.

Shapes: L layers, H heads, T characters (≤ block_size), hs = head size.
    explorer.weights   (L, H, T, T)    softmax weights, causal
    explorer.q, .k     (L, H, T, hs)   per-head queries and keys
    explorer.terms     (hs,)           q_d k_d / √hs for the chosen cell; sums to the score

Example:
    >>> from helpers.models import GPT, GPTConfig
    >>> from helpers.tokenizers import CharTokenizer
    >>> tok = CharTokenizer.from_text("abc def")
    >>> ex = gpt_attention_explorer(GPT(GPTConfig(tok.vocab_size, 16, 8, 2, 2)), tok, text="abcde")
    >>> tuple(ex.weights.shape), tuple(ex.terms.shape)
    ((2, 2, 5, 5), (4,))
"""

from __future__ import annotations

import math
import time

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.models import GPT
from helpers.plots import plain_text
from helpers.positional import apply_rope
from helpers.tokenizers import CharTokenizer
from helpers.widgets.base import (
    Explorer,
    Panels,
    StatusLine,
    char_model_or_pretrained,
    check_pixels,
    first_text,
    known_text,
    lock_when_single,
    show_char,
    stale_notice,
    with_fonts,
)
from helpers.widgets.throttle import Throttle


@torch.no_grad()
def queries_and_keys(model: GPT, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer, per-head queries and keys of one sequence: ids (1, T) -> q, k (L, H, T, hs).

    A rope model's are rotated by their positions, as the model's attention rotates them."""
    captured = []

    def grab(module, args, kwargs):
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs.get("key", query)
        captured.append((module, query, key, kwargs.get("rope")))

    hooks = [block.self_attn.register_forward_pre_hook(grab, with_kwargs=True) for block in model.blocks]
    try:
        model(ids)
    finally:
        for hook in hooks:
            hook.remove()
    qs, ks = [], []
    for attn, query, key, rope in captured:
        B, T, C = query.shape
        q = attn.q_proj(query).view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)[0]  # (1,T,C) -> (H,T,hs)
        k = attn.k_proj(key).view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)[0]  # (1,T,C) -> (H,T,hs)
        if rope is not None:  # the rotated q and k the scores are made of
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # (H, T, hs) each
        qs.append(q)
        ks.append(k)
    return torch.stack(qs), torch.stack(ks)  # L x (H, T, hs) -> (L, H, T, hs)


SCORES_CMAP = matplotlib.colormaps["RdBu"].with_extremes(bad="white")  # blue +, red −, as the term bars; NaN (future): blank


class GPTAttentionExplorer(Explorer):
    """Controls, figure and state; ``.widget`` is what Jupyter shows."""

    def __init__(self, model: GPT, tokenizer: CharTokenizer, text: str, width: int, height: int, dpi: int = 80):
        self.model, self.tokenizer, self.dpi = model.eval(), tokenizer, dpi
        self.font_texts = tokenizer.chars  # the CJK font only if the model knows CJK characters
        c = model.config
        live = {"continuous_update": True, "style": {"description_width": "60px"},
                "layout": widgets.Layout(min_width="220px", flex="1 1 220px")}  # fmt: skip
        # A text area, not a one-line box: a browser drops the newlines of a one-line box on the first
        # edit, and a ci's lines (notebook 08) are separated by newlines.
        # As many rows as the text has lines (2 to 6): 08's ci opens with blank lines, all a 2-row box showed.
        self.text = widgets.Textarea(value=text, description="text", rows=min(6, max(2, text.count("\n") + 1)),
                                     continuous_update=True, layout=widgets.Layout(width="98%"))  # fmt: skip
        self.layer = widgets.IntSlider(value=c.n_layers - 1, min=0, max=c.n_layers - 1, description="layer", **live)
        self.head = widgets.IntSlider(value=0, min=0, max=c.n_heads - 1, description="head", **live)
        self.query = widgets.IntSlider(value=0, min=0, max=0, description="query", **live)
        self.key = widgets.IntSlider(value=0, min=0, max=0, description="key", **live)
        lock_when_single(self.layer, self.head, self.query, self.key)
        self.scores_view = widgets.Checkbox(value=False, description="large map: scores before softmax", indent=False)
        self.status = StatusLine()
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)  # = the PNG dpi: one renderer, cached text
        FigureCanvasAgg(self.figure)  # one permanent renderer: text layouts stay cached between redraws
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        self._syncing = False
        self.text.observe(self._on_text, names="value")
        for control in (self.layer, self.head, self.query, self.key, self.scores_view):
            control.observe(self._on_control, names="value")
        row = widgets.Layout(display="flex", flex_flow="row wrap")  # no width 100%: its margins would overflow
        self._build()
        self.panels = Panels(self.figure, [[self.ax_big], [self.ax_terms], [self.ax_grid]])
        self.widget = widgets.VBox([stale_notice(), self.text,
                                    widgets.HBox([self.layer, self.head, self.query, self.key], layout=row),
                                    self.scores_view, self.status, self.panels.widget])  # fmt: skip
        self._run_model()
        self.update()

    @torch.no_grad()
    def _run_model(self) -> None:
        known, self.status.text = known_text(self.tokenizer, self.text.value, self.model.config.block_size)
        if not known and hasattr(self, "chars"):  # nothing it can read: keep the last picture (the status says so)
            return
        self.chars = list(known or first_text(self.tokenizer))
        known = "".join(self.chars)
        ids = torch.tensor([self.tokenizer.encode(known)], device=self.model.tok_emb.weight.device)  # (1, T)
        self.q, self.k = (x.cpu() for x in queries_and_keys(self.model, ids))  # (L, H, T, hs) each, for plotting
        hs = self.q.shape[-1]
        scores = self.q @ self.k.transpose(-2, -1) / math.sqrt(hs)  # (L, H, T, hs) @ (L, H, hs, T) -> (L, H, T, T)
        T = len(self.chars)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # (T, T)
        self.scores = scores.masked_fill(future, -math.inf)
        self.weights = torch.softmax(self.scores, dim=-1)  # (L, H, T, T)
        self._syncing = True  # move the position sliders without one redraw each
        self.query.max = T - 1
        self.query.value = T - 1
        self.key.max = T - 1  # = the query: a causal query sees keys 0..query only
        self._syncing = False
        self._text_shown = False

    def _on_text(self, _change) -> None:
        self._run_model()
        self._redraw()

    def _on_control(self, change) -> None:
        if change["owner"] is self.query:
            syncing, self._syncing = self._syncing, True  # a clamped key redraws once, below
            self.key.max = self.query.value  # a causal query cannot look ahead: the key slider stops there
            self._syncing = syncing
        if not self._syncing:
            self._redraw()

    @with_fonts
    def _build(self) -> None:
        """The figure's three axes, made once; text and control changes only change data in place
        (one composite image for the whole layer × head grid: 16 separate axes took most of a redraw)."""
        L, H = self.model.config.n_layers, self.model.config.n_heads
        hs = self.model.config.d_model // H
        # The large map first, the grid last: at 1024 px with the file browser open the panels stack, and the
        # one every control changes must sit right under the controls (all of it within a 647-px view).
        outer = self.figure.add_gridspec(1, 3, width_ratios=[1.25, 1.0, 1.0], left=0.05, right=0.97,
                                         bottom=0.14, top=0.9, wspace=0.25)  # fmt: skip
        grid = self.ax_grid = self.figure.add_subplot(outer[2])
        # Each tile is one unit square in data coordinates whatever the text's length; white lines
        # on the unit grid separate the tiles.
        self.grid_image = grid.imshow(np.zeros((1, 1)), cmap="Blues", vmin=0, vmax=1, extent=(0, H, L, 0),
                                      interpolation="nearest")  # fmt: skip
        for x in range(1, H):
            grid.axvline(x, color="white", linewidth=3)
        for y in range(1, L):
            grid.axhline(y, color="white", linewidth=3)
        self.frame = grid.add_patch(Rectangle((0, 0), 1, 1, fill=False, edgecolor="tab:red", linewidth=2.5,
                                               clip_on=False, zorder=5))  # not cut at the edges
        grid.set_xticks(np.arange(H) + 0.5, [f"h{h}" for h in range(H)], fontsize=8)
        grid.set_yticks(np.arange(L) + 0.5, [f"L{layer}" for layer in range(L)], fontsize=8)
        grid.tick_params(length=0)
        grid.set_title("every layer × head", fontsize=9, y=1.01)
        for spine in grid.spines.values():
            spine.set_visible(False)
        big = self.ax_big = self.figure.add_subplot(outer[0])
        self.big_image = big.imshow(np.zeros((1, 1)), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        self.cell = big.add_patch(Rectangle((-0.5, -0.5), 1, 1, fill=False, edgecolor="tab:red", linewidth=2, clip_on=False))
        big.set_xlabel("key", fontsize=8)
        big.set_ylabel("query", fontsize=8)
        # Fixed label and title places: placing them by the tick labels' boxes cost a third of a redraw.
        big.xaxis.set_label_coords(0.5, -0.09)
        big.yaxis.set_label_coords(-0.09, 0.5)
        tx = self.ax_terms = self.figure.add_subplot(outer[1])
        self.term_bars = tx.bar(np.arange(hs), np.zeros(hs))
        tx.axhline(0, color="0.4", linewidth=0.8)
        tx.set_xlabel("head dimension d", fontsize=8)
        tx.xaxis.set_label_coords(0.5, -0.11)

    def _show_text(self) -> None:
        """Put a new text's weights into the grid and the large map's axes (no axes rebuilt)."""
        L, H, T = self.weights.shape[:3]
        tiles = self.weights.permute(0, 2, 1, 3).reshape(L * T, H * T)  # (L, H, T, T) -> (L, T, H, T) -> (LT, HT)
        self.grid_image.set_data(tiles.numpy())
        self.labels = [plain_text(show_char(ch)) for ch in self.chars]  # "$" drawn, not read as TeX
        big = self.ax_big
        self.big_image.set_extent((-0.5, T - 0.5, T - 0.5, -0.5))
        big.set_xlim(-0.5, T - 0.5)
        big.set_ylim(T - 0.5, -0.5)
        # At most 32 labels per axis: more would not be readable in ~260 px, and each costs draw time.
        every = -(-T // 32)  # ceil(T / 32)
        shown = range(T - 1, -1, -every)[::-1]  # always label the last character
        big.set_xticks(shown, [self.labels[i] for i in shown], fontsize=8)
        big.set_yticks(shown, [self.labels[i] for i in shown], fontsize=8)
        self._text_shown = True

    @with_fonts
    def update(self) -> None:
        """Redraw for the current controls: data, titles and frames change in place."""
        start = time.perf_counter()
        if not self._text_shown:
            self._show_text()
        layer, h, t, s = self.layer.value, self.head.value, self.query.value, self.key.value
        self.frame.set_xy((h, layer))
        if self.scores_view.value:  # what softmax turns into the weights; the future is -inf: left blank
            shown = self.scores[layer, h].masked_fill(self.scores[layer, h].isinf(), math.nan)  # (T, T)
            reach = float(shown.nan_to_num(0.0).abs().max()) or 1.0
            self.big_image.set(cmap=SCORES_CMAP, clim=(-reach, reach))  # one scale: ± the head's largest score
            title = f"layer {layer}, head {h}: scores q·k/√hs, ±{reach:.1f}"
        else:
            shown = self.weights[layer, h]  # (T, T)
            self.big_image.set(cmap="Blues", clim=(0, 1))
            title = f"layer {layer}, head {h}: weights"
        self.big_image.set_data(shown.numpy())
        self.cell.set_xy((s - 0.5, t - 0.5))
        self.ax_big.set_title(title, fontsize=10, y=1.01)
        hs = self.q.shape[-1]
        self.terms = self.q[layer, h, t] * self.k[layer, h, s] / math.sqrt(hs)  # (hs,) * (hs,) -> (hs,)
        self.score = float(self.scores[layer, h, t, s])
        self.weight = float(self.weights[layer, h, t, s])
        # One scale per head: the largest term any (query, key) pair of this head can have, so the
        # bars of two cells of a head compare, and a small score looks small.
        bound = float((self.q[layer, h].abs().amax(0) * self.k[layer, h].abs().amax(0)).max()) / math.sqrt(hs)
        self.ax_terms.set_ylim(-bound, bound)
        for bar, term in zip(self.term_bars, self.terms.tolist(), strict=True):
            bar.set_height(term)
            bar.set_color("tab:blue" if term >= 0 else "tab:red")
        self.ax_terms.set_title(f"query “{self.labels[t]}” → key “{self.labels[s]}”: score {self.score:.2f}, "
                                f"weight {self.weight:.2f}\nbars: q_d·k_d/√{hs} for each d, adding up to the score",
                                fontsize=9, y=1.01)  # fmt: skip
        self.figure.canvas.draw()
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def __repr__(self) -> str:
        return (f"GPTAttentionExplorer(text={self.text.value[-30:]!r}, layer={self.layer.value}, head={self.head.value}, "
                f"query={self.query.value}, key={self.key.value}, scores={self.scores_view.value})")  # fmt: skip


def gpt_attention_explorer(model: GPT | None = None, tokenizer: CharTokenizer | None = None,
                           text: str = "def __init__(self):", *, width: int = 960,
                           height: int = 340) -> GPTAttentionExplorer:  # fmt: skip
    """Build the explorer for a character-level `GPT` and its `CharTokenizer` (see the module doc);
    with neither given it loads the shipped model, so the cell needs nothing from the cells above."""
    model, tokenizer = char_model_or_pretrained(model, tokenizer)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    check_pixels(width, height, 400, 200)
    return GPTAttentionExplorer(model, tokenizer, text, width, height)
