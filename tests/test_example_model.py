"""The "Adding a model" example (examples/models/my_rnn.py + examples/my_rnn.toml), a model outside the
package, trained end to end through `zoo run`: training, decoding, attention plot, record, tables."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from seq2seq_zoo import record_schema
from seq2seq_zoo.cli import main
from seq2seq_zoo.models.base import build_model

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_rnn.toml"
MODEL_FILE = ROOT / "examples" / "models" / "my_rnn.py"


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """examples/my_rnn.toml as written (it imports its model through [experiment] models), on the tiny
    fixture corpus instead of the real DialogSum."""
    from conftest import write_dialogsum
    tmp = tmp_path_factory.mktemp("example")
    data_dir = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    results = tmp / "results"
    threads = torch.get_num_threads()
    rc = main(["run", str(EXAMPLE), "--data-dir", str(data_dir), "--results", str(results), "--no-progress",
               "--profile", "none"])
    torch.set_num_threads(threads)
    assert rc == 0
    return results / "my_rnn", data_dir


def test_example_model_trains_decodes_and_is_reported(example_run):
    exp, _ = example_run
    rec = json.loads((exp / "my_rnn" / "record.json").read_text())
    assert rec["model"] == "my_rnn" and rec["train"]["epochs_run"] == 2 and rec["train"]["steps"] == 2  # 16 examples, batch 16, 2 epochs
    assert record_schema.problem(rec, record_schema.written_schema()) is None
    built = build_model("my_rnn", {"vocab_size": rec["data"]["vocab_size"]}, {"emb_dim": 32, "hidden": 64})
    assert rec["params"]["total"] == sum(p.numel() for p in built.parameters())
    assert rec["eval"]["n_examples"] == 3 and "rouge1" in rec["eval"]["scores"]
    preds = [json.loads(x) for x in (exp / "my_rnn" / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == ["test_0", "test_1", "test_2"]
    # the map the model declares is kept, although its name does not start with "decoder"
    att = json.loads((exp / "my_rnn" / "attention.json").read_text())
    assert att["cross_attention"] == "source_attention" and list(att["maps"]) == ["source_attention"]
    rows = att["maps"]["source_attention"]
    assert len(rows) == len(att["predicted_tokens"]) and len(rows[0]) == len(att["source_tokens"])
    assert all(abs(sum(r) - 1) < 1e-2 for r in rows)                       # attention weights per step
    png = (exp / "plots" / "attention_my_rnn.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    with open(exp / "table.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["run"] for r in table] == ["my_rnn", "lead"]
    assert float(table[0]["R-1"]) == pytest.approx(rec["eval"]["scores"]["rouge1"], abs=1e-6)
    assert "my_rnn" in (exp / "table.md").read_text() and "my_rnn" in (exp / "README.md").read_text()


def test_example_model_summarizes_with_the_models_flag(example_run, capsys):
    exp, data_dir = example_run
    f = data_dir / "in.txt"
    f.write_text("#Person1#: Hello Amy, I want to buy a red car.\n#Person2#: The red car is in the shop.")
    assert main(["summarize", str(exp / "my_rnn"), "--file", str(f), "--max-len", "8",
                 "--models", str(MODEL_FILE)]) == 0
    assert capsys.readouterr().out.strip()


def test_example_experiment_with_the_models_flag_instead_of_the_key(tmp_path, capsys):
    """The same experiment without its ``models`` key, the model file given with --models."""
    text = EXAMPLE.read_text().replace('models = ["models/my_rnn.py"]', "")
    toml = tmp_path / "plain.toml"
    toml.write_text(text)
    assert main(["run", str(toml), "--models", str(MODEL_FILE), "--dry-run", "--results", str(tmp_path)]) == 0
    assert "my_rnn" in capsys.readouterr().out
