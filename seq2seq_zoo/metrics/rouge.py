"""ROUGE-1/2/3/L/Lsum F1 x 100 (Google ``rouge-score``, Porter stemming); with several references per
example both the mean over references and the max are reported (``rougeX_max``). ROUGE-Lsum splits
sentences with nltk's Punkt. Validation selection and SCST rewards score a hypothesis against one
reference with the same scorer, without the sentence split (``sentence_scores``).
"""
from __future__ import annotations

import re

import numpy as np

from seq2seq_zoo.metrics.base import Column
from seq2seq_zoo.registry import register_metric

ROUGE_TYPES = ("rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum")
# ROUGE-Lsum's sentences: nltk's Punkt splitter (Kiss & Strunk 2006) with these abbreviations and no
# trained model (the English punkt data cannot be downloaded here and ships in no maintained PyPI
# package), so "Mr." / "Ms." / "p.m." (common in DialogSum) do not end a sentence.
ROUGE_LSUM_ABBREVIATIONS = ("mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "mt", "vs", "etc", "e.g", "i.e",
                            "a.m", "p.m", "u.s", "u.k", "approx", "dept", "inc", "ltd")
_punkt = None


def _splitter():
    global _punkt
    if _punkt is None:
        from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
        params = PunktParameters()
        params.abbrev_types = set(ROUGE_LSUM_ABBREVIATIONS)
        _punkt = PunktSentenceTokenizer(params)
    return _punkt


def sentences_newline(text: str) -> str:
    """rougeLsum treats newlines as sentence boundaries: one Punkt sentence per line. Line breaks already
    in the text (CNN/DailyMail highlights, one per line, often without a final period) stay boundaries."""
    return "\n".join(s for line in text.strip().splitlines() for s in _splitter().tokenize(line.strip()) if s)


# The unknown-word token in predictions: the suite's <unk> (also inside "<unk>'s") and the corpus
# placeholder UNK (Gigaword's, which an extractive baseline copies from the source) as a whole word.
_UNK = re.compile(r"<unk>|(?<![\w<])UNK(?![\w>])")
ROUGE_UNK_RULES = {
    "match": "match (a predicted <unk> or UNK is read by rouge-score's tokenizer as the word 'unk' and "
             "matches a reference's UNK)",
    "strip": "strip (<unk> and the word UNK removed from predictions before scoring; references unchanged)"}


def strip_unk(text: str) -> str:
    """``text`` without the unknown-word token (``eval.rouge_unk = "strip"``); spaces collapsed, lines kept."""
    return "\n".join(" ".join(_UNK.sub(" ", line).split()) for line in text.split("\n")).strip()


_LABEL = {"rouge1": "R-1", "rouge2": "R-2", "rouge3": "R-3", "rougeL": "R-L", "rougeLsum": "R-Lsum"}
_SHOWN_MAX = ("rouge1", "rouge2", "rougeL")   # the max-over-references columns the tables show
# the ROUGE types a hypothesis can be scored on against one reference without a sentence split
SENTENCE_TYPES = ("rouge1", "rouge2", "rouge3", "rougeL")
COLUMNS = [
    *(Column(t, _LABEL[t], per_example=True, ci=True, val_metric=t in SENTENCE_TYPES, reward=t in SENTENCE_TYPES,
             scale=100.0) for t in ROUGE_TYPES),
    *(Column(f"{t}_max", f"{_LABEL[t]} max", per_example=True, ci=t in _SHOWN_MAX, table=t in _SHOWN_MAX, scale=100.0)
      for t in ("rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum")),
]


def sentence_scores(keys, stemmer: bool = True, **_):
    """ROUGE F1 (0-1) of each hypothesis against its one reference: rouge-score on the plain strings, no
    sentence split (validation selection and SCST rewards)."""
    from rouge_score import rouge_scorer
    scorer = rouge_scorer.RougeScorer(list(keys), use_stemmer=stemmer)

    def score(hyps, refs):
        s = [scorer.score(r, h) for h, r in zip(hyps, refs)]
        return {k: [x[k].fmeasure for x in s] for k in keys}
    return score


@register_metric("rouge", columns=COLUMNS, order=10, sentence_scores=sentence_scores,
                 options={"rouge_stemmer": "stemmer", "rouge_unk": "rouge_unk"})
def rouge(predictions: list[str], references: list[list[str]], *, stemmer: bool = True,
          per_example: dict | None = None, rouge_unk: str = "match", **_):
    """ROUGE-1/2/3/L/Lsum F1 (rouge-score, stemming), mean and max over references. ``per_example``
    (a dict) receives each example's F1 x 100 per type and reference rule (rouge1, rouge1_max, ...).
    ``rouge_unk``: "match" scores a predicted <unk> like any word (rouge-score reads "<unk>" and "UNK"
    alike as "unk", so it earns credit against a reference's UNK); "strip" removes it first."""
    from rouge_score import rouge_scorer
    if rouge_unk not in ROUGE_UNK_RULES:
        raise ValueError(f"unknown rouge_unk rule {rouge_unk!r}; use one of {', '.join(ROUGE_UNK_RULES)}")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stemmer)
    per = {t: {"mean": [], "max": []} for t in ROUGE_TYPES}
    for pred, refs in zip(predictions, references):
        p = sentences_newline(strip_unk(pred) if rouge_unk == "strip" else pred)
        f = {t: [] for t in ROUGE_TYPES}
        for ref in refs:
            s = scorer.score(sentences_newline(ref), p)
            for t in ROUGE_TYPES:
                f[t].append(s[t].fmeasure)
        for t in ROUGE_TYPES:
            per[t]["mean"].append(float(np.mean(f[t])))
            per[t]["max"].append(float(np.max(f[t])))
    multi = any(len(r) > 1 for r in references)
    if per_example is not None:
        for t in ROUGE_TYPES:
            per_example[t] = [100 * v for v in per[t]["mean"]]
            if multi:
                per_example[f"{t}_max"] = [100 * v for v in per[t]["max"]]
    scores = {}
    for t in ROUGE_TYPES:
        scores[t] = 100 * float(np.mean(per[t]["mean"])) if predictions else 0.0
        if multi:
            scores[f"{t}_max"] = 100 * float(np.mean(per[t]["max"])) if predictions else 0.0
    settings = {"implementation": "rouge-score (Google)", "stemmer": stemmer, "score": "F1 x 100",
                "rougeLsum_sentences": "nltk Punkt, untrained, abbreviations " + " ".join(ROUGE_LSUM_ABBREVIATIONS),
                "multi_reference": "mean over references (rougeX) and max over references (rougeX_max)"
                if multi else "single reference",
                "label": f"ROUGE (unk: {rouge_unk})", "unk": ROUGE_UNK_RULES[rouge_unk]}
    return scores, settings
