"""Confidence intervals and significance tests over per-example scores, all from scipy.stats.

ci             95% bootstrap confidence interval of a mean (``scipy.stats.bootstrap``, percentile method,
               resampling test examples)
paired_test    is system A better than c x system B on the same examples? A paired permutation test
               (``scipy.stats.permutation_test``, ``permutation_type="samples"``: each example's pair of
               values is swapped at random, the sign-flip test of the mean paired difference), with a
               bootstrap CI of that mean difference
seed_test      for quantities with one value per training run (validation loss): Welch's t-test over seeds
               (``scipy.stats.ttest_ind``)

Every random draw uses a fixed seed, so a report rebuilt from the same records prints the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
ALPHA = 0.05
N_RESAMPLES = 9999
RANDOM_SEED = 12345


def _rng() -> np.random.Generator:
    return np.random.default_rng(RANDOM_SEED)


def ci(values, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES) -> tuple[float, float]:
    """Bootstrap CI of the mean of ``values`` (one per test example). Percentile method: BCa's
    jackknife costs n^2 memory on the 10k-example test sets some corpora have."""
    from scipy import stats
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1 or np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = stats.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                          method="percentile", vectorized=True, rng=_rng(), batch=max(1, 2_000_000 // x.size))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@dataclass
class Comparison:
    mean_a: float
    mean_b: float          # of the scaled system, c x B
    diff: float            # mean over pairs of a - c*b
    ci_low: float
    ci_high: float
    p: float               # two-sided
    n: int                 # pairs (examples x seeds)
    test: str

    def verdict(self, direction: str, alpha: float = ALPHA) -> str:
        """'holds' (significant in the claimed direction), 'reversed' (significant the other way) or
        'not shown'. ``direction``: '>' (A above c*B) or '<'."""
        if not np.isfinite(self.p) or self.p >= alpha or self.diff == 0:
            return "not shown"
        return "holds" if (self.diff > 0) == (direction == ">") else "reversed"


def paired_test(a, b, scale: float = 1.0, n_resamples: int = N_RESAMPLES) -> Comparison:
    """Paired comparison of per-example scores ``a`` and ``scale * b`` (same examples, same order)."""
    from scipy import stats
    a = np.asarray(a, dtype=float)
    b = scale * np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs the same examples on both sides ({a.size} vs {b.size} values)")
    d = a - b
    # no difference anywhere: nothing to test. A constant non-zero difference is tested like any other
    # (the sign-flip test gives its exact p = 2 / 2^n; the CI is that constant)
    if d.size < 2 or np.all(d == 0):
        return Comparison(float(a.mean()) if a.size else float("nan"), float(b.mean()) if b.size else float("nan"),
                          float(d.mean()) if d.size else 0.0, float(d.mean()) if d.size else 0.0,
                          float(d.mean()) if d.size else 0.0, 1.0 if d.size else float("nan"), int(d.size),
                          "paired permutation test (no difference on any example: p = 1)")
    res = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                                 n_resamples=n_resamples, vectorized=True, alternative="two-sided",
                                 rng=_rng())
    lo, hi = ci(d, n_resamples=n_resamples)
    return Comparison(float(a.mean()), float(b.mean()), float(d.mean()), lo, hi, float(res.pvalue), int(d.size),
                      f"paired permutation test, {n_resamples} resamples; 95% bootstrap CI of the mean difference")


def seed_test(a, b, scale: float = 1.0) -> Comparison:
    """Welch's t-test of per-run values (one per seed). Needs at least two seeds on each side."""
    from scipy import stats
    a = np.asarray(a, dtype=float)
    b = scale * np.asarray(b, dtype=float)
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return Comparison(float(a.mean()), float(b.mean()), diff, float("nan"), float("nan"), float("nan"),
                          int(min(a.size, b.size)), "no test: needs at least 2 seeds per run")
    res = stats.ttest_ind(a, b, equal_var=False)
    lo, hi = res.confidence_interval(CONFIDENCE)
    p = float(res.pvalue) if np.isfinite(res.pvalue) else (1.0 if diff == 0 else 0.0)
    return Comparison(float(a.mean()), float(b.mean()), diff, float(lo), float(hi), p, int(a.size + b.size),
                      "Welch's t-test over seeds; 95% CI of the difference of means")


def pair_by_seed(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]]) -> tuple[list[float], list[float]]:
    """Per-example values of two runs, {seed: {example id: value}}, as paired lists over example x seed.
    Seeds both runs have are paired seed with seed; otherwise (e.g. a deterministic baseline with one
    'seed' against a model with three) each seed of the run with more seeds is paired with the other
    run's mean over its seeds on that example. Examples missing on either side are left out."""
    common = sorted(set(a) & set(b))
    xs: list[float] = []
    ys: list[float] = []
    if common and (len(common) == len(a) == len(b)):
        for s in common:
            ids = [i for i in a[s] if i in b[s]]
            xs += [a[s][i] for i in ids]
            ys += [b[s][i] for i in ids]
        return xs, ys
    many, few, flip = (a, b, False) if len(a) >= len(b) else (b, a, True)
    ids_few = set.intersection(*(set(v) for v in few.values())) if few else set()
    mean_few = {i: float(np.mean([few[s][i] for s in few])) for i in ids_few}
    for s in sorted(many):
        ids = [i for i in many[s] if i in mean_few]
        xs += [many[s][i] for i in ids]
        ys += [mean_few[i] for i in ids]
    return (ys, xs) if flip else (xs, ys)
