"""No wrong verdicts, no silent NaN, no broadcast, no runaway explorers (issue 23, classes 6, 7, 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from helpers.compare import check_close
from helpers.generation import KVCache, filter_logits, sample_next
from helpers.gpt import GPT, GPTConfig
from helpers.plots import figure_to_png, heatmap, plain_text
from helpers.tokenizers import CharTokenizer
from helpers.transformer import Transformer

# --- class 6: check_close ------------------------------------------------------------------------


@pytest.mark.parametrize(("actual", "expected"), [
    (torch.tensor([1 + 1j]), torch.tensor([1 + 2j])),  # differ only in the imaginary part
    (np.array([1 + 0j, 2j]), np.array([1.0, 0.0])),
    ([1.0, 2j], [1.0, 0.0]),
    (1j, 0.0),
    (torch.ones(2), torch.ones(2, dtype=torch.complex64)),
])
def test_check_close_refuses_complex_inputs(actual, expected):
    with pytest.raises(TypeError, match=r"complex.*\.real and \.imag"):
        check_close("c", actual, expected, quiet=True)


def test_check_close_treats_the_same_infinities_as_equal(capsys):
    scores = torch.tensor([[0.3, -math.inf, -math.inf], [0.1, 0.2, -math.inf]])  # masked scores
    assert check_close("masked", scores, scores.clone()) == 0.0
    assert "masked: max abs diff ≤ 1e-06 ✓" in capsys.readouterr().out
    assert check_close("masked", scores, scores + 1e-9, quiet=True) <= 1e-9
    check_close("+inf", [math.inf, 1.0], [math.inf, 1.0], rtol=1e-3, quiet=True)
    check_close("float16", scores.half(), scores, atol=1e-3, quiet=True)


@pytest.mark.parametrize(("actual", "expected", "words"), [
    ([-math.inf, 0.0], [0.0, 0.0], "actual is -inf where expected is 0.0"),
    ([math.inf], [-math.inf], "actual is inf where expected is -inf"),
    ([1e308], [math.inf], "where expected is inf"),
    ([0.0, 1.0], [0.0, math.inf], "at index (1,)"),
])
def test_check_close_still_fails_different_infinities(actual, expected, words):
    with pytest.raises(AssertionError, match=re_escape(words)):
        check_close("inf", actual, expected, atol=1e300, quiet=True)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# --- class 7: sampling and the KV cache ----------------------------------------------------------


@pytest.mark.parametrize(("row", "words"), [
    ([0.0, math.inf, 1.0], r"\+inf"),
    ([0.0, math.nan, 1.0], "NaN"),
    ([-math.inf, -math.inf, -math.inf], "every logit of row"),
])
def test_filter_logits_names_what_makes_no_distribution(row, words):
    logits = torch.tensor([[0.0, 1.0, 2.0], row])
    for call in (lambda: filter_logits(logits), lambda: sample_next(logits), lambda: filter_logits(logits, top_k=1)):
        with pytest.raises(ValueError, match=words):
            call()


def test_masked_tokens_are_never_drawn():
    logits = torch.tensor([[-math.inf, 0.0, -math.inf, 0.0]]).expand(200, 4)
    draws = sample_next(logits, generator=torch.Generator().manual_seed(1))
    assert set(draws.flatten().tolist()) == {1, 3}


def test_sampling_refuses_what_is_not_a_batch_of_logits():
    with pytest.raises(TypeError, match="floating-point tensor"):
        filter_logits(torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="floating-point tensor"):
        filter_logits([1.0, 2.0])
    with pytest.raises(ValueError, match=r"shape \(B, V\)"):
        sample_next(torch.zeros(4))
    with pytest.raises(TypeError, match="generator"):
        sample_next(torch.zeros(1, 4), generator=0)
    assert sample_next(torch.zeros(0, 4)).shape == (0, 1)


def tiny_gpt(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=8, d_model=16, n_heads=2, n_layers=2, **kw)).eval()


def test_a_cache_of_the_wrong_batch_model_or_dtype_is_named():
    model = tiny_gpt()
    idx = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="cache has 4 batch rows, the model and input need 1"):
        model.forward_cached(idx, model.new_cache(4))  # one row would be broadcast into four
    with pytest.raises(ValueError, match="cache has 1 batch rows, the model and input need 4"):
        model.forward_cached(idx.expand(4, 3), model.new_cache(1))
    other = GPT(GPTConfig(vocab_size=11, block_size=8, d_model=16, n_heads=4, n_layers=1))
    with pytest.raises(ValueError, match="cache has 1 layers"):
        model.forward_cached(idx, other.new_cache(1))
    with pytest.raises(ValueError, match="torch.float64"):
        model.forward_cached(idx, KVCache(2, 1, 2, 8, 8, dtype=torch.float64))


def test_kv_cache_append_never_broadcasts():
    cache = KVCache(1, 4, 2, 8, 3)
    one_row = torch.ones(1, 2, 1, 3)
    with pytest.raises(ValueError, match=r"k must have shape \(B=4, H=2, t, hs=3\)"):
        cache.append(0, one_row, one_row)
    with pytest.raises(ValueError, match="layer must be an int in"):
        cache.append(1, torch.ones(4, 2, 1, 3), torch.ones(4, 2, 1, 3))
    with pytest.raises(ValueError, match="float64"):
        cache.append(0, torch.ones(4, 2, 1, 3, dtype=torch.float64), torch.ones(4, 2, 1, 3, dtype=torch.float64))
    k, v = cache.append(0, torch.ones(4, 2, 1, 3), torch.ones(4, 2, 1, 3))
    assert k.shape == v.shape == (4, 2, 1, 3)


def test_cached_generation_equals_uncached_and_accepts_an_empty_batch():
    model = tiny_gpt()
    idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for use_cache in (True, False):
        assert model.generate(idx[:0], 4, use_cache=use_cache).shape == (0, 7)
    g = [torch.Generator().manual_seed(3) for _ in range(2)]
    assert torch.equal(model.generate(idx, 6, generator=g[0]), model.generate(idx, 6, generator=g[1], use_cache=False))


def test_greedy_decode_accepts_an_empty_batch():
    torch.manual_seed(0)
    t = Transformer(12, 12, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16, pad_id=0).eval()
    for use_cache in (True, False):
        out = t.greedy_decode(torch.ones(0, 5, dtype=torch.long), 6, bos_id=1, eos_id=2, use_cache=use_cache)
        assert out.shape[0] == 0 and out.dtype == torch.long
    full = t.greedy_decode(torch.ones(2, 5, dtype=torch.long), 6, bos_id=1, eos_id=2)
    assert torch.equal(full, t.greedy_decode(torch.ones(2, 5, dtype=torch.long), 6, bos_id=1, eos_id=2, use_cache=False))


def test_a_model_whose_logits_are_nan_gives_a_clear_error():
    model = tiny_gpt()
    with torch.no_grad():
        model.head.weight.fill_(math.nan)  # tied: the embedding too
    with pytest.raises(ValueError, match="logits hold NaN"):
        model.generate(torch.tensor([[1]]), 2)


# --- class 8: explorers --------------------------------------------------------------------------


def char_model(text: str = "ab $^_{}\\x"):
    tok = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, d_model=16, n_heads=2, n_layers=1))
    return model, tok


def no_tex(fig) -> list[str]:
    """Texts of ``fig`` that matplotlib would read as TeX (an even number of unescaped $)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t._preprocess_math(t.get_text())[1]]


def test_plain_text_escapes_dollars_once():
    assert plain_text("a $x^$ b") == r"a \$x^\$ b"
    assert plain_text(plain_text("$5 and $6")) == r"\$5 and \$6"


def test_dollar_signs_in_labels_are_drawn_not_parsed_as_tex():
    fig = Figure()
    heatmap(np.eye(3), ax=fig.subplots(), xticklabels=["$x^$", "$\\frac$", "ok"], yticklabels=["a", "$", "$$"])
    assert figure_to_png(fig)[:4] == b"\x89PNG"
    from helpers.widgets.attention import attention_explorer

    ex = attention_explorer(["a $x^$ b", "$\\frac$ y"])
    ex.sentence.value = "$\\frac$ y"
    assert ex.image.value[:4] == b"\x89PNG" and no_tex(ex.figure) == []


def test_char_explorers_draw_dollars_and_tex_characters():
    from helpers.widgets.gpt_attention import gpt_attention_explorer
    from helpers.widgets.next_token import next_token_explorer

    model, tok = char_model()
    for text in ("$x^$", "$\\$", "a$_$b$"):
        ex = gpt_attention_explorer(model, tok, text)
        ex.key.value = 0  # the title joins the query's and the key's characters: "$" and "$"
        ex.scores_view.value = True
        assert ex.image.value[:4] == b"\x89PNG" and no_tex(ex.figure) == []
        nt = next_token_explorer(model, tok, text)
        assert nt.image.value[:4] == b"\x89PNG" and no_tex(nt.figure) == []


def test_cross_attention_labels_with_dollars():
    from helpers.widgets.cross_attention import cross_attention_explorer

    torch.manual_seed(0)
    model = Transformer(12, 12, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=12).eval()
    src = ["$", "^"] + [f"${i}$" for i in range(2, 10)] + ["<BOS>", "<EOS>"]
    tgt = [f"${i}^$" for i in range(12)]  # what the model writes (bos and eos too): TeX if not escaped
    ex = cross_attention_explorer(model, source="$^$", src_labels=src, tgt_labels=tgt)
    assert ex.used.startswith("$^$")
    assert no_tex(ex.figure) == [], no_tex(ex.figure)
    assert ex.image.value[:4] == b"\x89PNG"


@pytest.mark.parametrize("size", [{"width": 10**6}, {"height": 10**6}, {"width": 5000, "height": 5000}])
def test_explorers_refuse_huge_pictures(size):
    from helpers.widgets.attention import attention_explorer
    from helpers.widgets.cross_attention import cross_attention_explorer
    from helpers.widgets.gpt_attention import gpt_attention_explorer
    from helpers.widgets.next_token import next_token_explorer

    model, tok = char_model()
    seq2seq = Transformer(12, 12, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=12)
    for build in (lambda: attention_explorer(**size), lambda: gpt_attention_explorer(model, tok, **size),
                  lambda: next_token_explorer(model, tok, **size), lambda: cross_attention_explorer(seq2seq, **size)):
        with pytest.raises(ValueError, match=r"(width|height) must be in \[\d+, 4096\] pixels"):
            build()


def test_attention_explorer_refuses_a_huge_demo_model():
    from helpers.widgets.attention import attention_explorer

    with pytest.raises(ValueError, match="d_model must be in"):
        attention_explorer(d_model=10**6, n_heads=1)
    with pytest.raises(ValueError, match="n_heads must be in"):
        attention_explorer(d_model=16, n_heads=10**6)


def test_next_token_window_is_at_most_the_context():
    from helpers.widgets.next_token import next_token_explorer

    model, tok = char_model()
    ex = next_token_explorer(model, tok, window=10**9)
    assert ex.window == model.config.block_size


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_float_controls_refuse_non_finite_values_from_code_and_keep_working(bad):
    from helpers.widgets.attention import attention_explorer
    from helpers.widgets.next_token import next_token_explorer
    from helpers.widgets.pe import pe_explorer

    model, tok = char_model()
    nt = next_token_explorer(model, tok)
    at = attention_explorer()
    pe = pe_explorer(seq_len=16, d_model=8)
    for control in (nt.temperature, nt.top_p, at.temperature, pe.controls["base"]):
        old = control.value
        if bad != math.nan and math.isinf(bad):  # a slider clamps infinities itself: nothing to refuse
            control.value = bad
            assert math.isfinite(control.value)
            control.value = old
            continue
        with pytest.raises(ValueError, match="must be a finite number"):
            control.value = bad
        assert control.value == old
    nt.temperature.value = 0.5  # later moves still work
    at.temperature.value = 2.0
    pe.controls["base"].value = 100.0
    assert nt.probs.isfinite().all() and at.weights.isfinite().all()
    assert "base=100" in repr(pe)


def test_explorers_build_ids_on_the_model_device():
    """A model on another device (the meta device stands in for a GPU) must get its ids there."""
    from helpers.widgets.gpt_attention import gpt_attention_explorer
    from helpers.widgets.next_token import next_token_explorer

    class Seen(Exception):
        pass

    model, tok = char_model()
    model = model.to("meta")

    def spy(module, args):
        raise Seen(args[0].device)

    hook = model.register_forward_pre_hook(spy)  # runs before GPT.forward looks at the ids
    try:
        for build in (gpt_attention_explorer, next_token_explorer):
            with pytest.raises(Seen) as info:
                build(model, tok, "ab")
            assert info.value.args[0] == torch.device("meta"), build.__name__
    finally:
        hook.remove()
