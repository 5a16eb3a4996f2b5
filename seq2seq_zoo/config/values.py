"""Value rules: a section table checked key by key against the schema (unknown keys, types, ranges,
choices) and built into its dataclass; seeds; registered names."""
from __future__ import annotations

import copy
import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

from seq2seq_zoo.config.schema import CHOICES, RANGES, SECTIONS, SEED_MAX, SEEDS_MAX, DecodeConfig, TrainConfig
from seq2seq_zoo.config.toml_lines import Where
from seq2seq_zoo.registry import (UnknownName, decoding_rule_keys, did_you_mean, objective_options,
                                  objective_stored_keys)


def type_ok(value, tp) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(type_ok(v, arg) for v in value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def type_name(tp) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _check_value(ctx: Where, key: str, value, section: str) -> None:
    """The value rules of field ``key``'s leaf in [``section``] (data, train, decode, eval)."""
    leaf = key.split(".")[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise ctx.fail(key, f"{value!r} is not a finite number")
    owned = decoding_rule_keys().get(leaf) if section == "decode" else None
    if owned is not None:   # a decoding rule's key: the rule's own declaration
        problem = owned[1].problem(value)
        if problem:
            raise ctx.fail(key, problem + (f".{did_you_mean(value, owned[1].choices)}" if owned[1].choices else ""))
        return
    if leaf not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
        return
    owner = objective_stored_keys().get(leaf) if section == "train" else None
    if owner is not None:   # an objective's option under its stored key (SCST's rl_*): the objective's rule
        problem = owner[2].problem(value)
        if problem:
            raise ctx.fail(key, problem)
        return
    if leaf in RANGES and value is not None and isinstance(value, (int, float)):
        ok, desc = RANGES[leaf]
        if not ok(value):
            raise ctx.fail(key, f"{value!r} {desc}")
    if leaf == "val_metric" and value != "loss" and value not in declared("val_metric"):
        choices = ["loss", *declared("val_metric")]
        raise ctx.fail(key, f"{value!r} is not one of {', '.join(choices)}.{did_you_mean(value, choices)}")
    if leaf in CHOICES and value not in CHOICES[leaf]:
        raise ctx.fail(key, f"{value!r} is not one of {', '.join(CHOICES[leaf])}.{did_you_mean(value, CHOICES[leaf])}")


def option_problem(opt, value) -> str | None:
    """What is wrong with a value of an objective's option (an ``Option``): its type, a finite number, its
    rule; None: nothing."""
    if not type_ok(value, opt.kind):
        return f"expected {type_name(opt.kind)}, got {type(value).__name__} {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    return opt.problem(value)


def objective_option_problem(objective: str, options: dict, name: str, value) -> str | None:
    """What is wrong with ``train.<objective>.<name> = value`` (an unknown option, or ``option_problem``);
    None: nothing."""
    if name not in options:
        return f"unknown option of objective '{objective}'.{did_you_mean(name, options)} Valid: {', '.join(options)}"
    return option_problem(options[name], value)


def _objective_table(ctx: Where, key: str, objective: str, options: dict, table) -> None:
    """An objective's table as specs and records hold it (its options without a stored field)."""
    if not isinstance(table, dict):
        raise ctx.fail(key, f"must be a table of objective '{objective}''s options, not {type(table).__name__}")
    for k, v in table.items():
        problem = objective_option_problem(objective, options, k, v)
        if problem:
            raise ctx.fail(f"{key}.{k}", problem)


def declared(flag: str) -> list[str]:
    """The score keys registered metrics declare with ``flag`` ("val_metric": can pick best.pt;
    "reward": can be a term of an SCST reward), read from the metrics' own declarations."""
    from seq2seq_zoo.registry import metric_columns
    return [c.key for c in metric_columns(flag)]


_TERM = re.compile(r"^\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*\*\s*)?(\w+)\s*$")


def parse_reward(spec: str, known: list[str] | None = None) -> dict[str, float]:
    """A reward spec, a score name or a weighted sum of them: '0.5*rouge1 + 0.5*rougeL' -> {'rouge1': 0.5,
    'rougeL': 0.5}; ``known``: the names a reward may use (default: the declared ones). Raises ValueError."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward {spec!r} must be a metric name like \"rouge1\" or a sum like \"0.5*rouge1+0.5*rougeL\"")
    known = declared("reward") if known is None else known
    out: dict[str, float] = {}
    for term in spec.split("+"):
        m = _TERM.match(term)
        if not m or m.group(2) not in known:
            raise ValueError(f"reward {spec!r}: cannot read {term.strip()!r}; use weights and names from "
                             f"{', '.join(known)}, e.g. \"0.5*rouge1+0.5*rougeL\"")
        out[m.group(2)] = out.get(m.group(2), 0.0) + (float(m.group(1)) if m.group(1) else 1.0)
    return out


def build_section(cls, values: dict, prefix: str, ctx):
    if isinstance(ctx, str):
        ctx = Where(Path(ctx), "")
    if not isinstance(values, dict):
        raise ctx.fail(prefix, f"must be a table, not {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    # a decoding rule registered outside the package (--models PATH) brings decode.* keys of its own
    extra = {k: object if key.default is None else type(key.default)
             for k, (_, key) in decoding_rule_keys().items() if k not in fields} \
        if cls is DecodeConfig else {}
    # an objective's options without a stored field are its table, train.<objective> (config/objective_tables.py)
    tables = {o: own for o, opts in objective_options().items()
              if (own := {k: opt for k, opt in opts.items() if opt.stored is None}) and o not in fields} \
        if cls is TrainConfig else {}
    for k, v in values.items():
        if k in tables:
            _objective_table(ctx, f"{prefix}.{k}", k, tables[k], v)
            continue
        if k not in fields and k not in extra:
            valid = [*fields, *extra, *tables]
            raise ctx.fail(f"{prefix}.{k}", f"unknown key in [{prefix}].{did_you_mean(k, valid)} "
                           f"Valid keys: {', '.join(valid)}")
        tp = hints[k] if k in fields else extra[k]
        if not type_ok(v, tp):
            raise ctx.fail(f"{prefix}.{k}", f"expected {type_name(tp)}, got {type(v).__name__} {v!r}")
        _check_value(ctx, f"{prefix}.{k}", v, next(s for s, c in SECTIONS.items() if c is cls))
    out = cls(**copy.deepcopy({k: v for k, v in values.items() if k in fields}))
    if extra:
        out.extra = copy.deepcopy({k: v for k, v in values.items() if k in extra})
    if tables:
        out.objectives = copy.deepcopy({k: v for k, v in values.items() if k in tables})
    return out


def merge_layers(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_layers(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def check_name(ctx, key, registry, value):
    if not isinstance(value, str):
        raise ctx.fail(key, f"expected a name (string), got {value!r}")
    try:
        registry.get(value)
    except UnknownName as e:
        raise ctx.fail(key, str(e)) from None


def check_seeds(ctx: Where, key: str, seeds: list) -> None:
    """Seeds: integers 0..SEED_MAX, each once, at most SEEDS_MAX of them; checked before any model is built."""
    for s in seeds:
        if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s <= SEED_MAX:
            raise ctx.fail(key, f"seed {s!r} must be an integer from 0 to {SEED_MAX}")
    dup = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if dup is not None:
        raise ctx.fail(key, f"seed {dup} is given twice; seeds must be unique (each gives a run of its own)")
    if len(seeds) > SEEDS_MAX:
        raise ctx.fail(key, f"{len(seeds)} seeds; at most {SEEDS_MAX} (each seed is a run trained on its own)")
