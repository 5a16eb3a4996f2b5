"""Fuzzing (hypothesis) the readers of exported model folders, run specs, vocabularies, judged findings and
training logs: whatever the bytes, only the documented error classes escape (``BadExport`` from
``Summarizer.from_pretrained``, ``UserError`` from the others) and nothing is written anywhere in the
folder read. Bounded to a few seconds each."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq_zoo.errors import BadExport, UserError

FUZZ = settings(max_examples=int(os.environ.get("ZOO_FUZZ_EXAMPLES", "30")), deadline=None,
                derandomize="ZOO_FUZZ_EXAMPLES" not in os.environ, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

SCALAR = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
          | st.text(max_size=8))
JSON = st.recursive(SCALAR, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                    max_leaves=10)
EXP = '''[experiment]
name = "fz"
dataset = "dialogsum"
seeds = [1]
[defaults]
model = "transformer"
d_model = 8
d_ff = 16
heads = 2
layers = 1
data.max_src_len = 16
data.max_tgt_len = 8
decode.max_len = 8
[[runs]]
name = "a"
'''


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A valid exported folder of a tiny untrained Transformer, written as `zoo export` writes one."""
    from safetensors.torch import save_model

    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.data.vocab import SPECIALS, Vocab
    from seq2seq_zoo.models.base import build_model, model_context
    tmp = tmp_path_factory.mktemp("fz")
    (tmp / "fz.toml").write_text(EXP)
    spec = load_experiment(tmp / "fz.toml").runs[0]
    vocab = Vocab(list(SPECIALS) + [f"w{i}" for i in range(20)])
    out = tmp / "export"
    out.mkdir()
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
    save_model(model, str(out / "model.safetensors"))
    vocab.save(out / "vocab.json")
    (out / "config.json").write_text(json.dumps({"format": 1, "model": spec.model, "spec": spec.to_dict(),
                                                 "checkpoint": "best.pt", "source_run": "x", "model_rules": {}}))
    from seq2seq_zoo import Summarizer
    Summarizer.from_pretrained(out)   # the starting point loads
    return out


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _loads_or_bad_export(folder: Path) -> None:
    from seq2seq_zoo import Summarizer
    before = _snapshot(folder.parent)
    try:
        Summarizer.from_pretrained(folder)
    except BadExport as e:
        assert "\n" not in str(e)
    assert _snapshot(folder.parent) == before


def _set(obj, path: list, value):
    """``obj`` with the value at ``path`` (keys / indices, as far as they exist) replaced by ``value``."""
    if not path or not isinstance(obj, (dict, list)) or not obj:
        return value
    if isinstance(obj, dict):
        key = sorted(obj)[path[0] % len(obj)]
        return {**obj, key: _set(obj[key], path[1:], value)}
    i = path[0] % len(obj)
    return obj[:i] + [_set(obj[i], path[1:], value)] + obj[i + 1:]


@FUZZ
@given(path=st.lists(st.integers(0, 50), max_size=4), value=JSON)
def test_export_config_edits_only_raise_bad_export(export, path, value):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m"
        shutil.copytree(export, out)
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps(_set(config, path, value)))
        _loads_or_bad_export(out)


@FUZZ
@given(words=st.lists(st.text(max_size=4), max_size=30) | JSON, keep=st.booleans())
def test_export_vocabulary_edits_only_raise_bad_export(export, words, keep):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m"
        shutil.copytree(export, out)
        itos = json.loads((out / "vocab.json").read_text())["itos"]
        new = (itos[:4] + words) if keep and isinstance(words, list) else words
        (out / "vocab.json").write_text(json.dumps({"itos": new}))
        _loads_or_bad_export(out)


@FUZZ
@given(cut=st.integers(0, 10**6), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4))
def test_export_weights_cut_or_flipped_only_raise_bad_export(export, cut, flips):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m"
        shutil.copytree(export, out)
        data = bytearray((out / "model.safetensors").read_bytes())
        data = data[: cut % (len(data) + 1)]
        for at, byte in flips:
            if data:
                data[at % len(data)] = byte
        (out / "model.safetensors").write_bytes(bytes(data))
        _loads_or_bad_export(out)


@FUZZ
@given(data=JSON)
def test_run_spec_and_vocabulary_readers_only_raise_user_errors(data):
    from seq2seq_zoo.config import read_spec
    from seq2seq_zoo.data.vocab import Vocab
    with tempfile.TemporaryDirectory() as tmp:
        for reader, name in ((read_spec, "spec.json"), (Vocab.load, "vocab.json")):
            f = Path(tmp) / name
            f.write_text(json.dumps(data))
            try:
                reader(f)
            except UserError as e:
                assert str(f) in str(e)


@FUZZ
@given(judged=st.lists(st.dictionaries(st.sampled_from(["claim", "metric", "verdict", "power", "n_a", "n_b"]),
                                        JSON, max_size=6), max_size=3) | JSON)
def test_findings_reader_only_raises_user_errors(judged):
    from seq2seq_zoo.cli.power import read_judged
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "findings.json"
        f.write_text(json.dumps(judged))
        try:
            rows = read_judged(f, "fix")
        except UserError as e:
            assert str(f) in str(e)
            return
        assert all(isinstance(j["claim"], str) for j in rows)


@FUZZ
@given(raw=st.binary(max_size=200) | st.lists(JSON, max_size=4).map(
    lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode()), cut=st.integers(0, 300))
def test_train_log_reader_only_raises_damaged_file(raw, cut):
    from seq2seq_zoo.train.runlog import read_log
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "logs").mkdir()
        (Path(tmp) / "logs" / "train_log.jsonl").write_bytes(raw[:cut])
        try:
            rows = read_log(Path(tmp))
        except UserError as e:
            assert "train_log.jsonl" in str(e)
            return
        assert all(isinstance(r, dict) for r in rows)


@FUZZ
@given(parts=st.lists(st.sampled_from(["..", ".", "run", "link", "checkpoints", "in.txt", "out", "elsewhere",
                                       "decodes", "x.jsonl"]), min_size=1, max_size=5))
def test_output_guard_never_lets_a_write_reach_an_input_or_a_run(parts):
    """Whatever path (with links and ``..``) a user names, ``check_output`` refuses it or it resolves to a
    place that is neither an input of the command nor inside a run folder."""
    from seq2seq_zoo.errors import UnsafePath
    from seq2seq_zoo.utils.io import check_output, run_folder_of
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "a" / "b"
        run = base / "run"
        (run / "checkpoints").mkdir(parents=True)
        (run / "record.json").write_text("{}")
        (base / "in.txt").write_text("text")
        (base / "elsewhere").mkdir()
        (base / "link").symlink_to(run)
        (base / "elsewhere" / "link").symlink_to(base / "in.txt")
        out = base.joinpath(*parts)
        try:
            check_output(out, inputs=[base / "in.txt"])
        except UnsafePath as e:
            assert "\n" not in str(e)
            return
        real = out.resolve()
        assert real != (base / "in.txt").resolve() and run_folder_of(real) is None
        assert not real.is_relative_to(run.resolve())
