"""Confidence intervals and significance tests over per-example scores, all from scipy.stats.

ci             95% bootstrap confidence interval of a mean (``scipy.stats.bootstrap``, percentile method,
               resampling test examples)
paired_test    is system A better than c x system B on the same examples? A paired permutation test
               (``scipy.stats.permutation_test``, ``permutation_type="samples"``: each example's pair of
               values is swapped at random, the sign-flip test of the mean paired difference), with a
               bootstrap CI of that mean difference
seed_test      for quantities with one value per training run (validation loss): Welch's t-test over seeds
               (``scipy.stats.ttest_ind``)
method_test    is method A better than method B? The training seed is the unit: Welch's t over the per-seed
               means (a one-sample t against a deterministic baseline, a paired t over matched seeds),
               with the exact permutation p over seed labels, the smallest p that permutation can reach,
               and a two-level bootstrap CI (seeds, then examples paired across the two arms)
group_ci       a table cell's CI: the same two-level bootstrap of one run's mean over seeds and examples
seeds_for_power  seeds per arm for a given power (noncentral t, ``scipy.stats.nct``)
factor_adjusted  the same seed-level difference with a second factor of the seeds (the training precision)
               in the model: ordinary least squares over the per-seed values (``statsmodels`` OLS)

Every random draw uses a fixed seed, so a report rebuilt from the same records prints the same numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
ALPHA = 0.05
N_RESAMPLES = 9999
TABLE_RESAMPLES = 2000   # the tables' CIs (and every copy of them, e.g. a model card); the findings' tests use N_RESAMPLES
RANDOM_SEED = 12345


def verdict_of(p: float, diff: float, direction: str, alpha: float = ALPHA) -> str:
    """'holds' (significant at ``alpha`` in the claimed direction), 'reversed' (significant the other way)
    or 'not shown' (also for a p that could not be computed). ``direction``: '>' (A above c*B) or '<'."""
    if not np.isfinite(p) or p >= alpha or diff == 0:
        return "not shown"
    return "holds" if (diff > 0) == (direction == ">") else "reversed"


def seed_values(A, B, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-seed values of A and of c x B: each row's mean over the test examples (seeds x examples), or the
    values themselves (one per seed)."""
    A, B = np.asarray(A, dtype=float), np.asarray(B, dtype=float)
    return A.mean(axis=1) if A.ndim == 2 else A, scale * (B.mean(axis=1) if B.ndim == 2 else B)


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
        return verdict_of(self.p, self.diff, direction, alpha)


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
    """Per-example values of two runs, {seed: {example id: value}}, as paired lists (the pooled test's
    pairs). When both runs have the same seeds they are paired seed with seed (example x seed);
    otherwise (e.g. a deterministic baseline with one 'seed' against a model with three, or 3 seeds
    against 2) each side is its mean over seeds on each example, one pair per example: a seed is never
    paired with the other side's mean, which would count the mean once per seed. Examples missing on
    either side are left out."""
    common = sorted(set(a) & set(b))
    xs: list[float] = []
    ys: list[float] = []
    if common and (len(common) == len(a) == len(b)):
        for s in common:
            ids = [i for i in a[s] if i in b[s]]
            xs += [a[s][i] for i in ids]
            ys += [b[s][i] for i in ids]
        return xs, ys
    ids_a = set.intersection(*(set(v) for v in a.values())) if a else set()
    ids_b = set.intersection(*(set(v) for v in b.values())) if b else set()
    ids = [i for i in (next(iter(a.values())) if a else {}) if i in ids_a and i in ids_b]
    xs = [float(np.mean([a[s][i] for s in a])) for i in ids]
    ys = [float(np.mean([b[s][i] for s in b])) for i in ids]
    return xs, ys


# ------------------------------------------------------------------------- method level: seeds as the unit
TWO_LEVEL_RESAMPLES = 4999
POOLED_LABEL = "pooled example x seed (these trained runs on this test set)"


def min_permutation_p(n_a: int, n_b: int | None = None) -> float:
    """The smallest two-sided p an exact permutation over seed labels can give (twice the smaller one-sided
    p, as scipy.stats.permutation_test): 2 / C(n_a + n_b, n_a); with ``n_b`` None (one arm against a fixed
    value, or matched pairs) the sign-flip test's 2 / 2^n_a."""
    from math import comb
    if n_b is None:
        return min(1.0, 2.0 / 2 ** n_a) if n_a else 1.0
    if not n_a or not n_b:
        return 1.0
    return min(1.0, 2.0 / comb(n_a + n_b, n_a))


def _resample_weights(rng, n: int, size: int) -> np.ndarray:
    """``size`` bootstrap resamples of n items as weights (counts / n), shape (size, n)."""
    idx = rng.integers(0, n, size=(size, n)) + (np.arange(size) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=size * n).reshape(size, n) / n


def _two_level(A: np.ndarray, B: np.ndarray | None, scale: float, paired: bool, n_resamples: int,
               confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile CI of mean(A) - scale * mean(B) (or of mean(A) with B None): each resample draws the
    seeds of each arm with replacement (matched seeds as pairs), then the examples with replacement,
    the same examples for both arms. A (seeds x examples) or (seeds,) for per-run values."""
    rng = _rng()
    out = np.empty(n_resamples)
    batch = max(1, min(n_resamples, 4_000_000 // max(1, A.shape[-1] if A.ndim == 2 else 1)))
    for start in range(0, n_resamples, batch):
        m = min(batch, n_resamples - start)
        wa = _resample_weights(rng, A.shape[0], m)
        if B is not None:
            wb = wa if paired else _resample_weights(rng, B.shape[0], m)
        if A.ndim == 2:
            we = _resample_weights(rng, A.shape[1], m)
            va = np.einsum("bs,se,be->b", wa, A, we)
            vb = np.einsum("bs,se,be->b", wb, B, we) if B is not None else 0.0
        else:
            va = wa @ A
            vb = wb @ B if B is not None else 0.0
        out[start:start + m] = va - scale * vb
    a = (1 - confidence) / 2
    lo, hi = np.quantile(out, [a, 1 - a])
    return float(lo), float(hi)


def group_ci(values, n_resamples: int = 2000, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """95% CI of a run's mean over seeds and test examples: a two-level bootstrap (seeds with replacement,
    then examples), so the seed-to-seed variance is part of the interval. ``values``: seeds x examples
    (the same examples in every row). One seed: the examples alone."""
    A = np.atleast_2d(np.asarray(values, dtype=float))
    if A.size == 0:
        return float("nan"), float("nan")
    if np.all(A == A.flat[0]):
        return float(A.flat[0]), float(A.flat[0])
    return _two_level(A, None, 1.0, False, n_resamples, confidence)


@dataclass
class SeedComparison:
    mean_a: float
    mean_b: float          # of the scaled side, c x B
    diff: float            # mean(A) - c * mean(B), over seeds (and examples)
    ci_low: float          # two-level bootstrap CI of diff (seeds, then examples)
    ci_high: float
    p: float               # the t-test's two-sided p (nan: too few seeds)
    n_a: int               # seeds of A (1 for a deterministic side)
    n_b: int
    test: str
    perm_p: float          # exact permutation over seed labels (sign flips for one arm / matched pairs)
    perm_min_p: float      # the smallest p that permutation can reach with these seeds
    sd_a: float = float("nan")   # sd of the per-seed means (nan: one seed or deterministic)
    sd_b: float = float("nan")
    t_ci: tuple[float, float] = (float("nan"), float("nan"))   # the t-test's 95% CI of diff
    sd_pairs: float = float("nan")   # matched seeds: sd of the per-seed differences

    @property
    def too_few_seeds(self) -> bool:
        return not np.isfinite(self.p)

    def verdict(self, direction: str, alpha: float = ALPHA) -> str:
        """'holds' / 'reversed' (significant at ``alpha`` in / against the claimed direction), 'not shown',
        or 'too few seeds' (the seed-level test cannot be computed: a trained arm with fewer than 2 seeds).
        A significant test whose two-level 95% interval still holds 0 is 'not shown': the verdict needs
        both, so the interval a table prints beside it can never contradict it (``interval_agrees``)."""
        if self.too_few_seeds:
            return "too few seeds"
        v = verdict_of(self.p, self.diff, direction, alpha)
        return v if v == "not shown" or self.interval_agrees else "not shown"

    @property
    def interval_agrees(self) -> bool:
        """The two-level bootstrap interval excludes 0 on the side of the difference (or could not be
        computed, e.g. two deterministic sides, where the test alone decides)."""
        if not (np.isfinite(self.ci_low) and np.isfinite(self.ci_high)):
            return True
        return self.ci_low > 0 if self.diff > 0 else self.ci_high < 0


def _t_p(res, diff: float) -> float:
    p = float(res.pvalue)
    return p if np.isfinite(p) else (1.0 if diff == 0 else 0.0)   # zero spread on both sides


def exact_permutation_p(x, y=None) -> float:
    """Two-sided exact permutation p of a difference of means: every split of the pooled values of ``x`` and
    ``y`` into groups of their sizes (labels exchangeable under the null), or with ``y`` None every sign
    flip of ``x`` (one sample against 0, or matched differences). The same p as
    ``scipy.stats.permutation_test(..., n_resamples=np.inf)``, enumerated with numpy (the seed counts here
    are small: C(10, 5) = 252 splits), which a simulation of hundreds of comparisons needs."""
    from itertools import combinations, product
    x = np.asarray(x, dtype=float)
    eps = 1e-12 * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)
    if y is None:
        if x.size == 0 or np.all(x == 0):
            return 1.0
        signs = np.array(list(product((1.0, -1.0), repeat=x.size)))
        return _two_sided(signs @ x / x.size, x.mean(), eps)
    y = np.asarray(y, dtype=float)
    z = np.concatenate([x, y])
    if np.ptp(z) == 0:
        return 1.0
    idx = list(combinations(range(z.size), x.size))
    masks = np.zeros((len(idx), z.size), dtype=bool)
    masks[np.repeat(np.arange(len(idx)), x.size), np.array(idx).ravel()] = True
    null = (masks @ z) / x.size - ((~masks) @ z) / y.size
    return _two_sided(null, x.mean() - y.mean(), eps)


def _two_sided(null: np.ndarray, obs: float, eps: float) -> float:
    """scipy.stats.permutation_test's two-sided p: twice the smaller one-sided p, at most 1."""
    return float(min(1.0, 2 * min(np.mean(null >= obs - eps), np.mean(null <= obs + eps))))


def seed_level_p(ma, mb, fixed_b: bool = False, paired: bool = False) -> np.ndarray:
    """The method-level t-test's two-sided p from per-seed values, vectorised over leading axes (seeds on
    the last axis): Welch's t (``scipy.stats.ttest_ind(equal_var=False)``), a one-sample t of ``ma``
    against ``mb[..., 0]`` (``fixed_b``: a deterministic side) or a paired t (``paired``). ``method_test``
    uses this for one comparison; simulations call it once for thousands."""
    from scipy import stats
    ma, mb = np.asarray(ma, dtype=float), np.asarray(mb, dtype=float)
    if fixed_b:
        return np.asarray(stats.ttest_1samp(ma - mb[..., :1], 0.0, axis=-1).pvalue)
    if paired:
        return np.asarray(stats.ttest_rel(ma, mb, axis=-1).pvalue)
    return np.asarray(stats.ttest_ind(ma, mb, equal_var=False, axis=-1).pvalue)


def _t_ci(res, sign: float = 1.0) -> tuple[float, float]:
    lo, hi = res.confidence_interval(CONFIDENCE)
    lo, hi = (float(lo), float(hi)) if sign > 0 else (-float(hi), -float(lo))
    return (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else (float("nan"), float("nan"))


def method_test(A, B, scale: float = 1.0, fixed_a: bool = False, fixed_b: bool = False, paired: bool = False,
                n_resamples: int = TWO_LEVEL_RESAMPLES) -> SeedComparison:
    """Method A against method B with the training seed as the unit.

    ``A``, ``B``: per seed, the values on the same test examples (seeds x examples, columns aligned), or
    one value per seed (a per-run quantity such as validation loss). ``fixed_b``: B is deterministic (a
    LEAD row: its one run is exact, so A's seed spread is the only seed variance): a one-sample t of A's
    seed means against it. ``paired``: row s of A and row s of B share an initialisation (``RUN@init``):
    a paired t. Otherwise Welch's t over the per-seed means (``scipy.stats.ttest_ind(equal_var=False)``).
    """
    from scipy import stats
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    ma, mb = seed_values(A, B, scale)
    if fixed_b:
        mb = mb[:1]
        B = B[:1]
    if fixed_a:
        ma = ma[:1]
        A = A[:1]
    na, nb = ma.size, mb.size
    diff = float(ma.mean() - mb.mean())
    sd = lambda v, fixed: float(np.std(v, ddof=1)) if v.size > 1 and not fixed else float("nan")  # noqa: E731
    nan = float("nan")
    tci, sd_pairs = (nan, nan), nan
    if fixed_b or fixed_a:
        free, value, n = (ma, float(mb[0]), na) if fixed_b else (mb, float(ma[0]), nb)
        test = "one-sample t of the trained side's seed means against the deterministic baseline"
        if fixed_a and fixed_b:
            p, perm, pmin, test = (1.0 if diff == 0 else 0.0), nan, nan, "two deterministic runs: no seed variance"
        elif n < 2:
            p, perm, pmin = nan, nan, min_permutation_p(n)
        else:
            d = free - value
            res = stats.ttest_1samp(d, 0.0)
            p = _t_p(res, diff)
            tci = _t_ci(res, -1.0 if fixed_a else 1.0)
            perm = exact_permutation_p(d)
            pmin = min_permutation_p(n)
    elif paired:
        test = "paired t over matched seeds (each seed against its own starting run)"
        if na != nb:
            raise ValueError(f"matched seeds need the same number of runs on both sides ({na} vs {nb})")
        if na < 2:
            p, perm, pmin = nan, nan, min_permutation_p(na)
        else:
            d = ma - mb
            res = stats.ttest_rel(ma, mb)
            p = _t_p(res, diff)
            tci = _t_ci(res)
            sd_pairs = float(np.std(d, ddof=1))
            perm = exact_permutation_p(d)
            pmin = min_permutation_p(na)
    else:
        test = "Welch's t over per-seed means"
        pmin = min_permutation_p(na, nb)
        if na < 2 or nb < 2:
            p, perm = nan, nan
        else:
            res = stats.ttest_ind(ma, mb, equal_var=False)
            p = _t_p(res, diff)
            tci = _t_ci(res)
            perm = exact_permutation_p(ma, mb)
    if A.ndim == 2 and B.ndim == 2 and A.shape[1] != B.shape[1]:
        raise ValueError(f"method test needs the same examples on both sides ({A.shape[1]} vs {B.shape[1]})")
    if n_resamples and A.size and B.size and (A.ndim == 2 or A.shape[0] > 1 or B.shape[0] > 1):
        lo, hi = _two_level(A, B, scale, paired, n_resamples)
    else:   # n_resamples = 0: no interval (simulations); one value on each side: the difference itself
        lo = hi = diff if n_resamples else nan
    return SeedComparison(float(ma.mean()), float(mb.mean()), diff, lo, hi, p, na, nb, test, perm, pmin,
                          sd(ma, fixed_a), sd(mb, fixed_b), tci, sd_pairs)


def power(n: int, d: float, alpha: float = ALPHA, one_sample: bool = False) -> float:
    """Power of the two-sided t-test at standardised effect ``d`` (difference / seed sd) with ``n`` seeds
    per arm (Welch with equal arms ~ Student's t, df 2n - 2), or ``n`` seeds against a fixed value
    (one-sample t, df n - 1): the noncentral t distribution (``scipy.stats.nct``)."""
    from scipy import stats
    if n < 2:
        return float("nan")
    df, nc = (n - 1, d * np.sqrt(n)) if one_sample else (2 * n - 2, d * np.sqrt(n / 2))
    t = stats.t.ppf(1 - alpha / 2, df)
    pw = float(stats.nct.sf(t, df, abs(nc)) + stats.nct.cdf(-t, df, abs(nc)))
    return pw if np.isfinite(pw) else float(stats.norm.sf(t - abs(nc)))   # nct fails far in the tail


def seeds_for_power(d: float, target: float = 0.8, alpha: float = ALPHA, one_sample: bool = False,
                    limit: int = 1000) -> int | None:
    """The smallest number of seeds per arm giving ``target`` power at standardised effect ``d``
    (None: more than ``limit``, or no effect). Agrees with statsmodels' ``TTestIndPower().solve_power``
    rounded up (d = 0.5: 64; d = 1: 17)."""
    d = abs(float(d))
    if not np.isfinite(d) or d == 0:
        return None
    lo, hi = 2, limit
    if power(hi, d, alpha, one_sample) < target:
        return None
    while lo < hi:   # power grows with n
        mid = (lo + hi) // 2
        if power(mid, d, alpha, one_sample) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class AdjustedComparison:
    """The seed-level difference with a factor of the seeds (the training precision) held fixed."""
    diff: float                # A - c x B with the factor in the model
    ci_low: float              # its 95% t interval
    ci_high: float
    p: float                   # two-sided t-test of the difference
    df: int                    # residual degrees of freedom
    factor_p: float            # F-test that the factor shifts the values at all
    shift: float | None        # two levels: mean of the second level minus the first, within arms
    levels: tuple[str, ...]    # the factor's levels, sorted
    p_plain: float = float("nan")      # the same least squares without the factor (Student's t for two
    diff_plain: float = float("nan")   # arms, the one-sample t otherwise): what the factor alone changes

    def verdict(self, direction: str, alpha: float = ALPHA) -> str:
        return verdict_of(self.p, self.diff, direction, alpha)


def factor_adjusted(ma, mb, levels_a, levels_b=None, fixed_b: bool = False,
                    paired: bool = False) -> AdjustedComparison | str:
    """``method_test``'s seed-level comparison with a factor of the seeds in the model: ordinary least
    squares (``statsmodels.api.OLS``) of the per-seed values on the arm and the factor's levels
    (sum-to-zero coded, so the factor adds no weight to either level).

    ``ma``, ``mb``: per-seed values (``mb`` already scaled by the claim's c); ``levels_a``/``levels_b``:
    each seed's level (its training precision). Two arms: y = mu + delta [seed of A] + factor, and delta is
    the difference with the factor held fixed (in a balanced design the mean of the within-level
    differences). ``fixed_b`` (B deterministic, ``mb`` its one value) and ``paired`` (matched seeds, the
    level of a pair being its two seeds' levels): y = the seed's difference, y = delta + factor, and
    delta is the mean of the level means, each level weighted alike. ``p_plain`` is the same least squares
    without the factor (for two arms Student's t, which pools the arms' variances where ``method_test``'s
    Welch's t does not), so the two differ by the factor alone. Returns why not instead (a string)
    when the factor has one level, is confounded with the arm, or leaves no residual degree of freedom.
    """
    import statsmodels.api as sm
    ma = np.asarray(ma, dtype=float)
    mb = np.asarray(mb, dtype=float)
    if fixed_b:
        y, lv, arm = ma - mb.ravel()[0], list(levels_a), None
    elif paired:
        y, arm = ma - mb, None
        lv = [a if a == b else f"{a}/{b}" for a, b in zip(levels_a, levels_b)]
    else:
        y = np.concatenate([ma, mb])
        lv = list(levels_a) + list(levels_b)
        arm = np.r_[np.ones(ma.size), np.zeros(mb.size)]
    names = tuple(sorted(set(lv)))
    if len(names) < 2:
        return "one level"
    # sum-to-zero coding: level j < k-1 -> e_j, the last level -> -1 in every column; with two levels
    # the column is +-1/2 so its coefficient is the shift from the first level to the second
    code = (np.array([[-0.5], [0.5]]) if len(names) == 2
            else np.vstack([np.eye(len(names) - 1), -np.ones(len(names) - 1)]))
    F = code[[names.index(x) for x in lv]]
    X = np.column_stack([np.ones(y.size)] + ([arm] if arm is not None else []) + [F])
    if np.linalg.matrix_rank(X) < X.shape[1]:
        return "confounded with the arm"
    if y.size - X.shape[1] < 1:
        return "too few seeds"
    res = sm.OLS(y, X).fit()
    j = 1 if arm is not None else 0          # the difference's column
    lo, hi = res.conf_int(1 - CONFIDENCE)[j]
    R = np.zeros((F.shape[1], X.shape[1]))
    R[:, X.shape[1] - F.shape[1]:] = np.eye(F.shape[1])
    fp = float(np.asarray(res.f_test(R).pvalue))
    plain = sm.OLS(y, X[:, :j + 1]).fit()

    def finite(p: float, diff: float) -> float:   # a perfect fit: no residual spread
        return float(p) if np.isfinite(p) else (1.0 if diff == 0 else 0.0)
    diff = float(res.params[j])
    return AdjustedComparison(diff, float(lo), float(hi), finite(res.pvalues[j], diff), int(res.df_resid), fp,
                              float(res.params[-1]) if len(names) == 2 else None, names,
                              finite(plain.pvalues[j], float(plain.params[j])), float(plain.params[j]))
