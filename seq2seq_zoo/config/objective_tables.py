"""An objective's options in an experiment file: its own table ``train.<objective>`` (e.g. ``train.scst =
{ reward = "rouge1", gamma = 0.9 }``, or a ``[defaults.train.scst]`` table), checked key by key against
the ``Option`` declarations of the registered objective (``Objective.options``, train/objectives.py).

Run specs and records keep an option under its stored key where it has one (SCST's flat ``train.rl_*``
keys, the spelling every committed spec.json and record was written with), so that a run's settings, its
spec.json bytes and its identity for ``zoo run`` do not depend on which spelling a file uses. Each layer
of a file (``[defaults]``, a profile, a ``[[runs]]`` entry and its run profiles, a grid combination) is
rewritten to the stored keys before the layers merge, so a run's ``train.scst.gamma`` overrides a
default's ``train.rl_gamma`` and the other way round, as any later layer overrides an earlier one. The
stored keys remain valid in files (the spelling of files written before the tables); one layer giving
both spellings of an option is an error. An option without a stored key (a new objective's) stays in the
objective's table, which specs and records then hold as it is, where given (``TrainConfig.objectives``)."""
from __future__ import annotations

import re
from typing import Any

from seq2seq_zoo.config.toml_lines import Where
from seq2seq_zoo.config.values import objective_option_problem
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.registry import objective_options


def stored_spelling(ctx: Where, raw: dict) -> dict:
    """The parsed file ``raw`` with every objective table of its layers rewritten to the stored keys (see
    the module's docstring); a bad key or value raises ``ConfigError`` naming the file, line and key as
    written."""
    out = dict(raw)
    if isinstance(raw.get("defaults"), dict):
        out["defaults"] = stored_layer(ctx, raw["defaults"], "defaults")
    if isinstance(raw.get("profiles"), dict):
        out["profiles"] = {p: stored_layer(ctx, t, f"profiles.{p}") for p, t in raw["profiles"].items()}
    if isinstance(raw.get("runs"), list):
        runs = []
        for i, run in enumerate(raw["runs"]):
            run = stored_layer(ctx, run, f"runs[{i}]")
            if isinstance(run, dict) and isinstance(run.get("profiles"), dict):
                run["profiles"] = {p: stored_layer(ctx, t, f"runs[{i}].profiles.{p}")
                                   for p, t in run["profiles"].items()}
            runs.append(run)
        out["runs"] = runs
    return out


def stored_layer(ctx: Where, layer: Any, label: str) -> Any:
    """One layer (a table with an optional ``train`` table) with its objective tables rewritten to the
    stored keys; anything that is not a table is returned as it is (the file's other checks name it)."""
    if not isinstance(layer, dict) or not isinstance(layer.get("train"), dict):
        return layer
    train = dict(layer["train"])
    for objective, options in objective_options().items():
        if objective not in train:
            continue
        table = train.pop(objective)
        key = f"{label}.train.{objective}"
        if not isinstance(table, dict):
            raise _fail(ctx, key, f"must be a table of the objective's options, e.g. train.{objective} = "
                        f"{{ {next(iter(options))} = ... }}, not {type(table).__name__} {table!r}")
        for name, value in table.items():
            problem = objective_option_problem(objective, options, name, value)
            if problem:
                raise _fail(ctx, f"{key}.{name}", problem)
            opt = options[name]
            if opt.stored is None:   # kept as the objective's table (a new objective's option)
                train.setdefault(objective, {})[name] = value
            elif opt.stored in layer["train"]:
                raise _fail(ctx, f"{key}.{name}", f"given twice, also as train.{opt.stored} (its older spelling); "
                            "keep one")
            else:
                train[opt.stored] = value
    return {**layer, "train": train}


def file_spelling() -> dict[str, str]:
    """Stored ``train.*`` key -> how a file writes it now: ``rl_gamma`` -> ``scst.gamma``."""
    return {opt.stored: f"{objective}.{name}" for objective, options in objective_options().items()
            for name, opt in options.items() if opt.stored}


def _fail(ctx: Where, key: str, msg: str) -> ConfigError:
    """``ctx.fail`` at the line where the objective's option is written: its first mention after the start
    of its layer (the layer's table header or its [[runs]] entry) and after the objective's name, which
    finds every spelling (``train.scst.gamma = ...``, ``train.scst = { gamma = ... }``, ``[runs.train.scst]``
    then ``gamma = ...``, a grid's ``"train.scst.gamma" = [...]``) where the line search of ``ctx.fail``,
    made for plain keys, may stop at another table's key of the same name."""
    err = str(ctx.fail(key, msg))
    m = re.match(r"(.+?)\.train\.(\w+)(?:\.(\w+))?$", key)
    line = _line(ctx.text, *m.groups()) if m else None
    if line is None:
        return ConfigError(err)
    return ConfigError(f"{ctx.path}:{line}: {err[err.index(key, len(str(ctx.path))):]}")


def _line(text: str, layer: str, objective: str, option: str | None) -> int | None:
    """The line of ``option`` of ``objective``'s table in ``layer`` ("defaults", "profiles.P", "runs[i]",
    "runs[i].profiles.P", "grid"), or of the table itself when ``option`` is None."""
    start = 0
    run = re.match(r"runs\[(\d+)\](?:\.profiles\.([\w-]+))?$", layer)
    if run:
        heads = list(re.finditer(r"^[ \t]*\[\[[ \t]*runs[ \t]*\]\]", text, re.M))
        i = int(run.group(1))
        start = heads[i].start() if i < len(heads) else 0
        if run.group(2):
            sub = re.compile(rf"^[ \t]*\[[ \t]*runs\.profiles\.{re.escape(run.group(2))}[ \t]*\]", re.M).search(text, start)
            start = sub.start() if sub else start
    else:
        head = re.search(rf"^[ \t]*\[[ \t]*{re.escape(layer)}(?:\.[\w.]+)?[ \t]*\]", text, re.M)
        start = head.start() if head else 0
    table = re.compile(rf"\b{re.escape(objective)}\b").search(text, start)
    if table is None:
        return None
    found = re.compile(rf"\b{re.escape(option)}\b\"?[ \t]*=").search(text, table.end()) if option else None
    return text.count("\n", 0, (found or table).start()) + 1
