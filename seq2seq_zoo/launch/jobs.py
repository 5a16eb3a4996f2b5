"""What runs inside one cluster job: one run (one seed) of an experiment, through ``zoo run``.

A job is ``zoo run EXP --only NAME --resume`` (the command a user types for one run) in a child process,
so the lock, the "already done" rule, the exact resume, the run's own [[decode]] entries and the report
are those of a plain ``zoo run``. This module stays free of torch (the job's own process only waits;
the child imports the training code), and writes one small JSON file a job, under
``RESULTS/EXPERIMENT/.jobs/state/``, that ``zoo status`` reads:

    {"run", "job_id", "host", "attempt", "state": running | done | failed | requeued | stopped,
     "rc", "error" (one line), "log" (the job's stderr file), "updated"}

Pre-emption and time limits: Slurm (or ``scancel --signal``) sends submitit's signal (USR2); submitit
calls ``RunJob.checkpoint``, which stops the child the way SIGTERM stops any ``zoo run`` (the update in
flight finishes, ``last.pt`` is written, exit 143), and submitit requeues the job; the requeued job
runs the same command and continues from ``last.pt`` (``--resume``). A user error (exit 2: a bad data
path, a bad file) is not retried: the job fails and its one-line error is kept.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import submitit

EXIT_USAGE = 2        # cli.common.EXIT_USAGE: a user error, not retried
EXIT_PREEMPTED = 143  # errors.EXIT_PREEMPTED: stopped by SIGTERM with its checkpoint written
STATE_DIR = Path(".jobs") / "state"   # under the experiment's results folder


def state_file(exp_dir: Path, run: str) -> Path:
    return Path(exp_dir) / STATE_DIR / f"{run}.json"


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomic JSON write (temp file, fsync, rename). Written here rather than with ``utils.io``: importing
    ``seq2seq_zoo.utils`` loads torch (seconds per job), and a job's own process never needs it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1, sort_keys=True, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    """A job's state file; None when absent or unreadable (a job killed while writing leaves none half)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def last_error(log: Path | str | None) -> str:
    """The last ``zoo ...: error: ...`` line (else the last line) of a job's stderr log."""
    try:
        lines = [ln.strip() for ln in Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
                 if ln.strip()] if log else []
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("zoo ") and ": error: " in ln]
    return errors[-1] if errors else (lines[-1] if lines else "")


class _Job(submitit.helpers.Checkpointable):
    """A ``zoo`` command in a child process, stopped with SIGTERM (its own clean stop) on pre-emption."""

    def __init__(self, argv: list[str], cwd: str, exp_dir: str, name: str):
        self.argv, self.cwd, self.exp_dir, self.name = list(argv), cwd, exp_dir, name
        self._child: subprocess.Popen | None = None
        self._stopping = False

    def __getstate__(self):  # what submitit pickles for the (re)queued job: never the child
        return {k: v for k, v in self.__dict__.items() if k not in ("_child", "_stopping")}

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._child, self._stopping = None, False

    # ----------------------------------------------------------------------------------- the child
    def _start(self, argv: list[str]) -> subprocess.Popen:
        """The child ignores submitit's signal (Slurm signals every process of the job step): only
        SIGTERM, sent by ``checkpoint`` or by Slurm itself, stops it, and then with a checkpoint."""
        sigs = [getattr(signal, n) for n in ("SIGUSR1", "SIGUSR2")]

        def ignore_usr():
            for s in sigs:
                signal.signal(s, signal.SIG_IGN)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._child = subprocess.Popen([sys.executable, "-m", "seq2seq_zoo", *argv], cwd=self.cwd, env=env,
                                       stdin=subprocess.DEVNULL, preexec_fn=ignore_usr)
        return self._child

    def _wait(self) -> int:
        """The child's exit status. ``os.waitpid`` itself (not ``Popen.wait``, whose lock a signal
        handler that waits too would deadlock on); the handler may have reaped it already."""
        child = self._child
        while child.returncode is None:
            try:
                _, status = os.waitpid(child.pid, 0)
            except ChildProcessError:   # reaped by ``checkpoint``, which set returncode
                break
            child.returncode = os.waitstatus_to_exitcode(status)
        return child.returncode

    def _stop_child(self) -> int | None:
        """SIGTERM to the child, then its exit status once it has written its checkpoint and ended. The
        signal may come again while the child is stopping (the handler then runs inside itself): SIGTERM
        is sent once, so the child's own stop is never interrupted."""
        child = self._child
        if child is None:
            return None
        if child.returncode is None and not self._stopping:
            self._stopping = True
            try:
                child.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        return self._wait()

    # ------------------------------------------------------------------------------------- state
    def _state(self, **kw) -> dict[str, Any]:
        env = _environment()
        st = {"run": self.name, "job_id": env["job_id"], "host": socket.gethostname(), "attempt": env["attempt"],
              "log": env["stderr"], "out": env["stdout"], "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "rc": None, "error": "", "child_pid": self._child.pid if self._child is not None else None}
        st.update(kw)
        write_state(state_file(Path(self.exp_dir), self.name), st)
        return st

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Pre-empted or at its time limit: stop the run with its checkpoint written, then requeue the same
        job (None, no requeue, when the run had stopped for a user error or finished meanwhile)."""
        rc = self._stop_child()
        if rc in (0, EXIT_USAGE):
            return None
        self._state(state="requeued", rc=rc)
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


class RunJob(_Job):
    """One run of an experiment: ``zoo run EXP --only NAME --resume`` (``argv`` is the rest: results,
    data, profile, device, ...). ``force``: the first attempt retrains from the start (``--force``); a
    requeued one continues what that attempt began."""

    def __init__(self, argv: list[str], cwd: str, exp_dir: str, name: str, force: bool = False):
        super().__init__(argv, cwd, exp_dir, name)
        self.force = force

    def __call__(self) -> dict[str, Any]:
        env = _environment()
        # the report job after the array (or the local launcher at its end) writes the folder's report once
        argv = list(self.argv) + ["--no-report"] + (["--force"] if self.force else []) \
            + (["--resume"] if env["attempt"] or not self.force else [])
        self._release_own_lock()
        self._start(argv)
        self._state(state="running")
        rc = self._wait()
        if rc == 0:
            self._state(state="done", rc=0)
            return {"run": self.name, "record": str(Path(self.exp_dir) / self.name / "record.json")}
        err = last_error(env["stderr"]) or f"zoo run exited with status {rc}"
        self._state(state="stopped" if rc == EXIT_PREEMPTED else "failed", rc=rc, error=err)
        raise RuntimeError(f"run {self.name}: {err}")

    def _release_own_lock(self) -> None:
        """A requeued job finds the run's lock left by its own earlier attempt when Slurm killed that one
        before it could remove it; that attempt has ended (Slurm requeues a job once all its processes are
        gone), wherever it ran, so the lock is removed. Any other holder is left to ``zoo run``'s check."""
        old = read_state(state_file(Path(self.exp_dir), self.name))
        env = _environment()
        if not old or old.get("job_id") != env["job_id"] or not env["attempt"] or not old.get("child_pid"):
            return
        lock = Path(self.exp_dir) / self.name / ".lock"
        try:
            if int(lock.read_text().strip() or 0) == old["child_pid"]:
                lock.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass


class ReportJob(_Job):
    """``zoo report EXPERIMENT --results RESULTS`` once every run's job has ended."""

    def __call__(self) -> dict[str, Any]:
        self._start(self.argv)
        rc = self._wait()
        if rc:
            raise RuntimeError(f"zoo report exited with status {rc}: {last_error(_environment()['stderr'])}")
        return {"report": self.exp_dir}

    def checkpoint(self, *args: Any, **kwargs: Any):
        self._stop_child()
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


def _environment() -> dict[str, Any]:
    """This job's id, its attempt (0 first; Slurm counts requeues in SLURM_RESTART_COUNT) and its log
    files, from submitit's job environment."""
    try:
        env = submitit.JobEnvironment()
        job_id, paths = env.job_id, env.paths
        stdout, stderr = str(paths.stdout), str(paths.stderr)
    except RuntimeError:   # not inside a submitit job (a direct call)
        job_id, stdout, stderr = str(os.getpid()), "", ""
    return {"job_id": job_id, "attempt": int(os.environ.get("SLURM_RESTART_COUNT") or 0),
            "stdout": stdout, "stderr": stderr}
