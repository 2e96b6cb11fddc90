"""Unit tests of Composite (opendp_sketch/features/composite.py)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.features.composite import MAX_BLOCKS, RESOLUTION_BITS
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

B2 = ([0.0, 0.0], [1.0, 1.0])


def _one() -> dps.MarginalTables:
    return dps.MarginalTables(B2, [0, 1], bins=8)


def _two() -> dps.MarginalTables:
    return dps.MarginalTables(B2, [(0, 1)], bins=4)


def _rff() -> dps.RFF:
    return dps.RFF(dim=2, num_features=12, bandwidth=0.5, seed=1)


def _mixed() -> dps.Composite:
    """One-hot blocks (exact integer multipliers) and float blocks (truncated multipliers)."""
    moments = dps.Moments(dim=2, radius=1.5)
    return dps.Composite([_one(), _two(), _rff(), moments], weights=[1.0, 0.7, 0.3, 2.5])


X_PROBE = np.random.default_rng(0).uniform(-0.2, 1.2, (60, 2))


# -- layout and values ----------------------------------------------------------------------------
def test_blocks_offsets_and_transform():
    fm = _mixed()
    sizes = [16, 16, 12, 3]
    assert [b.offset for b in fm.blocks] == [0, 16, 32, 44] and [b.size for b in fm.blocks] == sizes
    assert fm.num_features == 47 and fm.dim == fm.input_dim == 2
    for b, a in zip(fm.blocks, [1.0, 0.7, 0.3, 2.5]):
        assert b.weight == pytest.approx(a, rel=2.0**-RESOLUTION_BITS)
    T = fm.transform(X_PROBE)
    expected = np.concatenate([b.weight * b.feature_map.transform(X_PROBE) for b in fm.blocks], axis=1)
    np.testing.assert_array_equal(T, expected)
    for part, b in zip(fm.split(T), fm.blocks):  # back in each block's own units
        np.testing.assert_allclose(part, b.feature_map.transform(X_PROBE), rtol=1e-12, atol=1e-15)


def test_power_of_two_weights_are_exact_and_one_hot_blocks_are_not_rounded():
    fm = dps.Composite([_one(), _two()], weights=[1.0, 0.25])
    assert [b.weight for b in fm.blocks] == [1.0, 0.25]
    assert fm.frac_bits == RESOLUTION_BITS + 2 and fm.gain == 1.0
    q = fm.fixed_features(X_PROBE)
    one = 1 << fm.frac_bits
    np.testing.assert_array_equal(q[:, :16], _one().fixed_features(X_PROBE) * one)
    np.testing.assert_array_equal(q[:, 16:], _two().fixed_features(X_PROBE) * (one // 4))
    assert fm.sensitivity(1) == 2.25  # 1·2 + 0.25·1
    s2 = fm.sensitivity(2)  # √(1²·2 + 0.25²·1), rounded up
    assert Fraction(s2) ** 2 >= Fraction(33, 16) and Fraction(math.nextafter(s2, 0)) ** 2 < Fraction(33, 16)


def test_integers_are_the_inner_integers_times_the_truncated_multiplier():
    fm = _mixed()
    q = fm.fixed_features(X_PROBE)
    for b, plan in zip(fm.blocks, fm._plans):
        inner = b.feature_map.fixed_features(X_PROBE)
        got = q[:, b.offset : b.offset + b.size]
        # exact: sign(q)·⌊|q|·M/2^t⌋ with Python integers
        ref = [
            [(1 if v >= 0 else -1) * ((abs(int(v)) * plan.multiplier) >> plan.shift) for v in row]
            for row in inner
        ]
        assert got.tolist() == ref
        # and the value in feature units is the weighted inner feature, up to the truncation of one unit
        approx = got * math.ldexp(1.0, -fm.frac_bits)
        np.testing.assert_allclose(
            approx, b.weight * inner * b.feature_map.unit, atol=2.0**-fm.frac_bits * 1.01
        )


def test_stated_bounds_are_the_sum_of_the_block_bounds_rounded_down():
    fm = _mixed()
    b1 = sum((m._int_bound(1) * p.multiplier) >> p.shift for m, p in zip(fm.maps, fm._plans))
    b2 = sum((m._int_bound(2) * p.multiplier**2) >> (2 * p.shift) for m, p in zip(fm.maps, fm._plans))
    assert fm.int_sensitivity(1) == b1 and fm._int_bound(2) == b2
    # in feature units: Σ âᵢ·Δ_p(Φᵢ) with each inner Δ in its own units (q·unit), to 20 bits
    ideal1 = sum(b.weight * b.feature_map.int_sensitivity(1) * b.feature_map.unit for b in fm.blocks)
    ideal2 = math.sqrt(
        sum((b.weight * b.feature_map.int_sensitivity(2) * b.feature_map.unit) ** 2 for b in fm.blocks)
    )
    assert fm.sensitivity(1) == pytest.approx(ideal1, rel=1e-6)
    assert fm.sensitivity(2) == pytest.approx(ideal2, rel=1e-6)
    assert Fraction(fm.int_sensitivity(2)) ** 2 >= b2


def test_exact_sum_is_invariant_to_chunks_and_threads():
    rng = np.random.default_rng(4)
    X = rng.uniform(-0.5, 1.5, (200, 2))
    X[::13, 0] = np.nan
    X[3::29, 1] = -np.inf
    fm = _mixed()
    total = check_sum_invariance(fm, X, clip=B2, chunk_rows=(1, 5, 4096), n_jobs=(1, 2))
    # the one-hot blocks' sums are the inner sums times their integer multiplier
    inner = _one().fixed_sum(X, clip=B2)
    assert total[:16] == [v * fm._plans[0].multiplier for v in inner]


def test_split_and_block_variances_of_a_release():
    dp.enable_features("contrib", "honest-but-curious")
    fm = dps.Composite([_one(), _two()], weights=[1.0, 0.5])
    X = np.random.default_rng(5).beta(2, 5, (2000, 2))
    sk = dps.release_sketch(X, fm, bounds=B2, epsilon=1.0)
    v1, v2 = fm.block_variances(sk.sum_variance)
    assert v2 == pytest.approx(4 * v1) and v1 == pytest.approx(sk.sum_variance)
    one, two = fm.split(sk.sum)
    true_one = np.array(_one().fixed_sum(X, clip=B2))
    true_two = np.array(_two().fixed_sum(X, clip=B2))
    # Laplace scale is Δ₁/ε' = 2.5/0.98 in sketch units: at most 50 scales in own units of block 2
    assert np.abs(one - true_one).max() < 130 and np.abs(two - true_two).max() < 260
    assert _two().marginal(two, (0, 1)).shape == (4, 4)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"epsilon": 1.0, "delta": 1e-6}])
def test_release_sketch_end_to_end_with_a_float_block(budget):
    dp.enable_features("contrib", "honest-but-curious")
    fm = _mixed()
    X = np.random.default_rng(6).uniform(0, 1, (500, 2))
    sk = dps.release_sketch(X, fm, bounds=B2, **budget)
    assert sk.feature_map == fm and sk.sum_units.shape == (47,)
    assert sk.noise["mechanism"] == ("gaussian" if "delta" in budget else "laplace")
    parts = fm.split(sk.mean)
    assert [p.shape for p in parts] == [(16,), (16,), (12,), (3,)]


def test_nested_and_class_conditional_composites():
    inner = dps.Composite([_one(), _two()], weights=[1.0, 0.5])
    outer = dps.Composite([inner, _rff()], weights=[2.0, 1.0])
    check_sum_invariance(outer, X_PROBE, clip=B2)
    assert outer.blocks[0].weight == 2.0 and outer.num_features == 32 + 12
    by = dps.ByClass(inner, num_classes=2)
    Xy = np.column_stack([X_PROBE, np.arange(60) % 2])
    S = by.fixed_sum(Xy, clip=([0, 0, 0], [1, 1, 1]))
    counts = [by.block(np.array(S), c)[1] for c in range(2)]
    assert [int(c) >> inner.frac_bits for c in counts] == [30, 30]
    per_class = dps.Composite([dps.ByClass(_one(), 2), dps.ByClass(_two(), 2)], weights=[1.0, 0.5])
    assert per_class.input_dim == 3 and per_class.dim == 2
    check_sum_invariance(per_class, Xy)


# -- serialization --------------------------------------------------------------------------------
def test_roundtrip_and_fingerprint():
    fm = _mixed()
    copy = check_roundtrip(fm, X_PROBE)
    assert [b.weight for b in copy.blocks] == [b.weight for b in fm.blocks]
    assert dps.Composite([m.to_dict() for m in fm.maps], fm.weights) == fm  # specs are accepted as blocks
    prints = {
        fm.fingerprint(),
        dps.Composite(fm.maps, [1.0, 0.7, 0.3, 2.0]).fingerprint(),
        dps.Composite(fm.maps[::-1], fm.weights[::-1]).fingerprint(),
        dps.Composite(
            [*fm.maps[:2], dps.RFF(dim=2, num_features=12, bandwidth=0.5, seed=2), fm.maps[3]], fm.weights
        ).fingerprint(),
    }
    assert len(prints) == 4
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"]["maps"][2]["params"]["seed"] = 2  # the inner map no longer matches its own print
    with pytest.raises(ValueError, match="RFF regenerated from its seed does not match"):
        dps.features.feature_map_from_dict(spec)
    spec = json.loads(json.dumps(fm.to_dict()))
    spec["params"]["weights"][0] = 1.5
    with pytest.raises(ValueError, match="Composite regenerated from its seed does not match"):
        dps.features.feature_map_from_dict(spec)


def test_sketch_save_and_load(tmp_path):
    fm = _mixed()
    sk = dps.Sketch(feature_map=fm, sum_units=np.arange(47), count=10, bounds=B2)
    sk.save(tmp_path / "c.npz")
    assert dps.Sketch.load(tmp_path / "c.npz").feature_map == fm


def test_a_crafted_block_is_refused_by_the_loader_before_it_is_built(tmp_path):
    from opendp_sketch.sketch import _digest  # a valid checksum over the crafted header

    sk = dps.Sketch(feature_map=dps.Composite([_one(), _rff()]), sum_units=np.arange(28), count=10, bounds=B2)
    meta = sk.to_dict()
    # an inner RFF asking for 2^40 features (2^41 random draws) in a file holding 28 sums
    meta["feature_map"]["params"]["maps"][1]["params"]["num_features"] = 1 << 40
    meta["sha256"] = _digest(meta, sk.sum_units)
    header = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(tmp_path / "bomb.npz", meta=header, sum_units=sk.sum_units)
    with pytest.raises(
        dps.SketchFormatError, match=r"num_features \(1099511627776\) exceeds what the 28 stored"
    ):
        dps.Sketch.load(tmp_path / "bomb.npz")


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([],), r"maps \(\[\]\) must be a non-empty sequence of feature maps"),
        ((None,), r"must be a non-empty sequence"),
        ((_one(),), r"must be a non-empty sequence"),
        (([_one(), "rff"],), r"maps entry \('rff'\) must be a feature map"),
        (([_one(), dps.RFF(dim=3, num_features=4)],), r"maps must all read the same columns"),
        (([_one(), dps.ByClass(_two(), 2)],), r"maps must all read the same columns"),
        (([_one(), _two()], [1.0]), r"weights \(\[1.0\]\) must be 2 numbers, one per map"),
        (([_one(), _two()], 1.0), r"must be 2 numbers"),
        (([_one(), _two()], [1.0, 0.0]), r"weight \(0.0\) must be a finite number in \[2\^-30, 2\^30\]"),
        (([_one(), _two()], [1.0, -1.0]), r"weight \(-1.0\) must be"),
        (([_one(), _two()], [1.0, float("nan")]), r"weight \(nan\) must be"),
        (([_one(), _two()], [1.0, float("inf")]), r"weight \(inf\) must be"),
        (([_one(), _two()], [1.0, True]), r"weight \(True\) must be"),
        (([_one(), _two()], [1.0, "2"]), r"weight \('2'\) must be"),
        (([_one(), _two()], [1.0, 2.0**31]), r"must be a finite number in"),
        (([_one()] * (MAX_BLOCKS + 1),), rf"it must have at most {MAX_BLOCKS}"),
        (([{"kind": "Nope", "params": {}}],), r"feature map kind \('Nope'\) must be one of"),
    ],
)
def test_bad_parameters_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        dps.Composite(*args)


def test_weight_ratios_that_overflow_the_integers_are_refused():
    # 2^-30 next to 2^30 puts the large block at 2^80 units per unit: beyond int64
    with pytest.raises(ValueError, match=r"outside the int64 range; use weights of similar size"):
        dps.Composite([_rff(), _one()], weights=[2.0**-30, 2.0**30])
    # a moderate ratio is fine and keeps every block's resolution
    fm = dps.Composite([_rff(), _one()], weights=[2.0**-8, 2.0**8])
    assert fm.blocks[0].weight == pytest.approx(2.0**-8, rel=1e-9)


def test_blocks_of_the_same_kind_do_not_share_work_arrays():
    # two RFF blocks use the same per-thread scratch names: each block is written out before the next
    a, b = _rff(), dps.RFF(dim=2, num_features=12, bandwidth=2.0, seed=9)
    for weights in ([1.0, 1.0], [0.3, 0.7], [2.0**-3, 1.0]):
        fm = dps.Composite([a, b, dps.QuantizedRFF(dim=2, num_features=6, seed=4)], [*weights, 0.6])
        total = check_sum_invariance(fm, X_PROBE, clip=B2, chunk_rows=(1, 7, 4096), n_jobs=(1, 2))
        assert total[:12] != total[12:24]
