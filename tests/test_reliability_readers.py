"""Bad input is refused, not read silently: non-finite stored numbers, records of an unknown schema version,
names longer than a filesystem allows in bytes, two runs planned into one folder, settings out of range,
comparisons of runs scored on different references or with a non-finite scale, findings of the wrong
shape, and a training log with a cut line. Each refusal names the file (and line or key)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from seq2seq_zoo.errors import ConfigError, DamagedFile, UserError


# ------------------------------------------------------------------------------ non-finite stored numbers
@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused_with_file_and_line(tmp_path, bad):
    from seq2seq_zoo.utils import read_json, read_jsonl
    f = tmp_path / "r.json"
    f.write_text('{\n  "a": "NaN text is fine",\n  "b": [1,\n  ' + bad + "]\n}\n")
    with pytest.raises(DamagedFile, match=rf"r\.json:4: .*non-finite"):
        read_json(f, "run record")
    g = tmp_path / "s.jsonl"
    g.write_text('{"id": "a", "rouge1": 1.0}\n{"id": "b", "rouge1": ' + bad + "}\n")
    with pytest.raises(DamagedFile, match=r"s\.jsonl:2: .*non-finite"):
        read_jsonl(g, "per-example scores")


def test_a_record_with_nan_scores_never_reaches_a_table(tmp_path):
    from seq2seq_zoo.results import read_scores
    (tmp_path / "scores.jsonl").write_text('{"_meta": {"metrics": ["rouge1"], "n": 1}}\n{"id": "a", "rouge1": NaN}\n')
    with pytest.raises(DamagedFile, match="scores.jsonl:2"):
        read_scores(tmp_path)


# ------------------------------------------------------------------------------------ schema version
def test_a_record_of_a_newer_schema_is_not_read_as_current():
    from seq2seq_zoo.record_schema import VERSION, problem, version_problem
    assert version_problem({"schema": VERSION}) is None and version_problem({}) is None
    assert "newer" in version_problem({"schema": VERSION + 1})
    for bad in ("1", 0, -1, True, 1.0, None):
        assert version_problem({"schema": bad}), bad
    assert "newer" in problem({"schema": VERSION + 1, "run": "x"})


def test_read_record_names_a_newer_schema(tmp_path):
    import glob
    from seq2seq_zoo.record_schema import VERSION
    from seq2seq_zoo.results import read_record
    src = sorted(glob.glob(str(Path(__file__).parents[1] / "results" / "*" / "*" / "record.json")))[0]
    rec = json.loads(Path(src).read_text())
    rec["schema"] = VERSION + 1
    (tmp_path / "record.json").write_text(json.dumps(rec))
    with pytest.raises(DamagedFile, match="newer seq2seq-zoo"):
        read_record(tmp_path / "record.json")


# ---------------------------------------------------------------------------------------------- names
def test_names_are_measured_in_bytes():
    from seq2seq_zoo.names import NAME_MAX, name_problem
    assert name_problem("é" * (NAME_MAX // 2)) is None
    assert "bytes" in name_problem("é" * (NAME_MAX // 2 + 1))
    assert "bytes" in name_problem("𝒳" * 64)          # 64 characters, 256 bytes: over any filesystem's 255


def test_a_decode_name_made_from_settings_is_cut_in_bytes():
    from seq2seq_zoo.evaluation import parse_variant_arg
    from seq2seq_zoo.names import NAME_MAX
    name, _ = parse_variant_arg("beam_size=2,length_penalty_style=gnmt,length_penalty=0.75,min_len=3,max_len=9,"
                                "no_repeat_ngram=3,repetition_penalty=1.5,method=beam", None)
    assert len(name.encode()) <= NAME_MAX


# ------------------------------------------------------------------------------ planned run folders
EXP = '''[experiment]
name = "t"
dataset = "dialogsum"
seeds = [1, 2]
[defaults]
model = "transformer"
d_model = 8
d_ff = 8
heads = 2
layers = 1
'''


def test_two_runs_planned_into_one_folder_are_refused(tmp_path):
    from seq2seq_zoo.config import load_experiment
    f = tmp_path / "t.toml"
    f.write_text(EXP + '[[runs]]\nname = "a"\n[[runs]]\nname = "a-seed1"\nseeds = [1]\n')
    with pytest.raises(ConfigError, match=r"t\.toml:\d+: runs\[1\]\.name: run folder 'a-seed1' is planned twice"):
        load_experiment(f)
    f.write_text(EXP + '[[runs]]\nname = "a"\n[[runs]]\nname = "a-seed1"\nseeds = [3, 4]\n')
    assert len(load_experiment(f).runs) == 4            # a-seed1-seed3 is another folder


# ------------------------------------------------------------------------------------------ ranges
@pytest.mark.parametrize("key,value", [("decode.beam_size", 10**6), ("decode.max_len", 10**7),
                                       ("data.max_src_len", 10**9), ("train.batch_size", 10**9),
                                       ("train.epochs", 10**9), ("data.vocab_size", 10**12),
                                       ("decode.no_repeat_ngram", -1), ("train.average_last", 10**6)])
def test_every_size_setting_has_an_upper_bound(tmp_path, key, value):
    from seq2seq_zoo.config import load_experiment
    f = tmp_path / "t.toml"
    f.write_text(EXP + f'{key} = {value}\n[[runs]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=rf"{key.split('.')[1]}: {value} must be"):
        load_experiment(f)


def test_tune_and_eval_decode_settings_are_bounded_too():
    from seq2seq_zoo.config.decoding import parse_decode_overrides
    from seq2seq_zoo.evaluation import parse_grid
    with pytest.raises(ConfigError, match="beam_size"):
        parse_decode_overrides("beam_size=100000")
    with pytest.raises(ConfigError, match="beam_size"):
        parse_grid(["beam_size=1,100000"])


# ------------------------------------------------------------------------------------ train_log reader
def test_train_log_reader_leaves_out_a_cut_last_line_and_names_a_damaged_one(tmp_path):
    from seq2seq_zoo.train.runlog import read_log
    logs = tmp_path / "logs"
    logs.mkdir()
    rows = [{"kind": "train", "step": i, "loss": 1.0 / i} for i in (1, 2)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (logs / "train_log.jsonl").write_text(text + '{"kind": "train", "st')         # killed mid-write
    assert read_log(tmp_path, "train") == rows
    (logs / "train_log.jsonl").write_text('{"kind": "train", "st\n' + text)
    with pytest.raises(DamagedFile, match=r"train_log\.jsonl:1"):
        read_log(tmp_path)
    (logs / "train_log.jsonl").write_text(text + '{"kind": "val", "val_loss": NaN}\n')
    with pytest.raises(DamagedFile, match=r"train_log\.jsonl:3"):
        read_log(tmp_path)


# ------------------------------------------------------------------------------------------- power
@pytest.mark.parametrize("findings", [
    '{"claim": "a > b"}',                                                       # not a list
    '[1, 2]',                                                                   # not objects
    '[{"claim": "a > b", "metric": "rouge1"}]',                                 # no verdict
    '[{"claim": "a > b", "metric": "rouge1", "verdict": "holds", "power": 3}]',
    '[{"claim": "a > b", "metric": "rouge1", "verdict": "holds", "power": {"effect": "big", "seed_sd": 1}}]',
    '[{"claim": "a > b", "metric": "rouge1", "verdict": "holds", "n_a": "three"}]',
    '[{"claim": "a > b", "metric": "rouge1", "verdict": "holds", "power": {"effect": NaN, "seed_sd": 1}}]',
])
def test_power_refuses_findings_of_the_wrong_shape(tmp_path, capsys, findings):
    from conftest import run_cli
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "findings.json").write_text(findings)
    assert run_cli(["power", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "findings.json" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "seed_plan.json").exists()


# ------------------------------------------------------------------------------------------- compare
def test_compare_refuses_a_non_finite_or_non_positive_scale():
    from seq2seq_zoo.cli.compare import compare
    for scale in (float("nan"), float("inf"), 0.0, -1.0):
        with pytest.raises(UserError, match="--scale"):
            compare("x:a", "x:b", scale=scale)


# ------------------------------------------------------------------------------------------- not a run
@pytest.mark.parametrize("cmd", [["tune", "{p}", "--grid", "beam_size=1,2"], ["export", "{p}", "{p}/../out"],
                                 ["average", "{p}", "--last", "1"], ["summarize", "{p}", "--file", "{p}/t.txt"]])
def test_a_folder_that_is_not_a_run_is_named_as_such(tmp_path, capsys, cmd):
    from conftest import run_cli
    exp = tmp_path / "exp"
    for r in ("a", "b"):
        (exp / r).mkdir(parents=True)
        (exp / r / "record.json").write_text("{}")
    (exp / "t.txt").write_text("some text")
    assert run_cli([c.format(p=exp) for c in cmd]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "not a run" in err and str(exp / "a") in err and "not committed" not in err
    assert not (tmp_path / "out").exists()
