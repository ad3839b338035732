"""Tokenizers: text -> list of integer ids -> text.

Three levels, from the simplest to what GPT-style models use:

- `CharTokenizer`: one id per character, vocabulary = the sorted set of characters seen.
- `WordTokenizer`: one id per whitespace-separated word, with special tokens
  (``<pad>``, ``<unk>``, ``<eos>``); unknown words map to ``<unk>`` when it exists.
- `helpers.bpe.BPETokenizer` (its own module, which imports the checks of this one; nothing
  here imports it back): byte-level byte-pair encoding, trained from scratch; round-trips any
  Python string.

All three save to and load from JSON (never pickle: loading a pickle runs code). Saves are
atomic; a loaded file is untrusted input: every field is checked and a damaged one raises
ValueError naming the file and the field.

Shapes: V = vocab_size. ``encode(str) -> list[int]`` with every id in [0, V);
``decode(list[int]) -> str``.

Example:
    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.encode("hole"), tok.vocab_size
    ([1, 3, 2, 0], 4)
    >>> tok.decode([1, 0, 2, 2, 3])
    'hello'
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from helpers import untrusted
from helpers.fileio import atomic_write, check_path
from helpers.validate import check_sequence

DEFAULT_SPECIALS = ("<pad>", "<unk>", "<eos>")


def check_ids(ids, vocab_size: int) -> list[int]:
    """Return ``ids`` as a list of ints in [0, vocab_size); accepts lists, tuples, 1-D tensors/arrays.

    Any integer type is accepted and converted to int: Python ints, numpy integer scalars,
    tensors/arrays of any integer dtype, a list of 0-d integer tensors. Floats and bools are refused (TypeError).
    """
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
    if hasattr(ids, "tolist"):  # torch tensors and numpy arrays
        ids = ids.tolist()
    if not isinstance(ids, Iterable):
        raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
    ids = [i.tolist() if getattr(i, "ndim", None) == 0 and hasattr(i, "tolist") else i for i in ids]  # 0-d tensors
    for i in ids:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral):
            raise TypeError(f"ids must contain ints only, got {type(i).__name__} ({i!r})")
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} is outside the vocabulary [0, {vocab_size})")
    return [int(i) for i in ids]


def check_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def save_json(path, kind: str, payload: dict) -> None:
    """Write the tokenizer file atomically: a failed save leaves the old file intact, no temp file."""
    # ensure_ascii keeps lone surrogates (valid in a Python str, not in UTF-8) writable.
    text = json.dumps({"type": kind, "version": 1, **payload}, indent=1)
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.write(text)


def load_json(path, kind: str, keys: Sequence[str]) -> dict:
    """Read a tokenizer file; a file that is not JSON raises ValueError naming the file.

    Tokenizer files are untrusted input: each ``load`` then checks every field's type and
    values (see `from_file`) before building the tokenizer.
    """
    path = check_path("path", path)
    data = untrusted.load_json(path, "tokenizer file")  # bounded, strict JSON; errors name the file
    if not isinstance(data, dict) or data.get("type") != kind or data.get("version") != 1:
        got = data.get("type") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path} does not hold a version-1 {kind!r} tokenizer (type: {got!r})")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{path} lacks the field(s) {', '.join(missing)} of a {kind!r} tokenizer")
    return data


def from_file(path, field: str, build):
    """``build()``, with any ValueError/TypeError it raises reported as a damaged ``field`` of ``path``."""
    try:
        return build()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path} is damaged: field {field!r}: {e}") from None


class CharTokenizer:
    """One id per character; ids follow the sorted order of the characters."""

    def __init__(self, chars: Sequence[str]):
        if isinstance(chars, Mapping | set | frozenset):  # no order, or keys that are not the vocabulary
            raise TypeError(f"chars must be a sequence of single characters, got {type(chars).__name__}")
        try:  # a 0-d tensor is an Iterable that cannot be iterated: ask, don't check
            chars = list(chars)
        except TypeError:
            raise TypeError(f"chars must be a sequence of single characters, got {type(chars).__name__}") from None
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"every vocabulary entry (chars) must be a single character, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("the characters (chars) must be distinct")
        if not chars:
            raise ValueError("the vocabulary (chars) must contain at least one character")
        self.chars = chars
        self._stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Build the vocabulary from the sorted set of characters in ``text``."""
        check_text("text", text)
        if not text:
            raise ValueError("text must contain at least one character to build a vocabulary from")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __contains__(self, ch: object) -> bool:
        """``"a" in tokenizer``: whether the character has an id (so `encode` will not refuse it)."""
        return ch in self._stoi

    def encode(self, text: str) -> list[int]:
        check_text("text", text)
        try:
            return [self._stoi[c] for c in text]
        except KeyError as e:
            c = e.args[0]
            raise ValueError(f"unknown character {c!r} (U+{ord(c):04X}) is not in the vocabulary") from None

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in check_ids(ids, self.vocab_size))

    def save(self, path) -> None:
        save_json(path, "char", {"chars": self.chars})

    @classmethod
    def load(cls, path) -> CharTokenizer:
        chars = load_json(path, "char", ["chars"])["chars"]
        return from_file(path, "chars", lambda: cls(check_sequence("chars", chars)))


class WordTokenizer:
    """One id per whitespace-separated word. ``decode`` joins words with single spaces.

    The vocabulary is used as given (so ids can match an existing table). Unknown words
    become ``unk_token`` if it is in the vocabulary, otherwise they raise ValueError.
    """

    def __init__(self, vocab: Sequence[str], unk_token: str | None = "<unk>"):
        vocab = check_sequence("vocab", vocab)  # a lone str would read as one-letter words
        if unk_token is not None and not isinstance(unk_token, str):
            raise TypeError(f"unk_token must be a str or None, got {type(unk_token).__name__}")
        for w in vocab:
            if not isinstance(w, str) or not w or w.split() != [w]:
                raise ValueError(f"every vocabulary entry (vocab) must be a non-empty word without spaces, got {w!r}")
        if len(set(vocab)) != len(vocab):
            raise ValueError("the vocabulary entries (vocab) must be distinct")
        if not vocab:
            raise ValueError("the vocabulary (vocab) must contain at least one word")
        self.vocab = vocab
        self._stoi = {w: i for i, w in enumerate(vocab)}
        self.unk_token = unk_token if unk_token in self._stoi else None

    @classmethod
    def from_texts(cls, texts: Iterable[str], specials: Sequence[str] = DEFAULT_SPECIALS,
                   unk_token: str | None = "<unk>") -> WordTokenizer:
        """Specials first (ids 0, 1, ...), then the other words in sorted order."""
        words = set()
        for t in check_sequence("texts", texts):  # a single str is refused: wrap it in a list
            words.update(t.split())
        specials = check_sequence("specials", specials)  # "<eos>" alone would give 5 one-letter specials
        if not words and not specials:
            raise ValueError("texts and specials hold no word: the vocabulary would be empty")
        return cls(specials + sorted(words - set(specials)), unk_token=unk_token)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_to_id(self, token: str) -> int:
        if check_text("token", token) not in self._stoi:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return self._stoi[token]

    def id_to_token(self, i: int) -> str:
        return self.vocab[check_ids([i], self.vocab_size)[0]]

    def _special_id(self, name: str) -> int | None:
        # Conventional names, either case: "<eos>" and "<EOS>" are both common.
        for token in (name, name.upper()):
            if token in self._stoi:
                return self._stoi[token]
        return None

    @property
    def pad_id(self) -> int | None:
        return self._special_id("<pad>")

    @property
    def unk_id(self) -> int | None:
        return None if self.unk_token is None else self._stoi[self.unk_token]

    @property
    def eos_id(self) -> int | None:
        return self._special_id("<eos>")

    def encode(self, text: str) -> list[int]:
        ids = []
        for w in check_text("text", text).split():
            i = self._stoi.get(w, self.unk_id)
            if i is None:
                raise ValueError(f"unknown word {w!r} is not in the vocabulary and there is no unk token")
            ids.append(i)
        return ids

    def decode(self, ids) -> str:
        return " ".join(self.vocab[i] for i in check_ids(ids, self.vocab_size))

    def save(self, path) -> None:
        save_json(path, "word", {"vocab": self.vocab, "unk_token": self.unk_token})

    @classmethod
    def load(cls, path) -> WordTokenizer:
        data = load_json(path, "word", ["vocab", "unk_token"])
        vocab = from_file(path, "vocab", lambda: check_sequence("vocab", data["vocab"]))
        return from_file(path, "unk_token", lambda: cls(vocab, unk_token=data["unk_token"]))


__all__ = ["CharTokenizer", "WordTokenizer", "check_ids", "check_text"]
