"""precision = "auto" resolves per machine: the run log says when a new seed trains in another precision
than the seeds of the same run already in the results folder."""
from __future__ import annotations

import json

import torch

from seq2seq_zoo.cli import main
from seq2seq_zoo.precision import precision_name, sibling_precision_note
from seq2seq_zoo.utils import seed_span


def _record(folder, run, seed, precision):
    d = folder / run
    d.mkdir(parents=True)
    (d / "record.json").write_text(json.dumps({"run": run, "seed": seed, "train": {"precision": precision}}))


def test_precision_name():
    assert precision_name(None) == "fp32"
    assert precision_name(torch.bfloat16) == "bfloat16" and precision_name(torch.float16) == "float16"


def test_seed_span():
    assert seed_span([3, 1, 2, 5, 7, 6]) == "1-3, 5-7"
    assert seed_span([4]) == "4" and seed_span([2, 4]) == "2, 4"
    assert seed_span([4], word=True) == "seed 4" and seed_span([1, 2], word=True) == "seeds 1-2"


def test_sibling_note_names_the_seeds_of_each_other_precision(tmp_path):
    exp = tmp_path / "exp"
    for seed, prec in ((1, "fp32"), (2, "fp32"), (3, "bfloat16")):
        _record(exp, f"pg-seed{seed}", seed, prec)
    _record(exp, "pg-cov-seed1", 1, "float16")              # another run: not a sibling
    _record(exp, "lead", None, "none (not trained)")
    (exp / "pg-seed9").mkdir()
    (exp / "pg-seed9" / "record.json").write_text("{not json")  # damaged: skipped
    note = sibling_precision_note(exp / "pg-seed4", "pg-seed4", 4, "bfloat16", "auto")
    assert "this seed trains in bfloat16" in note and "pg trained seeds 1-2 in fp32" in note
    assert "seed 3" not in note and "float16" not in note.replace("bfloat16", "")
    note = sibling_precision_note(exp / "pg-seed4", "pg-seed4", 4, "fp32", "auto")
    assert "pg trained seed 3 in bfloat16" in note and "seeds 1-2" not in note
    # its own earlier record (a re-run with --force) is not a sibling; same precision everywhere: no note
    assert sibling_precision_note(exp / "pg-seed3", "pg-seed3", 3, "fp32", "auto") is None
    assert sibling_precision_note(tmp_path / "new" / "x-seed1", "x-seed1", 1, "fp32", "auto") is None


def test_zoo_run_logs_the_note_for_a_seed_in_another_precision(tmp_path, capsys):
    from conftest import tiny_experiment, write_dialogsum
    data_dir = write_dialogsum(tmp_path / "data", n_train=16, n_dev=4, n_test=3)
    toml = tmp_path / "prec.toml"
    toml.write_text(tiny_experiment("prec", '[[runs]]\nname = "t"\nseeds = [1, 2]\n', data_dir=data_dir, epochs=1),
                    encoding="utf-8")
    results = tmp_path / "results"
    threads = torch.get_num_threads()
    try:
        assert main(["run", str(toml), "--results", str(results), "--no-progress", "--only", "t-seed1"]) == 0
        assert "note: this seed trains" not in capsys.readouterr().out
        rec_path = results / "prec" / "t-seed1" / "record.json"
        rec = json.loads(rec_path.read_text())
        assert rec["train"]["precision"] == "fp32"       # the file pins fp32
        rec["train"]["precision"] = "bfloat16"            # as if seed 1 had run on a CPU with bf16
        rec_path.write_text(json.dumps(rec))
        assert main(["run", str(toml), "--results", str(results), "--no-progress", "--only", "t-seed2"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert ('[t-seed2] note: this seed trains in fp32 (train.precision = "fp32" here); t trained seed 1 in '
            "bfloat16") in out
