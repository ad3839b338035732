"""Issue 38 item 9: strict JSON, ci_form and the bigram sampler refuse or survive hostile input clearly."""

from __future__ import annotations

import pytest
import torch

from helpers.ci_form import follows, total_variation, tune_patterns
from helpers.ngram import BigramModel
from helpers.untrusted import parse_json

TEXT = "\n\n浣溪沙\n晏殊\n一曲新词酒一杯。\n\n"


def test_json_refuses_a_number_that_overflows_to_inf():
    for doc in ("1e999", '{"a": -1e999}', "[1.5e400]"):
        with pytest.raises(ValueError, match="too large"):
            parse_json(doc, "x.json", "JSON file")
    assert parse_json("[1e300, 0.5]", "x.json", "JSON file") == [1e300, 0.5]


def test_tune_patterns_takes_a_generator():
    assert list(tune_patterns(TEXT, (t for t in ["浣溪沙"]))) == ["浣溪沙"]


def test_follows_and_total_variation_refuse_what_is_not_a_pattern_or_a_distribution():
    with pytest.raises(TypeError, match="pattern must be"):
        follows(TEXT, 7)
    with pytest.raises(ValueError, match="distribution"):
        total_variation({7: 5.0}, {})
    with pytest.raises(ValueError, match="distribution"):
        total_variation({7: 1.0}, {})


def test_bigram_samples_at_a_low_temperature_and_checks_ids():
    m = BigramModel(torch.tensor([0, 1, 2, 1, 0, 2, 2]), 3)
    out = m.sample([0], 20, temperature=1e-3, generator=torch.Generator().manual_seed(0))
    assert len(out) == 20 and all(0 <= i < 3 for i in out)
    with pytest.raises(ValueError, match="prev"):
        m.prob(torch.tensor([-1]), torch.tensor([0]))


def test_train_val_split_names_chunks_when_pieces_are_too_small():
    from helpers.data import train_val_split

    with pytest.raises(ValueError, match="chunks=5"):
        train_val_split(list(range(20)), 0.1, chunks=5)
    assert train_val_split(list(range(100)), 0.1, chunks=5)[1] == [18, 19, 38, 39, 58, 59, 78, 79, 98, 99]
