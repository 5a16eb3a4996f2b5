"""The share of generated word tokens that are <unk>."""
from __future__ import annotations

from seq2seq_zoo.metrics.base import Column
from seq2seq_zoo.metrics.repetition import words
from seq2seq_zoo.registry import register_metric


@register_metric("unk_ratio", order=30, columns=[
    Column("unk_ratio", "UNK ratio", per_example=True, higher_is_better=False, digits=4)])
def unk_ratio(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Share of generated word tokens that are <unk> (pooled over the split). Per example: that
    summary's share (0 for an empty one)."""
    tokens = [words(p) for p in predictions]
    if per_example is not None:
        per_example["unk_ratio"] = [w.count("<unk>") / len(w) if w else 0.0 for w in tokens]
    n = sum(len(w) for w in tokens)
    unk = sum(w.count("<unk>") for w in tokens)
    return ({"unk_ratio": unk / n if n else 0.0},
            {"definition": "number of <unk> tokens / number of word tokens over all predictions "
                           "(punctuation not counted)"})
