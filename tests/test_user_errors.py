"""No traceback on a user's mistake: each case answers with exit status 2 and one line naming what is wrong
(file, line, key) and what to do."""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from conftest import write_dialogsum
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import ConfigError, DataError
from test_crash_safety import exp_text, main_captured, one_line, write_exp

LEAD = '\n[[runs]]\nname = "lead3"\nmodel = "lead"\n'


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """Experiment `ue`: a tiny trained run `a` (one epoch) and the LEAD baseline `lead3`, in results folder R."""
    tmp = tmp_path_factory.mktemp("ue")
    data = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = write_exp(tmp / "ue.toml", exp_text("ue", ["a"]).replace("epochs = 3", "epochs = 1") + LEAD)
    R = tmp / "R"
    d = main_captured(["run", toml, "--results", R, "--no-progress", "--data-dir", data])
    assert d.rc == 0, d.err
    return tmp, data, toml, R


def _copy(R: Path, dst: Path) -> Path:
    shutil.copytree(R, dst)
    return dst


# ------------------------------------------------------------------------------------- read-only folders
@pytest.fixture
def read_only(monkeypatch):
    """Make every folder under the returned list's paths refuse writes as a read-only mount does (EROFS);
    the tests run as root too, where chmod would not stop a write."""
    roots: list[Path] = []

    def blocked(path) -> bool:
        try:
            p = Path(os.fsdecode(path)).absolute()
        except TypeError:
            return False
        return any(p == r or r in p.parents for r in roots)

    def deny(path):
        raise PermissionError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir
    real_replace, real_unlink, real_rename = os.replace, os.unlink, os.rename

    def fake_open(file, mode="r", *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") and blocked(file):
            deny(file)
        return real_open(file, mode, *a, **k)

    def fake_os_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and blocked(path):
            deny(path)
        return real_os_open(path, flags, *a, **k)

    def guard(real):
        def f(path, *a, **k):
            if blocked(path):
                deny(path)
            return real(path, *a, **k)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(os, "mkdir", guard(real_mkdir))
    monkeypatch.setattr(os, "replace", guard(real_replace))
    monkeypatch.setattr(os, "rename", guard(real_rename))
    monkeypatch.setattr(os, "unlink", guard(real_unlink))
    return roots


def error_line(err: str) -> str:
    """The one error line of a command whose other stderr lines are progress (zoo eval's decode log)."""
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("cmd", ["run", "report", "eval"])
def test_read_only_results_folder_is_one_line(done, tmp_path, read_only, cmd):
    tmp, data, toml, R = done
    R2 = _copy(R, tmp_path / "R")
    before = _tree(R2)
    read_only.append(R2.absolute())
    if cmd == "run":
        other = write_exp(tmp_path / "ue2.toml", toml.read_text().replace('name = "ue"', 'name = "ue2"'))
        d = main_captured(["run", other, "--results", R2, "--no-progress", "--data-dir", data])
    elif cmd == "report":
        d = main_captured(["report", "--results", R2])
    else:
        d = main_captured(["eval", R2 / "ue" / "a", "--decode", "beam_size=1", "--name", "b1", "--data-dir", data,
                           "--no-progress"])
    assert d.rc == 2, d.err
    line = error_line(d.err)
    assert str(R2) in line and ("read-only" in line.lower() or "writ" in line)
    assert _tree(R2) == before


# ------------------------------------------------------------------------------ wrong shapes in sibling files
def test_a_sibling_findings_file_of_the_wrong_shape_is_named_and_the_rest_reported(done, tmp_path):
    tmp, data, toml, R = done
    R2 = _copy(R, tmp_path / "R")
    (R2 / "other").mkdir()
    (R2 / "other" / "findings.json").write_text(json.dumps({"claim": "not a list"}))
    d = main_captured(["report", "--results", R2])
    assert d.rc == 2
    assert "findings.json" in one_line(d.err) and "other" in d.err
    assert (R2 / "ue" / "README.md").is_file() and (R2 / "FINDINGS.md").is_file()


def test_an_experiment_copy_of_the_wrong_shape_is_named(done, tmp_path):
    tmp, data, toml, R = done
    R2 = _copy(R, tmp_path / "R")
    (R2 / "ue" / "experiment.json").write_text(json.dumps({"experiment": "ue", "findings": 5}))
    d = main_captured(["report", "--results", R2])
    assert d.rc == 2 and "experiment.json" in one_line(d.err) and "findings" in d.err
    assert (R2 / "ue" / "table.md").is_file()


@pytest.mark.parametrize("shape", [[1, 2], {"seed": "one"}, "text"])
def test_same_as_source_record_of_the_wrong_shape_is_one_line(done, tmp_path, shape):
    tmp, data, toml, R = done
    R2 = _copy(R, tmp_path / "R")
    (R2 / "ue" / "a" / "record.json").write_text(json.dumps(shape))
    t = write_exp(tmp_path / "re.toml", exp_text("re", ["b"], run_extra='same_as = "ue/a"\n')
                  .replace("epochs = 3", "epochs = 1"))
    d = main_captured(["run", t, "--results", R2, "--no-progress", "--data-dir", data])
    assert d.rc == 2
    assert "ue/a/record.json" in one_line(d.err)


# ------------------------------------------------------------------------------------------- init_from
@pytest.mark.parametrize("content", ["json", "state", "text"])
def test_init_from_a_file_that_is_no_checkpoint_stops_before_training(done, tmp_path, content):
    tmp, data, toml, R = done
    f = tmp_path / "init.pt"
    if content == "json":
        f = R / "ue" / "a" / "record.json"
    elif content == "state":
        torch.save({"model": 5}, f)
    else:
        f.write_text("not a checkpoint")
    t = write_exp(tmp_path / "ft.toml", exp_text("ft", ["b"], run_extra=f'train.init_from = "{f}"\n'))
    d = main_captured(["run", t, "--results", tmp_path / "R", "--no-progress", "--data-dir", data])
    assert d.rc == 2
    assert "init_from" in one_line(d.err) and str(f) in d.err
    assert not list((tmp_path / "R").rglob("*.pt"))


# ---------------------------------------------------------------------------------------------- seeds
@pytest.mark.parametrize("seeds,words", [("[-1]", "0 to"), ("[1, 2, 1]", "twice"), (str(list(range(101))), "at most"),
                                         ("[4294967296]", "0 to"), ("[true]", "integer")])
def test_seeds_are_checked_before_any_model_is_built(tmp_path, monkeypatch, seeds, words):
    import seq2seq_zoo.config.load as config
    monkeypatch.setattr(config, "_try_build", lambda *a, **k: pytest.fail("a model was built"))
    t = write_exp(tmp_path / "s.toml", exp_text("s", ["a"]).replace("seeds = [1]", f"seeds = {seeds}"))
    with pytest.raises(ConfigError, match=words) as e:
        load_experiment(t)
    assert "experiment.seeds" in str(e.value) and "s.toml:" in str(e.value)


def test_a_run_seed_is_checked_too(tmp_path):
    t = write_exp(tmp_path / "s.toml", exp_text("s", ["a"], run_extra="seed = -5\n"))
    with pytest.raises(ConfigError, match=r"runs\[0\]\.seed.*0 to"):
        load_experiment(t)


# ----------------------------------------------------------------------------------- data options, corpora
def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _files(tmp_path, rows) -> list[str]:
    f = _jsonl(tmp_path / "c.jsonl", rows)
    return [f"--option={s}={f}" for s in ("train", "validation", "test")]


@pytest.mark.parametrize("opt,words", [("target=5", "target"), ("source=[1, 2]", "source"), ("id=true", "id"),
                                       ("encoding=klingon", "klingon")])
def test_data_info_option_types_are_checked_like_the_experiment_files(tmp_path, opt, words):
    files = _files(tmp_path, [{"text": "a b", "summary": "a"}])
    base = {"source": "text", "target": "summary"}
    key = opt.split("=")[0]
    rest = [f"--option={k}={v}" for k, v in base.items() if k != key]
    d = main_captured(["data", "info", "jsonl", *files, *rest, f"--option={opt}"])
    assert d.rc == 2
    line = one_line(d.err)
    assert words in line and "data option" in line


def test_experiment_file_with_an_unknown_encoding_names_the_key(tmp_path):
    f = _jsonl(tmp_path / "c.jsonl", [{"text": "a b", "summary": "a"}])
    t = write_exp(tmp_path / "e.toml", exp_text("e", ["a"]).replace('dataset = "dialogsum"', 'dataset = "jsonl"')
                  + f'\n[runs.data.options]\ntrain = "{f}"\nvalidation = "{f}"\ntest = "{f}"\nsource = "text"\n'
                  'target = "summary"\nencoding = "klingon"\n')
    with pytest.raises(ConfigError, match=r"e\.toml:\d+: .*encoding.*klingon"):
        load_experiment(t)


def _read(tmp_path, rows, on_bad="skip_empty", **opts):
    from seq2seq_zoo.data.corpora import ReadStats
    from seq2seq_zoo.data.custom import jsonl
    f = rows if isinstance(rows, Path) else _jsonl(tmp_path / "c.jsonl", rows)
    st = ReadStats()
    out = jsonl(tmp_path, "train", on_bad, st, train=str(f), source="text", target=opts.pop("target", "summary"),
                **opts)
    return out, st


@pytest.mark.parametrize("row,field", [({"text": 5, "summary": "s"}, "'text' is a int"),
                                       ({"text": "t", "summary": {"a": 1}}, "'summary' holds a dict"),
                                       ({"text": "t", "summary": ["s", 3]}, "'summary' holds a int"),
                                       ({"text": ["t"], "summary": "s"}, "'text' is a list")])
def test_wrong_json_types_in_a_corpus_name_file_line_and_field(tmp_path, row, field):
    rows = [{"text": "fine text", "summary": "fine"}, row]
    with pytest.raises(DataError, match=r"c\.jsonl:2: field " + field):
        _read(tmp_path, rows)
    out, st = _read(tmp_path, rows, on_bad="skip")   # counted and reported, not silently empty
    assert len(out) == 1 and st.skipped == {"field of the wrong type": 1}


def test_null_and_empty_fields_are_still_the_empty_case(tmp_path):
    out, st = _read(tmp_path, [{"text": "t", "summary": None}, {"text": "", "summary": "s"}, {"text": "t", "summary": "s"}])
    assert len(out) == 1 and sum(st.skipped.values()) == 2


def test_non_utf8_corpus_suggests_the_encoding_option(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_bytes(json.dumps({"text": "caf\u00e9", "summary": "s"}, ensure_ascii=False).encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=r"c\.jsonl:1: bytes that are not utf-8.*data\.options\.encoding"):
        _read(tmp_path, f)
    out, _ = _read(tmp_path, f, encoding="latin-1")
    assert out[0].source == "caf\u00e9"


def test_unknown_encoding_read_directly_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="unknown text encoding 'klingon'"):
        _read(tmp_path, [{"text": "t", "summary": "s"}], encoding="klingon")


def test_duplicate_ids_in_a_split_name_the_file_and_the_id(tmp_path):
    from seq2seq_zoo.data.splits import select_splits
    f = _jsonl(tmp_path / "c.jsonl", [{"i": "x1", "text": "a b", "summary": "a"}, {"i": "x2", "text": "c", "summary": "c"},
                                      {"i": "x1", "text": "d e", "summary": "d"}])
    t = write_exp(tmp_path / "e.toml", exp_text("e", ["a"]).replace('dataset = "dialogsum"', 'dataset = "jsonl"')
                  + f'\n[runs.data.options]\ntrain = "{f}"\nvalidation = "{f}"\ntest = "{f}"\nsource = "text"\n'
                  'target = "summary"\nid = "i"\n')
    spec = load_experiment(t).runs[0]
    with pytest.raises(DataError, match=r"c\.jsonl: id 'x1' appears twice in the train split"):
        select_splits(spec, tmp_path)


# ------------------------------------------------------------------------------------------- summarize
def test_summarize_on_a_baseline_says_what_the_run_is(done, tmp_path):
    tmp, data, toml, R = done
    f = tmp_path / "t.txt"
    f.write_text("#Person1#: Hello. #Person2#: Hi.")
    d = main_captured(["summarize", R / "ue" / "lead3", "--file", f])
    assert d.rc == 2
    line = one_line(d.err)
    assert "baseline" in line and "lead3" in line and "train" not in line.split("baseline")[0]
