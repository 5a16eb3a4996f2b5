"""``docs/configuration.md``: the experiment-file reference, generated from the configuration schema.

Every key of every section with its type, default, allowed range or choices and the schema's own
comment; every registered model's options with their defaults. A test regenerates the text and fails
when it differs from the committed file, so a key cannot go undocumented.

    python -m seq2seq_zoo.report.configdoc            # rewrite docs/configuration.md
    python -m seq2seq_zoo.report.configdoc --check    # exit 1 when the committed file is out of date
"""
from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from pathlib import Path

from seq2seq_zoo.config import schema   # the one place the keys, defaults, ranges and choices live

OUT = Path("docs/configuration.md")
SET_BY_SUITE = ("on_bad", "stats")   # reader arguments the runner passes (data.on_bad, the skip counts)

# what the schema's key lists mean, for the keys that are not dataclass fields
EXPERIMENT_DOC = {
    "name": ("str", "the file's name", "the experiment's name: the folder `results/<name>/`"),
    "description": ("str", '""', "one sentence: what the experiment asks (first line of its results README)"),
    "dataset": ("str", '"dialogsum"', "the dataset reader of every run (`zoo list datasets`); a run may set "
                "`data.dataset` itself"),
    "metrics": ("list[str]", '["rouge"]', "the metrics of every run (`zoo list metrics`); `eval.metrics` per run"),
    "seeds": ("list[int]", "[1]", "each run is trained once per seed, as `<run>-seed<N>`"),
    "data_dir": ("str", "none", "where `<dataset>/` folders are found (after `--data-dir` and `$ZOO_DATA`)"),
    "models": ("list[str]", "none", "model files or folders outside the package, imported before the runs are "
               "read (paths from the file's folder; docs/extending-models.md)"),
}
RUN_DOC = {
    "name": ("str", "required", "the run's name (letters, digits, `_`, `-`, `.`)"),
    "model": ("str", "from [defaults]", "a registered model (`zoo list models`); its options are keys of the run"),
    "seed": ("int", "the experiment's seeds", "one seed for this run only"),
    "seeds": ("list[int]", "the experiment's seeds", "this run's own seeds (e.g. more seeds for the two arms of a "
              "finding that a power analysis asks for), each a run `<run>-seed<N>`"),
    "description": ("str", '""', "what the run is, shown in the report"),
    "same_as": ("str", "none", '`"EXPERIMENT/RUN"`: take over that finished run when its settings are identical'),
    "like": ("str", "none", "start from the run of that name in this file and override its keys"),
}
TOP_DOC = {
    "experiment": "name, description, dataset, metrics, seeds, data_dir",
    "defaults": "`model`, model options and `data.*`, `train.*`, `decode.*`, `eval.*` keys every run starts from",
    "profiles": "`[profiles.NAME]`: overrides of the defaults chosen with `--profile NAME` (`cpu` is picked "
                "automatically without a GPU); `extends = \"OTHER\"` applies profile OTHER first, so a profile "
                "states only what it changes",
    "runs": "`[[runs]]`: one table per run; any default may be overridden",
    "grid": "`KEY = [values...]`: one run per combination, crossed with the runs",
    "launcher": "how `zoo run EXP --launcher slurm` (or `local`) asks for its jobs (partition, time, CPUs, GPUs, "
                "memory, account, qos, extra sbatch lines); see [cluster.md](cluster.md)",
    "findings": "`[[findings]]`: published claims judged on the results (`claim`, `metric`, `source`, `note`)",
    "decode": "`[[decode]]`: decoding variants of every run's best checkpoint (`name` and `decode.*` keys; "
              "`runs = [...]` to decode only those runs; "
              "`headline = true` on the one chosen on the validation split: the leaderboard and the README "
              "headline then show every trained run of the file with it; `headline = [\"cpu\"]` when it was "
              "chosen for those profiles only, `\"none\"` naming the full size)",
}


def _type(tp) -> str:
    s = str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return s.replace("NoneType", "None")


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _toml(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}" if not v else "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    return repr(v)


def field_comments(cls) -> dict[str, str]:
    """{field: its comment in the class source}, continuation comment lines joined."""
    out: dict[str, str] = {}
    last = None
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+)\s*:[^=]*=.*?(?:\s#\s?(.*))?$", line)
        if m and not line.lstrip().startswith("#"):
            last = m.group(1)
            out[last] = (m.group(2) or "").strip()
            continue
        c = re.match(r"\s+#\s?(.*)$", line)
        if c and last is not None:
            out[last] = (out[last] + " " + c.group(1).strip()).strip()
        else:
            last = None
    return out


def _cell(s: str) -> str:
    return s.replace("|", "\\|")


def _allowed(key: str, registries: dict[str, list[str]], section: str | None = None) -> str:
    parts = []
    ranges, choices = dict(schema.RANGES), dict(schema.CHOICES)
    if section == "decode":   # a decoding rule's keys: the rule's own declarations
        from seq2seq_zoo.registry import decoding_rule_keys
        decl = decoding_rule_keys().get(key, (None, None))[1]
        if decl is not None:
            ranges.pop(key, None), choices.pop(key, None)
            if decl.check is not None:
                ranges[key] = decl.check
            if decl.choices is not None:
                choices[key] = decl.choices
    if key in ranges:
        parts.append(ranges[key][1])
    if key in choices:
        parts.append("one of " + ", ".join(f"`{c}`" for c in choices[key]))
    if key in registries:
        parts.append("registered: " + ", ".join(f"`{c}`" for c in registries[key]))
    if key == "val_metric":   # the package's metrics' columns declared val_metric=True
        from seq2seq_zoo.registry import metric_columns
        own = [c.key for c in metric_columns("val_metric") if _own_metric_column(c)]
        parts.append("one of " + ", ".join(f"`{c}`" for c in ["loss", *own]) + " (or a user metric's declared "
                     "column)")
    return "; ".join(parts)


def _option_allowed(opt) -> str:
    """What an objective's option (an ``Option`` of ``Objective.options``) allows, from its rule."""
    rule = opt.rule
    if rule is not None and getattr(rule, "choices", ()):
        return "one of " + ", ".join(f"`{c}`" for c in rule.choices)
    return getattr(rule, "says", "") or ""


def _objective_lines(objectives: list[str]) -> list[str]:
    """The options each of the suite's objectives declares, as the table ``train.<objective>`` and under the
    ``train.*`` key records store it as."""
    from seq2seq_zoo.registry import objective_options
    lines = ["", "## Objective options (`train.<objective>.*`)", "",
             "An objective's options are its own table under `train`, e.g. `train.scst = { reward = \"rouge1\", "
             "gamma = 0.9 }` or a `[defaults.train.scst]` table, checked against the objective's declarations "
             "(`options` in `seq2seq_zoo/train/objectives.py`); they apply when `train.objective` names it. Run "
             "specs and records keep each option under its stored `train.*` key (SCST's `train.rl_*`, the "
             "spelling of the files and records made before the tables), which a file may still use; an option "
             "without one is kept in the objective's table, where given.", ""]
    for name, options in objective_options().items():
        if name not in objectives:
            continue
        lines += [f"### `{name}`", "", "| key | type | default | allowed | stored as | meaning |",
                  "|---|---|---|---|---|---|"]
        for k, opt in options.items():
            stored = f"`train.{opt.stored}`" if opt.stored else f"`train.{name}.{k}`"
            lines.append(f"| `train.{name}.{k}` | {_cell(_type(opt.kind))} | `{_cell(_toml(opt.default))}` | "
                         f"{_cell(_option_allowed(opt))} | {stored} | {_cell(opt.doc)} |")
    return lines


def _own_metric_column(column) -> bool:
    from seq2seq_zoo.registry import METRICS
    return any(column in getattr(METRICS.get(n), "columns", ()) for n in _own(METRICS))


def _own(registry) -> list[str]:
    """The names a registry holds from the suite itself: a model or objective registered by a user's file
    or by a test in the same process is not part of the reference."""
    return [n for n in registry.names() if getattr(registry.get(n), "__module__", "").startswith("seq2seq_zoo.")]


def generate() -> str:
    from seq2seq_zoo.registry import DATASETS, METRICS, MODELS, OBJECTIVES, SCHEDULES, model_options, objective_stored_keys
    stored = set(objective_stored_keys())
    registries = {"dataset": _own(DATASETS), "metrics": _own(METRICS), "objective": _own(OBJECTIVES),
                  "schedule": _own(SCHEDULES)}
    lines = [
        "# Configuration reference", "",
        "<!-- Generated by `python -m seq2seq_zoo.report.configdoc` from the configuration schema; do not edit. -->",
        "",
        "An experiment is one TOML file (see [experiments.md](experiments.md) for the committed ones and "
        "[extending.md](extending.md) for writing one). Unknown keys, unknown names, wrong types and values "
        "out of range stop `zoo run` before anything is trained, with one line naming the file, the line, "
        "the key and the nearest valid choice (exit status 2). `zoo run EXP --dry-run` prints each run's "
        "settings that differ from these defaults.", "",
        "## Sections", "", "| section | what it holds |", "|---|---|",
    ]
    for k in sorted(schema.TOP_KEYS | {"decode"}):
        lines.append(f"| `[{k}]` | {TOP_DOC.get(k, '(undocumented)')} |")
    lines += ["", "## `[experiment]`", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for k in sorted(schema.EXPERIMENT_KEYS):
        tp, default, doc = EXPERIMENT_DOC.get(k, ("?", "?", "(undocumented)"))
        lines.append(f"| `{k}` | {tp} | {default} | {_cell(doc)} |")
    lines += ["", "## Run keys (`[defaults]`, `[[runs]]`)", "", "| key | type | default | meaning |",
              "|---|---|---|---|"]
    for k in sorted(schema.RUN_KEYS):
        tp, default, doc = RUN_DOC.get(k, ("?", "?", "(undocumented)"))
        lines.append(f"| `{k}` | {tp} | {default} | {_cell(doc)} |")
    lines += ["", "`like` does not take over: " + ", ".join(f"`{k}`" for k in schema.NOT_INHERITED) + "."]
    for sec, cls in schema.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        comments = field_comments(cls)
        lines += ["", f"## `{sec}.*`", "", "| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            if sec == "train" and f.name in stored:   # an objective's option: its own table below
                continue
            lines.append(f"| `{sec}.{f.name}` | {_cell(_type(hints[f.name]))} | `{_cell(_toml(_default(f)))}` | "
                         f"{_cell(_allowed(f.name, registries, sec))} | {_cell(comments.get(f.name, ''))} |")
        if sec == "decode":   # the package's decoding rules' keys that records hold only where given
            from seq2seq_zoo.registry import decoding_rule_keys
            names = {f.name for f in dataclasses.fields(cls)}
            for k, (rule, decl) in decoding_rule_keys().items():
                if k not in names and rule.__module__.startswith("seq2seq_zoo."):
                    lines.append(f"| `{sec}.{k}` | {type(decl.default).__name__} | `{_cell(_toml(decl.default))}` | "
                                 f"{_cell(_allowed(k, registries, sec))} | {_cell(decl.doc)} |")
        if sec == "train":
            lines += _objective_lines(registries["objective"])
    lines += ["", "## Model options", "",
              "A run's model options are top-level keys of the run (e.g. `d_model = 256`); `vocab_size`, "
              "`max_src_len`, `max_tgt_len` and `pretrained_embeddings` come from the data and are not set "
              "by hand. Defaults are the model constructors' own.", ""]
    for name in _own(MODELS):
        opts = model_options(name)
        lines += [f"### `{name}`", ""]
        if not opts:
            lines += ["No options.", ""]
            continue
        lines += ["| option | default | allowed |", "|---|---|---|"]
        for k, v in opts.items():
            lines.append(f"| `{k}` | `{_cell(_toml(v))}` | {_cell(_allowed(k, {}))} |")
        lines.append("")
    lines += ["## Reader options (`data.options`)", "",
              "Each dataset reader's keyword arguments; see [data.md](data.md) for what they do.", "",
              "| dataset | options (type, default) |", "|---|---|"]
    from seq2seq_zoo.registry import reader_options
    for name in _own(DATASETS):
        opts = [f"`{k}` ({_cell(_type(tp))}, {_toml(None if d is inspect.Parameter.empty else d)})"
                for k, (d, tp) in reader_options(name).items() if k not in SET_BY_SUITE]
        lines.append(f"| `{name}` | {', '.join(opts) or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m seq2seq_zoo.report.configdoc", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--check", action="store_true", help="exit 1 when the file differs from the generated text")
    args = p.parse_args(argv)
    text = generate()
    out = Path(args.out)
    if args.check:
        if not out.is_file() or out.read_text(encoding="utf-8") != text:
            print(f"{out} is out of date: run python -m seq2seq_zoo.report.configdoc", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
