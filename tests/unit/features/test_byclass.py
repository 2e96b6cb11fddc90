"""Unit tests of ByClass (opendp_sketch/features/byclass.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

RNG = np.random.default_rng(5)
#: two feature columns in [-1, 1] and a label column in {0, 1, 2}
X_PROBE = np.column_stack([RNG.uniform(-1, 1, (60, 2)), RNG.integers(0, 3, 60)])

MAPS = {
    "rff": lambda seed=0: dps.ByClass(
        dps.RFF(dim=2, num_features=8, bandwidth=0.5, seed=seed), num_classes=3
    ),
    "histogram": lambda seed=0: dps.ByClass(dps.Histogram(bounds=(-1, 1), bins=4, dim=2), num_classes=3),
}


def test_block_layout_hand_checked():
    fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=1), num_classes=3)
    assert (fm.block_size, fm.num_features, fm.dim, fm.input_dim) == (3, 9, 1, 2)
    X = np.array([[0.2, 1.0], [0.7, 2.0], [0.9, 0.0]])
    expected = [
        [0, 0, 0, 1, 0, 1, 0, 0, 0],  # class 1: bin 0, count
        [0, 0, 0, 0, 0, 0, 0, 1, 1],  # class 2: bin 1, count
        [0, 1, 1, 0, 0, 0, 0, 0, 0],  # class 0: bin 1, count
    ]
    np.testing.assert_array_equal(fm.transform(X), expected)
    np.testing.assert_array_equal(fm.fixed_features(X), expected)
    inner, count = fm.block(np.array(expected[1]), 2)
    assert inner.tolist() == [0, 1] and count == 1


def test_labels_round_and_clip():
    fm = MAPS["histogram"]()
    y = [0.4, 0.5, 0.6, 1.5, 2.6, -1.0, 7.0, np.nan, np.inf, -np.inf, 1e300]
    X = np.column_stack([np.zeros((len(y), 2)), y])
    # rint rounds half to even: 0.5 → 0, 1.5 → 2; outside [0, 2] clips; NaN → class 0
    assert fm.labels(X).tolist() == [0, 0, 1, 2, 2, 0, 2, 0, 2, 0, 2]
    blocks = fm.transform(X).reshape(len(y), 3, fm.block_size)
    assert blocks[:, :, -1].argmax(axis=1).tolist() == fm.labels(X).tolist()


def test_rff_blocks_hold_the_inner_features():
    fm = MAPS["rff"]()
    inner = fm.feature_map
    F = fm.transform(X_PROBE)
    y = X_PROBE[:, 2].astype(int)
    for c in range(3):
        part, count = fm.block(F, c)
        rows = y == c
        np.testing.assert_array_equal(part[rows], inner.transform(X_PROBE[rows, :2]))
        assert (part[~rows] == 0).all()
        assert count.tolist() == rows.astype(float).tolist()


def test_class_sums_are_inner_sums_and_counts():
    fm = MAPS["rff"]()
    S = np.array(fm.fixed_sum(X_PROBE, chunk_rows=7), dtype=object)
    count_unit = math.floor((1.0 - 2.0**-12) * 2**20)  # ⌊γ·2^20⌋ = 2^20 - 2^8
    assert count_unit == 2**20 - 2**8
    for c in range(3):
        rows = X_PROBE[X_PROBE[:, 2] == c, :2]
        part, count = fm.block(S, c)
        assert part.tolist() == fm.feature_map.fixed_sum(rows)
        assert count == len(rows) * count_unit
    # one count unit is one row in feature units
    assert count_unit * fm.unit == pytest.approx(1.0, rel=1e-15)


@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_features_match_transform(name):
    fm = MAPS[name]()
    np.testing.assert_allclose(fm.fixed_features(X_PROBE) * fm.unit, fm.transform(X_PROBE), rtol=0, atol=1e-5)


def test_stated_sensitivity_adds_the_count():
    h = MAPS["histogram"]()
    assert (h.int_sensitivity(1), h.sensitivity(1)) == (3, 3.0)
    assert h.sensitivity(2) == pytest.approx(math.sqrt(3), rel=1e-15)
    r = MAPS["rff"]()
    inner = r.feature_map
    assert r.int_sensitivity(1) == inner.int_sensitivity(1) + 2**20 - 2**8
    assert r._int_bound(2) == inner._int_bound(2) + (2**20 - 2**8) ** 2
    # Δ₁(Φ) + 1 and √(Δ₂(Φ)² + 1) in feature units, up to the shrink γ
    assert r.sensitivity(1) == pytest.approx(inner.sensitivity(1) + 1.0, rel=1e-3)
    assert r.sensitivity(2) == pytest.approx(math.sqrt(inner.sensitivity(2) ** 2 + 1.0), rel=1e-3)


@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_sum_independent_of_chunks_and_threads(name):
    fm = MAPS[name]()
    check_sum_invariance(fm, X_PROBE, chunk_rows=(1, 8, 4096), n_jobs=(1, 3))
    wild = np.vstack([X_PROBE, [[np.inf, 0.0, -5.0], [np.nan, 0.3, np.nan], [0.1, -1e300, 1e300]]])
    check_sum_invariance(fm, wild, clip=([-1, -1, 0], [1, 1, 2]), chunk_rows=(2, 4096), n_jobs=(1, 2))


def test_seed_of_the_inner_map_defines_the_map():
    a, b, c = MAPS["rff"](seed=1), MAPS["rff"](seed=1), MAPS["rff"](seed=2)
    np.testing.assert_array_equal(a.transform(X_PROBE), b.transform(X_PROBE))
    assert a == b and a.fingerprint() != c.fingerprint()
    assert not np.array_equal(a.transform(X_PROBE), c.transform(X_PROBE))
    assert a != dps.ByClass(dps.RFF(dim=2, num_features=8, bandwidth=0.5, seed=1), num_classes=4)


@pytest.mark.parametrize("name", list(MAPS))
def test_roundtrip_and_fingerprint_mismatch(name):
    fm = MAPS[name]()
    copy = check_roundtrip(fm, X_PROBE)
    assert isinstance(copy.feature_map, type(fm.feature_map)) and copy.feature_map == fm.feature_map
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"]["num_classes"] = 4
    with pytest.raises(ValueError, match="ByClass regenerated from its seed does not match"):
        dps.features.feature_map_from_dict(spec)
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"]["feature_map"]["fingerprint"] = "0" * 32  # the nested map is checked too
    with pytest.raises(ValueError, match="fingerprint"):
        dps.ByClass.from_dict(spec)


def test_validation():
    inner = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
    with pytest.raises(ValueError, match="must be a feature map other than ByClass"):
        dps.ByClass(dps.ByClass(inner, 2), 2)
    with pytest.raises(ValueError, match="must be a feature map other than ByClass"):
        dps.ByClass("rff", 2)
    with pytest.raises(ValueError, match=r"num_classes \(0\) must be a positive integer"):
        dps.ByClass(inner, 0)
    with pytest.raises(ValueError, match=r"X must have shape \(n, 2\)"):
        dps.ByClass(inner, 2).transform(np.zeros((3, 1)))
