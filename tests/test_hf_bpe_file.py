"""data/hf_bpe_320.json is what tools/make_hf_bpe.py makes, and what notebook 01's exercise 3 says of it holds."""

from __future__ import annotations

import re
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import make_hf_bpe  # noqa: E402

from helpers.bpe import BPETokenizer, merge_pair  # noqa: E402
from helpers.checks.nb01 import hf_bpe_parts  # noqa: E402
from helpers.data import load_corpus  # noqa: E402
from helpers.gpt2_tokenizer import bytes_to_unicode  # noqa: E402


def _train(chunks, vocab_size, key):
    seqs, merges = [list(c.encode()) for c in chunks], []
    while len(merges) < vocab_size - 256:
        counts = Counter(p for s in seqs for p in pairwise(s))
        if not counts:
            break
        merges.append(min(counts, key=lambda p: (-counts[p], key(p))))
        seqs = [merge_pair(s, merges[-1], 255 + len(merges)) for s in seqs]
    return merges


def test_the_shipped_file_is_what_the_recipe_makes():
    assert make_hf_bpe.OUT.read_text(encoding="utf-8") == make_hf_bpe.build()
    assert make_hf_bpe.main(["--check"]) == 0


def test_ties_are_the_only_difference_and_hf_numbers_bytes_by_their_stand_ins():
    tok, hf_id, merges = hf_bpe_parts()
    assert len(merges) == 64 and hf_id[ord("!")] == 0 and hf_id[ord(" ")] == 220 and hf_id[0] == 188
    chunks = re.findall(make_hf_bpe.PATTERN, load_corpus()[:make_hf_bpe.TRAIN_CHARS])
    ours = _train(chunks, 320, key=lambda p: p)
    theirs = _train(chunks, 320, key=lambda p: tuple(hf_id[i] if i < 256 else i for i in p))
    assert theirs == merges != ours
    k = next(k for k, (a, b) in enumerate(zip(ours, merges, strict=True)) if a != b)
    assert k == 30 and ours[:30] == merges[:30]
    # the same ids on held-out text: ours, per chunk, with the byte ids renumbered
    held = load_corpus()[100_000:110_000] + " Python's 3.14159, 我喜欢你 🤖 rock'n'roll\t\n  x"
    mine = BPETokenizer(merges, pattern=make_hf_bpe.PATTERN).encode(held)
    assert [hf_id[i] if i < 256 else i for i in mine] == tok.encode(held).ids
    assert tok.decode(tok.encode(held).ids) == held


def test_where_hf_splits_differently_from_python_re():
    tok, _, _ = hf_bpe_parts()
    stand_in = {v: k for k, v in bytes_to_unicode().items()}

    def hf_chunks(text):
        return [bytes(stand_in[c] for c in s).decode() for s, _ in tok.pre_tokenizer.pre_tokenize_str(text)]

    corpus = load_corpus()
    assert hf_chunks(corpus) == re.findall(make_hf_bpe.PATTERN, corpus)
    # Oniguruma's \\w takes combining marks and not superscript digits; Python's re the other way round
    assert hf_chunks("e\u0301t x²") == ["e\u0301t", " x", "²"]
    assert re.findall(make_hf_bpe.PATTERN, "e\u0301t x²") == ["e", "\u0301", "t", " x²"]
