"""Checks of notebook 06 (the full model): its builds and exercises.

- ``check_gpt_forward``: the build of §2, GPT's forward pass written from the model's own modules.
- ``check_exercise_1``: the loss of a tied GPT at initialisation, predicted from a, σ and the repeat rate.
- ``check_exercise_2``: greedy generation with a KV cache the learner writes.
- ``check_exercise_3``: the top-p (nucleus) filter.
- ``check_exercise_4``: the min-p filter.
- ``check_exercise_5``: generation past block_size with a cache rebuilt when the window slides.
- ``check_beam_search``: the build of §3.3, beam search with GNMT's length penalty, on hand-made next-token trees.

The cache checks run on the course's trained character GPT (``load_pretrained("char_gpt")``): an
untrained toy's greedy tokens hide attention errors (a prompt pass without the causal mask, a new
token that cannot see itself), a trained model's do not. Each token the learner generates must be
the argmax of the full model's logits given the tokens before it (within 1e-3 nats, so a near tie
decided the other way by rounding on another CPU is not an error).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from helpers.data import load_corpus
from helpers.exercises import call_unchanged, refuse_calls
from helpers.generation import cached_attention, filter_logits
from helpers.gpt import GPT
from helpers.models import GPTConfig
from helpers.pretrained import load_pretrained

__all__ = ["check_gpt_forward", "check_beam_search", "check_exercise_1", "check_exercise_2", "check_exercise_3", "check_exercise_4",
           "check_exercise_5", "copy_stats", "count_positions"]


def copy_stats(logits, x):
    """(B, T, V), (B, T) -> mean logit of the current token a, std of every other logit σ."""
    own = logits.gather(-1, x[..., None])  # (B, T, 1)
    others = logits.scatter(-1, x[..., None], float("nan"))  # (B, T, V), the current token blanked
    return own.mean().item(), others[~others.isnan()].std().item()


def count_positions(model, fn, *args, **kwargs):
    """Run fn(*args, **kwargs); return its result and the token-positions that passed through layer 0's feed-forward."""
    seen = []
    hook = model.blocks[0].ff.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[:-1].numel()))
    try:
        with torch.no_grad():
            return fn(*args, **kwargs), sum(seen)
    finally:
        hook.remove()


# ---------------------------------------------------------------- exercise 1: the loss at init

def _repeating_text(V, share, g, B=64, T=65):
    x = torch.randint(0, V, (B, T), generator=g)  # random text ...
    copy = torch.rand(B, T, generator=g) < share
    for t in range(1, T):  # ... in which a share of the tokens repeat the one before
        x[:, t] = torch.where(copy[:, t], x[:, t - 1], x[:, t])
    return x


def check_exercise_1(predict_tied_loss):
    """Tied GPTs at init on random text with a chosen share of repeats; C = 128 and C = 512 (σ ≈ 0.45,
    where leaving out e^{σ²/2} costs about 0.1 nats)."""
    cases = ((1000, 512, (0.0, 0.5)), (12, 128, (0.0, 0.3, 0.6)), (103, 128, (0.0, 0.3, 0.6)))  # σ's case first
    for V, C, shares in cases:
        with torch.random.fork_rng(devices=[]):  # a fixed model, without disturbing the global generator
            torch.manual_seed(0)
            m = GPT(GPTConfig(vocab_size=V, block_size=64, d_model=C, n_heads=4, n_layers=2)).eval()  # tied
        g = torch.Generator().manual_seed(1)
        for share in shares:
            x = _repeating_text(V, share, g, B=64 if C == 128 else 24)
            with torch.no_grad():
                logits, loss = m(x[:, :-1], x[:, 1:])  # (B, 64, V), ()
            (a, sigma), r = copy_stats(logits, x[:, :-1]), (x[:, 1:] == x[:, :-1]).float().mean().item()
            got = predict_tied_loss(V, a, sigma, r)
            assert isinstance(got, float), f"return a float, got {type(got).__name__}"
            off = got - loss.item()
            hint = ""
            if C == 512 and share == 0.0:
                hint = (" (σ is large here: does your sum of the other tokens' e^z use E[e^z] = e^{σ²/2} "
                        "rather than 1?)")
            elif V == 12:
                hint = " (V is small here: is the copy token's e^a in the sum, next to V − 1 others?)"
            elif share > 0:
                hint = " (repeats change the target's logit: on a repeat it is a, otherwise 0 on average)"
            assert abs(off) < 0.05, (f"V = {V}, C = {C}, repeat rate {r:.2f}: your prediction is {abs(off):.2f} nats too "
                                     f"{'high' if off > 0 else 'low'} (a = {a:.2f}, σ = {sigma:.2f}){hint}")
    print("exercise 1: correct")


# ---------------------------------------------------------------- exercises 2 and 5: the KV cache

_LM: list = []


def _char_gpt():
    """The trained character GPT and its tokenizer (loaded once)."""
    if not _LM:
        with torch.random.fork_rng(devices=[]):  # building the model draws an init: keep the global generator
            _LM.append(load_pretrained("char_gpt"))
    model, tok = _LM[0]
    return model.eval(), tok


def _windows(tok, n, length):
    text = load_corpus()
    starts = [(i + 1) * len(text) // (n + 2) for i in range(n)]  # spread over the corpus: no seed involved
    return torch.tensor([tok.encode(text[s : s + length]) for s in starts])  # (n, length)


def _bad_position(model, ids, got):
    """First position of ``got`` whose token is not the full model's argmax (within 1e-3), or None."""
    T, bs = ids.shape[1], model.config.block_size
    with torch.no_grad():
        inside = model(got[:, :bs])[0]  # (B, min(T+n, bs), V): row t-1 predicts token t
        for t in range(T, got.shape[1]):
            row = inside[:, t - 1] if t <= bs else model(got[:, t - bs : t])[0][:, -1]  # (B, V)
            chosen = row.gather(-1, got[:, t : t + 1])[:, 0]  # (B,)
            if (chosen < row.amax(-1) - 1e-3).any():
                return t
    return None


def _run_cache_check(label, fn, cases):
    model, tok = _char_gpt()
    bs = model.config.block_size
    for prompts, n_new in cases:
        ids = torch.tensor([tok.encode(p) for p in prompts]) if isinstance(prompts, list) else _windows(tok, *prompts)
        (B, T) = ids.shape
        with refuse_calls(fn, (GPT, "forward_cached"), (GPT, "generate"), cached_attention, label=label):
            got, n = count_positions(model, call_unchanged, fn, model, ids, n_new, label="your function")
        where = f"prompt of {T} token{'s' * (T > 1)} (B = {B}), n_new = {n_new}"
        assert isinstance(got, torch.Tensor) and got.shape == (B, T + n_new), (
            f"{where}: expected a tensor of shape {(B, T + n_new)}, got "
            f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        assert torch.equal(got[:, :T], ids), f"{where}: the result must start with the prompt, unchanged"
        bad = _bad_position(model, ids, got)
        if bad is not None and bad == T:
            raise AssertionError(
                f"{where}: your first new token is not the model's greedy choice, so the prompt's pass already "
                "computes other logits than model(ids): run the T prompt positions in one pass with the causal mask "
                "(position s must not see s + 1, ...), positions 0 … T − 1, ln_f before the head")
        if bad is not None and bad < bs:
            raise AssertionError(
                f"{where}: tokens 1 … {bad - T} after the prompt are right, token {bad - T + 1} (position {bad}) is not "
                "the model's greedy choice: a step after the prompt goes wrong. Does the new token see itself "
                "(its key and value join the cache before it attends)? Does it attend to every cached key? "
                "Is its position s, the number of tokens before it?")
        if bad is not None:
            raise AssertionError(
                f"{where}: inside the block your tokens are right, but position {bad}, after the window began to "
                f"slide (block_size = {bs}), is not the model's greedy choice: each rebuild runs the window's "
                f"{bs} tokens at positions 0 … {bs - 1} in one pass, with the causal mask")
        inside = min(n_new, bs - T + 1)  # steps whose context still fits: T + inside - 1 positions
        want = B * (T + inside - 1 + (n_new - inside) * bs)
        assert n == want, (f"{where}: layer 0 processed {n} token-positions, expected {want}: "
                           + ("each of the B·(T + n_new − 1) positions passes once" if inside == n_new else
                              "T + n_new − 1 while the block fills, then block_size per step once the window slides"))


def check_exercise_2(cached_generate):
    """Your tokens must be the greedy choice of the full model (the trained char_gpt) given the tokens before
    them, and every position must pass through layer 0 once. model.forward_cached, model.generate and
    helpers.generation.cached_attention are off while your function runs: the cache must be yours."""
    cases = (["The "], 40), ((4, 24), 1), ((4, 12), 3), (["a"], 30), ((2, 10), 20)
    _run_cache_check("exercise 2", cached_generate, cases)
    print("exercise 2: correct")


def check_exercise_5(long_cached_generate):
    """As exercise 2, past block_size (64 for char_gpt): the window slides and the cache is rebuilt each step."""
    cases = (["The "], 70), ((2, 30), 40), (["a"], 66), ((3, 10), 20)
    _run_cache_check("exercise 5", long_cached_generate, cases)
    print("exercise 5: correct")


# ---------------------------------------------------------------- exercise 3: top-p

def _shuffled(logits, keep, perm):
    return logits[:, perm], [[row[i] for i in perm] for row in keep]


def _explain_top_p(case, logits, p, keep, kept):
    probs = logits.softmax(-1)[0]
    want = [i for i, k in enumerate(keep[0]) if k]
    have = [i for i, k in enumerate(kept[0]) if k]
    msg = (f"{case}: probabilities {[round(v, 3) for v in probs.tolist()]}, p = {p}: the smallest set of most "
           f"likely tokens reaching p is at indices {want}; you kept {have}")
    missing = sorted(set(want) - set(have))
    if len(want) == len(have):
        msg += (" — the right number of tokens, but not the most likely ones: a mask made in sorted order must be "
                "put back in vocabulary order (or compare probabilities, not ranks)")
    elif int(probs.argmax()) not in have:
        msg += " — the most likely token always stays, even when it alone is more than p"
    elif set(have) < set(want) and float(probs[missing].min()) >= float(probs[have].min()) - 1e-6:
        msg += " — a token exactly as likely as the last one kept (a tie) must stay too"
    elif len(have) > len(want):
        msg += " — stop at the first token where the mass reaches p: the tokens ranked after it go"
    else:
        msg += (" — too few: a token stays while the mass of the more likely tokens above it is still below p "
                "(count the mass in order of probability, most likely first)")
    return msg


def check_exercise_3(top_p_filter):
    """Hand-made rows in shuffled vocabulary order (a tie at the boundary, a first token that alone reaches p,
    equal tokens, p = 1) and random rows; helpers.generation.filter_logits is off while your function runs."""
    perm = [2, 0, 3, 1]
    cases = [  # (case, logits (1, V), p, which tokens must stay)
        ("the first token alone reaches p", *_shuffled(torch.tensor([[4.0, 1.0, 0.5, 0.0]]), [[True, False, False, False]], perm), 0.8),
        ("a tie at the boundary", *_shuffled(torch.tensor([[0.4, 0.3, 0.3, 0.0]]).log(), [[True, True, True, False]], perm), 0.6),
        ("four equal tokens", torch.zeros(1, 4), [[True] * 4], 0.5),
        ("p = 1 keeps every token", torch.tensor([[2.0, -1.0, 0.0, 1.0]]), [[True] * 4], 1.0),
        ("unsorted, no tie", *_shuffled(torch.tensor([[0.45, 0.3, 0.15, 0.1]]).log(), [[True, True, False, False]], perm), 0.7),
    ]
    cases = [(c, lg, p, k) for c, lg, k, p in cases]
    rows = torch.randn(8, 20, generator=torch.Generator().manual_seed(0)) * 2  # (B, V), no ties
    p_for = {0.3: None, 0.9: None}
    for p in p_for:
        probs = rows.softmax(-1)
        ranked, order = probs.sort(-1, descending=True)
        keep = torch.zeros_like(rows, dtype=torch.bool).scatter(-1, order, (ranked.cumsum(-1) - ranked) < p)
        cases.append((f"random rows, p = {p}", rows, p, keep.tolist()))
    for case, logits, p, keep in cases:
        with refuse_calls(top_p_filter, filter_logits, label="exercise 3"):
            out = call_unchanged(top_p_filter, logits, p, label="your top_p_filter")
        assert isinstance(out, torch.Tensor) and out.shape == logits.shape, (
            f"{case}: expected a tensor of shape {tuple(logits.shape)}, got "
            f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        kept = torch.isfinite(out)
        if kept.tolist() != keep:
            if logits.shape[0] == 1:
                raise AssertionError(_explain_top_p(case, logits, p, keep, kept.tolist()))
            row = next(i for i in range(len(keep)) if kept[i].tolist() != keep[i])
            raise AssertionError(_explain_top_p(f"{case}, row {row}", logits[row : row + 1], p, keep[row : row + 1],
                                                kept[row : row + 1].tolist()))
        assert torch.equal(out[kept], logits[kept]), f"{case}: the kept logits must keep their values"
        assert (out[~kept] == float("-inf")).all(), f"{case}: removed tokens must be -inf"
    print("exercise 3: correct")


# ---------------------------------------------------------------- exercise 4: min-p

def check_exercise_4(min_p_filter):
    """A sure row and a flat one, three thresholds; the result must not change when a constant is added to a row."""
    logits = torch.tensor([[2.0, 2.0 + math.log(0.5), 2.0 + math.log(0.09), -5.0],  # probs ∝ 1, 0.5, 0.09, tiny
                           [0.0, 0.0, 0.0, 0.0]])  # (2, 4): a sure row and a flat one
    perm = [3, 1, 0, 2]  # the most likely token is not first
    logits = torch.cat([logits, logits[:1, perm]])  # (3, 4)
    for min_p, keep in ((0.1, [True, True, False, False]), (0.6, [True, False, False, False]),
                        (0.05, [True, True, True, False])):
        keep = [keep, [True] * 4, [keep[i] for i in perm]]
        out = call_unchanged(min_p_filter, logits, min_p, label="your min_p_filter")
        assert isinstance(out, torch.Tensor) and out.shape == logits.shape, (
            f"min_p={min_p}: expected a tensor of shape {tuple(logits.shape)}, got "
            f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
        kept = torch.isfinite(out)
        assert kept.tolist() == keep, (
            f"min_p={min_p}: rows with probabilities ∝ [1, 0.5, 0.09, ~0] (sure), [1, 1, 1, 1] (flat) and the sure row "
            f"shuffled: expected to keep {keep}, kept {kept.tolist()} (the threshold is min_p × the row's largest "
            "probability, not an absolute probability and not a logit)")
        assert torch.equal(out[kept], logits[kept]), f"min_p={min_p}: the kept logits must keep their values"
        shifted = call_unchanged(min_p_filter, logits + 100.0, min_p, label="your min_p_filter")
        assert torch.equal(torch.isfinite(shifted), kept), (
            f"min_p={min_p}: the result must not change when a constant is added to every logit of a row "
            "(the probabilities do not change): compare probabilities, not logits")
    print("exercise 4: correct")


# ---------------------------------------------------------------- build (§2): the GPT forward pass
#
# The learner's gpt_forward(model, idx) must give model(idx)'s logits. It is compared with the model's own
# forward on the trained char_gpt (real text) and on two small random GPTs (one with dropout 0.2 in its
# config, one untied), in eval mode, for several (B, T) with T = 1 and T = block_size among them. When the
# logits differ, the check looks for the cause by running the learner's function again (a changed later
# token, a second call) and by comparing with the forward of a model changed on purpose (no final
# LayerNorm, no positions, ...): the messages name the cause, not the code.

_REFUSED = ("forward", "_trunk", "_embed", "forward_cached", "attention_weights", "generate")


def _random_gpt(seed, **cfg):
    """A small GPT with weights far from the init (every parameter moved by N(0, 0.3²)), in eval mode."""
    with torch.random.fork_rng(devices=[]):  # a fixed model, without disturbing the global generator
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**cfg)).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return model


def _forward_cases():
    lm, tok = _char_gpt()
    small = _random_gpt(0, vocab_size=11, block_size=9, d_model=24, n_heads=3, n_layers=3, dropout=0.2)
    untied = _random_gpt(1, vocab_size=13, block_size=6, d_model=16, n_heads=2, n_layers=2, tie_weights=False)
    g = torch.Generator().manual_seed(0)
    return [("char_gpt (trained)", lm, _windows(tok, 3, 17)), ("char_gpt (trained)", lm, _windows(tok, 1, 1)),
            ("char_gpt (trained)", lm, _windows(tok, 2, 64)),
            ("a small random GPT (config dropout 0.2)", small, torch.randint(0, 11, (4, 5), generator=g)),
            ("a small random GPT (config dropout 0.2)", small, torch.randint(0, 11, (2, 9), generator=g)),
            ("a small random GPT (config dropout 0.2)", small, torch.randint(0, 11, (3, 1), generator=g)),
            ("an untied random GPT", untied, torch.randint(0, 13, (2, 6), generator=g)),
            ("an untied random GPT", untied, torch.randint(0, 13, (3, 3), generator=g))]


def _run_forward(fn, model, idx):
    with torch.no_grad(), refuse_calls(fn, *((GPT, name) for name in _REFUSED), label="the GPT forward build"):
        return call_unchanged(fn, model, idx, label="your gpt_forward")


def _changed(model, change):
    """A copy of the model with one piece changed on purpose (a known mistake, run by GPT's own forward)."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        change(m)
    return m


def _roll_positions(m):  # position t gets the vector of t + 1
    w = m.pos_emb.embedding.weight
    w.copy_(torch.roll(w, -1, 0))


def _scale_tokens(m):  # the encoder-decoder's ×√C on the token embedding (the head keeps the plain matrix)
    w = m.tok_emb.weight
    m.tok_emb = nn.Embedding.from_pretrained(w.detach() * math.sqrt(m.config.d_model), freeze=False)


def _tie(m):
    m.head.weight = m.tok_emb.weight


def _no_positions(m):
    m.pos_emb.embedding.weight.zero_()


def _no_ln_f(m):
    m.ln_f = nn.Identity()


_MISTAKES = (  # (applies to (model, T), the change, what the learner's logits then match)
    (lambda m, T: True, _no_ln_f, "the final LayerNorm is missing: model.ln_f goes after the last block, before the head"),
    (lambda m, T: True, _no_positions,
     "the position embeddings are missing: the blocks must get token embedding + position embedding"),
    (lambda m, T: T < m.config.block_size, _roll_positions,
     "the positions are offset by one: the first token is at position 0, so positions are 0, 1, …, T − 1"),
    (lambda m, T: True, _scale_tokens,
     "the token embeddings are multiplied by √C: that is the encoder-decoder's convention (section 1); GPT adds "
     "the plain token embedding and the position embedding"),
    (lambda m, T: not m.config.tie_weights, _tie,
     "the head is the token embedding matrix, but this model is untied (tie_weights=False): the head is "
     "model.head; tying (the default) makes its weight the token embedding at construction, not in every model"),
)


def _close(a, b, tol):
    return a.shape == b.shape and bool(((a - b).abs() <= tol).all())


def _explain(fn, model, idx, got, want, tol, where):
    """Why got is not want: the first cause the probes find, as an AssertionError."""
    B, T = idx.shape
    if bool((got >= 0).all()) and _close(got.sum(-1), torch.ones(B, T), 1e-3):
        raise AssertionError(f"{where}: every row of your result sums to 1: these are probabilities (softmax), "
                             "the check wants the logits, before any softmax")
    if _close(got, want.log_softmax(-1), 1e-3):
        raise AssertionError(f"{where}: your result is log-probabilities (log_softmax of the logits): return the "
                             "logits themselves, the head's output")
    if not torch.equal(_run_forward(fn, model, idx), got):
        raise AssertionError(f"{where}: two calls on the same ids give different results, so something random runs "
                             "in eval mode: dropout. model.drop (an nn.Dropout) is off in eval mode; F.dropout(x, p) "
                             "is not (its training=True by default)")
    if T > 1:
        later = idx.clone()
        later[:, -1] = (later[:, -1] + 1) % model.config.vocab_size  # change the last token only
        moved = (_run_forward(fn, model, later)[:, :-1] - got[:, :-1]).abs().amax().item()
        if moved > tol:
            raise AssertionError(f"{where}: changing the last token changes the logits of earlier positions (by up "
                                 f"to {moved:.3g}): future tokens leak into the past, so the causal mask is missing "
                                 "(each block must run with is_causal=True, or a lower-triangular mask)")
    for applies, change, cause in _MISTAKES:
        if applies(model, T) and _close(got, _changed(model, change)(idx)[0], tol):
            raise AssertionError(f"{where}: your logits are those of a model in which {cause}")
    off = (got - want).abs()
    row = int(off.amax(dim=(0, 2)).argmax())
    raise AssertionError(
        f"{where}: your logits differ from the model's by up to {off.max().item():.3g} (tolerance {tol:.2g}), "
        f"most at position {row}. The order: token embedding + position embedding, model.drop, every block of "
        "model.blocks in order with the causal mask, model.ln_f, then model.head")


def _check_shape(got, want, where):
    B, T, V = want.shape
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{where}: expected a tensor of logits (B, T, V) = {(B, T, V)}, got {type(got).__name__}")
    shape = tuple(got.shape)
    if shape == (B, T, V) and got.dtype != want.dtype:
        raise AssertionError(f"{where}: expected the model's dtype {want.dtype}, got {got.dtype}")
    if shape == (B, T, V):
        return
    hint = ""
    if got.dim() == 3 and shape[:2] == (B, T):
        hint = f": {shape[2]} values per position; V = {V} logits per position come from the head (C → V)"
    elif shape == (B, V):
        hint = ": only one position's logits; return every position's (a language model learns from all T)"
    elif shape == (B * T, V):
        hint = ": flattened; keep the batch and time axes apart"
    raise AssertionError(f"{where}: expected logits of shape (B, T, V) = {(B, T, V)}, got {shape}{hint}")


def check_gpt_forward(gpt_forward):
    """Your gpt_forward(model, idx) against model(idx)[0] on the trained char_gpt and two small random GPTs (one
    with dropout 0.2 in its config, one untied), all in eval mode, for (B, T) with T = 1 and T = block_size. The
    tolerance is 10 × the model's own float32 rounding (its float32 logits against a float64 copy's). While your
    function runs, GPT.forward (so model(idx) too), and GPT's other passes, are off: the forward must be yours."""
    with torch.random.fork_rng(devices=[]):  # an answer with dropout draws from the generator: give it back as it was
        _check_forward(gpt_forward)
    print("GPT forward: correct")


def _check_forward(gpt_forward):
    for name, model, idx in _forward_cases():
        B, T = idx.shape
        where = f"{name}, idx of shape (B, T) = {(B, T)} (block_size {model.config.block_size})"
        with torch.no_grad():
            want = model(idx)[0]  # (B, T, V)
            exact = copy.deepcopy(model).double()(idx)[0]
        tol = 10 * (want.double() - exact).abs().max().item() + 1e-6 * want.abs().max().item()
        got = _run_forward(gpt_forward, model, idx)
        _check_shape(got, want, where)
        if not _close(got, want, tol):
            _explain(gpt_forward, model, idx, got, want, tol, where)


# ---------------------------------------------------------------- build (§3.3): beam search
#
# The learner's beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha) runs on hand-made
# "models": a tree of next-token probabilities over a vocabulary of 7 (0 <bos>, 1 <eos>, 2-6 the letters
# a-e), every unlisted token with a tiny probability, so no log-probability is -inf. Each case states the
# hypothesis beam search must return and why; the score expected is computed from the tree. The check also
# watches every call of next_log_probs: at most beam_size prefixes, none twice, none extended past <eos>.

_BOS, _EOS, _V, _EPS = 0, 1, 7, 1e-6
_NAMES = ["<bos>", "<eos>", "a", "b", "c", "d", "e"]
# Greedy's trap: a is likelier than b (0.55 vs 0.45), but a's continuations spread (best: a b <eos>, 0.198)
# while b ends at once (b <eos>, 0.4275).
_TRAP = {(): {2: 0.55, 3: 0.45}, (2,): {3: 0.36, 4: 0.34, 1: 0.30}, (3,): {1: 0.95, 4: 0.05}}
# The length penalty: x <eos> (0.40, |Y| = 2) against b c c c <eos> (0.35, |Y| = 5) and b <eos> (0.25).
_LENGTH = {(): {2: 0.40, 3: 0.60}, (3,): {1: 0.25 / 0.6, 4: 0.35 / 0.6}, (3, 4): {4: 1.0}, (3, 4, 4): {4: 1.0},
           (3, 4, 4, 4): {1: 1.0}}
# A search error that beam 2 must make: c <eos> (0.25) is the best sequence, but c is only third at step 1.
_PRUNED = {(): {2: 0.40, 3: 0.35, 4: 0.25}, (2,): {5: 0.45, 6: 0.35, 1: 0.20}, (3,): {5: 0.42, 6: 0.33, 1: 0.25},
           (4,): {1: 1.0}}
# Nothing reaches <eos> within max_len = 4: the best unfinished hypothesis is the answer.
_ENDLESS = {(): {2: 0.60, 3: 0.40}, (2,): {4: 0.55, 5: 0.45}, (3,): {4: 0.90, 5: 0.10}, None: {4: 0.7, 5: 0.3}}
_BEAM_CASES = (  # (what it shows, tree, beam_size, max_len, alpha, the hypothesis after <bos>)
    ("beam_size=1 is greedy decoding", _TRAP, 1, 6, 0.6, [2, 3, 1]),
    ("greedy's trap: a wider beam finds b <eos>", _TRAP, 2, 6, 0.6, [3, 1]),
    ("no length penalty (alpha=0): the short hypothesis wins", _LENGTH, 2, 8, 0.0, [2, 1]),
    ("alpha=0.6: the penalty lets the long hypothesis win", _LENGTH, 2, 8, 0.6, [3, 4, 4, 4, 1]),
    ("beam 2 cannot see c, third at step 1", _PRUNED, 2, 6, 0.6, [2, 5, 1]),
    ("nothing ends within max_len=4", _ENDLESS, 2, 4, 0.6, [3, 4, 4]),
    ("beam 3, alpha=1", _LENGTH, 3, 8, 1.0, [3, 4, 4, 4, 1]),
)


def _tree_probs(tree, prefix):
    row = tree.get(tuple(prefix), tree.get(None, {1: 1.0}))
    return [(row.get(j, 0.0) + _EPS) / (1 + _V * _EPS) for j in range(_V)]


def _tree_log_prob(tree, seq):
    """log P(seq after <bos>) under the tree."""
    return sum(math.log(_tree_probs(tree, seq[:i])[tok]) for i, tok in enumerate(seq))


def _gnmt(n, alpha):
    return ((5 + n) / 6) ** alpha


def _spell(tokens):
    return " ".join(_NAMES[t] if 0 <= t < _V else str(t) for t in tokens)


class _TreeModel:
    """next_log_probs over a tree, which remembers what it was asked."""

    def __init__(self, tree, beam_size, where):
        self.tree, self.beam_size, self.where, self.calls = tree, beam_size, where, 0

    def __call__(self, prefixes):
        w = self.where
        assert isinstance(prefixes, torch.Tensor) and prefixes.dim() == 2 and not prefixes.is_floating_point(), (
            f"{w}: next_log_probs takes the prefixes as one integer tensor of shape (k, t), got "
            f"{tuple(prefixes.shape) if isinstance(prefixes, torch.Tensor) else type(prefixes).__name__}")
        self.calls += 1
        rows = prefixes.tolist()
        assert len(rows) <= self.beam_size, (
            f"{w}: next_log_probs was asked for {len(rows)} prefixes at once with beam_size={self.beam_size}: "
            "beam search keeps only the beam_size best hypotheses at each step (more is a wider search)")
        dup = next((r for r in rows if rows.count(r) > 1), None)
        assert dup is None, (
            f"{w}: the prefix {_spell(dup)} appears {rows.count(dup)} times in one call: each hypothesis must be "
            "in the beam once (a beam that starts as beam_size copies of <bos> fills itself with copies)")
        for r in rows:
            assert r and r[0] == _BOS, f"{w}: every prefix starts with <bos> (id {_BOS}); got {_spell(r)}"
            assert _EOS not in r, (
                f"{w}: the prefix {_spell(r)} was extended after <eos>: a hypothesis that ends with <eos> is "
                "finished; set it aside, do not extend it")
        return torch.tensor([_tree_probs(self.tree, r[1:]) for r in rows]).log()  # (k, V)


def _beam_case(beam_search, what, tree, beam_size, max_len, alpha, want):
    where = f"{what} (beam_size={beam_size}, max_len={max_len}, alpha={alpha})"
    model = _TreeModel(tree, beam_size, where)
    with refuse_calls(beam_search, (_beam_module(), "beam_search"), label="the beam search build"):
        out = beam_search(model, _BOS, _EOS, beam_size, max_len, alpha)
    assert isinstance(out, tuple) and len(out) == 2, (
        f"{where}: return a pair (tokens, score), got {type(out).__name__}")
    tokens, score = out
    tokens = tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens
    assert isinstance(tokens, list) and all(isinstance(t, int) for t in tokens), (
        f"{where}: tokens must be a list of ints (or a 1-D tensor), got {type(tokens).__name__}")
    score = float(score)
    assert model.calls <= max_len - 1, (
        f"{where}: next_log_probs was called {model.calls} times; a hypothesis of max_len={max_len} tokens needs "
        f"at most {max_len - 1} steps")
    assert tokens[:1] == [_BOS], f"{where}: the hypothesis starts with <bos>; got {_spell(tokens)}"
    seq = tokens[1:]
    assert 1 <= len(seq) <= max_len - 1, f"{where}: got {_spell(tokens)}, of {len(tokens)} tokens (max_len {max_len})"
    want_total = _tree_log_prob(tree, want)
    want_score = want_total / _gnmt(len(want), alpha)
    if seq != want:
        assert _EOS not in seq[:-1], f"{where}: got {_spell(tokens)}: nothing follows <eos>"
        got_total = _tree_log_prob(tree, seq)
        got_score = got_total / _gnmt(len(seq), alpha)
        msg = (f"{where}: expected <bos> {_spell(want)} (log-prob {want_total:.4f}, score {want_score:.4f}), "
               f"got {_spell(tokens)} (log-prob {got_total:.4f}, score {got_score:.4f} by the same rule)")
        if seq[-1] != _EOS and want[-1] == _EOS:
            msg += (": yours never ended, while a hypothesis that reached <eos> scores better. A finished hypothesis "
                    "must be kept (set aside) and compared with the others at the end, not dropped")
        elif alpha > 0 and abs(got_total - want_total) > 1e-9 and got_total > want_total and len(seq) < len(want):
            msg += (": yours has the larger log-prob but is shorter; that is the best without the length penalty. "
                    "Compare finished hypotheses by log P / lp(|Y|), lp(|Y|) = ((5 + |Y|) / 6) ** alpha")
        elif got_score > want_score:
            msg += (f": yours scores higher than a beam of {beam_size} can find here; beam search keeps only the "
                    "beam_size best prefixes (by summed log-prob) at each step, so it can miss the best sequence")
        else:
            msg += (": yours scores lower. Rank the extensions by the *summed* log-prob of the whole prefix, and "
                    "return the best finished hypothesis, not the last one found")
        raise AssertionError(msg)
    if abs(score - want_score) > 1e-4:
        n = len(seq)
        causes = ((want_total, "no length penalty: divide the summed log-prob by lp(|Y|)"),
                  (want_total / n**alpha if alpha else None,
                   "the plain |Y| ** alpha; the penalty asked for is GNMT's lp(|Y|) = ((5 + |Y|) / 6) ** alpha"),
                  (want_total / _gnmt(n + 1, alpha) if alpha else None,
                   "|Y| counting <bos>: |Y| counts the tokens after <bos>, <eos> included"),
                  (want_total / _gnmt(n - 1, alpha) if alpha and want[-1] == _EOS else None,
                   "|Y| without <eos>: |Y| counts the tokens after <bos>, <eos> included"))
        cause = next((c for v, c in causes if v is not None and abs(score - v) <= 1e-4),
                     "the score is the summed log-prob of all the hypothesis's tokens divided by lp(|Y|)")
        raise AssertionError(f"{where}: the right hypothesis {_spell(tokens)}, but score {score:.4f}; expected "
                             f"{want_score:.4f} = {want_total:.4f} / lp({n}): {cause}")


def _beam_module():
    import helpers.beam  # noqa: PLC0415 (the helper the answer must not call)

    return helpers.beam


def check_beam_search(beam_search):
    """Your beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha) on hand-made next-token trees
    (vocabulary <bos> <eos> a b c d e): greedy's trap, the length penalty with alpha 0, 0.6 and 1, a search error
    a beam of 2 must make, and a case in which nothing ends. Each call of next_log_probs must get at most
    beam_size distinct prefixes, none past <eos>. helpers.beam.beam_search is off while your function runs."""
    for case in _BEAM_CASES:
        _beam_case(beam_search, *case)
    print("beam search: correct")
