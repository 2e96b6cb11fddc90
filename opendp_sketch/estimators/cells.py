"""A map's public cells: which cell of each block a point falls in, and each column's cell edges.

One-hot maps (marginals, histograms, dyadic trees, RACE, and weighted composites of them) give
every point a few non-zero features, the cells it falls in (:func:`cell_index`); points sharing a
cell in every column have identical features. :func:`cell_edges` lists each input column's
public cell edges, every resolution the map has, cut to the data box. The synthetic decoder
builds its sparse designs, draws its points and places them inside their cells from these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..features.base import FeatureMap, OneHotFeatureMap
from ..features.byclass import ByClass
from ..features.composite import Composite
from ..features.histogram import DyadicTrees, Histogram
from ..features.marginals import MarginalTables

#: entries of a transient chunk: of a dense design when a map has no sparse evaluation, of a cell index
CHUNK_ENTRIES = 1 << 21


def is_cell_map(fm: FeatureMap) -> bool:
    """One-hot maps (MarginalTables, Histogram, DyadicTrees, RACE) and weighted composites of them: a
    few non-zero features per point, decoded on sparse matrices."""
    if isinstance(fm, Composite):
        return all(isinstance(m, OneHotFeatureMap) for m in fm.maps)
    return isinstance(fm, OneHotFeatureMap)


def cell_index(fm: FeatureMap, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(indices (n, s) of each point's non-zero features, their s values)`` for a map of
    :func:`is_cell_map`: the values are the same for every point (1, or the block weights of a
    composite), so ``Φ(X)`` is one-hot up to those weights.

    >>> import numpy as np, opendp_sketch as dps
    >>> one = dps.MarginalTables(bounds=(0, 1), subsets=[0], bins=4, dim=1)
    >>> idx, vals = cell_index(dps.Composite([one, one], weights=[2.0, 1.0]), np.array([[0.3]]))
    >>> idx.tolist(), vals.tolist()
    ([[1, 5]], [2.0, 1.0])
    """
    if isinstance(fm, Composite):
        parts = [(cell_index(m, X)[0] + b.offset, b.weight) for m, b in zip(fm.maps, fm.blocks)]
        idx = np.concatenate([p[0] for p in parts], axis=1)
        vals = np.concatenate([np.full(p[0].shape[1], p[1]) for p in parts])
        return idx, vals
    if not isinstance(fm, OneHotFeatureMap):
        raise ValueError(f"{type(fm).__name__} is not a map of cells")
    idx = fm._flat(X)  # noqa: SLF001 - the map's own cell index
    return idx, np.ones(idx.shape[1])


def cell_index_int32(fm: FeatureMap, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cell_index` a bounded number of entries at a time, as one int32 (or, past 2³¹
    features, int64) matrix: wide maps (thousands of blocks) would otherwise hold the whole
    int64 index, and a composite's parts, at once."""
    kind = np.int32 if fm.num_features < 2**31 else np.int64
    n = X.shape[0]
    if n == 0:
        idx, vals = cell_index(fm, X)
        return idx.astype(kind), vals
    first, vals = cell_index(fm, X[:1])
    step = max(1, CHUNK_ENTRIES // max(1, first.shape[1]))
    out = np.empty((n, first.shape[1]), dtype=kind)
    for s in range(0, n, step):
        out[s : s + step] = cell_index(fm, X[s : s + step])[0]
    return out, vals


def cell_columns(fm: FeatureMap, X: np.ndarray, positions: Sequence[int]) -> np.ndarray:
    """Columns ``positions`` of :func:`cell_index` (the cells of a few blocks, e.g. the 1-way
    ones), computed a bounded number of entries at a time: ``(n, len(positions))`` int64."""
    n = X.shape[0]
    out = np.empty((n, len(positions)), dtype=np.int64)
    if n == 0:
        return out
    width = cell_index(fm, X[:1])[0].shape[1]
    step = max(1, CHUNK_ENTRIES // max(1, width))
    for s in range(0, n, step):
        out[s : s + step] = cell_index(fm, X[s : s + step])[0][:, positions]
    return out


def cell_of(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of the cell ``[edges[c], edges[c + 1])`` holding each value (the last cell closed)."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)


def _map_cells(fm: FeatureMap) -> list[np.ndarray | None]:
    """Public cell edges per input column of ``fm`` (``None``: the map is smooth in that column).

    Points whose coordinates share a cell in every column have identical features.
    """
    if isinstance(fm, ByClass):
        return _map_cells(fm.feature_map) + [None]
    if isinstance(fm, Histogram):
        return [fm.bin_edges(j) for j in range(fm.dim)]
    if isinstance(fm, DyadicTrees):
        return [np.linspace(fm.lower[j], fm.upper[j], (1 << fm.levels) + 1) for j in range(fm.dim)]
    if isinstance(fm, MarginalTables):  # the common refinement of every resolution a column has
        cuts: list[set[float]] = [set() for _ in range(fm.dim)]
        for i, blk in enumerate(fm.blocks):
            for j, e in zip(blk.subset, fm.block_edges(i)):
                cuts[j].update(e.tolist())
        return [
            np.array(sorted(c)) if c else np.array([fm.lower[j], fm.upper[j]]) for j, c in enumerate(cuts)
        ]
    if isinstance(fm, Composite):
        parts = [_map_cells(m) for m in fm.maps]
        return [
            None if any(p[j] is None for p in parts) else np.unique(np.concatenate([p[j] for p in parts]))
            for j in range(fm.input_dim)
        ]
    return [None] * fm.input_dim


def map_categories(fm: FeatureMap) -> dict[int, np.ndarray]:
    """Columns a map reads as integer codes (categorical marginals): their public code values."""
    if isinstance(fm, MarginalTables):
        return {j: np.arange(fm.lower[j], fm.upper[j] + 1) for j in fm.categories}
    if isinstance(fm, Composite):
        out: dict[int, np.ndarray] = {}
        for m in fm.maps:
            out.update(map_categories(m))
        return out
    return {}


def cell_edges(fm: FeatureMap, lower: np.ndarray, upper: np.ndarray) -> list[np.ndarray | None]:
    """Public cell edges per input column of ``fm`` (every resolution a column has; ``None`` where
    the map is smooth in that column), cut to the data box (it may be narrower than the map's
    range)."""
    edges = _map_cells(fm)
    for j, e in enumerate(edges):
        if e is not None:
            inside = e[(e > lower[j]) & (e < upper[j])]
            edges[j] = np.concatenate([[lower[j]], inside, [upper[j]]])
    return edges
