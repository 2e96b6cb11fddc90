"""A map's cells read in parts: blocks computed alone (cell_columns) and folded blocks
(fold_blocks) give exactly the map's own cell index; the folded design's products equal the
plain design's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import opendp_sketch as dps
from opendp_sketch.estimators.cells import block_bins, cell_columns, cell_index, cell_of, fold_blocks
from opendp_sketch.estimators.point_weights import Design
from opendp_sketch.estimators.synthetic import FoldedDesign


def wide_map(d: int = 9) -> dps.Composite:
    """1-way tables (fine, one at two resolutions, one with cut points) and a tree of coarser
    pairs plus a 3-way table, numeric and categorical columns, weighted parts."""
    lo, hi = np.zeros(d), np.ones(d)
    hi[2::3] = 4.0  # categorical codes 0..4
    cats = list(range(2, d, 3))
    one = dps.MarginalTables(
        bounds=(lo, hi),
        subsets=[*range(d), 0, 1],
        bins=[*([5 if j in cats else 16] for j in range(d)), [4], [[0.1, 0.25, 0.7]]],
        categorical=cats,
    )
    pairs = [(j, j + 1) for j in range(d - 1)] + [(0, 4), (3, 6, 7)]
    bins = [[5 if j in cats else 4 for j in p] for p in pairs]
    bins[1] = [[0.3, 0.6], 5]
    joint = dps.MarginalTables(bounds=(lo, hi), subsets=pairs, bins=bins, categorical=cats)
    return dps.Composite([one, joint], weights=[3.0, 1.0])


def points(fm, n: int, seed: int) -> np.ndarray:
    """Random points, some on cell edges, at the bounds and (for codes) between codes."""
    rng = np.random.default_rng(seed)
    lo, hi = fm.maps[0].lower, fm.maps[0].upper
    X = rng.uniform(lo, hi, size=(n, lo.size))
    edges = rng.integers(0, 17, size=X.shape) / 16 * (hi - lo) + lo  # exact edges of every resolution
    on_edge = rng.uniform(size=X.shape) < 0.2
    X[on_edge] = edges[on_edge]
    X[0], X[1] = lo, hi
    X[:, 2::3] = np.where(rng.uniform(size=X[:, 2::3].shape) < 0.8, np.rint(X[:, 2::3]), X[:, 2::3])
    return X


def unfolded(fm, X):
    idx, vals = cell_index(fm, X)
    n, width = idx.shape
    return scipy.sparse.csr_matrix(
        (np.tile(vals, n), idx.ravel(), np.arange(0, n * width + 1, width)), shape=(n, fm.num_features)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folded_cells_are_the_maps_own(seed):
    fm = wide_map()
    X = points(fm, 3000, seed)
    folded = fold_blocks(fm)
    assert folded is not None and len(folded.groups) < folded.blocks
    idx = folded.index(X)
    n, width = idx.shape
    phi = scipy.sparse.csr_matrix(
        (np.ones(n * width), idx.ravel(), np.arange(0, n * width + 1, width)), shape=(n, folded.num_features)
    )
    assert abs(phi @ folded.fold - unfolded(fm, X)).max() == 0
    np.testing.assert_array_equal((phi @ folded.fold).toarray(), fm.transform(X))


def test_fold_of_a_tree_of_pairs_has_one_block_per_pair():
    """80 columns, a path of 4 × 4 pairs and 16-bin 1-way tables: each pair takes one 1-way table
    (4·4·16 cells; two would be 4·4·16·16 > FOLD_CELLS), so one is left alone: 80 blocks, not 159."""
    d = 80
    one = dps.MarginalTables(bounds=(0, 1), subsets=list(range(d)), bins=16, dim=d)
    pairs = dps.MarginalTables(bounds=(0, 1), subsets=[(j, j + 1) for j in range(d - 1)], bins=4, dim=d)
    folded = fold_blocks(dps.Composite([one, pairs], weights=[3.0, 1.0]))
    assert folded is not None and folded.blocks == 2 * d - 1 and len(folded.groups) == d


def test_fold_needs_two_blocks_of_marginals():
    assert fold_blocks(dps.Histogram(bounds=(0, 1), bins=8, dim=2)) is None
    ones = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1], bins=8, dim=2)
    assert fold_blocks(ones) is None  # no block holds another's columns
    big = dps.MarginalTables(bounds=(0, 1), subsets=[0, (0, 1)], bins=[[64], [8, 8]], dim=2)
    assert fold_blocks(big, max_cells=1024) is None  # the 1-way table would grow the pair 64-fold
    same = dps.MarginalTables(bounds=(0, 1), subsets=[0, (0, 1)], bins=[[64], [64, 64]], dim=2)
    assert fold_blocks(same, max_cells=1024) is not None  # the pair holds its bins already: no growth


@pytest.mark.parametrize("seed", [0, 1])
def test_cell_columns_are_columns_of_the_cell_index(seed):
    fm = wide_map()
    X = points(fm, 2000, seed)
    full = cell_index(fm, X)[0]
    positions = [0, 5, 9, 10, 12, 20, 3]
    np.testing.assert_array_equal(cell_columns(fm, X, positions), full[:, positions])
    hist = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    Y = np.random.default_rng(seed).uniform(size=(50, 2))
    np.testing.assert_array_equal(cell_columns(hist, Y, [1]), cell_index(hist, Y)[0][:, [1]])


def test_folded_design_products_equal_the_plain_designs():
    fm = wide_map()
    X = points(fm, 4000, 3)
    X = np.concatenate([X, X[:500]])  # repeated rows: distinct rows stored once
    plain, folded = Design(fm, X), FoldedDesign(fold_blocks(fm), X)
    assert folded.nnz == plain.P.nnz  # the step budget reads the unfolded design's entries
    # the same points share a distinct row (rows may be listed in another order)
    np.testing.assert_array_equal(folded.multiplicity[folded.rows], plain.multiplicity[plain.rows])
    rng = np.random.default_rng(0)
    w, r = rng.dirichlet(np.ones(X.shape[0])), rng.normal(size=fm.num_features)
    np.testing.assert_allclose(folded.mix(w), plain.mix(w), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(folded.score(r), plain.score(r), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cells", [1, 2, 5, 16, 64, 65, 200])
def test_cell_of_is_the_binary_search(cells):
    """Counted (few edges) or searched, the cell of every value, at and between edges, outside
    the box, ±inf and NaN, is the binary search's."""
    rng = np.random.default_rng(cells)
    edges = np.unique(np.concatenate([[0.0, 1.0], rng.uniform(size=cells - 1)]))
    values = np.concatenate(
        [rng.uniform(-0.2, 1.2, 5000), edges, [np.nan, np.inf, -np.inf, -1.0, 2.0], np.nextafter(edges, 2)]
    )
    expected = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    np.testing.assert_array_equal(cell_of(edges, values), expected)


def test_block_bins_index_the_blocks_cells():
    """Each block's per-column bins, in C order, are its cell in the map's own index (a shared
    cache of column binnings gives the same bins)."""
    fm = wide_map()
    X = points(fm, 2000, 4)
    full = cell_index(fm, X)[0]
    blocks = [
        (b.shape, m_off + b.offset)
        for m, m_off in zip(fm.maps, [0, fm.maps[0].num_features])
        for b in m.blocks
    ]
    cache: dict = {}
    for position, (shape, first) in enumerate(blocks):
        bins = block_bins(fm, X, position, cache)
        assert len(bins) == len(shape)
        np.testing.assert_array_equal(np.ravel_multi_index(bins, shape) + first, full[:, position])
    with pytest.raises(ValueError, match="not a map of marginals"):
        block_bins(dps.Histogram(bounds=(0, 1), bins=8, dim=2), X[:, :2], 0)
