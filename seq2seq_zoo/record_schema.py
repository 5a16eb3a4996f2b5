"""The run record's schema, in one place: ``results/<experiment>/<run>/record.json`` and a decoding
variant's ``<run>/decodes/<name>/record.json``.

``RECORD`` and ``DECODE_RECORD`` are JSON Schema (draft 2020-12) documents as plain dicts: ``required``
lists what every reader relies on (a record without it is damaged), ``properties`` describes every key
the writers put there, ``WRITTEN`` the keys every run record written now has (older committed records
lack some). ``problem(record)`` checks a record against the schema's ``required`` keys and types without
any library (the subset of JSON Schema used here: type, required, properties, additionalProperties); a
full validator (``jsonschema``) accepts the same dicts. Writers: ``runner.run`` (a trained run),
``reuse.take_over`` (a run taken over from another experiment), ``evaluation.run_decodes`` (a decoding
variant). Reader: ``results.read_record``. This module imports nothing from the package.
"""
from __future__ import annotations

import copy
from typing import Any

VERSION = 1   # the record's "schema" field; raise it when a reader can no longer read older records

_NUM = {"type": "number"}
_STR = {"type": "string"}
_INT = {"type": "integer"}
_OBJ = {"type": "object"}
_LIST = {"type": "array"}


def _opt(schema: dict) -> dict:
    """``schema`` or null."""
    t = schema["type"]
    return {**schema, "type": [*(t if isinstance(t, list) else [t]), "null"]}


EVAL = {
    "type": "object",
    "description": "the evaluation split's decoding and scores",
    "required": ["split", "n_examples", "scores", "settings", "decode"],
    "properties": {
        "split": {**_STR, "description": "the split scored (eval.split)"},
        "n_examples": _INT,
        "scores": {"type": "object", "additionalProperties": _NUM,
                   "description": "metric name -> corpus score (ROUGE F1 x 100, ...)"},
        "settings": {**_OBJ, "description": "how the metrics were computed (stemmer, BERTScore model, ...)"},
        "decode": {**_OBJ, "description": "the decode settings used"},
        "copying": _opt(_OBJ),
        "decode_seconds": _NUM,
        "metric_seconds": _NUM,
    },
}

VALIDATION = {
    "type": ["object", "null"],
    "description": "the run's decoding of the whole validation split and its ROUGE: what choices read",
    "required": ["split", "n_examples", "scores", "decode"],
    "properties": {
        "split": _STR, "n_examples": _INT, "decode": _OBJ, "settings": _OBJ,
        "scores": {"type": "object", "additionalProperties": _NUM},
        "decode_seconds": _NUM, "metric_seconds": _NUM,
    },
}

TRAIN = {
    "type": "object",
    "description": "training: curves, best checkpoint, time",
    "required": ["history", "val_curve", "train_seconds", "precision"],
    "properties": {
        "history": {**_LIST, "description": "one entry per epoch"},
        "val_curve": {**_LIST, "description": "validation loss (and score) at each validation"},
        "best_val_loss": _opt(_NUM), "best_step": _opt(_INT), "steps": _INT, "epochs_run": _INT,
        "val_metric": _STR, "best_score": _opt(_NUM), "objective": _STR, "objective_stats": _opt(_OBJ),
        "stopped_early": {"type": "boolean"}, "stopped_by_time": {"type": "boolean"},
        "train_seconds": _NUM, "val_seconds": _NUM, "resumes": _INT,
        "train_tokens": _INT, "tokens_per_s": _opt(_NUM), "trainable": {"type": "boolean"},
        "precision": _STR, "device": _STR, "world_size": _INT,
    },
}

DATA = {
    "type": "object",
    "description": "the data as read: dataset, folder, split sizes, vocabulary",
    "required": ["dataset", "sizes", "vocab_size"],
    "properties": {
        "dataset": _STR, "data_dir": _STR, "sizes": {"type": "object", "additionalProperties": _INT},
        "vocab_size": _INT, "eval_split": _STR, "skipped": _OBJ, "reader": _OBJ,
        "src_tokens_mean": _NUM, "tgt_tokens_mean": _NUM, "oov_rate_test_src": _NUM,
    },
}

RECORD: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "seq2seq-zoo run record (record.json)",
    "type": "object",
    "required": ["run", "experiment", "seed", "spec", "params", "hardware", "wall_seconds", "data", "train",
                 "eval"],
    "properties": {
        "schema": {**_INT, "description": "VERSION of this module when written"},
        "experiment": _STR, "run": _STR,
        "order": {**_INT, "description": "the run's place in the experiment file (table order)"},
        "status": _STR, "version": {**_STR, "description": "the suite's version"},
        "code": {**_OBJ, "description": "the commit of the code that trained it"},
        "command": _STR, "started": _STR, "finished": _STR,
        "spec": {**_OBJ, "description": "the resolved run settings (config.RunSpec.to_dict)"},
        "seed": _INT, "profile": _opt(_STR), "model": _STR,
        "params": {"type": "object", "additionalProperties": _INT,
                   "description": "trainable parameters per component and total"},
        "model_rules": {**_OBJ, "description": "settings the model derived from its options (its hook)"},
        "data": DATA,
        "embeddings": _opt(_OBJ), "init_from": _opt(_OBJ), "baseline": _opt(_OBJ),
        "train": TRAIN,
        "lr_curve": {**_LIST, "description": "[step, learning rate] pairs"},
        "train_sample": _opt(_OBJ),
        "eval": EVAL,
        "validation": VALIDATION,
        "hardware": _OBJ,
        "wall_seconds": {**_NUM, "description": "this invocation"},
        "compute_seconds": {**_NUM, "description": "training, validation, decoding and scoring, all invocations"},
        "rescored": _LIST, "reused_from": _OBJ, "taken_over": _STR, "stale": _STR,
    },
}

# the keys every run record written now has (``runner.run``); the runner checks its own record
WRITTEN = ["schema", "experiment", "run", "order", "status", "version", "code", "command", "started", "finished",
           "spec", "seed", "profile", "model", "params", "model_rules", "data", "embeddings", "init_from",
           "baseline", "train", "lr_curve", "train_sample", "eval", "validation", "hardware", "wall_seconds",
           "compute_seconds"]

DECODE_RECORD: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "seq2seq-zoo decoding variant record (<run>/decodes/<name>/record.json)",
    "type": "object",
    "required": ["run", "decode_name", "eval"],
    "properties": {
        "schema": _INT, "kind": {"const": "decode"}, "experiment": _STR, "run": _STR, "decode_name": _STR,
        "order": _INT, "overrides": {**_OBJ, "description": "the decode.* settings changed"},
        "run_finished": _STR, "checkpoint": _STR, "best_step": _opt(_INT), "train_sample_fraction": _NUM,
        "command": _opt(_STR), "finished": _STR, "hardware": _OBJ,
        "eval": EVAL, "validation": VALIDATION, "train_sample": _opt(_OBJ), "compute_seconds": _NUM,
        "rescored": _LIST, "stale": _STR,
    },
}


def schema_for(record: Any) -> dict[str, Any]:
    """The schema a record is read with: a decoding variant's (``"kind": "decode"``) or a run's."""
    return DECODE_RECORD if isinstance(record, dict) and record.get("kind") == "decode" else RECORD


def written_schema() -> dict[str, Any]:
    """``RECORD`` with every key of ``WRITTEN`` required: what a record written now must satisfy."""
    s = copy.deepcopy(RECORD)
    s["required"] = list(dict.fromkeys(s["required"] + WRITTEN))
    return s


_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
          "boolean": bool, "null": type(None)}


def _type_ok(value, t) -> bool:
    if isinstance(t, list):
        return any(_type_ok(value, x) for x in t)
    if isinstance(value, bool) and t != "boolean":
        return False
    return isinstance(value, _TYPES[t])


def problem(record: Any, schema: dict[str, Any] | None = None, _at: str = "") -> str | None:
    """What is wrong with ``record`` under ``schema`` (default: ``schema_for(record)``), as a short phrase
    naming the dotted key ("no 'eval.scores'", "'seed' is a str"), or None. Keys that are present are
    checked against their declared type too (nested objects recursively)."""
    if not _at:
        found = version_problem(record)
        if found:
            return found
    schema = schema or schema_for(record)
    if "type" in schema and not _type_ok(record, schema["type"]):
        if not _at:
            return f"a JSON {type(record).__name__}, expected an object"
        return f"{_at!r} is a {type(record).__name__}"
    if "const" in schema and record != schema["const"]:
        return f"{_at!r} is {record!r}, expected {schema['const']!r}"
    if not isinstance(record, dict):
        return None
    for key in schema.get("required", []):
        if key not in record:
            return f"no {(f'{_at}.{key}' if _at else key)!r}"
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, value in record.items():
        sub = props.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None:
            found = problem(value, sub, f"{_at}.{key}" if _at else key)
            if found:
                return found
    return None


def version_problem(record: Any) -> str | None:
    """What is wrong with a record's ``schema`` version, or None: a record written by a newer suite (a
    version above ``VERSION``) may mean something else by the same keys, so it is not read as if current;
    a version that is not a positive integer is damage. A record without the key predates it (version 1)."""
    if not isinstance(record, dict) or "schema" not in record:
        return None
    v = record["schema"]
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        return f"'schema' is {v!r}, expected a schema version (a positive integer)"
    if v > VERSION:
        return (f"schema version {v} is newer than this seq2seq-zoo reads (version {VERSION}): it was written by a "
                "newer seq2seq-zoo; upgrade to read it")
    return None


def required_keys(schema: dict[str, Any], _at: str = "") -> list[str]:
    """The dotted keys a schema requires, parents first (``eval``, ``eval.scores``, ...)."""
    out = []
    for key in schema.get("required", []):
        path = f"{_at}.{key}" if _at else key
        out.append(path)
        out += required_keys(schema.get("properties", {}).get(key, {}), path)
    return out
