"""Plots from run records: validation loss per epoch, LR schedule, positional encodings, attention."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _save(fig, path: Path) -> Path:
    from seq2seq_zoo.utils import atomic_write_bytes
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def val_loss(records: list[dict], path: Path) -> Path | None:
    """Loss per epoch; a run trained with several seeds is one line (the mean) with a band (min-max
    over seeds). Baselines, which have no training, are left out."""
    import re
    groups: dict[str, list[dict]] = {}
    for r in records:
        if r["train"].get("history"):
            groups.setdefault(re.sub(rf"-seed{r['seed']}$", "", r["run"]), []).append(r)
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, rs in groups.items():
        for key, style in (("val_loss", dict(marker="o")), ("train_loss", dict(ls="--", alpha=0.5))):
            n = min(len(r["train"]["history"]) for r in rs)  # epochs every seed reached (early stopping)
            ep = [h["epoch"] for h in rs[0]["train"]["history"][:n]]
            v = np.array([[np.nan if h.get(key) is None else h[key] for h in r["train"]["history"][:n]] for r in rs],
                         dtype=float)
            kw = dict(style, color=ax.lines[-1].get_color()) if key == "train_loss" else style
            seeds = f", {len(rs)} seeds" if len(rs) > 1 else ""
            ax.plot(ep, np.nanmean(v, 0), label=f"{name} ({'val' if key == 'val_loss' else 'train'}{seeds})", **kw)
            if len(rs) > 1:
                ax.fill_between(ep, np.nanmin(v, 0), np.nanmax(v, 0), color=ax.lines[-1].get_color(), alpha=0.15)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (token NLL; train includes label smoothing)")
    ax.set_title(f"{records[0]['experiment']}: loss per epoch" + (" (bands: min-max over seeds)"
                                                                   if any(len(v) > 1 for v in groups.values()) else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def scores(groups, path: Path, metrics=(("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"))) -> Path | None:
    """Bar chart of ROUGE per run with 95% bootstrap CIs as error bars (seeds pooled per example), the
    LEAD row as a dashed line per metric; oracle rows hatched (an upper bound, not a system)."""
    from seq2seq_zoo.report.significance import below_lead, ci_of
    groups = [g for g in groups if g.mean("rouge1") is not None]
    if not groups:
        return None
    leads = below_lead(groups)[0]
    lead = next(iter(leads.values())) if len(leads) == 1 else None  # one dashed line per metric: one dataset only
    fig, ax = plt.subplots(figsize=(max(6.4, 0.55 * len(groups) * len(metrics)), 4))
    width = 0.8 / len(metrics)
    x = np.arange(len(groups))
    for k, (key, label) in enumerate(metrics):
        means = np.array([g.mean(key) or 0.0 for g in groups])
        err = np.zeros((2, len(groups)))
        for j, g in enumerate(groups):
            b = ci_of(g, key)
            if b is not None:
                err[:, j] = [max(means[j] - b[0], 0), max(b[1] - means[j], 0)]
        bars = ax.bar(x + (k - (len(metrics) - 1) / 2) * width, means, width, yerr=err, capsize=2, label=label)
        for j, g in enumerate(groups):
            if g.kind == "upper bound":
                bars[j].set_hatch("//")
        if lead is not None and lead.mean(key) is not None:
            ax.axhline(lead.mean(key), ls="--", lw=0.8, color=bars[0].get_facecolor())
    ax.set_xticks(x)
    ax.set_xticklabels([g.label + (f" ({len(g.rows)} seeds)" if len(g.rows) > 1 else "") for g in groups],
                       rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("F1 x 100")
    ax.set_title("test scores with 95% bootstrap CIs" + ("; dashed: the LEAD row" if lead is not None else ""),
                 fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, path)


def lr_schedule(records: list[dict], path: Path) -> Path | None:
    records = [r for r in records if r.get("lr_curve")]
    if not records:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for r in records:
        c = np.array(r["lr_curve"])
        ax.plot(c[:, 0], c[:, 1], label=r["run"])
    ax.set_xlabel("update step")
    ax.set_ylabel("learning rate")
    ax.set_title("learning-rate schedule")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def positional(records: list[dict], path: Path) -> Path | None:
    tabs = []
    for r in records:
        p = Path(r["_dir"]) / "positional.json"
        if p.exists():
            t = json.loads(p.read_text())
            name = next((k for k in t if "encoder" in k), next(iter(t)))
            tabs.append((f"{r['run']}: {name}", np.array(t[name])))
    if not tabs:
        return None
    fig, axes = plt.subplots(1, len(tabs), figsize=(4.2 * len(tabs), 3.6), squeeze=False)
    for ax, (title, tab) in zip(axes[0], tabs):
        im = ax.imshow(tab, aspect="auto", cmap="RdBu", vmin=-np.abs(tab).max(), vmax=np.abs(tab).max())
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("dimension")
        ax.set_ylabel("position")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return _save(fig, path)


def attention(record: dict, path: Path, max_src: int = 80) -> Path | None:
    p = Path(record["_dir"]) / "attention.json"
    if not p.exists():
        return None
    a = json.loads(p.read_text())
    # the map the model names with its ``cross_attention`` hook; files written before the field existed:
    # the Transformer's and RNNs' naming ("..._decenc_att")
    name = a["cross_attention"] if "cross_attention" in a else next((k for k in a["maps"] if "decenc" in k), None)
    if name is None:
        return None
    m = np.array(a["maps"][name])[:, :max_src]
    src = a["source_tokens"][:max_src]
    p_gen = a.get("p_gen")
    # rows: the step predicting predicted_tokens[t] (older files: labelled by the decoder input)
    out = (a.get("predicted_tokens") or a["output_tokens"])[: m.shape[0]]
    size = (max(6, 0.16 * len(src)) + (0.8 if p_gen else 0), max(3, 0.22 * len(out)))
    if p_gen:
        fig, (ax, axp) = plt.subplots(1, 2, figsize=size, gridspec_kw={"width_ratios": [max(len(src), 1), 3]},
                                      sharey=True)
    else:
        fig, ax = plt.subplots(figsize=size)
    ax.imshow(m, aspect="auto", cmap="viridis", vmin=0, vmax=max(float(m.max()), 1e-9))
    ax.set_xticks(range(len(src)))
    ax.set_xticklabels(src, rotation=90, fontsize=6)
    ax.set_yticks(range(len(out)))
    ax.set_yticklabels(out, fontsize=7)
    ax.set_title(f"{record['run']}: {name} (heads averaged), example {a['example_id']}", fontsize=9)
    if p_gen:
        pg = np.array(p_gen[: m.shape[0]])[:, None]
        axp.imshow(pg, aspect="auto", cmap="magma", vmin=0, vmax=1)
        for t, v in enumerate(pg[:, 0]):
            axp.text(0, t, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if v < 0.6 else "k")
        axp.set_xticks([0])
        axp.set_xticklabels(["p_gen"], fontsize=7)
        fig.tight_layout()
    return _save(fig, path)
