"""How much a summary repeats itself: the share of its word tokens that repeat an earlier one, with and
without stop-words, and the same for the first reference."""
from __future__ import annotations

import numpy as np

from seq2seq_zoo.metrics.base import Column
from seq2seq_zoo.registry import register_metric

# a small English stop-word list (nltk's corpus needs a download; this one ships with the suite)
STOP_WORDS = frozenset("""a an the and or but if then so of to in on at by for with from as into about over after
before between through during without within is are was were be been being am do does did doing have has had
having will would shall should can could may might must i you he she it we they me him her us them my your his
its our their mine yours hers ours theirs this that these those there here what which who whom whose when where
why how all any both each few more most other some such no nor not only own same than too very just also s t
's n't 'll 're 've 'm 'd up down out off again further once""".split())


def words(text: str) -> list[str]:
    """The word tokens of ``text`` (the suite's tokenizer, lowercased; punctuation left out, <unk> kept)."""
    from seq2seq_zoo.data.text import TextConfig, tokenize
    return [t for t in tokenize(text, TextConfig(lowercase=True)) if any(c.isalnum() for c in t) or t == "<unk>"]


def repetition_ratio(tokens: list[str]) -> float:
    """(tokens - distinct tokens) / tokens: the share of a summary's tokens that repeat an earlier one."""
    return (len(tokens) - len(set(tokens))) / len(tokens) if tokens else 0.0


@register_metric("repetition", order=40, columns=[
    Column("repetition", "rep.", per_example=True, higher_is_better=False, digits=4),
    Column("repetition_content", "rep. (no stop-words)", higher_is_better=False, digits=4),
    *(Column(k, k, higher_is_better=False, table=False) for k in ("ref_repetition", "ref_repetition_content"))])
def repetition(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Repetition ratio of predictions (and of first references), with and without stop-words."""
    if per_example is not None:
        per_example["repetition"] = [repetition_ratio(words(p)) for p in predictions]
    def mean(texts, keep):
        vals = [repetition_ratio([w for w in words(t) if keep(w)]) for t in texts]
        return float(np.mean(vals)) if vals else 0.0
    content = lambda w: w not in STOP_WORDS  # noqa: E731
    refs = [r[0] for r in references]
    return ({"repetition": mean(predictions, lambda w: True), "repetition_content": mean(predictions, content),
             "ref_repetition": mean(refs, lambda w: True), "ref_repetition_content": mean(refs, content)},
            {"definition": "per summary (word tokens - distinct word tokens) / word tokens, averaged over "
                           "summaries; punctuation not counted; *_content: after removing "
                           f"{len(STOP_WORDS)} English stop-words; ref_*: the same on the first reference"})
