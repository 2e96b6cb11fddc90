"""Unit tests of RACE (opendp_sketch/features/race.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch._fixed import exact_bits, quantize_rows
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

X_PROBE = np.random.default_rng(7).uniform(-2.0, 2.0, (50, 3))

MAPS = {
    "l2-k1": lambda seed=0: dps.RACE(dim=3, rows=6, buckets=11, bucket_width=0.8, seed=seed),
    "l2-k3": lambda seed=0: dps.RACE(
        dim=3, rows=6, buckets=11, bucket_width=0.8, hashes_per_row=3, seed=seed
    ),
    "srp": lambda seed=0: dps.RACE(dim=3, rows=6, buckets=16, family="srp", seed=seed),
    "srp-hashed": lambda seed=0: dps.RACE(
        dim=3, rows=6, buckets=10, family="srp", hashes_per_row=5, seed=seed
    ),
}


def _universal(fm: dps.RACE, r: int, codes: list[int]) -> int:
    """Multiply-add-shift with Python integers: u = (Σ a_k·h_k + c) mod 2^64, ⌊⌊u/2^32⌋·W/2^32⌋."""
    u = (int(fm.hash_add[r]) + sum(int(a) * h for a, h in zip(fm.hash_mult[r], codes))) % 2**64
    return ((u >> 32) * fm.buckets) >> 32


def _hand_buckets(fm: dps.RACE, x: np.ndarray) -> list[int]:
    # the map projects the row rounded to exact_bits(d) significant bits (exact products)
    xq = quantize_rows(x[None], exact_bits(fm.dim))[0]
    out = []
    for r in range(fm.rows):
        cols = range(r * fm.hashes_per_row, (r + 1) * fm.hashes_per_row)
        if fm.family == "srp":
            bits = [int(float(xq @ fm.projections[:, c]) >= 0) for c in cols]
            if 2**fm.hashes_per_row <= fm.buckets:
                out.append(sum(b << k for k, b in enumerate(bits)))
            else:
                out.append(_universal(fm, r, bits))
        else:
            # projections are stored divided by the bucket width, offsets are U[0, 1)
            codes = [math.floor(float(xq @ fm.projections[:, c]) + fm.offsets[c]) for c in cols]
            out.append(_universal(fm, r, codes))
    return out


# -- values -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_buckets_match_hand_computation(name):
    fm = MAPS[name]()
    B = fm.bucket_index(X_PROBE[:12])
    assert B.shape == (12, 6) and B.dtype == np.int64
    for x, b in zip(X_PROBE[:12], B):
        assert b.tolist() == _hand_buckets(fm, x)


def test_srp_bucket_is_the_sign_code():
    fm = dps.RACE(dim=2, rows=2, buckets=4, family="srp", seed=3)  # K = 2 sign bits, direct code
    assert fm.hashes_per_row == 2
    x = np.array([0.6, -1.3])
    signs = (x @ fm.projections >= 0).astype(int)  # columns: row0 bit0, row0 bit1, row1 bit0, row1 bit1
    expected = [signs[0] + 2 * signs[1], signs[2] + 2 * signs[3]]
    assert fm.bucket_index(x[None])[0].tolist() == expected
    # -x flips every bit: code c becomes 3 - c
    assert fm.bucket_index(-x[None])[0].tolist() == [3 - c for c in expected]
    # the flat one-hot layout: row r's bucket b sits at r·W + b
    F = fm.transform(x[None])[0]
    assert np.flatnonzero(F).tolist() == [expected[0], 4 + expected[1]]


@pytest.mark.parametrize("name", list(MAPS))
def test_one_hot_layout_and_fixed_features(name):
    fm = MAPS[name]()
    F = fm.transform(X_PROBE)
    assert fm.num_features == 6 * fm.buckets and F.shape == (50, fm.num_features)
    blocks = F.reshape(50, 6, fm.buckets)
    np.testing.assert_array_equal(blocks.sum(axis=2), 1.0)
    np.testing.assert_array_equal(blocks.argmax(axis=2), fm.bucket_index(X_PROBE))
    # integers equal the floats exactly (no rounding in a one-hot map)
    np.testing.assert_array_equal(fm.fixed_features(X_PROBE), F.astype(np.int64))
    assert fm.unit == 1.0 and fm.frac_bits == 0


def test_default_hashes_per_row():
    assert dps.RACE(dim=2, rows=1, buckets=1000).hashes_per_row == 1  # l2
    assert dps.RACE(dim=2, rows=1, buckets=16, family="srp").hashes_per_row == 4
    assert dps.RACE(dim=2, rows=1, buckets=10, family="srp").hashes_per_row == 3
    assert dps.RACE(dim=2, rows=1, buckets=1, family="srp").hashes_per_row == 1
    assert dps.RACE(dim=2, rows=1, buckets=2**20, family="srp").hashes_per_row == 16


def test_non_finite_projections_still_hit_one_bucket_per_row():
    fm = MAPS["l2-k3"]()
    X = np.array([[np.inf, 0, 0], [np.nan, 1, 2], [1e308, -1e308, 1e308], [-np.inf, -np.inf, -np.inf]])
    with np.errstate(all="ignore"):
        F = fm.fixed_features(X)
    np.testing.assert_array_equal(F.reshape(4, 6, 11).sum(axis=2), 1)


# -- kernel ---------------------------------------------------------------------------------------
def test_kernel_value_formulas():
    l2 = dps.RACE(dim=2, rows=1, buckets=8, bucket_width=2.0)
    x, y = np.array([0.0, 0.0]), np.array([1.2, 1.6])  # ‖x - y‖ = 2 = r, so t = 1
    phi = 0.5 * (1 + math.erf(-1 / math.sqrt(2)))
    expected = 1 - 2 * phi - 2 / math.sqrt(2 * math.pi) * (1 - math.exp(-0.5))
    assert l2.kernel_value(x, y) == pytest.approx(expected, rel=1e-12)
    assert l2.kernel_value(x, x) == 1.0
    srp = dps.RACE(dim=2, rows=1, buckets=8, family="srp")  # K = 3
    assert srp.kernel_value([1.0, 0.0], [0.0, 5.0]) == pytest.approx(0.5**3)  # orthogonal: θ = π/2
    assert srp.kernel_value([1.0, 1.0], [-2.0, -2.0]) == pytest.approx(0.0)  # antipodal
    assert srp.kernel_value([1.0, 0.0], [1.0, 1.0]) == pytest.approx(0.75**3)  # θ = π/4


@pytest.mark.parametrize(
    ("family", "K", "W"), [("l2", 1, 1 << 30), ("l2", 3, 1 << 30), ("srp", 3, 8), ("srp", 4, 1 << 30)]
)
def test_collision_rate_matches_kernel_value(family, K, W):
    # with W ≥ 2^30 universal-hash collisions add ≤ 1e-9; each row collides independently, so by
    # Hoeffding the rate over R = 20 000 rows is within 0.02 of the kernel w.p. ≥ 1 - 2e-7 per pair
    fm = dps.RACE(dim=3, rows=20_000, buckets=W, family=family, bucket_width=1.5, hashes_per_row=K, seed=2)
    X = np.array([[1.0, 0.1, 0.0], [0.3, -0.2, 0.1], [1.0, 0.5, -0.5], [-2.0, 2.0, 2.0]])
    B = fm.bucket_index(X)
    rate = (B[:, None, :] == B[None, :, :]).mean(axis=-1)
    assert np.abs(rate - fm.kernel_value(X[:, None, :], X[None, :, :])).max() < 0.02


def test_srp_kernel_value_at_the_origin_is_a_collision_probability():
    # The zero vector has every sign bit set (0 >= 0), so it collides with y ≠ 0 with probability
    # 2^-K, not 1; kernel_value must still be the collision probability it documents.
    fm = dps.RACE(dim=3, rows=20_000, buckets=8, family="srp", seed=2)
    X = np.array([[0.0, 0.0, 0.0], [0.3, -0.2, 0.1], [-2.0, 2.0, 2.0]])
    B = fm.bucket_index(X)
    rate = (B[0] == B[1:]).mean(axis=-1)
    np.testing.assert_allclose(rate, 0.5**3, atol=0.02)  # the hash family itself
    np.testing.assert_allclose(fm.kernel_value(X[0], X[1:]), rate, atol=0.02)


# -- sums, determinism, serialization -------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_sum_independent_of_chunks_and_threads(name):
    fm = MAPS[name]()
    total = check_sum_invariance(fm, X_PROBE, chunk_rows=(1, 4, 50, 4096), n_jobs=(1, 3))
    assert sum(total) == 50 * 6  # one count per row per repetition
    extremes = np.vstack([X_PROBE, [[np.inf, -np.inf, 0.0], [np.nan, 0, 0], [9.0, 9.0, -9.0]]])
    check_sum_invariance(fm, extremes, clip=(-2.0, 2.0), chunk_rows=(2, 4096), n_jobs=(1, 2))


@pytest.mark.parametrize("name", list(MAPS))
def test_seed_determinism(name):
    a, b, c = MAPS[name](seed=1), MAPS[name](seed=1), MAPS[name](seed=2)
    np.testing.assert_array_equal(a.bucket_index(X_PROBE), b.bucket_index(X_PROBE))
    assert a == b and a.fingerprint() == b.fingerprint()
    assert not np.array_equal(a.projections, c.projections)
    assert not np.array_equal(a.bucket_index(X_PROBE), c.bucket_index(X_PROBE))
    assert a.fingerprint() != c.fingerprint()


@pytest.mark.parametrize("name", list(MAPS))
def test_roundtrip_and_fingerprint_mismatch(name):
    fm = MAPS[name](seed=3)
    check_roundtrip(fm, X_PROBE)
    spec = json.loads(json.dumps(fm.to_dict()))
    assert spec["params"]["hashes_per_row"] == fm.hashes_per_row
    spec["params"]["bucket_width"] = 0.9
    with pytest.raises(ValueError, match="does not match the stored fingerprint"):
        dps.features.feature_map_from_dict(spec)
    spec["kind"] = "MinHash"
    with pytest.raises(ValueError, match=r"kind \('MinHash'\) must be one of"):
        dps.features.feature_map_from_dict(spec)


def test_stated_sensitivity():
    fm = dps.RACE(dim=2, rows=9, buckets=4)
    assert (fm.int_sensitivity(1), fm.int_sensitivity(2)) == (9, 3.0)
    assert (fm.sensitivity(1), fm.sensitivity(2)) == (9.0, 3.0)


# -- validation -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dim": 0}, r"dim \(0\) must be a positive integer"),
        ({"rows": 0}, r"rows \(0\) must be a positive integer"),
        ({"buckets": -3}, r"buckets \(-3\) must be a positive integer"),
        ({"buckets": 4.0}, r"buckets \(4.0\) must be a positive integer"),
        ({"family": "minhash"}, r"family \('minhash'\) must be one of"),
        ({"bucket_width": 0}, r"bucket_width \(0\) must be a positive finite number"),
        ({"bucket_width": float("inf")}, "bucket_width .* positive finite"),
        ({"hashes_per_row": 0}, r"hashes_per_row \(0\) must be a positive integer"),
        ({"seed": -2}, r"seed \(-2\) must be a non-negative integer"),
    ],
)
def test_parameter_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dps.RACE(**{"dim": 2, "rows": 3, "buckets": 8, **kwargs})
