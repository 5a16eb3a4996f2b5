"""A run shared by two experiments (``same_as = "EXP/RUN"``): taken over when the settings are identical,
refused (exit 2, the differing settings named) when they are not, trained here when the other experiment
has not finished it."""
from __future__ import annotations

import json

import pytest

from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.reuse import comparable, differences

FIRST = """
[[runs]]
name = "base"
pe = "sinusoidal"
"""


def _run(argv):
    from conftest import run_cli
    return run_cli(argv)


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    from conftest import trained_tiny_experiment
    tmp = tmp_path_factory.mktemp("same_as")
    data_dir, _, results = trained_tiny_experiment(tmp, "first", FIRST)
    return tmp, data_dir, results


def _second(tmp, data_dir, runs: str, name: str = "second"):
    from conftest import tiny_experiment
    toml = tmp / f"{name}.toml"
    toml.write_text(tiny_experiment(name, runs, data_dir=data_dir, epochs=1), encoding="utf-8")
    return toml


def test_identical_run_is_taken_over_not_retrained(first, capsys):
    tmp, data_dir, results = first
    # the same settings, one of them written out at the model's default (attn_dropout 0.0)
    toml = _second(tmp, data_dir, '[[runs]]\nname = "shared"\npe = "sinusoidal"\nattn_dropout = 0.0\n'
                                  'same_as = "first/base"\n')
    capsys.readouterr()
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "took over" in out and "not trained again" in out
    src = json.loads((results / "first" / "base" / "record.json").read_text())
    rec = json.loads((results / "second" / "shared" / "record.json").read_text())
    assert rec["experiment"] == "second" and rec["run"] == "shared" and rec["spec"]["same_as"] == "first/base"
    assert rec["reused_from"]["run"] == "first/base"
    assert rec["reused_from"]["compute_seconds"] == src["compute_seconds"] > 0
    assert rec["compute_seconds"] == 0.0   # nothing was computed for this experiment
    assert rec["eval"]["scores"] == src["eval"]["scores"]
    assert rec["train"]["history"] == src["train"]["history"]
    for f in ("predictions.jsonl", "scores.jsonl"):
        assert (results / "second" / "shared" / f).read_text() == (results / "first" / "base" / f).read_text()
    assert not (results / "second" / "shared" / "checkpoints").exists()
    # the table names where it was trained; the README's wall-time line says it was taken over
    table = (results / "second" / "table.md").read_text()
    assert "trained as" in table and "first/base" in table
    readme = (results / "second" / "README.md").read_text()
    assert "shared = first/base" in readme


def test_taken_over_run_equals_training_it(first):
    """The claim behind same_as: with identical settings and seed, training again gives the same run."""
    tmp, data_dir, results = first
    toml = _second(tmp, data_dir, '[[runs]]\nname = "again"\npe = "sinusoidal"\n', name="again")
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    src = json.loads((results / "first" / "base" / "record.json").read_text())
    rec = json.loads((results / "again" / "again" / "record.json").read_text())
    assert "reused_from" not in rec
    assert [h["train_loss"] for h in rec["train"]["history"]] == [h["train_loss"] for h in src["train"]["history"]]
    assert rec["eval"]["scores"] == src["eval"]["scores"]
    assert differences(rec["spec"], src["spec"]) == []


def test_different_settings_are_refused_with_the_settings_named(first, capsys):
    tmp, data_dir, results = first
    toml = _second(tmp, data_dir, '[[runs]]\nname = "shared"\npe = "learned"\ntrain.lr = 0.001\n'
                                  'same_as = "first/base"\n', name="third")
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "same_as = 'first/base'" in err and "Traceback" not in err
    assert "model_options.pe: 'learned' vs 'sinusoidal'" in err and "train.lr: 0.001 vs 0.003" in err
    assert not (results / "third" / "shared" / "record.json").exists()


def test_missing_source_trains_the_run_here(first, capsys):
    tmp, data_dir, results = first
    toml = _second(tmp, data_dir, '[[runs]]\nname = "alone"\npe = "sinusoidal"\nsame_as = "nowhere/base"\n',
                   name="fourth")
    capsys.readouterr()
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    assert "no finished run for seed 3" in capsys.readouterr().out
    rec = json.loads((results / "fourth" / "alone" / "record.json").read_text())
    assert "reused_from" not in rec and rec["train"]["epochs_run"] == 1 and rec["compute_seconds"] > 0


def test_same_as_must_name_experiment_and_run(tmp_path):
    from conftest import tiny_experiment
    toml = tmp_path / "bad.toml"
    toml.write_text(tiny_experiment("bad", '[[runs]]\nname = "x"\nsame_as = "noam_scaled"\n'), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"runs\[0\]\.same_as: .*EXPERIMENT/RUN"):
        load_experiment(toml)


def test_comparable_ignores_naming_and_placement_but_not_settings():
    from conftest import tiny_experiment  # noqa: F401  (conftest on the path)
    base = {"experiment": "a", "name": "r", "description": "x", "profile": "cpu", "seed": 1, "model": "transformer",
            "model_options": {"d_model": 16}, "train": {"lr": 0.003, "threads": 1, "device": "auto"},
            "data": {"dataset": "dialogsum", "options": {"k": 1}}}
    other = json.loads(json.dumps(base))
    other.update(experiment="b", name="s", description="y", profile="none", same_as="a/r")
    other["train"].update(threads=2, device="cuda")
    other["model_options"]["attn_dropout"] = 0.0   # the transformer's default
    assert differences(base, other) == []
    other["data"]["options"] = {"k": 2}
    assert differences(base, other) == ["data.options: {'k': 1} vs {'k': 2}"]
    assert comparable(base)["model_options.pe"] == "sinusoidal"   # defaults filled in


def test_decode_sweep_of_a_taken_over_run_uses_the_source_checkpoint(first, capsys):
    """[[decode]] entries re-decode the best checkpoint; a taken-over run has none of its own, so the
    source run's is used, and gives what re-decoding the source gives."""
    tmp, data_dir, results = first
    toml = _second(tmp, data_dir, '[[runs]]\nname = "shared"\npe = "sinusoidal"\nsame_as = "first/base"\n\n'
                                  '[[decode]]\nname = "greedy"\nmethod = "greedy"\n', name="fifth")
    assert _run(["run", str(toml), "--results", str(results), "--no-progress"]) == 0
    dec = json.loads((results / "fifth" / "shared" / "decodes" / "greedy" / "record.json").read_text())
    assert dec["eval"]["decode"]["method"] == "greedy"
    assert _run(["eval", str(results / "first" / "base"), "--decode", "method=greedy", "--name", "greedy"]) == 0
    ref = json.loads((results / "first" / "base" / "decodes" / "greedy" / "record.json").read_text())
    assert dec["eval"]["scores"] == ref["eval"]["scores"]
    assert not (results / "fifth" / "shared" / "checkpoints").exists()


@pytest.mark.parametrize("profile", [None, "cpu"])
def test_committed_shared_runs_name_each_other_and_are_identical(profile):
    """optimizer's noam_scaled and regularisation's dropout_ls are one run: each names the other, so
    whichever experiment runs first trains it (at either size), and their settings are equal seed for seed."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "experiments"
    opt = {s.name: s for s in load_experiment(root / "optimizer.toml", profile=profile).runs}
    reg = {s.name: s for s in load_experiment(root / "regularisation.toml", profile=profile).runs}
    for seed in (1, 2, 3):
        a, b = opt[f"noam_scaled-seed{seed}"], reg[f"dropout_ls-seed{seed}"]
        assert a.same_as == "regularisation/dropout_ls" and b.same_as == "optimizer/noam_scaled"
        assert differences(a.to_dict(), b.to_dict()) == []
    assert differences(opt["adam-seed1"].to_dict(), reg["dropout_ls-seed1"].to_dict())   # the check can fail


def test_mutual_same_as_trains_once(first, capsys):
    """Two runs naming each other: the first experiment run trains, the second takes over."""
    tmp, data_dir, results = first
    a = _second(tmp, data_dir, '[[runs]]\nname = "x"\npe = "learned"\nsame_as = "mutual_b/y"\n', name="mutual_a")
    b = _second(tmp, data_dir, '[[runs]]\nname = "y"\npe = "learned"\nsame_as = "mutual_a/x"\n', name="mutual_b")
    capsys.readouterr()
    assert _run(["run", str(b), "--results", str(results), "--no-progress"]) == 0
    assert "training it here" in capsys.readouterr().out
    assert _run(["run", str(a), "--results", str(results), "--no-progress"]) == 0
    assert "took over" in capsys.readouterr().out
    rec = json.loads((results / "mutual_a" / "x" / "record.json").read_text())
    assert rec["reused_from"]["run"] == "mutual_b/y"
