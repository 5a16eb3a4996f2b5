"""Names are names: experiment, run, decoding-variant and archive member names obey one rule, and every writer
checks that what it writes resolves inside its results folder before writing anything."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import write_dialogsum
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import ConfigError, UnsafePath, UserError
from seq2seq_zoo.names import NAME_MAX, inside, name_problem, run_group
from test_crash_safety import exp_text, main_captured, one_line, write_exp

BAD = ["..", ".", ".hidden", "a/b", "a\\b", "/abs", "", "x" * (NAME_MAX + 1), "a b", "a\0b"]


@pytest.mark.parametrize("name", BAD)
def test_the_rule_refuses_paths_and_odd_names(name):
    assert name_problem(name)


@pytest.mark.parametrize("name", ["a", "dsum-pg-cov_seed2", "beam8.lp1", "x" * NAME_MAX, "résumé", "1"])
def test_the_rule_takes_plain_names(name):
    assert name_problem(name) is None


@pytest.mark.parametrize("run, seed, group", [
    ("pg-seed2", 2, "pg"), ("pg-cov-seed12", 12, "pg-cov"), ("pg", 1, "pg"),
    ("pg-seed2", 3, "pg-seed2"),             # another seed's suffix is part of the name
    ("a-seed1-seed1", 1, "a-seed1"),         # one suffix, at the end only
    ("seed1", 1, "seed1"), ("x-seed10", 1, "x-seed10")])
def test_run_group_drops_the_runs_own_seed_suffix_only(run, seed, group):
    assert run_group(run, seed) == group


def test_inside_refuses_what_resolves_elsewhere(tmp_path):
    (tmp_path / "R").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "R" / "link").symlink_to(tmp_path / "elsewhere")
    assert inside(tmp_path / "R", "exp", "run") == tmp_path / "R" / "exp" / "run"
    for parts in [("..",), ("exp", "..", ".."), ("link",), ("link", "run"), ("/etc",)]:
        with pytest.raises(UnsafePath, match="outside"):
            inside(tmp_path / "R", *parts)


@pytest.mark.parametrize("where,entry", [
    ("experiment.name", '[experiment]\nname = "{bad}"\n'),
    ("runs[0].name", '[experiment]\nname = "e"\n[[runs]]\nname = "{bad}"\n'),
    ("decode[0].name", '[experiment]\nname = "e"\n[[runs]]\nname = "a"\n[[decode]]\nname = "{bad}"\nbeam_size = 1\n'),
])
@pytest.mark.parametrize("bad", ["..", ".", ".x", "a/b", "x" * (NAME_MAX + 1)])
def test_experiment_file_names_are_checked_by_the_rule(tmp_path, where, entry, bad):
    f = tmp_path / "e.toml"
    f.write_text(entry.format(bad=bad) + '[defaults]\nmodel = "transformer"\ndata.dataset = "dialogsum"\n',
                 encoding="utf-8")
    with pytest.raises(ConfigError, match=r"e\.toml.*" + where.replace("[", r"\[").replace("]", r"\]")):
        load_experiment(f)


def test_a_grid_value_cannot_make_a_path_of_a_run_name(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text('[experiment]\nname = "e"\ndataset = "dialogsum"\n[defaults]\nmodel = "transformer"\n'
                 '[grid]\n"data.options.x" = ["/../../x"]\n[[runs]]\nname = "a"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="runs\\[0\\].name"):
        load_experiment(f)


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A finished tiny run `names/a` and its data."""
    tmp = tmp_path_factory.mktemp("names")
    data = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = write_exp(tmp / "names.toml", exp_text("names", ["a"]).replace("epochs = 3", "epochs = 1"))
    R = tmp / "R"
    d = main_captured(["run", toml, "--results", R, "--no-progress", "--data-dir", data])
    assert d.rc == 0, d.err
    return tmp, data, R


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["..", ".", "../../x", ".hidden"])
def test_eval_decode_name_that_is_a_path_writes_nothing(done, tmp_path, name):
    tmp, data, R = done
    R2 = tmp_path / "R"
    shutil.copytree(R, R2)
    before = _snapshot(tmp_path)
    d = main_captured(["eval", R2 / "names" / "a", "--decode", "beam_size=1", "--name", name, "--data-dir", data,
                       "--no-progress"])
    assert d.rc == 2
    assert "--name" in one_line(d.err)
    assert _snapshot(tmp_path) == before      # the run's own record, predictions and scores untouched


def test_run_decodes_checks_names_before_reading_anything(done, tmp_path):
    from seq2seq_zoo.evaluation import run_decodes
    with pytest.raises(ConfigError, match="decode name"):
        run_decodes(tmp_path / "no-run", [("..", {"beam_size": 1})])


def test_runner_refuses_a_run_folder_outside_its_experiment(done, tmp_path):
    from seq2seq_zoo.runner import run
    tmp, data, R = done
    spec = load_experiment(tmp / "names.toml").runs[0]
    (tmp_path / "exp").mkdir()
    with pytest.raises(UnsafePath):
        run(spec, tmp_path / "exp" / "..", data_dir=str(data), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


def test_zoo_run_refuses_an_experiment_folder_linked_outside_results(done, tmp_path):
    tmp, data, R = done
    (tmp_path / "R").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "R" / "names").symlink_to(tmp_path / "outside")
    d = main_captured(["run", tmp / "names.toml", "--results", tmp_path / "R", "--no-progress", "--data-dir", data])
    assert d.rc == 2 and "outside" in one_line(d.err)
    assert not any((tmp_path / "outside").iterdir())


def test_report_leaves_out_a_record_whose_run_name_is_a_path(done, tmp_path, capsys):
    tmp, data, R = done
    R2 = tmp_path / "R"
    shutil.copytree(R, R2)
    shutil.copytree(R2 / "names" / "a", R2 / "names" / "b")
    rec_path = R2 / "names" / "b" / "record.json"
    rec = json.loads(rec_path.read_text())
    rec["run"] = "../../../escaped"
    rec_path.write_text(json.dumps(rec))
    d = main_captured(["report", "--results", R2])
    assert d.rc == 2 and "record.json" in one_line(d.err) and "'run'" in d.err
    assert (R2 / "names" / "README.md").is_file()
    assert not list(tmp_path.rglob("*escaped*"))


def test_unsafe_path_is_a_user_error():
    assert issubclass(UnsafePath, UserError)


def test_report_refuses_a_plots_folder_linked_outside_the_experiment(done, tmp_path):
    tmp, data, R = done
    R2 = tmp_path / "R"
    shutil.copytree(R, R2)
    shutil.rmtree(R2 / "names" / "plots", ignore_errors=True)
    (tmp_path / "outside").mkdir()
    (R2 / "names" / "plots").symlink_to(tmp_path / "outside")
    d = main_captured(["report", "--results", R2])
    assert d.rc == 2 and "outside" in one_line(d.err)
    assert not any((tmp_path / "outside").iterdir())
