"""SmolLM2's tokenizer from its GGUF metadata, on our `BPETokenizer`, and its ChatML chat template.

SmolLM2 uses GPT-2's byte-level BPE (`helpers.gpt2_tokenizer`: the same byte -> character map,
the same merge rule) with three differences:

- Digits are split first (the GGUF's pre-tokenizer tag ``smollm``; Hugging Face's
  ``Digits(individual_digits=True)`` before ``ByteLevel``): every number character is its own
  chunk, then GPT-2's pattern splits the rest. So "2024" is four chunks and " 1" is " " and "1".
  `smollm_pattern` writes both steps as one regex for the standard ``re`` module.
- 17 control tokens (ids 0..16: ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ...) that no
  merge builds; `encode` reads them as text unless ``allow_special=True``.
- 21 byte values have no token (control bytes 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d and bytes that
  valid UTF-8 never or almost never holds). Text holding one cannot be encoded: ValueError.

Chat (ChatML, the template stored in the file): each message is
``<|im_start|>{role}\\n{content}<|im_end|>\\n``; a conversation without a system message gets the
model's default one first; the assistant's turn is opened with ``<|im_start|>assistant\\n``.

Shapes: ``encode(str) -> list[int]`` ids in [0, 49152).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache
from operator import itemgetter

from helpers.bpe import BPETokenizer
from helpers.gpt2_tokenizer import WHITE_SPACE, _class, bytes_to_unicode
from helpers.tokenizers import check_ids, check_text
from helpers.validate import check_bool

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
ROLES = ("system", "user", "assistant")


@cache
def smollm_pattern() -> str:
    """One regex for "every number character alone, then GPT-2's pattern on what lies between".

    GPT-2's ``' ?\\p{N}+'`` becomes ``'\\p{N}'`` (one digit, no space before it), and its
    ``'\\s+(?!\\S)'`` may end before a digit (a digit ends the chunk GPT-2's pattern sees).
    """
    first = "".join(map(itemgetter(0), map(unicodedata.category, map(chr, range(sys.maxunicode + 1)))))
    L, N, S = _class("L", first), _class("N", first), WHITE_SPACE
    return (rf"[{N}]|'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[^{S}{L}{N}]+"
            rf"|[{S}]+(?![^{S}{N}])|[{S}]+")


class SmolLMTokenizer:
    """SmolLM2's BPE: ``tokens`` (id -> token string, GPT-2's byte characters), ``merges`` ("a b" strings)."""

    def __init__(self, tokens: list[str], merges: list[str], bos_id: int, eos_id: int, source: str = "tokenizer"):
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise TypeError(f"{source}: tokens must be a list of str")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise TypeError(f"{source}: merges must be a list of str")
        if "" in tokens:  # an empty special token would match between every two characters of a text
            raise ValueError(f"{source}: the empty string is not a token (id {tokens.index('')})")
        file_id = {}
        for i, t in enumerate(tokens):
            if t in file_id:
                raise ValueError(f"{source}: token {t!r} appears twice (ids {file_id[t]} and {i})")
            file_id[t] = i
        byte_char = bytes_to_unicode()
        internal = {byte_char[b]: b for b in range(256)}  # token string -> our BPETokenizer's id
        pairs = []
        for k, m in enumerate(merges):
            parts = m.split(" ")
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{source}: merge {k} must be two tokens separated by one space, got {m!r}")
            a, b = parts
            for part in (a, b):
                if part not in internal or part not in file_id:
                    raise ValueError(f"{source}: merge {k} ({m!r}) uses {part!r}, which no byte or earlier merge builds")
            if a + b in internal:
                raise ValueError(f"{source}: merge {k} ({m!r}) builds {a + b!r} a second time")
            if a + b not in file_id:
                raise ValueError(f"{source}: merge {k} builds {a + b!r}, which is not a token")
            pairs.append((internal[a], internal[b]))
            internal[a + b] = 256 + k
        self.bpe = BPETokenizer(pairs, pattern=smollm_pattern())  # does the merging, on our ids
        self._to_file = [file_id.get(t) for t, _ in sorted(internal.items(), key=itemgetter(1))]  # None: no token
        self._from_file = {f: i for i, f in enumerate(self._to_file) if f is not None}
        self.special_tokens = {t: i for t, i in file_id.items() if t not in internal}
        self._special_text = {i: t for t, i in self.special_tokens.items()}
        self._split_special = re.compile("(" + "|".join(map(re.escape, sorted(self.special_tokens, key=len,
                                                                             reverse=True))) + ")")
        self.vocab_size = len(tokens)
        for name, i in (("bos_id", bos_id), ("eos_id", eos_id)):
            if i not in self._special_text:
                raise ValueError(f"{source}: {name}={i!r} is not one of the special tokens")
        self.bos_id, self.eos_id = bos_id, eos_id

    @classmethod
    def from_metadata(cls, meta: dict, source: str = "GGUF metadata") -> SmolLMTokenizer:
        """From a GGUF file's metadata (`helpers.gguf_reader.read_gguf(...).metadata`)."""
        if meta.get("tokenizer.ggml.model") != "gpt2" or meta.get("tokenizer.ggml.pre") != "smollm":
            raise ValueError(f"{source}: not a SmolLM tokenizer (model {meta.get('tokenizer.ggml.model')!r}, "
                             f"pre-tokenizer {meta.get('tokenizer.ggml.pre')!r}; expected 'gpt2' and 'smollm')")
        return cls(meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges"),
                   meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id"), source)

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Text -> ids. Special tokens written in ``text`` become their id only if ``allow_special``."""
        check_text("text", text)
        check_bool("allow_special", allow_special)
        if allow_special:
            out: list[int] = []
            for k, part in enumerate(self._split_special.split(text)):  # odd parts are the special tokens
                out.extend([self.special_tokens[part]] if k % 2 else self.encode(part))
            return out
        ids = [self._to_file[i] for i in self.bpe.encode(text)]
        if None in ids:
            bad = next(c for c in text if any(self._to_file[b] is None for b in c.encode("utf-8")))
            raise ValueError(f"text holds {bad!r} (U+{ord(bad):04X}), a byte of which has no token in this vocabulary")
        return ids

    def decode_bytes(self, ids) -> bytes:
        parts = []
        for i in check_ids(ids, self.vocab_size):
            special = self._special_text.get(i)
            parts.append(special.encode("utf-8") if special is not None else self.bpe.vocab[self._from_file[i]])
        return b"".join(parts)

    def decode(self, ids) -> str:
        """Ids -> text; bytes that are not valid UTF-8 (half a character) show as U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        return self.decode_bytes([i])


def chat_prompt(messages, add_generation_prompt: bool = True) -> str:
    """The ChatML text of ``messages`` (a list of {"role", "content"} dicts), as SmolLM2's template writes it."""
    if isinstance(messages, str):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts; "
                        "for one question write [{'role': 'user', 'content': question}]")
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    parts = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ValueError(f"messages[{k}] must be a dict with exactly the keys 'role' and 'content', got {m!r}")
        if m["role"] not in ROLES or not isinstance(m["content"], str):
            raise ValueError(f"messages[{k}]: role must be one of {ROLES} and content a str, got {m!r}")
        if k == 0 and m["role"] != "system":
            parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
        parts.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)
