"""zoo run EXP --dry-run: the runs as profile, like and grid resolve them, their settings that differ from
the built-in defaults, and what a real zoo run would do with each; nothing trained or written."""
from __future__ import annotations

import os
import textwrap

from seq2seq_zoo.cli import main
from seq2seq_zoo.config import load_experiment, settings, toml_value
from seq2seq_zoo.results import write_record

FILE = """
[experiment]
name = "dry"
dataset = "dialogsum"
metrics = ["rouge"]
seeds = [1, 2]

[defaults]
model = "transformer"
d_model = 16
train.epochs = 3

[profiles.cpu]
d_model = 8

[[runs]]
name = "a"
pe = "learned"
train.lr = 0.01

[[runs]]
name = "b"
like = "a"
model = "transformer_pointer"
[runs.profiles.cpu]
train.precision = "fp32"

[[runs]]
name = "lead"
model = "lead"

[[findings]]
claim = "b > a"
"""


def _exp(tmp_path):
    p = tmp_path / "dry.toml"
    p.write_text(textwrap.dedent(FILE), encoding="utf-8")
    return p


def _record(spec) -> dict:
    """The least record that reads as finished (record_schema.RECORD), made from the run's own spec."""
    return {"run": spec.name, "experiment": spec.experiment, "seed": spec.seed, "spec": spec.to_dict(),
            "params": {}, "hardware": {}, "wall_seconds": 1.0,
            "data": {"dataset": "dialogsum", "sizes": {}, "vocab_size": 10},
            "train": {"history": [], "val_curve": [], "train_seconds": 1.0, "precision": "fp32"},
            "eval": {"split": "test", "n_examples": 1, "scores": {"rouge1": 30.0}, "settings": {"rouge": {}},
                     "decode": {}}}


def test_settings_are_what_differs_from_the_defaults(tmp_path):
    runs = {r.name: r for r in load_experiment(_exp(tmp_path), profile="cpu").runs}
    assert settings(runs["a-seed1"]) == {"model": "transformer", "d_model": 8, "pe": "learned",
                                         "train.epochs": 3, "train.lr": 0.01}     # metrics ["rouge"]: the default
    assert settings(runs["b-seed2"]) == {**settings(runs["a-seed1"]), "model": "transformer_pointer",
                                         "train.precision": "fp32"}
    assert toml_value(None) == "none" and toml_value([True, "x\"y"]) == '[true, "x\\"y"]'


def test_dry_run_prints_settings_and_plans_and_writes_nothing(tmp_path, capsys):
    exp, res = _exp(tmp_path), tmp_path / "results"
    res.mkdir()
    runs = {r.name: r for r in load_experiment(exp, profile="cpu").runs}
    write_record(res / "dry" / "a-seed1", _record(runs["a-seed1"]))
    other = runs["a-seed2"]
    other.train.lr = 0.5                                   # a record made with other settings than the file's
    write_record(res / "dry" / "a-seed2", _record(other))
    (res / "dry" / "b-seed1" / "checkpoints").mkdir(parents=True)
    (res / "dry" / "b-seed1" / "checkpoints" / "last.pt").write_bytes(b"x")
    (res / "dry" / "b-seed2").mkdir()
    (res / "dry" / "b-seed2" / ".lock").write_text(str(os.getppid()))   # a live process other than this one holds it
    before = sorted(p.relative_to(res) for p in res.rglob("*"))

    assert main(["run", str(exp), "--profile", "cpu", "--results", str(res), "--dry-run"]) == 0
    out = capsys.readouterr().out
    blocks = {b.splitlines()[0]: b + "\n" for b in out.split("\n\n")}
    a, b, lead = blocks["a-seed1, a-seed2"], blocks["b-seed1, b-seed2"], blocks["lead"]
    assert "seed 1: done, skipped" in a and "d_model = 8\n" in a and "train.lr = 0.01\n" in a
    assert "seed 2: done with other settings" in a and "train.lr" in a.split("seed 2:")[1].splitlines()[0]
    assert 'model = "transformer_pointer"' in b and 'train.precision = "fp32"' in b and 'pe = "learned"' in b
    assert "seed 1: stops: it has an unfinished checkpoint" in b
    assert f"seed 2: being trained now by another `zoo run` (pid {os.getppid()})" in b
    assert "seed 1: evaluated (a baseline: nothing to train)" in lead and 'model = "lead"' in lead and "d_model" not in lead
    assert "findings judged: b > a" in out and "nothing is trained or written" in out
    assert sorted(p.relative_to(res) for p in res.rglob("*")) == before   # nothing written, not even the findings

    assert main(["run", str(exp), "--profile", "cpu", "--results", str(res), "--dry-run", "--resume",
                 "--only", "b-seed1"]) == 0
    assert "seed 1: resumed from its checkpoint" in capsys.readouterr().out
    assert main(["run", str(exp), "--profile", "cpu", "--results", str(res), "--dry-run", "--force",
                 "--only", "a-seed1", "b-seed1"]) == 0
    out = capsys.readouterr().out
    assert "seed 1: trained again (--force)" in out and "seed 1: trained again from the start (--force)" in out


def test_dry_run_of_a_bad_file_is_exit_2_one_line(tmp_path, capsys):
    exp = _exp(tmp_path)
    exp.write_text(exp.read_text().replace('like = "a"', 'like = "aa"'))
    assert main(["run", str(exp), "--results", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "like" in err and "'a'" in err and "Traceback" not in err
