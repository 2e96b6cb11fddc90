"""The exact cell counts of MarginalTables against a row-by-row reference (issue 40, "tall").

The fast count (bins once per chunk, shared by the parts of a Composite through the chunk memo,
tables counted from them) must give the integers the plain rule gives, for every chunking,
threading, kind of column and hostile value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.features.base import chunk_memo


def _reference_bin(v: float, lo: float, hi: float, b: int, categorical: bool, cuts) -> int:
    """One value's bin, read straight from the documented rule (Python floats, one at a time)."""
    x = lo if math.isnan(v) else min(max(v, lo), hi)
    if cuts is not None:
        return sum(1 for c in cuts if c <= x)
    if categorical:
        k = int(np.rint(x) - lo)
    else:
        ratio = (x - lo) / (hi - lo) * b
        k = int(math.floor(ratio)) if not math.isnan(ratio) else 0
    return min(max(k, 0), b - 1)


def _reference_sum(fm: dps.MarginalTables, X: np.ndarray) -> np.ndarray:
    out = np.zeros(fm.num_features, dtype=np.int64)
    for row in X:
        for blk in fm.blocks:
            cell = 0
            for k, (j, b) in enumerate(zip(blk.subset, blk.shape)):
                lo, hi = float(fm.lower[j]), float(fm.upper[j])
                cell = cell * b + _reference_bin(
                    float(row[j]), lo, hi, b, j in fm.categories, blk.column_cuts(k)
                )
            out[blk.offset + cell] += 1
    return out


def _hostile_rows(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [
            rng.uniform(-0.2, 1.2, n),  # numeric on [0, 1] (a schema's unit box)
            rng.normal(0.0, 4.0, n),  # numeric on [-5, 5]
            rng.integers(-1, 5, n).astype(np.float64) + rng.uniform(-0.4, 0.4, n),  # codes 0..3
            rng.uniform(0.0, 1.0, n),  # numeric with cut points
        ]
    )
    bad = rng.random(X.shape)
    X[bad < 0.03] = np.nan
    X[(bad >= 0.03) & (bad < 0.05)] = np.inf
    X[(bad >= 0.05) & (bad < 0.07)] = -np.inf
    X[0] = [1.0, 5.0, 3.0, 1.0]  # every upper edge
    X[1] = [0.0, -5.0, 0.0, 0.0]
    return X


def _map() -> dps.MarginalTables:
    return dps.MarginalTables(
        bounds=([0, -5, 0, 0], [1, 5, 3, 1]),
        subsets=[0, 1, 2, 3, (0, 1), (0, 2), (2, 1), (1, 0), (0, 3), (3, 2, 1), (0, 1, 2), 0],
        bins=[
            [16],
            [7],
            [4],
            [[0.25, 0.5]],
            [16, 3],
            [16, 4],
            [4, 7],
            [7, 16],
            [16, [0.1]],
            [[0.3, 0.6, 0.9], 4, 2],
            [16, 3, 4],
            [64],
        ],
        categorical=[2],
    )


@pytest.mark.parametrize(("chunk_rows", "n_jobs"), [(1, 1), (7, 1), (333, 2), (4096, 3), (100_000, 1)])
def test_exact_sums_equal_the_row_by_row_rule(chunk_rows, n_jobs):
    fm = _map()
    # the map's tables are read off shared joint tables, summed over axes and transposed
    assert any(len(j.reads) > 1 and any(r[3] is not None for r in j.reads) for j in fm._joint)
    assert any(len(j.block.subset) == 3 and len(j.reads) > 1 for j in fm._joint)
    X = _hostile_rows(1500)
    expected = _reference_sum(fm, X)
    assert fm.fixed_sum(X, chunk_rows=chunk_rows, n_jobs=n_jobs) == expected.tolist()
    # the clipped path a release takes, and the cells the decoder reads
    assert (
        fm.fixed_sum(X, clip=(fm.lower, fm.upper), chunk_rows=chunk_rows, n_jobs=n_jobs) == expected.tolist()
    )
    flat = fm.cells(X)
    assert np.array_equal(np.bincount(flat.ravel(), minlength=fm.num_features), expected)


def test_cells_match_the_rule_row_by_row():
    fm = _map()
    X = _hostile_rows(300, seed=3)
    for i, row in enumerate(X):
        got = fm.cells(row[None, :])[0]
        assert (
            np.bincount(got, minlength=fm.num_features).tolist() == _reference_sum(fm, row[None, :]).tolist()
        )
        assert fm.cells(X)[i].tolist() == got.tolist()


def test_an_extreme_range_stays_in_the_table():
    fm = dps.MarginalTables(bounds=([-8e307], [8e307]), subsets=[0], bins=[[8]])
    X = np.array([[-8e307], [0.0], [8e307], [np.nan], [np.inf], [-np.inf], [5e307], [-1e-300]])
    s = fm.fixed_sum(X, n_jobs=1)
    assert sum(s) == len(X) and len(s) == 8
    assert s == _reference_sum(fm, X).tolist()


def test_composite_parts_sharing_a_chunk_give_each_its_own_counts():
    # parts with the same columns at other bounds or kinds must not read each other's bins
    a = dps.MarginalTables(
        bounds=([0, 0], [1, 3]), subsets=[0, 1, (0, 1)], bins=[[8], [4], [8, 4]], categorical=[1]
    )
    b = dps.MarginalTables(bounds=([0, 0], [2, 3]), subsets=[0, 1, (0, 1)], bins=[[8], [4], [8, 4]])
    c = dps.MarginalTables(
        bounds=([0, 0], [1, 3]), subsets=[(0, 1), 0], bins=[[8, 4], [[0.5]]], categorical=[1]
    )
    comp = dps.Composite([a, b, c], weights=[2.0, 1.0, 1.0])
    X = _hostile_rows(2000, seed=5)[:, [0, 2]]
    # each part's counts times the integer its weight makes of one count (the Composite's plan)
    expected = np.concatenate([p.multiplier * _reference_sum(m, X) for m, p in zip([a, b, c], comp._plans)])
    for chunk_rows, n_jobs in [(64, 1), (999, 2), (4096, 1)]:
        assert comp.fixed_sum(X, chunk_rows=chunk_rows, n_jobs=n_jobs) == expected.tolist()


def test_the_chunk_memo_is_only_the_workers_chunk():
    X = np.zeros((3, 2))
    assert chunk_memo(X) is None
    seen = []

    class Probe(dps.MarginalTables):
        def _fixed_block_sum(self, chunk):
            memo = chunk_memo(chunk)
            seen.append((memo is not None, chunk_memo(chunk.copy()) is None))
            return super()._fixed_block_sum(chunk)

    fm = Probe(bounds=(0, 1), subsets=[0], bins=4, dim=2)
    fm.fixed_sum(X, n_jobs=1)
    assert seen == [(True, True)]
    assert chunk_memo(X) is None  # cleared once the sum is done


def test_index_counting_maps_default_to_one_thread_and_blas_maps_to_several():
    many = dps.MarginalTables.auto(([0.0] * 12, [1.0] * 12), fine_bins=2, coarse_bins=2)
    assert many._gram is not None and many._threads_pay()  # the Gram product runs in BLAS
    fm = _map()
    rff = dps.RFF(dim=4, num_features=8, bandwidth=1.0, seed=0)
    assert not fm._threads_pay() and rff._threads_pay()
    assert dps.RACE(dim=4, rows=3, buckets=8)._threads_pay()  # its projections run in BLAS
    assert not dps.Composite([fm, fm.take([0, 4])], weights=[1.0, 1.0])._threads_pay()
    assert dps.Composite([fm, rff], weights=[1.0, 1.0])._threads_pay()
    assert not dps.ByClass(fm, 3)._threads_pay()
    # one thread or several, the same integers
    X = _hostile_rows(700, seed=9)
    assert fm.fixed_sum(X) == fm.fixed_sum(X, n_jobs=3, chunk_rows=50) == _reference_sum(fm, X).tolist()


def test_a_part_reading_other_rows_between_two_parts_sharing_the_chunk():
    # a part that counts other rows than the chunk (here 1 - X) between parts that share the
    # chunk's bins must neither read nor overwrite them
    class Mirrored(dps.MarginalTables):
        def _fixed_block_sum(self, X):
            return super()._fixed_block_sum(1.0 - X)

    rng = np.random.default_rng(11)
    n = 3000
    X = np.column_stack([rng.uniform(-0.1, 1.1, n), rng.integers(0, 4, n)]).astype(float)
    X[rng.random(n) < 0.05, 0] = np.nan
    spec = {
        "bounds": ([0, 0], [1, 3]),
        "subsets": [0, (0, 1), 1],
        "bins": [[8], [8, 4], [4]],
        "categorical": [1],
    }
    a, mirrored = dps.MarginalTables(**spec), Mirrored(**spec)
    comp = dps.Composite([a, mirrored, a.take([1, 0])], weights=[1.0, 1.0, 1.0])
    parts = [_reference_sum(a, X), _reference_sum(a, 1.0 - X), _reference_sum(a.take([1, 0]), X)]
    expected = np.concatenate([p.multiplier * r for p, r in zip(comp._plans, parts)])
    for chunk_rows in (64, 1000, 5000):
        assert comp.fixed_sum(X, chunk_rows=chunk_rows, n_jobs=1) == expected.tolist()


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_sum_clipping_into_a_box_inside_or_beyond_the_maps(n_jobs):
    # columns clipped into a box inside the map's bounds skip the map's own clip; a box wider than
    # them (column 1) or crossing them (column 3) keeps it: the integers are the rule's either way
    fm = _map()
    X = _hostile_rows(1200, seed=21)
    lo = np.array([0.0, -7.0, 0.0, 0.2])
    hi = np.array([0.5, 7.0, 3.0, 1.5])
    clipped = np.fmin(np.fmax(X, lo), hi)
    expected = _reference_sum(fm, clipped).tolist()
    for chunk_rows in (1, 100, 4096):
        assert fm.fixed_sum(X, clip=(lo, hi), chunk_rows=chunk_rows, n_jobs=n_jobs) == expected
    # a scalar box broadcasts to every column
    assert (
        fm.fixed_sum(X, clip=(0.0, 1.0), n_jobs=n_jobs)
        == _reference_sum(fm, np.fmin(np.fmax(X, 0.0), 1.0)).tolist()
    )
