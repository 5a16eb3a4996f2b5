"""zoo data download | info."""
from __future__ import annotations

import os
from pathlib import Path

from seq2seq_zoo.errors import UserError
from seq2seq_zoo.cli.common import checked_path, experiment_profile


def cmd_data(args) -> int:
    if args.data_cmd == "download":
        from seq2seq_zoo.data.download import download
        target = args.data_dir or os.environ.get("ZOO_DATA") or "data"
        checked_path(target, "dir", "the data folder")
        paths = download(args.name, target, mirror=args.mirror, force=args.force)
        print(f"{args.name}: {len(paths)} file(s) in {Path(target) / args.name}")
        return 0
    if args.data_cmd == "info":
        return _data_info(args)
    raise UserError("usage: zoo data download NAME | zoo data info NAME")


def _data_info(args) -> int:
    """zoo data info NAME|EXPERIMENT: where the data was found, files, split sizes, fields, split draw."""
    from seq2seq_zoo.config.toml_lines import parse_value
    from seq2seq_zoo.data.corpora import ReadStats, describe_source, load_split, resolve_data_dir, uses_data_dir
    from seq2seq_zoo.registry import DATASETS, check_reader_options, reader_options
    name, options, on_bad, config_dir = args.name, {}, "skip_empty", None
    if args.data_dir:
        checked_path(args.data_dir, "dir", "--data-dir (the folder containing <dataset>/)")
    if name.endswith(".toml"):
        from seq2seq_zoo.config import load_experiment
        args.experiment = name
        spec = load_experiment(name, profile=experiment_profile(args)).runs[0]
        name, options, on_bad, config_dir = spec.data.dataset, dict(spec.data.options), spec.data.on_bad, spec.data_dir
    DATASETS.get(name)  # unknown name: did-you-mean
    for item in args.option:
        if "=" not in item:
            raise UserError(f"--option {item!r}: expected KEY=VALUE, e.g. --option cnn_only=true")
        k, v = (x.strip() for x in item.split("=", 1))
        options[k] = parse_value(v)
    from seq2seq_zoo.config import option_type_problem
    bad = option_type_problem(name, options) or check_reader_options(name, options)
    if bad:
        raise UserError(f"data option '{bad[0]}': {bad[1]} (options of '{name}': "
                        f"{', '.join(reader_options(name)) or 'none'}; give them with --option KEY=VALUE or name "
                        "an experiment file)")
    root = resolve_data_dir(name, args.data_dir, config_dir, options)
    where = describe_source(name, root, options) if uses_data_dir(name, options) else "the files named in its options"
    print(f"{name}: found in {where}" + (f"  (options: {options})" if options else ""))
    notes = {}
    for split in ("train", "validation", "test"):
        st = ReadStats()
        ex = load_split(name, root, split, on_bad, stats=st, options=options)
        print(f"  {split:<10} {len(ex):>7} examples" + (f"  skipped {st.skipped}" if st.skipped else ""))
        for f in st.notes.get("files", []):
            print(f"             from {f}")
        notes = st.notes
    for key in ("fields", "filter", "encoding"):
        if key in notes:
            val = notes[key]
            print(f"  {key}: " + ("; ".join(f"{k} = {v}" for k, v in val.items()) if isinstance(val, dict) else str(val)))
    if "split" in notes:
        sp = notes["split"]
        print(f"  split draw: {sp['draw']}; seed {sp['seed']}, fractions {sp['fractions']} of {sp['rows_in_file']} rows")
    return 0
