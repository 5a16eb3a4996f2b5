"""A corpus under <data_dir>/<dataset>/ is parsed once per process while its files are unchanged: the
same examples and the same read counts and notes every time, and a changed file is read again."""
from __future__ import annotations

import json
import os
import time

import pytest

from conftest import write_dialogsum
from seq2seq_zoo.data import corpora
from seq2seq_zoo.data.corpora import ReadStats, load_split


def _age(root, seconds=60):
    """Set every file's mtime ``seconds`` in the past (a freshly written file is read again each time)."""
    for p in (root / "dialogsum").iterdir():
        t = time.time() - seconds
        os.utime(p, (t, t))


@pytest.fixture
def count_reads(monkeypatch):
    calls = []
    real = corpora._jsonl_rows

    def counting(path, *a, **k):
        calls.append(path)
        return real(path, *a, **k)
    monkeypatch.setattr(corpora, "_jsonl_rows", counting)
    monkeypatch.setattr(corpora, "_PARSED", type(corpora._PARSED)())
    return calls


def _skipping_corpus(tmp_path):
    root = write_dialogsum(tmp_path / "data", n_train=6)
    p = root / "dialogsum" / "dialogsum.train.jsonl"
    p.write_text(p.read_text() + json.dumps({"fname": "e", "dialogue": "", "summary": "x"}) + "\n")
    return root


def test_unchanged_corpus_is_parsed_once_with_the_same_examples_and_counts(tmp_path, count_reads):
    root = _skipping_corpus(tmp_path)
    _age(root)
    a, b = ReadStats(), ReadStats()
    first = load_split("dialogsum", root, "train", stats=a)
    second = load_split("dialogsum", root, "train", stats=b)
    assert len(count_reads) == 1
    assert [e.id for e in first] == [e.id for e in second] == [f"train_{i}" for i in range(6)]
    assert (a.read, a.skipped, a.notes) == (b.read, b.skipped, b.notes) and sum(a.skipped.values()) == 1
    second.pop()                                       # the caller's list is its own
    assert len(load_split("dialogsum", root, "train")) == 6 and len(count_reads) == 1
    load_split("dialogsum", root, "train", on_bad="skip")   # other settings: read on their own
    load_split("dialogsum", root, "validation")
    assert len(count_reads) == 3


def test_a_changed_or_fresh_file_is_read_again(tmp_path, count_reads):
    root = write_dialogsum(tmp_path / "data", n_train=6)
    load_split("dialogsum", root, "train")
    load_split("dialogsum", root, "train")
    assert len(count_reads) == 2                       # written just now: not kept
    _age(root)
    load_split("dialogsum", root, "train")
    assert len(load_split("dialogsum", root, "train")) == 6 and len(count_reads) == 3
    write_dialogsum(tmp_path / "data", n_train=7)     # a new version of the corpus, same paths
    _age(root, 30)
    assert len(load_split("dialogsum", root, "train")) == 7 and len(count_reads) == 4
    p = root / "dialogsum" / "dialogsum.train.jsonl"
    p.write_text(p.read_text().replace("train_0", "train_X"))   # same size, later mtime
    _age(root, 10)
    assert load_split("dialogsum", root, "train")[0].id == "train_X" and len(count_reads) == 5
