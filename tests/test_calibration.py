"""Calibration of the method-level test (seq2seq_zoo.stats.method_test) on simulated systems with known truth.

Each simulated run scores 500 test examples: example difficulty shared by every run (sd 8 ROUGE-1), a
training-seed effect shared by all examples of one run (sd 0.8, the spread between seeds the issue
measured), and run-specific per-example noise (sd 6). Per-example sd is then about 10, as for ROUGE-1
on DialogSum. The seed-level test must hold its level; the pooled example x seed test, which treats
1,500 pairs as independent although 500 of them share one seed effect, must not be trusted for
methods (it rejects far too often)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from seq2seq_zoo import stats

N_SIM, N_EX, EX_SD, SEED_SD, NOISE_SD = 300, 500, 8.0, 0.8, 6.0


def _simulate(rng, n_seeds: int, gap: float, seed_sd: float = SEED_SD):
    """(N_SIM, n_seeds, N_EX) per-example scores of systems A and B; A is ``gap`` better on average."""
    ex = rng.normal(35.0, EX_SD, size=(N_SIM, 1, N_EX))
    a = ex + gap + rng.normal(0, seed_sd, (N_SIM, n_seeds, 1)) + rng.normal(0, NOISE_SD, (N_SIM, n_seeds, N_EX))
    b = ex + rng.normal(0, seed_sd, (N_SIM, n_seeds, 1)) + rng.normal(0, NOISE_SD, (N_SIM, n_seeds, N_EX))
    return a, b


def _method_rejections(a, b, fixed_b: bool = False) -> float:
    """Share of simulations the method-level test rejects at alpha, from the per-seed means (one vectorised
    call); ``method_test`` itself gives the same p on a sample of them."""
    ma, mb = a.mean(axis=2), b.mean(axis=2)
    ps = stats.seed_level_p(ma, mb, fixed_b=fixed_b)
    for i in range(0, a.shape[0], 60):
        assert stats.method_test(a[i], b[i], fixed_b=fixed_b, n_resamples=0).p == pytest.approx(ps[i], rel=1e-9)
    return float(np.mean(ps < stats.ALPHA))


def test_method_test_holds_its_level_and_the_pooled_test_does_not():
    a, b = _simulate(np.random.default_rng(2024), 3, 0.0)          # equally good systems
    assert _method_rejections(a, b) <= 0.08
    # the pooled test: paired over example x seed (its permutation test ~ the paired t at 1,500 pairs)
    pooled = sps.ttest_rel(a.reshape(N_SIM, -1), b.reshape(N_SIM, -1), axis=1).pvalue
    assert np.mean(pooled < stats.ALPHA) > 0.25


def test_method_test_detects_one_point_with_five_seeds():
    """At the suite's median seed sd (0.38 ROUGE-1) five seeds a side find a 1-point gain most of the time.
    (At sd 0.8 the t-test's power with 5 seeds is about 0.38: `zoo power` prints what each finding needs.)"""
    a, b = _simulate(np.random.default_rng(7), 5, 1.0, seed_sd=0.38)
    assert _method_rejections(a, b) > 0.5


def test_against_a_deterministic_baseline_holds_its_level():
    """One-sample t against a fixed (LEAD) row exactly as good as A in expectation on every example:
    only A's seed spread is variance, and the test rejects about alpha of the time; 3 points better is
    found most of the time with 3 seeds."""
    rng = np.random.default_rng(11)
    ex = rng.normal(35.0, EX_SD, size=(N_SIM, 1, N_EX))
    a = ex + rng.normal(0, SEED_SD, (N_SIM, 3, 1)) + rng.normal(0, NOISE_SD, (N_SIM, 3, N_EX))
    assert _method_rejections(a, ex, fixed_b=True) <= 0.08
    assert _method_rejections(a, ex - 3.0, fixed_b=True) > 0.5
