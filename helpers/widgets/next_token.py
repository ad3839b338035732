"""The next-token explorer: type a prompt, see what a trained character model predicts next.

Left: the ``n_bars`` most likely next characters as bars, the raw model probability in grey
and the distribution actually sampled (after temperature, top-k and top-p) in colour.
Right: where the last position looks, the attention weights of every layer and head over
the last ``window`` characters of the prompt. A button samples the next character from the
coloured distribution and appends it to the prompt.

The model runs once per prompt (a few ms); temperature, top-k and top-p only re-filter the
stored logits, so dragging a slider redraws live (throttled, see `Throttle`). Built like the
other explorers: one persistent Figure rendered to PNG in a `widgets.Image`, so it works
under strict nbval and headless in tests.

Shapes: T = prompt length (≤ block_size), V = vocabulary, L layers, H heads.
    explorer.logits      (V,)       the model's next-token logits for the prompt
    explorer.probs       (V,)       the sampled distribution (filtered)
    explorer.attention   (L*H, W)   last position's weights over the last W characters

Example:
    >>> from helpers.models import GPT, GPTConfig
    >>> from helpers.tokenizers import CharTokenizer
    >>> tok = CharTokenizer.from_text("abc def")
    >>> ex = next_token_explorer(GPT(GPTConfig(tok.vocab_size, 16, 8, 2, 2)), tok, prompt="abc")
    >>> tuple(ex.probs.shape), tuple(ex.attention.shape)
    ((7,), (4, 3))
"""

from __future__ import annotations

import time

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers.generation import filter_logits
from helpers.plots import plain_text
from helpers.validate import check_int
from helpers.widgets.base import (
    Explorer,
    Panels,
    StatusLine,
    char_model_or_pretrained,
    check_pixels,
    finite_only,
    first_text,
    known_text,
    show_char,
    stale_notice,
    with_fonts,
)
from helpers.widgets.throttle import Throttle


class NextTokenExplorer(Explorer):
    """Controls, figure and state of the explorer; ``.widget`` is what Jupyter shows."""

    def __init__(self, model, tokenizer, prompt: str, n_bars: int, window: int, seed: int,
                 width: int, height: int, dpi: int = 80):
        self.model, self.tokenizer, self.dpi = model.eval(), tokenizer, dpi
        self.font_texts = tokenizer.chars  # the CJK font only if the model knows CJK characters
        self.n_bars, self.window = n_bars, window
        self.generator = torch.Generator().manual_seed(seed)
        V = tokenizer.vocab_size
        live = {"continuous_update": True, "style": {"description_width": "initial"},  # whole labels: "top-k (0: off)"
                "layout": widgets.Layout(min_width="260px", flex="1 1 260px")}  # fmt: skip
        # As many rows as the prompt has lines (2 to 6): a ci's prompt opens with blank lines, and a
        # 2-row box showed only those.
        self.prompt = widgets.Textarea(value=prompt, description="prompt", rows=min(6, max(2, prompt.count("\n") + 1)),
                                       continuous_update=True, layout=widgets.Layout(width="98%"))  # fmt: skip
        self.temperature = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=0.7, step=0.02,
                                                  description="temperature", readout_format=".2f", **live)  # fmt: skip
        self.top_k = widgets.IntSlider(value=0, min=0, max=V, description="top-k (0: off)", **live)
        self.top_p = widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01, description="top-p", **live)
        finite_only(self.temperature, self.top_p)  # before the redraw observers: a NaN never reaches them
        self.sample = widgets.Button(description="sample next", icon="plus")
        self.status = StatusLine()
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)  # = the PNG dpi: one renderer, cached text
        FigureCanvasAgg(self.figure)  # one permanent renderer: text layouts stay cached between redraws
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        self.prompt.observe(self._on_prompt, names="value")
        for control in (self.temperature, self.top_k, self.top_p):
            control.observe(lambda _change: self._redraw(), names="value")
        self.sample.on_click(lambda _button: self.sample_next())
        # Wrapping rows (flex-wrap): at 1024 px with a side panel open the sliders keep their width.
        row = widgets.Layout(display="flex", flex_flow="row wrap")  # no width 100%: its margins would overflow
        self._build_axes()
        self.panels = Panels(self.figure, [[self.ax_bar], [self.ax_att, self._colorbar.ax]])
        self.widget = widgets.VBox([stale_notice(), self.prompt,
                                    widgets.HBox([self.temperature, self.top_k, self.top_p], layout=row),
                                    widgets.HBox([self.sample, self.status], layout=row), self.panels.widget])  # fmt: skip
        self._run_model()
        self.update()

    def _ids(self) -> list[int] | None:
        """The prompt's ids, unknown characters skipped (and named in the status line); None when it
        has no character the model knows and a picture is already shown (it stays)."""
        known, self.status.text = known_text(self.tokenizer, self.prompt.value, self.model.config.block_size)
        if not known and hasattr(self, "logits"):
            return None
        return self.tokenizer.encode(known or first_text(self.tokenizer))

    @torch.no_grad()
    def _run_model(self) -> None:
        ids = self._ids()
        if ids is None:
            return
        ids = torch.tensor([ids], device=self.model.tok_emb.weight.device)  # (1, T), on the model's device
        logits, _ = self.model(ids)  # (1, T) -> (1, T, V)
        self.logits = logits[0, -1].cpu()  # (1, T, V) -> (V,)
        w = self.model.attention_weights(ids)[:, 0, :, -1, :].cpu()  # (L, 1, H, T, T) -> (L, H, T)
        self.context = [self.tokenizer.chars[i] for i in ids[0, -self.window :].tolist()]
        self.attention = w.flatten(0, 1)[:, -self.window :]  # (L, H, T) -> (L*H, W)

    def _on_prompt(self, _change) -> None:
        self._run_model()
        self._redraw()

    def sample_next(self) -> str:
        """Sample one character from the coloured distribution and append it to the prompt."""
        i = int(torch.multinomial(self.probs, 1, generator=self.generator))
        c = self.tokenizer.chars[i]
        self.prompt.value += c  # runs the model again and redraws
        return c

    @with_fonts
    def _build_axes(self) -> None:
        """Axes, bars, heatmap and colorbar are made once; `update` only changes their data."""
        grid = {"width_ratios": [1.0, 1.2], "left": 0.07, "right": 0.97, "bottom": 0.17, "top": 0.88, "wspace": 0.28}
        self.ax_bar, self.ax_att = self.figure.subplots(1, 2, gridspec_kw=grid)
        x = np.arange(self.n_bars)
        self.raw_bars = self.ax_bar.bar(x - 0.2, np.zeros(self.n_bars), width=0.4, color="0.75", label="model (τ = 1)")
        self.bars = self.ax_bar.bar(x + 0.2, np.zeros(self.n_bars), width=0.4, color="tab:blue", label="sampled from")
        self.ax_bar.set_ylabel("probability", fontsize=8)
        self.ax_bar.legend(loc="upper right", fontsize=8, frameon=False)
        L, H = self.model.config.n_layers, self.model.config.n_heads
        self.heat = self.ax_att.imshow(np.zeros((L * H, self.window)), aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
        # One label per layer (its heads are the rows below it): fewer texts, a faster redraw.
        self.ax_att.set_yticks(range(0, L * H, H), [f"layer {layer}" for layer in range(L)], fontsize=8)
        self.ax_att.hlines(np.arange(H, L * H, H) - 0.5, -0.5, self.window - 0.5, color="0.5", linewidth=0.8)
        self.ax_att.set_title(f"where the last position looks ({H} heads per layer)", fontsize=10)
        self._colorbar = self.figure.colorbar(self.heat, ax=self.ax_att, fraction=0.04, pad=0.02)

    @with_fonts
    def update(self) -> None:
        """Re-filter the stored logits with the current sliders and redraw the PNG."""
        start = time.perf_counter()
        if not hasattr(self, "ax_bar"):
            self._build_axes()
        raw = torch.softmax(self.logits.double(), dim=-1)  # (V,)
        self.probs = torch.softmax(filter_logits(self.logits, self.temperature.value, self.top_k.value or None,
                                                 self.top_p.value if self.top_p.value < 1.0 else None), -1)  # (V,)
        order = torch.argsort(raw, descending=True)[: self.n_bars].tolist()
        for bar, p in zip(self.raw_bars, raw[order].tolist(), strict=True):
            bar.set_height(p)
        for bar, p in zip(self.bars, self.probs[order].tolist(), strict=True):
            bar.set_height(p)
        self.ax_bar.set_xticks(range(self.n_bars), [plain_text(show_char(self.tokenizer.chars[i])) for i in order])
        # The axis ends just above the tallest bar shown: a spread-out distribution (bars near 0.02) would
        # sit flat on a 0-1 axis, and a temperature step would move nothing a learner can see.
        tallest = max(float(raw[order].max()), float(self.probs[order].max()))
        self.ax_bar.set_ylim(0, min(1.0, max(0.02, tallest * 1.15)))
        kept = int((self.probs > 0).sum())
        self.ax_bar.set_title(f"next character · {kept} of {len(raw)} can be sampled", fontsize=10)
        W = self.attention.shape[1]  # a short prompt has fewer than `window` characters: no empty columns
        self.heat.set_data(self.attention.numpy())  # (L*H, W)
        self.heat.set_extent((-0.5, W - 0.5, self.attention.shape[0] - 0.5, -0.5))
        self.ax_att.set_xlim(-0.5, W - 0.5)
        self.ax_att.set_xticks(range(W), [plain_text(show_char(c)) for c in self.context], fontsize=8)
        self.figure.canvas.draw()
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def __repr__(self) -> str:
        return (f"NextTokenExplorer(prompt={self.prompt.value[-30:]!r}, temperature={self.temperature.value:.2f}, "
                f"top_k={self.top_k.value}, top_p={self.top_p.value:.2f})")  # fmt: skip


def next_token_explorer(model=None, tokenizer=None, prompt: str = "def ", *, n_bars: int = 12, window: int = 24,
                        seed: int = 0, width: int = 760, height: int = 300) -> NextTokenExplorer:
    """Build the explorer for a character-level `GPT` and its `CharTokenizer`.

    Args:
        model, tokenizer: both None (the default) loads the shipped model (`helpers.load_pretrained`),
            so the cell needs nothing from the cells above.
        prompt: the starting text (characters outside the vocabulary are skipped and named).
        n_bars: how many of the most likely characters get a bar.
        window: how many of the last prompt characters the attention panel shows (at most block_size).
        seed: seeds the sampling button's generator, so a session's samples are repeatable.
        width, height: the plot's size in pixels.
    """
    model, tokenizer = char_model_or_pretrained(model, tokenizer)
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    check_int("n_bars", n_bars, minimum=1)
    check_int("window", window, minimum=1)
    if not 0 <= check_int("seed", seed) < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    check_pixels(width, height, 300, 150)
    return NextTokenExplorer(model, tokenizer, prompt, min(n_bars, tokenizer.vocab_size),
                             min(window, model.config.block_size), seed, width, height)
