"""News corpora: CNN/DailyMail (Hermann et al. 2015; See et al. 2017) and Inshorts news summary.

``cnn_dailymail``: JSON Lines ``{id, article, highlights}`` (the Hugging Face 3.0.0 layout, highlight
sentences separated by "\\n"), from ``<data_dir>/cnn_dailymail/cnn_dailymail.<split>*.jsonl`` (all files of a
split, in name order: the staged train split is two files), or from the Hugging Face hub with ``hf``.

``cnn_dailymail_see``: CNN/DailyMail as See et al. (2017) prepared it (lower-cased, word-tokenized), from
``<data_dir>/cnn_dailymail_see/<split>.jsonl.gz`` (gzipped JSON Lines with ``article``, ``highlights`` and
``source`` = ``cnn`` / ``dailymail``). A corpus of its own: never mixed with the raw-text ``cnn_dailymail`` files.

``inshorts``: the Kaggle ``news_summary.csv`` (author, date, headlines, read_more, text, ctext). It has no
splits: train / validation / test are drawn once over all rows with a fixed seed (see :func:`inshorts`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from seq2seq_zoo.data.corpora import DataError, ReadStats, jsonl_lines, make_example, note_file, csv_rows
from seq2seq_zoo.registry import register_dataset

# By default an article is a CNN story when its dateline carries "(CNN)" ("WASHINGTON (CNN) -- ...",
# "(CNN)The ..."); Daily Mail stories never do. The ids are SHA1 hashes of the story URLs, so the source
# cannot be read from an id alone: ``cnn_ids`` gives the CNN ids (or URLs) to match. On the staged files
# the marker rule keeps 412/500 of train.first500 (HF's train
# split starts with CNN stories; those missed are CNN's partner stories such as "(Rolling Stone) --" and
# "Editor's note:" opinion pieces), 209/822 of the tail file (mixed; none of the 300 Daily Mail bylines
# "By . ... PUBLISHED:" is kept), 975/1,000 validation and 486/500 test articles.
CNN_MARKER = "(CNN)"
CNN_MARKER_CHARS = 300


def _cut(article, highlights, max_source_words: int, max_highlights: int):
    """The article's first ``max_source_words`` words and the first ``max_highlights`` highlight sentences
    (0: all), one sentence a line: ROUGE-Lsum takes newlines as sentence boundaries. Values that are not
    strings pass through for the row check to name."""
    if isinstance(article, str) and max_source_words:
        article = " ".join(article.split()[:max_source_words])
    if isinstance(highlights, str):
        sents = [h.strip() for h in highlights.split("\n") if h.strip()]
        highlights = "\n".join(sents[:max_highlights] if max_highlights else sents)
    return article, highlights


def _cnn_rows(data_dir: Path, split: str, stats: ReadStats, on_bad: str, hf: str, hf_config: str):
    """(where, line or row number, object) for every row of the split."""
    if hf:
        from seq2seq_zoo.data.custom import hf_rows
        where = f"hf:{hf}" + (f"/{hf_config}" if hf_config else "")
        note_file(stats, f"{where} split {split}")
        for i, row in enumerate(hf_rows(hf, hf_config, split, {}, ""), 1):
            yield where, i, row
        return
    folder = data_dir / "cnn_dailymail"
    files = sorted(folder.glob(f"cnn_dailymail.{split}.*jsonl"))
    if not files:
        raise DataError(f"{folder}: no cnn_dailymail.{split}*.jsonl file (get the corpus with `zoo data download "
                        f"cnn_dailymail`, or read the full corpus from the Hugging Face hub with "
                        f"data.options.hf = \"abisee/cnn_dailymail\")")
    for path in files:
        note_file(stats, path)
        for lineno, obj in jsonl_lines(path, stats, on_bad):
            yield path, lineno, obj


def _cnn_check(options: dict):
    for k in ("max_highlights", "max_source_words"):
        if options.get(k, 0) < 0:
            return k, f"{options[k]} must be >= 0 (0 = no limit)"
    if options.get("cnn_ids"):
        if not options.get("cnn_only"):
            return "cnn_ids", "goes with cnn_only = true (it says which articles are CNN's)"
        if not Path(options["cnn_ids"]).is_file():
            return "cnn_ids", (f"file {options['cnn_ids']!r} not found (relative paths are taken from the folder "
                               "you run zoo in)")
    return None


def load_cnn_ids(path: str | Path) -> set[str]:
    """CNN story ids from a file of ids or story URLs, one a line (e.g. abisee/cnn-dailymail's
    url_lists/cnn_wayback_*_urls.txt). A URL becomes its id as the corpus names stories: the sha1 hex
    digest of the URL (See et al.'s make_datafiles.py ``hashhex``; the Hugging Face ids are the same)."""
    ids = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            ids.add(hashlib.sha1(line.encode("utf-8")).hexdigest() if "://" in line else line.lower())
    return ids


def _cnn_uses_dir(options: dict) -> bool:
    return not options.get("hf")


@register_dataset("cnn_dailymail")
def cnn_dailymail(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
                  cnn_only: bool = False, cnn_ids: str = "", max_highlights: int = 0, max_source_words: int = 0,
                  hf: str = "", hf_config: str = "3.0.0"):
    """CNN/DailyMail (jsonl article/highlights/id or the HF hub); highlights kept one sentence a line.

    cnn_only          keep only CNN stories: "(CNN)" in the first 300 characters of the article, or, with
    cnn_ids           a file of CNN story ids or URLs (one a line), by id; rows without an id by the marker
    max_highlights    keep the first k highlight sentences (0 = all)
    max_source_words  truncate the article to its first k whitespace-separated words (0 = no limit)
    hf, hf_config     read the split from the Hugging Face hub (e.g. "abisee/cnn_dailymail", "3.0.0")
                      through ``datasets`` instead of the local files (``pip install -e ".[hf]"``)
    """
    stats = stats or ReadStats()
    out = []
    known_cnn = load_cnn_ids(cnn_ids) if cnn_only and cnn_ids else None
    for where, lineno, obj in _cnn_rows(Path(data_dir), split, stats, on_bad, hf, hf_config):
        missing = [k for k in ("article", "highlights") if k not in obj]
        if missing:
            if on_bad == "skip":
                stats.skip("missing field")
                continue
            raise DataError(f"{where}:{lineno}: missing field '{missing[0]}' (has {', '.join(sorted(obj))}); "
                            "a CNN/DailyMail row needs article and highlights")
        article, highlights = obj["article"], obj["highlights"]
        if cnn_only and known_cnn is not None and obj.get("id"):
            if str(obj["id"]).lower() not in known_cnn:
                stats.skip(f"not a CNN story (id not in {cnn_ids})")
                continue
        elif cnn_only and isinstance(article, str) and CNN_MARKER not in article[:CNN_MARKER_CHARS]:
            stats.skip(f"not a CNN story ('{CNN_MARKER}' not in its first {CNN_MARKER_CHARS} characters)")
            continue
        article, highlights = _cut(article, highlights, max_source_words, max_highlights)
        id_ = obj.get("id")
        stem = Path(str(where)).name.removesuffix(".jsonl")
        ex = make_example(stats, where, lineno, on_bad, id_ if id_ else f"{stem}-{lineno}", article, [highlights])
        if ex is not None:
            out.append(ex)
    stats.notes["fields"] = {
        "source": "article" + (f" (first {max_source_words} words)" if max_source_words else ""),
        "target": "highlights, one sentence a line" + (f" (first {max_highlights})" if max_highlights else ""),
        "id": "id (rows without one: <file>-<line>)"}
    if cnn_only:
        marker = f"'{CNN_MARKER}' in the first {CNN_MARKER_CHARS} characters"
        stats.notes["filter"] = (f"CNN stories only: by id ({len(known_cnn)} ids from {cnn_ids}; rows without "
                                 f"an id: {marker})" if known_cnn is not None else f"CNN stories only: {marker}")
    return out


cnn_dailymail.check_options = _cnn_check
cnn_dailymail.uses_data_dir = _cnn_uses_dir


# ------------------------------------------------------------------------------- cnn_dailymail_see
SEE_SOURCES = ("cnn", "dailymail", "all")


def _see_check(options: dict):
    if options.get("source", "cnn") not in SEE_SOURCES:
        return "source", f"{options['source']!r} is not one of {', '.join(SEE_SOURCES)}"
    for k in ("max_highlights", "max_source_words"):
        if options.get(k, 0) < 0:
            return k, f"{options[k]} must be >= 0 (0 = no limit)"
    return None


def _gz_jsonl(path: Path, stats: ReadStats, on_bad: str):
    """(line number, object) for every line of a gzipped JSON Lines file (``corpora.jsonl_lines`` reads it)."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (the See et al. CNN/DailyMail files are "
                        "<split>.jsonl.gz in the cnn_dailymail_see folder)")
    yield from jsonl_lines(path, stats, on_bad)


@register_dataset("cnn_dailymail_see")
def cnn_dailymail_see(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
                      source: str = "cnn", max_highlights: int = 0, max_source_words: int = 0):
    """CNN/DailyMail in See et al.'s tokenized, lower-cased form (<split>.jsonl.gz); highlights one a line.

    source            "cnn" (default), "dailymail" or "all": keep the stories of that source (the
                      ``source`` field of each row)
    max_highlights    keep the first k highlight sentences (0 = all; See et al.'s CNN setting in the
                      recurrent paper: 2)
    max_source_words  truncate the article to its first k tokens (0 = no limit; See et al.: 400)
    """
    stats = stats or ReadStats()
    path = Path(data_dir) / "cnn_dailymail_see" / f"{split}.jsonl.gz"
    note_file(stats, path, {
        "source": "article" + (f" (first {max_source_words} tokens)" if max_source_words else ""),
        "target": "highlights, one sentence a line" + (f" (first {max_highlights})" if max_highlights else ""),
        "id": f"see-{split}-<see_position>"})
    out = []
    for lineno, obj in _gz_jsonl(path, stats, on_bad):
        missing = [k for k in ("article", "highlights", "source") if k not in obj]
        if missing:
            if on_bad == "skip":
                stats.skip("missing field")
                continue
            raise DataError(f"{path}:{lineno}: missing field '{missing[0]}' (has {', '.join(sorted(obj))}); "
                            "a row needs article, highlights and source")
        if source != "all" and obj["source"] != source:
            stats.skip(f"not a {source} story (source = {obj['source']!r})")
            continue
        article, highlights = obj["article"], obj["highlights"]
        article, highlights = _cut(article, highlights, max_source_words, max_highlights)
        pos = obj.get("see_position")
        id_ = obj.get("id") or (f"see-{split}-{pos}" if pos is not None else f"see-{split}-line{lineno}")
        ex = make_example(stats, path, lineno, on_bad, id_, article, [highlights])
        if ex is not None:
            out.append(ex)
    stats.notes["filter"] = ("all stories" if source == "all"
                             else f"{source} stories only (the source field of each row)")
    return out


cnn_dailymail_see.check_options = _see_check


# ------------------------------------------------------------------------------------------- inshorts
INSHORTS_FILES = ("news_summary.utf8.csv", "news_summary.csv")  # staged UTF-8 copy, or Kaggle's Latin-1 original


def _inshorts_check(options: dict):
    if options.get("source", "ctext") not in ("ctext", "text"):
        return "source", f"{options['source']!r} is not one of ctext, text"
    if options.get("target", "text") not in ("text", "headlines"):
        return "target", f"{options['target']!r} is not one of text, headlines"
    if options.get("source", "ctext") == options.get("target", "text"):
        return "target", f"{options['target']!r} is also the source (use source = \"text\" with target = \"headlines\")"
    for k in ("min_source_chars", "min_summary_chars"):
        if options.get(k, 0) < 0:
            return k, f"{options[k]} must be >= 0"
    fr = options.get("split_fractions")
    if fr is not None and (len(fr) != 3 or any(f < 0 for f in fr) or abs(sum(fr) - 1) > 1e-6):
        return "split_fractions", f"{fr!r} must be three fractions >= 0 (train, validation, test) that sum to 1"
    return None


def split_draw(n_rows: int, fractions: list[float], seed: int) -> dict[str, np.ndarray]:
    """Row indices of train / validation / test: one seeded permutation of all ``n_rows`` rows, cut at the
    fractions (validation and test rounded, train takes the rest). Drawn over every row of the file,
    before any row is dropped, so filters and the target field never move a row to another split."""
    perm = np.random.default_rng(seed).permutation(n_rows)
    n_val, n_test = round(fractions[1] * n_rows), round(fractions[2] * n_rows)
    n_train = n_rows - n_val - n_test
    return {"train": np.sort(perm[:n_train]), "validation": np.sort(perm[n_train:n_train + n_val]),
            "test": np.sort(perm[n_train + n_val:])}


def _decode_csv(path: Path, stats: ReadStats) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Kaggle's original file is Latin-1; every byte string decodes as Latin-1, so this cannot fail
        stats.notes["encoding"] = "latin-1 (the file is not UTF-8)"
        return raw.decode("latin-1")


@register_dataset("inshorts")
def inshorts(data_dir: Path, split: str, on_bad: str = "skip_empty", stats: ReadStats | None = None, *,
             source: str = "ctext", target: str = "text", min_source_chars: int = 0, min_summary_chars: int = 0,
             split_fractions: list[float] = (0.9, 0.05, 0.05), split_seed: int = 0):
    """Inshorts news summary (csv: source ctext or text; target text or headlines); seeded 90/5/5 split.

    source             "ctext" (the full article) or "text" (the ~60-word summary: text -> headline)
    target             "text" (the ~60-word summary) or "headlines"
    min_source_chars   drop rows whose source is shorter (the published recipe: 50)
    min_summary_chars  drop rows whose target is shorter (the published recipe: 10)
    split_fractions    train / validation / test fractions of all rows (default 0.9, 0.05, 0.05)
    split_seed         seed of the draw; the draw and each split's id hash go into the run record
    """
    stats = stats or ReadStats()
    folder = Path(data_dir) / "inshorts"
    path = next((folder / n for n in INSHORTS_FILES if (folder / n).is_file()), None)
    if path is None:
        raise DataError(f"{folder}: none of {', '.join(INSHORTS_FILES)} found (get it with `zoo data download "
                        "inshorts`)")
    note_file(stats, path, {"source": source, "target": target, "id": "inshorts-<row> (0-based data row)"})
    reader = csv_rows(_decode_csv(path, stats), path)
    header = next(reader, (1, []))[1]
    for col in (source, target):
        if col not in header:
            raise DataError(f"{path}:1: no column '{col}' in the header ({', '.join(header) or 'empty'}); "
                            "expected the Kaggle news_summary.csv columns author, date, headlines, read_more, "
                            "text, ctext")
    rows: list[tuple[int, list[str] | None]] = []
    for lineno, row in reader:
        rows.append((lineno, row))
    fractions = list(split_fractions)
    draw = split_draw(len(rows), fractions, split_seed)
    src_i, tgt_i = header.index(source), header.index(target)
    out = []
    for r in draw[split]:
        lineno, row = rows[r]
        if len(row) != len(header):
            if on_bad == "skip":
                stats.skip("malformed line")
                continue
            raise DataError(f"{path}:{lineno}: malformed CSV row ({len(row)} fields, the header has {len(header)}); "
                            "fix the row or set data.on_bad = \"skip\"")
        src, tgt = row[src_i], row[tgt_i]
        if src.strip() and len(src.strip()) < min_source_chars:
            stats.skip(f"source shorter than {min_source_chars} characters")
            continue
        if tgt.strip() and len(tgt.strip()) < min_summary_chars:
            stats.skip(f"summary shorter than {min_summary_chars} characters")
            continue
        ex = make_example(stats, path, lineno, on_bad, f"inshorts-{r}", src, [tgt])
        if ex is not None:
            out.append(ex)
    ids = ",".join(f"inshorts-{r}" for r in draw[split])
    stats.notes["split"] = {"rows_in_file": len(rows), "fractions": fractions, "seed": split_seed,
                            "draw": "numpy default_rng(seed).permutation over all rows, cut at the fractions",
                            "rows_in_split": int(len(draw[split])),
                            "ids_sha256": hashlib.sha256(ids.encode()).hexdigest()}
    return out


inshorts.check_options = _inshorts_check
