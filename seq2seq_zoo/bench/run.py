"""The ``zoo bench`` measurements; not to be confused with runner.py (one run) or cli/run.py (``zoo run``).

`zoo bench`: training and decoding throughput of our models against a Hugging Face BART peer of the
same shape, measured in one process, against the suite's speed targets (TARGET_* in ``shapes``).

Every figure comes from random token batches of fixed shapes (no data needed), except the epoch-time
scaling, which runs the pe_ablation CPU profile on the real DialogSum training set. The machines these
numbers come from are shared and noisy, so the headline is always a ratio measured in the same process:
the timed iterations of the models being compared are interleaved (ours, peer, ours, peer, ...) and the
median of each is taken, so a burst of load from a neighbour hits both alike.

Definitions (also written into the output):
  training tokens/s  non-pad target tokens per second of a full update (forward, loss, backward,
                     gradient clipping, optimizer step)
  decoding tokens/s  generated tokens per second (beam search, forced to exactly ``dec_len`` tokens)
  model FLOP/s       estimated with the 6 * params * tokens rule applied per stack:
                     6 * (encoder matmul params * source tokens + (decoder + output projection) matmul
                     params * target tokens); embedding lookups and attention-score matmuls not counted
  MFU                model FLOP/s divided by a bf16 (and an fp32) 2048x2048 matmul peak measured in the run
  decoding bound     the least matmul FLOPs of a beam call (beam_decode_flops) at the rate of a square
                     product timed among the decoders (median, same load): the shortest time any
                     implementation could take; the peer's time over it is the highest ratio it allows
  peak memory        CPU: peak resident memory above the stage's starting point, sampled every 5 ms
                     (and the process high-water mark from getrusage); CUDA: torch.cuda.max_memory_allocated
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.evalcost import measure_eval_cost
from seq2seq_zoo.bench.flops import decode_bound, flop_params, int8_bound
from seq2seq_zoo.bench.gpu import measure_gpu_shape
from seq2seq_zoo.bench.int8 import measure_int8
from seq2seq_zoo.bench.markdown import markdown
from seq2seq_zoo.bench.timing import number as _fmt
from seq2seq_zoo.bench.measure import (
    OurDecoder, Trainer, decode_vs_beam, measure_compile, measure_decoding, measure_training)
from seq2seq_zoo.bench.peers.eole import EOLE_VERSION, eole_available, measure_eole
from seq2seq_zoo.bench.peers.hf import PeerDecoder, peer_available, peer_config, peer_model
from seq2seq_zoo.bench.pointer_full import measure_pointer_full
from seq2seq_zoo.bench.recurrent import measure_recurrent
from seq2seq_zoo.bench.scaling import epoch_scaling
from seq2seq_zoo.bench.shapes import (
    FULL_PLAN, GPU_MAX_TOKENS, GPU_SHAPE, PAPER, Plan, QUICK_PLAN, RNN_MODELS, Shape, TARGET_BENCH_S, TINY)
from seq2seq_zoo.bench.targets import targets, verdict
from seq2seq_zoo.bench.timing import MatmulProbe, log, long_lived_frozen, matmul_peak, peak_matmul_n, precision_name
from seq2seq_zoo.bench.workloads import our_transformer, shaped_batch
from seq2seq_zoo.precision import autocast_dtype
from seq2seq_zoo.registry import MODELS


def _warm_process(device: torch.device) -> None:
    """One tiny update of each kind first, so that one-time library set-up (thread pools, kernel
    caches) is not charged to the first stage's time and memory."""
    for dt in (None, autocast_dtype("auto", device)):
        model, _ = our_transformer(TINY, device)
        Trainer(model, shaped_batch(TINY, 2), device, dt)()
        OurDecoder(model, shaped_batch(TINY, 2), device, dt, 2, 2)()
    if peer_available() is None:
        Trainer(peer_model(TINY, device), shaped_batch(TINY, 2), device, None, kind="peer")()


def run_device(device: torch.device, shape: Shape, plan: Plan, *, scaling: bool, data_dir: str | None = None,
               full_epoch: bool = False, baseline: str | None = None, int8_runs: str | None = None,
               progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Every measurement on one device; returns the JSON-ready figures. ``baseline``: a checkout of another
    commit whose full-size pointer-generator update is timed against ours (``pointer_full``)."""
    res: dict[str, Any] = {"device": str(device), "beams": shape.beams, "notes": []}
    default_dtype = autocast_dtype("auto", device)
    res["default_precision"] = precision_name(default_dtype)
    gpu_shape = device.type == "cuda"
    pointer = device.type == "cpu" and plan.pointer_rounds > 0
    stages = (7 + (device.type == "cpu") + bool(scaling) + bool(plan.compile) + bool(plan.eval_examples)
              + gpu_shape + pointer)
    k = 0
    _warm_process(device)

    def stage(title):
        nonlocal k
        k += 1
        progress(f"[{device.type} {k}/{stages}] {title}")
        return time.perf_counter()

    mm_n = peak_matmul_n(device, plan)
    t = stage(f"matmul peak ({mm_n}x{mm_n})")
    from seq2seq_zoo.utils import cpu_has_fast_bf16
    native_bf16 = device.type != "cpu" or cpu_has_fast_bf16()
    # (emulated bf16 is no peak of this machine's: not measured, and MFU is taken against fp32 only)
    peaks = {"bf16": matmul_peak(device, torch.bfloat16, mm_n, plan.matmul_iters) if native_bf16 else None,
             "fp32": matmul_peak(device, torch.float32, mm_n, plan.matmul_iters)}
    res["matmul_peak_gflops"], res["matmul_n"] = peaks, mm_n
    progress(f"    bf16 {_fmt(peaks['bf16'])} GFLOP/s, fp32 {peaks['fp32']:.0f} GFLOP/s ({time.perf_counter() - t:.0f}s)")

    batch = shaped_batch(shape, shape.batch, seed=1)
    no_peer = peer_available()
    if no_peer:
        res["notes"].append(f"HF BART peer skipped: {no_peer}")
        progress(f"    note: {res['notes'][-1]}")

    # training: ours vs peer, fp32 and bf16
    train: dict[str, dict] = {}
    if device.type != "cpu":
        precisions = [None, default_dtype]
    elif native_bf16:
        precisions = [None, torch.bfloat16]
    else:   # emulated bf16 matmuls run ~10x slower than fp32 here: timing them says nothing about the models
        precisions = [None]
        res["notes"].append("training timed in fp32 only: this CPU has no bf16 matmul instructions (no "
                            "AVX512-BF16 or AMX), so bf16 runs emulated, ~10x slower than fp32")
    for dt in precisions:
        t = stage(f"training, {precision_name(dt)}: our Transformer vs HF BART "
                  f"(batch {shape.batch}, source {shape.src_len}, target {shape.tgt_len})")
        ours, _ = our_transformer(shape, device)
        trainers = {f"ours_{precision_name(dt)}": Trainer(ours, batch, device, dt)}
        fps = {f"ours_{precision_name(dt)}": flop_params(ours)}
        if not no_peer:
            peer = peer_model(shape, device)
            trainers[f"peer_{precision_name(dt)}"] = Trainer(peer, batch, device, dt, kind="peer")
            fps[f"peer_{precision_name(dt)}"] = flop_params(peer)
        figs = measure_training(trainers, plan, fps, peaks, progress)
        for name, f in figs.items():
            progress(f"    {name}: {f['tokens_per_s']:.0f} tok/s, {f['model_gflops']:.0f} GFLOP/s, "
                     f"peak +{f['peak_mem_mb']:.0f} MB")
        train.update(figs)
        del trainers
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    res["training"] = train

    if gpu_shape:
        g = GPU_SHAPE
        t = stage(f"training at a GPU-sized shape, {precision_name(default_dtype)}: our Transformer d_model "
                  f"{g.d_model}, {g.layers}+{g.layers} layers, vocabulary {g.vocab:,}, token batches of "
                  f"{GPU_MAX_TOKENS:,} padded tokens")
        try:
            res["gpu_shape"] = measure_gpu_shape(g, device, plan, peaks, default_dtype, GPU_MAX_TOKENS, progress,
                                                 variants=("cudnn_attention",) + (("compiled",) if plan.compile else ()))
        except torch.cuda.OutOfMemoryError as e:
            res["notes"].append(f"GPU-sized shape not measured: out of memory ({e})")
            progress(f"    note: {res['notes'][-1]}")
        progress(f"    ({time.perf_counter() - t:.0f}s)")

    # decoding: beam 4 (fixed length), ours in its default precision, the peer in fp32 and bf16
    t = stage(f"beam-{shape.beams} decoding: {shape.dec_sources} sources x {shape.dec_len} tokens")
    ours, _ = our_transformer(shape, device)
    dbatch = shaped_batch(shape, shape.dec_sources, seed=2)
    decoders: dict[str, Any] = {f"ours_{precision_name(default_dtype)}":
                                OurDecoder(ours, dbatch, device, default_dtype, shape.beams, shape.dec_len)}
    if default_dtype is not None:
        decoders["ours_fp32"] = OurDecoder(ours, dbatch, device, None, shape.beams, shape.dec_len)
    if device.type == "cpu":   # decode.precision = "int8": linear layers in int8 (no CUDA kernels)
        decoders["ours_int8"] = OurDecoder(ours, dbatch, device, None, shape.beams, shape.dec_len, int8=True)
        # the int8 decoder with its linear layers taking no time: what no int8 kernel can go below
        decoders["int8_bound"] = OurDecoder(ours, dbatch, device, None, shape.beams, shape.dec_len,
                                            free_linears=True)
    if not no_peer:
        peer = peer_model(shape, device)
        decoders["peer_fp32"] = PeerDecoder(peer, dbatch, device, None, shape.beams, shape.dec_len)
        if default_dtype is not None:
            decoders[f"peer_{precision_name(default_dtype)}"] = PeerDecoder(peer, dbatch, device, default_dtype,
                                                                            shape.beams, shape.dec_len)
    probe = MatmulProbe(device, default_dtype, mm_n)
    dec = measure_decoding(decoders, plan, progress, probe=probe)
    if "ours_int8" in dec:
        dec["ours_int8"]["precision"] = "int8"
    free = dec.pop("int8_bound", None)
    if free:
        res["int8_bound"] = int8_bound(dec, free["seconds"])
        progress(f"    int8 bound: the int8 decoder without its linear layers' work takes {free['seconds']:.2f}s"
                 + (f"; the peer's time allows it at most {res['int8_bound']['ceiling_vs_peer']:.3g}x"
                    if "ceiling_vs_peer" in res["int8_bound"] else ""))
    for name, f in dec.items():
        progress(f"    {name}: {f['tokens_per_s']:.0f} tok/s ({f['seconds']:.2f}s)")
    res["decoding"] = dec
    bound = decode_bound(shape, dec, probe.gflops, res["default_precision"])
    if bound:
        res["decode_bound"] = bound
        ceiling = bound.get("ceiling_vs_peer")
        progress(f"    bound: {bound['min_gflop']:.1f} GFLOP of matmuls at least, {bound['min_s']:.2f}s at the "
                 f"{bound['peak_gflops']:.0f} GFLOP/s a {mm_n}³ product ran at between the timed calls"
                 + (f"; the peer's time allows at most {ceiling:.3g}x" if ceiling else ""))
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    t = stage(f"decoding time against beam size {'/'.join(map(str, plan.beam_sizes))}")
    res["decode_vs_beam"] = decode_vs_beam(ours, dbatch, device, default_dtype, plan.beam_sizes, shape.dec_len,
                                           plan.decode_iters, progress)
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    if device.type == "cpu":
        t = stage(f"int8 decoding per model (beam-{shape.beams})"
                  + (f"; ROUGE-1 change of the runs in {int8_runs}" if int8_runs else ""))
        res["int8"] = measure_int8(shape, device, plan, default_dtype, int8_runs, progress)
        progress(f"    ({time.perf_counter() - t:.0f}s)")

    # the recurrent family: the fast implementation against the reference one, in the same run
    rnn_precisions = precisions
    t = stage("recurrent models: fast implementation against impl = \"reference\" (training "
              f"{'/'.join(precision_name(d) for d in rnn_precisions)}, beam-{shape.beams} decoding)")
    others: dict[str, dict] = {}
    recurrent: dict[str, dict] = {}
    for name in RNN_MODELS:
        if name not in MODELS:
            note = f"model '{name}' is not registered: skipped"
            res["notes"].append(note)
            progress(f"    note: {note}")
            continue
        try:
            rec = measure_recurrent(name, shape, device, plan, peaks, batch, dbatch, rnn_precisions, default_dtype,
                                    progress)
        except Exception as e:  # noqa: BLE001 - a model under construction must not stop the bench
            note = f"model '{name}' could not be measured at the bench shape ({type(e).__name__}: {e}): skipped"
            res["notes"].append(note)
            progress(f"    note: {note}")
            continue
        recurrent[name] = rec
        fig = dict(rec["training"][precision_name(default_dtype)]["fast"])
        fig["options"], fig["params"] = rec["options"], rec["params"]
        others[name] = fig
    res["other_models"] = others
    res["recurrent"] = recurrent
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    t = stage(f"eole {EOLE_VERSION} as a second peer: training, {res['default_precision']}")
    no_eole = eole_available()
    if no_eole:
        res["notes"].append(f"eole peer skipped: {no_eole}")
        progress(f"    note: {res['notes'][-1]}")
    else:
        res["eole"] = measure_eole(shape, device, plan, peaks, batch, default_dtype, progress)
    progress(f"    ({time.perf_counter() - t:.0f}s)")

    if plan.eval_examples:
        t = stage(f"evaluation cost: scoring {plan.eval_examples:,} summaries (ROUGE, BERTScore)")
        res["eval_cost"] = measure_eval_cost(plan.eval_examples, device, progress)
        progress(f"    ({time.perf_counter() - t:.0f}s)")

    if scaling:
        t = stage("epoch time against training-set size (pe_ablation CPU profile, DialogSum)")
        try:
            res["scaling"] = epoch_scaling(device, plan, data_dir=data_dir, full_epoch=full_epoch, progress=progress)
        except Exception as e:  # noqa: BLE001 - no data on this machine: say so, keep the rest
            from seq2seq_zoo.data.corpora import DataError
            if not isinstance(e, (DataError, FileNotFoundError)):
                raise
            res["notes"].append(f"epoch scaling skipped: {e}")
            progress(f"    note: {res['notes'][-1]}")
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    if pointer:
        t = stage("the full-size pointer-generator + coverage update (experiments/cnn_pointer.toml), one thread"
                  + (f", against {baseline}" if baseline else ""))
        res["pointer_full"] = measure_pointer_full(baseline, plan.pointer_rounds, progress)
        if cpu_has_fast_bf16():   # what train.precision = "auto" trains in here: the same update in bf16
            res["pointer_full_bf16"] = measure_pointer_full(baseline, plan.pointer_rounds, progress, precision="bf16")
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    if plan.compile:
        t = stage("torch.compile: our Transformer's training step, compiled against eager")
        res["compile"] = measure_compile(shape, device, default_dtype, plan, progress)
        progress(f"    ({time.perf_counter() - t:.0f}s)")
    res["targets"] = targets(res)
    return res


def cpu_bf16_isa() -> str:
    """Which bf16 matmul instructions the CPU has: AMX (tiles, several times the fp32 rate), AVX512-BF16
    (dot products, about twice the fp32 rate) or none."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "unknown"
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX512-BF16 (no AMX)" if "avx512_bf16" in flags else "none"


def choose_threads(requested: int | None, load: float | None) -> tuple[int, str]:
    """torch CPU threads for the bench: ``requested`` if given; else torch's default, lowered to the
    cores other processes leave free (never below 1). On a shared machine, OpenMP threads that outnumber
    the free cores wait at every barrier for a descheduled sibling, which makes a step several times
    slower, and erratic."""
    default = torch.get_num_threads()
    if requested:
        return requested, "--threads"
    ncpu = os.cpu_count() or default
    if load is None:
        return default, "torch's default"
    free = max(1, int(round(ncpu - load)))
    if free < default:
        return free, (f"torch's default {default} lowered: load average {load:.1f} on {ncpu} CPUs leaves ~{free} "
                      f"free; --threads N overrides")
    return default, f"torch's default (load average {load:.1f} on {ncpu} CPUs)"


def run_bench(out: str | Path = "results/bench", *, quick: bool = False, devices: list[str] | None = None,
              scaling: bool = True, threads: int | None = None, data_dir: str | None = None,
              full_epoch: bool = False, with_compile: bool = False, shape: Shape = PAPER, plan: Plan | None = None,
              command: str = "zoo bench", baseline: str | None = None, int8_runs: str | None = None,
              progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Run every measurement on each device and write ``out``/bench.json and ``out``/README.md."""
    from datetime import datetime, timezone

    from seq2seq_zoo.utils import atomic_write_json, atomic_write_text, cpu_has_fast_bf16, hardware, pick_device
    t0 = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    threads, why = choose_threads(threads, load_before)
    torch.set_num_threads(threads)
    progress(f"torch threads: {threads} ({why})")
    plan = plan or (QUICK_PLAN if quick else FULL_PLAN)
    if with_compile:
        plan = replace(plan, compile=True)
    if devices is None:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    devices = [pick_device(d) for d in devices]  # before hardware(): it records the attention kernels in use
    report: dict[str, Any] = {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "quick": quick, "hardware": hardware(), "cpu_fast_bf16": cpu_has_fast_bf16(),
                              "cpu_bf16_isa": cpu_bf16_isa(),
                              "threads": threads, "threads_reason": why, "load_before": load_before,
                              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                              "shape": asdict(shape), "plan": asdict(plan), "peer_config": peer_config(shape),
                              "definitions": __doc__.split("Definitions (also written into the output):")[1].strip(),
                              "devices": []}
    try:
        import transformers
        report["transformers"] = transformers.__version__
    except Exception:  # noqa: BLE001
        report["transformers"] = None
    with long_lived_frozen():
        for device in devices:
            if device.type == "cuda" and not torch.cuda.is_available():
                raise RuntimeError("--device cuda: no CUDA device is available")
            report["devices"].append(run_device(device, shape, plan, scaling=scaling, data_dir=data_dir,
                                                full_epoch=full_epoch, baseline=baseline, int8_runs=int8_runs,
                                                progress=progress))
    report["wall_s"] = time.perf_counter() - t0
    report["load_after"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpu = next((r for r in report["devices"] if r["device"] == "cpu"), None)
    if cpu is not None and not quick and not plan.compile and shape == PAPER:
        cpu["targets"].append(verdict("`zoo bench` wall time on CPU (all devices), seconds", report["wall_s"],
                                      TARGET_BENCH_S, "s", lower_is_better=True))
    out = Path(out)
    atomic_write_json(out / "bench.json", report)
    atomic_write_text(out / "README.md", markdown(report))
    progress(f"wrote {out / 'bench.json'} and {out / 'README.md'} in {report['wall_s']:.0f}s")
    for dev in report["devices"]:
        for t in dev.get("targets", []):
            progress(f"  [{dev['device']}] {t['target']}: {t['status']}")
    return report
