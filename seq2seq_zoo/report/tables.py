"""Comparison tables from run records (pandas -> markdown, CSV, LaTeX)."""
from __future__ import annotations

import re

import pandas as pd

from seq2seq_zoo.names import run_group
from seq2seq_zoo.registry import metric_columns

def score_columns() -> list[tuple[str, str]]:
    """(score key, column label) of every table column the registered metrics declare, in table order
    (``seq2seq_zoo.metrics.Column``): a metric in a user file is a column like the built-in ones."""
    return [(c.key, c.label) for c in metric_columns("table")]


def results_table(records: list[dict]) -> pd.DataFrame:
    opts = [r["spec"].get("model_options", {}) for r in records]
    keys = sorted({k for o in opts for k in o})
    varying = [k for k in keys if len({repr(o.get(k)) for o in opts}) > 1]
    datasets = {r["data"]["dataset"] for r in records}
    trained = [x for x in records if not x.get("baseline")] or records
    reused = any("reused_from" in x for x in records)  # same_as: trained once, by another experiment
    rows = []
    for r, o in zip(records, opts):
        base = bool(r.get("baseline"))  # an extractive baseline: no training, no decoder
        sc = r["eval"]["scores"]
        tr = r["train"]
        row = {"run": r["run"]}
        if any("_decode" in x for x in records):  # re-decoded variants ([[decode]], zoo eval --decode)
            row["decode"] = r.get("_decode", "default")
        if len({decode_label(x["eval"]["decode"]) for x in trained}) > 1 or len(trained) < len(records):
            row["decoding"] = "extractive" if base else decode_label(r["eval"]["decode"])
        if len(datasets) > 1:
            row["dataset"] = r["data"]["dataset"]
        row["model"] = r["model"]
        for k in varying:
            v = o.get(k, "")
            row[k] = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v
        # schedule, label smoothing, lengths, ... where the trained runs differ
        row.update({k: ("" if base and k != "dataset" else v) for k, v in _varying_settings(r, trained).items()})
        row["seed"] = r["seed"]
        row["params"] = r["params"]["total"]
        for key, label in score_columns():
            if key in sc:
                row[label] = sc[key]
        copying = r["eval"].get("copying")
        if copying:  # copy models: mean p_gen over generated words, share of copied OOV words
            row["p_gen"] = copying["p_gen_mean"]
            row["copied OOV"] = copying["copied_oov_share"]
        row["best val loss"] = tr["best_val_loss"]
        row["epochs"] = None if base else tr["epochs_run"]
        row["converged"] = "" if base else convergence(r)
        row["train min"] = None if base else tr["train_seconds"] / 60
        row["tok/s"] = tr["tokens_per_s"]
        if reused:  # the source run without its -seedN suffix (the seed column has it), so seeds aggregate
            row["trained as"] = run_group(r.get("reused_from", {}).get("run", ""), r.get("seed"))
        rows.append(row)
    df = pd.DataFrame(rows)
    # score columns in the fixed order, whichever run had them first
    scores = [label for _, label in score_columns() if label in df.columns]
    rest = [c for c in df.columns if c not in scores]
    cut = rest.index("params") + 1
    return df[rest[:cut] + scores + rest[cut:]]


def convergence(r: dict) -> str:
    """'early-stopped' (validation stopped improving for train.patience evaluations), 'not converged' (the
    epoch, update or time cap ended training while the last validation loss was still the best: it was still
    falling), or 'cap reached' / 'time limit' (the epoch or update cap / train.max_minutes ended training
    after validation loss had stopped improving)."""
    tr = r["train"]
    if tr.get("stopped_early"):
        return "early-stopped"
    capped = "time limit" if tr.get("stopped_by_time") else "cap reached"
    vals = [h.get("val_loss") for h in tr.get("history", []) if h.get("val_loss") is not None]
    if tr.get("val_metric", "loss") != "loss" and tr.get("best_step") is not None:  # a score picks the best step
        return "not converged" if tr["best_step"] >= tr.get("steps", 0) else capped
    if not vals:
        return ""
    return "not converged" if vals[-1] <= min(vals) else capped


_SCHEDULE_KEYS = ("schedule", "lr", "warmup", "lr_factor")
_QUIET_KEYS = {"device", "threads", "checkpoint_every", "val_every", "precision", "max_minutes"}


def schedule_label(t: dict) -> str:
    if t["schedule"] == "noam":
        return f"noam, warmup {t['warmup']}, factor {t['lr_factor']}"
    if t["schedule"] == "warmup_constant":
        return f"warmup {t['warmup']} to lr {t['lr']}"
    return f"{t['schedule']}, lr {t['lr']}"


def _varying_settings(r: dict, records: list[dict]) -> dict:
    """train.* and data.* settings that differ between the runs of a table (the LR schedule as one column)."""
    out = {}
    trains = [x["spec"].get("train", {}) for x in records]
    if trains and all("schedule" in t for t in trains) and len({schedule_label(t) for t in trains}) > 1:
        out["schedule"] = schedule_label(r["spec"]["train"])
    for sec in ("train", "data"):
        if sec == "data" and len({x["data"]["dataset"] for x in records}) > 1:
            continue  # different corpora differ in their data settings anyway
        vals = [x["spec"].get(sec, {}) for x in records]
        for k in dict.fromkeys(k for v in vals for k in v):
            if k in _QUIET_KEYS or k in _SCHEDULE_KEYS or k == "dataset" or k in out:
                continue
            if len({repr(v.get(k)) for v in vals}) > 1:
                val = r["spec"].get(sec, {}).get(k, "")
                out[k] = "" if val is None else str(val) if isinstance(val, list) else val
    return out


def decode_label(d: dict) -> str:
    """Every decoding option in a few words (the exact formulas are in the settings lines): the method,
    then each registered decoding rule's ``label`` in label order."""
    from seq2seq_zoo.registry import decoding_rules
    head = "greedy" if d["method"] == "greedy" else f"beam {d['beam_size']}"
    return ", ".join([head, *(w for c in decoding_rules("label_order") if (w := c.label(d)))])


def params_table(records: list[dict]) -> pd.DataFrame:
    """Trainable parameters per component (the seed paper's Tables 5, 8, 11, 14); one row per run group
    (the seeds of a run, ``NAME-seedN``, share a row when their counts are equal)."""
    groups: dict[tuple, dict] = {}
    for r in records:
        base = run_group(r["run"], r.get("seed"))
        key = (base, r["model"], r["data"]["vocab_size"], tuple(sorted(r["params"].items())))
        groups.setdefault(key, {**r, "run": base})
    records = list(groups.values())
    # a component named like a leading column (a baseline's "model": 0) is renamed, not written over it
    rows = [{"run": r["run"], "model": r["model"], "vocab": r["data"]["vocab_size"],
             **{(f"{k} (params)" if k in ("run", "model", "vocab") else k): v for k, v in r["params"].items()}}
            for r in records]
    df = pd.DataFrame(rows)
    df[df.columns[3:]] = df[df.columns[3:]].fillna(0)
    df = df[[c for c in df.columns if c != "total"] + ["total"]]  # components first, whatever a model adds
    for c in df.columns[3:]:
        df[c] = df[c].map(lambda v: f"{int(v):,}")
    return df


def val_loss_table(records: list[dict]) -> pd.DataFrame:
    """Validation loss per epoch, one column per run (the seed paper's Table 33 layout)."""
    cols = {}
    for r in records:
        cols[r["run"]] = {h["epoch"]: h.get("val_loss") for h in r["train"]["history"]}
    df = pd.DataFrame(cols)
    df.index.name = "epoch"
    return df


def loss_table(records: list[dict]) -> pd.DataFrame:
    """Train and validation loss per run and epoch, long format (the layout of a training-log table:
    epoch, train loss, validation loss); runs with nothing to train have no rows."""
    metrics = list(dict.fromkeys(k for r in records for h in (r.get("train") or {}).get("history", [])
                                 for k in h if k.startswith("val_") and k != "val_loss"))  # train.val_metric
    rows = [{"run": r["run"], "epoch": h["epoch"], "train_loss": h.get("train_loss"), "val_loss": h.get("val_loss"),
             **{m: h.get(m) for m in metrics}}
            for r in records for h in (r.get("train") or {}).get("history", [])]
    return pd.DataFrame(rows, columns=["run", "epoch", "train_loss", "val_loss", *metrics])


def digits_of(col: str, default: int) -> int:
    """Decimals of a table column: a metric column's declared ``digits``, else by the column's kind."""
    col = str(col)
    declared = {c.label: c.digits for c in metric_columns("table") if c.digits is not None}
    if col in declared:
        return declared[col]
    if col.startswith("BERTScore") or "loss" in col or col.startswith("rep.") or col in ("UNK ratio", "copied OOV"):
        return 4
    if col in ("tok/s", "epochs"):
        return 0
    if col == "p_gen":
        return 3
    if col in ("train min", "len"):
        return 1
    return default


def fmt(df: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_float_dtype(out[c]):
            d = digits_of(c, digits)
            out[c] = out[c].map(lambda v, d=d: "" if pd.isna(v) else f"{v:.{d}f}")
        elif c == "params":
            out[c] = out[c].map(lambda v: f"{int(v):,}")
    return out


def to_markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    idx = df.index.name
    head = ([idx] if idx else []) + cols
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for i, row in df.iterrows():
        vals = ([str(i)] if idx else []) + ["" if pd.isna(v) else str(v) for v in row.tolist()]
        lines.append("| " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


# columns of the grouped table that are results or row names, never settings moved to the header line
_NOT_SETTINGS = {"run", "vs LEAD", "kind", "seeds", "seed", "params", "p_gen", "copied OOV", "best val loss", "epochs",
                 "converged", "train min", "tok/s", "trained as"}   # and every score column


def short_range(text: str, least: int = 4) -> str:
    """"4, 5, 6, ..., 30" -> "4-30"; "20, 25, ..., 80" -> "20-80 in steps of 5": an evenly spaced list of
    ``least`` or more whole numbers (e.g. LEAD's choose_k) as its range; anything else unchanged."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) < least or not all(re.fullmatch(r"-?\d+", p) for p in parts):
        return text
    xs = [int(p) for p in parts]
    step = xs[1] - xs[0]
    if step <= 0 or any(b - a != step for a, b in zip(xs, xs[1:])):
        return text
    return f"{xs[0]}-{xs[-1]}" + (f" in steps of {step}" if step > 1 else "")


def split_constant(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Setting columns with one value in every row that has one (blank rows: baselines without the
    setting) leave the table for a header line; columns blank in every row leave it silently. Returns
    (the table, the line; "" when nothing moved)."""
    if len(df) < 2:
        return df, ""
    drop, said = [], []
    scores = {label for _, label in score_columns()}
    for c in df.columns:
        vals = ["" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v).strip() for v in df[c].tolist()]
        vals = ["" if v in ("nan", "None") else v for v in vals]
        present = [v for v in vals if v != ""]
        if not present:
            drop.append(c)
        elif str(c) not in _NOT_SETTINGS | scores and len(set(present)) == 1:
            drop.append(c)
            names = df["run"].astype(str).tolist() if "run" in df.columns else []
            have = list(dict.fromkeys(r for r, v in zip(names, vals) if v != ""))
            lack = list(dict.fromkeys(r for r, v in zip(names, vals) if v == ""))
            only = "" if not lack or not names else f" (not {', '.join(lack)})" if len(lack) <= len(have) \
                else f" ({', '.join(have)} only)"
            said.append(f"{c} {short_range(present[0])}{only}")
    line = ("**Settings that do not vary** (left out of the table): " + "; ".join(said) + ".") if said else ""
    return df.drop(columns=drop), line
