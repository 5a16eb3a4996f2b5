"""One run, start to end: data -> vocabulary -> model -> the loop -> decoding -> metrics -> record."""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from seq2seq_zoo import __version__
from seq2seq_zoo.config import RunSpec
from seq2seq_zoo.data.batching import Encoded, bucket_batches, encode_examples, iterate, percentile_filter
from seq2seq_zoo.data.corpora import ReadStats, load_split, resolve_data_dir
from seq2seq_zoo.data.text import TextConfig, detokenize, tokenize
from seq2seq_zoo.data.vocab import Vocab
from seq2seq_zoo.decode import generate
from seq2seq_zoo.evaluation import evaluate_extras, pick_examples
from seq2seq_zoo.metrics import evaluate
from seq2seq_zoo.models.base import build_model, count_parameters, model_context
from seq2seq_zoo.models.layers import packed_linear_weights
from seq2seq_zoo.results import write_predictions, write_record
from seq2seq_zoo.train import distributed
from seq2seq_zoo.train.loop import autocast, autocast_dtype, fit, lr_at
from seq2seq_zoo.utils import atomic_write_json, hardware, load_checkpoint, pick_device, seed_everything


def text_config(spec: RunSpec) -> TextConfig:
    return TextConfig(lowercase=spec.data.lowercase, num_token=spec.data.num_token)


def prepare_data(spec: RunSpec, data_dir_flag: str | None = None, log=print, vocab: Vocab | None = None):
    """Read, filter and encode the three splits. ``vocab``: use this vocabulary (a run started from
    another run's weights must keep that run's word ids) instead of building one from the training set."""
    d = spec.data
    root = resolve_data_dir(d.dataset, data_dir_flag, spec.data_dir)
    tc = text_config(spec)
    stats = {s: ReadStats() for s in ("train", "validation", "test")}
    train = load_split(d.dataset, root, "train", d.on_bad, stats["train"])
    val = load_split(d.dataset, root, "validation", d.on_bad, stats["validation"])
    test = load_split(d.dataset, root, spec.eval.split, d.on_bad, stats["test"])
    trail = {s: [f"{len(x)} read" + (f" ({sum(stats[s].skipped.values())} rows skipped)" if stats[s].skipped else "")]
             for s, x in (("train", train), ("validation", val), ("test", test))}
    if d.filter_percentiles:
        lo, hi = d.filter_percentiles
        before = len(train)
        train = percentile_filter(train, lo, hi, tc) if train else train
        log(f"length filter {lo}-{hi} percentiles kept {len(train)}/{before} training examples")
        trail["train"].append(f"data.filter_percentiles = {list(d.filter_percentiles)} kept {len(train)}")
    splits = {"train": train, "validation": val, "test": test}
    for name, key in (("train", "max_train"), ("validation", "max_valid"), ("test", "max_test")):
        limit = getattr(d, key)
        if limit is not None:  # 0 means none (not "no limit"): it is reported below
            splits[name] = splits[name][:limit]
            trail[name].append(f"data.{key} = {limit} kept {len(splits[name])}")
    _check_not_empty(spec, root, splits, trail)
    train, val, test = splits["train"], splits["validation"], splits["test"]
    if vocab is None:
        vocab = Vocab.build((tokenize(x, tc)[: d.max_src_len] for e in train for x in (e.source, e.references[0])),
                            max_size=d.vocab_size, min_freq=d.min_freq)
    enc = {name: encode_examples(split, vocab, tc, d.max_src_len, d.max_tgt_len)
           for name, split in (("train", train), ("validation", val), ("test", test))}
    info = {"dataset": d.dataset, "data_dir": str(root), "vocab_size": len(vocab),
            "sizes": {k: len(v) for k, v in enc.items()}, "eval_split": spec.eval.split,
            "skipped": {k: s.skipped for k, s in stats.items() if s.skipped},
            "src_tokens_mean": float(np.mean([len(e.src) for e in enc["train"]])) if enc["train"] else 0.0,
            "tgt_tokens_mean": float(np.mean([len(e.tgt) for e in enc["train"]])) if enc["train"] else 0.0,
            "oov_rate_test_src": _oov_rate(enc["test"])}
    return vocab, enc, info


class EmptySelection(ValueError):
    """The data settings leave a split without examples; raised before anything is trained or written."""


def _check_not_empty(spec: RunSpec, root: Path, splits: dict, trail: dict) -> None:
    empty = [s for s, x in splits.items() if not x]
    if not empty:
        return
    split_file = {"train": "train", "validation": "validation", "test": f"eval.split = {spec.eval.split!r}"}
    parts = [f"{s} ({split_file[s] if s == 'test' else s} split of {spec.data.dataset} in {root}: "
             + ", ".join(trail[s]) + ")" for s in empty]
    raise EmptySelection(f"run '{spec.name}': no {' and no '.join(empty)} examples left: {'; '.join(parts)}. "
                         "Change the setting that removes them (or fix the split file); nothing was trained")


def _oov_rate(data: list[Encoded]) -> float:
    n = sum(len(e.src) for e in data)
    return float(sum(int((e.src == 1).sum()) for e in data) / n) if n else 0.0


def decode_split(model, data: list[Encoded], vocab: Vocab, spec: RunSpec, device, dtype, progress=False,
                 return_ids: bool = False):
    """Decoded text of every example (in ``data`` order); with ``return_ids`` also the token ids
    (extended ids for copied words)."""
    from tqdm.auto import tqdm
    preds: dict[int, str] = {}
    pred_ids: dict[int, list[int]] = {}
    batches = bucket_batches(data, spec.decode.batch_size, shuffle=False)
    rows = spec.decode.batch_size * (1 if spec.decode.method == "greedy" else spec.decode.beam_size)
    # weights packed once for the whole split (``generate`` then finds them packed and keeps them)
    with torch.no_grad(), autocast(device, dtype), packed_linear_weights(model, rows):
        for _, batch in tqdm(iterate(data, batches), total=len(batches), desc="decoding",
                             disable=None if progress else True, leave=False):
            batch.to(device)
            ids = generate(model, batch, spec.decode)
            for ex_id, oovs, seq in zip(batch.ids, batch.oovs, ids):
                preds[ex_id] = detokenize(vocab.decode(seq, oovs))
                pred_ids[ex_id] = seq
    if return_ids:
        return [preds[e.id] for e in data], [pred_ids[e.id] for e in data]
    return [preds[e.id] for e in data]


class InitError(ValueError):
    """``train.init_from`` names nothing usable. The message is meant for the user as is."""


def resolve_init(value: str, out: Path) -> Path:
    """``init_from`` -> a checkpoint file: a .pt file, a run directory (its checkpoints/best.pt), or
    the name of a run of the same experiment (a sibling of ``out``)."""
    for cand in (Path(value), out.parent / value):
        if cand.is_file():
            return cand
        if (cand / "checkpoints" / "best.pt").is_file():
            return cand / "checkpoints" / "best.pt"
    raise InitError(f"train.init_from = {value!r}: no checkpoint found (looked for {value}/checkpoints/best.pt "
                    f"and {out.parent / value}/checkpoints/best.pt); train that run first (zoo run ... --only RUN)")


def load_init(model, ckpt: Path, log=print) -> dict:
    """Copy a trained run's weights into ``model``. Parameters the model has and the checkpoint lacks
    (e.g. the coverage weights w_c when coverage is switched on for a final phase) keep their
    initialisation; anything else that does not match is an error."""
    state = load_checkpoint(ckpt)["model"]
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


@torch.no_grad()
def copy_stats(model, data: list[Encoded], pred_ids: list[list[int]], vocab_size: int, device, dtype,
               batch_size: int = 32) -> dict | None:
    """For copy models: mean p_gen over the generated words of the split (teacher-forcing the model on
    its own outputs reproduces the decoder's p_gen at each step), and the share of generated words
    that are copied OOV words (extended ids). None for models without p_gen."""
    import copy as _copy

    from seq2seq_zoo.data.batching import collate
    from seq2seq_zoo.data.vocab import EOS_ID, PAD_ID, UNK_ID
    model.eval()
    items = []
    for e, ids in zip(data, pred_ids):
        x = _copy.copy(e)
        ids = ids or [EOS_ID]
        x.tgt_ext = np.asarray(ids, dtype=np.int64)
        x.tgt = np.where(x.tgt_ext >= vocab_size, UNK_ID, x.tgt_ext)
        items.append(x)
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


def run(spec: RunSpec, out: Path, *, data_dir: str | None = None, resume: bool = False, progress: bool = True,
        order: int = 0, command: str | None = None, log=print) -> dict:
    """Train and evaluate one run; writes record.json and predictions.jsonl into ``out``. In a DDP run
    (``train.distributed``) every rank trains; ranks > 0 then return None and only rank 0 writes."""
    t_start = time.perf_counter()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = Path(out)
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
    init_ckpt = resolve_init(spec.train.init_from, out) if spec.train.init_from else None
    init_vocab = Vocab.load(init_ckpt.parent / "vocab.json") if init_ckpt and (init_ckpt.parent / "vocab.json").is_file() \
        else None
    vocab, data, data_info = prepare_data(spec, data_dir, log, vocab=init_vocab)
    ckpt.mkdir(parents=True, exist_ok=True)  # only now: bad data settings leave nothing under results/
    if main:
        vocab.save(ckpt / "vocab.json")
        atomic_write_json(ckpt / "spec.json", spec.to_dict())
    log(f"[{spec.name}] {data_info['sizes']} examples, vocabulary {len(vocab)}")
    # the qualitative examples: unknown eval.examples ids stop here, before training
    shown = pick_examples(spec, [e.id for e in data["train"]], [e.id for e in data["test"]])
    seed_everything(spec.seed)
    context = model_context(len(vocab), spec.data)
    emb_info = None
    emb_setting = spec.model_options.get("embeddings", "random")
    if emb_setting != "random":
        from seq2seq_zoo import embeddings
        from seq2seq_zoo.registry import model_options
        defaults = model_options(spec.model)
        dim = spec.model_options.get("emb_dim") or defaults.get("emb_dim") or spec.model_options.get("d_model") \
            or defaults.get("d_model")
        tc = text_config(spec)
        sentences = (tokenize(x, tc) for e in data["train"] for x in (e.source_text, e.references[0]))
        with ddp.main_first() if ddp else contextlib.nullcontext():  # DDP: rank 0 fills the cache first
            context["pretrained_embeddings"], emb_info = embeddings.resolve(emb_setting, vocab, dim, sentences,
                                                                            spec.seed)
        log(f"[{spec.name}] embeddings {emb_setting}: {emb_info['found']:,}/{emb_info['vocab']:,} vocabulary words "
            f"covered ({100 * emb_info['coverage']:.1f}%)")
        seed_everything(spec.seed)
    model = build_model(spec.model, context, spec.model_options).to(device)
    init_info = load_init(model, init_ckpt, log) if init_ckpt else None
    params = count_parameters(model)
    log(f"[{spec.name}] model {spec.model}: {params['total']:,} trainable parameters")
    dtype = autocast_dtype(spec.train.precision, device)
    st = fit(model, data["train"], data["validation"], spec.train, seed=spec.seed, ckpt_dir=ckpt, device=device,
             resume=resume, progress=progress, log=log, dist=ddp, vocab=vocab)
    if not main:
        return None  # DDP ranks > 0: rank 0 decodes, scores and writes the results
    # evaluate the best checkpoint
    best = load_checkpoint(ckpt / "best.pt")
    model.load_state_dict(best["model"])
    t0 = time.perf_counter()
    preds, pred_ids = decode_split(model, data["test"], vocab, spec, device, dtype, progress, return_ids=True)
    decode_s = time.perf_counter() - t0
    copying = copy_stats(model, data["test"], pred_ids, len(vocab), device, dtype, spec.decode.batch_size)
    refs = [e.references for e in data["test"]]
    t0 = time.perf_counter()
    scores, settings = evaluate(preds, refs, spec.eval.metrics, stemmer=spec.eval.rouge_stemmer,
                                bertscore_model=spec.eval.bertscore_model,
                                bertscore_layers=spec.eval.bertscore_layers,
                                bertscore_batch_size=spec.eval.bertscore_batch_size,
                                device=str(device))
    metric_s = time.perf_counter() - t0
    write_predictions(out, [{"id": e.id, "prediction": p, "references": e.references}
                            for e, p in zip(data["test"], preds)])
    _save_artifacts(model, data["test"], vocab, pred_ids, out, device, dtype, spec.data.max_tgt_len)
    # the seeded training sample (eval.train_sample) and the shown examples -> examples.json
    extra = evaluate_extras(model, data["train"], data["test"], preds, vocab, spec, spec.decode, shown, out, device,
                            dtype, progress)
    d_model = getattr(model, "d_model", None)
    steps = max(st.step, 1)
    lr_steps = sorted(set(np.unique(np.geomspace(1, steps, num=min(steps, 200)).astype(int)).tolist()))
    record = {
        "experiment": spec.experiment, "run": spec.name, "order": order, "status": "done",
        "version": __version__, "command": command or " ".join(sys.argv),
        "started": started, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "spec": spec.to_dict(), "seed": spec.seed, "profile": spec.profile, "model": spec.model,
        "params": params, "data": data_info, "embeddings": emb_info, "init_from": init_info,
        "train": {"history": st.history, "val_curve": st.val_curve, "best_val_loss": st.best_val,
                  "best_step": st.best_step, "steps": st.step, "epochs_run": len(st.history),
                  "val_metric": spec.train.val_metric, "best_score": st.best_score,
                  "objective": spec.train.objective, "objective_stats": st.objective_stats,
                  "stopped_early": st.stopped_early, "train_seconds": st.train_seconds,
                  "val_seconds": st.val_seconds, "resumes": st.resumes,
                  "train_tokens": st.train_tokens,
                  "tokens_per_s": st.train_tokens / max(st.train_seconds, 1e-9),
                  "precision": str(dtype).replace("torch.", "") if dtype else "fp32", "device": str(device),
                  "world_size": ddp.world_size if ddp else 1},
        "lr_curve": [[s, lr_at(spec.train, s, d_model)] for s in lr_steps],
        "train_sample": extra["train_sample"],
        "eval": {"split": spec.eval.split, "n_examples": len(preds), "decode": asdict(spec.decode),
                 "scores": scores, "settings": settings, "copying": copying, "decode_seconds": decode_s,
                 "metric_seconds": metric_s},
        "hardware": hardware(),
        # this invocation only; compute_seconds sums training, validation, decoding and scoring over
        # every invocation of a resumed run (work discarded by a crash is not counted)
        "wall_seconds": time.perf_counter() - t_start,
        "compute_seconds": st.train_seconds + st.val_seconds + decode_s + metric_s + extra["seconds"],
    }
    write_record(out, record)
    return record


@torch.no_grad()
def _save_artifacts(model, test: list[Encoded], vocab: Vocab, pred_ids: list[list[int]], out: Path, device, dtype,
                    spec_max_tgt: int):
    """Small files the report plots from: attention (and p_gen, for copy models) of one test example,
    positional tables."""
    from seq2seq_zoo.data.batching import collate
    from seq2seq_zoo.data.vocab import UNK_ID
    import copy
    model.eval()
    ex = copy.copy(test[0])
    ids = list(pred_ids[0][: spec_max_tgt - 1]) or [UNK_ID]
    ex.tgt_ext = np.asarray(ids, dtype=np.int64)
    ex.tgt = np.where(ex.tgt_ext >= len(vocab), UNK_ID, ex.tgt_ext)
    batch = collate([ex]).to(device)
    try:
        fwd = model.forward(batch, need_attention=True)
        att = fwd.attention
    except TypeError:
        fwd, att = None, {}
    p_gen = fwd.extras.get("p_gen") if fwd is not None else None
    maps = {k: v[0].float().mean(0).cpu().numpy().round(4).tolist() for k, v in att.items()
            if k.startswith("decoder") and v is not None}
    keep = sorted(maps)[-2:] if maps else []  # the last decoder layer's two blocks
    atomic_write_json(out / "attention.json", {
        "example_id": ex.id, "source_tokens": vocab.decode(ex.src_ext, ex.oovs, strip=False),
        "output_tokens": ["<bos>"] + vocab.decode(ids, ex.oovs, strip=False),
        "predicted_tokens": vocab.decode(ids, ex.oovs, strip=False) + ["<eos>"],
        "p_gen": p_gen[0].float().cpu().numpy().round(4).tolist() if p_gen is not None else None,
        "note": "teacher-forced on the model's own prediction; weights averaged over heads; row t is the "
                "step that predicts predicted_tokens[t] from output_tokens[t]",
        "maps": {k: maps[k] for k in keep}})
    tables = {}
    for name, mod in model.named_modules():
        if type(mod).__name__ == "PositionalEncoding":
            tables[name] = mod.table[:100].detach().float().cpu().numpy().round(4).tolist()
    if tables:
        atomic_write_json(out / "positional.json", tables)
