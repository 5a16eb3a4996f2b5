"""Declared findings judged from the records: ``[[findings]]`` of the experiment file (stored by ``zoo run``
in ``experiment.json``) are judged with the training seed as the unit (``stats.method_test``) from the
per-example scores (``<run>/scores.jsonl``); the pooled example x seed test is kept as a second column. A
run whose outputs are degenerate (one summary for a third of the inputs, or half its summaries mostly
``<unk>``) is not judged; a claim whose seeds mix training precisions is also tested with the precision
as a factor. See docs/statistics.md.

The seed groups, their CIs and the LEAD row are in ``report.groups``, the grouped table in
``report.grouped``, the findings' tables and ``results/FINDINGS.md`` in ``report.findings_text``; the
names other modules take from here are imported below.
"""
from __future__ import annotations

from seq2seq_zoo.utils.io import dumps_json

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from seq2seq_zoo import stats
from seq2seq_zoo.findings import PER_RUN_METRICS, Finding
from seq2seq_zoo.precision import seeds_by_precision
from seq2seq_zoo.report.findings_text import (ARCHIVE, ARCHIVE_DIRS, FINDINGS_FILE, p_text,  # noqa: F401
                                              findings_markdown, write_findings_index)
from seq2seq_zoo.report.grouped import ci_note, grouped_table, lead_sentence  # noqa: F401
from seq2seq_zoo.report.groups import (TABLE_RESAMPLES, Group, below_lead, ci_of, dataset_of,  # noqa: F401
                                       degenerate_reason, group_rows, init_group, is_deterministic, lead_group)
from seq2seq_zoo.utils import atomic_write_text, seed_span

EXPERIMENT_FILE = "experiment.json"
POOLED_RESAMPLES = 2999  # the findings' second column (pooled example x seed permutation test)


# ----------------------------------------------------------------------------------------- findings
def load_declared(exp_dir: Path) -> tuple[list[Finding], dict]:
    p = Path(exp_dir) / EXPERIMENT_FILE
    if not p.is_file():
        return [], {}
    from seq2seq_zoo.utils import DamagedFile
    fix = "run `zoo run EXPERIMENT` again to rewrite it (finished runs are skipped)"
    from seq2seq_zoo.results import read_checked
    meta = read_checked(p, fix)  # a damaged or wrongly shaped one raises DamagedFile naming it
    try:
        return [Finding(**f) for f in meta.get("findings", [])], meta
    except (AttributeError, TypeError) as e:  # hand-edited: not an object, or findings of the wrong shape
        raise DamagedFile(f"{p}: damaged experiment file copy ({type(e).__name__}: {e}); {fix}") from None


def write_declared(exp_dir: Path, exp) -> None:
    """Stored by ``zoo run`` so ``zoo report`` can judge the file's findings from results alone."""
    atomic_write_text(Path(exp_dir) / EXPERIMENT_FILE, json.dumps({
        "experiment": exp.name, "file": str(exp.path), "profile": exp.profile,
        "headline_decode": next((d.name for d in exp.decodes if d.headline), None),
        "findings": [f.to_dict() for f in exp.findings]}, indent=1) + "\n")


def _matrix(per: dict[int, dict[str, float]], seeds: list[int], ids: list[str]) -> np.ndarray:
    return np.array([[per[s][i] for i in ids] for s in seeds], dtype=float)


def _pooled(pa, pb, scale) -> dict:
    xa, xb = stats.pair_by_seed(pa, pb)
    if not xa:
        return {}
    c = stats.paired_test(xa, xb, scale, n_resamples=POOLED_RESAMPLES)
    return {"p": c.p, "n": c.n, "diff": c.diff, "ci": [c.ci_low, c.ci_high], "test": stats.POOLED_LABEL}


def precision_mix(arms: list[tuple[Group, list[int]]]) -> str | None:
    """'mixed precision (A: fp32 seeds 1-3, bfloat16 seeds 4-7; B: ...)' when the trained seeds a claim
    compares were not all trained in one precision, else None. ``precision = "auto"`` resolves per
    machine (bf16 on CPUs with bf16 instructions, fp32 elsewhere), so seeds added on another machine can
    differ from the first ones: the verdict stands, but part of a difference or of the spread may be
    the precision's."""
    per = {g.label: by for g, seeds in arms
           if (by := seeds_by_precision(r for r in g.rows if r["seed"] in seeds))}
    if len({p for by in per.values() for p in by}) < 2:
        return None
    return "mixed precision (" + "; ".join(
        f"{label}: " + ", ".join(f"{p} {seed_span(s, word=True)}" for p, s in sorted(by.items()))
        for label, by in per.items()) + ")"


def seed_precisions(g: Group, seeds: list[int]) -> list[str]:
    """Each seed's training precision, in the order of ``seeds`` ('unrecorded' for old records)."""
    of = {seed: prec for prec, ss in seeds_by_precision(g.rows).items() for seed in ss}
    return [of.get(s, "unrecorded") for s in seeds]


def precision_adjusted(ga: Group, gb: Group, seeds_a: list[int], seeds_b: list[int], A, B, scale: float,
                       op: str, fixed_a: bool, fixed_b: bool, paired: bool) -> dict:
    """The claim's seed-level difference with the training precision as a factor of the seeds
    (``stats.factor_adjusted``), for a claim whose seeds mix precisions: does the verdict survive once a
    shift between precisions is allowed for? {"why": ...} when it cannot be estimated."""
    ma, mb = stats.seed_values(A, B, scale)
    if fixed_a and fixed_b:
        return {"why": "no trained side"}
    if fixed_a:      # value - B: B's seeds against the fixed value, the sign turned round
        r = stats.factor_adjusted(mb, ma[:1], seed_precisions(gb, seeds_b), fixed_b=True)
        if not isinstance(r, str):
            r = replace(r, diff=-r.diff, ci_low=-r.ci_high, ci_high=-r.ci_low, diff_plain=-r.diff_plain)
    else:
        r = stats.factor_adjusted(ma, mb[:1] if fixed_b else mb, seed_precisions(ga, seeds_a),
                                  None if fixed_b else seed_precisions(gb, seeds_b), fixed_b=fixed_b,
                                  paired=paired)
    if isinstance(r, str):
        return {"why": r}
    plain = stats.verdict_of(r.p_plain, r.diff_plain, op)
    return {"diff": r.diff, "ci": [r.ci_low, r.ci_high], "p": r.p, "df": r.df, "factor_p": r.factor_p,
            "shift": r.shift, "levels": list(r.levels), "verdict": r.verdict(op),
            "diff_plain": r.diff_plain, "p_plain": r.p_plain, "verdict_plain": plain}


def judge(f: Finding, groups: list[Group]) -> dict:
    by_label = {g.label: g for g in groups}
    for side in (f.a, f.b):
        base = side.removesuffix("@init")
        if side.endswith("@init") and base in by_label:
            start = init_group(by_label[base])
            if start is not None:
                by_label[side] = start
    for side in (f.a, f.b):
        if side not in by_label:
            return {**f.to_dict(), "verdict": "not run", "detail": f"no results for '{side}' yet"}
    ga, gb = by_label[f.a], by_label[f.b]
    fixed_a, fixed_b = is_deterministic(ga.rows[0]), is_deterministic(gb.rows[0])
    # RUN > RUN@init: seed s of RUN started from seed s of its parent, a matched pair
    paired = f.b == f"{f.a}@init" or f.a == f"{f.b}@init"
    pooled: dict = {}
    if f.metric in PER_RUN_METRICS:
        va, vb = ga.per_seed(f.metric), gb.per_seed(f.metric)
        if not va or not vb:   # e.g. best_score of a run that selected on validation loss
            return {**f.to_dict(), "verdict": "not run", "detail": f"no {f.metric} in the records of "
                    f"{f.a if not va else f.b}"}
        seeds_a, seeds_b = list(va), list(vb)
        if paired:   # seed s against its own start
            seeds_a = seeds_b = sorted(set(va) & set(vb))
            if not seeds_a:
                return {**f.to_dict(), "verdict": "not run", "detail": f"no seed with {f.metric} on both sides"}
        A, B = np.array([va[s] for s in seeds_a]), np.array([vb[s] for s in seeds_b])
    else:
        pa, pb = ga.per_example(f.metric), gb.per_example(f.metric)
        if not pa or not pb:
            return {**f.to_dict(), "verdict": "not run", "detail": f"no per-example {f.metric} for "
                    f"{f.a if not pa else f.b}"}
        seeds_a = sorted(pa)[:1] if fixed_a else sorted(pa)
        seeds_b = sorted(pb)[:1] if fixed_b else sorted(pb)
        if paired:
            seeds_a = seeds_b = sorted(set(seeds_a) & set(seeds_b))
        ids = sorted(set.intersection(*(set(pa[s]) for s in seeds_a), *(set(pb[s]) for s in seeds_b)))
        A, B = _matrix(pa, seeds_a, ids), _matrix(pb, seeds_b, ids)
        pooled = _pooled({s: pa[s] for s in seeds_a}, {s: pb[s] for s in seeds_b}, f.scale)
    c = stats.method_test(A, B, f.scale, fixed_a=fixed_a, fixed_b=fixed_b, paired=paired)
    if fixed_a and fixed_b and pooled:   # no seed variance on either side: the examples are the only variance
        c = replace(c, p=pooled["p"], test="two deterministic runs: paired permutation test over test examples")
    verdict = c.verdict(f.op)
    detail = ""
    bad = [f"{g.label} seed {r['seed']}: {why}" for g in (ga, gb) for r in g.rows
           if (why := degenerate_reason(r))]
    if bad:
        verdict, detail = "not judged: degenerate", "; ".join(bad)
    elif verdict == "too few seeds":
        detail = (f"{c.n_a} v {c.n_b} seed(s): a seed-level test needs at least 2 seeds on each trained side")
    leads, below = below_lead(groups)
    flags = []
    if any(dataset_of(g) not in leads for g in (ga, gb)):
        flags.append("no LEAD row")
    under = [g.label for g in (ga, gb) if any(g is x for x in below)
             or (g.kind == "trained" and dataset_of(g) in leads and all(g is not x for x in groups)  # RUN@init
                 and (g.mean("rouge1") or 0.0) <= (leads[dataset_of(g)].mean("rouge1") or 0.0))]
    if under:
        flags.append(f"undertrained ({', '.join(under)} below LEAD)")
    mixed = precision_mix([(ga, seeds_a), (gb, seeds_b)])
    adjusted: dict = {}
    if mixed:
        flags.append(mixed)
        adjusted = precision_adjusted(ga, gb, seeds_a, seeds_b, A, B, f.scale, f.op, fixed_a, fixed_b, paired)
        if "verdict" in adjusted and adjusted["verdict"] != adjusted["verdict_plain"]:
            flags.append(f"precision-sensitive ({adjusted['verdict_plain']} without precision as a factor, "
                         f"{adjusted['verdict']} with it, p {p_text(adjusted['p'])})")
    # power: the seeds per arm that would detect the observed difference with 80% power, from the seed sd
    sds = [c.sd_pairs] if paired else [x for x in (c.sd_a, c.sd_b) if np.isfinite(x)]
    sd = float(np.sqrt(np.mean(np.square(sds)))) if sds and np.all(np.isfinite(sds)) else float("nan")
    sds = sds if np.isfinite(sd) else []
    one_sample = fixed_a or fixed_b or paired
    need = stats.seeds_for_power(c.diff / sd, one_sample=one_sample) if sds and sd > 0 else None
    return {**f.to_dict(), "verdict": verdict, "detail": detail, "flags": flags,
            "mean_a": c.mean_a, "mean_b": c.mean_b, "diff": c.diff, "ci": [c.ci_low, c.ci_high],
            "t_ci": list(c.t_ci), "p": c.p, "test": c.test, "n_a": c.n_a, "n_b": c.n_b,
            "perm_p": c.perm_p, "perm_min_p": c.perm_min_p, "sd_a": c.sd_a, "sd_b": c.sd_b,
            "deterministic": [x for x, fx in ((f.a, fixed_a), (f.b, fixed_b)) if fx],
            "pooled": pooled, "n": pooled.get("n", c.n_a + c.n_b),
            "power": {"effect": c.diff, "seed_sd": sd, "one_sample": one_sample, "seeds_for_80": need},
            "seeds": {f.a: seeds_a, f.b: seeds_b}, "precision_adjusted": adjusted}


def judge_all(exp_dir: Path, groups: list[Group], meta_rows: list[dict]) -> list[dict]:
    declared, meta = load_declared(exp_dir)
    r0 = meta_rows[0]
    out = []
    for f in declared:
        j = judge(f, groups)
        j.update(experiment=r0["experiment"], profile=r0.get("profile") or "full size",
                 results=str(exp_dir))
        out.append(j)
    atomic_write_text(Path(exp_dir) / FINDINGS_FILE, dumps_json(out, indent=1, ensure_ascii=True) + "\n")
    return out
