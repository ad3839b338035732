"""Redraw time of every control of every explorer, headless (a benchmark, not a test).

    .venv/bin/python bench/bench_widgets.py [--repeats 15]

Each control is moved through a few values (a button is clicked); the wall time from the
change to the new PNG (model run when the text changes, weights, drawing, PNG encoding) is
timed and the median and 90th percentile are printed per control. Without a kernel's event
loop the throttle draws at once, so every change is one full redraw. The trained-model
explorers use the shipped pretrained character model when `helpers.load_pretrained` has it, otherwise an untrained GPT of the same size (the
redraw cost does not depend on the weights). The cross-attention explorer uses an untrained
`Transformer` of notebook 07's "gpu" size (12 digits, 2 layers, 4 heads, d_model 64), the larger
of its two, with the <EOS> logit lowered so that it writes all 13 tokens: the largest picture.
Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.data import load_corpus  # noqa: E402
from helpers.device import set_seed  # noqa: E402
from helpers.models import GPT, GPTConfig, Transformer  # noqa: E402
from helpers.tokenizers import CharTokenizer  # noqa: E402
from helpers.widgets import (  # noqa: E402
    attention_explorer,
    cross_attention_explorer,
    gpt_attention_explorer,
    llm_explorer,
    next_token_explorer,
    pe_explorer,
)


def char_model():
    try:
        from helpers import load_pretrained

        return (*load_pretrained("char_gpt"), "pretrained")
    except (ImportError, ValueError, OSError):
        tok = CharTokenizer.from_text(load_corpus())
        return GPT(GPTConfig(tok.vocab_size, block_size=64)), tok, "untrained"


def reversal_model() -> Transformer:
    """Notebook 07's reversal model at its "gpu" size, untrained; it never writes <EOS> early."""
    model = Transformer(12, 12, d_model=64, n_heads=4, n_layers=2, d_ff=128, dropout=0.0, max_len=14, norm_first=True)
    with torch.no_grad():
        model.head.bias[11] = -20.0
    return model


def time_control(ex, control, values, repeats: int) -> list[float]:
    times = []
    for value in itertools.islice(itertools.cycle(values), repeats):
        png = ex.image.value
        start = time.perf_counter()
        if values is CLICK:
            control.click()
        else:
            control.value = value
        times.append(time.perf_counter() - start)
        if ex.image.value == png and values is CLICK:
            raise RuntimeError(f"{control.description}: the picture did not change")
    return times


CLICK = [None]  # a button: clicked, no value
# Texts that fill the model's whole context (64 characters): the largest maps and most labels.
LONG = ["x = [i * i for i in range(100) if i % 3 == 0]  # squares of every third", "class Point:\n    def __init__(self, x, y):\n        self.x = x; self.y = y"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    set_seed(0)
    model, tok, kind = char_model()
    pe = pe_explorer()
    att = attention_explorer()
    nt = next_token_explorer(model, tok, prompt="def __init__(self")
    ga = gpt_attention_explorer(model, tok, text="def __init__(self):")
    ca = cross_attention_explorer(reversal_model(), source="314159265358")
    llm = llm_explorer()  # SmolLM2-135M-Instruct (notebook 09)
    cases = [
        ("pe", pe, c, vals) for c, vals in [
            (pe.controls["seq_len"], [32, 64, 96]), (pe.controls["d_model"], [64, 128, 192]),
            (pe.controls["base"], [100.0, 1000.0, 10000.0]), (pe.controls["dim"], [2, 10, 20]),
            (pe.controls["position"], [8, 16, 24])]
    ] + [
        ("attention", att, c, vals) for c, vals in [
            (att.sentence, list(att.sentence.options)), (att.head, [0, 1, 2, 3]),
            (att.temperature, [0.5, 1.0, 2.0]), (att.causal, [True, False]), (att.positions, [False, True]),
            (att.query, [0, 1, 2])]
    ] + [
        ("next_token", nt, c, vals) for c, vals in [
            (nt.temperature, [0.5, 1.0, 1.5]), (nt.top_k, [0, 5, 20]), (nt.top_p, [1.0, 0.9, 0.5]),
            (nt.prompt, ["def __init__(self", "def __init__(sel", "import os\n"]), (nt.sample, CLICK)]
    ] + [
        ("gpt_attention", ga, c, vals) for c, vals in [
            (ga.layer, [0, 1, 2, 3]), (ga.head, [0, 1, 2, 3]), (ga.query, [18, 10, 5]), (ga.key, [0, 3, 5]),
            (ga.scores_view, [True, False]),
            (ga.text, ["def __init__(self):", "for x in range(10):", "import os"]), (ga.text, LONG)]
    ] + [
        ("cross_attention", ca, c, vals) for c, vals in [
            (ca.layer, [0, 1]), (ca.head, [0, 1, 2, 3]), (ca.row, [0, 6, 12]),
            (ca.text, ["314159265358", "271828182845", "123"])]
    ] + [
        ("llm", llm, c, vals) for c, vals in [
            (llm.temperature, [0.5, 1.0, 1.5]), (llm.top_k, [0, 5, 20]), (llm.top_p, [1.0, 0.9, 0.5]),
            (llm.layer, [16, 3, 25]), (llm.head, [0, 4, 8]),
            (llm.prompt, ["The little girl opened the old wooden box and found a golden",
                          "The cat sat on the", "我喜欢吃苹果。我最喜欢的水果是"])]
    ]  # fmt: skip
    print(f"torch threads {torch.get_num_threads()}, trained-model explorers use the {kind} model")
    print(f"{'explorer':15} {'control':14} {'median ms':>10} {'p90 ms':>8}")
    for name, ex, control, values in cases:
        times = sorted(time_control(ex, control, values, args.repeats))
        label = (control.description or type(control).__name__) + (" (64 ch)" if values is LONG else "")
        print(f"{name:15} {label:14} {statistics.median(times) * 1e3:10.0f} {times[int(0.9 * (len(times) - 1))] * 1e3:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
