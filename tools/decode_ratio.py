#!/usr/bin/env python3
"""The decoding ratio alone: `zoo bench`'s beam-4 decoding stage (our Transformer in fp32 and with
decode.precision = "int8", HF BART `generate` in fp32, the bench's shape and classes) timed in one
process, interleaved, for more rounds than the bench's, without its other stages.

    python tools/decode_ratio.py --threads 2 --rounds 7

Prints one JSON object: threads, the load average, each decoder's median seconds and every round's, and
each one's ratio against HF (HF's median / its median).
"""
import argparse
import json
import os
import statistics
import time

import torch

from seq2seq_zoo.bench.measure import OurDecoder
from seq2seq_zoo.bench.peers.hf import PeerDecoder, peer_model
from seq2seq_zoo.bench.shapes import PAPER
from seq2seq_zoo.bench.workloads import our_transformer, shaped_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--rounds", type=int, default=7, help="timed interleaved rounds (default 7)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev, shape = torch.device("cpu"), PAPER
    ours, _ = our_transformer(shape, dev)
    batch = shaped_batch(shape, shape.dec_sources, seed=2)
    decoders = {"ours_fp32": OurDecoder(ours, batch, dev, None, shape.beams, shape.dec_len),
                "ours_int8": OurDecoder(ours, batch, dev, None, shape.beams, shape.dec_len, int8=True),
                "peer_fp32": PeerDecoder(peer_model(shape, dev), batch, dev, None, shape.beams, shape.dec_len)}
    for d in decoders.values():   # warm-up
        d()
    times = {k: [] for k in decoders}
    for _ in range(args.rounds):
        for k, d in decoders.items():
            t = time.perf_counter()
            d()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"threads": args.threads, "load": os.getloadavg()[0], "median_s": med, "all_s": times,
                      "ratio_vs_peer": {k: med["peer_fp32"] / v for k, v in med.items()}}))


if __name__ == "__main__":
    main()
