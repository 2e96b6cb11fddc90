"""Statistical tests of the released noise against the distribution the package states.

The noise ``ξ = sum_units - Σ q(x_i)`` (integer units) of a release of a FIXED dataset must be
OpenDP's discrete Laplace (pmf ∝ exp(-|k|/s)) or discrete Gaussian (pmf ∝ exp(-k²/2σ²)) with the
integer scale ``s = noise['sum_scale'] / feature_map.unit = ldexp(scale, frac_bits)``, i.i.d. over
coordinates and releases; the count noise likewise with ``noise['count_scale']``.

OpenDP's sampler cannot be seeded, so every test is calibrated: each test checks at most five
statistics, each asserted at p > ALPHA = 2e-5, so a correct implementation fails a test with
probability < 1e-4 (union bound); and the same test applied to seeded numpy samples with a scale
10% off is shown to give p < ALPHA (power check).
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

import opendp_sketch as dps

ALPHA = 2e-5  # per statistic; at most 5 statistics per test -> < 1e-4 per test


# -- exact reference distributions ---------------------------------------------------------------


def dlaplace_cdf(k, s: float) -> np.ndarray:
    """``P(X ≤ k)`` of the discrete Laplace with pmf ``(1-t)/(1+t)·t^|k|``, ``t = e^{-1/s}``."""
    k = np.asarray(k, dtype=np.float64)
    t = math.exp(-1.0 / s)
    out = np.empty_like(k)
    pos = k >= 0
    out[pos] = 1.0 - np.exp(-(k[pos] + 1.0) / s) / (1.0 + t)
    out[~pos] = np.exp(k[~pos] / s) / (1.0 + t)
    return out


def dlaplace_variance(s: float) -> float:
    t = math.exp(-1.0 / s)
    return 2.0 * t / (1.0 - t) ** 2


class DiscreteGaussian:
    """Exact pmf table for moderate σ; continuity-corrected normal when σ is huge (error ~1/σ²)."""

    def __init__(self, sigma: float) -> None:
        self.sigma = sigma
        self.exact = sigma < 1e4
        if self.exact:
            self.K = int(40 * sigma) + 40
            k = np.arange(-self.K, self.K + 1)
            w = np.exp(-(k.astype(np.float64) ** 2) / (2 * sigma**2))
            self.pmf = w / w.sum()
            self.cum = np.cumsum(self.pmf)
            self.var = float((self.pmf * k.astype(np.float64) ** 2).sum())
        else:
            self.var = sigma**2

    def cdf(self, k) -> np.ndarray:
        k = np.asarray(k)
        if not self.exact:
            return stats.norm.cdf((k + 0.5) / self.sigma)
        idx = np.clip(k.astype(np.int64) + self.K, -1, 2 * self.K)
        return np.where(idx < 0, 0.0, self.cum[np.maximum(idx, 0)])

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if not self.exact:
            return np.rint(rng.normal(0.0, self.sigma, n)).astype(np.int64)
        return rng.choice(np.arange(-self.K, self.K + 1), size=n, p=self.pmf)


def sample_dlaplace(rng: np.random.Generator, s: float, n: int) -> np.ndarray:
    """Seeded numpy discrete Laplace (difference of two geometrics) for the power checks only."""
    p = -math.expm1(-1.0 / s)
    return rng.geometric(p, n).astype(np.int64) - rng.geometric(p, n).astype(np.int64)


# -- tests of fit --------------------------------------------------------------------------------


def chisquare_pvalue(x: np.ndarray, cdf, nbins: int = 60, span: float = 1e15) -> float:
    """Chi-square goodness of fit on integer bins of (about) equal probability under ``cdf``."""
    x = np.asarray(x, dtype=np.int64)
    n = x.size
    q = np.arange(1, nbins) / nbins
    lo = np.full(q.shape, -int(span), dtype=np.int64)
    hi = np.full(q.shape, int(span), dtype=np.int64)
    for _ in range(64):  # smallest integer k with cdf(k) >= q
        mid = lo + (hi - lo) // 2
        ok = cdf(mid) >= q
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    edges = np.unique(hi)
    probs = np.diff(np.concatenate([[0.0], cdf(edges), [1.0]]))
    counts = np.bincount(np.searchsorted(edges, x, side="left"), minlength=edges.size + 1)
    # merge neighbours until every expected count is at least 5
    exp, obs = [], []
    e_acc = o_acc = 0.0
    for e, o in zip(probs * n, counts):
        e_acc += e
        o_acc += o
        if e_acc >= 5:
            exp.append(e_acc)
            obs.append(o_acc)
            e_acc = o_acc = 0.0
    exp[-1] += e_acc
    obs[-1] += o_acc
    assert len(exp) >= 5, "too few bins for a meaningful test"
    exp = np.array(exp)
    return float(stats.chisquare(np.array(obs), exp * (sum(obs) / exp.sum())).pvalue)


def ks_pvalue(x: np.ndarray, cdf) -> float:
    """Kolmogorov–Smirnov test against the CDF of an integer-valued law.

    Both CDFs are right-continuous step functions with jumps at integers only, so the sup of
    ``|F_n - F|`` is attained at a sample value ``u`` or at ``u - 1``. The continuous-law
    distribution of ``D`` makes the p-value conservative for a discrete law (exact in the limit
    of large scales). (``scipy.stats.kstest`` is not used: with ties it overstates ``D``.)
    """
    x = np.sort(np.asarray(x, dtype=np.int64))
    n = x.size
    u = np.unique(x)
    pts = np.concatenate([u, u - 1])
    ecdf = np.searchsorted(x, pts, side="right") / n
    d = float(np.max(np.abs(ecdf - cdf(pts))))
    return float(stats.kstwo.sf(d, n))


def mean_abs_pvalue(x: np.ndarray, s: float) -> float:
    """Two-sided z-test of ``E|X|`` for the discrete Laplace of scale ``s`` (a scale test)."""
    t = math.exp(-1.0 / s)
    m1 = 2 * t / ((1 + t) * (1 - t))
    v = dlaplace_variance(s) - m1**2
    a = np.abs(np.asarray(x, dtype=np.float64))
    z = (a.mean() - m1) / math.sqrt(v / a.size)
    return float(2 * stats.norm.sf(abs(z)))


def variance_pvalue(x: np.ndarray, var: float) -> float:
    """Two-sided chi-square test of ``E[x²] = var`` for (near-)normal zero-mean samples."""
    x = np.asarray(x, dtype=np.float64)
    stat = float((x**2).sum() / var)
    n = x.size
    return 2.0 * min(stats.chi2.cdf(stat, n), stats.chi2.sf(stat, n))


def _power_check(test, samples_wrong) -> None:
    for x in samples_wrong:
        p = test(x)
        POWER_LOG.append(p)
        assert p < ALPHA, "the test cannot tell a 10% wrong scale apart"


POWER_LOG: list[float] = []


# -- releases ------------------------------------------------------------------------------------


def _release_noise(fm, X, measure, scale, count_fraction=0.02):
    lo, hi = (0.0, 1.0)
    dom = dps.box_domain((lo, hi), num_columns=fm.input_dim)
    m = dps.make_private_sketch(
        dom, dp.symmetric_distance(), measure, fm, scale=scale, count_fraction=count_fraction
    )
    sk = m(X)
    noise = sk.sum_units - np.array(fm.fixed_sum(X), dtype=np.int64)
    return sk, noise


def _int_scale(sk, fm) -> float:
    s = sk.noise["sum_scale"] / fm.unit
    # documented: the integer scale is ldexp(sum_scale_in_feature_units · gain, frac_bits)
    assert s == pytest.approx(math.ldexp(sk.noise["sum_scale"] * fm.gain, fm.frac_bits), rel=1e-12)
    return s


@pytest.fixture(scope="module")
def fixed_1d():
    return np.random.default_rng(5).uniform(0.0, 1.0, size=(300, 1))


@pytest.fixture(scope="module")
def fixed_2d():
    return np.random.default_rng(6).uniform(0.0, 1.0, size=(300, 2))


def test_laplace_noise_histogram_one_release(fixed_1d):
    """30 000 coordinates of one release of a wide histogram: i.i.d. discrete Laplace(2.5)."""
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=30_000, dim=1)
    sk, noise = _release_noise(fm, fixed_1d, dp.max_divergence(), scale=2.5)
    s = _int_scale(sk, fm)
    assert s == pytest.approx(2.5, rel=1e-12)
    assert sk.sum_variance == pytest.approx(dlaplace_variance(s) * fm.unit**2, rel=1e-9)

    def test(x):
        return chisquare_pvalue(x, lambda k: dlaplace_cdf(k, s))

    assert test(noise) > ALPHA
    assert ks_pvalue(noise, lambda k: dlaplace_cdf(k, s)) > ALPHA
    rng = np.random.default_rng(101)
    _power_check(test, [sample_dlaplace(rng, 1.1 * s, noise.size), sample_dlaplace(rng, s / 1.1, noise.size)])


def test_laplace_noise_rff_one_release(fixed_2d):
    """20 000 coordinates of a fixed-point RFF release: discrete Laplace of scale 1.5·2^20."""
    fm = dps.RFF(dim=2, num_features=20_000, bandwidth=0.3, seed=8)
    sk, noise = _release_noise(fm, fixed_2d, dp.max_divergence(), scale=1.5)
    s = _int_scale(sk, fm)
    assert s == pytest.approx(math.ldexp(1.5, fm.frac_bits), rel=1e-12)

    def cdf(k):
        return dlaplace_cdf(k, s)

    def test_ks(x):
        return ks_pvalue(x, cdf)

    def test_chi(x):
        return chisquare_pvalue(x, cdf)

    assert test_ks(noise) > ALPHA
    assert test_chi(noise) > ALPHA
    rng = np.random.default_rng(102)
    wrong = [sample_dlaplace(rng, 1.1 * s, noise.size), sample_dlaplace(rng, s / 1.1, noise.size)]
    _power_check(test_chi, wrong)
    _power_check(test_ks, wrong)


def test_gaussian_noise_histogram_one_release(fixed_1d):
    """30 000 coordinates of one zCDP release: i.i.d. discrete Gaussian(σ = 3)."""
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=30_000, dim=1)
    sk, noise = _release_noise(fm, fixed_1d, dp.zero_concentrated_divergence(), scale=3.0)
    assert sk.noise["mechanism"] == "gaussian"
    sigma = _int_scale(sk, fm)
    assert sigma == pytest.approx(3.0, rel=1e-12)
    law = DiscreteGaussian(sigma)

    def test_chi(x):
        return chisquare_pvalue(x, law.cdf)

    def test_var(x):
        return variance_pvalue(x, law.var)

    assert test_chi(noise) > ALPHA
    assert test_var(noise) > ALPHA
    rng = np.random.default_rng(103)
    wrong = [
        DiscreteGaussian(1.1 * sigma).sample(rng, noise.size),
        DiscreteGaussian(sigma / 1.1).sample(rng, noise.size),
    ]
    _power_check(test_chi, wrong)
    _power_check(test_var, wrong)


def test_gaussian_noise_rff_one_release(fixed_2d):
    """20 000 coordinates of a fixed-point RFF zCDP release: discrete Gaussian σ = 0.8·2^20."""
    fm = dps.RFF(dim=2, num_features=20_000, bandwidth=0.3, seed=9)
    sk, noise = _release_noise(fm, fixed_2d, dp.zero_concentrated_divergence(), scale=0.8)
    sigma = _int_scale(sk, fm)
    law = DiscreteGaussian(sigma)
    assert not law.exact

    def test_ks(x):
        return ks_pvalue(x, law.cdf)

    def test_var(x):
        return variance_pvalue(x, law.var)

    assert test_ks(noise) > ALPHA
    assert test_var(noise) > ALPHA
    rng = np.random.default_rng(104)
    wrong = [
        DiscreteGaussian(1.1 * sigma).sample(rng, noise.size),
        DiscreteGaussian(sigma / 1.1).sample(rng, noise.size),
    ]
    _power_check(test_ks, wrong)
    _power_check(test_var, wrong)


def _repeated(fm, X, measure, scale, count_fraction, releases):
    dom = dps.box_domain((0.0, 1.0), num_columns=fm.input_dim)
    m = dps.make_private_sketch(
        dom, dp.symmetric_distance(), measure, fm, scale=scale, count_fraction=count_fraction
    )
    exact = np.array(fm.fixed_sum(X), dtype=np.int64)
    sums, counts, sk = [], [], None
    for _ in range(releases):
        sk = m(X)
        sums.append(sk.sum_units - exact)
        counts.append(sk.count - X.shape[0])
    return sk, np.array(sums), np.array(counts)


def _check_independent(sums: np.ndarray) -> None:
    """Coordinates and consecutive releases uncorrelated: |r|·√n < 5.5 (two-sided p ≈ 4e-8 each,
    < 1e-5 over the at most 100 pairs checked); reused noise would give |r| = 1."""
    n = sums.shape[0]
    r = np.corrcoef(sums.T)
    off = r[~np.eye(r.shape[0], dtype=bool)]
    assert np.all(np.abs(off) * math.sqrt(n) < 5.5)
    lag = np.corrcoef(sums[:-1, 0], sums[1:, 0])[0, 1]
    assert abs(lag) * math.sqrt(n - 1) < 5.5


def test_laplace_repeated_releases_sum_and_count(fixed_1d):
    """1 000 releases of a 12-bin histogram of a fixed dataset: 12 000 sum-noise draws, 1 000
    count-noise draws, fresh and independent in every release."""
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=12, dim=1)
    c = 0.3
    sk, sums, counts = _repeated(fm, fixed_1d, dp.max_divergence(), 2.0, c, 1000)
    s = _int_scale(sk, fm)
    # count_scale: ε_count/ε_sum = c/(1-c) with ε_sum = Δ₁/s, ε_count = 1/count_scale
    sc = sk.noise["count_scale"]
    assert sc == pytest.approx(s * (1 - c) / (c * fm.sensitivity(1)), rel=1e-12)
    assert sk.count_variance == pytest.approx(dlaplace_variance(sc), rel=1e-9)

    def test_sum(x):
        return chisquare_pvalue(x, lambda k: dlaplace_cdf(k, s))

    assert test_sum(sums.ravel()) > ALPHA
    assert ks_pvalue(sums.ravel(), lambda k: dlaplace_cdf(k, s)) > ALPHA
    # the count: 1 000 draws catch gross errors; the powered count test is the slow one below
    assert chisquare_pvalue(counts, lambda k: dlaplace_cdf(k, sc), nbins=20) > ALPHA
    assert mean_abs_pvalue(counts, sc) > ALPHA
    _check_independent(np.c_[sums, counts])
    rng = np.random.default_rng(105)
    _power_check(
        test_sum, [sample_dlaplace(rng, 1.1 * s, sums.size), sample_dlaplace(rng, s / 1.1, sums.size)]
    )


@pytest.mark.slow
def test_laplace_count_noise_many_releases(fixed_1d):
    """6 000 releases: the count noise is discrete Laplace(count_scale), with power vs 10%."""
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    sk, sums, counts = _repeated(fm, fixed_1d, dp.max_divergence(), 1.0, 0.5, 6000)
    sc = sk.noise["count_scale"]
    assert sc == pytest.approx(_int_scale(sk, fm) / fm.sensitivity(1), rel=1e-12)  # c = 1/2

    def test_count(x):
        return mean_abs_pvalue(x, sc)

    assert test_count(counts) > ALPHA
    assert chisquare_pvalue(counts, lambda k: dlaplace_cdf(k, sc), nbins=30) > ALPHA
    _check_independent(np.c_[sums, counts])
    rng = np.random.default_rng(107)
    _power_check(
        test_count, [sample_dlaplace(rng, 1.1 * sc, counts.size), sample_dlaplace(rng, sc / 1.1, counts.size)]
    )


# -- noise scale = sensitivity / budget ------------------------------------------------------------


@pytest.mark.parametrize("eps,c", [(1.0, 0.02), (0.3, 0.1), (4.0, 0.5)])
def test_laplace_scale_is_sensitivity_over_budget(fixed_2d, eps, c):
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=5, dim=2)
    sk = dps.release_sketch(fixed_2d, fm, bounds=(0.0, 1.0), epsilon=eps, count_fraction=c)
    assert sk.noise["sum_scale"] == pytest.approx(fm.sensitivity(1) / (eps * (1 - c)), rel=1e-6)
    assert sk.noise["count_scale"] == pytest.approx(1.0 / (eps * c), rel=1e-6)


def test_laplace_scale_with_gain(fixed_2d):
    """Maps with a shrink γ < 1: the noise on ``Sketch.sum`` (which divides by γ) is Δ₁/(γ·ε_sum)."""
    fm = dps.RFF(dim=2, num_features=30, bandwidth=0.4, seed=1)
    eps, c = 2.0, 0.02
    sk = dps.release_sketch(fixed_2d, fm, bounds=(0.0, 1.0), epsilon=eps)
    assert sk.noise["sum_scale"] * fm.gain == pytest.approx(fm.sensitivity(1) / (eps * (1 - c)), rel=1e-6)


@pytest.mark.parametrize("rho,c", [(0.5, 0.02), (2.0, 0.25)])
def test_gaussian_scale_is_sensitivity_over_budget(fixed_2d, rho, c):
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=5, dim=2)
    sk = dps.release_sketch(fixed_2d, fm, bounds=(0.0, 1.0), rho=rho, count_fraction=c)
    assert sk.noise["sum_scale"] == pytest.approx(fm.sensitivity(2) / math.sqrt(2 * rho * (1 - c)), rel=1e-6)
    assert sk.noise["count_scale"] == pytest.approx(1.0 / math.sqrt(2 * rho * c), rel=1e-6)


# -- slow: more releases ---------------------------------------------------------------------------


@pytest.mark.slow
def test_gaussian_repeated_releases_sum_and_count(fixed_1d):
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    c = 0.2
    sk, sums, counts = _repeated(fm, fixed_1d, dp.zero_concentrated_divergence(), 2.5, c, 4000)
    sigma = _int_scale(sk, fm)
    sc = sk.noise["count_scale"]
    # ρ_count/ρ_sum = c/(1-c) with ρ_sum = Δ₂²/(2σ²), ρ_count = 1/(2σ_c²)
    assert sc == pytest.approx(sigma * math.sqrt((1 - c) / c) / fm.sensitivity(2), rel=1e-12)
    law, claw = DiscreteGaussian(sigma), DiscreteGaussian(sc)
    assert chisquare_pvalue(sums.ravel(), law.cdf) > ALPHA
    assert variance_pvalue(sums.ravel(), law.var) > ALPHA
    assert chisquare_pvalue(counts, claw.cdf) > ALPHA
    assert variance_pvalue(counts, claw.var) > ALPHA
    _check_independent(np.c_[sums, counts])
    rng = np.random.default_rng(106)
    _power_check(
        lambda x: variance_pvalue(x, claw.var),
        [
            DiscreteGaussian(1.1 * sc).sample(rng, counts.size),
            DiscreteGaussian(sc / 1.1).sample(rng, counts.size),
        ],
    )


@pytest.mark.slow
def test_release_sketch_approx_dp_noise_matches_recorded_sigma(fixed_2d):
    """(ε, δ) path end to end: the noise drawn has the σ the sketch records."""
    fm = dps.QuantizedRFF(dim=2, num_features=50_000, bandwidth=0.5, seed=3)
    sk = dps.release_sketch(fixed_2d, fm, bounds=(0.0, 1.0), epsilon=2.0, delta=1e-7)
    noise = sk.sum_units - np.array(fm.fixed_sum(fixed_2d), dtype=np.int64)
    law = DiscreteGaussian(_int_scale(sk, fm))
    assert chisquare_pvalue(noise, law.cdf) > ALPHA
    assert variance_pvalue(noise, law.var) > ALPHA


@pytest.mark.slow
def test_release_sketch_laplace_noise_many_releases(fixed_2d):
    """20 one-call releases (a fresh parameter search each time) of a RACE sketch."""
    fm = dps.RACE(dim=2, rows=100, buckets=50, bucket_width=0.3, seed=2)
    exact = np.array(fm.fixed_sum(fixed_2d), dtype=np.int64)
    noise, s = [], None
    for _ in range(20):
        sk = dps.release_sketch(fixed_2d, fm, bounds=(0.0, 1.0), epsilon=5.0)
        s = _int_scale(sk, fm)
        noise.append(sk.sum_units - exact)
    noise = np.concatenate(noise)
    assert chisquare_pvalue(noise, lambda k: dlaplace_cdf(k, s)) > ALPHA
    assert ks_pvalue(noise, lambda k: dlaplace_cdf(k, s)) > ALPHA
