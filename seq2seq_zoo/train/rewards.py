"""Sequence-level rewards for self-critical training (SCST) and decode-based validation.

A reward spec is a score name or a weighted sum of them: ``"rouge1"`` (the default), ``"rougeL"``,
``"0.5*rouge1 + 0.5*rougeL"``; the names are the metric columns declared ``reward=True``
(``seq2seq_zoo.metrics.Column``). Each is scored 0-1 on the decoded text against the example's first
reference, computed on the same strings the evaluator scores (ROUGE: rouge-score F1, Porter stemming
as in evaluation). An optional repetition penalty subtracts ``penalty * repetition_ratio`` (the share of a
sequence's words that repeat an earlier word), because RL otherwise learns to "cheat" ROUGE-1 by
repeating words (the seed paper's Table 30).
"""
from __future__ import annotations

from typing import Sequence

from seq2seq_zoo.config.values import declared, parse_reward
from seq2seq_zoo.data.text import detokenize
from seq2seq_zoo.data.vocab import EOS_ID, PAD_ID
from seq2seq_zoo.metrics import repetition_ratio, sentence_scorer, words


def reward_problem(spec) -> str | None:
    """What is wrong with a reward spec (``train.scst.reward``), or None."""
    try:
        parse_reward(spec, declared("reward"))
    except ValueError as e:
        return str(e)
    return None

class RewardFunction:
    """Callable on (hypothesis strings, reference strings) -> list of rewards, one per pair. The names a
    reward may use are the metric columns declared ``reward=True``."""

    def __init__(self, spec: str = "rouge1", repetition_penalty: float = 0.0, stemmer: bool = True):
        self.weights = parse_reward(spec, declared("reward"))
        self.repetition_penalty = repetition_penalty
        self.score = sentence_scorer(list(self.weights), stemmer=stemmer)

    def __call__(self, hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
        s = self.score(hyps, refs)
        out = []
        for i, h in enumerate(hyps):
            v = sum(w * s[k][i] for k, w in self.weights.items())
            if self.repetition_penalty:
                v -= self.repetition_penalty * repetition_ratio(words(h))
            out.append(v)
        return out


def ids_to_text(vocab, ids: Sequence[int], oovs: Sequence[str]) -> str:
    """The decoded string the evaluator would score (copied OOV ids become their source words)."""
    return detokenize(vocab.decode(ids, list(oovs)))


def row_text(vocab, row: Sequence[int], oovs: Sequence[str]) -> str:
    """The text of a decoded row of ids, up to its first EOS or PAD."""
    ids = []
    for i in row:
        if i in (EOS_ID, PAD_ID):
            break
        ids.append(i)
    return ids_to_text(vocab, ids, oovs)
