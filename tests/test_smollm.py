"""SmolLM2-135M-Instruct in our own code (helpers.llama, helpers.smollm_tokenizer) equals Hugging Face's.

The reference is `transformers`' LlamaForCausalLM and tokenizer read from the same pinned GGUF file
(test-only: transformers reads it through `gguf` and `accelerate`; nothing is downloaded).

Stated float32 tolerance: every logit within LOGIT_ATOL = 5e-4 of transformers' on real prompts
(measured: 9e-5, logits of size up to ~40; the two compute the same sums in another order).
Greedy answers are token-identical.
"""

import pytest
import torch

from helpers import load_pretrained
from helpers.llama import (
    apply_rope,
    grouped_query_attention,
    kv_cache_bytes,
    rope_tables,
    unpermute_rows,
)
from helpers.smollm import SHA256, smollm2_path
from helpers.smollm_tokenizer import chat_prompt, smollm_pattern

LOGIT_ATOL = 5e-4
QUESTIONS = ["What is the capital of France?", "Name three colours of the rainbow.",
             "Write a haiku about the sea."]
PROMPTS = ["The quick brown fox jumps over the lazy dog.", "def fibonacci(n):\n    if n < 2:\n        return n",
           "In 1969, Neil Armstrong became the first person to walk on the Moon."]
# Strings on which digit splitting, spaces before digits and control tokens matter.
HARD = ["x  1", "\n\n1. Paris", "2024年北京 3.14159  abc  12x", "  \n\t  12 \u00a0 3", "١٢٣ ½ ² Ⅷ",
        "don't  you'LL  ", "ab😀c 👨‍👩‍👧", "Hello world", "tabs\t\t 7\n\n\n  x", "$1,234.50 + 0x1F = ?",
        "<|im_start|>user", "a" * 40 + "9" * 5]


@pytest.fixture(scope="module")
def ours():
    torch.set_num_threads(1)
    return load_pretrained("smollm2")


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    path = smollm2_path()
    model = transformers.LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model.eval(), tok


def chat_ids(tok, question):
    return torch.tensor([tok.encode(chat_prompt([{"role": "user", "content": question}]), allow_special=True)])


def test_logits_equal_transformers(ours, hf):
    model, tok = ours
    for text in [chat_prompt([{"role": "user", "content": QUESTIONS[0]}]), *PROMPTS]:
        ids = torch.tensor([tok.encode(text, allow_special=True)])
        with torch.no_grad():
            a, b = model(ids), hf[0](ids).logits
        assert (a - b).abs().max().item() < LOGIT_ATOL, text


def test_greedy_answers_token_identical_and_paris(ours, hf):
    model, tok = ours
    for q in QUESTIONS:
        ids = chat_ids(tok, q)
        a = model.generate(ids, 24, top_k=1, stop_id=tok.eos_id)
        b = hf[0].generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=tok.eos_id,
                           pad_token_id=tok.eos_id)
        assert a.tolist() == b.tolist(), q
    answer = tok.decode(model.generate(chat_ids(tok, QUESTIONS[0]), 16, top_k=1, stop_id=tok.eos_id)[0].tolist())
    assert "Paris" in answer.split("assistant\n")[-1]


def test_kv_cache_equals_full_forward(ours):
    model, tok = ours
    ids = torch.tensor([tok.encode(PROMPTS[1])])
    cache = model.new_cache(1, ids.shape[1])
    with torch.no_grad():
        model.forward_cached(ids[:, :-3], cache)
        for k in range(3, 0, -1):
            last = model.forward_cached(ids[:, -k : ids.shape[1] - k + 1], cache)
        full = model(ids)[:, -1]
    assert cache.length == ids.shape[1]
    torch.testing.assert_close(last, full, atol=1e-4, rtol=0)


def test_tokenizer_equals_the_files_rule(ours, hf):
    """Our ids equal Hugging Face's BPE with SmolLM2's own pre-tokenizer (digits first, then byte level)."""
    from tokenizers import pre_tokenizers as pt

    tok, ref = ours[1], hf[1]
    plain = [ref.encode(s, add_special_tokens=False) for s in HARD]
    ref.backend_tokenizer.pre_tokenizer = pt.Sequence([pt.Digits(individual_digits=True),
                                                       pt.ByteLevel(add_prefix_space=False, use_regex=True)])
    for s, p in zip(HARD, plain, strict=True):
        ids = tok.encode(s, allow_special=True)  # Hugging Face reads control tokens in text as control tokens
        assert ids == ref.encode(s, add_special_tokens=False), s
        assert tok.decode(ids) == s
        if not any(c.isnumeric() for c in s):  # transformers' GGUF tokenizer drops the digit rule: equal without digits
            assert ids == p, s
    assert tok.encode("x  1") != plain[0]  # the rule matters: GPT-2's pattern alone gives " 1" one token
    messages = [{"role": "user", "content": "What is 12 + 30?"}]
    text = chat_prompt(messages)
    assert text == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.encode(text, allow_special=True) == ref.encode(text, add_special_tokens=False)


def test_tokenizer_bytes_without_token(ours):
    tok = ours[1]
    with pytest.raises(ValueError, match="U\\+0004"):
        tok.encode("a\x04b")
    assert tok.encode("<|im_end|>") != [tok.eos_id] and tok.encode("<|im_end|>", allow_special=True) == [tok.eos_id]
    assert "(?!" in smollm_pattern()


def test_chat_prompt_rejects_bad_messages():
    with pytest.raises(TypeError, match="messages"):
        chat_prompt("hi")
    for bad in ([], [{"role": "robot", "content": "x"}], [{"role": "user"}], [{"role": "user", "content": 3}]):
        with pytest.raises(ValueError, match="messages"):
            chat_prompt(bad)
    sys_first = chat_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert sys_first.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and "SmolLM" not in sys_first


def test_adjacent_pair_rope_equals_rotate_half_on_unpermuted_rows():
    """GGUF's q/k rows + adjacent pairs == Hugging Face's rows (unpermute_rows) + rotate_half: same q·k."""
    g = torch.Generator().manual_seed(0)
    H, hs, C, T = 3, 8, 12, 5
    wq, wk, x = (torch.randn(H * hs, C, generator=g, dtype=torch.float64) for _ in range(2)), None, None
    wq, wk = list(wq)
    x = torch.randn(T, C, generator=g, dtype=torch.float64)
    cos, sin = (t.double() for t in rope_tables(T, hs, 10000.0))

    def heads(w):
        return (x @ w.T).view(T, H, hs).transpose(0, 1)  # (T, C) -> (H, T, hs)

    ours = apply_rope(heads(wq), cos, sin) @ apply_rope(heads(wk), cos, sin).transpose(1, 2)
    c2, s2 = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)

    def rotate_half(t):
        return torch.cat([-t[..., hs // 2 :], t[..., : hs // 2]], -1)

    def hf_rope(t):
        return t * c2 + rotate_half(t) * s2

    ref = hf_rope(heads(unpermute_rows(wq, H))) @ hf_rope(heads(unpermute_rows(wk, H))).transpose(1, 2)
    torch.testing.assert_close(ours, ref)
    wrong = hf_rope(heads(wq)) @ hf_rope(heads(wk)).transpose(1, 2)  # the gotcha: rotate_half on GGUF rows
    assert (wrong - ref).abs().max() > 1e-2


def test_grouped_query_attention_reads_head_h_div_group():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 6, 4, 8, generator=g), torch.randn(1, 2, 4, 8, generator=g), torch.randn(1, 2, 4, 8, generator=g)
    out = grouped_query_attention(q, k, v)
    full = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                                            is_causal=True)
    torch.testing.assert_close(out, full)


def test_config_sizes_and_cache_saving(ours):
    c = ours[0].config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.d_ff, c.vocab_size) == (30, 576, 9, 3, 1536, 49152)
    assert kv_cache_bytes(c, 1000, kv_heads=c.n_heads) == 3 * kv_cache_bytes(c, 1000)
    assert ours[0].head.weight is ours[0].tok_emb.weight
    assert len(SHA256) == 64


def test_generate_rejects_bad_arguments(ours):
    model, tok = ours
    ids = torch.tensor([[1, 2, 3]])
    for kwargs, err in (({"max_new_tokens": -1}, ValueError), ({"max_new_tokens": 2, "temperature": 0}, ValueError),
                        ({"max_new_tokens": 2, "stop_id": "x"}, TypeError)):
        with pytest.raises(err):
            model.generate(ids, **kwargs)
    with pytest.raises(ValueError, match="idx"):
        model.generate(torch.tensor([[1, 50000]]), 1)
    with pytest.raises(ValueError, match="B=1"):
        model.generate(torch.tensor([[1], [2]]), 1, stop_id=2)
    assert model.generate(ids, 0).tolist() == ids.tolist()


def test_load_pretrained_names():
    with pytest.raises(ValueError, match="smollm2"):
        load_pretrained("smollm3")
