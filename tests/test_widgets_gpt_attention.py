"""The trained-model attention explorer, driven headless."""

import math

import pytest
import torch

from helpers.models import GPT, GPTConfig
from helpers.tokenizers import CharTokenizer
from helpers.widgets.gpt_attention import gpt_attention_explorer, queries_and_keys

TEXT = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def parts():
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    model = GPT(GPTConfig(tok.vocab_size, block_size=16, d_model=16, n_heads=2, n_layers=2))
    with torch.no_grad():  # sharper than the 0.02 init, so weights differ visibly between heads
        for block in model.blocks:
            block.self_attn.q_proj.weight.normal_(0, 0.5)
            block.self_attn.k_proj.weight.normal_(0, 0.5)
    return model, tok


def test_weights_equal_the_models_own(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    with torch.no_grad():
        expected = model.attention_weights(torch.tensor([tok.encode("return x")]))[:, 0]  # (L, H, T, T)
    torch.testing.assert_close(ex.weights, expected, atol=1e-6, rtol=0)


def test_terms_sum_to_the_score_and_the_weight_is_its_softmax(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    ex.layer.value, ex.head.value, ex.query.value, ex.key.value = 1, 1, 5, 2
    assert math.isclose(float(ex.terms.sum()), ex.score, rel_tol=1e-5, abs_tol=1e-6)
    row = ex.scores[1, 1, 5, :6]
    assert math.isclose(ex.weight, float(torch.softmax(row, -1)[2]), rel_tol=1e-5)


def test_query_cannot_look_ahead_and_controls_redraw(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    ex.key.value = 7
    ex.query.value = 3
    assert ex.key.value == 3  # moved back: a causal query sees keys 0..3 only
    assert float(ex.weights[:, :, 3, 4:].sum()) == 0.0
    png = ex.image.value
    ex.head.value = 0 if ex.head.value else 1
    assert ex.image.value != png


def test_text_box_reruns_the_model_and_names_unknown_characters(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="def")
    ex.text.value = "def 猫(x)"
    assert "猫" in ex.status.text and ex.chars == list("def (x)")
    assert ex.weights.shape[-1] == 7 and ex.query.max == 6
    ex.text.value = TEXT * 2  # cropped to block_size
    assert len(ex.chars) == model.config.block_size


def test_queries_and_keys_leave_no_hooks(parts):
    model, tok = parts
    q, k = queries_and_keys(model, torch.tensor([tok.encode("def")]))
    assert q.shape == k.shape == (2, 2, 3, 8)
    assert all(not block.self_attn._forward_pre_hooks for block in model.blocks)


@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"text": 1}, TypeError, "text"), ({"width": 10}, ValueError, "width"), ({"height": 10}, ValueError, "height"),
])  # fmt: skip
def test_bad_arguments_are_named(parts, kw, err, match):
    model, tok = parts
    with pytest.raises(err, match=match):
        gpt_attention_explorer(model, tok, **kw)
    with pytest.raises(TypeError, match="model"):
        gpt_attention_explorer(None, tok)
    with pytest.raises(ValueError, match="vocab_size"):
        gpt_attention_explorer(model, CharTokenizer.from_text("ab"))


def test_grid_holds_every_layer_and_head_and_the_frame_follows_the_sliders(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    L, H, T = ex.weights.shape[:3]
    grid = ex.grid_image.get_array()
    assert grid.shape == (L * T, H * T)
    for layer in range(L):
        for h in range(H):  # tile (layer, h) is that head's weight matrix
            tile = grid[layer * T : (layer + 1) * T, h * T : (h + 1) * T]
            torch.testing.assert_close(torch.as_tensor(tile), ex.weights[layer, h], atol=0, rtol=0)
    ex.layer.value, ex.head.value = 0, 1
    assert ex.frame.get_xy() == (1, 0)
    torch.testing.assert_close(torch.as_tensor(ex.big_image.get_array()), ex.weights[0, 1], atol=0, rtol=0)
    ex.text.value = "ret"  # a shorter text: the same axes, new data and ticks
    assert ex.grid_image.get_array().shape == (L * 3, H * 3)
    assert [t.get_text() for t in ex.ax_big.get_xticklabels()] == ["r", "e", "t"]


def test_a_slider_with_one_value_is_greyed_out_and_comes_back(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="r")  # one character: one query, one key
    assert ex.query.disabled and ex.key.disabled and not ex.head.disabled
    ex.text.value = "ret"
    assert not ex.query.disabled and not ex.key.disabled


def test_the_key_slider_stops_at_the_query(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    ex.query.value = 3
    assert ex.key.max == 3
    ex.key.value = 7  # what dragging to the end does: it stops at the query
    assert ex.key.value == 3 and math.isfinite(ex.score)
    ex.query.value = 0
    assert ex.key.value == 0 and ex.key.disabled
    calls = []
    ex.update = lambda: calls.append(1)
    ex.query.value = 5
    assert len(calls) == 1  # one redraw for one move, the key's new range included


def test_the_large_map_can_show_the_scores_before_softmax(parts):
    model, tok = parts
    ex = gpt_attention_explorer(model, tok, text="return x")
    ex.layer.value, ex.head.value = 1, 0
    ex.scores_view.value = True
    shown = torch.as_tensor(ex.big_image.get_array().filled(math.nan))  # (T, T), NaN where masked
    future = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)
    assert shown[future].isnan().all()
    torch.testing.assert_close(shown[~future], ex.scores[1, 0][~future].float(), atol=1e-6, rtol=0)
    low, high = ex.big_image.get_clim()
    assert low == -high == -float(ex.scores[1, 0][~future].abs().max())
    ex.scores_view.value = False
    torch.testing.assert_close(torch.as_tensor(ex.big_image.get_array()), ex.weights[1, 0], atol=0, rtol=0)
    assert ex.big_image.get_clim() == (0, 1)


def test_with_no_model_it_loads_the_shipped_one():  # so the explorer cell runs on its own after a restart
    from helpers.pretrained import load_pretrained
    from helpers.widgets import gpt_attention_explorer, next_token_explorer

    model, tok = load_pretrained("char_gpt")
    ex = gpt_attention_explorer(text="def f(x):")
    torch.testing.assert_close(ex.weights, model.attention_weights(torch.tensor([tok.encode("def f(x):")]))[:, 0])
    nt = next_token_explorer(prompt="def ")
    assert nt.tokenizer.chars == tok.chars
    with pytest.raises(TypeError, match="model must be a helpers GPT"):
        gpt_attention_explorer(None, tok)
