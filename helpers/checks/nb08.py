"""Checks for notebook 08 (Song ci): three builds in the lesson and three exercises.

Builds: ``split_by_ci`` (§4, the split fix: whole ci, the last ones validate), ``ci_examples``
(§5, the inputs and targets of one ci read from its blank line, the first target ignored with
``-100``) and ``follows`` (§6, does a sample have a tune's exact line-length pattern).
Exercises: ``pattern_share`` (another tune's most common pattern), ``form_survival`` (where
samples leave a tune's form, graded with ``matched_lines``) and ``trigram_nll`` (an interpolated
trigram baseline).

A build or exercise that reproduces a helper the notebook imports makes that helper raise while
the learner's code runs (`helpers.exercises.refuse_calls`): the answer must be the learner's own.
The learner gets copies of tensor inputs (`helpers.exercises.call_unchanged`), so an answer that
edits them in place is named. The corpus and its split are loaded here, so a check runs the same
after a kernel restart.
"""

from __future__ import annotations

import functools
import math

import torch

from helpers import ci_form, data
from helpers.ci_form import follows, line_lengths, matched_lines, tune_patterns
from helpers.data import DOCUMENT_SEPARATOR, load_corpus, split_documents
from helpers.exercises import call_unchanged, refuse_calls
from helpers.ngram import BigramModel
from helpers.tokenizers import CharTokenizer

__all__ = ["check_ci_examples", "check_exercise_1", "check_exercise_2", "check_exercise_3", "check_follows",
           "check_split"]


@functools.cache
def _split() -> tuple[str, str]:
    return split_documents(load_corpus("songci"), 0.1)  # (train_text, val_text), as in the notebook


# --- build 1 (§4): split by whole ci ---------------------------------------------------------------
def _tiny_corpus(n: int) -> str:
    return "".join(f"调{i}\n人{i}\n{'一二三四五六七'[: 1 + i % 7]}。" + DOCUMENT_SEPARATOR for i in range(n))


def check_split(split_by_ci) -> None:
    """``split_by_ci(text, val_fraction)`` -> (train_text, val_text): whole ci, the last round(n * f) validate."""
    text = _split()[0] + _split()[1]
    want_full = split_documents(text, 0.1)
    cases = [(n, frac, _tiny_corpus(n), split_documents(_tiny_corpus(n), frac))
             for n, frac in [(10, 0.1), (10, 0.29), (7, 0.4), (20, 0.5)]]
    with refuse_calls(split_by_ci, split_documents, (data, "split_documents"), label="the split build"):
        for n, frac, tiny, want in cases:
            got = split_by_ci(tiny, frac)
            assert isinstance(got, tuple) and len(got) == 2 and all(isinstance(p, str) for p in got), (
                f"return a tuple of two str (train_text, val_text), got {type(got).__name__}")
            tr, va = got
            if (tr, va) == want:
                continue
            n_val = round(n * frac)
            hint = ""
            if va.startswith(tiny[:8]):
                hint = " (the LAST ci validate, the first ones train)"
            elif tr + va != tiny:
                hint = (" (train + val must give back the text: every ci keeps the blank line after it)"
                        if len(tr + va) < len(tiny) else " (train + val must give back the text, nothing added)")
            elif tr.count(DOCUMENT_SEPARATOR) != n - n_val or not tr.endswith(DOCUMENT_SEPARATOR):
                cut_inside = not tr.endswith(DOCUMENT_SEPARATOR)
                hint = (" (a cut at a character position splits a ci in two: cut between whole ci)" if cut_inside
                        else f" (how many ci validate? {n} ci x {frac} = {n * frac:g}, rounded: {n_val}; "
                             "count only real ci, not the empty piece after the last blank line)")
            raise AssertionError(f"{n} ci, val_fraction={frac}: {tr.count(DOCUMENT_SEPARATOR)} ci in train, "
                                 f"{va.count(DOCUMENT_SEPARATOR)} in val; expected {n - n_val} and {n_val}{hint}")
        got = split_by_ci(text, 0.1)
    assert tuple(got) == want_full, "on the whole corpus: not the same two parts as the tiny cases gave (is every ci kept?)"
    print("split build: correct")


# --- build 2 (§5): the examples of one ci ----------------------------------------------------------
def _reference_examples(ids: torch.Tensor, block: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    y = ids[1:].clone()
    y[0] = -100
    return list(zip(ids[:-1].split(block), y.split(block), strict=True))


def check_ci_examples(ci_examples) -> None:
    """``ci_examples(ids, block)``: ids of blank line + ci + blank line -> [(x, y), ...] windows of <= block."""
    gen = torch.Generator().manual_seed(8)
    for length, block in [(9, 16), (17, 16), (16, 16), (18, 16), (40, 16), (5, 3)]:
        ids = torch.cat([torch.tensor([0, 0]), torch.randint(2, 50, (length - 4,), generator=gen),
                         torch.tensor([0, 0])])  # (length,): "\n\n" + ci + "\n\n", "\n" = id 0
        want = _reference_examples(ids, block)
        got = call_unchanged(ci_examples, ids, block, label="ci_examples")
        got = list(got)
        where = f"a ci of {length} ids (blank lines included), block {block}"
        assert all(isinstance(p, tuple | list) and len(p) == 2 for p in got), (
            f"{where}: return a list of (x, y) pairs")
        xs, ys = [p[0] for p in got], [p[1] for p in got]
        n_targets = sum(int((y != -100).sum()) for y in ys)
        if n_targets == length - 1:
            raise AssertionError(f"{where}: {n_targets} targets counted, expected {length - 2}: the first target is "
                                 "the second newline of the blank line, which closes the previous ci: mark it -100 "
                                 "(cross_entropy's ignore_index)")
        assert all(len(x) <= block for x in xs), f"{where}: an input longer than block ({max(map(len, xs))})"
        assert len(got) == len(want), (
            f"{where}: {len(got)} windows, expected {len(want)}"
            + (" (every id but the last is an input: split the inputs, not the ids, into blocks)"
               if len(got) > len(want) else ""))
        assert n_targets == length - 2, (
            f"{where}: {n_targets} targets counted, expected {length - 2} (every id after the blank line is "
            "predicted once; shift first, then cut into blocks, or a target is lost at each cut)")
        for k, ((x, y), (wx, wy)) in enumerate(zip(got, want, strict=True)):
            assert torch.equal(torch.as_tensor(x), wx), f"{where}: the inputs of window {k} differ"
            if not torch.equal(torch.as_tensor(y), wy):
                hint = ""
                if k == 0 and int(y[0]) != -100:
                    hint = " (which target is ignored? the first one, with -100)"
                elif torch.equal(torch.as_tensor(y)[1:], wx[1:]):
                    hint = " (y is x shifted left by one: the next id, not the same one)"
                raise AssertionError(f"{where}: the targets of window {k} differ{hint}")
    print("ci_examples build: correct")


# --- build 3 (§6): does a sample follow a pattern? -------------------------------------------------
_FOLLOWS = [  # (text after the tune prompt, pattern, expected); the first two tell two misreadings apart
    ("晏殊\n一曲新词酒一杯。\n\n", (2, 7), False),
    ("晏殊\n一二三。\n\n四五六。", (3, 3), False),
    ("晏殊\n一曲新词酒一杯，去年天气旧亭台。\n\n浣溪沙\n", (7, 7), True),
    ("晏殊\n一曲新词酒一杯，去年天气旧亭台。\n\n浣溪沙\n", [7, 7], True),
    ("晏殊\n一曲新词酒一杯，去年天气旧亭台。", (7, 7), False),
    ("晏殊\n一曲新词酒一杯，去年天气旧亭台。\n", (7, 7), False),
    ("晏殊\n一曲新词酒一杯。\n\n", (7,), True),
    ("晏殊\n一曲新词，酒一杯。\n\n", (7,), False),
    ("晏殊\n一曲新词酒一杯，去年天气旧亭台。\n夕阳西下几时回。\n\n", (7, 7), False),
    ("晏殊\n一曲新词酒一杯，\n去年天气旧亭台。\n\n菩萨蛮\n李白\n平林漠漠烟如织。\n\n", (7, 7), True),
    ("晏殊\n\n", (2,), False),
    ("\n\n", (0,), False),
]


def _follows_hint(text: str, pattern, got: bool) -> str:
    """Which misreading of the task gives ``got`` (not the expected answer) on this case."""
    ci, ended = text.split(DOCUMENT_SEPARATOR, 1)[0], DOCUMENT_SEPARATOR in text
    body = ci.split("\n", 1)[1] if "\n" in ci else ""
    if got and not ended:
        return "a ci that never ends (no blank line) cannot follow any pattern"
    if not got and ended and isinstance(pattern, list) and line_lengths(body) == tuple(pattern):
        return "the pattern may come as a list: compare with tuple(pattern)"
    if got == (ended and line_lengths(ci) == tuple(pattern)):
        return "the first line is the author, not a line of the poem"
    if got == (ended and line_lengths(text.split("\n", 1)[-1]) == tuple(pattern)):
        return "the poem ends at the blank line (\\n\\n); what follows belongs to the next ci"
    if got and line_lengths(body)[:len(pattern)] == tuple(pattern):
        return "every line, and no more: the lengths must equal the pattern exactly"
    return "author line, then the poem up to the blank line; its line lengths equal to the pattern"


def check_follows(my_follows) -> None:
    """``follows(text, pattern)`` -> bool, as `helpers.ci_form.follows` (on cases and on training ci)."""
    train_text = _split()[0]
    blocks = [b for b in train_text.split(DOCUMENT_SEPARATOR) if b.count("\n") >= 2]
    blocks = [b for b in blocks if b.startswith(("浣溪沙\n", "菩萨蛮\n"))][:200] + blocks[:200]
    pats = tune_patterns(train_text, ["浣溪沙", "菩萨蛮"])
    real = []  # a training ci written as a model would write it: author, poem, blank line, the next ci
    for k, b in enumerate(blocks):
        text = b.split("\n", 1)[1] + DOCUMENT_SEPARATOR + blocks[(k + 1) % len(blocks)]
        for p in pats.values():
            real.append((text, p.pattern, follows(text, p.pattern)))
    real += [(f"某\n{'春' * 7}，{'秋' * 7}。\n{'风' * 7}。", (7, 7, 7), False)]  # a ci that never ends
    with refuse_calls(my_follows, ci_form.follows, ci_form.generated_body, ci_form.form_share,
                      ci_form.matched_lines, label="the follows build"):
        for text, pattern, want in [*_FOLLOWS, *real]:
            got = my_follows(text, list(pattern) if isinstance(pattern, list) else tuple(pattern))
            assert isinstance(got, bool), f"return True or False, got {type(got).__name__}"
            if got != want:
                raise AssertionError(f"follows({text[:24]!r}..., {pattern}) returned {got}, expected {want} "
                                     f"({_follows_hint(text, pattern, got)})")
    assert sum(w for _, _, w in real) > 20  # the real cases hold samples that follow, not only ones that do not
    print("follows build: correct")


# --- exercise 2: where samples leave the form -------------------------------------------------------
def _survival(samples, pattern) -> list[float]:
    m = [matched_lines(s, pattern) for s in samples]
    return [sum(x >= k for x in m) / len(m) for k in range(1, len(pattern) + 1)]


def check_exercise_2(form_survival) -> None:
    pattern = (3, 3, 2)
    tiny = ["甲\n一二三，四五六。七八。\n\n", "甲\n一二三，四五六。七八九。\n\n", "甲\n一二三，四五。\n\n",
            "甲\n一二，三四五。\n\n", "甲\n一二三，四五六。七八。", "甲\n一二三，四五六。七"]
    # matched: 3, 2, 1, 0, 3 (unfinished, but every line written), 2 (the last line not finished)
    train_text = _split()[0]
    texts = [b.split("\n", 1)[1] + DOCUMENT_SEPARATOR for b in train_text.split(DOCUMENT_SEPARATOR)
             if b.startswith("临江仙\n")]
    ljx = tune_patterns(train_text, ["临江仙"])["临江仙"].pattern
    for samples, pat in [(tiny, pattern), (texts, ljx), (tiny[:3], list(pattern))]:
        want = _survival(samples, pat)
        got = call_unchanged(form_survival, list(samples), pat, label="form_survival")
        got = [float(g) for g in got]
        where = f"{len(samples)} samples, pattern {tuple(pat)}"
        assert len(got) == len(pat), (
            f"{where}: {len(got)} numbers, expected {len(pat)} (one per line of the pattern: the share with at least "
            "the first k lines right, k = 1, 2, ...)")
        if all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) for a, b in zip(got, want, strict=True)):  # float32 ok
            continue
        hint = ""
        if any(g > 1 for g in got):
            hint = " (shares of the samples, not counts)"
        elif any(b > a + 1e-12 for a, b in zip(got, got[1:], strict=False)):
            hint = " (at least k lines right, not exactly k: the curve can only fall)"
        elif math.isclose(got[0], 1.0) and not math.isclose(want[0], 1.0):
            hint = " (k starts at 1: the first number is the share with the first line right)"
        raise AssertionError(f"{where}: got {[round(g, 3) for g in got]}, expected {[round(w, 3) for w in want]}{hint}")
    print("exercise 2: correct")


# --- exercise 1: the most common pattern of a tune -------------------------------------------------
def check_exercise_1(pattern_share) -> None:
    tiny = ["浣溪沙\n甲\n一二三。", "浣溪沙\n乙\n四五六。", "浣溪沙\n丙\n七八。", "菩萨蛮\n丁\n九。",
            "浣溪沙慢\n戊\n一。"]  # a longer tune whose name starts with 浣溪沙 is another tune
    train_text = _split()[0]
    want = tune_patterns(train_text, ["临江仙"])["临江仙"]
    blocks = [d for d in train_text.split(DOCUMENT_SEPARATOR) if d]
    with refuse_calls(pattern_share, tune_patterns, (ci_form, "tune_patterns"), label="exercise 1"):
        got = pattern_share(list(tiny), "浣溪沙")
        assert tuple(got[0]) == (3,) and math.isclose(got[1], 2 / 3), (
            f"tiny corpus: expected ((3,), 0.667), got {got}"
            + (" (is 浣溪沙慢 a 浣溪沙? compare the whole tune line, not a part of it)"
               if tuple(got[0]) == (3,) and math.isclose(got[1], 2 / 4) else
               " (the share of the tune's own ci, not of all ci?)" if tuple(got[0]) == (3,) else ""))
        got = pattern_share(list(blocks), "临江仙")
    assert tuple(got[0]) == want.pattern, f"临江仙: expected the pattern {want.pattern}, got {tuple(got[0])}"
    assert math.isclose(got[1], want.share), (
        f"临江仙: expected the share {want.share:.4f}, got {got[1]:.4f} (is every ci you counted a 临江仙: "
        "the tune line equal to the name, not containing it?)")
    print("exercise 1: correct")


# --- exercise 3: an interpolated trigram -----------------------------------------------------------
def reference_trigram_nll(train_ids: torch.Tensor, val_ids: torch.Tensor, bigram: BigramModel,
                          lam: float) -> float:
    """The check's own answer (not shown in the notebook; the notebook's reference is written apart)."""
    v = bigram.vocab_size
    tri = (train_ids[:-2] * v + train_ids[1:-1]) * v + train_ids[2:]  # (N-2,) one key per trigram
    keys, counts = torch.unique(tri, return_counts=True)
    ctx, ctx_counts = torch.unique(train_ids[:-2] * v + train_ids[1:-1], return_counts=True)

    def lookup(table, table_counts, key):
        pos = torch.searchsorted(table, key).clamp(max=len(table) - 1)
        return torch.where(table[pos] == key, table_counts[pos], 0).double()

    a, b, c = val_ids[:-2], val_ids[1:-1], val_ids[2:]
    n_abc, n_ab = lookup(keys, counts, (a * v + b) * v + c), lookup(ctx, ctx_counts, a * v + b)
    p_bi = bigram.prob(b, c)
    p = torch.where(n_ab > 0, lam * n_abc / n_ab.clamp(min=1) + (1 - lam) * p_bi, p_bi)
    return -p.log().mean().item()


@functools.cache
def _trigram_data() -> tuple[torch.Tensor, torch.Tensor, int]:
    text = load_corpus("songci")
    tok = CharTokenizer.from_text(text)
    tr, va = _split()
    return torch.tensor(tok.encode(tr[:150_000])), torch.tensor(tok.encode(va[:30_000])), tok.vocab_size


def check_exercise_3(trigram_nll) -> None:
    # tiny: 4 symbols; the context (3, 3) occurs in val but never in train; train ends on a pair (3, 0) seen
    # nowhere else, so counting c(a, b) over pairs or over trigrams agrees
    tiny_train = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 0, 2, 2, 1, 0, 1, 2, 3, 1, 3, 0])
    tiny_val = torch.tensor([0, 1, 2, 3, 3, 1, 0, 1, 0, 2, 2])
    real_train, real_val, v = _trigram_data()
    cases = [("tiny", tiny_train, tiny_val, 4, 0.6), ("tiny", tiny_train, tiny_val, 4, 0.0),
             ("the first 150,000 training characters", real_train, real_val, v, 0.4)]
    for name, tr, va, vocab, lam in cases:
        bigram = BigramModel(tr, vocab, lam=0.7)
        want = reference_trigram_nll(tr, va, bigram, lam)
        got = call_unchanged(trigram_nll, tr, va, bigram, lam, label="trigram_nll")
        assert isinstance(got, float), f"return the mean loss as a float (.item()), got {type(got).__name__}"
        if math.isfinite(got) and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        hint = ""
        if not math.isfinite(got):
            hint = (" (a context (a, b) never seen in training gives 0 / 0: use the bigram alone there)")
        elif math.isclose(got, reference_trigram_nll(tr, va, bigram, 1 - lam), rel_tol=1e-6):
            hint = " (lam weighs the trigram, 1 - lam the bigram)"
        elif math.isclose(got, reference_trigram_nll(torch.cat([tr, va]), va, bigram, lam), rel_tol=1e-6):
            hint = " (count the trigrams of the training ids only, never the validation ones)"
        elif got < want:
            hint = " (lower than it can be: are validation characters counted, or c(a, b) too small?)"
        else:
            hint = " (p(c | a, b) = c(a, b, c) / c(a, b), the count of the pair (a, b) as the first two of a trigram)"
        raise AssertionError(f"{name}, lam={lam}: {got:.6f} nats, expected {want:.6f}{hint}")
    print("exercise 3: correct")
