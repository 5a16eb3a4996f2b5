"""Commands on a finished run; not to be confused with cli/run.py (``zoo run``) or runner.py (one run).

zoo eval (re-score, --save, --decode), tune, export, average, params.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path, experiment_profile


def cmd_eval(args) -> int:
    from seq2seq_zoo.metrics import evaluate
    from seq2seq_zoo.results import read_predictions
    checked_path(args.run_dir, "dir", "the run (a folder such as results/pe_ablation/tmax-seed1)")
    from seq2seq_zoo.inference import not_a_run
    not_a_run(args.run_dir)   # an experiment's folder is named as such, with its runs
    if getattr(args, "data_dir", None):
        checked_path(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    if args.rouge_unk and (args.decode is not None or args.save):
        raise UserError("--rouge-unk goes with plain re-scoring; runs and their variants score with eval.rouge_unk")
    if args.decode is not None:
        if args.save:
            raise UserError("--save goes with --metrics (re-scoring); a re-decoded run (--decode) keeps its scores anyway")
        return _eval_decode(args)
    if args.save:
        if args.name:
            raise UserError("--name goes with --decode (re-decoding); --save keeps re-scored metrics")
        return _eval_save(args)
    if args.name or args.force:
        raise UserError("--name and --force go with --decode (re-decoding) or --save; without them `zoo eval` "
                        "only prints re-scored metrics")
    rows = read_predictions(Path(args.run_dir))
    scores, settings = evaluate([r["prediction"] for r in rows], [r["references"] for r in rows],
                                args.metrics or ["rouge"], rouge_unk=args.rouge_unk or "match")
    if args.json:
        print(json.dumps({"n_examples": len(rows), "scores": scores, "settings": settings}, indent=2))
    else:
        print(_score_summary(len(rows), scores))
    return 0


_SUMMARY_KEYS = (("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"), ("rougeLsum", "ROUGE-Lsum"),
                 ("bertscore_f1", "BERTScore F1"), ("pred_len", "length"))


def _score_summary(n: int | None, scores: dict) -> str:
    """One line of the main scores (``--json`` prints everything)."""
    parts = [f"{label} {scores[k]:.2f}" for k, label in _SUMMARY_KEYS if scores.get(k) is not None]
    return (f"{n} examples: " if n is not None else "") + ", ".join(parts) + " (--json for every score and setting)"


def _eval_save(args) -> int:
    """zoo eval RUN_DIR --metrics M... --save: score the stored predictions of the run and of each of its
    decoding variants (``decodes/<name>/``) with M, test split and training sample alike, using the run's
    own metric settings (stemmer, BERTScore backbone and layer), and keep the scores with them: each
    record's scores and settings (``rescored`` says when and how), the test split's per-example values in
    scores.jsonl; then rebuild the experiment's report. Everything is scored before anything is written;
    a part that already holds every metric is kept as it is unless ``--force``."""
    from datetime import datetime, timezone

    from seq2seq_zoo.config import RunSpec
    from seq2seq_zoo.results import read_record
    if not args.metrics:
        raise UserError("--save needs --metrics: the metrics to add to the run (e.g. --metrics bertscore)")
    run_dir = Path(args.run_dir)
    spec = RunSpec.from_dict(read_record(run_dir / "record.json")["spec"])
    spec.eval.metrics = list(dict.fromkeys(args.metrics))
    every = [run_dir] + sorted(p.parent for p in (run_dir / "decodes").glob("*/record.json"))
    from seq2seq_zoo.names import inside_run
    for d in every:   # a run or decodes folder linked outside the results is refused before anything is scored
        inside_run(run_dir, *d.relative_to(run_dir).parts)
    jobs = [(d, *_rescore(d, spec, args.device or "cpu", args.force)) for d in every]
    for d, _, job in jobs:
        if not job:
            print(f"{d}: already holds {', '.join(spec.eval.metrics)}; kept (--force scores it again)",
                  file=sys.stderr)
    jobs = [(d, rec, job) for d, rec, job in jobs if job]
    if not jobs:
        return 0
    entry = {"metrics": spec.eval.metrics, "command": "zoo " + " ".join(args.argv),
             "when": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out: dict = {}
    for d, rec, job in jobs:
        _write_rescored(d, rec, job, entry)
        got = {k: v[2] if k == "eval" else v[0] for k, v in job.items()}
        if d == run_dir:
            if "eval" in got:
                out.update(n_examples=len(job["eval"][0]), saved=sorted(got["eval"]), scores=got["eval"])
            if "train_sample" in got:
                out["train_sample"] = got["train_sample"]
        else:
            out.setdefault("decodes", {})[d.name] = got
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        if "scores" in out:
            print(f"{run_dir}: saved {', '.join(out['saved'])}; " + _score_summary(out["n_examples"], out["scores"]))
        for name, got in out.get("decodes", {}).items():
            if "eval" in got:
                print(f"{run_dir}/decodes/{name}: " + _score_summary(None, got["eval"]))
    _rebuild_report(run_dir)
    return 0


def _rescore(folder: Path, spec, device: str, force: bool) -> tuple[dict, dict]:
    """``folder``'s record (a run's or one of its decodes') and the parts of it to score with ``spec``'s
    metrics, scored; nothing is written. "eval": (ids, per-example values with the new metrics merged in, scores, settings) of the
    test split; "train_sample": (scores, settings) of the training sample. A part that already holds every
    metric is left out unless ``force``."""
    from seq2seq_zoo.evaluation import TRAIN_SAMPLE_FILE, score
    from seq2seq_zoo.results import read_predictions, read_record, read_scores
    rec = read_record(folder / "record.json")
    want = set(spec.eval.metrics)
    job = {}
    if force or not want <= set(rec["eval"].get("settings", {})):
        rows = read_predictions(folder)
        ids = [str(r["id"]) for r in rows]
        per: dict[str, list[float]] = {}
        scores, settings = score([r["prediction"] for r in rows], [r["references"] for r in rows], spec, device, per)
        old = read_scores(folder) or {}
        if old and set(old) != set(ids):
            raise UserError(f"{folder / 'scores.jsonl'} and predictions.jsonl hold different examples; "
                            f"run `zoo report` to score the predictions again, then --save")
        merged = {i: {**old.get(i, {}), **{k: v[j] for k, v in per.items()}} for j, i in enumerate(ids)}
        job["eval"] = (ids, merged, scores, settings)
    sample = rec.get("train_sample")
    if sample and (folder / TRAIN_SAMPLE_FILE).is_file() and (force or not want <= set(sample.get("settings", {}))):
        rows = read_predictions(folder, TRAIN_SAMPLE_FILE)
        job["train_sample"] = score([r["prediction"] for r in rows], [r["references"] for r in rows], spec, device)
    return rec, job


def _write_rescored(folder: Path, rec: dict, job: dict, entry: dict) -> None:
    from seq2seq_zoo.results import write_record, write_scores
    if "eval" in job:
        ids, merged, scores, settings = job["eval"]
        keys = list(dict.fromkeys([k for i in ids[:1] for k in merged[i]]))
        write_scores(folder, ids, {k: [merged[i][k] for i in ids] for k in keys})
        rec["eval"]["scores"].update(scores)
        rec["eval"].setdefault("settings", {}).update(settings)
    if "train_sample" in job:
        scores, settings = job["train_sample"]
        rec["train_sample"]["scores"].update(scores)
        rec["train_sample"].setdefault("settings", {}).update(settings)
    rec.setdefault("rescored", []).append(dict(entry, parts=sorted(job)))
    write_record(folder, rec)


def _rebuild_report(run_dir: Path) -> None:
    """The tables of the experiment folder holding ``run_dir``, after ``zoo eval`` changed the run."""
    exp_dir = Path(run_dir).resolve().parent
    if exp_dir.is_relative_to(Path.cwd().resolve()):   # the tables name the folder as the user did, not /abs/...
        exp_dir = exp_dir.relative_to(Path.cwd().resolve())
    if any(exp_dir.glob("*/record.json")):
        from seq2seq_zoo.report import build_report
        paths = build_report(exp_dir, plots=("scores",))  # the scores changed; the curves and maps did not
        print(f"{exp_dir}: wrote {', '.join(p.name for p in paths)}", file=sys.stderr)


def _eval_decode(args) -> int:
    """zoo eval RUN_DIR --decode k=v,... [--name NAME]: one decoding variant of a finished run."""
    from seq2seq_zoo.evaluation import parse_variant_arg, run_decodes
    from seq2seq_zoo.utils import invocation
    run_dir = Path(args.run_dir)
    name, over = parse_variant_arg(args.decode, args.name)
    if args.metrics:
        raise UserError("--metrics goes without --decode; a re-decoded run is scored with its own eval.metrics")
    recs = run_decodes(run_dir, [(name, over)], data_dir=args.data_dir, device=args.device, force=args.force,
                       on_change="error", progress=not args.no_progress, command=invocation(["zoo", *args.argv]),
                       order_base=1000, log=lambda m: print(m, file=sys.stderr))
    if recs and args.json:
        print(json.dumps({"run": recs[0]["run"], "decode": name, "n_examples": recs[0]["eval"]["n_examples"],
                          "scores": recs[0]["eval"]["scores"],
                          "train_sample": (recs[0]["train_sample"] or {}).get("scores")}, indent=2))
    elif recs:
        print(f"{recs[0]['run']}, decoding {name}: " + _score_summary(recs[0]["eval"]["n_examples"],
                                                                      recs[0]["eval"]["scores"]))
    _rebuild_report(run_dir)
    return 0


def cmd_tune(args) -> int:
    """zoo tune RUN_DIR --grid KEY=V1,V2 ...: validation ROUGE per decoding setting, stored in the run's
    tune.json; test outputs are not touched."""
    from seq2seq_zoo.evaluation import parse_grid, save_tune, tune_decoding, tune_table
    from seq2seq_zoo.inference import run_spec
    checked_path(args.run_dir, "dir", "the run (a folder such as results/pe_ablation/tmax-seed1)")
    from seq2seq_zoo.inference import not_a_run
    not_a_run(args.run_dir)   # an experiment's folder is named as such, with its runs
    if args.data_dir:
        checked_path(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    grid = parse_grid(args.grid)
    rows = tune_decoding(args.run_dir, grid, data_dir=args.data_dir, device=args.device,
                         max_examples=args.max_examples or 0, progress=not args.no_progress,
                         log=lambda m: print(m, file=sys.stderr))
    saved = save_tune(args.run_dir, rows, args.max_examples or 0)
    print(f"grid stored in {saved}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(tune_table(rows, getattr(run_spec(args.run_dir).eval, "rouge_unk", "match")))
    return 0


def cmd_export(args) -> int:
    from seq2seq_zoo.export import export_run
    checked_path(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    checked_path(args.out, "dir", "the export folder")
    export_run(args.run_dir, args.out, checkpoint=args.checkpoint, force=args.force)
    return 0


def cmd_average(args) -> int:
    from seq2seq_zoo.averaging import average_run
    from seq2seq_zoo.inference import not_a_run
    checked_path(args.run_dir, "dir", "the run (a folder such as results/smoke/tiny)")
    not_a_run(args.run_dir)   # an experiment's folder is named as such, with its runs
    average_run(Path(args.run_dir), args.last, force=args.force)
    return 0


def cmd_params(args) -> int:

    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.models.base import build_on_meta, count_parameters, model_context
    from seq2seq_zoo.report.tables import params_table, to_markdown
    from seq2seq_zoo.runner import prepare_data

    checked_path(args.experiment, "file", "the experiment (a TOML file)")
    exp = load_experiment(args.experiment, profile=experiment_profile(args))
    rows, vocabs = [], {}
    for spec in exp.runs:
        key = repr(spec.data)
        if key not in vocabs:  # runs sharing data settings share the vocabulary
            vocabs[key] = len(prepare_data(spec, args.data_dir, log=lambda *_: None)[0])
        model = build_on_meta(spec.model, model_context(vocabs[key], spec.data), spec.model_options)
        rows.append({"run": spec.name, "seed": spec.seed, "model": spec.model, "data": {"vocab_size": vocabs[key]},
                     "params": count_parameters(model)})
    print(to_markdown(params_table(rows)), end="")
    return 0
