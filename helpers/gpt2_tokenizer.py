"""GPT-2's tokenizer from its own files (``vocab.json`` + ``merges.txt``), on our `BPETokenizer`.

GPT-2's BPE is byte-level, like ours; three things are only conventions of its files:

- Byte -> printable character (`bytes_to_unicode`): merges.txt is text, so each of the 256
  bytes is written as a visible character. Printable bytes stand for themselves; the others
  (control bytes, space, ...) are shifted to U+0100 and up: a space is ``Ġ`` (U+0120).
- ids: vocab.json maps each token string to its id; GPT-2's ids are not ours (its byte
  tokens are numbered in `bytes_to_unicode`'s order), so ids are translated both ways.
- Pre-splitting: GPT-2's regex, with ``\\p{L}`` (letters) and ``\\p{N}`` (numbers)::

      's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

  The standard ``re`` module has no ``\\p{..}``; `gpt2_pattern` writes the same classes out
  from `unicodedata` (and ``\\s`` as Unicode's White_Space list, as the `regex` module and
  Hugging Face's `tokenizers` read it), so no extra package is needed.

Tokens in vocab.json that no merge builds (``<|endoftext|>``, id 50256) are special:
`decode` writes their text; `encode` reads them as plain text unless ``allow_special=True``.

Shapes: V = vocab_size (50257 for GPT-2). ``encode(str) -> list[int]`` ids in [0, V).

Example:
    >>> tok = GPT2Tokenizer.from_folder("gpt2/")       # doctest: +SKIP  (after `make gpt2`)
    >>> tok.encode("Hello world")                      # doctest: +SKIP
    [15496, 995]
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from functools import cache
from operator import itemgetter
from pathlib import Path

from helpers.bpe import BPETokenizer
from helpers.tokenizers import check_ids, check_text
from helpers.untrusted import load_json, read_text
from helpers.validate import check_bool

# Unicode's White_Space property (stable since Unicode 6.3). Python's \s also matches
# U+001C..U+001F, which GPT-2's regex does not count as space.
FILE_LIMIT = 64 << 20  # bytes per file: GPT-2's vocab.json is 1.0 MB, its merges.txt 0.5 MB
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


@cache
def bytes_to_unicode() -> dict[int, str]:
    """byte -> the character GPT-2's files write for it (printable bytes stay, others move to U+0100+)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def _class(kinds: str, first_letters: str) -> str:
    """A character-class body (``a-zà-ö...``) of the code points whose category starts with ``kinds``."""
    spans = (m.span() for m in re.finditer(f"[{kinds}]+", first_letters))  # runs of consecutive code points
    return "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b - 1)) if b - a > 1 else "") for a, b in spans)


@cache
def gpt2_pattern() -> str:
    """GPT-2's pre-tokenisation regex for the standard ``re`` module (classes from `unicodedata`)."""
    # One character per code point: the first letter of its category ("L"etter, "N"umber, ...).
    first = "".join(map(itemgetter(0), map(unicodedata.category, map(chr, range(sys.maxunicode + 1)))))
    L, N, S = _class("L", first), _class("N", first), WHITE_SPACE
    return (rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+"
            rf"|[{S}]+(?![^{S}])|[{S}]+")


class GPT2Tokenizer:
    """GPT-2's BPE read from its ``vocab.json`` (token -> id) and ``merges.txt`` (ranked pairs)."""

    def __init__(self, encoder: Mapping[str, int], merges: Sequence[tuple[str, str]], source: str = "vocabulary"):
        if not isinstance(encoder, Mapping):
            raise TypeError(f"encoder must be a dict token -> id, got {type(encoder).__name__}")
        for tok, i in encoder.items():
            if not isinstance(tok, str) or isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"{source}: every entry must be str -> int, got {tok!r} -> {i!r}")
        if "" in encoder:  # an empty special token would match between every two characters of a text
            raise ValueError(f"{source}: the empty string is not a token (id {encoder['']})")
        if sorted(encoder.values()) != list(range(len(encoder))):
            raise ValueError(f"{source}: the ids must be 0 .. {len(encoder) - 1}, each once")
        byte_char = bytes_to_unicode()
        missing = [c for c in byte_char.values() if c not in encoder]
        if missing:
            raise ValueError(f"{source}: the byte token {missing[0]!r} is missing (a byte-level vocabulary has all 256)")
        internal = {byte_char[b]: b for b in range(256)}  # token string -> our BPETokenizer's id
        pairs = []
        for k, m in enumerate(merges):
            if len(m) != 2 or not all(isinstance(s, str) for s in m):
                raise TypeError(f"{source}: merge {k} must be a pair of str, got {m!r}")
            a, b = m
            for part in (a, b):
                if part not in internal:
                    raise ValueError(f"{source}: merge {k} ({a!r} {b!r}) uses {part!r}, which no earlier merge builds")
            if a + b in internal:
                raise ValueError(f"{source}: merge {k} ({a!r} {b!r}) builds {a + b!r} a second time")
            if a + b not in encoder:
                raise ValueError(f"{source}: merge {k} builds {a + b!r}, which is not in the vocabulary")
            pairs.append((internal[a], internal[b]))
            internal[a + b] = 256 + k
        self.bpe = BPETokenizer(pairs, pattern=gpt2_pattern())  # does the merging, on our ids
        self._to_file = [0] * len(internal)  # our id -> file id
        for tok, i in internal.items():
            self._to_file[i] = encoder[tok]
        self._from_file = {f: i for i, f in enumerate(self._to_file)}
        self.special_tokens = {tok: i for tok, i in encoder.items() if tok not in internal}
        self._special_text = {i: tok for tok, i in self.special_tokens.items()}
        self._split_special = (re.compile("(" + "|".join(map(re.escape, sorted(self.special_tokens, key=len, reverse=True))) + ")")
                               if self.special_tokens else None)
        self.vocab_size = len(encoder)

    @classmethod
    def from_files(cls, vocab_json, merges_txt) -> GPT2Tokenizer:
        """Read GPT-2's ``vocab.json`` and ``merges.txt`` (optional ``#version`` first line)."""
        encoder = load_json(vocab_json, "GPT-2 vocab.json", limit=FILE_LIMIT)
        if not isinstance(encoder, dict):
            raise ValueError(f"{vocab_json} must hold a JSON object token -> id, got {type(encoder).__name__}")
        merges = []
        for n, line in enumerate(read_text(merges_txt, "GPT-2 merges.txt", limit=FILE_LIMIT).split("\n"), start=1):
            line = line.rstrip("\r")
            if not line or (n == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"{merges_txt} line {n}: a merge is two tokens separated by one space, got {line!r}")
            merges.append((parts[0], parts[1]))
        return cls(encoder, merges, source=f"{vocab_json} + {merges_txt}")

    @classmethod
    def from_folder(cls, folder) -> GPT2Tokenizer:
        """A folder holding ``vocab.json`` and ``merges.txt`` (e.g. the one `make gpt2` fills)."""
        folder = Path(folder)
        for name in ("vocab.json", "merges.txt"):
            if not (folder / name).is_file():
                raise FileNotFoundError(f"{folder} has no {name} (run `make gpt2`, or point at a GPT-2 folder)")
        return cls.from_files(folder / "vocab.json", folder / "merges.txt")

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Text -> GPT-2 ids. Special tokens written in ``text`` become their id only if ``allow_special``."""
        check_text("text", text)
        check_bool("allow_special", allow_special)
        if not allow_special or self._split_special is None:
            return [self._to_file[i] for i in self.bpe.encode(text)]
        out: list[int] = []
        for k, part in enumerate(self._split_special.split(text)):  # odd parts are the special tokens
            out.extend([self.special_tokens[part]] if k % 2 else self.encode(part))
        return out

    def decode_bytes(self, ids) -> bytes:
        parts = []
        for i in check_ids(ids, self.vocab_size):
            special = self._special_text.get(i)
            parts.append(special.encode("utf-8") if special is not None else self.bpe.vocab[self._from_file[i]])
        return b"".join(parts)

    def decode(self, ids) -> str:
        """GPT-2 ids -> text; bytes that are not valid UTF-8 (half a character) show as U+FFFD, as in GPT-2."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        return self.decode_bytes([i])
