"""`zoo run` end to end on a tiny fixture corpus: record, predictions, tables, plots, README; `zoo report`
rebuilds them; a second `zoo run` skips the finished runs."""
from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

from seq2seq_zoo.cli import main

RUNS = """
[[runs]]
name = "learned"
pe = "learned"

[[runs]]
name = "sinus"
pe = "sinusoidal"
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """Run the tiny experiment once for the module (the slow part)."""
    from conftest import tiny_experiment, write_dialogsum
    tmp = tmp_path_factory.mktemp("e2e")
    data_dir = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = tmp / "tiny_e2e.toml"
    toml.write_text(tiny_experiment("tiny_e2e", RUNS, data_dir=data_dir, description="tiny end-to-end test"),
                    encoding="utf-8")
    results = tmp / "results"
    threads = torch.get_num_threads()
    rc = main(["run", str(toml), "--results", str(results), "--no-progress"])
    torch.set_num_threads(threads)
    assert rc == 0
    return toml, results, results / "tiny_e2e", data_dir


def test_record_json(finished_run):
    toml, results, exp, data_dir = finished_run
    from seq2seq_zoo.models.base import build_model
    for name, pe in (("learned", "learned"), ("sinus", "sinusoidal")):
        rec = json.loads((exp / name / "record.json").read_text())
        assert rec["experiment"] == "tiny_e2e" and rec["run"] == name and rec["status"] == "done"
        assert rec["seed"] == 3 and rec["model"] == "transformer"
        assert rec["spec"]["model_options"]["pe"] == pe
        # the positional rule is recorded: bases of both sides, the learned table's scale
        rules = rec["model_rules"]
        assert rules == ({"pe_rule": "learned table, N(0, 1^2) at initialisation", "pe_init_std": 1.0}
                         if pe == "learned" else
                         {"pe_rule": "sin/cos, base 10000", "pe_base": {"encoder": 10000.0, "decoder": 10000.0}})
        # parameters per component, and a total equal to the model's unique parameters
        p = rec["params"]
        assert {"embedding", "encoder", "decoder", "output", "total"} <= set(p)
        assert p["total"] == sum(v for k, v in p.items() if k != "total")
        V = rec["data"]["vocab_size"]
        m = build_model("transformer", {"vocab_size": V, "max_src_len": 64, "max_tgt_len": 24},
                        rec["spec"]["model_options"])
        assert p["total"] == sum(t.numel() for t in m.parameters())
        assert p["embedding"] == V * 16
        # data description
        assert rec["data"]["sizes"] == {"train": 16, "validation": 4, "test": 3}
        assert rec["data"]["dataset"] == "dialogsum" and rec["data"]["data_dir"] == str(data_dir)
        # training history
        tr = rec["train"]
        assert tr["epochs_run"] == 2 and len(tr["history"]) == 2 and tr["steps"] == 4
        for row in tr["history"]:
            assert row["train_loss"] > 0 and row["val_loss"] > 0 and row["tokens_per_s"] > 0
        assert tr["precision"] == "fp32" and tr["device"] == "cpu"
        assert tr["best_val_loss"] == pytest.approx(min(r["val_loss"] for r in tr["history"]))
        # evaluation with its settings
        ev = rec["eval"]
        assert ev["split"] == "test" and ev["n_examples"] == 3
        for k in ("rouge1", "rouge2", "rougeL", "rougeLsum", "rouge1_max", "pred_len"):
            assert k in ev["scores"]
        assert ev["settings"]["rouge"]["stemmer"] is True
        assert "max" in ev["settings"]["rouge"]["multi_reference"]
        assert ev["decode"]["beam_size"] == 2 and ev["decode"]["max_len"] == 20
        hw = rec["hardware"]
        assert hw["torch"] == torch.__version__ and hw["cpu"] and hw["python"]
        assert set(rec["code"]) == {"commit", "dirty"}   # the checkout's commit, or None outside git
        assert rec["lr_curve"][0][0] == 1 and rec["lr_curve"][-1][0] == 4
        assert all(v == pytest.approx(0.003) for _, v in rec["lr_curve"])


def test_predictions_jsonl_rescore(finished_run):
    toml, results, exp, data_dir = finished_run
    from rouge_score import rouge_scorer
    rows = [json.loads(x) for x in (exp / "learned" / "predictions.jsonl").read_text().splitlines() if x.strip()]
    test = [json.loads(x) for x in (data_dir / "dialogsum" / "dialogsum.test.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [t["fname"] for t in test]
    for r, t in zip(rows, test):
        assert isinstance(r["prediction"], str)
        assert r["references"] == [t["summary1"], t["summary2"], t["summary3"]]
    # the record's ROUGE-1 is the mean over examples of the mean over references, x 100
    sc = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    per = [sum(sc.score(ref, r["prediction"])["rouge1"].fmeasure for ref in r["references"]) / 3 for r in rows]
    rec = json.loads((exp / "learned" / "record.json").read_text())
    assert rec["eval"]["scores"]["rouge1"] == pytest.approx(100 * sum(per) / len(per), abs=1e-6)


def test_tables_plots_readme(finished_run):
    toml, results, exp, data_dir = finished_run
    md = (exp / "table.md").read_text()
    assert "| run |" in md and "learned" in md and "sinus" in md and "R-1" in md
    with open(exp / "table.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["learned", "sinus"]
    assert {r["pe"] for r in rows} == {"learned", "sinusoidal"}  # the varying option gets a column
    rec = json.loads((exp / "learned" / "record.json").read_text())
    assert float(rows[0]["R-1"]) == pytest.approx(rec["eval"]["scores"]["rouge1"], abs=1e-6)
    assert int(rows[0]["params"]) == rec["params"]["total"]
    assert "\\begin{tabular}" in (exp / "table.tex").read_text()
    for png in ("val_loss.png", "lr_schedule.png", "positional_encodings.png", "attention_learned.png"):
        data = (exp / "plots" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, png
    readme = (exp / "README.md").read_text()
    assert "- **Model rules**: pe_rule: sin/cos, base 10000; pe_base: encoder 10000, decoder 10000 (sinus)" in readme
    for s in ("# tiny_e2e", "## Results", "## Settings", "rouge-score", "test", "Hardware", "plots/val_loss.png"):
        assert s in readme, s
    assert (exp / "learned" / "attention.json").exists() and (exp / "sinus" / "positional.json").exists()


def test_report_regenerates_and_second_run_skips(finished_run, capsys):
    toml, results, exp, data_dir = finished_run
    md_before = (exp / "table.md").read_text()
    for f in ("table.md", "table.csv", "table.tex", "README.md"):
        (exp / f).unlink()
    for f in (exp / "plots").iterdir():
        f.unlink()
    assert main(["report", "tiny_e2e", "--results", str(results)]) == 0
    assert (exp / "table.md").read_text() == md_before
    assert (exp / "README.md").exists() and (exp / "table.csv").exists() and (exp / "table.tex").exists()
    assert (exp / "plots" / "val_loss.png").exists() and (exp / "plots" / "lr_schedule.png").exists()
    capsys.readouterr()
    rec_before = {n: (exp / n / "record.json").read_bytes() for n in ("learned", "sinus")}
    assert main(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("already done") == 2
    assert {n: (exp / n / "record.json").read_bytes() for n in ("learned", "sinus")} == rec_before
    assert not (exp / ".lock").exists()


def test_report_without_names_finds_nested_result_folders(finished_run, tmp_path, capsys):
    """`zoo report` rebuilds every experiment folder under --results, including those one level down
    (a second profile written with --results results/<name>), and skips folders without records."""
    toml, results, exp, data_dir = finished_run
    root = tmp_path / "results"
    shutil.copytree(exp, root / "tiny_e2e", ignore=shutil.ignore_patterns("checkpoints"))
    shutil.copytree(exp, root / "cpu_long" / "tiny_e2e", ignore=shutil.ignore_patterns("checkpoints"))
    (root / "bench").mkdir()
    (root / "bench" / "bench.json").write_text("{}")
    for d in (root / "tiny_e2e", root / "cpu_long" / "tiny_e2e"):
        (d / "table.md").unlink()
    capsys.readouterr()
    assert main(["report", "--results", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.count(": wrote ") == 2
    assert (root / "tiny_e2e" / "table.md").exists() and (root / "cpu_long" / "tiny_e2e" / "table.md").exists()


def test_report_without_records_is_a_clear_error(tmp_path, capsys):
    assert main(["report", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run records" in err[0]


def test_eval_and_summarize_commands(finished_run, capsys):
    toml, results, exp, data_dir = finished_run
    capsys.readouterr()
    assert main(["eval", str(exp / "learned"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rec = json.loads((exp / "learned" / "record.json").read_text())
    assert out["n_examples"] == 3
    assert out["scores"]["rouge1"] == pytest.approx(rec["eval"]["scores"]["rouge1"])
    f = data_dir / "in.txt"
    f.write_text("#Person1#: Hello Amy, I want to buy a red car.\n#Person2#: The red car is in the shop.")
    assert main(["summarize", str(exp / "learned"), "--file", str(f), "--max-len", "10"]) == 0
    assert len(capsys.readouterr().out.strip().split()) <= 10


def test_report_shows_the_stale_flag_of_records_made_before_a_fix(finished_run, tmp_path):
    """A record marked ``stale`` (made before the correctness fixes) says so in the
    settings of the rebuilt tables and README."""
    from seq2seq_zoo.report.build import build_report
    toml, results, exp, data_dir = finished_run
    copy = tmp_path / "tiny_e2e"
    shutil.copytree(exp, copy, ignore=shutil.ignore_patterns("checkpoints"))
    rec = json.loads((copy / "sinus" / "record.json").read_text())
    rec["stale"] = "made before the correctness fixes: beam search"
    (copy / "sinus" / "record.json").write_text(json.dumps(rec))
    build_report(copy)
    line = "- **Stale**: made before the correctness fixes: beam search (sinus)"
    assert line in (copy / "README.md").read_text() and line in (copy / "table.md").read_text()
    assert "**Stale**" not in (exp / "table.md").read_text()
