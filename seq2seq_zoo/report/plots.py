"""Plots from run records: validation loss per epoch, LR schedule, positional encodings, attention."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from seq2seq_zoo.names import run_group  # noqa: E402
from seq2seq_zoo.report.artifacts import read_attention, read_positional  # noqa: E402

MAX_SRC = 120   # source tokens an attention map shows (the rest is cut, and the title says so)


def context(records: list[dict]) -> str:
    """"experiment EXP, dataset D, profile P": the second line of every plot's title."""
    if not records:
        return ""
    exps = sorted({r.get("experiment", "?") for r in records})
    datasets = sorted({(r.get("data") or {}).get("dataset", "?") for r in records})
    profiles = sorted({r.get("profile") or "full size" for r in records})
    return (f"experiment {', '.join(exps)}; {'datasets' if len(datasets) > 1 else 'dataset'} {', '.join(datasets)}; "
            f"profile {', '.join(profiles)}")


def _title(ax, main: str, records: list[dict], fontsize: int = 10) -> None:
    ctx = context(records)
    ax.set_title(main + (f"\n{ctx}" if ctx else ""), fontsize=fontsize)


def save_figure(fig, path: Path) -> Path:
    """``fig`` as a PNG at ``path`` (written atomically), then closed."""
    from seq2seq_zoo.utils import atomic_write_bytes
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def val_loss(records: list[dict], path: Path) -> Path | None:
    """Loss per epoch; a run trained with several seeds is one line (the mean) with a band (min-max
    over seeds), or, with one epoch, a min-max error bar. Baselines, which have no training, are left out."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        if r["train"].get("history"):
            groups.setdefault(run_group(r["run"], r["seed"]), []).append(r)
    if not groups:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4))
    banded = False
    for name, rs in groups.items():
        for key, style in (("val_loss", dict(marker="o")), ("train_loss", dict(ls="--", marker=".", alpha=0.5))):
            n = min(len(r["train"]["history"]) for r in rs)  # epochs every seed reached (early stopping)
            ep = [h["epoch"] for h in rs[0]["train"]["history"][:n]]
            v = np.array([[np.nan if h.get(key) is None else h[key] for h in r["train"]["history"][:n]] for r in rs],
                         dtype=float)
            if np.isnan(v).all():
                continue
            kw = dict(style, color=ax.lines[-1].get_color()) if key == "train_loss" and ax.lines else style
            seeds = f", {len(rs)} seeds" if len(rs) > 1 else ""
            ax.plot(ep, np.nanmean(v, 0), label=f"{name} ({'val' if key == 'val_loss' else 'train'}{seeds})", **kw)
            if len(rs) > 1:
                c = ax.lines[-1].get_color()
                lo, hi, mid = np.nanmin(v, 0), np.nanmax(v, 0), np.nanmean(v, 0)
                if n > 1:
                    ax.fill_between(ep, lo, hi, color=c, alpha=0.15)
                else:  # one epoch: a band would be a line; an error bar shows the spread
                    ax.errorbar(ep, mid, yerr=[mid - lo, hi - mid], fmt="none", ecolor=c, capsize=4)
                banded = True
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (token NLL; train includes label smoothing)")
    _title(ax, "loss per epoch" + (" (min-max over seeds)" if banded else ""), records)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def scores(groups, path: Path, where: str = "",
           metrics=(("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"))) -> Path | None:
    """Bar chart of ROUGE per run with 95% CIs as error bars (two-level bootstrap: seeds, then examples),
    one panel per dataset (scores of different test sets never share an axis), each with its LEAD row as a
    dashed line per metric; oracle rows hatched (an upper bound, not a system). ``where``: the experiment,
    dataset and profile for the title (``context(records)``)."""
    from seq2seq_zoo.report.significance import below_lead, ci_of, dataset_of
    if isinstance(where, tuple):  # scores(groups, path, metrics) as called before ``where`` existed
        where, metrics = "", where
    groups = [g for g in groups if g.mean("rouge1") is not None]
    if not groups:
        return None
    leads = below_lead(groups)[0]
    datasets = list(dict.fromkeys(dataset_of(g) for g in groups))
    most = max(sum(1 for g in groups if dataset_of(g) == d) for d in datasets)
    fig, axes = plt.subplots(len(datasets), 1, figsize=(max(6.4, 0.55 * most * len(metrics)), 4.2 * len(datasets)),
                             squeeze=False)
    width = 0.8 / len(metrics)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, ds in zip(axes[:, 0], datasets):
        gs = [g for g in groups if dataset_of(g) == ds]
        lead = leads.get(ds)
        x = np.arange(len(gs))
        for k, (key, label) in enumerate(metrics):
            c = colours[k % len(colours)]
            means = np.array([g.mean(key) or 0.0 for g in gs])
            err = np.zeros((2, len(gs)))
            for j, g in enumerate(gs):
                b = ci_of(g, key)
                if b is not None:
                    err[:, j] = [max(means[j] - b[0], 0), max(b[1] - means[j], 0)]
            bars = ax.bar(x + (k - (len(metrics) - 1) / 2) * width, means, width, yerr=err, capsize=2, label=label,
                          color=c)
            for j, g in enumerate(gs):
                if g.kind == "upper bound":
                    bars[j].set_hatch("//")
            if lead is not None and lead.mean(key) is not None:
                ax.axhline(lead.mean(key), ls="--", lw=1.0, color=c,
                           label=f"LEAD ({lead.label}) {label} {lead.mean(key):.1f}")
        ax.set_xticks(x)
        ax.set_xticklabels([g.label + (f" ({len(g.rows)} seeds)" if len(g.rows) > 1 else "") for g in gs],
                           rotation=30, ha="right", fontsize=8)
        ax.set_xlabel("run")
        ax.set_ylabel("F1 x 100")
        ax.set_title(f"{ds}: test scores with 95% CIs" + ("; dashed: the LEAD row" if lead is not None else "")
                     + (f"\n{where}" if where else ""), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def _style(k: int) -> dict:
    """Line style of the k-th series: 10 colours, then the same colours dashed, dotted, dash-dotted."""
    colours = plt.get_cmap("tab10").colors
    return {"color": colours[k % 10], "ls": ("-", "--", ":", "-.")[(k // 10) % 4]}


def val_score(records: list[dict], path: Path) -> Path | None:
    """Validation score (``train.val_metric`` on its metric's scale, greedy decoding) by update: one line per run (the mean
    over its seeds, a band from the lowest to the highest seed), one panel per dataset, the legend beside
    the axes; decoding variants share their run's curve and are left out."""
    curves: dict[str, dict[str, list[dict]]] = {}
    for r in records:
        metric = r["train"].get("val_metric")
        if not metric or not r["train"].get("val_curve") or r.get("_decode") not in (None, "default"):
            continue
        ds = (r.get("data") or {}).get("dataset", "?")
        curves.setdefault(ds, {}).setdefault(run_group(r["run"], r["seed"]), []).append(r)
    if not curves:
        return None
    from seq2seq_zoo.metrics import scale_of
    fig, axes = plt.subplots(len(curves), 1, figsize=(7.6, 3.8 * len(curves)), squeeze=False)
    for ax, (ds, runs) in zip(axes[:, 0], curves.items()):
        for k, (name, rs) in enumerate(runs.items()):
            metric = rs[0]["train"]["val_metric"]
            steps = sorted({p["step"] for r in rs for p in r["train"]["val_curve"] if p.get(f"val_{metric}") is not None})
            scale = scale_of(metric)   # as the metric shows it: ROUGE F1 x 100
            v = np.array([[next((scale * p[f"val_{metric}"] for p in r["train"]["val_curve"] if p["step"] == s
                                 and p.get(f"val_{metric}") is not None), np.nan) for s in steps] for r in rs])
            st = _style(k)
            ax.plot(steps, np.nanmean(v, 0), marker="o", ms=2.5, lw=1.4,
                    label=f"{name} ({len(rs)} seed{'s' if len(rs) > 1 else ''}; {metric})", **st)
            if len(rs) > 1:
                ax.fill_between(steps, np.nanmin(v, 0), np.nanmax(v, 0), color=st["color"], alpha=0.15)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("update")
        ax.set_ylabel("validation score (x100, greedy)")
        ax.set_title(f"{ds}: validation score per update (mean over seeds; band: lowest to highest seed)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(context(records), fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def lr_schedule(records: list[dict], path: Path) -> Path | None:
    """One line per distinct schedule (runs with the same curve share it; the legend names them)."""
    records = [r for r in records if r.get("lr_curve")]
    if not records:
        return None
    from seq2seq_zoo.report.tables import schedule_label
    curves: dict[str, list] = {}   # one per schedule setting; the longest run's curve (early stopping cuts some)
    for r in records:
        t = (r.get("spec") or {}).get("train", {})
        key = schedule_label(t) if "schedule" in t else json.dumps(r["lr_curve"][:50])
        c = np.array(r["lr_curve"], dtype=float)
        entry = curves.setdefault(key, [c, []])
        if len(c) and c[-1, 0] > entry[0][-1, 0]:
            entry[0] = c
        entry[1].append(r["run"])
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for key, (c, runs) in curves.items():
        label = (f"{key}: " if not key.startswith("[") else "") + _runs_label(runs)
        ax.plot(c[:, 0], c[:, 1], label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("update step")
    ax.set_ylabel("learning rate")
    _title(ax, "learning-rate schedule" + (f"s ({len(curves)} distinct settings)" if len(curves) > 1 else ""),
           records)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    return save_figure(fig, path)


def positional(records: list[dict], path: Path) -> Path | None:
    """The encoder's positional table, one panel per distinct table (runs that share a table, e.g. the
    seeds of a fixed sinusoidal encoding, share a panel), on one colour scale."""
    tabs: dict[bytes, list] = {}
    for r in records:
        t = read_positional(Path(r["_dir"]) / "positional.json")
        if t is None:
            continue
        name = next((k for k in t["tables"] if "encoder" in k), next(iter(t["tables"]), None))
        if name is None:
            continue
        tab = np.array(t["tables"][name], dtype=float)
        key = np.round(tab, 3).tobytes() + str(tab.shape).encode()
        tabs.setdefault(key, [tab, name, t, []])[3].append(r["run"])
    if not tabs:
        return None
    n = len(tabs)
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols + 0.8, 3.9 * rows + 0.6), squeeze=False,
                             layout="constrained")
    vmax = max(float(np.abs(tab).max()) for tab, *_ in tabs.values()) or 1.0
    im = None
    for ax, (tab, name, t, runs) in zip(axes.flat, tabs.values()):
        im = ax.imshow(tab, aspect="auto", cmap="RdBu", vmin=-vmax, vmax=vmax, interpolation="nearest")
        ax.set_title(f"{_runs_label(runs)}\n{name}", fontsize=9)
        ax.set_xlabel(f"dimension (0-{tab.shape[1] - 1}" + (f" of {t['dims']}" if t.get("dims") and
                                                               t["dims"] > tab.shape[1] else "") + ")")
        ax.set_ylabel(f"position (0-{tab.shape[0] - 1}" + (f" of {t['positions']}" if t.get("positions") else "")
                      + ")")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.03, label="value")
    fig.suptitle("positional encodings (encoder)\n" + context(records), fontsize=10)
    return save_figure(fig, path)


def _runs_label(runs: list[str]) -> str:
    """["a-seed1", "a-seed2", "b"] -> "a (seeds 1, 2), b"."""
    import re
    groups: dict[str, list[str]] = {}
    for r in runs:
        m = re.match(r"^(.*)-seed(\d+)$", r)
        groups.setdefault(m.group(1) if m else r, []).append(m.group(2) if m else "")
    parts = [f"{k} (seed{'s' if len(v) > 1 else ''} {', '.join(v)})" if all(v) else k for k, v in groups.items()]
    return ", ".join(parts) if len(parts) <= 3 else f"{', '.join(parts[:2])} and {len(parts) - 2} more"


def human_map_name(name: str, heads: int | None) -> str:
    """``decoder_layer2_block2_decenc_att`` -> "encoder-decoder attention, decoder layer 2 (mean of 4 heads)"."""
    import re
    m = re.search(r"layer(\d+)", name)
    kind = "encoder-decoder attention" if "decenc" in name or "cross" in name else \
        "decoder self-attention" if "self" in name else name.replace("_", " ")
    where = f", decoder layer {m.group(1)}" if m else ""
    return kind + where + (f" (mean of {heads} heads)" if heads and heads > 1 else "")


def _heads(record: dict, a: dict) -> int | None:
    if a.get("heads"):
        return a["heads"]
    opts = (record.get("spec") or {}).get("model_options", {})
    if "heads" in opts:
        return opts["heads"]
    try:
        from seq2seq_zoo.registry import model_options
        return model_options(record.get("model", "")).get("heads")
    except Exception:  # a model this version no longer has
        return None


def drawable(token: str) -> str:
    """A token as a tick label: characters beyond the Basic Multilingual Plane (emoji, which SAMSum's
    chats hold and matplotlib's default font has no glyph for) as their code point, ``<U+1F600>``."""
    return "".join(c if ord(c) <= 0xFFFF else f"<U+{ord(c):X}>" for c in token)


def attention(record: dict, path: Path, max_src: int = MAX_SRC) -> Path | None:
    a = read_attention(Path(record["_dir"]) / "attention.json")
    if a is None or a["cross_attention"] is None:
        return None
    name = a["cross_attention"]
    full = np.array(a["maps"][name], dtype=float)
    m = full[:, :max_src]
    n_src = a.get("source_len") or len(a["source_tokens"])
    src = a["source_tokens"][:max_src]
    p_gen = a.get("p_gen")
    # rows: the step predicting predicted_tokens[t] (older files: labelled by the decoder input)
    out = (a.get("predicted_tokens") or a["output_tokens"])[: m.shape[0]]
    size = (max(6, 0.16 * len(src)) + (0.8 if p_gen else 0) + 1.0, max(3.2, 0.22 * len(out) + 1.2))
    if p_gen:
        fig, (ax, axp) = plt.subplots(1, 2, figsize=size, gridspec_kw={"width_ratios": [max(len(src), 1), 3]},
                                      sharey=True)
    else:
        fig, ax = plt.subplots(figsize=size)
    im = ax.imshow(m, aspect="auto", cmap="viridis", vmin=0, vmax=max(float(m.max()), 1e-9), interpolation="nearest")
    ax.set_xticks(range(len(src)))
    ax.set_xticklabels([drawable(t) for t in src], rotation=90, fontsize=6)
    ax.set_yticks(range(len(out)))
    ax.set_yticklabels([drawable(t) for t in out], fontsize=7)
    cut = f"first {len(src)} of {n_src} source tokens" if n_src > len(src) else f"all {n_src} source tokens"
    ax.set_xlabel(f"source token ({cut})")
    ax.set_ylabel("summary token being predicted")
    ax.set_title(f"{record['run']}: {human_map_name(name, _heads(record, a))}\nexample {a['example_id']}, "
                 f"teacher-forced on the model's own summary; {context([record])}", fontsize=9)
    fig.colorbar(im, ax=ax if not p_gen else [ax, axp], fraction=0.04, pad=0.02, label="attention weight")
    if p_gen:
        pg = np.array(p_gen[: m.shape[0]])[:, None]
        axp.imshow(pg, aspect="auto", cmap="magma", vmin=0, vmax=1)
        for t, v in enumerate(pg[:, 0]):
            axp.text(0, t, f"{v:.2f}", ha="center", va="center", fontsize=6, color="w" if v < 0.6 else "k")
        axp.set_xticks([0])
        axp.set_xticklabels(["p_gen"], fontsize=7)
    return save_figure(fig, path)
