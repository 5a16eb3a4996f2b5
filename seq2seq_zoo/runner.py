"""One run, start to end (``run``); not to be confused with cli/run.py (``zoo run``, which calls it per run).

Data -> vocabulary -> model -> the loop -> decoding -> metrics -> record. The other look-alikes:
cli/runs.py holds the commands on a finished run, bench/run.py the ``zoo bench`` measurements.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seq2seq_zoo import __version__, embeddings, record_schema
from seq2seq_zoo.config import RunSpec
from seq2seq_zoo.data.batching import Encoded, collate, encode_examples
from seq2seq_zoo.data.corpora import ReadStats, resolve_data_dir
from seq2seq_zoo.data.splits import select_splits, text_config
from seq2seq_zoo.data.text import tokenize, tokenize_source
from seq2seq_zoo.data.vocab import UNK_ID, Vocab
from seq2seq_zoo.errors import InitError
from seq2seq_zoo.evaluation import (check_example_ids, decode_and_score, evaluate_extras, pick_examples,
                                    teacher_forced_on, validation_block)
from seq2seq_zoo.models.base import MODELS, build_model, count_parameters, model_context, model_options
from seq2seq_zoo.names import inside
from seq2seq_zoo.precision import autocast_dtype, precision_name, sibling_precision_note
from seq2seq_zoo.results import write_predictions, write_record, write_scores
from seq2seq_zoo.train import distributed
from seq2seq_zoo.train.loop import fit, lr_at
from seq2seq_zoo.utils import (atomic_write_json, hardware, invocation, load_checkpoint, pick_device,
                               process_code_version, seed_everything)


def prepare_data(spec: RunSpec, data_dir_flag: str | None = None, log=print, vocab: Vocab | None = None):
    """Read, filter and encode the three splits. ``vocab``: use this vocabulary (a run started from
    another run's weights must keep that run's word ids) instead of building one from the training set."""
    d = spec.data
    root = resolve_data_dir(d.dataset, data_dir_flag, spec.data_dir, d.options)
    tc = text_config(d)
    stats = {s: ReadStats() for s in ("train", "validation", "test")}
    splits = select_splits(spec, root, stats=stats, log=log)
    train, val, test = splits["train"], splits["validation"], splits["test"]
    if vocab is None:
        vocab = Vocab.build((toks for e in train for toks in (tokenize_source(e.source, tc)[: d.max_src_len],
                                                               tokenize(e.references[0], tc)[: d.max_src_len])),
                            max_size=d.vocab_size, min_freq=d.min_freq)
    enc = {name: encode_examples(split, vocab, tc, d.max_src_len, d.max_tgt_len)
           for name, split in (("train", train), ("validation", val), ("test", test))}
    info = {"dataset": d.dataset, "data_dir": str(root), "vocab_size": len(vocab),
            "sizes": {k: len(v) for k, v in enc.items()}, "eval_split": spec.eval.split,
            "skipped": {k: s.skipped for k, s in stats.items() if s.skipped},
            "reader": {k: s.notes for k, s in stats.items() if s.notes},
            "src_tokens_mean": float(np.mean([len(e.src) for e in enc["train"]])) if enc["train"] else 0.0,
            "tgt_tokens_mean": float(np.mean([len(e.tgt) for e in enc["train"]])) if enc["train"] else 0.0,
            "oov_rate_test_src": _oov_rate(enc["test"])}
    return vocab, enc, info


def _oov_rate(data: list[Encoded]) -> float:
    n = sum(len(e.src) for e in data)
    return float(sum(int((e.src == 1).sum()) for e in data) / n) if n else 0.0


def resolve_init(value: str, out: Path, seed: int | None = None) -> Path:
    """``init_from`` -> a checkpoint file: a .pt file, a run directory (its checkpoints/best.pt), or
    the name of a run of the same experiment (a sibling of ``out``). With ``seed``, a run trained with
    several seeds is found by its seed too (``dsum-pg`` -> ``dsum-pg-seed2`` for seed 2), so every seed
    of a fine-tuning run starts from the same seed of its parent."""
    names = [value] + ([f"{value.rstrip('/')}-seed{seed}"] if seed is not None else [])
    for name in names:
        for cand in (Path(name), out.parent / name):
            if cand.is_file():
                return cand
            if (cand / "checkpoints" / "best.pt").is_file():
                return cand / "checkpoints" / "best.pt"
    raise InitError(f"train.init_from = {value!r}: no checkpoint found (looked for "
                    + " and ".join(f"{c}/checkpoints/best.pt" for n in names for c in (n, out.parent / n))
                    + "); train that run first (zoo run ... --only RUN)")


def _check_init(ckpt: Path, value: str) -> None:
    """``train.init_from`` names a file: it must read as a checkpoint of the suite (a .pt file with weights)."""
    from seq2seq_zoo.errors import UserError
    try:
        state = load_checkpoint(ckpt)["model"]
    except UserError as e:
        raise InitError(f"train.init_from = {value!r}: {e}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InitError(f"train.init_from = {value!r}: {ckpt} is not a seq2seq-zoo checkpoint (its 'model' entry "
                        "is not a set of weights); name a run, its folder or its checkpoints/best.pt")


def load_init(model, ckpt: Path, log=print) -> dict:
    """Copy a trained run's weights into ``model``. Parameters the model has and the checkpoint lacks
    (e.g. the coverage weights w_c when coverage is switched on for a final phase) keep their
    initialisation; anything else that does not match is an error."""
    state = load_checkpoint(ckpt)["model"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InitError(f"train.init_from {ckpt}: not a seq2seq-zoo checkpoint (its 'model' entry is not a set of "
                        "weights); name a run, its folder or its checkpoints/best.pt")
    own = model.state_dict()
    bad = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}" for k, v in state.items()
           if k in own and own[k].shape != v.shape]
    extra = [k for k in state if k not in own]
    if bad or extra:
        raise InitError(f"train.init_from {ckpt}: the checkpoint does not fit this model "
                        f"({'; '.join(bad[:3] + [f'unexpected {k}' for k in extra[:3]])}); use the same model "
                        "options as that run (only switches that add parameters, like coverage, may differ)")
    missing = [k for k in own if k not in state]
    model.load_state_dict(state, strict=False)
    log(f"initialised from {ckpt}" + (f" (new, not in the checkpoint: {', '.join(missing)})" if missing else ""))
    return {"checkpoint": str(ckpt), "new_parameters": missing}


@dataclass
class _Where:
    """Where and how one process of a run works: the folders, this DDP rank (None in one process), whether it
    writes (rank 0), the device, and its log and progress bars (silent on ranks > 0)."""
    spec: RunSpec
    out: Path
    ckpt: Path
    ddp: Any
    main: bool
    device: Any
    log: Any
    progress: bool


def run(spec: RunSpec, out: Path, *, data_dir: str | None = None, resume: bool = False, progress: bool = True,
        order: int = 0, command: str | None = None, log=print) -> dict:
    """Train and evaluate one run; writes record.json and predictions.jsonl into ``out``. In a DDP run
    (``train.distributed``) every rank trains; ranks > 0 then return None and only rank 0 writes.
    The stages: start (folders, threads, seed, device) -> prepare (the starting checkpoint, data,
    vocabulary) -> build (embeddings, model, starting weights) -> train (or tune a baseline) -> evaluate
    (test and validation decodes, scores, artifacts) -> record."""
    t_start = time.perf_counter()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    code = process_code_version()   # the code this process imported, not a later checkout's
    w = _start(spec, out, progress, log)
    init_ckpt, vocab, data, data_info = _prepare(w, data_dir)
    model, params, emb_info, init_info = _build(w, vocab, data, init_ckpt)
    st, baseline, dtype = _train(w, model, data, vocab, resume)
    if not w.main:
        return None  # DDP ranks > 0: rank 0 decodes, scores and writes the results
    ev = _evaluate(w, model, data, vocab, dtype, baseline)
    record = {
        "experiment": spec.experiment, "run": spec.name, "order": order, "status": "done",
        "version": __version__, "code": code, "command": command or invocation(),
        "started": started, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "spec": spec.to_dict(), "seed": spec.seed, "profile": spec.profile, "model": spec.model,
        "params": params, "model_rules": model.model_rules(),  # the rules the tables state
        "data": data_info, "embeddings": emb_info, "init_from": init_info,
        "baseline": baseline,
        "train": _train_block(w, st, baseline, dtype),
        "lr_curve": _lr_curve(spec, model, st) if baseline is None else [],
        "train_sample": ev["extra"]["train_sample"],
        "eval": ev["test"],
        "validation": ev["validation"],
        "hardware": hardware(),
        # this invocation only; compute_seconds sums training, validation, decoding and scoring over
        # every invocation of a resumed run (work discarded by a crash is not counted)
        "wall_seconds": time.perf_counter() - t_start,
        "compute_seconds": st.train_seconds + st.val_seconds + ev["seconds"],
    }
    # the record's schema lives in record_schema.py (the readers use it too): a key the writer forgot or
    # mistyped is a bug here, not a damaged file later
    bad = record_schema.problem({"schema": record_schema.VERSION, **record}, record_schema.written_schema())
    if bad:
        raise RuntimeError(f"run record of {spec.name} does not fit record_schema.RECORD ({bad})")
    write_record(w.out, record)
    return record


def _start(spec: RunSpec, out: Path, progress: bool, log) -> _Where:
    """The run folder (a name such as '..' writes nothing), this rank, temporary files a kill left, the
    threads, the seed and the device."""
    out = inside(Path(out).parent, Path(out).name)
    ddp = distributed.current()  # None in one process; else this rank of a DDP run: only rank 0 writes
    main = ddp is None or ddp.is_main
    if not main:
        log, progress = (lambda *a, **k: None), False
    ckpt = out / "checkpoints"
    for tmp in list(out.glob(".*.tmp")) + list(ckpt.glob(".*.tmp")) if main else []:  # left by a kill mid-write
        tmp.unlink(missing_ok=True)
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    seed_everything(spec.seed)
    device = pick_device(spec.train.device) if ddp is None else ddp.device(pick_device(spec.train.device))
    return _Where(spec, out, ckpt, ddp, main, device, log, progress)


def _prepare(w: _Where, data_dir: str | None):
    """(the starting checkpoint or None, vocabulary, encoded splits, data info). A starting file that is not a
    checkpoint, bad data settings and unknown example ids stop here, before the run folder is made."""
    spec = w.spec
    init_ckpt = resolve_init(spec.train.init_from, w.out, spec.seed) if spec.train.init_from else None
    if init_ckpt is not None:
        _check_init(init_ckpt, spec.train.init_from)
    init_vocab = Vocab.load(init_ckpt.parent / "vocab.json") if init_ckpt and (init_ckpt.parent / "vocab.json").is_file() \
        else None
    vocab, data, data_info = prepare_data(spec, data_dir, w.log, vocab=init_vocab)
    # unknown eval.examples ids stop here, with the data, before training (the examples are picked after it)
    check_example_ids(spec, [e.id for e in data["train"]], [e.id for e in data["test"]])
    w.ckpt.mkdir(parents=True, exist_ok=True)  # only now: bad data settings leave nothing under results/
    if w.main:
        vocab.save(w.ckpt / "vocab.json")
        atomic_write_json(w.ckpt / "spec.json", spec.to_dict())
    w.log(f"[{spec.name}] {data_info['sizes']} examples, vocabulary {len(vocab)}")
    return init_ckpt, vocab, data, data_info


def _build(w: _Where, vocab: Vocab, data: dict, init_ckpt: Path | None):
    """(model on the device, its parameter counts, pretrained-embedding info, starting-weights info). Pretrained vectors: the option
    the model declares for them (``embeddings_option``) and their width (``embedding_dim``), models/base.py."""
    spec, log = w.spec, w.log
    seed_everything(spec.seed)
    context = model_context(len(vocab), spec.data)
    emb_info = None
    factory = MODELS.get(spec.model)
    emb_option = getattr(factory, "embeddings_option", None)
    options = {**model_options(spec.model), **spec.model_options}
    emb_setting = spec.model_options.get(emb_option, "random") if emb_option else "random"
    if emb_setting != "random":
        dim = factory.embedding_dim(options)
        tc = text_config(spec.data)
        sentences = (toks for e in data["train"] for toks in (tokenize_source(e.source_text, tc),
                                                               tokenize(e.references[0], tc)))
        with w.ddp.main_first() if w.ddp else contextlib.nullcontext():  # DDP: rank 0 fills the cache first
            context["pretrained_embeddings"], emb_info = embeddings.resolve(emb_setting, vocab, dim, sentences,
                                                                            spec.seed)
        log(f"[{spec.name}] embeddings {emb_setting}: {emb_info['found']:,}/{emb_info['vocab']:,} vocabulary words "
            f"covered ({100 * emb_info['coverage']:.1f}%)")
        seed_everything(spec.seed)
    model = build_model(spec.model, context, spec.model_options).to(w.device)
    init_info = load_init(model, init_ckpt, log) if init_ckpt else None
    params = count_parameters(model)
    log(f"[{spec.name}] model {spec.model}: {params['total']:,} trainable parameters")
    return model, params, emb_info, init_info


def _train(w: _Where, model, data: dict, vocab: Vocab, resume: bool):
    """(training state, baseline info or None, autocast dtype): the loop for a trained model, then its best
    checkpoint (or the mean of its last epochs) loaded for decoding; an extractive baseline instead
    chooses its options on validation (``tune``)."""
    spec = w.spec
    dtype = autocast_dtype(spec.train.precision, w.device)
    if not model.trainable:
        tuned = model.tune(data["validation"])
        baseline = {"describe": model.describe() or spec.model, "upper_bound": bool(model.upper_bound),
                    "tuned": tuned, "deterministic": bool(getattr(model, "deterministic", False))}
        w.log(f"[{spec.name}] {baseline['describe']}: nothing to train")
        return _NoTraining(), baseline, None
    if note := sibling_precision_note(w.out, spec.name, spec.seed, precision_name(dtype), spec.train.precision):
        w.log(note)
    st = fit(model, data["train"], data["validation"], spec.train, seed=spec.seed, ckpt_dir=w.ckpt, device=w.device,
             resume=resume, progress=w.progress, log=w.log, ddp=w.ddp, vocab=vocab, run_dir=w.out)
    if not w.main:
        return st, None, dtype
    model.load_state_dict(load_checkpoint(w.ckpt / "best.pt")["model"])
    if spec.train.average_last:  # decode with the mean of the last N epochs' weights
        from seq2seq_zoo.averaging import average_run
        model.load_state_dict(load_checkpoint(average_run(w.out, min(spec.train.average_last, len(st.history)),
                                                          log=w.log, force=True))["model"])
    return st, None, dtype


def _evaluate(w: _Where, model, data: dict, vocab: Vocab, dtype, baseline: dict | None) -> dict:
    """Decode and score the test split (predictions.jsonl, scores.jsonl), the same decoding on the whole
    validation split (what every choice between runs and decodings reads), the plots' artifacts, the
    seeded training sample and the shown examples (examples.json). Returns {"test", "validation",
    "extra", "seconds"}."""
    spec, dev, out = w.spec, w.device, w.out
    per_example: dict[str, list[float]] = {}
    preds, block, pred_ids = decode_and_score(model, data["test"], vocab, spec, spec.decode, dev, dtype,
                                              spec.eval.split, w.progress, return_ids=True, per_example=per_example)
    write_predictions(out, [{"id": e.id, "prediction": p, "references": e.references}
                            for e, p in zip(data["test"], preds)])
    write_scores(out, [e.id for e in data["test"]], per_example)
    val = validation_block(model, data["validation"], vocab, spec, spec.decode, dev, dtype, w.progress)
    if baseline is None:
        _save_artifacts(model, data["test"], vocab, pred_ids, out, dev, dtype, spec.data.max_tgt_len)
    shown = pick_examples(spec, [e.id for e in data["train"]], [e.id for e in data["test"]])
    extra = evaluate_extras(model, data["train"], data["test"], preds, vocab, spec, spec.decode, shown, out, dev,
                            dtype, w.progress)
    seconds = block["decode_seconds"] + block["metric_seconds"] + extra["seconds"] \
        + (val["decode_seconds"] + val["metric_seconds"] if val else 0.0)
    return {"test": block, "validation": val, "extra": extra, "seconds": seconds}


def _train_block(w: _Where, st, baseline: dict | None, dtype) -> dict:
    """The record's "train" block: curves, best checkpoint, stops, time, precision."""
    spec = w.spec
    return {"history": st.history, "val_curve": st.val_curve, "best_val_loss": st.best_val,
            "best_step": st.best_step, "steps": st.step, "epochs_run": len(st.history),
            "val_metric": spec.train.val_metric, "best_score": st.best_score,
            "objective": spec.train.objective, "objective_stats": st.objective_stats,
            "stopped_early": st.stopped_early, "stopped_by_time": st.stopped_by_time,
            "train_seconds": st.train_seconds,
            "val_seconds": st.val_seconds, "resumes": st.resumes,
            "train_tokens": st.train_tokens,
            "tokens_per_s": st.train_tokens / max(st.train_seconds, 1e-9) if baseline is None else None,
            "trainable": baseline is None,
            "precision": "none (not trained)" if baseline else precision_name(dtype), "device": str(w.device),
            "world_size": w.ddp.world_size if w.ddp else 1,
            **({"decoded_with": f"mean of the last {min(spec.train.average_last, len(st.history))} "
                               "epochs' weights (checkpoints/averaged.pt)"}
               if spec.train.average_last and baseline is None else {})}


def _lr_curve(spec: RunSpec, model, st) -> list[list]:
    """[step, learning rate] at up to 200 log-spaced updates."""
    steps = max(st.step, 1)
    lr_steps = sorted(set(np.unique(np.geomspace(1, steps, num=min(steps, 200)).astype(int)).tolist()))
    return [[s, lr_at(spec.train, s, model.schedule_dim())] for s in lr_steps]


class _NoTraining:
    """The training state of a model with nothing to train (an extractive baseline)."""
    step, history, val_curve, best_val, best_step, best_score = 0, [], [], None, None, None
    objective_stats, stopped_early, train_seconds, val_seconds, resumes, train_tokens = None, False, 0.0, 0.0, 0, 0
    stopped_by_time = False


@torch.no_grad()
def _save_artifacts(model, test: list[Encoded], vocab: Vocab, pred_ids: list[list[int]], out: Path, device, dtype,
                    spec_max_tgt: int):
    """Small files the report plots from: attention (and p_gen, for copy models) of one test example,
    positional tables."""
    model.eval()
    ids = list(pred_ids[0][: spec_max_tgt - 1]) or [UNK_ID]
    ex = teacher_forced_on(test[:1], [ids], len(vocab))[0]
    batch = collate([ex]).to(device)
    fwd = model(batch, need_attention=True)
    p_gen = fwd.extras.get("p_gen")
    # the maps the model declares (``attention_maps``, models/base.py), those its forward returned
    keep = [k for k in dict.fromkeys(model.attention_maps()) if fwd.attention.get(k) is not None]
    maps = {k: fwd.attention[k][0].float().mean(0).cpu().numpy().round(4).tolist() for k in keep}
    cross = model.cross_attention if model.cross_attention in maps else None
    if cross and cross not in keep:
        keep.append(cross)
    from seq2seq_zoo.report.artifacts import lean_attention, lean_positional, write_lean
    write_lean(out / "attention.json", lean_attention({
        "example_id": ex.id, "source_tokens": vocab.decode(ex.src_ext, ex.oovs, strip=False),
        "output_tokens": ["<bos>"] + vocab.decode(ids, ex.oovs, strip=False),
        "predicted_tokens": vocab.decode(ids, ex.oovs, strip=False) + ["<eos>"],
        "p_gen": p_gen[0].float().cpu().numpy().round(4).tolist() if p_gen is not None else None,
        "note": "teacher-forced on the model's own prediction; weights averaged over heads; row t is the "
                "step that predicts predicted_tokens[t] from output_tokens[t]",
        "maps": {k: maps[k] for k in keep}, "cross_attention": cross}, heads=_heads_of(fwd.attention.get(cross))))
    tables = {name: t.detach().float().cpu().numpy() for name, t in model.positional_tables().items()}
    if tables:
        write_lean(out / "positional.json", lean_positional(tables))


def _heads_of(att) -> int | None:
    """Heads of a (B, heads, T, S) attention tensor (1 for a (B, T, S) one)."""
    return None if att is None else (int(att.shape[1]) if att.dim() == 4 else 1)
