"""Writes an exported model folder (``zoo export``); not to be confused with exported.py, which reads one back.

``zoo export RUN OUT/``: a trained run as a self-contained model folder.

    OUT/model.safetensors   the weights (safetensors: loading never runs pickled code)
    OUT/config.json         the run's full configuration, with every model option resolved
    OUT/vocab.json          the vocabulary (word ids)
    OUT/README.md           a model card: data, test metrics with 95% CIs, seed, training budget,
                            hardware, known limits (e.g. "below LEAD")

``Summarizer.from_pretrained(OUT)`` loads it; nothing else of the suite's results folder is needed.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from seq2seq_zoo.errors import UserError

from seq2seq_zoo.exported import CARD_FILE, CONFIG_FILE, FILES, FORMAT, VOCAB_FILE, WEIGHTS_FILE, is_export


def export_run(run_dir: str | Path, out: str | Path, checkpoint: str = "best.pt", log=print,
               force: bool = False) -> Path:
    """Write the export of ``run_dir`` to ``out``. The files are written to a temporary folder beside ``out``
    and swapped in whole, so a kill at any moment leaves the old export or the new one, never
    a mix (``utils.io.staged_folder``). ``out`` may be new, empty, or an earlier export (only the files `zoo export` writes); a folder
    holding anything else is refused unless ``force``, and then its other files are kept (moved into the new
    folder), never deleted. ``out`` may not be inside a run folder (it would mix with the run's files) or be
    the run itself."""
    from safetensors.torch import save_model

    from seq2seq_zoo.inference import legacy_defaults, load_trained_run
    from seq2seq_zoo.results import read_record
    from seq2seq_zoo.utils.io import check_output, staged_folder
    run_dir, out = Path(run_dir), Path(out)
    check_output(out, inputs=[run_dir], what="the export folder")
    rec_path = run_dir / "record.json"
    record = read_record(rec_path) if rec_path.is_file() else None
    if record is not None and record.get("baseline"):
        raise UserError(f"{run_dir}: {record['model']} is an extractive baseline with nothing trained; there are no "
                        "weights to export")
    target = out.resolve()        # a link to a folder: the folder it points to is replaced, not the link
    foreign: list[str] = []
    if target.exists():
        if not target.is_dir():
            raise UserError(f"{out}: is a file, but the export folder must be a folder")
        if any(target.iterdir()) and not is_export(target):
            foreign = sorted(p.name for p in target.iterdir())
            if not force:
                raise UserError(f"{out}: holds files `zoo export` did not write ({', '.join(foreign[:4])}"
                                f"{' ...' if len(foreign) > 4 else ''}); give a new or empty folder, or --force to "
                                f"replace {', '.join(n for n in FILES if (target / n).exists()) or 'nothing'} "
                                "there (the other files are kept)")
    run = load_trained_run(run_dir, checkpoint, purpose="zoo export", record=record)
    spec = run.spec.to_dict()
    spec["model_options"] = {**legacy_defaults(run_dir, run.spec, record), **spec.get("model_options", {})}
    config = {"format": FORMAT, "model": run.spec.model, "spec": spec, "checkpoint": checkpoint,
              "source_run": str(run_dir), "model_rules": (record or {}).get("model_rules")}
    with staged_folder(target, "export") as stage:
        save_model(run.model, str(stage / WEIGHTS_FILE), metadata={"format": "pt"})
        shutil.copyfile(run.checkpoint.parent / VOCAB_FILE, stage / VOCAB_FILE)
        (stage / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (stage / CARD_FILE).write_text(model_card(run_dir, record, run.spec, checkpoint), encoding="utf-8")
        for name in (os.listdir(target) if target.is_dir() else []):
            if name not in FILES:      # --force over a folder of other files: they stay, in the new folder
                _copy(target / name, stage / name)
    log(f"exported {run_dir} ({checkpoint}) to {out}/: {WEIGHTS_FILE}, {CONFIG_FILE}, {VOCAB_FILE}, {CARD_FILE}"
        + (f" (replaced {', '.join(f for f in foreign if f in FILES)}; kept {', '.join(f for f in foreign if f not in FILES)})"
           if foreign else ""))
    return out


def _copy(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` too: a file hard-linked (same data, no copy), a folder or link copied as it is."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True)
    elif src.is_file() and not src.is_symlink():
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def _ci_line(run_dir: Path, metric: str) -> str:
    from seq2seq_zoo import stats
    from seq2seq_zoo.results import read_scores
    try:
        per = read_scores(run_dir) or {}
    except Exception:  # a damaged scores file: the card says so rather than failing the export
        return "(per-example scores unreadable)"
    ids = sorted(i for i, v in per.items() if v.get(metric) is not None)
    if not ids:
        return ""
    # the interval the run's results table prints (report/groups.ci_of for one seed): one number, one source
    lo, hi = stats.group_ci([[per[i][metric] for i in ids]], n_resamples=stats.TABLE_RESAMPLES)
    return f"[{lo:.2f}, {hi:.2f}]"


def _lead_of(run_dir: Path, record: dict) -> dict | None:
    """The LEAD baseline's record in the same experiment folder on the same dataset, if any."""
    for p in sorted(run_dir.parent.glob("*/record.json")):
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if str(r.get("model", "")).startswith("lead") and r.get("data", {}).get("dataset") == record["data"]["dataset"]:
            return r
    return None


def model_card(run_dir: Path, record: dict | None, spec, checkpoint: str) -> str:
    """The README.md of an exported model: what it was trained on, how well it does, and its limits."""
    from seq2seq_zoo.utils import hardware_str
    lines = [f"# {spec.experiment}/{spec.name}: {spec.model}", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines += ["Exported by `zoo export` from a seq2seq-zoo run. Load it with:", "", "```python",
              "from seq2seq_zoo import Summarizer", "s = Summarizer.from_pretrained(\"THIS_FOLDER\")",
              "print(s.summarize([\"#Person1#: Hi, how are you? #Person2#: Fine, thanks.\"])[0])", "```", ""]
    if record is None:
        return "\n".join(lines + ["No run record was found: data, metrics and training budget are unknown.", ""])
    d, ev, tr = record["data"], record["eval"], record["train"]
    sc = ev["scores"]
    lines += ["## Data", "",
              f"- dataset: {d['dataset']}; training/validation/test examples: {d['sizes'].get('train')}/"
              f"{d['sizes'].get('validation')}/{d['sizes'].get('test')}",
              f"- vocabulary: {d['vocab_size']:,} words; source cut at {spec.data.max_src_len} tokens, summaries at "
              f"{spec.data.max_tgt_len}", ""]
    lines += ["## Test metrics", "", f"On the `{ev['split']}` split, {ev['n_examples']} examples, F1 x 100 with 95% "
              "bootstrap CIs over examples (the run's results table gives the same):", "", "| metric | value | 95% CI |", "|---|---|---|"]
    for key, label in (("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"),
                       ("rougeLsum", "ROUGE-Lsum"), ("bertscore_f1", "BERTScore F1")):
        if sc.get(key) is not None:
            lines.append(f"| {label} | {sc[key]:.2f} | {_ci_line(run_dir, key)} |")
    lines += ["", "## Training", "",
              f"- seed {record['seed']}; profile {record.get('profile') or 'full size'}; precision {tr['precision']}",
              f"- {tr['epochs_run']} epoch(s), {tr['steps']:,} updates, {tr['train_tokens']:,} training tokens, "
              f"{tr['train_seconds'] / 60:.1f} min of training; best checkpoint at update {tr['best_step']} "
              f"(by validation {tr.get('val_metric', 'loss')}); exported weights: `{checkpoint}`",
              f"- parameters: {record['params']['total']:,}",
              f"- hardware: {hardware_str(record['hardware'])}",
              f"- code: seq2seq-zoo {record.get('version')}"
              + (f", commit {record['code'].get('commit')}" if isinstance(record.get("code"), dict)
                 and record["code"].get("commit") else ""), ""]
    limits = []
    lead = _lead_of(run_dir, record)
    if lead is not None and lead["eval"]["scores"].get("rouge1") is not None and sc.get("rouge1") is not None:
        l1 = lead["eval"]["scores"]["rouge1"]
        rel = "below" if sc["rouge1"] <= l1 else "above"
        limits.append(f"**{rel} LEAD**: ROUGE-1 {sc['rouge1']:.2f} vs {l1:.2f} for the LEAD baseline "
                      f"({lead['run']}) on the same test set")
    if tr.get("history"):
        vals = [h.get("val_loss") for h in tr["history"] if h.get("val_loss") is not None]
        if vals and not tr.get("stopped_early") and vals[-1] <= min(vals):
            limits.append("not converged: validation loss was still falling when training ended")
    limits.append(f"trained on {d['dataset']} only: other text (another domain, length or language) is out of "
                  "its training distribution; a word-level vocabulary maps unseen words to <unk>"
                  + (" (copied from the source by the pointer)" if "pointer" in spec.model else ""))
    if record.get("stale") or record.get("changed_settings"):
        limits.append(f"the run's record is marked: {record.get('stale') or record.get('changed_settings')}")
    lines += ["## Known limits", "", *[f"- {x}" for x in limits], ""]
    return "\n".join(lines)
