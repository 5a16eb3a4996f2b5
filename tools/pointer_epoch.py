#!/usr/bin/env python3
"""Epoch time of one run on its own training batches, one thread, against another checkout's code: the
real-data counterpart of `zoo bench`'s full-size pointer-generator stage (which times a random batch
with every target at the file's 64-position cap).

    git worktree add /tmp/base <commit>
    python tools/pointer_epoch.py experiments/cnn_pointer.toml --run pg-cov-seed1 --baseline /tmp/base   # full size

Each side (this checkout; with --baseline, that one) runs in a worker process that imports its own
checkout, reads the data and builds the run's model and first epoch's batches (the loop's bucketing)
from its own copy of the experiment file (an older checkout's code may not read today's keys).
Batches spread evenly over the epoch are timed, each side in turn on the same batch (one full update:
forward, loss, backward, clipping, optimizer step; process CPU time, which load from other processes
moves far less than wall time), and the epoch's update time is extrapolated as the sample's time per
padded token times the epoch's padded tokens. Prints per-batch times, the epoch estimates and the ratio.
The updates run in the precision the run trains in (its ``train.precision``: "auto" is bf16 autocast on
CPUs with bf16 instructions, fp32 elsewhere), or in ``--precision``'s.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args) -> None:
    sys.path.insert(0, args.worker)
    import torch
    torch.set_num_threads(1)
    import seq2seq_zoo
    from seq2seq_zoo.bench import Trainer
    from seq2seq_zoo.config import load_experiment
    from seq2seq_zoo.data.batching import bucket_batches, collate
    from seq2seq_zoo.models.base import build_model
    from seq2seq_zoo.precision import autocast_dtype
    from seq2seq_zoo.registry import model_context
    from seq2seq_zoo.runner import prepare_data
    exp = load_experiment(args.experiment, profile=args.profile, only=[args.run])
    spec = exp.runs[0]
    vocab, data, _ = prepare_data(spec, args.data_dir, log=lambda *a: None)
    train = data["train"]
    order = bucket_batches(train, spec.train.batch_size, max_tokens=spec.train.max_tokens, seed=spec.seed, epoch=0)
    padded = [len(b) * (max(len(train[i].src) for i in b) + max(len(train[i].tgt) for i in b) + 1) for b in order]
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
    dtype = autocast_dtype(args.precision or spec.train.precision, torch.device("cpu"))
    print(json.dumps({"ready": seq2seq_zoo.__file__, "padded": padded, "precision": str(dtype or "fp32")}),
          flush=True)
    for line in sys.stdin:
        batch = collate([train[i] for i in order[int(line)]])
        step = Trainer(model, batch, torch.device("cpu"), dtype, label_smoothing=spec.train.label_smoothing,
                       clip_norm=spec.train.clip_norm)
        w, p = time.perf_counter(), time.process_time()
        step()
        print(json.dumps({"cpu": time.process_time() - p, "wall": time.perf_counter() - w,
                          "tgt_tokens": int((batch.tgt_out != 0).sum())}), flush=True)


def _experiment_in(tree: str, experiment: str) -> str:
    """The experiment file as that checkout has it (its code reads its own file's keys), when the path is
    one inside this checkout and the other checkout has the file; else the path as given."""
    p = Path(experiment).resolve()
    try:
        mine = Path(tree) / p.relative_to(ROOT)
    except ValueError:
        return experiment
    return str(mine) if mine.is_file() else experiment


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment")
    ap.add_argument("--profile", default=None, help="a profile of the file (default: none, the full size)")
    ap.add_argument("--run", required=True, help="run name as `zoo run --only` takes it, e.g. pg-cov-seed1")
    ap.add_argument("--baseline", metavar="DIR", help="another checkout, timed on the same batches")
    ap.add_argument("--batches", type=int, default=12, help="batches spread evenly over the first epoch")
    ap.add_argument("--data-dir", default=None, help="where the datasets are (as `zoo run --data-dir`)")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default=None,
                    help="autocast precision of the timed updates (default: the run's train.precision)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.baseline and not (Path(args.baseline) / "seq2seq_zoo").is_dir():
        print(f"error: {args.baseline}: --baseline: not a checkout of this project; make one with "
              f"`git worktree add {args.baseline} <commit>`", file=sys.stderr)
        raise SystemExit(2)
    trees = {"ours": str(ROOT)} | ({"baseline": str(Path(args.baseline).resolve())} if args.baseline else {})
    rest = ["--run", args.run] + (["--profile", args.profile] if args.profile else []) + (
        ["--data-dir", args.data_dir] if args.data_dir else []) + (
        ["--precision", args.precision] if args.precision else [])
    procs = {k: subprocess.Popen([sys.executable, __file__, _experiment_in(t, args.experiment), *rest, "--worker", t],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for k, t in trees.items()}

    def ask(k, line=None):
        if line is not None:
            procs[k].stdin.write(f"{line}\n")
            procs[k].stdin.flush()
        out = procs[k].stdout.readline()
        if not out:
            raise SystemExit(f"error: the {k} worker stopped (its error is above)")
        return json.loads(out)

    try:
        ready = {k: ask(k) for k in procs}
        padded = ready["ours"]["padded"]
        n = len(padded)
        pick = sorted({round(i * (n - 1) / max(1, args.batches - 1)) for i in range(min(args.batches, n))})
        for k in procs:
            print(f"{k}: {Path(ready[k]['ready']).parent} ({ready[k]['precision']})")
            ask(k, pick[0])                                  # warm-up
        times = {k: [] for k in procs}
        for b in pick:
            row = {k: ask(k, b) for k in procs}
            for k in procs:
                times[k].append(row[k]["cpu"])
            print(f"  batch {b} ({padded[b]:,} padded tokens, {row['ours']['tgt_tokens']} target tokens): "
                  + ", ".join(f"{k} {row[k]['cpu']:.3f} s" for k in procs))
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    share = sum(padded) / sum(padded[b] for b in pick)
    epoch = {k: sum(t) * share for k, t in times.items()}
    print(f"an epoch of {n:,} updates (CPU, one thread): " + ", ".join(f"{k} {epoch[k] / 60:.1f} min" for k in epoch)
          + (f"; {epoch['baseline'] / epoch['ours']:.2f}x" if "baseline" in epoch else ""))


if __name__ == "__main__":
    main()
