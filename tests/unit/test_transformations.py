"""``opendp_sketch.backends.memory``: the box clip, the exact sums and counts and their stated
stabilities, each constructor's refusals, and the neighbouring-dataset behaviour of the numpy
backend's pair ``(Σq, n)`` (``make_sum_and_count``, ``make_clamped_sum_and_count``) on adversarial
rows. ``make_feature_sum``'s stated sensitivity per map is in ``tests/privacy/test_sensitivity.py``."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.memory import (
    I64_MAX,
    count_transformation,
    integer_sum_transformation,
    make_box_clip,
    make_clamped_sum_and_count,
    make_feature_sum,
    make_row_count,
    make_sum_and_count,
    pair_parts,
    pair_transformation,
    then_box_clip,
    then_feature_sum,
)
from opendp_sketch.testing import adversarial_rows, assert_within_sensitivity

SYM = dp.symmetric_distance()
LO, HI = np.array([0.0, -1.0]), np.array([1.0, 3.0])


@pytest.fixture(scope="module")
def fm() -> dps.Histogram:
    """Δ₁ = 2 (one bin per column), Δ₂ = √2, no fractional bits."""
    return dps.Histogram(bounds=(LO, HI), bins=4, dim=2)


@pytest.fixture(scope="module")
def rff() -> dps.RFF:
    """A map with fractional bits (its integers are not 0/1)."""
    return dps.RFF(dim=2, num_features=6, bandwidth=0.7, seed=11)


@pytest.fixture(scope="module")
def box() -> dp.Domain:
    return dps.box_domain((LO, HI))


@pytest.fixture(scope="module")
def base() -> np.ndarray:
    return np.random.default_rng(5).uniform(LO, HI, (30, 2))


def _array2(nan: bool = False, num_columns: int | None = 2) -> dp.Domain:
    return dp.numpy.array2_domain(num_columns=num_columns, T=float, nan=nan)


# -- make_box_clip ----------------------------------------------------------------------------------
def test_box_clip_output_domain_metric_and_stability() -> None:
    t = make_box_clip(_array2(), SYM, (LO, HI), column_names=["x", "y"])
    assert t.output_domain.descriptor == dps.box_domain((LO, HI), column_names=["x", "y"]).descriptor
    assert t.output_metric == SYM
    assert [t.map(d) for d in (0, 1, 5)] == [0, 1, 5]


def test_box_clip_values_nan_to_lower_bound_or_to_impute() -> None:
    X = np.array([[np.nan, np.nan], [-np.inf, np.inf], [2.0, -5.0], [0.25, 0.5], [1e308, -1e308]])
    plain = make_box_clip(_array2(), SYM, (LO, HI))(X)
    assert plain.tolist() == [[0.0, -1.0], [0.0, 3.0], [1.0, -1.0], [0.25, 0.5], [1.0, -1.0]]
    imputed = make_box_clip(_array2(nan=True), SYM, (LO, HI), impute=[0.5, 2.0])(X)
    assert imputed.tolist() == [[0.5, 2.0], [0.0, 3.0], [1.0, -1.0], [0.25, 0.5], [1.0, -1.0]]
    assert plain.dtype == np.float64


def test_box_clip_accepts_integer_valued_lists_as_float_arrays() -> None:
    out = make_box_clip(_array2(), SYM, (LO, HI))(np.array([[2, 2]], dtype=np.float64))
    assert out.tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("row", [[np.nan, 0.0], [np.inf, -np.inf], [1e300, -1e300], [-5e-324, 3.0]])
def test_box_clip_neighbours_differ_in_one_row_inside_the_box(base: np.ndarray, row: list[float]) -> None:
    t = make_box_clip(_array2(), SYM, (LO, HI))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Y, Y2 = t(base), t(np.vstack([base, [row]]))
    assert np.array_equal(Y2[:-1], Y)
    assert t.output_domain.member(Y2) and t.output_domain.member(Y)


def test_then_box_clip_chains_into_then_feature_sum(fm: dps.Histogram) -> None:
    chain = (_array2(), SYM) >> then_box_clip((LO, HI)) >> then_feature_sum(fm, p=1, fixed_point=True)
    X = np.array([[np.nan, 0.0], [0.9, 2.9], [5.0, 5.0]])
    assert list(chain(X)) == [int(v) for v in fm.fixed_sum(np.array([[0.0, 0.0], [0.9, 2.9], [1.0, 3.0]]))]
    assert chain.map(1) == 2 and chain.map(4) == 8


@pytest.mark.parametrize(
    "domain, kwargs, message",
    [
        (lambda: dp.numpy.array2_domain(num_columns=2, T=int), {}, r"must be dp\.numpy\.array2_domain"),
        (lambda: dps.box_domain((0, 1), num_columns=2), {}, r"must be dp\.numpy\.array2_domain\(T=float\)$"),
        (lambda: dp.vector_domain(dp.atom_domain(T=float)), {}, r"must be dp\.numpy\.array2_domain"),
        (lambda: _array2(num_columns=3), {}, r"^bounds \(.*\) must have one value per column \(3 columns\)$"),
        (lambda: _array2(nan=True), {}, r"permits NaN: pass impute=<public value> or use nan=False$"),
        (_array2, {"impute": 5.0}, r"must lie inside the public bounds of every column; column 0"),
        (_array2, {"impute": [0.5, 0.5, 0.5]}, r"must be one number or 2 numbers$"),
        (_array2, {"column_names": ["a"]}, r"must be 2 distinct names$"),
    ],
)
def test_box_clip_refusals(domain: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_box_clip(domain(), SYM, (LO, HI), **kwargs)


def test_box_clip_bounds_wider_than_a_sized_domain() -> None:
    """Vector bounds of 3 columns on a domain of 2: the column counts disagree."""
    with pytest.raises(ValueError, match=r"one value per column \(2 columns\)$"):
        make_box_clip(_array2(), SYM, ([0, 0, 0], [1, 1, 1]))


def test_box_clip_refuses_other_metrics() -> None:
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
        make_box_clip(_array2(), dp.insert_delete_distance(), (LO, HI))


# -- make_feature_sum: refusals and output types ------------------------------------------------
def test_feature_sum_output_types(box: dp.Domain, fm: dps.Histogram) -> None:
    t = make_feature_sum(box, SYM, fm)
    assert t.output_domain == dp.vector_domain(dp.atom_domain(T=float, nan=False))
    assert t.output_metric == dp.l1_distance(T=float)
    t2 = make_feature_sum(box, SYM, fm, p=2, fixed_point=True)
    assert t2.output_domain == dp.vector_domain(dp.atom_domain(T=dp.i64))
    assert t2.output_metric == dp.l2_distance(T=float)
    assert t2.map(1) == math.nextafter(math.sqrt(2), math.inf)


def test_feature_sum_floats_are_the_integers_scaled(box: dp.Domain, rff: dps.RFF, base: np.ndarray) -> None:
    ints = make_feature_sum(box, SYM, rff, fixed_point=True)(base)
    floats = make_feature_sum(box, SYM, rff)(base)
    assert rff.frac_bits > 0
    assert list(floats) == [math.ldexp(int(v), -rff.frac_bits) for v in ints]
    assert any(v % (1 << rff.frac_bits) for v in ints)  # the scaling is visible


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"p": 3}, r"^p \(3\) must be 1 or 2$"),
        ({"p": "1"}, r"^p \('1'\) must be 1 or 2$"),
        ({"fixed_point": 1}, r"^fixed_point \(1\) must be a bool$"),
        ({"chunk_rows": 0}, r"^chunk_rows \(0\) must be a positive integer$"),
        ({"n_jobs": 0}, r"^n_jobs \(0\) must be a positive integer or None$"),
    ],
)
def test_feature_sum_refuses_bad_options(
    box: dp.Domain, fm: dps.Histogram, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_feature_sum(box, SYM, fm, **kwargs)


@pytest.mark.parametrize(
    "make", [make_feature_sum, make_sum_and_count], ids=["make_feature_sum", "make_sum_and_count"]
)
def test_sum_constructors_refuse_mismatched_inputs(make: Any, box: dp.Domain, fm: dps.Histogram) -> None:
    with pytest.raises(ValueError, match=r"^feature_map expects 3 columns but input_domain has 2$"):
        make(box, SYM, dps.Histogram(bounds=(0, 1), bins=2, dim=3))
    with pytest.raises(ValueError, match=r"^feature_map \('hist'\) must be an opendp_sketch feature map$"):
        make(box, SYM, "hist")
    with pytest.raises(ValueError, match=r"must be a box_domain"):
        make(_array2(), SYM, fm)
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
        make(box, dp.change_one_distance(), fm)


# -- make_row_count, integer_sum_transformation, count_transformation ----------------------------------
def test_row_count(box: dp.Domain) -> None:
    t = make_row_count(box, SYM)
    assert t(np.zeros((0, 2))) == 0 and t(np.zeros((7, 2))) == 7
    assert t.output_domain == dp.atom_domain(T=dp.i64) and t.output_metric == dp.absolute_distance(T=dp.i64)
    assert [t.map(d) for d in (0, 1, 9)] == [0, 1, 9]
    with pytest.raises(ValueError, match=r"must be a box_domain"):
        make_row_count(_array2(), SYM)
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
        make_row_count(box, dp.insert_delete_distance())


def test_integer_sum_transformation_stabilities(box: dp.Domain, rff: dps.RFF) -> None:
    t1 = integer_sum_transformation(box, SYM, rff, 1, lambda x: np.zeros(rff.num_features, dtype=np.int64))
    assert t1.output_metric == dp.l1_distance(T=dp.i64)
    assert t1.map(1) == rff.int_sensitivity(1) and t1.map(3) == 3 * rff.int_sensitivity(1)
    assert isinstance(t1.map(3), int)
    t2 = integer_sum_transformation(box, SYM, rff, 2, lambda x: np.zeros(rff.num_features, dtype=np.int64))
    assert t2.output_metric == dp.l2_distance(T=float)
    for d in (1, 2, 7):  # rounded up: never below d·Δ₂
        assert t2.map(d) == math.nextafter(d * rff.int_sensitivity(2), math.inf)


def test_count_transformation_is_one_stable(box: dp.Domain) -> None:
    t = count_transformation(box, SYM, lambda x: 42)
    assert t(np.zeros((1, 2))) == 42 and t.map(5) == 5


# -- the pair (Σq, n) and its halves --------------------------------------------------------------
def test_pair_output_and_halves(box: dp.Domain, fm: dps.Histogram, base: np.ndarray) -> None:
    pair = make_sum_and_count(box, SYM, fm)
    assert str(pair.output_domain) == f"SumAndCount(num_features={fm.num_features})"
    assert str(pair.output_metric) == "SymmetricDistanceOfSource()"
    assert pair.map(3) == 3
    total, n = pair(base)
    assert n == 30 and isinstance(n, int) and total.dtype == np.int64
    assert total.tolist() == [int(v) for v in fm.fixed_sum(base)]
    for p, metric in ((1, dp.l1_distance(T=dp.i64)), (2, dp.l2_distance(T=float))):
        s, c = pair_parts(pair, fm, p)
        assert list((pair >> s)(base)) == total.tolist() and (pair >> c)(base) == 30
        assert (pair >> s).output_metric == metric
        assert (pair >> c).map(2) == 2
    assert (pair >> pair_parts(pair, fm, 1)[0]).map(2) == 2 * fm.int_sensitivity(1) == 4


def test_pair_output_domain_membership(fm: dps.Histogram) -> None:
    m = fm.num_features
    t = pair_transformation(dps.box_domain((LO, HI)), SYM, fm, lambda x: (np.zeros(m, np.int64), 0))
    member = t.output_domain.member
    assert member((np.zeros(m, np.int64), 3))
    assert not member((np.zeros(m + 1, np.int64), 3))
    assert not member((np.zeros(m, np.int64), 3.0))
    assert not member([np.zeros(m, np.int64), 3])
    assert not member((np.zeros(m, np.int64), 3, 4))


@pytest.mark.parametrize("chunk_rows, n_jobs", [(1, None), (7, 3), (4096, 1)])
def test_pair_is_chunk_and_thread_invariant(
    box: dp.Domain, rff: dps.RFF, base: np.ndarray, chunk_rows: int, n_jobs: int | None
) -> None:
    reference = make_sum_and_count(box, SYM, rff)(base)
    total, n = make_sum_and_count(box, SYM, rff, chunk_rows=chunk_rows, n_jobs=n_jobs)(base)
    assert total.tolist() == reference[0].tolist() and n == reference[1]


def test_sum_and_count_clips_rows_outside_its_domain(box: dp.Domain, fm: dps.Histogram) -> None:
    """Data outside the declared box (e.g. in a Context) never raises: it is clipped, NaN to the
    lower bound, like make_box_clip."""
    X = np.array([[np.nan, np.inf], [-1e308, 0.0], [2.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        total, n = make_sum_and_count(box, SYM, fm)(X)
    clipped = make_box_clip(_array2(), SYM, (LO, HI))(X)
    assert n == 3 and total.tolist() == [int(v) for v in fm.fixed_sum(clipped)]


# -- make_clamped_sum_and_count ---------------------------------------------------------------------
def test_clamped_equals_clip_then_sum(rff: dps.RFF, base: np.ndarray) -> None:
    X = np.vstack([base, adversarial_rows(rff, (LO, HI), n_random=4, n_pool=64)])
    assert np.isnan(X).any() and np.isinf(X).any()
    for impute in (None, [0.5, 0.0]):
        clip = make_box_clip(_array2(nan=impute is not None), SYM, (LO, HI), impute=impute)
        expected = make_sum_and_count(dps.box_domain((LO, HI)), SYM, rff)(clip(X))
        domain = _array2(nan=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = make_clamped_sum_and_count(domain, SYM, rff, (LO, HI), impute=impute, chunk_rows=5)(X)
        assert got[0].tolist() == expected[0].tolist() and got[1] == expected[1] == X.shape[0]


def test_clamped_imputes_across_blocks(fm: dps.Histogram) -> None:
    """More rows than one imputation block (65 536): every NaN still reads as the impute value."""
    n = 70_001
    X = np.full((n, 2), np.nan)
    X[::2, 0] = 0.1
    t = make_clamped_sum_and_count(_array2(nan=True), SYM, fm, (LO, HI), impute=[0.9, 2.9])
    total, count = t(X)
    assert count == n
    expected = fm.fixed_sum(np.where(np.isnan(X), [0.9, 2.9], X))
    assert total.tolist() == [int(v) for v in expected]
    assert total.tolist()[:4] == [35_001, 0, 0, 35_000]  # column 0: 0.1 in bin 0, 0.9 in bin 3


@pytest.mark.parametrize("impute", [None, 0.5])
def test_clamped_neighbours_stay_within_the_stated_stabilities(
    rff: dps.RFF, base: np.ndarray, impute: float | None
) -> None:
    """Adding any adversarial row (NaN, ±inf, huge, one ulp outside, corners) moves the integer
    sum by at most the map's sensitivity and the count by one; both neighbours give a pair."""
    pair = make_clamped_sum_and_count(_array2(nan=True), SYM, rff, (LO, HI), impute=impute)
    s1, c1 = pair_parts(pair, rff, 1)
    assert (pair >> s1).map(1) == rff.int_sensitivity(1) and (pair >> c1).map(1) == 1
    a_sum, a_n = pair(base)
    rows = adversarial_rows(rff, (LO, HI), n_random=8, n_pool=128, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, row in enumerate(rows):
            neighbour = np.vstack([base, row]) if i % 2 else np.vstack([row, base])
            b_sum, b_n = pair(neighbour)
            assert b_n == a_n + 1
            for p in (1, 2):
                assert_within_sensitivity(rff, a_sum, b_sum, p)
        for i in range(0, base.shape[0], 7):
            b_sum, b_n = pair(np.delete(base, i, axis=0))
            assert b_n == a_n - 1
            assert_within_sensitivity(rff, a_sum, b_sum, 1)


@pytest.mark.parametrize(
    "domain, args, kwargs, message",
    [
        (lambda: dps.box_domain((0, 1), num_columns=2), ((LO, HI),), {}, r"must be dp\.numpy\.array2_domain"),
        (lambda: _array2(num_columns=3), ((LO, HI),), {}, r"^bounds have 2 columns but input_domain has 3$"),
        (_array2, ((0, [1, 2, 3]),), {}, r"one value per column \(2 columns\)$"),
        (_array2, ((LO, HI),), {"impute": 9.0}, r"must lie inside the public bounds"),
        (_array2, ((LO, HI),), {"chunk_rows": -1}, r"^chunk_rows \(-1\) must be a positive integer$"),
        (_array2, ((LO, HI),), {"n_jobs": 1.5}, r"^n_jobs \(1\.5\) must be a positive integer or None$"),
    ],
)
def test_clamped_refusals(
    fm: dps.Histogram, domain: Any, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_clamped_sum_and_count(domain(), SYM, fm, *args, **kwargs)


def test_clamped_refuses_a_non_map_and_other_metrics(fm: dps.Histogram) -> None:
    with pytest.raises(ValueError, match=r"must be an opendp_sketch feature map$"):
        make_clamped_sum_and_count(_array2(), SYM, object(), (LO, HI))
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
        make_clamped_sum_and_count(_array2(), dp.insert_delete_distance(), fm, (LO, HI))


def test_saturation_limit_is_int64_max() -> None:
    assert I64_MAX == 2**63 - 1 == np.iinfo(np.int64).max
