"""Unit tests of Moments and RandomQuadratic (opendp_sketch/features/moments.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

RNG = np.random.default_rng(11)


def _probe(radius: float, dim: int = 3, n: int = 100) -> np.ndarray:
    """Rows inside, on and outside the ball of ``radius`` (up to 1.5·radius per coordinate)."""
    return RNG.uniform(-1.5 * radius, 1.5 * radius, (n, dim))


X_PROBE = _probe(2.0)
MAPS = {
    "moments": lambda: dps.Moments(dim=3, radius=2.0),
    "moments-center": lambda: dps.Moments(dim=3, radius=2.0, center=[0.5, -1.0, 2.0]),
    "moments-no-norm": lambda: dps.Moments(dim=3, radius=2.0, squared_norm=False),
    "quadratic": lambda seed=0: dps.RandomQuadratic(dim=3, num_features=25, radius=2.0, seed=seed),
}


# -- Moments values ---------------------------------------------------------------------------
def test_moments_hand_checked_points():
    fm = dps.Moments(dim=2, radius=5.0)
    X = [[3.0, 4.0], [6.0, 8.0], [0.0, 0.0], [-1.0, 2.0], [0.0, -10.0]]
    expected = [[3, 4, 25], [3, 4, 25], [0, 0, 0], [-1, 2, 5], [0, -5, 25]]
    np.testing.assert_allclose(fm.transform(np.array(X)), expected, rtol=1e-15)


def test_moments_center_is_subtracted_before_clipping():
    fm = dps.Moments(dim=2, radius=1.0, center=[1.0, 1.0])
    X = np.array([[1.6, 1.8], [4.0, 5.0], [1.0, 1.0], [1.3, 0.6], [1.0, -9.0]])
    # y = x - c = (0.6, 0.8) on the sphere; (3, 4) clipped to (0.6, 0.8); 0; (0.3, -0.4); (0, -10) → (0, -1)
    expected = [[0.6, 0.8, 1.0], [0.6, 0.8, 1.0], [0, 0, 0], [0.3, -0.4, 0.25], [0, -1, 1]]
    np.testing.assert_allclose(fm.transform(X), expected, atol=1e-15)


def test_moments_clip_of_huge_finite_values_is_a_projection():
    # clip_r is documented as the projection onto the ball: (1e200, 1e200) must become (r/√2, r/√2).
    # np.linalg.norm squares the entries, overflows to inf, the factor becomes 0 and the row
    # collapses to the center instead.
    fm = dps.Moments(dim=2, radius=1.0)
    with np.errstate(all="ignore"):
        F = fm.transform(np.array([[1e200, 1e200], [-1e300, 0.0]]))
    np.testing.assert_allclose(F, [[2**-0.5, 2**-0.5, 1.0], [-1.0, 0.0, 1.0]], atol=1e-12)


def test_moments_answer_squared_distances():
    # Σ‖x_i - q‖² = Σ‖y_i‖² - 2⟨Σy_i, q - c⟩ + n‖q - c‖² for rows inside the ball
    c = np.array([0.5, -1.0, 2.0])
    fm = dps.Moments(dim=3, radius=10.0, center=c)
    X = c + RNG.uniform(-3, 3, (40, 3))
    S = fm.transform(X).sum(axis=0)
    for q in RNG.uniform(-5, 5, (5, 3)):
        direct = ((X - q) ** 2).sum()
        from_sketch = S[3] - 2 * S[:3] @ (q - c) + len(X) * (q - c) @ (q - c)
        assert from_sketch == pytest.approx(direct, rel=1e-12)


def test_moments_fixed_point_parameters_and_sensitivity():
    fm = dps.Moments(dim=2, radius=5.0)
    # k = 26 - ⌈log2 max(5, 25)⌉ = 21, R = ⌊5·2^21⌋ = 10485760, R² >> 21 = 25·2^21
    assert fm.frac_bits == 21 and fm.unit == 2.0**-21
    assert fm.int_sensitivity(1) == math.isqrt(2 * 10485760**2) + 25 * 2**21
    assert fm._int_bound(2) == 10485760**2 + (25 * 2**21) ** 2
    assert fm.sensitivity(1) == pytest.approx(math.sqrt(2) * 5 + 25, rel=1e-5)
    assert fm.sensitivity(2) == pytest.approx(math.sqrt(25 + 625), rel=1e-5)
    assert fm.sensitivity(1) <= math.sqrt(2) * 5 + 25  # the quantized map never states more
    assert dps.Moments(dim=1, radius=1.0).frac_bits == 26
    assert dps.Moments(dim=1, radius=1000.0).frac_bits == 6  # r² ≈ 2^20 keeps 26 bits


# -- RandomQuadratic values ----------------------------------------------------------------------
def test_random_quadratic_is_squared_projection_of_clipped_row():
    fm = MAPS["quadratic"]()
    Om = fm.projections
    assert Om.shape == (3, 25)
    for x in X_PROBE[:10]:
        n = math.sqrt(sum(v * v for v in x))
        y = x * min(1.0, 2.0 / n)
        expected = [sum(y[i] * Om[i, j] for i in range(3)) ** 2 for j in range(25)]
        np.testing.assert_allclose(fm.transform(x[None])[0], expected, rtol=1e-12)
    # a basis vector outside the ball is clipped to radius 2: Φ = 4·Ω[0, :]²
    np.testing.assert_allclose(fm.transform(np.array([[7.0, 0, 0]]))[0], 4 * Om[0] ** 2, rtol=1e-12)


def test_random_quadratic_projections_and_trace():
    fm = dps.RandomQuadratic(dim=4, num_features=4000, radius=3.0, seed=2)
    # ω_j ~ N(0, I/m): √m·Ω has unit variance (16 000 draws: relative error of the std ≈ 0.6 %)
    assert abs(fm.projections.std() * math.sqrt(4000) - 1) < 0.03
    # E Σ_j (ω_jᵀy)² = ‖y‖², standard deviation √(2/m)·‖y‖² ≈ 0.022‖y‖²; 0.12 is more than 5σ
    y = np.array([[1.0, -2.0, 0.5, 1.5]])
    assert fm.transform(y).sum() == pytest.approx((y**2).sum(), rel=0.12)


def test_random_quadratic_sensitivity_is_spectral():
    fm = dps.RandomQuadratic(dim=4, num_features=12, radius=1.5, seed=3)
    spectral = np.linalg.norm(fm.projections, 2) ** 2 * 1.5**2
    assert spectral <= fm.sensitivity(1) <= spectral * (1 + 1e-5)
    # the top singular direction attains ‖Ωᵀy‖² = ‖Ω‖₂² r²
    u = np.linalg.svd(fm.projections)[0][:, 0]
    assert fm.transform(1.5 * u[None]).sum() == pytest.approx(spectral, rel=1e-12)
    assert fm.int_sensitivity(2) == fm.int_sensitivity(1)  # ‖q‖₂ ≤ ‖q‖₁ for q ≥ 0


# -- fixed point ----------------------------------------------------------------------------------
def _feature_bounds(fm: dps.FeatureMap) -> np.ndarray:
    """Per-feature bound on |Φ_j|: r for y, r² for ‖y‖²; ‖Ω‖₂²r² for quadratic features."""
    if isinstance(fm, dps.Moments):
        return np.array([fm.radius] * fm.dim + [fm.radius**2])
    return np.full(fm.num_features, np.linalg.norm(fm.projections, 2) ** 2 * fm.radius**2)


@pytest.mark.parametrize(
    "fm",
    [
        dps.Moments(dim=3, radius=1.0),
        dps.Moments(dim=3, radius=5.0, center=[1.0, 2.0, 3.0]),
        dps.Moments(dim=3, radius=1000.0),
        dps.Moments(dim=3, radius=0.05),
        dps.RandomQuadratic(dim=3, num_features=20, radius=1.0),
        dps.RandomQuadratic(dim=3, num_features=20, radius=30.0),
    ],
    ids=repr,
)
def test_fixed_features_match_transform(fm):
    X = _probe(fm.radius) + (fm.center if isinstance(fm, dps.Moments) else 0)
    q = fm.fixed_features(X)
    assert q.dtype == np.int64
    bounds = _feature_bounds(fm)
    # truncation toward zero (and, on the sphere, the exact norm shrink): at most two units off
    assert (np.abs(q * fm.unit - fm.transform(X)) <= 2 * fm.unit + 1e-12 * bounds).all()
    # and a unit is fine next to every feature's bound: ≥ 15 bits of resolution
    assert (fm.unit <= 2.0**-15 * bounds).all()


@pytest.mark.parametrize(
    "fm", [dps.Moments(dim=3, radius=0.01), dps.RandomQuadratic(dim=3, num_features=20, radius=0.1)], ids=repr
)
def test_fixed_point_resolution_is_relative_to_the_radius(fm):
    # k follows the bound below 1 too: a radius of 0.01 must not leave ‖y‖² with ~100 units
    X = _probe(fm.radius)
    err = np.abs(fm.fixed_features(X) * fm.unit - fm.transform(X)) / _feature_bounds(fm)
    assert err.max() < 1e-5


@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_sum_independent_of_chunks_and_threads(name):
    fm = MAPS[name]()
    check_sum_invariance(fm, X_PROBE, chunk_rows=(1, 6, 4096), n_jobs=(1, 3))
    wild = np.vstack([X_PROBE, [[np.inf, 0, 0], [np.nan, -np.inf, 1.0], [1e300, 1e300, -1e300]]])
    check_sum_invariance(fm, wild, chunk_rows=(2, 4096), n_jobs=(1, 2))
    check_sum_invariance(fm, wild, clip=(-3.0, 3.0), chunk_rows=(5,), n_jobs=(1, 2))


# -- determinism and serialization ------------------------------------------------------------------
def test_random_quadratic_seed_determinism():
    a, b, c = MAPS["quadratic"](seed=4), MAPS["quadratic"](seed=4), MAPS["quadratic"](seed=5)
    np.testing.assert_array_equal(a.transform(X_PROBE), b.transform(X_PROBE))
    assert a == b and not np.array_equal(a.projections, c.projections) and a != c


def test_moments_parameters_define_the_map():
    assert MAPS["moments"]() == MAPS["moments"]()
    assert MAPS["moments"]() != MAPS["moments-center"]()
    assert dps.Moments(dim=3, radius=2.0) != dps.Moments(dim=3, radius=2.5)


@pytest.mark.parametrize(
    ("name", "key", "value"), [("moments-center", "center", [0, 0, 0]), ("quadratic", "seed", 1)]
)
def test_roundtrip_and_fingerprint_mismatch(name, key, value):
    fm = MAPS[name]()
    check_roundtrip(fm, X_PROBE)
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"][key] = value
    with pytest.raises(ValueError, match="fingerprint"):
        dps.features.feature_map_from_dict(spec)


# -- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0}, r"dim \(0\) must be a positive integer"),
        ({"radius": 0.0}, r"radius \(0.0\) must be a positive finite number"),
        ({"radius": -1.0}, "radius .* positive finite"),
        ({"radius": float("inf")}, "radius .* positive finite"),
        ({"center": [0.0, 0.0]}, "center must be 3 finite numbers"),
        ({"center": [0.0, np.nan, 0.0]}, "center must be 3 finite numbers"),
        ({"center": [[0.0, 0.0, 0.0]]}, "center must be 3 finite numbers"),
    ],
)
def test_moments_parameter_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dps.Moments(**{"dim": 3, "radius": 1.0, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": -1}, r"dim \(-1\) must be a positive integer"),
        ({"num_features": 0}, r"num_features \(0\) must be a positive integer"),
        ({"radius": float("nan")}, "radius .* positive finite"),
        ({"seed": -3}, r"seed \(-3\) must be a non-negative integer"),
    ],
)
def test_random_quadratic_parameter_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dps.RandomQuadratic(**{"dim": 3, "num_features": 5, **kwargs})


def test_moments_without_the_squared_norm():
    full = dps.Moments(dim=3, radius=2.0, center=[0.5, 0.0, 0.0])
    mean_only = dps.Moments(dim=3, radius=2.0, center=[0.5, 0.0, 0.0], squared_norm=False)
    X = _probe(2.0)
    assert mean_only.num_features == 3
    np.testing.assert_array_equal(mean_only.transform(X), full.transform(X)[:, :3])
    assert mean_only.sensitivity(1) == pytest.approx(np.sqrt(3) * 2.0, rel=1e-6)
    assert mean_only.sensitivity(2) == pytest.approx(2.0, rel=1e-6)
    assert mean_only.sensitivity(1) < full.sensitivity(1)
    back = dps.features.feature_map_from_dict(mean_only.to_dict())
    assert back == mean_only and back != full and back.squared_norm is False
    assert "squared_norm" not in full.to_dict()["params"]  # earlier specs keep their fingerprints
    with pytest.raises(ValueError, match="squared_norm"):
        dps.Moments(dim=3, radius=2.0, squared_norm=1)
