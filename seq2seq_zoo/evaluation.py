"""Evaluation beyond a run's test scores, shared by ``zoo run`` and ``zoo eval --decode``:

- the seeded training sample (``eval.train_sample = 0.05``: the seeds' 1/20 of the training split, drawn
  with the run seed, so the same seed gives the same sample), decoded and scored like the test split;
- fixed qualitative examples (``eval.examples`` ids, else ``eval.examples_per_split`` per split picked
  with a fixed seed), written to ``examples.json`` with input, references and output;
- decoding variants: ``[[decode]]`` entries of an experiment or ``zoo eval RUN --decode k=v,...`` re-decode
  the run's best checkpoint without retraining and write ``<run>/decodes/<name>/`` (record.json,
  predictions.jsonl, examples.json, and the training-sample predictions), which ``zoo report`` adds to
  the tables as rows (run x decode). A variant already decoded with the same settings from the same
  checkpoint is skipped (resume); one whose run was retrained since is decoded again.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_zoo.config import DEFAULT_DECODE_NAME, ConfigError, DecodeConfig, RunSpec
from seq2seq_zoo.data.batching import Encoded
from seq2seq_zoo.data.corpora import DataError
from seq2seq_zoo.registry import did_you_mean
from seq2seq_zoo.report.extras import describe

TRAIN_SAMPLE_FILE = "predictions_train_sample.jsonl"
EXAMPLES_FILE = "examples.json"
DECODES_DIR = "decodes"
EXAMPLE_SEED = 0          # the qualitative examples are the same for every run and seed


# ------------------------------------------------------------------------------------ what is scored
def train_sample_indices(n: int, fraction: float, seed: int) -> list[int]:
    """Sorted indices of a ``fraction`` sample (at least one example) of a split of ``n`` examples, drawn
    without replacement by a generator seeded with ``seed`` alone: same seed -> same sample."""
    if fraction <= 0 or n <= 0:
        return []
    k = min(n, max(1, round(fraction * n)))
    return sorted(np.random.default_rng(seed).choice(n, size=k, replace=False).tolist())


def pick_examples(spec: RunSpec, train_ids: list[str], eval_ids: list[str]) -> list[tuple[str, str]]:
    """[(split, id)] of the qualitative examples: ``eval.examples`` (ids looked up in the evaluation split,
    then the training split), else ``eval.examples_per_split`` per split drawn with a fixed seed."""
    split = spec.eval.split
    if spec.eval.examples is not None:
        ev, tr = set(eval_ids), set(train_ids)
        out = []
        for i in spec.eval.examples:
            if i in ev:
                out.append((split, i))
            elif i in tr:
                out.append(("train", i))
            else:
                near = did_you_mean(i, list(ev | tr)) if len(ev) + len(tr) < 50_000 else ""
                raise DataError(f"eval.examples: no example with id {i!r} in the training split (after "
                                f"data.max_train) or the '{split}' split.{near}")
        return out
    k = spec.eval.examples_per_split
    rng = np.random.default_rng(EXAMPLE_SEED)
    out = []
    for name, ids in (("train", train_ids), (split, eval_ids)):
        if k and ids:
            out += [(name, ids[j]) for j in sorted(rng.choice(len(ids), size=min(k, len(ids)), replace=False))]
    return out


# ------------------------------------------------------------------------------------------- scoring
def score(preds: list[str], refs: list[list[str]], spec: RunSpec, device) -> tuple[dict, dict]:
    from seq2seq_zoo.metrics import evaluate
    return evaluate(preds, refs, spec.eval.metrics, stemmer=spec.eval.rouge_stemmer,
                    bertscore_model=spec.eval.bertscore_model, bertscore_layers=spec.eval.bertscore_layers,
                    bertscore_batch_size=spec.eval.bertscore_batch_size, device=str(device))


def decode_and_score(model, data: list[Encoded], vocab, spec: RunSpec, cfg: DecodeConfig, device, dtype,
                     split: str, progress: bool = False) -> tuple[list[str], dict]:
    from seq2seq_zoo.runner import copy_stats, decode_split
    t0 = time.perf_counter()
    preds, ids = decode_split(model, data, vocab, dataclasses.replace(spec, decode=cfg), device, dtype, progress,
                              return_ids=True)
    t1 = time.perf_counter()
    copying = copy_stats(model, data, ids, len(vocab), device, dtype, cfg.batch_size)  # p_gen, copied OOVs
    scores, settings = score(preds, [e.references for e in data], spec, device)
    return preds, {"split": split, "n_examples": len(preds), "decode": dataclasses.asdict(cfg), "scores": scores,
                   "settings": settings, "copying": copying, "decode_seconds": t1 - t0,
                   "metric_seconds": time.perf_counter() - t1}


def evaluate_extras(model, train: list[Encoded], eval_data: list[Encoded], eval_preds: list[str], vocab,
                    spec: RunSpec, cfg: DecodeConfig, shown: list[tuple[str, str]], out: Path, device, dtype,
                    progress: bool = False, train_sample: list[Encoded] | None = None,
                    train_size: int | None = None) -> dict:
    """Decode + score the training sample (if ``eval.train_sample``), decode the shown training examples,
    and write ``predictions_train_sample.jsonl`` and ``examples.json`` into ``out``. ``train`` is the
    training split the sample is drawn from, or (re-decoding, with ``train_sample`` already drawn and the
    split's ``train_size``) just the shown training examples. Returns {"train_sample": block or None,
    "seconds": time spent}."""
    from seq2seq_zoo.runner import decode_split
    from seq2seq_zoo.utils import atomic_write_json, atomic_write_text
    t0 = time.perf_counter()
    if train_sample is None:
        train_sample = [train[i] for i in train_sample_indices(len(train), spec.eval.train_sample, spec.seed)]
    block, train_preds = None, {}
    if train_sample:
        preds, block = decode_and_score(model, train_sample, vocab, spec, cfg, device, dtype, "train", progress)
        block.update(fraction=spec.eval.train_sample, sample_seed=spec.seed,
                     of=train_size if train_size is not None else len(train))
        atomic_write_text(Path(out) / TRAIN_SAMPLE_FILE, "".join(
            json.dumps({"id": e.id, "prediction": p, "references": e.references}, ensure_ascii=False) + "\n"
            for e, p in zip(train_sample, preds)))
        train_preds = {e.id: p for e, p in zip(train_sample, preds)}
    by_id = {"train": {e.id: e for e in list(train) + list(train_sample)}, spec.eval.split: {e.id: e for e in eval_data}}
    missing = [by_id["train"][i] for s, i in shown if s == "train" and i not in train_preds and i in by_id["train"]]
    if missing:
        train_preds.update(zip([e.id for e in missing],
                               decode_split(model, missing, vocab, dataclasses.replace(spec, decode=cfg), device,
                                            dtype, False)))
    outputs = {"train": train_preds, spec.eval.split: dict(zip([e.id for e in eval_data], eval_preds))}
    rows = []
    for split, i in shown:
        e = by_id.get(split, {}).get(i)
        if e is not None:
            rows.append({"split": split, "id": i, "input": e.source_text, "references": e.references,
                         "output": outputs[split].get(i, "")})
    atomic_write_json(Path(out) / EXAMPLES_FILE, {
        "selection": (f"eval.examples = {spec.eval.examples}" if spec.eval.examples is not None else
                      f"{spec.eval.examples_per_split} per split drawn with the fixed seed {EXAMPLE_SEED}"),
        "decode": dataclasses.asdict(cfg), "examples": rows})
    return {"train_sample": block, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------- decoding variants
def _load_eval_data(spec: RunSpec, vocab, data_dir: str | None, config_dir: str | None):
    """(shown examples, size of the training split, the shown training examples not in the sample, the
    training sample, the evaluation split), encoded with the run's saved vocabulary; the same selection
    as runner.prepare_data."""
    from seq2seq_zoo.data.batching import encode_examples, percentile_filter
    from seq2seq_zoo.data.corpora import ReadStats, load_split, resolve_data_dir
    from seq2seq_zoo.runner import text_config
    d = spec.data
    root = resolve_data_dir(d.dataset, data_dir, config_dir)
    tc = text_config(spec)
    train = load_split(d.dataset, root, "train", d.on_bad, ReadStats())
    if d.filter_percentiles:
        train = percentile_filter(train, *d.filter_percentiles, tc)
    train = train[: d.max_train] if d.max_train is not None else train
    test = load_split(d.dataset, root, spec.eval.split, d.on_bad, ReadStats())
    test = test[: d.max_test] if d.max_test is not None else test
    shown = pick_examples(spec, [e.id for e in train], [e.id for e in test])
    idx = train_sample_indices(len(train), spec.eval.train_sample, spec.seed)
    enc = lambda xs: encode_examples(xs, vocab, tc, d.max_src_len, d.max_tgt_len)
    in_sample = {train[i].id for i in idx}
    wanted = {i for s, i in shown if s == "train"} - in_sample
    return shown, len(train), enc([e for e in train if e.id in wanted]), enc([train[i] for i in idx]), enc(test)


def _same(old: dict, cfg: DecodeConfig, run_rec: dict, spec: RunSpec) -> bool:
    return (old.get("eval", {}).get("decode") == dataclasses.asdict(cfg)
            and old.get("run_finished") == run_rec.get("finished")
            and old.get("train_sample_fraction", 0.0) == spec.eval.train_sample)


def run_decodes(run_dir: str | Path, variants: list[tuple[str, dict[str, Any]]], *, data_dir: str | None = None,
                config_dir: str | None = None, device: str | None = None, force: bool = False,
                on_change: str = "redo", progress: bool = False, command: str | None = None,
                order_base: int = 0, log: Callable[[str], None] = print) -> list[dict]:
    """Re-decode a finished run's best checkpoint once per (name, decode overrides) and write
    ``<run>/decodes/<name>/``. on_change: what to do when that name was decoded before with other
    settings: "redo" (experiment files: the file is the truth) or "error" (``zoo eval``; --force redoes)."""
    from seq2seq_zoo.data.vocab import Vocab
    from seq2seq_zoo.models.base import build_model, model_context
    from seq2seq_zoo.results import write_predictions, write_record
    from seq2seq_zoo.train.loop import autocast_dtype
    from seq2seq_zoo.utils import hardware, load_checkpoint, load_weights, pick_device
    run_dir = Path(run_dir)
    rec_path, ck = run_dir / "record.json", run_dir / "checkpoints"
    if not rec_path.is_file():
        raise FileNotFoundError(f"{rec_path} not found: {run_dir} is not a finished run (train it with `zoo run`)")
    from seq2seq_zoo.config import read_spec
    from seq2seq_zoo.results import read_record
    run_rec = read_record(rec_path)  # a damaged record or spec raises DamagedFile naming it
    name_run = run_rec.get("run", run_dir.name)
    spec = read_spec(ck / "spec.json") if (ck / "spec.json").is_file() else RunSpec.from_dict(run_rec["spec"])
    todo = []
    for order, (name, over) in enumerate(variants, order_base):
        if name == DEFAULT_DECODE_NAME:
            raise ConfigError(f"decode name '{name}' is reserved for the run's own decoding; choose another")
        cfg = dataclasses.replace(spec.decode, **over)
        if cfg.max_len > spec.data.max_tgt_len:
            raise ConfigError(f"decode '{name}': max_len {cfg.max_len} exceeds data.max_tgt_len "
                              f"({spec.data.max_tgt_len}) of run '{name_run}'")
        if cfg == spec.decode:  # e.g. a sweep's "greedy" for a run that already decodes greedily
            log(f"[{name_run}] decode '{name}' is the run's own decoding; no extra row")
            continue
        old_path = run_dir / DECODES_DIR / name / "record.json"
        if old_path.is_file() and not force:
            old = read_record(old_path)
            if _same(old, cfg, run_rec, spec):
                log(f"[{name_run}] decode '{name}' already done ({old_path}); skipping")
                continue
            if on_change == "error" and old.get("run_finished") == run_rec.get("finished"):
                was, now = old["eval"]["decode"], dataclasses.asdict(cfg)
                diff = ", ".join(f"{k} {was.get(k)} -> {v}" for k, v in now.items() if was.get(k) != v)
                raise ConfigError(f"{old_path}: decode '{name}' of run '{name_run}' exists with other settings "
                                  f"({diff or 'training sample changed'}); choose another --name or pass --force "
                                  "to replace it")
            log(f"[{name_run}] decode '{name}': settings or checkpoint changed since it was decoded; decoding again")
        todo.append((name, over, cfg, order))
    if not todo:
        return []
    for f in ("vocab.json", "best.pt"):
        if not (ck / f).is_file():
            raise FileNotFoundError(f"{ck / f} not found: re-decoding needs the run's checkpoints (they are not "
                                    "committed to git); retrain it with `zoo run ... --force`")
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    dev = pick_device(device or spec.train.device)
    dtype = autocast_dtype(spec.train.precision, dev)
    vocab = Vocab.load(ck / "vocab.json")
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
    load_weights(model, load_checkpoint(ck / "best.pt")["model"], ck / "best.pt")
    model.to(dev).eval()
    recorded = (run_rec.get("data") or {}).get("data_dir")
    if config_dir is None and recorded and (Path(recorded) / spec.data.dataset).is_dir():
        config_dir = recorded
    shown, n_train, train_enc, sample, test = _load_eval_data(spec, vocab, data_dir, config_dir)
    written = []
    for name, over, cfg, order in todo:
        log(f"[{name_run}] decode '{name}': {describe(dataclasses.asdict(cfg))}")
        out = run_dir / DECODES_DIR / name
        out.mkdir(parents=True, exist_ok=True)
        preds, block = decode_and_score(model, test, vocab, spec, cfg, dev, dtype, spec.eval.split, progress)
        extra = evaluate_extras(model, train_enc, test, preds, vocab, spec, cfg, shown, out, dev, dtype, progress,
                                train_sample=sample, train_size=n_train)
        write_predictions(out, [{"id": e.id, "prediction": p, "references": e.references} for e, p in zip(test, preds)])
        record = {"kind": "decode", "experiment": run_rec.get("experiment"), "run": name_run, "decode_name": name,
                  "order": order,
                  "overrides": over, "run_finished": run_rec.get("finished"), "checkpoint": "checkpoints/best.pt",
                  "best_step": run_rec.get("train", {}).get("best_step"),
                  "train_sample_fraction": spec.eval.train_sample,
                  "command": command or "zoo " + " ".join(sys.argv[1:]),
                  "finished": datetime.now(UTC).isoformat(timespec="seconds"), "hardware": hardware(),
                  "eval": block, "train_sample": extra["train_sample"],
                  "compute_seconds": block["decode_seconds"] + block["metric_seconds"] + extra["seconds"]}
        write_record(out, record)
        sc = block["scores"]
        log(f"[{name_run}] decode '{name}' done: ROUGE-1 {sc.get('rouge1', 0):.2f} ROUGE-2 {sc.get('rouge2', 0):.2f} "
            f"ROUGE-L {sc.get('rougeL', 0):.2f}")
        written.append(record)
    return written


def parse_variant_arg(text: str, name: str | None) -> tuple[str, dict[str, Any]]:
    """``--decode beam_size=8,length_penalty=1.0`` (+ ``--name``) -> (name, overrides)."""
    import re

    from seq2seq_zoo.config import parse_decode_overrides
    over = parse_decode_overrides(text)
    if name is None:
        name = "-".join(f"{k}{v}" for k, v in over.items())
    if not re.fullmatch(r"[\w.-]+", name):
        name = re.sub(r"[^\w.-]+", "_", name)
    return name, over
