"""The experiment table with one row per seed group: mean ± sd over seeds with 95% CIs, the ``kind`` and
``vs LEAD`` columns, the sentence about the LEAD row above it and the note on the intervals below it."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from seq2seq_zoo.registry import metric_columns
from seq2seq_zoo.report.groups import TABLE_RESAMPLES, Group, below_lead, ci_of, dataset_of


def grouped_table(df_rows: pd.DataFrame, rows: list[dict], groups: list[Group]) -> pd.DataFrame:
    """The per-seed table ``df_rows`` (one row per record, same order as ``rows``) -> one row per group:
    numeric columns as mean (± sd over seeds), ROUGE columns with their 95% CI, a ``seeds`` column, a
    ``kind`` column when baselines are present and a ``vs LEAD`` mark."""
    from seq2seq_zoo.report.tables import digits_of, score_columns
    label_of = {label: key for key, label in score_columns()}
    with_ci = {c.key for c in metric_columns("ci")}
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
                d = digits_of(c, 2) + (1 if c == "epochs" and len(vals) > 1 else 0)
                text = f"{vals.mean():.{d}f}"
                if len(vals) > 1:
                    text += f" ± {vals.std(ddof=1):.{d}f}"
                key = label_of.get(c)
                if key in with_ci:
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
