"""Regenerate every image in figures/ from helpers code: the only writer of that folder.

Each builder returns a matplotlib Figure; the CLI renders it with `figure_to_png` (no
timestamp or version in the PNG) after `set_seed(0)` on one CPU thread, so a second run
gives the same bytes. The 07 builders retrain notebook 07's CPU-scale models exactly
(same seeds, same settings), which takes most of the time. What those two figures show holds
for any seed; their bits hold only on this machine (tests/test_figures.py says how each is checked).

Usage:
    python tools/make_figures.py                 # every figure into figures/
    python tools/make_figures.py --list          # the names
    python tools/make_figures.py --out /tmp/f pe_heatmap causal_mask
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

# Before torch is imported: CPU only and quiet progress bars, whatever the caller's shell says.
os.environ["HELPERS_DEVICE"] = "cpu"
os.environ["TQDM_DISABLE"] = "1"

import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import nn  # noqa: E402

from helpers.attention import causal_mask  # noqa: E402
from helpers.attention_plots import attention_heads_figure, draw_weights  # noqa: E402
from helpers.device import set_seed  # noqa: E402
from helpers.fileio import atomic_write  # noqa: E402
from helpers.plots import figure_to_png, heatmap  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "figures"
DPI = 80  # figure_to_png's default, as in the notebooks
MAX_BYTES = 200_000

Builder = Callable[[], Figure]
REGISTRY: dict[str, Builder] = {}
DPIS: dict[str, int] = {}


def figure(name: str, dpi: int = DPI) -> Callable[[Builder], Builder]:
    """Register a builder under the file name it writes (without ``.png``)."""

    def register(fn: Builder) -> Builder:
        if name in REGISTRY:
            raise ValueError(f"figure {name!r} is registered twice")
        REGISTRY[name], DPIS[name] = fn, dpi
        return fn

    return register


# --- notebook 01 -------------------------------------------------------------------------------
@figure("tokenization")
def tokenization() -> Figure:
    """Notebook 01's sentence as characters, words and BPE tokens (512-token BPE on 100k pydoc chars)."""
    from matplotlib.patches import Rectangle

    from helpers.bpe import BPETokenizer
    from helpers.data import load_corpus
    from helpers.tokenizers import CharTokenizer, WordTokenizer

    sentence = "The assert statement raises an exception."
    bpe = BPETokenizer.train(load_corpus()[:100_000], vocab_size=512)
    chars = CharTokenizer.from_text(sentence)
    words = WordTokenizer.from_texts([sentence], specials=())
    rows = [  # (label, pieces): every row's pieces cover the sentence, so boxes line up by character
        ("characters", [chars.decode([i]) for i in chars.encode(sentence)]),
        ("words", [words.id_to_token(i) for i in words.encode(sentence)]),
        ("BPE (512)", [bpe.token_bytes(i).decode("utf-8") for i in bpe.encode(sentence)]),
    ]
    assert "".join(rows[0][1]) == "".join(rows[2][1]) == sentence
    assert " ".join(rows[1][1]) == sentence
    colors = ["#a6cee3", "#fdbf6f", "#b2df8a", "#fb9a99", "#cab2d6", "#ffff99"]
    fig = Figure(figsize=(8, 2.2), layout="constrained")
    ax = fig.add_subplot()
    for r, (label, pieces) in enumerate(rows):
        y, start = len(rows) - 1 - r, 0
        for k, piece in enumerate(pieces):
            start = sentence.index(piece, start)  # words skip the spaces between them
            ax.add_patch(Rectangle((start + 0.06, y + 0.12), len(piece) - 0.12, 0.76,
                                   facecolor=colors[k % len(colors)], edgecolor="0.3", lw=0.6))  # fmt: skip
            ax.text(start + len(piece) / 2, y + 0.5, piece.replace(" ", "·"), ha="center",
                    va="center", family="DejaVu Sans Mono", fontsize=9)  # fmt: skip
            start += len(piece)
        ax.text(-0.8, y + 0.5, f"{label}\n{len(pieces)} tokens", ha="right", va="center", fontsize=9)
    ax.set(xlim=(-9, len(sentence) + 0.2), ylim=(0, len(rows)))
    ax.set_axis_off()
    ax.set_title("One sentence, three tokenizers (· = space)", fontsize=10)
    return fig


# --- notebook 02 -------------------------------------------------------------------------------
@figure("embeddings")
def embeddings() -> Figure:
    """Notebook 02: untrained embeddings are nearly orthogonal; ×√d_model sets their scale vs the PE."""
    from helpers.embeddings import TokenEmbedding
    from helpers.positional import sinusoidal_table

    d_model, scale = 512, math.sqrt(512)
    vocab = ["what", "is", "statquest", "awesome", "<EOS>"]
    unit = F.normalize(nn.Embedding(len(vocab), d_model).weight.detach(), dim=1)  # (V, C), unit rows
    cos = unit @ unit.T  # (V, C) @ (C, V) -> (V, V)
    fig = Figure(figsize=(8, 3.2), layout="constrained")
    ax_cos, ax_rms = fig.subplots(1, 2, width_ratios=[1, 1.2])
    heatmap(cos, ax=ax_cos, xticklabels=vocab, yticklabels=vocab, vmin=-1, vmax=1, cmap="RdBu_r",
            colorbar=False, title=f"cosine similarity, random {d_model}-d vectors")  # fmt: skip
    for (r, c), v in np.ndenumerate(cos.numpy()):  # heatmap's own labels would be white on white
        ax_cos.text(c, r, f"{v:.2f}".replace("-0.00", "0.00"), ha="center", va="center", fontsize=8, color="white" if v > 0.5 else "black")
    ax_cos.tick_params(axis="x", labelrotation=30)

    def rms(t: torch.Tensor) -> float:
        return t.pow(2).mean().sqrt().item()

    small = TokenEmbedding(1000, d_model)
    nn.init.normal_(small.weight, std=d_model**-0.5)
    bars = {  # what is added to the positional encoding, root mean square of its entries
        "PE": rms(sinusoidal_table(100, d_model)),
        "N(0, 1/d) init\n× √d": rms(small.weight * small.scale),
        "nn.Linear init\n× √d (tied)": rms(nn.Linear(d_model, 1000, bias=False).weight * scale),
        "N(0, 1) init\n× √d": rms(TokenEmbedding(1000, d_model).weight * scale),
    }
    ax_rms.bar(range(len(bars)), list(bars.values()), color=["0.6", "tab:green", "tab:green", "tab:red"])
    for i, v in enumerate(bars.values()):
        ax_rms.text(i, v * 1.15, f"{v:.2f}", ha="center", fontsize=8)
    ax_rms.set_xticks(range(len(bars)), labels=list(bars), fontsize=8)
    ax_rms.set(yscale="log", ylim=(0.1, 100), ylabel="rms of the entries",
               title=f"embedding scale vs PE (d_model = {d_model})")  # fmt: skip
    return fig


# --- notebook 03 -------------------------------------------------------------------------------
@figure("pe_heatmap")
def pe_heatmap() -> Figure:
    from helpers.positional import sinusoidal_table

    table = sinusoidal_table(64, 128)  # (T, C) = (64, 128)
    return heatmap(table, title="Sinusoidal PE: 64 positions x 128 dimensions", xlabel="dimension",
                   ylabel="position", cmap="RdBu_r", vmin=-1, vmax=1, figsize=(7, 3.5))  # fmt: skip


@figure("pe_explorer_default")
def pe_explorer_default() -> Figure:
    from helpers.widgets import pe_explorer

    return pe_explorer().figure


# --- notebook 04 -------------------------------------------------------------------------------
@figure("causal_mask")
def causal_mask_figure() -> Figure:
    """Notebook 04's causal mask and masked weights, for 我 喜 欢 你 。 with seeded random scores."""
    tokens = ["我", "喜", "欢", "你", "。"]
    T = len(tokens)
    mask = causal_mask(T)  # (T, T) bool
    scores = torch.randn(T, T, generator=torch.Generator().manual_seed(0))  # (T, T)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (T, T)
    fig = Figure(figsize=(7, 3), layout="constrained")
    ax_mask, ax_w = fig.subplots(1, 2)
    draw_weights(ax_mask, mask.float(), tokens, title="causal mask (1 = may attend)", annotate=False)
    draw_weights(ax_w, weights, tokens, title="weights after the mask")
    return fig


@figure("attention_heads")
def attention_heads() -> Figure:
    from helpers.widgets import attention_explorer

    model = attention_explorer().model
    return attention_heads_figure(model.weights(["我", "爱", "你"]), ["我", "爱", "你"])  # (H, T, T)


@figure("attention_explorer_default")
def attention_explorer_default() -> Figure:
    from helpers.widgets import attention_explorer

    return attention_explorer().figure


# --- notebooks 05 and 06 -----------------------------------------------------------------------
@figure("architecture", dpi=100)  # small labels: 7.5 pt needs the extra pixels
def architecture() -> Figure:
    from helpers.diagram import architecture_figure

    return architecture_figure(norm_first=False)


@figure("05_grad_norms")
def grad_norms() -> Figure:
    """Per-layer gradient norms at initialisation, 12-layer post-LN vs pre-LN (notebook 05)."""
    from helpers.stacks import Encoder

    def layer_grad_norms(norm_first: bool, n_layers: int = 12, C: int = 64, V: int = 100) -> torch.Tensor:
        set_seed(0)
        enc = Encoder(n_layers, C, 4, 4 * C, dropout=0.0, norm_first=norm_first)
        for p in enc.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        head = nn.Linear(C, V)
        x, y = torch.randn(8, 16, C), torch.randint(0, V, (8, 16))  # (B, T, C), (B, T)
        F.cross_entropy(head(enc(x)).flatten(0, 1), y.flatten()).backward()  # (B*T, V)
        return torch.stack([torch.cat([p.grad.flatten() for p in layer.parameters()]).norm()
                            for layer in enc.layers])  # fmt: skip

    g_post, g_pre = layer_grad_norms(False), layer_grad_norms(True)
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    ax.plot(range(1, 13), g_post, "o-", label="post-LN (paper)")
    ax.plot(range(1, 13), g_pre, "s-", label="pre-LN (GPT-2)")
    ax.set(xlabel="layer (1 = next to the input)", ylabel="gradient norm", title="Gradients at initialisation")
    ax.legend()
    return fig


# --- notebook 07 -------------------------------------------------------------------------------
@figure("cross_attention")
def cross_attention() -> Figure:
    """Cross-attention of notebook 07's digit-reversal Transformer, retrained with its CPU settings."""
    from helpers.models import Transformer
    from helpers.training import TrainConfig, train

    n, bos, eos = 8, 10, 11  # 8 digits; ids 0-9 are the digits themselves

    def reversal_batch(batch_size: int, generator: torch.Generator):
        src = torch.randint(0, 10, (batch_size, n), generator=generator)  # (B, n)
        ends = torch.full((batch_size, 1), bos), torch.full((batch_size, 1), eos)
        return src, torch.cat([ends[0], src.flip(1), ends[1]], dim=1)  # (B, n + 2)

    def seq2seq_loss(model, batch):
        src, tgt = batch
        logits = model(src, tgt[:, :-1])  # (B, n), (B, n+1) -> (B, n+1, V)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())  # (B*(n+1), V)

    set_seed(0)
    model = Transformer(12, 12, d_model=64, n_heads=4, n_layers=1, d_ff=128, dropout=0.0, max_len=n + 2,
                        norm_first=True)  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    config = TrainConfig(max_steps=300, lr=3e-3, warmup_steps=30, min_lr=3e-4, weight_decay=0.01,
                         eval_interval=75, eval_iters=2, progress=False)  # fmt: skip
    train(model, lambda split: reversal_batch(64, gen), config, loss_fn=seq2seq_loss)
    test_src, test_tgt = reversal_batch(100, torch.Generator().manual_seed(12345))
    with torch.no_grad():
        _, weights = model(test_src, test_tgt[:, :-1], return_weights=True)
    cross = weights.decoder_cross  # (L, B, H, T, S)
    H = cross.shape[2]
    top = cross[..., :n, :].argmax(dim=-1)  # (L, B, H, n, S) -> (L, B, H, n)
    hit_rate = (top == torch.arange(n - 1, -1, -1)).float().mean(dim=(1, 3))  # (L, H)
    best_layer, best = divmod(int(hit_rate.argmax()), H)
    src_labels = [str(d) for d in test_src[0].tolist()]
    out_labels = [str(d) for d in test_tgt[0, 1:-1].tolist()] + ["<EOS>"]
    fig = Figure(figsize=(8, 2.6), layout="constrained")
    for h, ax in enumerate(fig.subplots(1, H)):
        heatmap(cross[best_layer, 0, h], ax=ax, xticklabels=src_labels, yticklabels=out_labels, vmin=0,
                vmax=1, colorbar=False, title=f"head {h}" + (" (best)" if h == best else ""),
                xlabel="input digit")  # fmt: skip
    fig.axes[0].set_ylabel("predicting")
    fig.suptitle(f"decoder cross-attention, layer {best_layer}", fontsize=10)
    return fig


@figure("training_curves")
def training_curves() -> Figure:
    """Loss curves of notebook 07's character-level GPT on pydoc, retrained with its CPU settings."""
    from helpers.data import get_batch, load_corpus, train_val_split
    from helpers.models import GPT, GPTConfig
    from helpers.plots import loss_curves
    from helpers.tokenizers import CharTokenizer
    from helpers.training import TrainConfig, train

    text = load_corpus("pydoc")
    tok = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tok.encode(text)), val_fraction=0.1)  # (N,)
    V = tok.vocab_size
    counts = torch.ones(V, V)  # add-one smoothed bigram counts: the baseline to beat
    counts.index_put_((train_data[:-1], train_data[1:]), torch.ones(len(train_data) - 1), accumulate=True)
    log_probs = (counts / counts.sum(dim=1, keepdim=True)).log()  # (V, V)
    bigram_val = -log_probs[val_data[:-1], val_data[1:]].mean().item()

    set_seed(0)
    model = GPT(GPTConfig(vocab_size=V, block_size=64, d_model=64, n_heads=4, n_layers=2))
    gen, splits = torch.Generator().manual_seed(0), {"train": train_data, "val": val_data}
    config = TrainConfig(max_steps=600, lr=3e-3, warmup_steps=30, min_lr=3e-4, eval_interval=100,
                         eval_iters=10, progress=False)  # fmt: skip
    history = train(model, lambda split: get_batch(splits[split], 64, 32, generator=gen), config)
    return loss_curves(history, baseline=bigram_val, baseline_label="bigram baseline (val)",
                       title="Character-level GPT on pydoc")  # fmt: skip


def render_figure(name: str) -> tuple[bytes, Figure]:
    """The PNG bytes of one figure and the Figure itself, built from a fixed seed on one CPU thread."""
    if name not in REGISTRY:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(sorted(REGISTRY))}")
    set_seed(0)
    # The default style (not the user's matplotlibrc) and pinyin tick labels even where a CJK font
    # is installed: the committed bytes must not depend on the machine that ran `make figures`.
    with matplotlib.style.context("default"), mock.patch("helpers.attention_plots.cjk_font", lambda: None):
        fig = REGISTRY[name]()
        png = figure_to_png(fig, dpi=DPIS[name])
    if len(png) > MAX_BYTES:
        raise ValueError(f"{name}.png is {len(png):,} bytes, over the {MAX_BYTES:,} limit")
    return png, fig


def render(name: str) -> bytes:
    """The PNG bytes of one figure, built from a fixed seed on one CPU thread."""
    return render_figure(name)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="figures to build (default: all)")
    parser.add_argument("--out", type=Path, default=FIGURES, help=f"output folder (default: {FIGURES})")
    parser.add_argument("--list", action="store_true", help="print the figure names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(REGISTRY))
        return 0
    unknown = [n for n in args.names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown figure(s): {', '.join(unknown)}; see --list")
    args.out.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    for name in args.names or REGISTRY:
        start = time.perf_counter()
        png = render(name)
        with atomic_write(args.out / f"{name}.png") as f:
            f.write(png)
        print(f"{name + '.png':32} {len(png) / 1000:6.1f} kB  {time.perf_counter() - start:5.1f} s")
    print(f"{'total':32} {'':9} {time.perf_counter() - total:5.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
