"""Converters of ``zoo data download``: the bytes of a source (or of an archive member) -> the bytes of a
final file. A manifest entry names one as ``convert = "name"`` or ``"name:argument"``."""
from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable

def _json_array_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """``json_array_to_jsonl[:key1,key2,...]``: a JSON array of objects -> JSON Lines.

    One ``json.dumps(obj, ensure_ascii=False)`` per line, each ending in "\\n"; string values are kept
    exactly. With a key list, those keys come first in that order (all must be present), any other keys
    follow in their original order; without one the original order is kept. The original SAMSum files
    order their keys id, summary, dialogue; the staged JSON Lines files use id, dialogue, summary.
    """
    rows = json.loads(data.decode("utf-8-sig"))
    if not isinstance(rows, list):
        raise ValueError(f"expected a JSON array, got {type(rows).__name__}")
    keys = [k for k in (arg or "").split(",") if k]
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ValueError(f"element {i} of the JSON array is not an object")
        if keys:
            missing = [k for k in keys if k not in r]
            if missing:
                raise ValueError(f"element {i} of the JSON array has no key {missing[0]!r}")
            r = {**{k: r[k] for k in keys}, **{k: v for k, v in r.items() if k not in keys}}
        out.append(json.dumps(r, ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


class _csv_limit:
    """Raise csv's field size limit for the duration of a conversion (long articles)."""

    def __enter__(self):
        self.old = csv.field_size_limit()
        csv.field_size_limit(1 << 30)

    def __exit__(self, *exc):
        csv.field_size_limit(self.old)


def _csv_dict_rows(data: bytes) -> list[dict[str, str]]:
    with _csv_limit():
        return list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))


def _csv_column_to_lines(data: bytes, arg: str | None) -> bytes:
    """``csv_column_to_lines:COL``: CSV with a header -> the values of column COL, one per line."""
    if not arg:
        raise ValueError("csv_column_to_lines needs a column name (csv_column_to_lines:COL)")
    out = []
    for i, row in enumerate(_csv_dict_rows(data), start=2):
        if arg not in row:
            raise ValueError(f"CSV has no column {arg!r} (columns: {', '.join(row)})")
        value = row[arg]
        if "\n" in value or "\r" in value:
            raise ValueError(f"CSV row {i}: column {arg!r} holds a line break; cannot write one line per row")
        out.append(value + "\n")
    return "".join(out).encode("utf-8")


def _csv_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """``csv_to_jsonl:key=COL,key2=COL2,...``: CSV with a header -> JSON Lines with those keys in that order.

    An empty COL (``id=``) writes ``null`` for that key. Output as ``json.dumps(..., ensure_ascii=False)``.
    """
    if not arg:
        raise ValueError("csv_to_jsonl needs a key mapping (csv_to_jsonl:key=COL,...)")
    mapping = [tuple(part.split("=", 1)) for part in arg.split(",")]
    out = []
    for row in _csv_dict_rows(data):
        obj = {}
        for key, col in mapping:
            if col and col not in row:
                raise ValueError(f"CSV has no column {col!r} (columns: {', '.join(row)})")
            obj[key] = row[col] if col else None
        out.append(json.dumps(obj, ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


_ROW_START = re.compile(rb"\n([0-9a-f]{40}),")


def _cnn_csv_chunk_to_jsonl(data: bytes, arg: str | None) -> bytes:
    """A byte-chunk of a headerless-in-the-middle CNN/DM ``id,article,highlights`` CSV -> JSON Lines.

    The chunk starts inside a row: everything before the first line that starts with a 40-hex id and a
    comma is dropped. Every following row must have 3 fields. ``arg`` is a comma-separated list of ids
    to leave out (duplicates of rows that are in another file).
    """
    m = _ROW_START.search(data)
    if m is None:
        raise ValueError("no row starting with a 40-hex id found in the CSV chunk")
    drop = {x for x in (arg or "").split(",") if x}
    out = []
    with _csv_limit():
        for i, row in enumerate(csv.reader(io.StringIO(data[m.start() + 1:].decode("utf-8"), newline=""))):
            if not row:
                continue
            if len(row) != 3 or not re.fullmatch(r"[0-9a-f]{40}", row[0]):
                raise ValueError(f"CSV chunk row {i + 1} is not (40-hex id, article, highlights)")
            if row[0] in drop:
                continue
            out.append(json.dumps({"id": row[0], "article": row[1], "highlights": row[2]},
                                  ensure_ascii=False) + "\n")
    return "".join(out).encode("utf-8")


def _latin1_to_utf8(data: bytes, arg: str | None) -> bytes:
    """Latin-1 bytes -> the same text in UTF-8 (lossless; ``.encode('latin-1')`` gives the original back)."""
    return data.decode("latin-1").encode("utf-8")


#: converter name -> function(source_bytes, argument_or_None) -> final_bytes
CONVERTERS: dict[str, Callable[[bytes, str | None], bytes]] = {
    "json_array_to_jsonl": _json_array_to_jsonl,
    "csv_column_to_lines": _csv_column_to_lines,
    "csv_to_jsonl": _csv_to_jsonl,
    "cnn_csv_chunk_to_jsonl": _cnn_csv_chunk_to_jsonl,
    "latin1_to_utf8": _latin1_to_utf8,
}


def converter(spec: str) -> tuple[Callable[[bytes, str | None], bytes], str | None]:
    name, sep, arg = spec.partition(":")
    if name not in CONVERTERS:
        raise KeyError(f"unknown converter {name!r} (known: {', '.join(sorted(CONVERTERS))})")
    return CONVERTERS[name], (arg if sep else None)
