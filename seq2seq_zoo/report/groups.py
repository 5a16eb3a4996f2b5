"""A report's rows of one run trained with several seeds as one group, and what a group knows about itself.

- ``Group``: the runs of one name (and decoding variant), their seeds, per-example scores (read from
  ``<run>/scores.jsonl``, or scored once from ``predictions.jsonl`` for records that predate it), per-run
  values and means;
- the LEAD row: the experiment's ``lead`` run (the k chosen on validation), the floor trained runs must beat;
- ``ci_of``: a group's 95% CI from a two-level bootstrap (seeds, then test examples);
- runs that do not depend on the seed (``is_deterministic``) and runs whose outputs cannot stand for their
  method (``degenerate_reason``);
- ``init_group``: the runs a group started from (``NAME@init``).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from seq2seq_zoo import stats
from seq2seq_zoo.findings import PER_RUN_METRICS
from seq2seq_zoo.names import run_group
from seq2seq_zoo.results import read_scores, write_scores

RESCORED = ("rouge", "repetition", "length", "unk_ratio")
TABLE_RESAMPLES = stats.TABLE_RESAMPLES   # the tables' CIs; the findings' tests use stats.N_RESAMPLES


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



# ------------------------------------------------------------------------------------------- CIs
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
