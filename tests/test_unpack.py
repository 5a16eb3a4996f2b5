"""tools/remote_batch.py unpack: runs are found by their run-level record only, an archive of another layout
or cut short changes nothing, and a run that is replaced (--force) stays until the new one is in place."""
from __future__ import annotations

import io
import json
import tarfile

import pytest

from conftest import load_tool

tool = load_tool("remote_batch")


def _archive(path, files: dict[str, bytes | str], links: dict[str, str] | None = None):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def _run_files(exp="dsum", run="strong-seed1", tag="new") -> dict[str, str]:
    """What `go` packs for a run with two decoding variants (every dialogsum_transformer run has them)."""
    base = f"res/{exp}/{run}"
    return {f"{base}/record.json": json.dumps({"run": run, "tag": tag}),
            f"{base}/predictions.jsonl": f'{{"id": "1", "tag": "{tag}"}}\n',
            f"{base}/scores.jsonl": "{}\n",
            f"{base}/decodes/greedy/record.json": json.dumps({"kind": "decode", "decode_name": "greedy", "tag": tag}),
            f"{base}/decodes/greedy/predictions.jsonl": "{}\n",
            f"{base}/decodes/beam8/record.json": json.dumps({"kind": "decode", "decode_name": "beam8", "tag": tag}),
            f"res/{exp}/README.md": "# dsum\n", f"res/{exp}/plots/scores.png": "png", "res/FINDINGS.md": "# F\n",
            f"logs/run_{run}.log": "done\n"}


def _unpack(tgz, results, *extra) -> int:
    return tool.main(["unpack", str(tgz), "--results", str(results), *extra])


def test_runs_with_decode_variants_round_trip_and_force_keeps_them(tmp_path, capsys):
    results = tmp_path / "results"
    tgz = _archive(tmp_path / "a.tgz", _run_files(tag="first"))
    assert _unpack(tgz, results) == 0, capsys.readouterr().err
    run = results / "dsum" / "strong-seed1"
    assert json.loads((run / "record.json").read_text())["tag"] == "first"
    assert json.loads((run / "decodes" / "beam8" / "record.json").read_text())["decode_name"] == "beam8"
    out = capsys.readouterr().out
    assert "unpacked 1 finished run(s)" in out and "dsum/strong-seed1" in out
    assert not (results / "dsum" / "README.md").exists() and not (results / "dsum" / "plots").exists()
    assert (results / "dsum" / "logs" / "run_strong-seed1.log").read_text() == "done\n"

    (run / "NOTES.local").write_text("kept until replaced")
    assert _unpack(tgz, results) == 2                       # already there: refused, nothing touched
    assert "already there" in capsys.readouterr().err
    assert (run / "NOTES.local").is_file()

    tgz2 = _archive(tmp_path / "b.tgz", _run_files(tag="second"))
    assert _unpack(tgz2, results, "--force") == 0
    out = capsys.readouterr().out
    assert "replaced" in out and "dsum/strong-seed1" in out.split("replaced")[1]
    # the whole run is there, the new one: record, predictions, scores and both variants
    assert json.loads((run / "record.json").read_text())["tag"] == "second"
    assert (run / "predictions.jsonl").is_file() and (run / "scores.jsonl").is_file()
    assert json.loads((run / "decodes" / "greedy" / "record.json").read_text())["tag"] == "second"
    assert (run / "decodes" / "beam8" / "record.json").is_file()
    assert not (run / "NOTES.local").exists()
    assert sorted(p.name for p in (results / "dsum").iterdir()) == ["logs", "strong-seed1"]   # no temp folder left


@pytest.mark.parametrize("member", ["notes/x.txt", "x.json", "logs/sub/x.log", "res/dsum/.hidden/record.json",
                                    "res/dsum/a b/record.json", "res/../x/record.json", "res/dsum/../../x"])
def test_an_unknown_layout_changes_nothing_and_names_the_member(tmp_path, capsys, member):
    results = tmp_path / "results"
    tgz = _archive(tmp_path / "a.tgz", {**_run_files(), member: "x"})
    assert _unpack(tgz, results, "--force") == 2
    err = capsys.readouterr().err
    assert member in err and "\n" not in err.strip() and "Traceback" not in err
    assert not results.exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.95])
def test_a_cut_archive_leaves_the_run_there_as_it_was(tmp_path, capsys, cut):
    results = tmp_path / "results"
    assert _unpack(_archive(tmp_path / "a.tgz", _run_files(tag="first")), results) == 0
    big = {**_run_files(tag="second"), "res/dsum/strong-seed1/attention.json": "0" * 50000}
    whole = _archive(tmp_path / "b.tgz", big).read_bytes()
    (tmp_path / "cut.tgz").write_bytes(whole[: int(len(whole) * cut)])
    capsys.readouterr()
    assert _unpack(tmp_path / "cut.tgz", results, "--force") == 2
    err = capsys.readouterr().err
    assert "cut.tgz" in err and "nothing was unpacked" in err and "Traceback" not in err
    run = results / "dsum" / "strong-seed1"
    assert json.loads((run / "record.json").read_text())["tag"] == "first"
    assert (run / "decodes" / "beam8" / "record.json").is_file()
    assert sorted(p.name for p in (results / "dsum").iterdir()) == ["logs", "strong-seed1"]


@pytest.mark.parametrize("content", [b"", b"not an archive at all", b"\x1f\x8b\x08\x00garbage"])
def test_not_an_archive_is_one_line(tmp_path, capsys, content):
    (tmp_path / "x.tgz").write_bytes(content)
    assert _unpack(tmp_path / "x.tgz", tmp_path / "results") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("remote_batch: error:") and "\n" not in err and "x.tgz" in err
    assert not (tmp_path / "results").exists()


def test_links_are_skipped_and_unfinished_runs_named(tmp_path, capsys):
    files = {**_run_files(), "res/dsum/stopped-seed2/train.log": "stopped\n"}
    tgz = _archive(tmp_path / "a.tgz", files, links={"res/dsum/strong-seed1/evil": "/etc/passwd"})
    assert _unpack(tgz, tmp_path / "results") == 0
    out = capsys.readouterr().out
    assert "dsum/stopped-seed2" in out and "skipped" in out
    assert not (tmp_path / "results" / "dsum" / "strong-seed1" / "evil").exists()
    assert not (tmp_path / "results" / "dsum" / "stopped-seed2").exists()
