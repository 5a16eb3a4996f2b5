"""Report sections for runs that start from another run (``train.init_from``: SCST, a final coverage
phase) and for runs validated by a decode metric (``train.val_metric``): the seed paper's Table 28
(validation ROUGE-1 by iteration), Tables 29-30 (test scores and repetition, pre-trained vs fine-tuned)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from seq2seq_zoo.metrics import scale_of

COMPARED = [("rouge1", "R-1"), ("rouge2", "R-2"), ("rouge3", "R-3"), ("rougeL", "R-L"),
            ("repetition", "rep."), ("repetition_content", "rep. (no stop-words)"), ("unk_ratio", "UNK ratio")]


def _metric(r: dict) -> str | None:
    m = r["train"].get("val_metric")
    return m if m and m != "loss" else None


def val_metric_table(records: list[dict]) -> pd.DataFrame | None:
    """Validation score (as its metric shows it: ROUGE F1 x 100) at every validation, one column per run,
    indexed by update."""
    cols = {}
    for r in records:
        m = _metric(r)
        if m:
            cols[f"{r['run']} ({m})"] = {p["step"]: scale_of(m) * p[f"val_{m}"] for p in r["train"]["val_curve"]
                                         if f"val_{m}" in p}
    if not cols:
        return None
    df = pd.DataFrame(cols).sort_index()
    df.index.name = "update"
    return df


def val_metric_plot(records: list[dict], path: Path) -> Path | None:
    df = val_metric_table(records)
    if df is None:
        return None
    from seq2seq_zoo.report.plots import plt, save_figure
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for c in df.columns:
        s = df[c].dropna()
        ax.plot(s.index, s.values, marker="o", ms=3, label=c)
    ax.set_xlabel("update")
    ax.set_ylabel("validation score (x100, greedy)")
    from matplotlib.ticker import MaxNLocator

    from seq2seq_zoo.report.plots import context
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"validation score (train.val_metric) per update\n{context(records)}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _parent(r: dict) -> dict | None:
    init = r.get("init_from")
    if not init:
        return None
    rec = Path(init["checkpoint"]).parent.parent / "record.json"
    if not rec.is_file():
        return None
    from seq2seq_zoo.results import read_record
    from seq2seq_zoo.utils import DamagedFile
    try:
        return read_record(rec)
    except DamagedFile:  # named when its own experiment is reported; here the row just goes without it
        return None


def init_table(records: list[dict]) -> pd.DataFrame | None:
    """For each run started from another run's checkpoint: the starting run's test scores next to the
    fine-tuned run's (same test split; the decoding settings of each record are listed beside)."""
    rows = []
    for r in records:
        p = _parent(r)
        if p is None:
            continue
        for label, rec in (("start", p), ("fine-tuned", r)):
            sc = rec["eval"]["scores"]
            row = {"run": r["run"], "model": f"{rec['experiment']}/{rec['run']}", "stage": label}
            for k, name in COMPARED:
                if k in sc:
                    row[name] = sc[k]
            row["n"] = rec["eval"]["n_examples"]
            row["same decoding"] = rec["eval"]["decode"] == r["eval"]["decode"]
            rows.append(row)
    return pd.DataFrame(rows) if rows else None


def _rl_rule(s: dict) -> str:
    """How the RL term was taken: records made before the correctness fixes averaged log p and sampled every token."""
    if s.get("rl_logp") is None:
        return "loss_rl with mean_t log p(sample), <pad>/<bos> not masked in sampling (before the correctness fixes)"
    how = "sum_t log p(sample) (Paulus et al. eq. 15)" if s["rl_logp"] == "sum" else "mean_t log p(sample)"
    ml = ("loss_ml summed over each target's tokens, mean over the batch (eq. 14, the scale of loss_rl)"
          if s.get("rl_ml_scale") == "sequence" else "loss_ml as the mean over target tokens")
    return f"loss_rl with {how}; {ml}; sampling {s.get('sampling')}"


def objective_lines(records: list[dict]) -> list[str]:
    """One line per run with objective statistics (SCST: rewards, share of step time in rewards)."""
    out = []
    for r in records:
        s = r["train"].get("objective_stats") or {}
        if not s:
            continue
        share = s.get("reward_seconds", 0.0) / max(r["train"]["train_seconds"], 1e-9)
        out.append(f"- **{r['run']}** ({r['train'].get('objective')}): {s.get('steps')} updates; mean sample reward "
                   f"{s.get('mean_sample_reward', 0):.4f}, mean greedy reward {s.get('mean_greedy_reward', 0):.4f}; "
                   f"gamma {s.get('gamma_start')} -> {s.get('gamma_end')}; {_rl_rule(s)}; reward computation "
                   f"{s.get('reward_seconds', 0):.1f} s = {100 * share:.1f}% of training time; "
                   f"best validation {r['train'].get('val_metric')} "
                   f"{scale_of(r['train'].get('val_metric')) * (r['train'].get('best_score') or 0):.2f} "
                   f"at update {r['train']['best_step']}")
    return out
