"""Live training logs: a per-update ``train_log.jsonl`` in every run, and TensorBoard event files when
the ``tensorboard`` package is installed (``pip install seq2seq-zoo[tensorboard]``).

Both go to ``<run>/logs/`` (git-ignored: they grow with the number of updates; the committed record keeps
the per-epoch curves). The jsonl file has one object per line:

    {"kind": "train", "step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "time"}
    {"kind": "val", "step", "epoch", "val_loss", "val_<metric>" (with train.val_metric), "time"}
    {"kind": "sample", "step", "id", "prediction", "reference"}   (greedy decodes of validation examples)

so curves can be redrawn without TensorBoard. The event files are written with
``torch.utils.tensorboard.SummaryWriter``: it ships with torch, so the only extra is the small
``tensorboard`` package that it writes through (tensorboardX would be a second writer for the same
format). Tags: ``train/loss``, ``train/lr``, ``train/grad_norm``, ``train/tokens_per_s``,
``val/loss``, ``val/<metric>`` and the text ``samples``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from seq2seq_zoo.utils.io import dumps_json

LOG_DIR = "logs"
LOG_FILE = "train_log.jsonl"
TB_DIR = "tensorboard"


def tensorboard_writer(path: Path, purge_step: int | None = None):
    """A ``SummaryWriter`` on ``path``, or None (with the reason) when the tensorboard package is absent."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None, ("TensorBoard logging off: the tensorboard package is not installed "
                      "(pip install 'seq2seq-zoo[tensorboard]'); train_log.jsonl is written anyway")
    return SummaryWriter(str(path), purge_step=purge_step), None


class RunLogger:
    """Writes the live logs of one run into ``run_dir/logs/``. ``step``: the update the run resumes from
    (TensorBoard drops events after it, so a resumed run does not draw twice)."""

    def __init__(self, run_dir: Path, step: int = 0, tensorboard: bool = True, log=print):
        self.dir = Path(run_dir) / LOG_DIR
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / LOG_FILE
        # a run that starts from update 0 (a new run, ``--force``, or one killed before its first
        # checkpoint) starts a new log; a resumed one appends after the rows it already wrote
        self._f = open(self.path, "a" if step else "w", encoding="utf-8")
        self.t0 = time.time()
        self.tb = None
        if tensorboard:
            self.tb, why = tensorboard_writer(self.dir / TB_DIR, purge_step=step or None)
            if why:
                log(why)

    def _write(self, row: dict) -> None:
        self._f.write(dumps_json(row, indent=None, ensure_ascii=True) + "\n")
        self._f.flush()

    def update(self, step: int, epoch: int, loss: float, lr: float, grad_norm: float | None,
               tokens_per_s: float) -> None:
        self._write({"kind": "train", "step": step, "epoch": epoch, "loss": round(loss, 6), "lr": lr,
                     "grad_norm": None if grad_norm is None else round(grad_norm, 6),
                     "tokens_per_s": round(tokens_per_s, 1), "time": round(time.time() - self.t0, 3)})
        if self.tb is not None:
            self.tb.add_scalar("train/loss", loss, step)
            self.tb.add_scalar("train/lr", lr, step)
            if grad_norm is not None:
                self.tb.add_scalar("train/grad_norm", grad_norm, step)
            self.tb.add_scalar("train/tokens_per_s", tokens_per_s, step)

    def validation(self, point: dict) -> None:
        """One validation: ``{"step", "epoch", "val_loss", "val_<metric>"...}``."""
        self._write({"kind": "val", **point, "time": round(time.time() - self.t0, 3)})
        if self.tb is not None:
            for k, v in point.items():
                if k.startswith("val_") and v is not None:
                    self.tb.add_scalar(f"val/{k[4:]}", v, point["step"])
            self.tb.flush()

    def samples(self, step: int, rows: list[dict]) -> None:
        """Greedy decodes of a few validation examples: ``[{"id", "prediction", "reference"}]``."""
        for r in rows:
            self._write({"kind": "sample", "step": step, **r})
        if self.tb is not None and rows:
            text = "\n\n".join(f"**{r['id']}**  \nprediction: {r['prediction']}  \nreference: {r['reference']}"
                               for r in rows)
            self.tb.add_text("samples", text, step)

    def close(self) -> None:
        self._f.close()
        if self.tb is not None:
            self.tb.close()


def read_log(run_dir: Path, kind: str | None = None) -> list[dict]:
    """The rows of ``run_dir/logs/train_log.jsonl`` (of one ``kind``); a resumed run's rows after its last
    checkpoint appear twice, the later ones win when plotted by step. A last line without its newline is
    the row being written when the process was killed: it is left out. Any other line that is not a JSON
    object (cut, edited, non-finite numbers) raises ``DamagedFile`` naming ``file:line``."""
    from seq2seq_zoo.utils.io import read_jsonl
    path = Path(run_dir) / LOG_DIR / LOG_FILE
    if not path.is_file():
        return []
    raw = path.read_bytes()
    whole = raw[: raw.rfind(b"\n") + 1]   # without a cut last line
    rows = read_jsonl(path, "training log", fix="delete the file (the next `zoo run --force` writes it anew)",
                      data=whole)
    return [r for r in rows if kind is None or r.get("kind") == kind]
