"""``zoo run EXP --launcher local``: an experiment's runs and seeds as jobs of submitit's local executor,
without Slurm; the launcher's settings, the sbatch script they make, each run's state for ``zoo status``.
The same jobs against a real Slurm: test_launcher_slurm.py.

The tiny experiment ``grid`` has runs ``a`` and ``b`` with the very same settings and seeds 1 and 2, so
``b-seedN`` is the twin of ``a-seedN``: the same result whichever job trains it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path

import pytest

import zoo_process
from conftest import tiny_experiment, write_dialogsum
from test_crash_safety import assert_same_result

TIMEOUT = 300
def _grid_runs(seeds: tuple[int, ...]) -> str:
    s = ", ".join(map(str, seeds))
    return f'[[runs]]\nname = "a"\nseeds = [{s}]\n\n[[runs]]\nname = "b"\nseeds = [{s}]\n'


GRID_RUNS = _grid_runs((1, 2))
NAMES = ["a-seed1", "a-seed2", "b-seed1", "b-seed2"]


def _files(tmp: Path, epochs: int = 5, seeds: tuple[int, ...] = (1, 2)):
    """``grid`` (runs ``a`` and ``b`` with ``seeds``) and ``broken`` on a tiny corpus. 5 epochs for the Slurm
    scenario: the pre-empted run is stopped right after its first one, with most of its training ahead; what
    the local launcher is checked for (jobs, states, twins alike) needs one."""
    data = write_dialogsum(tmp / "data", n_train=16, n_dev=4, n_test=3)
    grid = tmp / "grid.toml"
    grid.write_text(tiny_experiment("grid", _grid_runs(seeds), data_dir=data, epochs=epochs), encoding="utf-8")
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
    """``zoo ARGS`` as a process of its own (with this process's environment, from the checkout's folder), as a
    user runs it, with its output: submitit's executors must not share a pytest-xdist worker's captured
    standard streams (run in the worker's process, they left those closed for the worker's later tests). The
    process is forked from a server that has imported torch and the package (tests/zoo_process.py)."""
    return zoo_process.run(args, Path(__file__).resolve().parents[1], dict(os.environ), timeout=900)


# ============================================================================================ local
@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """``grid``'s seed-1 runs (a-seed1 and its twin b-seed1) through the local launcher, then again. The
    second command runs in this process (no torch import of its own), where it can make no job."""
    tmp = tmp_path_factory.mktemp("launch_local")
    grid, _ = _files(tmp, epochs=1)
    R = tmp / "R"
    args = ["run", grid, "--launcher", "local", "--results", R, "--no-progress", "--only", "a-seed1", "b-seed1"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(tmp / "no-slurm.conf"))   # a Slurm client would fail: none is used
        first = _zoo(*args)
        _without_executor(mp)
        again = _main_captured(*args)
    return dict(R=R, first=first, again=again)


@pytest.mark.slow
def test_local_launcher_runs_the_same_jobs_without_slurm(local):
    R = local["R"]
    rc, out, err = local["first"]
    assert rc == 0, (out, err)
    jobs = _jobs(R, "grid")
    assert sorted(jobs["runs"]) == ["a-seed1", "b-seed1"] and jobs["report"] is None
    for n in ("a-seed1", "b-seed1"):
        assert f"[{n}] done" in out
        assert jobs["runs"][n]["launcher"] == "local"
        st = _state(R, "grid", n)
        assert st["state"] == "done" and st["job_id"] == jobs["runs"][n]["job_id"] and st["attempt"] == 0
        assert Path(st["out"]).is_file() and f"experiment grid: 1 run(s): {n}" in Path(st["out"]).read_text()
    assert jobs["runs"]["a-seed1"]["job_id"] != jobs["runs"]["b-seed1"]["job_id"]
    # same settings, same seed: the same result, whichever job trained it
    assert_same_result(R, R, exp_a="grid", run_a="a-seed1", exp_b="grid", run_b="b-seed1")
    assert (R / "grid" / "table.md").is_file()
    rc, out, err = local["again"]
    assert rc == 0 and out.count("already done") == 2 and "nothing to submit" in out and "started" not in out


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


def _without_executor(mp: pytest.MonkeyPatch) -> None:
    """Makes asking for a submitit executor fail (an AssertionError out of the command): a ``zoo run`` in the
    test's process must not submit, where submitit's executors would share its standard streams."""
    from seq2seq_zoo.launch import submit

    def no_executor(*a, **k):
        raise AssertionError("the command made a job executor: it would submit again")
    mp.setattr(submit, "executor", no_executor)


def _main_captured(*args) -> tuple[int, str, str]:
    """``zoo ARGS`` in this process with its output captured (module-scoped fixtures have no capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = _main(None, *args)
    return rc, out.getvalue(), err.getvalue()


def _main(capsys, *args) -> tuple[int, str, str]:
    """``zoo ARGS`` in this process, for commands that end before any job is made (no submitit executor)."""
    import torch

    from seq2seq_zoo.cli import main
    if capsys is not None:
        capsys.readouterr()
    threads = torch.get_num_threads()
    try:
        rc = main([str(a) for a in args])
    finally:
        torch.set_num_threads(threads)
    if capsys is None:
        return rc
    out, err = capsys.readouterr()
    return rc, out, err


def test_bad_launcher_table_names_file_line_and_key(tmp_path, capsys):
    data = write_dialogsum(tmp_path / "data")
    exp = tmp_path / "e.toml"
    exp.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\n', data_dir=data)
                   + '\n[launcher]\npartition = "gpu"\ntime = "2h"\n', encoding="utf-8")
    rc, out, err = _main(capsys, "run", exp, "--dry-run")
    line = len(exp.read_text().splitlines())
    assert rc == 2 and err.strip() == (f"zoo run: error: {exp}:{line}: launcher.time: expected a number of minutes "
                                       ">= 1, got '2h'")
    exp.write_text(exp.read_text().replace('time = "2h"', "gpus = 1"), encoding="utf-8")
    rc, out, err = _main(capsys, "run", exp, "--dry-run")
    assert rc == 2 and "launcher.gpus: unknown key" in err and "gpus_per_job" in err


def test_each_option_lands_on_its_sbatch_line(tmp_path):
    """What docs/cluster.md's table promises, read from the job script submitit would submit."""
    from seq2seq_zoo.launch.submit import Options, executor
    o = Options.merged("slurm", {"partition": "gpu", "time": 240, "gpus_per_job": 1, "mem_gb": 32, "account": "nlp",
                                 "qos": "high", "max_parallel": 2, "sbatch": {"constraint": "a100", "exclusive": True},
                                 "setup": ["module load cuda"]}, {}, {})
    ex = executor(o, tmp_path, "zoo-x", nproc=4)
    ex._executor.parameters["map_count"] = 4   # what a batch of 4 jobs sets: a job array
    script = ex._executor._make_submission_file_text("python -m x", "uid")
    lines = set(script.splitlines())
    for want in ("--partition=gpu", "--time=240", "--gpus-per-node=4", "--mem=32GB", "--account=nlp", "--qos=high",
                 "--constraint=a100", "--exclusive", "--array=0-3%2", "--signal=USR2@90", "--nodes=1",
                 "--ntasks-per-node=1", "--job-name=zoo-x", "--open-mode=append"):
        assert f"#SBATCH {want}" in lines, (want, script)
    assert "module load cuda" in lines and not any("--cpus-per-task" in ln for ln in lines)
    cpu = executor(Options.merged("slurm", {"time": 30}, {}, {}), tmp_path, "zoo-y", nproc=3)
    text = cpu._executor._make_submission_file_text("python -m x", "uid")
    assert "#SBATCH --cpus-per-task=3" in text and "gpus" not in text   # --nproc 3 on CPUs: 3 CPUs


def test_status_of_a_run_from_its_job_state_and_the_queue(tmp_path):
    """Each state ``zoo status`` prints, from the job's state file, the queue and the run folder."""
    from seq2seq_zoo.launch.jobs import state_file, write_state
    from seq2seq_zoo.launch.submit import run_status
    exp = tmp_path / "e"
    slurm = {"job_id": "7_1", "launcher": "slurm"}

    def status(run, st=None, queue=None, entry=slurm):
        if st is not None:
            write_state(state_file(exp, run), {"run": run, "job_id": entry["job_id"] if entry else "", **st})
        return run_status(exp, run, entry, queue or {})

    assert status("r0", entry=None) == ("not submitted", "")
    assert status("r1", queue={"7_1": ("PENDING", "Resources")}) == ("pending", "job 7_1 (Resources)")
    state, detail = status("r2", {"state": "running", "host": "n3", "attempt": 0, "log": "L"},
                           {"7_1": ("RUNNING", "None")})
    assert state == "running" and detail == "job 7_1 on n3; log L"
    state, detail = status("r3", {"state": "requeued", "attempt": 0, "log": "L"}, {"7_1": ("PENDING", "BeginTime")})
    assert state == "requeued" and "BeginTime" in detail and "requeued 1 time(s)" in detail
    state, detail = status("r4", {"state": "failed", "rc": 2, "error": "zoo run: error: x", "log": "L"})
    assert (state, detail) == ("failed", "zoo run: error: x (job 7_1; log L)")
    state, detail = status("r5", {"state": "running", "log": "L"})   # gone from the queue without a word
    assert state == "lost" and "job 7_1" in detail and "log L" in detail
    (exp / "r6").mkdir(parents=True)
    (exp / "r6" / "record.json").write_text("{}")
    assert status("r6", {"state": "done", "rc": 0})[0] == "done"
    assert status("r6", entry=None)[0] == "done"   # finished before any launcher: done all the same


def test_slurm_launcher_without_sbatch_says_where_to_run_it(tmp_path, monkeypatch, capsys):
    data = write_dialogsum(tmp_path / "data")
    exp = tmp_path / "e.toml"
    exp.write_text(tiny_experiment("e", '[[runs]]\nname = "a"\n', data_dir=data), encoding="utf-8")
    monkeypatch.setenv("PATH", str(tmp_path))   # no sbatch on it
    rc, out, err = _main(capsys, "run", exp, "--launcher", "slurm", "--results", tmp_path / "R")
    assert rc == 2 and err.strip() == ("zoo run: error: --launcher slurm: no sbatch on PATH; run it on a Slurm login "
                                       "node (or use --launcher local on this machine)")
    assert not (tmp_path / "R").exists()


def test_user_config_launcher_table_is_read_and_checked(tmp_path, monkeypatch):
    from seq2seq_zoo.config.launcher import user_config_path, user_launcher
    from seq2seq_zoo.errors import ConfigError
    monkeypatch.delenv("ZOO_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_config_path() == tmp_path / "xdg" / "seq2seq-zoo" / "config.toml" and user_launcher() == {}
    cfg = tmp_path / "zoo.toml"
    cfg.write_text('[launcher]\npartition = "gpu"\naccount = "nlp"\nsbatch = { constraint = "a100" }\n')
    monkeypatch.setenv("ZOO_CONFIG", str(cfg))
    assert user_launcher() == {"partition": "gpu", "account": "nlp", "sbatch": {"constraint": "a100"}}
    cfg.write_text('[launcher]\npartition = "gpu"\nmax_parallel = 0\n')
    with pytest.raises(ConfigError, match=rf"^{cfg}:3: launcher.max_parallel: expected an integer >= 1, got 0$"):
        user_launcher()
    cfg.write_text('[defaults]\nmodel = "gru"\n')
    with pytest.raises(ConfigError, match="holds a \\[launcher\\] table only"):
        user_launcher()
    monkeypatch.setenv("ZOO_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="config file not found"):
        user_launcher()
