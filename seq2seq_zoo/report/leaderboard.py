"""``results/LEADERBOARD.md`` and the README's headline table, rebuilt from the run records alone.

The leaderboard has one table per dataset with every trained run of every experiment folder (mean ±
sd over seeds, the seeds, the 95% two-level bootstrap CI (seeds, then test examples), the difference
to the folder's own LEAD row), the LEAD and oracle rows, and the marks ``below LEAD`` and ``not
converged``. Archive folders (``results/archive/``) and stale records are left out. The headline
table keeps, per dataset, the best run of each model family (among its runs with at least 3 seeds,
where it has one) with its paired margin over its LEAD row, the tuned LEAD row, and the published
figure the suite compares with (named with its scorer).

    python -m seq2seq_zoo.report.leaderboard [--results results] [--readme README.md] [--check]
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seq2seq_zoo import stats
from seq2seq_zoo.report import significance
from seq2seq_zoo.report.extras import DEFAULT, with_decodes
from seq2seq_zoo.report.tables import convergence
from seq2seq_zoo.results import read_record
from seq2seq_zoo.utils import DamagedFile, atomic_write_text

LEADERBOARD = "LEADERBOARD.md"
ARCHIVE_DIRS = significance.ARCHIVE_DIRS   # folders of superseded results: never on the leaderboard
METRIC = "rouge1"
HEADLINE_START = "<!-- headline:start -->"
HEADLINE_END = "<!-- headline:end -->"

# model -> family of the headline table (a model not named here is its own family)
FAMILIES = {
    "transformer": "Transformer", "transformer_pointer": "Transformer",
    "gru": "recurrent", "bahdanau": "recurrent", "bilstm": "recurrent",
    "pointer_generator": "pointer-generator",
}
DATASET_NAMES = {"dialogsum": "DialogSum", "samsum": "SAMSum", "gigaword": "Gigaword",
                 "cnn_dailymail_see": "CNN (See et al.'s tokenized CNN/DailyMail, CNN stories)",
                 "cnn_dailymail": "CNN/DailyMail", "inshorts": "Inshorts (article -> summary)",
                 "inshorts_headline": "Inshorts (short text -> headline)"}
# The published figure each dataset is compared with: (ROUGE-1, system, source, scorer). Scores made by
# another ROUGE implementation are not directly comparable with this suite's rouge-score figures.
PUBLISHED = {
    "dialogsum": (35.91, "Transformer from scratch", "Chen et al. 2021 (DialogSum)",
                  "the paper's own ROUGE scorer, mean over 3 references"),
    "samsum": (37.27, "pointer-generator", "Gliwa et al. 2019 (SAMSum)", "the paper's own ROUGE scorer"),
    "cnn_dailymail": (39.53, "pointer-generator + coverage", "See et al. 2017",
                      "pyrouge (ROUGE-1.5.5), CNN and DailyMail, all highlights"),
    "cnn_dailymail_see": (25.65, "pointer-generator + coverage", "the seed report on CNN stories",
                          "the report's own ROUGE scorer, first 2 highlights"),
}


@dataclass
class Entry:
    """One leaderboard row: a run (its seeds) of one experiment folder."""
    folder: str                  # experiment folder relative to the results root, e.g. "gpu_full/pe_ablation"
    group: significance.Group
    lead: significance.Group | None

    @property
    def dataset(self) -> str:
        """The dataset, and the task where one corpus serves two (Inshorts: summary or headline)."""
        d = significance.dataset_of(self.group)
        opts = ((self.group.rows[0].get("spec") or {}).get("data") or {}).get("options") or {}
        return f"{d}_headline" if opts.get("target") == "headlines" else d

    @property
    def model(self) -> str:
        return self.group.rows[0]["model"]

    @property
    def kind(self) -> str:
        return self.group.kind

    @property
    def profile(self) -> str:
        return self.group.rows[0].get("profile") or "full size"

    def mean(self, metric: str = METRIC) -> float | None:
        return self.group.mean(metric)

    def sd(self, metric: str = METRIC) -> float | None:
        v = self.group.per_run(metric)
        return float(np.std(v, ddof=1)) if len(v) > 1 else None

    def ci(self, metric: str = METRIC):
        try:
            return significance.ci_of(self.group, metric)
        except DamagedFile:   # a damaged scores.jsonl: the folder's own report names it
            return None

    def not_converged(self) -> int:
        return sum(1 for r in self.group.rows if convergence(r) == "not converged")

    def below_lead(self) -> bool:
        if self.kind != "trained" or self.lead is None or self.lead.mean(METRIC) is None:
            return False
        return (self.mean() or 0.0) <= self.lead.mean(METRIC)

    def vs_lead(self) -> tuple[float, float, float] | None:
        """(mean difference to the folder's LEAD row, 95% CI): the LEAD row is deterministic, so the CI is the
        two-level bootstrap of ``stats.method_test`` (the run's seeds, then the same test examples for both)."""
        if self.lead is None or self.kind != "trained":
            return None
        if "vs_lead" not in self.group.cache:
            try:
                pa, pb = self.group.per_example(METRIC), self.lead.per_example(METRIC)
            except DamagedFile:   # named by the folder's own report
                pa, pb = {}, {}
            ids = sorted(set.intersection(*(set(v) for v in [*pa.values(), *pb.values()]))) if pa and pb else []
            if not ids:
                self.group.cache["vs_lead"] = None
            else:
                A = [[pa[s][i] for i in ids] for s in sorted(pa)]
                B = [[pb[s][i] for i in ids] for s in sorted(pb)[:1]]
                c = stats.method_test(A, B, fixed_b=True, n_resamples=significance.TABLE_RESAMPLES)
                self.group.cache["vs_lead"] = (c.diff, c.ci_low, c.ci_high)
        return self.group.cache["vs_lead"]


# ------------------------------------------------------------------------------------------ collecting
def experiment_dirs(root: Path) -> list[Path]:
    """Experiment folders under ``root`` and one level down (as ``zoo report`` finds them), archives out."""
    root = Path(root)
    if not root.is_dir():
        return []
    subdirs = [p for p in root.iterdir() if p.is_dir() and p.name not in ARCHIVE_DIRS]
    subdirs += [q for p in subdirs for q in p.iterdir() if q.is_dir()]
    return sorted(p for p in subdirs if any(p.glob("*/record.json")))


def _records(exp_dir: Path) -> list[dict]:
    """The readable, current run records of a folder (a damaged one is named by its folder's report). When
    the experiment file names a headline decoding (``[[decode]] headline = true``, chosen on validation),
    every trained run is taken with that decoding instead of its own."""
    out = []
    for p in sorted(exp_dir.glob("*/record.json")):
        try:
            rec = read_record(p)
        except DamagedFile:
            continue
        if not rec.get("stale"):
            rec["_dir"] = str(p.parent)
            out.append(rec)
    out.sort(key=lambda r: (r.get("order", 0), r.get("run", "")))
    headline = headline_decode(exp_dir)
    if headline is None:
        return out
    rows, _ = with_decodes(out)
    trained = {r["run"] for r in rows if r.get("_decode") == headline}
    return [r for r in rows
            if r.get("_decode") == headline or (r["run"] not in trained and r.get("_decode") == DEFAULT)]


def headline_decode(exp_dir: Path) -> str | None:
    """The ``[[decode]]`` entry the experiment file marks ``headline = true``, as ``zoo run`` noted it."""
    try:
        _, meta = significance.load_declared(exp_dir)
    except DamagedFile:   # named by the folder's own report
        return None
    return meta.get("headline_decode")


def collect(root: Path) -> list[Entry]:
    root = Path(root)
    out: list[Entry] = []
    for d in experiment_dirs(root):
        records = _records(d)
        if not records:
            continue
        groups = significance.group_rows(records)
        try:
            leads, _ = significance.below_lead(groups)
        except (DamagedFile, KeyError, TypeError):   # named by the folder's own report; left off the board
            continue
        folder = d.relative_to(root).as_posix()
        out += [Entry(folder, g, leads.get(significance.dataset_of(g))) for g in groups]
    return out


def _dataset_order(entries: list[Entry]) -> list[str]:
    known = list(DATASET_NAMES)
    found = list(dict.fromkeys(e.dataset for e in entries))
    return [d for d in known if d in found] + [d for d in found if d not in known]


# ------------------------------------------------------------------------------------------ formatting
def _f(x: float | None, d: int = 2) -> str:
    return "" if x is None else f"{x:.{d}f}"


def _score(e: Entry) -> str:
    sd = e.sd()
    return _f(e.mean()) + (f" ± {sd:.2f}" if sd is not None else "")


def _ci(e: Entry) -> str:
    c = e.ci()
    return f"[{c[0]:.2f}, {c[1]:.2f}]" if c else ""


def _vs(c: tuple[float, float, float] | None) -> str:
    return "" if c is None else f"{c[0]:+.2f} [{c[1]:+.2f}, {c[2]:+.2f}]"


def _link(folder: str, prefix: str) -> str:
    return f"[{folder}]({prefix}{folder}/README.md)"


def _marks(e: Entry) -> str:
    m = []
    if e.kind == "upper bound":
        m.append("upper bound (reads the reference)")
    if e.below_lead():
        m.append("**below LEAD**")
    nc = e.not_converged()
    if nc:
        m.append(f"not converged ({nc} of {len(e.group.rows)} seeds)" if len(e.group.rows) > 1 else "not converged")
    return "; ".join(m)


def _short(label: str) -> str:
    """A baseline's description without its model name and with its tuning said briefly."""
    label = re.sub(r"^\w+: ", "", label)
    return re.sub(r" \(k chosen from [^)]*validation split\)", " (k tuned on validation)", label)


def _baseline_label(e: Entry) -> str:
    b = e.group.rows[0].get("baseline") or {}
    return b.get("describe") or e.model


def dataset_table(entries: list[Entry], prefix: str = "") -> list[str]:
    trained = sorted((e for e in entries if e.kind == "trained"), key=lambda e: -(e.mean() or 0.0))
    leads: dict[tuple, list[Entry]] = {}
    for e in entries:   # one line per distinct LEAD row (the same baseline scored alike in several folders)
        if e.kind != "trained":
            leads.setdefault((e.kind, _baseline_label(e), _f(e.mean())), []).append(e)
    lines = ["| run | model | experiment | profile | seeds | ROUGE-1 | 95% CI | ROUGE-2 | ROUGE-L | vs LEAD "
             "[95% CI] | marks |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in trained:
        lines.append(f"| {e.group.label} | {e.model} | {_link(e.folder, prefix)} | {e.profile} | "
                     f"{', '.join(map(str, sorted(e.group.seeds)))} | {_score(e)} | {_ci(e)} | {_score_of(e, 'rouge2')} | "
                     f"{_score_of(e, 'rougeL')} | {_vs(e.vs_lead())} | {_marks(e)} |")
    for (kind, label, _), es in leads.items():
        e = es[0]
        row = "LEAD row" if kind == "baseline" and e.model == "lead" else kind
        lines.append(f"| {e.group.label} ({row}) | {label} | {', '.join(_link(x.folder, prefix) for x in es)} | "
                     f"{e.profile} | - | {_f(e.mean())} | {_ci(e)} | {_score_of(e, 'rouge2')} | "
                     f"{_score_of(e, 'rougeL')} | | {_marks(e)} |")
    return lines


def _score_of(e: Entry, metric: str) -> str:
    m, sd = e.mean(metric), e.sd(metric)
    return _f(m) + (f" ± {sd:.2f}" if sd is not None else "")


def leaderboard_markdown(entries: list[Entry]) -> str:
    out = ["# Leaderboard", "",
           "Generated by `zoo report` from the run records under `results/` (`seq2seq_zoo/report/leaderboard.py`); "
           "do not edit by hand. One table per dataset, every run of every experiment folder, best ROUGE-1 first. "
           "Scores are ROUGE F1 x 100 from Google's `rouge-score` with stemming (on DialogSum the mean over its "
           "3 references), each run with its own decoding or, named `run/decoding`, the one its experiment file "
           "chose on the validation split (`[[decode]] headline`), mean ± standard deviation over seeds; the "
           "95% CI is a "
           "two-level bootstrap (seeds, then test examples), so it includes the variance between training runs. "
           "*vs LEAD* is the difference to the LEAD row of the same folder in ROUGE-1, on the same test examples, "
           "with the 95% two-level bootstrap CI of that difference (a CI that excludes 0 is a shown margin; "
           "[FINDINGS.md](FINDINGS.md) gives the seed-level tests). *below LEAD*: the run does not beat that row; "
           "*not converged*: the epoch cap ended training while validation loss was still falling. Folders "
           "differ in profile (model size and data), so compare rows within a folder first; "
           "[FINDINGS.md](FINDINGS.md) judges the published claims. Superseded results (`archive/`) "
           "are not listed.", ""]
    for d in _dataset_order(entries):
        es = [e for e in entries if e.dataset == d]
        out += [f"## {DATASET_NAMES.get(d, d)}", ""]
        if d in PUBLISHED:
            fig, system, source, scorer = PUBLISHED[d]
            out += [f"Published: {source}, {system}, ROUGE-1 {fig:.2f} ({scorer}).", ""]
        out += dataset_table(es) + [""]
    return "\n".join(out)


# -------------------------------------------------------------------------------------- headline table
HEADLINE_MIN_SEEDS = 3   # a run with fewer seeds heads its family only when no run of the family has this many


def _rank(e: Entry) -> tuple[bool, float]:
    return len(e.group.rows) >= HEADLINE_MIN_SEEDS, e.mean()


def best_per_family(entries: list[Entry]) -> list[Entry]:
    """Per dataset and model family, the trained run with the highest mean ROUGE-1 (its own decoding, or
    the experiment file's headline decoding: ``_records`` keeps no other) among the runs with at least
    ``HEADLINE_MIN_SEEDS`` seeds, or among all of the family's runs when none has that many: a one-seed
    run's lucky draw does not head a family that has a measured mean over seeds."""
    best: dict[tuple[str, str], Entry] = {}
    for e in entries:
        if e.kind != "trained" or e.mean() is None:
            continue
        key = (e.dataset, FAMILIES.get(e.model, e.model))
        if key not in best or _rank(e) > _rank(best[key]):
            best[key] = e
    order = _dataset_order(entries)
    return sorted(best.values(), key=lambda e: (order.index(e.dataset), -(e.mean() or 0.0)))


def headline_markdown(entries: list[Entry], prefix: str = "results/") -> str:
    lines = ["| dataset | best of family: run (model) | ROUGE-1 mean ± sd | seeds | 95% CI | over LEAD [95% CI] | "
             "results |", "|---|---|---|---|---|---|---|"]
    best = best_per_family(entries)
    for d in _dataset_order(entries):
        name = DATASET_NAMES.get(d, d)
        rows = [e for e in best if e.dataset == d]
        for e in rows:
            fam = FAMILIES.get(e.model, e.model)
            mark = " **below LEAD**" if e.below_lead() else ""
            mark += " (not converged)" if e.not_converged() else ""
            lines.append(f"| {name} | {fam}: `{e.group.label}` ({e.model}){mark} | {_score(e)} | {len(e.group.rows)} "
                         f"| {_ci(e)} | {_vs(e.vs_lead())} | {_link(e.folder, prefix)} |")
        lead = next((e.lead for e in rows if e.lead is not None), None)
        if lead is not None:
            le = Entry(next(e.folder for e in rows if e.lead is lead), lead, None)
            lines.append(f"| {name} | LEAD: {_short(_baseline_label(le))} | {_f(le.mean())} | - | "
                         f"{_ci(le)} | | {_link(le.folder, prefix)} |")
        if d in PUBLISHED:
            fig, system, source, scorer = PUBLISHED[d]
            lines.append(f"| {name} | published: {system}, {source} | {fig:.2f} | | | | {scorer} |")
    return "\n".join(lines)


def replace_between_markers(text: str, body: str, start: str = HEADLINE_START, end: str = HEADLINE_END) -> str:
    pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        raise ValueError(f"markers {start} ... {end} not found")
    return pat.sub(lambda _: f"{start}\n{body}\n{end}", text, count=1)


def between_markers(text: str, start: str = HEADLINE_START, end: str = HEADLINE_END) -> str | None:
    m = re.search(re.escape(start) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    return m.group(1) if m else None


# ---------------------------------------------------------------------------------------------- writing
def write_leaderboard(root: str | Path, readme: str | Path | None = None) -> list[Path]:
    """Write ``<root>/LEADERBOARD.md`` and, when ``readme`` has the headline markers, its headline table."""
    root = Path(root)
    entries = collect(root)
    if not entries:
        return []
    out = root / LEADERBOARD
    atomic_write_text(out, leaderboard_markdown(entries))
    written = [out]
    if readme is not None and Path(readme).is_file():
        text = Path(readme).read_text(encoding="utf-8")
        if HEADLINE_START in text:
            prefix = Path(root).resolve().relative_to(Path(readme).resolve().parent).as_posix() + "/" \
                if Path(root).resolve().is_relative_to(Path(readme).resolve().parent) else str(root) + "/"
            new = replace_between_markers(text, headline_markdown(entries, prefix))
            if new != text:
                atomic_write_text(Path(readme), new)
                written.append(Path(readme))
    return written


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m seq2seq_zoo.report.leaderboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="results")
    p.add_argument("--readme", default="README.md", help="file whose headline markers get the headline table")
    args = p.parse_args(argv)
    for path in write_leaderboard(args.results, args.readme):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
