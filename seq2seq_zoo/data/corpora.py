"""Corpus readers, registered by name, each returning ``Example``s for a split.

The data directory comes from (first found): the ``--data-dir`` flag, the ``ZOO_DATA`` environment
variable, the experiment file's ``data_dir``, then ``./data`` and ``../shared/data`` next to the repo.

A reader is ``reader(data_dir, split, on_bad=..., stats=..., *, option=default, ...)``: its keyword-only
arguments are the dataset's options (``data.options`` in an experiment file), checked by name and type
when the file is loaded, like a model's constructor keywords. Readers that take their files from the
options (``jsonl``, ``csv``, ``tsv``, ``hf``) set ``uses_data_dir = False``; the others read
``<data_dir>/<dataset>/``. Each reader notes in ``stats.notes`` what it read (files, fields, split draw),
which ``zoo data info`` prints and the run record keeps.
"""
from __future__ import annotations

import codecs
import copy
import csv
import gzip
import io
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from seq2seq_zoo.errors import DataError  # noqa: F401 - raised here; importable from here as before
from seq2seq_zoo.registry import DATASETS, register_dataset

SPLITS = ("train", "validation", "test")


@dataclass
class Example:
    id: str
    source: str
    references: list[str]


@dataclass
class ReadStats:
    read: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    notes: dict = field(default_factory=dict)     # what the reader used: files, fields, split draw

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


_REPO = Path(__file__).resolve().parents[2]


def candidate_dirs(flag: str | None = None, config: str | None = None) -> list[tuple[str, Path]]:
    out = []
    if flag:
        out.append(("--data-dir", Path(flag)))
    if os.environ.get("ZOO_DATA"):
        out.append(("ZOO_DATA", Path(os.environ["ZOO_DATA"])))
    if config:
        out.append(("data_dir in the experiment file", Path(config)))
    seen = {d.resolve() for _, d in out}
    for d in (Path.cwd() / "data", _REPO / "data", Path.cwd().parent / "shared" / "data",
              _REPO.parent / "shared" / "data"):
        if d.resolve() not in seen:  # run from the repository, the cwd and package defaults coincide
            seen.add(d.resolve())
            out.append(("default", d))
    return out


def resolve_data_dir(dataset: str, flag: str | None = None, config: str | None = None,
                     options: dict | None = None) -> Path:
    """The folder holding ``<dataset>/``; an explicit setting wins even when it is wrong (clear error).
    Readers whose options name their files (jsonl, csv, tsv, hf; cnn_dailymail with ``hf``) need no
    folder: the current directory is returned, against which relative paths in the options are read."""
    if dataset in DATASETS and not uses_data_dir(dataset, options or {}):
        return Path.cwd()
    tried = []
    for origin, d in candidate_dirs(flag, config):
        if (d / dataset).is_dir():
            return d
        if origin != "default" and (d.is_file() or (d / dataset).is_file()):  # the wrong kind, not "not found"
            f = d if d.is_file() else d / dataset
            raise DataError(f"{f} ({origin}): is a file, but it must be a folder (the data folder holds "
                            f"'{dataset}/', a folder of the corpus files)")
        tried.append(f"{d / dataset} ({origin})")
        if origin != "default":  # an explicit setting that does not hold the data is an error, not a fallback
            break
    raise DataError(
        f"data for '{dataset}' not found; looked in: {'; '.join(tried)}. "
        f"Get it with `zoo data download {dataset} --data-dir DIR`, or point --data-dir / ZOO_DATA "
        f"at the folder that contains '{dataset}/'.")


def jsonl_lines(path: Path, stats: ReadStats, on_bad: str, encoding: str = "utf-8"):
    """(line number, object) for each line of a JSON Lines file (.gz read as gzip); a bad line is counted
    or raised as ``on_bad`` says."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected part of the corpus; see `zoo data download`)")
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise DataError(f"{path}: unknown text encoding {encoding!r} (data.options.encoding); use e.g. \"utf-8\", "
                        "\"latin-1\" or \"cp1252\"") from None
    if path.suffix == ".gz":   # gzipped JSON Lines: the same rows, read through gzip
        try:
            yield from _jsonl_rows(path, gzip.open(path, "rb"), stats, on_bad, encoding)
        except (OSError, EOFError) as e:
            raise DataError(f"{path}: not a readable gzip file ({e}); fetch the file again") from None
    else:
        yield from _jsonl_rows(path, open(path, "rb"), stats, on_bad, encoding)


def _jsonl_rows(path: Path, stream, stats: ReadStats, on_bad: str, encoding: str):
    with stream as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode(encoding))
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
            except (UnicodeDecodeError, ValueError) as e:
                if on_bad == "skip":
                    stats.skip("malformed line")
                    continue
                if isinstance(e, UnicodeDecodeError):
                    raise DataError(f"{path}:{lineno}: bytes that are not {encoding} ({e.reason} at byte {e.start} of "
                                    "the line); convert the file to UTF-8, or for your own files set "
                                    "data.options.encoding to its encoding (e.g. \"latin-1\")") from None
                raise DataError(f"{path}:{lineno}: malformed JSON line ({e}); fix the line or set "
                                f"data.on_bad = \"skip\" to skip such lines") from None
            yield lineno, obj


def make_example(stats, path, lineno, on_bad, id_, source, refs) -> Example | None:
    """An ``Example`` of one row, or None for a row skipped as ``on_bad`` says (empty source or summary)."""
    refs = [r for r in refs if isinstance(r, str)]
    if not isinstance(source, str) or not source.strip() or not refs or not any(r.strip() for r in refs):
        what = "empty or missing source" if not isinstance(source, str) or not source.strip() else "empty or missing summary"
        if on_bad == "error":
            raise DataError(f"{path}:{lineno}: {what}; fix it or set data.on_bad = \"skip\"")
        stats.skip(what)
        return None
    stats.read += 1
    return Example(str(id_), source, refs)


def _read_jsonl_corpus(path: Path, id_key: str, src_key: str, ref_keys: list[str], on_bad: str,
                       stats: ReadStats) -> list[Example]:
    out = []
    note_file(stats, path, {"source": src_key, "target": ref_keys if len(ref_keys) > 1 else ref_keys[0],
                             "id": id_key})
    for lineno, obj in jsonl_lines(path, stats, on_bad):
        missing = [k for k in [src_key] if k not in obj]
        refs = [obj[k] for k in ref_keys if k in obj]
        if missing or not refs:
            if on_bad == "skip":
                stats.skip("missing field")
                continue
            raise DataError(f"{path}:{lineno}: missing field(s) {missing or ref_keys}; has {sorted(obj)}")
        id_ = obj.get(id_key)
        ex = make_example(stats, path, lineno, on_bad, id_ if id_ is not None else f"{path.stem}-{lineno}", obj[src_key],
                   refs)
        if ex is not None:
            out.append(ex)
    return out


@register_dataset("dialogsum")
def dialogsum(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None):
    """DialogSum (Chen et al. 2021): jsonl; the test split has 3 references (summary1..3)."""
    stats = stats or ReadStats()
    name = {"train": "train", "validation": "dev", "test": "test"}[split]
    path = data_dir / "dialogsum" / f"dialogsum.{name}.jsonl"
    keys = ["summary1", "summary2", "summary3"] if split == "test" else ["summary"]
    return _read_jsonl_corpus(path, "fname", "dialogue", keys, on_bad, stats)


@register_dataset("samsum")
def samsum(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None):
    """SAMSum (Gliwa et al. 2019): jsonl {id, dialogue, summary}; one train dialogue is empty."""
    stats = stats or ReadStats()
    name = {"train": "train", "validation": "val", "test": "test"}[split]
    return _read_jsonl_corpus(data_dir / "samsum" / f"samsum.{name}.jsonl", "id", "dialogue", ["summary"],
                              on_bad, stats)


@register_dataset("gigaword")
def gigaword(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
             extra_train: list[str] | None = None):
    """Gigaword headlines (Rush et al. 2015): parallel X.article.txt / X.title.txt; test = 1,951 pairs.
    ``extra_train``: more files of the folder (by prefix, e.g. ["valid_random10k"]) that join the training
    split; their pairs whose article also appears in the validation or test split, or earlier in the
    training split, are dropped and counted (the staged valid_random10k shares 58 articles with valid)."""
    stats = stats or ReadStats()
    name = {"train": "train", "validation": "valid", "test": "test"}[split]
    out = _gigaword_file(data_dir, name, on_bad, stats)
    if split != "train" or not extra_train:
        return out
    held_out = {e.source for s in ("valid", "test") for e in _gigaword_file(data_dir, s, on_bad, ReadStats())}
    seen = {e.source for e in out}
    for prefix in extra_train:
        for e in _gigaword_file(data_dir, prefix, on_bad, stats):
            if e.source in held_out:
                stats.skip(f"{prefix}: article also in the validation or test split")
            elif e.source in seen:
                stats.skip(f"{prefix}: article already in the training split")
            else:
                seen.add(e.source)
                out.append(e)
    return out


def _gigaword_file(data_dir: Path, name: str, on_bad: str, stats: ReadStats) -> list[Example]:
    src_p = data_dir / "gigaword" / f"{name}.article.txt"
    tgt_p = data_dir / "gigaword" / f"{name}.title.txt"
    for p in (src_p, tgt_p):
        if not p.is_file():
            raise DataError(f"{p}: file not found (see `zoo data download gigaword`)")
    note_file(stats, src_p, {"source": "line of X.article.txt", "target": "same line of X.title.txt"})
    note_file(stats, tgt_p)
    out = []
    with open(src_p, "rb") as fs, open(tgt_p, "rb") as ft:
        src_lines, tgt_lines = fs.read().split(b"\n"), ft.read().split(b"\n")
    if src_lines and src_lines[-1] == b"":
        src_lines.pop()
    if tgt_lines and tgt_lines[-1] == b"":
        tgt_lines.pop()
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"{src_p} has {len(src_lines)} lines but {tgt_p} has {len(tgt_lines)}; "
                        "the two files must be parallel")
    for i, (s, t) in enumerate(zip(src_lines, tgt_lines), 1):
        try:
            s = s.decode("utf-8")
            bad = tgt_p
            t = t.decode("utf-8")
        except UnicodeDecodeError as e:
            if on_bad == "skip":
                stats.skip("not UTF-8")
                continue
            where = src_p if isinstance(s, bytes) else bad
            raise DataError(f"{where}:{i}: bytes that are not UTF-8 ({e}); fix the file or set "
                            "data.on_bad = \"skip\"") from None
        ex = make_example(stats, src_p, i, on_bad, f"{name}-{i - 1}", s, [t])
        if ex is not None:
            out.append(ex)
    return out


def load_split(dataset: str, data_dir: Path, split: str, on_bad: str = "skip_empty",
               stats: ReadStats | None = None, options: dict | None = None) -> list[Example]:
    """The examples of one split, read by the dataset's reader. A corpus under ``<data_dir>/<dataset>/``
    is parsed once per process while its files are unchanged (``zoo run`` reads it for every run of an
    experiment, and a large corpus takes seconds to parse); ``stats`` gets the same counts and notes either
    way."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    reader = DATASETS.get(dataset)
    stats = stats if stats is not None else ReadStats()
    if not uses_data_dir(dataset, options or {}):   # files named in the options: read them every time
        return reader(Path(data_dir), split, on_bad=on_bad, stats=stats, **(options or {}))
    key = (dataset, str(Path(data_dir).resolve()), split, on_bad,
           json.dumps(options or {}, sort_keys=True, default=str))
    hit = _PARSED.get(key)
    if hit is not None and hit[0] == _fingerprint(Path(data_dir) / dataset, hit[2].notes):
        _PARSED.move_to_end(key)
        _, examples, seen = hit
    else:
        seen = ReadStats()
        examples = tuple(reader(Path(data_dir), split, on_bad=on_bad, stats=seen, **(options or {})))
        fp = _fingerprint(Path(data_dir) / dataset, seen.notes)
        # a file changed within the clock's resolution of its mtime could change again unseen: not kept
        if all(m is None or m < time.time_ns() - _RACY_NS for _, _, _, m in fp):
            _PARSED[key] = (fp, examples, seen)
            while len(_PARSED) > _PARSED_MAX:
                _PARSED.popitem(last=False)
    stats.read += seen.read
    for why, n in seen.skipped.items():
        stats.skipped[why] = stats.skipped.get(why, 0) + n
    stats.notes.update(copy.deepcopy(seen.notes))
    return list(examples)


_PARSED: OrderedDict = OrderedDict()   # (dataset, dir, split, on_bad, options) -> (fingerprint, examples, stats)
_PARSED_MAX = 6                        # the three splits of two corpora
_RACY_NS = 2_000_000_000               # files modified less than 2 s before the read are read again next time


def _fingerprint(folder: Path, notes: dict) -> tuple:
    """(path, inode, size, mtime) of every file under the corpus folder and of every file the reader noted."""
    paths = set(folder.rglob("*")) if folder.is_dir() else set()
    paths |= {Path(p) for p in notes.get("files") or []}
    out = []
    for p in sorted(paths):
        try:
            st = p.stat()
        except OSError:
            out.append((str(p), None, None, None))
            continue
        if not p.is_dir():
            out.append((str(p), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


# ----------------------------------------------------------------------------- dataset options (readers)
def note_file(stats: ReadStats, path, fields: dict | None = None) -> None:
    """Record a file a reader read (and the fields it took from it) in the reading notes."""
    stats.notes.setdefault("files", [])
    if str(path) not in stats.notes["files"]:
        stats.notes["files"].append(str(path))
    if fields is not None:
        stats.notes["fields"] = fields


def uses_data_dir(dataset: str, options: dict) -> bool:
    """Whether the reader reads ``<data_dir>/<dataset>/`` (False: its options name the files or source)."""
    flag = getattr(DATASETS.get(dataset), "uses_data_dir", True)
    return flag(options) if callable(flag) else bool(flag)


def describe_source(dataset: str, data_dir: Path, options: dict) -> str:
    """Where a dataset is read from, in words, for ``zoo data info`` and logs."""
    describe = getattr(DATASETS.get(dataset), "describe", None)
    if describe is not None:
        return describe(options)
    return str(Path(data_dir) / dataset)


def csv_rows(text: str, path, delimiter: str = ","):
    """(line number, fields) of every row of a CSV/TSV text, the header first. Fields may hold whole
    articles (csv's default limit is 128 kB a field: raised here); a row the csv module cannot parse is a
    DataError naming the file and line."""
    old = csv.field_size_limit()
    csv.field_size_limit(1 << 30)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise DataError(f"{path}:{reader.line_num}: not valid CSV ({e}); fix the row") from None
            yield reader.line_num, row
    finally:
        csv.field_size_limit(old)
