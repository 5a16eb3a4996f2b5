"""tools/remote_batch.py: pack an experiment's runs, run them side by side to a deadline, bring them back."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import load_tool, tiny_experiment, write_dialogsum

PY = f"{sys.version_info.major}.{sys.version_info.minor}"   # compiled packages copied, not downloaded

def test_strip_metrics_drops_bertscore_only():
    tool = load_tool("remote_batch")
    text = 'name = "x"\nmetrics = ["rouge", "bertscore", "unk_ratio"]\n# metrics = ["bertscore"] in a comment\n'
    out, dropped = tool.strip_metrics(text)
    assert out.splitlines()[1] == 'metrics = ["rouge", "unk_ratio"]'
    assert out.splitlines()[2] == text.splitlines()[2]      # comments keep their text
    assert dropped == ["bertscore"]
    assert tool.strip_metrics('metrics = ["rouge"]\n') == ('metrics = ["rouge"]\n', [])


RUNS = """
[[runs]]
name = "a"

[[runs]]
name = "b"
train = { init_from = "a", epochs = 1 }

[[runs]]
name = "c"
"""


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """``pack`` of runs a and b of a tiny experiment with BERTScore among its metrics; a trains 100,000 epochs,
    so only a deadline or ``--max-minutes`` ends it, and b starts from a's weights. Packed once for the
    module: (the packed folder, what pack printed); each test runs ``go`` on a copy of it."""
    tool = load_tool("remote_batch")
    tmp = tmp_path_factory.mktemp("remote")
    data = write_dialogsum(tmp / "data", n_train=16)
    toml = tmp / "tiny_remote.toml"
    toml.write_text(tiny_experiment("tiny_remote", RUNS, seeds=1, epochs=100000)
                    .replace('metrics = ["rouge"]', 'metrics = ["rouge", "bertscore"]'), encoding="utf-8")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert tool.main(["pack", str(toml), "--only", "a", "b", "--data-dir", str(data), "--dir", str(tmp / "pack"),
                          "--python", PY]) == 0
    return tmp / "pack", printed.getvalue()


def _copy(packed, tmp_path) -> Path:
    return Path(shutil.copytree(packed[0], tmp_path / "pack"))


def test_pack_go_unpack_end_to_end(packed, tmp_path, capsys):
    """pack, go and unpack; go's ``--max-minutes`` is passed to zoo run: run a, of 100,000 epochs, stops
    training in time and reaches its test record long before the deadline, and b then starts from it."""
    tool = load_tool("remote_batch")
    assert "outside the checkout" in packed[1]          # tmp_path would not travel: said so
    pack = _copy(packed, tmp_path)
    batch = json.loads((pack / "batch.json").read_text())
    assert batch["runs"] == ["a", "b"] and batch["after"] == {"a": [], "b": ["a"]}
    assert batch["dropped_metrics"] == ["bertscore"]
    assert 'metrics = ["rouge"]' in (pack / "tiny_remote.toml").read_text()
    assert (pack / "data" / "dialogsum" / "dialogsum.train.jsonl").is_file()
    assert (pack / "site" / "rouge_score" / "rouge_scorer.py").is_file()
    assert (pack / "site" / "jsonschema" / "validators.py").is_file()     # the report's record checks

    out = tmp_path / "out"
    capsys.readouterr()
    rc = tool.main(["go", "--dir", str(pack), "--seconds", "300", "--out", str(out), "--device", "cpu",
                    "--poll", "0.2", "--max-minutes", "1e-9"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert printed.index("a: finished") < printed.index("started b")      # b starts from a's weights
    summary = (out / "summary.txt").read_text()
    assert "a: finished" in summary and "b: finished" in summary
    a = json.loads((pack / "res" / "tiny_remote" / "a" / "record.json").read_text())["train"]
    assert a["stopped_by_time"] and a["epochs_run"] == 1
    assert "--max-minutes 1e-09" in (pack / "logs" / "run_a.log").read_text()
    with tarfile.open(out / "remote_batch.tgz") as tar:
        names = tar.getnames()
    assert "res/tiny_remote/a/record.json" in names and "res/tiny_remote/b/record.json" in names
    assert "logs/run_a.log" in names
    assert not [n for n in names if n.endswith(".pt") or "checkpoints" in n]
    record = json.loads((pack / "res" / "tiny_remote" / "b" / "record.json").read_text())
    assert "bertscore" not in record["eval"]["settings"] and "rouge1" in json.dumps(record["eval"])

    results = tmp_path / "results"
    assert tool.main(["unpack", str(out / "remote_batch.tgz"), "--results", str(results)]) == 0
    assert (results / "tiny_remote" / "a" / "record.json").is_file()
    assert (results / "tiny_remote" / "b" / "predictions.jsonl").is_file()
    assert (results / "tiny_remote" / "logs" / "run_b.log").is_file()
    declared = json.loads((results / "tiny_remote" / "experiment.json").read_text())  # not rebuilt by report
    assert declared["experiment"] == "tiny_remote"
    assert not list(results.rglob("*.pt"))
    assert tool.main(["unpack", str(out / "remote_batch.tgz"), "--results", str(results)]) == 2   # no overwrite
    assert "already there" in capsys.readouterr().err
    (results / "tiny_remote" / "logs" / "run_b.log").write_text("an earlier call's log\n")
    assert tool.main(["unpack", str(out / "remote_batch.tgz"), "--results", str(results), "--force"]) == 0
    assert (results / "tiny_remote" / "logs" / "run_b.log").read_text() == "an earlier call's log\n"
    assert (results / "tiny_remote" / "logs" / "run_b.2.log").read_text().startswith("$ ")   # kept beside it
    assert not (results / "tiny_remote" / "logs" / "run_a.2.log").exists()                   # same log: once


def test_go_stops_runs_at_the_deadline_with_a_checkpoint(packed, tmp_path, capsys):
    tool = load_tool("remote_batch")
    pack = _copy(packed, tmp_path)
    rc = tool.main(["go", "--dir", str(pack), "--seconds", "20", "--out", str(tmp_path / "out"),
                    "--device", "cpu", "--poll", "0.2"])
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert rc == 1
    assert "a: stopped" in summary and "b: not started" in summary   # b waits for a, which did not finish
    assert (pack / "res" / "tiny_remote" / "a" / "checkpoints" / "last.pt").is_file()   # --resume continues it there
    assert "--resume" in (pack / "logs" / "run_a.log").read_text()


def test_pack_and_go_errors_are_one_line(tmp_path, capsys):
    tool = load_tool("remote_batch")
    assert tool.main(["go", "--dir", str(tmp_path / "none"), "--seconds", "1"]) == 2
    assert "run `pack` first" in capsys.readouterr().err
    assert tool.main(["pack", str(tmp_path / "missing.toml"), "--dir", str(tmp_path / "p")]) == 2
    assert "experiment file not found" in capsys.readouterr().err


def test_go_preflight_names_a_module_that_cannot_be_imported(tmp_path):
    import os
    tool = load_tool("remote_batch")
    assert tool.preflight(dict(os.environ), ["json", "no_such_module_zq"]) == ["no_such_module_zq"]
    assert tool.preflight(dict(os.environ)) == []          # this interpreter has every package a run needs
