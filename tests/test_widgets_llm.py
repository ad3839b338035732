"""The SmolLM2 explorer, driven headless: the numbers are the model's, every control changes the picture."""

import base64
import math

import pytest
import torch

from helpers.generation import filter_logits
from helpers.llama import Llama, LlamaConfig
from helpers.widgets import llm_explorer
from helpers.widgets.llm_explorer import last_token_attention, token_labels
from tests.tiny_llama import byte_tokenizer, tiny_llama


@pytest.fixture(scope="module")
def parts():
    tok = byte_tokenizer()
    return tiny_llama(tok), tok


def attention_outputs(model, ids):
    """Each layer's attention module: its input x (1, T, C) and its output (1, T, C), from the forward pass."""
    seen = []
    hooks = [b.attn.register_forward_hook(lambda m, args, out: seen.append((m, args[0], out))) for b in model.blocks]
    try:
        with torch.no_grad():
            logits = model(ids)
    finally:
        for h in hooks:
            h.remove()
    return logits, seen


def test_logits_and_attention_are_the_forward_pass(parts):
    model, tok = parts
    ex = llm_explorer(model, tok, prompt="<|im_start|>user\nhi 我", layer=0)
    ids = torch.tensor([tok.encode("<|im_start|>user\nhi 我", allow_special=True)])
    assert ex.ids == ids[0].tolist() and ex.ids[0] == tok.bos_id  # special tokens typed are read as such
    logits, seen = attention_outputs(model, ids)
    torch.testing.assert_close(ex.logits, logits[0, -1])
    assert ex.attention.shape == (3, 4, ids.shape[1])
    torch.testing.assert_close(ex.attention.sum(-1), torch.ones(3, 4))
    for layer, (attn, x, out) in enumerate(seen):
        # the weights times the values, through o_proj, are what the module returned at the last position
        T = x.shape[1]
        v = attn.v_proj(x).view(1, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)[0]  # (H_kv, T, hs)
        v = v.repeat_interleave(attn.n_heads // attn.n_kv_heads, dim=0)  # (H, T, hs)
        mixed = (ex.attention[layer][:, None, :] @ v)[:, 0]  # (H, 1, T) @ (H, T, hs) -> (H, hs)
        torch.testing.assert_close(attn.o_proj(mixed.reshape(-1)).detach(), out[0, -1], atol=1e-5, rtol=1e-5)


def test_every_control_changes_the_picture_and_sliders_do_not_rerun_the_model(parts):
    model, tok = parts
    ex = llm_explorer(model, tok, prompt="hello world")
    runs = []
    original = ex._run_model
    ex._run_model = lambda: (runs.append(1), original())
    for control, value in ((ex.temperature, 2.0), (ex.top_k, 5), (ex.top_p, 0.5), (ex.layer, 1), (ex.head, 3)):
        png = ex.image.value
        control.value = value
        assert ex.image.value != png, control.description
    assert runs == []  # the sliders only redraw
    ex.top_k.value, ex.top_p.value = 0, 1.0
    torch.testing.assert_close(ex.probs, torch.softmax(filter_logits(ex.logits, 2.0), -1))
    ex.top_k.value = 1  # greedy: one token left
    assert int((ex.probs > 0).sum()) == 1 and int(ex.probs.argmax()) == int(ex.logits.argmax())
    png = ex.image.value
    ex.prompt.value = "hello there"
    ex._run_model = original
    assert ex.image.value != png and ex.labels[-5:] == ["t", "h", "e", "r", "e"]
    assert "layer 1, head 3" in ex.ax_att.get_title()


def test_labels_show_the_characters_each_token_completes(parts):
    _, tok = parts
    ids = tok.encode("a 我\n\x01")  # 我 is three bytes: two tokens complete nothing
    assert token_labels(tok, ids) == ["a", "␣", "<e6>", "<88>", "我", "\\n", "\\x01"]
    assert token_labels(tok, [tok.bos_id]) == ["<|im_start|>"]


def test_empty_and_long_prompts(parts):
    model, tok = parts
    ex = llm_explorer(model, tok, prompt="")
    assert ex.ids == [tok.bos_id] and "empty" in ex.status.text
    ex.prompt.value = "abc"
    png, ids = ex.image.value, ex.ids
    ex.prompt.value = ""  # nothing to read: the last picture stays, and the status says so
    assert ex.ids == ids and ex.image.value == png and "empty" in ex.status.text
    ex = llm_explorer(model, tok, prompt="x" * 50, max_tokens=20)
    assert ex.attention.shape[-1] == 20 and "50 tokens" in ex.status.text


@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"model": None}, TypeError, "model"), ({"tokenizer": "abc"}, TypeError, "tokenizer"),
    ({"prompt": 3}, TypeError, "prompt"), ({"n_bars": 0}, ValueError, "n_bars"),
    ({"max_tokens": 0}, ValueError, "max_tokens"), ({"layer": 3}, ValueError, "layer"),
    ({"head": -1}, ValueError, "head"), ({"head": 1.0}, TypeError, "head"), ({"width": 10}, ValueError, "width"),
    ({"height": 10**6}, ValueError, "height"), ({"layer": True}, TypeError, "layer"),
])  # fmt: skip
def test_bad_arguments_are_named(parts, kw, err, match):
    model, tok = parts
    args = {"model": model, "tokenizer": tok, **kw}
    with pytest.raises(err, match=match):
        llm_explorer(args.pop("model"), args.pop("tokenizer"), **args)


def test_mismatched_vocabulary_and_nan_sliders_are_refused(parts):
    model, tok = parts
    small = Llama(LlamaConfig(vocab_size=100, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=16))
    with pytest.raises(ValueError, match="vocab_size"):
        llm_explorer(small, tok)
    ex = llm_explorer(model, tok, prompt="ab")
    with pytest.raises(ValueError, match="temperature"):
        ex.temperature.value = math.nan
    assert ex.temperature.value == 1.0


def test_display_bundle_has_the_widget_the_picture_and_a_short_text(parts):
    model, tok = parts
    ex = llm_explorer(model, tok, prompt="ab")
    bundle = ex._repr_mimebundle_()
    assert bundle["text/plain"] == "LLMExplorer(prompt='ab', temperature=1.00, top_k=0, top_p=1.00, layer=2, head=0)"
    assert base64.b64decode(bundle["image/png"]) == ex.image.value
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_smollm2_reads_the_previous_token_at_layer_16_head_0():
    """On the real model: the explorer's numbers are a forward pass's, and the heads the notebook names."""
    from helpers.pretrained import load_pretrained

    model, tok = load_pretrained("smollm2")
    ex = llm_explorer(model, tok)  # the default sentence, layer 16, head 0
    ids = torch.tensor([ex.ids])
    logits, seen = attention_outputs(model, ids)
    torch.testing.assert_close(ex.logits, logits[0, -1], atol=1e-4, rtol=1e-4)
    _, again = last_token_attention(model, ids)
    torch.testing.assert_close(ex.attention, again)
    assert tok.decode([int(ex.logits.argmax())]) == " lock"
    assert ex.attention[16, 0, -2] > 0.3  # the previous token
    assert ex.attention[15:, :, 0].mean() > 0.5  # the upper half parks its attention on token 0


def test_dollar_signs_in_tokens_are_drawn_not_parsed_as_tex(parts):
    from matplotlib.text import Text

    model, tok = parts
    ex = llm_explorer(model, tok, prompt="a$x^$b$")
    labels = [t.get_text() for t in ex.figure.findobj(Text) if "$" in t.get_text()]
    assert labels and all(r"\$" in label for label in labels)  # escaped: drawn as dollars
    assert ex.image.value[:4] == b"\x89PNG"


def test_a_one_layer_one_head_model_greys_its_sliders():
    tok = byte_tokenizer()
    ex = llm_explorer(tiny_llama(tok, n_layers=1, n_heads=1, n_kv_heads=1), tok, prompt="ab")
    assert ex.layer.disabled and ex.head.disabled and ex.attention.shape == (1, 1, 2)
