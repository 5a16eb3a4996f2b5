"""Experiment files: TOML -> validated run specs.

    [experiment]  name, dataset, metrics, seeds, description, data_dir
    [defaults]    model = "...", model options, and [defaults.data|train|decode|eval] sections
    [profiles.X]  overrides of the defaults chosen with ``--profile X`` (e.g. a small CPU profile)
    [[runs]]      name = "...", overrides of the defaults for this run; like = "OTHER" starts from the
                  run named OTHER in this file (its keys and [runs.profiles.X] tables) and overrides it
    [grid]        optional: key = [values...] -> one run per combination, crossed with [[runs]]

Any unknown key, unknown name or wrong type stops before training with one message naming the file,
the line, the key and the nearest valid choice.
"""
from __future__ import annotations

import copy
import math
import dataclasses
import itertools
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seq2seq_zoo.errors import ConfigError
from seq2seq_zoo.names import NAME_RULE, name_problem
from seq2seq_zoo.registry import (DATASETS, METRICS, MODELS, OBJECTIVES, SCHEDULES, UnknownName,
                                  did_you_mean, load_models, model_option_rules, model_options)


@dataclass
class DataConfig:
    dataset: str = "dialogsum"
    max_src_len: int = 400
    max_tgt_len: int = 100
    lowercase: bool = True
    num_token: bool = False                       # digits / '#' runs -> <num>
    vocab_size: int | None = 20000               # max_size of the word vocabulary (specials included)
    min_freq: int = 1
    filter_percentiles: list[float] | None = None  # e.g. [5, 95]: length filter on the training split
    max_train: int | None = None                  # use only the first N training examples
    max_valid: int | None = None
    max_test: int | None = None
    on_bad: str = "skip_empty"                    # error | skip_empty | skip
    options: dict = field(default_factory=dict)   # the dataset reader's options (zoo list datasets; README Data)


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 32                          # examples per batch; 0 = no cap (batches by max_tokens alone)
    max_tokens: int | None = None                 # cap on padded tokens per batch (bucketing)
    optimizer: str = "adam"                       # adam | adamw
    lr: float = 1e-3
    schedule: str = "constant"                    # constant | noam | warmup_constant
    warmup: int = 4000
    lr_factor: float = 1.0                        # noam's factor
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.0
    clip_norm: float = 1.0                        # 0 = no clipping
    accum_steps: int = 1
    precision: str = "auto"                       # auto | fp32 | bf16 | fp16
    val_every: int = 0                            # validate every N updates (0 = once per epoch)
    patience: int = 0                             # early stopping after N validations without gain (0 = off)
    checkpoint_every: int = 0                     # also checkpoint every N updates (0 = per epoch only)
    max_steps: int = 0                            # stop after N updates (0 = no limit)
    objective: str = "ce"
    init_from: str | None = None                  # start from a trained run's best weights (and vocabulary):
                                                  # "results/<exp>/<run>", a run name of this experiment, or a .pt
    val_metric: str = "loss"                      # what picks best.pt and stops early: loss | rouge1 | rouge2 |
                                                  # rouge3 | rougeL (F1 of greedy decodes of the validation set)
    average_last: int = 0                         # decode with the mean weights of the last N epochs' checkpoints
    val_max: int = 0                              # decode-based validation on the first N examples (0 = all)
    rl_reward: str = "rouge1"                     # scst reward: a ROUGE F1 or a mix, "0.5*rouge1+0.5*rougeL"
    rl_gamma: float = 0.9984                      # scst: loss = gamma * L_rl + (1 - gamma) * L_ce
    rl_gamma_end: float | None = None             # scst: ramp gamma linearly to this over the run
    rl_max_len: int = 48                          # scst: longest sampled / greedy sequence
    rl_repetition_penalty: float = 0.0            # scst: reward -= this * repetition ratio of the sequence
    rl_logp: str = "sum"                          # scst: log p(sample) summed over tokens (Paulus eq. 15) | mean
    rl_ml_scale: str = "sequence"                 # scst: L_ml summed over tokens, mean over batch (Paulus eq. 14,
                                                  # the scale of L_rl) | token: mean over target tokens
    device: str = "auto"
    threads: int = 0                              # torch CPU threads (0 = torch's default)


@dataclass
class DecodeConfig:
    method: str = "beam"                          # beam | greedy
    beam_size: int = 4
    length_penalty: float = 1.0                   # alpha
    length_penalty_style: str = "gnmt"            # gnmt: ((5+len)/6)^alpha | hf: len^alpha | none
    min_len: int = 1
    max_len: int = 60
    no_repeat_ngram: int = 0                      # block repeated n-grams of this size (0 = off)
    repetition_penalty: float = 1.0               # CTRL-style penalty on already generated tokens
    repetition_penalty_style: str = "power"       # power: p^theta renormalised, every model | keskar: on the logits,
                                                  # then softmax (HF; copy models: power) | logprob: lp * theta
    coverage_penalty: float = 0.0                 # beta of Wu et al. (2016); attention RNN models only
    batch_size: int = 32


@dataclass
class EvalConfig:
    metrics: list[str] = field(default_factory=lambda: ["rouge"])
    split: str = "test"
    rouge_stemmer: bool = True
    rouge_unk: str = "match"                      # match: a predicted <unk> scores against a reference's UNK
                                                  # (rouge-score reads both as "unk") | strip: <unk> removed first
    bertscore_model: str = "auto"                 # auto: roberta-large if cached, else all-MiniLM-L6-v2
    bertscore_layers: int | None = None
    bertscore_batch_size: int = 64
    train_sample: float = 0.0                     # also decode + score this fraction of the training split
                                                  # (0.05 = the seeds' 1/20 sample), drawn with the run seed
    examples: list[str] | None = None             # ids (train or eval split) shown in the report; None =
    examples_per_split: int = 2                   # this many per split, picked with a fixed seed (0)


# Settings added after records were made: a record without the key ran with this value.
LEGACY_VALUES = {"eval.rouge_unk": "match", "train.rl_ml_scale": "token",
                 "decode.repetition_penalty_style": "logprob"}


def inert_settings(flat: dict[str, Any]) -> set[str]:
    """Flat ``section.key`` settings that cannot change a run's results given its other settings: the
    repetition rule without a repetition penalty, SCST's ML scale for another objective."""
    out = set()
    if flat.get("decode.repetition_penalty", 1.0) == 1.0:
        out.add("decode.repetition_penalty_style")
    if flat.get("train.objective", "ce") != "scst":
        out.add("train.rl_ml_scale")
    return out


SECTIONS = {"data": DataConfig, "train": TrainConfig, "decode": DecodeConfig, "eval": EvalConfig}
RUN_KEYS = {"name", "model", "seed", "description", "same_as", "like"}
NOT_INHERITED = ("name", "description", "same_as", "like")   # what `like` does not take over
SAME_AS_PATTERN = r"[\w.-]+/[\w.-]+"   # a run's same_as: "EXPERIMENT/RUN" (reuse.py)


@dataclass
class RunSpec:
    experiment: str
    name: str
    seed: int
    model: str
    model_options: dict[str, Any]
    data: DataConfig
    train: TrainConfig
    decode: DecodeConfig
    eval: EvalConfig
    profile: str | None = None
    data_dir: str | None = None
    description: str = ""
    same_as: str | None = None   # "EXPERIMENT/RUN": the same run, trained by another experiment (see reuse.py)

    def to_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "name": self.name, "seed": self.seed, "model": self.model,
                "model_options": dict(self.model_options), "profile": self.profile,
                "description": self.description, **({"same_as": self.same_as} if self.same_as else {}),
                **{k: dataclasses.asdict(getattr(self, k)) for k in SECTIONS}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunSpec":
        return cls(experiment=d["experiment"], name=d["name"], seed=d["seed"], model=d["model"],
                   model_options=d.get("model_options", {}), profile=d.get("profile"),
                   description=d.get("description", ""), same_as=d.get("same_as"),
                   **{k: _build(c, d.get(k, {}), k, "<record>") for k, c in SECTIONS.items()})


def settings(spec: RunSpec) -> dict[str, Any]:
    """The settings of a run that differ from the built-in defaults (model options from the model's
    constructor, data/train/decode/eval from their dataclasses), as flat ``key: value`` pairs in the file's
    own spelling (``d_model``, ``train.lr``); what ``zoo run --dry-run`` prints."""
    defaults = model_options(spec.model) if spec.model in MODELS else {}
    out: dict[str, Any] = {"model": spec.model}
    out.update({k: v for k, v in spec.model_options.items() if k not in defaults or defaults[k] != v})
    for sec in SECTIONS:
        for f in dataclasses.fields(getattr(spec, sec)):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            value = getattr(getattr(spec, sec), f.name)
            if value != default:
                out[f"{sec}.{f.name}"] = value
    if spec.same_as:
        out["same_as"] = spec.same_as
    return out


def toml_value(v: Any) -> str:
    """A value as a TOML file writes it (None, which TOML lacks, as ``none``)."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return repr(v)


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


@dataclass
class Experiment:
    name: str
    path: Path
    runs: list[RunSpec]
    dataset: str
    description: str = ""
    profile: str | None = None
    raw: dict = field(default_factory=dict)
    decodes: list[DecodeVariant] = field(default_factory=list)   # [[decode]] entries (the sweep)
    findings: list = field(default_factory=list)                 # [[findings]] entries (findings.Finding)


@dataclass
class DecodeVariant:
    """One [[decode]] entry: re-decode every run's best checkpoint with these decode.* overrides."""
    name: str
    overrides: dict[str, Any]

    def apply(self, base: DecodeConfig) -> DecodeConfig:
        return dataclasses.replace(base, **copy.deepcopy(self.overrides))


# --------------------------------------------------------------------------------------------- checks
def _line_of(text: str, key: str) -> int | None:
    """Line of ``key`` (e.g. ``runs[2].train.lr``) in the TOML text: inside the i-th [[runs]] table
    first, else anywhere (the value may come from [defaults] or a profile)."""
    if key.startswith("[") and key.endswith("]"):  # a table header
        h = re.search(rf"^[ \t]*\[+[ \t]*{re.escape(key.strip('[]'))}[ \t]*\]+", text, re.M)
        return text.count("\n", 0, h.start()) + 1 if h else None
    m = re.match(r"(runs|decode)\[(\d+)\]\.?(.*)", key)  # the i-th [[runs]] or [[decode]] entry
    array = m.group(1) if m else "runs"
    start, end = 0, len(text)
    table = re.match(r"(experiment|grid|profiles\.[\w-]+)\.(.+)", key)
    if table and not m:  # search inside that table first
        h = re.search(rf"^[ \t]*\[[ \t]*{re.escape(table.group(1))}[ \t]*\]", text, re.M)
        if h:
            nxt = re.search(r"^[ \t]*\[(?![ \t]*" + re.escape(table.group(1)) + r"\.)", text[h.end():], re.M)
            start, end = h.end(), h.end() + nxt.start() if nxt else len(text)
            last = re.escape(table.group(2).split(".")[-1])
            pat = re.compile(rf"^[ \t]*(?:[\w.]*\.)?{last}[ \t]*=", re.M)
            found = pat.search(text, start, end)
            if found:
                return text.count("\n", 0, found.start()) + 1
    if m:
        heads = list(re.finditer(rf"^[ \t]*\[\[\s*{array}\s*\]\]", text, re.M))
        i = int(m.group(2))
        if i < len(heads):
            start = heads[i].start()
            # the entry ends at the next header that is not one of its sub-tables ([runs.train])
            nxt = re.compile(rf"^[ \t]*\[+[ \t]*(?!{array}[ \t]*\.)", re.M).search(text, heads[i].end())
            end = nxt.start() if nxt else len(text)
        key = m.group(3) or f"[[{array}]]"
        if key == f"[[{array}]]":
            return text.count("\n", 0, start) + 1 if heads else None
    last = re.escape(key.split(".")[-1])
    pat = re.compile(rf"^[ \t]*(?:[\w.]*\.)?{last}[ \t]*=|^[ \t]*\[+[ \t]*(?:[\w.]*\.)?{last}[ \t]*\]+", re.M)
    found = pat.search(text, start, end) or (pat.search(text) if m else None)
    return text.count("\n", 0, found.start()) + 1 if found else None


class _Where:
    """Where an experiment file's errors point: the file, and its text for line numbers."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text
        self.runs: list[dict] = []   # the [[runs]] entries as written, once their names are checked

    def fail(self, key: str, msg: str) -> ConfigError:
        at, note = self._taken_over(key) if key else (key, "")
        line = _line_of(self.text, at) if key else None
        where = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(_one_line(f"{where}: {key + ': ' if key else ''}{msg}{note}"))

    def _taken_over(self, key: str) -> tuple[str, str]:
        """A run's setting that came from another run through ``like``: the key where it is written (for
        the line) and a note saying so; else ``key`` unchanged and no note."""
        m = re.match(r"runs\[(\d+)\]\.(.+)", key)
        if not m or not self.runs:
            return key, ""
        first = i = int(m.group(1))
        parts = m.group(2).split(".")
        names = [r.get("name") for r in self.runs]

        def own(run: dict) -> bool:
            tables = [run, *[t for t in run.get("profiles", {}).values() if isinstance(t, dict)]]
            for t in tables:
                for p in parts[:-1]:
                    t = t.get(p) if isinstance(t, dict) else None
                if isinstance(t, dict) and parts[-1] in t:
                    return True
            return False

        for _ in range(len(self.runs)):   # a chain a -> b -> c; loops are reported elsewhere
            if i >= len(self.runs) or own(self.runs[i]) or self.runs[i].get("like") not in names:
                break
            i = names.index(self.runs[i]["like"])
        if i == first or i >= len(self.runs) or not own(self.runs[i]):
            return key, ""
        return (f"runs[{i}].{m.group(2)}", f" (taken over from run '{names[i]}' through like = "
                f"\"{self.runs[first]['like']}\"; set it in this run to override)")


def _one_line(text: str) -> str:
    """Line breaks and other control characters (from keys or values in the file) shown escaped, so the
    message stays one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def _type_ok(value, tp) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if origin is list:
        (arg,) = typing.get_args(tp) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, arg) for v in value)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _type_name(tp) -> str:
    return str(tp).replace("typing.", "").replace("<class '", "").replace("'>", "")


_RANGES = {
    # key: (predicate, description)
    "lr": (lambda v: v > 0, "must be > 0"),
    **{k: (lambda v: v is None or v >= 0, "must be >= 0 (0 leaves no examples)") for k in ("max_train", "max_valid",
                                                                                         "max_test")},
    "epochs": (lambda v: v >= 1, "must be >= 1"),
    "batch_size": (lambda v: v >= 0, "must be >= 0 (0: batches by train.max_tokens alone)"),
    "max_tokens": (lambda v: v is None or v >= 1, "must be >= 1"),
    "beam_size": (lambda v: v >= 1, "must be >= 1"),
    "max_src_len": (lambda v: v >= 1, "must be >= 1"),
    "max_tgt_len": (lambda v: v >= 2, "must be >= 2"),
    "max_len": (lambda v: v >= 1, "must be >= 1"),
    "min_len": (lambda v: v >= 0, "must be >= 0"),
    "label_smoothing": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "accum_steps": (lambda v: v >= 1, "must be >= 1"),
    "warmup": (lambda v: v >= 1, "must be >= 1"),
    "vocab_size": (lambda v: v is None or v >= 5, "must be >= 5"),
    "min_freq": (lambda v: v >= 1, "must be >= 1"),
    "repetition_penalty": (lambda v: v > 0, "must be > 0"),
    "train_sample": (lambda v: 0 <= v <= 1, "must be a fraction in [0, 1] (0.05 = 1/20 of the training split)"),
    "examples_per_split": (lambda v: v >= 0, "must be >= 0"),
    "coverage_penalty": (lambda v: v >= 0, "must be >= 0"),
    "rl_gamma": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "rl_gamma_end": (lambda v: v is None or 0 <= v <= 1, "must be in [0, 1]"),
    "rl_max_len": (lambda v: v >= 1, "must be >= 1"),
    "rl_repetition_penalty": (lambda v: v >= 0, "must be >= 0"),
    "val_max": (lambda v: v >= 0, "must be >= 0"),
    "average_last": (lambda v: v >= 0, "must be >= 0 (0: decode best.pt as it is)"),
    "clip_norm": (lambda v: v >= 0, "must be >= 0"),
    "eps": (lambda v: v > 0, "must be > 0"),
}
# the rules above and below are keyed by a section field's name and apply to that section's field only
# (a model option of the same name is checked by the model's own ``option_rules``)
_CHOICES = {
    "precision": ("auto", "fp32", "bf16", "fp16"),
    "optimizer": ("adam", "adamw"),
    "method": ("beam", "greedy"),
    "length_penalty_style": ("gnmt", "hf", "none"),
    "repetition_penalty_style": ("power", "keskar", "logprob"),
    "rl_logp": ("sum", "mean"),
    "rl_ml_scale": ("sequence", "token"),
    "rouge_unk": ("match", "strip"),
    "on_bad": ("error", "skip_empty", "skip"),
    "split": ("train", "validation", "test"),
    "val_metric": ("loss", "rouge1", "rouge2", "rouge3", "rougeL"),
}


def _check_value(ctx: _Where, key: str, value, section: str) -> None:
    """The value rules of field ``key``'s leaf in [``section``] (data, train, decode, eval)."""
    leaf = key.split(".")[-1]
    if isinstance(value, float) and not math.isfinite(value):
        raise ctx.fail(key, f"{value!r} is not a finite number")
    if leaf not in {f.name for f in dataclasses.fields(SECTIONS[section])}:
        return
    if leaf in _RANGES and value is not None and isinstance(value, (int, float)):
        ok, desc = _RANGES[leaf]
        if not ok(value):
            raise ctx.fail(key, f"{value!r} {desc}")
    if leaf == "rl_reward":
        from seq2seq_zoo.train.rewards import parse_reward
        try:
            parse_reward(value)
        except ValueError as e:
            raise ctx.fail(key, str(e)) from None
    if leaf in _CHOICES and value not in _CHOICES[leaf]:
        raise ctx.fail(key, f"{value!r} is not one of {', '.join(_CHOICES[leaf])}.{did_you_mean(value, _CHOICES[leaf])}")


def _build(cls, values: dict, prefix: str, ctx):
    if isinstance(ctx, str):
        ctx = _Where(Path(ctx), "")
    if not isinstance(values, dict):
        raise ctx.fail(prefix, f"must be a table, not {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for k, v in values.items():
        if k not in fields:
            raise ctx.fail(f"{prefix}.{k}", f"unknown key in [{prefix}].{did_you_mean(k, fields)} "
                           f"Valid keys: {', '.join(fields)}")
        if not _type_ok(v, hints[k]):
            raise ctx.fail(f"{prefix}.{k}", f"expected {_type_name(hints[k])}, got {type(v).__name__} {v!r}")
        _check_value(ctx, f"{prefix}.{k}", v, next(s for s, c in SECTIONS.items() if c is cls))
    return cls(**copy.deepcopy(values))


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _trainable(ctx, i: int, model) -> bool:
    """False for a registered model that declares it has nothing to train (``trainable = False``)."""
    if not isinstance(model, str) or model not in MODELS:
        return True  # an unknown or missing name is reported with the run's other checks
    return bool(getattr(MODELS.get(model), "trainable", True))


def is_trainable(model: str) -> bool:
    return _trainable(None, 0, model)


def _check_name(ctx, key, registry, value):
    if not isinstance(value, str):
        raise ctx.fail(key, f"expected a name (string), got {value!r}")
    try:
        registry.get(value)
    except UnknownName as e:
        raise ctx.fail(key, str(e)) from None


def _spec_from(ctx: _Where, exp_name: str, run: dict, seed: int, profile, data_dir, label: str) -> RunSpec:
    run = dict(run)
    model = run.pop("model", None)
    if model is None:
        raise ctx.fail(f"{label}.model", "no model given (set model = \"...\" in [defaults] or the run)")
    _check_name(ctx, f"{label}.model", MODELS, model)
    name = run.pop("name")
    run.pop("seed", None)
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
        if default is not None and v is not None and not _type_ok(v, type(default)):
            raise ctx.fail(f"{label}.{k}", f"expected {type(default).__name__}, got {type(v).__name__} {v!r}")
        _check_model_option(ctx, f"{label}.{k}", model, k, v)
    built = {k: _build(c, sections[k], f"{label}.{k}", ctx) for k, c in SECTIONS.items()}
    if built["train"].batch_size == 0 and built["train"].max_tokens is None:
        raise ctx.fail(f"{label}.train.batch_size", "0 means batches by padded tokens alone; set train.max_tokens "
                       "too (e.g. 8192), or give a number of examples")
    if built["decode"].batch_size == 0:
        raise ctx.fail(f"{label}.decode.batch_size", "must be >= 1, not 0 (decoding batches count examples)")
    too_long = decode_too_long(built["decode"], built["data"])
    if too_long and _trainable(ctx, 0, model):  # a baseline does not decode
        raise ctx.fail(f"{label}.decode.max_len", too_long)
    _check_name(ctx, f"{label}.data.dataset", DATASETS, built["data"].dataset)
    _check_data_options(ctx, f"{label}.data.options", built["data"])
    _check_name(ctx, f"{label}.train.schedule", SCHEDULES, built["train"].schedule)
    _check_name(ctx, f"{label}.train.objective", OBJECTIVES, built["train"].objective)
    for m in built["eval"].metrics:
        _check_name(ctx, f"{label}.eval.metrics", METRICS, m)
    _try_build(ctx, label, model, run, built["data"])
    return RunSpec(experiment=exp_name, name=name, seed=seed, model=model, model_options=run,
                   profile=profile, data_dir=data_dir, description=desc, same_as=same_as, **built)


def _check_model_option(ctx: _Where, key: str, model: str, option: str, value) -> None:
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
    from seq2seq_zoo.data.corpora import check_options, reader_options

    def fail(k: str, msg: str) -> ConfigError:
        inline = re.search(rf"[{{,][ \t]*{re.escape(k)}[ \t]*=", ctx.text)  # data.options = {{ k = ... }}
        if _line_of(ctx.text, f"{label}.{k}") is None and inline:
            return ConfigError(f"{ctx.path}:{ctx.text.count(chr(10), 0, inline.start()) + 1}: {label}.{k}: {msg}")
        return ctx.fail(f"{label}.{k}", msg)

    known = reader_options(data.dataset)
    for k, v in data.options.items():
        if k in known and not _type_ok(v, known[k][1]):
            raise fail(k, f"expected {_type_name(known[k][1])}, got {type(v).__name__} {v!r}")
    bad = check_options(data.dataset, data.options)
    if bad:
        raise fail(*bad)


def option_type_problem(dataset: str, options: dict) -> tuple[str, str] | None:
    """``(key, message)`` for the first data option whose value has another type than the reader takes (the
    check an experiment file's ``data.options`` gets; ``zoo data info --option`` uses it too), or None."""
    from seq2seq_zoo.data.corpora import reader_options
    known = reader_options(dataset)
    for k, v in options.items():
        if k in known and not _type_ok(v, known[k][1]):
            return k, f"expected {_type_name(known[k][1])}, got {type(v).__name__} {v!r}"
    return None


def _try_build(ctx, label: str, model: str, options: dict, data: DataConfig) -> None:
    """Build the model on the meta device (no memory, no time) so inconsistent options (heads that do
    not divide d_model, ...) stop here, before any data is read or trained on."""
    import torch

    from seq2seq_zoo.models.base import build_model, model_context
    try:
        with torch.device("meta"):
            build_model(model, model_context(data.vocab_size or 1000, data), options)
    except (ValueError, TypeError, RuntimeError, ZeroDivisionError, OverflowError, IndexError, KeyError) as e:
        # point at the option the message names last (e.g. "d_model 32 is not divisible by heads 3")
        named = [(str(e).rfind(k), k) for k in options if re.search(rf"\b{re.escape(k)}\b", str(e))]
        key = max(named)[1] if named else "model"
        raise ctx.fail(f"{label}.{key}", f"model '{model}' cannot be built with these options: {e}") from None


EXPERIMENT_KEYS = {"name", "description", "dataset", "metrics", "seeds", "data_dir", "models"}
TOP_KEYS = {"experiment", "defaults", "runs", "profiles", "grid", "findings"}


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
    ctx = _Where(path, text)
    try:
        raw = tomllib.loads(text)
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
    exp = raw.get("experiment", {})
    for k in exp:
        if k not in EXPERIMENT_KEYS:
            raise ctx.fail(f"experiment.{k}", f"unknown key.{did_you_mean(k, EXPERIMENT_KEYS)} "
                           f"Valid: {', '.join(sorted(EXPERIMENT_KEYS))}")
    _load_user_models(ctx, exp.get("models"))
    name = exp.get("name", path.stem)
    if name_problem(name):
        raise ctx.fail("experiment.name", f"{name_problem(name)}; it must be {NAME_RULE}")
    seeds = exp.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ctx.fail("experiment.seeds", f"expected a non-empty list of integers, got {seeds!r}")
    _check_seeds(ctx, "experiment.seeds", seeds)
    for pname, pval in raw.get("profiles", {}).items():
        if not isinstance(pval, dict):
            raise ctx.fail(f"profiles.{pname}", "a profile must be a table ([profiles.NAME])")
    for gk, gv in raw.get("grid", {}).items():
        if not isinstance(gv, list) or not gv:
            raise ctx.fail(f"grid.{gk}", f"a grid entry must be a non-empty list of values, got {gv!r}")
    defaults = dict(raw.get("defaults", {}))
    # experiment-level shortcuts
    if "dataset" in exp:
        defaults = _merge(defaults, {"data": {"dataset": exp["dataset"]}})
    if "metrics" in exp:
        defaults = _merge(defaults, {"eval": {"metrics": exp["metrics"]}})
    profiles = raw.get("profiles", {})
    if profile is not None:
        if profile not in profiles:
            raise ConfigError(f"{path}: no profile '{profile}'.{did_you_mean(profile, profiles)} "
                              f"Profiles in this file: {', '.join(profiles) or 'none'}")
        defaults = _merge(defaults, profiles[profile])
    runs = raw.get("runs") or [{"name": name}]
    if not isinstance(runs, list):
        raise ctx.fail("runs", "must be an array of tables ([[runs]])")
    grid = raw.get("grid", {})
    combos = [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())] if grid else [{}]
    specs: list[RunSpec] = []
    seen: set[str] = set()
    groups: list[str] = []   # run names before the -seedN suffix (what [[findings]] claims name)
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ctx.fail("runs", "must be an array of tables ([[runs]])")
        if "name" not in run:
            raise ctx.fail(f"runs[{i}]", "every [[runs]] entry needs a name")
        if name_problem(run["name"]):
            raise ctx.fail(f"runs[{i}].name", f"{name_problem(run['name'])}; it must be {NAME_RULE}")
        if "seed" in run:
            _check_seeds(ctx, f"runs[{i}].seed", [run["seed"]])
    ctx.runs = runs
    for i, run in enumerate(runs):
        run = _with_like(ctx, i, runs)
        run = _with_run_profile(ctx, i, run, profiles, profile)
        if not _trainable(ctx, i, run.get("model", defaults.get("model"))):
            # a baseline with nothing to train (lead, longest, oracle): the file's data and evaluation
            # settings, none of its model, training or decoding settings, no grid, one seed (it is
            # deterministic)
            if run["name"] in seen:
                raise ctx.fail(f"runs[{i}].name", f"duplicate run name '{run['name']}'; run names must be unique")
            seen.add(run["name"])
            merged = _merge({k: defaults[k] for k in ("data", "eval") if k in defaults}, run)
            merged.setdefault("description", exp.get("description", ""))
            specs.append(_spec_from(ctx, name, merged, run.get("seed", seeds[0]), profile, exp.get("data_dir"),
                                    f"runs[{i}]"))
            groups.append(run["name"])
            continue
        for combo in combos:
            merged = _merge(defaults, run)
            merged = _merge(merged, _unflatten(combo))
            rname = run["name"] + "".join(f"-{k.split('.')[-1]}{v}" for k, v in combo.items())
            if rname in seen:
                raise ctx.fail(f"runs[{i}].name", f"duplicate run name '{rname}'; run names must be unique")
            seen.add(rname)
            groups.append(rname)
            run_seeds = [run["seed"]] if "seed" in run else seeds
            for seed in run_seeds:
                full = rname if len(run_seeds) == 1 else f"{rname}-seed{seed}"
                if name_problem(full):  # a grid value or a seed suffix makes the folder name
                    raise ctx.fail(f"runs[{i}].name", f"run name {full!r} (with its grid and seed suffixes): "
                                   f"{name_problem(full)}; it must be {NAME_RULE}")
                merged["name"] = full
                merged.setdefault("description", exp.get("description", ""))
                specs.append(_spec_from(ctx, name, merged, seed, profile, exp.get("data_dir"), f"runs[{i}]"))
    decodes = _decode_variants(ctx, raw.get("decode", []), [s for s in specs if _trainable(ctx, 0, s.model)])
    from seq2seq_zoo.findings import parse_findings
    findings = parse_findings(raw.get("findings", []), groups, [d.name for d in decodes], ctx.fail)
    if only:
        names = [s.name for s in specs]
        # a run's name selects every seed of it ("tmax": tmax-seed1, tmax-seed2, ...); NAME-seedN one seed
        base = {s.name: re.sub(rf"-seed{s.seed}$", "", s.name) for s in specs}
        for o in only:
            if o not in names and o not in base.values():
                raise ConfigError(f"{path}: no run named '{o}'.{did_you_mean(o, names)} Runs: {', '.join(names)}")
        specs = [s for s in specs if s.name in only or base[s.name] in only]
    return Experiment(name=name, path=path, runs=specs, dataset=specs[0].data.dataset,
                      description=exp.get("description", ""), profile=profile, raw=raw, decodes=decodes,
                      findings=findings)


def _load_user_models(ctx: _Where, paths) -> None:
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
        line = _line_of(ctx.text, "experiment.models")
        raise PluginError(f"{ctx.path}{f':{line}' if line else ''}: {e}") from e.__cause__


DEFAULT_DECODE_NAME = "default"   # the row of a run's own decode settings in tables
SEED_MAX = 2**32 - 1   # what every generator seeded (numpy's included) accepts
SEEDS_MAX = 100        # seeds of one experiment; each is a run of its own


def _check_seeds(ctx: _Where, key: str, seeds: list) -> None:
    """Seeds: integers 0..SEED_MAX, each once, at most SEEDS_MAX of them; checked before any model is built."""
    for s in seeds:
        if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s <= SEED_MAX:
            raise ctx.fail(key, f"seed {s!r} must be an integer from 0 to {SEED_MAX}")
    dup = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if dup is not None:
        raise ctx.fail(key, f"seed {dup} is given twice; seeds must be unique (each gives a run of its own)")
    if len(seeds) > SEEDS_MAX:
        raise ctx.fail(key, f"{len(seeds)} seeds; at most {SEEDS_MAX} (each seed is a run trained on its own)")


def decode_too_long(decode: DecodeConfig, data: DataConfig) -> str | None:
    """The one check that a decoding fits the model: ``decode.max_len`` may not exceed
    ``data.max_tgt_len``, the longest target the model is built for (e.g. its positional table).
    Returns the problem as text, or None; callers add where it was found."""
    if decode.max_len > data.max_tgt_len:
        return (f"decode.max_len {decode.max_len} exceeds data.max_tgt_len ({data.max_tgt_len}), the longest "
                "target the model is trained and built for; lower decode.max_len or raise data.max_tgt_len")
    return None


def _decode_variants(ctx: _Where, entries: list, specs: list[RunSpec]) -> list[DecodeVariant]:
    """[[decode]] entries: a plain unique name plus decode.* keys, checked like [defaults.decode] and
    against every run (decode.max_len may not exceed a run's data.max_tgt_len)."""
    out: list[DecodeVariant] = []
    for i, entry in enumerate(entries):
        label = f"decode[{i}]"
        if not isinstance(entry, dict):
            raise ctx.fail(label, "must be an array of tables ([[decode]] with name = \"...\" and decode keys)")
        over = dict(entry)
        name = over.pop("name", None)
        if name is None:
            raise ctx.fail(label, "every [[decode]] entry needs a name (it labels the table rows)")
        if name_problem(name):
            raise ctx.fail(f"{label}.name", f"{name_problem(name)}; it must be {NAME_RULE}")
        if name == DEFAULT_DECODE_NAME or name in {v.name for v in out}:
            what = "is the name of the runs' own decoding" if name == DEFAULT_DECODE_NAME else "is used twice"
            raise ctx.fail(f"{label}.name", f"duplicate decode name '{name}': it {what}; names must be unique")
        if not over:
            raise ctx.fail(label, f"[[decode]] '{name}' changes nothing; give decode keys "
                           f"({', '.join(f.name for f in dataclasses.fields(DecodeConfig))})")
        _build(DecodeConfig, over, label, ctx)  # unknown keys, types, ranges, choices
        for spec in specs:
            too_long = decode_too_long(dataclasses.replace(spec.decode, **over), spec.data)
            if too_long:
                raise ctx.fail(f"{label}.max_len" if "max_len" in over else label,
                               f"decode '{name}' of run '{spec.name}': {too_long}")
        out.append(DecodeVariant(name, over))
    return out


def parse_decode_overrides(text: str, where: str = "--decode") -> dict[str, Any]:
    """``beam_size=8,length_penalty=1.0,method=greedy`` -> checked decode.* overrides (values are TOML
    values; a bare word is a string)."""
    over: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" not in part:
            raise ConfigError(f"{where}: {part!r} is not KEY=VALUE (e.g. beam_size=8,length_penalty=1.0)")
        k, v = (x.strip() for x in part.split("=", 1))
        try:
            over[k] = tomllib.loads(f"v = {v}")["v"]
        except tomllib.TOMLDecodeError:
            over[k] = v
    if not over:
        raise ConfigError(f"{where}: no decode settings given (e.g. beam_size=8,length_penalty=1.0)")
    ctx = _Where(Path(where), "")
    _build(DecodeConfig, over, "decode", ctx)
    return over


def _with_like(ctx: _Where, i: int, runs: list[dict], chain: tuple[int, ...] = ()) -> dict:
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
    return _merge(base, own)


def _with_run_profile(ctx: _Where, i: int, run: dict, profiles: dict, profile: str | None) -> dict:
    """A run's own profile overrides, ``[runs.profiles.NAME]`` after its ``[[runs]]`` header: applied on top
    of the run when ``--profile NAME`` is chosen (defaults <- [profiles.NAME] <- run <- run's profile), so
    runs that differ in size can each have their own small profile."""
    run = dict(run)
    own = run.pop("profiles", {})
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise ctx.fail(f"runs[{i}].profiles", "must be tables: [runs.profiles.NAME] with overrides of this run")
    for pname in own:
        if pname not in profiles:
            raise ctx.fail(f"runs[{i}].profiles.{pname}", f"profile '{pname}' of run '{run['name']}' is not defined at top "
                           f"level ([profiles.{pname}]).{did_you_mean(pname, profiles)}")
    return _merge(run, own[profile]) if profile in own else run


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for k, v in flat.items():
        cur = out
        parts = k.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v
    return out
