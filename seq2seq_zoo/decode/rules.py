"""Decoding rules, one class each, registered with ``@register_decoding_rule(name)``: every rule that shapes
what a decoder may produce or how beam search ranks hypotheses owns its ``decode.*`` keys (default, range,
choices, a line of documentation), its words in tables and settings lines, and its step. Greedy, beam and
sampled decoding run the same chain (``Chain``): the registered rules in ``order``, each built from a
decoding's settings, those whose settings leave them off (``active``) dropped.

A rule has two hooks, either or both:

- ``logprobs(lp, step)``: the step's log-probabilities (N, V) of the next token of each hypothesis, changed
  (a ban is ``-inf``); greedy takes the argmax of the result, beam search ranks continuations by it,
  sampling draws from it renormalised;
- ``rank(score, step)``: beam search only: the ranking score of candidates (N, k) of a step (summed
  log-probabilities with the new token), changed (a length or coverage penalty).

``Step`` carries what a rule may read: the tokens generated so far (N, t), the step's index, the model's
raw logits of the step (or None), the model and its decoder state. A rule in a user file (loaded with
``--models PATH`` or ``[experiment] models``) is used exactly like these: its keys are valid
``decode.*`` keys of experiment files, ``[[decode]]`` entries and ``zoo eval --decode``, and records and
tables name its settings.

The built-in rules, in chain order: ``repetition_penalty`` (10), ``never_pad_bos`` (20), ``min_length``
(30), ``no_repeat_ngram`` (40), ``length_penalty`` (50), ``coverage_penalty`` (60); the formulas are in
their docstrings and docs/decoding-and-objectives.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from seq2seq_zoo.data.vocab import BOS_ID, EOS_ID, PAD_ID
from seq2seq_zoo.registry import decoding_rule_keys, decoding_rules, register_decoding_rule

NEG = float("-inf")
NEVER = (PAD_ID, BOS_ID)   # ids no decoder may produce
REPETITION_RULES = ("power", "keskar", "logprob")


@dataclass(frozen=True)
class Key:
    """A ``decode.*`` key a rule owns: its default, a line of documentation, the values it takes
    (``check``: (predicate, what a value must be), and/or ``choices``)."""
    default: Any
    doc: str = ""
    check: tuple[Callable[[Any], bool], str] | None = None
    choices: tuple | None = None

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` (None: nothing)."""
        if self.check is not None and value is not None and isinstance(value, (int, float)) \
                and not self.check[0](value):
            return f"{value!r} {self.check[1]}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of {', '.join(map(str, self.choices))}"
        return None


@dataclass
class Step:
    """What a rule reads at one decoding step: ``tokens`` (N, t) generated so far by each hypothesis,
    ``index`` (0 for the first token), ``logits`` (the model's raw logits of the step, N x V, or None for
    a copy model's mixture), the ``model`` and its decoder ``state`` after the step."""
    tokens: torch.Tensor
    index: int
    logits: torch.Tensor | None = None
    model: Any = None
    state: Any = None


class DecodingRule:
    """The base of every decoding rule; a subclass declares ``keys`` and overrides what it needs.
    ``settings`` (the values of a decoding's keys, every key of every rule, by name) is kept as
    ``self.settings``; ``self.get(key)`` reads one."""
    keys: dict[str, Key] = {}
    order: int = 100          # place in the chain (lowest first); user rules run after the built-in ones
    label_order: int | None = None   # place of its words in labels (default: ``order``)

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings

    def get(self, key: str):
        return self.settings.get(key, self.keys[key].default if key in self.keys else None)

    @classmethod
    def active(cls, settings: dict[str, Any]) -> bool:
        """Whether the rule changes anything under these settings (an inactive rule is left out)."""
        return True

    def logprobs(self, lp: torch.Tensor, step: Step) -> torch.Tensor:
        return lp

    def rank(self, score: torch.Tensor, step: Step) -> torch.Tensor:
        return score

    @classmethod
    def label(cls, settings: dict[str, Any]) -> str | None:
        """Its settings in a few words for table labels (None: nothing to say)."""
        return None

    @classmethod
    def describe(cls, settings: dict[str, Any]) -> str | None:
        """Its settings in words for the settings lines of records and reports (None: nothing)."""
        return None

    @classmethod
    def inert(cls, settings: dict[str, Any]) -> set[str]:
        """Its keys that cannot change results under these settings (e.g. a style with the strength off)."""
        return set()


def _value(settings: dict, key: str):
    """A setting, or its owner's default (a record written before a user rule existed lacks its keys)."""
    if key in settings:
        return settings[key]
    owner = rule_keys().get(key)
    return owner[1].default if owner else None


# ------------------------------------------------------------------------------------ the built-in rules
def penalise_repeats(lp: torch.Tensor | None, tokens: torch.Tensor, penalty: float, style: str = "power",
                     logits: torch.Tensor | None = None) -> torch.Tensor:
    """The repetition penalty on one step's log-probs ``lp`` (N, V) given the tokens (N, t) generated so
    far; ``logits``: the model's raw logits of the step (same width), used by ``keskar`` alone."""
    if style not in REPETITION_RULES:
        raise ValueError(f"unknown repetition_penalty_style {style!r}")
    if lp is not None and (penalty == 1.0 or tokens.size(1) == 0):
        return lp    # before the fp32 copy of the logits below: a (hypotheses x V) copy per step for nothing
    if style == "keskar" and logits is not None and (lp is None or logits.shape == lp.shape):
        z = logits.float()
    else:
        z, logits = (lp if lp is not None else torch.log_softmax(logits.float(), -1)), None
    if penalty == 1.0 or tokens.size(1) == 0:
        return lp if lp is not None else torch.log_softmax(z, -1)
    seen = torch.zeros_like(z, dtype=torch.bool).scatter_(1, tokens, True)
    seen[:, PAD_ID] = False
    if style == "logprob":
        return torch.where(seen, z * penalty, z)
    if style == "power" or logits is None:   # keskar without logits (a copy model): log p stands in, = power
        return torch.log_softmax(torch.where(seen, z * penalty, z), -1)
    return torch.log_softmax(torch.where(seen, torch.where(z > 0, z / penalty, z * penalty), z), -1)


# the repetition rule in a table label; under keskar a copy model (no logits) gets the power rule
_REP_LABEL = {"keskar": "keskar (copy models: power)", "power": "power", "logprob": "logprob"}
_REP_DESCRIBE = {"keskar": " (keskar: seen tokens' logits divided by it if positive, multiplied if negative, "
                           "then softmax; copy models, which have no logits: p^theta renormalised)",
                 "power": " (power: seen tokens' p -> p^theta, renormalised; the same rule for every model)"}


@register_decoding_rule("repetition_penalty")
class RepetitionPenalty(DecodingRule):
    """Repetition penalty theta on tokens the hypothesis already generated, one rule for every model of a
    decode (``repetition_penalty_style``):

    - power (default): p -> p^theta, then renormalised (on the step's log-probs: log p * theta,
      log_softmax again). It needs only log-probs, so a copy model's mixture and a plain softmax model
      follow the very same rule.
    - keskar (Keskar et al. 2019 as Hugging Face's ``repetition_penalty`` applies it): the logit of a token
      already generated is divided by theta if positive and multiplied by theta if negative, then the
      softmax is taken again. Models leave their raw step logits in the state (``state["logits"]``); a copy
      model's mixture has none, and its log-probs stand in for them (all negative: the ``power`` rule), so
      under ``keskar`` copy and non-copy models follow different rules (tables say so).
    - logprob: the log-prob of a generated token is multiplied by theta (p -> p^theta, not renormalised;
      the rule of the records made before the correctness fixes)."""
    keys = {"repetition_penalty": Key(1.0, "CTRL-style penalty on already generated tokens (1.0 = off)",
                                      check=(lambda v: v > 0, "must be > 0")),
            "repetition_penalty_style": Key("power", "power: p^theta renormalised, every model | keskar: on the "
                                            "logits, then softmax (HF; copy models: power) | logprob: lp * theta",
                                            choices=REPETITION_RULES)}
    order, label_order = 10, 40

    @classmethod
    def active(cls, settings):
        return _value(settings, "repetition_penalty") != 1.0

    def logprobs(self, lp, step):
        return penalise_repeats(lp, step.tokens, self.get("repetition_penalty"),
                                self.get("repetition_penalty_style"), step.logits)

    @classmethod
    def label(cls, settings):
        theta = _value(settings, "repetition_penalty")
        style = settings.get("repetition_penalty_style", "logprob")   # records before the key: logprob
        return f"rep. pen. {theta}" + (f" {_REP_LABEL.get(style, style)}" if theta != 1.0 else "")

    @classmethod
    def describe(cls, settings):
        theta = _value(settings, "repetition_penalty")
        text = f"repetition_penalty {theta}"
        if theta != 1.0:  # records made before the rule was an option used logprob
            text += _REP_DESCRIBE.get(settings.get("repetition_penalty_style", "logprob"),
                                      " (logprob: seen tokens' log-probs multiplied by it, not renormalised)")
        return text

    @classmethod
    def inert(cls, settings):
        return {"repetition_penalty_style"} if _value(settings, "repetition_penalty") == 1.0 else set()


def mask_never(lp: torch.Tensor) -> torch.Tensor:
    """<pad> and <bos> can never be produced: -inf in a step's log-probs (N, V); in place, unless ``lp``
    takes part in a gradient (sampled decoding for self-critical training): then on a copy."""
    if lp.requires_grad:
        return lp.index_fill(1, torch.tensor(NEVER, device=lp.device), NEG)
    for i in NEVER:      # basic indexing: no index tensor copied to the device each step
        lp[:, i] = NEG
    return lp


@register_decoding_rule("never_pad_bos")
class NeverPadBos(DecodingRule):
    """<pad> and <bos> get -inf at every step of greedy, beam and sampled decoding, so an output never
    holds them (they are not valid outputs, and a <pad> fed back would be read as padding). No keys:
    always on."""
    order = 20

    def logprobs(self, lp, step):
        return mask_never(lp)


@register_decoding_rule("min_length")
class MinLength(DecodingRule):
    """No <eos> before ``min_len`` tokens: -inf on <eos> at steps 0 .. min_len - 1."""
    keys = {"min_len": Key(1, "shortest output: <eos> is banned before this many tokens",
                           check=(lambda v: 0 <= v <= 10_000, "must be >= 0 and <= 10000"))}
    order, label_order = 30, 20

    @classmethod
    def active(cls, settings):
        return _value(settings, "min_len") > 0

    def logprobs(self, lp, step):
        if step.index < self.get("min_len"):
            lp[:, EOS_ID] = NEG
        return lp

    @classmethod
    def label(cls, settings):
        return f"len {_value(settings, 'min_len')}-{settings['max_len']}"

    @classmethod
    def describe(cls, settings):
        return f"min_len {_value(settings, 'min_len')}, max_len {settings['max_len']}"


def block_ngrams(lp: torch.Tensor, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """lp (N, V); tokens (N, t) generated so far. Forbid tokens that would repeat an n-gram."""
    t = tokens.size(1)
    if n <= 0 or t < n:
        return lp
    if n == 1:
        return lp.scatter(1, tokens, NEG)
    windows = tokens.unfold(1, n, 1)                     # (N, t-n+1, n)
    if windows.size(1) == 0:
        return lp
    last = tokens[:, t - (n - 1):]                       # (N, n-1)
    match = (windows[..., :-1] == last[:, None, :]).all(-1)   # (N, t-n+1)
    rows, cols = match.nonzero(as_tuple=True)
    if rows.numel():
        lp = lp.clone()
        lp[rows, windows[rows, cols, -1]] = NEG
    return lp


@register_decoding_rule("no_repeat_ngram")
class NoRepeatNgram(DecodingRule):
    """n-gram blocking: a token that would complete an n-gram already in the hypothesis gets -inf."""
    keys = {"no_repeat_ngram": Key(0, "block repeated n-grams of this size (0 = off)",
                                   check=(lambda v: 0 <= v <= 100, "must be >= 0 and <= 100 (0: off)"))}
    order, label_order = 40, 30

    @classmethod
    def active(cls, settings):
        return _value(settings, "no_repeat_ngram") > 0

    def logprobs(self, lp, step):
        return block_ngrams(lp, step.tokens, self.get("no_repeat_ngram"))

    @classmethod
    def label(cls, settings):
        return f"no-repeat {_value(settings, 'no_repeat_ngram')}"

    @classmethod
    def describe(cls, settings):
        return f"no_repeat_ngram {_value(settings, 'no_repeat_ngram')}"


def length_penalty(length: torch.Tensor, alpha: float, style: str) -> torch.Tensor:
    length = length.float()
    if style == "none" or alpha == 0:
        return torch.ones_like(length)
    if style == "hf":
        return length ** alpha
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    raise ValueError(f"unknown length_penalty_style {style!r}")


def lp_formula(settings: dict) -> str:
    """The exact length penalty used to rank beam hypotheses."""
    a, style = settings["length_penalty"], settings["length_penalty_style"]
    if style == "none" or a == 0:
        return "none (score = sum of log-probs)"
    if style == "hf":
        return f"hf, score = sum of log-probs / len^{a}"
    return f"gnmt, score = sum of log-probs / ((5 + len) / 6)^{a}"


@register_decoding_rule("length_penalty")
class LengthPenalty(DecodingRule):
    """Length penalty (beam search: the summed log-probability divided by it when ranking):

    - gnmt: score / ((5 + len) / 6) ** alpha     (Wu et al. 2016)
    - hf:   score / len ** alpha                 (Hugging Face ``length_penalty``)
    - none: score

    Every candidate of a step has the same length (step + 1, <eos> counted): one penalty per step."""
    keys = {"length_penalty": Key(1.0, "alpha"),
            "length_penalty_style": Key("gnmt", "gnmt: ((5+len)/6)^alpha | hf: len^alpha | none",
                                        choices=("gnmt", "hf", "none"))}
    order, label_order = 50, 10

    @classmethod
    def active(cls, settings):
        return not (_value(settings, "length_penalty_style") == "none" or _value(settings, "length_penalty") == 0)

    def rank(self, score, step):
        return score / length_penalty(torch.tensor(step.index + 1), self.get("length_penalty"),
                                      self.get("length_penalty_style"))

    @classmethod
    def label(cls, settings):
        if settings.get("method") == "greedy":
            return None
        return "lp " + ("none" if settings["length_penalty_style"] == "none" or not settings["length_penalty"]
                        else f"{settings['length_penalty_style']} {settings['length_penalty']}")

    @classmethod
    def describe(cls, settings):
        return None if settings.get("method") == "greedy" else f"length penalty {lp_formula(settings)}"

    @classmethod
    def inert(cls, settings):
        return set()


def coverage_penalty(coverage: tuple[torch.Tensor, torch.Tensor] | None, beta: float) -> torch.Tensor | None:
    """beta * sum_j log(min(cov_j, 1)) per hypothesis over real source positions; ``coverage`` is
    (cov, mask) from the model's ``attention_coverage`` hook. None if beta is 0 or the model keeps none."""
    if not beta or coverage is None:
        return None
    cov, mask = coverage
    return beta * cov.float().clamp(min=1e-6, max=1.0).log().masked_fill(~mask, 0.0).sum(-1)


@register_decoding_rule("coverage_penalty")
class CoveragePenalty(DecodingRule):
    """Coverage penalty (Wu et al. 2016, beam search only, for models whose ``attention_coverage`` hook
    returns the summed attention and the source mask of a decoder state: the attention RNNs and the
    pointer-generator): cp = beta * sum_j log(min(cov_j, 1)) over real source positions (cov_j clamped at
    1e-6 so cp is finite), added to the length-normalised score; a finished hypothesis keeps the cp it
    finished with."""
    keys = {"coverage_penalty": Key(0.0, "beta of Wu et al. (2016); attention RNN models only",
                                    check=(lambda v: v >= 0, "must be >= 0"))}
    order = 60

    @classmethod
    def active(cls, settings):
        return bool(_value(settings, "coverage_penalty"))

    def rank(self, score, step):
        cp = coverage_penalty(step.model.attention_coverage(step.state), self.get("coverage_penalty"))
        return score if cp is None else score + cp[:, None]

    @classmethod
    def label(cls, settings):
        return f"cov. pen. {settings['coverage_penalty']}" if settings.get("coverage_penalty") else None

    @classmethod
    def describe(cls, settings):
        return f"coverage_penalty {settings['coverage_penalty']}" if settings.get("coverage_penalty") else None


@register_decoding_rule("precision")
class Precision(DecodingRule):
    """``decode.precision``: "auto" runs the model as the run was trained (its autocast precision);
    "int8" runs every ``nn.Linear`` of the model with int8 weights and dynamically quantised inputs
    (``seq2seq_zoo.precision.int8_linears``). Not a step of the chain (never active): the search reads it
    once per call. Declared here so that its choices and words sit with the other decode keys, and a
    record names it only where it is given."""
    keys = {"precision": Key("auto", "auto: the run's precision | int8: linear layers in int8 (CPU)",
                             choices=("auto", "int8"))}
    order = 90

    @classmethod
    def active(cls, settings):
        return False

    @classmethod
    def label(cls, settings):
        return "int8" if settings.get("precision", "auto") == "int8" else None

    @classmethod
    def describe(cls, settings):
        return "precision int8 (linear layers)" if settings.get("precision", "auto") == "int8" else None


# ------------------------------------------------------------------------------------------- the chain
def rule_classes() -> list[type[DecodingRule]]:
    """Every registered rule class, in chain order (``order``, then name)."""
    return decoding_rules()


def rule_keys() -> dict[str, tuple[type[DecodingRule], Key]]:
    """``decode.*`` key -> (the rule owning it, its declaration), over every registered rule."""
    return decoding_rule_keys()


def settings_of(cfg) -> dict[str, Any]:
    """A decoding's settings as one flat dict: the DecodeConfig's fields and a user rule's keys."""
    import dataclasses
    return {**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}, **getattr(cfg, "extra", {})}


class Chain:
    """The active rules of a decoding (a DecodeConfig), in order; ``cfg`` None: only the rules without
    keys (<pad>/<bos> masking), as self-critical training samples and decodes its greedy baseline."""

    def __init__(self, cfg=None):
        self.settings = settings_of(cfg) if cfg is not None else {}
        classes = rule_classes()
        self.rules = [cls(self.settings) for cls in classes
                      if (cls.active(self.settings) if cfg is not None else not cls.keys)]
        self._lp = [r for r in self.rules if type(r).logprobs is not DecodingRule.logprobs]
        self._rank = [r for r in self.rules if type(r).rank is not DecodingRule.rank]

    def logprobs(self, lp: torch.Tensor, step: Step) -> torch.Tensor:
        for r in self._lp:
            lp = r.logprobs(lp, step)
        return lp

    def rank(self, score: torch.Tensor, step: Step) -> torch.Tensor:
        for r in self._rank:
            score = r.rank(score, step)
        return score

    @property
    def ranks(self) -> bool:
        """Whether any rule changes the beam ranking (else the rank is the summed log-probability)."""
        return bool(self._rank)
