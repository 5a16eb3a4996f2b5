"""int8 decoding (``decode.precision = "int8"``: every linear layer with int8 weights and dynamically
quantised inputs) against the same model's default precision, per model family: beam-K tokens/s and peak
memory at the bench shape, timed interleaved; and the ROUGE-1 change it makes on the DialogSum test split,
read from trained runs that were also decoded in int8 (``zoo eval RUN --decode precision=int8 --name
int8``): the bench decodes random weights, whose outputs say nothing about ROUGE."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.measure import OurDecoder, measure_decoding
from seq2seq_zoo.bench.shapes import Plan, Shape
from seq2seq_zoo.bench.timing import log
from seq2seq_zoo.bench.workloads import our_model, shaped_batch

# the families the int8 path is measured on: the Transformer, the copy-head Transformer, an attention RNN
# and the pointer-generator (recurrent, copy attention, coverage)
INT8_MODELS = ("transformer", "transformer_pointer", "bahdanau", "pointer_generator")


def measure_int8(shape: Shape, device: torch.device, plan: Plan, dtype, runs: str | Path | None = None,
                 progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Per model of ``INT8_MODELS``: its decoding in ``dtype`` (the default precision) and in int8, warmed
    up alone (peak memory) and timed interleaved; ``speedup`` = default time / int8 time. With ``runs``
    (a results folder), each model's ROUGE-1 in its own precision and in int8 from ``int8_rouge``."""
    from seq2seq_zoo.registry import MODELS
    batch = shaped_batch(shape, shape.dec_sources, seed=2)
    out: dict[str, Any] = {}
    for name in INT8_MODELS:
        if name not in MODELS:
            continue
        model, opts = our_model(name, shape, device) if name != "transformer_pointer" else \
            _transformer_like(name, shape, device)
        decs = {"default": OurDecoder(model, batch, device, dtype, shape.beams, shape.dec_len),
                "int8": OurDecoder(model, batch, device, None, shape.beams, shape.dec_len, int8=True)}
        figs = measure_decoding(decs, plan, lambda _m: None)
        row = {"options": opts, **{k: {x: f[x] for x in ("precision", "seconds", "tokens_per_s", "peak_mem_mb")}
                                    for k, f in figs.items()}}
        row["int8"]["precision"] = "int8"
        row["speedup"] = figs["default"]["seconds"] / figs["int8"]["seconds"]
        out[name] = row
        progress(f"    {name}: {figs['default']['tokens_per_s']:.0f} tok/s in {figs['default']['precision']}, "
                 f"{figs['int8']['tokens_per_s']:.0f} in int8 ({row['speedup']:.2f}x); peak +"
                 f"{figs['default']['peak_mem_mb']:.0f} / +{figs['int8']['peak_mem_mb']:.0f} MB")
    if runs is not None:
        quality = int8_rouge(runs)
        for name, q in quality.items():
            out.setdefault(q["model"], {})["rouge1"] = q
            progress(f"    {q['run']} ({q['model']}): ROUGE-1 {q['rouge1_default']:.2f} -> {q['rouge1_int8']:.2f} in "
                     f"int8 ({q['delta']:+.2f}) on {q['n_examples']} {q['split']} examples")
    return out


def _transformer_like(name: str, shape: Shape, device: torch.device):
    """A Transformer-shaped registered model (the copy-head Transformer) at the bench's Transformer sizes."""
    from seq2seq_zoo.bench.workloads import context
    from seq2seq_zoo.models.base import build_model
    torch.manual_seed(0)
    opts = dict(d_model=shape.d_model, d_ff=shape.d_ff, heads=shape.heads, layers=shape.layers,
                dropout=shape.dropout)
    return build_model(name, context(shape), opts).to(device), opts


def int8_rouge(runs: str | Path) -> dict[str, dict[str, Any]]:
    """Every run under the results folder ``runs`` (``EXPERIMENT/RUN/record.json``) with a decoding of the
    same settings but ``precision = "int8"`` (``decodes/NAME/record.json``): its ROUGE-1 (F1 x 100) in
    its own precision and in int8, on the same split and examples."""
    out: dict[str, dict[str, Any]] = {}
    for rec_path in sorted(Path(runs).glob("*/*/record.json")):
        rec = _read(rec_path)
        ev = rec.get("eval") or {}
        base = ev.get("decode") or {}
        for dec_path in sorted((rec_path.parent / "decodes").glob("*/record.json")):
            dev = _read(dec_path).get("eval") or {}
            dd = dev.get("decode") or {}
            if dd.get("precision") != "int8" or {k: v for k, v in dd.items() if k != "precision"} != base:
                continue
            a, b = ev.get("scores", {}).get("rouge1"), dev.get("scores", {}).get("rouge1")
            if a is None or b is None or ev.get("n_examples") != dev.get("n_examples"):
                continue
            out[f"{rec_path.parent.parent.name}/{rec.get('run')}"] = {
                "run": f"{rec_path.parent.parent.name}/{rec.get('run')}", "model": rec.get("model"),
                "split": ev.get("split"), "n_examples": ev.get("n_examples"), "decode_name": dec_path.parent.name,
                "rouge1_default": a, "rouge1_int8": b, "delta": b - a}
    return out


def int8_markdown(r: dict[str, Any] | None, shape: dict[str, Any]) -> list[str]:
    """The int8 stage as a table: per model, tokens/s and peak memory in its default precision and in
    int8, the speed-up, and the ROUGE-1 change of trained runs where measured."""
    if not r:
        return []
    from seq2seq_zoo.bench.timing import number as _fmt
    L = ["", f"### int8 decoding per model (`decode.precision = \"int8\"`, beam-{shape['beams']}, "
             f"{shape['dec_sources']} sources x {shape['dec_len']} tokens)", "",
         "| model | default tok/s | int8 tok/s | speed-up | default peak MB | int8 peak MB | ROUGE-1 default -> int8 |",
         "|---|---|---|---|---|---|---|"]
    for name, row in r.items():
        q = row.get("rouge1")
        qt = f"{q['rouge1_default']:.2f} -> {q['rouge1_int8']:.2f} ({q['delta']:+.2f}; {q['n_examples']} {q['split']})" \
            if q else "—"
        if "default" in row:
            L.append(f"| {name} | {_fmt(row['default']['tokens_per_s'])} | {_fmt(row['int8']['tokens_per_s'])} | "
                     f"{row['speedup']:.2f}x | {_fmt(row['default'].get('peak_mem_mb'))} | "
                     f"{_fmt(row['int8'].get('peak_mem_mb'))} | {qt} |")
        else:
            L.append(f"| {name} | — | — | — | — | — | {qt} |")
    return L


def _read(path: Path) -> dict[str, Any]:
    """A record, or {} where it cannot be read (a damaged record is the report's business, not the bench's)."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}
