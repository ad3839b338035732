"""The encoder-decoder Transformer drawn by code: boxes, arrows and residual connections.

Two placements of layer normalisation (层归一化), matching ``norm_first`` in `helpers.layers`:

- post-LN (``norm_first=False``, the paper): ``x = LayerNorm(x + sublayer(x))``, drawn as
  sublayer -> "Add & Norm", with the residual (残差) path entering the "Add & Norm" box.
- pre-LN (``norm_first=True``, GPT-2): ``x = x + sublayer(LayerNorm(x))``, drawn as
  "LayerNorm" -> sublayer -> ⊕, with the residual path skipping both; each stack then ends
  in a "Final LayerNorm", without which the stack's output would be unnormalised.

``final_norm`` defaults to ``norm_first``: the paper has no final norm in post-LN.
(`helpers.transformer.Transformer` and ``nn.Transformer`` add one in both cases; pass
``final_norm=True`` to draw that.)

Shapes: none (a drawing); the figure is 8 inches wide by default, at most about 5 high.

Example:
    >>> fig = architecture_figure(norm_first=True)
    >>> sum(t.get_text() == "Final LayerNorm" for t in fig.axes[0].texts)
    2
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch

COLORS = {"attn": "#fcd9b0", "ff": "#c4e0f5", "norm": "#f3eea6", "emb": "#f7c9c9", "out": "#dcd3f2",
          "soft": "#cfeccc", "frame": "#f4f4f4"}  # fmt: skip
BOX_W, BOX_H, NORM_H, GAP, RADIUS, FONT = 3.8, 0.42, 0.34, 0.22, 0.15, 7.5


class _Column:
    """Stacks items bottom-up at x = cx, joining each to the previous one with an arrow."""

    def __init__(self, ax, cx: float, y: float, side: int):
        self.ax, self.cx, self.top, self.side = ax, cx, y, side  # side: -1 residuals left, +1 right
        self.y_of: dict[str, float] = {}  # label -> centre y (the last one drawn under that label)

    def _arrow(self, start, end) -> None:
        self.ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", lw=0.9, color="0.2",
                                                                   shrinkA=0, shrinkB=0))  # fmt: skip

    def _advance(self, h: float, first: bool) -> float:
        y0 = self.top + (0.0 if first else GAP)
        if not first:
            self._arrow((self.cx, self.top), (self.cx, y0))
        self.top = y0 + h
        return y0 + h / 2

    def box(self, label: str, color: str, h: float = BOX_H, first: bool = False) -> float:
        yc = self._advance(h, first)
        self.ax.add_patch(FancyBboxPatch((self.cx - BOX_W / 2, yc - h / 2), BOX_W, h, facecolor=COLORS[color],
                                         edgecolor="0.25", lw=0.8, boxstyle="round,pad=0,rounding_size=0.08"))
        self.ax.text(self.cx, yc, label, ha="center", va="center", fontsize=FONT)
        self.y_of[label] = yc
        return yc

    def add(self) -> float:
        yc = self._advance(2 * RADIUS, first=False)
        self.ax.add_patch(Circle((self.cx, yc), RADIUS, facecolor="white", edgecolor="0.25", lw=0.8))
        self.ax.text(self.cx, yc, "+", ha="center", va="center", fontsize=FONT + 1)
        return yc

    def branch(self) -> float:
        """The point on the main path where the next residual connection leaves."""
        return self.top + GAP / 2

    def residual(self, y_from: float, y_to: float, half_width: float) -> None:
        x_out = self.cx + self.side * (BOX_W / 2 + 0.4)
        self.ax.plot([self.cx, x_out, x_out], [y_from, y_from, y_to], color="0.2", lw=0.9)
        self._arrow((x_out, y_to), (self.cx + self.side * half_width, y_to))

    def sublayer(self, label: str, norm_first: bool) -> float:
        """One residual block; returns the centre y of the sublayer's box."""
        start = self.branch()
        if norm_first:
            self.box("LayerNorm", "norm", h=NORM_H)
            yc = self.box(label, "ff" if label == "Feed-forward" else "attn")
            self.residual(start, self.add(), RADIUS)
        else:
            yc = self.box(label, "ff" if label == "Feed-forward" else "attn")
            self.residual(start, self.box("Add & Norm", "norm"), BOX_W / 2)
        return yc


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} ({value!r})")
    return value


def architecture_figure(norm_first: bool = False, final_norm: bool | None = None, *,
                        width: float = 8.0) -> Figure:  # fmt: skip
    """Draw the encoder-decoder Transformer with post-LN (default) or pre-LN layers.

    Args:
        norm_first: False = post-LN (LayerNorm after each residual addition, the paper);
            True = pre-LN (LayerNorm before each sublayer).
        final_norm: draw a LayerNorm at the end of each stack; None means ``norm_first``.
        width: in inches; the height follows from the drawing (about 0.55 x width for
            pre-LN, less for post-LN), so no space is wasted and circles stay round.
    """
    _check_bool("norm_first", norm_first)
    final_norm = norm_first if final_norm is None else _check_bool("final_norm", final_norm)
    if isinstance(width, bool) or not isinstance(width, (int, float)):
        raise TypeError(f"width must be a number of inches, got {type(width).__name__}")
    if not 2 <= width <= 20:
        raise ValueError(f"width must be in [2, 20] inches, got {width}")

    fig = Figure()
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    enc, dec = _Column(ax, 4.0, 0.6, side=-1), _Column(ax, 11.6, 0.6, side=+1)
    frames = {}
    for col, name, emb in ((enc, "Inputs", "Input embedding × √d_model"),
                           (dec, "Outputs (shifted right)", "Output embedding × √d_model")):  # fmt: skip
        ax.text(col.cx, 0.3, name, ha="center", va="center", fontsize=FONT + 0.5)
        col.box(emb, "emb", first=True)
        ax.annotate("", xy=(col.cx, col.top), xytext=(col.cx, 0.45),
                    arrowprops=dict(arrowstyle="-", lw=0.9, color="0.2"))  # fmt: skip
        y_pe = col.add()
        x_label = col.cx + col.side * 1.6
        ax.text(x_label + col.side * 0.1, y_pe, "Positional\nencoding", ha="left" if col.side > 0 else "right",
                va="center", fontsize=FONT)  # fmt: skip
        col._arrow((x_label, y_pe), (col.cx + col.side * RADIUS, y_pe))
        frames[name] = col.branch() - 0.08

    enc.sublayer("Multi-head self-attention", norm_first)
    enc.sublayer("Feed-forward", norm_first)
    frames["enc_top"] = enc.top + 0.12
    dec.sublayer("Masked multi-head self-attention", norm_first)
    y_cross = dec.sublayer("Multi-head cross-attention", norm_first)
    dec.sublayer("Feed-forward", norm_first)
    frames["dec_top"] = dec.top + 0.12
    for col, bottom, top, label in ((enc, frames["Inputs"], frames["enc_top"], "Encoder"),
                                    (dec, frames["Outputs (shifted right)"], frames["dec_top"], "Decoder")):
        half = BOX_W / 2 + 0.65
        ax.add_patch(FancyBboxPatch((col.cx - half, bottom), 2 * half, top - bottom, facecolor=COLORS["frame"],
                                    edgecolor="0.45", lw=0.9, zorder=0, boxstyle="round,pad=0,rounding_size=0.2"))
        x = col.cx + col.side * (half + 0.15)
        ha = "left" if col.side > 0 else "right"
        ax.text(x, (bottom + top) / 2 + 0.2, "N×", ha=ha, va="center", fontsize=FONT + 3, weight="bold")
        ax.text(x, (bottom + top) / 2 - 0.3, f"{label}\nlayer", ha=ha, va="center", fontsize=FONT)
        if final_norm:
            col.box("Final LayerNorm", "norm", h=NORM_H)

    # The encoder's output is the keys and values of every decoder layer's cross-attention.
    x_mid, y_up = (enc.cx + dec.cx) / 2, enc.top + 0.35
    ax.plot([enc.cx, enc.cx, x_mid, x_mid], [enc.top, y_up, y_up, y_cross], color="0.2", lw=0.9)
    dec._arrow((x_mid, y_cross), (dec.cx - BOX_W / 2, y_cross))
    ax.text(x_mid - 0.1, (y_up + y_cross) / 2 if y_up != y_cross else y_cross + 0.2, "K, V\n(memory)",
            ha="right", va="center", fontsize=FONT)  # fmt: skip

    dec.box("Linear", "out")
    dec.box("Softmax", "soft")
    ax.annotate("", xy=(dec.cx, dec.top + 0.3), xytext=(dec.cx, dec.top),
                arrowprops=dict(arrowstyle="-|>", lw=0.9, color="0.2", shrinkA=0, shrinkB=0))  # fmt: skip
    ax.text(dec.cx, dec.top + 0.45, "Output probabilities", ha="center", va="center", fontsize=FONT + 0.5)
    title = ("post-LN, as in the paper: LayerNorm after each residual addition" if not norm_first
             else "pre-LN: LayerNorm before each sublayer")  # fmt: skip
    top = dec.top + 1.2
    ax.text(0.3, top, f"Transformer ({title})", ha="left", va="top", fontsize=FONT + 2.5)
    ax.set(xlim=(0, 16), ylim=(0, top + 0.25))
    fig.set_size_inches(width, width * (top + 0.25) / 16)  # equal scales on both axes
    return fig
