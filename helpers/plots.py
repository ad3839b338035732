"""Plotting helpers. Each returns a `matplotlib.figure.Figure` and never calls `plt.show()`.

Figures are built with `Figure()` (not pyplot) so widgets and tests can redraw them
without a display and without pyplot's global state; a notebook shows one by leaving
it as the cell's last expression or with `display(fig)`.
"""

from __future__ import annotations

import io
import numbers
import re
from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot

# In a Jupyter kernel the inline backend is chosen lazily, and until then a bare Figure
# shows only as text; switching to it now registers the PNG display (a no-op elsewhere).
if "inline" in matplotlib.get_backend():
    matplotlib.pyplot.switch_backend(matplotlib.get_backend())
import numpy as np
import torch
from matplotlib.figure import Figure

from helpers.cjk import register as _register_cjk_font
from helpers.figure_display import use as _show_at_output_width
from helpers.validate import check_int

_register_cjk_font()  # Chinese draws with the course's font on every machine (helpers/cjk.py)
_show_at_output_width()  # no picture shown narrower than drawn in JupyterLab (helpers/figure_display.py)


def plain_text(text: str) -> str:
    """``text`` with each unescaped ``$`` escaped, so matplotlib draws it instead of reading TeX:
    a token such as ``$x^$`` would otherwise crash the draw. Idempotent."""
    return re.sub(r"(?<!\\)\$", r"\\$", str(text))


def _as_2d_array(data, name: str) -> np.ndarray:
    if isinstance(data, torch.Tensor):
        if data.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {data.dtype}")
        data = data.detach().to("cpu", torch.float64).numpy()
    try:
        arr = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError) as e:  # numpy's message would not say which argument
        raise TypeError(f"{name} must be a 2-D array of numbers (tensor, ndarray or nested lists): {e}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(arr.shape)}")
    return arr


def check_plot_args(**args) -> None:
    """Named errors for the usual keyword arguments (matplotlib's would not say which one).

    Knows: figsize (two positive numbers), title/xlabel/ylabel/fmt/baseline_label/colorbar_label (str or
    None), vmin/vmax (number or None), cmap (str or Colormap), labels (sequences: ``*labels``,
    tokens), and flags (annotate, colorbar, show_steps: bool).
    """
    for name, value in args.items():
        if name == "figsize":
            if (isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1000 for v in value)):
                raise ValueError(f"figsize must be (width, height) in inches, two numbers in (0, 1000), got {value!r}")
        elif name in ("title", "xlabel", "ylabel", "fmt", "baseline_label", "colorbar_label"):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
        elif name in ("vmin", "vmax"):
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise TypeError(f"{name} must be a number or None, got {type(value).__name__}")
        elif name == "cmap":
            if not isinstance(value, (str, matplotlib.colors.Colormap)):
                raise TypeError(f"cmap must be a colormap name or a Colormap, got {type(value).__name__}")
        elif name.endswith("labels") or name == "tokens":
            if (value is not None or name == "tokens") and (
                    isinstance(value, (bytes, torch.Tensor)) or not isinstance(value, (Sequence, np.ndarray))):
                raise TypeError(f"{name} must be a list of labels, got {type(value).__name__}")
        elif not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def heatmap(
    data,
    *,
    ax=None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    fmt: str = "{:.2f}",
    colorbar: bool = True,
    colorbar_label: str | None = None,
    figsize: tuple[float, float] = (5.0, 4.0),
) -> Figure:
    """Draw a 2-D array (tensor, ndarray or nested lists) as a heatmap.

    Args:
        data: shape (rows, cols).
        ax: draw into this Axes instead of a new Figure (its figure is returned).
        xticklabels / yticklabels: one label per column / row (e.g. tokens).
        annotate: write each value in its cell using ``fmt``, black or white by the cell's colour.
        colorbar_label: what the colours mean (e.g. "cosine"), written beside the colorbar.
    """
    check_plot_args(title=title, xlabel=xlabel, ylabel=ylabel, xticklabels=xticklabels, yticklabels=yticklabels,
                    cmap=cmap, vmin=vmin, vmax=vmax, annotate=annotate, fmt=fmt, colorbar=colorbar,
                    colorbar_label=colorbar_label, figsize=figsize)
    arr = _as_2d_array(data, "data")
    for labels, n, name in ((xticklabels, arr.shape[1], "xticklabels"), (yticklabels, arr.shape[0], "yticklabels")):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels for {n} {'columns' if name[0] == 'x' else 'rows'}")
    if ax is None:
        fig = Figure(figsize=figsize, layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    if xticklabels is not None:
        ax.set_xticks(range(arr.shape[1]), labels=[plain_text(s) for s in xticklabels], rotation=90 if len(xticklabels) > 8 else 0)
    if yticklabels is not None:
        ax.set_yticks(range(arr.shape[0]), labels=[plain_text(s) for s in yticklabels])
    if annotate:
        for (r, c), v in np.ndenumerate(arr):
            ax.text(c, r, fmt.format(v), ha="center", va="center", fontsize=8, color=text_colour(im, v))
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if colorbar:
        fig.colorbar(im, ax=ax, label=colorbar_label)
    return fig


def text_colour(im, value: float) -> str:
    """Black or white, whichever reads better on the colour ``im`` (an AxesImage) gives ``value``.

    Chosen from the cell's own colour (its luminance after the colormap's normalisation), not
    from the data's midpoint: on a diverging map from -1 to 1 a value near 0 is near-white, and
    needs black text however the data happen to be spread.
    """
    red, green, blue, _ = im.cmap(im.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"  # ITU-R BT.601 luma


def figure_to_png(fig: Figure, dpi: int = 80, fast: bool = False) -> bytes:
    """Render a Figure to PNG bytes (for `ipywidgets.Image` and for saved figures).

    The PNG carries no timestamp or version metadata, so the same drawing gives the
    same bytes on every run. ``fast`` trades about 20 % more bytes for a quicker encode
    (zlib level 1): what an explorer redrawing while a slider moves wants.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    check_int("dpi", dpi, minimum=1)
    if not isinstance(fast, bool):
        raise TypeError(f"fast must be a bool, got {type(fast).__name__}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None}, pil_kwargs={"compress_level": 1 if fast else 6})
    return buf.getvalue()


def loss_curves(
    history,
    *,
    ax=None,
    title: str | None = "Training and validation loss",
    baseline: float | None = None,
    baseline_label: str = "baseline",
    show_steps: bool = True,
    figsize: tuple[float, float] = (6.0, 3.5),
) -> Figure:
    """Plot train and val loss against the step from a `helpers.training.History`.

    Args:
        history: has ``eval_steps``, ``train_loss``, ``val_loss`` (equal lengths) and
            optionally ``step_loss`` (one per step, drawn faintly with ``show_steps``).
        baseline: draw a dashed horizontal line at this loss (e.g. a bigram model's).
    """
    try:
        steps, tr, va = list(history.eval_steps), list(history.train_loss), list(history.val_loss)
    except AttributeError as e:
        raise TypeError(f"history must have eval_steps, train_loss and val_loss (a History), got {type(history).__name__}") from e
    check_plot_args(title=title, baseline_label=baseline_label, show_steps=show_steps, figsize=figsize)
    if baseline is not None and (isinstance(baseline, bool) or not isinstance(baseline, numbers.Real)):
        raise TypeError(f"baseline must be a number or None, got {type(baseline).__name__}")
    for name, values in (("eval_steps", steps), ("train_loss", tr), ("val_loss", va)):
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
            raise TypeError(f"history.{name} must hold numbers only")
    if not (len(steps) == len(tr) == len(va)) or not steps:
        raise ValueError(f"eval_steps, train_loss, val_loss must be non-empty and of equal length, got {len(steps)}, {len(tr)}, {len(va)}")
    if ax is None:
        fig = Figure(figsize=figsize, layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    step_loss = list(getattr(history, "step_loss", []) or [])
    if show_steps and step_loss:
        ax.plot(range(1, len(step_loss) + 1), step_loss, color="tab:blue", alpha=0.2, lw=0.8, label="train (one batch)")
    ax.plot(steps, tr, "o-", color="tab:blue", ms=3, label="train (estimate)")
    ax.plot(steps, va, "o-", color="tab:orange", ms=3, label="val (estimate)")
    if baseline is not None:
        ax.axhline(baseline, color="gray", ls="--", lw=1, label=baseline_label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats)")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
