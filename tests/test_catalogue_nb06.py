"""Check catalogue of notebook 06: each check against correct answers written differently and wrong ones.

The checks are the very functions the notebook imports (helpers/checks/nb06.py); the references
are the notebook's collapsed solutions, copied here.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checks import nb06
from helpers.generation import KVCache, filter_logits, split_heads
from tests.catalogue import Catalogue, Wrong, assert_catalogue

# ---------------------------------------------------------------- build (§2): the GPT forward pass


def reference_gpt_forward(model, idx):
    T = idx.shape[1]
    x = model.tok_emb(idx) + model.pos_emb.embedding.weight[:T]  # (B, T, C) + (T, C): positions 0 … T − 1
    x = model.drop(x)  # off in eval mode
    for block in model.blocks:  # pre-LN EncoderLayers
        x = block(x, is_causal=True)  # the causal mask: position t sees 0 … t
    return model.head(model.ln_f(x))  # (B, T, C) -> (B, T, V)


def forward_reduce_mask(model, idx):  # the position module, an explicit boolean mask, functools.reduce, F.linear
    T = idx.shape[1]
    keep = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    x = model.drop(model.pos_emb(model.tok_emb(idx)))
    x = functools.reduce(lambda h, blk: blk(h, mask=keep), model.blocks, x)
    return F.linear(model.ln_f(x), model.head.weight)


def forward_by_sublayer(model, idx):  # each block by hand from its sub-layers, one sequence at a time
    rows = []
    for seq in idx:  # (T,)
        T = seq.shape[0]
        x = model.tok_emb.weight[seq] + model.pos_emb.embedding(torch.arange(T))  # (T, C)
        x = x[None]  # (1, T, C)
        for blk in model.blocks:
            h = blk.norm1(x)
            x = x + blk.dropout1(blk.self_attn(h, h, h, is_causal=True))
            x = x + blk.dropout2(blk.ff(blk.norm2(x)))
        rows.append((model.ln_f(x) @ model.head.weight.T)[0])  # (T, V)
    return torch.stack(rows)  # (B, T, V)


def make_forward(causal=True, offset=0, positions=True, ln_f=True, head="head", dropout=False, scale=False,
                 softmax=False):
    """The reference with one mistake switched on."""

    def gpt_forward(model, idx):
        T = idx.shape[1]
        x = model.tok_emb(idx) * (math.sqrt(model.config.d_model) if scale else 1.0)
        if positions:
            x = x + model.pos_emb.embedding.weight[offset : offset + T]
        x = F.dropout(x, model.config.dropout) if dropout else model.drop(x)
        for block in model.blocks:
            x = block(x, is_causal=causal)
        h = model.ln_f(x) if ln_f else x
        if head == "head":
            out = model.head(h)
        elif head == "tied":
            out = h @ model.tok_emb.weight.T
        else:
            out = h
        return out.softmax(-1) if softmax else out

    return gpt_forward


def calls_model(model, idx):
    return model(idx)[0]


def last_only(model, idx):
    return reference_gpt_forward(model, idx)[:, -1]


def log_probs(model, idx):
    return reference_gpt_forward(model, idx).log_softmax(-1)


def in_place_idx(model, idx):  # builds the positions in idx's own storage
    x = model.tok_emb(idx)
    pos = idx[0]
    pos.copy_(torch.arange(idx.shape[1]))
    x = model.drop(x + model.pos_emb.embedding(pos))
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.ln_f(x))


forward = Catalogue(
    check=nb06.check_gpt_forward,
    reference=reference_gpt_forward,
    correct=[forward_reduce_mask, forward_by_sublayer],
    wrong=[
        Wrong(make_forward(causal=False), "causal mask", "blocks run without the causal mask"),
        Wrong(make_forward(positions=False), "position", "no position embeddings"),
        Wrong(make_forward(offset=1), ("offset", "position"), "positions 1 … T"),
        Wrong(make_forward(ln_f=False), "LayerNorm", "final LayerNorm forgotten"),
        Wrong(make_forward(head="tied"), ("untied", "model.head"), "the tie written by hand: wrong on an untied model"),
        Wrong(make_forward(head=None), ("head", "V = "), "hidden states returned, no head"),
        Wrong(make_forward(dropout=True), "dropout", "F.dropout applied in eval mode"),
        Wrong(make_forward(scale=True), "√C", "token embedding × √C as in the encoder-decoder"),
        Wrong(make_forward(softmax=True), ("probabilities", "softmax"), "softmax applied"),
        Wrong(log_probs, "log_softmax", "log-probabilities returned"),
        Wrong(last_only, ("only one position", "shape"), "last position only"),
        Wrong(calls_model, "your answer calls", "calls model(idx)"),
        Wrong(in_place_idx, "in place", "changes idx in place"),
    ],
)

# ---------------------------------------------------------------- exercise 1


def reference_predict_tied_loss(V, a, sigma, repeat):
    log_sum = math.log(math.exp(a) + (V - 1) * math.exp(sigma**2 / 2))  # E[log Σ e^z] ≈ log E[Σ e^z]
    return log_sum - repeat * a  # the target's logit is a on a repeat, 0 on average otherwise


def two_cases(V, a, sigma, repeat):  # the loss on a repeat and on a non-repeat, weighted
    norm = math.log(math.exp(a) + (V - 1) * math.exp(sigma * sigma / 2))
    return repeat * (norm - a) + (1 - repeat) * (norm - 0.0)


def monte_carlo(V, a, sigma, repeat):  # E[log Σ e^z] by sampling the other logits
    g = torch.Generator().manual_seed(0)
    z = torch.randn(20_000, V - 1, generator=g, dtype=torch.float64) * sigma
    lse = torch.logsumexp(torch.cat([torch.full((20_000, 1), a, dtype=torch.float64), z], 1), 1).mean().item()
    return lse - repeat * a


ex1 = Catalogue(
    check=nb06.check_exercise_1,
    reference=reference_predict_tied_loss,
    correct=[two_cases, monte_carlo],
    wrong=[
        Wrong(lambda V, a, sigma, repeat: math.log(V) + sigma**2 / 2 - repeat * a, "copy token", "untied sum, e^a left out"),
        Wrong(lambda V, a, sigma, repeat: math.log(math.exp(a) + V * math.exp(sigma**2 / 2)) - repeat * a,
              ("V − 1", "copy token"), "V others instead of V − 1"),
        Wrong(lambda V, a, sigma, repeat: math.log(math.exp(a) + (V - 1) * math.exp(sigma**2 / 2)) + repeat * a,
              "repeat", "+r·a"),
        Wrong(lambda V, a, sigma, repeat: math.log(math.exp(a) + (V - 1) * math.exp(sigma**2 / 2)),
              "repeat", "no −r·a"),
        Wrong(lambda V, a, sigma, repeat: math.log(math.exp(a) + V - 1) - repeat * a, "e^{σ²/2}", "no e^{σ²/2} term"),
        Wrong(lambda V, a, sigma, repeat: torch.tensor(reference_predict_tied_loss(V, a, sigma, repeat)),
              "float", "returns a tensor"),
    ],
)

# ---------------------------------------------------------------- exercise 2


def make_cached(causal_prompt=True, see_self=True, reset_pos=False, ln_f=True):
    """The notebook's reference, with one mistake switched on at a time."""

    def cached_generate(model, ids, n_new):
        H, L = model.config.n_heads, len(model.blocks)
        K, Vs = [None] * L, [None] * L
        new, start = ids, 0
        for _ in range(n_new):
            t = new.shape[1]
            s0 = 0 if reset_pos else start
            x = model.tok_emb(new) + model.pos_emb.embedding.weight[s0 : s0 + t]  # (B, t, C)
            for i, blk in enumerate(model.blocks):
                att, h = blk.self_attn, blk.norm1(x)
                q, k, v = (split_heads(p(h), H) for p in (att.q_proj, att.k_proj, att.v_proj))  # (B, H, t, hs)
                if see_self or start == 0:
                    K[i] = k if K[i] is None else torch.cat([K[i], k], 2)
                    Vs[i] = v if Vs[i] is None else torch.cat([Vs[i], v], 2)
                    a = F.scaled_dot_product_attention(q, K[i], Vs[i], is_causal=start == 0 and causal_prompt)
                else:  # wrong: attend to the past only, then append
                    a = F.scaled_dot_product_attention(q, K[i], Vs[i])
                    K[i], Vs[i] = torch.cat([K[i], k], 2), torch.cat([Vs[i], v], 2)
                x = x + att.out_proj(a.transpose(1, 2).flatten(2))  # (B, t, C)
                x = x + blk.ff(blk.norm2(x))
            last = x[:, -1]
            nxt = model.head(model.ln_f(last) if ln_f else last).argmax(-1, keepdim=True)  # (B, 1)
            ids, new, start = torch.cat([ids, nxt], 1), nxt, start + t
        return ids

    return cached_generate


reference_cached_generate = make_cached()


def token_by_token(model, ids, n_new):  # the prompt one token at a time, softmax by hand, lists of tensors
    H = model.config.n_heads
    keys = [[] for _ in model.blocks]
    vals = [[] for _ in model.blocks]
    out, pos = ids, 0
    feed = [ids[:, j : j + 1] for j in range(ids.shape[1])]
    for _ in range(n_new):
        for tok in feed:
            x = model.tok_emb(tok) + model.pos_emb.embedding.weight[pos]  # (B, 1, C)
            for i, blk in enumerate(model.blocks):
                att, h = blk.self_attn, blk.norm1(x)
                q = split_heads(att.q_proj(h), H)  # (B, H, 1, hs)
                keys[i].append(split_heads(att.k_proj(h), H))
                vals[i].append(split_heads(att.v_proj(h), H))
                Kc, Vc = torch.cat(keys[i], 2), torch.cat(vals[i], 2)  # (B, H, P, hs)
                w = torch.softmax(q @ Kc.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)  # (B, H, 1, P)
                x = x + att.out_proj((w @ Vc).transpose(1, 2).reshape(x.shape))
                x = x + blk.ff(blk.norm2(x))
            pos += 1
        nxt = model.head(model.ln_f(x[:, -1])).argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], 1)
        feed = [nxt]
    return out


def with_kvcache(model, ids, n_new):  # the helpers' preallocated KVCache as storage, a causal mask by hand
    c = model.config
    B, T = ids.shape
    cache = KVCache(len(model.blocks), B, c.n_heads, c.block_size, c.d_model // c.n_heads)
    new = ids
    for _ in range(n_new):
        t, P = new.shape[1], cache.length
        x = model.tok_emb(new) + model.pos_emb.embedding.weight[P : P + t]
        mask = torch.ones(t, P + t, dtype=torch.bool).tril(diagonal=P)  # (t, P + t)
        for i, blk in enumerate(model.blocks):
            att, h = blk.self_attn, blk.norm1(x)
            q = split_heads(att.q_proj(h), c.n_heads)
            k, v = cache.append(i, split_heads(att.k_proj(h), c.n_heads), split_heads(att.v_proj(h), c.n_heads))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            x = x + att.out_proj(a.transpose(1, 2).reshape(B, t, -1))
            x = x + blk.ff(blk.norm2(x))
        cache.advance(t)
        nxt = model.head(model.ln_f(x[:, -1])).argmax(-1, keepdim=True)
        ids, new = torch.cat([ids, nxt], 1), nxt
    return ids


def no_cache(model, ids, n_new):
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids)[0][:, -1].argmax(-1, keepdim=True)], 1)
    return ids


def calls_generate(model, ids, n_new):
    return model.generate(ids, n_new, top_k=1)


def calls_forward_cached(model, ids, n_new):
    cache = model.new_cache(batch=ids.shape[0])
    logits = model.forward_cached(ids, cache)
    for _ in range(n_new):
        nxt = logits.argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
        logits = model.forward_cached(nxt, cache)
    return ids


ex2 = Catalogue(
    check=nb06.check_exercise_2,
    reference=reference_cached_generate,
    correct=[token_by_token, with_kvcache],
    wrong=[
        Wrong(make_cached(causal_prompt=False), ("causal", "prompt"), "prompt pass without the causal mask"),
        Wrong(make_cached(see_self=False), "itself", "new token appended after attending"),
        Wrong(make_cached(reset_pos=True), "position", "positions restart at 0"),
        Wrong(make_cached(ln_f=False), "ln_f", "final LayerNorm forgotten"),
        Wrong(no_cache, "processed", "no cache: every step runs the whole sequence"),
        Wrong(calls_generate, "your answer calls", "calls model.generate"),
        Wrong(calls_forward_cached, "your answer calls", "calls model.forward_cached"),
    ],
)

# ---------------------------------------------------------------- exercise 5


def make_long(base, newest_only=False, window=0):
    def long_cached_generate(model, ids, n_new):
        bs = model.config.block_size - window
        inside = min(n_new, bs - ids.shape[1] + 1)
        ids = base(model, ids, inside)
        for _ in range(n_new - inside):
            ctx = ids[:, -1:] if newest_only else ids[:, -bs:]
            ids = torch.cat([ids, base(model, ctx, 1)[:, -1:]], 1)
        return ids

    return long_cached_generate


reference_long_cached_generate = make_long(reference_cached_generate)


def cropped_no_cache(model, ids, n_new):
    for _ in range(n_new):
        ids = torch.cat([ids, model(ids[:, -model.config.block_size :])[0][:, -1].argmax(-1, keepdim=True)], 1)
    return ids


ex5 = Catalogue(
    check=nb06.check_exercise_5,
    reference=reference_long_cached_generate,
    correct=[make_long(token_by_token), make_long(with_kvcache)],
    wrong=[
        Wrong(make_long(make_cached(causal_prompt=False)), ("causal", "prompt"), "non-causal rebuild"),
        Wrong(make_long(make_cached(see_self=False)), "itself", "new token cannot see itself"),
        Wrong(make_long(reference_cached_generate, newest_only=True), ("slide", "processed"), "after the slide, only the newest token"),
        Wrong(make_long(reference_cached_generate, window=1), "processed", "window of block_size − 1"),
        Wrong(cropped_no_cache, "processed", "no cache at all"),
    ],
)

# ---------------------------------------------------------------- exercise 3


def reference_top_p_filter(logits, p):
    probs = logits.softmax(-1)  # (B, V)
    ranked = probs.sort(-1, descending=True).values  # (B, V), most likely first
    above = ranked.cumsum(-1) - ranked  # mass ranked above each token
    last = ranked.masked_fill(above >= p, float("inf")).amin(-1, keepdim=True)  # (B, 1): the least likely kept
    return logits.masked_fill(probs < last, float("-inf"))  # ties with the last kept stay


def top_p_loop(logits, p):  # per row in Python, float64
    out = logits.clone()
    for b in range(logits.shape[0]):
        probs = logits[b].double().softmax(-1).tolist()
        order = sorted(range(len(probs)), key=lambda i: -probs[i])
        mass, cut = 0.0, None
        for i in order:
            if mass >= p:
                break
            mass += probs[i]
            cut = probs[i]
        for i, q in enumerate(probs):
            if q < cut - 1e-12:
                out[b, i] = float("-inf")
    return out


def top_p_threshold(logits, p):  # vectorised: for each token, the mass of strictly more likely tokens
    probs = logits.softmax(-1)  # (B, V)
    above = (probs[:, None, :] * (probs[:, None, :] > probs[:, :, None])).sum(-1)  # (B, V)
    return torch.where(above < p, logits, torch.full_like(logits, float("-inf")))


def _sorted_mask(logits, p, rule):
    probs, order = logits.softmax(-1).sort(-1, descending=True)
    return order, rule(probs)


def hf_style(logits, p):  # drops a token once the mass up to and including it passes p
    order, drop = _sorted_mask(logits, p, lambda r: r.cumsum(-1) > p)
    return logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))


def no_unsort(logits, p):  # the mask is made in sorted order and applied in vocabulary order
    _, drop = _sorted_mask(logits, p, lambda r: r.cumsum(-1) - r >= p)
    return logits.masked_fill(drop, float("-inf"))


def unsorted_cumsum(logits, p):  # cumsum over the vocabulary order
    probs = logits.softmax(-1)
    return logits.masked_fill(probs.cumsum(-1) - probs >= p, float("-inf"))


def cuts_ties(logits, p):  # keeps exactly the sorted prefix: a tie is cut where the sort put it
    order, drop = _sorted_mask(logits, p, lambda r: r.cumsum(-1) - r >= p)
    return logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))


def calls_filter_logits(logits, p):
    return logits.masked_fill(~torch.isfinite(filter_logits(logits, top_p=p)), float("-inf"))


def in_place(logits, p):
    return logits.masked_fill_(~torch.isfinite(reference_top_p_filter(logits, p)), float("-inf"))


ex3 = Catalogue(
    check=nb06.check_exercise_3,
    reference=reference_top_p_filter,
    correct=[top_p_loop, top_p_threshold],
    wrong=[
        Wrong(hf_style, "most likely token always stays", "HF-style shift, the first token dropped"),
        Wrong(no_unsort, "vocabulary order", "forgot to un-sort the mask"),
        Wrong(unsorted_cumsum, ("most likely", "vocabulary order"), "cumsum over unsorted probabilities"),
        Wrong(cuts_ties, "tie", "a tie at the boundary cut"),
        Wrong(calls_filter_logits, "your answer calls", "calls the helpers' filter_logits"),
        Wrong(in_place, "in place", "masked_fill_ on the input"),
    ],
)

# ---------------------------------------------------------------- exercise 4


def reference_min_p_filter(logits, min_p):
    top = logits.max(dim=-1, keepdim=True).values  # (B, 1): the most likely token's logit
    # p_i >= min_p * p_max  <=>  z_i - z_max >= log(min_p): softmax's normaliser cancels
    return torch.where(logits - top >= math.log(min_p), logits, -torch.inf)


def min_p_probabilities(logits, min_p):  # in probability space, as the definition reads
    probs = logits.softmax(-1)  # (B, V)
    return logits.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), float("-inf"))  # (B, V)


def min_p_loop(logits, min_p):
    out = logits.clone()
    for b, row in enumerate(logits.double()):
        probs = torch.softmax(row, 0)
        for i in range(len(row)):
            if probs[i] < min_p * probs.max():
                out[b, i] = float("-inf")
    return out


ex4 = Catalogue(
    check=nb06.check_exercise_4,
    reference=reference_min_p_filter,
    correct=[min_p_probabilities, min_p_loop],
    wrong=[
        Wrong(lambda logits, min_p: logits.masked_fill(logits.softmax(-1) < min_p, float("-inf")),
              "absolute", "absolute threshold"),
        Wrong(lambda logits, min_p: logits.masked_fill(logits < min_p * logits.amax(-1, keepdim=True), float("-inf")),
              ("logit", "constant"), "min_p × the max logit"),
        Wrong(lambda logits, min_p: logits.masked_fill(logits.softmax(-1) < min_p * logits.softmax(-1).max(),
                                                       float("-inf")), "largest", "the global max over all rows"),
        Wrong(lambda logits, min_p: logits.masked_fill_(~torch.isfinite(reference_min_p_filter(logits, min_p)),
                                                         float("-inf")), "in place", "masked_fill_ on the input"),
    ],
)

# ---------------------------------------------------------------- build (§3.3): beam search


def reference_beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    def lp(n):  # GNMT's length penalty
        return ((5 + n) / 6) ** alpha

    live, finished = [([bos_id], 0.0)], []  # (tokens, summed log-prob)
    for _ in range(max_len - 1):
        logp = next_log_probs(torch.tensor([seq for seq, _ in live]))  # (k, t) -> (k, V)
        total = torch.tensor([s for _, s in live])[:, None] + logp.double()  # (k, V): each prefix's sum + the next
        V, top = logp.shape[1], total.flatten().topk(min(beam_size, total.numel()))
        parents, live = live, []
        for score, i in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            seq = parents[i // V][0] + [i % V]
            (finished if i % V == eos_id else live).append((seq, score))  # a finished one leaves the beam
        if not live:
            break
    best = max(finished or live, key=lambda h: h[1] / lp(len(h[0]) - 1))
    return best[0], best[1] / lp(len(best[0]) - 1)


def beam_keep_k_live(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    """Hugging Face's way: rank 2k candidates; an <eos> among the first k is finished; k live ones go on."""
    seqs, scores, finished = torch.tensor([[bos_id]]), torch.zeros(1, dtype=torch.float64), []
    for _ in range(max_len - 1):
        total = scores[:, None] + next_log_probs(seqs).double()  # (k, V)
        V = total.shape[1]
        vals, idx = total.flatten().topk(min(2 * beam_size, total.numel()))
        keep_rows, keep_scores = [], []
        for rank, (v, i) in enumerate(zip(vals.tolist(), idx.tolist(), strict=True)):
            row = torch.cat([seqs[i // V], torch.tensor([i % V])])
            if i % V == eos_id:
                if rank < beam_size:
                    finished.append((row.tolist(), v / ((5 + len(row) - 1) / 6) ** alpha))
            elif len(keep_rows) < beam_size:
                keep_rows.append(row)
                keep_scores.append(v)
        seqs, scores = torch.stack(keep_rows), torch.tensor(keep_scores, dtype=torch.float64)
    if not finished:
        finished = [(r.tolist(), v / ((5 + len(r) - 1) / 6) ** alpha) for r, v in zip(seqs, scores.tolist(), strict=True)]
    return max(finished, key=lambda h: h[1])


def beam_probabilities(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
    """Products of probabilities in float64 and heapq, the length penalty applied at the end."""
    import heapq

    beam, done = [(1.0, (bos_id,))], []
    for _ in range(max_len - 1):
        probs = next_log_probs(torch.tensor([list(s) for _, s in beam])).double().exp()  # (k, V)
        cands = [(p * q, s + (j,)) for (p, s), row in zip(beam, probs.tolist(), strict=True) for j, q in enumerate(row)]
        best = heapq.nlargest(beam_size, cands)
        done += [c for c in best if c[1][-1] == eos_id]
        beam = [c for c in best if c[1][-1] != eos_id]
        if not beam:
            break
    p, s = max(done or beam, key=lambda c: math.log(c[0]) / ((5 + len(c[1]) - 1) / 6) ** alpha)
    return torch.tensor(s), torch.tensor(math.log(p) / ((5 + len(s) - 1) / 6) ** alpha)


def make_beam(penalty="gnmt", count_bos=False, copies=False, extend_finished=False, drop_finished=False,
              last_finished=False, summed=True, prune=True):
    """A beam search with one mistake switched on."""

    def lp(n):
        n = n + 1 if count_bos else n
        return {"gnmt": ((5 + n) / 6) ** alpha_[0], "plain": n ** alpha_[0], "none": 1.0}[penalty]

    alpha_ = [0.0]

    def beam_search(next_log_probs, bos_id, eos_id, beam_size, max_len, alpha):
        alpha_[0] = alpha
        live = [([bos_id], 0.0)] * (beam_size if copies else 1)
        finished = []
        for _ in range(max_len - 1):
            logp = next_log_probs(torch.tensor([seq for seq, _ in live])).double()
            V = logp.shape[1]
            cands = [(seq + [j], (s if summed else 0.0) + logp[r, j].item())
                     for r, (seq, s) in enumerate(live) for j in range(V)]
            if extend_finished:
                cands = [c for c in cands if c[0][-2] != eos_id or c[0][-1] == eos_id]
            if drop_finished:  # <eos> never taken: only live hypotheses compete
                cands = [c for c in cands if c[0][-1] != eos_id]
            cands.sort(key=lambda c: -c[1])
            top = cands[:beam_size] if prune else cands
            live = []
            for seq, s in top:
                if seq[-1] == eos_id and not extend_finished:
                    finished.append((seq, s))
                else:
                    live.append((seq, s))
            if not live:
                break
        pool = finished or live
        if extend_finished:
            pool = [(seq[: seq.index(eos_id) + 1] if eos_id in seq else seq, s) for seq, s in live]
        best = pool[-1] if last_finished else max(pool, key=lambda h: h[1] / lp(len(h[0]) - 1))
        return best[0], best[1] / lp(len(best[0]) - 1)

    return beam_search


beam = Catalogue(
    check=nb06.check_beam_search,
    reference=reference_beam_search,
    correct=[beam_keep_k_live, beam_probabilities, make_beam()],
    wrong=[
        Wrong(make_beam(penalty="none"), "length penalty", "no length penalty"),
        Wrong(make_beam(penalty="plain"), "GNMT", "the plain |Y| ** alpha"),
        Wrong(make_beam(count_bos=True), "<bos>", "|Y| counts <bos>"),
        Wrong(make_beam(summed=False), "summed", "ranked by the last token's log-prob, not summed"),
        Wrong(make_beam(copies=True), "copies", "beam_size copies of <bos>: not deduplicated"),
        Wrong(make_beam(extend_finished=True), "<eos>", "finished hypotheses extended"),
        Wrong(make_beam(drop_finished=True), "finished", "finished hypotheses dropped"),
        Wrong(make_beam(last_finished=True), "best", "returns the last hypothesis found, not the best"),
        Wrong(make_beam(prune=False), "beam_size", "no pruning: an exhaustive search"),
        Wrong(lambda f, b, e, k, n, a: __import__("helpers.beam").beam.beam_search(f, b, e, k, n, a), "calls",
              "calls helpers.beam.beam_search"),
    ],
)

CATALOGUES = {"gpt forward": forward, "beam search": beam, "exercise 1": ex1, "exercise 2": ex2, "exercise 3": ex3, "exercise 4": ex4, "exercise 5": ex5}


@pytest.mark.parametrize("name", list(CATALOGUES))
def test_catalogue(name):
    assert_catalogue(CATALOGUES[name])
