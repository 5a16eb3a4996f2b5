"""Report parts beyond the one-row-per-run table: decoding variants as extra rows (run x decode), the
seeds' Table 1 layout (evaluation split and training sample, ROUGE mean/max over references, BERTScore
P/R/F1 with the backbone named), and the fixed qualitative examples."""
from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pandas as pd

from seq2seq_zoo.config.decoding import describe  # noqa: F401  (re-exported: decoding in words)
from seq2seq_zoo.results import read_record

DEFAULT = "default"   # the decode name of a run's own decoding (config.DEFAULT_DECODE_NAME)


# ------------------------------------------------------------------------------------ variant rows
def decode_records(run_record: dict) -> tuple[list[dict], list[str]]:
    """(re-decoded variants of a run that belong to its current checkpoint, names of stale ones)."""
    out, stale = [], []
    for p in sorted(Path(run_record["_dir"]).glob("decodes/*/record.json")):
        d = read_record(p)  # a damaged one raises DamagedFile naming it
        if d.get("run_finished") != run_record.get("finished"):
            stale.append(d.get("decode_name", p.parent.name))
            continue
        d["_dir"] = str(p.parent)
        out.append(d)
    out.sort(key=lambda d: (d.get("order", 1000), d.get("decode_name", "")))
    return out, stale


def with_decodes(records: list[dict]) -> tuple[list[dict], list[str]]:
    """Each run record followed by its decoding variants as records of their own (same run, training
    and parameters; ``eval`` and ``train_sample`` from the variant, ``_decode`` its name); stale
    variants (decoded from an earlier checkpoint of a retrained run) are left out and named."""
    rows, stale_all = [], []
    for r in records:
        rows.append(r)
        variants, stale = decode_records(r)
        stale_all += [f"{r['run']}/{s}" for s in stale]
        for d in variants:
            v = dict(r)
            v.update(eval=d["eval"], train_sample=d.get("train_sample"), _decode=d["decode_name"],
                     _decode_dir=d["_dir"], _decode_record=d)
            rows.append(v)
    if any("_decode" in r for r in rows):
        for r in rows:
            r.setdefault("_decode", DEFAULT)
    return rows, stale_all


def variant_lines(rows: list[dict], stale: list[str]) -> list[str]:
    variants = [r for r in rows if r.get("_decode_record")]
    if not variants and not stale:
        return []
    lines = []
    seen: dict[str, list[str]] = {}
    for r in variants:
        seen.setdefault(f"`{r['_decode']}`: {describe(r['eval']['decode'])}", []).append(r["run"])
    n_runs = len({r["run"] for r in rows})
    for text, runs in seen.items():
        lines.append(f"- **Decoding variant** {text}" + ("" if len(runs) == n_runs else f" ({', '.join(runs)})"))
    if variants:
        secs = sum(r["_decode_record"].get("compute_seconds", 0.0) for r in variants)
        lines.append(f"- **Re-decoding**: the variants above were decoded from each run's best checkpoint without "
                     f"retraining (`[[decode]]` entries or `zoo eval RUN --decode ...`); {secs / 60:.1f} min of "
                     f"decoding and scoring for {len(variants)} row(s), not counted in the wall time above.")
    if stale:
        lines.append(f"- **Left out**: {', '.join(stale)} (decoded from an earlier checkpoint of a run trained "
                     "again since; `zoo run` with the [[decode]] entries, or `zoo eval --decode ... --force`, "
                     "decodes them again)")
    return lines


# ------------------------------------------------------------------------------ Table 1 layout
_T1 = [("rouge1", "R-1"), ("rouge2", "R-2"), ("rougeL", "R-L"), ("rouge1_max", "R-1 max"),
       ("rouge2_max", "R-2 max"), ("rougeL_max", "R-L max"), ("bertscore_p", "BERTScore P"),
       ("bertscore_r", "BERTScore R"), ("bertscore_f1", "BERTScore F1")]


def fraction_text(f: float) -> str:
    fr = Fraction(f).limit_denominator(1000)
    return f"1/{fr.denominator}" if fr.numerator == 1 else f"{100 * f:g}%"


def splits_table(rows: list[dict]) -> pd.DataFrame | None:
    """The seeds' Table 1: per run (and decode) one row for the evaluation split and one for the seeded
    training sample; ROUGE mean (and max where there are several references), BERTScore P/R/F1 and
    its backbone. None when no run has a training sample."""
    if not any(r.get("train_sample") for r in rows):
        return None
    out = []
    for r in rows:
        blocks = [(r["eval"]["split"], r["eval"])]
        ts = r.get("train_sample")
        if ts:
            blocks.append((f"train sample ({fraction_text(ts['fraction'])}, seed {ts['sample_seed']})", ts))
        for label, b in blocks:
            row = {"run": r["run"]}
            if "_decode" in r:
                row["decode"] = r["_decode"]
            row["split"] = label
            row["examples"] = b["n_examples"]
            for key, col in _T1:
                row[col] = b["scores"].get(key, float("nan"))
            row["BERTScore backbone"] = (b["settings"].get("bertscore") or {}).get("backbone", "")
            out.append(row)
    df = pd.DataFrame(out)
    empty = [c for c in df.columns if df[c].isna().all() or (df[c] == "").all()]  # metrics not computed
    return df[[c for c in df.columns if c not in empty]]


def splits_notes(rows: list[dict]) -> list[str]:
    ts = [r["train_sample"] for r in rows if r.get("train_sample")]
    notes = []
    if ts:
        notes.append(f"- The training sample is {fraction_text(ts[0]['fraction'])} of the {ts[0].get('of')} training "
                     "examples the run trained on, drawn without replacement by a generator seeded with the run "
                     "seed (the same seed gives the same sample); it has one reference per example, so its max "
                     "columns are empty.")
    backbones = sorted({(r["eval"]["settings"].get("bertscore") or {}).get("backbone", "") for r in rows} - {""})
    if backbones:
        notes.append(f"- BERTScore backbone: {', '.join(backbones)}"
                     + ("" if any("roberta-large" in b for b in backbones) else
                        "; roberta-large (the seeds' backbone) was not in the local Hugging Face cache, so these "
                        "values are not comparable with published roberta-large BERTScores"))
    return notes


# ---------------------------------------------------------------------------------- examples
def _quote(text: str, limit: int = 3000) -> str:
    t = text.strip()
    more = ""
    if len(t) > limit:
        more, t = f" ... ({len(t) - limit:,} more characters)", t[:limit]
    return "\n".join("> " + line for line in (t + more).splitlines())


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "(empty)"


def examples_markdown(rows: list[dict]) -> list[str]:
    """The fixed examples every run shows: input, reference(s), and each run's (and decode's) output."""
    shown: dict[tuple[str, str], dict] = {}
    selection = None
    for r in rows:
        p = Path(r.get("_decode_dir") or r["_dir"]) / "examples.json"
        if not p.is_file():
            continue
        ex = json.loads(p.read_text(encoding="utf-8"))
        selection = selection or ex.get("selection")
        for e in ex["examples"]:
            item = shown.setdefault((e["split"], e["id"]), {"input": e["input"], "references": e["references"],
                                                            "outputs": []})
            item["outputs"].append((r["run"], r.get("_decode"), e["output"]))
    if not shown:
        return []
    att = set()
    for r in rows:
        a = Path(r["_dir"]) / "attention.json"
        if "_decode_record" not in r and a.is_file():
            att.add(f"`{json.loads(a.read_text(encoding='utf-8')).get('example_id')}`")
    lines = ["## Examples", "",
             f"The same examples for every run ({selection}); outputs of each run's best checkpoint."
             + (f" Cross-attention heat maps of the last decoder layer (plots/attention_RUN.png) are drawn for "
                f"test example {', '.join(sorted(att))}." if att else ""), ""]
    with_decode = any(d is not None for item in shown.values() for _, d, _ in item["outputs"])
    for (split, i), item in shown.items():
        lines += [f"### {split} example `{i}`", "", "**Input**", "", _quote(item["input"]), ""]
        refs = item["references"]
        if len(refs) == 1:
            lines += [f"**Reference**: {_cell(refs[0])}", ""]
        else:
            lines += ["**References**:", ""] + [f"{k}. {_cell(x)}" for k, x in enumerate(refs, 1)] + [""]
        lines += ["| run | decode | output |" if with_decode else "| run | output |",
                  "|---|---|---|" if with_decode else "|---|---|"]
        for run, dec, out in item["outputs"]:
            lines.append(f"| {run} | {dec} | {_cell(out)} |" if with_decode else f"| {run} | {_cell(out)} |")
        lines.append("")
    return lines
