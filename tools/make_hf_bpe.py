"""Rebuild data/hf_bpe_320.json: a byte-level BPE trained by Hugging Face `tokenizers` (notebook 01, exercise 3).

    python tools/make_hf_bpe.py            # writes data/hf_bpe_320.json
    python tools/make_hf_bpe.py --check    # exit 1 if the shipped file is not what this recipe makes

The recipe: `tokenizers` (the version pinned in requirements.txt), a BPE model with no unknown token and
no special tokens, trained on the first 5,000 characters of data/pydoc_topics.txt (the slice notebook 01's
train_bpe check uses) to a vocabulary of 320 (the 256 bytes and 64 merges), with all 256 bytes as the
initial alphabet. Pre-tokenizer: exercise 1's split (GPT-2's contractions before `SPLIT_PATTERN`), as a
`Split` with behaviour "isolated", then `ByteLevel` (no prefix space, no regex of its own), which maps each
byte to its printable stand-in. Training is deterministic: HF's trainer orders candidate merges by count,
then by the smaller pair of its own ids, a total order. tests/test_hf_bpe_file.py reruns this recipe.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from helpers.bpe import SPLIT_PATTERN
from helpers.data import load_corpus
from helpers.fileio import atomic_write

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "hf_bpe_320.json"
PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d|" + SPLIT_PATTERN  # exercise 1's answer
TRAIN_CHARS, VOCAB_SIZE = 5000, 320


def build() -> str:
    """The tokenizer's JSON, as `tokenizers` writes it (one line, ending in a newline)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator([load_corpus()[:TRAIN_CHARS]], trainer)
    return tok.to_str() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file, write nothing")
    args = parser.parse_args(argv)
    text = build()
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)}: {'matches the recipe' if same else 'DIFFERS from the recipe'}")
        return 0 if same else 1
    with atomic_write(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
