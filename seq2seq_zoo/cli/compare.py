"""zoo compare: one method-level comparison between runs of two result folders.

A declared finding compares two runs of one experiment folder. A question such as "does hidden 256 beat
hidden 128?" compares a run of one profile's folder with a run of another's; ``zoo compare`` answers it
with the same seed-level test, verdict rule and power figure as the findings (``significance.judge``),
so a figure quoted in a NOTES.md can be re-run from the stored records."""
from __future__ import annotations

import json
import math
from pathlib import Path

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path


def split_side(text: str) -> tuple[Path, str]:
    """``FOLDER:RUN`` -> (folder, run label). The last ':' splits, so a folder name may hold one."""
    folder, sep, run = text.rpartition(":")
    if not sep or not folder or not run:
        raise UserError(f"{text!r}: expected FOLDER:RUN, e.g. results/cpu_long/cnn_pointer:pg-cov "
                        "(RUN without -seedN; RUN/DECODE for a decoding variant, RUN@init for its starting runs)")
    return Path(folder), run


def folder_groups(folder: Path, prefix: str) -> list:
    """The run groups of an experiment results folder (each decoding variant a group of its own), their
    names prefixed with ``prefix:`` so that groups of two folders cannot share a label."""
    from dataclasses import replace
    from seq2seq_zoo.report import extras, significance
    from seq2seq_zoo.results import load_records
    checked_path(folder, "dir", "FOLDER")
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder (FOLDER is an experiment's results folder, e.g. "
                        "results/cpu_long/cnn_pointer)")
    records = load_records(folder)          # a damaged record: DamagedFile names the file
    if not records:
        raise UserError(f"{folder}: no run records (*/record.json) there; is it an experiment's results folder?")
    rows, _ = extras.with_decodes(records)
    return [replace(g, name=f"{prefix}:{g.name}") for g in significance.group_rows(rows)]


def compare(side_a: str, side_b: str, op: str = ">", metric: str = "rouge1", scale: float = 1.0) -> dict:
    """Judge "A op scale * B" on ``metric`` with the training seed as the unit; A and B are ``FOLDER:RUN``.
    Returns the judged dict of ``significance.judge`` (verdict, means, difference, CIs, p, power)."""
    from seq2seq_zoo.findings import PER_RUN_METRICS, Finding, known_metrics
    METRICS = known_metrics()   # the registered metrics' per-example columns, a user file's included
    from seq2seq_zoo.registry import did_you_mean
    from seq2seq_zoo.report import significance
    if metric not in METRICS:
        raise UserError(f"--metric {metric}: unknown.{did_you_mean(metric, METRICS)} Known: {', '.join(METRICS)}")
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise UserError(f"--scale {scale}: expected a finite number above 0 (A is compared with scale x B)")
    (fa, ra), (fb, rb) = split_side(side_a), split_side(side_b)
    if (fa.resolve(), ra) == (fb.resolve(), rb):
        raise UserError(f"{side_a} and {side_b} are the same runs")
    la, lb = f"{fa.as_posix()}:{ra}", f"{fb.as_posix()}:{rb}"
    groups = folder_groups(fa, fa.as_posix())
    if fb.resolve() != fa.resolve():
        groups += folder_groups(fb, fb.as_posix())
    else:
        lb = f"{fa.as_posix()}:{rb}"
    labels = [g.label for g in groups]
    for folder, run, label in ((fa, ra, la), (fb, rb, lb)):
        if label not in labels and not (label.endswith("@init") and label.removesuffix("@init") in labels):
            prefix = f"{folder.as_posix()}:"   # a folder name may hold ':' (split_side splits at the last)
            here = [x.removeprefix(prefix) for x in labels if x.startswith(prefix)]
            raise UserError(f"{folder}: no run '{run}' there.{did_you_mean(run, here)} Runs: {', '.join(here)}")
    by = {g.label: g for g in groups}
    if metric not in PER_RUN_METRICS:
        ga, gb = by.get(la.removesuffix("@init")), by.get(lb.removesuffix("@init"))
        if ga and gb and not la.endswith("@init") and not lb.endswith("@init"):
            ids_a = {i for per in ga.per_example(metric).values() for i in per}
            ids_b = {i for per in gb.per_example(metric).values() for i in per}
            if ids_a and ids_b and not ids_a & ids_b:
                raise UserError(f"{side_a} and {side_b} share no test examples (their ids differ): they were "
                                "scored on different test sets, so a per-example comparison is not defined")
            _same_references(side_a, ga, side_b, gb)
    j = significance.judge(Finding(f"{la} {op} {lb}", la, lb, op, metric, scale), groups)
    if j["verdict"] == "not run":
        raise UserError(j["detail"])
    return j


def _same_references(side_a: str, ga, side_b: str, gb) -> None:
    """Two groups scored against one reference set: the same dataset and split, and for every example id
    both hold, the same reference summaries (read from each side's first predictions.jsonl); else
    ``UserError``: scores against different references cannot be compared."""
    from seq2seq_zoo.report.groups import row_dir
    from seq2seq_zoo.results import read_predictions
    ra, rb = ga.rows[0], gb.rows[0]
    where = [(r.get("data", {}).get("dataset"), r.get("eval", {}).get("split")) for r in (ra, rb)]
    if where[0] != where[1]:
        raise UserError(f"{side_a} is scored on {where[0][0]} {where[0][1]}, {side_b} on {where[1][0]} "
                        f"{where[1][1]}: different reference sets, so there is no comparison to make")
    refs = []
    for r in (ra, rb):
        d = Path(row_dir(r))
        refs.append({str(p["id"]): p["references"] for p in read_predictions(d)}
                    if (d / "predictions.jsonl").is_file() else None)
    if refs[0] is not None and refs[1] is not None:
        differ = next((i for i in refs[0] if i in refs[1] and refs[0][i] != refs[1][i]), None)
        if differ is not None:
            raise UserError(f"{side_a} and {side_b} were scored against different reference summaries (example "
                            f"{differ!r} differs, e.g. another data version or text settings); there is no "
                            "comparison to make")


def report_lines(j: dict) -> list[str]:
    """The judged comparison as text: each side, the difference with its CIs, the test, verdict, power."""
    from seq2seq_zoo.findings import PER_RUN_METRICS
    def f(x, d=4):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}g}"

    def side(label, mean, sd, seeds, fixed):
        spread = "deterministic" if fixed else (f"sd {f(sd)}" if sd == sd else "one seed")
        return f"  {label}: mean {f(mean)} ({spread}; seeds {', '.join(map(str, seeds))})"
    scale = "" if j["scale"] == 1.0 else f"{j['scale']:g} * "
    boot = "bootstrap over seeds" if j["metric"] in PER_RUN_METRICS else "two-level bootstrap: seeds, then examples"
    out = [f"{j['metric']}: {j['a']} {j['op']} {scale}{j['b']}",
           side(j["a"], j["mean_a"], j["sd_a"], j["seeds"][j["a"]], j["a"] in j["deterministic"]),
           side(j["b"], j["mean_b"], j["sd_b"], j["seeds"][j["b"]], j["b"] in j["deterministic"]),
           f"  difference {f(j['diff'])}, 95% CI [{f(j['ci'][0])}, {f(j['ci'][1])}] ({boot}), "
           f"t-test CI [{f(j['t_ci'][0])}, {f(j['t_ci'][1])}]",
           f"  {j['test']}: p {f(j['p'], 3)}; exact permutation over seed labels p {f(j['perm_p'], 3)} "
           f"(smallest reachable {f(j['perm_min_p'], 3)})"]
    if j.get("pooled"):
        out.append(f"  pooled example x seed test (for reference, not the verdict): p {f(j['pooled']['p'], 3)} "
                   f"over {j['pooled']['n']} examples")
    out.append(f"  verdict: {j['verdict']}" + (f" ({j['detail']})" if j.get("detail") else ""))
    need = j["power"].get("seeds_for_80")
    if need:
        out.append(f"  seeds per arm for 80% power at this effect and seed sd: {need}")
    out += [f"  note: {x}" for x in j.get("flags", [])]
    return out


def cmd_compare(args) -> int:
    """Print one seed-level comparison of two runs (of one results folder or of two)."""
    j = compare(args.a, args.b, args.op, args.metric, args.scale)
    if args.json:
        print(json.dumps(j, indent=1, default=str))
    else:
        print("\n".join(report_lines(j)))
    return 0
