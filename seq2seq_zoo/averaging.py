"""Checkpoint averaging (as fairseq's ``average_checkpoints.py`` and OpenNMT's ``average_models``): the
element-wise mean of the weights of the last N epochs' checkpoints.

With ``train.average_last = N`` the loop keeps the weights of the last N epochs
(``checkpoints/epochNNN.pt``, weights only) and the run decodes with their mean, written to
``checkpoints/averaged.pt``; ``zoo average RUN --last N`` does the same for a finished run whose epoch
checkpoints were kept. Averaging helps most when the last epochs sit around a minimum without settling
(a constant or slowly decaying learning rate, noisy validation loss); after early stopping or with a
fully decayed schedule it changes little.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.utils import load_checkpoint

AVERAGED = "averaged.pt"
_EPOCH = re.compile(r"^epoch(\d+)\.pt$")


def epoch_checkpoints(ckpt_dir: Path) -> list[Path]:
    """The kept per-epoch checkpoints of a run, oldest first."""
    found = [(int(m.group(1)), p) for p in Path(ckpt_dir).glob("epoch*.pt") if (m := _EPOCH.match(p.name))]
    return [p for _, p in sorted(found)]


def keep_epoch(ckpt_dir: Path, model: torch.nn.Module, epoch: int, keep: int) -> Path:
    """Save ``model``'s weights as ``epochNNN.pt`` (1-based ``epoch``) and delete all but the last ``keep``."""
    from seq2seq_zoo.utils import atomic_torch_save
    path = Path(ckpt_dir) / f"epoch{epoch:03d}.pt"
    atomic_torch_save({"model": {k: v.detach().cpu() for k, v in model.state_dict().items()}, "epoch": epoch}, path)
    for old in epoch_checkpoints(ckpt_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def average_state_dicts(states: list[dict]) -> dict:
    """The element-wise mean of floating-point tensors (accumulated in float64, returned in each tensor's
    dtype); other tensors (counters, integer buffers) are taken from the last state."""
    if not states:
        raise ValueError("nothing to average")
    keys = list(states[-1])
    for s in states:
        if list(s) != keys:
            raise UserError("the checkpoints to average hold different parameters (not of one run)")
    out = {}
    for k in keys:
        t = states[-1][k]
        if torch.is_floating_point(t):
            out[k] = (sum(s[k].double() for s in states) / len(states)).to(t.dtype)
        else:
            out[k] = t.clone()
    return out


def average_run(run_dir: Path, last: int, log=print) -> Path:
    """Average the last ``last`` epoch checkpoints of a run into ``checkpoints/averaged.pt``."""
    ck = Path(run_dir) / "checkpoints"
    kept = epoch_checkpoints(ck)
    if len(kept) < last:
        raise UserError(f"{ck}: {len(kept)} epoch checkpoint(s) kept, {last} asked for; a run keeps them only with "
                        f"train.average_last = N (N >= {last}) in its experiment file: retrain it with that setting")
    use = kept[-last:]
    states = [load_checkpoint(p)["model"] for p in use]
    path = ck / AVERAGED
    from seq2seq_zoo.utils import atomic_torch_save
    atomic_torch_save({"model": average_state_dicts(states), "averaged": [p.name for p in use]}, path)
    log(f"averaged {', '.join(p.name for p in use)} into {path}")
    return path
