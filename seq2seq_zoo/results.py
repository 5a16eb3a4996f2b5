"""Run records: ``results/<experiment>/<run>/record.json`` and ``predictions.jsonl``, written
atomically, and loading them back for reports (no retraining needed)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seq2seq_zoo import record_schema
from seq2seq_zoo.names import name_problem
from seq2seq_zoo.utils import DamagedFile, atomic_write_json, atomic_write_text, dumps_json, read_json, read_jsonl

SCHEMA = record_schema.VERSION
SCORES_FILE = "scores.jsonl"

TUNE_FILE = "tune.json"   # a run's stored `zoo tune` grid (evaluation.save_tune; read by report/selection)


def write_record(path: Path, record: dict[str, Any]) -> None:
    atomic_write_json(Path(path) / "record.json", {"schema": SCHEMA, **record})


def write_predictions(path: Path, rows: list[dict[str, Any]]) -> None:
    """One JSON object per example: id, prediction, references (a list), source (truncated)."""
    text = "".join(dumps_json(r, indent=None) + "\n" for r in rows)
    atomic_write_text(Path(path) / "predictions.jsonl", text)


def read_predictions(path: Path, name: str = "predictions.jsonl") -> list[dict[str, Any]]:
    """A run's predictions; a truncated, empty or hand-edited file raises ``DamagedFile`` naming file:line."""
    p = Path(path) / name
    rows = read_jsonl(p, "predictions", ("id", "prediction", "references"), fix=_FIX_PRED)
    seen: set[str] = set()
    for n, r in enumerate(rows, 1):
        if not isinstance(r["prediction"], str) or not isinstance(r["references"], list) \
                or not all(isinstance(x, str) for x in r["references"]):
            raise DamagedFile(f"{p}: damaged predictions (row {n} with id {r['id']!r}: prediction must be a string "
                              f"and references a list of strings); {_FIX_PRED}")
        if not any(x.strip() for x in r["references"]):  # nothing to score against (ROUGE of no reference)
            raise DamagedFile(f"{p}: damaged predictions (row {n} with id {r['id']!r} has no reference summary); "
                              f"{_FIX_PRED}")
        if str(r["id"]) in seen:  # paired tests and CIs pair examples by id
            raise DamagedFile(f"{p}: damaged predictions (id {r['id']!r} appears twice, again in row {n}); "
                              f"{_FIX_PRED}")
        seen.add(str(r["id"]))
    if not rows:
        raise DamagedFile(f"{p}: empty predictions file; {_FIX_PRED}")
    return rows


_FIX_PRED = "re-decode the run (`zoo eval RUN --decode ...`) or retrain it (`zoo run EXP --only RUN --force`)"
_FIX_REC = "delete it and run that run again (`zoo run EXP --only RUN --force`)"
def _record_problem(rec) -> str | None:
    """What is wrong with a record read back (its schema: ``record_schema``), or None."""
    found = record_schema.problem(rec)
    if found:
        return found
    if not all(isinstance(v, (int, float)) for v in rec["eval"]["scores"].values()):
        return "'eval.scores' holds a value that is not a number"
    for key in ("run", "decode_name") if rec.get("kind") == "decode" else ("run",):
        if name_problem(rec[key]):  # the report names plots and rows after it
            return f"{key!r}: {name_problem(rec[key])}"
    return None


_MISSING = object()

# the shapes of the other JSON files of the suite (JSON Schema); what the report reads from each must be there
_STR_LIST = {"type": "array", "items": {"type": "string"}}
_MATRIX = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
SCHEMAS: dict[str, dict] = {
    "attention.json": {"type": "object", "required": ["example_id", "source_tokens", "output_tokens", "maps"],
                       "properties": {"example_id": {"type": ["string", "integer"]}, "source_tokens": _STR_LIST,
                                      "output_tokens": _STR_LIST, "predicted_tokens": _STR_LIST,
                                      "p_gen": {"type": ["array", "null"], "items": {"type": "number"}},
                                      "maps": {"type": "object", "additionalProperties": _MATRIX},
                                      "cross_attention": {"type": ["string", "null"]},
                                      "source_len": {"type": "integer"}, "heads": {"type": ["integer", "null"]}}},
    # the lean form ("format": "lean-1", report/artifacts.py) or the older one (every table at the top level)
    "positional.json": {"type": "object", "minProperties": 1,
                        "if": {"required": ["format"]},
                        "then": {"required": ["tables"], "properties": {
                            "format": {"const": "lean-1"}, "table": {"type": "string"},
                            "positions": {"type": ["integer", "null"]}, "dims": {"type": "integer"},
                            "tables": {"type": "object", "minProperties": 1, "additionalProperties": _MATRIX}}},
                        "else": {"additionalProperties": _MATRIX}},
    "examples.json": {"type": "object", "required": ["examples"], "properties": {
        "selection": {"type": "string"}, "examples": {"type": "array", "items": {
            "type": "object", "required": ["split", "id", "input", "references", "output"],
            "properties": {"split": {"type": "string"}, "id": {"type": ["string", "integer"]},
                           "input": {"type": "string"}, "references": _STR_LIST, "output": {"type": "string"}}}}}},
    "experiment.json": {"type": "object", "properties": {
        "experiment": {"type": "string"}, "file": {"type": ["string", "null"]}, "profile": {"type": ["string", "null"]},
        "headline_decode": {"type": ["string", "null"]},
        "findings": {"type": "array", "items": {"type": "object"}}}},
    "findings.json": {"type": "array", "items": {"type": "object", "required": ["claim", "metric", "verdict"],
                                                 "properties": {"claim": {"type": "string"},
                                                                "metric": {"type": "string"},
                                                                "verdict": {"type": "string"},
                                                                "flags": _STR_LIST}}},
}


def read_checked(path: Path, fix: str = _FIX_REC, kind: str | None = None):
    """A JSON file of the suite (``kind``: its name in ``SCHEMAS``, default the file's name), read and
    checked by shape; a truncated, empty, hand-edited or wrongly shaped one raises ``DamagedFile`` naming
    the file and the first place that does not fit."""
    import jsonschema
    path = Path(path)
    kind = kind or path.name
    data = read_json(path, kind.removesuffix(".json") + " file", fix)
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMAS[kind]).iter_errors(data))
    if err is not None:
        where = "".join(f"[{p!r}]" for p in err.absolute_path) or "the top level"
        what = err.message if len(err.message) <= 100 else err.message[:97] + "..."
        raise DamagedFile(f"{path}: damaged {kind} (at {where}: {what}); {fix}")
    return data


def read_record(path: Path) -> dict[str, Any]:
    """One run record (``.../record.json``); a truncated, empty or hand-edited one raises ``DamagedFile``."""
    path = Path(path)
    rec = read_json(path, "run record", _FIX_REC)
    newer = record_schema.version_problem(rec)
    if newer and "newer" in newer:   # not damage: a later version of the suite wrote it
        raise DamagedFile(f"{path}: {newer}")
    problem = _record_problem(rec)
    if problem:
        raise DamagedFile(f"{path}: damaged run record ({problem}); {_FIX_REC}")
    return rec


def check_run_files(run: Path) -> None:
    """The other JSON files of a run folder that reports read (attention, positional tables, shown
    examples, decoding variants); the first damaged one raises ``DamagedFile``."""
    run = Path(run)
    for name in ("attention.json", "positional.json", "examples.json"):
        if (run / name).is_file():
            read_checked(run / name)
    if (run / SCORES_FILE).is_file():
        scores = read_scores(run)
        if (run / "predictions.jsonl").is_file():  # the same examples, else CIs and paired tests mislead
            ids = [str(r["id"]) for r in read_predictions(run)]
            if set(ids) != set(scores) or len(ids) != len(scores):
                extra = sorted(set(scores) - set(ids))[:1] or sorted(set(ids) - set(scores))[:1]
                raise DamagedFile(f"{run / SCORES_FILE}: holds {len(scores)} examples, predictions.jsonl "
                                  f"{len(ids)} (id {extra[0]!r} in one only); delete {SCORES_FILE} and run "
                                  "`zoo report` to score the predictions again" if extra else
                                  f"{run / SCORES_FILE}: does not match predictions.jsonl; delete it and run "
                                  "`zoo report` to score the predictions again")
    elif (run / "predictions.jsonl").is_file():  # the report scores them when scores.jsonl is missing
        read_predictions(run)
    for p in sorted(run.glob("decodes/*/record.json")):
        read_record(p)
        check_run_files(p.parent)


def load_records(exp_dir: Path, damaged: list[str] | None = None) -> list[dict[str, Any]]:
    """Every finished run record of an experiment folder, in run order (as listed in the record).
    A run whose record (or another file the report reads) is damaged raises ``DamagedFile``; with a
    ``damaged`` list, it is left out and its message appended there instead."""
    out = []
    for p in sorted(Path(exp_dir).glob("*/record.json")):
        try:
            rec = read_record(p)
            check_run_files(p.parent)
        except DamagedFile as e:
            if damaged is None:
                raise
            damaged.append(str(e))
            continue
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
        lines.append(dumps_json(row, indent=None))
    head = json.dumps({"_meta": {"metrics": keys, "n": len(ids), **({"note": note} if note else {})}})
    atomic_write_text(Path(out) / SCORES_FILE, head + "\n" + "\n".join(lines) + ("\n" if lines else ""))


def read_scores(out: Path) -> dict[str, dict[str, float]] | None:
    """{example id: {metric: value}} from ``scores.jsonl``, or None without one; a truncated, empty or
    hand-edited file raises ``DamagedFile`` naming file:line."""
    path = Path(out) / SCORES_FILE
    if not path.is_file():
        return None
    fix = "delete the file and run `zoo report` to score the predictions again"
    rows: dict[str, dict[str, float]] = {}
    meta = False
    for n, obj in enumerate(read_jsonl(path, "per-example scores", fix=fix), 1):
        if "_meta" in obj:
            meta = True
            meta_n = obj["_meta"].get("n") if isinstance(obj["_meta"], dict) else None
            continue
        if "id" not in obj or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      for k, v in obj.items() if k != "id"):
            raise DamagedFile(f"{path}: damaged per-example scores (row {n}: needs an id and numbers only); {fix}")
        i = str(obj.pop("id"))
        if i in rows:
            raise DamagedFile(f"{path}:{n}: damaged per-example scores (id {i!r} appears twice); {fix}")
        rows[i] = obj
    if not meta:  # the writer always starts with the _meta line: without it the file is not whole
        raise DamagedFile(f"{path}: damaged per-example scores (no _meta line: empty or cut); {fix}")
    n_meta = meta_n
    if not isinstance(n_meta, int) or isinstance(n_meta, bool) or n_meta != len(rows):
        raise DamagedFile(f"{path}: damaged per-example scores (its header says n = {n_meta!r}, it holds "
                          f"{len(rows)} rows: cut short or edited); {fix}")
    return rows
