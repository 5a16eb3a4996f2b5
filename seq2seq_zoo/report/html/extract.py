"""What an experiment's page shows, read from the files the runs stored: the records (grouped by
``report.groups``), ``predictions.jsonl`` and ``scores.jsonl`` of every seed, ``attention.json``,
``logs/train_log.jsonl`` where kept, and the test sources from the corpus when it is on this machine.

Nothing here trains or scores: the per-example ROUGE is the runs' own ``scores.jsonl``, the CIs are
``stats.group_ci`` (the tables' two-level bootstrap over seeds and examples), the findings are the
judged dicts of ``report.significance``.
"""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import numpy as np

from seq2seq_zoo import stats
from seq2seq_zoo.report import significance
from seq2seq_zoo.report.artifacts import read_attention
from seq2seq_zoo.report.groups import example_scores, is_deterministic, row_dir
from seq2seq_zoo.report.html import marks
from seq2seq_zoo.results import read_predictions
from seq2seq_zoo.utils import DamagedFile

SCORE_KEYS = ("rouge1", "rouge2", "rougeL")   # the per-example scores the side-by-side view carries
BUCKET_METRIC = "rouge1"
BUCKET_RESAMPLES = 1000                       # per-bucket CIs: fewer resamples than the tables' 2000
SOURCE_WORDS = 400                            # default cut of a shown source (whitespace tokens)


def _variant(row: dict) -> bool:
    """A row of a decoding variant of a run (``[[decode]]``), not the run's own decoding."""
    return row.get("_decode") not in (None, "default")


def group_runs(groups: list) -> list[dict]:
    """The page's runs: every group, then the starting runs of fine-tuned groups (``NAME@init``, read from
    the experiment that trained them) when their records are found."""
    out = [{"label": g.label, "group": g} for g in groups]
    have = {g.label for g in groups}
    for g in groups:
        if g.decode not in (None, "default") or not any(r.get("init_from") for r in g.rows):
            continue
        ig = significance.init_group(g)
        if ig is not None and ig.rows and f"{g.label}@init" not in have:
            have.add(f"{g.label}@init")
            out.append({"label": f"{g.label}@init", "group": ig})
    return out


def _source_cut(rows: list[dict]) -> int:
    cuts = [((r.get("spec") or {}).get("data") or {}).get("max_src_len") for r in rows]
    cuts = [c for c in cuts if isinstance(c, int) and c > 0]
    return max(cuts) if cuts else SOURCE_WORDS


def load_sources(rows: list[dict]) -> dict[str, dict]:
    """{dataset: {"sources": {id: text} or None, "note": why not, "cut": words shown}} for each dataset
    of the rows: the evaluation split read by the dataset's own reader from the folder the record names,
    else where ``zoo run`` would look (``--data-dir``, ``ZOO_DATA``, ./data, ../shared/data)."""
    out: dict[str, dict] = {}
    for r in rows:
        ds = r["data"]["dataset"]
        if ds in out:
            continue
        spec_data = (r.get("spec") or {}).get("data") or {}
        split = r["eval"].get("split", "test")
        try:
            from seq2seq_zoo.data.corpora import load_split, resolve_data_dir
            options = spec_data.get("options") or {}
            data_dir = resolve_data_dir(ds, config=r["data"].get("data_dir"), options=options)
            exs = load_split(ds, data_dir, split, spec_data.get("on_bad", "skip_empty"), options=options)
            out[ds] = {"sources": {str(e.id): e.source for e in exs}, "note": "",
                       "cut": _source_cut([x for x in rows if x["data"]["dataset"] == ds])}
        except Exception as e:  # noqa: BLE001 - no corpus here: the page shows the rest and says why
            msg = str(e).split("\n")[0]
            out[ds] = {"sources": None, "cut": 0,
                       "note": f"the {split} sources of {ds} are not on this machine ({msg[:300]}); the view "
                               "shows references and summaries, copied words need the sources "
                               f"(`zoo data download {ds}`, then `zoo report` again)"}
    return out


def _round(x: float | None, d: int = 1) -> float | None:
    """``x`` rounded to ``d`` decimals; None for a missing or non-finite value (the page's JSON is standard)."""
    return None if x is None or not np.isfinite(float(x)) else round(float(x), d)


def cut_words(text: str, n: int) -> tuple[str, bool]:
    """The first ``n`` whitespace tokens of ``text`` (its line breaks kept), and whether it was cut."""
    if n <= 0:
        return text, False
    parts = re.split(r"(\s+)", text)
    count, keep = 0, []
    for p in parts:
        if p and not p.isspace():
            count += 1
            if count > n:
                return "".join(keep).rstrip(), True
        keep.append(p)
    return text, False


def side_by_side(runs: list[dict], sources: dict[str, dict]) -> tuple[dict, dict]:
    """(examples per dataset, per run and seed the summaries and per-example scores aligned with them).

    examples: {dataset: {"ids", "src" (cut, or None), "cut" (per example: was it cut), "srclen" (whole
    source, words), "refs"}}; outputs: {label: {seed: {"pred": [...], "score": [[r1, r2, rL], ...]}}}."""
    examples: dict[str, dict] = {}
    outputs: dict[str, dict] = {}
    for run in runs:
        g = run["group"]
        ds = significance.dataset_of(g)
        per_seed = {}
        for row in g.rows:
            d = row_dir(row)
            try:
                preds = read_predictions(d) if (d / "predictions.jsonl").is_file() else []
            except DamagedFile:
                continue
            if not preds:
                continue
            ex = examples.get(ds)
            if ex is None:   # the first run of a dataset fixes its examples and their order
                src = sources.get(ds, {}).get("sources")
                ids = [str(p["id"]) for p in preds]
                cut = sources.get(ds, {}).get("cut", 0)
                texts = [src.get(i) if src else None for i in ids]
                cuts = [cut_words(t, cut) if t is not None else (None, False) for t in texts]
                ex = examples[ds] = {
                    "ids": ids, "refs": [list(p["references"]) for p in preds],
                    "src": [c[0] for c in cuts] if src else None, "cut": [int(c[1]) for c in cuts],
                    "srclen": [len(t.split()) if t is not None else None for t in texts]}
                ex["pos"] = {i: k for k, i in enumerate(ids)}
            pred = [None] * len(ex["ids"])
            for p in preds:
                k = ex["pos"].get(str(p["id"]))
                if k is not None:
                    pred[k] = p["prediction"]
            sc = example_scores(row)
            score = [[_round((sc.get(i) or {}).get(m)) for m in SCORE_KEYS] for i in ex["ids"]]
            per_seed[str(row["seed"])] = {"pred": pred, "score": score, "ds": ds}
        if per_seed:
            outputs[run["label"]] = per_seed
    for ex in examples.values():
        ex.pop("pos", None)
    return examples, outputs


def attention_maps(runs: list[dict]) -> dict:
    """{label: {seed: attention.json content}} for the seeds that stored one (rounded to 2 decimals)."""
    out: dict[str, dict] = {}
    for run in runs:
        for row in run["group"].rows:
            if _variant(row):   # a decoding variant shares its run's attention map
                continue
            try:
                a = read_attention(Path(row["_dir"]) / "attention.json")
            except (DamagedFile, ValueError, KeyError):
                a = None
            if not a or not a.get("maps"):
                continue
            out.setdefault(run["label"], {})[str(row["seed"])] = {
                "example_id": str(a.get("example_id")), "source_tokens": a.get("source_tokens") or [],
                "source_len": a.get("source_len"), "tokens": a.get("predicted_tokens") or a.get("output_tokens") or [],
                "p_gen": [_round(v, 3) for v in a["p_gen"]] if a.get("p_gen") else None,
                "cross": a.get("cross_attention"), "note": a.get("note", ""),
                "maps": {k: [[_round(v, 2) or 0.0 for v in row_] for row_ in m] for k, m in a["maps"].items()}}
    return out


# ----------------------------------------------------------------------------------------- buckets
def _turns(src: str) -> int:
    return sum(1 for line in src.splitlines() if re.match(r"^\s*[^:\n]{1,40}:\s", line))


def bucket_values(ex: dict, full_sources: dict | None) -> dict[str, list]:
    """Per example the bucketing quantities: reference length (words, mean over references), and with
    the sources: source length, compression ratio (source / reference words), share of novel reference
    words (``marks.novel_share``, mean over references), dialogue turns (lines "Speaker: ...")."""
    ref_len = [float(np.mean([len(r.split()) for r in refs])) if refs else None for refs in ex["refs"]]
    out = {"reference length (words)": ref_len}
    if full_sources:
        srcs = [full_sources.get(i) for i in ex["ids"]]
        out["source length (words)"] = [len(s.split()) if s is not None else None for s in srcs]
        out["compression ratio (source / reference words)"] = [
            len(s.split()) / rl if s is not None and rl else None for s, rl in zip(srcs, ref_len)]
        novel = []
        for s, refs in zip(srcs, ex["refs"]):
            v = [marks.novel_share(s, r) for r in refs] if s is not None else []
            v = [x for x in v if x is not None]
            novel.append(float(np.mean(v)) if v else None)
        out["share of novel reference words"] = novel
        turns = [_turns(s) if s is not None else None for s in srcs]
        if sum(1 for t in turns if t and t >= 2) >= 0.8 * len(turns):   # a dialogue corpus
            out["dialogue turns"] = turns
    return out


def _edges(vals: list[float], n: int = 4) -> list[float]:
    v = np.array([x for x in vals if x is not None], dtype=float)
    if v.size == 0:
        return []
    qs = np.unique(np.quantile(v, np.linspace(0, 1, n + 1)[1:-1]))
    return [float(q) for q in qs]


def _label(lo: float | None, hi: float | None, integer: bool) -> str:
    f = (lambda x: f"{x:.0f}") if integer else (lambda x: f"{x:.2f}")
    if lo is None:
        return f"<= {f(hi)}"
    if hi is None:
        return f"> {f(lo)}"
    return f"{f(lo)}-{f(hi)}" if not integer else f"{int(np.floor(lo)) + 1}-{f(hi)}"


def buckets(runs: list[dict], examples: dict, sources: dict) -> dict:
    """{dataset: [{"name", "buckets": [label...], "counts": [...], "rows": [{"label", "cells": [[mean, lo,
    hi] or None]}]}]}: each run's mean ROUGE-1 per bucket (the example quartiles of a quantity), with a
    95% CI from the two-level bootstrap over seeds and the bucket's examples (``stats.group_ci``)."""
    out: dict[str, list] = {}
    for ds, ex in examples.items():
        vals = bucket_values(ex, (sources.get(ds) or {}).get("sources"))
        pos = {i: k for k, i in enumerate(ex["ids"])}
        tables = []
        for name, v in vals.items():
            edges = _edges(v)
            integer = all(float(x).is_integer() for x in v if x is not None) and "length" in name or "turns" in name
            bounds = [None, *edges, None]
            which = [None if x is None else int(np.searchsorted(edges, x, side="left")) for x in v]
            labels = [_label(bounds[b], bounds[b + 1], integer) for b in range(len(bounds) - 1)]
            counts = [sum(1 for w in which if w == b) for b in range(len(labels))]
            rows = []
            for run in runs:
                g = run["group"]
                if significance.dataset_of(g) != ds:
                    continue
                per = g.per_example(BUCKET_METRIC)
                seeds = sorted(per)[:1] if is_deterministic(g.rows[0]) else sorted(per)
                cells = []
                for b in range(len(labels)):
                    ids = [i for i in ex["ids"] if which[pos[i]] == b and all(i in per[s] for s in seeds)]
                    if not ids or not seeds:
                        cells.append(None)
                        continue
                    x = np.array([[per[s][i] for i in ids] for s in seeds], dtype=float)
                    lo, hi = stats.group_ci(x, n_resamples=BUCKET_RESAMPLES)
                    cells.append([_round(x.mean(), 2), _round(lo, 2), _round(hi, 2)])
                rows.append({"label": run["label"], "seeds": len(seeds), "cells": cells})
            tables.append({"name": name, "buckets": labels, "counts": counts, "rows": rows})
        out[ds] = tables
    return out


# ------------------------------------------------------------------------------------------ curves
def curves(runs: list[dict]) -> list[dict]:
    """Line series for the curves: per trained run the mean over seeds of train and validation loss per
    epoch (record history), the validation metric by update (record ``val_curve``), the learning rate
    (``lr_curve``), and from ``logs/train_log.jsonl`` where kept the per-update training loss."""
    charts = {"loss per epoch (validation, token NLL)": ("epoch", "val_loss"),
              "training loss per epoch (with label smoothing)": ("epoch", "train_loss")}
    out = []
    for title, (xk, yk) in charts.items():
        series = []
        for run in runs:
            hs = [r["train"].get("history") or [] for r in run["group"].rows if not _variant(r)]
            hs = [h for h in hs if h]
            if not hs:
                continue
            n = min(len(h) for h in hs)
            ys = [[h[i].get(yk) for i in range(n)] for h in hs]
            pts = [(hs[0][i][xk], float(np.mean([y[i] for y in ys]))) for i in range(n)
                   if all(y[i] is not None and np.isfinite(y[i]) for y in ys)]
            if pts:
                series.append({"label": run["label"], "points": pts, "seeds": len(hs)})
        if series:
            out.append({"title": title, "x": xk, "y": yk.replace("_", " "), "series": series})
    from seq2seq_zoo.metrics import scale_of
    for key, title in (("val_curve", "validation metric by update (greedy decoding)"),):
        series = []
        for run in runs:
            rows = [r for r in run["group"].rows if not _variant(r) and r["train"].get(key)]
            if not rows:
                continue
            metric = rows[0]["train"].get("val_metric") or "rouge1"
            if metric == "loss":   # validated on loss alone: in the loss chart
                continue
            pts: dict[int, list] = {}
            for r in rows:
                for p in r["train"][key]:
                    v = p.get(f"val_{metric}")
                    if v is not None:
                        pts.setdefault(p["step"], []).append(scale_of(metric) * float(v))   # stored as 0-1
            if pts:
                series.append({"label": run["label"], "points": [(s, float(np.mean(v))) for s, v in sorted(pts.items())],
                               "seeds": len(rows)})
        if series:
            out.append({"title": title, "x": "update", "y": "score (ROUGE: F1 x 100)", "series": series})
    series = []
    for run in runs:
        r = next((r for r in run["group"].rows if r.get("lr_curve")), None)
        if r is not None:
            series.append({"label": run["label"], "points": [(float(a), float(b)) for a, b in r["lr_curve"]], "seeds": 1})
    if series:
        out.append({"title": "learning rate (first seed)", "x": "update", "y": "learning rate", "series": series})
    series = []
    for run in runs:
        for r in run["group"].rows[:1]:
            if _variant(r):
                continue
            try:
                from seq2seq_zoo.train.runlog import read_log
                log = read_log(Path(r["_dir"]), "train")
            except DamagedFile:
                log = []
            if log:
                by_step = {int(x["step"]): float(x["loss"]) for x in log if x.get("loss") is not None}
                pts = sorted(by_step.items())
                step = max(1, len(pts) // 400)   # at most ~400 points per line
                series.append({"label": run["label"], "points": pts[::step], "seeds": 1})
    if series:
        out.append({"title": "training loss per update (logs/train_log.jsonl, first seed)", "x": "update",
                    "y": "loss", "series": series})
    return out


# ---------------------------------------------------------------------------------------- scorer
def fingerprint(rows: list[dict], examples: dict) -> list[tuple[str, str]]:
    """What the ROUGE numbers on the page mean: (name, value) pairs."""
    try:
        version = metadata.version("rouge-score")
    except metadata.PackageNotFoundError:
        version = "not installed"
    settings = {}
    for r in rows:
        st = (r["eval"].get("settings") or {}).get("rouge")
        if st:
            settings.setdefault(tuple(sorted((k, str(v)) for k, v in st.items())), []).append(r["run"])
    out = [("rouge-score version", f"{version} (installed where this page was built; the scores come from the "
                                    "runs' records and scores.jsonl)")]
    for k, (st, runs) in enumerate(settings.items()):
        d = dict(st)
        who = "" if len(settings) == 1 else f" ({', '.join(sorted(set(runs))[:4])}{' ...' if len(set(runs)) > 4 else ''})"
        out += [(f"implementation{who}", d.get("implementation", "rouge-score")),
                (f"stemming{who}", "Porter stemmer" if d.get("stemmer") == "True" else "none"),
                (f"score{who}", d.get("score", "F1 x 100")),
                (f"multiple references{who}", d.get("multi_reference", "one reference")),
                (f"<unk> rule{who}", d.get("unk", "match (a predicted <unk> is read as the word 'unk')")),
                (f"ROUGE-Lsum sentences{who}", d.get("rougeLsum_sentences", "newlines"))]
    out.append(("tokenisation", "rouge-score's tokenizer: lowercase, every character other than a-z and 0-9 is a "
                                "space, then split on spaces (non-ASCII letters drop out)"))
    for ds, ex in examples.items():
        n = [len(r) for r in ex["refs"]]
        out.append((f"references per example ({ds})", f"{min(n)}" if min(n) == max(n) else f"{min(n)}-{max(n)}"))
    out.append(("copied-word marks", "a summary word is copied when its lowercase form occurs in the source "
                                     "(words: <unk> or runs of A-Z a-z 0-9; no stemming); see the legend"))
    return out


def copying(runs: list[dict], examples: dict, outputs: dict) -> dict[str, list]:
    """{dataset: [{"label", "seeds", shares...}]}: per run the mean over seeds of the mean over test
    examples of ``marks.copy_shares`` (the shown source against each summary), and a "references" row (how
    much the reference summaries themselves copy: mean over references)."""
    out: dict[str, list] = {}
    for ds, ex in examples.items():
        if not ex["src"]:
            continue
        rows = []
        shares = [marks.copy_shares(s, r) for s, refs in zip(ex["src"], ex["refs"]) for r in refs]
        rows.append(_share_row("references", 1, [[x for x in shares if x]]))
        for run in runs:
            per = outputs.get(run["label"])
            if not per or significance.dataset_of(run["group"]) != ds:
                continue
            seeds = [[marks.copy_shares(s, p) for s, p in zip(ex["src"], v["pred"]) if s is not None and p]
                     for v in per.values()]
            rows.append(_share_row(run["label"], len(seeds), [[x for x in sd if x] for sd in seeds]))
        out[ds] = rows
    return out


def _share_row(label: str, n: int, seeds: list[list[dict]]) -> dict:
    row = {"label": label, "seeds": n}
    for k in ("copied", "phrase", "novel", "unk", "rep"):
        means = [np.mean([x[k] for x in sd]) for sd in seeds if sd]
        row[k] = float(np.mean(means)) if means else None
    return row
