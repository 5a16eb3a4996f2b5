"""``zoo run EXP --launcher slurm|local``: an experiment's runs and seeds as submitit jobs, against a real
one-node Slurm (tests/slurm_cluster.py installs and starts it, and stops exactly what it started).

One scenario is shared by the Slurm tests: the tiny experiment ``grid`` (runs ``a`` and ``b`` with the very
same settings, seeds 1 and 2, so ``b-seedN`` is the uninterrupted twin of ``a-seedN``) and the experiment
``broken`` (one run whose dataset is not in the data folder: a user error) are submitted. Job
``a-seed1`` is pre-empted mid-training: its ``zoo run`` is paused with SIGSTOP right after its first
epoch's checkpoint, the job gets submitit's signal through ``scancel --signal=USR2`` (what Slurm sends
before a time limit), and the run is let go on, so it stops at the next update with its checkpoint.
Slurm holds a requeued job for a while (its BeginTime); the test lets it start at once. Then the same
command is submitted again. ``--launcher local`` runs the same jobs without Slurm.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import run_cli, tiny_experiment, write_dialogsum
from slurm_cluster import SlurmCluster, install
from test_crash_safety import assert_same_result

TIMEOUT = 300
GRID_RUNS = '[[runs]]\nname = "a"\nseeds = [1, 2]\n\n[[runs]]\nname = "b"\nseeds = [1, 2]\n'
NAMES = ["a-seed1", "a-seed2", "b-seed1", "b-seed2"]


def _files(tmp: Path):
    data = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    grid = tmp / "grid.toml"
    grid.write_text(tiny_experiment("grid", GRID_RUNS, data_dir=data, epochs=3), encoding="utf-8")
    broken = tmp / "broken.toml"
    broken.write_text(tiny_experiment("broken", '[[runs]]\nname = "c"\ndata.dataset = "samsum"\n', seeds=1,
                                      data_dir=data, epochs=1), encoding="utf-8")
    return grid, broken


def _wait(cond, what: str, timeout: float = TIMEOUT, poll: float = 0.005):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        got = cond()
        if got:
            return got
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


def _state(R: Path, exp: str, run: str) -> dict:
    p = R / exp / ".jobs" / "state" / f"{run}.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def _jobs(R: Path, exp: str) -> dict:
    return json.loads((R / exp / ".jobs" / "jobs.json").read_text(encoding="utf-8"))


def _record(R: Path, exp: str, run: str) -> dict:
    return json.loads((R / exp / run / "record.json").read_text(encoding="utf-8"))


def _zoo(*args) -> tuple[int, str, str]:
    """``zoo ARGS`` in this process, with its output."""
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run_cli([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


# ============================================================================================ Slurm
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm of its own (installed when absent); SLURM_CONF points the clients at it."""
    why = install()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must test against a real Slurm: {why}")
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    with pytest.MonkeyPatch.context() as mp:
        try:
            cluster.start()
            for k, v in cluster.env.items():
                mp.setenv(k, v)
            yield cluster
        finally:
            cluster.stop()


def _slurm(cluster: SlurmCluster, *cmd: str) -> str:
    r = subprocess.run(list(cmd), env=dict(os.environ, **cluster.env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (cmd, r.stderr)
    return r.stdout


def _live(cluster: SlurmCluster) -> list[str]:
    return [ln for ln in _slurm(cluster, "squeue", "-h", "-r", "-o", "%i %T").splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def scenario(slurm, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch_slurm")
    grid, broken = _files(tmp)
    R = tmp / "R"
    common = ["--launcher", "slurm", "--results", R, "--no-progress", "--time", 10]
    first = _zoo("run", grid, *common)
    assert first[0] == 0, first
    bad = _zoo("run", broken, *common, "--no-report-job")
    assert bad[0] == 0, bad
    # pre-empt a-seed1 mid-training
    run_dir = R / "grid" / "a-seed1"
    last, lock = run_dir / "checkpoints" / "last.pt", run_dir / ".lock"
    _wait(last.is_file, "a-seed1's first checkpoint")
    pid = int(lock.read_text().strip())
    os.kill(pid, signal.SIGSTOP)   # its `zoo run`: held right after the first epoch's checkpoint
    loop_at_signal = torch.load(last, weights_only=True)["loop"]
    job = _jobs(R, "grid")["runs"]["a-seed1"]["job_id"]
    # scancel delivers at once; while other tasks of the array are pending, Slurm 22.05's scancel also takes
    # the job as "in transition" and sends again every few seconds until it ends, so it is stopped here
    # once the signal has arrived (a time limit's signal comes once)
    scancel = subprocess.Popen(["scancel", "--signal=USR2", job], env=dict(os.environ, **slurm.env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        log = Path(_wait(lambda: _state(R, "grid", "a-seed1").get("log"), "a-seed1's state"))
        _wait(lambda: "Caught signal SIGUSR2" in log.read_text(errors="replace"), "submitit's handler", poll=0.05)
    finally:
        scancel.kill()
        scancel.wait()
    os.kill(pid, signal.SIGCONT)
    _wait(lambda: any(ln.startswith(f"{job} PENDING") for ln in _live(slurm)), "the requeued job", poll=0.2)
    _slurm(slurm, "scontrol", "update", f"JobId={job}", "StartTime=now")   # Slurm's hold after a requeue
    _wait(lambda: not _live(slurm), "every job to end", poll=0.5)
    status = _zoo("status", grid, "--results", R)
    status_broken = _zoo("status", broken, "--results", R)
    mtimes = {n: (R / "grid" / n / "record.json").stat().st_mtime_ns for n in NAMES}
    again = _zoo("run", grid, *common)
    queued_again = _live(slurm)
    return dict(R=R, first=first, bad=bad, job=job, loop=loop_at_signal, status=status, broken=status_broken,
                again=again, queued_again=queued_again, mtimes=mtimes, log=log, cluster=slurm)


@pytest.mark.slow
def test_slurm_ran_one_job_per_run_and_seed_and_every_record_is_there(scenario):
    R, s = scenario["R"], scenario
    jobs = _jobs(R, "grid")
    assert sorted(jobs["runs"]) == NAMES and all(e["launcher"] == "slurm" for e in jobs["runs"].values())
    ids = [jobs["runs"][n]["job_id"] for n in NAMES]
    array = {i.split("_")[0] for i in ids}
    assert len(array) == 1 and sorted(i.split("_")[1] for i in ids) == ["0", "1", "2", "3"]   # one job array
    comp = (s["cluster"].root / "jobcomp.log").read_text()   # Slurm's own job-completion log
    arr = array.pop()
    for n in NAMES:
        rec = _record(R, "grid", n)
        assert rec["run"] == n and rec["eval"]["scores"]["rouge1"] >= 0 and rec["train"]["steps"] > 0
        st = _state(R, "grid", n)
        assert st["state"] == "done" and st["rc"] == 0 and st["job_id"] == jobs["runs"][n]["job_id"]
        job_dir = Path(st["log"]).parent
        outcome, result = pickle.loads((job_dir / f"{st['job_id']}_0_result.pkl").read_bytes())  # submitit's
        assert outcome == "success" and result["run"] == n
        assert "--only " + n in rec["command"] and "--resume" in rec["command"]
    # the array's tasks and the report job ran to completion in Slurm (no accounting database: its text log)
    done = set()
    for ln in comp.splitlines():
        f = dict(kv.split("=", 1) for kv in ln.split() if "=" in kv)
        if f.get("JobState") == "COMPLETED":
            done.add(f"{f['ArrayJobId']}_{f['ArrayTaskId']}" if f.get("ArrayJobId") else f["JobId"])
    assert set(ids) <= done, comp
    assert jobs["report"] and jobs["report"]["job_id"] in done
    table = (R / "grid" / "table.md").read_text(encoding="utf-8")
    assert "a" in table and "b" in table and (R / "grid" / "report.html").is_file()
    assert int(arr) > 0
    out = _zoo("status", R.parent / "grid.toml", "--results", R)[1]
    assert "zoo report: job " + jobs["report"]["job_id"] + " ended" in out


@pytest.mark.slow
def test_preempted_job_is_requeued_and_resumes_to_the_uninterrupted_result(scenario):
    R, s = scenario["R"], scenario
    assert not s["loop"]["finished"], "the signal must reach the run mid-training"
    st = _state(R, "grid", "a-seed1")
    assert st["attempt"] == 1 and st["state"] == "done"        # SLURM_RESTART_COUNT: requeued once
    err, out = s["log"].read_text(errors="replace"), Path(st["out"]).read_text(errors="replace")
    assert err.count("Caught signal SIGUSR2") == 1 and "stopped by SIGTERM" in err
    assert out.count("Requeued job") == 1 and "resumed from" in out
    rec = _record(R, "grid", "a-seed1")
    assert rec["train"]["resumes"] == 1
    assert_same_result(R, R, exp_a="grid", run_a="a-seed1", exp_b="grid", run_b="b-seed1")
    assert _record(R, "grid", "b-seed1")["train"]["resumes"] == 0


@pytest.mark.slow
def test_user_error_is_not_requeued_and_status_shows_its_line_and_log(scenario):
    R, s = scenario["R"], scenario
    st = _state(R, "broken", "c")
    assert st["state"] == "failed" and st["rc"] == 2 and st["attempt"] == 0
    assert st["error"].startswith("zoo run: error: ") and "samsum" in st["error"]
    rc, out, err = s["broken"]
    assert rc == 2, (out, err)
    line = next(ln for ln in out.splitlines() if ln.startswith("c "))
    assert "failed" in line and st["error"] in line and st["log"] in line
    assert not (R / "broken" / "c" / "record.json").exists()
    rc, out, err = s["status"]
    assert rc == 0 and out.count(" done ") == 4, out


@pytest.mark.slow
def test_a_second_submit_trains_nothing(scenario):
    R, s = scenario["R"], scenario
    rc, out, err = s["again"]
    assert rc == 0, err
    assert out.count("already done") == 4 and "nothing to submit" in out and "submitted" not in out
    assert s["queued_again"] == []
    assert {n: (R / "grid" / n / "record.json").stat().st_mtime_ns for n in NAMES} == s["mtimes"]


# ============================================================================================ local
@pytest.fixture(scope="module")
def local(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch_local")
    grid, _ = _files(tmp)
    R = tmp / "R"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(tmp / "no-slurm.conf"))   # a Slurm client would fail: none is used
        first = _zoo("run", grid, "--launcher", "local", "--results", R, "--no-progress")
        again = _zoo("run", grid, "--launcher", "local", "--results", R, "--no-progress")
    return dict(R=R, first=first, again=again)


@pytest.mark.slow
def test_local_launcher_runs_the_same_jobs_without_slurm(local):
    R = local["R"]
    rc, out, err = local["first"]
    assert rc == 0, (out, err)
    jobs = _jobs(R, "grid")
    for n in NAMES:
        assert f"[{n}] done" in out
        assert jobs["runs"][n]["launcher"] == "local"
        st = _state(R, "grid", n)
        assert st["state"] == "done" and st["job_id"] == jobs["runs"][n]["job_id"]
    for seed in (1, 2):   # same settings, same seed: the same result, whichever job trained it
        assert_same_result(R, R, exp_a="grid", run_a=f"a-seed{seed}", exp_b="grid", run_b=f"b-seed{seed}")
    assert (R / "grid" / "table.md").is_file()
    rc, out, err = local["again"]
    assert rc == 0 and out.count("already done") == 4 and "nothing to submit" in out


def test_launcher_options_merge_command_line_over_experiment_over_user_config():
    from seq2seq_zoo.launch.submit import Options
    o = Options.merged("slurm", {"partition": "gpu", "time": None, "sbatch": {"constraint": "a100"}},
                       {"partition": "cpu", "time": 30, "sbatch": {"exclusive": True}},
                       {"partition": "user", "account": "lab", "time": 5})
    assert (o.partition, o.time, o.account) == ("gpu", 30, "lab")
    assert o.sbatch == {"exclusive": True, "constraint": "a100"}
    assert o.resources(1) == (None, 0)
    o.gpus_per_job = 1
    assert o.resources(4) == (None, 4)      # --nproc 4 on GPUs: four GPUs
    o.gpus_per_job = 0
    assert o.resources(4) == (4, 0)         # on CPUs: four CPUs for the four workers


def test_bad_launcher_table_names_file_line_and_key(tmp_path):
    data = write_dialogsum(tmp_path / "data")
    exp = tmp_path / "e.toml"
    exp.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\n', data_dir=data)
                   + '\n[launcher]\npartition = "gpu"\ntime = "2h"\n', encoding="utf-8")
    rc, out, err = _zoo("run", exp, "--dry-run")
    line = len(exp.read_text().splitlines())
    assert rc == 2 and err.strip() == (f"zoo run: error: {exp}:{line}: launcher.time: expected a number of minutes "
                                       ">= 1, got '2h'")
    exp.write_text(exp.read_text().replace('time = "2h"', "gpus = 1"), encoding="utf-8")
    rc, out, err = _zoo("run", exp, "--dry-run")
    assert rc == 2 and "launcher.gpus: unknown key" in err and "gpus_per_job" in err
