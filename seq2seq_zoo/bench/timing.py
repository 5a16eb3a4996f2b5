"""Timing and memory helpers of the bench: interleaved timing of compared calls, the median, peak
memory of a block and the matmul rate (peak and a probe timed among the compared calls)."""
from __future__ import annotations

import contextlib
import os
import resource
import statistics
import threading
import time
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.shapes import GPU_MATMUL_N, Plan


def number(x, nd: int = 0) -> str:
    """A figure for the bench's tables: thousands separated, ``nd`` decimals, a dash for a missing one."""
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def log(msg: str) -> None:
    print(msg, flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def release_free_memory() -> None:
    """Give memory freed by earlier stages back to the OS (gc, then glibc's malloc_trim), so that the
    resident set size at a stage's start is what is live and its growth is the stage's own."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the baseline then includes freed memory
        pass


@contextlib.contextmanager
def long_lived_frozen():
    """What exists before the stages (imported modules, the caller's objects) set aside from the garbage
    collector (``gc.freeze``) while they run, so that the full collection before each stage
    (``release_free_memory``) walks only what the stages made instead of every object of a process that
    has imported torch and transformers; given back to the collector at the end."""
    import gc
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class PeakMemory:
    """Peak memory of a block. CPU: resident set size sampled every 5 ms by a thread, minus the RSS at
    entry (the working memory the block adds), plus the process high-water mark; CUDA: the allocator's
    peak."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak_mb = 0.0
        self.process_max_rss_mb = 0.0

    @staticmethod
    def rss_mb() -> float:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            return self
        release_free_memory()
        self._base = self.rss_mb()
        self._max = self._base
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(0.005):
                self._max = max(self._max, self.rss_mb())

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
            self.process_max_rss_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            return False
        self._stop.set()
        self._thread.join()
        self._max = max(self._max, self.rss_mb())
        self.peak_mb = self._max - self._base
        self.process_max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return False


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, device: torch.device,
                probe: MatmulProbe | None = None) -> dict[str, list[float]]:
    """Seconds per call of each function, timed in turn (a, b, a, b, ...) so noise hits all alike.
    ``probe``, if given, is timed in every round among them; its times land in ``probe.times``."""
    calls = {**fns, **({"_probe": probe} if probe else {})}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    if probe:
        probe.times = times.pop("_probe")
    return times


def error_line(e: BaseException) -> str:
    """An exception as one line for a report: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def peak_matmul_n(device: torch.device, plan: Plan) -> int:
    """Side of the square product that measures a device's matmul peak: the plan's on a CPU, at least
    GPU_MATMUL_N on a GPU (smaller products leave much of a large GPU idle)."""
    return plan.matmul_n if device.type == "cpu" else max(plan.matmul_n, GPU_MATMUL_N)


class MatmulProbe:
    """An n x n x n product timed among the compared calls (interleaved with them), so that a bound taken
    against its rate sees the same load as they do: on a shared machine the best-of-n peak measured at the
    start can come from a quiet moment the later timings never had. ``gflops`` is the median rate."""

    def __init__(self, device: torch.device, dtype: torch.dtype | None, n: int = 1024):
        g = torch.Generator(device="cpu").manual_seed(0)
        self.device, self.flops = device, 2 * n ** 3
        self.a, self.b = (torch.randn(n, n, generator=g).to(device=device, dtype=dtype or torch.float32)
                          for _ in range(2))
        self.times: list[float] = []

    def __call__(self):
        return self.a @ self.b

    @property
    def gflops(self) -> float | None:
        return self.flops / median(self.times) / 1e9 if self.times else None


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 2048, iters: int = 8) -> float:
    """GFLOP/s of an n x n x n matmul, best of ``iters`` (the hardware's attainable rate)."""
    probe = MatmulProbe(device, dtype, n)
    for _ in range(2):
        probe()
    return probe.flops / min(interleaved({"peak": probe}, iters, device)["peak"]) / 1e9
