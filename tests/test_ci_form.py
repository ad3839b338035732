"""helpers.ci_form: line-length patterns of ci, learned per tune, and the form check of generated text."""

import pytest

from helpers.ci_form import (
    Ci,
    follows,
    form_share,
    generated_body,
    line_lengths,
    parse_ci,
    tune_patterns,
    tune_prompt,
)
from helpers.data import load_corpus, split_documents

TEXT = ("浣溪沙\n甲\n一二三，四五六。\n七八九。\n\n"
        "浣溪沙\n乙\n一二三，四五六。\n七八九。\n\n"
        "浣溪沙\n丙\n一二，三四五六。\n\n"
        "菩萨蛮\n丁\n一二三四五？六七。\n\n")


def test_line_lengths_counts_between_marks_and_newlines():
    assert line_lengths("一曲新词酒一杯，去年天气旧亭台。\n夕阳西下几时回。") == (7, 7, 7)
    assert line_lengths("一二？三；四五：六！七、八,九.") == (2, 1, 2, 1, 1, 1, 1)
    assert line_lengths("。。\n\n") == () and line_lengths("") == ()
    with pytest.raises(TypeError, match="body must be a str"):
        line_lengths(["一"])


def test_parse_ci_and_its_errors():
    assert parse_ci("浣溪沙\n晏殊\n一曲。\n二句。\n") == Ci("浣溪沙", "晏殊", "一曲。\n二句。")
    with pytest.raises(ValueError, match="tune line, an author line"):
        parse_ci("浣溪沙\n晏殊")
    with pytest.raises(TypeError, match="block"):
        parse_ci(3)


def test_tune_patterns_takes_the_most_common_pattern_per_tune():
    pats = tune_patterns(TEXT)
    assert pats["浣溪沙"].pattern == (3, 3, 3) and (pats["浣溪沙"].count, pats["浣溪沙"].total) == (2, 3)
    assert pats["浣溪沙"].share == pytest.approx(2 / 3)
    assert pats["菩萨蛮"].pattern == (5, 2)
    assert list(tune_patterns(TEXT, ["菩萨蛮"])) == ["菩萨蛮"]
    with pytest.raises(ValueError, match="no ci of tune"):
        tune_patterns(TEXT, ["西江月"])
    with pytest.raises(TypeError, match="tunes must be a list"):
        tune_patterns(TEXT, "浣溪沙")


def test_the_corpus_tunes_are_regular_on_the_training_split():
    train, _ = split_documents(load_corpus("songci"), 0.1)
    pats = tune_patterns(train, ["浣溪沙", "菩萨蛮", "鹧鸪天", "西江月"])
    assert pats["浣溪沙"].pattern == (7,) * 6
    assert pats["菩萨蛮"].pattern == (7, 7, 5, 5, 5, 5, 5, 5)
    assert pats["鹧鸪天"].pattern == (7, 7, 7, 7, 3, 3, 7, 7, 7)
    assert pats["西江月"].pattern == (6, 6, 7, 6, 6, 6, 7, 6)
    assert min(p.share for p in pats.values()) > 0.95


def test_generated_body_drops_the_author_and_stops_at_the_blank_line():
    assert generated_body("晏殊\n一二三。\n四五六。\n\n下一首") == "一二三。\n四五六。"
    assert generated_body("晏殊\n一二三。") is None          # never ended
    assert generated_body("晏殊\n\n一二三。") is None        # ended before any line
    assert generated_body("\n\n") is None


def test_follows_and_form_share():
    good, bad, unfinished = "某\n一二三，四五六。\n\n", "某\n一二三四。\n\n", "某\n一二三，四五六。"
    assert follows(good, (3, 3)) and not follows(bad, (3, 3)) and not follows(unfinished, (3, 3))
    assert form_share([good, bad, unfinished, good], (3, 3)) == 0.5
    with pytest.raises(ValueError, match="samples must not be empty"):
        form_share([], (3, 3))
    with pytest.raises(TypeError, match="samples must be a list of str"):
        form_share(good, (3, 3))
    with pytest.raises(TypeError, match="pattern must be a sequence of ints"):
        follows(good, "33")


def test_tune_prompt_is_how_a_ci_starts_in_the_corpus():
    assert tune_prompt("浣溪沙") == "\n\n浣溪沙\n"
    assert tune_prompt("浣溪沙") in load_corpus("songci")
    with pytest.raises(ValueError, match="tune must be a non-empty name"):
        tune_prompt("")
    with pytest.raises(ValueError, match="tune must be a non-empty name"):
        tune_prompt("浣溪\n沙")


def test_matched_lines_counts_the_right_lines_from_the_first():
    from helpers.ci_form import matched_lines

    pat = (3, 3, 3)
    assert matched_lines("某\n一二三，四五六。\n七八九。\n\n", pat) == 3
    assert matched_lines("某\n一二三，四五。\n七八九。\n\n", pat) == 1          # the second line is short
    assert matched_lines("某\n一二三，四五六。\n七八", pat) == 2                # unfinished: the last piece does not count
    assert matched_lines("某\n一二三，四五六。\n七八九。\n一。\n\n", pat) == 3   # extra lines do not matter here
    assert matched_lines("某", pat) == 0 and matched_lines("", pat) == 0
    with pytest.raises(TypeError, match="pattern"):
        matched_lines("某\n一。", "3")


def test_length_distribution_and_total_variation():
    from helpers.ci_form import length_distribution, total_variation

    p = length_distribution(["一二三，四五六。", "一二。\n三四五。"])
    assert p == {2: 0.25, 3: 0.75}
    assert total_variation(p, p) == 0.0
    assert total_variation({1: 1.0}, {2: 1.0}) == 1.0
    assert total_variation(p, {3: 1.0}) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no line"):
        length_distribution(["。"])
    with pytest.raises(TypeError, match="bodies"):
        length_distribution("一二三。")
    with pytest.raises(TypeError, match="p and q"):
        total_variation([0.5], {1: 1.0})


def test_placed_form_share_prompts_each_prefix_and_counts_the_form():
    import torch

    from helpers.ci_form import placed_form_share
    from helpers.tokenizers import CharTokenizer

    tok = CharTokenizer.from_text("\n甲乙丙丁。调某")
    answer = tok.encode("某\n甲乙丙。\n\n")
    seen = []

    class Fixed:  # writes the same ci after any prompt, and records the prompts it got
        def generate(self, idx, n, temperature, generator):
            seen.append(tok.decode(idx[0].tolist()))
            return torch.cat([idx, torch.tensor([answer] * len(idx))], dim=1)

    share = placed_form_share(Fixed(), tok, "调", (3,), ["\n\n", "", "甲乙\n\n"], n_each=2, new=len(answer))
    assert share == 1.0 and seen == ["\n\n调\n", "调\n", "甲乙\n\n调\n"]
    assert placed_form_share(Fixed(), tok, "调", [4], [""], n_each=1, new=len(answer)) == 0.0
    with pytest.raises(TypeError, match="prefixes"):
        placed_form_share(Fixed(), tok, "调", (3,), "\n\n")
    with pytest.raises(ValueError, match="n_each"):
        placed_form_share(Fixed(), tok, "调", (3,), [""], n_each=0)
