"""A metric written in a file outside the package describes itself (``Column``) and is then used like the
built-in ones: a column of table.md with its label and CI, a valid ``train.val_metric``, a reward term,
a metric a declared finding may compare."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, tiny_experiment, write_dialogsum

METRIC_FILE = Path(__file__).parent / "fixtures" / "user_metric.py"


@pytest.fixture(scope="module")
def loaded():
    from seq2seq_zoo.registry import load_models
    load_models([METRIC_FILE])


def test_the_declarations_are_what_the_readers_see(loaded):
    from seq2seq_zoo.config.values import declared, parse_reward
    from seq2seq_zoo.findings import known_metrics
    from seq2seq_zoo.metrics import columns, sentence_scorer
    from seq2seq_zoo.report.tables import score_columns
    assert ("zz_distinct2", "distinct-2") in score_columns()
    assert score_columns()[:3] == [("rouge1", "R-1"), ("rouge2", "R-2"), ("rouge3", "R-3")]   # built-ins first
    assert "zz_distinct2" in declared("val_metric") and "zz_distinct2" in declared("reward")
    assert "rougeLsum" not in declared("val_metric") and "bertscore_f1" not in declared("reward")
    assert parse_reward("0.5*rouge1 + 0.5*zz_distinct2") == {"rouge1": 0.5, "zz_distinct2": 0.5}
    assert "zz_distinct2" in known_metrics() and "best_score" in known_metrics()
    assert {c.key for c in columns("ci")} >= {"rouge1", "rougeLsum", "rouge1_max", "zz_distinct2"}
    # a user column without its own sentence scorer: its per-example values over its scale
    got = sentence_scorer(["zz_distinct2", "rouge1"])(["a b a b", "a b c"], ["x", "a b c"])
    assert got["zz_distinct2"] == pytest.approx([2 / 3, 1.0]) and got["rouge1"] == pytest.approx([0.0, 1.0])


def test_a_column_that_cannot_be_used_the_way_it_says_is_refused():
    from seq2seq_zoo.metrics import Column
    with pytest.raises(ValueError, match="needs per_example=True"):
        Column("x", "x", val_metric=True)
    with pytest.raises(ValueError, match="must be higher-is-better"):
        Column("x", "x", per_example=True, val_metric=True, higher_is_better=False)


def test_val_metric_is_checked_against_the_declarations(tmp_path, loaded):
    from seq2seq_zoo.config import ConfigError, load_experiment
    p = tmp_path / "e.toml"
    p.write_text(tiny_experiment("um", '[[runs]]\nname = "a"\ntrain.val_metric = "zz_distinct"\n', seeds=1),
                 encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert "train.val_metric" in str(e.value) and "Did you mean 'zz_distinct2'?" in str(e.value)


def test_a_user_metric_is_a_table_column_and_picks_the_checkpoint(tmp_path):
    data = write_dialogsum(tmp_path / "data", n_train=8, n_dev=2, n_test=2)
    toml = tmp_path / "um.toml"
    toml.write_text(tiny_experiment("um", '[[runs]]\nname = "a"\neval.metrics = ["rouge", "zz_distinct"]\n'
                                    'train.val_metric = "zz_distinct2"\n', seeds=1, data_dir=data, epochs=1,
                                    decode_max_len=8), encoding="utf-8")
    res = tmp_path / "R"
    assert run_cli(["run", str(toml), "--models", str(METRIC_FILE), "--results", str(res), "--no-progress"]) == 0
    rec = json.loads((res / "um" / "a" / "record.json").read_text())
    assert rec["train"]["val_metric"] == "zz_distinct2" and rec["train"]["best_score"] is not None
    assert 0 <= rec["train"]["best_score"] <= 1                         # the 0-1 score: the column's value / 100
    assert "zz_distinct2" in rec["eval"]["scores"]
    lines = (res / "um" / "table.md").read_text().splitlines()
    header = next(x for x in lines if x.startswith("| run"))
    assert "| distinct-2 |" in header and header.index("R-1") < header.index("distinct-2") < header.index("len")
    cells = dict(zip(header.split("|"), next(x for x in lines if x.startswith("| a ")).split("|")))
    mean = rec["eval"]["scores"]["zz_distinct2"]
    assert cells[" distinct-2 "].strip().startswith(f"{mean:.2f} [")      # the declared CI: mean [low, high]


def test_a_metric_receives_only_the_eval_options_it_declares():
    from seq2seq_zoo.config import EvalConfig
    from seq2seq_zoo.metrics import evaluate
    from seq2seq_zoo.registry import register_metric
    seen = []

    @register_metric("zz_options_probe", options={"rouge_unk": "unk_rule"})
    def probe(predictions, references, *, per_example=None, **kwargs):
        seen.append(kwargs)
        return {}, {}
    cfg = EvalConfig(rouge_stemmer=False, rouge_unk="strip", bertscore_batch_size=3)
    _, settings = evaluate(["a b"], [["a c"]], ["rouge", "zz_options_probe"], config=cfg, device="cpu")
    assert seen == [{"unk_rule": "strip", "device": "cpu"}]                   # its own option, renamed
    assert settings["rouge"]["stemmer"] is False and settings["rouge"]["label"] == "ROUGE (unk: strip)"
