"""zoo run EXP --launcher slurm|local: the experiment's runs as cluster jobs; zoo status EXP: what became of them."""
from __future__ import annotations

import os
import time
from pathlib import Path

from seq2seq_zoo.cli.common import EXIT_USAGE, checked_path
from seq2seq_zoo.errors import UserError

# command-line flags of `zoo run` that are [launcher] keys (dest -> key)
LAUNCHER_FLAGS = ("partition", "time", "cpus_per_job", "gpus_per_job", "mem_gb", "account", "qos", "max_parallel",
                  "log_dir")


def cmd_launch(args, experiment_of, plan) -> int:
    """One job per (run, seed) that still needs work: finished runs are skipped, as are runs whose job is
    still queued or running and runs another ``zoo run`` holds; each job is ``zoo run EXP --only RUN
    --resume`` on the cluster (``launch/jobs.py``). ``experiment_of(args)`` and ``plan(spec, run_dir,
    args)`` are ``zoo run``'s own (cli/run.py): the file read the same way, the same "already done" rule."""
    from seq2seq_zoo.config.launcher import user_launcher
    from seq2seq_zoo.launch import submit
    from seq2seq_zoo.names import inside
    from seq2seq_zoo.cli.locks import lock_holder
    kind = args.launcher
    if kind == "slurm" and not submit.sbatch_available():
        raise UserError("--launcher slurm: no sbatch on PATH; run it on a Slurm login node (or use --launcher "
                        "local on this machine)")
    opts = _options(args, kind, user_launcher())
    if args.profile == "auto" and kind == "slurm" and opts.resources(args.nproc)[1]:
        args.profile = "none"   # the jobs ask for GPUs: full size, whatever the login node has
    profile, full, exp = experiment_of(args)
    opts = _options(args, kind, user_launcher(), full.raw.get("launcher", {}))
    results = Path(args.results).resolve()
    exp_dir = inside(results, exp.name)
    for s in exp.runs:
        inside(exp_dir, s.name)
    jobs_state = submit.read_jobs(exp_dir)
    on_slurm = kind == "slurm" or any(e.get("launcher") == "slurm" for e in jobs_state["runs"].values())
    squeue = submit.queue() if on_slurm and submit.sbatch_available() else {}
    plan_args = _Resuming(args)
    todo = []
    for spec in exp.runs:
        out = exp_dir / spec.name
        action, found = plan(spec, out, plan_args)
        if action == "done":
            print(f"[{spec.name}] already done ({out / 'record.json'}); skipping (use --force to retrain)"
                  + (" (its record has other settings than the file gives now)" if found else ""))
            continue
        live = submit.live_job(jobs_state["runs"].get(spec.name), squeue)
        if live:
            print(f"[{spec.name}] job {live} is still queued or running; not submitted again")
            continue
        pid = lock_holder(out / ".lock")
        if pid:
            print(f"[{spec.name}] being trained by another `zoo run` (pid {pid}); not submitted")
            continue
        todo.append(spec)
    if not todo:
        print(f"experiment {exp.name}: nothing to submit ({len(exp.runs)} run(s) done or in hand)")
        return 0
    cwd = os.getcwd()
    base = ["run", str(Path(args.experiment).resolve()), "--results", str(results), "--no-progress",
            "--profile", profile or "none"]
    for flag, value in (("--data-dir", args.data_dir), ("--device", args.device), ("--max-minutes", args.max_minutes)):
        if value:
            base += [flag, str(Path(value).resolve()) if flag == "--data-dir" else str(value)]
    if args.nproc > 1:
        base += ["--nproc", str(args.nproc)]
    for m in getattr(args, "models", None) or []:
        base += ["--models", str(Path(m).resolve())]
    run_jobs = [submit.RunJob(base[:2] + ["--only", s.name] + base[2:], cwd, str(exp_dir), s.name, force=args.force)
                for s in todo]
    log_dir = Path(opts.log_dir).resolve() if opts.log_dir else exp_dir / submit.LOG_DIR
    print(f"experiment {exp.name}: {len(todo)} job(s) through submitit ({kind}): {', '.join(s.name for s in todo)}"
          + (f" [profile {profile}]" if profile else ""))
    if kind == "slurm":
        return _slurm(args, opts, exp, exp_dir, results, log_dir, todo, run_jobs, cwd)
    return _local(args, opts, exp, exp_dir, results, log_dir, todo, run_jobs)


class _Resuming:
    """``args`` as ``_plan`` reads them for a launcher: a run's checkpoint is always continued (a job
    resumes; ``--force`` retrains from the start)."""

    def __init__(self, args):
        self._args = args

    def __getattr__(self, name):
        return True if name == "resume" else getattr(self._args, name)


def _options(args, kind: str, user: dict, experiment: dict | None = None):
    from seq2seq_zoo.launch.submit import Options
    cli = {k: getattr(args, k, None) for k in LAUNCHER_FLAGS}
    cli["sbatch"] = dict(_key_value(x) for x in (getattr(args, "sbatch", None) or [])) or None
    if getattr(args, "no_report_job", False):
        cli["report_job"] = False
    return Options.merged(kind, cli, experiment or {}, user)


def _key_value(text: str) -> tuple[str, object]:
    """``--sbatch KEY=VALUE`` (``--sbatch KEY`` alone: a flag)."""
    key, eq, value = text.partition("=")
    key = key.strip().lstrip("-")
    if not key:
        raise UserError(f"--sbatch {text!r}: expected KEY=VALUE (e.g. --sbatch constraint=a100) or KEY for a flag")
    return key, (value if eq else True)


def _slurm(args, opts, exp, exp_dir, results, log_dir, todo, run_jobs, cwd) -> int:
    from seq2seq_zoo.launch import submit
    ex = submit.executor(opts, log_dir, f"zoo-{exp.name}", args.nproc)
    with ex.batch():
        jobs = [ex.submit(j) for j in run_jobs]
    ids = {s.name: str(j.job_id) for s, j in zip(todo, jobs)}
    report_id = None
    if opts.report_job:
        array = str(jobs[0].job_id).split("_")[0]
        rex = submit.executor(opts, log_dir, f"zoo-{exp.name}-report", report=True)
        extra = dict(opts.sbatch)
        extra["dependency"] = f"afterany:{array}"
        rex.update_parameters(slurm_additional_parameters=extra)
        rjob = rex.submit(submit.ReportJob(["report", str(exp_dir), "--results", str(results)], cwd, str(exp_dir),
                                           "report"))
        report_id = str(rjob.job_id)
    submit.note_submitted(exp_dir, "slurm", ids, report_id, profile=exp.profile)
    for name, jid in ids.items():
        print(f"[{name}] submitted: job {jid}")
    if report_id:
        print(f"zoo report: job {report_id} (after every run's job)")
    print(f"logs in {log_dir}/JOBID/; see progress with: zoo status {args.experiment}"
          + (f" --results {args.results}" if args.results != "results" else ""))
    if not args.wait:
        return 0
    submit.wait_for(jobs + ([rjob] if report_id else []), poll=2.0)
    return _print_status(exp, exp_dir)


def _local(args, opts, exp, exp_dir, results, log_dir, todo, run_jobs) -> int:
    """Through submitit's local executor: at most ``local_parallel`` jobs at once, each started as one
    ends; then ``zoo report``. Ctrl-C stops the jobs still running (each writes its checkpoint)."""
    from seq2seq_zoo.launch import submit
    n = submit.local_parallel(opts, args.nproc)
    print(f"running at most {n} job(s) at once on this machine")
    queue = list(zip(todo, run_jobs))
    running: list = []
    ex = submit.executor(opts, log_dir, f"zoo-{exp.name}", args.nproc)
    names = {}

    def ended(job):
        running.remove(job)
        name = names[job.job_id]
        state, detail = submit.run_status(exp_dir, name, {"job_id": job.job_id, "launcher": "local"}, {})
        print(f"[{name}] {state}: {detail}")

    try:
        while queue or running:
            while queue and len(running) < n:
                spec, rj = queue.pop(0)
                job = ex.submit(rj)
                names[job.job_id] = spec.name
                submit.note_submitted(exp_dir, "local", {spec.name: str(job.job_id)}, profile=exp.profile)
                print(f"[{spec.name}] started: local job {job.job_id}")
                running.append(job)
            for job in list(running):
                if job.done():
                    ended(job)
            time.sleep(0.2)
    except KeyboardInterrupt:
        for job in running:
            job.cancel()
        raise
    try:
        (log_dir / "%j").rmdir()   # the empty folder submitit's local executor makes of the pattern itself
    except OSError:
        pass
    from argparse import Namespace

    from seq2seq_zoo.cli.report import cmd_report
    code = _print_status(exp, exp_dir)
    if any((exp_dir / s.name / "record.json").is_file() for s in exp.runs):
        cmd_report(Namespace(results=str(results), experiments=[str(exp_dir)]))
    return code


def _print_status(exp, exp_dir: Path, squeue: dict | None = None) -> int:
    """One line per run; the exit status: 0 when every run is done or under way, 2 when a job failed for
    a user error, 1 for any other failed or lost job."""
    from seq2seq_zoo.launch import submit
    jobs = submit.read_jobs(exp_dir)
    if squeue is None:
        on_slurm = [e for e in [*jobs["runs"].values(), jobs.get("report")] if e and e.get("launcher") == "slurm"]
        squeue = submit.queue() if on_slurm else {}
    counts: dict[str, int] = {}
    worst = 0
    width = max(len(s.name) for s in exp.runs)
    for spec in exp.runs:
        entry = jobs["runs"].get(spec.name)
        state, detail = submit.run_status(exp_dir, spec.name, entry, squeue)
        counts[state] = counts.get(state, 0) + 1
        print(f"{spec.name:<{width}}  {state:<13} {detail}".rstrip())
        if state in ("failed", "stopped", "lost"):
            st = submit.read_state(submit.state_file(exp_dir, spec.name)) or {}
            worst = max(worst, EXIT_USAGE if st.get("rc") == EXIT_USAGE else 1)
    rep = jobs.get("report")
    if rep:
        live = submit.live_job(rep, squeue)
        print(f"zoo report: job {rep['job_id']} " + ("waiting for the runs' jobs" if live else "ended"))
    print(f"{exp.name}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return worst


def cmd_status(args) -> int:
    """zoo status EXP: each run's job (pending, running, requeued, done, failed with its error and log)."""
    import tomllib

    from seq2seq_zoo.config import load_experiment, parse_toml
    from seq2seq_zoo.launch.submit import read_jobs
    checked_path(args.experiment, "file", "the experiment (a TOML file)")
    checked_path(args.results, "dir", "--results")
    profile = None if args.profile in ("auto", "none") else args.profile
    if args.profile == "auto":   # the profile the jobs were submitted with
        try:
            raw = parse_toml(Path(args.experiment).read_text(encoding="utf-8"))
            name = raw.get("experiment", {}).get("name", Path(args.experiment).stem)
            profile = read_jobs(Path(args.results) / str(name)).get("profile")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
            pass   # load_experiment names what is wrong with the file
    exp = load_experiment(args.experiment, profile=profile)
    exp_dir = Path(args.results) / exp.name
    if not exp_dir.is_dir():
        print(f"{exp.name}: nothing under {exp_dir} yet (zoo run {args.experiment} --launcher slurm submits it)")
        return 0
    return _print_status(exp, exp_dir)

