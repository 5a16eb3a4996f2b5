"""The cnn_dailymail and inshorts readers on fixture files: splits, options, bad rows, Latin-1 bytes,
the seeded Inshorts split, and ROUGE-Lsum on highlight sentences."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from seq2seq_zoo.data.corpora import DataError, ReadStats, load_split
from seq2seq_zoo.data.news import split_draw
from seq2seq_zoo.metrics import rouge, sentences_newline


# ---------------------------------------------------------------------------------------- cnn_dailymail
def _cnn(i: int, cnn: bool = True, highlights: int = 3, id_: str | None = "auto") -> dict:
    lead = "WASHINGTON (CNN) -- " if cnn else "By . Daily Mail Reporter . PUBLISHED: . 10:00 EST . "
    art = lead + " ".join(f"word{i}x{j}" for j in range(40)) + " ."
    hl = "\n".join(f"highlight {k} of story {i}" + (" ." if k % 2 else "") for k in range(highlights))
    return {"id": f"{i:040x}" if id_ == "auto" else id_, "article": art, "highlights": hl}


def write_cnn(root: Path) -> Path:
    d = root / "cnn_dailymail"
    d.mkdir(parents=True)

    def dump(name, rows):
        (d / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    dump("cnn_dailymail.train.first3.jsonl", [_cnn(0, id_=None), _cnn(1), _cnn(2, cnn=False)])
    dump("cnn_dailymail.train.tail2.jsonl", [_cnn(3, cnn=False, highlights=5), _cnn(4, highlights=1)])
    dump("cnn_dailymail.validation.first2.jsonl", [_cnn(5), _cnn(6)])
    dump("cnn_dailymail.test.first2.jsonl", [_cnn(7), _cnn(8, cnn=False)])
    return root


def test_cnn_train_is_every_train_file_and_highlights_stay_sentences(tmp_path):
    root = write_cnn(tmp_path)
    st = ReadStats()
    train = load_split("cnn_dailymail", root, "train", stats=st)
    assert [e.id for e in train] == ["cnn_dailymail.train.first3-1", f"{1:040x}", f"{2:040x}", f"{3:040x}",
                                     f"{4:040x}"]
    assert train[1].references == ["highlight 0 of story 1\nhighlight 1 of story 1 .\nhighlight 2 of story 1"]
    assert train[1].source.startswith("WASHINGTON (CNN) -- word1x0")
    assert len(st.notes["files"]) == 2 and st.notes["fields"]["source"] == "article"
    assert [len(load_split("cnn_dailymail", root, s)) for s in ("validation", "test")] == [2, 2]


def test_cnn_only_first_k_highlights_and_source_words(tmp_path):
    root = write_cnn(tmp_path)
    st = ReadStats()
    opts = {"cnn_only": True, "max_highlights": 2, "max_source_words": 10}
    train = load_split("cnn_dailymail", root, "train", stats=st, options=opts)
    assert [e.id[-1] for e in train] == ["1", "1", "4"]          # story 0 (no id: file-line), 1, 4
    assert list(st.skipped.values()) == [2] and "(CNN)" in next(iter(st.skipped))
    assert train[1].references == ["highlight 0 of story 1\nhighlight 1 of story 1 ."]
    assert train[2].references == ["highlight 0 of story 4"]     # fewer than k: all of them
    assert len(train[0].source.split()) == 10
    assert "CNN stories only" in st.notes["filter"]


def test_cnn_only_by_id_from_ids_or_story_urls(tmp_path):
    """cnn_ids: ids, or story URLs hashed as the corpus names stories (sha1 of the URL); rows without an
    id fall back to the marker."""
    import hashlib
    root = write_cnn(tmp_path)
    url = "http://web.archive.org/web/2015/http://www.cnn.com/2015/story"
    sha = hashlib.sha1(url.encode()).hexdigest()
    ids = tmp_path / "cnn_ids.txt"
    ids.write_text(f"{2:040x}\n{url}\n\n", encoding="utf-8")   # story 2 is Daily Mail by its text
    from seq2seq_zoo.data.news import load_cnn_ids
    assert load_cnn_ids(ids) == {f"{2:040x}", sha}
    st = ReadStats()
    train = load_split("cnn_dailymail", root, "train", stats=st, options={"cnn_only": True, "cnn_ids": str(ids)})
    # story 0 has no id (kept by its marker); story 2 is kept by id; 1, 3, 4 are not in the list
    assert [e.id for e in train] == ["cnn_dailymail.train.first3-1", f"{2:040x}"]
    assert st.skipped == {f"not a CNN story (id not in {ids})": 3} and "by id (2 ids" in st.notes["filter"]


def _append(root: Path, name: str, raw: bytes) -> tuple[Path, int]:
    p = root / "cnn_dailymail" / name
    with open(p, "ab") as f:
        f.write(raw)
    return p, p.read_bytes().count(b"\n")


@pytest.mark.parametrize("raw, why", [
    (b'{"id": "x", "article": "(CNN) a", "highlights": \n', "malformed line"),
    ('{"id": "x", "article": "(CNN) caf\u00e9", "highlights": "h"}\n'.encode("latin-1"), "malformed line"),
    (b'{"id": "x", "article": "(CNN) no highlights here"}\n', "missing field"),
])
def test_cnn_bad_rows_name_file_and_line_or_are_skipped_and_counted(tmp_path, raw, why):
    root = write_cnn(tmp_path)
    p, n = _append(root, "cnn_dailymail.validation.first2.jsonl", raw)
    with pytest.raises(DataError) as e:
        load_split("cnn_dailymail", root, "validation")
    assert f"{p}:{n}" in str(e.value)
    if why == "missing field":
        assert "'highlights'" in str(e.value)
    st = ReadStats()
    assert len(load_split("cnn_dailymail", root, "validation", "skip", st)) == 2 and st.skipped == {why: 1}


def test_cnn_empty_article_skipped_and_counted(tmp_path):
    root = write_cnn(tmp_path)
    _append(root, "cnn_dailymail.test.first2.jsonl", json.dumps({"id": "e", "article": " ", "highlights": "h"}).encode() + b"\n")
    st = ReadStats()
    assert len(load_split("cnn_dailymail", root, "test", stats=st)) == 2
    assert st.skipped == {"empty or missing source": 1}


def test_cnn_missing_split_files_say_how_to_get_them(tmp_path):
    (tmp_path / "cnn_dailymail").mkdir()
    with pytest.raises(DataError, match="zoo data download cnn_dailymail"):
        load_split("cnn_dailymail", tmp_path, "train")


def test_rouge_lsum_uses_highlight_lines_as_sentences(tmp_path):
    """The reader keeps highlights one sentence a line (no final period needed), and ROUGE-Lsum scores
    them as sentences: the same words joined into one sentence score lower."""
    root = write_cnn(tmp_path)
    ref = load_split("cnn_dailymail", root, "train")[1].references[0]
    assert sentences_newline(ref).split("\n") == ref.split("\n") and len(ref.split("\n")) == 3
    lines, pred = "police said police said\ncourt said court court", "police said court. court police."
    as_lines, _ = rouge([pred], [[lines]])
    as_one, _ = rouge([pred], [[lines.replace("\n", " ")]])
    assert as_lines["rougeLsum"] == pytest.approx(100 * 10 / 13)   # union-LCS 5 of 8 ref / 5 of 5 pred tokens
    assert as_one["rougeLsum"] < as_lines["rougeLsum"] - 20


def test_cnn_staged_files_give_the_documented_counts():
    """The staged corpus: train = both train files (1,322), CNN-only by marker as documented."""
    from seq2seq_zoo.data.corpora import resolve_data_dir
    try:
        root = resolve_data_dir("cnn_dailymail")
    except DataError:
        pytest.skip("staged cnn_dailymail not available")
    sizes = {s: len(load_split("cnn_dailymail", root, s)) for s in ("train", "validation", "test")}
    assert sizes == {"train": 1322, "validation": 1000, "test": 500}
    cnn = {s: len(load_split("cnn_dailymail", root, s, options={"cnn_only": True})) for s in sizes}
    assert cnn == {"train": 621, "validation": 975, "test": 486}


# ------------------------------------------------------------------------------------ cnn_dailymail_see
def _see_row(i: int, source: str, highlights: int = 3) -> dict:
    art = ("washington ( cnn ) -- " if source == "cnn" else "by . daily mail reporter . ") + \
        " ".join(f"tok{i}x{j}" for j in range(30)) + " ."
    hl = "\n".join(f"highlight {k} of story {i}" for k in range(highlights))
    return {"id": None, "article": art, "highlights": hl, "abstract": "", "source": source,
            "source_chunk": "x", "index_in_chunk": i, "see_position": 100 + i}


def write_see(root: Path) -> Path:
    import gzip
    d = root / "cnn_dailymail_see"
    d.mkdir(parents=True)
    rows = {"train": [_see_row(0, "cnn"), _see_row(1, "dailymail"), _see_row(2, "cnn", highlights=1),
                      _see_row(3, "dailymail")],
            "validation": [_see_row(4, "cnn"), _see_row(5, "dailymail")],
            "test": [_see_row(6, "dailymail"), _see_row(7, "cnn", highlights=4)]}
    for split, rs in rows.items():
        with gzip.open(d / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rs))
    return root


def test_cnn_see_keeps_cnn_by_source_field_first_k_highlights(tmp_path):
    root = write_see(tmp_path)
    st = ReadStats()
    train = load_split("cnn_dailymail_see", root, "train", stats=st, options={"max_highlights": 2})
    assert [e.id for e in train] == ["see-train-100", "see-train-102"]    # CNN only, by the source field
    assert st.skipped == {"not a cnn story (source = 'dailymail')": 2}
    assert train[0].references == ["highlight 0 of story 0\nhighlight 1 of story 0"]
    assert train[1].references == ["highlight 0 of story 2"]              # fewer than k: all of them
    assert st.notes["files"] == [str(root / "cnn_dailymail_see" / "train.jsonl.gz")]
    test = load_split("cnn_dailymail_see", root, "test", options={"max_source_words": 5})
    assert [e.id for e in test] == ["see-test-107"] and test[0].source == "washington ( cnn ) --"
    assert test[0].references[0].count("\n") == 3                         # no limit: all 4 highlights
    every = load_split("cnn_dailymail_see", root, "train", options={"source": "all"})
    dm = load_split("cnn_dailymail_see", root, "train", options={"source": "dailymail"})
    assert len(every) == 4 and [e.id for e in dm] == ["see-train-101", "see-train-103"]


def test_cnn_see_is_not_the_raw_text_reader_and_bad_files_are_named(tmp_path):
    from seq2seq_zoo.registry import check_reader_options
    root = write_see(tmp_path)
    with pytest.raises(DataError, match="cnn_dailymail.train"):          # the raw-text files are not read
        load_split("cnn_dailymail", root, "train")
    assert check_reader_options("cnn_dailymail_see", {"source": "bbc"})[0] == "source"
    assert check_reader_options("cnn_dailymail_see", {"max_highlights": -1})[0] == "max_highlights"
    assert check_reader_options("cnn_dailymail_see", {"cnn_only": True})[0] == "cnn_only"
    p = root / "cnn_dailymail_see" / "validation.jsonl.gz"
    p.write_bytes(b"not gzip")
    with pytest.raises(DataError, match=r"validation.jsonl.gz: not a readable gzip file"):
        load_split("cnn_dailymail_see", root, "validation")
    import gzip
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(json.dumps(_see_row(4, "cnn")) + "\n{broken\n")
    with pytest.raises(DataError, match=r"validation.jsonl.gz:2: malformed JSON line"):
        load_split("cnn_dailymail_see", root, "validation")
    assert len(load_split("cnn_dailymail_see", root, "validation", "skip")) == 1


def test_cnn_see_staged_files_give_the_documented_counts():
    from seq2seq_zoo.data.corpora import resolve_data_dir
    try:
        root = resolve_data_dir("cnn_dailymail_see")
    except DataError:
        pytest.skip("staged cnn_dailymail_see not available")
    test = load_split("cnn_dailymail_see", root, "test", options={"max_highlights": 2})
    assert len(test) == 1092 and all(e.source == e.source.lower() for e in test[:50])
    assert all(1 <= e.references[0].count("\n") + 1 <= 2 for e in test)


# ------------------------------------------------------------------------------------------- inshorts
HEADER = ["author", "date", "headlines", "read_more", "text", "ctext"]


def _inshorts_rows(n: int) -> list[list[str]]:
    rows = []
    for i in range(n):
        ctext = "" if i % 10 == 3 else ("short" if i % 10 == 5 else f"Article number {i}, with a comma, and\n"
                                        f"a second line about the news story {i} that is long enough.")
        rows.append(["A", "1 Jan", f"Headline {i}", "url", f"Summary text of story {i} here.", ctext])
    return rows


def write_inshorts(root: Path, n: int = 40, encoding: str = "utf-8", extra: str = "", name="news_summary.utf8.csv") -> Path:
    d = root / "inshorts"
    d.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(HEADER)
    w.writerows(_inshorts_rows(n))
    (d / name).write_bytes((buf.getvalue() + extra).encode(encoding))
    return root


def _ids(root, split, **opts):
    return [e.id for e in load_split("inshorts", root, split, options=opts)]


def test_inshorts_split_same_for_same_seed_disjoint_and_complete(tmp_path):
    root = write_inshorts(tmp_path, n=40)
    a = {s: _ids(root, s) for s in ("train", "validation", "test")}
    assert a == {s: _ids(root, s) for s in a}                    # same seed, same split
    sets = [set(v) for v in a.values()]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    # all rows but the 4 empty sources (rows 3, 13, 23, 33) land in exactly one split
    assert set().union(*sets) == {f"inshorts-{i}" for i in range(40) if i % 10 != 3}
    draw = split_draw(40, [0.9, 0.05, 0.05], 0)
    assert [len(draw[s]) for s in ("train", "validation", "test")] == [36, 2, 2]
    other = {s: _ids(root, s, split_seed=1) for s in a}
    assert other != a                                           # another seed, another draw
    assert [len(split_draw(40, [0.5, 0.25, 0.25], 0)[s]) for s in ("train", "validation", "test")] == [20, 10, 10]


def test_inshorts_filters_and_target_never_move_rows_between_splits(tmp_path):
    root = write_inshorts(tmp_path, n=40)
    st = ReadStats()
    plain = load_split("inshorts", root, "train", stats=st)
    assert st.skipped == {"empty or missing source": sum(1 for i in range(40) if i % 10 == 3 and
                                                           f"inshorts-{i}" in {f"inshorts-{r}" for r in
                                                                               split_draw(40, [.9, .05, .05], 0)["train"]})}
    st2 = ReadStats()
    filt = load_split("inshorts", root, "train", stats=st2,
                      options={"min_source_chars": 50, "min_summary_chars": 10, "target": "headlines"})
    assert {e.id for e in filt} < {e.id for e in plain}
    assert st2.skipped["source shorter than 50 characters"] == len(plain) - len(filt)
    assert all(e.references[0].startswith("Headline") for e in filt)
    assert plain[0].references[0].startswith("Summary text")
    assert "\n" in plain[0].source                              # quoted multi-line field read whole
    assert st.notes["split"]["seed"] == 0 and len(st.notes["split"]["ids_sha256"]) == 64
    assert st.notes["split"]["ids_sha256"] == st2.notes["split"]["ids_sha256"]


def test_inshorts_latin1_original_is_read(tmp_path):
    """Kaggle's original news_summary.csv is Latin-1: read as such, and noted."""
    root = write_inshorts(tmp_path, n=20, encoding="latin-1", name="news_summary.csv",
                          extra='X,d,H,u,Caf\u00e9 summary here.,"Caf\u00e9 article with enough characters to pass."\n')
    st = ReadStats()
    exs = [e for s in ("train", "validation", "test") for e in load_split("inshorts", root, s, stats=st)]
    assert any(e.source.startswith("Caf\u00e9 article") for e in exs)
    assert "latin-1" in st.notes["encoding"]


def test_inshorts_malformed_row_and_missing_column(tmp_path):
    root = write_inshorts(tmp_path, n=20, extra="only,three,fields\n")
    p = root / "inshorts" / "news_summary.utf8.csv"
    line = p.read_bytes().count(b"\n")
    msgs = []
    for s in ("train", "validation", "test"):
        try:
            load_split("inshorts", root, s)
        except DataError as e:
            msgs.append(str(e))
    assert len(msgs) == 1 and f"{p}:{line}: malformed CSV row" in msgs[0]
    total = sum(len(load_split("inshorts", root, s, "skip")) for s in ("train", "validation", "test"))
    assert total == 18                                             # 20 rows - 2 empty sources
    p.write_text("author,headlines,text\nA,H,T\n", encoding="utf-8")
    with pytest.raises(DataError, match=r":1: no column 'ctext'"):
        load_split("inshorts", root, "train")


def test_inshorts_staged_file_counts():
    from seq2seq_zoo.data.corpora import resolve_data_dir
    try:
        root = resolve_data_dir("inshorts")
    except DataError:
        pytest.skip("staged inshorts not available")
    stats = {s: ReadStats() for s in ("train", "validation", "test")}
    sizes = {s: len(load_split("inshorts", root, s, stats=st)) for s, st in stats.items()}
    skipped = sum(st.skipped.get("empty or missing source", 0) for st in stats.values())
    assert skipped == 118 and sum(sizes.values()) == 4514 - 118
    assert [stats[s].notes["split"]["rows_in_split"] for s in stats] == [4062, 226, 226]


def test_inshorts_text_to_headline_same_draw_as_ctext(tmp_path):
    """source = "text": the ~60-word summary becomes the source, the headline the target; the split draw
    is the same as for ctext -> text (rows with an empty ctext are kept: their text is not empty)."""
    root = write_inshorts(tmp_path, n=40)
    st = ReadStats()
    ex = load_split("inshorts", root, "validation", stats=st, options={"source": "text", "target": "headlines"})
    rows = split_draw(40, [0.9, 0.05, 0.05], 0)["validation"]
    assert [e.id for e in ex] == [f"inshorts-{r}" for r in rows]
    assert [(e.source, e.references) for e in ex] == [(f"Summary text of story {r} here.", [f"Headline {r}"])
                                                      for r in rows]
    assert st.notes["fields"]["source"] == "text" and st.notes["fields"]["target"] == "headlines"
    full = sum(len(load_split("inshorts", root, s, options={"source": "text", "target": "headlines"}))
               for s in ("train", "validation", "test"))
    assert full == 40                                             # empty ctext does not matter here
    from seq2seq_zoo.registry import check_reader_options
    assert check_reader_options("inshorts", {"source": "headlines"})[0] == "source"
    assert check_reader_options("inshorts", {"source": "text", "target": "text"})[0] == "target"
