"""zoo bench: the throughput and cost benchmark."""
from __future__ import annotations


def cmd_bench(args) -> int:
    from seq2seq_zoo.bench import run_bench
    run_bench(args.out, quick=args.quick, devices=args.device, scaling=not args.skip_scaling, threads=args.threads,
              data_dir=args.data_dir, full_epoch=args.full_epoch, with_compile=args.compile,
              command="zoo " + " ".join(args.argv))
    return 0
