"""Run records: ``results/<experiment>/<run>/record.json`` and ``predictions.jsonl``, written
atomically, and loading them back for reports (no retraining needed)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seq2seq_zoo.utils import atomic_write_json, atomic_write_text

SCHEMA = 1
SCORES_FILE = "scores.jsonl"


def write_record(path: Path, record: dict[str, Any]) -> None:
    atomic_write_json(Path(path) / "record.json", {"schema": SCHEMA, **record})


def write_predictions(path: Path, rows: list[dict[str, Any]]) -> None:
    """One JSON object per example: id, prediction, references (a list), source (truncated)."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    atomic_write_text(Path(path) / "predictions.jsonl", text)


def read_predictions(path: Path) -> list[dict[str, Any]]:
    with open(Path(path) / "predictions.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_records(exp_dir: Path) -> list[dict[str, Any]]:
    """Every finished run record of an experiment folder, in run order (as listed in the record)."""
    out = []
    for p in sorted(Path(exp_dir).glob("*/record.json")):
        try:
            with open(p, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise RuntimeError(f"{p}: unreadable run record ({e}); delete it and re-run that run") from None
        rec["_dir"] = str(p.parent)
        out.append(rec)
    out.sort(key=lambda r: (r.get("order", 0), r.get("run", "")))
    return out


def write_scores(out: Path, ids: list[str], per_example: dict[str, list[float]], note: str | None = None) -> None:
    """``scores.jsonl``: one object per example, its id and every per-example metric value."""
    keys = list(per_example)
    lines = []
    for j, i in enumerate(ids):
        row = {"id": i, **{k: per_example[k][j] for k in keys}}
        lines.append(json.dumps(row, ensure_ascii=False))
    head = json.dumps({"_meta": {"metrics": keys, "n": len(ids), **({"note": note} if note else {})}})
    atomic_write_text(Path(out) / SCORES_FILE, head + "\n" + "\n".join(lines) + ("\n" if lines else ""))


def read_scores(out: Path) -> dict[str, dict[str, float]] | None:
    path = Path(out) / SCORES_FILE
    if not path.is_file():
        return None
    rows: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not valid JSON ({e.msg}); delete the file and run `zoo report` "
                                 "to score the predictions again") from None
            if "_meta" in obj:
                continue
            rows[str(obj.pop("id"))] = obj
    return rows
