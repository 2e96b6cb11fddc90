"""MarginalTables and Composite: stated sensitivities hold for the integers actually summed.

Adding or removing one row — random, on bin edges and one ulp either side, half-integer codes,
NaN, ``±inf``, ``±1e308`` mixed across columns — never moves the exact integer sum by more than
``int_sensitivity(p)``; one-hot maps reach their bound exactly (the check is not vacuous); the
release path (``make_feature_sum``) sums the same integers.
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opendp_sketch as dps
from opendp_sketch.testing import (
    adversarial_rows,
    assert_within_sensitivity,
    check_neighbour_sensitivity,
    check_row_norms,
    resolve_bounds,
)

BOX3 = ([0.0, -5.0, 0.0], [1.0, 5.0, 3.0])


def _marginals() -> dps.MarginalTables:
    return dps.MarginalTables(
        BOX3, [0, 1, 2, (0, 2), (2, 1, 0)], bins=[[7], [5], [4], [3, 4], [4, 5, 2]], categorical=[2]
    )


#: id -> (map factory, public box, lower limit of observed/stated for p = 1 and p = 2)
CASES = {
    "marginals-mixed": (_marginals, BOX3, (1.0, 1.0)),
    "marginals-auto": (
        lambda: dps.MarginalTables.auto(BOX3, categorical=[2], fine_bins=16, coarse_bins=4, max_cells=200),
        BOX3,
        (1.0, 1.0),
    ),
    "composite-onehot": (
        lambda: dps.Composite(
            [dps.MarginalTables(BOX3, [0, 1, 2], bins=8, categorical=[2]), _marginals()], [1.0, 0.3]
        ),
        BOX3,
        (1.0, 1.0),
    ),
    "composite-rff-moments": (
        lambda: dps.Composite(
            [
                _marginals(),
                dps.RFF(dim=3, num_features=16, bandwidth=0.7, seed=1),
                dps.Moments(dim=3, radius=2.3),
            ],
            [1.0, 0.37, 0.11],
        ),
        BOX3,
        (0.9, 0.9),
    ),
    "composite-nested-byclass": (
        lambda: dps.ByClass(
            dps.Composite(
                [dps.MarginalTables(BOX3, [(0, 1)], bins=3), dps.QuantizedRFF(dim=3, num_features=8, seed=2)],
                [2.0, 0.7],
            ),
            num_classes=3,
        ),
        BOX3,
        (0.999, 0.999),  # the ±1 block's weight 0.7 truncates each entry: within 1 unit per feature
    ),
}


def _edge_rows(fm: dps.FeatureMap, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rows on every public bin edge of the marginals inside ``fm`` (and one ulp either side), with
    the other columns random or extreme."""
    inner = fm.feature_map if isinstance(fm, dps.ByClass) else fm
    found = [b.feature_map for b in inner.blocks] if isinstance(inner, dps.Composite) else [inner]
    rows = []
    for m in (m for m in found if isinstance(m, dps.MarginalTables)):
        for blk in m.blocks:
            for j, b in zip(blk.subset, blk.shape):
                for e in m.edges(j, b):
                    for v in (e, np.nextafter(e, -np.inf), np.nextafter(e, np.inf)):
                        row = rng.uniform(lo, hi)
                        row[rng.random(lo.size) < 0.3] = rng.choice([np.nan, np.inf, -np.inf, 1e308, -1e308])
                        row[j] = v
                        rows.append(row)
    return np.array(rows)


def _rows(fm: dps.FeatureMap, bounds) -> np.ndarray:
    lo, hi = resolve_bounds(fm, bounds)
    rng = np.random.default_rng(7)
    edges = _edge_rows(fm, lo[: fm.dim], hi[: fm.dim], rng)
    if fm.input_dim > fm.dim:  # ByClass: append labels, extreme ones included
        labels = rng.choice([0, 1, 2, -1, 3, 0.5, 1.5, np.nan, np.inf, -np.inf], edges.shape[0])
        edges = np.column_stack([edges, labels])
    return np.vstack([adversarial_rows(fm, bounds, seed=1, n_random=64), edges])


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    factory, bounds, tight = CASES[request.param]
    fm = factory()
    return fm, bounds, tight, _rows(fm, bounds)


@pytest.mark.parametrize("p", [1, 2])
def test_neighbours_move_the_exact_sum_by_at_most_int_sensitivity(case, p):
    fm, bounds, tight, rows = case
    lo, hi = resolve_bounds(fm, bounds)
    rng = np.random.default_rng(0)
    X = np.vstack([rng.uniform(lo, hi, (20, lo.size)), rows[rng.choice(len(rows), 8, replace=False)]])
    observed, stated = check_neighbour_sensitivity(fm, X, bounds, p, rows=rows, chunk_rows=5, n_jobs=1)
    assert stated == fm.int_sensitivity(p)
    assert observed >= tight[p - 1] * stated


def test_rows_never_exceed_the_integer_bound(case):
    fm, bounds, _, rows = case
    lo, hi = resolve_bounds(fm, bounds)
    for clip in (None, (lo, hi)):  # raw rows: the maps' own clipping; clipped rows: what is summed
        norms = check_row_norms(fm, rows, clip=clip)
        assert 0 < norms.max_l1 <= fm.int_sensitivity(1) and norms.max_l2_squared <= fm._int_bound(2)


def test_one_hot_rows_have_exactly_one_cell_per_marginal(case):
    fm, bounds, _, rows = case
    if not isinstance(fm, dps.MarginalTables):
        pytest.skip("one-hot marginals only")
    q = fm.fixed_features(rows)  # unclipped: NaN, ±inf and huge values included
    for blk in fm.blocks:
        assert (q[:, blk.offset : blk.offset + blk.size].sum(axis=1) == 1).all()


def test_release_path_sums_the_same_integers(case):
    dp.enable_features("contrib", "honest-but-curious")
    fm, bounds, _, rows = case
    lo, hi = resolve_bounds(fm, bounds)
    t = dps.make_feature_sum(
        dps.box_domain((lo, hi)), dp.symmetric_distance(), feature_map=fm, p=1, fixed_point=True, chunk_rows=3
    )
    X = np.random.default_rng(1).uniform(lo, hi, (15, lo.size))
    base = [int(v) for v in t(X)]
    assert base == fm.fixed_sum(X, clip=(lo, hi))
    for r in rows[:: max(1, len(rows) // 40)]:  # neighbours through the release's own transformation
        assert_within_sensitivity(fm, [int(v) for v in t(np.vstack([X, np.clip(r, lo, hi)]))], base, p=1)


def test_int_sensitivity_2_rounds_up(case):
    from fractions import Fraction

    fm = case[0]
    s = fm.int_sensitivity(2)
    assert Fraction(s) ** 2 >= fm._int_bound(2) and Fraction(math.nextafter(s, 0)) ** 2 < fm._int_bound(2)


# -- hypothesis: extreme floats -----------------------------------------------------------------
HYPO = {
    "marginals": (_marginals(), BOX3),
    "composite": (
        dps.Composite([_marginals(), dps.RFF(dim=3, num_features=8, bandwidth=0.5, seed=3)], [1.0, 0.45]),
        BOX3,
    ),
}


def _extreme() -> st.SearchStrategy[float]:
    special = [np.inf, -np.inf, np.nan, 1e308, -1e308, 0.0, -0.0, 5e-324, 0.5, 1.5, 2.5, -5.0, 5.0, 1.0, 3.0]
    return st.one_of(
        st.sampled_from(special), st.floats(allow_nan=True, allow_infinity=True), st.floats(-10, 10)
    )


@pytest.mark.parametrize("name", list(HYPO))
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_extreme_rows_respect_the_bounds(name, data):
    fm, bounds = HYPO[name]
    rows = np.array(data.draw(st.lists(st.lists(_extreme(), min_size=3, max_size=3), min_size=1, max_size=5)))
    base = np.random.default_rng(0).uniform(*bounds, (5, 3))
    check_row_norms(fm, rows)
    for p in (1, 2):
        check_neighbour_sensitivity(
            fm, np.vstack([base, rows[1:]]), bounds, p, rows=rows[:1], chunk_rows=2, n_jobs=1
        )
