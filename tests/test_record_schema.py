"""The run record's schema in one place (record_schema.py): every committed record reads under it (with
the package's own checker and with jsonschema), damaged records are named, and the runner writes what
the schema says it writes."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from seq2seq_zoo import record_schema, results

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _records():
    return sorted(RESULTS.glob("**/record.json"))


def test_every_committed_record_fits_the_schema():
    paths = _records()
    assert len(paths) > 100
    jsonschema = pytest.importorskip("jsonschema")
    validators = {id(s): jsonschema.Draft202012Validator(s) for s in (record_schema.RECORD, record_schema.DECODE_RECORD)}
    for s in (record_schema.RECORD, record_schema.DECODE_RECORD, record_schema.written_schema()):
        jsonschema.Draft202012Validator.check_schema(s)
    for p in paths:
        rec = json.loads(p.read_text(encoding="utf-8"))
        assert record_schema.problem(rec) is None, p
        validators[id(record_schema.schema_for(rec))].validate(rec)


def test_problems_are_named_by_dotted_key():
    rec = json.loads(next(p for p in _records() if "decodes" not in p.parts).read_text(encoding="utf-8"))
    cases = [(lambda r: r["eval"].pop("scores"), "no 'eval.scores'"),
             (lambda r: r.update(seed="1"), "'seed' is a str"),
             (lambda r: r.update(seed=True), "'seed' is a bool"),
             (lambda r: r["eval"]["scores"].update(rouge1="high"), "'eval.scores.rouge1' is a str"),
             (lambda r: r["data"].pop("vocab_size"), "no 'data.vocab_size'")]
    for damage, want in cases:
        bad = copy.deepcopy(rec)
        damage(bad)
        assert record_schema.problem(bad) == want
    assert record_schema.problem([rec]) == "a JSON list, expected an object"
    assert record_schema.problem({**rec, "kind": "decode"}) == "no 'decode_name'"   # a variant's schema


def test_the_reader_uses_the_schema(tmp_path):
    from seq2seq_zoo.utils import DamagedFile
    assert results.SCHEMA == record_schema.VERSION
    rec = json.loads(next(p for p in _records() if "decodes" not in p.parts).read_text(encoding="utf-8"))
    del rec["train"]["history"]
    (tmp_path / "record.json").write_text(json.dumps(rec))
    with pytest.raises(DamagedFile, match=r"damaged run record \(no 'train.history'\)"):
        results.read_record(tmp_path / "record.json")


def test_required_keys_and_the_written_schema():
    keys = record_schema.required_keys(record_schema.RECORD)
    assert keys[:2] == ["run", "experiment"] and "eval.scores" in keys and "train.precision" in keys
    written = record_schema.written_schema()
    assert set(record_schema.RECORD["required"]) < set(written["required"]) and "model_rules" in written["required"]
    assert set(record_schema.WRITTEN) <= set(record_schema.RECORD["properties"])


def test_the_schema_module_imports_nothing_from_the_package():
    import ast
    tree = ast.parse(Path(record_schema.__file__).read_text(encoding="utf-8"))
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m.startswith("seq2seq_zoo")]
