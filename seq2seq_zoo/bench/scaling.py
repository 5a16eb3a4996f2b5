"""Epoch time of the pe_ablation CPU profile against the size of the DialogSum training set."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from seq2seq_zoo.bench.shapes import Plan
from seq2seq_zoo.bench.timing import log, precision_name, sync
from seq2seq_zoo.bench.workloads import target_tokens
from seq2seq_zoo.data.batching import bucket_batches, collate
from seq2seq_zoo.models.base import build_model
from seq2seq_zoo.precision import autocast_dtype
from seq2seq_zoo.registry import OBJECTIVES
from seq2seq_zoo.train.loop import TrainStep


def epoch_scaling(device: torch.device, plan: Plan, fractions=(0.25, 0.5, 1.0), data_dir: str | None = None,
                  experiment: str | Path | None = None, profile: str = "cpu", full_epoch: bool = False,
                  progress: Callable[[str], None] = log, prepared=None) -> dict[str, Any]:
    """Epoch time of the pe_ablation CPU profile at fractions of the DialogSum training set.

    Batching and collation of the whole epoch are timed in full. Updates: with ``full_epoch`` every batch
    of the epoch is run; otherwise ``plan.scaling_steps`` batches drawn at random from the epoch are run
    and the epoch's update time is extrapolated as (time per padded token of the sample) x (padded tokens
    of the epoch), which corrects for the sample's lengths. The result says which was done."""
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.models.base import model_context
    from seq2seq_zoo.runner import prepare_data
    t_start = time.perf_counter()
    if prepared is None:
        path = Path(experiment) if experiment else _experiment_file("pe_ablation.toml")
        exp = load_experiment(path, profile=profile)
        spec = exp.runs[0]
        progress(f"    reading {spec.data.dataset} and building the vocabulary ({path.name}, profile {profile}, "
                 f"run {spec.name})")
        vocab, data, _ = prepare_data(spec, data_dir, log=lambda s: None)
    else:
        spec, vocab, data = prepared
    train = data["train"]
    cfg = spec.train
    dtype = autocast_dtype(cfg.precision, device)
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options).to(device).train()
    train_step = TrainStep(model, OBJECTIVES.get(cfg.objective).from_config(cfg, vocab), cfg, device, dtype,
                           lr=cfg.lr)

    def step(batch):  # the loop's own update: objective, loss scaling, clipping, optimizer
        train_step(batch.to(device))

    prep_s = time.perf_counter() - t_start
    rng = np.random.default_rng(0)
    epochs = []
    for frac in fractions:
        subset = train[: max(1, int(round(frac * len(train))))]
        t0 = time.perf_counter()
        batches = bucket_batches(subset, cfg.batch_size, max_tokens=cfg.max_tokens, seed=spec.seed, epoch=0)
        collated = [collate([subset[i] for i in b]) for b in batches]
        data_s = time.perf_counter() - t0
        padded = np.array([b.src.numel() + b.tgt_out.numel() for b in collated], dtype=np.float64)
        pick = (np.arange(len(collated)) if full_epoch else
                rng.choice(len(collated), size=min(plan.scaling_steps, len(collated)), replace=False))
        epochs.append({"frac": frac, "subset": subset, "batches": collated, "data_s": data_s, "padded": padded,
                       "pick": pick, "times": []})
    for i in rng.choice(len(epochs[-1]["batches"]), size=min(max(plan.warmup, 3), len(epochs[-1]["batches"])),
                        replace=False):
        step(epochs[-1]["batches"][i])        # warm-up on batches of the full set
    # the fractions' timed updates interleaved (a, b, c, a, b, c, ...) so that load changes hit all alike
    for k in range(max(len(e["pick"]) for e in epochs)):
        for e in epochs:
            if k < len(e["pick"]):
                b = e["batches"][e["pick"][k]]
                sync(device)
                t0 = time.perf_counter()
                step(b)
                sync(device)
                e["times"].append(time.perf_counter() - t0)
    rows = []
    for e in epochs:
        times, pick, padded = e["times"], e["pick"], e["padded"]
        update_s = float(sum(times)) if full_epoch else float(sum(times) / padded[pick].sum() * padded.sum())
        epoch_s = e["data_s"] + update_s
        tgt_tok = sum(target_tokens(b) for b in e["batches"])
        rows.append({"fraction": e["frac"], "examples": len(e["subset"]), "batches": len(e["batches"]),
                     "target_tokens": tgt_tok, "data_s": e["data_s"], "update_s": update_s, "epoch_s": epoch_s,
                     "timed_updates": len(pick), "extrapolated": not full_epoch,
                     "data_share": e["data_s"] / epoch_s, "tokens_per_s": tgt_tok / epoch_s,
                     "update_s_per_padded_token": float(sum(times) / padded[pick].sum())})
        progress(f"    {int(e['frac'] * 100)}% ({len(e['subset'])} dialogues, {len(e['batches'])} batches): epoch "
                 f"{'measured' if full_epoch else 'estimated'} {epoch_s:.0f}s (batching + collation {e['data_s']:.1f}s)")
    base = rows[0]
    for r in rows:
        r["relative_time"] = r["epoch_s"] / base["epoch_s"]
        r["relative_size"] = r["examples"] / base["examples"]
        r["linearity"] = r["relative_time"] / r["relative_size"]  # 1.0 = exactly linear
    return {"experiment": spec.experiment, "run": spec.name, "profile": profile, "dataset": spec.data.dataset,
            "model": spec.model, "model_options": spec.model_options, "batch_size": cfg.batch_size,
            "precision": precision_name(dtype), "train_examples": len(train), "vocab_size": len(vocab),
            "method": ("full epochs timed" if full_epoch else
                       f"{plan.scaling_steps} randomly drawn updates per fraction timed, the epoch's update time "
                       "extrapolated by padded tokens; batching and collation of the whole epoch timed in full"),
            "setup_s": prep_s, "rows": rows}


def _experiment_file(name: str) -> Path:
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):
        p = root / "experiments" / name
        if p.is_file():
            return p
    raise FileNotFoundError(f"experiments/{name} not found (run `zoo bench` from the repository root)")
