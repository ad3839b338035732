"""The cross-attention explorer of an encoder-decoder Transformer, driven headless."""

import doctest
import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import helpers.widgets.cross_attention as module
from helpers import check_close
from helpers.models import GPT, GPTConfig, Transformer
from helpers.plots import figure_to_png
from helpers.widgets import cross_attention_explorer

BOS, EOS = 10, 11


def tiny(n_digits: int = 4, eos_bias: float = -20.0) -> Transformer:
    """An untrained 2-layer, 2-head model; a low <EOS> logit makes it write all n + 1 tokens."""
    torch.manual_seed(0)
    model = Transformer(12, 12, d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0, max_len=n_digits + 2,
                        norm_first=True)  # fmt: skip
    with torch.no_grad():  # sharper than Xavier, so heads and rows differ visibly
        for layer in model.decoder.layers:
            layer.cross_attn.q_proj.weight.mul_(4)
        model.head.bias[EOS] = eos_bias
    return model


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


def test_weights_are_the_models_own_for_its_own_output():
    model = tiny()
    ex = cross_attention_explorer(model, source="1234")
    src = torch.tensor([[1, 2, 3, 4]])
    out = model.greedy_decode(src, max_len=6, bos_id=BOS, eos_id=EOS)  # (1, 6)
    assert not torch.equal(out[0, 1:-1], src[0].flip(0)), "untrained: its output is not the reverse"
    with torch.no_grad():
        _, w = model(src, out[:, :-1], return_weights=True)
    assert torch.equal(ex.output, out)
    check_close("explorer vs decoder_cross", ex.weights, w.decoder_cross[:, 0], atol=1e-6, quiet=True)
    assert ex.weights.shape == (2, 2, 5, 4)
    layer, head = ex.layer.value, ex.head.value
    np.testing.assert_allclose(ex.big_image.get_array(), ex.weights[layer, head].numpy())
    thumbs = np.asarray(ex.thumb_image.get_array(), dtype=np.float64)  # rows: layers, NaN gaps between tiles
    np.testing.assert_allclose(thumbs[6:11, 5:9], ex.weights[1, 1].numpy(), rtol=1e-6)
    assert np.isnan(thumbs[5]).all() and np.isnan(thumbs[:, 4]).all()
    assert [t.get_text() for t in ex.big_y] == [str(i) if i < 10 else "<EOS>" for i in out[0, 1:].tolist()]
    assert [t.get_text() for t in ex.big_x] == list("1234")


def test_each_control_changes_the_plotted_data():
    ex = cross_attention_explorer(tiny(), source="1234", layer=0, head=0)
    for control, value in ((ex.layer, 1), (ex.head, 1), (ex.row, 3), (ex.layer, 0), (ex.row, 1)):
        png, frame, band = ex.image.value, ex.frame.get_xy(), ex.band.get_y()
        control.value = value
        layer, head, row = ex.layer.value, ex.head.value, ex.row.value
        assert ex.image.value != png
        np.testing.assert_allclose(ex.big_image.get_array(), ex.weights[layer, head].numpy())
        np.testing.assert_allclose([b.get_height() for b in ex.bars], ex.weights[layer, head, row].numpy(), rtol=1e-6)
        assert ex.frame.get_xy() == (head * 5 - 0.5, layer * 6 - 0.5) and ex.band.get_y() == row - 0.5
        assert (ex.frame.get_xy() != frame) or (ex.band.get_y() != band)
    assert ex.bars[4 - 1 - 1].get_facecolor() != ex.bars[0].get_facecolor()  # row 1's input to read is orange


def test_the_picture_equals_a_full_render():
    ex = cross_attention_explorer(tiny(), source="9876")
    ex.head.value, ex.row.value, ex.text.value = 1, 2, "5555"
    ex.layer.value = 0
    assert np.array_equal(pixels(ex.image.value), pixels(figure_to_png(ex.figure, dpi=80, fast=True)))
    figure_to_png(ex.figure, dpi=40)  # a renderer of another size: the next redraw starts afresh
    ex.row.value = 4
    assert np.array_equal(pixels(ex.image.value), pixels(figure_to_png(ex.figure, dpi=80, fast=True)))


@pytest.mark.parametrize(("text", "used", "words"), [
    ("1234", "1234", []),
    ("12a3b4", "1234", ["skipped", "a b"]),
    ("12", "1200", ["2 characters typed", "padded with 0"]),
    ("", "0000", ["0 characters typed"]),
    ("123456789", "1234", ["9 characters typed", "the first 4"]),
    ("猫 1\n2x<EOS>", "1200", ["猫", "␣", "\\n", "<", "E"]),
])  # fmt: skip
def test_text_box_never_raises_and_says_what_was_used(text, used, words):
    ex = cross_attention_explorer(tiny(), source="1234")
    ex.text.value = text
    assert ex.used == used and ex.src.shape == (1, 4)
    assert all(word in ex.status.text for word in words), ex.status.text
    assert (f"source used: {used}" in ex.status.text) == bool(words)
    assert ex.status.text.startswith(f"model writes: {ex.written}, the reverse is {used[::-1]} ")


def test_a_shorter_output_clamps_the_row():
    model = tiny()
    ex = cross_attention_explorer(model, source="1234")
    ex.row.value = 4
    with torch.no_grad():
        model.head.bias[EOS] = 50.0  # now it writes <EOS> at once
    ex.text.value = "4321"
    assert ex.written == "<EOS>" and ex.row.max == ex.row.value == 0 and not ex.correct
    assert ex.weights.shape == (2, 2, 1, 4) and ex.big_image.get_array().shape == (1, 4)
    assert [t.get_text() for t in ex.big_y] == ["<EOS>", "", "", "", ""]
    assert "✗" in ex.status.text and "✗" in ex.suptitle.get_text()


def test_a_trained_model_reverses_and_reads_the_anti_diagonal():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # ~1 s for 100 steps; two busy threads can be 10x slower
    try:
        torch.manual_seed(0)
        model = Transformer(12, 12, d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0, max_len=5,
                            norm_first=True)  # fmt: skip
        opt, gen = torch.optim.AdamW(model.parameters(), lr=5e-3), torch.Generator().manual_seed(1)
        for _ in range(100):
            src = torch.randint(0, 10, (64, 3), generator=gen)  # (B, 3)
            tgt = torch.cat([torch.full((64, 1), BOS), src.flip(1), torch.full((64, 1), EOS)], 1)  # (B, 5)
            loss = F.cross_entropy(model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    ex = cross_attention_explorer(model, source="271")
    assert ex.correct and ex.written == "172<EOS>" and "✓" in ex.status.text
    ex.text.value = "907"
    assert ex.correct and ex.written == "709<EOS>"
    reads = ex.weights[0, :, :3].argmax(-1)  # (H, 3): the input each digit row reads most
    assert (reads == torch.tensor([2, 1, 0])).all(-1).any(), reads


def test_display_bundle_and_repr():
    ex = cross_attention_explorer(tiny(), source="1234", width=640, height=300)
    bundle = ex._repr_mimebundle_()
    assert {"image/png", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(bundle)
    assert bundle["text/plain"] == repr(ex) and repr(ex).startswith("CrossAttentionExplorer(source='1234', writes=")
    assert pixels(ex.image.value).shape == (300, 640, 4)


def test_labels_and_ids_are_parameters():
    model = Transformer(7, 8, d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0, max_len=5)
    ex = cross_attention_explorer(model, source="cab!", src_labels=list("abcdefg"),
                                  tgt_labels=["^", "$", *"abcdef"], bos_id=0, eos_id=1)  # fmt: skip
    assert ex.used == "cab" and ex.src.tolist() == [[2, 0, 1]] and "!" in ex.status.text
    assert set(ex.written) <= set("$abcdef") and ex.output[0, 0] == 0


GOOD = {"model": tiny(), "source": "1234"}


@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"model": GPT(GPTConfig(12, 8, 8, 2, 1))}, TypeError, "model"), ({"source": 1234}, TypeError, "source"),
    ({"source_len": 5}, ValueError, "source_len"), ({"source_len": 0}, ValueError, "source_len"),
    ({"source_len": 2.0}, TypeError, "source_len"), ({"bos_id": 12}, ValueError, "bos_id"),
    ({"eos_id": True}, TypeError, "eos_id"), ({"bos_id": 11}, ValueError, "bos_id and eos_id"),
    ({"src_labels": "0123456789ab"}, TypeError, "src_labels"), ({"tgt_labels": ["a"] * 12}, ValueError, "tgt_labels"),
    ({"src_labels": ["<a>"] * 10 + ["<BOS>", "<EOS>"]}, ValueError, "src_labels"),
    ({"src_labels": [f"<{i}>" for i in range(12)]}, ValueError, "src_labels"),
    ({"layer": 2}, ValueError, "layer"), ({"head": -1}, ValueError, "head"), ({"width": 10}, ValueError, "width"),
    ({"height": 10}, ValueError, "height"),
])  # fmt: skip
def test_bad_arguments_are_named(kw, err, match):
    with pytest.raises(err, match=match):
        cross_attention_explorer(**{**GOOD, **kw})


@pytest.mark.parametrize("param", ["source", "source_len", "src_labels", "tgt_labels", "bos_id", "eos_id", "layer",
                                   "head", "width", "height"])  # fmt: skip
def test_hostile_values_are_named_errors(param):
    for bad in (None, "x", -1, 2**64, float("nan"), True, [], [1], object(), torch.tensor(1.0)):
        if bad is None and param in ("source_len", "src_labels", "tgt_labels", "layer"):
            continue  # None is the documented default there
        try:
            cross_attention_explorer(**{**GOOD, param: bad})
        except (TypeError, ValueError) as e:
            assert param in str(e), f"{bad!r}: {e}"
        else:
            assert param == "source" and isinstance(bad, str), f"{bad!r} accepted for {param}"


def test_doctest():
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_a_one_layer_model_greys_out_its_layer_slider():
    torch.manual_seed(0)
    one = Transformer(12, 12, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, max_len=6, norm_first=True)
    ex = cross_attention_explorer(one, source="1234")
    assert ex.layer.disabled and not ex.head.disabled
    assert not cross_attention_explorer(tiny(), source="1234").layer.disabled


def test_status_counts_every_typed_character_and_names_skips_as_typed():
    from helpers.models import Transformer

    m = Transformer(12, 12, d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, max_len=6)
    ex = cross_attention_explorer(m, source="1z2a")
    assert "skipped, not a source character: z a" in ex.status.text
    assert "4 characters typed, 2 of them source characters" in ex.status.text
