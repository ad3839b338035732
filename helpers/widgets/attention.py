"""An interactive attention explorer: pick a sentence, a head, a temperature, the causal
mask and a query; see the weight matrix and that query's weights.

The model is tiny and untrained (seeded embeddings + sinusoidal positions + one
`MultiHeadAttention`): the point is to watch how temperature and masks reshape the
weights, not what a trained model attends to.

Works under strict nbval: the plot is a PNG in a `widgets.Image`, redrawn in place
(no `Output` widget, no `interact`); the explorer's text/plain is one short line.

Shapes: H heads, T tokens, C = d_model.
    DemoAttention(vocab, C, H).weights(tokens)  -> (H, T, T)

Example:
    >>> ex = attention_explorer()  # "我 爱 你": 3 tokens
    >>> tuple(ex.weights.shape), tuple(ex.query_weights.shape)
    ((3, 3), (3,))
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import ipywidgets as widgets
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import nn

from helpers.attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from helpers.attention_plots import draw_query_bars, draw_weights
from helpers.positional import SinusoidalPositionalEncoding
from helpers.validate import check_int
from helpers.widgets.base import (
    Explorer,
    Panels,
    check_pixels,
    finite_only,
    lock_when_single,
    stale_notice,
    with_fonts,
)
from helpers.widgets.throttle import Throttle

MAX_D_MODEL = 1024
DEFAULT_SENTENCES = ("我 爱 你", "你 爱 我", "我 喜 欢 猫 。", "the cat sat on the mat", "the dog chased the cat")


def split_tokens(sentence: str) -> list[str]:
    """Tokens separated by spaces; a Chinese sentence without spaces is split into characters."""
    tokens = sentence.split()
    if len(tokens) == 1 and not tokens[0].isascii():
        tokens = list(tokens[0])
    return tokens


class DemoAttention(nn.Module):
    """Embedding + sinusoidal positions + multi-head self-attention, returning weights only."""

    def __init__(self, vocab: Sequence[str], d_model: int, n_heads: int):
        super().__init__()
        self.index = {tok: i for i, tok in enumerate(vocab)}
        self.embedding = nn.Embedding(len(vocab), d_model)
        self.positions = SinusoidalPositionalEncoding(d_model, max_len=64)
        self.attention = MultiHeadAttention(d_model, n_heads)

    @torch.no_grad()
    def weights(self, tokens: Sequence[str], temperature: float = 1.0, causal: bool = False,
                positions: bool = True) -> torch.Tensor:
        """(H, T, T) weights: softmax(q kᵀ / (√hs · temperature)), causal mask and positions optional."""
        unknown = sorted({t for t in tokens if t not in self.index})
        if unknown or not tokens:
            raise ValueError(f"tokens must be a non-empty list from the vocabulary; unknown: {unknown}")
        if not (isinstance(temperature, (int, float)) and 0 < temperature < math.inf):
            raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
        ids = torch.tensor([[self.index[t] for t in tokens]])  # (1, T)
        x = self.embedding(ids)  # (1, T) -> (1, T, C)
        if positions:  # without them, 我爱你 and 你爱我 give the same rows, only permuted
            x = self.positions(x)
        mha, T = self.attention, len(tokens)
        q, k, v = (p(x).view(1, T, mha.n_heads, mha.head_dim).transpose(1, 2)  # (1, T, C) -> (1, H, T, hs)
                   for p in (mha.q_proj, mha.k_proj, mha.v_proj))  # fmt: skip
        mask = causal_mask(T) if causal else None
        scale = 1.0 / (math.sqrt(mha.head_dim) * temperature)
        _, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)  # (1, H, T, T)
        return w[0]  # (1, H, T, T) -> (H, T, T)


def build_demo_model(sentences: Sequence[str], d_model: int = 16, n_heads: int = 4, seed: int = 0) -> DemoAttention:
    """A seeded `DemoAttention` whose vocabulary covers ``sentences``; the global RNG is left as it was."""
    check_int("seed", seed, minimum=0)
    if seed >= 2**64:  # torch.manual_seed's limit, which would fail with an unnamed overflow
        raise ValueError(f"seed must be < 2**64, got {seed}")
    vocab = sorted({tok for s in sentences for tok in split_tokens(s)})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DemoAttention(vocab, d_model, n_heads).eval()
        # PyTorch's default init makes near-uniform rows at temperature 1; a wider one shows structure.
        for proj in (model.attention.q_proj, model.attention.k_proj):
            nn.init.normal_(proj.weight, std=1.0 / math.sqrt(d_model))
    return model


def _check_sentences(sentences) -> tuple[str, ...]:
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise TypeError(f"sentences must be a list of strings, got {type(sentences).__name__}")
    if not sentences or not all(isinstance(s, str) and split_tokens(s) for s in sentences):
        raise ValueError("sentences must be a non-empty list of non-empty strings")
    if max(len(split_tokens(s)) for s in sentences) > 12:
        raise ValueError("sentences must have at most 12 tokens each (the heatmap stays readable)")
    return tuple(sentences)


class AttentionExplorer(Explorer):
    """The explorer's controls, figure and state; ``.widget`` is what Jupyter shows.

    ``weights`` (T, T) and ``query_weights`` (T,) are the data currently plotted;
    ``last_update_s`` is how long the last redraw took (compute + draw + PNG).
    """

    def __init__(self, model: DemoAttention, sentences: tuple[str, ...], width: int, height: int, dpi: int = 80):
        self.model, self.dpi = model, dpi
        self.font_texts = sentences  # Chinese sentences: the CJK font as fallback
        T = len(split_tokens(sentences[0]))
        H = model.attention.n_heads
        style = {"description_width": "initial"}
        self.sentence = widgets.Dropdown(options=list(sentences), value=sentences[0], description="sentence", style=style)
        # Live while dragging (throttled); rows wrap, so the sliders keep their width at 1024 px.
        live = {"continuous_update": True, "layout": widgets.Layout(min_width="250px", flex="1 1 250px")}
        self.head = widgets.IntSlider(value=0, min=0, max=H - 1, description="head", **live)
        self.temperature = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature",
                                                  readout_format=".2f", style=style, **live)  # fmt: skip
        self.causal = widgets.Checkbox(value=False, description="causal mask", indent=False)
        self.positions = widgets.Checkbox(value=True, description="positions", indent=False)
        self.query = widgets.IntSlider(value=T - 1, min=0, max=T - 1, description="query", **live)
        finite_only(self.temperature)
        lock_when_single(self.head, self.query)
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)  # = the PNG dpi: one renderer, cached text
        FigureCanvasAgg(self.figure)  # one permanent renderer: text layouts stay cached between redraws
        self._syncing = False
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        for control in (self.sentence, self.head, self.temperature, self.causal, self.positions, self.query):
            control.observe(self._on_change, names="value")
        row = widgets.Layout(display="flex", flex_flow="row wrap")  # no width 100%: its margins would overflow
        controls = widgets.VBox([widgets.HBox([self.sentence, self.causal, self.positions], layout=row),
                                 widgets.HBox([self.head, self.temperature, self.query], layout=row)])  # fmt: skip
        self._build()
        self.panels = Panels(self.figure, [[self.ax_heat], [self.ax_bar]])
        self.widget = widgets.VBox([stale_notice(), controls, self.panels.widget])
        self.update()

    @property
    def tokens(self) -> list[str]:
        return split_tokens(self.sentence.value)

    def _on_change(self, change) -> None:
        if change["owner"] is self.sentence:
            self._syncing = True  # move the query slider without one redraw per change
            T = len(self.tokens)
            self.query.value = min(self.query.value, T - 1)
            self.query.max = T - 1
            self._syncing = False
        if not self._syncing:
            self._redraw()

    @with_fonts
    def _build(self) -> None:
        """Axes, labels and one text per cell for the current sentence; `update` then only changes
        data in place (rebuilding the axes on every move took about half of each redraw)."""
        tokens = self.tokens
        T = len(tokens)
        self.figure.clear()
        # A fixed layout: "constrained" would re-measure every label on each redraw.
        grid = {"width_ratios": [1.15, 1.0], "left": 0.09, "right": 0.98, "bottom": 0.2, "top": 0.9, "wspace": 0.35}
        self.ax_heat, self.ax_bar = self.figure.subplots(1, 2, gridspec_kw=grid)
        draw_weights(self.ax_heat, torch.zeros(T, T), tokens, title=" ")
        draw_query_bars(self.ax_bar, torch.zeros(T), tokens, title=" ")
        self._heat, self._cells = self.ax_heat.images[0], list(self.ax_heat.texts)  # T*T annotations, row-major
        self._bars = list(self.ax_bar.patches)
        self._row = self.ax_heat.add_patch(Rectangle((-0.5, -0.5), T, 1.0, fill=False, edgecolor="tab:red", linewidth=2))
        self._built_for = self.sentence.value

    @with_fonts
    def update(self) -> None:
        """Recompute the weights for the current controls and redraw the PNG."""
        start = time.perf_counter()
        if getattr(self, "_built_for", None) != self.sentence.value:
            self._build()
        tokens, h, t = self.tokens, self.head.value, self.query.value
        all_heads = self.model.weights(tokens, temperature=self.temperature.value, causal=self.causal.value,
                                       positions=self.positions.value)  # fmt: skip
        self.weights = all_heads[h]  # (H, T, T) -> (T, T)
        self.query_weights = self.weights[t]  # (T, T) -> (T,)
        values = self.weights.double().numpy()
        self._heat.set_data(values)
        mid = (values.min() + values.max()) / 2  # as `heatmap` colours its annotations
        for text, v in zip(self._cells, values.ravel().tolist(), strict=True):
            text.set_text(f"{v:.2f}")
            text.set_color("white" if v < mid else "black")
        for bar, v in zip(self._bars, self.query_weights.tolist(), strict=True):
            bar.set_height(v)
        self._row.set_y(t - 0.5)
        mode = ("causal" if self.causal.value else "full") + ("" if self.positions.value else ", no positions")
        self.ax_heat.set_title(f"head {h}, {mode}, τ = {self.temperature.value:.2f}")
        self.ax_bar.set_title(f"weights of query {t}")
        self.figure.canvas.draw()
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def __repr__(self) -> str:
        return (
            f"AttentionExplorer(sentence={self.sentence.value!r}, head={self.head.value}, "
            f"temperature={self.temperature.value:.2f}, causal={self.causal.value}, positions={self.positions.value}, "
            f"query={self.query.value})"
        )


def attention_explorer(
    sentences: Sequence[str] = DEFAULT_SENTENCES,
    *,
    d_model: int = 16,
    n_heads: int = 4,
    seed: int = 0,
    width: int = 640,
    height: int = 280,
) -> AttentionExplorer:
    """Build the explorer (call with no arguments for the default sentences and model).

    Args:
        sentences: the dropdown's choices; tokens are separated by spaces.
        d_model, n_heads, seed: the tiny untrained model (d_model even, divisible by n_heads).
        width, height: the plot's size in pixels.
    """
    sentences = _check_sentences(sentences)
    check_pixels(width, height, 200, 120)
    if not 2 <= check_int("d_model", d_model) <= MAX_D_MODEL:  # a tiny demo: a huge width would take gigabytes
        raise ValueError(f"d_model must be in [2, {MAX_D_MODEL}], got {d_model}")
    if not 1 <= check_int("n_heads", n_heads) <= d_model:
        raise ValueError(f"n_heads must be in [1, d_model={d_model}], got {n_heads}")
    model = build_demo_model(sentences, d_model=d_model, n_heads=n_heads, seed=seed)
    return AttentionExplorer(model, sentences, width, height)
