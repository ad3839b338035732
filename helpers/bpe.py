"""Byte-level byte-pair encoding (BPE, 字节对编码), trained from scratch.

Text is first turned into UTF-8 bytes, so the 256 byte values are the base vocabulary and
no string is ever "unknown". Training then repeats: find the most frequent adjacent pair of
ids, give it a new id (256, 257, ...), replace it everywhere. ``merges[k]`` is the pair that
became id ``256 + k``; encoding replays the merges in that order of rank.

Pre-splitting: as in GPT-2, text is cut into chunks (a word with its leading space, a run
of digits, of punctuation, of whitespace) by `SPLIT_PATTERN`, and merges never cross a
chunk boundary. That keeps tokens word-like, and makes training fast: each distinct chunk
is processed once, weighted by how often it occurs, and pair counts are updated only
in the chunks that contain the merged pair.

Ties: when several pairs are equally frequent, the pair with the smaller ids wins.

Any Python string round-trips, lone surrogates included: they are written with
``errors="surrogatepass"``. ``decode`` of ids that do not form valid UTF-8 (for example
half of a Chinese character) shows U+FFFD for the broken bytes; `decode_bytes` gives the
raw bytes.

Shapes: V = vocab_size = 256 + len(merges). ``encode(str) -> list[int]`` ids in [0, V).

Example (hand-worked in tests/test_tokenizers.py):
    >>> tok = BPETokenizer.train("aaabdaaabac", vocab_size=259)
    >>> tok.merges
    [(97, 97), (97, 98), (256, 257)]
    >>> tok.encode("aaabdaaabac")
    [258, 100, 258, 97, 99]
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise

import torch

from helpers.tokenizers import check_ids, check_text, from_file, load_json, save_json
from helpers.validate import check_int

# Letters, digits and everything else (punctuation, symbols, "_") each form runs, optionally
# after one space; whitespace runs leave their last space to the next word (as GPT-2 does).
# The five classes cover every character, so the chunks always add up to the text.
SPLIT_PATTERN = r" ?[^\W\d_]+| ?\d+| ?(?:_|[^\w\s])+|\s+(?!\S)|\s+"
# The only patterns `BPETokenizer.load` accepts: a file is untrusted, and a regex from it with
# catastrophic backtracking (e.g. "(a+)+$") would make encode take exponential time.
KNOWN_PATTERNS = (SPLIT_PATTERN, None)
MAX_FILE_TOKEN_BYTES = 1 << 16  # a merge (k, k) doubles a token: 40 such lines would need 2**40 bytes
_CACHE_LIMIT = 100_000


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogatepass")


def merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair`` (left to right) by ``new_id``."""
    a, b = pair
    out, i, n = [], 0, len(ids)
    while i < n:
        if i < n - 1 and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class BPETokenizer:
    """A byte-level BPE tokenizer: 256 byte tokens plus one token per merge."""

    def __init__(self, merges: Sequence[Sequence[int]] = (), pattern: str | None = SPLIT_PATTERN):
        self.merges: list[tuple[int, int]] = []
        self.vocab: list[bytes] = [bytes([i]) for i in range(256)]
        if isinstance(merges, (str, bytes, torch.Tensor)) or not isinstance(merges, Iterable):
            raise TypeError(f"merges must be a list of pairs of ints, got {type(merges).__name__}")
        for k, m in enumerate(merges):
            if not isinstance(m, Sequence) or isinstance(m, str) or len(m) != 2 or any(isinstance(i, bool) or not isinstance(i, int) for i in m):
                raise TypeError(f"merges[{k}] must be a pair of ints, got {m!r}")
            if not all(0 <= i < 256 + k for i in m):
                raise ValueError(f"merges[{k}] {tuple(m)} uses an id outside [0, {256 + k})")
            self.merges.append((m[0], m[1]))
            self.vocab.append(self.vocab[m[0]] + self.vocab[m[1]])
        self._ranks = {pair: 256 + k for k, pair in enumerate(self.merges)}
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be a regex string or None, got {type(pattern).__name__}")
        self.pattern = pattern
        try:
            self._split = re.compile(pattern) if pattern is not None else None
        except re.error as e:
            raise ValueError(f"pattern is not a valid regular expression ({e}): {pattern!r}") from None
        self._cache: dict[str, list[int]] = {}

    def _chunks(self, text: str) -> list[str]:
        if self._split is None:
            return [text] if text else []
        chunks = self._split.findall(text)
        if sum(map(len, chunks)) != len(text):
            raise ValueError("the split pattern does not cover every character of the text")
        return chunks

    @classmethod
    def train(cls, text: str, vocab_size: int, pattern: str | None = SPLIT_PATTERN) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text`` (fewer if the text runs out of pairs)."""
        check_text("text", text)
        if check_int("vocab_size", vocab_size) < 256:
            raise ValueError(f"vocab_size must be >= 256 (the byte tokens), got {vocab_size}")
        tok = cls(pattern=pattern)
        chunk_counts = Counter(tok._chunks(text))
        words = [list(to_bytes(c)) for c in chunk_counts]  # one entry per distinct chunk
        freqs = list(chunk_counts.values())
        counts: dict[tuple[int, int], int] = defaultdict(int)
        where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> chunks holding it
        for w, ids in enumerate(words):
            for pair in pairwise(ids):
                counts[pair] += freqs[w]
                where[pair].add(w)
        heap = [(-c, pair) for pair, c in counts.items()]  # lazy: stale entries are skipped
        heapq.heapify(heap)
        merges: list[tuple[int, int]] = []
        while len(merges) < vocab_size - 256:
            while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
                heapq.heappop(heap)
            if not heap:
                break
            pair = heapq.heappop(heap)[1]
            new_id = 256 + len(merges)
            merges.append(pair)
            changed = set()
            for w in where.pop(pair):
                old, f = words[w], freqs[w]
                new = merge_pair(old, pair, new_id)
                old_pairs, new_pairs = set(pairwise(old)), set(pairwise(new))
                for q in pairwise(old):
                    counts[q] -= f
                for q in pairwise(new):
                    counts[q] += f
                for q in old_pairs - new_pairs:
                    if q != pair:
                        where[q].discard(w)
                for q in new_pairs:
                    where[q].add(w)
                changed |= old_pairs | new_pairs
                words[w] = new
            for q in changed:
                if counts[q] > 0:
                    heapq.heappush(heap, (-counts[q], q))
                else:
                    del counts[q]
        return cls(merges, pattern=pattern)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_bytes(self, i: int) -> bytes:
        """The bytes a token id stands for, e.g. ``b' the'``."""
        return self.vocab[check_ids([i], self.vocab_size)[0]]

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(to_bytes(chunk))
        while len(ids) >= 2:
            # The pair merged earliest in training goes first, exactly as in training.
            pair = min(pairwise(ids), key=lambda p: self._ranks.get(p, 1 << 62))
            if pair not in self._ranks:
                break
            ids = merge_pair(ids, pair, self._ranks[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in self._chunks(check_text("text", text)):
            ids = self._cache.get(chunk)
            if ids is None:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                ids = self._cache[chunk] = self._encode_chunk(chunk)
            out.extend(ids)
        return out

    def decode_bytes(self, ids) -> bytes:
        return b"".join(self.vocab[i] for i in check_ids(ids, self.vocab_size))

    def decode(self, ids) -> str:
        raw = self.decode_bytes(ids)
        try:
            return raw.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:  # e.g. a token sequence that cuts a character in half
            return raw.decode("utf-8", errors="replace")

    def save(self, path) -> None:
        """Write the merges and the split pattern; a pattern `load` would not trust is refused here."""
        if not _known_pattern(self.pattern):
            raise ValueError("save refuses this tokenizer: its split pattern is not one of the known patterns "
                             "(SPLIT_PATTERN, gpt2_pattern() or None), and load does not trust a regex from a file")
        save_json(path, "bpe", {"pattern": self.pattern, "merges": [list(m) for m in self.merges]})

    @classmethod
    def load(cls, path) -> BPETokenizer:
        """Read a file written by `save`. Its ``pattern`` must be a known one (`_known_pattern`: a regex
        from a file could hang ``encode``) and no token may exceed `MAX_FILE_TOKEN_BYTES`;
        anything else raises ValueError naming the file and the field."""
        data = load_json(path, "bpe", ["pattern", "merges"])
        if not _known_pattern(data["pattern"]):
            raise ValueError(f"{path} is damaged or foreign: field 'pattern' is not one of the known split "
                             "patterns (SPLIT_PATTERN, gpt2_pattern() or None); a regex from a file is not "
                             "trusted, as one with catastrophic backtracking would make encode hang")
        merges = from_file(path, "merges", lambda: _check_file_merges(data["merges"]))
        return from_file(path, "merges", lambda: cls(merges, pattern=data["pattern"]))


def _known_pattern(pattern) -> bool:
    """Whether `load` trusts ``pattern``: one of `KNOWN_PATTERNS`, or GPT-2's (`gpt2_pattern`, built
    from this Python's Unicode tables, so a file saved under another Unicode version may differ)."""
    if any(pattern == p and type(pattern) is type(p) for p in KNOWN_PATTERNS):
        return True
    if type(pattern) is not str or not pattern.startswith("'s|'t|'re|"):
        return False
    # imported here: gpt2_tokenizer imports this module
    from helpers.gpt2_tokenizer import gpt2_pattern

    return pattern == gpt2_pattern()


def _check_file_merges(merges) -> list:
    """Token lengths of a file's merges, checked on ints before any bytes are built."""
    if not isinstance(merges, list):
        raise TypeError(f"merges must be a list of pairs of ints, got {type(merges).__name__}")
    lengths, total = [1] * 256, 256
    for k, m in enumerate(merges):
        if not isinstance(m, list) or len(m) != 2 or not all(type(i) is int and 0 <= i < 256 + k for i in m):
            raise ValueError(f"merge {k} must be a pair of ints in [0, {256 + k}), got {m!r}")
        lengths.append(lengths[m[0]] + lengths[m[1]])
        total += lengths[-1]
        if lengths[-1] > MAX_FILE_TOKEN_BYTES or total > 1 << 28:
            raise ValueError(f"merge {k} makes a token of {lengths[-1]} bytes, {total} in all (limits "
                             f"{MAX_FILE_TOKEN_BYTES} and {1 << 28})")
    return merges
