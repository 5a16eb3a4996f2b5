"""zoo bench: the throughput and cost benchmark."""
from __future__ import annotations


def cmd_bench(args) -> int:
    from seq2seq_zoo.bench import run_bench
    if args.baseline:
        from seq2seq_zoo.bench.pointer_full import check_baseline
        check_baseline(args.baseline)
    run_bench(args.out, quick=args.quick, devices=args.device, scaling=not args.skip_scaling, threads=args.threads,
              data_dir=args.data_dir, full_epoch=args.full_epoch, with_compile=args.compile,
              baseline=args.baseline, int8_runs=args.int8_runs,
              command="zoo " + " ".join(args.argv))
    return 0
