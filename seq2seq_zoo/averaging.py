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
MAX_LAST = 1000   # ``--last``: more epoch checkpoints than any run keeps
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


def average_state_dicts(states: list[dict], names: list[str] | None = None) -> dict:
    """The element-wise mean of floating-point tensors (accumulated in float64, returned in each tensor's
    dtype); other tensors (counters, integer buffers) are taken from the last state. States that do not
    hold the same parameters with the same shapes and dtypes raise ``UserError`` naming the first that
    differs (``names``: the files, for the message), before anything is added up."""
    if not states:
        raise ValueError("nothing to average")
    names = names or [f"state {i + 1}" for i in range(len(states))]
    for s, name in zip(states, names):
        if not isinstance(s, dict) or not all(isinstance(v, torch.Tensor) for v in s.values()):
            raise UserError(f"{name}: its 'model' entry is not a set of weights; it is not a checkpoint of a run")
    keys = list(states[-1])
    for s, name in zip(states, names):
        if list(s) != keys:
            odd = sorted(set(s) ^ set(keys))[:2]
            raise UserError(f"{name} and {names[-1]} hold different parameters ({', '.join(odd) or 'their order'}): "
                            "the checkpoints to average are not of one run")
        for k in keys:
            a, b = s[k], states[-1][k]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise UserError(f"{name} and {names[-1]} differ in {k} ({tuple(a.shape)} {a.dtype} vs "
                                f"{tuple(b.shape)} {b.dtype}): the checkpoints to average are not of one model")
    out = {}
    for k in keys:
        t = states[-1][k]
        if torch.is_floating_point(t):
            out[k] = (sum(s[k].double() for s in states) / len(states)).to(t.dtype)
        else:
            out[k] = t.clone()
    return out


def average_run(run_dir: Path, last: int, log=print, force: bool = False) -> Path:
    """Average the last ``last`` epoch checkpoints of a run into ``checkpoints/averaged.pt``. An
    ``averaged.pt`` already there that holds the mean of other checkpoints (the weights a run trained with
    ``train.average_last`` was decoded and scored with) is replaced only with ``force``; the same mean is
    left as it is."""
    from seq2seq_zoo.names import inside
    if not isinstance(last, int) or isinstance(last, bool) or not 1 <= last <= MAX_LAST:
        raise UserError(f"--last {last!r}: expected a whole number of checkpoints from 1 to {MAX_LAST}")
    ck = inside(Path(run_dir), "checkpoints")
    kept = epoch_checkpoints(ck)
    if len(kept) < last:
        raise UserError(f"{ck}: {len(kept)} epoch checkpoint(s) kept, {last} asked for; a run keeps them only with "
                        f"train.average_last = N (N >= {last}) in its experiment file: retrain it with that setting")
    use = kept[-last:]
    path = inside(ck, AVERAGED)
    if path.is_file():
        old = load_checkpoint(path).get("averaged")
        if old == [p.name for p in use] and not force:
            log(f"{path} already holds the mean of {', '.join(old)}; kept (--force writes it again)")
            return path
        if not force:
            was = f"the mean of {', '.join(map(str, old))}" if isinstance(old, list) else "weights of unknown origin"
            raise UserError(f"{path}: already holds {was} (the weights a run with train.average_last decodes and is "
                            f"scored with); averaging {', '.join(p.name for p in use)} would replace it: pass --force "
                            "to replace it, or keep a copy first")
    states = [load_checkpoint(p)["model"] for p in use]
    from seq2seq_zoo.utils import atomic_torch_save
    atomic_torch_save({"model": average_state_dicts(states, [str(p) for p in use]),
                       "averaged": [p.name for p in use]}, path)
    log(f"averaged {', '.join(p.name for p in use)} into {path}")
    return path
