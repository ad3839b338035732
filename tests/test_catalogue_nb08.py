"""The check catalogue of notebook 08: each exercise check against correct answers written
differently from the reference and plausible wrong ones (tests/catalogue.py)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest
import torch

from helpers.checks.nb08 import check_exercise_1, check_exercise_2, check_exercise_3
from helpers.ci_form import line_lengths, parse_ci, tune_patterns
from helpers.data import document_starts
from tests.catalogue import Catalogue, Wrong, assert_catalogue


# --- exercise 1: line lengths --------------------------------------------------------------------
def reference_my_line_lengths(body):
    return tuple(len(piece) for piece in re.split(r"[，。、？！；：\n]+", body) if piece)


def char_loop(body):  # a character loop, a list
    out, n = [], 0
    for ch in body:
        if ch in "，。、？！；：\n":
            if n:
                out.append(n)
            n = 0
        else:
            n += 1
    if n:
        out.append(n)
    return out


def translate_split(body):  # every mark turned into a space, then str.split
    return tuple(map(len, body.translate({ord(m): " " for m in "，。、？！；：\n"}).split()))


def three_marks(body):  # the review's: only ，。？ (and newlines)
    return tuple(len(p) for p in re.split(r"[，。？\n]+", body) if p)


def newline_only(body):
    return tuple(len(p) for p in body.split("\n") if p)


def keeps_empty(body):
    return tuple(len(p) for p in re.split(r"[，。、？！；：\n]", body))


def helper_call(body):
    return line_lengths(body)


def counts_marks(body):  # the mark counted with its line
    return tuple(len(p) for p in re.findall(r"[^，。、？！；：\n]+[，。、？！；：]?", body))


EX1 = Catalogue(check_exercise_1, reference_my_line_lengths, correct=[char_loop, translate_split], wrong=[
    Wrong(three_marks, "which marks end a line", "splits only at ，。？"),
    Wrong(newline_only, "which marks end a line", "newlines only"),
    Wrong(keeps_empty, "empty pieces", "keeps empty pieces"),
    Wrong(helper_call, "calls", "one line around the helper"),
    Wrong(counts_marks, "expected", "counts the mark as a character"),
])


# --- exercise 2: the most common pattern of a tune -----------------------------------------------
def reference_pattern_share(blocks, tune):
    counts = Counter(line_lengths(parse_ci(b).body) for b in blocks if b.split("\n", 1)[0] == tune)
    pattern, n = counts.most_common(1)[0]
    return pattern, n / sum(counts.values())


def own_counting(blocks, tune):  # a dict of counts, max by count (first seen wins a tie)
    seen = defaultdict(int)
    for b in blocks:
        lines = b.split("\n")
        if lines[0] == tune and len(lines) > 2:
            seen[reference_like(b)] += 1
    best = max(seen, key=seen.get)
    return list(best), seen[best] / sum(seen.values())


def reference_like(block):
    body = block.split("\n", 2)[2]
    return tuple(len(p) for p in re.split(r"[，。、？！；：\n]+", body) if p)


def sorted_patterns(blocks, tune):  # parse_ci, then sort the patterns by count (stable: first seen first)
    mine = [line_lengths(parse_ci(b).body) for b in blocks if parse_ci(b).tune == tune] if blocks else []
    order = sorted(Counter(mine).items(), key=lambda kv: -kv[1])
    return order[0][0], order[0][1] / len(mine)


def share_of_all(blocks, tune):
    counts = Counter(line_lengths(parse_ci(b).body) for b in blocks if b.split("\n", 1)[0] == tune)
    pattern, n = counts.most_common(1)[0]
    return pattern, n / len(blocks)


def substring_tune(blocks, tune):  # the review's: "临江仙" in the tune line
    counts = Counter(line_lengths(parse_ci(b).body) for b in blocks if tune in b.split("\n", 1)[0])
    pattern, n = counts.most_common(1)[0]
    return pattern, n / sum(counts.values())


def newline_lines(blocks, tune):  # a line = a text line: a comma never ends one
    counts = Counter(tuple(len(x) for x in parse_ci(b).body.split("\n")) for b in blocks if b.split("\n", 1)[0] == tune)
    pattern, n = counts.most_common(1)[0]
    return pattern, n / sum(counts.values())


def helper_one_liner(blocks, tune):  # the review's: one line around tune_patterns
    p = tune_patterns("\n\n".join(blocks), [tune])[tune]
    return p.pattern, p.share


EX2 = Catalogue(check_exercise_2, reference_pattern_share, correct=[own_counting, sorted_patterns], wrong=[
    Wrong(share_of_all, "own ci", "share over all ci"),
    Wrong(substring_tune, ("浣溪沙慢", "not containing it"), "matches a tune name inside a longer one"),
    Wrong(newline_lines, "expected", "lines at newlines only"),
    Wrong(helper_one_liner, "calls", "one line around the helper"),
])


# --- exercise 3: document starts -----------------------------------------------------------------
def reference_document_starts(text, block_size):
    found = [i for i in range(len(text) - 1) if text[i:i + 2] == "\n\n"]
    return torch.tensor([i for i in found if i + 2 < len(text) and i + block_size + 1 <= len(text)], dtype=torch.long)


def regex_lookahead(text, block_size):
    return torch.tensor([m.start() for m in re.finditer(r"\n\n(?=.)", text, flags=re.S)
                         if m.start() + block_size + 1 <= len(text)], dtype=torch.int64)


def find_loop(text, block_size):
    out, i = [], text.find("\n\n")
    while i != -1:
        if i + 2 < len(text) and i + block_size < len(text):
            out.append(i)
        i = text.find("\n\n", i + 2)
    return torch.as_tensor(out, dtype=torch.long)


def keeps_the_end(text, block_size):
    return torch.tensor([i for i in range(len(text) - 1) if text[i:i + 2] == "\n\n"], dtype=torch.long)


def window_of_t(text, block_size):  # a window of block_size, not block_size + 1
    found = [i for i in range(len(text) - 1) if text[i:i + 2] == "\n\n"]
    return torch.tensor([i for i in found if i + 2 < len(text) and i + block_size <= len(text)], dtype=torch.long)


def after_separator(text, block_size):  # the offset of the ci, after the blank line
    found = [i + 2 for i in range(len(text) - 1) if text[i:i + 2] == "\n\n"]
    return torch.tensor([i for i in found if i < len(text) and i + block_size - 1 <= len(text)], dtype=torch.long)


def helper_starts(text, block_size):
    return document_starts(text, block_size)


EX3 = Catalogue(check_exercise_3, reference_document_starts, correct=[regex_lookahead, find_loop], wrong=[
    Wrong(keeps_the_end, "no ci after it", "keeps the final blank line"),
    Wrong(window_of_t, "block_size + 1", "a window of T"),
    Wrong(after_separator, "blank line itself", "offsets after the separator"),
    Wrong(helper_starts, "calls", "the helper itself"),
])


@pytest.mark.parametrize("cat", [EX1, EX2, EX3], ids=["exercise_1", "exercise_2", "exercise_3"])
def test_catalogue(cat):
    counts = assert_catalogue(cat)
    assert counts["correct"] >= 2 and counts["wrong"] >= 3
