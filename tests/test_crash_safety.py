"""Crash safety (SIGKILL, failed writes, Ctrl-C), safe checkpoint loading, concurrent `zoo run`s, and
`zoo summarize` on arbitrary input; the helpers and the tiny experiment the other failure tests share
(test_bad_experiment_files.py, test_bad_data.py, test_non_finite_loss.py, test_preemption_and_damaged_files.py).

Cost: the `zoo` processes are forked from a server that has imported torch and the package
(tests/zoo_process.py), and the scenarios are grouped into a few module-scoped fixtures that run their
processes side by side (one uninterrupted reference run serves the
crash, concurrency, safe-loading and summarize tests). Everything else calls ``seq2seq_zoo.cli.main``
in-process on the tiny corpus from conftest.
"""
from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import zoo_process
from conftest import write_dialogsum
from seq2seq_zoo.cli import main
from seq2seq_zoo.train.objectives import CrossEntropy
from seq2seq_zoo.utils import UnsafeCheckpoint, load_checkpoint
from zoo_process import ZooProcess

CPU = torch.device("cpu")
TIMEOUT = 300  # per subprocess; a hang fails the test instead of blocking CI

# A tiny experiment: d_model 32, 2 layers, 32 training examples (8 batches of 4), 3 epochs, fp32 on one
# thread, a checkpoint per epoch. Sections are written as tables ([defaults.train] ...).
EXP = """\
[experiment]
name = "{name}"
dataset = "dialogsum"
metrics = ["rouge"]
seeds = [1]

[defaults]
model = "transformer"
d_model = 32
d_ff = 64
heads = 2
layers = 2
dropout = 0.1

[defaults.data]
max_src_len = 64
max_tgt_len = 24

[defaults.train]
epochs = 3
batch_size = 4
lr = 0.002
precision = "fp32"
threads = 1

[defaults.decode]
beam_size = 2
max_len = 20
"""


def exp_text(name: str = "rel", runs=("a",), run_extra: str = "") -> str:
    return EXP.format(name=name) + "".join(f'\n[[runs]]\nname = "{r}"\n{run_extra}' for r in runs)


def write_exp(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ processes
@dataclass
class Done:
    rc: int
    out: str
    err: str


def _env() -> dict:
    env = dict(os.environ)
    env.pop("ZOO_DATA", None)
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    return env


def start(args, cwd: Path, tag: str) -> ZooProcess:
    """`zoo ARGS` in the background, a process of its own (forked from a server that has imported torch
    and the package: tests/zoo_process.py); stdout/stderr go to files (no pipe can fill up and block it)."""
    return ZooProcess(args, cwd, _env(), cwd / f"{tag}.out", cwd / f"{tag}.err")


def finish(p: ZooProcess, cwd: Path) -> Done:
    return Done(*p.result(TIMEOUT))


def run_zoo(args, cwd: Path, stdin: bytes | None = None) -> Done:
    return Done(*zoo_process.run(args, cwd, _env(), stdin or b"", TIMEOUT))


def wait_for(cond, p, timeout: float = TIMEOUT) -> bool:
    """Poll ``cond()`` every 2 ms while ``p`` runs; False if ``p`` ended (or time ran out) first."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if cond():
            return True
        if p.poll() is not None:
            return bool(cond())
        time.sleep(0.002)
    return False


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid


def tmp_files(root: Path) -> list[Path]:
    return [p for p in Path(root).rglob("*") if p.name.endswith(".tmp")]


def trained_anything(results: Path) -> list[Path]:
    return [p for p in Path(results).rglob("*") if p.name == "record.json" or p.suffix == ".pt"]


def one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, f"expected one stderr line, got:\n{err}"
    assert "Traceback" not in err
    return lines[0]


def record(results: Path, exp: str = "rel", run: str = "a") -> dict:
    return json.loads((Path(results) / exp / run / "record.json").read_text(encoding="utf-8"))


def assert_same_result(res_a: Path, res_b: Path, exp_a="rel", run_a="a", exp_b="rel", run_b="a"):
    """Same scores, per-epoch losses, steps, predictions and bit-identical best.pt weights."""
    ra, rb = record(res_a, exp_a, run_a), record(res_b, exp_b, run_b)
    assert ra["eval"]["scores"] == rb["eval"]["scores"]
    ha, hb = ra["train"]["history"], rb["train"]["history"]
    assert [(h["epoch"], h["step"], h["val_loss"]) for h in ha] == [(h["epoch"], h["step"], h["val_loss"]) for h in hb]
    assert [h["train_loss"] for h in ha] == [h["train_loss"] for h in hb]
    assert (ra["train"]["best_val_loss"], ra["train"]["best_step"], ra["train"]["steps"]) == \
           (rb["train"]["best_val_loss"], rb["train"]["best_step"], rb["train"]["steps"])
    pa = (Path(res_a) / exp_a / run_a / "predictions.jsonl").read_text(encoding="utf-8")
    pb = (Path(res_b) / exp_b / run_b / "predictions.jsonl").read_text(encoding="utf-8")
    assert pa == pb
    ma = torch.load(Path(res_a) / exp_a / run_a / "checkpoints" / "best.pt", weights_only=True)["model"]
    mb = torch.load(Path(res_b) / exp_b / run_b / "checkpoints" / "best.pt", weights_only=True)["model"]
    assert ma.keys() == mb.keys()
    for k in ma:
        assert torch.equal(ma[k], mb[k]), k


# ------------------------------------------------------------------------------------- shared fixtures
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The tiny corpus (32 train, 4 dev, 3 test) and the experiment file `rel` with one run `a`."""
    tmp = tmp_path_factory.mktemp("reliability")
    data = write_dialogsum(tmp / "data", n_train=32, n_dev=4, n_test=3)
    toml = write_exp(tmp / "rel.toml", exp_text("rel", ["a"]))
    return tmp, data, toml


@pytest.fixture(scope="module")
def fleet(corpus):
    """Runs side by side, all into one results folder R:
    - `rel` (the uninterrupted reference run every other test compares with);
    - `beta --only A` and `beta --only B` (a different experiment with the same settings; B's folder
      holds a stale lock left by a dead process);
    - `rel` started a second time (in this process) while the first holds its lock; the first is paused
      with SIGSTOP meanwhile, so it is certainly still running."""
    tmp, data, toml = corpus
    R = tmp / "R"
    beta = write_exp(tmp / "beta.toml", exp_text("beta", ["A", "B"]))
    stale = dead_pid()
    (R / "beta" / "B").mkdir(parents=True)
    (R / "beta" / "B" / ".lock").write_text(str(stale))
    common = ["--results", R, "--no-progress", "--data-dir", data]
    ref = start(["run", toml, *common], tmp, "ref")
    pa = start(["run", beta, "--only", "A", *common], tmp, "betaA")
    pb = start(["run", beta, "--only", "B", *common], tmp, "betaB")
    lock = R / "rel" / "a" / ".lock"
    got_lock = wait_for(lambda: lock.is_file() and lock.read_text().strip() == str(ref.pid), ref)
    dup = None
    if got_lock:
        ref.send_signal(signal.SIGSTOP)
        try:
            dup = main_captured(["run", toml, *common])
        finally:
            ref.send_signal(signal.SIGCONT)
    return dict(R=R, data=data, toml=toml, beta=beta, stale_pid=stale, ref_pid=ref.pid, got_lock=got_lock,
                ref=finish(ref, tmp), A=finish(pa, tmp), B=finish(pb, tmp), dup=dup)


def main_captured(args) -> Done:
    """`zoo ARGS` in this process with its output captured (module-scoped fixtures have no capsys)."""
    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    torch.set_num_threads(threads)
    return Done(rc, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def ref_results(fleet):
    assert fleet["ref"].rc == 0, fleet["ref"].err
    return fleet["R"]


def _file_id(p: Path):
    try:
        st = p.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@pytest.fixture(scope="module")
def crash_chain(corpus):
    """One run interrupted three times, each time continued with `zoo run --resume`:
    P1  SIGKILL before any checkpoint (as soon as checkpoints/spec.json is written: model build / epoch 1);
    P2  --resume, Ctrl-C (SIGINT) as soon as the first per-epoch checkpoint last.pt appears (mid-training);
    P3  --resume, SIGKILL as soon as the next checkpoint replaces last.pt (end of epoch 2);
    P4  --resume to the end: its results must equal the uninterrupted reference run's (--no-report: what is
        compared is the run's own files; the reference run's report is checked)."""
    tmp, data, toml = corpus
    R = tmp / "R_crash"
    run_dir = R / "rel" / "a"
    ck = run_dir / "checkpoints"
    last = ck / "last.pt"
    args = ["run", toml, "--results", R, "--no-progress", "--data-dir", data]

    def stage(tag, extra, trigger, sig):
        p = start(args + extra, tmp, tag)
        hit = wait_for(trigger, p)
        if hit:
            p.send_signal(sig)
        at_signal = last.is_file()
        done = finish(p, tmp)
        lock = run_dir / ".lock"
        return dict(pid=p.pid, hit=hit, last_at_signal=at_signal, done=done,
                    lock_after=lock.read_text().strip() if lock.is_file() else None,
                    record_after=(run_dir / "record.json").exists(),
                    loop=torch.load(last, weights_only=True)["loop"] if last.is_file() else None)

    out = {"R": R}
    out["P1"] = stage("P1", [], lambda: (ck / "spec.json").is_file(), signal.SIGKILL)
    out["P2"] = stage("P2", ["--resume"], last.is_file, signal.SIGINT)
    before = _file_id(last)
    out["P3"] = stage("P3", ["--resume"], lambda: _file_id(last) not in (before, None), signal.SIGKILL)
    out["P4"] = run_zoo(args + ["--resume", "--no-report"], tmp)
    return out


# ===================================================================================== 1. crash safety
@pytest.mark.slow
def test_sigkill_before_any_checkpoint_then_resume_still_works(crash_chain, ref_results):
    s = crash_chain["P1"]
    assert s["hit"], s["done"].err
    assert s["done"].rc == -signal.SIGKILL
    assert not s["last_at_signal"], "killed too late for this scenario"
    # the killed process could not remove its lock: a stale lock of a dead pid, which --resume takes over
    assert s["lock_after"] == str(s["pid"])
    assert crash_chain["P2"]["hit"], ("the resumed run never reached a checkpoint", crash_chain["P2"]["done"].err)
    p4 = crash_chain["P4"]
    assert p4.rc == 0, p4.err
    assert_same_result(ref_results, crash_chain["R"])


@pytest.mark.slow
def test_ctrl_c_exits_130_says_how_to_resume_and_resume_matches(crash_chain, ref_results):
    s = crash_chain["P2"]
    assert s["hit"], s["done"].err
    d = s["done"]
    assert d.rc == 130, (d.rc, d.err)
    assert "--resume" in d.err and "Traceback" not in d.err
    assert s["loop"] is not None and not s["loop"]["finished"], "Ctrl-C must stop training, with a checkpoint"
    assert not s["record_after"]
    assert s["lock_after"] is None  # a clean exit releases the run folder
    p3 = crash_chain["P3"]
    assert p3["hit"] and "resumed from" in p3["done"].out, p3["done"].err  # continued from that checkpoint
    p4 = crash_chain["P4"]
    assert p4.rc == 0, p4.err
    assert_same_result(ref_results, crash_chain["R"])
    # README: Ctrl-C "prints the command to resume": the hint names the experiment file, not just the flag
    assert "rel.toml" in d.err and "--resume" in d.err, d.err


@pytest.mark.slow
def test_sigkill_after_checkpoint_then_resume_equals_uninterrupted_run(crash_chain, ref_results):
    s = crash_chain["P3"]
    assert s["hit"], s["done"].err
    assert s["done"].rc == -signal.SIGKILL
    assert not s["record_after"]
    assert s["loop"] is not None and s["loop"]["epoch"] == 2 and not s["loop"]["finished"], s["loop"]
    p4 = crash_chain["P4"]
    assert p4.rc == 0, p4.err
    assert "resumed from" in p4.out
    assert not (crash_chain["R"] / "rel" / "a" / ".lock").exists()
    assert_same_result(ref_results, crash_chain["R"])


def test_ctrl_c_in_the_last_training_batch_is_not_swallowed(corpus, tmp_path, monkeypatch, capsys):
    """Ctrl-C during the final update must still stop the command (exit 130, checkpoint kept), not go on
    to decode and evaluate as if nothing had been pressed."""
    tmp, data, toml = corpus
    orig = CrossEntropy.__call__
    calls = {"n": 0}

    def objective(self, model, batch):
        calls["n"] += 1
        if calls["n"] == 24:  # 3 epochs x 8 batches: the last training batch
            os.kill(os.getpid(), signal.SIGINT)
        return orig(self, model, batch)

    monkeypatch.setattr(CrossEntropy, "__call__", objective)
    R = tmp_path / "R"
    rc = main(["run", str(toml), "--results", str(R), "--no-progress", "--data-dir", str(data)])
    err = capsys.readouterr().err
    assert calls["n"] == 24
    assert rc == 130, "Ctrl-C in the last batch was ignored: the run went on to decoding"
    assert "--resume" in err
    assert (R / "rel" / "a" / "checkpoints" / "last.pt").is_file()
    assert not (R / "rel" / "a" / "record.json").exists()


# --------------------------------------------------------------------------------- 1b. atomic writes
class _HalfWriter:
    """A file object whose write() writes half of the data and then fails (disk full, or Ctrl-C)."""

    def __init__(self, f, exc):
        self.f, self.exc = f, exc

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        raise self.exc

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)


def _write_with(kind: str, path: Path):
    from seq2seq_zoo import results, utils
    payload = {"big": "x" * 50_000, "n": 1}
    if kind == "bytes":
        utils.atomic_write_bytes(path, b"new" * 20_000)
    elif kind == "text":
        utils.atomic_write_text(path, "new" * 20_000)
    elif kind == "json":
        utils.atomic_write_json(path, payload)
    elif kind == "torch":
        utils.atomic_torch_save({"w": torch.ones(10_000)}, path)
    elif kind == "record":
        results.write_record(path.parent, payload)
    elif kind == "predictions":
        results.write_predictions(path.parent, [{"id": str(i), "prediction": "p" * 100, "references": ["r"]}
                                                for i in range(500)])


_TARGET = {"bytes": "f.bin", "text": "f.txt", "json": "f.json", "torch": "f.pt", "record": "record.json",
           "predictions": "predictions.jsonl"}


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "ctrl-c"])
@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
@pytest.mark.parametrize("kind", list(_TARGET))
def test_failed_atomic_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch, kind, where, exc):
    path = tmp_path / _TARGET[kind]
    path.write_bytes(b"old content")
    if where == "write":
        real = os.fdopen
        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _HalfWriter(real(fd, *a, **k), exc))
    else:
        def boom(*a, **k):
            raise exc
        monkeypatch.setattr(os, where, boom)
    with pytest.raises(type(exc)):
        _write_with(kind, path)
    monkeypatch.undo()
    assert path.read_bytes() == b"old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name], "a temporary file was left behind"


def test_failed_first_write_creates_nothing(tmp_path, monkeypatch):
    from seq2seq_zoo.utils import atomic_write_json
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _HalfWriter(real(fd, *a, **k), OSError(5, "I/O error")))
    with pytest.raises(OSError):
        atomic_write_json(tmp_path / "sub" / "new.json", {"a": "b" * 1000})
    monkeypatch.undo()
    assert list((tmp_path / "sub").iterdir()) == []


@pytest.mark.slow
def test_no_partial_or_temporary_files_after_runs(fleet, ref_results):
    assert tmp_files(ref_results) == []
    for rec in ref_results.glob("*/*/record.json"):
        json.loads(rec.read_text(encoding="utf-8"))
    for pred in ref_results.glob("*/*/predictions.jsonl"):
        rows = [json.loads(x) for x in pred.read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 3
    for t in ("table.md", "table.csv", "table.tex", "README.md"):
        assert (ref_results / "rel" / t).stat().st_size > 0


# ================================================================================= 5. safe loading
class _SystemPayload:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class _ExecPayload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def _poison(path: Path, marker: Path, how: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = _SystemPayload(f"touch '{marker}'") if how == "system" else _ExecPayload(marker)
    obj = {"model": {"w": torch.zeros(2)}, "loop": {"epoch": 0}, "extra": payload}
    if how == "raw-pickle":
        import pickle
        with open(path, "wb") as f:
            pickle.dump(obj, f)
    else:
        torch.save(obj, path)
    return path


def test_poisoned_payload_is_live(tmp_path):
    """Control: the payload really runs when loaded unsafely, so the refusals below mean something."""
    marker = tmp_path / "marker"
    p = _poison(tmp_path / "ck.pt", marker, "exec")
    torch.load(p, weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("how", ["system", "exec", "raw-pickle"])
def test_load_checkpoint_refuses_code_payload(tmp_path, how):
    marker = tmp_path / "marker"
    p = _poison(tmp_path / "ck.pt", marker, how)
    with pytest.raises(UnsafeCheckpoint) as e:
        load_checkpoint(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    assert not marker.exists(), "the pickled payload ran"


def _copy_run(src: Path, dst: Path) -> Path:
    (dst / "checkpoints").mkdir(parents=True)
    for f in ("spec.json", "vocab.json"):
        (dst / "checkpoints" / f).write_bytes((src / "checkpoints" / f).read_bytes())
    return dst


@pytest.mark.slow
def test_summarize_refuses_poisoned_best_checkpoint(ref_results, tmp_path, capsys):
    run = _copy_run(ref_results / "rel" / "a", tmp_path / "run")
    marker = tmp_path / "marker"
    _poison(run / "checkpoints" / "best.pt", marker, "system")
    f = tmp_path / "in.txt"
    f.write_text("#Person1#: Hello Amy, I want to buy a red car.")
    rc = main(["summarize", str(run), "--file", str(f)])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and "best.pt" in msg
    assert not marker.exists()


def test_resume_refuses_poisoned_last_checkpoint(corpus, tmp_path, capsys):
    _, data, toml = corpus
    R = tmp_path / "R"
    marker = tmp_path / "marker"
    last = _poison(R / "rel" / "a" / "checkpoints" / "last.pt", marker, "exec")
    rc = main(["run", str(toml), "--results", str(R), "--no-progress", "--data-dir", str(data), "--resume"])
    msg = one_line(capsys.readouterr().err)
    assert rc == 2 and str(last) in msg
    assert not marker.exists()
    assert not (R / "rel" / "a" / "record.json").exists()


@pytest.mark.slow
def test_run_config_and_vocabulary_are_json_beside_the_weights(ref_results):
    from seq2seq_zoo.config import RunSpec
    ck = ref_results / "rel" / "a" / "checkpoints"
    spec = json.loads((ck / "spec.json").read_text(encoding="utf-8"))
    vocab = json.loads((ck / "vocab.json").read_text(encoding="utf-8"))
    assert RunSpec.from_dict(spec).model_options["d_model"] == 32
    assert vocab["itos"][:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert len(vocab["itos"]) == record(ref_results)["data"]["vocab_size"]
    for f in ("best.pt", "last.pt"):  # the run's own checkpoints load with tensors-only unpickling
        assert set(load_checkpoint(ck / f)) >= {"model", "loop"}


# =================================================================================== 6. concurrency
@pytest.mark.slow
def test_two_experiments_at_once_both_finish_with_correct_records(fleet, ref_results):
    for k in ("A", "B"):
        assert fleet[k].rc == 0, fleet[k].err
    r = record(ref_results, "rel", "a")
    assert (r["experiment"], r["run"], r["status"]) == ("rel", "a", "done")
    for run in ("A", "B"):
        rb = record(ref_results, "beta", run)
        assert (rb["experiment"], rb["run"], rb["status"]) == ("beta", run, "done")
        # same settings and seed as rel/a: identical results, whatever ran beside them
        assert_same_result(ref_results, ref_results, exp_b="beta", run_b=run)


@pytest.mark.slow
def test_same_experiment_started_twice_is_refused_with_pid(fleet, ref_results):
    assert fleet["got_lock"]
    dup = fleet["dup"]
    assert dup.rc == 2, (dup.rc, dup.out, dup.err)
    msg = one_line(dup.err)
    assert "in use" in msg and str(fleet["ref_pid"]) in msg
    assert not (ref_results / "rel" / "a" / ".lock").exists()


@pytest.mark.slow
def test_stale_lock_of_dead_process_is_taken_over(fleet, ref_results):
    assert fleet["B"].rc == 0, fleet["B"].err
    assert record(ref_results, "beta", "B")["status"] == "done"
    assert not (ref_results / "beta" / "B" / ".lock").exists()


@pytest.mark.slow
def test_only_a_and_only_b_of_one_experiment_run_concurrently(fleet, ref_results, capsys):
    assert fleet["A"].rc == 0 and fleet["B"].rc == 0, (fleet["A"].err, fleet["B"].err)
    assert not list((ref_results / "beta").glob("*/.lock"))
    assert main(["report", "beta", "--results", str(ref_results)]) == 0
    csv = (ref_results / "beta" / "table.csv").read_text(encoding="utf-8")
    assert "\nA," in csv and "\nB," in csv


# ============================================================================ 7. summarize on stdin
def _words(n: int) -> bytes:
    rng = random.Random(0)
    pool = ["#Person1#:", "#Person2#:", "hello", "amy", "buy", "red", "car", "shop", "the", "a", "zyzzyva", "."]
    return " ".join(rng.choice(pool) for _ in range(n)).encode()


STDIN = {"empty": b"", "emoji": "😀🎉🔥🙂👍🏽 🚗🛒".encode() * 20, "100k-words": _words(100_000),
         "binary-garbage": random.Random(1).randbytes(64_000)}


@pytest.fixture(scope="module")
def summaries(ref_results):
    """`zoo summarize RUN_DIR` on each STDIN case, in this process (no torch import per case), its standard
    input a stream of the case's bytes (the command reads ``sys.stdin.buffer``, as from a pipe)."""
    run = ref_results / "rel" / "a"
    got = {}
    for k, v in STDIN.items():
        stdin = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO(v), encoding="utf-8")
        try:
            got[k] = main_captured(["summarize", run])
        finally:
            sys.stdin = stdin
    return got


@pytest.mark.slow
@pytest.mark.parametrize("case", list(STDIN))
def test_summarize_arbitrary_stdin_summary_or_clear_error(summaries, case):
    r = summaries[case]
    assert "Traceback" not in r.err, r.err
    assert r.rc in (0, 2), (r.rc, r.err)
    if case == "empty":
        assert r.rc == 2 and "empty" in r.err
    if r.rc == 0:
        lines = [x for x in r.out.splitlines() if x.strip()]
        assert len(lines) == 1, r.out
    else:
        assert one_line(r.err).startswith("zoo summarize: error:")
