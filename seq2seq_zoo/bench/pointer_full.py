"""The full-size pointer-generator + coverage update of experiments/cnn_pointer.toml (400-token sources, a
20,000-word vocabulary, hidden 256, embeddings 128, batch 16, targets of 64 positions: the file's cap),
on one CPU thread, as `zoo bench` reports it: seconds per update (wall and process CPU), target tokens per
second, the time of the work any implementation at this shape does with the same library kernels (the
bound), and, with ``--baseline DIR`` (a checkout of another commit, e.g. ``git worktree add DIR <commit>``),
the same update of that checkout's code timed interleaved with ours.

Each side runs in its own worker process (the package imported from its own tree) that builds the model
and the batch once and runs one update per request; the parent asks ours, then the baseline, round by
round, so that load from other processes falls on both alike, and takes medians. Process CPU time is
reported beside wall time: on a machine shared with other processes a one-thread update's CPU time moves
far less than its wall time. The workers use only what the package had before this stage existed
(``bench.workloads``, ``bench.measure.Trainer``, ``models.base.build_model``), so older checkouts run too."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from seq2seq_zoo.bench.timing import log

# the full size of experiments/cnn_pointer.toml ([defaults]: the pg-cov run), on one thread
PG_FULL = dict(vocab=20000, src_len=400, tgt_len=64, batch=16, emb_dim=128, hidden=256, dropout=0.1,
               output_layers=2, coverage=True, clip_norm=2.0, label_smoothing=0.0)
TRAIN_STORIES = 21821      # CNN training stories of the experiment's data (an epoch: 1,364 updates at batch 16)
# updates to the best validation loss of pg-cov seeds 1-5 at cpu_long_src400 (results/cpu_long_src400/
# cnn_pointer/NOTES.md: 400-token sources, hidden 128, 5,000 words): the projection's range
CONVERGENCE_UPDATES = (6500, 10912)

_WORKER = r"""
import json, sys, time
tree = sys.argv[1]
if tree:
    sys.path.insert(0, tree)
import torch
torch.set_num_threads(1)
import seq2seq_zoo
from seq2seq_zoo.bench.shapes import Shape
from seq2seq_zoo.bench.workloads import shaped_batch, context
from seq2seq_zoo.bench.measure import Trainer
from seq2seq_zoo.models.base import build_model
c = json.loads(sys.argv[2])
shape = Shape(vocab=c["vocab"], batch=c["batch"], src_len=c["src_len"], tgt_len=c["tgt_len"], rnn_emb=c["emb_dim"],
              rnn_hidden=c["hidden"])
torch.manual_seed(0)
model = build_model("pointer_generator", context(shape), dict(emb_dim=c["emb_dim"], hidden=c["hidden"],
                    dropout=c["dropout"], coverage=c["coverage"], output_layers=c["output_layers"]))
batch = shaped_batch(shape, c["batch"], seed=1)
dtype = torch.bfloat16 if c.get("precision") == "bf16" else None
step = Trainer(model, batch, torch.device("cpu"), dtype, label_smoothing=c["label_smoothing"], clip_norm=c["clip_norm"])
print(json.dumps({"ready": seq2seq_zoo.__file__, "tokens": int((batch.tgt_out != 0).sum())}), flush=True)
for line in sys.stdin:
    w, p = time.perf_counter(), time.process_time()
    loss = float(step())
    print(json.dumps({"wall": time.perf_counter() - w, "cpu": time.process_time() - p, "loss": loss}), flush=True)
"""


def _commit(package: str) -> str | None:
    """The git commit of the checkout holding ``package`` (None outside git); uncommitted edits not shown."""
    try:
        out = subprocess.run(["git", "-C", str(Path(package).parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def check_baseline(tree: str) -> None:
    """A UserError unless ``tree`` is a checkout holding the package (``--baseline``)."""
    from seq2seq_zoo.errors import UserError
    if not (Path(tree) / "seq2seq_zoo" / "bench" / "workloads.py").is_file():
        raise UserError(f"{tree}: --baseline: not a checkout of this project (no seq2seq_zoo/bench/workloads.py); "
                        f"make one with `git worktree add {tree} <commit>`")


class _Worker:
    """One side's worker process: ``tree`` None imports this package's own tree."""

    def __init__(self, tree: str | None, config: dict[str, Any]):
        here = str(Path(__file__).resolve().parents[2])
        self.p = subprocess.Popen([sys.executable, "-c", _WORKER, tree or here, json.dumps(config)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.module, self.tokens = None, 0

    def ready(self) -> "_Worker":
        """Waits for the worker's model and batch (the workers start side by side)."""
        first = self._read()
        self.module, self.tokens = first["ready"], first["tokens"]
        return self

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            err = self.p.stderr.read().strip().splitlines()
            raise RuntimeError(f"worker failed: {err[-1] if err else 'no output'}")
        return json.loads(line)

    def __call__(self) -> dict:
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        return self._read()

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def shared_work(config: dict[str, Any] = PG_FULL, iters: int = 3) -> dict[str, float]:
    """Seconds (process CPU, median of ``iters``) of the work that every implementation of this update does
    with PyTorch's kernels, whatever else it changes: the bidirectional LSTM encoder forward and backward
    (torch's fused CPU LSTM, which both take on unpadded sources) and the output layer's three products
    (logits, and their gradients with respect to the input and the weight) over the batch's target rows.
    Their sum is a floor on the update's time; baseline time / floor is the highest speed-up the rest allows.
    With ``config["precision"]`` "bf16" the LSTM runs under bf16 autocast, as the update does, and the
    products take bf16 operands (their casts not counted, so the floor stays a floor)."""
    import time
    c = config
    bf16 = c.get("precision") == "bf16"
    B, S, T, V, n, m = c["batch"], c["src_len"], c["tgt_len"], c["vocab"], c["hidden"], c["emb_dim"]
    g = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lstm = torch.nn.LSTM(m, n, batch_first=True, bidirectional=True)
        x = torch.randn(B, S, m, generator=g, requires_grad=True)
        # the products' operands already in bf16 under bf16 (no casts counted: the least time of the products)
        h, W, G = (t.to(torch.bfloat16 if bf16 else torch.float32) for t in (
            torch.randn(B * T, n, generator=g), torch.randn(V, n, generator=g), torch.randn(B * T, V, generator=g)))

        def encoder():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out, _ = lstm(x)
            out.backward(torch.ones_like(out))

        def output():
            torch.mm(h, W.t())
            torch.mm(G, W)
            torch.mm(G.t(), h)

        out = {}
        for name, f in (("encoder_lstm_s", encoder), ("output_products_s", output)):
            f()
            times = []
            for _ in range(iters):
                p = time.process_time()
                f()
                times.append(time.process_time() - p)
            out[name] = statistics.median(times)
        return out
    finally:
        torch.set_num_threads(threads)


def measure_pointer_full(baseline: str | None = None, rounds: int = 3, progress: Callable[[str], None] = log,
                         config: dict[str, Any] = PG_FULL, precision: str = "fp32") -> dict[str, Any]:
    """The stage's figures: ours (and the baseline's) seconds per update, tokens/s, the shared-work floor
    and, with a baseline, the speed-up (CPU time and wall time) and the ceiling the floor allows.
    ``config``: the sizes (PG_FULL's keys; tests take small ones); ``precision``: "fp32", or "bf16" for
    the update under bf16 autocast (what ``train.precision = "auto"`` trains in on CPUs with bf16
    instructions), both sides alike."""
    config = {**config, "precision": precision}
    sides = {"ours": _Worker(None, config)}
    try:
        if baseline:
            check_baseline(baseline)
            sides["baseline"] = _Worker(str(Path(baseline).resolve()), config)
        for w in sides.values():      # one untimed update each
            w.ready()()
        times: dict[str, list[dict]] = {k: [] for k in sides}
        for _ in range(rounds):
            for k, w in sides.items():
                times[k].append(w())
    finally:
        for w in sides.values():
            w.close()
    res: dict[str, Any] = {"shape": dict(config), "threads": 1, "rounds": rounds, "precision": precision}
    for k, w in sides.items():
        cpu = statistics.median(t["cpu"] for t in times[k])
        wall = statistics.median(t["wall"] for t in times[k])
        res[k] = {"package": str(Path(w.module).parent), "commit": _commit(str(Path(w.module).parent)),
                  "cpu_s": cpu, "step_s": wall,
                  "cpu_s_all": [t["cpu"] for t in times[k]], "step_s_all": [t["wall"] for t in times[k]],
                  "tokens_per_s": w.tokens / wall, "tokens_per_cpu_s": w.tokens / cpu,
                  "loss": times[k][-1]["loss"]}
    floor = shared_work(config)
    floor["floor_s"] = floor["encoder_lstm_s"] + floor["output_products_s"]
    res["shared_work"] = floor
    ours = res["ours"]
    updates = -(-TRAIN_STORIES // config["batch"])
    res["epoch"] = {"updates": updates, "seconds": updates * ours["cpu_s"],
                    "convergence_updates": list(CONVERGENCE_UPDATES),
                    "convergence_hours": [u * ours["cpu_s"] / 3600 for u in CONVERGENCE_UPDATES]}
    progress(f"    ours ({precision}): {ours['cpu_s']:.3f} s per update (CPU; wall {ours['step_s']:.3f} s), "
             f"{ours['tokens_per_cpu_s']:.0f} target tokens/s; an epoch ({updates:,} updates) "
             f"{res['epoch']['seconds'] / 60:.1f} min")
    if "baseline" in res:
        base = res["baseline"]
        res["speedup_cpu"] = base["cpu_s"] / ours["cpu_s"]
        res["speedup_wall"] = base["step_s"] / ours["step_s"]
        res["ceiling"] = base["cpu_s"] / floor["floor_s"]
        progress(f"    baseline {base['package']}: {base['cpu_s']:.3f} s per update (CPU; wall {base['step_s']:.3f} s)"
                 f"; ours {res['speedup_cpu']:.2f}x on CPU time ({res['speedup_wall']:.2f}x wall)")
    progress(f"    bound: the encoder LSTM ({floor['encoder_lstm_s']:.3f} s) and the output layer's products "
             f"({floor['output_products_s']:.3f} s) that any implementation runs take {floor['floor_s']:.3f} s"
             + (f"; the baseline's time allows at most {res['ceiling']:.2f}x" if "ceiling" in res else ""))
    return res
