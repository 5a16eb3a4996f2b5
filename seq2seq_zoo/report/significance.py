"""Seeds, confidence intervals, the LEAD row and declared findings in the tables.

- rows of one run trained with several seeds are one group: the markdown table shows mean ± sd over
  seeds and their number, the CSV keeps one row per seed;
- every ROUGE figure gets a 95% CI from a two-level bootstrap (seeds, then test examples), so the
  seed-to-seed variance is in the interval;
- the experiment's LEAD row (the first ``lead`` run) is the floor: trained runs whose ROUGE-1 does not
  beat it are marked;
- ``[[findings]]`` declared in the experiment file (stored by ``zoo run`` in ``experiment.json``) are
  judged with the training seed as the unit (``stats.method_test``) from the per-example scores
  (``<run>/scores.jsonl``); the pooled example x seed test is kept as a second column. A run whose
  outputs are degenerate (one summary for a third of the inputs, or half its summaries mostly ``<unk>``)
  is not judged. See docs/statistics.md.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from collections import Counter

from seq2seq_zoo import stats
from seq2seq_zoo.findings import PER_RUN_METRICS, Finding
from seq2seq_zoo.names import run_group
from seq2seq_zoo.precision import seeds_by_precision
from seq2seq_zoo.results import read_scores, write_scores
from seq2seq_zoo.utils import atomic_write_text, seed_span

EXPERIMENT_FILE = "experiment.json"
FINDINGS_FILE = "findings.json"
CI_METRICS = ("rouge1", "rouge2", "rouge3", "rougeL", "rougeLsum", "rouge1_max", "rouge2_max", "rougeL_max")
RESCORED = ("rouge", "repetition", "length", "unk_ratio")
TABLE_RESAMPLES = 2000   # the tables' CIs; the findings' tests use stats.N_RESAMPLES
POOLED_RESAMPLES = 2999  # the findings' second column (pooled example x seed permutation test)


# --------------------------------------------------------------------------------- per-example scores
def row_dir(row: dict) -> Path:
    return Path(row.get("_decode_dir") or row["_dir"])


def example_scores(row: dict) -> dict[str, dict[str, float]]:
    """{example id: {metric: value}} of a table row. Records made before per-example scores existed are
    scored once from their ``predictions.jsonl`` (ROUGE, repetition, length, UNK ratio; the same
    rouge-score settings as the record) and the file is written beside them."""
    if "_scores" not in row:
        row["_scores"] = _example_scores(row)
    return row["_scores"]


def _example_scores(row: dict) -> dict[str, dict[str, float]]:
    d = row_dir(row)
    got = read_scores(d)
    if got is not None:
        return got
    from seq2seq_zoo.metrics import evaluate
    from seq2seq_zoo.results import read_predictions
    if not (d / "predictions.jsonl").is_file():
        return {}
    preds = read_predictions(d)
    names = [m for m in RESCORED if m in row["eval"]["settings"] or m in ("rouge", "length", "repetition")]
    per: dict[str, list[float]] = {}
    stemmer = row["eval"]["settings"].get("rouge", {}).get("stemmer", True)
    unk = "strip" if str(row["eval"]["settings"].get("rouge", {}).get("unk", "match")).startswith("strip") else "match"
    evaluate([p["prediction"] for p in preds], [p["references"] for p in preds], names, per_example=per,
             stemmer=stemmer, rouge_unk=unk)
    write_scores(d, [str(p["id"]) for p in preds], per,
                 note="scored by zoo report from predictions.jsonl (the record predates per-example scores)")
    return read_scores(d) or {}


# ------------------------------------------------------------------------------------------- groups
@dataclass
class Group:
    name: str                 # run name without the -seedN suffix
    decode: str | None        # decoding variant, or None for the run's own decoding
    rows: list[dict] = field(default_factory=list)
    cache: dict = field(default_factory=dict, repr=False, compare=False)   # per-example values and CIs

    @property
    def label(self) -> str:
        return self.name if not self.decode or self.decode == "default" else f"{self.name}/{self.decode}"

    @property
    def seeds(self) -> list[int]:
        return [r["seed"] for r in self.rows]

    @property
    def kind(self) -> str:
        return row_kind(self.rows[0])

    def per_example(self, metric: str) -> dict[int, dict[str, float]]:
        if ("per_example", metric) in self.cache:
            return self.cache[("per_example", metric)]
        out = {}
        for r in self.rows:
            sc = example_scores(r)
            vals = {i: v[metric] for i, v in sc.items() if v.get(metric) is not None}
            if vals:
                out[r["seed"]] = vals
        self.cache[("per_example", metric)] = out
        return out

    def per_run(self, metric: str) -> list[float]:
        return list(self.per_seed(metric).values())

    def per_seed(self, metric: str) -> dict[int, float]:
        """{seed: value} of a per-run quantity (or a run's mean score); seeds whose record lacks it are left out."""
        vals = {}
        for r in self.rows:
            v = r["train"].get(metric) if metric in PER_RUN_METRICS else r["eval"]["scores"].get(metric)
            if v is not None:
                vals[r["seed"]] = float(v)
        return vals

    def mean(self, metric: str) -> float | None:
        v = self.per_run(metric)
        return float(np.mean(v)) if v else None


def base_name(row: dict) -> str:
    return run_group(row["run"], row["seed"])


def row_kind(row: dict) -> str:
    """'trained', 'baseline' or 'upper bound' (an oracle that reads the reference)."""
    b = row.get("baseline")
    if not b:
        return "trained"
    return "upper bound" if b.get("upper_bound") else "baseline"


def group_rows(rows: list[dict]) -> list[Group]:
    groups: dict[tuple, Group] = {}
    for r in rows:
        key = (base_name(r), r.get("_decode"))
        groups.setdefault(key, Group(key[0], key[1])).rows.append(r)
    return list(groups.values())


def dataset_of(g: Group) -> str:
    return g.rows[0]["data"]["dataset"]


def lead_group(groups: list[Group], dataset: str | None = None) -> Group | None:
    """The LEAD row of ``dataset`` (default: of the first group's dataset): the run of the ``lead`` model on
    that dataset whose k was chosen on validation, else the first one (a file may also keep a fixed-k row
    for a published comparison, e.g. Inshorts' first 60 words)."""
    dataset = dataset or (dataset_of(groups[0]) if groups else None)
    leads = [g for g in groups if g.rows[0]["model"] == "lead" and g.decode in (None, "default")
             and dataset_of(g) == dataset]
    tuned = [g for g in leads if ((g.rows[0].get("baseline") or {}).get("tuned") or {}).get("chosen_by")]
    return (tuned or leads or [None])[0]


def below_lead(groups: list[Group]) -> tuple[dict[str, Group], list[Group]]:
    """({dataset: its LEAD group}, the trained groups whose mean ROUGE-1 does not beat their dataset's LEAD)."""
    leads = {}
    for g in groups:
        d = dataset_of(g)
        if d not in leads:
            lead = lead_group(groups, d)
            if lead is not None:
                leads[d] = lead
    below = [g for g in groups if g.kind == "trained" and dataset_of(g) in leads
             and leads[dataset_of(g)].mean("rouge1") is not None
             and (g.mean("rouge1") or 0.0) <= leads[dataset_of(g)].mean("rouge1")]
    return leads, below


# -------------------------------------------------------------------------------------- the table
def ci_of(g: Group, metric: str) -> tuple[float, float] | None:
    """95% CI of a group's mean ``metric``: a two-level bootstrap (seeds with replacement, then test
    examples), so it includes the variance between seeds. One seed or a deterministic run: examples only."""
    if ("ci", metric) not in g.cache:
        per = g.per_example(metric)
        ids = sorted(set.intersection(*(set(v) for v in per.values()))) if per else []
        seeds = sorted(per)[:1] if is_deterministic(g.rows[0]) else sorted(per)
        x = [[per[s][i] for i in ids] for s in seeds]
        g.cache[("ci", metric)] = stats.group_ci(x, n_resamples=TABLE_RESAMPLES) if ids else None
    return g.cache[("ci", metric)]


def grouped_table(df_rows: pd.DataFrame, rows: list[dict], groups: list[Group]) -> pd.DataFrame:
    """The per-seed table ``df_rows`` (one row per record, same order as ``rows``) -> one row per group:
    numeric columns as mean (± sd over seeds), ROUGE columns with their 95% CI, a ``seeds`` column, a
    ``kind`` column when baselines are present and a ``vs LEAD`` mark."""
    from seq2seq_zoo.report.tables import SCORE_COLUMNS, _digits
    label_of = {label: key for key, label in SCORE_COLUMNS}
    leads, below = below_lead(groups)
    below_ids = {id(g) for g in below}
    lead_ids = {id(g) for g in leads.values()}
    index = {id(r): k for k, r in enumerate(rows)}
    out = []
    multi = any(len(g.rows) > 1 for g in groups)
    kinds = {g.kind for g in groups} != {"trained"}
    for g in groups:
        sub = df_rows.iloc[[index[id(r)] for r in g.rows]]
        first = sub.iloc[0]
        row = {}
        for c in df_rows.columns:
            if c == "run":
                row[c] = g.name + (" (upper bound)" if g.kind == "upper bound" else "")
            elif c == "seed":
                row["seeds"] = ", ".join(str(s) for s in sorted(g.seeds)) if multi else str(g.seeds[0])
            elif pd.api.types.is_numeric_dtype(df_rows[c]) and c != "params":
                vals = pd.to_numeric(sub[c], errors="coerce").dropna()
                if vals.empty:
                    row[c] = ""
                    continue
                d = _digits(c, 2) + (1 if c == "epochs" and len(vals) > 1 else 0)
                text = f"{vals.mean():.{d}f}"
                if len(vals) > 1:
                    text += f" ± {vals.std(ddof=1):.{d}f}"
                key = label_of.get(c)
                if key in CI_METRICS:
                    bounds = ci_of(g, key)
                    if bounds is not None:
                        text += f" [{bounds[0]:.{d}f}, {bounds[1]:.{d}f}]"
                row[c] = text
            elif c == "params":
                row[c] = f"{int(first[c]):,}"
            else:
                v = first[c]
                row[c] = "" if v is None or (isinstance(v, float) and np.isnan(v)) else v
        if kinds:
            row["kind"] = g.kind
        if leads:
            row["vs LEAD"] = ("LEAD row" if id(g) in lead_ids else "below LEAD" if id(g) in below_ids
                              else "above" if g.kind == "trained" and dataset_of(g) in leads else "")
        out.append(row)
    df = pd.DataFrame(out)
    cols = list(df.columns)
    for c in ("kind", "vs LEAD"):
        if c in cols:  # right after the run name
            cols.remove(c)
            cols.insert(1, c)
    return df[cols]


def _compact_grid(text: str) -> str:
    """'k chosen from 1, 2, 3, 4 by' -> 'k chosen from 1-4 by' (records written before describe() did it)."""
    from seq2seq_zoo.report.tables import short_range
    return re.sub(r"from ((?:\d+, )+\d+) by", lambda m: f"from {short_range(m.group(1), least=3)} by", text)


def lead_sentence(groups: list[Group]) -> str:
    """The sentence above the table: each dataset's LEAD row and which trained runs do not beat it."""
    leads, below = below_lead(groups)
    datasets = list(dict.fromkeys(dataset_of(g) for g in groups))
    missing = [d for d in datasets if d not in leads]
    parts = []
    for d, lead in leads.items():
        b = lead.rows[0].get("baseline") or {}
        what = _compact_grid(b.get("describe", "lead"))
        tuned = b.get("tuned") or {}
        val = (tuned.get("validation_rouge1") or {}).get(str(tuned.get("k")))
        chosen = f" (validation ROUGE-1 {val:.2f} at k = {tuned['k']})" if val is not None else \
            " (k fixed, not tuned on validation)" if tuned.get("k") and not tuned.get("chosen_by") else ""
        parts.append(f"LEAD row{f' ({d})' if len(datasets) > 1 else ''}: {what}{chosen}, test ROUGE-1 "
                     f"{lead.mean('rouge1'):.2f}.")
    if missing:
        parts.append(f"No LEAD row for {', '.join(missing)} (add a `lead` run to see whether the models learned more "
                     "than copying the start of the input).")
    trained = [g for g in groups if g.kind == "trained" and dataset_of(g) in leads]
    if trained:
        if below:
            parts.append(f"**{len(below)} of {len(trained)} trained row(s) do not beat their LEAD row** (marked "
                         "`below LEAD`): " + ", ".join(g.label for g in below) + ".")
        else:
            parts.append(f"All {len(trained)} trained row(s) beat their LEAD row.")
    return " ".join(parts)


def ci_note(groups: list[Group]) -> str:
    multi = any(len(g.rows) > 1 for g in groups)
    return ("- **Uncertainty**: ROUGE cells are mean" + (" ± standard deviation over seeds" if multi else "")
            + f" [95% CI, two-level bootstrap: seeds with replacement, then test examples; percentile method, "
            f"{TABLE_RESAMPLES} resamples, fixed seed" + ("; a run with one seed has no seed variance in its "
                                                          "interval" if multi else "; one seed: examples only")
            + "]. `table.csv` keeps one row per seed.")


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


def init_group(g: Group) -> Group | None:
    """The runs ``g`` started from (``train.init_from``), as a group of their own (``NAME@init``).

    One record per seed row of ``g``: a seeded run starts each seed from the same seed of its parent, so
    the comparison "RUN > RUN@init" pairs every seed with its own starting checkpoint."""
    from seq2seq_zoo.results import read_record
    from seq2seq_zoo.utils import DamagedFile
    starts, seen = [], set()
    for row in g.rows:
        init = row.get("init_from")
        if not init:
            continue
        run_dir = Path(init["checkpoint"]).parent.parent  # <results>/<experiment>/<run>/checkpoints/best.pt
        # as written (relative to where zoo ran), else beside this experiment's folder
        for d in (run_dir, Path(row["_dir"]).parent.parent / run_dir.parent.name / run_dir.name):
            if (d / "record.json").is_file():
                if d.resolve() in seen:
                    break
                try:
                    rec = read_record(d / "record.json")
                except DamagedFile:  # named when its own experiment is reported
                    return None
                seen.add(d.resolve())
                rec["_dir"] = str(d)
                starts.append(rec)
                break
    return Group(f"{g.name}@init", None, starts) if starts else None


# ------------------------------------------------------------------------- degenerate runs, deterministic runs
DEGENERATE_SAME = 1 / 3     # one summary written for at least this share of the inputs
DEGENERATE_UNK = 0.5        # at least this share of the predictions mostly (> half their words) <unk>
_WORD = re.compile(r"<unk>|\w+")


def is_deterministic(row: dict) -> bool:
    """A run whose summaries do not depend on the seed, as its model declares (``deterministic``; the
    record's ``baseline.deterministic``, else the registered model class's attribute)."""
    b = row.get("baseline") or {}
    if "deterministic" in b:
        return bool(b["deterministic"])
    if not b:
        return False
    from seq2seq_zoo.registry import MODELS
    try:
        return bool(getattr(MODELS.get(row["model"]), "deterministic", False))
    except Exception:   # a model no longer registered: treat it as seeded
        return False


def degenerate_reason(row: dict) -> str | None:
    """Why a run's test outputs cannot stand for its method, or None: one summary written for a third or
    more of the inputs, or half or more of its summaries mostly ``<unk>``."""
    if "_degenerate" not in row:
        from seq2seq_zoo.results import read_predictions
        from seq2seq_zoo.utils import DamagedFile
        reason = None
        try:
            preds = [p["prediction"] for p in read_predictions(row_dir(row))]
        except (DamagedFile, OSError):
            preds = []
        if preds:
            n = len(preds)
            top, count = Counter(x.strip() for x in preds).most_common(1)[0]
            parts = []
            if count >= max(2, DEGENERATE_SAME * n):
                parts.append(f"one summary for {count} of {n} inputs (\"{top[:40]}\")")
            unk = 0
            for x in preds:
                w = _WORD.findall(x)
                unk += bool(w) and sum(t == "<unk>" for t in w) > 0.5 * len(w)
            if unk >= DEGENERATE_UNK * n:
                parts.append(f"{unk} of {n} predictions mostly <unk>")
            reason = "; ".join(parts) or None
        row["_degenerate"] = reason
    return row["_degenerate"]


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
                         f"{adjusted['verdict']} with it, p {_p(adjusted['p'])})")
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
    atomic_write_text(Path(exp_dir) / FINDINGS_FILE, json.dumps(out, indent=1) + "\n")
    return out


def _fmt(x, d=2) -> str:
    return "" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{d}f}"


def _p(p) -> str:
    if p is None or not np.isfinite(p):
        return ""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


VERDICTS = ("holds", "not shown", "reversed", "too few seeds")      # judged
NOT_JUDGED = ("not judged: degenerate", "not run")


def _seeds(j: dict) -> str:
    if "n_a" not in j:
        return "; ".join(f"{k}: {len(v)}" for k, v in j.get("seeds", {}).items())
    det = set(j.get("deterministic", []))
    return " v ".join("fixed" if side in det else str(n) for side, n in ((j["a"], j["n_a"]), (j["b"], j["n_b"])))


def findings_rows(judged: list[dict]) -> pd.DataFrame:
    rows = []
    for j in judged:
        d = 4 if j["metric"] in ("best_val_loss", "bertscore_f1", "repetition", "unk_ratio") else 2
        meas = "" if "diff" not in j else (
            f"{_fmt(j['mean_a'], d)} vs {_fmt(j['mean_b'], d)}" + (f" (= {j['scale']:g} x B)" if j["scale"] != 1 else "")
            + f"; diff {_fmt(j['diff'], d)}")
        claim = j["claim"] if j["metric"] in j["claim"] else f"{j['claim']} ({j['metric']})"
        pooled = j.get("pooled") or {}
        perm = "" if "perm_min_p" not in j else (
            f"{_p(j['perm_p'])} (min {j['perm_min_p']:.3g})" if _p(j.get("perm_p")) else f"(min {j['perm_min_p']:.3g})")
        verdict = j["verdict"] + (f" ({j['detail']})" if j.get("detail") and j["verdict"].startswith("not judged")
                                  else "") + "".join(f"; {x}" for x in j.get("flags", []))
        rows.append({"claim": claim, "source": j.get("source", ""), "measured (A vs B)": meas,
                     "seeds (A v B)": _seeds(j),
                     "p (seed-level t)": _p(j.get("p")),
                     "95% CI of diff (two-level bootstrap)": f"[{_fmt(j['ci'][0], d)}, {_fmt(j['ci'][1], d)}]"
                     if "ci" in j and _fmt(j["ci"][0], d) else "",
                     "permutation p over seeds (smallest possible)": perm,
                     "pooled p (these trained runs on this test set)": _p(pooled.get("p")),
                     "verdict": verdict, "with precision as a factor": _adjusted_cell(j, d),
                     "test-informed": "yes" if j.get("test_informed") else "",
                     "experiment": j.get("experiment", ""), "profile": j.get("profile", "")})
    df = pd.DataFrame(rows)
    if not df.empty and not (df["test-informed"] == "yes").any():
        df = df.drop(columns="test-informed")
    if not df.empty and not (df["with precision as a factor"] != "").any():
        df = df.drop(columns="with precision as a factor")
    return df


def _adjusted_cell(j: dict, d: int) -> str:
    """'diff 0.95 [0.41, 1.49], p 0.003 (without it 0.97, p 0.002); fp32 minus bfloat16 0.31 (p 0.410)' for a
    mixed-precision claim; why not, when the model cannot be fitted."""
    a = j.get("precision_adjusted") or {}
    if "why" in a:
        return f"not estimable: {a['why']}"
    if "diff" not in a:
        return ""
    cell = (f"diff {_fmt(a['diff'], d)} [{_fmt(a['ci'][0], d)}, {_fmt(a['ci'][1], d)}], p {_p(a['p'])} "
            f"(without it {_fmt(a['diff_plain'], d)}, p {_p(a['p_plain'])})")
    if a.get("shift") is not None:
        lo, hi = a["levels"]
        cell += f"; {hi} minus {lo} {_fmt(a['shift'], d)} (p {_p(a['factor_p'])})"
    else:
        cell += f"; precision p {_p(a['factor_p'])}"
    return cell


_RULES = ("Verdicts at p < 0.05, with the training seed as the unit: **holds** (significant in the claimed direction), "
          "**not shown** (not significant), **reversed** (significant the other way), **too few seeds** (a trained "
          "side has fewer than 2 seeds, so no seed-level test exists), **not judged: degenerate** (a run writes one "
          "summary for a third or more of its inputs, or half or more of its summaries are mostly `<unk>`; the "
          "reason is given), **not run** (a run it needs has no results yet). The test: Welch's t over the "
          "per-seed means; against a deterministic baseline (LEAD) a one-sample t with the trained side's seed "
          "spread; `RUN@init` claims a paired t over matched seeds. Also shown: the exact permutation p over seed "
          "labels with the smallest p it can reach with these seeds (0.1 at 3 v 3), a 95% two-level bootstrap CI "
          "of the difference (seeds, then examples paired across the two arms), and the pooled example x seed "
          "permutation test, which answers a narrower question: do these particular trained runs differ on this "
          "test set. *undertrained*: a run in the claim does not beat its dataset's (validation-tuned) LEAD row. "
          "*mixed precision*: the seeds compared were not all trained in one precision (`precision = \"auto\"` "
          "picks bf16 on CPUs with bf16 instructions and fp32 elsewhere); part of the difference or spread may "
          "be the precision's, so such a claim is also tested **with precision as a factor**: least squares over "
          "the seed values with the arm and the precision (the difference with a precision shift allowed for, "
          "its CI and p; the same model without the factor; the shift between precisions within arms and its p); "
          "*precision-sensitive*: the verdict of that model changes when the factor is added. "
          "*test-informed*: a choice behind the claim was made with test scores (see the experiment file). "
          "Method: docs/statistics.md.")


def findings_markdown(judged: list[dict]) -> list[str]:
    from seq2seq_zoo.report.tables import to_markdown
    if not judged:
        return []
    return ["## Declared findings", "", "Claims declared in the experiment file (`[[findings]]`). " + _RULES, "",
            to_markdown(findings_rows(judged).drop(columns=["experiment", "profile"], errors="ignore")), ""]


# superseded results: runs made before the correctness fixes (archive/*_before_fixes) and runs of an
# experiment file's earlier setup (archive/cnn_pointer_raw, archive/scst_token_ml)
ARCHIVE_DIRS = ("archive",)
ARCHIVE = tuple(f"{d}/" for d in ARCHIVE_DIRS)


def _tally(judged: list[dict]) -> str:
    c = Counter(j["verdict"] for j in judged)
    judged_n = sum(c[v] for v in VERDICTS)
    return (f"{judged_n} judged: {c['holds']} hold, {c['not shown']} not shown, {c['reversed']} reversed, "
            f"{c['too few seeds']} too few seeds; not judged: {c['not judged: degenerate']} degenerate, "
            f"{c['not run']} not run")


def write_findings_index(root: Path, warn=None) -> Path | None:
    """``results/FINDINGS.md``: every judged finding of every experiment folder under ``root``; the
    archived folders (``archive/``) in an archive section that the summary line does not count. A damaged
    findings.json is left out and ``warn(message)`` names it (default: a line on stderr)."""
    from seq2seq_zoo.results import read_checked
    from seq2seq_zoo.utils import DamagedFile
    root = Path(root)
    files = sorted(set(root.glob(f"*/{FINDINGS_FILE}")) | set(root.glob(f"*/*/{FINDINGS_FILE}")))
    from seq2seq_zoo.report.artifacts import git_ignored
    files = [p for p in files if p not in git_ignored(files)]  # scratch folders (results/smoke/) stay out
    judged = []
    for p in files:
        try:
            found = read_checked(p, "run `zoo report` on its experiment folder to write it again")
        except DamagedFile as e:  # left out of the index, and said so
            import sys
            (warn or (lambda m: print(f"warning: {m} (left out of FINDINGS.md)", file=sys.stderr)))(str(e))
            continue
        except OSError:
            continue
        # the folder, not only the experiment's name: results/archive/X_before_fixes and results/X are
        # different runs of X
        judged += [{**j, "experiment": p.parent.relative_to(root).as_posix()} for j in found]
    if not files:
        return None
    from seq2seq_zoo.report.tables import to_markdown
    current = [j for j in judged if not j["experiment"].startswith(ARCHIVE)]
    archive = [j for j in judged if j["experiment"].startswith(ARCHIVE)]
    under = sum(1 for j in current if j["verdict"] in VERDICTS
                and any(x.startswith("undertrained") for x in j.get("flags", [])))
    informed = sum(1 for j in current if j["verdict"] in VERDICTS and j.get("test_informed"))
    mixed = [j for j in current if j["verdict"] in VERDICTS
             and any(x.startswith("mixed precision") for x in j.get("flags", []))]
    sensitive = sum(1 for j in mixed if any(x.startswith("precision-sensitive") for x in j["flags"]))
    text = "\n".join([
        "# Findings", "",
        "Generated by `zoo report` from the committed results: every published claim declared in an experiment file "
        "(`[[findings]]`), measured on this suite's runs. " + _RULES, "",
        f"**Current results: {len(current)} finding(s), {_tally(current)}.** Of the judged ones, {under} flagged "
        f"undertrained, {informed} test-informed, {len(mixed)} mixed precision ({sensitive} of them "
        f"precision-sensitive). The archive below is not counted.", "",
        to_markdown(findings_rows(current)) if current else "(none declared)", "",
        *(["## Archive: superseded results (not counted)", "",
           "Runs made before the suite's correctness fixes (`archive/*_before_fixes/`) or with an experiment "
           "file's earlier setup (the other `archive/` folders), kept for reference only: "
           f"{len(archive)} finding(s), {_tally(archive)}.", "",
           to_markdown(findings_rows(archive)), ""] if archive else [])])
    out = root / "FINDINGS.md"
    atomic_write_text(out, text)
    return out
