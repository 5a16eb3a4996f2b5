"""The training losses of the models, in one place.

``token_losses`` is the definition: the label-smoothed NLL of a model's log-probabilities over the real
target tokens, loss = (1 - eps) NLL + eps mean_{w in V} (-log p(w)) (Szegedy et al. 2016; Vaswani et al.
2017, sec. 5.4). ``fused_token_losses`` (one output layer) and ``copy_losses`` (a copy model's mixture,
See et al. 2017 eq. 9) give the same values and gradients up to float rounding without the (B, T, V)
log-probabilities; their row-blocked kernels (``fast.kernels``) are an implementation detail.
``coverage_loss`` is See et al.'s auxiliary coverage loss (eq. 12).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq_zoo.data.vocab import PAD_ID, UNK_ID
from seq2seq_zoo.models.copying import NEG_BIG, upcast
from seq2seq_zoo.models.fast.kernels import logit_stats, smoothed_nll


def targets_for(log_probs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Targets the model can produce: extended ids beyond its output width become <unk>."""
    return target.masked_fill(target >= log_probs.size(-1), UNK_ID)


def token_losses(log_probs: torch.Tensor, target: torch.Tensor, label_smoothing: float = 0.0,
                 smooth_width: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Returns (sum of training loss, sum of NLL, number of target tokens), padding excluded.

    Label smoothing: loss = (1 - eps) * NLL + eps * mean_{w in V} (-log p(w)), the uniform part taken
    over the base vocabulary (``smooth_width`` columns), which is where every model puts mass.
    """
    target = targets_for(log_probs, target)
    mask = target != PAD_ID
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    nll = nll.masked_fill(~mask, 0.0)
    n = int(mask.sum())
    nll_sum = nll.sum()
    if label_smoothing > 0:
        w = smooth_width or log_probs.size(-1)
        uniform = -log_probs[..., :w].mean(-1).masked_fill(~mask, 0.0)
        loss_sum = (1 - label_smoothing) * nll_sum + label_smoothing * uniform.sum()
    else:
        loss_sum = nll_sum
    return loss_sum, nll_sum, n


def fused_token_losses(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                       label_smoothing: float = 0.0, smooth_width: int | None = None, pad_id: int = 0,
                       unk_id: int = 1) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``token_losses(log_softmax(h W^T + b), target, label_smoothing, smooth_width)``
    for an output layer ``nn.Linear(d, V)`` = (weight, bias), computed without materialising the
    (B, T, V) log-probabilities: padding rows are dropped before the output projection, and the softmax,
    loss and gradient are taken in cache-sized blocks (``fast.kernels.smoothed_nll``). Same values up to
    float rounding; returns (sum of training loss, sum of NLL, number of target tokens)."""
    V = weight.size(0)
    t = target.reshape(-1)
    t = t.masked_fill(t >= V, unk_id)          # extended ids the layer cannot produce -> <unk>
    keep = t != pad_id
    n = int(keep.sum())
    hf = h.reshape(-1, h.size(-1))
    if n < t.numel():
        idx = keep.nonzero().squeeze(1)
        hf, t = hf.index_select(0, idx), t.index_select(0, idx)
    if n == 0:
        zero = (hf.sum() * 0).float()
        return zero, zero.detach(), 0
    loss_sum, nll_sum = smoothed_nll(hf, weight, bias, t, label_smoothing, smooth_width or V)
    return loss_sum, nll_sum, n


def copy_losses(h: torch.Tensor, generator: nn.Linear, z: torch.Tensor, a: torch.Tensor, src_ext: torch.Tensor,
                n_oov: int, src_same: torch.Tensor, src_first: torch.Tensor, target: torch.Tensor,
                label_smoothing: float = 0.0, smooth_width: int | None = None):
    """``token_losses(copying.copy_mixture(log_softmax(generator(h)), z, a, ...), target, ...)`` without the
    (B, T, V + n_oov) log-probabilities: (sum of training loss, sum of NLL, target tokens).

    The loss reads the mixture at the target word and at the source words only; everywhere else
    log P(w) = log p_gen + z_w - lse. So the output layer gives, per real target row, its log-sum-exp
    and its logits at the target and the source words (``fast.kernels.logit_stats``, in row blocks), and
    the smoothing term's sum over the first ``width`` columns is width (log p_gen - lse) + sum_w z_w
    (h . sum_w W_w + sum_w b_w, from the weights) plus, at each source word (its first position), the
    mixture's excess over log p_gen P_vocab. h (B, T, d) is the generator's input, z (B, T) the p_gen
    logit, a (B, T, S) the copy attention, target (B, T) extended ids; ``source_words`` gives
    src_same / src_first. Same values and gradients as the unfused path up to float rounding."""
    V = generator.weight.size(0)
    width = smooth_width or V + n_oov
    target = target.masked_fill(target >= V + n_oov, 1)            # targets_for: -> <unk>
    keep = (target != PAD_ID).reshape(-1)
    n = int(keep.sum())
    B, T, S = a.shape
    if n == 0:
        zero = (h.sum() * 0).float() + (z.sum() * 0).float()
        return zero, zero.detach(), 0
    # everything but the output layer in fp32 (fp64 for fp64 models), outside any autocast
    no_autocast = torch.autocast(h.device.type, enabled=False)
    with no_autocast:
        rows = keep.nonzero().squeeze(1)
        copy = torch.bmm(a.to(src_same.dtype), src_same)             # copy mass of each position's word
        src = src_ext.unsqueeze(1).expand(B, T, S).reshape(B * T, S).index_select(0, rows)      # (N, S)
        first = src_first.unsqueeze(1).expand(B, T, S).reshape(B * T, S).index_select(0, rows)
        copy = copy.reshape(B * T, S).index_select(0, rows)
        y = target.reshape(-1).index_select(0, rows)                                             # (N,)
        zf = upcast(z).reshape(-1).index_select(0, rows)
        hf = h.reshape(B * T, -1).index_select(0, rows)
        ids = torch.cat([y.unsqueeze(1), src], 1)                                                # (N, 1 + S)
        in_vocab = ids < V
    # the output layer in the forward's precision (bf16 under autocast, as nn.Linear), statistics in fp32
    lse, picked = logit_stats(hf, generator.weight, generator.bias, ids.masked_fill(~in_vocab, 0))
    with no_autocast:
        return _copy_loss_terms(hf, generator, zf, lse, picked, in_vocab, copy, src, first, y, V, width,
                                label_smoothing, n)


def _copy_loss_terms(hf, generator, zf, lse, picked, in_vocab, copy, src, first, y, V, width, label_smoothing, n):
    """``copy_losses`` from the output layer's statistics on: the mixture at the target and source words."""
    log_gen, log_copy_gate = F.logsigmoid(zf), F.logsigmoid(-zf)
    gen = torch.where(in_vocab, log_gen.unsqueeze(1) + picked - lse.unsqueeze(1),
                      torch.full_like(picked, NEG_BIG))                                          # log p_gen P_vocab
    tiny = torch.finfo(gen.dtype).tiny
    copy = copy.to(gen.dtype)
    log_copy = torch.where(copy > 0, copy.clamp_min(tiny).log(), torch.full_like(copy, NEG_BIG))
    mixed = torch.logaddexp(gen[:, 1:], log_copy_gate.unsqueeze(1) + log_copy)                 # (N, S)
    at = (src == y.unsqueeze(1)) & first                                                         # y's first position
    log_p = torch.where(at.any(1), mixed.gather(1, at.to(torch.uint8).argmax(1, keepdim=True)).squeeze(1),
                        gen[:, 0])
    nll_sum = -log_p.sum()
    if label_smoothing <= 0:
        return nll_sum, nll_sum.detach(), n
    base = min(width, V)
    w = generator.weight[:base]
    col_sum = hf.to(gen.dtype) @ w.sum(0).to(gen.dtype)              # sum of the first ``base`` logits
    if generator.bias is not None:
        col_sum = col_sum + generator.bias[:base].sum().to(gen.dtype)
    total = base * (log_gen - lse) + col_sum + max(0, width - V) * NEG_BIG
    excess = torch.where(first & (src < width), mixed - gen[:, 1:], torch.zeros_like(mixed)).sum(1)
    uniform = -(total + excess) / width
    loss_sum = (1 - label_smoothing) * nll_sum + label_smoothing * uniform.sum()
    return loss_sum, nll_sum.detach(), n


def coverage_loss(a: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """See et al. (2017, eq. 12): mean over real target steps of sum_j min(a_tj, cov_tj), where
    cov_t = sum_{t'<t} a_t' (cov_1 = 0). a (B, T, S) attention; real (B, T) True at real target tokens."""
    cov = torch.cumsum(a, 1) - a                                    # sum over earlier steps only
    per_step = torch.minimum(a, cov).sum(-1)                        # (B, T)
    real = real.to(per_step.dtype)
    return (per_step * real).sum() / real.sum().clamp(min=1)
