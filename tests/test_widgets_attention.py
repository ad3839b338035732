"""The attention explorer, driven headless: every control changes the plotted data and the PNG."""

import doctest
import io
import math
import warnings

import ipywidgets as widgets
import pytest
import torch

import helpers.widgets.attention as explorer_module
from helpers.attention_plots import attention_heads_figure, draw_query_bars, token_labels
from helpers.widgets import attention_explorer
from helpers.widgets.attention import build_demo_model, split_tokens


@pytest.fixture(scope="module")
def explorer():
    return attention_explorer()


def _state(ex):
    return ex.weights.clone(), ex.query_weights.clone(), ex.image.value


def test_doctest():
    assert doctest.testmod(explorer_module).failed == 0


def test_default_state_and_short_deterministic_repr():
    ex = attention_explorer()
    assert isinstance(ex.widget, widgets.VBox) and all(isinstance(i, widgets.Image) for i in ex.panels.images)
    assert ex.image.value[:8] == b"\x89PNG\r\n\x1a\n" and ex.image.width == "640" and ex.image.height == "280"
    assert len(ex.panels.images) == 2 and sum(int(i.width) for i in ex.panels.images) == 640  # heatmap | bars
    assert ex.tokens == ["我", "爱", "你"] and ex.weights.shape == (3, 3) and ex.query_weights.shape == (3,)
    for control in (ex.head, ex.temperature, ex.query):
        assert control.continuous_update is True  # live while dragging, throttled
    text = repr(ex)
    assert text == "AttentionExplorer(sentence='我 爱 你', head=0, temperature=1.00, causal=False, positions=True, query=2)"
    bundle = ex._repr_mimebundle_()
    assert bundle["text/plain"] == text
    assert repr(attention_explorer()) == text and torch.equal(attention_explorer().weights, ex.weights)
    assert ex.last_update_s > 0


def test_plotted_weights_are_the_models_multi_head_weights(explorer):
    explorer.temperature.value, explorer.causal.value = 1.0, False
    model, tokens = explorer.model, explorer.tokens
    ids = torch.tensor([[model.index[t] for t in tokens]])
    with torch.no_grad():
        x = model.positions(model.embedding(ids))
        _, w = model.attention(x, x, x, return_weights=True)
    torch.testing.assert_close(explorer.weights, w[0, explorer.head.value], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("control", "value"),
    [("sentence", "the cat sat on the mat"), ("head", 2), ("temperature", 0.2), ("causal", True), ("query", 0)],
)
def test_each_control_changes_plot(control, value):
    ex = attention_explorer()
    before = _state(ex)
    getattr(ex, control).value = value
    after = _state(ex)
    assert after[2] != before[2], "PNG did not change"
    if control == "query":  # same matrix, another row
        assert torch.equal(after[0], before[0]) and torch.equal(after[1], after[0][0])
        assert not torch.equal(after[1], before[1])
    else:
        assert after[0].shape != before[0].shape or not torch.equal(after[0], before[0])


def test_causal_temperature_and_rows(explorer):
    explorer.sentence.value = "the dog chased the cat"
    explorer.causal.value = True
    w = explorer.weights
    assert (w.triu(diagonal=1) == 0).all() and w[0, 0] == 1
    torch.testing.assert_close(w.sum(-1), torch.ones(5))
    explorer.temperature.value = 10.0
    hot = explorer.weights
    explorer.temperature.value = 0.1
    cold = explorer.weights
    assert (hot[4] - 0.2).abs().max() < (cold[4] - 0.2).abs().max()  # high temperature: closer to uniform
    assert cold[4].max() > hot[4].max()
    assert torch.equal(explorer.query_weights, cold[explorer.query.value])
    explorer.causal.value = False
    explorer.temperature.value = 1.0


def test_shorter_sentence_moves_the_query_slider():
    ex = attention_explorer()
    ex.sentence.value = "the cat sat on the mat"
    ex.query.value = 5
    ex.sentence.value = "你 爱 我"
    assert ex.query.max == 2 and ex.query.value == 2 and ex.weights.shape == (3, 3)
    assert torch.equal(ex.query_weights, ex.weights[2])


def test_no_warnings_with_chinese_tokens_and_global_rng_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing-glyph warning would fail strict nbval
        ex = attention_explorer(["我 喜 欢 猫 。", "我爱你"])
        ex.sentence.value = "我爱你"
        attention_heads_figure(ex.model.weights(ex.tokens), ex.tokens).savefig(io.BytesIO())
    assert torch.equal(torch.rand(3), expected)
    assert ex.tokens == ["我", "爱", "你"]


def test_token_labels_and_split():
    assert split_tokens("the cat") == ["the", "cat"] and split_tokens("我爱你") == ["我", "爱", "你"]
    assert split_tokens("我 喜欢 你") == ["我", "喜欢", "你"]
    labels = token_labels(["我", "cat", "鑫"])
    assert labels[1] == "cat" and len(labels) == 3
    assert labels in (["我", "cat", "鑫"], ["wǒ", "cat", "U+946B"])


def test_demo_model_weights_sum_to_one_and_bad_args():
    model = build_demo_model(["a b c"], d_model=8, n_heads=2, seed=1)
    w = model.weights(["a", "b", "c", "a"], temperature=0.5)
    assert w.shape == (2, 4, 4)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4))
    with pytest.raises(ValueError, match="unknown"):
        model.weights(["a", "zzz"])
    with pytest.raises(ValueError, match="temperature"):
        model.weights(["a"], temperature=0.0)
    with pytest.raises(ValueError, match="temperature"):
        model.weights(["a"], temperature=math.inf)


def test_explorer_bad_arguments():
    with pytest.raises(TypeError, match="sentences"):
        attention_explorer("the cat")
    with pytest.raises(ValueError, match="sentences"):
        attention_explorer([])
    with pytest.raises(ValueError, match="sentences"):
        attention_explorer(["  "])
    with pytest.raises(ValueError, match="12 tokens"):
        attention_explorer([" ".join("abcdefghijklm")])
    with pytest.raises(ValueError, match="not divisible"):
        attention_explorer(n_heads=3)
    with pytest.raises(ValueError, match="even"):
        attention_explorer(d_model=15, n_heads=3)
    with pytest.raises(TypeError, match="width"):
        attention_explorer(width=640.0)
    with pytest.raises(ValueError, match="seed"):
        attention_explorer(seed=-1)
    with pytest.raises(ValueError, match="row"):
        draw_query_bars(None, torch.ones(2), ["a", "b", "c"])
    with pytest.raises(ValueError, match="weights"):
        attention_heads_figure(torch.ones(2, 3, 3), ["a", "b"])


def test_positions_off_makes_reordered_sentences_indistinguishable():
    # Without positions, 你爱我 is 我爱你 with its tokens permuted, and so are the weights:
    # attention alone cannot tell the two sentences apart (the notebook-03 result).
    ex = attention_explorer()
    ex.positions.value = False
    w_a = ex.model.weights(["我", "爱", "你"], positions=False)
    w_b = ex.model.weights(["你", "爱", "我"], positions=False)
    perm = [2, 1, 0]
    torch.testing.assert_close(w_b, w_a[:, perm][:, :, perm])
    assert not torch.allclose(ex.model.weights(["你", "爱", "我"]), ex.model.weights(["我", "爱", "你"])[:, perm][:, :, perm])
    assert "no positions" in ex.figure.axes[0].get_title()


def test_cell_numbers_bars_and_row_frame_follow_the_controls_in_place():
    ex = attention_explorer()
    ex.sentence.value = "the cat sat on the mat"
    axes = ex.ax_heat
    ex.temperature.value, ex.causal.value, ex.query.value = 0.5, True, 2
    assert ex.ax_heat is axes  # same axes: only data changed
    T = len(ex.tokens)
    assert [t.get_text() for t in ex._cells] == [f"{v:.2f}" for v in ex.weights.flatten().tolist()]
    assert [b.get_height() for b in ex._bars] == pytest.approx(ex.query_weights.tolist())
    assert ex._row.get_y() == 1.5 and ex._row.get_width() == T
    assert "causal" in ex.ax_heat.get_title() and "0.50" in ex.ax_heat.get_title()
