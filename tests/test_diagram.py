"""The architecture diagram: a Figure whose labels, read bottom-up, are the right layer order."""

from __future__ import annotations

import warnings

import pytest
from matplotlib.figure import Figure

from helpers.diagram import architecture_figure
from helpers.plots import figure_to_png

ENC_X, DEC_X = 4.0, 11.6  # column centres in the diagram's data coordinates


def texts(fig: Figure) -> list:
    return [t for ax in fig.axes for t in ax.texts]


def column(fig: Figure, x: float) -> list[str]:
    """The labels centred on one column, from bottom to top."""
    col = [t for t in texts(fig) if abs(t.get_position()[0] - x) < 1e-9 and t.get_text()]
    return [t.get_text() for t in sorted(col, key=lambda t: t.get_position()[1])]


POST_ENC = ["Inputs", "Input embedding × √d_model", "+",
            "Multi-head self-attention", "Add & Norm", "Feed-forward", "Add & Norm"]  # fmt: skip
POST_DEC = ["Outputs (shifted right)", "Output embedding × √d_model", "+",
            "Masked multi-head self-attention", "Add & Norm", "Multi-head cross-attention", "Add & Norm",
            "Feed-forward", "Add & Norm", "Linear", "Softmax", "Output probabilities"]  # fmt: skip
PRE_ENC = ["Inputs", "Input embedding × √d_model", "+",
           "LayerNorm", "Multi-head self-attention", "+", "LayerNorm", "Feed-forward", "+",
           "Final LayerNorm"]  # fmt: skip
PRE_DEC = ["Outputs (shifted right)", "Output embedding × √d_model", "+",
           "LayerNorm", "Masked multi-head self-attention", "+",
           "LayerNorm", "Multi-head cross-attention", "+",
           "LayerNorm", "Feed-forward", "+",
           "Final LayerNorm", "Linear", "Softmax", "Output probabilities"]  # fmt: skip


SUBLAYERS = {"Multi-head self-attention", "Masked multi-head self-attention", "Multi-head cross-attention",
             "Feed-forward"}  # fmt: skip


def test_returns_a_small_figure():
    for norm_first in (False, True):
        fig = architecture_figure(norm_first)
        assert isinstance(fig, Figure)
        w, h = fig.get_size_inches()
        assert w == 8.0 and 3.0 < h <= 5.0
        assert len(figure_to_png(fig)) < 200_000


def test_post_ln_is_the_paper():
    fig = architecture_figure()
    assert column(fig, ENC_X) == POST_ENC
    assert column(fig, DEC_X) == POST_DEC
    labels = [t.get_text() for t in texts(fig)]
    assert "LayerNorm" not in labels and "Final LayerNorm" not in labels
    assert labels.count("Positional\nencoding") == 2 and labels.count("N×") == 2
    assert "K, V\n(memory)" in labels and any("post-LN" in s for s in labels)


def test_pre_ln_norms_before_each_sublayer_and_at_the_end():
    fig = architecture_figure(norm_first=True)
    assert column(fig, ENC_X) == PRE_ENC
    assert column(fig, DEC_X) == PRE_DEC
    labels = [t.get_text() for t in texts(fig)]
    assert "Add & Norm" not in labels and any("pre-LN" in s for s in labels)


def test_final_norm_can_be_drawn_with_post_ln():
    # helpers.transformer.Transformer and nn.Transformer put a final norm on both stacks.
    fig = architecture_figure(norm_first=False, final_norm=True)
    assert column(fig, ENC_X) == [*POST_ENC, "Final LayerNorm"]
    assert column(fig, DEC_X)[-4:] == ["Final LayerNorm", "Linear", "Softmax", "Output probabilities"]


@pytest.mark.parametrize("norm_first", [False, True])
def test_each_residual_path_skips_exactly_one_sublayer(norm_first):
    fig = architecture_figure(norm_first)
    ax = fig.axes[0]
    residuals = [ln for ln in ax.lines if len(ln.get_xdata()) == 3]  # out, up, (arrow back in)
    assert len(residuals) == 5  # 2 encoder + 3 decoder sublayers
    for ln in residuals:
        x, (y_from, _, y_to) = ln.get_xdata()[0], ln.get_ydata()
        inside = sorted((t.get_position()[1], t.get_text()) for t in ax.texts if t.get_text()
                        and abs(t.get_position()[0] - x) < 1e-9 and y_from < t.get_position()[1] <= y_to + 1e-9)
        skipped = [label for _, label in inside]
        if norm_first:  # x + sublayer(LayerNorm(x))
            assert len(skipped) == 3 and skipped[0] == "LayerNorm" and skipped[2] == "+", skipped
        else:  # LayerNorm(x + sublayer(x))
            assert len(skipped) == 2 and skipped[1] == "Add & Norm", skipped
        assert skipped[-2] in SUBLAYERS


def test_draws_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Glyph ... missing from font": none of the labels may need it
        figure_to_png(architecture_figure(True))


@pytest.mark.parametrize("bad", [1, 0, None, "yes"])
def test_norm_first_must_be_bool(bad):
    with pytest.raises(TypeError, match="norm_first"):
        architecture_figure(bad)


def test_final_norm_and_width_are_checked():
    with pytest.raises(TypeError, match="final_norm"):
        architecture_figure(False, final_norm=1)
    with pytest.raises(TypeError, match="width"):
        architecture_figure(width="8")
    with pytest.raises(ValueError, match="width"):
        architecture_figure(width=0.5)
