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


def val_loss(records: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for r in records:
        h = r["train"]["history"]
        ax.plot([x["epoch"] for x in h], [x.get("val_loss") for x in h], marker="o", label=f"{r['run']} (val)")
        ax.plot([x["epoch"] for x in h], [x.get("train_loss") for x in h], ls="--", alpha=0.5,
                color=ax.lines[-1].get_color(), label=f"{r['run']} (train)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (token NLL; train includes label smoothing)")
    ax.set_title(f"{records[0]['experiment']}: loss per epoch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def lr_schedule(records: list[dict], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for r in records:
        c = np.array(r.get("lr_curve") or [[0, 0]])
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
