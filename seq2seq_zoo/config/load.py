"""Experiment files: TOML -> validated run specs.

    [experiment]  name, dataset, metrics, seeds, description, data_dir
    [defaults]    model = "...", model options, and [defaults.data|train|decode|eval] sections
    [profiles.X]  overrides of the defaults chosen with ``--profile X`` (e.g. a small CPU profile);
                  extends = "Y" applies profile Y first (and the runs' [runs.profiles.Y] tables)
    [[runs]]      name = "...", overrides of the defaults for this run; like = "OTHER" starts from the
                  run named OTHER in this file (its keys and [runs.profiles.X] tables) and overrides it
    [grid]        optional: key = [values...] -> one run per combination, crossed with [[runs]]

Any unknown key, unknown name or wrong type stops before training with one message naming the file,
the line, the key and the nearest valid choice. The checks that need the registries' entries (a model's
options and a meta-device build, a reader's options, a reward) are made here; they import the data,
model and training code inside the functions that use it."""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from seq2seq_zoo.config.decoding import decode_variants
from seq2seq_zoo.config.objective_tables import file_spelling, stored_layer, stored_spelling
from seq2seq_zoo.config.schema import (EXPERIMENT_KEYS, NOT_INHERITED, RUN_KEYS, SAME_AS_PATTERN, SECTIONS, TOP_KEYS,
                                       DataConfig, decode_too_long)
from seq2seq_zoo.config.spec import Experiment, RunSpec
from seq2seq_zoo.config.toml_lines import Where, line_of, parse_toml
from seq2seq_zoo.config.values import build_section, check_name, check_seeds, merge_layers, type_name, type_ok
from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.names import NAME_RULE, name_problem
from seq2seq_zoo.registry import (DATASETS, METRICS, MODELS, OBJECTIVES, SCHEDULES, check_reader_options,
                                  did_you_mean, load_models, model_option_rules, model_options, reader_options)


def settings(spec: RunSpec) -> dict[str, Any]:
    """The settings of a run that differ from the built-in defaults (model options from the model's
    constructor, data/train/decode/eval from their dataclasses), as flat ``key: value`` pairs in the file's
    own spelling (``d_model``, ``train.lr``); what ``zoo run --dry-run`` prints."""
    defaults = model_options(spec.model) if spec.model in MODELS else {}
    spelling = {f"train.{k}": f"train.{v}" for k, v in file_spelling().items()}   # train.rl_gamma: train.scst.gamma
    out: dict[str, Any] = {"model": spec.model}
    out.update({k: v for k, v in spec.model_options.items() if k not in defaults or defaults[k] != v})
    for sec in SECTIONS:
        for f in dataclasses.fields(getattr(spec, sec)):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            value = getattr(getattr(spec, sec), f.name)
            if value != default:
                out[spelling.get(f"{sec}.{f.name}", f"{sec}.{f.name}")] = value
        if sec == "train":   # a new objective's options without a stored field: its table, where given
            out.update({f"train.{o}.{k}": v for o, table in spec.train.objectives.items() for k, v in table.items()})
    if spec.same_as:
        out["same_as"] = spec.same_as
    return out


def read_spec(path: str | Path) -> RunSpec:
    """A run's spec.json (or a record's ``spec``) as the suite wrote it; a truncated, empty or hand-edited
    one raises ``utils.DamagedFile`` naming the file."""
    from seq2seq_zoo.utils import DamagedFile, read_json
    fix = "delete the run's checkpoints folder and train it again"
    d = read_json(path, "run spec", fix)
    try:
        if not isinstance(d, dict):
            raise TypeError(f"a JSON {type(d).__name__}, expected an object")
        return RunSpec.from_dict(d)
    except KeyError as e:
        raise DamagedFile(f"{path}: damaged run spec (no {e.args[0]!r}); {fix}") from None
    except (TypeError, ValueError) as e:
        why = str(e).replace("<record>: ", "")
        raise DamagedFile(f"{path}: damaged run spec ({why}); {fix}") from None


def _trainable(ctx, i: int, model) -> bool:
    """False for a registered model that declares it has nothing to train (``trainable = False``)."""
    if not isinstance(model, str) or model not in MODELS:
        return True  # an unknown or missing name is reported with the run's other checks
    return bool(getattr(MODELS.get(model), "trainable", True))


def is_trainable(model: str) -> bool:
    return _trainable(None, 0, model)


def _spec_from(ctx: Where, exp_name: str, run: dict, seed: int, profile, data_dir, label: str) -> RunSpec:
    run = dict(run)
    model = run.pop("model", None)
    if model is None:
        raise ctx.fail(f"{label}.model", "no model given (set model = \"...\" in [defaults] or the run)")
    check_name(ctx, f"{label}.model", MODELS, model)
    name = run.pop("name")
    run.pop("seed", None)
    run.pop("seeds", None)
    desc = run.pop("description", "")
    same_as = run.pop("same_as", None)
    if same_as is not None and not (isinstance(same_as, str) and re.fullmatch(SAME_AS_PATTERN, same_as)):
        raise ctx.fail(f"{label}.same_as", f"expected \"EXPERIMENT/RUN\" (a run of another experiment with the "
                       f"very same settings, e.g. \"optimizer/noam_scaled\"), got {same_as!r}")
    sections = {k: run.pop(k, {}) for k in SECTIONS}
    opts_known = model_options(model)
    for k, v in run.items():
        if k not in opts_known:
            valid = sorted(set(opts_known) | RUN_KEYS | set(SECTIONS))
            hint = did_you_mean(k, valid)
            for sec, cls in SECTIONS.items():  # a train/data key written at top level
                if k in {f.name for f in dataclasses.fields(cls)}:
                    hint = f" '{k}' belongs in the [{sec}] section (write {sec}.{k} = ...)."
            raise ctx.fail(f"{label}.{k}", f"unknown key: model '{model}' has no option '{k}'.{hint}")
        default = opts_known[k]
        if default is not None and v is not None and not type_ok(v, type(default)):
            raise ctx.fail(f"{label}.{k}", f"expected {type(default).__name__}, got {type(v).__name__} {v!r}")
        _check_model_option(ctx, f"{label}.{k}", model, k, v)
    built = {k: build_section(c, sections[k], f"{label}.{k}", ctx) for k, c in SECTIONS.items()}
    if built["train"].batch_size == 0 and built["train"].max_tokens is None:
        raise ctx.fail(f"{label}.train.batch_size", "0 means batches by padded tokens alone; set train.max_tokens "
                       "too (e.g. 8192), or give a number of examples")
    if built["decode"].batch_size == 0:
        raise ctx.fail(f"{label}.decode.batch_size", "must be >= 1, not 0 (decoding batches count examples)")
    too_long = decode_too_long(built["decode"], built["data"])
    if too_long and _trainable(ctx, 0, model):  # a baseline does not decode
        raise ctx.fail(f"{label}.decode.max_len", too_long)
    check_name(ctx, f"{label}.data.dataset", DATASETS, built["data"].dataset)
    _check_data_options(ctx, f"{label}.data.options", built["data"])
    from seq2seq_zoo.data.text import separator_problem
    sep_problem = separator_problem(built["data"].turn_separator)
    if sep_problem:
        raise ctx.fail(f"{label}.data.turn_separator", sep_problem)
    check_name(ctx, f"{label}.train.schedule", SCHEDULES, built["train"].schedule)
    check_name(ctx, f"{label}.train.objective", OBJECTIVES, built["train"].objective)
    for m in built["eval"].metrics:
        check_name(ctx, f"{label}.eval.metrics", METRICS, m)
    _try_build(ctx, label, model, run, built["data"])
    return RunSpec(experiment=exp_name, name=name, seed=seed, model=model, model_options=run,
                   profile=profile, data_dir=data_dir, description=desc, same_as=same_as, **built)


def _check_model_option(ctx: Where, key: str, model: str, option: str, value) -> None:
    """A model option against the rule the model declares for it (``option_rules``), if any."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ctx.fail(key, f"{value!r} is not a finite number")
    rule = model_option_rules(model).get(option)
    problem = rule(value) if rule is not None else None
    if problem:
        raise ctx.fail(key, f"{value!r} {problem}")


def _check_data_options(ctx, label: str, data: DataConfig) -> None:
    """``data.options``: the reader's keyword arguments, checked by name (did-you-mean), by type against
    the reader's hints, then by the reader's own rules (files that exist, fractions that sum to 1)."""

    def fail(k: str, msg: str) -> ConfigError:
        inline = re.search(rf"[{{,][ \t]*{re.escape(k)}[ \t]*=", ctx.text)  # data.options = {{ k = ... }}
        if line_of(ctx.text, f"{label}.{k}") is None and inline:
            return ConfigError(f"{ctx.path}:{ctx.text.count(chr(10), 0, inline.start()) + 1}: {label}.{k}: {msg}")
        return ctx.fail(f"{label}.{k}", msg)

    known = reader_options(data.dataset)
    for k, v in data.options.items():
        if k in known and not type_ok(v, known[k][1]):
            raise fail(k, f"expected {type_name(known[k][1])}, got {type(v).__name__} {v!r}")
    bad = check_reader_options(data.dataset, data.options)
    if bad:
        raise fail(*bad)


def option_type_problem(dataset: str, options: dict) -> tuple[str, str] | None:
    """``(key, message)`` for the first data option whose value has another type than the reader takes (the
    check an experiment file's ``data.options`` gets; ``zoo data info --option`` uses it too), or None."""
    known = reader_options(dataset)
    for k, v in options.items():
        if k in known and not type_ok(v, known[k][1]):
            return k, f"expected {type_name(known[k][1])}, got {type(v).__name__} {v!r}"
    return None


def _try_build(ctx, label: str, model: str, options: dict, data: DataConfig) -> None:
    """Build the model on the meta device (no memory, no time) so inconsistent options (heads that do
    not divide d_model, ...) stop here, before any data is read or trained on."""
    from seq2seq_zoo.models.base import build_on_meta, model_context
    try:
        build_on_meta(model, model_context(data.vocab_size or 1000, data), options)
    except (ValueError, TypeError, RuntimeError, ZeroDivisionError, OverflowError, IndexError, KeyError) as e:
        # point at the option the message names last (e.g. "d_model 32 is not divisible by heads 3")
        named = [(str(e).rfind(k), k) for k in options if re.search(rf"\b{re.escape(k)}\b", str(e))]
        key = max(named)[1] if named else "model"
        raise ctx.fail(f"{label}.{key}", f"model '{model}' cannot be built with these options: {e}") from None


def load_experiment(path: str | Path, profile: str | None = None, only: list[str] | None = None) -> Experiment:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, but the experiment must be a TOML file")
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: bytes that are not UTF-8; save the file as UTF-8") from None
    ctx = Where(path, text)
    try:
        raw = parse_toml(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: TOML syntax error: {e}") from None
    for k in raw:
        if k == "decode" and isinstance(raw[k], list):  # [[decode]] entries: a decoding sweep
            continue
        if k not in TOP_KEYS:
            hint = (" (the runs' own decoding goes in [defaults.decode] or a run's decode.* keys; a decoding "
                    "sweep is [[decode]] entries, each with a name and the settings it changes)") if k == "decode" else ""
            raise ctx.fail(f"[{k}]", f"unknown section{hint}.{did_you_mean(k, TOP_KEYS)} "
                           f"Valid: {', '.join(sorted(TOP_KEYS))}")
    for sec in ("experiment", "defaults", "profiles", "grid"):
        if sec in raw and not isinstance(raw[sec], dict):
            raise ctx.fail(sec, f"[{sec}] must be a table")
    raw = stored_spelling(ctx, raw)   # objective tables (train.scst = {...}) as their stored keys (train.rl_*)
    if "launcher" in raw:  # how --launcher slurm|local asks for jobs (config/launcher.py)
        from seq2seq_zoo.config.launcher import check_launcher
        check_launcher(ctx, raw["launcher"])
    exp = raw.get("experiment", {})
    for k in exp:
        if k not in EXPERIMENT_KEYS:
            raise ctx.fail(f"experiment.{k}", f"unknown key.{did_you_mean(k, EXPERIMENT_KEYS)} "
                           f"Valid: {', '.join(sorted(EXPERIMENT_KEYS))}")
    _load_user_models(ctx, exp.get("models"))
    name = exp.get("name", path.stem)
    if name_problem(name):
        raise ctx.fail("experiment.name", f"{name_problem(name)}; it must be {NAME_RULE}")
    seeds = _seed_list(ctx, "experiment.seeds", exp.get("seeds", [1]))
    for pname, pval in raw.get("profiles", {}).items():
        if not isinstance(pval, dict):
            raise ctx.fail(f"profiles.{pname}", "a profile must be a table ([profiles.NAME])")
    # every profile's extends checked, chosen or not
    chains = {pname: _profile_chain(ctx, raw["profiles"], pname) for pname in raw.get("profiles", {})}
    for gk, gv in raw.get("grid", {}).items():
        if not isinstance(gv, list) or not gv:
            raise ctx.fail(f"grid.{gk}", f"a grid entry must be a non-empty list of values, got {gv!r}")
    defaults = dict(raw.get("defaults", {}))
    # experiment-level shortcuts
    if "dataset" in exp:
        defaults = merge_layers(defaults, {"data": {"dataset": exp["dataset"]}})
    if "metrics" in exp:
        defaults = merge_layers(defaults, {"eval": {"metrics": exp["metrics"]}})
    profiles = raw.get("profiles", {})
    if profile is not None:
        if profile not in profiles:
            raise ConfigError(f"{path}: no profile '{profile}'.{did_you_mean(profile, profiles)} "
                              f"Profiles in this file: {', '.join(profiles) or 'none'}")
        for pname in chains[profile]:
            defaults = merge_layers(defaults, {k: v for k, v in profiles[pname].items() if k != "extends"})
    runs = raw.get("runs") or [{"name": name}]
    if not isinstance(runs, list):
        raise ctx.fail("runs", "must be an array of tables ([[runs]])")
    grid = raw.get("grid", {})
    combos = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] if grid else [{}]
    specs: list[RunSpec] = []
    seen: set[str] = set()
    planned: dict[str, str] = {}   # run folder name -> the runs[i] entry that plans it (one folder, one run)
    groups: list[str] = []   # run names before the -seedN suffix (what [[findings]] claims name)
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ctx.fail("runs", "must be an array of tables ([[runs]])")
        if "name" not in run:
            raise ctx.fail(f"runs[{i}]", "every [[runs]] entry needs a name")
        if name_problem(run["name"]):
            raise ctx.fail(f"runs[{i}].name", f"{name_problem(run['name'])}; it must be {NAME_RULE}")
        if "seed" in run and "seeds" in run:
            raise ctx.fail(f"runs[{i}].seeds", "give seed (one seed) or seeds (a list), not both")
        if "seed" in run:
            check_seeds(ctx, f"runs[{i}].seed", [run["seed"]])
        if "seeds" in run:
            _seed_list(ctx, f"runs[{i}].seeds", run["seeds"])
    ctx.runs = runs
    for i, run in enumerate(runs):
        run = _with_like(ctx, i, runs)
        run = _with_run_profile(ctx, i, run, profiles, chains[profile] if profile is not None else [])
        if not _trainable(ctx, i, run.get("model", defaults.get("model"))):
            # a baseline with nothing to train (lead, longest, oracle): the file's data and evaluation
            # settings, none of its model, training or decoding settings, no grid, one seed (it is
            # deterministic)
            if run["name"] in seen:
                raise ctx.fail(f"runs[{i}].name", f"duplicate run name '{run['name']}'; run names must be unique")
            seen.add(run["name"])
            _plan_folder(ctx, planned, run["name"], f"runs[{i}]")
            merged = merge_layers({k: defaults[k] for k in ("data", "eval") if k in defaults}, run)
            merged.setdefault("description", exp.get("description", ""))
            seed = run.get("seed", run.get("seeds", seeds)[0])
            specs.append(_spec_from(ctx, name, merged, seed, profile, exp.get("data_dir"), f"runs[{i}]"))
            groups.append(run["name"])
            continue
        for combo in combos:
            merged = merge_layers(defaults, run)
            merged = merge_layers(merged, stored_layer(ctx, _unflatten(combo), "grid"))
            rname = run["name"] + "".join(f"-{k.split('.')[-1]}{v}" for k, v in combo.items())
            if rname in seen:
                raise ctx.fail(f"runs[{i}].name", f"duplicate run name '{rname}'; run names must be unique")
            seen.add(rname)
            groups.append(rname)
            run_seeds = [run["seed"]] if "seed" in run else run.get("seeds", seeds)
            for seed in run_seeds:
                full = rname if len(run_seeds) == 1 else f"{rname}-seed{seed}"
                if name_problem(full):  # a grid value or a seed suffix makes the folder name
                    raise ctx.fail(f"runs[{i}].name", f"run name {full!r} (with its grid and seed suffixes): "
                                   f"{name_problem(full)}; it must be {NAME_RULE}")
                _plan_folder(ctx, planned, full, f"runs[{i}]")
                merged["name"] = full
                merged.setdefault("description", exp.get("description", ""))
                specs.append(_spec_from(ctx, name, merged, seed, profile, exp.get("data_dir"), f"runs[{i}]"))
    decodes = decode_variants(ctx, raw.get("decode", []), [s for s in specs if _trainable(ctx, 0, s.model)],
                               tuple(profiles), profile)
    from seq2seq_zoo.findings import parse_findings
    findings = parse_findings(raw.get("findings", []), groups, {d.name: d.runs for d in decodes}, ctx.fail)
    full = Experiment(name=name, path=path, runs=specs, dataset=specs[0].data.dataset,
                      description=exp.get("description", ""), profile=profile, raw=raw, decodes=decodes,
                      findings=findings)
    return select_runs(full, only) if only else full


def _plan_folder(ctx: Where, planned: dict[str, str], folder: str, entry: str) -> None:
    """Two runs planned into one folder (``a`` with seeds 1 and 2 makes ``a-seed1``, which another run may
    be named) would write over each other: refused before anything is read or trained."""
    if folder in planned:
        other = planned[folder]
        raise ctx.fail(f"{entry}.name", f"run folder '{folder}' is planned twice ({other} and {entry}, with their "
                       "seed and grid suffixes); rename one of the runs")
    planned[folder] = entry


def _seed_list(ctx: Where, key: str, seeds) -> list[int]:
    """``seeds = [...]`` of the experiment or of one run: a non-empty list of distinct seeds in range."""
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ctx.fail(key, f"expected a non-empty list of integers, got {seeds!r}")
    check_seeds(ctx, key, seeds)
    return seeds


def select_runs(exp: Experiment, only: list[str]) -> Experiment:
    """``--only NAME ...``: the experiment with those runs alone (a run's name selects every seed of it,
    "tmax": tmax-seed1, tmax-seed2, ...; NAME-seedN one seed); the same spec objects, in the file's order."""
    specs = exp.runs
    names = [s.name for s in specs]
    base = {s.name: s.group for s in specs}
    for o in only:
        if o not in names and o not in base.values():
            raise ConfigError(f"{exp.path}: no run named '{o}'.{did_you_mean(o, names)} Runs: {', '.join(names)}")
    return dataclasses.replace(exp, runs=[s for s in specs if s.name in only or base[s.name] in only])


def _load_user_models(ctx: Where, paths) -> None:
    """``[experiment] models = ["models/my_rnn.py", "more_models/"]``: model files or folders outside the
    package, imported (once) before the runs are read; relative paths are taken from the file's folder."""
    if paths is None:
        return
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ctx.fail("experiment.models", f"expected a list of paths (strings), got {paths!r}")
    from seq2seq_zoo.errors import PluginError
    try:
        load_models(paths, base=ctx.path.parent, what="experiment.models")
    except PluginError as e:
        line = line_of(ctx.text, "experiment.models")
        raise PluginError(f"{ctx.path}{f':{line}' if line else ''}: {e}") from e.__cause__


def _with_like(ctx: Where, i: int, runs: list[dict], chain: tuple[int, ...] = ()) -> dict:
    """``like = "OTHER"`` in the i-th [[runs]] entry: start from the [[runs]] entry named OTHER (resolved
    the same way, so a chain works), all its keys and ``[runs.profiles.X]`` tables but those in
    ``NOT_INHERITED``, then apply this entry's own keys on top (tables merge key by key). A run that
    differs from another in a setting or two then says only that, and a change to OTHER reaches both."""
    run = runs[i]
    if "like" not in run:
        return dict(run)
    other = run["like"]
    names = [r["name"] for r in runs]
    if not isinstance(other, str):
        raise ctx.fail(f"runs[{i}].like", f"expected the name of another [[runs]] entry (a string), got {other!r}")
    if other not in names:
        raise ctx.fail(f"runs[{i}].like", f"no [[runs]] entry named '{other}' in this file.{did_you_mean(other, names)} "
                       f"Runs: {', '.join(names)}")
    j = names.index(other)
    if j == i or j in chain:
        loop = " -> ".join(runs[k]["name"] for k in (*chain, i, j))
        raise ctx.fail(f"runs[{i}].like", f"runs that start from each other ({loop}); one of them must give its "
                       "settings itself")
    base = _with_like(ctx, j, runs, (*chain, i))
    base = {k: v for k, v in base.items() if k not in NOT_INHERITED}
    own = {k: v for k, v in run.items() if k != "like"}
    for one, other in (("seed", "seeds"), ("seeds", "seed")):
        if one in own:  # this run's own seed choice replaces the one it started from
            base.pop(other, None)
    return merge_layers(base, own)


def _profile_chain(ctx: Where, profiles: dict, profile: str) -> list[str]:
    """The profiles that ``--profile NAME`` applies, in order: the one NAME extends (``extends = "OTHER"``,
    itself possibly extending another) first, NAME last; so a long-budget profile states only what it
    changes in a small one."""
    chain: list[str] = []
    name = profile
    while name is not None:
        if name in chain:
            raise ctx.fail(f"profiles.{chain[-1]}.extends",
                           f"profiles extend each other in a circle: {' -> '.join(chain + [name])}")
        chain.append(name)
        parent = profiles[name].get("extends")
        if parent is not None and not isinstance(parent, str):
            raise ctx.fail(f"profiles.{name}.extends",
                           f"expected the name of another profile, e.g. extends = \"cpu\", got {parent!r}")
        if parent is not None and parent not in profiles:
            raise ctx.fail(f"profiles.{name}.extends", f"no profile {parent!r}.{did_you_mean(parent, profiles)} "
                           f"Profiles in this file: {', '.join(profiles)}")
        name = parent
    return chain[::-1]


def _with_run_profile(ctx: Where, i: int, run: dict, profiles: dict, chain: list[str]) -> dict:
    """A run's own profile overrides, ``[runs.profiles.NAME]`` after its ``[[runs]]`` header: applied on top
    of the run when ``--profile NAME`` is chosen (defaults <- [profiles.NAME] <- run <- run's profile), so
    runs that differ in size can each have their own small profile. A profile that extends another applies
    the run's table for that one first (``chain``: the chosen profile's, from ``_profile_chain``)."""
    run = dict(run)
    own = run.pop("profiles", {})
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise ctx.fail(f"runs[{i}].profiles", "must be tables: [runs.profiles.NAME] with overrides of this run")
    for pname in own:
        if pname not in profiles:
            raise ctx.fail(f"runs[{i}].profiles.{pname}", f"profile '{pname}' of run '{run['name']}' is not defined at top "
                           f"level ([profiles.{pname}]).{did_you_mean(pname, profiles)}")
    for pname in chain:
        if pname in own:
            run = merge_layers(run, own[pname])
    return run


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for k, v in flat.items():
        cur = out
        parts = k.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v
    return out
