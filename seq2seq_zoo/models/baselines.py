"""Extractive baselines: models that copy units (dialogue turns, sentences or words) of the source and
have nothing to train. They go through the same runner, records, predictions, metrics and tables as a
trained model; the runner sees ``trainable = False`` and skips the loop.

lead      the first k units (k chosen on the validation split when given as a list: LEAD rows)
longest   the k longest units, in source order
oracle    a greedy extractive oracle against the (first) reference: an upper bound for extraction,
          never a system (it reads the reference), labelled as such in every table

Adding another baseline is one file: subclass ``ExtractiveBaseline`` and implement ``select``.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from seq2seq_zoo.data.text import lines
from seq2seq_zoo.models.base import Seq2Seq
from seq2seq_zoo.registry import register_model

UNITS = ("auto", "turn", "sentence", "word")
_SENT = re.compile(r"(?<=[.!?])\s+")


def split_units(text: str, unit: str) -> list[str]:
    """The source as a list of units. ``turn``: non-empty lines (a dialogue turn per line, speaker tag
    kept); ``sentence``: sentences (split after . ! ? followed by white space, within each line);
    ``word``: white-space separated words; ``auto``: turns when the source has at least two non-empty
    lines, else sentences."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    turns = lines(text)
    if unit == "auto":
        unit = "turn" if len(turns) >= 2 else "sentence"
    if unit == "turn":
        return turns
    if unit == "word":
        return text.split()
    return [s for ln in turns for s in _SENT.split(ln) if s.strip()]


def _source(e) -> str:
    """The raw source text of an encoded example (``source_text``) or a read one (``source``)."""
    text = getattr(e, "source_text", None)
    return e.source if text is None else text


def _unit_name(unit: str, k: int) -> str:
    name = {"auto": "turn(s) or sentence(s)", "turn": "turn", "sentence": "sentence", "word": "word"}[unit]
    return name + ("s" if k != 1 and unit != "auto" else "")


def _check_k(k) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"option k: expected a positive integer, got {k!r}")


class ExtractiveBaseline(Seq2Seq):
    """A model with nothing to train: ``extract`` turns examples (anything with ``source_text`` or
    ``source``, and ``references``) into summaries by selecting source units. ``tune`` may choose an option on the
    validation split (it sees references there; never call it with the test split).

    It is a ``Seq2Seq`` (an ``nn.Module`` without parameters) because every registered model is built,
    checked, moved and counted alike: the experiment file's meta-device build, ``build_model``'s
    contract checks, the runner's ``.to(device)`` and ``count_parameters`` (0 in the record's params),
    ``zoo params``. What it uses of the contract are the hooks of a model with nothing to train
    (``trainable = False``, ``extract``, ``tune``, ``describe``, ``upper_bound``, ``deterministic``);
    ``forward`` and ``encode`` only say it has no decoder."""

    trainable = False      # the interface's flag: the runner skips training and checkpoints
    upper_bound = False    # True: reads the reference (an oracle), labelled so in every table
    deterministic = True   # the same summaries whatever the seed

    def __init__(self, unit: str = "auto", k: int = 3):
        super().__init__()
        if unit not in UNITS:
            raise ValueError(f"option unit: expected one of {', '.join(UNITS)}, got {unit!r}")
        _check_k(k)
        self.unit, self.k = unit, k

    def select(self, units: list[str], reference: str) -> list[int]:  # pragma: no cover - abstract
        """Indices of the chosen units (any order; the summary keeps source order)."""
        raise NotImplementedError

    def summary(self, source: str, reference: str = "") -> str:
        units = split_units(source, self.unit)
        return " ".join(units[i] for i in sorted(set(self.select(units, reference))))

    def extract(self, examples: Sequence[Any]) -> list[str]:
        return [self.summary(_source(e), e.references[0] if e.references else "") for e in examples]

    def describe(self) -> str:
        return f"{type(self).__name__.lower()}: {self.k} {_unit_name(self.unit, self.k)}"

    def forward(self, batch, need_attention: bool = False):
        raise TypeError(f"{type(self).__name__} is an extractive baseline: it has no decoder to teacher-force; "
                        "use extract()")

    def encode(self, batch):
        raise TypeError(f"{type(self).__name__} is an extractive baseline: it does not generate; use extract()")


@register_model("lead")
class Lead(ExtractiveBaseline):
    """The first k units of the source. ``choose_k`` (e.g. [1, 2, 3]): k is chosen once by ``tune``
    among these, by ROUGE-1 F1 on the validation split (the LEAD row of a comparison table); ``k`` is
    then only the value before tuning."""

    def __init__(self, unit: str = "auto", k: int = 3, choose_k: list[int] | None = None):
        super().__init__(unit, k)
        if choose_k is not None:
            if not isinstance(choose_k, list) or not choose_k:
                raise ValueError(f"option choose_k: expected a non-empty list of positive integers, got {choose_k!r}")
            for x in choose_k:
                _check_k(x)
        self.choose_k = choose_k

    def select(self, units: list[str], reference: str) -> list[int]:
        return list(range(min(self.k, len(units))))

    def describe(self) -> str:
        text = f"lead: the first {self.k} {_unit_name(self.unit, self.k)}"
        if self.choose_k:
            ks = self.choose_k
            grid = f"{ks[0]}-{ks[-1]}" if len(ks) > 2 and ks == list(range(ks[0], ks[-1] + 1)) else ", ".join(map(str, ks))
            text += f" (k chosen from {grid} by ROUGE-1 F1 on the validation split)"
        return text

    def tune(self, examples: Sequence[Any]) -> dict[str, Any]:
        if not self.choose_k:
            return {"k": self.k}
        from seq2seq_zoo.metrics import rouge
        if not examples:
            raise ValueError("lead with choose_k needs a non-empty validation split to choose k on")
        refs = [e.references for e in examples]
        by_k = {}
        for k in self.choose_k:
            self.k = k
            by_k[k] = rouge(self.extract(examples), refs)[0]["rouge1"]
        self.k = max(self.choose_k, key=lambda x: (by_k[x], -x))  # ties: the shorter lead
        return {"k": self.k, "chosen_by": "ROUGE-1 F1 on the validation split",
                "validation_rouge1": {str(k): v for k, v in by_k.items()}}


@register_model("longest")
class Longest(ExtractiveBaseline):
    """The k longest units (in words; ties: the earlier one), kept in source order."""

    def describe(self) -> str:
        return f"longest: the {self.k} longest {_unit_name(self.unit, self.k)}, in source order"

    def select(self, units: list[str], reference: str) -> list[int]:
        order = sorted(range(len(units)), key=lambda i: (-len(units[i].split()), i))
        return order[: self.k]


@register_model("oracle")
class Oracle(ExtractiveBaseline):
    """Greedy extractive oracle (Nallapati et al. 2017's labelling rule): add, one at a time, the unit
    that most raises ROUGE-1 F1 + ROUGE-2 F1 against the first reference; stop when no unit raises it
    or ``k`` units are chosen. It reads the reference: an upper bound for extraction, not a system.

    The n-gram overlap is counted here on rouge-score's own tokens (its tokenizer and Porter stemmer),
    because scoring every candidate set through ``RougeScorer`` re-tokenises the whole selection each
    time; ``rouge_f`` gives the same F1 as rouge-score (tested)."""

    upper_bound = True

    def __init__(self, unit: str = "auto", k: int = 5, stemmer: bool = True):
        super().__init__(unit, k)
        self.stemmer = stemmer

    def _tokens(self, text: str) -> list[str]:
        from rouge_score import tokenize
        from nltk.stem import porter
        if not hasattr(self, "_stem"):
            self._stem = porter.PorterStemmer() if self.stemmer else None
        return tokenize.tokenize(text, self._stem)

    def select(self, units: list[str], reference: str) -> list[int]:
        ref = self._tokens(reference)
        ref_ng = (ngrams(ref, 1), ngrams(ref, 2))
        toks = [self._tokens(u) for u in units]
        chosen: list[int] = []
        best = 0.0
        while len(chosen) < self.k:
            pick, pick_score = None, best
            for i in range(len(units)):
                if i in chosen:
                    continue
                seq = [t for j in sorted(chosen + [i]) for t in toks[j]]
                s = rouge_f(seq, ref_ng[0], 1) + rouge_f(seq, ref_ng[1], 2)
                if s > pick_score + 1e-12:
                    pick, pick_score = i, s
            if pick is None:
                break
            chosen.append(pick)
            best = pick_score
        return chosen

    def describe(self) -> str:
        return (f"oracle: greedy, at most {self.k} {_unit_name(self.unit, self.k)} maximising ROUGE-1 + ROUGE-2 F1 "
                "against the first reference (an upper bound for extraction: it reads the reference)")


def ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(zip(*(tokens[i:] for i in range(n))))


def rouge_f(tokens: list[str], ref_counts: Counter, n: int) -> float:
    """ROUGE-n F1 of a token sequence against the reference's n-gram counts (``ngrams(ref, n)``;
    rouge-score's definition: clipped n-gram matches over candidate and reference n-gram totals)."""
    grams = ngrams(tokens, n)
    overlap = sum(min(c, ref_counts[g]) for g, c in grams.items())
    cand, ref = sum(grams.values()), sum(ref_counts.values())
    if not overlap or not cand or not ref:
        return 0.0
    p, r = overlap / cand, overlap / ref
    return 2 * p * r / (p + r)
