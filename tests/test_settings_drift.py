"""A finished run whose experiment file has changed since it trained: ``zoo run`` keeps it but says which
settings differ (file vs record) and how to retrain it; ``zoo report`` names it and the settings in the
table's notes; ``--force`` retrains it and the note goes away. ``reuse.drift`` by hand."""
from __future__ import annotations

import json

import pytest

from seq2seq_zoo.reuse import drift

RUNS = '[[runs]]\nname = "base"\npe = "sinusoidal"\n'
pytestmark = pytest.mark.usefixtures("figures_not_rendered")   # the checks read tables and records


def _run(argv):
    from conftest import run_cli
    return run_cli(argv)


def _spec(**train):
    return {"experiment": "x", "name": "r", "model": "gru", "model_options": {"hidden": 8},
            "train": {"epochs": 20, "precision": "auto", **train}, "eval": {"metrics": ["rouge"]}}


def test_drift_names_changed_settings_and_reads_auto_precision_as_what_ran():
    record = {"spec": _spec(), "train": {"precision": "fp32"}, "eval": {"settings": {"rouge": {}}}}
    assert drift(_spec(), record) == []
    # the file now pins what "auto" resolved to on the machine that trained: the same run
    assert drift(_spec(precision="fp32"), record) == []
    assert drift(_spec(precision="bf16"), record) == ["train.precision: 'bf16' vs 'fp32'"]
    assert drift(_spec(epochs=60), record) == ["train.epochs: 60 vs 20"]
    # a metric the file asks for and the record never scored; one scored afterwards counts as scored
    asks = {**_spec(), "eval": {"metrics": ["rouge", "bertscore"]}}
    assert drift(asks, record) == ["eval.metrics: not scored: bertscore"]
    scored = {**record, "eval": {"settings": {"rouge": {}, "bertscore": {}}}}
    assert drift(asks, scored) == []


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import trained_tiny_experiment
    tmp = tmp_path_factory.mktemp("drift")
    return (tmp, *trained_tiny_experiment(tmp, "drift", RUNS))


def test_changed_file_is_reported_by_run_and_report_and_cleared_by_force(trained, capsys):
    from conftest import tiny_experiment
    tmp, data_dir, toml, results = trained
    table = results / "drift" / "table.md"
    assert "**Differ from the experiment file" not in table.read_text()
    toml.write_text(tiny_experiment("drift", RUNS, data_dir=data_dir, epochs=2), encoding="utf-8")
    capsys.readouterr()
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "[base] already done" in out and "other settings than this file gives now" in out
    assert "train.epochs: 2 vs 1" in out and "--force" in out
    rec = json.loads((results / "drift" / "base" / "record.json").read_text())
    assert rec["train"]["epochs_run"] == 1                      # kept as it was
    assert _run(["report", "--results", str(results)]) == 0
    err = capsys.readouterr().err
    assert "1 run(s) hold results of other settings" in err and "base" in err
    notes = table.read_text()
    assert "**Differ from the experiment file as it is now**" in notes
    assert "drift.toml vs record: train.epochs: 2 vs 1" in notes and "--force" in notes
    assert _run(["run", str(toml), "--results", str(results), "--no-progress", "--force"]) == 0
    assert json.loads((results / "drift" / "base" / "record.json").read_text())["train"]["epochs_run"] == 2
    assert "**Differ from the experiment file" not in table.read_text()


def test_eval_save_keeps_added_metrics_with_the_run_and_in_the_tables(tmp_path, capsys):
    """``zoo eval RUN --metrics repetition --save``: the record and scores.jsonl gain the metric (the
    earlier per-example values stay), the table gets its column, and a file that asks for it no longer
    names the run as different."""
    from conftest import tiny_experiment, trained_tiny_experiment
    data_dir, toml, results = trained_tiny_experiment(tmp_path, "rescore", RUNS)
    run = results / "rescore" / "base"
    before = [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]
    toml.write_text(tiny_experiment("rescore", RUNS, data_dir=data_dir, epochs=1).replace(
        'metrics = ["rouge"]', 'metrics = ["rouge", "repetition"]'), encoding="utf-8")
    assert _run(["report", "--results", str(results)]) == 0
    assert "eval.metrics: not scored: repetition" in (results / "rescore" / "table.md").read_text()
    capsys.readouterr()
    assert _run(["eval", str(run), "--metrics", "repetition", "--save"]) == 0
    rec = json.loads((run / "record.json").read_text())
    assert "repetition" in rec["eval"]["scores"] and "repetition" in rec["eval"]["settings"]
    assert rec["rescored"][0]["metrics"] == ["repetition"]
    after = [json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()]
    assert len(after) == len(before) and after[0]["_meta"]["metrics"][-1] == "repetition"
    for b, a in zip(before[1:], after[1:]):
        assert a["id"] == b["id"] and a["rouge1"] == b["rouge1"] and 0.0 <= a["repetition"] <= 1.0
    table = (results / "rescore" / "table.md").read_text()
    assert "| rep. |" in table and "Differ from the experiment file" not in table
    assert _run(["eval", str(run), "--save"]) == 2          # --save without --metrics: a usage error
    assert "--save needs --metrics" in capsys.readouterr().err


def test_eval_save_scores_the_runs_decoding_variants_too(tmp_path, capsys):
    """A run's ``decodes/<name>/`` variants are table rows of their own: ``--save`` adds the metric to
    each of them as to the run, test split and training sample, and the table's decode row shows it."""
    from conftest import trained_tiny_experiment
    data_dir, toml, results = trained_tiny_experiment(tmp_path, "rescore2", RUNS + "eval.train_sample = 0.5\n")
    run = results / "rescore2" / "base"
    assert _run(["eval", str(run), "--decode", "beam_size=3,no_repeat_ngram=2", "--name", "b2", "--data-dir", str(data_dir),
                 "--no-progress"]) == 0
    assert _run(["report", "--results", str(results)]) == 0    # (writes the variant's scores.jsonl)
    dec = run / "decodes" / "b2"
    before = [json.loads(x) for x in (dec / "scores.jsonl").read_text().splitlines()]
    capsys.readouterr()
    assert _run(["eval", str(run), "--metrics", "repetition", "--save", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["decodes"]) == {"b2"} and "repetition" in out["decodes"]["b2"]["eval"]
    rec = json.loads((dec / "record.json").read_text())
    assert rec["eval"]["scores"]["repetition"] == out["decodes"]["b2"]["eval"]["repetition"]
    assert rec["rescored"][0]["metrics"] == ["repetition"] and rec["rescored"][0]["parts"] == ["eval", "train_sample"]
    for r in (rec, json.loads((run / "record.json").read_text())):   # the training sample too
        assert r["train_sample"]["n_examples"] == 8 and 0.0 <= r["train_sample"]["scores"]["repetition"] <= 1.0
        assert "repetition" in r["train_sample"]["settings"]
    assert out["train_sample"]["repetition"] == json.loads((run / "record.json").read_text())["train_sample"]["scores"]["repetition"]
    after = [json.loads(x) for x in (dec / "scores.jsonl").read_text().splitlines()]
    assert len(after) == len(before)
    for b, a in zip(before[1:], after[1:]):
        assert a["id"] == b["id"] and a["rouge1"] == b["rouge1"] and 0.0 <= a["repetition"] <= 1.0
    # a second --save keeps what already holds the metric (ids and values untouched); --force scores again
    capsys.readouterr()
    stamp = (dec / "scores.jsonl").read_text()
    assert _run(["eval", str(run), "--metrics", "repetition", "--save"]) == 0
    assert "already holds repetition; kept" in capsys.readouterr().err
    assert (dec / "scores.jsonl").read_text() == stamp and len(json.loads((dec / "record.json").read_text())["rescored"]) == 1
    assert _run(["eval", str(run), "--metrics", "repetition", "--save", "--force"]) == 0
    assert len(json.loads((dec / "record.json").read_text())["rescored"]) == 2
    rows = [r for r in (results / "rescore2" / "table.md").read_text().splitlines() if r.startswith("| base")]
    head = next(r for r in (results / "rescore2" / "table.md").read_text().splitlines() if r.startswith("| run"))
    col = [c.strip() for c in head.split("|")].index("rep.")
    assert len(rows) == 2 and all([c.strip() for c in r.split("|")][col] not in ("", "-") for r in rows)
