"""Stated sensitivities hold for the integers actually summed, on neighbouring datasets.

For every feature map: adding or removing one row (adversarial rows included: corners, norm
maximisers, out-of-box, ±inf, NaN) never moves the exact integer sum ``Σq(x_i)`` by more than
``int_sensitivity(p)``; no single row's ``q(x)`` exceeds the integer bound; the exact-integer
helpers of ``opendp_sketch._fixed`` keep their promises; and ``make_feature_sum`` states exactly
the map's sensitivity and outputs ``fixed_sum · 2^-k``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opendp_sketch as dps
from opendp_sketch._fixed import Accumulator, enforce_l1, enforce_l2, isqrt_ceil, sqrt_up
from opendp_sketch.testing import (
    adversarial_rows,
    check_neighbour_sensitivity,
    check_row_norms,
    check_sum_invariance,
    resolve_bounds,
)

#: id -> (map factory, public bounds, lower limit of observed/stated for p=1 and p=2, or None)
CASES = {
    "rff-gaussian": (
        lambda: dps.RFF(dim=3, num_features=64, bandwidth=0.7, seed=1),
        (-2.0, 2.0),
        (0.9, 0.999),
    ),
    "rff-laplacian-wide": (
        lambda: dps.RFF(dim=12, num_features=16, bandwidth=2.0, kernel="laplacian", seed=2),
        (-1.0, 1.0),
        (0.999, 0.999),  # d ≥ m': every phase can sit at an odd multiple of π/4
    ),
    "quantized-rff": (lambda: dps.QuantizedRFF(dim=3, num_features=40, seed=3), (-2.0, 2.0), (1.0, 1.0)),
    "race-l2-k1": (
        lambda: dps.RACE(dim=3, rows=7, buckets=11, bucket_width=0.8, seed=4),
        (-2.0, 2.0),
        (1.0, 1.0),
    ),
    "race-l2-k3": (
        lambda: dps.RACE(dim=3, rows=7, buckets=11, bucket_width=0.8, hashes_per_row=3, seed=4),
        (-2.0, 2.0),
        (1.0, 1.0),
    ),
    "race-srp": (lambda: dps.RACE(dim=4, rows=5, buckets=16, family="srp", seed=5), (-2.0, 2.0), (1.0, 1.0)),
    "race-srp-hashed": (
        lambda: dps.RACE(dim=4, rows=5, buckets=10, family="srp", hashes_per_row=6, seed=5),
        (-2.0, 2.0),
        (1.0, 1.0),
    ),
    "histogram": (
        lambda: dps.Histogram(bounds=([0, -5, 10], [1, 5, 10.5]), bins=[3, 7, 16]),
        ([0, -5, 10], [1, 5, 10.5]),
        (1.0, 1.0),
    ),
    "dyadic": (lambda: dps.DyadicTrees(bounds=([0, -1], [1, 1]), levels=5), ([0, -1], [1, 1]), (1.0, 1.0)),
    "moments-center": (
        lambda: dps.Moments(dim=3, radius=2.3, center=[0.5, -0.5, 0.0]),  # 2^k·r not an integer
        (-4.0, 4.0),
        (0.999, 0.999),
    ),
    "moments-large": (lambda: dps.Moments(dim=2, radius=1000.0), (-2e3, 2e3), (0.999, 0.999)),
    "moments-no-norm": (
        lambda: dps.Moments(dim=3, radius=2.3, center=[0.5, -0.5, 0.0], squared_norm=False),
        (-4.0, 4.0),
        (0.99, 0.999),
    ),
    "random-quadratic": (
        lambda: dps.RandomQuadratic(dim=4, num_features=30, radius=1.5, seed=6),
        (-2.0, 2.0),
        (0.999, None),  # the L2 bound ‖Ω‖₂²r² is valid but loose
    ),
    "byclass-rff": (
        lambda: dps.ByClass(dps.RFF(dim=2, num_features=16, seed=7), num_classes=3),
        (-1.0, 1.0),
        (0.9, 0.999),
    ),
    "byclass-histogram": (
        lambda: dps.ByClass(dps.Histogram(bounds=(0, 1), bins=4, dim=2), num_classes=4),
        (0.0, 1.0),
        (1.0, 1.0),
    ),
}


def _base_dataset(fm: dps.FeatureMap, bounds, seed: int = 0) -> np.ndarray:
    """24 uniform rows of the box plus 6 extreme rows, so removals also hit extremes."""
    lo, hi = resolve_bounds(fm, bounds)
    rng = np.random.default_rng(seed)
    extremes = adversarial_rows(fm, bounds, n_random=0, seed=seed + 1, n_pool=64)
    return np.vstack(
        [rng.uniform(lo, hi, (24, lo.size)), extremes[rng.choice(len(extremes), 6, replace=False)]]
    )


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    factory, bounds, tight = CASES[request.param]
    fm = factory()
    rows = adversarial_rows(fm, bounds, seed=1, max_corners=256)
    return fm, bounds, tight, rows


# -- neighbouring datasets ----------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_neighbours_move_the_exact_sum_by_at_most_int_sensitivity(case, p):
    fm, bounds, tight, rows = case
    X = _base_dataset(fm, bounds)
    observed, stated = check_neighbour_sensitivity(fm, X, bounds, p, rows=rows, chunk_rows=7, n_jobs=1)
    assert stated == fm.int_sensitivity(p)
    # the adversarial rows reach the bound (one-hot maps: exactly), so the check is not vacuous
    if tight[p - 1] is not None:
        assert observed >= tight[p - 1] * stated


def test_rows_never_exceed_the_integer_bound(case):
    fm, bounds, _, rows = case
    lo, hi = resolve_bounds(fm, bounds)
    for clip in (None, (lo, hi)):  # raw rows stress the enforcement; clipped rows are what is summed
        norms = check_row_norms(fm, rows, clip=clip)
        assert norms.max_l1 <= fm.int_sensitivity(1)
        assert norms.max_l2_squared <= fm._int_bound(2)
        assert norms.max_l1 > 0


def test_int_sensitivity_2_rounds_up(case):
    fm = case[0]
    s = fm.int_sensitivity(2)
    assert Fraction(s) ** 2 >= fm._int_bound(2)
    assert Fraction(math.nextafter(s, 0)) ** 2 < fm._int_bound(2) or s == 0
    assert Fraction(fm.sensitivity(1)) >= Fraction(fm.int_sensitivity(1)) / 2**fm.frac_bits
    assert Fraction(fm.sensitivity(2)) >= Fraction(s) / 2**fm.frac_bits


def test_moments_largest_radius_chunk_sum_does_not_wrap():
    # the largest radius (2^10): k = 26 - 20 = 6, a row on the sphere has q_s = 2^26 units; the
    # chunk guard keeps every int64 chunk sum below 2^62 whatever chunk_rows is asked for
    r = 2.0**10
    fm = dps.Moments(dim=1, radius=r)
    assert fm.frac_bits == 6
    X = np.full((3000, 1), r)
    check_neighbour_sensitivity(fm, X, (-2 * r, 2 * r), p=1, rows=np.array([[r]]))
    assert fm.fixed_sum(X, chunk_rows=10**9) == [3000 * 2**16, 3000 * 2**26]


@pytest.mark.parametrize("radius", [2.0**-11, 2.0**11, 1e6])
def test_moments_radius_outside_the_exact_range_is_refused(radius):
    # beyond [2^-10, 2^10] the integers would lose resolution or overflow int64: refuse, clearly
    with pytest.raises(ValueError, match=r"radius .* must be between 2\^-10 and 2\^10"):
        dps.Moments(dim=1, radius=radius)


# -- hypothesis: extreme floats -----------------------------------------------------------------
HYPO_MAPS = {
    "rff": (dps.RFF(dim=3, num_features=32, bandwidth=0.5, seed=8), (-3.0, 3.0)),
    "moments": (dps.Moments(dim=3, radius=2.3, center=[1.0, 0.0, -1.0]), (-4.0, 4.0)),
    "moments-no-norm": (dps.Moments(dim=3, radius=2.3, squared_norm=False), (-4.0, 4.0)),
    "random-quadratic": (dps.RandomQuadratic(dim=3, num_features=20, radius=1.5, seed=9), (-2.0, 2.0)),
}
_FMAX = float(np.finfo(np.float64).max)


def _extreme_floats(lo: float, hi: float) -> st.SearchStrategy[float]:
    near = [lo, hi, math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf), lo - 1e-9, hi + 1e-9]
    special = [math.inf, -math.inf, math.nan, _FMAX, -_FMAX, 1e300, -1e300, 1e30, -1e30, 1e15, -1e15]
    tiny = [5e-324, -5e-324, 1e-300, 0.0, -0.0]
    return st.one_of(
        st.sampled_from(near + special + tiny),
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=3 * lo, max_value=3 * hi),
    )


@pytest.mark.parametrize("name", list(HYPO_MAPS))
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_extreme_rows_respect_the_bounds(name, data):
    fm, bounds = HYPO_MAPS[name]
    lo, hi = bounds
    row = st.lists(_extreme_floats(lo, hi), min_size=fm.dim, max_size=fm.dim)
    rows = np.array(data.draw(st.lists(row, min_size=1, max_size=6)), dtype=np.float64)
    base = np.random.default_rng(0).uniform(lo, hi, (5, fm.dim))
    check_row_norms(fm, rows)  # unclipped: the integer enforcement alone must hold the bound
    check_row_norms(fm, rows, clip=(lo, hi))
    for p in (1, 2):  # the first drawn row joins a dataset holding the others and 5 tame rows
        check_neighbour_sensitivity(
            fm, np.vstack([base, rows[1:]]), bounds, p, rows=rows[:1], chunk_rows=3, n_jobs=1
        )


# -- opendp_sketch._fixed -------------------------------------------------------------------------
def _l1(row) -> int:
    return sum(abs(int(v)) for v in row)


def _l2sq(row) -> int:
    return sum(int(v) ** 2 for v in row)


def test_enforce_l1_hand_checked_and_random():
    q = np.array([[3, -4], [1, 1], [0, 0]], dtype=np.int64)
    # row 0: ‖q‖₁ = 7 > 5 → sign · (|q|·5 // 7) = (2, -2); the others are within the bound
    assert enforce_l1(q.copy(), 5).tolist() == [[2, -2], [1, 1], [0, 0]]
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = rng.integers(-(2**40), 2**40, (20, rng.integers(1, 8)), dtype=np.int64)
        bound = int(rng.integers(0, 2**42))
        out = enforce_l1(q.copy(), bound)
        for before, after in zip(q, out):
            assert _l1(after) <= bound
            assert (np.abs(after) <= np.abs(before)).all() and (np.sign(after) * np.sign(before) >= 0).all()
            if _l1(before) <= bound:
                assert after.tolist() == before.tolist()


def test_enforce_l2_hand_checked_and_random():
    q = np.array([[3, 4], [2, 2]], dtype=np.int64)
    # row 0: S = 25 > 16, R = 4, N = 5 → (3·4 // 5, 4·4 // 5) = (2, 3); row 1: 8 ≤ 16 unchanged
    assert enforce_l2(q.copy(), 16).tolist() == [[2, 3], [2, 2]]
    # S = 2^60 + 1 exceeds 2^60 by one unit, which float64 cannot see: the exact check must
    near = np.array([[2**30, 1]], dtype=np.int64)
    assert _l2sq(enforce_l2(near.copy(), 2**60)[0]) <= 2**60
    assert enforce_l2(near.copy(), 2**60 + 1).tolist() == near.tolist()
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = rng.integers(-(2**31), 2**31, (20, rng.integers(1, 8)), dtype=np.int64)
        bound_sq = int(rng.integers(0, 2**62))
        out = enforce_l2(q.copy(), bound_sq)
        for before, after in zip(q, out):
            assert _l2sq(after) <= bound_sq
            assert (np.abs(after) <= np.abs(before)).all()
            if _l2sq(before) <= bound_sq:
                assert after.tolist() == before.tolist()


def test_accumulator_is_exact_past_int64():
    big = 2**62 - 1
    acc = Accumulator(3)
    for _ in range(10):
        acc.add(np.array([big, -big, 1], dtype=np.int64))
    assert acc.total() == [10 * big, -10 * big, 10]
    # parts at and above the spill threshold, up to the int64 maximum, mixed with small ones
    acc = Accumulator(2)
    parts = [[2**62, -(2**62)], [2**63 - 1, 5], [-(2**63 - 1), 2**63 - 1], [7, -3]] * 4
    for part in parts:
        acc.add(np.array(part, dtype=np.int64))
    assert acc.total() == [sum(p[0] for p in parts), sum(p[1] for p in parts)]
    acc.add_exact([2**100, -(2**100)])
    assert acc.total() == [sum(p[0] for p in parts) + 2**100, sum(p[1] for p in parts) - 2**100]
    assert Accumulator(0).total() == []


def test_sqrt_up_and_isqrt_ceil():
    values = [
        0,
        1,
        2,
        3,
        15,
        16,
        17,
        2**52 + 1,
        2**53 + 1,
        10**17 + 3,
        (2**40 + 1) ** 2,
        (2**40 + 1) ** 2 - 1,
    ]
    values += [2**120 + 12345, 3 * 4**20, 8 * 4**20]
    for v in values:
        s = sqrt_up(v)
        assert Fraction(s) ** 2 >= v  # never below the exact square root
        assert s <= (math.isqrt(v) + 1) * (1 + 2**-50)  # and only a few ulps above it
        r = isqrt_ceil(v)
        assert r * r >= v and (r == 0 or (r - 1) ** 2 < v)
    assert sqrt_up(16) == 4.0 and isqrt_ceil(17) == 5 and isqrt_ceil(16) == 4


# -- make_feature_sum -------------------------------------------------------------------------------
SUM_CASES = [
    "rff-gaussian",
    "quantized-rff",
    "race-l2-k3",
    "histogram",
    "moments-center",
    "random-quadratic",
    "byclass-rff",
]


@pytest.mark.parametrize("name", SUM_CASES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("fixed_point", [False, True])
def test_make_feature_sum_states_the_map_sensitivity(name, p, fixed_point):
    factory, bounds, _ = CASES[name]
    fm = factory()
    lo, hi = resolve_bounds(fm, bounds)
    domain = dps.box_domain((lo, hi))
    t = dps.make_feature_sum(
        domain, dp.symmetric_distance(), feature_map=fm, p=p, fixed_point=fixed_point, chunk_rows=5
    )
    stated = fm.int_sensitivity(p) if fixed_point else fm.sensitivity(p)
    if fixed_point and p == 1:
        assert t.map(1) == stated and isinstance(t.map(1), int)
        assert t.map(3) == 3 * stated
    else:
        assert stated <= t.map(1) <= math.nextafter(stated, math.inf)
        assert Fraction(t.map(3)) >= 3 * Fraction(stated) and t.map(3) <= 3 * stated * (1 + 1e-15)
    X = np.vstack([np.random.default_rng(2).uniform(lo, hi, (23, lo.size)), lo, hi])
    assert domain.member(X)
    exact = fm.fixed_sum(X, clip=(lo, hi))
    out = t(X)
    if fixed_point:
        assert list(out) == exact
    else:
        assert list(out) == [math.ldexp(v, -fm.frac_bits) for v in exact]


def test_make_feature_sum_output_is_chunk_invariant_and_clipped():
    fm = CASES["histogram"][0]()
    lo, hi = resolve_bounds(fm, CASES["histogram"][1])
    X = np.random.default_rng(3).uniform(lo, hi, (40, 3))
    outs = [
        dps.make_feature_sum(dps.box_domain((lo, hi)), dp.symmetric_distance(), feature_map=fm, chunk_rows=c)(
            X
        )
        for c in (1, 7, 4096)
    ]
    assert outs[0] == outs[1] == outs[2] == [float(v) for v in check_sum_invariance(fm, X)]


# -- row-wise determinism: a row's integers never depend on the rows around it -----------------
# The add/remove-one-row argument needs Σ q over X ∪ {x*} minus Σ q over X to be exactly q(x*).
# That fails if a row's integers depend on its position (e.g. a BLAS product that rounds a
# 1-row block differently from a 256-row block). Wide rows (d = 64) make such rounding visible.
WIDE = {
    "rff": lambda: dps.RFF(dim=64, num_features=64, bandwidth=0.3, seed=11),
    "rff-laplacian": lambda: dps.RFF(dim=64, num_features=64, bandwidth=0.3, kernel="laplacian", seed=11),
    "quantized-rff": lambda: dps.QuantizedRFF(dim=64, num_features=64, bandwidth=0.3, seed=12),
    "race-l2": lambda: dps.RACE(dim=64, rows=16, buckets=32, bucket_width=0.05, hashes_per_row=2, seed=13),
    "race-srp": lambda: dps.RACE(dim=64, rows=16, buckets=64, family="srp", seed=14),
    "random-quadratic": lambda: dps.RandomQuadratic(dim=64, num_features=40, radius=8.0, seed=15),
    "moments": lambda: dps.Moments(dim=64, radius=8.0),
}


@pytest.mark.parametrize("name", list(WIDE))
def test_row_integers_do_not_depend_on_position_or_neighbours(name):
    fm = WIDE[name]()
    rng = np.random.default_rng(20)
    X = rng.normal(0, 1, (700, 64)) * rng.uniform(0.01, 3, (700, 1))
    batch = fm.fixed_features(X)
    alone = np.vstack([fm.fixed_features(X[i : i + 1]) for i in range(0, 700, 7)])
    assert np.array_equal(batch[::7], alone)
    shuffled = rng.permutation(700)
    assert np.array_equal(fm.fixed_features(X[shuffled]), batch[shuffled])


@pytest.mark.parametrize("name", list(WIDE))
def test_removing_a_middle_row_changes_the_sum_by_exactly_its_integers(name):
    fm = WIDE[name]()
    rng = np.random.default_rng(21)
    X = rng.normal(0, 1, (1000, 64))
    full = np.array(fm.fixed_sum(X, chunk_rows=300), dtype=object)
    for i in (0, 1, 255, 256, 599, 999):
        rest = np.array(fm.fixed_sum(np.delete(X, i, axis=0), chunk_rows=300), dtype=object)
        assert (full - rest).tolist() == fm.fixed_features(X[i : i + 1])[0].tolist()
