"""The recurrent models' fast implementation against ``impl = "reference"``, and the vocabulary work
that bounds what any fast decoder can gain."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.flops import decode_rows, flop_params, output_bound
from seq2seq_zoo.bench.measure import OurDecoder, Trainer, measure_decoding, measure_training
from seq2seq_zoo.bench.shapes import Plan, Shape
from seq2seq_zoo.bench.timing import MatmulProbe, interleaved, log, median, peak_matmul_n, precision_name
from seq2seq_zoo.bench.workloads import our_model, target_tokens
from seq2seq_zoo.data.batching import Batch
from seq2seq_zoo.models.base import count_parameters
from seq2seq_zoo.precision import autocast


def measure_recurrent(name: str, shape: Shape, device: torch.device, plan: Plan, peaks: dict[str, float],
                      batch: Batch, dbatch: Batch, precisions, default_dtype,
                      progress: Callable[[str], None] = log) -> dict[str, Any]:
    """One recurrent model, its fast implementation (the default) against ``impl = "reference"`` (the
    previous one), timed interleaved in the same process: training in each precision, then beam
    decoding in the default precision. A reference that cannot run a precision here (CPU autocast sends
    the LSTM to oneDNN's bf16 RNN primitive, which CPUs without AMX lack) is reported as such."""
    fast, opts = our_model(name, shape, device)
    ref, _ = our_model(name, shape, device, impl="reference")
    out: dict[str, Any] = {"options": opts, "params": count_parameters(fast)["total"], "training": {}}
    rplan = replace(plan, iters=plan.rnn_iters)
    fp = flop_params(fast)
    for dt in precisions:
        p = precision_name(dt)
        trainers = {"fast": Trainer(fast, batch, device, dt), "reference": Trainer(ref, batch, device, dt)}
        row: dict[str, Any] = {}
        probe = MatmulProbe(device, dt, peak_matmul_n(device, plan))
        try:
            figs = measure_training(trainers, rplan, {k: fp for k in trainers}, peaks, lambda s: None,
                                    probe=probe)
        except RuntimeError as e:
            row["reference_error"] = str(e).splitlines()[0][:200]
            del trainers["reference"]
            figs = measure_training(trainers, rplan, {k: fp for k in trainers}, peaks, lambda s: None)
        row.update(figs)
        if "reference" in figs:
            row["speedup"] = figs["reference"]["step_s"] / figs["fast"]["step_s"]
            row.update(output_bound(6.0 * fp["output"] * target_tokens(batch), probe.gflops,
                                    figs["reference"]["step_s"]))
        out["training"][p] = row
        progress(f"    {name} {p}: fast {figs['fast']['tokens_per_s']:.0f} tok/s"
                 + (f", reference {figs['reference']['tokens_per_s']:.0f} tok/s ({row['speedup']:.2f}x)"
                    if "speedup" in row else f"; reference failed: {row['reference_error'][:80]}"))
        del trainers
    decoders = {"fast": OurDecoder(fast, dbatch, device, default_dtype, shape.beams, shape.dec_len),
                "reference": OurDecoder(ref, dbatch, device, default_dtype, shape.beams, shape.dec_len)}
    try:
        probe = MatmulProbe(device, default_dtype, peak_matmul_n(device, plan))
        dec = measure_decoding(decoders, replace(plan, decode_iters=max(1, plan.rnn_iters)), lambda s: None,
                               probe=probe)
        dec["speedup"] = dec["reference"]["seconds"] / dec["fast"]["seconds"]
        dec.update(output_bound(2.0 * fp["output"] * decode_rows(shape, dbatch.size), probe.gflops,
                                dec["reference"]["seconds"]))
        dec["vocabulary_s"] = vocabulary_work(fast, dbatch.size, shape.beams, shape.dec_len, device, default_dtype,
                                              max(3, plan.rnn_iters))
        dec["vocabulary_ceiling"] = dec["reference"]["seconds"] / dec["vocabulary_s"]
        progress(f"    {name} beam-{shape.beams} decoding ({precision_name(default_dtype)}): fast "
                 f"{dec['fast']['tokens_per_s']:.0f} tok/s, reference {dec['reference']['tokens_per_s']:.0f} tok/s "
                 f"({dec['speedup']:.2f}x; the shared vocabulary work {dec['vocabulary_s']:.3g} s allows at most "
                 f"{dec['vocabulary_ceiling']:.2f}x)")
    except RuntimeError as e:
        dec = {"error": str(e).splitlines()[0][:200]}
    out["decoding"] = dec
    return out


def vocabulary_work(model, sources: int, beams: int, steps: int, device: torch.device, dtype,
                    iters: int = 3) -> float:
    """Seconds of the work over the vocabulary that every beam decoder of a recurrent ``model`` does, whichever
    its implementation (``decode.beam_search`` over either ``impl``): at each step the output layer
    (``model.output``, one or two layers, under ``generate``'s packed weights and the autocast) on the
    hypotheses' features, the fp32 log-softmax (``fast.kernels.log_softmax_fp32``) and each row's top 2K; one
    hypothesis per source at the first step, ``beams`` after it (as ``decode_rows`` counts them). Median of
    ``iters`` timed passes after one untimed. Its share of the reference's decoding time bounds what any
    fast path can gain with this decoder: reference time / this time."""
    from seq2seq_zoo.models.fast.kernels import log_softmax_fp32, packed_linear_weights
    out = model.output
    first = out[0] if isinstance(out, torch.nn.Sequential) else out
    g = torch.Generator().manual_seed(0)
    hs = [torch.randn(n, first.in_features, generator=g).to(device) for n in (sources, sources * beams)]
    was = model.training
    model.eval()

    def run():
        for t in range(steps):
            lp = log_softmax_fp32(out(hs[0 if t == 0 else 1]))
            lp.topk(min(2 * beams, lp.size(-1)), -1)

    try:
        with torch.no_grad(), packed_linear_weights(model, sources * beams), autocast(device, dtype):
            run()
            return median(interleaved({"vocabulary": run}, iters, device)["vocabulary"])
    finally:
        model.train(was)
