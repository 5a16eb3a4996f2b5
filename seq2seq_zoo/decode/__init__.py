"""One decoder for every model: greedy and batched beam search over ``encode`` / ``decode_step`` /
``reorder``. Beams of all examples advance together as one (B*K) batch; no Python loop runs over the
batch inside a step.

Length penalty (applied to the summed log-probability when ranking):
  gnmt: score / ((5 + len) / 6) ** alpha     (Wu et al. 2016)
  hf:   score / len ** alpha                 (Hugging Face ``length_penalty``)
  none: score
Repetition penalty theta (``repetition_penalty_style``), one rule for every model of a decode:
  power (default): p -> p^theta for a token already generated in the hypothesis, then renormalised
         (on the step's log-probs: log p * theta, log_softmax again). It needs only log-probs, so a copy
         model's mixture and a plain softmax model follow the very same rule.
  keskar (Keskar et al. 2019 as Hugging Face's ``repetition_penalty`` applies it): the logit of a token
         already generated is divided by theta if positive and multiplied by theta if negative, then the
         softmax is taken again. Models leave their raw step logits in the state (``state["logits"]``); a
         copy model's mixture has none, and its log-probs stand in for them (all negative: the ``power``
         rule), so under ``keskar`` copy and non-copy models follow different rules (tables say so).
  logprob: the log-prob of a generated token is multiplied by theta (p -> p^theta, not renormalised;
         the rule of the records made before the correctness fixes).
Never produced: <pad> and <bos> get -inf at every step of greedy, beam and sampled decoding, so an
output never holds them (they are not valid outputs, and a <pad> fed back would be read as padding).
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
from seq2seq_zoo.models.fast.kernels import packed_linear_weights

NEG = float("-inf")
NEVER = (PAD_ID, BOS_ID)   # ids no decoder may produce
REPETITION_RULES = ("power", "keskar", "logprob")


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


def penalise_repeats(lp: torch.Tensor | None, tokens: torch.Tensor, penalty: float, style: str = "power",
                     logits: torch.Tensor | None = None) -> torch.Tensor:
    """The repetition penalty on one step's log-probs ``lp`` (N, V) given the tokens (N, t) generated so
    far; ``logits``: the model's raw logits of the step (same width), used by ``keskar`` alone."""
    if style not in REPETITION_RULES:
        raise ValueError(f"unknown repetition_penalty_style {style!r}")
    if lp is not None and (penalty == 1.0 or tokens.size(1) == 0):
        return lp    # before the fp32 copy of the logits below: a (hypotheses x V) copy per step for nothing
    if style == "keskar" and logits is not None and (lp is None or logits.shape == lp.shape):
        z = logits.float()
    else:
        z, logits = (lp if lp is not None else torch.log_softmax(logits.float(), -1)), None
    if penalty == 1.0 or tokens.size(1) == 0:
        return lp if lp is not None else torch.log_softmax(z, -1)
    seen = torch.zeros_like(z, dtype=torch.bool).scatter_(1, tokens, True)
    seen[:, PAD_ID] = False
    if style == "logprob":
        return torch.where(seen, z * penalty, z)
    if style == "power" or logits is None:   # keskar without logits (a copy model): log p stands in, = power
        return torch.log_softmax(torch.where(seen, z * penalty, z), -1)
    return torch.log_softmax(torch.where(seen, torch.where(z > 0, z / penalty, z * penalty), z), -1)


def mask_never(lp: torch.Tensor) -> torch.Tensor:
    """<pad> and <bos> can never be produced: -inf in a step's log-probs (N, V), in place."""
    for i in NEVER:      # basic indexing: no index tensor copied to the device each step
        lp[:, i] = NEG
    return lp


def coverage_penalty(coverage: tuple[torch.Tensor, torch.Tensor] | None, beta: float) -> torch.Tensor | None:
    """beta * sum_j log(min(cov_j, 1)) per hypothesis over real source positions; ``coverage`` is
    (cov, mask) from the model's ``attention_coverage`` hook. None if beta is 0 or the model keeps none."""
    if not beta or coverage is None:
        return None
    cov, mask = coverage
    return beta * cov.float().clamp(min=1e-6, max=1.0).log().masked_fill(~mask, 0.0).sum(-1)


def _adjust(lp, tokens, step, cfg: DecodeConfig, logits=None):
    lp = penalise_repeats(lp, tokens, cfg.repetition_penalty, getattr(cfg, "repetition_penalty_style", "power"),
                          logits)
    lp = mask_never(lp)
    if step < cfg.min_len:
        lp[:, EOS_ID] = NEG
    return block_ngrams(lp, tokens, cfg.no_repeat_ngram)


def _step(model, state, prev):
    """One decoding step: fp32 log-probs, the new state, and the raw logits the model left in it (taken
    out, so ``reorder`` never moves them)."""
    lp, state = model.decode_step(state, prev)
    logits = state.pop("logits", None) if isinstance(state, dict) else None
    return lp.float(), state, logits


def rollout(model, batch, max_len: int, sample: bool = False, generator: torch.Generator | None = None,
            cfg: DecodeConfig | None = None):
    """One hypothesis per example, step by step through ``encode`` / ``decode_step``: the argmax
    (greedy) or a multinomial sample (temperature 1) at each step, <pad> and <bos> masked out of both
    (never valid outputs). ``cfg``: apply its ``min_len``, repetition penalty and n-gram
    blocking before choosing (greedy decoding for evaluation).

    Returns ids (B, T) with PAD after each sequence's EOS (EOS kept) and, when sampling, log p(y_t)
    (B, T) of the sampled tokens under the distribution sampled from (renormalised without <pad>/<bos>;
    0 after EOS), with gradient. The greedy decoder of ``generate`` and the self-critical objective's
    greedy baseline and samples all come from here."""
    state = model.encode(batch)
    B = batch.src.size(0)
    device = batch.src.device
    prev = torch.full((B,), BOS_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    never = torch.tensor(NEVER, device=device)
    ids, lps = [], []
    for step in range(max_len):
        lp, state, logits = _step(model, state, prev)
        if sample:
            lp = lp.index_fill(1, never, NEG).log_softmax(-1)
            tok = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
            lps.append(lp.gather(1, tok[:, None]).squeeze(1).masked_fill(done, 0.0))
        else:
            if cfg is not None:
                history = torch.stack(ids, 1) if ids else torch.empty((B, 0), dtype=torch.long, device=device)
                lp = _adjust(lp, history, step, cfg, logits)
            else:
                lp = lp.index_fill(1, never, NEG)
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
    beta = getattr(cfg, "coverage_penalty", 0.0)
    # finished hypotheses, per example, sorted by rank (best first); tokens without EOS, PAD-filled
    fin_rank = torch.full((B, K), NEG, device=device)
    fin_score = torch.full((B, K), NEG, device=device)
    fin_tok = torch.full((B, K, T), PAD_ID, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    live_rank = scores.view(B, K)
    first_k = torch.arange(2 * K, device=device) < K
    no_lp = cfg.length_penalty_style == "none" or cfg.length_penalty == 0   # a penalty of 1 at every length

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
        cp = coverage_penalty(model.attention_coverage(state), beta) if beta else None
        lp = _adjust(lp, tokens, step, cfg, logits)
        # Within one hypothesis' row the ranking score is lp plus constants (its score, length penalty and
        # coverage penalty), so the best 2K continuations overall are among each row's best 2K: select per
        # row first, then rank the (B, K*2K) candidates; nothing of size V is written after log_softmax.
        k = min(2 * K, lp.size(-1))
        row_lp, row_tok = lp.topk(k, dim=-1)                              # (B*K, k)
        cand = scores[:, None] + row_lp                                     # (B*K, k)
        # every candidate has length step + 1 (EOS counted), so one length penalty for the step
        rank = cand if no_lp else cand / length_penalty(torch.tensor(step + 1), cfg.length_penalty,
                                                        cfg.length_penalty_style)
        if cp is not None:
            rank = rank + cp[:, None]
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
