"""One decoder for every model: greedy and batched beam search over ``encode`` / ``decode_step`` /
``reorder``. Beams of all examples advance together as one (B*K) batch; no Python loop runs over the
batch inside a step.

Length penalty (applied to the summed log-probability when ranking):
  gnmt: score / ((5 + len) / 6) ** alpha     (Wu et al. 2016)
  hf:   score / len ** alpha                 (Hugging Face ``length_penalty``)
  none: score
Repetition penalty (Keskar et al. 2019, on log-probs): the log-prob of a token already generated in
the hypothesis is multiplied by ``repetition_penalty`` (> 1 lowers it, since log-probs are negative).
n-gram blocking: a token that would complete an n-gram already in the hypothesis gets -inf.
Coverage penalty (Wu et al. 2016, beam search only, for models whose ``attention_coverage`` hook returns
the summed attention and the source mask of a decoder state: the attention RNNs and the pointer-generator):
  cp = beta * sum_j log(min(cov_j, 1))   over real source positions (cov_j clamped at 1e-6 so cp is
  finite), added to the length-normalised score; a finished hypothesis keeps the cp it finished with.
"""
from __future__ import annotations

import torch

from seq2seq_zoo.config import DecodeConfig
from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_zoo.models.kernels import packed_linear_weights

NEG = float("-inf")


def length_penalty(length: torch.Tensor, alpha: float, style: str) -> torch.Tensor:
    length = length.float()
    if style == "none" or alpha == 0:
        return torch.ones_like(length)
    if style == "hf":
        return length ** alpha
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    raise ValueError(f"unknown length_penalty_style {style!r}")


def block_ngrams(lp: torch.Tensor, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """lp (N, V); tokens (N, t) generated so far. Forbid tokens that would repeat an n-gram."""
    t = tokens.size(1)
    if n <= 0 or t < n:
        return lp
    if n == 1:
        return lp.scatter(1, tokens, NEG)
    windows = tokens.unfold(1, n, 1)                     # (N, t-n+1, n)
    if windows.size(1) == 0:
        return lp
    last = tokens[:, t - (n - 1):]                       # (N, n-1)
    match = (windows[..., :-1] == last[:, None, :]).all(-1)   # (N, t-n+1)
    rows, cols = match.nonzero(as_tuple=True)
    if rows.numel():
        lp = lp.clone()
        lp[rows, windows[rows, cols, -1]] = NEG
    return lp


def penalise_repeats(lp: torch.Tensor, tokens: torch.Tensor, penalty: float) -> torch.Tensor:
    if penalty == 1.0 or tokens.size(1) == 0:
        return lp
    seen = torch.zeros_like(lp, dtype=torch.bool).scatter_(1, tokens, True)
    seen[:, PAD_ID] = False
    return torch.where(seen, lp * penalty if penalty > 0 else lp, lp)


def coverage_penalty(coverage: tuple[torch.Tensor, torch.Tensor] | None, beta: float) -> torch.Tensor | None:
    """beta * sum_j log(min(cov_j, 1)) per hypothesis over real source positions; ``coverage`` is
    (cov, mask) from the model's ``attention_coverage`` hook. None if beta is 0 or the model keeps none."""
    if not beta or coverage is None:
        return None
    cov, mask = coverage
    return beta * cov.float().clamp(min=1e-6, max=1.0).log().masked_fill(~mask, 0.0).sum(-1)


def _adjust(lp, tokens, step, cfg: DecodeConfig):
    if step < cfg.min_len:
        lp[:, EOS_ID] = NEG
    lp = penalise_repeats(lp, tokens, cfg.repetition_penalty)
    return block_ngrams(lp, tokens, cfg.no_repeat_ngram)


def rollout(model, batch, max_len: int, sample: bool = False, generator: torch.Generator | None = None,
            cfg: DecodeConfig | None = None):
    """One hypothesis per example, step by step through ``encode`` / ``decode_step``: the argmax
    (greedy) or a multinomial sample (temperature 1) at each step. ``cfg``: apply its ``min_len``,
    repetition penalty and n-gram blocking before choosing (greedy decoding for evaluation).

    Returns ids (B, T) with PAD after each sequence's EOS (EOS kept) and, when sampling, log p(y_t)
    (B, T) of the sampled tokens (0 after EOS), with gradient. The greedy decoder of ``generate`` and
    the self-critical objective's greedy baseline and samples all come from here."""
    state = model.encode(batch)
    B = batch.src.size(0)
    device = batch.src.device
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    ids, lps = [], []
    for step in range(max_len):
        lp, state = model.decode_step(state, prev)
        lp = lp.float()
        if sample:
            tok = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
            lps.append(lp.gather(1, tok[:, None]).squeeze(1).masked_fill(done, 0.0))
        else:
            if cfg is not None:
                history = torch.stack(ids, 1) if ids else torch.empty((B, 0), dtype=torch.long, device=device)
                lp = _adjust(lp, history, step, cfg)
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
    K = cfg.beam_size
    B = batch.src.size(0)
    device = batch.src.device
    state = model.encode(batch)
    flat = torch.arange(B, device=device).repeat_interleave(K)
    state = model.reorder(state, flat)
    scores = torch.full((B, K), NEG, device=device)
    scores[:, 0] = 0.0                                   # all beams start as the same empty hypothesis
    scores = scores.view(-1)
    tokens = torch.empty((B * K, 0), dtype=torch.long, device=device)
    finished = torch.zeros(B * K, dtype=torch.bool, device=device)
    lengths = torch.zeros(B * K, dtype=torch.long, device=device)
    prev = torch.full((B * K,), BOS_ID, dtype=torch.long, device=device)
    base = (torch.arange(B, device=device) * K).repeat_interleave(K)
    cpen = torch.zeros(B * K, device=device)            # coverage penalty of each hypothesis
    use_cov = False
    eos_only = torch.full((1, K), NEG, device=device)   # a finished row's candidates: EOS at 0, nothing else
    eos_only[0, 0] = 0.0
    scale_len = cfg.length_penalty_style != "none" and cfg.length_penalty != 0  # else the penalty is 1
    for step in range(cfg.max_len):
        lp, state = model.decode_step(state, prev)
        cp = coverage_penalty(model.attention_coverage(state), cfg.coverage_penalty) if cfg.coverage_penalty else None
        if cp is not None:
            cpen = torch.where(finished, cpen, cp)
            use_cov = True
        lp = _adjust(lp.float(), tokens, step, cfg)
        # Within one hypothesis' row the ranking score is lp plus constants (its score, length penalty and
        # coverage penalty), so the best K continuations overall are among each row's best K: select per
        # row first, then rank the (B, K*K) candidates; nothing of size V is written after log_softmax.
        k = min(K, lp.size(-1))
        row_lp, row_tok = lp.topk(k, dim=-1)                              # (B*K, k)
        # a finished hypothesis only extends with EOS at no cost: its score is frozen
        row_lp = torch.where(finished[:, None], eos_only[:, :k], row_lp)
        row_tok = row_tok.masked_fill(finished[:, None], EOS_ID)
        cand = scores[:, None] + row_lp                                     # (B*K, k)
        cand_len = torch.where(finished, lengths, torch.full_like(lengths, step + 1))
        rank = cand / length_penalty(cand_len, cfg.length_penalty, cfg.length_penalty_style)[:, None] if scale_len else cand
        if use_cov:
            rank = rank + cpen[:, None]
        top_rank, top_idx = rank.view(B, K * k).topk(K, dim=-1)
        origin = (top_idx // k).view(-1) + base                            # flat index of the parent beam
        tok = row_tok.view(B, K * k).gather(1, top_idx).view(-1)
        scores = cand.view(B, K * k).gather(1, top_idx).view(-1)
        tokens = torch.cat([tokens[origin], tok[:, None]], 1)
        was_finished = finished[origin]
        lengths = torch.where(was_finished, lengths[origin], torch.full_like(lengths, step + 1))
        finished = was_finished | (tok == EOS_ID)
        cpen = cpen[origin]
        state = model.reorder(state, origin)
        prev = tok
        if bool(finished.all()):
            break
    final = scores / length_penalty(torch.where(finished, lengths, torch.full_like(lengths, tokens.size(1))),
                                    cfg.length_penalty, cfg.length_penalty_style) + cpen
    final = final.masked_fill(~torch.isfinite(scores), NEG).view(B, K)
    best = final.argmax(-1) + torch.arange(B, device=device) * K
    out = [_strip(tokens[i].tolist()) for i in best.tolist()]
    if return_scores:
        return out, scores[best].tolist()
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
        with torch.no_grad(), packed_linear_weights(model, rows):
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
