"""Mean prediction and reference length in words (every evaluation reports it)."""
from __future__ import annotations

import numpy as np

from seq2seq_zoo.metrics.base import Column
from seq2seq_zoo.registry import register_metric


@register_metric("length", order=90, columns=[
    Column("pred_len", "len", per_example=True, higher_is_better=False, digits=1),
    Column("ref_len", "reference length", higher_is_better=False, table=False)])
def length(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Mean length in words of predictions and (first) references."""
    pl = [len(p.split()) for p in predictions]
    if per_example is not None:
        per_example["pred_len"] = [float(x) for x in pl]
    rl = [len(r[0].split()) for r in references]
    return ({"pred_len": float(np.mean(pl)) if pl else 0.0, "ref_len": float(np.mean(rl)) if rl else 0.0},
            {"unit": "whitespace-separated words"})
