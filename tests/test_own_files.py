"""Files the suite wrote itself are checked again when read: ids unique, scores.jsonl whole and of the same
examples as predictions.jsonl, reference lists not empty, the JSON side files of the right shape. A damaged
run is named and left out; the rest of the report is built."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import write_dialogsum
from seq2seq_zoo.errors import DamagedFile
from seq2seq_zoo.results import check_run_files, read_checked, read_predictions, read_scores
from test_crash_safety import exp_text, main_captured, one_line, write_exp

pytestmark = pytest.mark.usefixtures("figures_not_rendered")   # the checks read tables, not figures


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """Experiment `own`: two tiny trained runs `a` and `b` (one epoch), in results folder R, without their
    report: each test's own ``zoo report`` writes the tables and README it checks."""
    tmp = tmp_path_factory.mktemp("own")
    data = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    toml = write_exp(tmp / "own.toml", exp_text("own", ["a", "b"]).replace("epochs = 3", "epochs = 1"))
    R = tmp / "R"
    d = main_captured(["run", toml, "--results", R, "--no-progress", "--data-dir", data, "--no-report"])
    assert d.rc == 0, d.err
    assert not (R / "own" / "table.csv").exists()
    return R


@pytest.fixture
def R(done, tmp_path) -> Path:
    return Path(shutil.copytree(done, tmp_path / "R"))


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _report_leaves_out(R: Path, file: Path, *words) -> None:
    d = main_captured(["report", "--results", R])
    assert d.rc == 2
    line = one_line(d.err)
    assert str(file) in line and all(w in line for w in words), line
    table = (R / "own" / "table.csv").read_text()
    assert "a," not in table.split("\n", 1)[1] or file.parent.name != "a"
    assert (R / "own" / "README.md").is_file()


def test_duplicate_ids_in_predictions_are_refused_naming_file_and_id(R):
    p = R / "own" / "a" / "predictions.jsonl"
    rows = _rows(p)
    rows[1]["id"] = rows[0]["id"]
    _write(p, rows)
    with pytest.raises(DamagedFile, match=f"id {rows[0]['id']!r} appears twice"):
        read_predictions(p.parent)
    _report_leaves_out(R, p, "twice")


def test_an_empty_reference_list_is_refused_when_read(R):
    p = R / "own" / "a" / "predictions.jsonl"
    rows = _rows(p)
    rows[2]["references"] = []
    _write(p, rows)
    with pytest.raises(DamagedFile, match=r"row 3 .* no reference"):
        read_predictions(p.parent)
    d = main_captured(["eval", p.parent, "--metrics", "rouge"])   # before: a numpy traceback
    assert d.rc == 2 and "no reference" in one_line(d.err)


def test_scores_cut_short_with_a_whole_header_are_refused(R):
    p = R / "own" / "a" / "scores.jsonl"
    lines = p.read_text().splitlines()
    assert json.loads(lines[0])["_meta"]["n"] == len(lines) - 1 == 3
    p.write_text("\n".join(lines[:-1]) + "\n")   # the last example gone: the header still says n = 3
    with pytest.raises(DamagedFile, match="n = 3.*2 rows"):
        read_scores(p.parent)
    _report_leaves_out(R, p, "n = 3")


def test_scores_of_other_examples_than_the_predictions_are_refused(R):
    p = R / "own" / "b" / "scores.jsonl"
    lines = p.read_text().splitlines()
    row = json.loads(lines[1])
    row["id"] = "not-a-test-id"
    lines[1] = json.dumps(row)
    p.write_text("\n".join(lines) + "\n")
    read_scores(p.parent)                       # whole by itself
    with pytest.raises(DamagedFile, match="not-a-test-id"):
        check_run_files(p.parent)
    _report_leaves_out(R, p, "predictions.jsonl")


def test_duplicate_ids_in_scores_are_refused(R):
    p = R / "own" / "a" / "scores.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines + [lines[-1]]) + "\n")
    with pytest.raises(DamagedFile, match="twice"):
        read_scores(p.parent)


@pytest.mark.parametrize("name,bad,words", [
    ("attention.json", {"example_id": "x", "source_tokens": ["a"], "output_tokens": ["b"], "maps": {"m": [[1, "x"]]}},
     "['maps']['m'][0][1]"),
    ("attention.json", {"example_id": "x"}, "source_tokens"),
    ("positional.json", {"encoder.pe": "table"}, "['encoder.pe']"),
    ("positional.json", [], "top level"),
    ("positional.json", {"format": "lean-1", "table": "encoder.pe", "tables": {"encoder.pe": [[0.1, None]]}},
     "['tables']['encoder.pe'][0][1]"),
    ("examples.json", {"examples": [{"split": "test"}]}, "['examples'][0]"),
])
def test_side_files_of_the_wrong_shape_leave_their_run_out_naming_the_file(R, name, bad, words):
    p = R / "own" / "a" / name
    assert p.is_file() or name == "examples.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(DamagedFile) as e:
        read_checked(p)
    assert str(p) in str(e.value) and words in str(e.value) and "\n" not in str(e.value)
    _report_leaves_out(R, p, words)

