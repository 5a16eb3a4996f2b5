"""``results/leaderboard.json``, ``results/LEADERBOARD.md`` and the README's headline table, rebuilt from
the committed run records alone, every choice made on stored validation scores (``report/selection.py``).

``leaderboard.json`` holds one row per dataset, task and model family (and the LEAD row): the candidate
(results folder, run, decoding) with the best validation mean among the family's runs with enough seeds,
across results folders, with its test mean and every candidate considered. The headline table is built
from those rows. ``LEADERBOARD.md`` has one table per dataset with every trained run of every experiment
folder, each with the decoding its validation scores chose (mean ± sd over seeds, the 95% two-level
bootstrap CI (seeds, then test examples), the difference to the folder's own LEAD row), the LEAD and
oracle rows, and the marks ``below LEAD`` and ``not converged``. Archive folders (``results/archive/``),
stale records and records git does not track (``report/scope.py``) are left out.

    python -m seq2seq_zoo.report.leaderboard [--results results] [--readme README.md]
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seq2seq_zoo import stats
from seq2seq_zoo.report import selection, significance
from seq2seq_zoo.report.comparators import DATASET_NAMES, FAMILIES, PUBLISHED, row_key  # noqa: F401 (re-exported)
from seq2seq_zoo.report.extras import with_decodes
from seq2seq_zoo.report.scope import tracked_filter
from seq2seq_zoo.report.tables import convergence
from seq2seq_zoo.report.targets import target_rows, targets_markdown
from seq2seq_zoo.results import read_record
from seq2seq_zoo.utils import DamagedFile, atomic_write_text, dumps_json

LEADERBOARD = "LEADERBOARD.md"
LEADERBOARD_JSON = "leaderboard.json"
ARCHIVE_DIRS = significance.ARCHIVE_DIRS   # folders of superseded results: never on the leaderboard
METRIC = "rouge1"
HEADLINE_START = "<!-- headline:start -->"
HEADLINE_END = "<!-- headline:end -->"


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
    def task(self) -> str:
        return "headline" if self.dataset.endswith("_headline") else "summary"

    @property
    def family(self) -> str:
        return "LEAD" if self.model == "lead" and self.kind == "baseline" else FAMILIES.get(self.model, self.model)

    @property
    def model(self) -> str:
        return self.group.rows[0]["model"]

    @property
    def decoding(self) -> str | None:
        """The decoding variant's name, None for the run's own."""
        return None if self.group.decode in (None, "default") else self.group.decode

    def validation(self) -> dict[str, dict]:
        """{basis: {"mean", "sd", "n_examples"}}: the stored validation values (``selection.values``)."""
        if "validation" not in self.group.cache:
            self.group.cache["validation"] = selection.values(self.group.rows)
        return self.group.cache["validation"]

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


def _records(exp_dir: Path, tracked=None) -> list[dict]:
    """The readable, current run records of a folder that git tracks (``tracked``; a damaged one is named by
    its folder's report), each followed by its decoding variants as rows of their own (``with_decodes``)."""
    out = []
    for p in sorted(exp_dir.glob("*/record.json")):
        if tracked is not None and not tracked(p):
            continue
        try:
            rec = read_record(p)
        except DamagedFile:
            continue
        if not rec.get("stale"):
            rec["_dir"] = str(p.parent)
            out.append(rec)
    out.sort(key=lambda r: (r.get("order", 0), r.get("run", "")))
    rows, _ = with_decodes(out)
    return rows


def headline_decode(exp_dir: Path) -> str | None:
    """The ``[[decode]]`` entry the experiment file marks ``headline = true``, as ``zoo run`` noted it."""
    try:
        _, meta = significance.load_declared(exp_dir)
    except DamagedFile:   # named by the folder's own report
        return None
    return meta.get("headline_decode")


def collect(root: Path) -> list[Entry]:
    """Every (run, decoding) group of every experiment folder under ``root``, from the records git tracks."""
    root = Path(root)
    out: list[Entry] = []
    tracked = tracked_filter(root)
    for d in experiment_dirs(root):
        records = _records(d, tracked)
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


def _val(e: Entry) -> str:
    """The validation value the row was chosen on, with its basis, e.g. ``29.32`` or ``3.931 (loss)``."""
    v = e.validation()
    basis = selection.first_basis(v)
    return selection.basis_text(v[basis]["mean"], basis) if basis else "-"


def dataset_table(entries: list[Entry], prefix: str = "") -> list[str]:
    trained = sorted((e for e in per_run(entries) if e.kind == "trained"), key=lambda e: -(e.mean() or 0.0))
    leads: dict[tuple, list[Entry]] = {}
    for e in entries:   # one line per distinct LEAD row (the same baseline scored alike in several folders)
        if e.kind != "trained":
            leads.setdefault((e.kind, _baseline_label(e), _f(e.mean())), []).append(e)
    lines = ["| run | model | experiment | profile | seeds | validation | ROUGE-1 | 95% CI | ROUGE-2 | ROUGE-L | "
             "vs LEAD [95% CI] | marks |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in trained:
        lines.append(f"| {e.group.label} | {e.model} | {_link(e.folder, prefix)} | {e.profile} | "
                     f"{', '.join(map(str, sorted(e.group.seeds)))} | {_val(e)} | {_score(e)} | {_ci(e)} | "
                     f"{_score_of(e, 'rouge2')} | {_score_of(e, 'rougeL')} | {_vs(e.vs_lead())} | {_marks(e)} |")
    for (kind, label, _), es in leads.items():
        e = es[0]
        row = "LEAD row" if kind == "baseline" and e.model == "lead" else kind
        lines.append(f"| {e.group.label} ({row}) | {label} | {', '.join(_link(x.folder, prefix) for x in es)} | "
                     f"{e.profile} | - | {_val(e)} | {_f(e.mean())} | {_ci(e)} | {_score_of(e, 'rouge2')} | "
                     f"{_score_of(e, 'rougeL')} | | {_marks(e)} |")
    return lines


def _score_of(e: Entry, metric: str) -> str:
    m, sd = e.mean(metric), e.sd(metric)
    return _f(m) + (f" ± {sd:.2f}" if sd is not None else "")


def leaderboard_markdown(entries: list[Entry], rows: list[dict] | None = None) -> str:
    rows = choose_rows(entries) if rows is None else rows
    out = ["# Leaderboard", "",
           "Generated by `zoo report` from the committed run records under `results/` "
           "(`seq2seq_zoo/report/leaderboard.py`); do not edit by hand. One table per dataset, every run of every "
           "experiment folder, best ROUGE-1 first. Scores are ROUGE F1 x 100 from Google's `rouge-score` with "
           "stemming (on DialogSum the mean over its 3 references), mean ± standard deviation over seeds. Each "
           "run is shown with the decoding its stored validation scores choose (named `run/decoding`; the "
           "run's own when no other decoding of it has a validation score), and *validation* is the value it "
           "was chosen on: validation ROUGE-1 of that decoding, `(training)` the training-time greedy "
           "validation ROUGE-1, `(loss)` the validation loss (see [docs/statistics.md](../docs/statistics.md"
           "#choosing-on-validation)); no test score chooses anything. The 95% CI is a two-level bootstrap "
           "(seeds, then test examples), so it includes the variance between training runs. *vs LEAD* is the "
           "difference to the LEAD row of the same folder in ROUGE-1, on the same test examples, with the 95% "
           "two-level bootstrap CI of that difference (a CI that excludes 0 is a shown margin; "
           "[FINDINGS.md](FINDINGS.md) gives the seed-level tests). *below LEAD*: the run does not beat that row; "
           "*not converged*: the epoch cap ended training while validation loss was still falling. Folders "
           "differ in profile (model size and data), so compare rows within a folder first. Superseded results "
           "(`archive/`) are not listed.", "", "## Targets", "",
           "Each dataset's target, judged on the row chosen on validation for the family it names "
           "(`seq2seq_zoo/report/targets.py`):", "", targets_markdown(target_rows(rows)), ""]
    for d in _dataset_order(entries):
        es = [e for e in entries if e.dataset == d]
        out += [f"## {DATASET_NAMES.get(d, d)}", ""]
        if d in PUBLISHED:
            out += [f"Published: {_published_text(d)}.", ""]
        out += dataset_table(es) + [""]
        marks = [r for r in rows if row_key(r) == d and r.get("mark") not in (None, "agrees")]
        for r in marks:
            out += [f"- `{r['folder']}` marks decoding `{r['marked_decoding']}` as its headline for `{r['run']}`: "
                    + ("no stored validation score confirms it, so the run's own decoding is shown."
                       if r["mark"] == "unverified" else
                       f"the validation scores choose `{r['decoding'] or 'its own decoding'}` instead.")]
        out += [""] if marks else []
    return "\n".join(out)


# ------------------------------------------------------------------------------ choosing on validation
FAMILY_ORDER = ["pointer-generator", "Transformer", "recurrent"]


def per_run(entries: list[Entry]) -> list[Entry]:
    """Per results folder and run, the decoding its validation scores choose (``selection.choose`` over the
    run's decodings; the run's own when none of the others has a validation value)."""
    by: dict[tuple, list[Entry]] = {}
    for e in entries:
        by.setdefault((e.folder, e.group.name, e.kind), []).append(e)
    out = []
    for es in by.values():
        own = next((e for e in es if e.decoding is None), es[0])
        win, _, _ = selection.choose(es, lambda e: e.group.rows, lambda e: e.group.label) if len(es) > 1 else (own,
                                                                                                              None, [])
        out.append(win or own)
    return out


def _candidate(e: Entry) -> dict:
    v = e.validation()
    basis = selection.first_basis(v)
    return {"folder": e.folder, "run": e.group.name, "decoding": e.decoding, "seeds": len(e.group.rows),
            "validation_mean": v[basis]["mean"] if basis else None, "validation_basis": basis,
            "validation": v}


def _row(d: str, family: str, win: Entry | None, basis: str | None, cands: list[Entry], root: Path | None,
         intervals: bool = True) -> dict:
    base = d[: -len("_headline")] if d.endswith("_headline") else d
    row = {"dataset": base, "task": "headline" if d.endswith("_headline") else "summary", "family": family,
           "folder": None, "run": None, "decoding": None, "model": None, "seeds": 0, "seed_list": [],
           "validation_basis": basis, "validation_mean": None, "validation_n": None, "test_mean": None,
           "test_sd": None, "test_ci": None, "over_lead": None, "below_lead": False, "not_converged": 0,
           "marked_decoding": None, "mark": None,
           "candidates": [_candidate(c) for c in sorted(cands, key=lambda c: (c.folder, c.group.label))]}
    if win is None:
        row["reason"] = ("no candidate has a stored validation score" if cands else "no candidate")
        return row
    v = win.validation()[basis]
    ci, vs = (win.ci(), win.vs_lead()) if intervals else (None, None)
    if family == "LEAD":
        row["lead_label"] = _baseline_label(win)
    row.update(folder=win.folder, run=win.group.name, decoding=win.decoding, model=win.model,
               seeds=len(win.group.rows), seed_list=sorted(win.group.seeds), validation_mean=v["mean"],
               validation_n=v["n_examples"], test_mean=win.mean(), test_sd=win.sd(),
               test_ci=list(ci) if ci else None, over_lead=list(vs) if vs else None,
               below_lead=win.below_lead(), not_converged=win.not_converged())
    if root is not None and win.kind == "trained":
        marked = headline_decode(root / win.folder)
        runs_with = {c.decoding for c in cands if c.folder == win.folder and c.group.name == win.group.name}
        if marked and marked in runs_with:
            row["marked_decoding"] = marked
            m = next(c for c in cands if c.folder == win.folder and c.group.name == win.group.name
                     and c.decoding == marked)
            row["mark"] = ("agrees" if win.decoding == marked else
                           "disagrees" if "decoded" in m.validation() else "unverified")
    return row


def choose_rows(entries: list[Entry], root: Path | None = None, intervals: bool = True) -> list[dict]:
    """The rows of ``leaderboard.json``: per dataset (and task) and model family, the validation winner
    among the trained (run, decoding) candidates of every folder; then the dataset's LEAD row, the one of
    the folder most of its chosen rows come from (the same test examples as they; ties: the first family).
    ``intervals=False`` leaves the bootstrap CIs out (``test_ci``, ``over_lead``: None), for a quick check."""
    rows: list[dict] = []
    for d in _dataset_order(entries):
        es = [e for e in entries if e.dataset == d]
        fams = list(dict.fromkeys(e.family for e in es if e.kind == "trained"))
        fams.sort(key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else len(FAMILY_ORDER), f))
        chosen = []
        for fam in fams:
            cands = [e for e in es if e.kind == "trained" and e.family == fam]
            win, basis, _ = selection.choose(cands, lambda e: e.group.rows, lambda e: f"{e.folder}:{e.group.label}")
            rows.append(_row(d, fam, win, basis, cands, root, intervals))
            if win is not None:
                chosen.append(win)
        leads = [e for e in es if e.family == "LEAD"]
        if not leads:
            continue
        folders = [e.folder for e in chosen]
        pick = max(folders, key=lambda f: (folders.count(f), -folders.index(f))) if folders else None
        lead, _, _ = selection.choose([e for e in leads if e.folder == pick] or leads, lambda e: e.group.rows,
                                      lambda e: f"{e.folder}:{e.group.label}")
        v = lead.validation() if lead is not None else {}
        rows.append(_row(d, "LEAD", lead, "decoded" if "decoded" in v else None, leads, root, intervals)
                    if lead is not None and v else _row(d, "LEAD", None, None, leads, root))
    return rows


# -------------------------------------------------------------------------------------- headline table
def _published_text(d: str) -> str:
    fig, system, source, scorer = PUBLISHED[d]
    return f"{source}, {system}, ROUGE-1 {fig:.2f} ({scorer})"


def _fmt_mean(r: dict) -> str:
    return _f(r["test_mean"]) + (f" ± {r['test_sd']:.2f}" if r["test_sd"] is not None else "")


def _fmt_val(r: dict) -> str:
    return "" if r["validation_mean"] is None else selection.basis_text(r["validation_mean"], r["validation_basis"])


def headline_markdown(rows: list[dict], prefix: str = "results/") -> str:
    lines = ["| dataset | chosen on validation: run (model) | validation | ROUGE-1 mean ± sd | seeds | 95% CI | "
             "over LEAD [95% CI] | results |", "|---|---|---|---|---|---|---|---|"]
    for d in dict.fromkeys(row_key(r) for r in rows):
        name = DATASET_NAMES.get(d, d)
        for r in (r for r in rows if row_key(r) == d):
            if r["run"] is None:
                lines.append(f"| {name} | {r['family']}: none chosen ({r['reason']}; {len(r['candidates'])} "
                             "candidates) | | | | | | |")
                continue
            ci = f"[{r['test_ci'][0]:.2f}, {r['test_ci'][1]:.2f}]" if r["test_ci"] else ""
            if r["family"] == "LEAD":
                lines.append(f"| {name} | LEAD: {_short(r['lead_label'])} | {_fmt_val(r)} | {_f(r['test_mean'])} | - | "
                             f"{ci} | | {_link(r['folder'], prefix)} |")
                continue
            label = r["run"] + (f"/{r['decoding']}" if r["decoding"] else "")
            mark = " **below LEAD**" if r["below_lead"] else ""
            mark += " (not converged)" if r["not_converged"] else ""
            vs = _vs(tuple(r["over_lead"])) if r["over_lead"] else ""
            lines.append(f"| {name} | {r['family']}: `{label}` ({r['model']}){mark} | {_fmt_val(r)} | "
                         f"{_fmt_mean(r)} | {r['seeds']} | {ci} | {vs} | {_link(r['folder'], prefix)} |")
        if d in PUBLISHED:
            fig, system, source, scorer = PUBLISHED[d]
            lines.append(f"| {name} | published: {system}, {source} | | {fig:.2f} | | | | {scorer} |")
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
    """Write ``<root>/leaderboard.json`` (the rows chosen on validation, with their candidates),
    ``<root>/LEADERBOARD.md`` and, when ``readme`` has the headline markers, its headline table built from
    those rows. Files are rewritten only when their content changes."""
    root = Path(root)
    entries = collect(root)
    if not entries:
        return []
    rows = choose_rows(entries, root)
    written = []
    for out, text in ((root / LEADERBOARD_JSON, dumps_json({"metric": "rouge1", "min_seeds": selection.MIN_SEEDS,
                                                            "bases": selection.BASIS_TEXT, "rows": rows,
                                                            "targets": target_rows(rows)}) + "\n"),
                      (root / LEADERBOARD, leaderboard_markdown(entries, rows))):
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            atomic_write_text(out, text)
        written.append(out)
    if readme is not None and Path(readme).is_file():
        text = Path(readme).read_text(encoding="utf-8")
        if HEADLINE_START in text:
            prefix = Path(root).resolve().relative_to(Path(readme).resolve().parent).as_posix() + "/" \
                if Path(root).resolve().is_relative_to(Path(readme).resolve().parent) else str(root) + "/"
            new = replace_between_markers(text, headline_markdown(rows, prefix))
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
