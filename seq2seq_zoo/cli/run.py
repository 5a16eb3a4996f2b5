"""The ``zoo run`` command; not to be confused with runner.py (one run), cli/runs.py or bench/run.py.

zoo run: an experiment's runs trained, evaluated and reported (each run by ``runner.run``); --dry-run says
what it would do. cli/runs.py holds the commands on a finished run, bench/run.py ``zoo bench``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path, experiment_profile
from seq2seq_zoo.cli.locks import acquire_locks, lock_holder


def cmd_run(args) -> int:
    """zoo run: the stages are the experiment read and its folder prepared, every selected run trained (or
    skipped, taken over, refused), the decoding variants, the folder's report; locks released at the end."""
    from seq2seq_zoo.train import distributed
    if getattr(args, "dry_run", False):
        return _dry_run(args)
    if getattr(args, "launcher", "inprocess") != "inprocess":   # one cluster job per run (cli/launch.py)
        from seq2seq_zoo.cli.launch import cmd_launch
        return cmd_launch(args, _experiment_of, _plan)   # the file read and the skip rules of this command
    if args.nproc > 1 and not distributed.launched():
        return distributed.launch(args.nproc, args.argv)  # torchrun re-runs this command in N workers
    ddp = distributed.setup()  # a torchrun worker joins its process group; None in one process
    from seq2seq_zoo.utils import invocation, process_code_version
    cmd = invocation(["zoo", *args.argv])   # as typed, whatever started the process
    process_code_version()     # the commit of the code imported now, for every run's record
    profile, full, exp = _experiment_of(args)
    exp_dir, new_exp_dir = _prepare_folder(args, full, exp, ddp)
    locks = distributed.on_main(lambda: acquire_locks([exp_dir / s.name for s in exp.runs]), default=[])
    finished = False  # a clean finish, or a stop every rank agreed on: DDP ranks leave the group together
    try:
        t0 = time.perf_counter()
        print(f"experiment {exp.name}: {len(exp.runs)} run(s): {', '.join(s.name for s in exp.runs)}"
              + (f" [profile {profile}]" if profile else ""))
        order = [s.name for s in full.runs]  # a run's place in the tables is its place in the file, also with --only
        for spec in exp.runs:
            _one_run(spec, exp_dir / spec.name, args, order.index(spec.name), ddp, cmd)
        if ddp is not None and not ddp.is_main:
            finished = True
            return 0
        _decode_sweep(exp, exp_dir, args, cmd)
        if not getattr(args, "no_report", False):
            _report(exp_dir, args, t0)
        finished = True
    except KeyboardInterrupt as e:
        # Ctrl-C / SIGTERM in training: every rank stopped at the same update (rank 0 writing last.pt),
        # so they can wait for each other before leaving, as after a clean finish; elsewhere (e.g. a
        # Ctrl-C while decoding reached one rank only) no rank waits for the others
        finished = bool(getattr(e, "together", False))
        raise
    finally:
        _release(locks, exp_dir, new_exp_dir)
        distributed.shutdown(wait=finished)
    return 0


def _prepare_folder(args, full, exp, ddp) -> tuple[Path, bool]:
    """(the experiment folder, whether this command made it). Every run name resolves inside --results before
    anything is written; the file's [[findings]] are written for every report of this folder to judge."""
    from seq2seq_zoo.names import inside
    exp_dir = inside(args.results, exp.name)
    for s in exp.runs:
        inside(exp_dir, s.name)
    new_exp_dir = not exp_dir.exists()  # then a failure before any run wrote something leaves nothing behind
    if ddp is None or ddp.is_main:
        from seq2seq_zoo.report.significance import write_declared
        exp_dir.mkdir(parents=True, exist_ok=True)
        write_declared(exp_dir, full)
    return exp_dir, new_exp_dir


def _one_run(spec, out: Path, args, order: int, ddp, cmd: str) -> None:
    """One run of the file: skipped when done, taken over from another experiment (``same_as``), refused
    when an unfinished checkpoint waits for --resume, else trained and evaluated (``runner.run``)."""
    from seq2seq_zoo import reuse
    from seq2seq_zoo.runner import run
    rec = out / "record.json"
    action, found = _plan(spec, out, args)
    if action == "done":
        changed = found
        if changed:
            print(f"[{spec.name}] already done ({rec}), but with other settings than this file gives now "
                  f"(file vs record: {'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''}): "
                  "kept as it is, and the tables say so; retrain it with --force")
        else:
            print(f"[{spec.name}] already done ({rec}); skipping (use --force to retrain)")
        return
    if action == "take_over":  # the same run, finished by another experiment: take it over, do not retrain
        if ddp is None or ddp.is_main:
            record = reuse.take_over(spec, found, out, order=order, command=cmd)
            print(f"[{spec.name}] same_as {spec.same_as}: took over {found} (identical settings; not "
                  f"trained again): ROUGE-1 {record['eval']['scores'].get('rouge1', 0):.2f}")
        return
    if spec.same_as:
        print(f"[{spec.name}] same_as {spec.same_as}: no finished run for seed {spec.seed} under "
              f"{args.results}; training it here")
    if action == "refuse":
        raise UserError(f"run '{spec.name}' has an unfinished checkpoint in {out / 'checkpoints'}; "
                        f"continue it with --resume, or start again with --force")
    if args.force and not args.resume:
        for f in ("last.pt", "best.pt"):
            (out / "checkpoints" / f).unlink(missing_ok=True)
    record = run(spec, out, data_dir=args.data_dir, resume=args.resume, progress=not args.no_progress,
                 order=order, command=cmd)
    if record is None:  # DDP rank > 0: rank 0 writes the results
        return
    sc = record["eval"]["scores"]
    print(f"[{spec.name}] done in {record['wall_seconds']:.0f}s: ROUGE-1 {sc.get('rouge1', 0):.2f} "
          f"ROUGE-2 {sc.get('rouge2', 0):.2f} ROUGE-L {sc.get('rougeL', 0):.2f}")


def _report(exp_dir: Path, args, t0: float) -> None:
    """The folder's tables, plots and README, and results/FINDINGS.md."""
    from seq2seq_zoo.report import build_report
    from seq2seq_zoo.report.significance import write_findings_index
    paths = build_report(exp_dir)
    index = write_findings_index(Path(args.results))
    paths += [index] if index else []
    print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - t0:.0f}s")


def _release(locks: list[Path], exp_dir: Path, new_exp_dir: bool) -> None:
    """The runs' locks, the folders a lock made if nothing else was written, and an experiment folder this
    command made in which nothing was run (e.g. bad data settings)."""
    for lock in locks:
        lock.unlink(missing_ok=True)
        for d in (lock.parent, lock.parent.parent):
            try:
                d.rmdir()
            except OSError:
                break
    if new_exp_dir and exp_dir.is_dir() and not any(p.is_dir() for p in exp_dir.iterdir()):
        from seq2seq_zoo.report.significance import EXPERIMENT_FILE
        (exp_dir / EXPERIMENT_FILE).unlink(missing_ok=True)
        try:
            exp_dir.rmdir()
        except OSError:
            pass


def _experiment_of(args):
    """zoo run's experiment: the paths checked, the file read (once) with its profile, ``--device`` and
    ``--max-minutes`` applied.
    Returns (profile, the whole experiment, the runs ``--only`` selects: the whole experiment without it)."""
    from seq2seq_zoo.config import load_experiment, select_runs
    checked_path(args.experiment, "file", "the experiment (a TOML file)")
    checked_path(args.results, "dir", "--results")
    if args.data_dir:
        checked_path(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    profile = experiment_profile(args)
    full = load_experiment(args.experiment, profile=profile)
    for s in full.runs:
        if args.device:
            s.train.device = args.device
        if args.max_minutes:
            s.train.max_minutes = args.max_minutes
    return profile, full, select_runs(full, args.only) if args.only else full


def _changed_settings(spec, rec_path: Path) -> list[str]:
    """The settings in which a finished run's record differs from ``spec`` (``reuse.drift``); none for a
    record that does not read (the report names damaged files)."""
    from seq2seq_zoo import reuse
    from seq2seq_zoo.errors import DamagedFile
    from seq2seq_zoo.results import read_record
    try:
        return reuse.drift(spec.to_dict(), read_record(rec_path))
    except (DamagedFile, OSError):
        return []


def _plan(spec, out: Path, args) -> tuple[str, Any]:
    """What ``zoo run`` does with one run folder before training, and what it found: ("done", the settings
    in which its record differs from the file) for a finished run without --force; ("take_over", the source
    folder) for a same_as run whose source has finished; ("refuse", None) for an unfinished checkpoint
    without --resume or --force; else ("train", None). ``cmd_run`` acts on it, ``--dry-run`` prints it."""
    from seq2seq_zoo import reuse
    rec = out / "record.json"
    if rec.exists() and not args.force:
        return "done", _changed_settings(spec, rec)
    src = reuse.source_dir(Path(args.results), spec.same_as, spec.seed) if spec.same_as else None
    if src is not None:
        return "take_over", src
    if (out / "checkpoints" / "last.pt").exists() and not (args.resume or args.force):
        return "refuse", None
    return "train", None


def _would_do(spec, exp_dir: Path, args) -> str:
    """``_plan`` in words, for --dry-run; first, whether another ``zoo run`` holds the run's folder now."""
    from seq2seq_zoo.config import is_trainable
    out = exp_dir / spec.name
    pid = lock_holder(out / ".lock")
    if pid:
        return f"being trained now by another `zoo run` (pid {pid}): zoo run refuses it until that ends"
    action, found = _plan(spec, out, args)
    if action == "done":
        return ("done, skipped" if not found else "done with other settings than the file gives now "
                f"(file vs record: {'; '.join(found[:3])}{'; ...' if len(found) > 3 else ''}), kept; --force retrains it")
    if action == "take_over":
        return f"taken over from {found} (same_as; not trained again)"
    if action == "refuse":
        return "stops: it has an unfinished checkpoint; add --resume (continue) or --force (start again)"
    if (out / "checkpoints" / "last.pt").exists():
        return "resumed from its checkpoint" if args.resume else "trained again from the start (--force)"
    verb = "trained" if is_trainable(spec.model) else "evaluated (a baseline: nothing to train)"
    return f"{verb} again (--force)" if (out / "record.json").exists() else verb


def _dry_run(args) -> int:
    """zoo run EXP --dry-run: the runs as the file, profile, ``like`` and grid make them, the settings in
    which they differ from the built-in defaults (runs that differ only in seed share one block), and what a
    real ``zoo run`` with the same flags would do with each. Reads results, writes nothing."""
    from seq2seq_zoo.config import settings, toml_value
    profile, _, exp = _experiment_of(args)
    exp_dir = Path(args.results) / exp.name
    print(f"experiment {exp.name} ({args.experiment}), profile {profile or 'none (full size)'}: {len(exp.runs)} "
          f"run(s), results in {exp_dir}/. Dry run: nothing is trained or written. Each run's settings that "
          "differ from the built-in defaults (model constructor, seq2seq_zoo/config/schema.py):")
    groups: dict[str, tuple[dict, list]] = {}   # runs with the same settings (seeds of one run): one block
    for spec in exp.runs:
        own = settings(spec)
        groups.setdefault(json.dumps(own, sort_keys=True, default=str), (own, []))[1].append(spec)
    for own, specs in groups.values():
        print(f"\n{', '.join(s.name for s in specs)}")
        for s in specs:
            print(f"  seed {s.seed}: {_would_do(s, exp_dir, args)}")
        for k, v in own.items():
            print(f"  {k} = {toml_value(v)}")
    if exp.decodes:
        print("\ndecoding sweep of every trained run's best checkpoint: "
              + ", ".join(d.name + (f" ({', '.join(d.runs)} only)" if d.runs else "") for d in exp.decodes))
    if exp.findings:
        print(f"findings judged: {'; '.join(f.claim for f in exp.findings)}")
    return 0


def _decode_sweep(exp, exp_dir: Path, args, cmd: str) -> None:
    """[[decode]] entries: re-decode every finished run's best checkpoint with each entry's settings
    (entries already decoded from the same checkpoint with the same settings are skipped); ``cmd``, the
    command as typed, goes into each decoding's record."""
    if not exp.decodes:
        return
    from seq2seq_zoo.evaluation import run_decodes
    for spec in exp.runs:
        if (exp_dir / spec.name / "record.json").exists():
            variants = [(v.name, v.overrides) for v in exp.decodes if v.applies_to(spec)]
            if not variants:
                continue
            run_decodes(exp_dir / spec.name, variants, data_dir=args.data_dir,
                        config_dir=spec.data_dir, device=args.device, progress=not args.no_progress, command=cmd)
