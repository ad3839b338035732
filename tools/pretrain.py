"""Train the shipped character models ``pretrained/char_gpt.pt`` and ``char_gpt_zh.pt`` (``make pretrain``).

    PYTHONPATH=. .venv/bin/python tools/pretrain.py             # the shipped run (CPU, 1 thread)
    PYTHONPATH=. .venv/bin/python tools/pretrain.py --steps 50  # a quick smoke run
    PYTHONPATH=. .venv/bin/python tools/pretrain.py --model char_gpt_zh   # the Song ci model (make pretrain-zh)
    PYTHONPATH=. .venv/bin/torchrun --standalone --nproc_per_node 2 tools/pretrain.py   # 2 processes (DDP)

Under ``torchrun`` (``make pretrain NPROC=2``) each process trains on its slice of the same global
batch of ``--batch`` windows and DistributedDataParallel averages the gradients, so every step is
the one-process step up to float32 rounding (notebook 10); evaluation batches are whole on every
rank, and rank 0 alone prints and writes the files (atomically, as one process does).

Where the file goes: ``artifacts/pretrained/<model>.pt`` (ignored by git) unless ``--out`` says
otherwise; the shipped, hash-pinned ``pretrained/<model>.pt`` is written only with
``--overwrite-shipped`` (a smoke run must never replace the model six notebooks load). The run
ends by printing how to install the new file and its sha256. Every argument is checked
before the corpus is read or a step is trained.

Reproducible: ``set_seed(0)`` (1 CPU thread), batches from ``torch.Generator().manual_seed(1)``,
evaluation batches from their own generators; the same machine gives the same file. Another
CPU (instruction set, BLAS) gives slightly different last digits and so a slightly different
model, whose loss should agree to about two decimals (not checked on another machine). The
run prints the file's sha256: record it in ``helpers/pretrained.py`` when installing it.

The shipped run (4000 steps, defaults below): val 1.166 nats (1.68 bits/char) on 50 fixed
batches, 1,860 s of wall time on a shared 2-core machine under heavy load (about 10 minutes
of CPU time: 0.14 s per step on one thread).

Data: ``load_corpus("pydoc")``, ``train_val_split(ids, 0.1, chunks=10)``: the last tenth of
each tenth of the corpus validates (the corpus's own last 10 % is easier than the rest).

``--model char_gpt_zh``: ``load_corpus("songci")`` split by whole ci with
``split_documents(text, 0.1)`` (the last 10 % of ci validate: no validation window repeats
training text); the vocabulary is every character of the corpus (V = 6,099), so validation
text always encodes. Training windows are ``--windows shifted`` (``shifted_starts``): each puts
a ci start at a random offset, 2 in 9 opening with the blank line before a ci, 1 in 9 with its
tune name, the rest after 1 to 96 characters of the previous ci; the validation estimates
always use windows that start where a ci starts (``document_starts``), so val losses compare
across recipes (``--windows ci`` trains on those too, ``--windows any`` draws windows anywhere).
Its defaults are ``ZH_DEFAULTS`` below; its record (val loss, CPU seconds, the bigram and unigram
baselines on the same split, and the form curve: the share of 20 samples per tune that follow
the tune's line lengths, every 1,000 steps) is in the file's meta and in notebook 08.

The shipped run (``ZH_DEFAULTS``: rotary positions, ``--positional rope``: no position table,
every head's q and k rotated by position; shifted windows; 10,000 steps of 8x128; 2026-11-27):
best val at step 9,500, restored: 3.929 nats/char on 50 fixed batches of windows from ci starts
(4.167 on windows that start anywhere), interpolated bigram 5.072, add-one unigram 6.327, ln V
8.716; 2,351 s of CPU time on one thread (2,409 s wall); 3.25 MB; sha256 54453e86...50489d4.
Form at 300 samples per tune and placement (seeds 100-103, 75 each, temperature 0.8, the same
prompts as notebook 08's ``placed_form_share``), 浣溪沙 / 菩萨蛮 / 鹧鸪天 / 西江月: blank line
88 / 90 / 84 / 78 %, tune name at position 0 without the blank line 87 / 85 / 82 / 67 %, after
an earlier ci 89 / 91 / 71 / 68 %: every tune at every placement, in two thirds of the samples
or more, in half the steps of the learned-position run. Its 20-sample form check reached half for 浣溪沙 at
step 2,000 (the learned run: at step 14,000). (The same command on the same machine gave the
same losses and form shares the day before, sha256 8cb978f9...9300ac: the file's meta holds the
CPU seconds, so the hash differs.) An earlier rotary model built outside this tool (a learned
table kept but never added, so other initial weights), stopped at step 13,500: at step 10,250,
100 samples per tune and placement, 83 / 85 / 80 / 85 %, 75 / 89 / 83 / 77 %, 80 / 80 / 83 / 74 %.

Learned positions (``--positional learned --steps 20000``, 8x128, shipped on 2026-11-27 until the
rotary run above replaced it; best val at step 18,750, restored): val 3.931 nats/char on 50 fixed batches of windows from ci starts (4.193 on
windows that start anywhere), interpolated bigram 5.072, add-one unigram 6.327, ln V 8.716;
3,609 s of CPU time on one thread (3,795 s of wall time on a busy 2-core machine); 3.3 MB;
sha256 7ab1e7ca...61ca1a. Form at 100 samples per tune and placement (seeds 100-103, 25 each,
temperature 0.8, the same prompts as notebook 08's ``placed_form_share``): blank line
46 / 65 / 29 / 4 % (浣溪沙 / 菩萨蛮 / 鹧鸪天 / 西江月), tune name at position 0 without the blank
line 48 / 70 / 25 / 3 %, after an earlier ci 44 / 44 / 18 / 3 %: the form holds wherever the
prompt sits, 浣溪沙 and 菩萨蛮 near half or above, but 鹧鸪天 and 西江月 fall well below what the
ci-start recipe reached at its one placement. Form came late (20 samples per tune: 浣溪沙 at
most 10 % until step 10,000, then 10-60 %, 50 % at step 20,000). At 300 samples per tune and
placement (seeds 100-103 and 200-203): 46 / 69 / 27 / 4 %, 45 / 74 / 22 / 2 %, 50 / 45 / 19 / 3 %.

The learned-position recipe for 30,000 steps (2026-11-27, not shipped): best val at step 27,000, 3.909
nats/char on the ci-start batches (better than the 20,000-step run's 3.931); 5,525 s of CPU time (5,808 s
wall); sha256 6a2627cc...0a5cf9. Form at 300 samples per tune and placement (seeds 100-103, 75
each): blank line 68 / 56 / 41 / 8 %, tune name at position 0 52 / 47 / 33 / 3 %, after an
earlier ci 44 / 30 / 29 / 2 %: 浣溪沙, 鹧鸪天 and 西江月 rose, 菩萨蛮 fell at every placement, so
more steps of this recipe are no straight road to half of every tune everywhere; rotary
positions were the other road (the shipped run above).

The learned-position recipe for 10,000 steps (2026-11-27, not shipped): best val at step 9,500, 4.024
nats/char on the ci-start batches and 4.287 on windows from anywhere; 1,823 s of CPU time
(2,298 s wall); sha256 0f9e1edf...f32a4e. Form at 100 samples per tune and placement: blank
line 23 / 26 / 4 / 0 %, tune name at position 0 29 / 22 / 2 / 0 %, after an earlier ci
14 / 18 / 2 / 0 %.

The ci-start recipe (``--windows ci``: every training window starts where a ci starts; shipped
until 2026-11-27, sha256 81ce75e1...458517), 10,000 steps of 8x128, best val at step 9,500:
val 3.974 nats/char on the ci-start batches (5.020 on windows that start anywhere; 4.330 on
every validation character, each ci read from its start, notebook 08); 1,265 s of CPU time on
one thread (1,326 s of wall time). Form, 300 samples per tune (seeds 0-2, temperature 0.8), the
tune name after the blank line at position 0, the placement every training window had:
浣溪沙 71 %, 菩萨蛮 59 %, 鹧鸪天 53 %, 西江月 45 % (an earlier 100-sample count, seeds 0-4, gave
85 / 69 / 53 / 51 %). With the tune name at position 0 without the blank line, or after an
earlier ci, 0-0.3 % (300 samples each): it learned the form at fixed absolute positions.

What else was measured (same machine, same form test on 40 samples per tune unless said):
- windows from anywhere, 7,500 steps (the first model shipped): 2 / 0 / 0 / 0 % on 100 samples;
- half the windows from ci starts, half anywhere, 7,500 steps: 20 / 28 / 0 / 0 %;
- all windows from ci starts, 7,500 steps: 62 / 53 / 35 / 35 %;
- width 192 (6 heads, 2.98 M parameters, 6.1 MB) for 5,500 steps, about the same CPU time
  (1,079 s): 64 / 52 / 46 / 30 % on 100 samples, val 4.035 (best step 4,500): no better than
  more steps at width 128 for the same time.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from helpers.ci_form import form_share, tune_patterns, tune_prompt
from helpers.data import document_starts, get_batch, load_corpus, split_documents, train_val_split
from helpers.device import set_seed
from helpers.models import GPT, GPTConfig
from helpers.ngram import BigramModel
from helpers.parallel import close_distributed, init_distributed, shard
from helpers.pretrained import PRETRAINED, PRETRAINED_DIR, read_pretrained, save_pretrained
from helpers.tokenizers import CharTokenizer
from helpers.training import TrainConfig, estimate_loss, train
from helpers.validate import check_int

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_DIR = PRETRAINED_DIR  # the hash-pinned files the notebooks load: written only with --overwrite-shipped
DEFAULT_DIR = ROOT / "artifacts" / "pretrained"  # ignored by git
VAL_FRACTION, CHUNKS = 0.1, 10
# The Song ci model: a longer block, so a whole ci (up to about 80 characters for the
# tunes of notebook 08) and its tune name fit in the context.
ZH_DEFAULTS = {"steps": 10000, "batch": 8, "block": 128, "d_model": 128, "layers": 4, "heads": 4, "lr": 2e-3,
               "windows": "shifted", "positional": "rope"}


def final_loss(model, data: dict, block: int, batch: int, iters: int, starts: dict | None = None) -> dict[str, float]:
    """Loss on fixed batches (their own seeded generator), so every evaluation sees the same text.

    ``starts`` (split -> offsets) draws the windows from those offsets only (ci starts)."""
    gen = torch.Generator().manual_seed(1234)
    starts = starts or {}
    batches = {s: [get_batch(data[s], block, batch, generator=gen, starts=starts.get(s)) for _ in range(iters)]
               for s in data}
    it = {s: iter(b) for s, b in batches.items()}
    return estimate_loss(model, lambda s: next(it[s]), eval_iters=iters)


def shifted_starts(ci_starts: torch.Tensor, n: int, block: int, max_shift: int = 96) -> torch.Tensor:
    """Window offsets that put a ci start anywhere in the first ``max_shift`` positions of the window.

    Per ci start s: s itself 32 times (the prompt at position 0, as before), s + 2 16 times (the
    tune name opening the window, no blank line) and s - r once for each r in 1..max_shift (the
    tail of the previous ci first, then the tune name at position r + 2). Drawn uniformly, so a
    window opens at a ci start 2/9 of the time, at a tune name 1/9, and elsewhere 2/3.
    """
    shifts = torch.cat([torch.zeros(32, dtype=torch.long), torch.full((16,), -2, dtype=torch.long),
                        torch.arange(1, max_shift + 1)])  # (144,)
    offs = (ci_starts[:, None].long() - shifts[None, :]).reshape(-1)  # (S, 144) -> (S*144,)
    return offs[(offs >= 0) & (offs <= n - block - 1)]


FORM_TUNES, FORM_EVERY = ("浣溪沙", "菩萨蛮", "鹧鸪天", "西江月"), 1000


def form_shares(model, tok, patterns: dict) -> dict[str, float]:
    """Share of 20 samples per tune (temperature 0.8, own seed) that follow the tune's pattern (notebook 08, §6)."""
    was_training = model.training
    model.eval()
    out = {}
    with torch.no_grad():
        for tune, p in patterns.items():
            prompt = torch.tensor([tok.encode(tune_prompt(tune))] * 20)  # (20, P)
            rows = model.generate(prompt, 110, temperature=0.8, generator=torch.Generator().manual_seed(0))
            out[tune] = form_share([tok.decode(r[prompt.shape[1]:].tolist()) for r in rows], p.pattern)
    model.train(was_training)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, every value checked (and the model's and training's configs built) before any work."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("char_gpt", "char_gpt_zh"), default="char_gpt")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--positional", choices=("learned", "rope"), default="learned",
                    help="learned absolute positions (GPT-2, the default) or rotary positions on q and k (RoPE)")
    ap.add_argument("--windows", choices=("ci", "any", "shifted"), default="ci",
                    help="char_gpt_zh: training windows start where a ci starts, anywhere, or 'shifted' (its "
                         "default): a ci start placed at a random offset in the window (see shifted_starts)")
    ap.add_argument("--out", default=None, help="the file to write (default: artifacts/pretrained/<model>.pt)")
    ap.add_argument("--overwrite-shipped", action="store_true",
                    help="write the shipped, hash-pinned pretrained/<model>.pt (then record the printed "
                         "sha256 in helpers/pretrained.py)")
    if ap.parse_known_args(argv)[0].model == "char_gpt_zh":  # its own defaults; flags given still win
        ap.set_defaults(**ZH_DEFAULTS)
    args = ap.parse_args(argv)
    shipped = SHIPPED_DIR / f"{args.model}.pt"
    if args.overwrite_shipped and args.out is not None:
        ap.error("--overwrite-shipped writes pretrained/<model>.pt: give it or --out, not both")
    if "\0" in str(args.out or ""):
        ap.error("--out must not contain a NUL byte")
    out = shipped if args.overwrite_shipped else Path(args.out or DEFAULT_DIR / f"{args.model}.pt")
    if str(args.out or "").endswith(("/", "\\")) or out.is_dir():
        ap.error(f"--out {args.out} is a folder; give a file name, e.g. {Path(args.out or '.') / shipped.name}")
    pinned = None if args.overwrite_shipped else _is_shipped(out) or _is_shipped(partial_path(out))
    if pinned:
        ap.error(f"--out {args.out} would write a shipped, hash-pinned model ({pinned.relative_to(ROOT)}); "
                 "write elsewhere, or pass --overwrite-shipped to replace it on purpose")
    if out.suffix != ".pt":
        ap.error(f"--out must name a .pt file, got {str(out)!r}")
    for parent in (out.parent, *out.parent.parents):  # a file where a folder must be: refuse now, not after training
        if parent.exists():
            if not parent.is_dir():
                ap.error(f"--out {out}: {parent} is a file, not a folder")
            break
    if args.steps < 1:
        ap.error(f"--steps must be >= 1, got {args.steps}")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        ap.error(f"--lr must be a positive finite number, got {args.lr}")
    try:  # the configs' own checks (d_model divisible by heads, dropout in [0, 1), ...), before the corpus is read
        args.config = GPTConfig(vocab_size=1, block_size=args.block, d_model=args.d_model, n_heads=args.heads,
                                n_layers=args.layers, dropout=args.dropout, positional=args.positional)
        args.train_config = train_config(args)
        check_int("--batch", args.batch, minimum=1)
    except (TypeError, ValueError) as e:
        ap.error(str(e))
    args.out = out
    return args


def _is_shipped(path: Path) -> Path | None:
    """The shipped file ``path`` would write (through a link too), or None."""
    target = path.resolve()
    return next((SHIPPED_DIR / f for f, _ in PRETRAINED.values() if (SHIPPED_DIR / f).resolve() == target), None)


def partial_path(out: Path) -> Path:
    """Where the model after each evaluation goes (an interrupted run still leaves a usable file)."""
    return out.with_suffix(".partial.pt")


def train_config(args) -> TrainConfig:
    return TrainConfig(max_steps=args.steps, lr=args.lr, min_lr=args.lr / 10, warmup_steps=min(100, args.steps),
                       weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, eval_interval=min(250, args.steps),
                       eval_iters=20, restore_best=True, progress=False)


def install_hint(out: Path, model: str, sha: str, shipped: bool) -> str:
    """What to do with the new file: it is the shipped one (record its hash), or how to make it so."""
    name = PRETRAINED[model][0]
    if shipped:
        return (f"replaced the shipped pretrained/{name}: set PRETRAINED[{model!r}] in helpers/pretrained.py "
                f"to sha256 {sha} (or `git checkout pretrained/{name}` to undo)")
    return (f"to install it: cp {out} pretrained/{name} and set PRETRAINED[{model!r}] in helpers/pretrained.py "
            f"to sha256 {sha}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shipped = args.overwrite_shipped
    info = init_distributed()  # under torchrun: this rank of WORLD_SIZE; else one process, no group
    if args.batch % info.world_size:
        raise SystemExit(f"--batch {args.batch} must split evenly across {info.world_size} processes")
    main_rank = info.is_main
    set_seed(0, threads=1)  # every rank: the same initial weights and the same batches
    baselines = {}
    if args.model == "char_gpt_zh":
        text = load_corpus("songci")
        tok = CharTokenizer.from_text(text)
        train_text, val_text = split_documents(text, VAL_FRACTION)
        train_ids, val_ids = torch.tensor(tok.encode(train_text)), torch.tensor(tok.encode(val_text))
        # Windows from ci starts put the tune name at positions 2..; 'shifted' moves the ci start
        # around the window, so the form is not learned at one place only (notebook 08).
        starts = ({"train": document_starts(train_text, args.block), "val": document_starts(val_text, args.block)}
                  if args.windows != "any" else {})
        if args.windows == "shifted":  # validation keeps ci-start windows, so val losses compare across runs
            starts["train"] = shifted_starts(starts["train"], len(train_ids), args.block)
        bigram = BigramModel(train_ids, tok.vocab_size, lam=0.7)
        baselines = {"bigram_val": bigram.nll(val_ids), "unigram_val": bigram.unigram_nll(val_ids),
                     "uniform": math.log(tok.vocab_size)}
        if main_rank:
            print("baselines on val (nats/char): " + ", ".join(f"{k} {v:.3f}" for k, v in baselines.items()), flush=True)
    else:
        text, train_text = load_corpus("pydoc"), ""
        tok = CharTokenizer.from_text(text)
        train_ids, val_ids = train_val_split(torch.tensor(tok.encode(text)), VAL_FRACTION, chunks=CHUNKS)
        starts = {}
    data = {"train": train_ids, "val": val_ids}
    if args.block >= min(len(train_ids), len(val_ids)):
        raise SystemExit(f"--block {args.block} does not fit the data ({len(val_ids)} validation characters)")
    cfg = dataclasses.replace(args.config, vocab_size=tok.vocab_size)
    model = GPT(cfg)
    gen = torch.Generator().manual_seed(1)
    # Several processes: each trains on its slice of the same global batch and DDP averages the
    # gradients, so every rank takes the one-process step (notebook 10). Evaluation batches stay
    # whole on every rank: the same losses everywhere, so restoring the best weights agrees.
    net = DistributedDataParallel(model, broadcast_buffers=False) if info.backend else model

    def batch(split):
        x, y = get_batch(data[split], args.block, args.batch, generator=gen, starts=starts.get(split))  # (B, T)
        # A training step's batch (gradients on) is sliced; estimate_loss's (under no_grad) is not.
        sliced = split == "train" and net is not model and torch.is_grad_enabled()
        return shard((x, y), info.rank, info.world_size) if sliced else (x, y)

    tc = args.train_config
    start, cpu_start = time.perf_counter(), time.process_time()
    form_curve, form_cpu = {}, 0.0  # step -> {tune: share}; CPU seconds spent measuring it (not training)
    patterns = tune_patterns(train_text, FORM_TUNES) if args.model == "char_gpt_zh" else {}

    def report(step, hist, _model):
        nonlocal form_cpu
        if not main_rank:
            return  # rank 0 alone measures, prints and writes
        _model = model  # the plain model (under DDP, `_model` is its wrapper)
        if patterns and step % FORM_EVERY == 0:
            t0 = time.process_time()
            form_curve[step] = form_shares(_model, tok, patterns)
            form_cpu += time.process_time() - t0
            print(f"           form (share of 20 samples at temperature 0.8): {form_curve[step]}", flush=True)
        print(f"step {step:5d}  train {hist.train_loss[-1]:.4f}  val {hist.val_loss[-1]:.4f}  "
              f"{time.perf_counter() - start:6.0f} s  cpu {time.process_time() - cpu_start - form_cpu:6.0f} s",
              flush=True)
        # A partial file after each evaluation: an interrupted run still leaves a usable model.
        save_pretrained(partial_path(args.out), _model, tok, step=step)

    if main_rank:
        print(f"{sum(p.numel() for p in model.parameters()):,} parameters; train {len(train_ids):,} / "
              f"val {len(val_ids):,} characters; {args.steps} steps of {args.batch}x{args.block}"
              + (f" over {info.world_size} processes ({info.backend})" if info.backend else ""), flush=True)
    hist = train(net, batch, tc, callback=report)
    secs, cpu_secs = time.perf_counter() - start, time.process_time() - cpu_start - form_cpu
    if info.backend:
        del net  # the DDP wrapper's reducer holds gloo work: gone before the group is
        close_distributed()
        if not main_rank:
            return
    form_shipped = form_shares(model, tok, patterns) if patterns else {}  # the restored best weights
    fp32 = final_loss(model, data, args.block, 32, 50, starts)
    record = {"steps": args.steps, "batch_size": args.batch, "processes": info.world_size,
              "train_seconds": round(secs, 1),
              "train_cpu_seconds": round(cpu_secs, 1),
              "eval_steps": hist.eval_steps, "train_loss": hist.train_loss, "val_loss": hist.val_loss,
              "windows": {"ci": "from ci starts", "any": "anywhere",
                          "shifted": "a ci start at a random offset (shifted_starts)"}[args.windows] if
                         args.model == "char_gpt_zh" else "anywhere",
              "split": ({"val_fraction": VAL_FRACTION, "by": "document"} if args.model == "char_gpt_zh"
                        else {"val_fraction": VAL_FRACTION, "chunks": CHUNKS}),
              "baselines": baselines, "train_config": {
                  "lr": tc.lr, "min_lr": tc.min_lr, "warmup_steps": tc.warmup_steps, "weight_decay": tc.weight_decay,
                  "betas": list(tc.betas), "grad_clip": tc.grad_clip, "best_step": hist.best_step},
              "loss_fp32": fp32, "form_curve": {str(k): v for k, v in form_curve.items()},
              "form_shipped": form_shipped,
              "form_seconds": round(form_cpu, 1)}
    out = args.out
    save_pretrained(out, model, tok, **record)
    loaded, _, _ = read_pretrained(out)
    fp16 = final_loss(loaded, data, args.block, 32, 50, starts)
    if starts:  # the same model on windows that start anywhere, for comparison with the pydoc model's record
        record["loss_fp16_any_start"] = final_loss(loaded, data, args.block, 32, 50)
    record["loss_fp16"] = fp16  # measured after the float16 round trip: what a user loads
    sha = save_pretrained(out, model, tok, **record)
    partial_path(out).unlink(missing_ok=True)  # the complete file replaces it
    print(f"trained {secs:.0f} s ({cpu_secs:.0f} s of CPU time); best val at step {hist.best_step}; loss on 50 fixed batches of 32x{args.block}: "
          f"float32 train {fp32['train']:.4f} val {fp32['val']:.4f}; "
          f"float16 train {fp16['train']:.4f} val {fp16['val']:.4f}")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB), sha256 {sha}")
    print(install_hint(out, args.model, sha, shipped))


if __name__ == "__main__":
    main()
