"""The copy distribution of See et al. (2017, eq. 9), shared by ``pointer_generator`` and
``transformer_pointer``: P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{j: w_j = w} a_tj over the extended
vocabulary, taken in log space."""
from __future__ import annotations

import torch
import torch.nn.functional as F

NEG_BIG = -1e4   # log of "no mass": finite, so logaddexp and its gradient stay defined (exp(-1e4) = 0)


def upcast(x: torch.Tensor) -> torch.Tensor:
    """At least fp32 (bf16 under autocast -> fp32; fp64 stays fp64, for gradient checks)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def source_words(src_ext: torch.Tensor, dtype: torch.dtype = torch.float32):
    """Which source positions hold the same word, (B, S, S) in ``dtype`` (fp64 stays fp64, anything
    else fp32), and each word's first position (B, S): what ``copy_mixture``'s fast path needs."""
    same = src_ext.unsqueeze(2) == src_ext.unsqueeze(1)
    S = same.size(-1)
    earlier = torch.ones(S, S, dtype=torch.bool, device=same.device).tril(-1)
    return same.to(dtype if dtype == torch.float64 else torch.float32), ~(same & earlier).any(-1)


def copy_mixture(log_vocab: torch.Tensor, z: torch.Tensor, a: torch.Tensor, src_ext: torch.Tensor, n_oov: int,
                 src_same: torch.Tensor | None = None, src_first: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 9 in log space over the extended vocabulary: log P(w) = logaddexp(log p_gen + log P_vocab(w),
    log(1 - p_gen) + log sum_{j: w_j = w} a_j), p_gen = sigmoid(z). log_vocab (..., V) fp32+, z (...),
    a (..., S) the copy attention, src_ext (B, S) extended source ids; leading dims (B, T): T steps, or
    a source's hypotheses. P_vocab is zero on the n_oov extended columns: an OOV word can only be copied.

    With ``src_same`` / ``src_first`` (``source_words``; leading dims (B, T) only) the mixture is taken at
    the source positions (copy mass of position j's word = a @ same, (..., S)) and written into
    log p_gen P_vocab there, instead of scattering attention onto the full extended vocabulary and mixing
    every column. Each word is written from its first position (its repeats write the same value, without
    gradient). Columns the source does not hold keep log p_gen P_vocab exactly (the reference adds
    log(1 + (1 - p_gen) e^-1e4) there, which is 0 at any column with a finite log-prob)."""
    # without gradient (decoding) the (..., V + n_oov) result is written once and mixed in place: a beam step
    # of pointer_generator made three copies of it (the sum, the concatenation, the scatter)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (log_vocab, z, a))
    V = log_vocab.size(-1)
    if grad:
        gen = torch.cat([F.logsigmoid(z).unsqueeze(-1) + log_vocab,
                         log_vocab.new_full((*log_vocab.shape[:-1], n_oov), NEG_BIG)], -1)   # log p_gen P_vocab
    else:
        gen = log_vocab.new_empty((*log_vocab.shape[:-1], V + n_oov))
        torch.add(log_vocab, F.logsigmoid(z).unsqueeze(-1), out=gen[..., :V])
        gen[..., V:] = NEG_BIG
    tiny = torch.finfo(gen.dtype).tiny
    if src_same is not None:
        index = src_ext.unsqueeze(1).expand(*a.shape)                                      # (B, T, S)
        copy = torch.bmm(a.to(gen.dtype), src_same.to(gen.dtype))                          # copy mass per position
        log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
        mixed = torch.logaddexp(gen.gather(-1, index), F.logsigmoid(-z).unsqueeze(-1) + log_copy)
        if not grad:
            return gen.scatter_(-1, index, mixed)
        mixed = torch.where(src_first.unsqueeze(1), mixed, mixed.detach())
        return gen.scatter(-1, index, mixed)
    index = src_ext.view(src_ext.size(0), *([1] * (a.dim() - 2)), src_ext.size(1)).expand_as(a)
    copy = torch.zeros_like(gen).scatter_add(-1, index, a.to(gen.dtype))                   # attention on w_j
    log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
    return torch.logaddexp(gen, F.logsigmoid(-z).unsqueeze(-1) + log_copy)
