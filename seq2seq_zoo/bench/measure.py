"""Timed training updates and beam decoding of our models (and the peers' through the same timing):
Trainer, OurDecoder, their interleaved measurement, beam-size scaling and torch.compile."""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.flops import train_flops
from seq2seq_zoo.bench.shapes import Plan, Shape
from seq2seq_zoo.bench.timing import MatmulProbe, PeakMemory, error_line, interleaved, log, median, precision_name, sync
from seq2seq_zoo.bench.workloads import our_transformer, shaped_batch, source_tokens, target_tokens
from seq2seq_zoo.config import DecodeConfig, TrainConfig
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.precision import autocast, cpu_linear_forwards
from seq2seq_zoo.registry import OBJECTIVES
from seq2seq_zoo.train.loop import TrainStep, build_optimizer


class Trainer:
    """One full update of a model on a fixed batch: autocast forward + loss, backward, gradient clipping,
    optimizer step. ``kind`` 'ours' is the training loop's own step (``train.loop.TrainStep``: the
    registered objective with label smoothing 0.1 as in pe_ablation, loss scaling, the loop's
    optimizer); 'peer' the same update written for the HF model (its own loss, no smoothing, AdamW)."""

    def __init__(self, model, batch: Batch, device: torch.device, dtype: torch.dtype | None, kind: str = "ours",
                 label_smoothing: float = 0.1, clip_norm: float = 1.0):
        self.model, self.batch, self.device, self.dtype, self.kind = model, batch.to(device), device, dtype, kind
        self.clip = clip_norm
        model.train()
        cfg = TrainConfig(betas=[0.9, 0.98], eps=1e-9, lr=1e-4, label_smoothing=label_smoothing, clip_norm=clip_norm)
        if kind == "ours":
            self.step = TrainStep(model, OBJECTIVES.get("ce")(label_smoothing=label_smoothing, cfg=cfg), cfg,
                                  device, dtype, lr=cfg.lr)
        else:
            self.params = list(model.parameters())
            self.opt = build_optimizer(self.params, replace(cfg, optimizer="adamw"))
            self.labels = self.batch.tgt_out.masked_fill(self.batch.tgt_out == PAD_ID, -100)
            self.labels = self.labels.masked_fill(self.labels >= model.config.vocab_size, 1)
        self.src_tokens, self.tgt_tokens = source_tokens(batch), target_tokens(batch)

    def __call__(self) -> float:
        if self.kind == "ours":
            return self.step(self.batch)
        with autocast(self.device, self.dtype):
            b = self.batch
            loss = self.model(input_ids=b.src, attention_mask=b.src != PAD_ID, decoder_input_ids=b.tgt_in,
                              labels=self.labels).loss
        return peer_update(loss, self.params, self.opt, self.clip)


def peer_update(loss: torch.Tensor, params, opt, clip: float) -> torch.Tensor:
    """A peer's update after its forward: backward, gradient clipping, optimizer step."""
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def train_figures(trainer: Trainer, times: list[float], fp: dict[str, int], peaks: dict[str, float],
                  mem: PeakMemory | None) -> dict[str, Any]:
    s = median(times)
    flops = train_flops(fp, trainer.src_tokens, trainer.tgt_tokens) / s
    out = {"precision": precision_name(trainer.dtype), "step_s": s, "step_s_all": times,
           "tokens_per_s": trainer.tgt_tokens / s,
           "src_tgt_tokens_per_s": (trainer.src_tokens + trainer.tgt_tokens) / s,
           "model_gflops": flops / 1e9, "flop_params": fp,
           "mfu_bf16": flops / 1e9 / peaks["bf16"] if peaks.get("bf16") else None,
           "mfu_fp32": flops / 1e9 / peaks["fp32"] if peaks.get("fp32") else None}
    if mem is not None:
        out["peak_mem_mb"] = mem.peak_mb
        out["process_max_rss_mb"] = mem.process_max_rss_mb
    return out


def measure_training(trainers: dict[str, Trainer], plan: Plan, fps: dict[str, dict[str, int]],
                     peaks: dict[str, float], progress: Callable[[str], None] = log,
                     probe: MatmulProbe | None = None) -> dict[str, dict]:
    """Warm each trainer up alone (its peak memory is taken there), then time them interleaved (with
    ``probe``, if given, timed in every round among them: its times land in ``probe.times``)."""
    mems = {}
    for name, tr in trainers.items():
        progress(f"    warm-up {name}")
        with PeakMemory(tr.device) as mem:
            for _ in range(plan.warmup):
                tr()
            sync(tr.device)
        mems[name] = mem
    progress(f"    timing {', '.join(trainers)}: {plan.iters} interleaved rounds")
    times = interleaved(trainers, plan.iters, next(iter(trainers.values())).device, probe)
    return {name: train_figures(tr, times[name], fps[name], peaks, mems[name]) for name, tr in trainers.items()}


def linears_free(model: torch.nn.Module):
    """Every layer that ``int8_linears`` runs in int8 (``precision.cpu_linear_forwards`` chooses them for
    both) answers zeros of its output's shape and computes nothing, for the duration. A decode under this
    takes the time of everything in the int8 decoder but its linear layers (its other work is in fp32, as
    here), so no int8 kernel, however fast, can make that decoder faster than this: the int8 ratio's
    bound. The outputs are meaningless."""
    return cpu_linear_forwards(model, lambda m: lambda x, n=m.out_features: x.new_zeros(x.shape[:-1] + (n,)))


class OurDecoder:
    """Beam search of a registered model, forced to exactly ``length`` tokens (min_len = max_len), no
    length penalty or n-gram blocking, in the given autocast precision; ``int8``: with
    ``decode.precision = "int8"`` (linear layers in int8); ``free_linears``: in fp32 with its linear
    layers taking no time (``linears_free``: the int8 decoder's bound)."""

    def __init__(self, model, batch: Batch, device, dtype, beams: int, length: int, int8: bool = False,
                 free_linears: bool = False):
        from seq2seq_zoo.config import decode_with
        from seq2seq_zoo.decode import generate
        self._generate = generate
        self.model, self.batch, self.device, self.dtype = model.eval(), batch.to(device), device, dtype
        self.cfg = DecodeConfig(method="beam", beam_size=beams, min_len=length, max_len=length,
                                length_penalty=0.0, length_penalty_style="none", batch_size=batch.size)
        if int8:
            self.cfg = decode_with(self.cfg, {"precision": "int8"})
        self.free_linears = free_linears
        self.tokens = batch.size * length

    def __call__(self):
        with torch.no_grad(), autocast(self.device, self.dtype), \
                linears_free(self.model) if self.free_linears else contextlib.nullcontext():
            return self._generate(self.model, self.batch, self.cfg)


def measure_decoding(decoders: dict[str, Any], plan: Plan, progress: Callable[[str], None] = log,
                     probe: MatmulProbe | None = None) -> dict[str, dict]:
    """Warm each decoder up alone (peak memory), then time them interleaved (``probe`` as in
    measure_training)."""
    mems = {}
    device = None
    for name, dec in decoders.items():
        device = dec.device
        progress(f"    warm-up {name}")
        with PeakMemory(dec.device) as mem:
            dec()
        mems[name] = mem
    progress(f"    timing {', '.join(decoders)}: {plan.decode_iters} interleaved rounds")
    times = interleaved(decoders, plan.decode_iters, device, probe)
    out = {}
    for name, dec in decoders.items():
        s = median(times[name])
        out[name] = {"precision": precision_name(dec.dtype), "seconds": s, "seconds_all": times[name],
                     "tokens": dec.tokens, "tokens_per_s": dec.tokens / s, "peak_mem_mb": mems[name].peak_mb}
    return out


def decode_vs_beam(model, batch: Batch, device, dtype, beam_sizes, length: int, iters: int,
                   progress: Callable[[str], None] = log) -> list[dict]:
    rows = []
    for k in beam_sizes:
        dec = OurDecoder(model, batch, device, dtype, k, length)
        dec()
        times = interleaved({"d": dec}, iters, device)["d"]
        s = median(times)
        rows.append({"beam_size": k, "seconds": s, "tokens_per_s": dec.tokens / s})
        progress(f"    beam {k}: {s:.2f}s ({dec.tokens / s:.0f} tok/s)")
    return rows


def measure_compile(shape: Shape, device: torch.device, dtype, plan: Plan,
                    progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Our Transformer's training step with its encoder and decoder stacks under ``torch.compile``
    against the same step eager: compile time (the first step) and the steady step time of each,
    timed interleaved; ``pays_after_steps`` = compile time / time saved per step (None if it never
    pays)."""
    batch = shaped_batch(shape, shape.batch, seed=1)
    eager_model, _ = our_transformer(shape, device)
    comp_model, _ = our_transformer(shape, device)
    try:
        comp_model.encoder = torch.compile(comp_model.encoder)
        comp_model.decoder = torch.compile(comp_model.decoder)
        eager, comp = Trainer(eager_model, batch, device, dtype), Trainer(comp_model, batch, device, dtype)
        t0 = time.perf_counter()
        comp()
        sync(device)
        compile_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001 - no compiler, unsupported op: report, do not stop the bench
        return {"error": error_line(e)}
    eager()
    times = interleaved({"eager": eager, "compiled": comp}, plan.iters, device)
    e, c = median(times["eager"]), median(times["compiled"])
    pays = compile_s / (e - c) if e > c else None
    progress(f"    compile (first step) {compile_s:.0f}s; step eager {e:.2f}s, compiled {c:.2f}s"
             + (f"; pays after {pays:.0f} steps" if pays else "; never pays"))
    return {"precision": precision_name(dtype), "compile_s": compile_s, "eager_step_s": e, "compiled_step_s": c,
            "speedup": e / c, "pays_after_steps": pays, "times": times}
