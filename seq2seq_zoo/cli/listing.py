"""zoo list: the registered models, datasets, metrics, schedules and objectives."""
from __future__ import annotations


def cmd_list(args) -> int:
    from seq2seq_zoo.registry import DATASETS, METRICS, MODELS, OBJECTIVES, SCHEDULES
    regs = {"models": MODELS, "datasets": DATASETS, "metrics": METRICS, "schedules": SCHEDULES,
            "objectives": OBJECTIVES}
    for kind, reg in regs.items():
        if args.what not in ("all", kind):
            continue
        print(f"{kind}:")
        for n in reg.names(args.pattern):
            print(f"  {n:<20} {reg.doc(n)}")
            if kind == "datasets":  # data.options of the reader, with defaults
                from seq2seq_zoo.registry import reader_options
                opts = reader_options(n)
                if opts:
                    print(f"  {'':<20} options: " + ", ".join(f"{k}={d!r}" for k, (d, _) in opts.items()))
    return 0
