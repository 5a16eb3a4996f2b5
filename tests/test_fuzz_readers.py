"""Fuzzing the readers of the suite's own files and of the files a user hands it (hypothesis): experiment
names and seeds, generic corpora, run records, predictions and scores, the JSON side files, and archives
given to ``remote_batch.py unpack``. Whatever the input, nothing but the suite's ``UserError`` escapes, and
nothing is written outside the folder the command was given. Bounded to a few seconds each."""
from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import load_tool
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.errors import UserError
from seq2seq_zoo.results import SCHEMAS, check_run_files, read_checked, read_predictions, read_record, read_scores

FUZZ = settings(max_examples=int(os.environ.get("ZOO_FUZZ_EXAMPLES", "40")), deadline=None,
                derandomize="ZOO_FUZZ_EXAMPLES" not in os.environ, database=None,
                suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                    | st.text(max_size=8), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                               max_size=4),
                    max_leaves=12)
NAMES = st.sampled_from(["..", ".", ".x", "a/b", "a\\b", "", "x" * 101, "a b", "ok", "ok-1.2", "é", "/etc", "a\nb"]) \
    | st.text(max_size=12)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------- experiment
@settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 1))   # each valid file builds its model on the meta device
@given(exp=NAMES, run=NAMES, decode=NAMES, seeds=st.lists(st.integers(-5, 2**33), max_size=5) | JSON)
def test_experiment_names_and_seeds_only_raise_config_errors(exp, run, decode, seeds):
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "e.toml"
        f.write_text(f"[experiment]\nname = {json.dumps(exp)}\ndataset = \"dialogsum\"\n"
                     f"seeds = {json.dumps(seeds) if isinstance(seeds, list) and all(isinstance(s, int) for s in seeds) else '[1]'}\n"
                     '[defaults]\nmodel = "transformer"\nd_model = 8\nd_ff = 8\nheads = 2\nlayers = 1\n'
                     f"[[runs]]\nname = {json.dumps(run)}\n[[decode]]\nname = {json.dumps(decode)}\nbeam_size = 1\n",
                     encoding="utf-8")
        try:
            exp_ = load_experiment(f)
        except UserError:
            return
        from seq2seq_zoo.names import name_problem
        assert name_problem(exp_.name) is None
        assert all(name_problem(s.name) is None for s in exp_.runs)
        assert all(name_problem(d.name) is None for d in exp_.decodes)
        assert len({s.seed for s in exp_.runs}) == len(exp_.runs) and all(0 <= s.seed < 2**32 for s in exp_.runs)


# ------------------------------------------------------------------------------------------ own corpora
@FUZZ
@given(rows=st.lists(JSON | st.binary(max_size=20).map(lambda b: b.decode("latin-1")), min_size=1, max_size=5),
       encoding=st.sampled_from(["utf-8", "latin-1", "klingon", "utf-16"]),
       on_bad=st.sampled_from(["skip_empty", "skip", "error"]), target=st.sampled_from(["summary", ["s1", "s2"]]))
def test_generic_corpus_reader_only_raises_data_errors(rows, encoding, on_bad, target):
    from seq2seq_zoo.data.corpora import Example, ReadStats
    from seq2seq_zoo.data.custom import jsonl
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "c.jsonl"
        f.write_bytes(b"".join((r if isinstance(r, str) else json.dumps(r)).encode("utf-8", "surrogatepass") + b"\n"
                               for r in rows))
        before = _snapshot(Path(tmp))
        try:
            out = jsonl(Path(tmp), "train", on_bad, ReadStats(), train=str(f), source="text", target=target,
                        encoding=encoding)
        except UserError:
            out = []
        assert all(isinstance(e, Example) and isinstance(e.source, str) and e.references for e in out)
        assert _snapshot(Path(tmp)) == before


# -------------------------------------------------------------------------------------- own run files
def _record() -> dict:
    ev = {"split": "test", "n_examples": 1, "scores": {"rouge1": 1.0}, "settings": {}, "decode": {}}
    return {"run": "a", "experiment": "e", "seed": 1, "spec": {}, "params": {}, "hardware": {}, "wall_seconds": 1.0,
            "data": {"dataset": "d", "sizes": {}, "vocab_size": 5},
            "train": {"history": [], "val_curve": [], "train_seconds": 0.0, "precision": "fp32"}, "eval": ev}


def _paths(d, prefix=()):
    for k, v in d.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


PATHS = list(_paths(_record()))


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), JSON), max_size=3), whole=st.none() | JSON,
       cut=st.none() | st.integers(0, 400))
def test_record_reader_only_raises_damaged_file(edits, whole, cut):
    rec = _record()
    for path, value in edits:   # a value of any JSON type at any place of a valid record
        node = rec
        for k in path[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = value
    text = json.dumps(rec if whole is None else whole)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "record.json"
        p.write_text(text[:cut] if cut is not None else text)
        try:
            got = read_record(p)
        except UserError:
            return
        assert isinstance(got["eval"]["scores"], dict) and isinstance(got["run"], str)


@FUZZ
@given(pred=st.lists(JSON, max_size=4), scores=st.lists(JSON, max_size=4),
       meta=st.none() | st.integers(-1, 5) | JSON, side=st.sampled_from(sorted(SCHEMAS)), side_value=JSON,
       cut=st.none() | st.integers(0, 200))
def test_run_file_readers_only_raise_damaged_file(pred, scores, meta, side, side_value, cut):
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        run.mkdir()
        good = [{"id": str(i), "prediction": "p", "references": ["r"]} for i in range(2)]
        text = "".join(json.dumps(r) + "\n" for r in good + pred)
        (run / "predictions.jsonl").write_text(text[:cut] if cut is not None else text)
        head = {"_meta": {"metrics": ["rouge1"], "n": meta}} if meta is not None else {}
        (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [head, *scores]))
        (run / side).write_text(json.dumps(side_value))
        before = _snapshot(Path(tmp))
        for read in (read_predictions, read_scores, check_run_files, lambda r: read_checked(r / side)):
            try:
                read(run)
            except UserError:
                pass
        assert _snapshot(Path(tmp)) == before


# ------------------------------------------------------------------------------------------- archives
tool = load_tool("remote_batch")
MEMBER = st.lists(st.sampled_from(["res", "logs", "e", "r", "record.json", "decodes", "..", ".", "", ".h", "x y",
                                   "plots", "/"]), min_size=1, max_size=5).map("/".join)


@settings(max_examples=int(os.environ.get("ZOO_FUZZ_EXAMPLES", "40")), deadline=None, database=None,
          derandomize="ZOO_FUZZ_EXAMPLES" not in os.environ, suppress_health_check=[HealthCheck.too_slow])
@given(members=st.lists(st.tuples(MEMBER, st.binary(max_size=30)), max_size=6),
       cut=st.none() | st.floats(0, 1), force=st.booleans())
def test_unpack_answers_0_or_2_and_writes_only_into_results(members, cut, force):
    import contextlib
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "results" / "e" / "r").mkdir(parents=True)
        (tmp / "results" / "e" / "r" / "record.json").write_text("{}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, data in members:
                info = tarfile.TarInfo(name or "x")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        raw = buf.getvalue()
        (tmp / "a.tgz").write_bytes(raw[: int(len(raw) * cut)] if cut is not None else raw)
        outside = {k: v for k, v in _snapshot(tmp).items() if not k.startswith("results/")}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = tool.main(["unpack", str(tmp / "a.tgz"), "--results", str(tmp / "results")]
                           + (["--force"] if force else []))
        assert rc in (0, 2)
        assert {k: v for k, v in _snapshot(tmp).items() if not k.startswith("results/")} == outside
        if rc == 2:   # refused: the run that was there is as it was
            assert (tmp / "results" / "e" / "r" / "record.json").read_text() == "{}"
        assert not [p for p in (tmp / "results" / "e").iterdir() if p.name.endswith(".tmp")]
