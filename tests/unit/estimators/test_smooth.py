"""Smooth kernels from sums of exponentials: the certified fit error, the plan's maps, the joint
release within one budget, SmoothKDE on noise-free sketches, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.projections import JLProjection
from opendp_sketch.estimators.smooth import (
    SmoothKDE,
    SmoothKernelPlan,
    exp_sum_error_bound,
    smooth_kernel,
    smooth_kernel_terms,
)
from opendp_sketch.smooth_release import release_smooth_sketches


def exact_sketches(plan, X):
    return [dps.Sketch(fm, np.array(fm.fixed_sum(X), dtype=np.int64), X.shape[0]) for fm in plan.feature_maps]


@pytest.fixture(scope="module")
def two_blobs() -> np.ndarray:
    rng = np.random.default_rng(8)
    X = np.concatenate([rng.normal(0.3, 0.05, (1500, 2)), rng.normal(0.7, 0.1, (1500, 2))])
    return X.clip(0.0, 1.0)


@pytest.mark.parametrize(("terms", "t_max"), [(4, 10.0), (8, 100.0), (12, 1000.0)])
def test_certified_error_holds_on_a_fine_grid(terms, t_max):
    c, a, err = smooth_kernel_terms(terms, t_max)
    assert c.size <= terms and c.shape == a.shape
    assert (c > 0).all() and (a > 0).all() and (np.diff(a) > 0).all()
    t = np.unique(np.concatenate([np.linspace(0, t_max, 400_001), np.geomspace(1e-9, t_max, 100_001)]))
    actual = np.abs(1 / (1 + t) - np.exp(-np.outer(t, a)) @ c).max()
    assert actual <= err <= 1.05 * actual + 1e-9  # sound and nearly tight
    assert abs(c.sum() - 1.0) <= err  # t = 0
    # beyond T both functions decrease: the plan's tail bound holds far out
    tail = np.geomspace(t_max, 1e4 * t_max, 10_001)
    g_t = float(c @ np.exp(-a * t_max))
    assert np.abs(1 / (1 + tail) - np.exp(-np.outer(tail, a)) @ c).max() <= max(1 / (1 + t_max), g_t)


def test_more_terms_fit_better_and_results_are_deterministic():
    errs = [smooth_kernel_terms(j, 100.0)[2] for j in (4, 6, 8, 12)]
    assert errs == sorted(errs, reverse=True) and errs[-1] < 1e-5
    c1, a1, _ = smooth_kernel_terms(8, 100.0)
    c1[0] = -5.0  # returned arrays are copies: the cache stays intact
    c2, a2, _ = smooth_kernel_terms(8, 100.0)
    assert c2[0] > 0 and np.array_equal(a1, a2)
    assert exp_sum_error_bound([1.0], [1.0], 10.0) == pytest.approx(0.2036, abs=1e-4)


def test_plan_maps_and_kernels():
    plan = SmoothKernelPlan(dim=3, bandwidth=0.4, num_features=50, num_terms=6, t_max=200.0, seed=4)
    assert [fm.bandwidth for fm in plan.feature_maps] == pytest.approx(0.4 / np.sqrt(2 * plan.exponents))
    assert [fm.seed for fm in plan.feature_maps] == list(range(4, 4 + plan.coefficients.size))
    x, y = np.zeros(3), np.array([0.3, 0.0, 0.4])  # ‖x − y‖ = 0.5
    assert float(plan.kernel(x, y)) == pytest.approx(1 / (1 + 0.25 / 0.16))
    # exponential terms are Gaussian RFF kernels of bandwidth σ_j
    terms = [fm.kernel_value(x, y) for fm in plan.feature_maps]
    assert float(plan.approx_kernel(x, y)) == pytest.approx(float(np.dot(plan.coefficients, terms)))
    assert abs(float(plan.approx_kernel(x, y) - plan.kernel(x, y))) <= plan.max_error
    # t_max from the public box: the squared diameter over h²
    boxed = SmoothKernelPlan(dim=3, bandwidth=0.5, num_features=50, num_terms=4, bounds=(0.0, 1.0))
    assert boxed.t_max == pytest.approx(12.0)
    again = SmoothKernelPlan.from_dict(plan.to_dict())
    assert again.feature_maps == plan.feature_maps and again.max_error == plan.max_error


def test_smooth_kde_on_noise_free_sketches(two_blobs):
    plan = SmoothKernelPlan(dim=2, bandwidth=0.1, num_features=3000, num_terms=8, bounds=(0.0, 1.0))
    kde = plan.kde(exact_sketches(plan, two_blobs))
    Q = np.random.default_rng(9).uniform(size=(40, 2))
    est = kde(Q)
    # the estimate is Σ_j c_j KDE_j with each KDE_j a plain RFF KDE
    direct = sum(c * dps.KDE(s)(Q) for c, s in zip(plan.coefficients, kde.sketches))
    np.testing.assert_allclose(est, direct, rtol=1e-12)
    target = kde.approx_kernel(two_blobs[None], Q[:, None]).mean(1)
    exact = kde.kernel(two_blobs[None], Q[:, None]).mean(1)
    assert np.abs(target - exact).max() <= plan.max_error
    # random-feature error: std ≤ Σ c_j/√(2m') ≈ 0.018 per query; 4 std over 40 queries
    assert np.abs(est - exact).max() <= plan.max_error + 4 / np.sqrt(2 * 1500)
    assert kde.noise_std() == 0.0


def test_joint_release_spends_the_budget_in_the_stated_shares(two_blobs):
    plan = SmoothKernelPlan(dim=2, bandwidth=0.1, num_features=200, num_terms=4, bounds=(0.0, 1.0))
    sks = release_smooth_sketches(two_blobs, plan, (0.0, 1.0), epsilon=1.0)
    assert len(sks) == plan.coefficients.size
    w = plan.budget_weights("laplace")
    assert w == pytest.approx(plan.coefficients ** (2 / 3) / np.sum(plan.coefficients ** (2 / 3)))
    # Laplace: ε_j ∝ Δ₁/scale_j, so scale_j·w_j/Δ₁ is the same for every sketch
    ratio = [s.noise["sum_scale"] * wj / s.feature_map.sensitivity(1) for s, wj in zip(sks, w)]
    assert ratio == pytest.approx([ratio[0]] * len(ratio), rel=1e-9)
    for s, wj in zip(sks, w):
        assert s.privacy["epsilon"] <= 1.0 and s.privacy["share"] == pytest.approx(wj)
        assert s.noise["mechanism"] == "laplace"
    kde = plan.kde(sks)
    est, std = kde([[0.3, 0.3]], return_std=True)
    exact = plan.kernel(two_blobs, [0.3, 0.3]).mean()
    assert abs(est[0] - exact) < 0.1 + 5 * std[0]


def test_joint_release_zcdp_through_a_projection():
    rng = np.random.default_rng(10)
    X = rng.uniform(0.0, 1.0, size=(1500, 30))
    proj = JLProjection(30, 4, seed=1)
    plan = SmoothKernelPlan(dim=4, bandwidth=1.0, num_features=100, num_terms=4, t_max=100.0)
    sks = release_smooth_sketches(X, plan, (0.0, 1.0), rho=0.5, projection=proj, split="even")
    assert all(s.noise["mechanism"] == "gaussian" and s.privacy["rho"] <= 0.5 for s in sks)
    assert sks[0].bounds[0] == proj.output_bounds((0.0, 1.0))[0].tolist()
    # Gaussian: ρ_j ∝ (Δ₂/scale_j)², equal shares ⇒ equal scales (all maps have the same Δ₂)
    scales = [s.noise["sum_scale"] for s in sks]
    assert scales == pytest.approx([scales[0]] * len(scales), rel=1e-9)
    assert plan.kde(sks)(proj.transform(X[:3])).shape == (3,)


def test_bad_input(two_blobs, secret):
    plan = SmoothKernelPlan(dim=2, bandwidth=0.1, num_features=20, num_terms=4, t_max=50.0)
    for kwargs, match in [
        ({"num_terms": 0}, "num_terms"),
        ({"num_terms": 25}, "num_terms"),
        ({"t_max": -1.0}, "t_max"),
        ({"t_max": float("nan")}, "t_max"),
        ({"t_max": 1e9}, "t_max"),
    ]:
        with pytest.raises(ValueError, match=match):
            smooth_kernel_terms(**kwargs)
    with pytest.raises(ValueError, match="bandwidth"):
        SmoothKernelPlan(dim=2, bandwidth=0.0)
    with pytest.raises(ValueError, match="coefficients must be >= 0"):
        exp_sum_error_bound([-1.0], [1.0], 10.0)
    with pytest.raises(ValueError, match="bandwidth"):
        smooth_kernel([0.0], [1.0], bandwidth=-1.0)
    with pytest.raises(ValueError, match="plan"):
        release_smooth_sketches(two_blobs, "plan", (0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="split weights"):
        release_smooth_sketches(two_blobs, plan, (0, 1), epsilon=1.0, split=[1.0, 2.0])
    with pytest.raises(ValueError, match="split"):
        release_smooth_sketches(two_blobs, plan, (0, 1), epsilon=1.0, split="greedy")
    with pytest.raises(ValueError, match="exactly one"):
        release_smooth_sketches(two_blobs, plan, (0, 1), epsilon=1.0, rho=1.0)
    with pytest.raises(ValueError, match="projection outputs 3"):
        release_smooth_sketches(two_blobs, plan, (0, 1), epsilon=1.0, projection=JLProjection(2, 3))
    with pytest.raises(ValueError, match="columns"):
        release_smooth_sketches(np.zeros((10, 3)), plan, (0, 1), epsilon=1.0)
    bad = two_blobs.copy()
    bad[3, 1] = np.nan
    bad[4, 0] = secret
    with pytest.raises(ValueError, match="NaN") as err:
        release_smooth_sketches(bad, plan, (0, 1), epsilon=1.0)
    assert str(secret) not in str(err.value)
    sks = exact_sketches(plan, two_blobs)
    with pytest.raises(ValueError, match="coefficients must be"):
        SmoothKDE(sks, plan.coefficients[:-1])
    with pytest.raises(ValueError, match="non-empty list"):
        SmoothKDE(sks[0], [1.0])
    lap = dps.RFF(dim=2, num_features=20, bandwidth=0.1, kernel="laplacian")
    with pytest.raises(ValueError, match="Gaussian RFF"):
        SmoothKDE([dps.Sketch(lap, np.zeros(20, dtype=np.int64), 10)], [1.0])
    hist = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
    with pytest.raises(ValueError, match="RFF"):
        SmoothKDE([dps.Sketch(hist, np.zeros(8, dtype=np.int64), 10)], [1.0])
    other = dps.RFF(dim=3, num_features=20, bandwidth=0.1)
    with pytest.raises(ValueError, match="same dimension"):
        SmoothKDE([sks[0], dps.Sketch(other, np.zeros(20, dtype=np.int64), 10)], [0.5, 0.5])
    with pytest.raises(ValueError, match="sketches of this plan"):
        plan.kde(sks[::-1])
    kde = SmoothKDE(sks, plan.coefficients)
    with pytest.raises(ValueError, match=r"shape \(q, 2\)"):
        kde(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        kde([[0.1, np.nan]])
    with pytest.raises(ValueError, match="bandwidth=h"):
        kde.kernel([0.0, 0.0], [1.0, 1.0])
