"""helpers.gpt2_tokenizer: GPT-2's vocab.json + merges.txt read by our BPE, equal to Hugging Face's.

Offline: a small byte-level BPE is trained here with the `tokenizers` library and saved in
GPT-2's format (vocab.json + merges.txt); the library's own reader of those files is the
reference.
"""

import json
import sys
import unicodedata

import pytest
import regex
from tokenizers import ByteLevelBPETokenizer, pre_tokenizers

from helpers.data import load_corpus
from helpers.gpt2_tokenizer import GPT2Tokenizer, bytes_to_unicode, gpt2_pattern

# GPT-2's pattern as published, for the `regex` module (\p{..} classes).
GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
MULTILINGUAL = [
    "你好，世界！今天天气很好。机器学习和深度学习。", "東京で日本語を話します。", "😀😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "I'm sure we'll see they've done it, she'd say it's DON'T", "naïve café résumé Ünïcödé Ελληνικά Русский",
    "١٢٣ ²³ ½ Ⅷ 12345 3.14159",
]
HARD = [
    "Hello world", "  leading spaces", "trailing   ", "a\n\nb\r\n\tc", "\n", "", " ", "   \n  ",
    "I'm sure it's 'quoted' you're we'VE I'M", "中文字符和 emoji 🤖🦾 mixed", "👨‍👩‍👧‍👦", "x²+y³=z½ ١٢٣",
    "\u3000\u00a0nbsp\u2028line sep\x1cfile sep\x85", "$$$ ... !!! ??? --- ___ a_b", "ﬁ ligature Ǆǅǆ",
    "12,345.67 1e10 0x1F", "tabs\t\tand   spaces    \n\n\n  x", "def f(x):\n    return x ** 2  # note\n",
    "Mixed中English混合text", "emoji👍🏽in👍words", "a" * 50, "'s's'''t", *MULTILINGUAL,
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bpe")
    lib = ByteLevelBPETokenizer()  # GPT-2's byte-level BPE, trained locally (no download)
    lib.train_from_iterator([load_corpus()[:60_000], *MULTILINGUAL * 20], vocab_size=700, min_frequency=2,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    lib.save_model(str(folder))  # vocab.json + merges.txt, GPT-2's format
    return folder


@pytest.fixture(scope="module")
def lib(files):
    return ByteLevelBPETokenizer(str(files / "vocab.json"), str(files / "merges.txt"))


@pytest.fixture(scope="module")
def ours(files):
    return GPT2Tokenizer.from_folder(files)


@pytest.mark.parametrize("text", HARD)
def test_encode_equals_tokenizers_library(ours, lib, text):
    ids = ours.encode(text)
    assert ids == lib.encode(text).ids
    assert ours.decode(ids) == text


def test_long_text_equals_library_and_uses_merges(ours, lib):
    text = load_corpus()[60_000:70_000]  # text the tokenizer was not trained on
    ids = ours.encode(text)
    assert ids == lib.encode(text).ids
    assert ours.decode(ids) == text
    assert len(ids) < 0.5 * len(text.encode())  # merges do work: well under one token per byte


def test_file_ids_are_translated(files, ours):
    vocab = json.loads((files / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["!"] != ord("!")  # the library's ids are not byte values: a translation is needed
    assert ours.vocab_size == len(vocab) == 700
    assert ours.special_tokens == {"<|endoftext|>": vocab["<|endoftext|>"]}


def test_special_tokens(ours, files):
    text = "one<|endoftext|>two"
    theirs = ByteLevelBPETokenizer(str(files / "vocab.json"), str(files / "merges.txt"))
    assert ours.encode(text) == theirs.encode(text).ids  # plain text by default, as the files alone say
    theirs.add_special_tokens(["<|endoftext|>"])
    special = ours.encode(text, allow_special=True)
    assert special == theirs.encode(text).ids and ours.special_tokens["<|endoftext|>"] in special
    assert ours.decode(special) == text


def test_half_a_character_decodes_like_library(files, ours, lib):
    vocab, b2u = json.loads((files / "vocab.json").read_text(encoding="utf-8")), bytes_to_unicode()
    first_byte = [vocab[b2u["中".encode()[0]]]]  # 1 of the 3 UTF-8 bytes of 中
    assert ours.decode(first_byte) == lib.decode(first_byte) == "\ufffd"
    assert ours.decode_bytes(first_byte) == "中".encode()[:1]


def test_bytes_to_unicode():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())


def test_pattern_equals_regex_module_and_library():
    """Our stdlib-`re` pattern splits like GPT-2's \\p{L}/\\p{N} pattern, on a sample of every script."""
    ours, theirs = __import__("re").compile(gpt2_pattern()), regex.compile(GPT2_REGEX)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    b2u = bytes_to_unicode()
    assigned = [cp for cp in range(0, sys.maxunicode + 1, 29)
                if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]  # assigned in this Python's Unicode
    text = "".join(f"a{c}1{c} {c}{c}  x\u3000{c}'s" for c in map(chr, assigned))
    chunks = ours.findall(text)
    assert len(chunks) > 20_000 and "".join(chunks) == text
    assert chunks == theirs.findall(text)
    assert ["".join(b2u[b] for b in c.encode()) for c in chunks] == [p for p, _ in byte_level.pre_tokenize_str(text)]


def test_reader_errors(files, tmp_path):
    vocab = json.loads((files / "vocab.json").read_text(encoding="utf-8"))
    merges = (files / "merges.txt").read_text(encoding="utf-8").split("\n")
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("\n".join(merges[:3] + ["a b c"] + merges[3:]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"merges\.txt line 4: a merge is two tokens"):
        GPT2Tokenizer.from_folder(tmp_path)
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ zzz\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"merge 0 \('Ġ' 'zzz'\) uses 'zzz'"):
        GPT2Tokenizer.from_folder(tmp_path)
    del vocab["Ġ"]
    with pytest.raises(ValueError, match="ids must be 0"):
        GPT2Tokenizer(vocab, [])
    with pytest.raises(ValueError, match="byte token 'Ġ' is missing"):
        GPT2Tokenizer({t: i for i, t in enumerate(vocab)}, [])
    with pytest.raises(FileNotFoundError, match="no vocab.json"):
        GPT2Tokenizer.from_folder(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="text"):
        GPT2Tokenizer.from_folder(files).encode(b"bytes")
