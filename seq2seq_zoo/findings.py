"""Declared findings: published claims an experiment can test, written in its file and judged by
``zoo run`` / ``zoo report`` from the stored per-example scores.

    [[findings]]
    claim = "tmax > learned"                 # RUN [METRIC] (> | <) [C *] RUN [METRIC]
    metric = "rouge1"                        # default metric of both sides (default rouge1)
    source = "seed 003, Table 34"            # where the claim was made
    test_informed = true                     # optional: a choice behind it was made with test scores

    [[findings]]
    claim = "pg unk_ratio < 0.1 * bilstm unk_ratio"
    source = "See et al. 2017, section 7"

RUN is a run name of the file (without the ``-seedN`` suffix that ``seeds`` adds), ``RUN/DECODE`` for
a decoding variant, or ``RUN@init`` for the run that RUN started from (its ``train.init_from``, e.g.
"rl > rl@init": SCST raises ROUGE-1 over its starting checkpoint). Every claim is judged with the
training seed as the unit (Welch's t over per-seed means; a one-sample t against a deterministic
baseline; a paired t for ``RUN@init``), per-example metrics (ROUGE, BERTScore F1, repetition, UNK ratio,
length) over the same test examples, per-run quantities (``best_val_loss``; ``best_score``, the validation
score a run selected its checkpoint on) from one value per seed. See
``seq2seq_zoo.stats`` and docs/statistics.md.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

PER_RUN_METRICS = ("best_val_loss", "best_score")   # best_score: the validation score a run selected on


def known_metrics() -> tuple[str, ...]:
    """What a claim may compare: every per-example score a registered metric declares
    (``seq2seq_zoo.metrics.Column``, a user file's metric included), then the per-run quantities."""
    from seq2seq_zoo.registry import metric_columns
    return tuple(c.key for c in metric_columns("per_example")) + PER_RUN_METRICS
FINDING_KEYS = ("claim", "metric", "source", "note", "test_informed")

_NAME = r"[\w.-]+(?:/[\w.-]+|@init)?"
_NUM = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"
_CLAIM = re.compile(rf"^\s*(?P<a>{_NAME})(?:\s+(?P<ma>\w+))?\s*(?P<op>[<>])\s*(?:(?P<c>{_NUM})\s*\*\s*)?"
                    rf"(?P<b>{_NAME})(?:\s+(?P<mb>\w+))?\s*$")


@dataclass
class Finding:
    claim: str
    a: str            # run (or run/decode) on the left
    b: str            # run on the right
    op: str           # '>' or '<'
    metric: str
    scale: float = 1.0
    source: str = ""
    note: str = ""
    test_informed: bool = False   # a choice behind the claim (recipe, size, target) was made with test scores

    def to_dict(self) -> dict:
        return asdict(self)


def parse_claim(claim: str, metric: str = "rouge1") -> tuple[str, str, str, str, float]:
    """``"a > b"``, ``"a unk_ratio < 0.1 * b unk_ratio"`` -> (a, op, b, metric, scale). ValueError with
    the expected form otherwise."""
    m = _CLAIM.match(claim) if isinstance(claim, str) else None
    if not m:
        raise ValueError(f"cannot read claim {claim!r}: expected 'RUN [METRIC] > RUN [METRIC]' or "
                         "'RUN [METRIC] < C * RUN [METRIC]' (e.g. \"tmax > learned\", "
                         "\"pg unk_ratio < 0.1 * bilstm unk_ratio\")")
    ma, mb = m.group("ma"), m.group("mb")
    if ma and mb and ma != mb:
        raise ValueError(f"claim {claim!r} compares two metrics ({ma}, {mb}); compare one metric on both sides")
    metric = ma or mb or metric
    known = known_metrics()
    if metric not in known:
        from seq2seq_zoo.registry import did_you_mean
        raise ValueError(f"claim {claim!r}: unknown metric '{metric}'.{did_you_mean(metric, known)} "
                         f"Known: {', '.join(known)}")
    if m.group("a") == m.group("b"):
        raise ValueError(f"claim {claim!r} compares a run with itself")
    return m.group("a"), m.group("op"), m.group("b"), metric, float(m.group("c") or 1.0)


def parse_findings(entries, run_names: list[str], decodes: dict[str, tuple[str, ...] | None], fail) -> list[Finding]:
    """The ``[[findings]]`` entries of an experiment file, checked against its runs and its ``[[decode]]``
    entries ({name: the runs it decodes, None for every run}). ``fail(key, msg)`` returns the error to
    raise (it names the file and line)."""
    decode_names = list(decodes)
    from seq2seq_zoo.registry import did_you_mean
    if not isinstance(entries, list):
        raise fail("findings", "must be an array of tables ([[findings]])")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise fail("findings", "must be an array of tables ([[findings]])")
        for k in e:
            if k not in FINDING_KEYS:
                raise fail(f"findings[{i}].{k}", f"unknown key.{did_you_mean(k, FINDING_KEYS)} "
                           f"Valid: {', '.join(FINDING_KEYS)}")
        for k in ("source", "note", "metric"):
            if k in e and not isinstance(e[k], str):
                raise fail(f"findings[{i}].{k}", f"expected a string, got {e[k]!r}")
        if "test_informed" in e and not isinstance(e["test_informed"], bool):
            raise fail(f"findings[{i}].test_informed", f"expected true or false, got {e['test_informed']!r}")
        if "claim" not in e:
            raise fail(f"findings[{i}]", "every [[findings]] entry needs a claim, e.g. claim = \"a > b\"")
        try:
            a, op, b, metric, scale = parse_claim(e["claim"], e.get("metric", "rouge1"))
        except ValueError as err:
            raise fail(f"findings[{i}].claim", str(err)) from None
        for side in (a, b):
            run, _, dec = side.removesuffix("@init").partition("/")
            if run not in run_names:
                raise fail(f"findings[{i}].claim", f"no run named '{run}' in this file.{did_you_mean(run, run_names)} "
                           f"Runs: {', '.join(run_names)}")
            if dec and dec not in decode_names + ["default"]:
                raise fail(f"findings[{i}].claim", f"no [[decode]] entry named '{dec}'."
                           f"{did_you_mean(dec, decode_names)}")
            if dec in decodes and decodes[dec] is not None and run not in decodes[dec]:
                raise fail(f"findings[{i}].claim", f"[[decode]] '{dec}' does not decode run '{run}' (its runs: "
                           f"{', '.join(decodes[dec])}); add the run to its runs or compare another")
        out.append(Finding(e["claim"], a, b, op, metric, scale, e.get("source", ""), e.get("note", ""),
                           e.get("test_informed", False)))
    return out
