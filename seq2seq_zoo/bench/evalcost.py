"""The cost of scoring summaries with the suite's metrics (ROUGE, BERTScore)."""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from seq2seq_zoo.bench.timing import PeakMemory, error_line, log


def synthetic_summaries(n: int, seed: int = 0) -> tuple[list[str], list[list[str]]]:
    """``n`` (prediction, [reference]) pairs of 20-40 English words, the length of a DialogSum summary."""
    words = ("the a person one two said asked would meeting tomorrow office friend dinner doctor phone "
             "because about after before with they we you he she will wants needs tells agrees plans "
             "house car work school money time help job party weekend").split()
    g = np.random.default_rng(seed)

    def sent():
        return " ".join(g.choice(words, size=int(g.integers(20, 41)))) + " ."
    preds = [sent() for _ in range(n)]
    return preds, [[sent()] for _ in range(n)]


def measure_eval_cost(n: int, device: torch.device, progress: Callable[[str], None] = log) -> dict[str, Any]:
    """Seconds to score ``n`` summaries with each metric of the suite's reports (ROUGE 1/2/L/Lsum with
    the stemmer; BERTScore with its default backbone, all-MiniLM-L6-v2), and peak memory."""
    from seq2seq_zoo.registry import METRICS
    preds, refs = synthetic_summaries(n)
    out: dict[str, Any] = {"examples": n, "words_per_summary": "20-40"}
    for name, kw in (("rouge", {}), ("bertscore", {"device": device.type})):
        try:
            METRICS.get(name)(preds[:8], refs[:8], **kw)           # load the model / tokenizers once
            with PeakMemory(torch.device("cpu")) as mem:
                t0 = time.perf_counter()
                _, settings = METRICS.get(name)(preds, refs, **kw)
                sec = time.perf_counter() - t0
            out[name] = {"seconds": sec, "examples_per_s": n / sec, "peak_mem_mb": mem.peak_mb,
                         "backbone": settings.get("model") or settings.get("backbone")}
            progress(f"    {name}: {sec:.1f}s for {n} examples ({n / sec:.0f}/s)")
        except Exception as e:  # noqa: BLE001 - a missing backbone must not stop the bench
            out[name] = {"error": error_line(e)[:200]}
            progress(f"    {name}: not measured ({out[name]['error']})")
    return out
