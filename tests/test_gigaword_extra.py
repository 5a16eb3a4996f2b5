"""Gigaword's extra training files (data.options.extra_train): joined to train, de-duplicated against the
validation and test articles and against themselves, with the drops counted."""
from __future__ import annotations

import pytest

from seq2seq_zoo.data.corpora import DataError, ReadStats, load_split


def _write(root, name, pairs):
    d = root / "gigaword"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.article.txt").write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    (d / f"{name}.title.txt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


def test_extra_train_joins_and_deduplicates(tmp_path):
    _write(tmp_path, "train", [("a b c", "t1"), ("d e f", "t2")])
    _write(tmp_path, "valid", [("v v v", "tv")])
    _write(tmp_path, "test", [("x y z", "tx")])
    _write(tmp_path, "extra", [("g h i", "t3"), ("v v v", "leak"), ("x y z", "leak"), ("a b c", "dup"),
                               ("g h i", "dup2"), ("j k l", "t4")])
    st = ReadStats()
    train = load_split("gigaword", tmp_path, "train", stats=st, options={"extra_train": ["extra"]})
    assert [(e.source, e.references[0]) for e in train] == [("a b c", "t1"), ("d e f", "t2"), ("g h i", "t3"),
                                                           ("j k l", "t4")]
    assert st.skipped == {"extra: article also in the validation or test split": 2,
                          "extra: article already in the training split": 2}
    # validation and test are untouched by the option
    assert len(load_split("gigaword", tmp_path, "validation", options={"extra_train": ["extra"]})) == 1
    assert len(load_split("gigaword", tmp_path, "train")) == 2
    with pytest.raises(DataError, match="nope.article.txt"):
        load_split("gigaword", tmp_path, "train", options={"extra_train": ["nope"]})
