"""Unit tests of RFF and QuantizedRFF (opendp_sketch/features/rff.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

RNG = np.random.default_rng(20240601)
#: probe points with |phase| ≲ 40 (the float32 phase error stays below 1e-5 there)
X_PROBE = RNG.uniform(-3.0, 3.0, (64, 3))

MAPS = {
    "rff-gaussian": lambda seed=0: dps.RFF(dim=3, num_features=64, bandwidth=0.7, seed=seed),
    "rff-laplacian": lambda seed=0: dps.RFF(
        dim=3, num_features=64, bandwidth=2.0, kernel="laplacian", seed=seed
    ),
    "quantized-rff": lambda seed=0: dps.QuantizedRFF(dim=3, num_features=48, bandwidth=0.9, seed=seed),
}


def _phases(fm: dps.FeatureMap, X: np.ndarray) -> np.ndarray:
    # ω_jᵀx written out coordinate by coordinate
    Z = np.zeros((X.shape[0], fm.frequencies.shape[1]))
    for i in range(fm.dim):
        Z += X[:, [i]] * fm.frequencies[i]
    return Z


# -- values -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rff-gaussian", "rff-laplacian"])
def test_rff_transform_is_cos_then_sin_of_phases(name):
    fm = MAPS[name]()
    Z = _phases(fm, X_PROBE)
    F = fm.transform(X_PROBE)
    assert F.shape == (64, 64) and fm.num_frequencies == 32
    np.testing.assert_allclose(F[:, :32], np.cos(Z), atol=1e-12)
    np.testing.assert_allclose(F[:, 32:], np.sin(Z), atol=1e-12)


def test_rff_hand_checked_points():
    fm = dps.RFF(dim=2, num_features=6, bandwidth=1.0, seed=5)
    # the origin: every phase is 0, so [cos, sin] = [1, 1, 1, 0, 0, 0]
    np.testing.assert_array_equal(fm.transform(np.zeros((1, 2))), [[1, 1, 1, 0, 0, 0]])
    # a point whose first phase is π/2: cos = 0, sin = 1 for that frequency
    w = fm.frequencies[:, 0]
    x = w * (np.pi / 2) / (w @ w)
    F = fm.transform(x[None])[0]
    assert abs(F[0]) < 1e-12 and abs(F[3] - 1.0) < 1e-12
    # every cos/sin pair lies on the unit circle: ‖Φ(x)‖₂² = m' exactly in real arithmetic
    np.testing.assert_allclose((fm.transform(X_PROBE[:, :2]) ** 2).sum(axis=1), 3.0, rtol=1e-12)


def test_rff_inner_product_is_shift_invariant():
    fm = MAPS["rff-gaussian"]()
    x, y, t = X_PROBE[:5], X_PROBE[5:10], np.array([0.3, -1.1, 2.0])
    G = np.einsum("ij,ij->i", fm.transform(x), fm.transform(y))
    Gt = np.einsum("ij,ij->i", fm.transform(x + t), fm.transform(y + t))
    np.testing.assert_allclose(G, Gt, atol=1e-9)


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_rff_frequency_scale_follows_bandwidth(kernel):
    sigma = 0.25
    w = dps.RFF(dim=2, num_features=40_000, bandwidth=sigma, kernel=kernel, seed=3).frequencies.ravel()
    if kernel == "gaussian":  # N(0, σ⁻²): std 4; 40 000 draws give relative error ≈ 0.4 %
        assert abs(w.std() / (1 / sigma) - 1) < 0.03
    else:  # Cauchy(0, 1/σ): the median of |ω| is the scale 1/σ
        assert abs(np.median(np.abs(w)) / (1 / sigma) - 1) < 0.03


def test_quantized_rff_is_sign_of_dithered_cosine():
    fm = MAPS["quantized-rff"]()
    C = np.cos(_phases(fm, X_PROBE) + fm.dither)
    expected = np.where(C >= 0, 1.0, -1.0)
    np.testing.assert_array_equal(fm.transform(X_PROBE), expected)
    assert fm.dither.shape == (48,) and (fm.dither >= 0).all() and (fm.dither < 2 * np.pi).all()
    # the origin: the sign of cos(u_j)
    np.testing.assert_array_equal(fm.transform(np.zeros((1, 3)))[0], np.where(np.cos(fm.dither) >= 0, 1, -1))


def test_quantized_rff_averages_to_triangle_wave():
    # E_u[Φ_j(x)Φ_j(y)] = 1 - 2|δ_j|/π with δ_j = ω_jᵀ(x-y) wrapped to [-π, π]; each term is ±1, so
    # Hoeffding puts the mean of m = 20 000 terms within 0.04 of its expectation w.p. > 1 - 2e-7
    fm = dps.QuantizedRFF(dim=2, num_features=20_000, bandwidth=1.0, seed=1)
    x, y = np.array([0.2, 0.1]), np.array([-0.5, 0.4])
    F = fm.transform(np.array([x, y]))
    delta = (x - y) @ fm.frequencies
    wrapped = (delta + np.pi) % (2 * np.pi) - np.pi
    assert abs((F[0] * F[1]).mean() - np.mean(1 - 2 * np.abs(wrapped) / np.pi)) < 0.04


# -- kernel estimate ----------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_rff_estimate_matches_kernel_value(kernel):
    # each cos(ω_jᵀ(x-y)) lies in [-1, 1]; by Hoeffding the mean of m' = 20 000 of them is within
    # t = 0.035 of the kernel w.p. ≥ 1 - 2·exp(-m't²/2) ≈ 1 - 1e-5 per pair (16 pairs)
    fm = dps.RFF(dim=3, num_features=40_000, bandwidth=0.8, kernel=kernel, seed=11)
    X = np.array([[0, 0, 0], [0.3, -0.2, 0.1], [1.0, 0.5, -0.5], [2, 2, 2.0]])
    F = fm.transform(X)
    estimate = F @ F.T / fm.num_frequencies
    exact = fm.kernel_value(X[:, None, :], X[None, :, :])
    assert np.abs(estimate - exact).max() < 0.035


def test_rff_kernel_value_formula():
    g = dps.RFF(dim=2, num_features=2, bandwidth=2.0, kernel="gaussian")
    lap = dps.RFF(dim=2, num_features=2, bandwidth=2.0, kernel="laplacian")
    x, y = np.array([1.0, 2.0]), np.array([-2.0, 6.0])  # ‖x-y‖₂ = 5, ‖x-y‖₁ = 7
    assert g.kernel_value(x, y) == pytest.approx(math.exp(-25 / 8))
    assert lap.kernel_value(x, y) == pytest.approx(math.exp(-7 / 2))
    assert g.kernel_value(x, x) == 1.0


# -- fixed point --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_features_match_transform(name):
    fm = MAPS[name]()
    q = fm.fixed_features(X_PROBE)
    assert q.dtype == np.int64
    # features are bounded by 1; quantization 2^-20 plus the float32 phase error stay below 1e-5
    np.testing.assert_allclose(q * fm.unit, fm.transform(X_PROBE), rtol=0, atol=1e-5)


def test_rff_fixed_point_parameters():
    fm = MAPS["rff-gaussian"]()
    assert fm.frac_bits == 20 and fm.gain == 1.0 - 2.0**-12
    assert fm.unit == 2.0**-20 / (1.0 - 2.0**-12)
    q = fm.fixed_features(X_PROBE)
    # truncation toward zero of γ·2^20·value: never above γ·2^20 in magnitude
    assert np.abs(q).max() <= math.floor((1.0 - 2.0**-12) * 2**20)
    qr = dps.QuantizedRFF(dim=3, num_features=8).fixed_features(X_PROBE)
    assert set(np.unique(qr).tolist()) == {-1, 1}


def test_rff_every_cos_sin_pair_is_certified():
    # the documented invariant behind both bounds: q_c² + q_s² ≤ 4^20 for every pair, every row
    fm = dps.RFF(dim=3, num_features=64, bandwidth=0.05, seed=0)
    X = np.vstack([RNG.uniform(-3.0, 3.0, (20_000, 3)), [[np.inf, 1, 2], [np.nan, 0, 0], [3e38, -3e38, 1]]])
    with np.errstate(all="ignore"):
        q = fm.fixed_features(X)
    assert (q[:, :32] ** 2 + q[:, 32:] ** 2).max() <= 4**20


def test_rff_in_place_pair_sums_equal_the_certified_pairs():
    # the sum path truncates inside the int32 reduction and reuses the phases' memory; it must give
    # the column sums of certified_pairs, on finite phases (fast path) and with non-finite ones
    # (repair path), whatever the number of rows per int32 block
    from opendp_sketch.features.rff import _certified_pair_sums, certified_pairs

    rng = np.random.default_rng(3)
    Z = rng.normal(scale=50.0, size=(300, 7))
    Z[:5] *= 1e6  # numpy's slower float32 cos/sin path
    Z_bad = Z.copy()
    Z_bad[[3, 200], [1, 6]] = [1e39, -np.inf]  # beyond float32: NaN cos/sin, repaired to 0
    Z_bad[17, 2] = np.nan
    for phases in (Z, Z_bad):
        for k in (20, 26):  # 2^(30-k) rows per int32 block: 1024 (one block) or 16 (many)
            with np.errstate(all="ignore"):
                q = certified_pairs(phases, 1.0 - 2.0**-12, k).astype(np.int64)
                got = _certified_pair_sums(phases.copy(), 1.0 - 2.0**-12, k)
            assert got.dtype == np.int64
            assert got.tolist() == np.concatenate([q[0].sum(0), q[1].sum(0)]).tolist()
    assert q[:, 17, 2].tolist() == [0, 0] and q[:, 200, 6].tolist() == [0, 0]


def test_int32_reduction_truncates_each_float_toward_zero():
    # what the sum path relies on: the float32 -> int32 cast happens per element, before adding
    a = np.array([[1.75, -1.75, 2.5, -0.5], [0.999, -2.25, 1048575.9, -1048575.9]], dtype=np.float32)
    assert np.add.reduce(a, axis=0, dtype=np.int32).tolist() == [1, -3, 1048577, -1048575]


def test_rff_stated_sensitivities():
    fm = dps.RFF(dim=2, num_features=10, seed=0)  # m' = 5
    assert fm.int_sensitivity(1) == math.isqrt(2 * (5 * 2**20) ** 2)  # ⌊√2·m'·2^20⌋
    assert fm.int_sensitivity(2) == math.sqrt(5) * 2**20
    assert fm.sensitivity(1) == pytest.approx(math.sqrt(2) * 5, rel=1e-6)
    assert fm.sensitivity(2) == pytest.approx(math.sqrt(5), rel=1e-12)
    q = dps.QuantizedRFF(dim=2, num_features=10)
    assert (q.sensitivity(1), q.sensitivity(2)) == (10.0, math.sqrt(10))


@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_sum_independent_of_chunks_and_threads(name):
    fm = MAPS[name]()
    extremes = np.array([[np.inf, 0, 0], [-np.inf, np.inf, 1.0], [np.nan, 0, 0], [1e30, -1e30, 5.0]])
    check_sum_invariance(fm, X_PROBE, chunk_rows=(1, 7, 64, 4096), n_jobs=(1, 2, 4))
    check_sum_invariance(
        fm, np.vstack([X_PROBE, extremes]), clip=(-3.0, 3.0), chunk_rows=(2, 100), n_jobs=(1, 3)
    )
    check_sum_invariance(fm, np.vstack([X_PROBE, extremes[:3]]), chunk_rows=(1, 5), n_jobs=(1, 2))


def test_rff_fixed_sum_independent_of_chunks_for_wide_rows():
    # The float32 product X @ Ω rounds differently for different chunk shapes (BLAS picks another
    # kernel), so q(x) of a row depends on its chunk unless the phases are computed row-wise.
    fm = dps.RFF(dim=64, num_features=200, bandwidth=1.0, seed=0)
    X = np.random.default_rng(1).uniform(-3.0, 3.0, (300, 64))
    check_sum_invariance(fm, X, chunk_rows=(1, 2, 300), n_jobs=(1,))


def test_quantized_rff_fixed_sum_independent_of_chunks_for_huge_phases():
    # fixed_sum promises one result for any float input and any chunking; a phase near 1e30 has
    # an ulp of 1e14, so a 1-ulp difference between BLAS paths flips the sign at random
    fm = MAPS["quantized-rff"]()
    X = np.vstack([X_PROBE, [[1e30, -1e30, 5.0], [-7e29, 3e29, 1e29]]])
    check_sum_invariance(fm, X, chunk_rows=(1, 66), n_jobs=(1,))


# -- determinism and serialization ------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_seed_determinism(name):
    a, b, c = MAPS[name](seed=4), MAPS[name](seed=4), MAPS[name](seed=5)
    np.testing.assert_array_equal(a.transform(X_PROBE), b.transform(X_PROBE))
    assert a == b and a.fingerprint() == b.fingerprint()
    assert not np.array_equal(a.frequencies, c.frequencies)
    assert a != c and a.fingerprint() != c.fingerprint()


@pytest.mark.parametrize("name", list(MAPS))
def test_roundtrip_and_fingerprint_mismatch(name):
    fm = MAPS[name](seed=9)
    check_roundtrip(fm, X_PROBE)
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"]["seed"] = 10  # other draws, stale fingerprint
    with pytest.raises(ValueError, match="fingerprint"):
        dps.features.feature_map_from_dict(spec)
    with pytest.raises(ValueError, match="not a RACE"):
        dps.RACE.from_dict(fm.to_dict())


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [dps.RFF, dps.QuantizedRFF])
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0}, r"dim \(0\) must be a positive integer"),
        ({"dim": 2.5}, r"dim \(2.5\) must be a positive integer"),
        ({"dim": True}, r"dim \(True\) must be a positive integer"),
        ({"num_features": -2}, r"num_features \(-2\) must be a positive integer"),
        ({"bandwidth": 0.0}, r"bandwidth \(0.0\) must be a positive finite number"),
        ({"bandwidth": float("inf")}, "bandwidth .* positive finite"),
        ({"bandwidth": float("nan")}, "bandwidth .* positive finite"),
        ({"bandwidth": "wide"}, "bandwidth .* positive finite"),
        ({"kernel": "cauchy"}, r"kernel \('cauchy'\) must be one of"),
        ({"seed": -1}, r"seed \(-1\) must be a non-negative integer"),
        ({"seed": 1.5}, "seed .* non-negative integer"),
    ],
)
def test_parameter_validation(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**{"dim": 2, "num_features": 8, **kwargs})


def test_rff_odd_num_features_is_refused():
    with pytest.raises(ValueError, match=r"num_features \(7\) must be even"):
        dps.RFF(dim=2, num_features=7)
    assert dps.QuantizedRFF(dim=2, num_features=7).num_features == 7


def test_wrong_number_of_columns_is_refused():
    fm = MAPS["rff-gaussian"]()
    for method in (fm.transform, fm.fixed_features, fm.fixed_sum):
        with pytest.raises(ValueError, match=r"X must have shape \(n, 3\)"):
            method(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="chunk_rows"):
        fm.fixed_sum(X_PROBE, chunk_rows=0)
