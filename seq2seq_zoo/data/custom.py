"""Your own corpus without code: ``jsonl``, ``csv`` and ``tsv`` files, or a Hugging Face ``datasets`` source.

The experiment file names the files per split and the fields (``data.options``)::

    [experiment]
    dataset = "jsonl"                      # or "csv", "tsv", "hf"

    [defaults.data.options]
    train = "corpus/train.jsonl"           # relative paths: from the folder you run zoo in
    validation = "corpus/valid.jsonl"
    test = "corpus/test.jsonl"
    source = "document"                    # the field holding the text to summarise
    target = ["summary", "summary2"]       # one field, or several: several references per example
    id = "doc_id"                          # optional; default <file>-<line>

One file for all three splits: ``file = "corpus/all.jsonl"`` and
``split = {train = 0.9, validation = 0.05, test = 0.05, seed = 1}``: the rows are shuffled with the seed
and cut in these fractions (the same rows in the same split on every machine and every run).

``hf``: ``path`` is a hub dataset ("EdinburghNLP/xsum") or a folder written by ``save_to_disk``; ``name``
its configuration; ``splits`` maps our split names to the dataset's (``{validation = "dev"}``);
``data_files`` is passed to ``datasets.load_dataset`` (e.g. ``path = "json"`` with a file per split),
``revision`` pins a hub commit, ``cache_dir`` moves the cache (default: ``datasets``' own, ~/.cache).
``datasets`` downloads and caches; it is an optional extra (``pip install -e ".[hf]"``).
"""
from __future__ import annotations

from pathlib import Path

from seq2seq_zoo.data.corpora import SPLITS, DataError, Example, ReadStats, jsonl_lines, make_example, note_file, csv_rows
from seq2seq_zoo.registry import register_dataset

HF_INSTALL = 'pip install -e ".[hf]" (or pip install datasets)'


def _targets(target: str | list[str]) -> list[str]:
    return [target] if isinstance(target, str) else list(target)


def _check_split(options: dict):
    """``split = {train, validation, test, seed}`` with one ``file``: (key, message) of the first problem."""
    sp = options["split"]
    if not isinstance(sp, dict):
        return "split", "give the fractions as a table: split = {train = 0.9, validation = 0.05, test = 0.05, seed = 1}"
    bad = [k for k in sp if k not in (*SPLITS, "seed")]
    if bad:
        return "split", f"unknown key '{bad[0]}'; the keys are {', '.join(SPLITS)} and seed"
    fr = [sp.get(k, 0) for k in SPLITS]
    if any(not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f <= 1 for f in fr) or \
            not all(sp.get(k) for k in SPLITS) or sum(fr) > 1 + 1e-9:
        return "split", (f"fractions {dict(zip(SPLITS, fr))}: each split needs a fraction in (0, 1] and together at "
                         "most 1, e.g. split = {train = 0.9, validation = 0.05, test = 0.05, seed = 1}")
    if not isinstance(sp.get("seed", 1), int):
        return "split", "seed must be an integer"
    if any(options.get(k) for k in SPLITS):
        return "split", ("give either one file (file = \"...\" with split = {...}) or a file per split "
                         "(train / validation / test), not both")
    if not options.get("file"):
        return "file", "split = {...} cuts one file: name it with data.options.file = \"path/to/file\""
    if not Path(options["file"]).is_file():
        return "file", f"file {options['file']!r} not found (relative paths are taken from the folder you run zoo in)"
    return None


def _split_of(rows, split: str, fractions: dict) -> list:
    """The rows of ``split`` when one file is cut by ``fractions`` ({train, validation, test, seed})."""
    import numpy as np
    rows = list(rows)
    order = np.random.default_rng(int(fractions.get("seed", 1))).permutation(len(rows))
    start = 0
    for k in SPLITS:
        n = int(round(fractions[k] * len(rows)))
        if k == split:
            return [rows[i] for i in sorted(order[start: start + n])]
        start += n
    return []


def _check_fields(options: dict, files: bool):
    if files and options.get("split") is not None:
        problem = _check_split(options)
        if problem:
            return problem
        files = False
    if files:
        for split in SPLITS:
            if not options.get(split):
                return split, (f"no file for the {split} split: give data.options.{split} = \"path/to/{split}"
                               " file\" (relative to the folder you run zoo in)")
            if not Path(options[split]).is_file():
                return split, (f"file {options[split]!r} not found (relative paths are taken from the folder you "
                               "run zoo in)")
    if "encoding" in options:
        import codecs
        try:
            codecs.lookup(options["encoding"])
        except (LookupError, TypeError):
            return "encoding", (f"unknown text encoding {options['encoding']!r}; use e.g. \"utf-8\", \"latin-1\" "
                                "or \"cp1252\"")
    if not options.get("source"):
        return "source", "name the field holding the text to summarise: data.options.source = \"...\""
    if not options.get("target"):
        return "target", ("name the summary field: data.options.target = \"...\" (or a list of fields for "
                          "several references)")
    return None


def _example(obj: dict, where, lineno: int, source: str, targets: list[str], id_key: str, default_id: str,
             on_bad: str, stats: ReadStats) -> Example | None | bool:
    """One example from a row (a dict); False when the row is skipped for a missing field."""
    missing = [k for k in [source, *targets] if k not in obj]
    if missing:
        if on_bad == "skip":
            stats.skip("missing field")
            return False
        raise DataError(f"{where}:{lineno}: missing field '{missing[0]}' (the row has: "
                        f"{', '.join(map(str, obj)) or 'nothing'}); fix the row or the field names in "
                        "data.options.source / target / id")
    wrong = _wrong_type(obj, source, targets)
    if wrong:  # e.g. a number or an object where text belongs: not the same as an empty field
        if on_bad == "skip":
            stats.skip("field of the wrong type")
            return False
        raise DataError(f"{where}:{lineno}: field {wrong}; fix the row (or set data.on_bad = \"skip\" to skip "
                        "such rows)")
    refs: list = []
    for k in targets:  # a field may itself hold a list of references
        v = obj[k]
        refs.extend(v if isinstance(v, list) else [v])
    refs = [r for r in refs if isinstance(r, str) and r.strip()]
    id_ = obj.get(id_key) if id_key else None
    return make_example(stats, where, lineno, on_bad, id_ if id_ not in (None, "") else default_id, obj[source], refs)


def _wrong_type(obj: dict, source: str, targets: list[str]) -> str | None:
    """The first source or summary field of a row that holds neither text nor nothing (null), described."""
    if obj[source] is not None and not isinstance(obj[source], str):
        return f"'{source}' is a {type(obj[source]).__name__}, expected text (a string)"
    for k in targets:
        v = obj[k]
        items = v if isinstance(v, list) else [v]
        bad = next((x for x in items if x is not None and not isinstance(x, str)), None)
        if bad is not None:
            return f"'{k}' holds a {type(bad).__name__}, expected text (a string or a list of strings)"
    return None


def _read_rows(rows, source, target, id, on_bad, stats) -> list[Example]:
    out, targets = [], _targets(target)
    for where, lineno, default_id, obj in rows:
        ex = _example(obj, where, lineno, source, targets, id, default_id, on_bad, stats)
        if ex:
            out.append(ex)
    return out


def _fields_note(source, target, id) -> dict:
    return {"source": source, "target": target, "id": id or "<file>-<line>"}


@register_dataset("jsonl")
def jsonl(data_dir: Path, part: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
          train: str = "", validation: str = "", test: str = "", source: str = "", target: str | list[str] = "",
          id: str = "", encoding: str = "utf-8", file: str = "", split: dict | None = None):
    """Your own JSON Lines files: data.options names the files per split (or one file and ``split``) and
    the fields."""
    stats = stats or ReadStats()
    path = Path(file if split else {"train": train, "validation": validation, "test": test}[part])
    note_file(stats, path, _fields_note(source, target, id))
    rows = ((path, lineno, f"{path.stem}-{lineno}", obj) for lineno, obj in jsonl_lines(path, stats, on_bad, encoding))
    if split:  # one file cut in three (``part``: the split asked for)
        rows = _split_of(rows, part, split)
    return _read_rows(rows, source, target, id, on_bad, stats)


def _delimited(path: Path, delimiter: str, encoding: str, on_bad: str, stats: ReadStats):
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: bytes that are not {encoding} ({e.reason} at byte {e.start}); set "
                        "data.options.encoding to the file's encoding (e.g. \"latin-1\") or convert the file "
                        "to UTF-8") from None
    except LookupError:
        raise DataError(f"{path}: unknown encoding {encoding!r} in data.options.encoding") from None
    reader = csv_rows(text, path, delimiter)
    header = next(reader, (1, []))[1]
    if not header:
        raise DataError(f"{path}:1: no header line; the first line must name the columns")
    for lineno, row in reader:
        if not row:
            continue
        if len(row) != len(header):
            if on_bad == "skip":
                stats.skip("malformed line")
                continue
            raise DataError(f"{path}:{lineno}: malformed row ({len(row)} fields, the header has "
                            f"{len(header)}); fix the row (quote fields holding the delimiter) or set "
                            "data.on_bad = \"skip\"")
        yield lineno, dict(zip(header, row))


def _delimited_reader(delimiter: str, name: str):
    def read(data_dir: Path, part: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
             train: str = "", validation: str = "", test: str = "", source: str = "",
             target: str | list[str] = "", id: str = "", encoding: str = "utf-8", file: str = "",
             split: dict | None = None):
        stats = stats or ReadStats()
        path = Path(file if split else {"train": train, "validation": validation, "test": test}[part])
        note_file(stats, path, _fields_note(source, target, id))
        rows = ((path, lineno, f"{path.stem}-{lineno}", obj)
                for lineno, obj in _delimited(path, delimiter, encoding, on_bad, stats))
        if split:
            rows = _split_of(rows, part, split)
        return _read_rows(rows, source, target, id, on_bad, stats)
    read.__doc__ = f"Your own {name} files with a header line: data.options names the files per split and the columns."
    read.__name__ = read.__qualname__ = name
    return read


csv_ = register_dataset("csv")(_delimited_reader(",", "csv"))
tsv = register_dataset("tsv")(_delimited_reader("\t", "tsv"))
for _r in (jsonl, csv_, tsv):
    _r.uses_data_dir = False
    _r.check_options = lambda o: _check_fields(o, files=True)


# ------------------------------------------------------------------------------------ Hugging Face
def import_datasets():
    try:
        import datasets
    except ImportError:
        raise DataError(f"reading a Hugging Face dataset needs the `datasets` package, which is not installed: "
                        f"{HF_INSTALL}") from None
    return datasets


def _is_saved(path: str) -> bool:
    p = Path(path)
    return p.is_dir() and any((p / f).is_file() for f in ("dataset_dict.json", "state.json"))


def hf_rows(path: str, name: str, split: str, data_files, revision: str, cache_dir: str = ""):
    """The rows (dicts) of one split of a hub dataset or a ``save_to_disk`` folder."""
    datasets = import_datasets()
    try:
        if _is_saved(path):
            ds = datasets.load_from_disk(path)
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise DataError(f"{path}: the saved dataset has no split '{split}' (it has "
                                    f"{', '.join(ds)}); map the split names with data.options.splits")
                ds = ds[split]
            else:
                raise DataError(f"{path}: holds one saved Dataset, not a DatasetDict; save a DatasetDict "
                                "with train / validation / test splits")
        else:
            ds = datasets.load_dataset(path, name or None, split=split, data_files=data_files or None,
                                       revision=revision or None, cache_dir=cache_dir or None)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; the user needs one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"Hugging Face dataset {path!r}" + (f" ({name})" if name else "") + f", split '{split}': "
                        f"could not be loaded ({type(e).__name__}: {msg[:300]}); check data.options.path / "
                        "name / splits, the network, or give a folder written by save_to_disk") from None
    return ds


HF_SPLITS = {"train": "train", "validation": "validation", "test": "test"}


def _hf_check(options: dict):
    if not options.get("path"):
        return "path", "name a hub dataset (\"EdinburghNLP/xsum\") or a save_to_disk folder: data.options.path"
    bad = [k for k in options.get("splits", {}) if k not in SPLITS]
    if bad:
        return "splits", f"unknown split '{bad[0]}'; the keys are our split names {', '.join(SPLITS)}"
    return _check_fields(options, files=False)


@register_dataset("hf")
def hf(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
       path: str = "", name: str = "", splits: dict = None, data_files: dict | str | list[str] = None,
       revision: str = "", cache_dir: str = "", source: str = "", target: str | list[str] = "", id: str = ""):
    """A Hugging Face dataset (hub name or save_to_disk folder) through `datasets`: fields by option."""
    stats = stats or ReadStats()
    their = {**HF_SPLITS, **(splits or {})}[split]
    ds = hf_rows(path, name, their, data_files or {}, revision, cache_dir)
    where = f"hf:{path}" + (f"/{name}" if name else "") + f"[{their}]"
    note_file(stats, where, _fields_note(source, target, id))
    stats.notes.setdefault("sizes_in_source", {})[split] = len(ds)
    cols = set(ds.column_names)
    missing = [k for k in [source, *_targets(target)] if k not in cols]
    if missing:
        raise DataError(f"{where}: no column '{missing[0]}' (columns: {', '.join(ds.column_names)}); set "
                        "data.options.source / target / id to the dataset's column names")
    rows = ((where, i, f"{their}-{i - 1}", obj) for i, obj in enumerate(ds, 1))
    return _read_rows(rows, source, target, id, on_bad, stats)


hf.uses_data_dir = False
hf.check_options = _hf_check
