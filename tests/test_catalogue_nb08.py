"""The check catalogue of notebook 08: each build and exercise check against correct answers written
differently from the reference and plausible wrong ones (tests/catalogue.py)."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import pytest
import torch

from helpers.checks.nb08 import (
    check_ci_examples,
    check_exercise_1,
    check_exercise_2,
    check_exercise_3,
    check_follows,
    check_split,
)
from helpers.ci_form import follows, line_lengths, matched_lines, parse_ci, tune_patterns
from helpers.data import split_documents
from tests.catalogue import Catalogue, Wrong, assert_catalogue

SEP = "\n\n"


# --- build 1: split by whole ci ------------------------------------------------------------------
def reference_split_by_ci(text, val_fraction):
    docs = [d for d in text.split(SEP) if d]
    n_val = round(len(docs) * val_fraction)
    return "".join(d + SEP for d in docs[:len(docs) - n_val]), "".join(d + SEP for d in docs[len(docs) - n_val:])


def split_by_index(text, val_fraction):  # find the offset of the first validation ci, then slice
    starts = [0] + [m.end() for m in re.finditer(SEP, text)][:-1]
    n_val = round(len(starts) * val_fraction)
    cut = starts[len(starts) - n_val]
    return text[:cut], text[cut:]


def split_with_lists(text, val_fraction):  # keep the separators with a regex, count with math.floor(x + 0.5)
    pieces = re.findall(r"(?s).+?\n\n", text)
    n_val = math.floor(len(pieces) * val_fraction + 0.5)
    return "".join(pieces[:-n_val]), "".join(pieces[-n_val:])


def character_cut(text, val_fraction):  # the fixed sizes, but cut at a character: a ci split in two
    k = int(len(text) * val_fraction)
    return text[:-k], text[-k:]


def tutorial_split(text, val_fraction):  # the tutorial's: the "size" used as the index where validation begins
    k = int(len(text) * val_fraction)
    return text[:k], text[k:]


def int_not_round(text, val_fraction):
    docs = [d for d in text.split(SEP) if d]
    n_val = int(len(docs) * val_fraction)
    return "".join(d + SEP for d in docs[:len(docs) - n_val]), "".join(d + SEP for d in docs[len(docs) - n_val:])


def counts_empty_piece(text, val_fraction):  # the empty piece after the last blank line counted as a ci
    docs = text.split(SEP)
    n_val = round(len(docs) * val_fraction)
    return SEP.join(docs[:len(docs) - n_val]) + SEP, SEP.join(docs[len(docs) - n_val:])


def loses_separator(text, val_fraction):
    docs = [d for d in text.split(SEP) if d]
    n_val = round(len(docs) * val_fraction)
    return SEP.join(docs[:len(docs) - n_val]), SEP.join(docs[len(docs) - n_val:])


def first_validate(text, val_fraction):
    docs = [d for d in text.split(SEP) if d]
    n_val = round(len(docs) * val_fraction)
    return "".join(d + SEP for d in docs[n_val:]), "".join(d + SEP for d in docs[:n_val])


def helper_split(text, val_fraction):
    return split_documents(text, val_fraction)


SPLIT = Catalogue(check_split, reference_split_by_ci, correct=[split_by_index, split_with_lists], wrong=[
    Wrong(character_cut, "splits a ci in two", "cut at a character position"),
    Wrong(tutorial_split, "splits a ci in two", "the tutorial's bug"),
    Wrong(int_not_round, "rounded", "int() instead of round()"),
    Wrong(counts_empty_piece, ("empty piece", "give back the text"), "the empty last piece counted as a ci"),
    Wrong(loses_separator, "blank line after it", "separators dropped"),
    Wrong(first_validate, "LAST ci validate", "the first ci validate"),
    Wrong(helper_split, "calls", "the helper itself"),
])


# --- build 2: the examples of one ci -------------------------------------------------------------
def reference_ci_examples(ids, block):
    y = ids[1:].clone()
    y[0] = -100
    return list(zip(ids[:-1].split(block), y.split(block), strict=True))


def loop_examples(ids, block):  # a loop over window starts, the mask written into a new tensor
    out = []
    for s in range(0, len(ids) - 1, block):
        x = ids[s:s + block]
        x = x[:len(ids) - 1 - s]
        y = ids[s + 1:s + 1 + len(x)]
        if s == 0:
            y = torch.cat([torch.tensor([-100]), y[1:]])
        out.append((x, y))
    return out


def where_mask(ids, block):  # torch.where on the positions, then chunk
    y = torch.where(torch.arange(len(ids) - 1) == 0, torch.tensor(-100), ids[1:])
    return [(a, b) for a, b in zip(torch.split(ids[:-1], block), torch.split(y, block), strict=True)]


def no_mask(ids, block):
    return list(zip(ids[:-1].split(block), ids[1:].split(block), strict=True))


def mask_in_place(ids, block):  # ids[1:] is a view: writing -100 into it changes the caller's ids
    y = ids[1:]
    y[0] = -100
    return list(zip(ids[:-1].split(block), y.split(block), strict=True))


def chunk_then_shift(ids, block):  # blocks of ids, shifted inside each: a target lost at every cut
    out = []
    for k, c in enumerate(ids.split(block)):
        if len(c) < 2:
            continue
        y = c[1:].clone()
        if k == 0:
            y[0] = -100
        out.append((c[:-1], y))
    return out


def masks_last(ids, block):
    y = ids[1:].clone()
    y[-1] = -100
    return list(zip(ids[:-1].split(block), y.split(block), strict=True))


def not_shifted(ids, block):  # y = x
    y = ids[:-1].clone()
    y[0] = -100
    return list(zip(ids[:-1].split(block), y.split(block), strict=True))


CI_EXAMPLES = Catalogue(check_ci_examples, reference_ci_examples, correct=[loop_examples, where_mask], wrong=[
    Wrong(no_mask, ("-100", "ignore_index"), "the first target not ignored"),
    Wrong(mask_in_place, "in place", "-100 written into a view of the input"),
    Wrong(chunk_then_shift, ("target is lost", "targets counted"), "cut into blocks before shifting"),
    Wrong(masks_last, "which target is ignored", "the last target ignored instead of the first"),
    Wrong(not_shifted, "shifted left", "targets equal to the inputs"),
])


# --- build 3: follows ----------------------------------------------------------------------------
def reference_follows(text, pattern):
    if "\n\n" not in text:
        return False
    lines = text.split("\n\n", 1)[0].split("\n")
    return len(lines) >= 2 and line_lengths("\n".join(lines[1:])) == tuple(pattern)


def regex_follows(text, pattern):  # a regex for the author line and the poem
    m = re.match(r"[^\n]*\n(.+?)\n\n", text, flags=re.S)
    return bool(m) and [len(p) for p in re.split(r"[，。、？！；：,.?!;:\n]+", m.group(1)) if p] == list(pattern)


def partition_follows(text, pattern):  # str.partition twice
    ci, sep, _ = text.partition("\n\n")
    _, nl, body = ci.partition("\n")
    return bool(sep and nl and body) and list(line_lengths(body)) == [int(n) for n in pattern]


def never_ends_ok(text, pattern):
    lines = text.split("\n\n", 1)[0].split("\n")
    return len(lines) >= 2 and line_lengths("\n".join(lines[1:])) == tuple(pattern)


def keeps_author(text, pattern):
    return "\n\n" in text and line_lengths(text.split("\n\n", 1)[0]) == tuple(pattern)


def no_cut(text, pattern):  # the whole text, the next ci included
    lines = text.split("\n")
    return "\n\n" in text and line_lengths("\n".join(lines[1:])) == tuple(pattern)


def prefix_match(text, pattern):  # the first lines match: more lines after them still pass
    if "\n\n" not in text:
        return False
    got = line_lengths(text.split("\n\n", 1)[0].split("\n", 1)[-1])
    return len(text.split("\n\n", 1)[0].split("\n")) >= 2 and got[:len(pattern)] == tuple(pattern)


def list_vs_tuple(text, pattern):  # a tuple compared with a list is never equal
    if "\n\n" not in text:
        return False
    lines = text.split("\n\n", 1)[0].split("\n")
    return len(lines) >= 2 and line_lengths("\n".join(lines[1:])) == pattern


def helper_follows(text, pattern):
    return follows(text, pattern)


FOLLOWS = Catalogue(check_follows, reference_follows, correct=[regex_follows, partition_follows], wrong=[
    Wrong(never_ends_ok, "never ends", "a ci that never ends passes"),
    Wrong(keeps_author, "author", "the author line counted as a line"),
    Wrong(no_cut, "blank line", "not cut at the blank line"),
    Wrong(prefix_match, "exactly", "the first lines match: passes"),
    Wrong(list_vs_tuple, "list", "a tuple compared with a list"),
    Wrong(helper_follows, "calls", "the helper itself"),
])


# --- exercise 2: where samples leave the form ---------------------------------------------------
def reference_form_survival(samples, pattern):
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x >= k for x in m) / len(m) for k in range(1, len(pattern) + 1)]


def counter_survival(samples, pattern):  # the notebook's reference: where each sample breaks, survivors left
    broke_at = Counter(matched_lines(s, pattern) for s in samples)   # lines right before the first miss
    left, survival = len(samples), []
    for line in range(len(pattern)):
        left -= broke_at[line]                   # the samples whose first miss is this line leave
        survival.append(left / len(samples))
    return survival


def histogram_exactly_k(samples, pattern):  # the notebook's wrong answer: exactly k lines right, not at least k
    broke_at = Counter(matched_lines(s, pattern) for s in samples)
    return [broke_at[k] / len(samples) for k in range(1, len(pattern) + 1)]


def tensor_survival(samples, pattern):  # a comparison matrix, mean over samples
    m = torch.tensor([matched_lines(s, pattern) for s in samples], dtype=torch.float64)  # (n,)
    k = torch.arange(1, len(pattern) + 1, dtype=torch.float64)                          # (L,)
    return (m[:, None] >= k[None, :]).double().mean(0).tolist()


def exactly_k(samples, pattern):
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x == k for x in m) / len(m) for k in range(1, len(pattern) + 1)]


def from_zero(samples, pattern):
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x >= k for x in m) / len(m) for k in range(len(pattern))]


def counts_not_shares(samples, pattern):
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x >= k for x in m) for k in range(1, len(pattern) + 1)]


def one_extra(samples, pattern):  # k up to len(pattern) + 1
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x >= k for x in m) / len(m) for k in range(1, len(pattern) + 2)]


SURVIVAL = Catalogue(check_exercise_2, reference_form_survival, correct=[counter_survival, tensor_survival], wrong=[
    Wrong(exactly_k, "at least k", "exactly k lines instead of at least k"),
    Wrong(histogram_exactly_k, "at least k", "exactly k, read off the histogram"),
    Wrong(from_zero, "k starts at 1", "k from 0"),
    Wrong(counts_not_shares, "shares", "counts, not shares"),
    Wrong(one_extra, "one per line", "one number too many"),
])


# --- exercise 1: the most common pattern of a tune -----------------------------------------------
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


EX1 = Catalogue(check_exercise_1, reference_pattern_share, correct=[own_counting, sorted_patterns], wrong=[
    Wrong(share_of_all, "own ci", "share over all ci"),
    Wrong(substring_tune, ("浣溪沙慢", "not containing it"), "matches a tune name inside a longer one"),
    Wrong(newline_lines, "expected", "lines at newlines only"),
    Wrong(helper_one_liner, "calls", "one line around the helper"),
])


# --- exercise 3: an interpolated trigram -------------------------------------------------------
def _lookup(keys, counts, key):
    pos = torch.searchsorted(keys, key).clamp(max=len(keys) - 1)
    return torch.where(keys[pos] == key, counts[pos], 0).double()


def reference_trigram(train_ids, val_ids, bigram, lam):
    v = bigram.vocab_size
    keys, counts = torch.unique((train_ids[:-2] * v + train_ids[1:-1]) * v + train_ids[2:], return_counts=True)
    ctx, ctx_counts = torch.unique(train_ids[:-2] * v + train_ids[1:-1], return_counts=True)
    a, b, c = val_ids[:-2], val_ids[1:-1], val_ids[2:]
    n_abc, n_ab = _lookup(keys, counts, (a * v + b) * v + c), _lookup(ctx, ctx_counts, a * v + b)
    p_bi = bigram.prob(b, c)
    p = torch.where(n_ab > 0, lam * n_abc / n_ab.clamp(min=1) + (1 - lam) * p_bi, p_bi)
    return -p.log().mean().item()


def dict_trigram(train_ids, val_ids, bigram, lam):  # Python dicts of counts, a loop over val
    t, v = train_ids.tolist(), val_ids.tolist()
    tri, ctx = Counter(zip(t, t[1:], t[2:], strict=False)), Counter(zip(t, t[1:-1], strict=False))
    total = 0.0
    p_bi = bigram.prob(val_ids[1:-1], val_ids[2:]).tolist()
    for i, (a, b, c) in enumerate(zip(v, v[1:], v[2:], strict=False)):
        n = ctx.get((a, b), 0)
        p = lam * tri.get((a, b, c), 0) / n + (1 - lam) * p_bi[i] if n else p_bi[i]
        total -= math.log(p)
    return total / (len(v) - 2)


def pair_counts_trigram(train_ids, val_ids, bigram, lam):  # c(a, b) from all pairs (differs only at the end)
    v = bigram.vocab_size
    keys, counts = torch.unique((train_ids[:-2] * v + train_ids[1:-1]) * v + train_ids[2:], return_counts=True)
    ctx, ctx_counts = torch.unique(train_ids[:-1] * v + train_ids[1:], return_counts=True)
    a, b, c = val_ids[:-2], val_ids[1:-1], val_ids[2:]
    n_abc, n_ab = _lookup(keys, counts, (a * v + b) * v + c), _lookup(ctx, ctx_counts, a * v + b)
    p_bi = bigram.prob(b, c)
    p_tri = torch.where(n_ab > 0, n_abc / n_ab.clamp(min=1), p_bi)
    return float(-torch.log(torch.where(n_ab > 0, lam * p_tri + (1 - lam) * p_bi, p_bi)).mean())


def no_backoff(train_ids, val_ids, bigram, lam):  # 0 / 0 for an unseen context
    v = bigram.vocab_size
    keys, counts = torch.unique((train_ids[:-2] * v + train_ids[1:-1]) * v + train_ids[2:], return_counts=True)
    ctx, ctx_counts = torch.unique(train_ids[:-2] * v + train_ids[1:-1], return_counts=True)
    a, b, c = val_ids[:-2], val_ids[1:-1], val_ids[2:]
    n_abc, n_ab = _lookup(keys, counts, (a * v + b) * v + c), _lookup(ctx, ctx_counts, a * v + b)
    return -(lam * n_abc / n_ab + (1 - lam) * bigram.prob(b, c)).log().mean().item()


def swapped_lam(train_ids, val_ids, bigram, lam):
    return reference_trigram(train_ids, val_ids, bigram, 1 - lam)


def counts_val_too(train_ids, val_ids, bigram, lam):  # the validation text leaks into the counts
    return reference_trigram(torch.cat([train_ids, val_ids]), val_ids, bigram, lam)


def divides_by_c_b(train_ids, val_ids, bigram, lam):  # c(b) instead of c(a, b)
    v = bigram.vocab_size
    keys, counts = torch.unique((train_ids[:-2] * v + train_ids[1:-1]) * v + train_ids[2:], return_counts=True)
    ctx, ctx_counts = torch.unique(train_ids[:-2] * v + train_ids[1:-1], return_counts=True)
    a, b, c = val_ids[:-2], val_ids[1:-1], val_ids[2:]
    n_abc, n_ab = _lookup(keys, counts, (a * v + b) * v + c), _lookup(ctx, ctx_counts, a * v + b)
    n_b = bigram.row_counts[b].double()
    p_bi = bigram.prob(b, c)
    return -torch.where(n_ab > 0, lam * n_abc / n_b + (1 - lam) * p_bi, p_bi).log().mean().item()


def returns_tensor(train_ids, val_ids, bigram, lam):
    return torch.tensor(reference_trigram(train_ids, val_ids, bigram, lam))


TRIGRAM = Catalogue(check_exercise_3, reference_trigram, correct=[dict_trigram, pair_counts_trigram], wrong=[
    Wrong(no_backoff, "never seen", "no back-off for an unseen context"),
    Wrong(swapped_lam, "lam weighs", "lam on the bigram"),
    Wrong(counts_val_too, "training ids only", "validation counted"),
    Wrong(divides_by_c_b, "c(a, b)", "divided by c(b)"),
    Wrong(returns_tensor, "float", "a tensor, not a float"),
])


@pytest.mark.parametrize("cat", [SPLIT, CI_EXAMPLES, FOLLOWS, EX1, SURVIVAL, TRIGRAM],
                         ids=["split", "ci_examples", "follows", "exercise_1", "exercise_2", "exercise_3"])
def test_catalogue(cat):
    counts = assert_catalogue(cat)
    assert counts["correct"] >= 2 and counts["wrong"] >= 3
