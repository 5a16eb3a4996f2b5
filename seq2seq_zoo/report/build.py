"""``zoo report``: every table and plot of an experiment folder, from its run records alone."""
from __future__ import annotations

import re
from pathlib import Path

from seq2seq_zoo import reuse
from seq2seq_zoo.report import extras, figures, finetune, plots, significance
from seq2seq_zoo.report.tables import (fmt, loss_table, params_table, results_table, split_constant, to_markdown,
                                       val_loss_table)
from seq2seq_zoo.results import load_records
from seq2seq_zoo.names import inside
from seq2seq_zoo.utils import DamagedFile, atomic_write_text, hardware_str


def compute_seconds(r: dict) -> float:
    """Training + validation + decoding + scoring time of a run, over all its (resumed) invocations."""
    if "compute_seconds" in r:
        return r["compute_seconds"]
    ev, tr = r["eval"], r["train"]
    return tr["train_seconds"] + tr.get("val_seconds", 0.0) + ev.get("decode_seconds", 0) + ev.get("metric_seconds", 0)


def _was_resumed(r: dict) -> bool:
    if "resumes" in r["train"]:
        return r["train"]["resumes"] > 0
    # records written before the resume counter: the last invocation was shorter than the training
    return r["wall_seconds"] < r["train"]["train_seconds"]


def _grouped(records: list[dict], key) -> list[tuple[str, list[str]]]:
    """Distinct values of key(record) with the runs that have each, in first-seen order."""
    out: dict[str, list[str]] = {}
    for r in records:
        out.setdefault(key(r), []).append(r["run"])
    return list(out.items())


def _for(runs: list[str], records: list[dict]) -> str:
    return "" if len(runs) == len(records) else f" ({', '.join(runs)})"


def _data_line(r: dict) -> str:
    d, ev = r["data"], r["eval"]
    return (f"{d['dataset']}, scored on the `{ev['split']}` split, {ev['n_examples']} examples; training/validation "
            f"examples: {d['sizes'].get('train')}/{d['sizes'].get('validation')}; vocabulary {d['vocab_size']:,} words")


def _decode_line(dec: dict) -> str:
    return extras.describe(dec)  # every option; the length penalty as its exact formula


def _rules_text(r: dict) -> str:
    """The model's own rules from its record (positional-encoding bases, pointer variant, ...)."""
    def val(v):
        return ", ".join(f"{k} {val(x)}" for k, x in v.items()) if isinstance(v, dict) else \
            f"{v:g}" if isinstance(v, float) else str(v)
    return "; ".join(f"{k}: {val(v)}" for k, v in (r.get("model_rules") or {}).items())


def _settings_lines(records: list[dict]) -> list[str]:
    lines = [f"- **Dataset**: {text}{_for(runs, records)}" for text, runs in _grouped(records, _data_line)]
    metrics = list(dict.fromkeys(m for r in records for m in r["eval"]["settings"]))
    for name in metrics:
        def text(r, name=name):
            st = r["eval"]["settings"].get(name)
            return "; ".join(f"{k}: {v}" for k, v in st.items()) if st else ""
        for t, runs in _grouped(records, text):
            if t:
                lines.append(f"- **{name}**: {t}{_for(runs, records)}")
    for t, runs in _grouped(records, lambda r: "" if r.get("baseline") else _decode_line(r["eval"]["decode"])):
        if t:
            lines.append(f"- **Decoding**: {t}{_for(runs, records)}")
    for r in records:
        if r.get("baseline"):
            b = r["baseline"]
            lines.append(f"- **Baseline {r['run']}** ({'upper bound' if b.get('upper_bound') else 'no training'}): "
                         f"{b.get('describe', r['model'])}")
    for t, runs in _grouped(records, _rules_text):
        if t:
            lines.append(f"- **Model rules**: {t}{_for(runs, records)}")
    for t, runs in _grouped(records, lambda r: r.get("stale") or ""):
        if t:
            lines.append(f"- **Stale**: {t}{_for(runs, records)}")
    for t, runs in _grouped(records, lambda r: r.get("changed_settings") or ""):   # reuse.mark_changed_settings
        if t:
            lines.append(f"- **Differ from the experiment file as it is now**: {t}{_for(runs, records)}")
    for r in records:
        e = r.get("embeddings")
        if e and e.get("embeddings") != "random":
            lines.append(f"- **Embeddings of {r['run']}**: {e['embeddings']}"
                         + (f" ({e['settings']})" if e.get("settings") else "")
                         + f"; vocabulary coverage {e['found']:,}/{e['vocab']:,} ({100 * e['coverage']:.1f}%)")
    seeds = sorted({r["seed"] for r in records})
    profiles = sorted({r.get("profile") or "full size (no profile)" for r in records})
    hws = sorted({hardware_str(r["hardware"]) for r in records})
    precs = sorted({r["train"]["precision"] for r in records})
    lines.append(f"- **Seeds**: {', '.join(map(str, seeds))}; **profile**: {', '.join(profiles)}; "
                 f"**precision**: {', '.join(precs)}")
    lines.append(f"- **Hardware**: {'; '.join(hws)}")
    total = sum(compute_seconds(r) for r in records)
    resumed = [r["run"] for r in records if _was_resumed(r) and "reused_from" not in r]
    reused = [r for r in records if "reused_from" in r]
    lines.append(f"- **Wall time**: {total / 60:.1f} min for {len(records)} run(s) (training, validation, decoding "
                 "and scoring, summed over resumed invocations); per-run training minutes and tokens/s are in "
                 "the table." + (f" Resumed after an interruption: {', '.join(resumed)}." if resumed else "")
                 + (" Taken over from another experiment's identical run (`same_as`; not trained again, so not "
                    "in this total; its training minutes are in the table): "
                    + ", ".join(f"{r['run']} = {r['reused_from']['run']}" for r in reused) + "." if reused else ""))
    cmds = sorted({r.get("command") or "" for r in records} - {""})
    if cmds:
        lines.append("- **Command**: " + "; ".join(f"`{c}`" for c in cmds))
    return lines


def summary_lines(description: str, groups: list, judged: list[dict]) -> list[str]:
    """The first lines of an experiment's README: what it asks (the experiment file's description) and
    what it found (best trained row against LEAD, and each declared finding's verdict)."""
    out = [f"**What it asks.** {description}", ""] if description else []
    found = []
    leads, below = significance.below_lead(groups)
    trained = [g for g in groups if g.kind == "trained" and g.decode in (None, "default") and g.mean("rouge1") is not None]
    if trained:
        best = max(trained, key=lambda g: g.mean("rouge1"))
        lead = leads.get(significance.dataset_of(best))
        found.append(f"best trained row `{best.label}`, ROUGE-1 {best.mean('rouge1'):.2f} over {len(best.rows)} seed(s)"
                     + (f" against LEAD {lead.mean('rouge1'):.2f}" if lead is not None and lead.mean("rouge1") is not None
                        else "") + (f"; {len(below)} row(s) below LEAD" if below else ""))
    if judged:
        found.append("declared findings: " + "; ".join(f"`{j['claim']}` {j['verdict']}" for j in judged))
    if found:
        text = "; ".join(found)
        out += ["**What it found.** " + text[0].upper() + text[1:] + ". Details below.", ""]
    return out


_LATEX = {"\\": r"\textbackslash{}", "_": r"\_", "%": r"\%", "&": r"\&", "#": r"\#", "$": r"\$",
          "{": r"\{", "}": r"\}", "^": r"\^{}", "~": r"\~{}"}


def _latex_escape(s: str) -> str:
    return re.sub(r"[\\_%&#$^~{}]", lambda m: _LATEX[m.group(0)], s)


def build_report(exp_dir: str | Path, warn=None, plots: tuple[str, ...] | None = None) -> list[Path]:
    """Rebuild under an experiment-level lock, so two processes finishing runs of one experiment at
    the same time (``--only A`` / ``--only B``, or two ``zoo report``s) cannot overwrite a newer table
    with an older one. A run whose files are damaged is left out of the tables (named in their notes)
    and ``warn(message)`` is called once for it (default: a line on stderr). ``plots``: redraw only these
    plots (e.g. ``("scores",)`` after re-scoring; the others are kept as they are); default: every plot."""
    import fcntl
    import sys
    exp_dir = Path(exp_dir)
    if warn is None:
        def warn(msg):
            print(f"warning: {msg}", file=sys.stderr)
    with open(exp_dir / ".report.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(exp_dir, warn, plots)


def _build(exp_dir: Path, warn, only_plots: tuple[str, ...] | None = None) -> list[Path]:
    damaged: list[str] = []
    records = load_records(exp_dir, damaged)
    for msg in damaged:
        warn(msg)
    try:
        noted = significance.load_declared(exp_dir)[1].get("file")
    except DamagedFile:   # judge_all below names it
        noted = None
    path, changed = reuse.mark_changed_settings(records, exp_dir, noted)   # runs the file now sets up otherwise
    if changed:   # reported, not left out: a notice, not one of ``warn``'s problems
        import sys
        print(f"warning: {exp_dir}: {len(changed)} run(s) hold results of other settings than {path} gives now: "
              f"{', '.join(changed)} (the table's notes name the settings)", file=sys.stderr)
    if not records:
        if damaged:
            raise DamagedFile(damaged[0])
        raise FileNotFoundError(f"{exp_dir}: no run records (*/record.json)")
    written: list[Path] = []
    rows, stale = extras.with_decodes(records)  # + re-decoded variants ([[decode]], zoo eval --decode)
    df = results_table(rows)                     # one row per seed: table.csv
    groups = significance.group_rows(rows)       # one row per run: mean ± sd over seeds, CIs, LEAD mark
    gdf = significance.grouped_table(df, rows, groups)
    shown, same_line = split_constant(gdf)       # settings that never vary: one header line, not columns
    md = (same_line + "\n\n" if same_line else "") + to_markdown(shown)
    lead_line = significance.lead_sentence(groups)
    try:
        judged = significance.judge_all(exp_dir, groups, records)
    except DamagedFile as e:  # a damaged experiment.json: the tables without the findings, and say so
        warn(str(e))
        judged = []
    vl = val_loss_table(records)
    notes = _settings_lines(records) + [significance.ci_note(groups)] + extras.variant_lines(rows, stale)
    if damaged:
        notes.append("- **Left out, damaged files**: " + "; ".join(
            Path(m.split(":", 1)[0]).relative_to(exp_dir).parts[0] if Path(m.split(":", 1)[0]).is_relative_to(exp_dir)
            else m.split(":", 1)[0] for m in damaged) + " (see `zoo report`'s message)")
    t1 = extras.splits_table(rows)  # the seeds' Table 1: evaluation split and training sample
    t1_md = to_markdown(fmt(t1)) + "\n" + "\n".join(extras.splits_notes(rows)) + "\n" if t1 is not None else ""
    caption = _latex_escape(" ".join(n.lstrip("- ").replace("**", "").replace("`", "")
                                     for n in ([same_line] if same_line else []) + notes))
    if t1 is not None:
        for path, text in ((exp_dir / "table_splits.md", t1_md), (exp_dir / "table_splits.csv", t1.to_csv(index=False))):
            atomic_write_text(path, text)
            written.append(path)
    for path, text in ((exp_dir / "table.md", lead_line + "\n\n" + md + "\n" + "\n".join(notes) + "\n"),
                       (exp_dir / "table.csv", df.to_csv(index=False)),
                       (exp_dir / "table.tex", shown.to_latex(index=False, escape=True, caption=caption,
                                                                label=f"tab:{records[0]['experiment']}")),
                       (exp_dir / "val_loss.csv", vl.to_csv()),
                       (exp_dir / "loss.csv", loss_table(records).to_csv(index=False))):
        atomic_write_text(path, text)
        written.append(path)
    pdir = inside(exp_dir, "plots")  # every plot file is checked to land in it (names come from the records)
    pdir.mkdir(exist_ok=True)
    where = plots.context(records)  # "experiment, dataset, profile" for every plot's title
    draw = {"scores": lambda: [plots.scores(groups, pdir / "scores.png", where)],
            "val_loss": lambda: [plots.val_loss(records, pdir / "val_loss.png")],
            "lr_schedule": lambda: [plots.lr_schedule(records, pdir / "lr_schedule.png")],
            "positional": lambda: [plots.positional(records, pdir / "positional_encodings.png")],
            "attention": lambda: [plots.attention(r, inside(pdir, f"attention_{r['run']}.png")) for r in records],
            "val_score": lambda: [plots.val_score(records, pdir / "val_score.png")]}
    figs = [f for name, fn in draw.items() if only_plots is None or name in only_plots for f in fn()]
    figs = [f for f in figs if f is not None]
    if only_plots is not None:  # the plots not redrawn stay in the README as they are
        order = ["scores", "val_loss", "lr_schedule", "positional_encodings", "attention_", "val_score"]
        figs = sorted(set(figs) | set(pdir.glob("*.png")),
                      key=lambda f: (next((i for i, p in enumerate(order) if f.stem.startswith(p)), len(order)), f.name))
    written += figs
    figures.fill_notes(exp_dir, warn)  # NOTES.md's generated figures, from the table and findings just written
    findings = ""
    readme_src = exp_dir / "NOTES.md"  # hand-written findings, kept across report rebuilds
    if readme_src.exists():
        findings = "\n## Notes\n\n" + readme_src.read_text(encoding="utf-8").strip() + "\n"
    r0 = records[0]
    vm, init = finetune.val_metric_table(records), finetune.init_table(records)
    tuning = ([*(["## Validation score by update (greedy decoding)", "", to_markdown(fmt(vm, 2)), ""] if vm is not None else []),
               *(["## Starting checkpoint vs fine-tuned (test set)", "", to_markdown(fmt(init)), ""]
                 if init is not None else []),
               *(["## Objective", "", *finetune.objective_lines(records), ""] if finetune.objective_lines(records) else [])])
    readme = "\n".join([
        f"# {r0['experiment']}", "",
        *summary_lines(r0["spec"].get("description") or "", groups, judged),
        "Generated by `zoo report` from the run records in this folder; do not edit by hand "
        "(put findings in NOTES.md, which is included below).", "",
        "## Results", "", lead_line, "", md, "",
        *significance.findings_markdown(judged),
        *(["## Evaluation split and training sample (the seeds' Table 1 layout)", "", t1_md] if t1_md else []),
        *tuning,
        "## Validation loss per epoch (token NLL)", "", to_markdown(fmt(vl, 4)), "",
        "## Trainable parameters per component", "", to_markdown(params_table(records)), "",
        "## Settings", "", *notes, "",
        "## Plots", "", *[f"![{f.stem}](plots/{f.name})" for f in figs], "",
        *extras.examples_markdown(rows),
        "## Files", "",
        "- `<run>/record.json`: configuration, seed, parameter counts per component, per-epoch losses, wall "
        "time, tokens/s, hardware, metrics with settings.",
        "- `<run>/predictions.jsonl`: one object per test example (`id`, `prediction`, `references`), to "
        "re-score without the suite.",
        "- `<run>/predictions_train_sample.jsonl`, `<run>/examples.json`: the training sample's predictions "
        "(`eval.train_sample`) and the shown examples; `<run>/decodes/<name>/`: the same for each decoding "
        "variant (record.json, predictions.jsonl).",
        "- `<run>/scores.jsonl`: per test example, every metric's value (ROUGE F1 x 100 per reference rule, "
        "BERTScore F1, repetition, UNK ratio, length), for confidence intervals and paired tests without "
        "re-scoring.",
        "- `experiment.json`: the `[[findings]]` declared in the experiment file; `findings.json`: their verdicts.",
        "- `table.md|tex`: one row per run (mean ± sd over seeds, 95% CIs); `table.csv`: one row per seed; "
        "`val_loss.csv` (validation loss per epoch, a column per run), `loss.csv` (train and validation loss "
        "per run and epoch), `plots/`: rebuilt by `zoo report`.",
        findings,
    ])
    atomic_write_text(exp_dir / "README.md", readme)
    written.append(exp_dir / "README.md")
    from seq2seq_zoo.report import html   # report.html: the page to read outputs in a browser (not committed)
    try:
        written.append(html.write_page(exp_dir, rows, groups, judged))
    except (OSError, ValueError, KeyError, TypeError) as e:   # the tables above stand; the page is named as missing
        warn(f"{exp_dir / html.PAGE_FILE}: not written ({type(e).__name__}: {e})")
    return written
