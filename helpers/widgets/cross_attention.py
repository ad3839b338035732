"""Cross-attention of a trained encoder-decoder `Transformer` on a source the learner types.

The model greedy-decodes its own output for the source; the explorer then shows, for that
output, where each decoder position reads in the source:
- left: every decoder layer × head at once (rows: layers), drawn as one image with white gaps
  between the tiles, the selected head framed in red;
- middle: the selected head large, the source tokens on x and the tokens the model writes on y
  (row t is the position that writes output token t), with a dashed anti-diagonal: where a
  reversal has to read;
- right: the chosen row's weights as bars; the bar of the input that the reverse needs there is
  orange.

The weights are the model's own: one teacher-forced forward pass over the decoded output with
``return_weights=True`` (``decoder_cross``); nothing is recomputed by a second implementation.

What is typed: every character that is a one-character source label (the digits, by default)
is kept, anything else is skipped and named in the status line. The model was trained on
exactly ``source_len`` tokens, so a shorter source is padded on the right with the first
typeable label ("0" by default) and a longer one keeps its first ``source_len``; the status line
says which source was used. Nothing the learner types reaches torch unchecked.

Shapes: L layers, H heads, S = source_len, T ≤ S + 1 tokens written (the last usually <EOS>).
    explorer.src          (1, S)          the source ids used
    explorer.output       (1, T + 1)      greedy_decode's ids, starting with bos_id
    explorer.weights      (L, H, T, S)    decoder cross-attention for that output
    explorer.row_weights  (S,)            the chosen row of the chosen head

Example:
    >>> from helpers.models import Transformer
    >>> m = Transformer(12, 12, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, max_len=6)
    >>> ex = cross_attention_explorer(m, source="12x3456")
    >>> ex.used, tuple(ex.weights.shape[:2]), ex.weights.shape[-1], "not a source character: x" in ex.status.text
    ('1234', (2, 2), 4, True)
"""

from __future__ import annotations

import time

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.transforms import blended_transform_factory

from helpers.models import Transformer
from helpers.plots import plain_text
from helpers.validate import check_int, check_sequence
from helpers.widgets.base import (
    Explorer,
    Panels,
    StatusLine,
    check_pixels,
    lock_when_single,
    show_char,
    stale_notice,
    with_fonts,
)
from helpers.widgets.blit import Blitter
from helpers.widgets.throttle import Throttle

GAP = 1  # empty (NaN, drawn white) cells between two thumbnails


def default_labels(vocab: int, bos_id: int, eos_id: int) -> list[str]:
    """"0".."9" for ids below 10, "<BOS>" and "<EOS>" for the specials, "<id>" for anything else."""
    names = {bos_id: "<BOS>", eos_id: "<EOS>"}
    return [names.get(i, str(i) if i < 10 else f"<{i}>") for i in range(vocab)]


def tile_grid(weights: torch.Tensor) -> np.ndarray:
    """Every head in one array: (L, H, T, S) -> (L·(T+GAP)-GAP, H·(S+GAP)-GAP), NaN in the gaps."""
    L, H, T, S = weights.shape
    grid = np.full((L, T + GAP, H, S + GAP), np.nan, dtype=np.float32)
    grid[:, :T, :, :S] = weights.permute(0, 2, 1, 3).numpy()  # (L, H, T, S) -> (L, T, H, S)
    return grid.reshape(L * (T + GAP), H * (S + GAP))[: L * (T + GAP) - GAP, : H * (S + GAP) - GAP]


class CrossAttentionExplorer(Explorer):
    """Controls, figure and state; ``.widget`` is what Jupyter shows."""

    def __init__(self, model: Transformer, source: str, source_len: int, src_labels: list[str],
                 tgt_labels: list[str], bos_id: int, eos_id: int, layer: int, head: int,
                 width: int, height: int, dpi: int = 80):  # fmt: skip
        self.model, self.dpi, self.S = model.eval(), dpi, source_len
        self.src_labels, self.tgt_labels, self.bos_id, self.eos_id = src_labels, tgt_labels, bos_id, eos_id
        self.font_texts = [*src_labels, *tgt_labels]  # the CJK font only if a label needs it
        self.typeable = {lab: i for i, lab in enumerate(src_labels) if len(lab) == 1}  # what can be typed
        L, H = len(model.decoder.layers), model.decoder.layers[0].cross_attn.n_heads
        live = {"continuous_update": True, "style": {"description_width": "50px"},
                "layout": widgets.Layout(min_width="220px", flex="1 1 220px")}  # fmt: skip
        self.text = widgets.Text(value=source, description="source", continuous_update=True,
                                 layout=widgets.Layout(width="60%"))  # fmt: skip
        self.layer = widgets.IntSlider(value=layer, min=0, max=L - 1, description="layer", **live)
        self.head = widgets.IntSlider(value=head, min=0, max=H - 1, description="head", **live)
        self.row = widgets.IntSlider(value=0, min=0, max=0, description="row", **live)
        lock_when_single(self.layer, self.head, self.row)
        self.status = StatusLine()
        self.figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)  # = the PNG dpi: one renderer
        FigureCanvasAgg(self.figure)  # one permanent renderer: text layouts stay cached between redraws
        self._redraw = Throttle(lambda: self.update())  # looked up at call time (tests may wrap update)
        self._syncing = False
        self._build_figure(L, H)
        self.text.observe(self._on_text, names="value")
        for control in (self.layer, self.head, self.row):
            control.observe(self._on_control, names="value")
        row = widgets.Layout(display="flex", flex_flow="row wrap")  # no width 100%: its margins would overflow
        # The suptitle (source → output ✓) stays in the whole picture; live, the status line says it.
        self.panels = Panels(self.figure, [[self.ax_thumbs], [self.ax_big, self._colorbar.ax], [self.ax_bars]],
                             above=self.suptitle)  # fmt: skip
        self.widget = widgets.VBox([stale_notice(), self.text, widgets.HBox([self.layer, self.head, self.row], layout=row),
                                    self.status, self.panels.widget])  # fmt: skip
        self._run_model()
        self.update()

    def _parse(self, text: str) -> tuple[list[int], str]:
        """Source ids for ``text`` (exactly S of them) and a note saying what was changed ("" if nothing)."""
        ids = [self.typeable[ch] for ch in text if ch in self.typeable]
        notes = []
        unknown = list(dict.fromkeys(ch for ch in text if ch not in self.typeable))  # as typed, each once
        if unknown:
            notes.append("skipped, not a source character: " + " ".join(show_char(c) for c in unknown))
        fill = next(iter(self.typeable))
        typed = f"{len(text)} characters typed" + (f", {len(ids)} of them source characters" if unknown else "")
        if len(ids) < self.S:
            notes.append(f"{typed}; the model reads exactly {self.S}: padded with {fill}")
            ids += [self.typeable[fill]] * (self.S - len(ids))
        elif len(ids) > self.S:
            notes.append(f"{typed}; the model reads {self.S}: used the first {self.S}")
            ids = ids[: self.S]
        return ids, "; ".join(notes)

    @torch.no_grad()
    def _run_model(self) -> None:
        ids, note = self._parse(self.text.value)
        device = next(self.model.parameters()).device
        self.src = torch.tensor([ids], device=device)  # (1, S)
        self.output = self.model.greedy_decode(self.src, max_len=self.S + 2, bos_id=self.bos_id,
                                               eos_id=self.eos_id)  # (1, S) -> (1, T + 1)  # fmt: skip
        _, w = self.model(self.src, self.output[:, :-1], return_weights=True)  # row t reads output[t], writes t+1
        self.weights = w.decoder_cross[:, 0].float().cpu()  # (L, 1, H, T, S) -> (L, H, T, S)
        self.used = "".join(self.src_labels[i] for i in ids)
        self.out_labels = [self.tgt_labels[i] for i in self.output[0, 1:].tolist()]
        self.written = "".join(self.out_labels)
        reverse = [self.src_labels[i] for i in reversed(ids)]
        self.correct = self.out_labels == reverse + [self.tgt_labels[self.eos_id]]
        verdict = f"model writes: {self.written}, the reverse is {''.join(reverse)} {'✓' if self.correct else '✗'}"
        self.status.text = verdict + (f" · source used: {self.used} ({note})" if note else "")
        T = self.weights.shape[2]
        self._syncing = True  # move the row slider without a redraw of its own
        self.row.max = T - 1
        self.row.value = min(self.row.value, T - 1)
        self._syncing = False
        self._source_stale = True

    def _on_text(self, _change) -> None:
        self._run_model()
        self._redraw()

    def _on_control(self, _change) -> None:
        if not self._syncing:
            self._redraw()

    def _labels(self, ax, n: int, axis: str, **kw) -> list:
        """``n`` reusable text labels along one side of ``ax`` (ticks, but set in place: no axis redraw)."""
        if axis == "x":  # x in data units, just below the axes
            tr, pos, kw = blended_transform_factory(ax.transData, ax.transAxes), lambda i: (i, -0.025), \
                {"ha": "center", "va": "top", **kw}  # fmt: skip
        else:  # y in data units, just left of the axes
            tr, pos, kw = blended_transform_factory(ax.transAxes, ax.transData), lambda i: (-0.02, i), \
                {"ha": "right", "va": "center", **kw}  # fmt: skip
        return [ax.text(*pos(i), "", transform=tr, fontsize=9, **kw) for i in range(n)]

    @with_fonts
    def _build_figure(self, L: int, H: int) -> None:
        """Axes, images, frames, bars, labels and the colour bar, once; later redraws set their data."""
        S, fig = self.S, self.figure
        cmap = matplotlib.colormaps["Blues"].with_extremes(bad="white")
        gs = fig.add_gridspec(1, 3, width_ratios=[1.0, 1.2, 0.9], left=0.07, right=0.985, bottom=0.17,
                              top=0.82, wspace=0.3)  # fmt: skip
        opts = {"cmap": cmap, "vmin": 0.0, "vmax": 1.0, "interpolation": "nearest", "aspect": "auto"}
        thumbs = self.ax_thumbs = fig.add_subplot(gs[0])
        # A fixed box for the tallest output (S + 1 rows), so the axes never move between sources.
        thumbs.set_box_aspect((L * (S + 1 + GAP) - GAP) / (H * (S + GAP) - GAP))
        self.thumb_image = thumbs.imshow(np.zeros((1, 1)), **opts)
        self.frame = thumbs.add_patch(Rectangle((0, 0), S, 1, fill=False, edgecolor="tab:red", linewidth=2.5,
                                                clip_on=False))  # fmt: skip
        thumbs.set_xlim(-0.5, H * (S + GAP) - GAP - 0.5)
        thumbs.set_xticks([h * (S + GAP) + (S - 1) / 2 for h in range(H)], [f"head {h}" for h in range(H)], fontsize=9)
        thumbs.set_yticks([])
        thumbs.tick_params(length=0)
        thumbs.set_frame_on(False)
        thumbs.set_title("every layer × head", fontsize=11)
        self.layer_labels = self._labels(thumbs, L, "y")
        big = self.ax_big = fig.add_subplot(gs[1])
        self.big_image = big.imshow(np.zeros((1, S)), **opts)
        big.set_xlim(-0.5, S - 0.5)
        self.band = big.add_patch(Rectangle((-0.5, -0.5), S, 1, fill=False, edgecolor="tab:red", linewidth=2))
        (self.guide,) = big.plot([S - 1, 0], [0, S - 1], linestyle=(0, (4, 3)), color="tab:orange", linewidth=1.5)
        big.set_xticks([])
        big.set_yticks([])
        big.set_xlabel("input (source)", fontsize=10, labelpad=16)
        big.set_ylabel("the model writes (row)", fontsize=10, labelpad=38)
        self.big_x, self.big_y = self._labels(big, S, "x"), self._labels(big, S + 1, "y")
        bar = self._colorbar = fig.colorbar(self.big_image, ax=big, fraction=0.05, pad=0.03)
        bar.set_ticks([0, 0.5, 1])
        bar.ax.tick_params(labelsize=9)
        bar.set_label("weight", fontsize=9)
        bars = self.ax_bars = fig.add_subplot(gs[2])
        self.bars = bars.bar(np.arange(S), np.zeros(S), color="tab:blue")
        self.top_text = bars.text(0, 0, "", ha="center", va="bottom", fontsize=9)
        bars.set(xlim=(-0.6, S - 0.4), ylim=(0, 1.08), xticks=[], yticks=[0, 0.5, 1])
        bars.tick_params(labelsize=9)
        bars.set_xlabel("input (orange: what the reverse reads)", fontsize=10, labelpad=16)
        self.bars_x = self._labels(bars, S, "x")
        # The figure's title, held by an axes: a figure-level animated artist would be missing from a savefig.
        self.suptitle = big.text(0.5, 0.975, "", transform=fig.transFigure, ha="center", va="top", fontsize=12)
        # Redraw only what changes (see `Blitter`): with the source, then with a slider, each in z-order
        # (image, box, line); the spines go back on top of the image and the bars.
        self._blit = Blitter(fig, [
            [self.thumb_image, *self.layer_labels, *self.big_x, *self.big_y, *self.bars_x, self.suptitle],
            [self.frame, self.big_image, self.band, self.guide, big.title, *self.bars, self.top_text, bars.title,
             *big.spines.values(), *bars.spines.values()],
        ])  # fmt: skip

    def _show_source(self) -> None:
        """What depends only on the source and the output: thumbnails, labels, limits, suptitle."""
        L, H, T, S = self.weights.shape
        grid = tile_grid(self.weights)
        self.thumb_image.set_data(grid)
        self.thumb_image.set_extent((-0.5, grid.shape[1] - 0.5, grid.shape[0] - 0.5, -0.5))
        self.ax_thumbs.set_ylim(grid.shape[0] - 0.5, -0.5)
        for i, text in enumerate(self.layer_labels):
            text.set(y=i * (T + GAP) + (T - 1) / 2, text=f"layer {i}")
        self.big_image.set_extent((-0.5, S - 0.5, T - 0.5, -0.5))
        self.ax_big.set_ylim(T - 0.5, -0.5)
        for j, label in enumerate(self.src[0].tolist()):
            self.big_x[j].set_text(plain_text(self.src_labels[label]))  # "$" drawn, not read as TeX
            self.bars_x[j].set_text(plain_text(self.src_labels[label]))
        for t, text in enumerate(self.big_y):
            text.set_text(plain_text(self.out_labels[t]) if t < T else "")
        self.suptitle.set_text(f"decoder cross-attention   source {plain_text(self.used)} → model writes "
                               f"{plain_text(self.written)} "
                               f"{'✓' if self.correct else '✗'}")  # fmt: skip

    @with_fonts
    def update(self) -> None:
        """Redraw for the current controls: data, titles and frames change in place (labels with the source)."""
        start = time.perf_counter()
        S, T = self.S, self.weights.shape[2]
        layer, h, r = self.layer.value, self.head.value, self.row.value
        source_changed = self._source_stale
        if source_changed:
            self._show_source()
            self._source_stale = False
        self.frame.set_bounds(h * (S + GAP) - 0.5, layer * (T + GAP) - 0.5, S, T)
        self.big_image.set_data(self.weights[layer, h].numpy())
        self.ax_big.set_title(f"layer {layer}, head {h}  (dashed: the reversal)", fontsize=11)
        self.band.set_y(r - 0.5)
        self.row_weights = self.weights[layer, h, r]  # (S,)
        need = S - 1 - r  # the input a reversal reads for output row r (none for the <EOS> row)
        for j, (patch, w) in enumerate(zip(self.bars, self.row_weights.tolist(), strict=True)):
            patch.set_height(w)
            patch.set_color("tab:orange" if j == need else "tab:blue")
        top = int(self.row_weights.argmax())
        self.top_text.set(x=top, y=float(self.row_weights[top]) + 0.01, text=f"{float(self.row_weights[top]):.2f}")
        self.ax_bars.set_title(f"weights of row {r} (writes {plain_text(self.out_labels[r])})", fontsize=11)
        self._blit.draw(0 if source_changed else 1)
        self.panels.show()
        self.last_update_s = time.perf_counter() - start

    def __repr__(self) -> str:
        return (f"CrossAttentionExplorer(source={self.used!r}, writes={self.written!r}, correct={self.correct}, "
                f"layer={self.layer.value}, head={self.head.value}, row={self.row.value})")  # fmt: skip


def cross_attention_explorer(model: Transformer, *, source: str = "31415926", source_len: int | None = None,
                             src_labels=None, tgt_labels=None, bos_id: int = 10, eos_id: int = 11,
                             layer: int | None = None, head: int = 0, width: int = 960,
                             height: int = 360) -> CrossAttentionExplorer:  # fmt: skip
    """Build the explorer for an encoder-decoder `Transformer` trained to reverse (see the module doc).

    Args:
        source: what the text box starts with.
        source_len: the source length the model was trained on (default ``model.max_len - 2``:
            room for ``bos_id`` and ``eos_id`` around the output).
        src_labels / tgt_labels: one distinct label per id (default: digits, "<BOS>", "<EOS>").
        layer / head: the head shown large first (default: the last layer, head 0).
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a helpers Transformer, got {type(model).__name__}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
        if not 0 <= check_int(name, value) < model.tgt_vocab:
            raise ValueError(f"{name} must be in [0, tgt_vocab={model.tgt_vocab}), got {value}")
    if bos_id == eos_id:
        raise ValueError(f"bos_id and eos_id must differ, both are {bos_id}")
    if source_len is None:
        source_len = model.max_len - 2
    if not 1 <= check_int("source_len", source_len) <= model.max_len - 2:
        raise ValueError(f"source_len must be in [1, max_len - 2 = {model.max_len - 2}] (the output adds "
                         f"<BOS> and <EOS>), got {source_len}")  # fmt: skip
    labels = {}
    for name, value, vocab in (("src_labels", src_labels, model.src_vocab), ("tgt_labels", tgt_labels, model.tgt_vocab)):
        value = default_labels(vocab, bos_id, eos_id) if value is None else check_sequence(name, value)
        if len(value) != vocab or len(set(value)) != vocab or "" in value:
            raise ValueError(f"{name} must hold {vocab} distinct non-empty labels (one per id), got {len(value)}")
        labels[name] = value
    if not any(len(lab) == 1 for lab in labels["src_labels"]):
        raise ValueError("src_labels must have a one-character label the learner can type (e.g. the digits)")
    L, H = len(model.decoder.layers), model.decoder.layers[0].cross_attn.n_heads
    layer = L - 1 if layer is None else layer
    if not 0 <= check_int("layer", layer) < L:
        raise ValueError(f"layer must be in [0, {L}), got {layer}")
    if not 0 <= check_int("head", head) < H:
        raise ValueError(f"head must be in [0, {H}), got {head}")
    check_pixels(width, height, 400, 200)
    return CrossAttentionExplorer(model, source, source_len, labels["src_labels"], labels["tgt_labels"], bos_id,
                                  eos_id, layer, head, width, height)  # fmt: skip
