"""SmolLM2-135M generation speed: our Llama (helpers.llama) against transformers' LlamaForCausalLM.

    .venv/bin/python bench/bench_smollm.py                      # 1 thread, 3 rounds of 32 greedy tokens
    .venv/bin/python bench/bench_smollm.py --threads 2 --rounds 5 --new 64

Both models hold the same float32 weights, dequantised from the pinned GGUF file (transformers reads
it with `gguf`); both generate greedily with a KV cache from the same chat prompt, in one process,
with the same thread count. Rounds alternate between the two (a busy machine slows both alike) and
the median round is reported. Tokens/s counts the new tokens over the whole `generate` call
(prompt prefill included). Before timing, the two greedy answers must be token-identical.
Not a test: numbers depend on the machine and its load (bench/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new", type=int, default=32, help="new tokens per generate call")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    from helpers.pretrained import load_pretrained
    from helpers.smollm import smollm2_path
    from helpers.smollm_tokenizer import chat_prompt

    transformers.logging.set_verbosity_error()
    ours, tok = load_pretrained("smollm2")
    path = smollm2_path()
    ref = transformers.LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    text = chat_prompt([{"role": "user", "content": "Tell me a short story about a cat who learns to fly."}])
    ids = torch.tensor([tok.encode(text, allow_special=True)])  # (1, T)

    def run_ours():
        return ours.generate(ids, args.new, top_k=1)

    def run_ref():
        with torch.no_grad():
            return ref.generate(ids, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                                pad_token_id=tok.eos_id)

    a, b = run_ours(), run_ref()
    assert a.tolist() == b.tolist(), "greedy answers differ"
    print(f"prompt {ids.shape[1]} tokens, {args.new} new, threads {torch.get_num_threads()}; answer starts "
          f"{tok.decode(a[0, ids.shape[1]:].tolist())[:60]!r}")
    times = {"ours (helpers.llama)": [], f"transformers {transformers.__version__}": []}
    for _ in range(args.rounds):
        for name, fn in zip(times, (run_ours, run_ref), strict=True):
            t0 = time.perf_counter()
            out = fn()
            times[name].append(time.perf_counter() - t0)
            assert out.shape[1] == ids.shape[1] + args.new
    print("| model | tokens/s (median) | rounds |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {args.new / statistics.median(ts):.1f} | "
              + ", ".join(f"{args.new / t:.1f}" for t in ts) + " |")


if __name__ == "__main__":
    main()
