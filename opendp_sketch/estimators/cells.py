"""A map's public cells: which cell of each block a point falls in, and each column's cell edges.

One-hot maps (marginals, histograms, dyadic trees, RACE, and weighted composites of them) give
every point a few non-zero features, the cells it falls in (:func:`cell_index`); points sharing a
cell in every column have identical features. :func:`cell_edges` lists each input column's
public cell edges, every resolution the map has, cut to the data box. The synthetic decoder
builds its sparse designs, draws its points and places them inside their cells from these.

For maps of marginals, :func:`cell_columns` computes only the blocks asked for, and
:func:`fold_blocks` folds the blocks into fewer, larger ones (a column's 1-way table into a pair
table holding that column), so a design has fewer non-zeros per point: every cell comes from
the map's own per-column bins, so the folded cells determine the map's cells exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse

from ..features.base import FeatureMap, OneHotFeatureMap
from ..features.byclass import ByClass
from ..features.composite import Composite
from ..features.histogram import DyadicTrees, Histogram
from ..features.marginals import MarginalTables

#: entries of a transient chunk: of a dense design when a map has no sparse evaluation, of a cell index
CHUNK_ENTRIES = 1 << 21
#: cells of a folded block at most (:func:`fold_blocks`): the folded vectors stay small enough for
#: the processor's cache (80 columns, a tree of 4 × 4 pairs and 16-bin 1-way tables: 256 cells each)
FOLD_CELLS = 1024
#: edges at most that :func:`cell_of` counts instead of searching (the count fits an int8)
_COUNTED_EDGES = 66
#: blocks of one arity at most for which the fold picks, each time, the block with the fewest
#: choices left (more blocks: one pass in order, each block's options read as it comes)
_FOLD_CHOOSER_BLOCKS = 2000

#: one column's binning by a map of marginals: (map, column, bins, cut points or ``None``)
Binning = tuple[MarginalTables, int, int, Any]


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


def marginal_parts(fm: FeatureMap) -> list[tuple[MarginalTables, int, float]]:
    """``(map of marginals, offset, block weight)`` of a map of marginals or of each part of a
    composite of them; ``[]`` for any other map."""
    if isinstance(fm, MarginalTables):
        return [(fm, 0, 1.0)]
    if isinstance(fm, Composite) and all(isinstance(m, MarginalTables) for m in fm.maps):
        return [(m, b.offset, b.weight) for m, b in zip(fm.maps, fm.blocks)]  # type: ignore[misc]
    return []


def _binning_key(m: MarginalTables, j: int, b: int, cuts: Any) -> tuple[Any, ...]:
    """Equal keys bin a column the same way: the map's own key (column, bounds, kind, bins, cuts)."""
    return m._column_key(j, b, cuts)  # noqa: SLF001 - the map's own key


def _bins(binning: Binning, X: np.ndarray) -> np.ndarray:
    """Each row's bin of one column, by the map's own rule (as its cell index computes it)."""
    m, j, b, cuts = binning
    if cuts is None:
        return m._column_bins(X[:, j], j, b)  # noqa: SLF001 - the map's own bins
    return m._cut_bins(X[:, j], j, cuts)  # noqa: SLF001


def _cached_bins(binning: Binning, X: np.ndarray, cache: dict[tuple[Any, ...], np.ndarray]) -> np.ndarray:
    """:func:`_bins`, once per equal binning key in ``cache`` (the same ``X``)."""
    key = _binning_key(*binning)
    if key not in cache:
        cache[key] = _bins(binning, X)
    return cache[key]


def _block_binnings(fm: FeatureMap) -> list[tuple[list[Binning], int, int, float]] | None:
    """Per block of a map of marginals (in :func:`cell_index`'s order): its columns' binnings,
    its cells, its first feature and its weight; ``None`` for any other map."""
    parts = marginal_parts(fm)
    if not parts:
        return None
    out = []
    for m, offset, weight in parts:
        for blk in m.blocks:
            binnings = [(m, j, b, blk.column_cuts(k)) for k, (j, b) in enumerate(zip(blk.subset, blk.shape))]
            out.append((binnings, blk.size, offset + blk.offset, weight))
    return out


def block_bins(
    fm: FeatureMap, X: np.ndarray, position: int, cache: dict[tuple[Any, ...], np.ndarray] | None = None
) -> list[np.ndarray]:
    """Each row's bin in each column of block ``position`` of :func:`cell_index` (a map of
    marginals, or a composite of them), in the order of the block's columns: its cell within the
    table is their C-order index. ``cache`` keeps each column binning of these ``X`` computed
    once across calls.

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, (1, 0)], bins=[[8], [2, 4]], dim=2)
    >>> [b.tolist() for b in block_bins(fm, np.array([[0.3, 0.9]]), 1)]
    [[1], [1]]
    """
    blocks = _block_binnings(fm)
    if blocks is None:
        raise ValueError(f"{type(fm).__name__} is not a map of marginals")
    cache = {} if cache is None else cache
    return [_cached_bins(binning, X, cache) for binning in blocks[position][0]]


def cell_columns(fm: FeatureMap, X: np.ndarray, positions: Sequence[int]) -> np.ndarray:
    """Columns ``positions`` of :func:`cell_index` (the cells of a few blocks, e.g. the 1-way
    ones): ``(n, len(positions))`` int64. Maps of marginals compute those blocks alone (each
    column's bins once); other maps a bounded number of entries of the whole index at a time."""
    n = X.shape[0]
    out = np.empty((n, len(positions)), dtype=np.int64)
    if n == 0:
        return out
    blocks = _block_binnings(fm)
    if blocks is not None:
        cache: dict[tuple[Any, ...], np.ndarray] = {}
        for k, p in enumerate(positions):
            binnings, _, first, _ = blocks[p]
            codes = [_cached_bins(binning, X, cache) for binning in binnings]
            out[:, k] = np.ravel_multi_index(codes, [binning[2] for binning in binnings]) + first
        return out
    width = cell_index(fm, X[:1])[0].shape[1]
    step = max(1, CHUNK_ENTRIES // max(1, width))
    for s in range(0, n, step):
        out[s : s + step] = cell_index(fm, X[s : s + step])[0][:, positions]
    return out


class FoldedBlocks:
    """A map of marginals' blocks folded into fewer, larger blocks: ``Φ(x) = fold ᵀ φ(x)``,
    where ``φ(x)`` is one-hot in each folded block and ``fold`` (folded features × map features)
    sends each folded cell to the cell it falls in of every block folded into it, at that
    block's weight.

    A folded block is the product of the bins of a few column binnings (the map's own bins of
    each column at one resolution); a block whose binnings it holds (e.g. a column's 1-way table
    within a pair table holding that column) is folded into it. A design ``Φ(X̃)`` then has one
    non-zero per point and folded block instead of one per block: 80 columns with a tree of
    pairs, 80 instead of 159. Build with :func:`fold_blocks`.
    """

    def __init__(
        self, binnings: list[Binning], groups: list[list[int]], members: list[list[int]], fm: FeatureMap
    ):
        blocks = _block_binnings(fm)
        assert blocks is not None
        keys = [_binning_key(*b) for b in binnings]
        #: the distinct column binnings
        self.binnings = binnings
        #: per folded block, its binnings (indices into :attr:`binnings`) in C order
        self.groups = groups
        #: blocks of the map
        self.blocks = len(blocks)
        sizes = [math.prod(binnings[k][2] for k in g) for g in groups]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_features = int(self.offsets[-1])
        rows, cols, vals = [], [], []
        for g, group in enumerate(groups):
            combos = np.indices([binnings[k][2] for k in group]).reshape(len(group), -1)
            for i in members[g]:
                block_binnings, _, first, weight = blocks[i]
                cell = np.zeros(combos.shape[1], dtype=np.int64)
                for binning in block_binnings:
                    cell = cell * binning[2] + combos[group.index(keys.index(_binning_key(*binning)))]
                rows.append(self.offsets[g] + np.arange(combos.shape[1]))
                cols.append(first + cell)
                vals.append(np.full(combos.shape[1], weight))
        #: folded features × the map's features
        self.fold = scipy.sparse.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(self.num_features, fm.num_features),
        )

    def index(self, X: np.ndarray) -> np.ndarray:
        """``(n, folded blocks)`` int32 (int64 past 2³¹ folded features): each point's folded
        cell in each folded block, from each column binning computed once."""
        kind = np.int32 if self.num_features < 2**31 else np.int64
        codes = [_bins(b, X) for b in self.binnings]
        out = np.empty((X.shape[0], len(self.groups)), dtype=kind)
        for g, group in enumerate(self.groups):
            cells = np.ravel_multi_index([codes[k] for k in group], [self.binnings[k][2] for k in group])
            out[:, g] = cells + self.offsets[g]
        return out


def fold_blocks(fm: FeatureMap, max_cells: int = FOLD_CELLS) -> FoldedBlocks | None:
    """The blocks of a map of marginals (or a composite of them) folded together, or ``None``
    when the map is of another kind or no block folds into another.

    Blocks of more columns come first, each starting a folded block unless one holding all its
    columns takes it; a block joins the folded block that stays smallest with its binnings
    added, within ``max_cells`` cells. Reads public parameters only.

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, (0, 1)], bins=[[8], [8], [4, 4]], dim=2)
    >>> folded = fold_blocks(fm)
    >>> len(folded.groups), folded.num_features
    (1, 1024)
    >>> X = np.random.default_rng(0).uniform(size=(5, 2))
    >>> bool((folded.fold[folded.index(X)[:, 0]].toarray() == fm.transform(X)).all())
    True
    """
    blocks = _block_binnings(fm)
    if blocks is None or len(blocks) < 2:
        return None
    binnings: list[Binning] = []
    keys: list[tuple[Any, ...]] = []
    block_keys = []
    for block_binnings, _, _, _ in blocks:
        ks = []
        for binning in block_binnings:
            key = _binning_key(*binning)
            if key not in keys:
                keys.append(key)
                binnings.append(binning)
            ks.append(keys.index(key))
        block_keys.append(ks)
    groups: list[list[int]] = []
    members: list[list[int]] = []
    of_column: dict[int, list[int]] = {}  # the folded blocks holding each column

    def options(i: int) -> list[tuple[int, int]]:
        """(cells, folded block) of each folded block ``i`` may join within ``max_cells``."""
        columns = {binnings[k][1] for k in block_keys[i]}
        out = []
        for g in of_column.get(binnings[block_keys[i][0]][1], []):
            if columns <= {binnings[k][1] for k in groups[g]}:
                size = math.prod(binnings[k][2] for k in set(groups[g]) | set(block_keys[i]))
                if size <= max(max_cells, math.prod(binnings[k][2] for k in groups[g])):
                    out.append((size, g))
        return out

    for arity in sorted({len(k) for k in block_keys}, reverse=True):
        # blocks of one arity in turn, the block with the fewest folded blocks left to join first
        # (a leaf column of a tree of pairs has one), into the one that stays smallest
        level = [i for i in range(len(blocks)) if len(block_keys[i]) == arity]
        dynamic = bool(groups) and len(level) <= _FOLD_CHOOSER_BLOCKS
        while level:
            choices = [options(i) for i in level] if dynamic else None
            at = min(range(len(level)), key=lambda t: len(choices[t]) if choices else 0) if choices else 0
            i = level.pop(at)
            found = choices[at] if choices else options(i)
            if not found:
                for j in {binnings[k][1] for k in block_keys[i]}:
                    of_column.setdefault(j, []).append(len(groups))
                groups.append(list(block_keys[i]))
                members.append([i])
            else:
                g = min(found)[1]
                groups[g] += [k for k in block_keys[i] if k not in groups[g]]
                members[g].append(i)
    if len(groups) == len(blocks):
        return None
    return FoldedBlocks(binnings, groups, members, fm)


def cell_of(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of the cell ``[edges[c], edges[c + 1])`` holding each value (the last cell closed).

    A few edges: the count of interior edges at or below each value, one comparison per edge
    (the same cells as the binary search, a NaN in the last cell too, several times faster
    for the decoder's 5 to 64 cells)."""
    if edges.size > _COUNTED_EDGES:
        return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    values = np.asarray(values)
    count = np.zeros(values.shape, dtype=np.int8)
    for e in edges[1:-1]:
        count += values >= e
    out = count.astype(np.intp)
    nan = np.isnan(values)
    if nan.any():  # the binary search places NaN past every edge
        out[nan] = max(edges.size - 2, 0)
    return out


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
