"""Choosing on validation: which run and which decoding a table shows, read from stored validation
scores only, so that no choice reads a test score.

A candidate is a trained (run, decoding) pair of one results folder, over its seeds. Its validation
value is taken, in this order of preference, from:

1. ``decoded``: ROUGE-1 of the candidate's own decoding settings on the whole validation split, as
   ``zoo run`` and ``zoo eval --decode`` store it in a record's ``validation`` block (or a ``zoo tune``
   row of the run's ``tune.json`` with exactly those settings and no example cap);
2. ``training``: the checkpoint-selection score of a run trained with ``train.val_metric = "rouge1"``
   (greedy decodes of the validation split's first ``train.val_max`` examples, or all of them, against the
   first reference; the run's own decoding only);
3. ``loss``: the best validation loss (token NLL without label smoothing; lower is better; the run's own
   decoding only).

A candidate has a value only when every one of its seeds has it. Among the candidates of a row (a
dataset, task and model family, across results folders, or the decodings of one run), those with at
least ``MIN_SEEDS`` seeds compete (all of them when none has that many); they are compared on the first
basis above that any of them has, and the best mean wins (ties: more seeds, then the name). Means are
compared over one validation set: candidates whose validation examples number otherwise (the split's size,
or for training-time scores the first ``train.val_max`` of it; for losses, also the vocabulary's size) are
compared only when their class is the most common one (ties: the
larger validation set, the larger vocabulary). A candidate without that basis is listed with its other
values but cannot win. The LEAD row's value is its own
tuned validation ROUGE-1 (the k its ``tune`` chose).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from seq2seq_zoo.results import TUNE_FILE

METRIC = "rouge1"
MIN_SEEDS = 3
BASES = ("decoded", "training", "loss")
BASIS_TEXT = {
    "decoded": "validation ROUGE-1 of the same decoding (whole validation split)",
    "training": "training-time validation ROUGE-1 (greedy decodes, first reference; the run's own decoding)",
    "loss": "validation loss (token NLL, lower is better; the run's own decoding; same vocabulary size)",
}


def own_decoding(row: dict) -> bool:
    return row.get("_decode") in (None, "default")


def validation_block(row: dict) -> dict | None:
    """The stored validation decoding of a table row: a decoding variant's own, else the run's."""
    if row.get("_decode_record") is not None:
        return row["_decode_record"].get("validation")
    return row.get("validation")


def _tuned_value(row: dict) -> tuple[float, int | None] | None:
    """A ``zoo tune`` row of the run with exactly this row's decoding and the whole validation split."""
    d = row.get("_dir")
    path = Path(d) / TUNE_FILE if d else None
    if path is None or not path.is_file():
        return None
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(got, dict) or got.get("run_finished") != row.get("finished"):
        return None   # tuned on an earlier training of the run
    want = (row.get("eval") or {}).get("decode")
    for r in got.get("rows") or []:
        if isinstance(r, dict) and r.get("decode") == want and not r.get("max_examples") \
                and isinstance(r.get(METRIC), (int, float)):
            return float(r[METRIC]), r.get("n_examples")
    return None


def seed_value(row: dict, basis: str) -> tuple[float, int | None] | None:
    """(value, validation examples) of one seed's row on ``basis``, or None."""
    base = row.get("baseline")
    if base:   # LEAD and other tuned baselines: the validation score of the option they chose
        tuned = base.get("tuned") or {}
        scores = tuned.get("validation_rouge1") or {}
        k = tuned.get("k")
        v = scores.get(str(k)) if k is not None else None
        return (float(v), None) if basis == "decoded" and isinstance(v, (int, float)) else None
    if basis == "decoded":
        block = validation_block(row)
        v = ((block or {}).get("scores") or {}).get(METRIC)
        if isinstance(v, (int, float)):
            return float(v), block.get("n_examples")
        return _tuned_value(row)
    if not own_decoding(row):
        return None
    train = row.get("train") or {}
    n_val = ((row.get("data") or {}).get("sizes") or {}).get("validation")
    if basis == "training" and train.get("val_metric") == METRIC and isinstance(train.get("best_score"), (int, float)):
        # the training loop scores the first ``train.val_max`` validation examples (0: all of them)
        cap = ((row.get("spec") or {}).get("train") or {}).get("val_max") or 0
        n = min(cap, n_val) if cap and isinstance(n_val, int) else (cap or n_val)
        return 100.0 * float(train["best_score"]), n
    if basis == "loss" and isinstance(train.get("best_val_loss"), (int, float)):
        return float(train["best_val_loss"]), n_val
    return None


def values(rows: list[dict]) -> dict[str, dict]:
    """{basis: {"mean", "sd", "n_examples"}} for each basis every row has."""
    out = {}
    for basis in BASES:
        got = [seed_value(r, basis) for r in rows]
        if rows and all(g is not None for g in got):
            v = [g[0] for g in got]
            ns = {g[1] for g in got}
            out[basis] = {"mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if len(v) > 1 else None,
                          "n_examples": ns.pop() if len(ns) == 1 else None}
    return out


def first_basis(vals: dict[str, dict]) -> str | None:
    """The most preferred basis that ``values`` found, or None."""
    return next((b for b in BASES if b in vals), None)


def basis_text(mean: float, basis: str) -> str:
    """A validation value as the tables print it: ``29.32``, ``29.32 (training)`` or ``3.931 (loss)``."""
    return {"decoded": f"{mean:.2f}", "training": f"{mean:.2f} (training)", "loss": f"{mean:.3f} (loss)"}[basis]


def higher_is_better(basis: str) -> bool:
    return basis != "loss"


def choose(candidates: list, rows_of, name_of) -> tuple[object | None, str | None, list]:
    """(winner, basis, eligible) among ``candidates``; ``rows_of(c)`` gives a candidate's records (one per
    seed), ``name_of(c)`` a stable name for ties. None when no eligible candidate has a validation value."""
    if not candidates:
        return None, None, []
    eligible = [c for c in candidates if len(rows_of(c)) >= MIN_SEEDS] or list(candidates)
    of = {id(c): values(rows_of(c)) for c in eligible}   # once per candidate: it reads each run's tune.json
    for basis in BASES:
        scored = [(c, of[id(c)][basis]["mean"]) for c in eligible if basis in of[id(c)]]
        if scored:   # means compare over one validation set (and, for losses, one vocabulary size)
            cls = lambda c: (of[id(c)][basis]["n_examples"] or 0,
                             ((rows_of(c)[0].get("data") or {}).get("vocab_size") or 0) if basis == "loss" else 0)
            common = Counter(cls(c) for c, _ in scored).most_common()
            top = max(n for _, n in common)
            keep = max(k for k, n in common if n == top)   # the most common class; ties: the larger set
            scored = [(c, v) for c, v in scored if cls(c) == keep]
            sign = 1.0 if higher_is_better(basis) else -1.0
            best = max(scored, key=lambda cv: (sign * cv[1], len(rows_of(cv[0])), _neg(name_of(cv[0]))))
            return best[0], basis, eligible
    return None, None, eligible


def _neg(name: str) -> tuple:
    """A key that sorts names in reverse, so ``max`` breaks ties towards the alphabetically first name."""
    return tuple(-ord(ch) for ch in name)
