"""The form of a ci (词): each tune (词牌) fixes how many characters every line has.

A ci in the songci corpus is one block: the tune name, the author, then the lines of the poem,
each on its own line. Its *line-length pattern* counts the characters between punctuation
marks (，。、？！；： and line ends), so ``"一曲新词酒一杯，去年天气旧亭台。"`` gives ``(7, 7)``.

- `parse_ci(block)` -> `Ci` (tune, author, body); `line_lengths(body)` -> the pattern.
- `tune_patterns(text, tunes)`: for each tune, the most common pattern among its ci in
  ``text`` (the training part: the pattern is *learned* from the data, never typed in), with
  how many ci have it.
- `generated_body(text)`: the poem a model wrote after a tune prompt (up to the blank line
  that ends a ci, without the author line), or None if it never finished.
- `form_share(samples, pattern)`: the share of samples whose body follows the pattern.
- `length_distribution(bodies)` and `total_variation(p, q)`: how often each line length occurs,
  and how far two such distributions are apart (0 = the same, 1 = no overlap).
- `matched_lines(text, pattern)`: how many lines, from the first, have the pattern's lengths
  (a graded measure: a model that gets the first four lines right scores 4, not 0).
- `placed_form_share(model, tok, tune, pattern, prefixes)`: the form share of a model's samples
  with the prompt ``prefix + tune + "\n"`` for each prefix: ``"\n\n"`` (the blank line, as every
  ci opens), ``""`` (the tune name at position 0) or an earlier ci (the prompt moved along).

Example:
    >>> line_lengths("一曲新词酒一杯，去年天气旧亭台。\\n夕阳西下几时回。")
    (7, 7, 7)
    >>> generated_body("晏殊\\n一曲新词酒一杯。\\n\\n浣溪沙")
    '一曲新词酒一杯。'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from helpers.data import DOCUMENT_SEPARATOR

# Marks that end a line (half-width forms too: a model may write either).
LINE_BREAKS = "，。、？！；：,.?!;:\n"
_SPLIT = re.compile("[" + re.escape(LINE_BREAKS) + "]+")


@dataclass(frozen=True)
class Ci:
    tune: str  # 词牌, e.g. 浣溪沙
    author: str
    body: str  # the poem's lines, joined with "\n"


@dataclass(frozen=True)
class TunePattern:
    pattern: tuple[int, ...]  # characters per line, e.g. (7, 7, 7, 7, 7, 7)
    count: int  # ci of this tune with exactly this pattern
    total: int  # ci of this tune

    @property
    def share(self) -> float:
        return self.count / self.total


def _check_str(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def parse_ci(block: str) -> Ci:
    """Split one ci block (tune line, author line, poem lines) into a `Ci`."""
    lines = _check_str("block", block).strip("\n").split("\n")
    if len(lines) < 3:
        raise ValueError(f"block must hold a tune line, an author line and at least one line of poem, "
                         f"got {len(lines)} line(s)")
    return Ci(lines[0], lines[1], "\n".join(lines[2:]))


def line_lengths(body: str) -> tuple[int, ...]:
    """Characters between line breaks (punctuation or newline); empty pieces are skipped."""
    return tuple(len(piece) for piece in _SPLIT.split(_check_str("body", body)) if piece)


def tune_patterns(text: str, tunes: Sequence[str] | None = None) -> dict[str, TunePattern]:
    """The most common line-length pattern of each tune among the ci of ``text``.

    ``tunes=None`` gives every tune; a named tune with no ci in ``text`` is a ValueError.
    Ties go to the pattern seen first.
    """
    _check_str("text", text)
    if tunes is not None:
        if isinstance(tunes, str) or not hasattr(tunes, "__iter__"):
            raise TypeError("tunes must be a list of tune names (str), or None")
        tunes = list(tunes)  # first: checking a generator would consume it
        if not all(isinstance(t, str) for t in tunes):
            raise TypeError("tunes must be a list of tune names (str), or None")
    counts: dict[str, Counter] = {}
    for block in text.split(DOCUMENT_SEPARATOR):
        if block.count("\n") < 2:  # empty piece or a block with no poem
            continue
        ci = parse_ci(block)
        if tunes is None or ci.tune in tunes:
            counts.setdefault(ci.tune, Counter())[line_lengths(ci.body)] += 1
    missing = [t for t in (tunes or []) if t not in counts]
    if missing:
        raise ValueError(f"no ci of tune(s) {', '.join(missing)} in text")
    out = {}
    for tune in (tunes if tunes is not None else counts):
        pattern, count = counts[tune].most_common(1)[0]
        out[tune] = TunePattern(pattern, count, sum(counts[tune].values()))
    return out


def generated_body(text: str) -> str | None:
    """The poem in model output that follows a tune prompt: author line dropped, cut at the blank line.

    None when the ci never ends (no blank line) or holds no line after the author: such a
    sample cannot follow any pattern.
    """
    _check_str("text", text)
    end = text.find(DOCUMENT_SEPARATOR)
    if end < 0:
        return None
    lines = text[:end].split("\n")
    if len(lines) < 2:
        return None
    return "\n".join(lines[1:])


def follows(text: str, pattern: Sequence[int]) -> bool:
    """Whether the poem in model output ``text`` (see `generated_body`) has exactly ``pattern``."""
    _check_pattern(pattern)
    body = generated_body(text)
    return body is not None and line_lengths(body) == tuple(pattern)


def matched_lines(text: str, pattern: Sequence[int]) -> int:
    """Number of leading lines of the poem in model output ``text`` whose lengths match ``pattern``.

    The author line is dropped and the text is cut at the blank line that ends a ci, if any (an
    unfinished ci still scores its correct first lines). A line counts only when the
    punctuation after it was written: a last, unfinished line does not.
    """
    _check_pattern(pattern)
    _check_str("text", text)
    end = text.find(DOCUMENT_SEPARATOR)
    finished = end >= 0
    lines = (text[:end] if finished else text).split("\n", 1)
    if len(lines) < 2:
        return 0
    body = lines[1]
    pieces = _SPLIT.split(body)
    if not finished and pieces:  # the piece after the last mark is still being written
        pieces = pieces[:-1]
    got = [len(p) for p in pieces if p]
    n = 0
    while n < min(len(got), len(pattern)) and got[n] == pattern[n]:
        n += 1
    return n


def _check_pattern(pattern) -> None:
    if isinstance(pattern, (str, bytes)) or not isinstance(pattern, (list, tuple)) or not all(isinstance(n, int) and not isinstance(n, bool) for n in pattern):
        raise TypeError(f"pattern must be a sequence of ints (a list or tuple: characters per line), got {pattern!r}"[:200])


def form_share(samples: Sequence[str], pattern: Sequence[int]) -> float:
    """Share of ``samples`` (model outputs after a tune prompt) that follow ``pattern``."""
    if isinstance(samples, str) or not all(isinstance(s, str) for s in samples):
        raise TypeError("samples must be a list of str")
    if len(samples) == 0:
        raise ValueError("samples must not be empty")
    return sum(follows(s, pattern) for s in samples) / len(samples)


def tune_prompt(tune: str) -> str:
    """The text a ci starts with in the corpus: the blank line after the previous ci, the tune, a newline."""
    if not _check_str("tune", tune) or "\n" in tune:
        raise ValueError(f"tune must be a non-empty name on one line, got {tune!r}")
    return DOCUMENT_SEPARATOR + tune + "\n"


def length_distribution(bodies: Sequence[str]) -> dict[int, float]:
    """Share of lines of each length over all ``bodies`` (ci bodies; see `line_lengths`)."""
    if isinstance(bodies, str):
        raise TypeError("bodies must be a list of str, not one str")
    counts = Counter(n for body in bodies for n in line_lengths(body))
    total = sum(counts.values())
    if total == 0:
        raise ValueError("bodies hold no line at all")
    return {n: c / total for n, c in sorted(counts.items())}


def total_variation(p: dict, q: dict) -> float:
    """Total variation distance between two distributions given as {value: probability}: half the L1 distance."""
    if not isinstance(p, dict) or not isinstance(q, dict):
        raise TypeError("p and q must be dicts {value: probability}")
    for name, d in (("p", p), ("q", q)):
        values = list(d.values())
        if not d or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in values) \
                or abs(sum(values) - 1) > 1e-6:
            raise ValueError(f"{name} must be a non-empty distribution: probabilities in [0, 1] that sum to 1, "
                             f"got {d!r}"[:200])
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def placed_form_share(model, tok, tune: str, pattern: Sequence[int], prefixes: Sequence[str], n_each: int = 10,
                      new: int = 110, temperature: float = 0.8, seed: int = 0) -> float:
    """Form share of ``n_each`` samples per prefix, each prompted with ``prefix + tune + "\\n"``.

    ``model`` has a ``generate(idx, n, temperature=, generator=)`` (a `helpers.models.GPT`) and
    ``tok`` an ``encode``/``decode`` (a `CharTokenizer`); the samples of prefix k come from
    ``torch.Generator().manual_seed(seed + k)``. Notebook 08 and the placement measurements of
    ``tools/pretrain.py``'s record use this one function.
    """
    _check_str("tune", tune)
    _check_pattern(pattern)
    if isinstance(prefixes, str) or not prefixes or not all(isinstance(p, str) for p in prefixes):
        raise TypeError("prefixes must be a non-empty list of str (\"\\n\\n\", \"\" or an earlier ci)")
    for name, value in (("n_each", n_each), ("new", new), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name != "seed" else 0):
            raise ValueError(f"{name} must be an int >= {1 if name != 'seed' else 0}, got {value!r}")
    texts = []
    with torch.no_grad():
        for k, prefix in enumerate(prefixes):
            prompt = torch.tensor([tok.encode(prefix + tune + "\n")] * n_each)  # (n_each, P)
            rows = model.generate(prompt, new, temperature=temperature,
                                  generator=torch.Generator().manual_seed(seed + k))  # (n_each, P + new)
            texts += [tok.decode(r[prompt.shape[1]:].tolist()) for r in rows]
    return form_share(texts, pattern)
