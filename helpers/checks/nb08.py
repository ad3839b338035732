"""Checks for notebook 08 (Song ci): the three exercises.

Each exercise reproduces a helper the notebook imports (``line_lengths``, ``tune_patterns``,
``document_starts``), so each check makes that helper raise while the learner's code runs
(`helpers.exercises.refuse_calls`): the answer must be the learner's own. The corpus and its
split are loaded here, so a check runs the same after a kernel restart.
"""

from __future__ import annotations

import functools
import math

import torch

from helpers import ci_form, data
from helpers.ci_form import line_lengths, parse_ci, tune_patterns
from helpers.data import DOCUMENT_SEPARATOR, document_starts, load_corpus, split_documents
from helpers.exercises import refuse_calls

__all__ = ["check_exercise_1", "check_exercise_2", "check_exercise_3"]


@functools.cache
def _split() -> tuple[str, str]:
    return split_documents(load_corpus("songci"), 0.1)  # (train_text, val_text), as in the notebook


# (body, expected): every mark of the spec ends a line, runs of marks and newlines end one line
_LINES = [("一曲新词酒一杯，去年天气旧亭台。", (7, 7)),
          ("红。\n\n绿", (1, 1)),
          ("问君能有几多愁？恰似一江春水向东流。", (7, 9)),
          ("莫道不消魂、帘卷西风！人比黄花瘦；知否：应是绿肥红瘦。", (5, 4, 5, 2, 6)),
          ("寻寻觅觅，冷冷清清，\n凄凄惨惨戚戚。", (4, 4, 6))]


def check_exercise_1(my_line_lengths) -> None:
    first = parse_ci(_split()[0].split(DOCUMENT_SEPARATOR, 1)[0]).body
    cases = [*_LINES, (first, line_lengths(first))]
    with refuse_calls(my_line_lengths, line_lengths, (ci_form, "line_lengths"), label="exercise 1"):
        for body, want in cases:
            got = my_line_lengths(body)
            hint = ""
            if len(tuple(got)) < len(want):
                missed = [m for m in "，。、？！；：" if m in body]
                hint = f" (which marks end a line? this body holds {''.join(missed)} and newlines)"
            elif 0 in tuple(got):
                hint = " (empty pieces between two marks are not lines)"
            assert tuple(got) == want, f"my_line_lengths({body[:12]!r}...): expected {want}, got {tuple(got)}{hint}"
    print("exercise 1: correct")


def check_exercise_2(pattern_share) -> None:
    tiny = ["浣溪沙\n甲\n一二三。", "浣溪沙\n乙\n四五六。", "浣溪沙\n丙\n七八。", "菩萨蛮\n丁\n九。",
            "浣溪沙慢\n戊\n一。"]  # a longer tune whose name starts with 浣溪沙 is another tune
    train_text = _split()[0]
    want = tune_patterns(train_text, ["临江仙"])["临江仙"]
    blocks = [d for d in train_text.split(DOCUMENT_SEPARATOR) if d]
    with refuse_calls(pattern_share, tune_patterns, (ci_form, "tune_patterns"), label="exercise 2"):
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
    print("exercise 2: correct")


def check_exercise_3(my_document_starts) -> None:
    tiny = "甲\n一。\n\n乙\n二三。\n\n丙\n四。\n\n"
    val_text = _split()[1]
    with refuse_calls(my_document_starts, document_starts, (data, "document_starts"), label="exercise 3"):
        for block, want in [(3, [4, 11]), (7, [4, 11]), (8, [4]), (len(tiny) - 5, [4])]:  # a window needs block + 1
            got = my_document_starts(tiny, block)
            assert torch.is_tensor(got), f"expected a tensor, got {type(got).__name__}"
            hint = ""
            if got.tolist() == [w + 2 for w in want]:
                hint = " (the offset of the blank line itself, not of the ci after it)"
            elif len(got) > len(want):
                hint = " (a window needs block_size + 1 characters, and a blank line at the end has no ci after it)"
            assert got.tolist() == want, f"my_document_starts(tiny, {block}): expected {want}, got {got.tolist()}{hint}"
        got = my_document_starts(val_text, 128)
    assert torch.equal(got.long(), document_starts(val_text, 128)), (
        "on the validation ci: not the same offsets as document_starts")
    print("exercise 3: correct")
