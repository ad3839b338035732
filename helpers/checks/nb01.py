"""The checks of notebook 01 (tokenization): the four BPE builds and the three exercises.

Each check compares the learner's function with the helper (`helpers.bpe.BPETokenizer`) or with
GPT-2's pattern on inputs chosen to reveal the classic mistakes, and says which case failed and
why. An answer that just calls the helper it reproduces is refused (`refuse_calls`).
Proven by tests/test_catalogue_nb01.py.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from itertools import pairwise
from pathlib import Path

from tokenizers import Tokenizer

import helpers.bpe
from helpers.bpe import SPLIT_PATTERN, BPETokenizer
from helpers.data import DATA_DIR, load_corpus
from helpers.exercises import refuse_calls
from helpers.gpt2_tokenizer import bytes_to_unicode, gpt2_pattern


def check_merge_pair(merge_pair):
    cases = [  # (ids, pair, new_id, expected)
        ([1, 2, 3, 1, 2], (1, 2), 9, [9, 3, 9]),
        ([2, 1, 2, 1], (1, 2), 9, [2, 9, 1]),                 # the order inside a pair matters
        ([97, 97, 97], (97, 97), 256, [256, 97]),             # "aaa": the overlap trap
        ([97, 97, 97, 97], (97, 97), 256, [256, 256]),
        ([11, 2, 1, 2], (1, 2), 9, [11, 2, 9]),               # 11 ends in the digit 1: ids, not digits
        ([256, 97], (56, 97), 300, [256, 97]),
        ([5], (5, 5), 256, [5]), ([], (1, 2), 9, []),
    ]
    for ids, pair, new_id, expected in cases:
        before = list(ids)
        with refuse_calls(merge_pair, helpers.bpe.merge_pair, label="merge_pair"):
            got = merge_pair(ids, pair, new_id)
        assert ids == before, f"merge_pair changed its input list {before} into {ids}: build a new list"
        note = ""
        if ids[:3] == [97, 97, 97]:
            note = " (the pairs overlap: only the left one can be merged)"
        elif ids[:1] in ([11], [256]):
            note = (" (compare whole ids, one list element with the next: a text of ids joined by spaces "
                    "matches digits inside a longer id)")
        assert got == expected, f"merge_pair({ids}, {pair}, {new_id}): expected {expected}, got {got}{note}"
    print("merge_pair: correct")


def _why_differs(chunks, expected, got, k):
    """Why merge k of `got` is not `expected[k]`: a tie broken the other way, an id that does not
    exist yet, or a pair that is not the most frequent (counted after merges 0..k-1, overlaps included)."""
    if k >= len(got) or k >= len(expected):
        return ""
    seqs = [list(c.encode("utf-8")) for c in chunks]
    for j, pair in enumerate(expected[:k]):
        seqs = [helpers.bpe.merge_pair(s, pair, 256 + j) for s in seqs]
    counts = Counter(p for s in seqs for p in pairwise(s))
    want, have = counts[tuple(expected[k])], counts[tuple(got[k])]
    if have == 0:
        return (f" ({tuple(got[k])} does not occur after the first {k} merges: merge k must get the id 256 + k "
                "(computed before you record it), and a merge acts on whole ids, never on their digits)")
    if have == want:
        return (f" (a tie: both pairs occur {want} times; this spec, like Hugging Face tokenizers, picks the "
                "smaller pair of ids; minbpe's first-seen rule is another valid convention, not this one)")
    return (f" ({tuple(got[k])} occurs {have} times, {tuple(expected[k])} {want} times, counting overlaps "
            "and never across chunks)")


@contextlib.contextmanager
def _refusing_train(train_bpe, label="train_bpe"):
    raw = vars(BPETokenizer)["train"]  # the classmethod itself: refuse_calls would restore a bound method
    try:
        with refuse_calls(train_bpe, (BPETokenizer, "train"), label=label):
            yield
    finally:
        BPETokenizer.train = raw


def check_train_bpe(train_bpe):
    cases = [(["aaabdaaabac"], [(97, 97), (97, 98), (256, 257)], "'aaabdaaabac', 3 merges"),
             # "e\n" is (101, 10) and "ed" (101, 100): the digits of 10 start those of 100
             (["e\n"] * 3 + ["ed"] * 2 + ["e\ned"], [(101, 10), (101, 100), (256, 257)], "chunks ['e\\n' x3, 'ed' x2, 'e\\ned']")]
    for chunks, expected, label in cases:
        size = 256 + len(expected)
        with _refusing_train(train_bpe):
            got = [tuple(m) for m in train_bpe(list(chunks), size)]
        k = next((k for k, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected)))
        assert got == expected, f"{label}: expected {expected}, got {got}{_why_differs(chunks, expected, got, k)}"
    with _refusing_train(train_bpe):
        got = [tuple(m) for m in train_bpe(["ab", "ab", "c"], 300)]
    assert got == [(97, 98)], (f"chunks ['ab', 'ab', 'c'], room for 44 merges: expected [(97, 98)] (then no pair is "
                               f"left: pairs never cross from one chunk to the next), got {got}")
    small = load_corpus()[:5000]
    for chunks, pattern in ((re.findall(SPLIT_PATTERN, small), SPLIT_PATTERN), ([small], None)):
        expected = BPETokenizer.train(small, vocab_size=320, pattern=pattern).merges
        with _refusing_train(train_bpe):
            got = [tuple(m) for m in train_bpe(list(chunks), 320)]
        k = next((k for k, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected)))
        assert got == expected, (f"corpus[:5000], {'with' if pattern else 'without'} chunks: merge {k} "
                                 f"differs: expected {expected[k:k + 1]}, got {got[k:k + 1]} "
                                 f"({len(expected)} merges expected, {len(got)} returned)"
                                 f"{_why_differs(chunks, expected, got, k)}")
    print("train_bpe: correct")


_ENCODE_HELPERS = ((BPETokenizer, "encode"), (BPETokenizer, "_encode_chunk"))


def check_encode_bpe(encode_bpe):
    with refuse_calls(encode_bpe, *_ENCODE_HELPERS, label="encode_bpe"):
        got = encode_bpe("aaabdaaabac", [(97, 97), (97, 98), (256, 257)])
    assert got == [258, 100, 258, 97, 99], f"'aaabdaaabac' with the example's merges: expected [258, 100, 258, 97, 99], got {got}"
    tok = BPETokenizer.train(load_corpus()[:5000], vocab_size=320, pattern=None)
    for text in ("The assert statement", "x += 1  # 我喜欢你 🤖", "", "a"):
        expected = tok.encode(text)
        with refuse_calls(encode_bpe, *_ENCODE_HELPERS, label="encode_bpe"):
            got = encode_bpe(text, list(tok.merges))
        assert got == expected, (f"encode_bpe({text!r}) with 64 merges learned from the corpus: expected {expected}, "
                                 f"got {got} (at each step, merge the pair of lowest rank present in the text)")
    print("encode_bpe: correct")


_DECODE_HELPERS = ((BPETokenizer, "decode"), (BPETokenizer, "decode_bytes"), (BPETokenizer, "token_bytes"))


def check_decode_bpe(decode_bpe):
    def run(ids, merges):
        with refuse_calls(decode_bpe, *_DECODE_HELPERS, label="decode_bpe"):
            try:
                return decode_bpe(list(ids), list(merges))
            except UnicodeDecodeError as err:
                raise AssertionError(f"decode_bpe({ids}) raised UnicodeDecodeError ({err.reason}): bytes that are not "
                                     "valid UTF-8 must become the replacement sign (errors=\"replace\")") from None

    got = run([258, 100, 258, 97, 99], [(97, 97), (97, 98), (256, 257)])
    assert got == "aaabdaaabac", f"[258, 100, 258, 97, 99] with the example's merges: expected 'aaabdaaabac', got {got!r}"
    tok = BPETokenizer.train(load_corpus()[:5000], vocab_size=320, pattern=None)
    for text in ("The assert statement", "x += 1  # 我喜欢你 🤖", "", "é ü"):
        got = run(tok.encode(text), tok.merges)
        note = " (decode the joined bytes as UTF-8, once, at the end)" if got != text and text else ""
        assert got == text, f"decode_bpe(encode({text!r})): expected the text back, got {got!r}{note}"
    got = run(tok.encode("我")[:2], tok.merges)
    assert got == "\ufffd", (f"the first 2 of the 3 bytes of 我: expected one replacement sign '\ufffd' "
                             f"(errors=\"replace\" on the joined bytes), got {got!r}")
    print("decode_bpe: correct")


def check_exercise_1(contraction_pattern):
    with refuse_calls(contraction_pattern, gpt2_pattern, label="exercise 1"):
        pattern = contraction_pattern()
    assert isinstance(pattern, str), f"expected a regex str, got {type(pattern).__name__}"
    texts = ["Python's list isn't empty", "we're here, you've seen it, I'm sure they'll say he'd go",
             "x += 1000  # it's 'quoted'", "DON'T shout: 'tis fine", "rock'n'roll, l'amour"]
    for text in texts:
        got, expected = re.findall(pattern, text), re.findall(gpt2_pattern(), text)
        assert "".join(got) == text, f"{text!r}: the chunks {got} do not add up to the text"
        extra = [c for c in got if c.startswith("'") and len(c) > 1 and c not in expected]
        note = ""
        if any(c != c.lower() for c in extra):
            note = " (GPT-2's contractions are lower case only: 'T stays ' + T)"
        elif extra:
            note = " (only the seven contractions 's 't 're 've 'm 'll 'd are cut off, not any letters after an apostrophe)"
        assert got == expected, f"{text!r}: expected {expected}, got {got}{note}"
    print("exercise 1: correct")


def check_exercise_2(merges_needed):
    n = merges_needed()
    assert isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 11, (
        f"expected an int between 1 and 11 (12 bytes), got {n!r}")
    tokens = len(BPETokenizer.train("我喜欢你" * 50, 256 + n).encode("我喜欢你"))
    assert tokens == 1, f"with {n} merges '我喜欢你' is still {tokens} tokens: {n} is too few"
    tokens = len(BPETokenizer.train("我喜欢你" * 50, 256 + n - 1).encode("我喜欢你"))
    assert tokens > 1, f"{n - 1} merges already make '我喜欢你' one token: {n} is not the smallest"
    print(f"exercise 2: correct ({n} merges)")


HF_BPE_FILE = DATA_DIR / "hf_bpe_320.json"  # made by tools/make_hf_bpe.py; tests/test_hf_bpe_file.py reruns it


def hf_bpe_parts(path=HF_BPE_FILE):
    """A tokenizer file written by Hugging Face `tokenizers`, read for exercise 3.

    Returns ``(tokenizer, hf_id, merges)``: the `tokenizers.Tokenizer`; ``hf_id[b]``, the id it gives
    byte ``b`` (bytes are numbered by their printable stand-ins, `bytes_to_unicode`, so ``hf_id`` is a
    permutation of 0..255); and its merges as pairs of this notebook's ids (bytes = byte values, merge k
    = 256 + k, which is also its id there)."""
    tok = Tokenizer.from_file(str(path))
    vocab, stand_in = tok.get_vocab(), bytes_to_unicode()
    hf_id = [vocab[stand_in[b]] for b in range(256)]
    ours = {v: b for b, v in enumerate(hf_id)}
    merged = json.loads(Path(path).read_text(encoding="utf-8"))["model"]["merges"]
    merges = [tuple(ours.get(vocab[s], vocab[s]) for s in pair) for pair in merged]
    assert sorted(hf_id) == list(range(256)) and all(vocab["".join(p)] == 256 + k for k, p in enumerate(merged)), (
        f"{path}: not a byte-level BPE with the 256 bytes first and merge k at id 256 + k")
    return tok, hf_id, merges


def _first_difference(expected, got):
    return next((k for k, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
                min(len(got), len(expected)))


def check_exercise_3(train_bpe_hf):
    _, hf_id, shipped = hf_bpe_parts()
    in_hf_ids = {b: i for b, i in enumerate(hf_id)}
    cases = [  # chunks, vocab_size, expected merges, why
        (["ss", " s"], 257, [(115, 115)],
         "'ss' and ' s' tie (once each); in HF's ids 's' is 82 and the space 220"),
        (["ssx", "ssx", " y", " y"], 258, [(115, 115), (32, 121)],
         "after 'ss' becomes 256, ('ss', 'x') and (' ', 'y') tie; every merged id (256 and up) comes after "
         "every byte in HF's ids, the space's 220 included"),
    ]
    small = load_corpus()[:5000]
    cases.append((re.findall(r"'s|'t|'re|'ve|'m|'ll|'d|" + SPLIT_PATTERN, small), 320, shipped,
                  "corpus[:5000] in exercise 1's chunks, against the merges HF trained (data/hf_bpe_320.json)"))
    for chunks, size, expected, why in cases:
        with _refusing_train(train_bpe_hf, label="exercise 3"):
            got = [tuple(m) for m in train_bpe_hf(list(chunks), size)]
        if got == expected:
            continue
        k = _first_difference(expected, got)
        label = f"{chunks[:4]}{' ...' if len(chunks) > 4 else ''} to {size}"
        note = ""
        if [tuple(in_hf_ids.get(i, i) for i in p) for p in expected] == got:
            note = (" (these are HF's ids: return the pairs in this notebook's ids, bytes as byte values, "
                    "as train_bpe does; HF's ids only decide the ties)")
        elif k < len(got) and k < len(expected) and _why_differs(chunks, expected, got, k).startswith(" (a tie"):
            note = (f" (a tie broken the other way: {why}; HF takes the smaller pair in its own ids, bytes "
                    "numbered by their stand-ins, not by byte value)")
        else:
            note = _why_differs(chunks, expected, got, k)
        raise AssertionError(f"chunks {label}: merge {k} differs: expected {expected[k:k + 1]}, "
                             f"got {got[k:k + 1]}{note}")
    print("exercise 3: correct")
