#!/usr/bin/env python3
"""Time the recurrent encoder's unpacked run (``rnn_kernels._run_held``, the fast path's default on CPU)
against the packed run it replaced, on a run's own length-bucketed training batches: whole training
steps (forward, loss, backward, clipping, optimizer), the two interleaved on each batch.

    python tools/encoder_padding.py experiments/rnn_progression.toml --profile cpu --run dsum-bilstm-seed1

``zoo bench`` times the recurrent models on batches without padding (the bench shape), where both
implementations run the encoder unpacked, so it does not see this; this script measures it on the data
the experiments train on. Prints per-batch times and the sums.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from seq2seq_zoo.bench import Trainer
from seq2seq_zoo.config import load_experiment
from seq2seq_zoo.data.batching import bucket_batches, collate
from seq2seq_zoo.errors import UserError
from seq2seq_zoo.models.fast import rnn_kernels
from seq2seq_zoo.models.base import build_model
from seq2seq_zoo.registry import model_context
from seq2seq_zoo.runner import prepare_data


def packed_run(rnn, x, mask, lengths):
    """``_run_held``'s stand-in: the packed run ``run_encoder`` used before it (and still uses off the CPU)."""
    return rnn_kernels.run_packed(rnn, x, mask)


def fail(msg: str) -> None:
    """An input error: one line on stderr, exit 2, no traceback (as ``zoo``)."""
    print(f"error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment")
    ap.add_argument("--profile", default=None)
    ap.add_argument("--run", required=True, help="run name as `zoo run --only` takes it, e.g. dsum-bilstm-seed1")
    ap.add_argument("--batches", type=int, default=10, help="batches spread evenly over the first epoch")
    ap.add_argument("--repeats", type=int, default=2, help="timed steps per implementation and batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=None, help="where the datasets are (as `zoo run --data-dir`)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        exp = load_experiment(args.experiment, profile=args.profile, only=[args.run])
        spec = exp.runs[0]
        vocab, data, _ = prepare_data(spec, args.data_dir, log=lambda *a: None)
    except UserError as e:
        fail(str(e))
    train = data["train"]
    order = bucket_batches(train, spec.train.batch_size, max_tokens=spec.train.max_tokens, seed=spec.seed, epoch=0)
    pick = np.linspace(0, len(order) - 1, min(args.batches, len(order))).astype(int)
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, model_context(len(vocab), spec.data), spec.model_options)
    enc = getattr(model, "encoder", None)
    if not isinstance(enc, (torch.nn.LSTM, torch.nn.GRU)) or enc.num_layers != 1:
        fail(f"{args.experiment}: run {spec.name} ({spec.model}) has no one-layer recurrent encoder; "
             f"the unpacked run serves bilstm and pointer_generator (layers = 1)")
    held = rnn_kernels._run_held
    total = {"unpacked": 0.0, "packed": 0.0}
    padded = sum(1 for b in order if len({len(train[i].src) for i in b}) > 1)
    print(f"{spec.name}: {len(order)} batches in an epoch, {padded} with source padding; timing {len(pick)}")
    try:
        for k in pick:
            batch = collate([train[i] for i in order[k]])
            step = Trainer(model, batch, torch.device("cpu"), None)
            step()   # warm-up
            row = {"unpacked": 0.0, "packed": 0.0}
            for _ in range(args.repeats):
                for name in row:
                    rnn_kernels._run_held = held if name == "unpacked" else packed_run
                    t = time.perf_counter()
                    step()
                    row[name] += (time.perf_counter() - t) / args.repeats
            rnn_kernels._run_held = held
            for name in row:
                total[name] += row[name]
            lens = [len(train[i].src) for i in order[k]]
            print(f"  batch {k}: {len(lens)} sources of {min(lens)}-{max(lens)} tokens: "
                  f"unpacked {row['unpacked']:.2f} s, packed {row['packed']:.2f} s")
    finally:
        rnn_kernels._run_held = held
    print(f"sum: unpacked {total['unpacked']:.1f} s, packed {total['packed']:.1f} s "
          f"({total['packed'] / total['unpacked']:.2f}x)")


if __name__ == "__main__":
    main()
