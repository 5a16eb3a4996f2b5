"""Submitting an experiment's run jobs through submitit, and what became of them.

``zoo run EXP --launcher slurm`` makes one Slurm job array (one task per run and seed that still needs
work, at most ``max_parallel`` running at once) and, by default, one ``zoo report`` job that waits for
the whole array (``--dependency=afterany``); ``--launcher local`` runs the same jobs through submitit's
local executor, as many at once as there are free cores, and reports when they have ended. What was
submitted is kept in ``RESULTS/EXPERIMENT/.jobs/jobs.json`` (the latest job of each run counts), the job
folders (submitit's pickles and logs) under ``.jobs/logs/JOBID/``, and each job's own state under
``.jobs/state/`` (``jobs.py``).
"""
from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from seq2seq_zoo.config.launcher import LAUNCHER_KEYS
from seq2seq_zoo.errors import UserError
from seq2seq_zoo.launch.jobs import ReportJob, RunJob, read_state, state_file, write_state

JOBS_FILE = Path(".jobs") / "jobs.json"
LOG_DIR = Path(".jobs") / "logs"
# squeue states in which a job still holds (or will hold) its run: no second job is submitted for it
LIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
        "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}


@dataclass
class Options:
    """The launcher's settings after the command line, the experiment's [launcher] and the user's config."""
    kind: str                       # "slurm" | "local"
    partition: str | None = None
    time: int = LAUNCHER_KEYS["time"][2]
    cpus_per_job: int | None = None
    gpus_per_job: int | None = None
    mem_gb: float | None = None
    account: str | None = None
    qos: str | None = None
    max_parallel: int | None = None
    sbatch: dict[str, Any] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    log_dir: str | None = None
    report_job: bool = True

    @classmethod
    def merged(cls, kind: str, cli: dict[str, Any], experiment: dict[str, Any], user: dict[str, Any]) -> "Options":
        """Command line over the experiment file over the user's config; ``sbatch`` tables merge key by key."""
        opts = cls(kind=kind)
        for source in (user, experiment, cli):
            for k, v in source.items():
                if v is None:
                    continue
                if k == "sbatch":
                    opts.sbatch = {**opts.sbatch, **v}
                else:
                    setattr(opts, k, v)
        return opts

    def resources(self, nproc: int) -> tuple[int | None, int]:
        """(CPUs, GPUs) a run's job asks for. ``--nproc N`` asks for N GPUs when the job asks for GPUs at
        all (``gpus_per_job`` > 0), else N CPUs at least: the DDP workers then share the job's node."""
        gpus = self.gpus_per_job or 0
        if nproc > 1 and gpus:
            gpus = max(gpus, nproc)
        cpus = self.cpus_per_job
        if nproc > 1 and not gpus:
            cpus = max(cpus or 1, nproc)
        return cpus, gpus


def sbatch_available() -> bool:
    return shutil.which("sbatch") is not None


def executor(opts: Options, folder: Path, name: str, nproc: int = 1, report: bool = False):
    """A submitit executor for ``opts`` writing its job folders under ``folder/JOBID``."""
    import submitit
    ex = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=opts.kind)
    cpus, gpus = (1, 0) if report else opts.resources(nproc)
    params: dict[str, Any] = {"name": name, "timeout_min": 60 if report else int(opts.time),
                              "cpus_per_task": cpus, "gpus_per_node": gpus or None, "tasks_per_node": 1, "nodes": 1}
    if opts.kind == "slurm":
        params.update(slurm_partition=opts.partition, slurm_account=opts.account, slurm_qos=opts.qos,
                      slurm_additional_parameters=dict(opts.sbatch) or None, slurm_setup=list(opts.setup) or None)
        if not report:
            params.update(mem_gb=opts.mem_gb, slurm_array_parallelism=opts.max_parallel or 256)
    ex.update_parameters(**params)
    return ex


def local_parallel(opts: Options, nproc: int) -> int:
    """Local jobs at once: one per free core (cores not busy with other processes, by the 1-minute load
    average) for each job's CPUs, at most ``max_parallel``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        busy = int(os.getloadavg()[0] + 0.5)
    except OSError:
        busy = 0
    cpus = opts.resources(nproc)[0] or 1
    n = max(1, (cores - min(busy, cores - 1)) // cpus)
    return min(n, opts.max_parallel) if opts.max_parallel else n


# ----------------------------------------------------------------------------------- bookkeeping
def read_jobs(exp_dir: Path) -> dict[str, Any]:
    d = read_state(Path(exp_dir) / JOBS_FILE)
    return d if d and isinstance(d.get("runs"), dict) else {"runs": {}, "report": None}


def note_submitted(exp_dir: Path, kind: str, jobs: dict[str, str], report: str | None = None,
                   profile: str | None = None) -> None:
    """Add the jobs just submitted to ``jobs.json`` (each run's latest job), with the profile they run
    (``zoo status`` reads the runs with it)."""
    d = read_jobs(exp_dir)
    d["profile"] = profile
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for run, job_id in jobs.items():
        d["runs"][run] = {"job_id": job_id, "launcher": kind, "submitted": when}
        state_file(exp_dir, run).unlink(missing_ok=True)   # the state of an earlier job of this run
    if report is not None:
        d["report"] = {"job_id": report, "launcher": kind, "submitted": when}
    write_state(Path(exp_dir) / JOBS_FILE, d)


def queue() -> dict[str, tuple[str, str]]:
    """This user's Slurm jobs now: job id (array tasks as ``ARRAY_TASK``) -> (state, reason); {} without
    squeue. Finished jobs leave the queue after Slurm's MinJobAge."""
    if shutil.which("squeue") is None:
        return {}
    r = subprocess.run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T|%r"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise UserError(f"squeue failed, so the jobs' states are unknown: {why}; check that this machine reaches "
                        "the Slurm controller (SLURM_CONF)")
    out = {}
    for line in r.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def local_alive(job_id: str) -> bool:
    """A local job is its controller's process: alive while its id (the pid) runs here."""
    try:
        os.kill(int(job_id), 0)
        return True
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True


def live_job(entry: dict[str, Any] | None, squeue: dict[str, tuple[str, str]]) -> str | None:
    """The job id of a run's latest job while it is queued or running, else None."""
    if not entry:
        return None
    jid = str(entry.get("job_id"))
    if entry.get("launcher") == "local":
        return jid if local_alive(jid) else None
    return jid if squeue.get(jid, ("",))[0] in LIVE else None


def run_status(exp_dir: Path, run: str, entry: dict[str, Any] | None,
               squeue: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """(state, detail) of one run for ``zoo status``: done, pending, running, requeued, failed, stopped,
    lost (a job that ended without saying why: killed outright) or not submitted."""
    rec = Path(exp_dir) / run / "record.json"
    st = read_state(state_file(exp_dir, run)) or {}
    jid = str(entry["job_id"]) if entry else None
    if rec.is_file() and st.get("state") in (None, "done"):
        return "done", str(rec)
    if not entry:
        return ("done", str(rec)) if rec.is_file() else ("not submitted", "")
    log = st.get("log") or ""
    live = squeue.get(jid) if entry.get("launcher") != "local" else (("RUNNING", "") if local_alive(jid) else None)
    if live and live[0] in LIVE:
        if live[0] == "PENDING":
            stopped = st.get("state") in ("requeued", "stopped")   # by submitit's signal, or by Slurm itself
            again = f", requeued {st.get('attempt', 0) + stopped} time(s)" if stopped or st.get("attempt") else ""
            return ("requeued" if again else "pending"), f"job {jid} ({live[1] or 'waiting'}{again})"
        where = f" on {st['host']}" if st.get("host") else ""
        return "running", f"job {jid}{where}" + (f", attempt {st['attempt'] + 1}" if st.get("attempt") else "") + \
            (f"; log {log}" if log else "")
    state = st.get("state")
    if state == "done":
        return ("done", str(rec)) if rec.is_file() else ("lost", f"job {jid} said done but {rec} is missing")
    if state in ("failed", "stopped"):
        return state, f"{st.get('error') or 'no error line'} (job {jid}; log {log})"
    if rec.is_file():
        return "done", str(rec)
    why = "ended without a result (killed, out of memory or past its time limit without a checkpoint signal?)"
    return "lost", f"job {jid} {why}" + (f"; log {log}" if log else f"; logs under {Path(exp_dir) / LOG_DIR}")


def wait_for(jobs: list[Any], on_end: Callable[[Any], None] | None = None, poll: float = 1.0) -> None:
    """Wait until every submitit job has ended (Slurm jobs by the queue, so no ``sacct`` is needed),
    calling ``on_end(job)`` as each ends."""
    pending = list(jobs)
    while pending:
        squeue = queue() if any(j.__class__.__name__ == "SlurmJob" for j in pending) else {}
        for j in list(pending):
            if j.__class__.__name__ == "SlurmJob":
                ended = squeue.get(str(j.job_id), ("",))[0] not in LIVE
            else:
                ended = j.done()
            if ended:
                pending.remove(j)
                if on_end:
                    on_end(j)
        if pending:
            time.sleep(poll)


__all__ = ["JOBS_FILE", "LIVE", "LOG_DIR", "Options", "ReportJob", "RunJob", "executor", "live_job",
           "local_parallel", "note_submitted", "queue", "read_jobs", "run_status", "sbatch_available", "wait_for"]
