"""Targets (report/targets.py): each dataset's target judged on the row chosen on validation, known
answers for every verdict, and the generated tables in LEADERBOARD.md's JSON and docs/experiments.md."""
from __future__ import annotations

import json

import pytest

from seq2seq_zoo.report import figures, targets
from seq2seq_zoo.report.comparators import TARGETS


def _row(dataset="dialogsum", family="pointer-generator", mean=40.5, over=None, task="summary", run="rl"):
    return {"dataset": dataset, "task": task, "family": family, "folder": "scst", "run": run, "decoding": None,
            "seeds": 3, "validation_basis": "training", "test_mean": mean, "test_sd": 0.3,
            "test_ci": [39.9, 41.1] if mean is not None else None, "over_lead": over}


@pytest.mark.parametrize("target, row, verdict, gap", [
    (41.0, _row(mean=40.5), "missed", -0.5),
    (41.0, _row(mean=41.0), "met", 0.0),
    (30.0, _row(mean=31.25), "met", 1.25),
    ("lead", _row(over=[2.0, 0.5, 3.5]), "above LEAD", 2.0),
    ("lead", _row(over=[0.4, -0.6, 1.5]), "level with LEAD", 0.4),
    ("lead", _row(over=[-3.2, -4.8, -1.6]), "below LEAD", -3.2),
    ("lead", _row(over=None), "no LEAD row", None),
    (41.0, _row(mean=None, run=None), "not run", None),
])
def test_judge_gives_the_verdict_and_the_gap(target, row, verdict, gap):
    got = targets.judge(target, row)
    assert got[0] == verdict
    assert got[1] == pytest.approx(gap) if gap is not None else got[1] is None


def test_target_rows_judge_the_named_family_not_the_best_test_mean():
    rows = [_row(family="Transformer", mean=45.0, run="strong"), _row(mean=39.0),
            _row(dataset="inshorts", task="headline", over=[7.0, 4.9, 9.1], run="pg"),
            _row(dataset="inshorts", over=[-8.9, -10.7, -7.2], run="pg"),
            _row(dataset="unknown_corpus", mean=99.0)]
    got = {t["dataset"]: t for t in targets.target_rows(rows)}
    assert set(got) == {"dialogsum", "inshorts", "inshorts_headline"}   # datasets without a target: none
    assert got["dialogsum"]["run"] == "rl" and got["dialogsum"]["verdict"] == "missed"   # not the Transformer's 45
    assert got["dialogsum"]["gap"] == pytest.approx(39.0 - TARGETS["dialogsum"][0])
    assert got["inshorts_headline"]["verdict"] == "above LEAD" and got["inshorts"]["verdict"] == "below LEAD"
    md = targets.targets_markdown(list(got.values()), "results/")
    assert "missed by 2.00" in md and "above LEAD: +7.00 [+4.90, +9.10]" in md
    assert "[scst](results/scst/README.md) `rl`" in md


def test_docs_targets_block_is_filled_from_the_leaderboard_and_exempt_from_the_unmarked_check(tmp_path):
    rows = [_row(mean=39.0)]
    (tmp_path / "leaderboard.json").write_text(json.dumps({"rows": [], "targets": targets.target_rows(rows)}))
    doc = tmp_path / "experiments.md"
    doc.write_text("# E\n\n<!-- board:start -->\n<!-- board:end -->\n\n<!-- targets:start -->\nSTALE ROW\n"
                   "<!-- targets:end -->\nafter\n", encoding="utf-8")
    assert figures.fill_docs(tmp_path, doc) is True
    text = doc.read_text(encoding="utf-8")
    assert "STALE ROW" not in text and "| DialogSum | ≥ 41.0" in text and "39.00 ± 0.30" in text and text.endswith("after\n")
    assert figures.unmarked(text) == []            # the generated table's mean ± sd is not a hand-copied figure
    assert figures.fill_docs(tmp_path, doc) is False   # unchanged records: the file is left as it is
