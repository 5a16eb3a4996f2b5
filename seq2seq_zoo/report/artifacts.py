"""The two per-run files the report's maps are drawn from, in a lean form, and readers for both forms.

``positional.json`` (lean, ``"format": "lean-1"``): the encoder's positional table only (the one the
plot draws), its first ``POSITIONS`` positions and ``DIMS`` dimensions, 3 decimals, with the table's full
size (``positions``, ``dims``). Older files held every table (encoder and decoder), 100 positions, every
dimension, 4 decimals: 0.5-1 MB each.

``attention.json`` (lean): the cross-attention map only (the one the plot draws), its first
``SOURCE_TOKENS`` source tokens, 3 decimals, with the source's full length (``source_len``) and the
number of heads averaged (``heads``). Older files also held the last decoder layer's self-attention and
the whole source.

Readers accept both; ``slim_positional``/``slim_attention`` turn an old file's content into the lean one
(``tools/slim_results.py`` rewrites a results folder in place).
"""
from __future__ import annotations

import json
from pathlib import Path

from seq2seq_zoo.utils.io import dumps_json

import numpy as np

LEAN = "lean-1"
POSITIONS = 100
DIMS = 128
SOURCE_TOKENS = 120
DECIMALS = 3


def _round(a) -> list:
    return np.round(np.asarray(a, dtype=float), DECIMALS).tolist()


def lean_positional(tables: dict, positions: int | None = None) -> dict | None:
    """``name -> (positions, dim) array`` (every table a model has) -> the lean file's content."""
    if not tables:
        return None
    name = next((k for k in tables if "encoder" in k), next(iter(tables)))
    t = np.asarray(tables[name], dtype=float)
    return {"format": LEAN, "table": name, "positions": positions or int(t.shape[0]), "dims": int(t.shape[1]),
            "tables": {name: _round(t[:POSITIONS, :DIMS])}}


def slim_positional(old: dict) -> dict:
    """An old positional.json's content -> the lean one (a lean one is returned as it is). An old file
    held 100 positions of an unknown total: ``positions`` is left out."""
    if old.get("format") == LEAN:
        return old
    lean = lean_positional(old)
    lean.pop("positions")
    return lean


def read_positional(path: Path) -> dict | None:
    """``{"tables": {name: rows}, "positions": total or None, "dims": total}`` of either form, or None."""
    if not Path(path).is_file():
        return None
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    if d.get("format") == LEAN:
        return d
    tables = {k: v for k, v in d.items() if isinstance(v, list)}
    return {"tables": tables, "positions": None, "dims": len(next(iter(tables.values()))[0]) if tables else 0}


def lean_attention(content: dict, heads: int | None) -> dict:
    """attention.json content (the cross-attention map under ``maps``, others allowed) -> the lean one."""
    cross = content.get("cross_attention")
    if cross is None and "cross_attention" not in content:  # files older than the field: the "decenc" map
        cross = next((k for k in content.get("maps", {}) if "decenc" in k), None)
    src = content["source_tokens"]
    out = {k: v for k, v in content.items() if k not in ("maps", "source_tokens", "note")}
    out.update({"format": LEAN, "source_tokens": src[:SOURCE_TOKENS], "source_len": len(src),
                "heads": heads, "cross_attention": cross,
                "maps": {cross: [_round(row[:SOURCE_TOKENS]) for row in content["maps"][cross]]} if cross else {},
                "note": "teacher-forced on the model's own prediction; the cross-attention weights"
                        + (f" averaged over {heads} heads" if heads and heads > 1 else "")
                        + f"; the first {SOURCE_TOKENS} source tokens; row t is the step that predicts "
                          "predicted_tokens[t] from output_tokens[t]"})
    if out.get("p_gen") is not None:
        out["p_gen"] = _round(out["p_gen"])
    return out


def slim_attention(old: dict, heads: int | None = None) -> dict:
    return old if old.get("format") == LEAN else lean_attention(old, heads)


def read_attention(path: Path) -> dict | None:
    """attention.json of either form, with ``cross_attention`` filled in (None: the model has none)."""
    if not Path(path).is_file():
        return None
    a = json.loads(Path(path).read_text(encoding="utf-8"))
    if "cross_attention" not in a:  # files older than the field: the Transformer's and RNNs' naming
        a["cross_attention"] = next((k for k in a.get("maps", {}) if "decenc" in k), None)
    return a


def write_lean(path: Path, content: dict) -> None:
    """Compact JSON (no indentation: an indented table puts every number on a line of its own)."""
    from seq2seq_zoo.utils import atomic_write_text
    atomic_write_text(path, dumps_json(content, indent=None) + "\n")
