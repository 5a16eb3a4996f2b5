"""Sequence-level rewards for self-critical training (SCST) and decode-based validation.

A reward spec is a metric name or a weighted sum of them: ``"rouge1"`` (the default), ``"rougeL"``,
``"0.5*rouge1 + 0.5*rougeL"``. Scores are rouge-score F1 (0-1, Porter stemming as in evaluation) of
the decoded text against the example's first reference, computed on the same strings the evaluator
scores. An optional repetition penalty subtracts ``penalty * repetition_ratio`` (the share of a
sequence's words that repeat an earlier word), because RL otherwise learns to "cheat" ROUGE-1 by
repeating words (the seed paper's Table 30).
"""
from __future__ import annotations

import re
from typing import Sequence

from seq2seq_zoo.data.text import detokenize
from seq2seq_zoo.metrics import _words, repetition_ratio

ROUGE_TYPES = ("rouge1", "rouge2", "rouge3", "rougeL")
_TERM = re.compile(r"^\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*\*\s*)?(\w+)\s*$")


def parse_reward(spec: str) -> dict[str, float]:
    """'0.5*rouge1 + 0.5*rougeL' -> {'rouge1': 0.5, 'rougeL': 0.5}. Raises ValueError on bad input."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward {spec!r} must be a metric name like \"rouge1\" or a sum like \"0.5*rouge1+0.5*rougeL\"")
    out: dict[str, float] = {}
    for term in spec.split("+"):
        m = _TERM.match(term)
        if not m or m.group(2) not in ROUGE_TYPES:
            raise ValueError(f"reward {spec!r}: cannot read {term.strip()!r}; use weights and names from "
                             f"{', '.join(ROUGE_TYPES)}, e.g. \"0.5*rouge1+0.5*rougeL\"")
        out[m.group(2)] = out.get(m.group(2), 0.0) + (float(m.group(1)) if m.group(1) else 1.0)
    return out


class RewardFunction:
    """Callable on (hypothesis strings, reference strings) -> list of rewards, one per pair."""

    def __init__(self, spec: str = "rouge1", repetition_penalty: float = 0.0, stemmer: bool = True):
        from rouge_score import rouge_scorer
        self.weights = parse_reward(spec)
        self.repetition_penalty = repetition_penalty
        self.scorer = rouge_scorer.RougeScorer(list(self.weights), use_stemmer=stemmer)

    def __call__(self, hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
        out = []
        for h, r in zip(hyps, refs):
            s = self.scorer.score(r, h)
            v = sum(w * s[k].fmeasure for k, w in self.weights.items())
            if self.repetition_penalty:
                v -= self.repetition_penalty * repetition_ratio(_words(h))
            out.append(v)
        return out


def ids_to_text(vocab, ids: Sequence[int], oovs: Sequence[str]) -> str:
    """The decoded string the evaluator would score (copied OOV ids become their source words)."""
    return detokenize(vocab.decode(ids, list(oovs)))
