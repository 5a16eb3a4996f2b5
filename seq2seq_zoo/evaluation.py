"""Decoding and scoring a split, shared by ``zoo run`` and ``zoo eval --decode``:

- ``decode_and_score``: the one path from a model and a split to predictions and the record's scores
  block (decoding settings, metric scores and settings, copy statistics, timings);
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

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import copy
import re

import numpy as np
import torch
from tqdm.auto import tqdm

from seq2seq_zoo.config import (DEFAULT_DECODE_NAME, DecodeConfig, RunSpec, decode_dict, decode_too_long,
                                decode_with, parse_decode_overrides)
from seq2seq_zoo.config.decoding import describe
from seq2seq_zoo.data.batching import Encoded, bucket_batches, encode_examples, iterate
from seq2seq_zoo.data.corpora import resolve_data_dir
from seq2seq_zoo.data.splits import select_splits, text_config
from seq2seq_zoo.data.text import detokenize
from seq2seq_zoo.data.vocab import EOS_ID, PAD_ID, UNK_ID
from seq2seq_zoo.decode import generate
from seq2seq_zoo.errors import ConfigError, DataError, MissingFile
from seq2seq_zoo.inference import load_trained_run, run_spec
from seq2seq_zoo.metrics import evaluate
from seq2seq_zoo.names import NAME_MAX, check_name, inside_run
from seq2seq_zoo.utils.io import commit_stage, new_stage
from seq2seq_zoo.decode import is_int8
from seq2seq_zoo.models.fast.kernels import packed_linear_weights
from seq2seq_zoo.precision import autocast, autocast_dtype, int8_linears
from seq2seq_zoo.registry import did_you_mean
from seq2seq_zoo.results import TUNE_FILE, write_predictions, write_record, write_scores
from seq2seq_zoo.utils import atomic_write_json, atomic_write_text, hardware, invocation, pick_device

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


def check_example_ids(spec: RunSpec, train_ids: list[str], eval_ids: list[str]) -> None:
    """``eval.examples`` ids that are in neither the evaluation nor the training split raise ``DataError``
    (the runner checks this with the data, before training; the examples are picked after it)."""
    if spec.eval.examples is None:
        return
    ev, tr = set(eval_ids), set(train_ids)
    for i in spec.eval.examples:
        if i not in ev and i not in tr:
            near = did_you_mean(i, list(ev | tr)) if len(ev) + len(tr) < 50_000 else ""
            raise DataError(f"eval.examples: no example with id {i!r} in the training split (after "
                            f"data.max_train) or the '{spec.eval.split}' split.{near}")


def pick_examples(spec: RunSpec, train_ids: list[str], eval_ids: list[str]) -> list[tuple[str, str]]:
    """[(split, id)] of the qualitative examples: ``eval.examples`` (ids looked up in the evaluation split,
    then the training split), else ``eval.examples_per_split`` per split drawn with a fixed seed."""
    split = spec.eval.split
    if spec.eval.examples is not None:
        check_example_ids(spec, train_ids, eval_ids)
        ev = set(eval_ids)
        return [(split, i) if i in ev else ("train", i) for i in spec.eval.examples]
    k = spec.eval.examples_per_split
    rng = np.random.default_rng(EXAMPLE_SEED)
    out = []
    for name, ids in (("train", train_ids), (split, eval_ids)):
        if k and ids:
            out += [(name, ids[j]) for j in sorted(rng.choice(len(ids), size=min(k, len(ids)), replace=False))]
    return out


# ------------------------------------------------------------------------------- decoding and scoring
def decode_split(model, data: list[Encoded], vocab, cfg: DecodeConfig, device, dtype, progress=False,
                 return_ids: bool = False):
    """Decoded text of every example (in ``data`` order); with ``return_ids`` also the token ids
    (extended ids for copied words; None for a model that writes its summaries without the decoder)."""
    texts = model.extract(data)  # extractive baselines select source text instead of decoding
    if texts is not None:
        return (texts, [None] * len(texts)) if return_ids else texts
    preds: dict[int, str] = {}
    pred_ids: dict[int, list[int]] = {}
    batches = bucket_batches(data, cfg.batch_size, shuffle=False)
    rows = cfg.batch_size * (1 if cfg.method == "greedy" else cfg.beam_size)
    # weights packed (or quantised, decode.precision = "int8") once for the whole split (``generate`` then
    # finds them so and keeps them)
    with torch.no_grad(), autocast(device, dtype), int8_linears(model, is_int8(cfg)), \
            packed_linear_weights(model, rows):
        for _, batch in tqdm(iterate(data, batches), total=len(batches), desc="decoding",
                             disable=None if progress else True, leave=False):
            batch.to(device)
            ids = generate(model, batch, cfg)
            for ex_id, oovs, seq in zip(batch.ids, batch.oovs, ids):
                preds[ex_id] = detokenize(vocab.decode(seq, oovs))
                pred_ids[ex_id] = seq
    if return_ids:
        return [preds[e.id] for e in data], [pred_ids[e.id] for e in data]
    return [preds[e.id] for e in data]


def teacher_forced_on(data: list[Encoded], pred_ids: list[list[int]], vocab_size: int) -> list[Encoded]:
    """Copies of ``data`` whose targets are the model's own predictions (extended ids kept in
    ``tgt_ext``, mapped to <unk> in ``tgt``): a forward pass then replays what the decoder saw."""
    items = []
    for e, ids in zip(data, pred_ids):
        x = copy.copy(e)
        x.tgt_ext = np.asarray(ids or [EOS_ID], dtype=np.int64)
        x.tgt = np.where(x.tgt_ext >= vocab_size, UNK_ID, x.tgt_ext)
        items.append(x)
    return items


@torch.no_grad()
def copy_stats(model, data: list[Encoded], pred_ids: list[list[int]], vocab_size: int, device, dtype,
               batch_size: int = 32) -> dict | None:
    """For copy models: mean p_gen over the generated words of the split (teacher-forcing the model on
    its own outputs reproduces the decoder's p_gen at each step), and the share of generated words
    that are copied OOV words (extended ids). None for models without p_gen."""
    model.eval()
    if any(ids is None for ids in pred_ids):  # not decoded token by token (an extractive baseline)
        return None
    items = teacher_forced_on(data, pred_ids, vocab_size)
    total, n, copied = 0.0, 0, 0
    for _, batch in iterate(items, bucket_batches(items, batch_size, shuffle=False)):
        batch.to(device)
        with torch.no_grad(), autocast(device, dtype):
            out = model(batch)
        if "p_gen" not in out.extras:
            return None
        words = (batch.tgt_out != PAD_ID) & (batch.tgt_out != EOS_ID)
        total += float(out.extras["p_gen"].float()[words].sum())
        n += int(words.sum())
        copied += int((batch.tgt_out[words] >= vocab_size).sum())
    return {"p_gen_mean": total / max(n, 1), "copied_oov_share": copied / max(n, 1), "generated_words": n}


def score(preds: list[str], refs: list[list[str]], spec: RunSpec, device,
          per_example: dict | None = None) -> tuple[dict, dict]:
    """The run's ``eval.metrics`` with its settings: (scores, settings)."""
    return evaluate(preds, refs, spec.eval.metrics, per_example=per_example, config=spec.eval, device=str(device))


def decode_and_score(model, data: list[Encoded], vocab, spec: RunSpec, cfg: DecodeConfig, device, dtype,
                     split: str, progress: bool = False, return_ids: bool = False, per_example: dict | None = None):
    """Decode ``data`` with ``cfg`` and score it with the run's metrics. Returns (predictions, block),
    block being what a record stores under "eval" (split, n_examples, decode, scores, settings, copying,
    decode_seconds, metric_seconds); with ``return_ids`` also the predicted token ids."""
    t0 = time.perf_counter()
    preds, ids = decode_split(model, data, vocab, cfg, device, dtype, progress, return_ids=True)
    decode_s = time.perf_counter() - t0
    copying = copy_stats(model, data, ids, len(vocab), device, dtype, cfg.batch_size)  # p_gen, copied OOVs
    t1 = time.perf_counter()
    scores, settings = score(preds, [e.references for e in data], spec, device, per_example)
    block = {"split": split, "n_examples": len(preds), "decode": decode_dict(cfg), "scores": scores,
             "settings": settings, "copying": copying, "decode_seconds": decode_s,
             "metric_seconds": time.perf_counter() - t1}
    return (preds, block, ids) if return_ids else (preds, block)


def validation_block(model, data: list[Encoded], vocab, spec: RunSpec, cfg: DecodeConfig, device, dtype,
                     progress: bool = False) -> dict | None:
    """Decode the whole validation split with ``cfg`` (the same settings the test split is decoded with)
    and score it with the run's ROUGE settings: what the leaderboard and the headline decoding are chosen
    on, so that no choice reads a test score. The record stores it under "validation" (split,
    n_examples, decode, scores, settings, decode_seconds, metric_seconds). None for an empty split."""
    if not data:
        return None
    t0 = time.perf_counter()
    preds = decode_split(model, data, vocab, cfg, device, dtype, progress)
    t1 = time.perf_counter()
    scores, settings = evaluate(preds, [e.references for e in data], ["rouge"], config=spec.eval)
    return {"split": "validation", "n_examples": len(preds), "decode": decode_dict(cfg), "scores": scores,
            "settings": settings, "decode_seconds": t1 - t0, "metric_seconds": time.perf_counter() - t1}


def evaluate_extras(model, train: list[Encoded], eval_data: list[Encoded], eval_preds: list[str], vocab,
                    spec: RunSpec, cfg: DecodeConfig, shown: list[tuple[str, str]], out: Path, device, dtype,
                    progress: bool = False, train_sample: list[Encoded] | None = None,
                    train_size: int | None = None) -> dict:
    """Decode + score the training sample (if ``eval.train_sample``), decode the shown training examples,
    and write ``predictions_train_sample.jsonl`` and ``examples.json`` into ``out``. ``train`` is the
    training split the sample is drawn from, or (re-decoding, with ``train_sample`` already drawn and the
    split's ``train_size``) just the shown training examples. Returns {"train_sample": block or None,
    "seconds": time spent}."""
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
                               decode_split(model, missing, vocab, cfg, device, dtype, False)))
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
        "decode": decode_dict(cfg), "examples": rows})
    return {"train_sample": block, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------- decoding variants
def _load_eval_data(spec: RunSpec, vocab, data_dir: str | None, config_dir: str | None):
    """(shown examples, size of the training split, the shown training examples not in the sample, the
    training sample, the evaluation split, the validation split), encoded with the run's saved
    vocabulary; the same selection as training (``data.splits.select_splits``)."""
    d = spec.data
    root = resolve_data_dir(d.dataset, data_dir, config_dir, d.options)
    tc = text_config(d)
    splits = select_splits(spec, root, ("train", "validation", "test"))
    train, test = splits["train"], splits["test"]
    shown = pick_examples(spec, [e.id for e in train], [e.id for e in test])
    idx = train_sample_indices(len(train), spec.eval.train_sample, spec.seed)
    enc = lambda xs: encode_examples(xs, vocab, tc, d.max_src_len, d.max_tgt_len)
    in_sample = {train[i].id for i in idx}
    wanted = {i for s, i in shown if s == "train"} - in_sample
    return (shown, len(train), enc([e for e in train if e.id in wanted]), enc([train[i] for i in idx]), enc(test),
            enc(splits["validation"]))


def _same(old: dict, cfg: DecodeConfig, run_rec: dict, spec: RunSpec) -> bool:
    return (old.get("eval", {}).get("decode") == decode_dict(cfg)
            and old.get("run_finished") == run_rec.get("finished")
            and old.get("train_sample_fraction", 0.0) == spec.eval.train_sample)


def run_decodes(run_dir: str | Path, variants: list[tuple[str, dict[str, Any]]], *, data_dir: str | None = None,
                config_dir: str | None = None, device: str | None = None, force: bool = False,
                on_change: str = "redo", progress: bool = False, command: str | None = None,
                order_base: int = 0, log: Callable[[str], None] = print) -> list[dict]:
    """Re-decode a finished run's best checkpoint once per (name, decode overrides) and write
    ``<run>/decodes/<name>/``. on_change: what to do when that name was decoded before with other
    settings: "redo" (experiment files: the file is the truth) or "error" (``zoo eval``; --force redoes)."""
    run_dir = Path(run_dir)
    for name, _ in variants:  # names are folder names: checked before anything is read or written
        inside_run(run_dir, DECODES_DIR, check_name(name, f"decode name {name!r}"))
    rec_path = run_dir / "record.json"
    if not rec_path.is_file():
        raise MissingFile(f"{rec_path} not found: {run_dir} is not a finished run (train it with `zoo run`)")
    from seq2seq_zoo.results import read_record
    run_rec = read_record(rec_path)  # a damaged record raises DamagedFile naming it
    name_run = run_rec.get("run", run_dir.name)
    if run_rec.get("baseline"):
        log(f"[{name_run}] a baseline with nothing to train and no decoder: no decoding variants")
        return []
    spec = run_spec(run_dir, run_rec)
    todo = []
    for order, (name, over) in enumerate(variants, order_base):
        if name == DEFAULT_DECODE_NAME:
            raise ConfigError(f"decode name '{name}' is reserved for the run's own decoding; choose another")
        cfg = decode_with(spec.decode, over)
        too_long = decode_too_long(cfg, spec.data)
        if too_long:
            raise ConfigError(f"decode '{name}' of run '{name_run}': {too_long}")
        if decode_dict(cfg) == decode_dict(spec.decode):  # e.g. a sweep's "greedy" for a greedy run
            log(f"[{name_run}] decode '{name}' is the run's own decoding; no extra row")
            continue
        old_path = run_dir / DECODES_DIR / name / "record.json"
        if old_path.is_file() and not force:
            old = read_record(old_path)
            if _same(old, cfg, run_rec, spec):
                log(f"[{name_run}] decode '{name}' already done ({old_path}); skipping")
                continue
            if on_change == "error" and old.get("run_finished") == run_rec.get("finished"):
                was, now = old["eval"]["decode"], decode_dict(cfg)
                diff = ", ".join(f"{k} {was.get(k)} -> {v}" for k, v in now.items() if was.get(k) != v)
                raise ConfigError(f"{old_path}: decode '{name}' of run '{name_run}' exists with other settings "
                                  f"({diff or 'training sample changed'}); choose another --name or pass --force "
                                  "to replace it")
            log(f"[{name_run}] decode '{name}': settings or checkpoint changed since it was decoded; decoding again")
        todo.append((name, over, cfg, order))
    if not todo:
        return []
    trained = load_trained_run(run_dir, "best.pt", purpose="re-decoding", record=run_rec)
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    dev = pick_device(device or spec.train.device)
    dtype = autocast_dtype(spec.train.precision, dev)
    vocab = trained.vocab
    model = trained.model.to(dev).eval()
    recorded = (run_rec.get("data") or {}).get("data_dir")
    if config_dir is None and recorded and (Path(recorded) / spec.data.dataset).is_dir():
        config_dir = recorded
    shown, n_train, train_enc, sample, test, valid = _load_eval_data(spec, vocab, data_dir, config_dir)
    written = []
    for name, over, cfg, order in todo:
        log(f"[{name_run}] decode '{name}': {describe(decode_dict(cfg))}")
        final = inside_run(run_dir, DECODES_DIR, name)
        out = new_stage(final, "decode", run_dir)   # written whole, then swapped in (a kill: old or new)
        per_example: dict[str, list[float]] = {}
        preds, block = decode_and_score(model, test, vocab, spec, cfg, dev, dtype, spec.eval.split, progress,
                                        per_example=per_example)
        extra = evaluate_extras(model, train_enc, test, preds, vocab, spec, cfg, shown, out, dev, dtype, progress,
                                train_sample=sample, train_size=n_train)
        write_predictions(out, [{"id": e.id, "prediction": p, "references": e.references} for e, p in zip(test, preds)])
        write_scores(out, [e.id for e in test], per_example)
        val = validation_block(model, valid, vocab, spec, cfg, dev, dtype, progress)
        record = {"kind": "decode", "experiment": run_rec.get("experiment"), "run": name_run, "decode_name": name,
                  "order": order,
                  "overrides": over, "run_finished": run_rec.get("finished"), "checkpoint": "checkpoints/best.pt",
                  "best_step": run_rec.get("train", {}).get("best_step"),
                  "train_sample_fraction": spec.eval.train_sample,
                  "command": command or invocation(),
                  "finished": datetime.now(UTC).isoformat(timespec="seconds"), "hardware": hardware(),
                  "eval": block, "validation": val, "train_sample": extra["train_sample"],
                  "compute_seconds": block["decode_seconds"] + block["metric_seconds"] + extra["seconds"]
                  + (val["decode_seconds"] + val["metric_seconds"] if val else 0.0)}
        write_record(out, record)
        commit_stage(out, final)
        sc = block["scores"]
        log(f"[{name_run}] decode '{name}' done: ROUGE-1 {sc.get('rouge1', 0):.2f} ROUGE-2 {sc.get('rouge2', 0):.2f} "
            f"ROUGE-L {sc.get('rougeL', 0):.2f}")
        written.append(record)
    return written


def parse_variant_arg(text: str, name: str | None) -> tuple[str, dict[str, Any]]:
    """``--decode beam_size=8,length_penalty=1.0`` (+ ``--name``) -> (name, overrides)."""
    over = parse_decode_overrides(text)
    if name is None:
        name = "-".join(f"{k}{v}" for k, v in over.items())
        if not re.fullmatch(r"[\w.-]+", name):
            name = re.sub(r"[^\w.-]+", "_", name)
        name = name.lstrip(".").encode("utf-8")[:NAME_MAX].decode("utf-8", errors="ignore") or "variant"
    return check_name(name, "--name"), over


# ------------------------------------------------------------------- choosing decoding on validation
def parse_grid(items: list[str]) -> list[dict[str, Any]]:
    """``["beam_size=1,4", "length_penalty=0.6,1.0"]`` -> every combination as checked decode.*
    overrides (the first key varies slowest). A key given twice is an error."""
    import itertools
    axes: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--grid: {item!r} is not KEY=V1,V2,... (e.g. beam_size=1,4)")
        key, values = (x.strip() for x in item.split("=", 1))
        if key in axes:
            raise ConfigError(f"--grid: {key} is given twice; list its values once, comma-separated")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals:
            raise ConfigError(f"--grid: {key} has no values (e.g. {key}=1,4)")
        axes[key] = [parse_decode_overrides(f"{key}={v}", where="--grid")[key] for v in vals]
    if not axes:
        raise ConfigError("--grid: no settings given (e.g. --grid beam_size=1,4 length_penalty=0.6,1.0)")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def tune_decoding(run_dir: str | Path, grid: list[dict[str, Any]], *, data_dir: str | None = None,
                  config_dir: str | None = None, device: str | None = None, max_examples: int = 0,
                  progress: bool = False, log: Callable[[str], None] = print) -> list[dict]:
    """Decode the VALIDATION split of a finished run's best checkpoint once per grid point (decode.*
    overrides on the run's own decoding) and score it with the run's ROUGE settings. Changes no test
    output (``save_tune`` stores the rows). Returns one row per grid point, in grid order: {"settings": overrides, "decode": full settings,
    "n_examples", "rouge1", "rouge2", "rougeL", "pred_len"}. ``max_examples``: the first N (0 = all)."""
    from seq2seq_zoo.results import read_record
    run_dir = Path(run_dir)
    rec_path = run_dir / "record.json"
    if not rec_path.is_file():
        raise MissingFile(f"{rec_path} not found: {run_dir} is not a finished run (train it with `zoo run`)")
    run_rec = read_record(rec_path)
    if run_rec.get("baseline"):
        raise ConfigError(f"{run_dir}: a baseline has no decoder to tune (its own k is chosen on validation)")
    spec = run_spec(run_dir, run_rec)
    cfgs = []
    for over in grid:
        cfg = decode_with(spec.decode, over)
        too_long = decode_too_long(cfg, spec.data)
        if too_long:
            raise ConfigError(f"--grid {over}: {too_long}")
        cfgs.append(cfg)
    trained = load_trained_run(run_dir, "best.pt", purpose="tuning the decoding", record=run_rec)
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    dev = pick_device(device or spec.train.device)
    dtype = autocast_dtype(spec.train.precision, dev)
    model = trained.model.to(dev).eval()
    recorded = (run_rec.get("data") or {}).get("data_dir")
    if config_dir is None and recorded and (Path(recorded) / spec.data.dataset).is_dir():
        config_dir = recorded
    root = resolve_data_dir(spec.data.dataset, data_dir, config_dir, spec.data.options)
    valid = select_splits(spec, root, ("validation",))["validation"]
    if max_examples:
        valid = valid[:max_examples]
    if not valid:
        raise DataError(f"{run_dir}: the validation split is empty (data.max_valid?); nothing to tune on")
    data = encode_examples(valid, trained.vocab, text_config(spec.data), spec.data.max_src_len, spec.data.max_tgt_len)
    refs = [e.references for e in data]
    rows = []
    for over, cfg in zip(grid, cfgs):
        preds = decode_split(model, data, trained.vocab, cfg, dev, dtype, progress)
        sc, _ = evaluate(preds, refs, ["rouge"], config=spec.eval)
        row = {"settings": over, "decode": decode_dict(cfg), "n_examples": len(preds),
               **{k: sc[k] for k in ("rouge1", "rouge2", "rougeL", "pred_len")}}
        log(f"{', '.join(f'{k}={v}' for k, v in over.items())}: ROUGE-1 {row['rouge1']:.2f}")
        rows.append(row)
    return rows


def save_tune(run_dir: str | Path, rows: list[dict], max_examples: int = 0) -> Path:
    """Add the rows of ``tune_decoding`` to ``<run>/tune.json`` (a row with the same full decode settings
    and example count replaces the older one), with the run's ``finished`` stamp: the stored grid that a
    decoding choice can be re-checked against. Rows of a run retrained since are dropped."""
    from seq2seq_zoo.results import read_record
    run_dir = Path(run_dir)
    finished = read_record(run_dir / "record.json").get("finished")
    path = run_dir / TUNE_FILE
    old: list[dict] = []
    if path.is_file():
        try:
            got = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(got, dict) and got.get("run_finished") == finished and isinstance(got.get("rows"), list):
                old = [r for r in got["rows"] if isinstance(r, dict)]
        except (OSError, ValueError):
            old = []   # a damaged grid file is replaced by the new one
    new = [{**r, "max_examples": max_examples} for r in rows]
    key = lambda r: (json.dumps(r.get("decode"), sort_keys=True), r.get("n_examples"))
    fresh = {key(r) for r in new}
    merged = [r for r in old if key(r) not in fresh] + new
    atomic_write_json(path, {"split": "validation", "run_finished": finished, "rows": merged})
    return path


def tune_table(rows: list[dict], rouge_unk: str = "match") -> str:
    """The rows of ``tune_decoding`` as a Markdown table, best validation ROUGE-1 first."""
    keys = list(dict.fromkeys(k for r in rows for k in r["settings"]))
    head = keys + ["val ROUGE-1", "val ROUGE-2", "val ROUGE-L", "length"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: -r["rouge1"]):
        lines.append("| " + " | ".join([str(r["settings"].get(k, "")) for k in keys]
                                        + [f"{r[m]:.2f}" for m in ("rouge1", "rouge2", "rougeL")]
                                        + [f"{r['pred_len']:.1f}"]) + " |")
    n = rows[0]["n_examples"] if rows else 0
    return "\n".join(lines) + f"\n\nvalidation split, {n} examples; ROUGE (unk: {rouge_unk}), F1 x 100"
