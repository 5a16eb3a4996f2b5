"""Runs two experiments share (a run's ``same_as = "EXPERIMENT/RUN"``).

Two experiment files can contain the very same run: e.g. ``regularisation``'s ``dropout_ls`` (dropout 0.1,
label smoothing 0.1, Noam with a one-epoch warm-up) is, setting for setting, ``optimizer``'s
``noam_scaled``. With ``same_as`` the run is not trained a second time: when the named run (the same seed)
has finished under the results folder, its record and outputs are taken over, after checking that every
setting that can change the result is equal, including model options left at the model's default. If the
settings differ, ``zoo run`` stops and names them; if the other run has not finished, the run is trained
here as usual. The record says where it came from (``reused_from``) and the tables show it.
"""
from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from seq2seq_zoo.config import LEGACY_VALUES, RunSpec, inert_settings
from seq2seq_zoo.config.decoding import decoding_inert
from seq2seq_zoo.errors import UserError
from seq2seq_zoo.registry import model_options
from seq2seq_zoo.results import read_record, write_record
from seq2seq_zoo.utils import invocation

# spec keys that name or describe a run without changing what it computes
_NAMING = {"experiment", "name", "description", "same_as", "profile"}
# train.* keys that change where and how fast a run trains, not what it learns (as in the tables); a
# time limit is a resource, like the device: where it did stop training, the record says so
# (train.stopped_by_time) and the tables show it
_PLACEMENT = {"device", "threads", "checkpoint_every", "max_minutes"}
# files of a run folder that are taken over (not checkpoints/ or decodes/: those belong to the source)
_FILES = ("predictions.jsonl", "scores.jsonl", "examples.json", "attention.json", "positional.json")


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "options":
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


# settings added after runs were recorded, with the value that records without them were made with
_ADDED = {"train": {"average_last": 0, "rl_gamma_ramp": 1.0}, "data": {"turn_separator": None}}


def comparable(spec: dict) -> dict[str, Any]:
    """A spec (``RunSpec.to_dict()``) as flat ``key: value`` pairs of everything that can change its
    results: model options filled in with the model's defaults, naming and placement keys left out."""
    d = {k: v for k, v in spec.items() if k not in _NAMING}
    for sec, added in _ADDED.items():
        if isinstance(d.get(sec), dict):
            d[sec] = {**added, **d[sec]}
    try:
        defaults = model_options(d["model"])
    except Exception:  # a model this version no longer has: compare what was written
        defaults = {}
    d["model_options"] = {**defaults, **d.get("model_options", {})}
    d["train"] = {k: v for k, v in d.get("train", {}).items() if k not in _PLACEMENT}
    flat = _flat(d)
    for k, v in LEGACY_VALUES.items():   # a record made before the key existed ran with its old value
        if k.split(".")[0] in d and k not in flat:
            flat[k] = v
    decode = {k.removeprefix("decode."): v for k, v in flat.items() if k.startswith("decode.")}
    inert = inert_settings(flat) | {f"decode.{k}" for k in decoding_inert(decode)}
    for k in inert:                      # settings that cannot change this run's results
        flat.pop(k, None)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in flat.items()}


def differences(a: dict, b: dict) -> list[str]:
    """Settings in which two specs differ, as ``key: A vs B`` lines."""
    return _lines(comparable(a), comparable(b))


def _lines(fa: dict, fb: dict) -> list[str]:
    return [f"{k}: {fa.get(k, '(not set)')!r} vs {fb.get(k, '(not set)')!r}"
            for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def drift(spec: dict, record: dict) -> list[str]:
    """Settings in which a finished run's record differs from the spec its experiment file gives it now,
    as ``key: FILE vs RECORD`` lines (empty: the record is what the file asks for). ``train.precision =
    "auto"`` on either side stands for the precision the run trained in (the record's ``train.precision``):
    a record made with "auto" on a CPU without bf16 matches a file that now pins "fp32"."""
    fa, fb = comparable(spec), comparable(record.get("spec", {}))
    ran = record.get("train", {}).get("precision")
    ran = _PRECISION.get(ran, ran)
    for side in (fa, fb):
        if side.get("train.precision") == "auto" and ran:
            side["train.precision"] = ran
    # metrics: what the record holds scores of (``zoo eval --metrics`` adds some after training)
    scored = set((record.get("eval") or {}).get("settings") or {}) | set(fb.get("eval.metrics") or [])
    missing = [m for m in fa.pop("eval.metrics", None) or [] if m not in scored]
    fb.pop("eval.metrics", None)
    return _lines(fa, fb) + ([f"eval.metrics: not scored: {', '.join(missing)}"] if missing else [])


def experiment_file(records: list[dict], noted: str | None = None) -> Path | None:
    """The experiment file the records of one results folder came from, where it exists from here:
    ``noted`` (the file ``zoo run`` noted in the folder's ``experiment.json``), else the ``.toml`` named in a
    record's command, else ``experiments/<experiment>.toml``; None if none exists."""
    if noted and Path(noted).is_file():
        return Path(noted)
    for r in records:
        for token in str(r.get("command") or "").split():
            if token.endswith(".toml") and Path(token).is_file():
                return Path(token)
    name = next((r.get("experiment") for r in records if r.get("experiment")), None)
    path = Path("experiments") / f"{name}.toml"
    return path if name and path.is_file() else None


def mark_changed_settings(records: list[dict], exp_dir: Path | None = None,
                          noted: str | None = None) -> tuple[Path | None, list[str]]:
    """Compare each finished run with what its experiment file (``experiment_file``), read with the run's
    profile, gives it now; a run whose settings changed since it trained gets ``changed_settings`` (the
    tables' notes name the differing settings and the fix). Records already marked stale (the first
    round's), runs the file no longer has, and a file that no longer reads are left as they are. Returns
    (the file, the runs marked)."""
    from seq2seq_zoo.config import load_experiment
    path = experiment_file(records, noted)
    if path is None:
        return None, []
    specs: dict[Any, dict[str, dict] | None] = {}
    marked = []
    for r in records:
        if r.get("stale") or not r.get("spec"):
            continue
        profile = r.get("profile")
        if profile not in specs:
            try:
                specs[profile] = {s.name: s.to_dict() for s in load_experiment(path, profile=profile).runs}
            except Exception:  # a file that no longer reads (its own command says why): nothing to compare
                specs[profile] = None
        spec = (specs[profile] or {}).get(r.get("run"))
        if spec is None:
            continue
        changed = drift(spec, r)
        if changed:
            shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
            if all(c.startswith("eval.metrics: not scored") for c in changed):
                fix = (f"`zoo eval {exp_dir or 'RESULTS/EXPERIMENT'}/RUN --metrics "
                       + changed[0].split(": ", 2)[2].replace(", ", " ") + " --save` scores and keeps them")
            else:
                fix = f"retrain with `zoo run {path} --only RUN --force`"
            r["changed_settings"] = f"{path.name} vs record: {shown}; {fix}"
            marked.append(r.get("run"))
    return path, marked


def source_dir(results: Path, same_as: str, seed: int) -> Path | None:
    """The finished run ``same_as`` names, for this seed: ``results/EXP/RUN-seedN`` (a run with several
    seeds) or ``results/EXP/RUN`` (one seed, checked against the record's seed). None if not finished.
    ``same_as`` is checked when the experiment file is read (config.SAME_AS_PATTERN)."""
    exp, run = same_as.split("/")
    for name in (f"{run}-seed{seed}", run):
        d = Path(results) / exp / name
        if (d / "record.json").is_file():
            if name == run and read_record(d / "record.json")["seed"] != seed:  # damaged: DamagedFile
                continue
            return d
    return None


def take_over(spec: RunSpec, src: Path, out: Path, *, order: int, command: str | None) -> dict:
    """Copy the finished run ``src`` into ``out`` as ``spec``'s results, after checking the settings match.
    Raises UserError naming the differing settings."""
    rec = read_record(src / "record.json")  # a damaged or wrongly shaped record: DamagedFile naming it
    diff = differences(spec.to_dict(), rec["spec"])
    if rec.get("seed") != spec.seed:
        diff.insert(0, f"seed: {spec.seed!r} vs {rec.get('seed')!r}")
    if diff:
        shown = "\n  ".join(diff[:8]) + (f"\n  ... and {len(diff) - 8} more" if len(diff) > 8 else "")
        raise UserError(f"run '{spec.name}': same_as = '{spec.same_as}', but {src} was trained with other "
                        f"settings (here vs there):\n  {shown}\nMake the settings equal, or remove same_as to "
                        f"train this run on its own.")
    out.mkdir(parents=True, exist_ok=True)
    for f in _FILES:
        if (src / f).is_file():
            shutil.copyfile(src / f, out / f)
    src_run = f"{rec['experiment']}/{rec['run']}"
    record = {k: v for k, v in rec.items() if k != "schema"}
    record.update({
        "experiment": spec.experiment, "run": spec.name, "order": order, "spec": spec.to_dict(),
        "command": command or invocation(),   # this invocation, as runner.run records it
        "reused_from": {"run": src_run, "command": rec.get("command"), "finished": rec.get("finished"),
                        "wall_seconds": rec.get("wall_seconds"), "compute_seconds": rec.get("compute_seconds")},
        "taken_over": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # nothing was computed for this experiment; the source's time stays in reused_from and the tables
        "wall_seconds": 0.0, "compute_seconds": 0.0,
    })
    write_record(out, record)
    return record
