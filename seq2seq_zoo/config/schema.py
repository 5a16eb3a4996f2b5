"""The configuration schema: the settings' dataclasses and defaults, their value ranges and choices, the
keys each table of an experiment file takes. Imports nothing from the package: every
other module may read it (the docs generator, report/configdoc.py, writes docs/configuration.md from it)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


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
    turn_separator: str | None = None             # one token put between the source's lines (dialogue turns), e.g. "<eot>"
    options: dict = field(default_factory=dict)   # the dataset reader's options (zoo list datasets; docs/data.md)


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
    precision: str = "auto"                       # auto (per machine: bf16 where fast, else fp32) | fp32 | bf16 | fp16
    val_every: int = 0                            # validate every N updates (0 = once per epoch)
    patience: int = 0                             # early stopping after N validations without gain (0 = off)
    checkpoint_every: int = 0                     # also checkpoint every N updates (0 = per epoch only)
    max_steps: int = 0                            # stop after N updates (0 = no limit)
    max_minutes: float = 0.0                      # stop at the first epoch end (or val_every validation) after N
                                                  # minutes of training and validation, resumes summed; then
                                                  # scored from best.pt as usual (0 = no limit; zoo run
                                                  # --max-minutes)
    objective: str = "ce"
    init_from: str | None = None                  # start from a trained run's best weights (and vocabulary):
                                                  # "results/<exp>/<run>", a run name of this experiment, or a .pt
    val_metric: str = "loss"                      # what picks best.pt and stops early: loss, or a score a metric
                                                  # declares usable (rouge1 | rouge2 | rouge3 | rougeL: F1 of
                                                  # greedy decodes of the validation set)
    average_last: int = 0                         # decode with the mean weights of the last N epochs' checkpoints
    val_max: int = 0                              # decode-based validation on the first N examples (0 = all)

    # SCST's options (train/objectives.py: SelfCritical.options, which declares each with its rule and
    # words), under the keys spec.json and records store them as; experiment files set them as the table
    # train.scst = { reward = ..., gamma = ... } (config/objective_tables.py) or, as before, train.rl_*
    rl_reward: str = "rouge1"
    rl_gamma: float = 0.9984
    rl_gamma_end: float | None = None
    rl_gamma_ramp: float = 1.0
    rl_max_len: int = 48
    rl_repetition_penalty: float = 0.0
    rl_logp: str = "sum"
    rl_ml_scale: str = "sequence"

    device: str = "auto"
    threads: int = 0                              # torch CPU threads (0 = torch's default)

    def __post_init__(self):
        # the options of an objective that have no stored field (a new objective's), as the objective's
        # table by its name (not a field: spec.json and records hold a table only where given; train_dict)
        self.objectives: dict[str, dict[str, Any]] = {}


@dataclass
class DecodeConfig:
    """A decoding's settings as records hold them. The search's own keys (method, beam_size, max_len,
    batch_size) are checked here; every other key belongs to a decoding rule (seq2seq_zoo/decode/rules.py),
    which declares its default, range, choices and words: the fields below repeat the built-in rules'
    defaults (a test holds them equal), and a user rule's keys are kept in ``extra`` (set by the config
    checks, not a field: a record names them only where given)."""
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

    def __post_init__(self):
        self.extra: dict[str, Any] = {}           # a user decoding rule's keys (not a field: see above)


def train_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Training settings as records hold them: the fields, and objectives' option tables where given."""
    return {**asdict(cfg), **cfg.objectives}


def decode_dict(cfg: DecodeConfig) -> dict[str, Any]:
    """A decoding's settings as records hold them: the fields, and a user rule's keys where given."""
    return {**asdict(cfg), **cfg.extra}


def decode_with(cfg: DecodeConfig, over: dict[str, Any]) -> DecodeConfig:
    """``cfg`` with checked overrides ``over`` (fields and user rules' keys) applied; ``cfg`` unchanged."""
    names = {f.name for f in fields(DecodeConfig)}
    out = replace(cfg, **{k: v for k, v in over.items() if k in names})
    out.extra = {**cfg.extra, **{k: v for k, v in over.items() if k not in names}}
    return out


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
    """Flat ``section.key`` settings that cannot change a run's results given its other settings: SCST's ML
    scale and gamma ramp for another objective (decode.* keys: the decoding rules' ``inert``, which
    ``reuse`` adds)."""
    out = set()
    if flat.get("train.objective", "ce") != "scst":
        out.add("train.rl_ml_scale")
        out.add("train.rl_gamma_ramp")
    return out


SECTIONS = {"data": DataConfig, "train": TrainConfig, "decode": DecodeConfig, "eval": EvalConfig}
RUN_KEYS = {"name", "model", "seed", "seeds", "description", "same_as", "like"}
NOT_INHERITED = ("name", "description", "same_as", "like")   # what `like` does not take over
SAME_AS_PATTERN = r"[\w.-]+/[\w.-]+"   # a run's same_as: "EXPERIMENT/RUN" (reuse.py)
EXPERIMENT_KEYS = {"name", "description", "dataset", "metrics", "seeds", "data_dir", "models"}
TOP_KEYS = {"experiment", "defaults", "runs", "profiles", "grid", "findings", "launcher"}
DEFAULT_DECODE_NAME = "default"   # the row of a run's own decode settings in tables
SEED_MAX = 2**32 - 1   # what every generator seeded (numpy's included) accepts
SEEDS_MAX = 100        # seeds of one experiment; each is a run of its own


RANGES = {
    # key: (predicate, description)
    "lr": (lambda v: v > 0, "must be > 0"),
    **{k: (lambda v: v is None or v >= 0, "must be >= 0 (0 leaves no examples)") for k in ("max_train", "max_valid",
                                                                                         "max_test")},
    "epochs": (lambda v: 1 <= v <= 100_000, "must be >= 1 and <= 100000"),
    "max_minutes": (lambda v: v >= 0, "must be >= 0 (0: no time limit)"),
    "batch_size": (lambda v: 0 <= v <= 65_536, "must be >= 0 and <= 65536 (0: batches by train.max_tokens alone)"),
    "max_tokens": (lambda v: v is None or 1 <= v <= 10**8, "must be >= 1 and <= 100000000"),
    "beam_size": (lambda v: 1 <= v <= 256, "must be >= 1 and <= 256 (each beam holds a hypothesis per example)"),
    "max_src_len": (lambda v: 1 <= v <= 100_000, "must be >= 1 and <= 100000"),
    "max_tgt_len": (lambda v: 2 <= v <= 10_000, "must be >= 2 and <= 10000"),
    "max_len": (lambda v: 1 <= v <= 10_000, "must be >= 1 and <= 10000"),
    "label_smoothing": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "accum_steps": (lambda v: 1 <= v <= 10_000, "must be >= 1 and <= 10000"),
    "warmup": (lambda v: 1 <= v <= 10**9, "must be >= 1 and <= 1000000000"),
    "vocab_size": (lambda v: v is None or 5 <= v <= 10_000_000, "must be >= 5 and <= 10000000"),
    "min_freq": (lambda v: v >= 1, "must be >= 1"),
    "train_sample": (lambda v: 0 <= v <= 1, "must be a fraction in [0, 1] (0.05 = 1/20 of the training split)"),
    "examples_per_split": (lambda v: v >= 0, "must be >= 0"),
    "val_max": (lambda v: v >= 0, "must be >= 0"),
    "average_last": (lambda v: 0 <= v <= 1000, "must be >= 0 and <= 1000 (0: decode best.pt as it is)"),
    "bertscore_batch_size": (lambda v: 1 <= v <= 65_536, "must be >= 1 and <= 65536"),
    "threads": (lambda v: 0 <= v <= 4096, "must be >= 0 and <= 4096 (0: torch's default)"),
    **{k: (lambda v: v >= 0, "must be >= 0 (0: off)") for k in ("val_every", "patience", "checkpoint_every",
                                                                "max_steps")},
    "clip_norm": (lambda v: v >= 0, "must be >= 0"),
    "eps": (lambda v: v > 0, "must be > 0"),
}


# the rules above and below are keyed by a section field's name and apply to that section's field only
# (a model option of the same name is checked by the model's own ``option_rules``; a decoding rule's
# decode.* keys by the rule's own declarations; an objective's options, e.g. SCST's train.scst.* (stored as
# train.rl_*), by the objective's ``options``)
CHOICES = {
    "precision": ("auto", "fp32", "bf16", "fp16"),
    "optimizer": ("adam", "adamw"),
    "method": ("beam", "greedy"),
    "rouge_unk": ("match", "strip"),
    "on_bad": ("error", "skip_empty", "skip"),
    "split": ("train", "validation", "test"),
}


def decode_too_long(decode: DecodeConfig, data: DataConfig) -> str | None:
    """The one check that a decoding fits the model: ``decode.max_len`` may not exceed
    ``data.max_tgt_len``, the longest target the model is built for (e.g. its positional table).
    Returns the problem as text, or None; callers add where it was found."""
    if decode.max_len > data.max_tgt_len:
        return (f"decode.max_len {decode.max_len} exceeds data.max_tgt_len ({data.max_tgt_len}), the longest "
                "target the model is trained and built for; lower decode.max_len or raise data.max_tgt_len")
    return None


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
