"""A statistical privacy audit of the whole release path on neighbouring datasets.

The release chain that ``release_sketch`` builds (``make_box_clip >> then_private_sketch`` at the
scale its search finds) is run many times on a dataset ``D`` and on ``D' = D + {x*}``, where
``x*`` is the box corner that moves the feature sum the most (it attains the stated sensitivity).
For an output event ``S`` fixed in advance, differential privacy bounds the two frequencies:

* pure ε (discrete Laplace): ``P[M(D') ∈ S] ≤ e^ε · P[M(D) ∈ S]``;
* ρ-zCDP (discrete Gaussian), read as (ε, δ) through OpenDP's ``make_zCDP_to_approxDP``:
  ``P[M(D') ∈ S] ≤ e^ε · P[M(D) ∈ S] + δ``.

Each frequency gets a one-sided Clopper–Pearson bound at level ``ALPHA / 2`` (exact for binomial
counts, whatever ``N``), so a correct mechanism fails the assertion with probability below
``ALPHA = 1e-4``: the lower bound of ``P[M(D') ∈ S]`` exceeds the truth with probability at most
``ALPHA / 2`` and the upper bound of ``P[M(D) ∈ S]`` falls below it with at most ``ALPHA / 2``.
OpenDP's noise cannot be seeded; this calibration is what makes the test reliable anyway.

The events are chosen so the audit is tight: for Laplace, ``S`` = "both moved histogram bins
and the count are at least their values under ``D'``" has likelihood ratio exactly ``e^ε`` (the
tail of a discrete Laplace shifted by one is ``e^{1/s}`` times heavier, and the losses of the
three coordinates add up to the claimed ε). For Gaussian, ``S`` thresholds the likelihood-ratio
statistic. Negative controls run the same audit on deliberately broken mechanisms (OpenDP's own
``make_laplace`` / ``make_gaussian`` on the exact sums, at a quarter of the correct scale) and
must be caught.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

import opendp_sketch as dps

ALPHA = 1e-4
N_RUNS = 2000  # per dataset; about 10 s per audit on a quiet 2-core machine
N_SLOW = 20_000
N_CONTROL = 1000  # the broken mechanisms are caught with a wide margin already


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided lower confidence bound of a binomial proportion at level ``alpha``."""
    return 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided upper confidence bound of a binomial proportion at level ``alpha``."""
    return 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))


def event_bounds(hits_moved: int, hits_base: int, n: int) -> tuple[float, float]:
    """``(lower bound of P[M(D') ∈ S], upper bound of P[M(D) ∈ S])``, jointly valid w.p. ≥ 1 - ALPHA."""
    return clopper_pearson_lower(hits_moved, n, ALPHA / 2), clopper_pearson_upper(hits_base, n, ALPHA / 2)


def epsilon_lower_bound(hits_moved: int, hits_base: int, n: int) -> float:
    """Lower confidence bound of the privacy loss ``log(P[M(D') ∈ S] / P[M(D) ∈ S])``."""
    lo, hi = event_bounds(hits_moved, hits_base, n)
    return -math.inf if lo == 0 else math.log(lo / hi)


def count_hits(release: Callable[[], np.ndarray], event: Callable[[np.ndarray], bool], n: int) -> int:
    return sum(bool(event(release())) for _ in range(n))


def _data() -> np.ndarray:
    """``D``: 40 rows in the lower half of the box (public, seeded)."""
    return np.random.default_rng(11).uniform(0.0, 0.45, size=(40, 2))


def _release_chain(fm: dps.FeatureMap, bounds: tuple[float, float], measure: dp.Measure, sketch: dps.Sketch):
    """The chain ``release_sketch`` runs, rebuilt at the scale its search chose for ``sketch``."""
    in_domain = dp.numpy.array2_domain(num_columns=fm.input_dim, T=float, nan=False)
    clip = dps.make_box_clip(in_domain, dp.symmetric_distance(), bounds)
    return clip >> dps.then_private_sketch(measure, fm, sketch.noise["sum_scale"] * fm.gain)


# -- pure ε: discrete Laplace ------------------------------------------------------------------------


EPSILON = 1.0
HIST = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=2)  # Δ₁ = 2: the corner moves two bins by one
CORNER = np.array([[1.0, 1.0]])


@pytest.fixture(scope="module")
def laplace_setup():
    D = _data()
    pilot = dps.release_sketch(D, HIST, bounds=(0.0, 1.0), epsilon=EPSILON)
    chain = _release_chain(HIST, (0.0, 1.0), dp.max_divergence(), pilot)
    assert chain.map(1) <= EPSILON * (1 + 1e-9) and chain.map(1) == pytest.approx(pilot.privacy["epsilon"])
    exact = np.array(HIST.fixed_sum(D), dtype=np.int64)
    moved = np.array(HIST.fixed_sum(np.vstack([D, CORNER])), dtype=np.int64) - exact
    assert moved.tolist() == [0, 1, 0, 1]  # the corner row attains Δ₁ = 2
    n = D.shape[0]

    def event(sum_units: np.ndarray, count: int) -> bool:
        """Both moved bins and the count at least their values under D'."""
        return bool((sum_units - exact)[1] >= 1 and (sum_units - exact)[3] >= 1 and count >= n + 1)

    return D, np.vstack([D, CORNER]), chain, event, pilot


def _laplace_audit(setup, runs: int) -> tuple[int, int]:
    D, D2, chain, event, _ = setup

    def hits(X):
        return count_hits(lambda: chain(X), lambda sk: event(sk.sum_units, sk.count), runs)

    return hits(D2), hits(D)


@pytest.mark.parametrize(
    "runs", [pytest.param(N_RUNS, id="default"), pytest.param(N_SLOW, id="many", marks=pytest.mark.slow)]
)
def test_laplace_whole_path_does_not_exceed_epsilon(laplace_setup, runs):
    """Pure ε: ``log(P[M(D') ∈ S] / P[M(D) ∈ S])`` has a lower confidence bound ≤ ε."""
    moved, base = _laplace_audit(laplace_setup, runs)
    eps_lo = epsilon_lower_bound(moved, base, runs)
    assert eps_lo <= EPSILON, f"audit: ε ≥ {eps_lo:.3f} > claimed {EPSILON} ({moved}/{runs} vs {base}/{runs})"
    # the event is informative: it is hit often under both datasets
    assert base > 0 and moved > base


def _broken_laplace(setup, factor: float):
    """OpenDP's make_laplace on the exact integer sum and count at ``1/factor`` of the correct scales."""
    _, _, _, _, pilot = setup
    sum_scale, count_scale = (
        pilot.noise["sum_scale"] * HIST.gain / factor,
        pilot.noise["count_scale"] / factor,
    )
    vec = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64), sum_scale)
    cnt = dp.m.make_laplace(dp.atom_domain(T=dp.i64), dp.absolute_distance(T=dp.i64), count_scale)
    return vec, cnt


@pytest.mark.parametrize(
    "runs", [pytest.param(N_CONTROL, id="default"), pytest.param(N_SLOW, id="many", marks=pytest.mark.slow)]
)
def test_laplace_audit_catches_noise_four_times_too_small(laplace_setup, runs):
    """Negative control: the same audit detects a mechanism whose noise is 4x too small (true loss 4ε)."""
    D, D2, _, event, _ = laplace_setup
    vec, cnt = _broken_laplace(laplace_setup, 4.0)

    def hits(X):
        exact = [int(v) for v in HIST.fixed_sum(X)]
        return count_hits(lambda: (np.array(vec(exact)), cnt(X.shape[0])), lambda o: event(*o), runs)

    moved, base = hits(D2), hits(D)
    assert epsilon_lower_bound(moved, base, runs) > EPSILON


# -- ρ-zCDP (discrete Gaussian) read as (ε, δ) ----------------------------------------------------------


RHO = 0.5
MOMENTS = dps.Moments(dim=1, radius=1.0)  # Φ = [y, y²]; x* = 1 attains ‖q(x*)‖₂ = Δ₂
AUDIT_EPS = 0.5
THRESHOLD = 0.75  # on the likelihood-ratio statistic normalised so that D ↦ 0 and D' ↦ 1


@pytest.fixture(scope="module")
def gaussian_setup():
    D = _data()[:, :1] * 2 - 0.45  # in [-0.45, 0.45]
    corner = np.array([[1.0]])
    pilot = dps.release_sketch(D, MOMENTS, bounds=(-1.0, 1.0), rho=RHO)
    chain = _release_chain(MOMENTS, (-1.0, 1.0), dp.zero_concentrated_divergence(), pilot)
    assert chain.map(1) <= RHO * (1 + 1e-9)
    profile = dp.c.make_zCDP_to_approxDP(chain).map(1)
    delta = profile.delta(AUDIT_EPS)  # the (ε, δ) OpenDP certifies for this chain
    exact = np.array(MOMENTS.fixed_sum(D), dtype=np.int64)
    q_star = np.array(MOMENTS.fixed_features(corner)[0], dtype=np.float64)
    assert math.sqrt(float(q_star @ q_star)) == pytest.approx(MOMENTS.int_sensitivity(2), rel=1e-7)
    sigma = pilot.noise["sum_scale"] / MOMENTS.unit  # integer units
    sigma_c = pilot.noise["count_scale"]
    mu2 = float(q_star @ q_star) / sigma**2 + 1.0 / sigma_c**2  # ≈ 2ρ: the mean shift of the statistic
    n = D.shape[0]

    def statistic(sum_units: np.ndarray, count: int) -> float:
        """Log-likelihood-ratio direction of (sum, count), scaled so E = 0 under D and 1 under D'."""
        return (float(q_star @ (sum_units - exact)) / sigma**2 + (count - n) / sigma_c**2) / mu2

    return D, np.vstack([D, corner]), chain, statistic, delta, pilot


@pytest.mark.parametrize(
    "runs", [pytest.param(N_RUNS, id="default"), pytest.param(N_SLOW, id="many", marks=pytest.mark.slow)]
)
def test_gaussian_whole_path_respects_converted_epsilon_delta(gaussian_setup, runs):
    """zCDP converted by OpenDP: ``P[M(D') ∈ S] - e^ε P[M(D) ∈ S]`` has a lower confidence bound ≤ δ."""
    D, D2, chain, statistic, delta, _ = gaussian_setup
    assert 0 < delta < 0.5

    def hits(X):
        return count_hits(lambda: chain(X), lambda sk: statistic(sk.sum_units, sk.count) >= THRESHOLD, runs)

    moved, base = hits(D2), hits(D)
    lo, hi = event_bounds(moved, base, runs)
    excess = lo - math.exp(AUDIT_EPS) * hi
    assert excess <= delta, f"audit: δ ≥ {excess:.4f} > claimed {delta:.4f} at ε = {AUDIT_EPS}"
    assert moved > base > 0


@pytest.mark.parametrize(
    "runs", [pytest.param(N_CONTROL, id="default"), pytest.param(N_SLOW, id="many", marks=pytest.mark.slow)]
)
def test_gaussian_audit_catches_noise_four_times_too_small(gaussian_setup, runs):
    """Negative control: OpenDP's make_gaussian on the exact sums at σ/4 violates the claimed (ε, δ)."""
    D, D2, _, statistic, delta, pilot = gaussian_setup
    sigma = pilot.noise["sum_scale"] / MOMENTS.unit / 4
    sigma_c = pilot.noise["count_scale"] / 4
    vec = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=float), sigma)
    cnt = dp.m.make_gaussian(dp.atom_domain(T=dp.i64), dp.absolute_distance(T=dp.i64), sigma_c)

    def hits(X):
        exact = [int(v) for v in MOMENTS.fixed_sum(X)]
        return count_hits(
            lambda: (np.array(vec(exact), dtype=np.int64), cnt(X.shape[0])),
            lambda o: statistic(*o) >= THRESHOLD,
            runs,
        )

    moved, base = hits(D2), hits(D)
    lo, hi = event_bounds(moved, base, runs)
    assert lo - math.exp(AUDIT_EPS) * hi > delta
