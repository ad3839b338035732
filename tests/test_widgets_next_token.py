"""The next-token explorer, driven headless: every control changes what is plotted."""

import pytest
import torch

from helpers.models import GPT, GPTConfig
from helpers.tokenizers import CharTokenizer
from helpers.widgets.next_token import next_token_explorer
from helpers.widgets.throttle import Throttle

TEXT = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def parts():
    tok = CharTokenizer.from_text(TEXT)
    torch.manual_seed(0)
    return GPT(GPTConfig(tok.vocab_size, block_size=16, d_model=16, n_heads=2, n_layers=2)), tok


def test_bars_follow_the_model_and_each_slider(parts):
    model, tok = parts
    ex = next_token_explorer(model, tok, prompt="def f")
    with torch.no_grad():
        logits, _ = model(torch.tensor([tok.encode("def f")]))
    torch.testing.assert_close(ex.logits, logits[0, -1])
    png = ex.image.value
    ex.temperature.value = 0.5
    torch.testing.assert_close(ex.probs, torch.softmax(logits[0, -1] / 0.5, -1))
    assert ex.image.value != png
    ex.top_k.value = 3
    assert int((ex.probs > 0).sum()) == 3
    ex.top_k.value, ex.top_p.value = 0, 0.05
    assert int((ex.probs > 0).sum()) == 1  # the most likely token alone already has more than 5 %


def test_attention_panel_is_the_last_query_row(parts):
    model, tok = parts
    ex = next_token_explorer(model, tok, prompt="return x", window=4)
    w = model.attention_weights(torch.tensor([tok.encode("return x")]))  # (L, 1, H, T, T)
    torch.testing.assert_close(ex.attention, w[:, 0, :, -1, -4:].flatten(0, 1))
    assert ex.context == list("rn x")
    torch.testing.assert_close(ex.attention.sum(-1) <= 1 + 1e-6, torch.ones(4, dtype=torch.bool))


def test_sample_appends_a_character_from_the_filtered_distribution(parts):
    model, tok = parts
    ex = next_token_explorer(model, tok, prompt="def ", seed=3)
    ex.top_k.value = 1
    best = tok.chars[int(ex.probs.argmax())]
    assert ex.sample_next() == best and ex.prompt.value == "def " + best
    ex2 = next_token_explorer(model, tok, prompt="def ", seed=3)
    a = [ex2.sample_next() for _ in range(3)]
    ex3 = next_token_explorer(model, tok, prompt="def ", seed=3)
    assert a == [ex3.sample_next() for _ in range(3)]  # seeded: a session's samples repeat


def test_unknown_characters_are_skipped_and_named(parts):
    model, tok = parts
    ex = next_token_explorer(model, tok, prompt="def 我")
    assert "我" in ex.status.text
    ex.prompt.value = "def"
    assert ex.status.text == ""
    ex.prompt.value = ""  # an empty prompt still shows something
    assert ex.probs.shape == (tok.vocab_size,)


def test_long_prompts_are_cropped_to_block_size(parts):
    model, tok = parts
    ex = next_token_explorer(model, tok, prompt=TEXT * 3, window=40)
    assert ex.attention.shape[1] == model.config.block_size


@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"model": None}, TypeError, "model"), ({"tokenizer": "abc"}, TypeError, "tokenizer"),
    ({"prompt": 3}, TypeError, "prompt"), ({"n_bars": 0}, ValueError, "n_bars"), ({"seed": 2**64}, ValueError, "seed"),
    ({"width": 10}, ValueError, "width"),
])  # fmt: skip
def test_bad_arguments_are_named(parts, kw, err, match):
    model, tok = parts
    args = {"model": model, "tokenizer": tok, **kw}
    with pytest.raises(err, match=match):
        next_token_explorer(args.pop("model"), args.pop("tokenizer"), **args)


def test_mismatched_vocabulary_is_refused(parts):
    model, _ = parts
    with pytest.raises(ValueError, match="vocab_size"):
        next_token_explorer(model, CharTokenizer.from_text("ab"))


def test_throttle_draws_the_last_value_inside_an_event_loop():
    import asyncio

    drawn = []
    state = {"v": 0}
    t = Throttle(lambda: drawn.append(state["v"]), interval=0.05, may_defer=lambda: True)  # as from the browser

    async def drag():
        for v in range(1, 11):
            state["v"] = v
            t()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.1)

    asyncio.run(drag())
    assert drawn[0] == 1 and drawn[-1] == 10 and len(drawn) < 10  # fewer draws, the last value drawn
    code = Throttle(lambda: drawn.append("code"), interval=10.0)  # not from the browser: never deferred

    async def cell():
        code()
        code()

    asyncio.run(cell())
    assert drawn[-2:] == ["code", "code"]
    with pytest.raises(ValueError, match="interval"):
        Throttle(lambda: None, interval=-1)


def test_display_bundle_has_the_widget_the_picture_and_a_short_text(parts):
    import base64

    model, tok = parts
    ex = next_token_explorer(model, tok, prompt="def f")
    bundle = ex._repr_mimebundle_()
    assert bundle["text/plain"].startswith("NextTokenExplorer(prompt='def f'")
    assert base64.b64decode(bundle["image/png"]) == ex.image.value
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_long_prompt_says_the_model_reads_its_context_only():
    from helpers.tokenizers import CharTokenizer
    from helpers.widgets.base import known_text

    tok = CharTokenizer.from_text("abc")
    assert known_text(tok, "abcabc", 4) == ("cabc", "6 characters typed: the model reads the last 4 it knows (its context)")
    assert known_text(tok, "abxc", 8) == ("abc", "not in the vocabulary, skipped: x")
    assert known_text(tok, "azby\nz", 8) == ("ab", "not in the vocabulary, skipped: z y \\n")  # as typed, each once
    known, note = known_text(tok, "xyz", 8)  # nothing known: no lone fallback character, and it says so
    assert known == "" and note.startswith("none of the 3 characters typed is in the vocabulary (skipped: x y z)")


def test_prompt_with_nothing_known_keeps_the_last_picture():
    from helpers.models import GPT, GPTConfig
    from helpers.tokenizers import CharTokenizer
    from helpers.widgets import next_token_explorer

    tok = CharTokenizer.from_text("abc def")
    ex = next_token_explorer(GPT(GPTConfig(tok.vocab_size, 16, 8, 2, 2)), tok, prompt="abc")
    context, png = list(ex.context), ex.image.value
    ex.prompt.value = "我爱"
    assert ex.context == context and ex.image.value == png  # no lone "\n" column
    assert "none of the 2 characters typed" in ex.status.text and "last text" in ex.status.text
