"""Training objectives. ``ce``: token cross-entropy with optional label smoothing (Szegedy et al. 2016),
plus any auxiliary losses a model reports (e.g. coverage). Other objectives (SCST) register here too."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from seq2seq_zoo.data.vocab import PAD_ID
from seq2seq_zoo.decode import rollout
from seq2seq_zoo.models.base import Rule, at_least, between, one_of
from seq2seq_zoo.models.base import targets_for, token_losses  # noqa: F401 - the loss the objectives use
from seq2seq_zoo.registry import register_objective
from seq2seq_zoo.train.rewards import RewardFunction, reward_problem, row_text


@dataclass(frozen=True)
class Option:
    """An option an objective owns: ``train.<objective>.<name>`` in experiment files (e.g. ``train.scst =
    { gamma = 0.9 }``), checked against this declaration when a file is read. ``type`` defaults to the
    default's type; ``rule(value)`` says what is wrong with a value (or None). ``stored``: the flat
    ``train.*`` key that spec.json and run records keep it under, where the option predates its table
    (SCST's ``rl_*``: the stored spelling, so every committed record keeps its bytes and its identity);
    the old spelling is read in experiment files too."""
    default: Any
    doc: str = ""
    rule: Callable[[Any], str | None] | None = None
    type: Any = None
    stored: str | None = None

    @property
    def kind(self):
        """The type a value must have."""
        return type(self.default) if self.type is None else self.type

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` by the option's rule (None: nothing; the type is checked apart)."""
        if self.rule is None:
            return None
        problem = self.rule(value)
        # a Rule (models.base) says what the value must be; a plain check returns the whole message
        return f"{value!r} {problem}" if problem and hasattr(self.rule, "says") else problem


class Objective:
    """What the loop trains on. ``objective(model, batch) -> (loss, stats)``: the loss to minimise (a
    scalar tensor) and ``stats`` with at least "tokens" (target tokens the loss averages over, the
    weight of this batch in the logged train loss and in data-parallel training) and "nll_sum". It
    receives the model itself, never a data-parallel wrapper: the loop runs it inside the wrapper's
    forward. ``options`` declares the options it owns (name -> ``Option``), set in an experiment file as
    its table ``train.<registered name>``: ``from_config`` builds it with ``label_smoothing``, the
    vocabulary and those options only (as keyword arguments), never the whole training config."""

    progress: float = 0.0  # share of the run done, set by the loop before each batch
    options: dict[str, Option] = {}   # the options this objective owns, by the keyword argument they arrive as

    def __init__(self, label_smoothing: float = 0.0, vocab=None, **_):
        self.label_smoothing = label_smoothing

    @classmethod
    def from_config(cls, cfg, vocab=None) -> "Objective":
        """The objective with ``cfg.label_smoothing``, ``vocab`` and the options it declares."""
        return cls(label_smoothing=cfg.label_smoothing, vocab=vocab, **cls.settings(cfg))

    @classmethod
    def settings(cls, cfg) -> dict[str, Any]:
        """Its options' values in a training config (``TrainConfig``), by option name: from an option's stored
        field, else from the objective's table (``cfg.objectives``), else the option's default."""
        own = getattr(cfg, "objectives", {}).get(getattr(cls, "_registry_name", None), {})
        return {k: getattr(cfg, o.stored) if o.stored else own.get(k, o.default) for k, o in cls.options.items()}

    def set_progress(self, fraction: float) -> None:
        """The loop tells the objective how far the run is (0 -> 1), e.g. for SCST's gamma ramp."""
        self.progress = fraction

    def summary(self) -> dict:
        """Statistics for the run record (``train.objective_stats``); none by default."""
        return {}

    def __call__(self, model, batch) -> tuple[torch.Tensor, dict[str, float]]:  # pragma: no cover - abstract
        raise NotImplementedError


@register_objective("ce")
class CrossEntropy(Objective):
    """Teacher-forced token cross-entropy (+ label smoothing) plus the model's auxiliary losses."""

    def __call__(self, model, batch) -> tuple[torch.Tensor, dict[str, float]]:
        out = model(batch)
        loss_sum, nll_sum, n = out.token_losses(batch.tgt_out, self.label_smoothing, model.vocab_size)
        loss = loss_sum / max(n, 1)
        stats = {"nll_sum": float(nll_sum.detach()), "tokens": n}
        for name, aux in out.aux_losses.items():
            loss = loss + aux
            stats[name] = float(aux.detach())
        return loss, stats


@torch.no_grad()
def greedy_ids(model, batch, max_len: int) -> torch.Tensor:
    """Greedy decode as a (B, T) tensor of ids, PAD after each sequence's EOS (EOS kept)."""
    was = model.training
    model.eval()
    try:
        ids, _ = rollout(model, batch, max_len, sample=False)
    finally:
        model.train(was)
    return ids


def scst_loss(logp: torch.Tensor, sample_ids: torch.Tensor, r_sample: torch.Tensor,
              r_greedy: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    """loss_rl = mean_b (r(y^) - r(y^s)) * sum_t log p(y^s_t) (Paulus et al. 2018, eq. 15; Rennie et al.
    2017), over each sample's real tokens (its EOS included, padding after it excluded); ``reduce =
    "mean"`` takes mean_t instead (the records made before the correctness fixes). Minimising it raises log p(y^s)
    when the sample beats the greedy baseline (r(y^s) > r(y^)) and lowers it otherwise."""
    real = (sample_ids != PAD_ID).float()
    seq_logp = (logp * real).sum(1)
    if reduce == "mean":
        seq_logp = seq_logp / real.sum(1).clamp(min=1)
    elif reduce != "sum":
        raise ValueError(f"unknown train.scst.logp {reduce!r}")
    return ((r_greedy - r_sample).to(seq_logp.dtype) * seq_logp).mean()


@register_objective("scst")
class SelfCritical(Objective):
    """Self-critical policy gradient (Rennie et al. 2017) with the mixed loss of Paulus et al. (2018):

        loss = gamma * loss_rl + (1 - gamma) * loss_ml                      (eq. 16)

    on one scale: both terms are per-sequence sums over tokens, averaged over the batch, as in the
    paper's eq. 14 (loss_ml = -sum_t log p(y*_t)) and eq. 15 (loss_rl = (r(y^) - r(y^s)) sum_t log
    p(y^s_t)). Its options are the table ``train.scst`` (``options`` below). ``ml_scale = "token"`` takes loss_ml as the mean over target tokens instead (the
    records made before this rule: at ~22-token summaries the ML term then weighs ~1/22 of the paper's).
    The model's auxiliary losses (coverage) are added to loss_ml as they are, as in cross-entropy training.

    y^s is sampled (multinomial, temperature 1, <pad> and <bos> masked out) and y^ decoded greedily from the same model in the same
    step; the reward is ``reward`` against the first reference. ``gamma`` is ramped linearly to
    ``gamma_end`` over the run if that is set (the seed: 0.9 -> 1.0), or over its first ``gamma_ramp``
    fraction and then held there. Any model
    with the step interface works; the loop passes it the vocabulary to turn ids into text.
    """

    # train.scst = { ... } in experiment files; records keep each as its stored train.rl_* key
    # (train.scst.max_len also bounds the greedy decodes of decode-based validation)
    options = {
        "reward": Option("rouge1", 'the reward: a ROUGE F1 or a mix, "0.5*rouge1+0.5*rougeL"', reward_problem,
                         stored="rl_reward"),
        "gamma": Option(0.9984, "loss = gamma * L_rl + (1 - gamma) * L_ml", between(0, 1, closed=True),
                        stored="rl_gamma"),
        "gamma_end": Option(None, "ramp gamma linearly to this over the run", between(0, 1, closed=True),
                            type=float | None, stored="rl_gamma_end"),
        "gamma_ramp": Option(1.0, "the fraction of the run the ramp takes; gamma then holds at gamma_end for "
                             "the rest", Rule(lambda v: 0 < v <= 1, "must be in (0, 1]: the fraction of the run "
                                              "the ramp takes"), stored="rl_gamma_ramp"),
        "max_len": Option(48, "longest sampled / greedy sequence (also of decode-based validation)",
                          Rule(lambda v: 1 <= v <= 10_000, "must be >= 1 and <= 10000"), stored="rl_max_len"),
        "repetition_penalty": Option(0.0, "reward -= this * repetition ratio of the sequence", at_least(0),
                                     stored="rl_repetition_penalty"),
        "logp": Option("sum", "log p(sample) summed over tokens (Paulus eq. 15) | mean", one_of("sum", "mean"),
                       stored="rl_logp"),
        "ml_scale": Option("sequence", "L_ml summed over tokens, mean over batch (Paulus eq. 14, the scale of "
                           "L_rl) | token: mean over target tokens", one_of("sequence", "token"),
                           stored="rl_ml_scale"),
    }

    def __init__(self, label_smoothing: float = 0.0, vocab=None, *, reward: str, gamma: float,
                 gamma_end: float | None, gamma_ramp: float, max_len: int, repetition_penalty: float,
                 logp: str, ml_scale: str, **_):
        super().__init__(label_smoothing)
        if vocab is None:
            raise ValueError("the scst objective needs the vocabulary")
        self.ce = CrossEntropy(label_smoothing)
        self.vocab = vocab
        self.gamma0 = gamma
        self.gamma1 = gamma if gamma_end is None else gamma_end
        self.ramp = gamma_ramp
        self.max_len = max_len
        self.logp_reduce = logp
        self.ml_scale = ml_scale
        if self.ml_scale not in ("sequence", "token"):
            raise ValueError(f"unknown train.scst.ml_scale {self.ml_scale!r}")
        self.reward = RewardFunction(reward, repetition_penalty)
        self.totals = {"steps": 0, "reward_seconds": 0.0, "sample_reward": 0.0, "greedy_reward": 0.0,
                       "examples": 0, "sample_len": 0.0}

    @property
    def gamma(self) -> float:
        return self.gamma0 + (self.gamma1 - self.gamma0) * min(max(self.progress / self.ramp, 0.0), 1.0)

    def rewards(self, ids: torch.Tensor, batch) -> torch.Tensor:
        texts = [row_text(self.vocab, row, oovs) for row, oovs in zip(ids.tolist(), batch.oovs)]
        return torch.tensor(self.reward(texts, [r[0] for r in batch.references]), device=ids.device)

    def __call__(self, model, batch) -> tuple[torch.Tensor, dict[str, float]]:
        gamma = self.gamma
        greedy = greedy_ids(model, batch, self.max_len)
        sample, logp = rollout(model, batch, self.max_len, sample=True)
        t0 = time.perf_counter()
        r_s, r_g = self.rewards(sample, batch), self.rewards(greedy, batch)
        self.totals["reward_seconds"] += time.perf_counter() - t0
        loss_rl = scst_loss(logp, sample, r_s, r_g, self.logp_reduce)
        if gamma < 1.0:
            loss_ml, stats = self.ml_loss(model, batch)
            loss = gamma * loss_rl + (1.0 - gamma) * loss_ml
        else:
            tokens = int((batch.tgt_out != PAD_ID).sum())
            loss, stats = loss_rl, {"nll_sum": 0.0, "tokens": tokens}
        t = self.totals
        t["steps"] += 1
        t["examples"] += batch.size
        t["sample_reward"] += float(r_s.sum())
        t["greedy_reward"] += float(r_g.sum())
        t["sample_len"] += float((sample != PAD_ID).sum())
        stats.update(loss_rl=float(loss_rl.detach()), gamma=gamma)
        return loss, stats

    def ml_loss(self, model, batch) -> tuple[torch.Tensor, dict[str, float]]:
        """loss_ml of eq. 14: the teacher-forced token losses (label smoothing included) summed over each
        target sequence and averaged over the batch (``ml_scale = "token"``: averaged over tokens),
        plus the model's auxiliary losses."""
        if self.ml_scale == "token":
            return self.ce(model, batch)
        out = model(batch)
        loss_sum, nll_sum, n = out.token_losses(batch.tgt_out, self.label_smoothing, model.vocab_size)
        loss = loss_sum / max(batch.tgt_out.size(0), 1)
        stats = {"nll_sum": float(nll_sum.detach()), "tokens": n}
        for name, aux in out.aux_losses.items():
            loss = loss + aux
            stats[name] = float(aux.detach())
        return loss, stats

    def summary(self) -> dict[str, float]:
        t, n = self.totals, max(self.totals["examples"], 1)
        return {"steps": t["steps"], "reward_seconds": t["reward_seconds"], "mean_sample_reward": t["sample_reward"] / n,
                "mean_greedy_reward": t["greedy_reward"] / n, "mean_sample_len": t["sample_len"] / n,
                "gamma_start": self.gamma0, "gamma_end": self.gamma1, "gamma_ramp": self.ramp,
                "rl_logp": self.logp_reduce,
                "rl_ml_scale": self.ml_scale,
                "sampling": "multinomial, temperature 1, <pad>/<bos> masked out"}

