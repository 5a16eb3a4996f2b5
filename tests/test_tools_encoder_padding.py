"""tools/encoder_padding.py: times the unpacked encoder against the packed run on a run's own batches."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_tool, write_dialogsum

def write_toml(path: Path, model: str) -> Path:
    path.write_text(f"""
[experiment]
name = "pad"
dataset = "dialogsum"
seeds = [1]

[defaults]
model = "{model}"
data.max_src_len = 40
data.max_tgt_len = 12
decode.max_len = 12
data.vocab_size = 200
train.batch_size = 8

[[runs]]
name = "r"
""", encoding="utf-8")
    return path


def test_times_both_encoder_runs_on_padded_batches(tmp_path, capsys, monkeypatch):
    tool = load_tool("encoder_padding")
    data = write_dialogsum(tmp_path / "data", n_train=24)
    train = data / "dialogsum" / "dialogsum.train.jsonl"
    rows = [json.loads(line) for line in train.read_text(encoding="utf-8").splitlines()]
    for i, r in enumerate(rows):   # sources of different lengths: bucketed batches still have padding
        r["dialogue"] += " ok" * (i % 7)
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    calls = []
    packed = tool.packed_run

    def counting(*a):
        calls.append(a[1].shape)
        return packed(*a)

    monkeypatch.setattr(tool, "packed_run", counting)
    tool.main([str(write_toml(tmp_path / "e.toml", "bilstm")), "--run", "r", "--data-dir", str(data),
               "--batches", "2", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "r: 3 batches in an epoch" in out and out.count("  batch ") == 2 and "sum: unpacked" in out
    # each timed batch with padding ran the packed encoder once (no padding: both run unpacked)
    assert 1 <= len(calls) <= 2


def test_refuses_a_model_without_a_recurrent_encoder_and_a_wrong_run_name(tmp_path, capsys):
    tool = load_tool("encoder_padding")
    data = write_dialogsum(tmp_path / "data")
    toml = str(write_toml(tmp_path / "e.toml", "transformer"))
    with pytest.raises(SystemExit) as e:
        tool.main([toml, "--run", "r", "--data-dir", str(data)])
    assert e.value.code == 2 and "no one-layer recurrent encoder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        tool.main([toml, "--run", "nope", "--data-dir", str(data)])
    assert e.value.code == 2 and "no run named 'nope'" in capsys.readouterr().err
