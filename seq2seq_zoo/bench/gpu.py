"""The GPU stage: our Transformer at a GPU-sized shape on token batches, its model FLOP/s against the
measured matmul peak, and variants (cuDNN attention, torch.compile) timed beside it."""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.flops import flop_params, train_flops
from seq2seq_zoo.bench.measure import Trainer
from seq2seq_zoo.bench.shapes import GPU_MAX_TOKENS, Plan, Shape
from seq2seq_zoo.bench.timing import PeakMemory, error_line, interleaved, log, median, precision_name, sync
from seq2seq_zoo.bench.workloads import our_transformer, source_tokens, target_tokens, token_batches
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.models.base import count_parameters


class BatchCycle:
    """One trainer (one optimizer) over several batches, one per call in turn (their shapes differ, as in
    training); ``tokens`` lists each call's (source, target) non-pad tokens."""

    def __init__(self, model, batches: list[Batch], device: torch.device, dtype):
        self.batches = [b.to(device) for b in batches]
        self.trainer = Trainer(model, self.batches[0], device, dtype)
        self.tokens: list[tuple[int, int]] = []

    def __call__(self):
        b = self.batches[len(self.tokens) % len(self.batches)]
        self.tokens.append((source_tokens(b), target_tokens(b)))
        self.trainer.batch = b
        return self.trainer()


# the GPU-sized stage's variants beside the runs' own setting (``default``): what each would change
GPU_SHAPE_VARIANTS = {
    "cudnn_attention": "cuDNN's attention kernels on (`ZOO_CUDNN_ATTENTION=1`; runs have them off)",
    "compiled": "encoder and decoder stacks under `torch.compile(dynamic=True)` (`--compile`; runs are eager)",
}


class WithCudnnAttention:
    """A call with cuDNN's attention kernels enabled, the process's setting restored after it."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def __call__(self):
        was = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(True)
        try:
            return self.fn()
        finally:
            torch.backends.cuda.enable_cudnn_sdp(was)


def measure_gpu_shape(shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float],
                      dtype: torch.dtype | None, max_tokens: int = GPU_MAX_TOKENS,
                      progress: Callable[[str], None] = log, variants: tuple[str, ...] = ()) -> dict[str, Any]:
    """Our Transformer at ``shape`` on token batches: each timed update's model FLOP/s (6 x params x
    non-pad tokens) over the measured bf16 peak; the median over the updates is the figure. Runs on any
    device (the tests run it on CPU at a tiny shape); ``zoo bench`` runs it on CUDA at GPU_SHAPE.

    ``variants`` (names in GPU_SHAPE_VARIANTS): the same model, seed and batches with one thing changed,
    timed interleaved with the default; each also reports its first pass over the batches, where new
    shapes pay cuDNN's graph builds or compilation."""
    unknown = [v for v in variants if v not in GPU_SHAPE_VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)} (known: {', '.join(GPU_SHAPE_VARIANTS)})")
    torch.manual_seed(0)
    model, opts = our_transformer(shape, device)
    fp = flop_params(model)
    n_batches = max(plan.iters, 2)
    # enough examples for n_batches batches of the cap: about max_tokens / mean padded length each
    per_batch = max(1, max_tokens // ((3 * shape.src_len + 3 * shape.tgt_len) // 4))
    batches = token_batches(shape, max_tokens, per_batch * (n_batches + 1))[:n_batches]
    cycles = {"default": BatchCycle(model, batches, device, dtype)}
    calls: dict[str, Callable[[], Any]] = dict(cycles)
    first: dict[str, float] = {}

    def warm_up(name):
        t0 = time.perf_counter()
        for _ in range(len(batches)):       # first pass: every shape new
            calls[name]()
        sync(device)
        first[name] = time.perf_counter() - t0
        for _ in range((plan.warmup - 1) * len(batches)):
            calls[name]()
        sync(device)

    with PeakMemory(device) as mem:
        warm_up("default")
    errors: dict[str, str] = {}
    for v in variants:
        try:
            torch.manual_seed(0)
            m, _ = our_transformer(shape, device)
            if v == "compiled":
                m.encoder = torch.compile(m.encoder, dynamic=True)
                m.decoder = torch.compile(m.decoder, dynamic=True)
            cycles[v] = BatchCycle(m, batches, device, dtype)
            calls[v] = WithCudnnAttention(cycles[v]) if v == "cudnn_attention" else cycles[v]
            warm_up(v)
        except Exception as e:  # noqa: BLE001 - no compiler, out of memory: report it, keep the default
            errors[v] = error_line(e)[:300]
            calls.pop(v, None)
            cycles.pop(v, None)
            progress(f"    {v}: not measured ({errors[v]})")
    times = interleaved(calls, plan.iters, device)
    low = dtype in (torch.bfloat16, torch.float16)
    peak = peaks.get("bf16") if low else peaks.get("fp32")

    def figures(name):
        timed = cycles[name].tokens[-plan.iters:]
        rates = [train_flops(fp, src, tgt) / dt / 1e9 for (src, tgt), dt in zip(timed, times[name])]
        gflops = median(rates)
        return {"step_s_all": times[name], "model_gflops_all": rates, "model_gflops": gflops,
                "tokens_per_s": median([tgt / dt for (_, tgt), dt in zip(timed, times[name])]),
                "mfu": gflops / peak if peak else None, "first_pass_s": first[name]}

    out = {"options": opts, "params": count_parameters(model)["total"], "flop_params": fp,
           "max_tokens": max_tokens, "precision": precision_name(dtype),
           "batch_examples": [len(b.ids) for b in batches],
           "batch_padded_tokens": [int(b.src.numel() + b.tgt_out.numel()) for b in batches],
           **figures("default"), "peak_gflops": peak, "peak_kind": "bf16" if low else "fp32",
           "peak_mem_mb": mem.peak_mb,
           "cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled() if device.type == "cuda" else None}
    gflops = out["model_gflops"]
    progress(f"    {out['params'] / 1e6:.0f}M parameters, batches of {min(out['batch_examples'])}-"
             f"{max(out['batch_examples'])} examples (max_tokens {max_tokens:,}): {gflops:,.0f} GFLOP/s, "
             + (f"{100 * out['mfu']:.0f}% of the {out['peak_kind']} peak, " if out["mfu"] else "")
             + f"peak +{mem.peak_mb:,.0f} MB; first pass {first['default']:.1f}s")
    if variants:
        out["variants"] = {}
        for v in variants:
            if v in errors:
                out["variants"][v] = {"error": errors[v]}
                continue
            f = out["variants"][v] = figures(v)
            f["vs_default"] = f["model_gflops"] / gflops if gflops else None
            progress(f"    {v}: {f['model_gflops']:,.0f} GFLOP/s"
                     + (f" ({100 * f['mfu']:.0f}%)" if f["mfu"] else "")
                     + f", {f['vs_default']:.2f}x the default; first pass {f['first_pass_s']:.1f}s")
    return out
