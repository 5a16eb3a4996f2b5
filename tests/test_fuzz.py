"""Property-based tests (hypothesis).

- The experiment-file loader, fed random TOML documents, random text, and random values for every known
  key of a valid file, only ever returns a valid experiment (every run spec's fields of their declared
  types, in range) or raises the suite's input error (ConfigError, exit 2 with one line) - never anything else.
- The text pipeline (normalise, tokenize, vocabulary, extended ids, encoding, batching, detokenize, the
  corpus reader) fed random Unicode - control characters, right-to-left marks, emoji, surrogate-free
  astral characters, very long lines, empty strings - never crashes.

Bounded (a few dozen examples each, no deadline) so the suite stays fast on 2 busy cores.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq_zoo.config import SECTIONS, ConfigError, Experiment, RunSpec, load_experiment
from seq2seq_zoo.config.values import type_ok
from seq2seq_zoo.data.batching import bucket_batches, collate, encode_examples
from seq2seq_zoo.data.corpora import DataError, Example, ReadStats, load_split
from seq2seq_zoo.data.text import TextConfig, detokenize, normalise, tokenize
from seq2seq_zoo.data.vocab import Vocab
from seq2seq_zoo.registry import MODELS, model_options

FUZZ = settings(max_examples=int(os.environ.get("ZOO_FUZZ_EXAMPLES", "60")), deadline=None,
                derandomize="ZOO_FUZZ_EXAMPLES" not in os.environ, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# --------------------------------------------------------------------------------- a TOML writer
# (tomllib only reads; a few lines here avoid a dependency for the tests alone)


def _key(k: str) -> str:
    return json.dumps(k, ensure_ascii=False)


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are TOML basic-string escapes
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_val(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    return "".join(f"{_key(k)} = {_val(v)}\n" for k, v in doc.items())


# ------------------------------------------------------------------------------------ strategies
KNOWN_KEYS = sorted({f"{sec}.{f.name}" for sec, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
                    | {k for m in MODELS.names() for k in model_options(m)} | {"model", "name", "seed"})
TOP = ["experiment", "defaults", "runs", "profiles", "grid", "decode"]
names = st.one_of(st.sampled_from(TOP + ["name", "dataset", "metrics", "seeds", "model", "train", "data",
                                         "decode", "eval", "cpu"] + KNOWN_KEYS), st.text(max_size=8))
scalars = st.one_of(st.integers(-3, 5), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.text(max_size=20), st.sampled_from(["transformer", "dialogsum", "rouge",
                                                                           "noam", "beam", "a", ""]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(names, inner, max_size=4)), max_leaves=12)
documents = st.dictionaries(names, values, max_size=6)

BASE = {"experiment": {"name": "fz", "dataset": "dialogsum", "metrics": ["rouge"], "seeds": [1]},
        "defaults": {"model": "transformer", "d_model": 32, "d_ff": 64, "heads": 2, "layers": 1},
        "runs": [{"name": "a"}]}


def _load(tmp: Path, text: str):
    path = tmp / "fuzz.toml"
    path.write_bytes(text.encode("utf-8"))
    try:
        return load_experiment(path)
    except ConfigError as e:
        msg = str(e)
        assert msg.startswith(str(path)) and "\n" not in msg.strip() and "Traceback" not in msg, msg
        return None


def _assert_valid(exp) -> None:
    """A loaded experiment: at least one run, and every section field of its declared type."""
    assert isinstance(exp, Experiment) and exp.runs
    for spec in exp.runs:
        assert isinstance(spec, RunSpec) and isinstance(spec.name, str) and isinstance(spec.model_options, dict)
        for sec, cls in SECTIONS.items():
            hints = typing.get_type_hints(cls)
            obj = getattr(spec, sec)
            for f in dataclasses.fields(cls):
                v = getattr(obj, f.name)
                assert type_ok(v, hints[f.name]), (sec, f.name, v)
                if isinstance(v, float):
                    assert math.isfinite(v), (sec, f.name, v)


@pytest.fixture(scope="module")
def fuzz_dir():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


# ----------------------------------------------------------------------------- the loader
@FUZZ
@given(doc=documents)
def test_random_toml_documents_load_or_raise_config_error(fuzz_dir, doc):
    exp = _load(fuzz_dir, to_toml(doc))
    if exp is not None:
        _assert_valid(exp)


@FUZZ
@given(text=st.text(max_size=300))
def test_random_text_as_experiment_file_raises_config_error(fuzz_dir, text):
    exp = _load(fuzz_dir, text)
    if exp is not None:
        _assert_valid(exp)


@FUZZ
@given(where=st.sampled_from(["defaults", "run"]), key=st.sampled_from(KNOWN_KEYS), value=values)
def test_random_values_for_known_keys_load_valid_or_raise_config_error(fuzz_dir, where, key, value):
    doc = json.loads(json.dumps(BASE))
    target = doc["defaults"] if where == "defaults" else doc["runs"][0]
    node = target
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    exp = _load(fuzz_dir, to_toml(doc))
    if exp is not None:
        _assert_valid(exp)


def test_the_base_document_is_valid(fuzz_dir):
    """Control: the document the key fuzzing starts from loads, so rejections come from the fuzzed value."""
    _assert_valid(_load(fuzz_dir, to_toml(BASE)))


# ------------------------------------------------------------------------------ the text pipeline
NASTY = ["\u200f", "\u202e", "\u200b", "\ufeff", "\x00", "\x1b", "\r", "\t", "\u2028", "\u0301", "😀", "👍🏽",
         "🇫🇷", "#Person1#:", "#", "<unk>", "<eos>", "ﬁ", "①", "Ⅻ", "İ", "ß", "\U000e0001", " "]
texts = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=5)), max_size=60).map("".join),
    st.integers(0, 3).map(lambda k: ["", "   ", "\n\n", "x" * 200_000][k]),  # empty, blank, a very long line
)


@FUZZ
@given(src=texts, tgt=texts, lower=st.booleans(), num=st.booleans())
def test_text_pipeline_never_crashes_on_random_unicode(src, tgt, lower, num):
    cfg = TextConfig(lowercase=lower, num_token=num)
    assert isinstance(normalise(src, cfg), str)
    toks = tokenize(src, cfg)
    assert all(isinstance(t, str) and t and not t.isspace() for t in toks)
    vocab = Vocab.build([toks[:50], tokenize(tgt, cfg)[:50]], max_size=30)
    ids, oovs = vocab.encode_ext(toks[:100])
    assert len(ids) == len(toks[:100]) and all(i < len(vocab) + len(oovs) for i in ids)
    assert isinstance(detokenize(vocab.decode(ids, oovs)), str)
    ex = [Example("x", src, [tgt]), Example("y", tgt, [src or "a"])]
    enc = encode_examples(ex, vocab, cfg, 40, 20)
    assert len(enc) == 2 and all(len(e.src) <= 40 and len(e.tgt) <= 20 for e in enc)
    batch = collate(enc)
    assert batch.size == 2
    assert sorted(i for b in bucket_batches(enc, 2, shuffle=False) for i in b) == [0, 1]


@FUZZ
@given(rows=st.lists(st.tuples(texts, texts), min_size=1, max_size=4))
def test_corpus_reader_on_random_unicode_reads_or_names_the_line(fuzz_dir, rows):
    d = fuzz_dir / "corpus" / "dialogsum"
    d.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"fname": f"f{i}", "dialogue": a, "summary": b}, ensure_ascii=False) for i, (a, b) in enumerate(rows)]
    (d / "dialogsum.train.jsonl").write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    try:
        got = load_split("dialogsum", fuzz_dir / "corpus", "train", "skip_empty", ReadStats())
    except DataError as e:
        assert "dialogsum.train.jsonl:" in str(e), str(e)
        return
    assert len(got) <= len(rows)
    for e in got:
        assert isinstance(e.source, str) and e.references and all(isinstance(r, str) for r in e.references)
