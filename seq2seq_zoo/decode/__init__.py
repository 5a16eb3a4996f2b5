"""One decoder for every model: greedy, sampled and batched beam search over ``encode`` / ``decode_step`` /
``reorder``. Beams of all examples advance together as one (B*K) batch; no Python loop runs over the
batch inside a step.

What a decoder may produce and how beam search ranks hypotheses is the chain of registered decoding rules
(``seq2seq_zoo.decode.rules``: repetition penalty, <pad>/<bos> masking, minimum length, n-gram blocking,
length and coverage penalties, and any rule a user file registers): every search here runs it.
"""
from __future__ import annotations

import torch

from seq2seq_zoo.config import DecodeConfig
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_zoo.decode.rules import (NEG, NEVER, REPETITION_RULES, Chain, Step, block_ngrams,  # noqa: F401
                                      coverage_penalty, length_penalty, mask_never, penalise_repeats)
from seq2seq_zoo.models.fast.kernels import packed_linear_weights
from seq2seq_zoo.precision import int8_linears


def is_int8(cfg: DecodeConfig) -> bool:
    """Whether ``cfg`` decodes with int8 linear layers (``decode.precision = "int8"``)."""
    return cfg.extra.get("precision", "auto") == "int8"


def _adjust(lp, tokens, step, cfg: DecodeConfig, logits=None):
    """A step's log-probs through the chain of ``cfg``'s active rules (the model not needed by those)."""
    return Chain(cfg).logprobs(lp, Step(tokens, step, logits))


def _step(model, state, prev):
    """One decoding step: fp32 log-probs, the new state, and the raw logits the model left in it (taken
    out, so ``reorder`` never moves them)."""
    lp, state = model.decode_step(state, prev)
    logits = state.pop("logits", None) if isinstance(state, dict) else None
    return lp.float(), state, logits


def rollout(model, batch, max_len: int, sample: bool = False, generator: torch.Generator | None = None,
            cfg: DecodeConfig | None = None):
    """One hypothesis per example, step by step through ``encode`` / ``decode_step``: the argmax
    (greedy) or a multinomial sample (temperature 1) at each step, of the log-probs through the decoding
    rules' chain: ``cfg``'s active rules (greedy decoding for evaluation), or with ``cfg`` None only
    <pad>/<bos> masking (never valid outputs).

    Returns ids (B, T) with PAD after each sequence's EOS (EOS kept) and, when sampling, log p(y_t)
    (B, T) of the sampled tokens under the distribution sampled from (renormalised without <pad>/<bos>;
    0 after EOS), with gradient. The greedy decoder of ``generate`` and the self-critical objective's
    greedy baseline and samples all come from here."""
    state = model.encode(batch)
    B = batch.src.size(0)
    device = batch.src.device
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    chain = Chain(cfg)
    ids, lps = [], []
    for step in range(max_len):
        lp, state, logits = _step(model, state, prev)
        history = torch.stack(ids, 1) if ids else torch.empty((B, 0), dtype=torch.long, device=device)
        lp = chain.logprobs(lp, Step(history, step, logits, model, state))
        if sample:
            lp = lp.log_softmax(-1)
            tok = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
            lps.append(lp.gather(1, tok[:, None]).squeeze(1).masked_fill(done, 0.0))
        else:
            tok = lp.argmax(-1)
        tok = tok.masked_fill(done, PAD_ID)           # nothing after EOS counts
        ids.append(tok)
        done = done | (tok == EOS_ID)
        prev = tok.masked_fill(tok == PAD_ID, EOS_ID)
        if bool(done.all()):
            break
    ids = torch.stack(ids, 1) if ids else torch.empty((B, 0), dtype=torch.long, device=device)
    return ids, (torch.stack(lps, 1) if sample else None)


@torch.no_grad()
def greedy(model, batch, cfg: DecodeConfig) -> list[list[int]]:
    ids, _ = rollout(model, batch, cfg.max_len, cfg=cfg)
    return [_strip(row) for row in ids.tolist()]


@torch.no_grad()
def beam_search(model, batch, cfg: DecodeConfig, return_scores: bool = False):
    """Batched beam search with a separate list of finished hypotheses per example (as Hugging Face,
    fairseq and OpenNMT keep them): each step ranks the 2K best continuations of the K live hypotheses;
    those ending in EOS among the first K join the example's finished list (its K best are kept), the
    first K that do not end become the live beams. An example is done (Hugging Face's default
    ``early_stopping=False`` rule) when its list holds K hypotheses and none of the live ones ranks above
    the worst of them at its current length; at ``max_len`` the live hypotheses of unfinished examples
    join the list. The best of the list is returned, so the result is never worse than any hypothesis
    that finished."""
    K = cfg.beam_size
    B = batch.src.size(0)
    T = cfg.max_len
    device = batch.src.device
    state = model.encode(batch)
    flat = torch.arange(B, device=device).repeat_interleave(K)
    state = model.reorder(state, flat)
    scores = torch.full((B, K), NEG, device=device)
    scores[:, 0] = 0.0                                   # all beams start as the same empty hypothesis
    scores = scores.view(-1)
    tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)
    prev = torch.full((B * K,), BOS_ID, dtype=torch.long, device=device)
    row0 = (torch.arange(B, device=device) * K)[:, None]             # flat index of each example's beam 0
    chain = Chain(cfg)
    # finished hypotheses, per example, sorted by rank (best first); tokens without EOS, PAD-filled
    fin_rank = torch.full((B, K), NEG, device=device)
    fin_score = torch.full((B, K), NEG, device=device)
    fin_tok = torch.full((B, K, T), PAD_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    live_rank = scores.view(B, K)
    first_k = torch.arange(2 * K, device=device) < K

    def add_finished(rank, score, toks):
        """Merge candidates (B, n) with their tokens (B, n, t) into the finished lists (rank -inf = skip)."""
        nonlocal fin_rank, fin_score, fin_tok
        toks = torch.nn.functional.pad(toks, (0, T - toks.size(-1)), value=PAD_ID)
        all_rank = torch.cat([fin_rank, rank], 1)
        fin_rank, keep = all_rank.topk(K, dim=-1)
        fin_score = torch.cat([fin_score, score], 1).gather(1, keep)
        fin_tok = torch.cat([fin_tok, toks], 1).gather(1, keep[..., None].expand(-1, -1, T))

    for step in range(T):
        lp, state, logits = _step(model, state, prev)
        at = Step(tokens, step, logits, model, state)
        lp = chain.logprobs(lp, at)
        # Within one hypothesis' row the ranking score is lp plus constants (its score, length penalty and
        # coverage penalty), so the best 2K continuations overall are among each row's best 2K: select per
        # row first, then rank the (B, K*2K) candidates; nothing of size V is written after log_softmax.
        k = min(2 * K, lp.size(-1))
        row_lp, row_tok = lp.topk(k, dim=-1)                              # (B*K, k)
        cand = scores[:, None] + row_lp                                     # (B*K, k)
        rank = chain.rank(cand, at) if chain.ranks else cand     # length and coverage penalties
        n = min(2 * K, K * k)
        top_rank, top_idx = rank.view(B, K * k).topk(n, dim=-1)            # (B, n), best first
        tok = row_tok.view(B, K * k).gather(1, top_idx)
        top_score = cand.view(B, K * k).gather(1, top_idx)
        origin = top_idx // k + row0                                        # flat index of the parent
        is_eos = tok == EOS_ID
        new_fin = is_eos & first_k[:n] & torch.isfinite(top_rank) & ~done[:, None]
        if bool(new_fin.any()):
            add_finished(top_rank.masked_fill(~new_fin, NEG), top_score, tokens[origin])
        # the live beams: the first K candidates that do not end (at most K of the 2K end: one per row)
        keep = torch.sort(is_eos.to(torch.int8), dim=1, stable=True).indices[:, :K]
        live_rank = top_rank.gather(1, keep)
        scores = top_score.gather(1, keep).view(-1)
        parent = origin.gather(1, keep).view(-1)
        prev = tok.gather(1, keep).view(-1)
        tokens = torch.cat([tokens[parent], prev[:, None]], 1)
        state = model.reorder(state, parent)
        full = torch.isfinite(fin_rank[:, -1])
        done |= ~torch.isfinite(live_rank[:, 0]) | (full & (fin_rank[:, -1] >= live_rank[:, 0]))
        if bool(done.all()):
            break
    if not bool(done.all()):   # max_len reached: unfinished examples' live hypotheses compete as they are
        add_finished(live_rank.masked_fill(done[:, None], NEG), scores.view(B, K), tokens.view(B, K, -1))
    out = [_strip(row) for row in fin_tok[:, 0].tolist()]
    if return_scores:
        return out, fin_score[:, 0].tolist()
    return out


def _strip(ids: list[int]) -> list[int]:
    out = []
    for i in ids:
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            out.append(i)
    return out


def generate(model, batch, cfg: DecodeConfig) -> list[list[int]]:
    """Token ids (extended ids for copied words) for every example, without BOS/EOS."""
    was = model.training
    model.eval()
    rows = batch.src.size(0) * (1 if cfg.method == "greedy" else cfg.beam_size)
    try:
        with torch.no_grad(), int8_linears(model, is_int8(cfg)), packed_linear_weights(model, rows):
            if cfg.method == "greedy":
                return greedy(model, batch, cfg)
            return beam_search(model, batch, cfg)
    finally:
        model.train(was)


def sequence_logprob(model, batch, ids: list[list[int]]) -> torch.Tensor:
    """Sum of log-probs of given continuations (+EOS) under the model, via the step interface."""
    state = model.encode(batch)
    B = batch.src.size(0)
    T = max(len(x) for x in ids) + 1
    device = batch.src.device
    tgt = torch.full((B, T), PAD_ID, dtype=torch.long, device=device)
    for i, x in enumerate(ids):
        tgt[i, :len(x)] = torch.tensor(x, dtype=torch.long, device=device)
        tgt[i, len(x)] = EOS_ID
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    total = torch.zeros(B, device=device)
    for t in range(T):
        lp, state = model.decode_step(state, prev)
        tok = tgt[:, t]
        total += torch.where(tok != PAD_ID, lp.float().gather(1, tok.clamp(min=0)[:, None]).squeeze(1), torch.zeros_like(total))
        prev = tok.masked_fill(tok == PAD_ID, EOS_ID)
    return total
