"""What a metric declares about itself, and the one evaluator that runs the requested metrics.

A metric is a registered callable ``(predictions, references, *, per_example=None, **options) ->
(scores, settings)``. Its ``Column`` declarations say what each score key is: its label in the tables,
whether a per-example value exists (``<run>/scores.jsonl``, so CIs and declared findings can use it),
whether higher is better, whether the table gives it a 95% CI, and whether it can pick the best
checkpoint (``train.val_metric``) or be an SCST reward term (``train.scst.reward``). The tables, CIs, findings,
validation selection and rewards read these declarations, so a metric in a user file (``--models PATH``)
is shown and usable like the built-in ones::

    @register_metric("distinct", columns=[Column("distinct", "distinct", per_example=True, val_metric=True)])
    def distinct(predictions, references, *, per_example=None, **_): ...
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from seq2seq_zoo.registry import METRICS, metric_columns as columns  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Column:
    key: str                       # the key in the metric's scores (and per-example values)
    label: str                     # the column's header in the tables
    per_example: bool = False      # the metric also gives one value per example (per_example[key])
    higher_is_better: bool = True
    ci: bool = False               # the grouped table shows its 95% CI (needs per_example)
    val_metric: bool = False       # can be train.val_metric (needs per_example and higher_is_better)
    reward: bool = False           # can be a term of an SCST reward (needs per_example)
    table: bool = True             # a column of the tables (False: kept in the record only)
    digits: int | None = None      # decimals in the tables (None: the table's default)
    scale: float = 1.0             # table value = scale x the 0-1 score validation and rewards use

    def __post_init__(self):
        needs = [flag for flag in ("ci", "val_metric", "reward") if getattr(self, flag)]
        if needs and not self.per_example:
            raise ValueError(f"metric column {self.key!r}: {', '.join(needs)} needs per_example=True")
        if self.val_metric and not self.higher_is_better:
            raise ValueError(f"metric column {self.key!r}: a val_metric column must be higher-is-better")


def metric_of(key: str) -> str:
    """The registered metric that declares column ``key``."""
    for name in METRICS.names():
        if any(c.key == key for c in getattr(METRICS.get(name), "columns", ())):
            return name
    raise KeyError(f"no registered metric declares the column {key!r}")


def scale_of(key: str, default: float = 100.0) -> float:
    """How a 0-1 validation or reward score of column ``key`` is shown (its declared ``scale``: ROUGE's F1
    x 100); ``default`` for a key no loaded metric declares (a record read without its metric's file)."""
    return next((c.scale for c in columns() if c.key == key), default)


def sentence_scorer(keys: Sequence[str], **options) -> Callable[[Sequence[str], Sequence[str]], dict[str, list[float]]]:
    """A scorer of hypotheses against one reference each: ``(hyps, refs) -> {key: [0-1 score per pair]}``
    for the declared columns ``keys`` (validation selection and SCST rewards). A metric may declare a
    faster ``sentence_scores(keys, **options)`` of its own (ROUGE does); otherwise its per-example values
    divided by the column's ``scale`` are used."""
    by_metric: dict[str, list[str]] = {}
    for k in keys:
        by_metric.setdefault(metric_of(k), []).append(k)
    parts = []
    for name, ks in by_metric.items():
        metric = METRICS.get(name)
        own = getattr(metric, "sentence_scores", None)
        if own is not None:
            parts.append(own(ks, **options))
        else:
            scale = {c.key: c.scale for c in metric.columns}
            parts.append(lambda h, r, metric=metric, ks=ks, scale=scale: _per_example(metric, ks, scale, h, r,
                                                                                     options))

    def score(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for part in parts:
            out.update(part(hyps, refs))
        return out
    return score


def _per_example(metric, keys, scale, hyps, refs, options) -> dict[str, list[float]]:
    per: dict[str, list[float]] = {}
    metric(list(hyps), [[r] for r in refs], per_example=per, **options)
    return {k: [v / scale[k] for v in per[k]] for k in keys}


def evaluate(predictions: list[str], references: list[list[str]], metrics: list[str],
             per_example: dict | None = None, config=None, **options):
    """All requested metrics: (scores, settings per metric). ``per_example`` (a dict) receives
    {name: [value per example]} from every metric that has per-example values. ``config``: a run's
    ``eval`` settings; each metric gets from it only the options it declares (``register_metric``'s
    ``options``). ``options`` go to every metric (e.g. ``device``)."""
    scores, settings = {}, {}
    for name in dict.fromkeys(list(metrics) + ["length"]):
        metric = METRICS.get(name)
        own = {kw: getattr(config, key) for key, kw in getattr(metric, "options", {}).items()} if config else {}
        s, st = metric(predictions, references, per_example=per_example, **options, **own)
        scores.update(s)
        settings[name] = st
    return scores, settings
