"""Training objectives. ``ce``: token cross-entropy with optional label smoothing (Szegedy et al. 2016),
plus any auxiliary losses a model reports (e.g. coverage). Other objectives (SCST) register here too."""
from __future__ import annotations

import torch

from seq2seq_zoo.data.vocab import PAD_ID, UNK_ID
from seq2seq_zoo.registry import register_objective


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


@register_objective("ce")
class CrossEntropy:
    """Teacher-forced token cross-entropy (+ label smoothing) plus the model's auxiliary losses."""

    def __init__(self, label_smoothing: float = 0.0, **_):
        self.label_smoothing = label_smoothing

    def __call__(self, model, batch) -> tuple[torch.Tensor, dict[str, float]]:
        out = model(batch)
        loss_sum, nll_sum, n = token_losses(out.log_probs, batch.tgt_out, self.label_smoothing, model.vocab_size)
        loss = loss_sum / max(n, 1)
        stats = {"nll_sum": float(nll_sum.detach()), "tokens": n}
        for name, aux in out.aux_losses.items():
            loss = loss + aux
            stats[name] = float(aux)
        return loss, stats
