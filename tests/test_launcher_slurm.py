"""``zoo run EXP --launcher slurm``: an experiment's runs and seeds as jobs of a real one-node Slurm
(tests/slurm_cluster.py installs it when absent, starts it, and stops exactly what it started).

One scenario is shared by the tests: the tiny experiment ``grid`` (runs ``a`` and ``b`` with the very same
settings and one seed, so ``b`` is the uninterrupted twin of ``a``: a job array of two tasks and
a report job on a node with two CPUs, beside the other experiment's job) and the experiment
``broken`` (one run whose dataset is not in the data folder: a user error) are submitted. Job ``a``
is pre-empted mid-training: its ``zoo run`` is paused with SIGSTOP right after its first epoch's
checkpoint, the job gets submitit's signal through ``scancel --signal=USR2`` (what Slurm sends before a
time limit), and the run is let go on, so it stops at the next update with its checkpoint. Slurm holds a
requeued job for a while (its BeginTime); the test lets it start at once. Then the same command is
submitted again and must submit nothing. ``zoo status`` and that second ``zoo run`` run in the test's
process (they make no job; the second command could not make one there), the first ``zoo run`` in a
process of its own.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from slurm_cluster import SlurmCluster, install
from test_crash_safety import assert_same_result
from test_launcher import TIMEOUT, _files, _jobs, _main_captured, _record, _state, _wait, _without_executor, _zoo
from zoo_process import ZooProcess

NAMES = ["a", "b"]   # grid's runs here (one seed each)


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
            try:
                cluster.start()
            except RuntimeError as e:
                if os.environ.get("CI", "").lower() == "true":
                    raise
                pytest.skip(f"a one-node Slurm does not start here: {str(e).splitlines()[0]}")
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
    grid, broken = _files(tmp, seeds=(1,))
    R = tmp / "R"
    common = ["--launcher", "slurm", "--results", R, "--no-progress", "--time", 10]
    first = _zoo("run", grid, *common)
    assert first[0] == 0, first
    # the user error's experiment through --wait, in a process of its own while the test goes on
    bad = ZooProcess(["run", broken, *common, "--no-report-job", "--wait"], tmp, dict(os.environ, **slurm.env),
                     tmp / "bad.out", tmp / "bad.err")
    # pre-empt run a mid-training
    run_dir = R / "grid" / "a"
    last, lock = run_dir / "checkpoints" / "last.pt", run_dir / ".lock"
    _wait(last.is_file, "run a's first checkpoint")
    pid = int(lock.read_text().strip())
    os.kill(pid, signal.SIGSTOP)   # its `zoo run`: held right after the first epoch's checkpoint
    loop_at_signal = torch.load(last, weights_only=True)["loop"]
    job = _jobs(R, "grid")["runs"]["a"]["job_id"]
    # scancel delivers at once; while other tasks of the array are pending, Slurm 22.05's scancel also takes
    # the job as "in transition" and sends again every few seconds until it ends, so it is stopped here
    # once the signal has arrived (a time limit's signal comes once)
    scancel = subprocess.Popen(["scancel", "--signal=USR2", job], env=dict(os.environ, **slurm.env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        log = Path(_wait(lambda: _state(R, "grid", "a").get("log"), "run a's state"))
        _wait(lambda: "Caught signal SIGUSR2" in log.read_text(errors="replace"), "submitit's handler", poll=0.05)
    finally:
        scancel.kill()
        scancel.wait()
    os.kill(pid, signal.SIGCONT)
    out_log = log.with_name(log.name.replace("_log.err", "_log.out"))
    _wait(lambda: "Requeued job" in out_log.read_text(errors="replace"), "submitit's requeue", poll=0.05)
    # Slurm holds a requeued job (BeginTime, two minutes in 22.05): let it start now if it waits for that
    pending = lambda: any(ln.startswith(f"{job} PENDING") for ln in _live(slurm))  # noqa: E731
    try:
        _wait(pending, "the requeued job", 20, 0.2)
    except AssertionError:
        pass   # already running again
    # slurmd refuses to launch a job whose credential was revoked (by the requeue) in the same second as the
    # new credential was made ("Job credential revoked"): the job would fail instead of starting. And an
    # update that reaches slurmctld while it is still finishing the requeue is dropped (the job then waited
    # out its two minutes), so it is repeated while the job stays pending.
    t_end = time.monotonic() + 30
    while time.monotonic() < t_end and pending():
        time.sleep(1.2)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=dict(os.environ, **slurm.env),
                       capture_output=True, timeout=60)
        time.sleep(1.0)   # the scheduler runs every second (sched_interval=1)
    _wait(lambda: not _live(slurm), "every job to end", poll=0.5)
    bad.wait(TIMEOUT)
    bad = (bad.returncode, *bad.texts())
    status = _main_captured("status", grid, "--results", R)
    status_broken = _main_captured("status", broken, "--results", R)
    mtimes = {n: (R / "grid" / n / "record.json").stat().st_mtime_ns for n in NAMES}
    with pytest.MonkeyPatch.context() as mp:
        _without_executor(mp)
        again = _main_captured("run", grid, *common)
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
    assert len(array) == 1 and sorted(i.split("_")[1] for i in ids) == ["0", "1"]   # one job array
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
    out = _main_captured("status", R.parent / "grid.toml", "--results", R)[1]
    assert "zoo report: job " + jobs["report"]["job_id"] + " ended" in out


@pytest.mark.slow
def test_preempted_job_is_requeued_and_resumes_to_the_uninterrupted_result(scenario):
    R, s = scenario["R"], scenario
    assert not s["loop"]["finished"], "the signal must reach the run mid-training"
    st = _state(R, "grid", "a")
    assert st["attempt"] == 1 and st["state"] == "done"        # SLURM_RESTART_COUNT: requeued once
    err, out = s["log"].read_text(errors="replace"), Path(st["out"]).read_text(errors="replace")
    assert err.count("Caught signal SIGUSR2") == 1 and "stopped by SIGTERM" in err
    assert out.count("Requeued job") == 1 and "resumed from" in out
    rec = _record(R, "grid", "a")
    assert rec["train"]["resumes"] == 1
    assert_same_result(R, R, exp_a="grid", run_a="a", exp_b="grid", run_b="b")
    assert _record(R, "grid", "b")["train"]["resumes"] == 0


@pytest.mark.slow
def test_user_error_is_not_requeued_and_status_shows_its_line_and_log(scenario):
    R, s = scenario["R"], scenario
    st = _state(R, "broken", "c")
    assert st["state"] == "failed" and st["rc"] == 2 and st["attempt"] == 0
    assert st["error"].startswith("zoo run: error: ") and "samsum" in st["error"]
    for rc, out, err in (s["broken"], s["bad"]):   # zoo status, and zoo run --wait once its job had ended
        assert rc == 2, (out, err)
        line = next(ln for ln in out.splitlines() if ln.startswith("c "))
        assert "failed" in line and st["error"] in line and st["log"] in line
    assert "[c] submitted: job " in s["bad"][1] and "zoo report: job" not in s["bad"][1]
    assert not (R / "broken" / "c" / "record.json").exists()
    rc, out, err = s["status"]
    assert rc == 0 and out.count(" done ") == len(NAMES), out


@pytest.mark.slow
def test_a_second_submit_trains_nothing(scenario):
    R, s = scenario["R"], scenario
    rc, out, err = s["again"]
    assert rc == 0, err
    assert out.count("already done") == len(NAMES) and "nothing to submit" in out and "submitted" not in out
    assert s["queued_again"] == []
    assert {n: (R / "grid" / n / "record.json").stat().st_mtime_ns for n in NAMES} == s["mtimes"]
