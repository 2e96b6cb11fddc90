"""What a sketch's released marginals say, read as distributions: the decoder's start and raking.

From the released blocks of a map of marginals (or a composite of them), as shares of the rows:
each column's 1-way marginal estimated from all its 1-way blocks (:func:`one_way_estimates`,
both levels of a column measured at two resolutions pooled by their noise), and the pair tables
as a maximum spanning forest of the columns (:func:`released_forest`, Chow–Liu on the noisy
tables) with each table's conditional raked to its columns' 1-way marginals
(:func:`conditional`). After the fit, :func:`rake_one_way` rakes the weights to the 1-way
marginals the joint fit misses. Everything reads released sums, their recorded variances and
public cells: post-processing, and nothing here raises on released values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..features.base import FeatureMap
from ..features.marginals import MarginalTables
from .cells import cell_columns, cell_of
from .cells import marginal_parts as _marginal_parts

#: sweeps of iterative proportional fitting of a pair table to its columns' 1-way marginals at
#: most (a table of at most 64 × 64 cells: cheap; a row the table leaves empty converges slowly)
_CONDITIONAL_SWEEPS = 500
#: sweeps of iterative proportional fitting over the raked 1-way marginals
_RAKE_SWEEPS = 10


def simplex_projection(v: np.ndarray) -> np.ndarray:
    """The closest point of the probability simplex to ``v`` (Euclidean): ``max(v − τ, 0)`` with
    the one ``τ`` that makes it sum to 1.

    >>> simplex_projection(np.array([0.7, 0.5, -0.1])).round(3).tolist()
    [0.6, 0.4, 0.0]
    """
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - 1.0
    k = np.flatnonzero(u * np.arange(1, u.size + 1) > excess)[-1] + 1  # k = 1 always qualifies
    return np.maximum(v - excess[k - 1] / k, 0.0)


def _one_way_blocks(fm: FeatureMap, joint: bool = True) -> list[tuple[int, int, int, int, float, np.ndarray]]:
    """``(column of cell_index, input column, offset, cells, block weight, cell edges)`` of every
    1-way marginal of a map of marginals (or a composite of them) that also measures
    multi-column marginals (any map of marginals with ``joint=False``); else ``[]``."""
    ones, has_joint, position = [], False, 0
    for m, offset, weight in _marginal_parts(fm):
        for i, b in enumerate(m.blocks):
            if len(b.subset) == 1:
                ones.append((position, b.subset[0], offset + b.offset, b.size, weight, m.block_edges(i)[0]))
            else:
                has_joint = True
            position += 1
    return ones if has_joint or not joint else []


def one_way_estimates(
    fm: FeatureMap,
    target: np.ndarray,
    var: np.ndarray,
    joint: bool = True,
    discrete: Mapping[int, np.ndarray] | None = None,
) -> list[tuple[int, int, int, int, np.ndarray, np.ndarray, float, bool]]:
    """One estimate of each column's 1-way marginal from all its released 1-way blocks:
    ``(column of cell_index, input column, offset, cells, estimate y, distribution t, noise
    variance per cell, two levels?)`` on the column's finest 1-way block (``target`` and ``var``
    as shares of the rows, each block divided by its weight); ``[]`` as :func:`_one_way_blocks`.

    With one block, ``y`` is that block and ``t`` its projection on the simplex. A column
    measured at two resolutions whose cells nest (each coarse cell a union of fine ones) gets the
    generalised least-squares estimate of its fine cells from both, each weighted by its noise
    variance, ``y = argmin_x Σ_b ‖A_b x − y_b‖² / v_b`` (``A_b`` sums fine cells into block
    ``b``'s cells), and ``t`` projects it level by level: the coarse sums of ``y`` on the
    simplex, then each coarse cell's fine cells on the simplex scaled to that cell's share. One
    projection of the fine cells would subtract the same amount from every one of them and move
    mass between coarse cells by as much as the fine cells' noise. A fine cell holding none of a
    discrete column's public values (``discrete``) is held at 0 in both steps: the snapping of
    points to values would move its mass to another cell. Blocks whose edges do not nest
    in the finest one are left out. Reads released sums, their recorded variances and public
    edges: post-processing, never raises.
    """
    per_column: dict[int, list[tuple[int, int, int, float, np.ndarray]]] = {}
    for position, column, offset, size, weight, edges in _one_way_blocks(fm, joint):
        per_column.setdefault(column, []).append((position, offset, size, weight, edges))
    out: list[tuple[int, int, int, int, np.ndarray, np.ndarray, float, bool]] = []
    for column, blocks in per_column.items():
        position, offset, size, weight, fine = max(blocks, key=lambda t: t[2])
        y = np.nan_to_num(target[offset : offset + size] / weight)
        v = float(np.max(var[offset : offset + size])) / weight**2
        nested = []  # (cells, sums of fine cells into them, released shares, variance)
        for _, o, k, wgt, e in blocks:
            vb = float(np.max(var[o : o + k])) / wgt**2
            if o != offset and e[0] == fine[0] and e[-1] == fine[-1] and np.isin(e, fine).all():
                if math.isfinite(vb) and vb > 0:
                    A = np.zeros((k, size))
                    A[cell_of(e, 0.5 * (fine[:-1] + fine[1:])), np.arange(size)] = 1.0
                    nested.append((k, A, np.nan_to_num(target[o : o + k] / wgt), vb))
        if not (nested and math.isfinite(v) and v > 0):
            out.append((position, column, offset, size, y, simplex_projection(y), v, False))
            continue
        free = np.ones(size, dtype=bool)
        if discrete is not None and column in discrete:
            free = np.bincount(cell_of(fine, discrete[column]), minlength=size) > 0
        H = np.eye(size) / v + sum(A.T @ A / vb for _, A, _, vb in nested)
        cov = np.zeros((size, size))
        cov[np.ix_(free, free)] = np.linalg.inv(H[np.ix_(free, free)])
        y = cov @ (y / v + sum(A.T @ yb / vb for _, A, yb, vb in nested))
        _, A, _, _ = min(nested, key=lambda t: t[0])  # the coarsest level
        reach = A @ free > 0  # coarse cells holding a free fine cell
        shares = np.zeros(A.shape[0])
        shares[reach] = simplex_projection((A @ y)[reach])
        t = np.zeros(size)
        for c in np.flatnonzero(shares > 0):
            inside = (A[c] > 0) & free
            t[inside] = shares[c] * simplex_projection(y[inside] / shares[c])
        out.append((position, column, offset, size, y, t, float(np.max(np.diag(cov))), True))
    return out


def _two_way_blocks(fm: FeatureMap) -> list[tuple[int, tuple[int, int], int, tuple[int, int], float]]:
    """``(column of cell_index, (u, v) input columns, offset, (k_u, k_v) cells, block weight)`` of
    every 2-way marginal of a map of marginals (or a composite of them)."""
    out, position = [], 0
    for m, offset, weight in _marginal_parts(fm):
        for b in m.blocks:
            if len(b.subset) == 2:
                u, v = b.subset
                out.append((position, (u, v), offset + b.offset, (b.shape[0], b.shape[1]), weight))
            position += 1
    return out


def pair_maps(fm: FeatureMap, positions: Sequence[int]) -> dict[int, MarginalTables]:
    """The marginal at each of ``positions`` (columns of :func:`cell_index`, as in
    :func:`_two_way_blocks`) as a one-block map, whose cell index is the block's own cell
    number: ``cell_index(fm, X)[:, p] − offset`` for that block alone."""
    wanted, out, position = set(positions), {}, 0
    for m, _, _ in _marginal_parts(fm):
        for i in range(len(m.blocks)):
            if position in wanted:
                out[position] = m.take([i])
            position += 1
    return out


def _mutual_information(t: np.ndarray) -> float:
    """Mutual information of a 2-way table of probabilities (``0 log 0 = 0``)."""
    outer = np.outer(t.sum(axis=1), t.sum(axis=0))
    ok = (t > 0) & (outer > 0)
    return float(np.sum(t[ok] * np.log(t[ok] / outer[ok])))


def conditional(table: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``P(column cell | row cell)`` of a 2-way table of probabilities raked (iterative
    proportional fitting, at most ``_CONDITIONAL_SWEEPS`` sweeps, until the rows are within
    ``1e-9``) to the row marginal ``rows`` and the column
    marginal ``cols`` (both distributions over the same cells, e.g. from 1-way blocks).

    The pair table's own marginals are noisier than the 1-way blocks (a 1-way block weighs
    more in the budget split); raking keeps the table's odds ratios and takes the marginals
    from the blocks. ``1e-6`` of the independent table is mixed in first, so a cell the pair
    table left empty but a 1-way block fills can take mass. Rows summing to 0 fall back to
    ``cols``. Never raises: non-finite input gives the independent conditional."""
    k_rows, k_cols = table.shape
    r = np.where(np.isfinite(rows) & (rows > 0), rows, 0.0)
    c = np.where(np.isfinite(cols) & (cols > 0), cols, 0.0)
    r = r / r.sum() if r.sum() > 0 else np.full(k_rows, 1.0 / k_rows)
    c = c / c.sum() if c.sum() > 0 else np.full(k_cols, 1.0 / k_cols)
    t = np.where(np.isfinite(table) & (table > 0), table, 0.0) + 1e-6 * np.outer(r, c)
    for _ in range(_CONDITIONAL_SWEEPS):
        t *= np.divide(r, t.sum(axis=1), out=np.zeros(k_rows), where=t.sum(axis=1) > 0)[:, None]
        t *= np.divide(c, t.sum(axis=0), out=np.zeros(k_cols), where=t.sum(axis=0) > 0)[None, :]
        if np.abs(t.sum(axis=1) - r).max() < 1e-9:
            break
    mass = t.sum(axis=1, keepdims=True)
    return np.where(mass > 0, t / np.where(mass > 0, mass, 1.0), c)


def split_cells(
    flat: np.ndarray, parent_first: bool, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``(parent cell, child cell)`` from a pair table's flat C-order cell index; ``shape``:
    ``(parent cells, child cells)``."""
    k_parent, k_child = shape
    if parent_first:
        return flat // k_child, flat % k_child
    return flat % k_parent, flat // k_parent


def released_forest(fm: FeatureMap, target: np.ndarray) -> list[tuple[int, int, int, int, bool, np.ndarray]]:
    """The released 2-way marginals as a forest to draw columns along: a maximum spanning forest
    of the columns, each pair weighted by the mutual information of its released table projected
    on the simplex (Chow–Liu on the noisy tables), in breadth-first order from each tree's
    lowest column.

    Returns ``(parent, child, column of cell_index, offset, parent first, the table with the
    parent's cells as rows)`` per edge. Drawing each child from its row of the conditional table
    puts the first points where the released pairs put the rows: the weights then refine a cloud
    that already holds the table's dependences, instead of reweighting independent draws (on a
    skewed table with strongly dependent columns, most independent points sit where no row is).
    Reads released sums and public cells only: post-processing, never raises.
    """
    import scipy.sparse.csgraph

    blocks = _two_way_blocks(fm)
    if not blocks:
        return []
    d = fm.input_dim
    # per pair of columns, its finest released table: (MI, column of cell_index, offset, first
    # column of the table, the table)
    best: dict[tuple[int, int], tuple[float, int, int, int, np.ndarray]] = {}
    for position, (u, v), offset, shape, weight in blocks:
        size = shape[0] * shape[1]
        t = simplex_projection(np.nan_to_num(target[offset : offset + size] / weight)).reshape(shape)
        mi = _mutual_information(t)
        key = (min(u, v), max(u, v))
        if math.isfinite(mi) and mi > 0 and (key not in best or size > best[key][4].size):
            best[key] = (mi, position, offset, u, t)
    if not best:
        return []
    graph = np.zeros((d, d))
    for (u, v), item in best.items():
        graph[u, v] = -item[0]  # a minimum spanning forest of −MI is a maximum one of MI
    forest = scipy.sparse.csgraph.minimum_spanning_tree(scipy.sparse.csr_matrix(graph))
    sym = (forest + forest.T).tocsr()
    order: list[tuple[int, int, int, int, bool, np.ndarray]] = []
    seen = np.zeros(d, dtype=bool)
    for root in range(d):
        if seen[root]:
            continue
        seen[root] = True
        queue = [root]
        while queue:
            parent = queue.pop(0)
            for child in sym.indices[sym.indptr[parent] : sym.indptr[parent + 1]]:
                child = int(child)
                if seen[child]:
                    continue
                seen[child] = True
                queue.append(child)
                key = (min(parent, child), max(parent, child))
                _, position, offset, first_column, t = best[key]
                first = first_column == parent
                order.append((parent, child, position, offset, first, t if first else t.T))
    return order


def rake_one_way(
    fm: FeatureMap,
    X: np.ndarray,
    w: np.ndarray,
    target: np.ndarray,
    var: np.ndarray,
    discrete: Mapping[int, np.ndarray] | None = None,
    *,
    excess: float,
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Weights raked to the released 1-way marginals the joint fit misses; the raked columns.

    With multi-column marginals, most cells of a skewed table's pair tables are empty, and the
    noise there is half positive, half negative. Weights cannot go below 0, so the fit matches
    the positive half and takes that mass from the populated cells: a 1-way marginal read off the
    joint fit is biased, by up to 5 % of the rows (countymurders at ε = 3, 28 pairs of 16 × 16).
    A column's own 1-way block measures its marginal without that bias. So a column whose fitted
    marginal ``m`` misses its block ``y`` (``target / a``, noise variance ``v`` per cell) by
    more than its best distribution ``t`` does (``t``: ``y`` projected on the simplex) by
    ``excess`` noise variance per cell (the decoder's default 1/20: ``‖m − y‖² − ‖t − y‖² > v · cells / 20``) is
    raked: iterative proportional fitting scales the weights of each raked column's cells to
    ``t``, which keeps the joint fit's dependence between columns (its odds ratios) and sets the
    column's marginal to ``t``. Where the fit already agrees with the 1-way cells, nothing
    changes: at ε = 0.1 on CPSSW8 the joint fit's marginals were better than ``t``.

    The threshold was chosen by measurement: ``docs/design/synthetic_decoder.md``.

    A column measured at two resolutions (:func:`one_way_estimates`) is always raked, to the
    distribution of its two levels.

    Post-processing: it reads the released targets, their recorded noise variances and public
    cells only, and never raises.
    """
    blocks = one_way_estimates(fm, target, var, discrete=discrete)
    if not blocks or X.shape[0] == 0:
        return w, ()
    idx = cell_columns(fm, X, [b[0] for b in blocks])
    chosen = []
    for k, (_position, column, offset, size, y, t, v, two_levels) in enumerate(blocks):
        cells = idx[:, k] - offset
        m = np.bincount(cells, weights=w, minlength=size)
        missed = float(np.sum((m - y) ** 2) - np.sum((t - y) ** 2))
        # two levels: t is the best estimate there is of this marginal (the joint fit weighs each
        # level's cells apart), so the column is raked to it
        if two_levels or (math.isfinite(missed) and missed > max(excess * v * size, 1e-12)):
            chosen.append((column, cells, t))
    if not chosen:
        return w, ()
    w = w.copy()
    for _ in range(_RAKE_SWEEPS):
        for _, cells, t in chosen:
            m = np.bincount(cells, weights=w, minlength=t.size)
            w *= np.divide(t, m, out=np.zeros_like(t), where=m > 0)[cells]
            total = w.sum()
            if not total > 0:
                return np.full(w.size, 1.0 / w.size), ()
            w /= total
    return w, tuple(column for column, _, _ in chosen)
