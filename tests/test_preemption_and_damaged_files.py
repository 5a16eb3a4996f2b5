"""Pre-emption (SIGTERM), damaged files the suite wrote itself,
selections that leave no examples, paths of the wrong kind, a full disk, fuzzed inputs, and concurrent
`zoo report`s.

Same style as test_crash_safety.py: in-process `seq2seq_zoo.cli.main` calls on the tiny corpus where they
suffice, subprocesses (marked slow) where a real signal or a second process is the point. One finished
results tree (`finished`, two runs with the same settings, so each is the other's reference) is shared.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

import zoo_process
from conftest import tiny_encoded, tiny_transformer, write_dialogsum
from seq2seq_zoo.cli import main
from seq2seq_zoo.config import TrainConfig
from seq2seq_zoo.train import distributed
from seq2seq_zoo.train.objectives import CrossEntropy
from test_crash_safety import (_HalfWriter, _env, assert_same_result, exp_text, finish, main_captured, one_line,
                               record, run_zoo, start, tmp_files, wait_for, write_exp)
from zoo_process import ZooProcess

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rel2")
    data = write_dialogsum(tmp / "data", n_train=32, n_dev=4, n_test=3)
    return tmp, data


@pytest.fixture(scope="module")
def finished(corpus):
    """`zoo run` of experiment `two` (runs `a` and `b`, identical settings) into results folder R."""
    tmp, data = corpus
    toml = write_exp(tmp / "two.toml", exp_text("two", ["a", "b"]))
    R = tmp / "R"
    done = main_captured(["run", toml, "--results", R, "--no-progress", "--data-dir", data])
    assert done.rc == 0, done.err
    return R


def _copy_tree(R: Path, dst: Path) -> Path:
    shutil.copytree(R, dst)
    return dst


def _run_args(toml, R, data, *extra):
    return ["run", str(toml), "--results", str(R), "--no-progress", "--data-dir", str(data), *map(str, extra)]


# ====================================================================================== 1. pre-emption
@pytest.fixture(scope="module")
def preempted(corpus, finished):
    """`zoo run` of `two --only a` (the reference is `two/a` of `finished`), sent SIGTERM as soon as its first
    per-epoch checkpoint appears (mid-training), then continued with `--resume` to the end (--no-report: the
    run's own files are compared)."""
    tmp, data = corpus
    toml = write_exp(tmp / "two_term.toml", exp_text("two", ["a", "b"]))
    R = tmp / "R_term"
    last = R / "two" / "a" / "checkpoints" / "last.pt"
    args = _run_args(toml, R, data, "--only", "a")
    p = start(args, tmp, "term")
    hit = wait_for(last.is_file, p)
    if hit:
        p.send_signal(signal.SIGTERM)
    stopped = finish(p, tmp)
    loop = torch.load(last, weights_only=True)["loop"] if last.is_file() else None
    rec_after = (R / "two" / "a" / "record.json").exists()
    lock_after = (R / "two" / "a" / ".lock").exists()
    resumed = run_zoo(args + ["--resume", "--no-report"], tmp)
    return dict(R=R, hit=hit, stopped=stopped, loop=loop, record_after=rec_after, lock_after=lock_after,
                resumed=resumed)


@pytest.mark.slow
def test_sigterm_saves_exits_143_says_how_to_resume_and_resume_is_bit_identical(preempted, finished):
    s = preempted
    assert s["hit"], s["stopped"].err
    d = s["stopped"]
    assert d.rc == 143, (d.rc, d.err)
    assert "SIGTERM" in d.err and "--resume" in d.err and "two_term.toml" in d.err and "Traceback" not in d.err
    assert s["loop"] is not None and not s["loop"]["finished"], "SIGTERM must stop training with a checkpoint"
    assert not s["record_after"] and not s["lock_after"]
    r = s["resumed"]
    assert r.rc == 0, r.err
    assert "resumed from" in r.out
    assert_same_result(finished, s["R"], exp_a="two", run_a="a", exp_b="two", run_b="a")
    assert record(s["R"], "two", "a")["train"]["resumes"] == 1


def test_sigterm_in_the_last_training_batch_exits_143_with_checkpoint(corpus, tmp_path, monkeypatch, capsys):
    """SIGTERM during the final update: the command stops (exit 143, last.pt written), it does not go on
    to decode as if nothing had happened; the SIGTERM handler is gone after the command."""
    tmp, data = corpus
    toml = write_exp(tmp_path / "t.toml", exp_text("t", ["a"]))
    orig = CrossEntropy.__call__
    calls = {"n": 0}

    def objective(self, model, batch):
        calls["n"] += 1
        if calls["n"] == 24:  # 3 epochs x 8 batches: the last one
            os.kill(os.getpid(), signal.SIGTERM)
        return orig(self, model, batch)

    monkeypatch.setattr(CrossEntropy, "__call__", objective)
    R = tmp_path / "R"
    rc = main(_run_args(toml, R, data))
    err = capsys.readouterr().err
    assert calls["n"] == 24
    assert rc == 143, err
    assert "--resume" in err and "SIGTERM" in err
    ck = torch.load(R / "t" / "a" / "checkpoints" / "last.pt", weights_only=True)
    assert ck["loop"]["step"] == 24
    assert not (R / "t" / "a" / "record.json").exists()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_sigterm_outside_training_still_exits_143_and_releases_the_lock(corpus, tmp_path, monkeypatch, capsys):
    """SIGTERM while the data is read (before any checkpoint): exit 143 with the resume hint, no lock left."""
    import seq2seq_zoo.runner as runner
    tmp, data = corpus
    toml = write_exp(tmp_path / "t.toml", exp_text("t", ["a"]))
    orig = runner.prepare_data

    def prepare(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        return orig(*a, **k)

    monkeypatch.setattr(runner, "prepare_data", prepare)
    R = tmp_path / "R"
    rc = main(_run_args(toml, R, data))
    err = capsys.readouterr().err
    assert rc == 143 and "--resume" in err, err
    assert not list(R.rglob(".lock")) and not list(R.rglob("*.pt"))


def _ddp_term_worker(rank: int, world: int, init_file: str, tmp: str) -> None:
    """Two gloo ranks train the same run twice: uninterrupted, and with SIGTERM delivered to rank 1 only
    (at its 3rd batch), then resumed. Saves what each rank saw."""
    from seq2seq_zoo.train.distributed import DDPContext
    from seq2seq_zoo.train.loop import fit
    from seq2seq_zoo.errors import Preempted
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        vocab, train = tiny_encoded(16)
        _, val = tiny_encoded(4, offset=1, vocab=vocab)
        cfg = TrainConfig(epochs=2, batch_size=4, lr=3e-3, precision="fp32")
        quiet = dict(seed=1, device=CPU, progress=False, log=lambda *_: None)
        orig = CrossEntropy.__call__
        calls = {"n": 0, "signal_at": None}

        def objective(self, m, batch):
            calls["n"] += 1
            if rank == 1 and calls["n"] == calls["signal_at"]:
                os.kill(os.getpid(), signal.SIGTERM)
            return orig(self, m, batch)

        CrossEntropy.__call__ = objective
        model = tiny_transformer(len(vocab), layers=1, max_src_len=64)
        st = fit(model, train, val, cfg, ckpt_dir=Path(tmp) / "plain", ddp=DDPContext(rank, world), **quiet)
        plain = {k: v.clone() for k, v in model.state_dict().items()}
        extra_calls = calls["n"] - st.step  # objective calls that are not training updates (e.g. a DDP probe)
        calls.update(n=0, signal_at=extra_calls + 3)  # rank 1 only: SIGTERM in the 3rd update
        old = signal.signal(signal.SIGTERM, signal.SIG_DFL)
        model = tiny_transformer(len(vocab), layers=1, max_src_len=64)
        got = None
        try:
            fit(model, train, val, cfg, ckpt_dir=Path(tmp) / "term", ddp=DDPContext(rank, world), **quiet)
        except Preempted:
            got = "Preempted"
        except KeyboardInterrupt:
            got = "KeyboardInterrupt"
        finally:
            CrossEntropy.__call__ = orig
            signal.signal(signal.SIGTERM, old)
        stopped_calls = calls["n"]
        torch.distributed.barrier()  # rank 0 has written last.pt
        written = sorted(p.name for p in (Path(tmp) / "term").glob("*.pt"))
        loop = torch.load(Path(tmp) / "term" / "last.pt", weights_only=True)["loop"]
        model = tiny_transformer(len(vocab), layers=1, max_src_len=64, seed=5)
        fit(model, train, val, cfg, ckpt_dir=Path(tmp) / "term", ddp=DDPContext(rank, world), resume=True, **quiet)
        torch.save({"got": got, "calls": stopped_calls - extra_calls, "written": written, "loop_step": loop["step"],
                    "plain": plain, "resumed": model.state_dict()}, Path(tmp) / f"term{rank}.pt")
    except BaseException:
        torch.distributed.destroy_process_group()
        raise
    # leave together and end as zoo run's workers do: a rank tearing gloo down while the other still works,
    # or the interpreter's teardown after it, aborted a rank now and then (see distributed.end_process)
    distributed.leave(wait=True)
    distributed.end_process(0)


@pytest.mark.slow
def test_ddp_sigterm_on_one_rank_every_rank_stops_at_the_same_update_and_resume_matches(tmp_path):
    torch.multiprocessing.spawn(_ddp_term_worker, args=(2, str(tmp_path / "pg"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"term{r}.pt", weights_only=True) for r in (0, 1))
    assert r0["got"] == r1["got"] == "Preempted"          # rank 0 never got the signal, yet exits as pre-empted
    assert r0["calls"] == r1["calls"] == 3                 # both stopped after the same (3rd) update
    assert r0["loop_step"] == 3
    for r in (r0, r1):
        for k in r["plain"]:
            assert torch.equal(r["plain"][k], r["resumed"][k]), k
    assert r0["written"] == ["best.pt", "last.pt"] or r0["written"] == ["last.pt"]


@pytest.mark.slow
def test_zoo_run_nproc_2_sigterm_to_the_launcher_exits_143_and_resumes(corpus, tmp_path):
    """`zoo run --nproc 2` (torchrun's agent in front of two workers) sent SIGTERM mid-training: the agent
    passes it on, the workers finish the update, rank 0 writes last.pt, the command exits 143 with the
    resume hint; `--resume` (again with 2 processes) finishes the run."""
    tmp, data = corpus
    toml = write_exp(tmp_path / "d.toml", exp_text("d", ["a"]))
    R = tmp_path / "R"
    last = R / "d" / "a" / "checkpoints" / "last.pt"
    env = {k: v for k, v in _env().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    args = _run_args(toml, R, data, "--nproc", "2")
    p = ZooProcess(args, tmp_path, env, tmp_path / "o.txt", tmp_path / "e.txt")
    hit = wait_for(last.is_file, p)
    if hit:
        p.send_signal(signal.SIGTERM)
    rc = p.wait(300)
    err = p.texts()[1]
    assert hit, err
    assert rc == 143, (rc, err)
    assert "SIGTERM" in err and "--resume" in err
    loop = torch.load(last, weights_only=True)["loop"]
    assert not loop["finished"] and not (R / "d" / "a" / "record.json").exists()
    rc, _, err = zoo_process.run(args + ["--resume", "--no-report"], tmp_path, env)
    assert rc == 0, err
    rec = record(R, "d", "a")
    assert rec["train"]["steps"] == 24 and rec["train"]["resumes"] == 1 and rec["train"]["world_size"] == 2


# ================================================================================ 2. damaged files
def _truncate(p: Path):
    b = p.read_bytes()
    p.write_bytes(b[: len(b) // 2])


def _empty(p: Path):
    p.write_bytes(b"")


DAMAGE = {"truncated": _truncate, "empty": _empty}


def _edit_json(key_path: list, value):
    def f(p: Path):
        d = json.loads(p.read_text(encoding="utf-8"))
        node = d
        for k in key_path[:-1]:
            node = node[k]
        if value is _DELETE:
            del node[key_path[-1]]
        else:
            node[key_path[-1]] = value
        p.write_text(json.dumps(d), encoding="utf-8")
    return f


_DELETE = object()

RECORD_DAMAGE = {**DAMAGE, "edited-no-eval": _edit_json(["eval"], _DELETE),
                 "edited-scores-text": _edit_json(["eval", "scores", "rouge1"], "high"),
                 "not-an-object": lambda p: p.write_text("[1, 2]\n"),
                 "not-utf8": lambda p: p.write_bytes(b'{"run": "\xff\xfe"}')}


@pytest.mark.parametrize("how", list(RECORD_DAMAGE))
def test_report_with_one_damaged_record_reports_the_others_and_names_it(finished, tmp_path, capsys, how):
    R = _copy_tree(finished, tmp_path / "R")
    bad = R / "two" / "b" / "record.json"
    (R / "two" / "table.csv").unlink()
    RECORD_DAMAGE[how](bad)
    rc = main(["report", "--results", str(R)])
    cap = capsys.readouterr()
    assert rc == 2, cap.err
    msg = one_line(cap.err)
    assert str(bad) in msg and "Traceback" not in cap.err
    csv = (R / "two" / "table.csv").read_text(encoding="utf-8")
    assert "\na," in csv and "\nb," not in csv
    assert "Left out, damaged files" in (R / "two" / "table.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("what", ["attention.json", "examples.json", "scores.jsonl"])
def test_report_with_a_damaged_side_file_leaves_that_run_out(finished, tmp_path, capsys, what):
    R = _copy_tree(finished, tmp_path / "R")
    bad = R / "two" / "a" / what
    if not bad.exists():
        pytest.skip(f"the run wrote no {what}")
    _truncate(bad)
    rc = main(["report", "two", "--results", str(R)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(bad) in msg
    csv = (R / "two" / "table.csv").read_text(encoding="utf-8")
    assert "\nb," in csv and "\na," not in csv


def test_report_with_a_damaged_experiment_json_writes_the_tables_and_names_it(finished, tmp_path, capsys):
    """experiment.json (the file's [[findings]], stored by zoo run) damaged: the tables are written, the
    findings left out, the file named, exit 2."""
    R = _copy_tree(finished, tmp_path / "R")
    bad = R / "two" / "experiment.json"
    assert bad.is_file()
    _truncate(bad)
    (R / "two" / "table.csv").unlink()
    rc = main(["report", "two", "--results", str(R)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(bad) in msg
    csv = (R / "two" / "table.csv").read_text(encoding="utf-8")
    assert "\na," in csv and "\nb," in csv


def test_zoo_run_report_step_skips_a_damaged_sibling_record(corpus, finished, tmp_path, capsys):
    """A finished `--only b` invocation that finds run a's record damaged still finishes (exit 0), warns
    naming the file, and writes the table without it."""
    tmp, data = corpus
    R = _copy_tree(finished, tmp_path / "R")
    _truncate(R / "two" / "a" / "record.json")
    toml = write_exp(tmp_path / "two.toml", exp_text("two", ["a", "b"]))
    rc = main(_run_args(toml, R, data, "--only", "b"))
    err = capsys.readouterr().err
    assert rc == 0 and str(R / "two" / "a" / "record.json") in err and "Traceback" not in err
    assert "\nb," in (R / "two" / "table.csv").read_text(encoding="utf-8")


PRED_DAMAGE = {**DAMAGE, "edited-no-prediction": lambda p: p.write_text(
    p.read_text().replace('"prediction"', '"pred"', 1)), "edited-references-string": lambda p: p.write_text(
    json.dumps({"id": "x", "prediction": "p", "references": "r"}) + "\n")}


@pytest.mark.parametrize("how", list(PRED_DAMAGE))
def test_eval_on_damaged_predictions_exit_2_names_file_and_line(finished, tmp_path, capsys, how):
    R = _copy_tree(finished, tmp_path / "R")
    run = R / "two" / "a"
    bad = run / "predictions.jsonl"
    PRED_DAMAGE[how](bad)
    rc = main(["eval", str(run)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(bad) in msg
    if how in ("truncated", "edited-no-prediction"):
        assert f"{bad}:1:" in msg or f"{bad}:2:" in msg or f"{bad}:3:" in msg, msg


CK_DAMAGE = {"vocab.json": {**DAMAGE, "edited": lambda p: p.write_text('{"itos": ["a", "b"]}')},
             "spec.json": {**DAMAGE, "edited": _edit_json(["model"], _DELETE),
                           "wrong-type": _edit_json(["train", "epochs"], "three")},
             "best.pt": {**DAMAGE, "edited": lambda p: torch.save({"model": {"nope": torch.zeros(1)}}, p),
                         "no-model": lambda p: torch.save({"weights": 1}, p)}}


@pytest.mark.parametrize("file,how", [(f, h) for f, hs in CK_DAMAGE.items() for h in hs])
def test_summarize_on_damaged_run_files_exit_2_naming_the_file(finished, tmp_path, capsys, file, how):
    R = _copy_tree(finished, tmp_path / "R")
    run = R / "two" / "a"
    bad = run / "checkpoints" / file
    CK_DAMAGE[file][how](bad)
    text = tmp_path / "in.txt"
    text.write_text("#Person1#: Hello Amy, I want to buy a red car.")
    rc = main(["summarize", str(run), "--file", str(text)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(bad) in msg, msg


@pytest.fixture(scope="module")
def one_epoch(corpus):
    """A finished one-epoch run `t/a` (its experiment file and results folder), copied by each test that
    damages it."""
    tmp, data = corpus
    toml = write_exp(tmp / "t.toml", exp_text("t", ["a"], run_extra="train.epochs = 1\n"))
    R = tmp / "R_one_epoch"
    done = main_captured(_run_args(toml, R, data))
    assert done.rc == 0, done.err
    return toml, R


@pytest.mark.parametrize("how", ["truncated", "empty", "edited"])
def test_resume_from_damaged_last_checkpoint_exit_2_names_it(corpus, one_epoch, tmp_path, capsys, how):
    tmp, data = corpus
    toml, R = one_epoch[0], _copy_tree(one_epoch[1], tmp_path / "R")
    last = R / "t" / "a" / "checkpoints" / "last.pt"
    (R / "t" / "a" / "record.json").unlink()
    if how == "edited":
        ck = torch.load(last, weights_only=True)
        ck["optimizer"] = {"state": "oops"}
        torch.save(ck, last)
    else:
        DAMAGE[how](last)
    capsys.readouterr()
    rc = main(_run_args(toml, R, data, "--resume"))
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(last) in msg


def test_eval_decode_on_damaged_record_exit_2_names_it(finished, tmp_path, capsys):
    R = _copy_tree(finished, tmp_path / "R")
    bad = R / "two" / "a" / "record.json"
    _truncate(bad)
    rc = main(["eval", str(R / "two" / "a"), "--decode", "beam_size=1"])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(bad) in msg


# ==================================================================== 3. selections that leave nothing
EMPTY = [("max_train-0", "data.max_train = 0\n", None, ["data.max_train = 0", "train", "32 read"]),
         ("max_valid-0", "data.max_valid = 0\n", None, ["data.max_valid = 0", "validation", "4 read"]),
         ("max_test-0", "data.max_test = 0\n", None, ["data.max_test = 0", "test", "3 read"]),
         ("filter-drops-all", "data.filter_percentiles = [60.0, 40.0]\n", None,
          ["data.filter_percentiles", "kept 0", "32 read"]),
         ("split-file-all-empty-rows", "", "train", ["train", "0 read", "skipped"])]


@pytest.mark.parametrize("extra,blank,words", [c[1:] for c in EMPTY], ids=[c[0] for c in EMPTY])
def test_selection_leaving_no_examples_stops_before_training_writing_nothing(tmp_path, capsys, extra, blank, words):
    data = write_dialogsum(tmp_path / "data", n_train=32, n_dev=4, n_test=3)
    p = data / "dialogsum" / "dialogsum.train.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    for i, r in enumerate(rows):  # every row of the split empty (read, skipped, none usable), or lengths 1..32
        r["dialogue"] = " " if blank else "#Person1#: " + "word " * (i + 1)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    toml = write_exp(tmp_path / "e.toml", exp_text("e", ["a"], run_extra=extra))
    R = tmp_path / "R"
    rc = main(_run_args(toml, R, data))
    msg = one_line(capsys.readouterr().err)
    assert rc == 2
    assert "no " in msg and "examples left" in msg and "'a'" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert not R.exists() or list(R.rglob("*")) == [], list(R.rglob("*"))


# =================================================================== 4. arguments of the wrong kind
def _wrong_kind_cases(tmp: Path, data: Path, toml: Path, run: Path):
    afile = tmp / "a_file.txt"
    afile.write_text("x")
    adir = tmp / "a_dir"
    adir.mkdir(exist_ok=True)
    return {
        "run-experiment-is-a-folder": (["run", adir, "--data-dir", data], adir, "is a folder"),
        "run-results-is-a-file": (["run", toml, "--results", afile, "--data-dir", data], afile, "is a file"),
        "run-data-dir-is-a-file": (["run", toml, "--results", tmp / "R", "--data-dir", afile], afile, "is a file"),
        "params-experiment-is-a-folder": (["params", adir], adir, "is a folder"),
        "report-experiment-is-a-file": (["report", afile, "--results", tmp / "R"], afile, "is a file"),
        "report-results-is-a-file": (["report", "--results", afile], afile, "is a file"),
        "summarize-run-is-a-file": (["summarize", afile, "--file", afile], afile, "is a file"),
        "summarize-input-is-a-folder": (["summarize", run, "--file", adir], adir, "is a folder"),
        "eval-run-is-a-file": (["eval", afile], afile, "is a file"),
        "data-info-dir-is-a-file": (["data", "info", "dialogsum", "--data-dir", afile], afile, "is a file"),
    }


WRONG_KIND = ["run-experiment-is-a-folder", "run-results-is-a-file", "run-data-dir-is-a-file",
              "params-experiment-is-a-folder", "report-experiment-is-a-file", "report-results-is-a-file",
              "summarize-run-is-a-file", "summarize-input-is-a-folder", "eval-run-is-a-file",
              "data-info-dir-is-a-file"]


@pytest.mark.parametrize("case", WRONG_KIND)
def test_path_of_the_wrong_kind_says_which_it_got(finished, corpus, tmp_path, capsys, case):
    tmp, data = corpus
    toml = write_exp(tmp_path / "e.toml", exp_text("e", ["a"]))
    args, path, words = _wrong_kind_cases(tmp_path, data, toml, finished / "two" / "a")[case]
    rc = main([str(a) for a in args])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2
    assert str(path) in msg and words in msg and "not found" not in msg, msg
    assert not (tmp_path / "R").exists() or trained(tmp_path / "R") == []


def trained(R: Path):
    return [p for p in R.rglob("*") if p.name == "record.json" or p.suffix == ".pt"]


# ============================================================================== 5. a full disk
class _FailWritesOf:
    """Makes the ``nth`` atomic write of a file named ``name`` fail like a full disk: at ``where`` =
    "write" half the bytes reach the temporary file, then ENOSPC; "replace": the rename fails (EIO)."""

    def __init__(self, monkeypatch, name: str, nth: int, where: str = "write"):
        self.name, self.nth, self.where, self.seen, self.failed = name, nth, where, 0, False
        self.current = None
        real_mkstemp, real_fdopen, real_replace = tempfile.mkstemp, os.fdopen, os.replace

        def mkstemp(*a, **k):
            self.current = k.get("prefix", "")
            if self.current == f".{name}.":
                self.seen += 1
            return real_mkstemp(*a, **k)

        def fdopen(fd, *a, **k):
            f = real_fdopen(fd, *a, **k)
            if self._now("write"):
                return _HalfWriter(f, OSError(errno.ENOSPC, "No space left on device"))
            return f

        def replace(src, dst, *a, **k):
            if Path(dst).name == name and self._now("replace"):
                raise OSError(errno.EIO, "Input/output error")
            return real_replace(src, dst, *a, **k)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        monkeypatch.setattr(os, "fdopen", fdopen)
        monkeypatch.setattr(os, "replace", replace)

    def _now(self, where):
        if where == self.where and self.current == f".{self.name}." and self.seen == self.nth and not self.failed:
            self.failed = True
            return True
        return False


@pytest.mark.parametrize("where", ["write", "replace"])
def test_disk_full_while_saving_a_checkpoint_keeps_the_previous_one_and_resume_matches(corpus, finished, tmp_path,
                                                                                         monkeypatch, capsys, where):
    """The 2nd save of last.pt (end of epoch 2) fails: exit 2, one line naming last.pt, last.pt still the end
    of epoch 1, no temporary file; `--resume` then ends bit-identical to an uninterrupted run."""
    tmp, data = corpus
    toml = write_exp(tmp_path / "two.toml", exp_text("two", ["a", "b"]))
    R = tmp_path / "R"
    last = R / "two" / "a" / "checkpoints" / "last.pt"
    fail = _FailWritesOf(monkeypatch, "last.pt", 2, where)
    rc = main(_run_args(toml, R, data, "--only", "a"))
    monkeypatch.undo()
    msg = one_line(capsys.readouterr().err)
    assert fail.failed and rc == 2
    assert str(last) in msg and ("No space left" in msg or "Input/output" in msg)
    assert torch.load(last, weights_only=True)["loop"]["epoch"] == 1
    assert tmp_files(R) == [] and not (R / "two" / "a" / ".lock").exists()
    assert main(_run_args(toml, R, data, "--only", "a", "--resume")) == 0
    assert_same_result(finished, R, exp_a="two", run_a="a", exp_b="two", run_b="a")


def test_disk_full_while_writing_the_record_keeps_no_half_record_and_resume_finishes(corpus, tmp_path, monkeypatch,
                                                                                   capsys):
    tmp, data = corpus
    toml = write_exp(tmp_path / "t.toml", exp_text("t", ["a"], run_extra="train.epochs = 1\n"))
    R = tmp_path / "R"
    fail = _FailWritesOf(monkeypatch, "record.json", 1)
    rc = main(_run_args(toml, R, data))
    monkeypatch.undo()
    msg = one_line(capsys.readouterr().err)
    assert fail.failed and rc == 2 and str(R / "t" / "a" / "record.json") in msg
    assert not (R / "t" / "a" / "record.json").exists() and tmp_files(R) == []
    assert main(_run_args(toml, R, data, "--resume")) == 0
    assert record(R, "t", "a")["status"] == "done"


def test_disk_full_while_writing_a_table_keeps_the_old_table(finished, tmp_path, monkeypatch, capsys):
    R = _copy_tree(finished, tmp_path / "R")
    table = R / "two" / "table.csv"
    old = table.read_bytes()
    fail = _FailWritesOf(monkeypatch, "table.csv", 1)
    rc = main(["report", "two", "--results", str(R)])
    monkeypatch.undo()
    msg = one_line(capsys.readouterr().err)
    assert fail.failed and rc == 2 and str(table) in msg
    assert table.read_bytes() == old and tmp_files(R) == []


@pytest.mark.parametrize("where", ["create", "write"])
def test_disk_full_while_locking_the_run_folder_names_the_lock(corpus, tmp_path, monkeypatch, capsys, where):
    tmp, data = corpus
    toml = write_exp(tmp_path / "t.toml", exp_text("t", ["a"]))
    R = tmp_path / "R"
    real_open, real_fdopen = os.open, os.fdopen
    fds = set()

    def fake_open(path, flags, *a, **k):
        if str(path).endswith(".lock"):
            if where == "create":
                raise OSError(errno.ENOSPC, "No space left on device")
            fd = real_open(path, flags, *a, **k)
            fds.add(fd)
            return fd
        return real_open(path, flags, *a, **k)

    def fake_fdopen(fd, *a, **k):
        f = real_fdopen(fd, *a, **k)
        return _HalfWriter(f, OSError(errno.ENOSPC, "No space left on device")) if fd in fds else f

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "fdopen", fake_fdopen)
    rc = main(_run_args(toml, R, data))
    monkeypatch.undo()
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(R / "t" / "a" / ".lock") in msg and "No space left" in msg
    assert not list(R.rglob(".lock")) and trained(R) == []


# ========================================================================= 7. concurrent reports
REPEAT = 4  # reports per process: enough rewrites of every table that a non-atomic write is caught (checked
#             by making atomic_write_bytes write in place, in 64-byte chunks: the test then fails)


@pytest.mark.slow
def test_two_reports_and_a_writing_run_leave_every_table_whole(finished, tmp_path):
    """Two `zoo report` processes on one tree while a third party rewrites run b's record (as a finishing
    run does): every table read at any moment parses and has both rows."""
    import pandas as pd

    from seq2seq_zoo.results import write_record
    R = _copy_tree(finished, tmp_path / "R")
    exp = R / "two"
    rec_b = json.loads((exp / "b" / "record.json").read_text(encoding="utf-8"))
    stop = threading.Event()
    seen = {"reads": 0, "bad": []}

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            write_record(exp / "b", dict(rec_b, wall_seconds=float(i)))
            time.sleep(0.005)

    def reader():
        while not stop.is_set():
            for name in ("table.csv", "val_loss.csv"):
                try:
                    df = pd.read_csv(exp / name)
                except Exception as e:  # noqa: BLE001 - recorded as a failure
                    seen["bad"].append(f"{name}: {e}")
                    continue
                seen["reads"] += 1
                if name == "table.csv" and sorted(df["run"]) != ["a", "b"]:
                    seen["bad"].append(f"{name}: rows {list(df['run'])}")
            md = (exp / "table.md").read_text(encoding="utf-8")
            if "| a " not in md or "| b " not in md or not md.endswith("\n"):
                seen["bad"].append("table.md incomplete")
            time.sleep(0.0005)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    try:  # two processes, each running `zoo report` REPEAT times, side by side; what is read here is the
        # tables, so the plots are not rendered (each figure is still made, then closed): most of a report's time
        code = ("import sys; from seq2seq_zoo.cli import main; import seq2seq_zoo.report.plots as P; "
                "P.save_figure = lambda fig, path: (P.plt.close(fig), path)[1]; "
                f"sys.exit(max(main(['report', '--results', {str(R)!r}]) for _ in range({REPEAT})))")
        procs = [subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        done = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    finally:
        stop.set()
        for t in threads:
            t.join()
    for out, err, rc in done:
        assert rc == 0, err
    assert seen["reads"] > 0 and seen["bad"] == [], seen["bad"][:5]
    assert tmp_files(R) == []
    assert sorted(pd.read_csv(exp / "table.csv")["run"]) == ["a", "b"]


def test_code_version_names_the_checkout_commit_and_none_outside_git(tmp_path):
    """Records keep the commit of the code that produced them (kernels can change results by float
    rounding between commits); outside a git checkout the commit is None, not an error."""
    import re
    import shutil
    import subprocess

    from seq2seq_zoo.utils import code_version
    assert code_version(tmp_path) == {"commit": None, "dirty": None}
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "a.py"], check=True)
    subprocess.run(git + ["commit", "-qm", "a"], check=True)
    v = code_version(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", v["commit"]) and v["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert code_version(tmp_path)["dirty"] is True


def test_records_name_the_command_as_a_user_types_it(corpus, tmp_path):
    """A record's command is `zoo ...` whether the zoo script, `python -m seq2seq_zoo` or `python -m
    seq2seq_zoo.cli` ran it (no checkout path in the record), and the plain command line otherwise."""
    import seq2seq_zoo
    from seq2seq_zoo.utils import invocation
    pkg = Path(seq2seq_zoo.__file__).parent
    for entry in ("/usr/bin/zoo", str(pkg / "__main__.py"), str(pkg / "cli" / "__main__.py")):
        assert invocation([entry, "run", "my exp.toml", "--only", "a"]) == "zoo run 'my exp.toml' --only a"
    assert invocation(["/x/train.py", "--lr", "1"]) == "/x/train.py --lr 1"
    assert invocation([str(tmp_path / "__main__.py"), "run"]) == f"{tmp_path / '__main__.py'} run"   # not ours
    tmp, data = corpus
    toml = write_exp(tmp_path / "one.toml", exp_text("one", ["a"], run_extra="train.epochs = 1\n"))
    done = main_captured(_run_args(toml, tmp_path / "R", data))
    assert done.rc == 0, done.err
    assert record(tmp_path / "R", "one", "a")["command"] == "zoo " + " ".join(_run_args(toml, tmp_path / "R", data))


def test_every_run_of_one_zoo_run_records_the_commit_the_process_started_with(corpus, tmp_path, monkeypatch):
    """A `zoo run` of several runs keeps the code it imported while the checkout moves on (here: the
    commit changes while run `a` trains), so both records name the commit of the process's start."""
    import seq2seq_zoo.utils.version as utils
    tmp, data = corpus
    toml = write_exp(tmp_path / "two.toml", exp_text("two", ["a", "b"], run_extra="train.epochs = 1\n"))
    calls = []

    def moving_checkout(package_dir=None):
        calls.append(1)
        return {"commit": f"{len(calls):040x}", "dirty": False}

    monkeypatch.setattr(utils, "code_version", moving_checkout)
    utils.process_code_version.cache_clear()
    try:
        done = main_captured(_run_args(toml, tmp_path / "R", data))
        assert done.rc == 0, done.err
        commits = {r: record(tmp_path / "R", "two", r)["code"]["commit"] for r in ("a", "b")}
    finally:
        utils.process_code_version.cache_clear()
    assert commits == {"a": f"{1:040x}", "b": f"{1:040x}"} and len(calls) == 1
