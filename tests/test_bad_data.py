"""Bad data: malformed, empty, non-UTF-8 and huge rows name their file and line, or are skipped and
counted with data.on_bad; a missing data folder says where it looked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import write_dialogsum
from seq2seq_zoo.cli import main
from seq2seq_zoo.data.corpora import DataError, ReadStats, load_split
from test_crash_safety import corpus, exp_text, one_line, record, trained_anything, write_exp  # noqa: F401  (corpus: a fixture)


def _append_lines(data_root: Path, name: str, lines: list[bytes]) -> tuple[Path, int]:
    """Append raw lines to dialogsum.<name>.jsonl; returns the file and the first new line's number."""
    p = data_root / "dialogsum" / f"dialogsum.{name}.jsonl"
    old = p.read_bytes()
    p.write_bytes(old + b"".join(x + b"\n" for x in lines))
    return p, old.count(b"\n") + 1


def _row(dialogue="#Person1#: hi there.\n#Person2#: hello.", summary="they greet.", fname="extra"):
    return json.dumps({"fname": fname, "dialogue": dialogue, "summary": summary}).encode()


NON_UTF8 = b'{"fname": "bad", "dialogue": "#Person1#: caf\xe9 \xff\xfe ok", "summary": "s"}'


def assert_cli_rejects_data(tmp_path, root, capsys, needles, run_extra=""):
    """`zoo run` on corpus ``root`` exits 2 with one stderr line holding every needle, training nothing."""
    toml = write_exp(tmp_path / "e.toml", exp_text("d", run_extra=run_extra))
    rc = main(["run", str(toml), "--results", str(tmp_path / "R"), "--no-progress", "--data-dir", str(root)])
    assert rc == 2
    msg = one_line(capsys.readouterr().err)
    assert all(nd in msg for nd in needles), msg
    assert trained_anything(tmp_path / "R") == []


def assert_reader_rejects_then_skips(root, where: str) -> None:
    """The reader names ``file:line`` by default, and with on_bad = "skip" skips (and counts) that one row."""
    with pytest.raises(DataError) as e:
        load_split("dialogsum", root, "train")
    assert where in str(e.value)
    st = ReadStats()
    assert len(load_split("dialogsum", root, "train", "skip", st)) == 8 and sum(st.skipped.values()) == 1


def test_malformed_json_line_names_file_and_line(tmp_path, capsys):
    root = write_dialogsum(tmp_path / "data", n_train=8)
    p, n = _append_lines(root, "train", [b'{"fname": "x", "dialogue": "hi", "summary": '])
    assert_reader_rejects_then_skips(root, f"{p}:{n}")
    # through the CLI
    assert_cli_rejects_data(tmp_path, root, capsys, [f"{p}:{n}"])


def test_missing_field_names_file_line_and_field(tmp_path, capsys):
    root = write_dialogsum(tmp_path / "data", n_train=8)
    p, n = _append_lines(root, "train", [json.dumps({"fname": "x", "dialogue": "#Person1#: hi."}).encode()])
    with pytest.raises(DataError) as e:
        load_split("dialogsum", root, "train")
    assert f"{p}:{n}" in str(e.value) and "summary" in str(e.value)
    assert_cli_rejects_data(tmp_path, root, capsys, [f"{p}:{n}", "summary"])


@pytest.mark.parametrize("bad", ["dialogue", "summary"])
def test_empty_dialogue_or_summary_skipped_by_default_error_with_on_bad_error(tmp_path, capsys, bad):
    root = write_dialogsum(tmp_path / "data", n_train=8)
    row = _row(dialogue="   " if bad == "dialogue" else "#Person1#: hi.", summary="" if bad == "summary" else "s")
    p, n = _append_lines(root, "train", [row])
    st = ReadStats()
    assert len(load_split("dialogsum", root, "train", stats=st)) == 8
    assert sum(st.skipped.values()) == 1
    with pytest.raises(DataError) as e:
        load_split("dialogsum", root, "train", "error")
    assert f"{p}:{n}" in str(e.value)
    assert_cli_rejects_data(tmp_path, root, capsys, [f"{p}:{n}"], run_extra='data.on_bad = "error"\n')


def test_non_utf8_bytes_error_names_file_line_or_skipped_with_skip(tmp_path, capsys):
    root = write_dialogsum(tmp_path / "data", n_train=8)
    p, n = _append_lines(root, "train", [NON_UTF8])
    assert_reader_rejects_then_skips(root, f"{p}:{n}")
    assert_cli_rejects_data(tmp_path, root, capsys, [f"{p}:{n}"])


def test_gigaword_non_utf8_names_the_file_that_holds_the_bytes(tmp_path):
    d = tmp_path / "gigaword"
    d.mkdir()
    (d / "train.article.txt").write_bytes(b"an article .\nanother article .\n")
    (d / "train.title.txt").write_bytes(b"a title\nbad \xff title\n")
    with pytest.raises(DataError) as e:
        load_split("gigaword", tmp_path, "train")
    assert f"{d / 'train.title.txt'}:2" in str(e.value)


@pytest.fixture(scope="module")
def messy_runs(corpus, tmp_path_factory):
    """Two in-process `zoo run`s on corpora with bad rows:
    default policy: an empty dialogue and an empty summary in train, plus a 1 MB single-line dialogue in
    train and test; on_bad = "skip": a non-UTF-8 line and a malformed line in train."""
    tmp = tmp_path_factory.mktemp("messy")
    huge = "#Person1#: " + ("hello amy I want to buy a red car. " * 30_000)[:1_000_000]
    d1 = write_dialogsum(tmp / "d1", n_train=32, n_dev=4, n_test=3)
    _append_lines(d1, "train", [_row(dialogue="", fname="e1"), _row(summary=" ", fname="e2"),
                                _row(dialogue=huge, summary="amy buys a red car.", fname="huge")])
    _append_lines(d1, "test", [json.dumps({"fname": "huge_test", "dialogue": huge, "summary1": "a car.",
                                           "summary2": "a red car.", "summary3": "car."}).encode()])
    d2 = write_dialogsum(tmp / "d2", n_train=32, n_dev=4, n_test=3)
    _append_lines(d2, "train", [NON_UTF8, b"{not json"])
    out = {}
    threads = torch.get_num_threads()
    for tag, data, extra in (("default", d1, ""), ("skip", d2, 'data.on_bad = "skip"\n')):
        toml = write_exp(tmp / f"{tag}.toml", exp_text(f"messy_{tag}", ["a"], run_extra=extra))
        R = tmp / f"R_{tag}"
        rc = main(["run", str(toml), "--results", str(R), "--no-progress", "--data-dir", str(data)])
        out[tag] = (rc, R)
    torch.set_num_threads(threads)
    return out


def test_empty_rows_skipped_and_counted_in_record(messy_runs):
    rc, R = messy_runs["default"]
    assert rc == 0
    rec = record(R, "messy_default")
    assert rec["data"]["sizes"]["train"] == 33
    skipped = rec["data"]["skipped"]
    assert sum(skipped["train"].values()) == 2, skipped


def test_non_utf8_and_malformed_lines_skipped_and_counted_with_on_bad_skip(messy_runs):
    rc, R = messy_runs["skip"]
    assert rc == 0
    rec = record(R, "messy_skip")
    assert rec["data"]["sizes"]["train"] == 32
    assert sum(rec["data"]["skipped"]["train"].values()) == 2, rec["data"]["skipped"]


def test_one_megabyte_single_line_dialogue_trains_truncated(messy_runs):
    rc, R = messy_runs["default"]
    assert rc == 0
    rec = record(R, "messy_default")
    assert rec["status"] == "done" and rec["data"]["sizes"]["test"] == 4
    assert rec["data"]["src_tokens_mean"] <= 64
    rows = [json.loads(x) for x in (R / "messy_default" / "a" / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows][-1] == "huge_test" and isinstance(rows[-1]["prediction"], str)
    assert all(h["train_loss"] == h["train_loss"] for h in rec["train"]["history"])  # not NaN


def test_missing_data_directory_says_where_it_looked_and_how_to_get_it(corpus, tmp_path, capsys):
    _, _, toml = corpus
    missing = tmp_path / "nowhere"
    rc = main(["run", str(toml), "--results", str(tmp_path / "R"), "--no-progress", "--data-dir", str(missing)])
    assert rc == 2
    msg = one_line(capsys.readouterr().err)
    assert str(missing / "dialogsum") in msg and "zoo data download" in msg
    assert trained_anything(tmp_path / "R") == []
