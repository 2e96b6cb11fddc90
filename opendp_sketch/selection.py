r"""Which 2-way marginals to measure, chosen from the data at a proven sensitivity (MST-style).

A column pair is worth measuring when its rows are far from what the two 1-way marginals give
under independence. The **independence score** of a candidate 2-way table ``N`` (counts
``N_ab``, row sums ``r``, column sums ``c``, ``n`` rows) is

``s(N) = ⌊ Σ_ab |n·N_ab − r_a·c_b| / n ⌋``  (``0`` for ``n = 0``),

the L1 distance between the table and the product of its own margins, floored to an integer.
This module computes the scores exactly (integer arithmetic) and keeps the bookkeeping of a
spanning forest of the columns; the noise of the choice (OpenDP's ``make_noisy_max``) and its
composition with the release are in :mod:`opendp_sketch.release`, the one place noise is drawn.

**Sensitivity: adding or removing one row changes every score by at most 4.** Let ``D' = D ∪
{x}`` with ``x`` in cell ``(a, b)``, ``T = r cᵀ/n`` and ``T' = (r + e_a)(c + e_b)ᵀ/(n + 1)``. Then

``T' − T = (n·e_a cᵀ + n·r e_bᵀ + n·e_a e_bᵀ − r cᵀ) / (n(n + 1))``,

and since ``‖e_a cᵀ‖₁ = ‖r e_bᵀ‖₁ = n``, ``‖e_a e_bᵀ‖₁ = 1`` and ``‖r cᵀ‖₁ = n²``,
``‖T' − T‖₁ ≤ (3n² + n)/(n(n + 1)) = (3n + 1)/(n + 1) < 3``. With ``‖N' − N‖₁ = 1`` the reverse
triangle inequality gives ``|S(D') − S(D)| ≤ ‖(N' − T') − (N − T)‖₁ < 4`` for the unfloored
``S = Σ|N − T|`` (for ``n = 0``: ``S(D) = 0 = S(D')``). Floors of two reals less than 4 apart
differ by at most 4, so the integer scores move by at most ``SCORE_SENSITIVITY = 4`` per row,
and by ``4·k`` between datasets at symmetric distance ``k``: the score vector is ``4k``-stable
in the L∞ distance. The arithmetic is exact — ``n·N_ab`` and ``r_a·c_b`` in int64 while
``n < 2^31`` (both below ``2^62``, their sum over a table below ``2^63``) and in Python integers
above — and every score is an integer of at most ``2n``, exact as a float up to ``n = 2^52``
rows, so the bound holds for the code that runs. Scores read only the exact counts of the public candidate tables; they never
raise (a table of zeros scores 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import opendp.prelude as dp

from ._fixed import Accumulator
from .features.marginals import MarginalBlock, MarginalTables

__all__ = [
    "SCORE_SENSITIVITY",
    "independence_score",
    "independence_scores",
    "make_independence_scores",
    "noisy_max_scale",
    "PairCounts",
    "Forest",
]

#: how much one added or removed row moves any independence score (proof in the module docstring)
SCORE_SENSITIVITY = 4
#: below this many rows the int64 arithmetic of a score cannot overflow
_INT64_ROWS = 1 << 31


def independence_score(table: Any) -> int:
    """``⌊Σ_ab |n·N_ab − r_a·c_b| / n⌋`` of one 2-way count table ``N`` (``0`` when empty).

    >>> independence_score([[10, 0], [0, 10]])   # all 20 rows on the diagonal, the product spreads them
    20
    >>> independence_score([[5, 5], [5, 5]]), independence_score([[0, 0], [0, 0]])
    (0, 0)
    """
    N = np.asarray(table, dtype=np.int64)
    n = int(N.sum())
    if n <= 0:
        return 0
    if n < _INT64_ROWS:
        diff = n * N - np.outer(N.sum(axis=1), N.sum(axis=0))
        total = int(np.abs(diff).sum(dtype=np.int64))
    else:  # Python integers: exact at any size
        r = [int(v) for v in N.sum(axis=1)]
        c = [int(v) for v in N.sum(axis=0)]
        total = sum(abs(n * int(N[a, b]) - r[a] * c[b]) for a in range(N.shape[0]) for b in range(N.shape[1]))
    return total // n


def independence_scores(sums: Any, blocks: Sequence[MarginalBlock]) -> np.ndarray:
    """The score of every 2-way ``block`` from a marginal map's exact cell counts ``sums``.

    >>> from opendp_sketch.features.marginals import MarginalTables
    >>> fm = MarginalTables.auto(([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]), fine_bins=2, coarse_bins=2)
    >>> X = np.array([[0.1, 0.1, 0.9], [0.9, 0.9, 0.1]] * 5)
    >>> pairs = [b for b in fm.blocks if len(b.subset) == 2]
    >>> [b.subset for b in pairs], independence_scores(fm.transform(X).sum(axis=0).astype(int), pairs)
    ([(0, 1), (0, 2), (1, 2)], array([10., 10., 10.]))
    """
    v = np.asarray(sums)
    out = np.zeros(len(blocks), dtype=np.float64)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, b in enumerate(blocks):
        by_shape.setdefault(tuple(b.shape), []).append(i)
    for shape, index in by_shape.items():
        # the tables of one shape at once, in int64: exact below 2^31 rows (module docstring)
        size = math.prod(shape)
        starts = np.array([blocks[i].offset for i in index], dtype=np.int64)
        T = np.asarray(v[starts[:, None] + np.arange(size)], dtype=np.int64).reshape(len(index), *shape)
        n = T.reshape(len(index), -1).sum(axis=1)
        small = (len(shape) == 2) & (n < _INT64_ROWS)
        if small.any():
            t, m = T[small], n[small]
            diff = m[:, None, None] * t - t.sum(axis=2)[:, :, None] * t.sum(axis=1)[:, None, :]
            total = np.abs(diff).reshape(t.shape[0], -1).sum(axis=1, dtype=np.int64)
            out[np.asarray(index)[small]] = np.where(m > 0, total // np.maximum(m, 1), 0)
        for k in np.flatnonzero(~small):  # Python integers above 2^31 rows
            out[index[k]] = float(independence_score(T[k]))
    return out


#: bin indicators of a chunk of :class:`PairCounts` (chunk rows × indicators, float32): at most
#: this many entries, and never more rows than float32 counts exactly (2^24)
_PAIR_CHUNK_ENTRIES = 1 << 19


class PairCounts:
    r"""The exact cell counts of a :class:`MarginalTables` map of 2-way blocks (a selection's
    candidates), the same integers as the map's own sum, from a smaller Gram product.

    Each (column, bins) the blocks use has bins ``0 … f−1``; every row is in exactly one of them,
    so the indicator of the last bin is ``1 −`` the others'. The pass keeps only the first
    ``f − 1`` indicators of each (``H``, chunk rows × ``w``) and sums ``G = HᵀH`` (exact in
    float32: every partial sum is an integer at most the chunk's rows, below ``2^24``) and the
    row count ``n``. With ``s = diag G`` (the rows in each kept bin), ``R[u, k] = Σ_{v∈k} G[u, v]``,
    ``S_k = Σ_{u∈k} s_u`` and ``T[k, l] = Σ_{u∈k, v∈l} G[u, v]``, the cell ``(a, b)`` of block
    ``(k, l)`` counts

    * ``G[(k, a), (l, b)]`` for ``a < f_k − 1``, ``b < f_l − 1``;
    * ``s_(k,a) − R[(k, a), l]`` for ``b = f_l − 1`` (the rows in bin ``a`` of ``k`` outside the
      kept bins of ``l``), and ``s_(l,b) − R[(l, b), k]`` for ``a = f_k − 1``;
    * ``(n − S_k) + (T[k, l] − S_l)`` for the last cell of both,

    all in int64 (every term is at most ``n``, the count of a pass, below ``2^63``; the grouping
    keeps every intermediate within ``[−n, n]``). A column's bins are the map's own
    (:meth:`MarginalTables._codes`; equal bins and codes of columns sharing a box, bins and kind
    are computed together with the same float operations per value), so the counts equal the
    map's own :meth:`~opendp_sketch.features.base.FeatureMap.fixed_sum` for every row, NaN and
    ``±inf`` included, and nothing raises on data. Duck-typed for
    :func:`~opendp_sketch.backends.tables.table_pass`: ``_accumulate`` gives the exact sums of
    ``G`` (flattened), :meth:`cells` turns them and ``n`` into the map's cell counts.

    >>> from opendp_sketch.features.marginals import MarginalTables
    >>> fm = MarginalTables(([0.0] * 3, [1.0] * 3), subsets=[(0, 1), (0, 2), (1, 2)], bins=[[2, 3], [2, 2], [3, 2]])
    >>> X = np.random.default_rng(0).random((50, 3))
    >>> pc = PairCounts(fm)
    >>> pc.cells(np.array(pc.fixed_sum(X)), 50).tolist() == fm.fixed_sum(X)
    True
    """

    def __init__(self, feature_map: MarginalTables) -> None:
        fm = feature_map
        if any(len(b.subset) != 2 for b in fm.blocks):
            raise ValueError("PairCounts counts maps of 2-way blocks only")
        self.feature_map = fm
        self.input_dim = fm.input_dim
        keys: dict[tuple[Any, ...], int] = {}
        ends: list[tuple[int, ...]] = []
        for b in fm.blocks:
            here = []
            for axis, (j, nb) in enumerate(zip(b.subset, b.shape)):
                key = (int(j), int(nb), b.column_cuts(axis))
                if key not in keys:
                    keys[key] = len(keys)
                here.append(keys[key])
            ends.append(tuple(here))
        # keys whose bins are computed together made contiguous (public: the blocks only)
        first = list(keys)
        kinds = [self._kind(key) for key in first]
        rank = {g: r for r, g in enumerate(dict.fromkeys(kinds))}
        order = sorted(range(len(first)), key=lambda k: (rank[kinds[k]], k))
        renamed = {old: new for new, old in enumerate(order)}
        ends = [tuple(renamed[k] for k in e) for e in ends]
        self._keys = [first[k] for k in order]
        self._groups = []
        for g in rank:
            ks = [renamed[k] for k in range(len(first)) if kinds[k] == g]
            cols = np.array([self._keys[k][0] for k in ks], dtype=np.int64)
            self._groups.append((min(ks), max(ks) + 1, cols, g))
        f = np.array([key[1] for key in self._keys], dtype=np.int64)
        self._bins = f
        start = np.concatenate([[0], np.cumsum(f - 1)]).astype(np.int64)
        self._start, self.width = start[:-1], int(start[-1])
        self.num_features = self.width * self.width
        # bin c of key k is entry base_k + c of one table of columns of H: its kept indicator, or
        # (the last bin) the key's spare column, after the kept ones
        self._base = np.concatenate([[0], np.cumsum(f)[:-1]]).astype(np.int64)
        self._column = np.empty(int(f.sum()), dtype=np.int64)
        for k, fk in enumerate(f.tolist()):
            b0 = int(self._base[k])
            self._column[b0 : b0 + fk - 1] = self._start[k] + np.arange(fk - 1)
            self._column[b0 + fk - 1] = self.width + k
        # every cell's rule (feature order), the blocks of one shape at once
        size = sum(b.size for b in fm.blocks)
        self._case = np.empty(size, dtype=np.int8)
        self._u = np.empty(size, dtype=np.int64)  # a kept indicator (row of G), or key k
        self._v = np.empty(size, dtype=np.int64)  # a kept indicator (column of G), or key l
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, b in enumerate(fm.blocks):
            by_shape.setdefault(tuple(b.shape), []).append(i)
        for (fa, fb), index in by_shape.items():
            kk = np.array([ends[i] for i in index], dtype=np.int64).reshape(-1, 2)
            where = np.array([fm.blocks[i].offset for i in index], dtype=np.int64)[:, None] + np.arange(
                fa * fb
            )
            a = np.repeat(np.arange(fa), fb)[None, :]
            c = np.tile(np.arange(fb), fa)[None, :]
            ka, kb = kk[:, :1], kk[:, 1:]
            last_a, last_b = a == fa - 1, c == fb - 1
            ua, vb = self._start[ka] + a, self._start[kb] + c  # the kept indicators (where they are)
            case = np.where(last_a, np.where(last_b, 3, 2), np.where(last_b, 1, 0))
            u = np.select([case == 0, case == 1, case == 2], [ua, ua, vb], ka)
            v = np.select([case == 0, case == 1, case == 2], [vb, kb, ka], kb)
            self._case[where], self._u[where], self._v[where] = case, u, v

    def _kind(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        """How a key's bins are computed: together with the keys of equal bins of numeric columns
        (or codes of categorical ones) sharing bounds and bins, or alone by the map itself."""
        fm = self.feature_map
        j, f, cuts = key
        lo, hi = float(fm.lower[j]), float(fm.upper[j])
        if cuts is None and math.isfinite(hi - lo) and hi > lo:
            kind = "codes" if j in fm.categories else ("unit" if (lo, hi) == (0.0, 1.0) else "equal")
            return (kind, lo, hi, f)
        return ("map", key)

    def _chunk_codes(self, raw: np.ndarray, box: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Each row's bin per key (rows × keys, int64) of a chunk, clipped into the domain's
        ``box`` as a map's sum clips it (``fmax``/``fmin``: NaN to the lower bound), then binned
        by the map's own float operations (:meth:`MarginalTables._column_bins`, all the columns
        of a group at once: the same operations on every value)."""
        fm = self.feature_map
        codes = np.empty((raw.shape[0], len(self._keys)), dtype=np.int64)
        clipped = None
        for a, b, cols, kind in self._groups:
            lo_c, hi_c = box[0][cols], box[1][cols]
            inside = bool(np.all((fm.lower[cols] <= lo_c) & (lo_c <= hi_c) & (hi_c <= fm.upper[cols])))
            if kind[0] == "map" or not inside:
                if clipped is None:
                    clipped = np.fmax(raw, box[0])
                    np.fmin(clipped, box[1], out=clipped)
                memo: dict[Any, Any] = {"clip": box}  # each key's bins copied out at once
                for k in range(a, b):
                    j, f, cuts = self._keys[k]
                    codes[:, k] = fm._codes(clipped, memo, j, f, cuts)
                continue
            # _column_bins' operations, written out in place: calling it per group allocates two
            # chunk-sized arrays a call, which doubled this pass's CPU (100 columns, 10⁵ rows)
            name, lo, hi, f = kind
            x = raw[:, cols]  # a copy
            np.fmax(x, lo_c, out=x)
            np.fmin(x, hi_c, out=x)
            if name == "codes":
                np.rint(x, out=x)
                x -= lo
            elif name == "equal":
                x -= lo
                x /= hi - lo
                x *= f
            else:
                x *= f
            out = codes[:, a:b]
            np.copyto(out, x, casting="unsafe")
            np.minimum(out, f - 1, out=out)
        return codes

    def fixed_sum(self, X: Any) -> list[int]:
        """The exact sums of ``G`` (flattened) over the rows of ``X``, clipped into the map's box
        (a convenience for checks; the pass uses :meth:`_accumulate`)."""
        fm = self.feature_map
        return self._accumulate(np.asarray(X, dtype=np.float64), (fm.lower, fm.upper), 0, None).total()

    def _accumulate(
        self, X: Any, clip: tuple[np.ndarray, np.ndarray] | None, chunk_rows: int, n_jobs: int | None
    ) -> Accumulator:
        """The exact sum of ``G`` over the rows of ``X`` (a batch of the pass), clipped into
        ``clip`` first as a map's sum clips (NaN to the lower bound); one thread, BLAS too
        (``chunk_rows`` and ``n_jobs`` are the pass's, unused: the chunk is sized here)."""
        from .features.base import single_threaded_blas

        fm = self.feature_map
        X = np.asarray(X, dtype=np.float64)
        box = (fm.lower, fm.upper) if clip is None else clip  # no box given: the map's own
        lo = np.broadcast_to(np.asarray(box[0], dtype=np.float64), (X.shape[1],))
        hi = np.broadcast_to(np.asarray(box[1], dtype=np.float64), (X.shape[1],))
        acc = Accumulator(self.num_features)
        w, nk = self.width, len(self._keys)
        wide = w + nk  # the kept indicators, then one spare column per key for its last bin
        rows = max(1, min(1 << 23, _PAIR_CHUNK_ENTRIES // wide))
        with single_threaded_blas(), np.errstate(all="ignore"):
            for s in range(0, X.shape[0], rows):
                raw = X[s : s + rows]
                n = raw.shape[0]
                codes = self._chunk_codes(raw, (lo, hi))
                codes += self._base
                # each row's column per key (mode="clip": an index never leaves the table)
                ones = np.take(self._column, codes, mode="clip")
                ones += (np.arange(n, dtype=np.int64) * wide)[:, None]
                H = np.zeros((n, wide), dtype=np.float32)
                H.reshape(-1)[ones.reshape(-1)] = 1.0
                kept = H[:, :w]
                acc.add(np.rint(kept.T @ kept).astype(np.int64).reshape(-1))
        return acc

    def cells(self, sums: np.ndarray, rows: int) -> np.ndarray:
        """The map's exact cell counts (feature order, int64) from the summed ``G`` and the row
        count ``rows`` of the same pass."""
        w = self.width
        G = np.asarray(sums, dtype=np.int64).reshape(w, w)
        s = np.diagonal(G).copy()
        nk = len(self._keys)
        # sums over each key's kept indicators (contiguous columns; a key of one bin has none)
        has = np.flatnonzero(self._bins > 1)
        R = np.zeros((w, nk), dtype=np.int64)
        if has.size:
            R[:, has] = np.add.reduceat(G, self._start[has], axis=1)
        S = np.zeros(nk, dtype=np.int64)
        T = np.zeros((nk, nk), dtype=np.int64)
        if has.size:
            S[has] = np.add.reduceat(s, self._start[has])
            T[has] = np.add.reduceat(R, self._start[has], axis=0)
        case, u, v = self._case, self._u, self._v
        out = np.empty(case.size, dtype=np.int64)
        c = case == 0
        out[c] = G[u[c], v[c]]
        c = case == 1
        out[c] = s[u[c]] - R[u[c], v[c]]
        c = case == 2
        out[c] = s[u[c]] - R[u[c], v[c]]
        c = case == 3
        out[c] = (int(rows) - S[u[c]]) + (T[u[c], v[c]] - S[v[c]])
        return out


@functools.cache
def _scores_space() -> tuple[dp.Domain, dp.Metric]:
    """The scores' domain and metric, built once (a selection builds a query per round)."""
    return dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)


def noisy_max_scale(measure: dp.Measure, d_in: int, d_out: float) -> float:
    """The smallest noise scale OpenDP certifies for a noisy max over the scores of
    :func:`make_independence_scores` at ``d_in`` within loss ``d_out``: the search runs on the
    noisy max alone at the scores' distance ``4·d_in`` (the chain's map is the noisy max's map of
    the scores' stability map), so it gives the scale the whole chain's search gives without
    building the chain at every step."""
    return dp.binary_search_param(
        lambda v: dp.m.make_noisy_max(*_scores_space(), measure, v),
        d_in=float(SCORE_SENSITIVITY * d_in),
        d_out=d_out,
        T=float,
    )


def make_independence_scores(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    counts: Callable[[Any], Any],
    blocks: Sequence[MarginalBlock],
    subset: Sequence[int],
    memo: dict[str, Any],
) -> dp.Transformation:
    """Data → the scores of ``blocks[i]`` for ``i`` in ``subset``, ``4·d_in``-stable in L∞.

    ``counts(data)`` is a backend's exact ``(cell counts, n)`` of the candidate marginals (one
    pass over the data). ``memo`` holds them for the one dataset of one release, so every round
    of a selection reads the data once: a release builds a new ``memo``, and the transformation
    returns the same scores for the same data either way.
    """
    chosen = np.asarray(subset, dtype=np.int64).reshape(-1)  # one conversion, not one per pair

    def scores(data: Any) -> np.ndarray:
        if memo.get("data") is not data:
            memo["data"], memo["scores"] = data, independence_scores(counts(data)[0], blocks)
        # a float64 array: OpenDP reads it as a vector ~3x faster than a list of floats
        return np.ascontiguousarray(memo["scores"][chosen], dtype=np.float64)

    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        *_scores_space(),
        scores,
        lambda d_in: float(SCORE_SENSITIVITY * d_in),
    )


class Forest:
    """The columns joined so far by measured 2-way marginals (union-find).

    >>> f = Forest(4, [(0, 1)])
    >>> f.components, f.crossing([(0, 1), (1, 2), (2, 3)])
    (3, [1, 2])
    >>> f.join((1, 2)); f.components
    2
    >>> Forest(4, [(0, 1, 3)]).components   # a 3-way marginal joins its three columns
    2
    """

    def __init__(self, dim: int, pairs: Sequence[tuple[int, ...]] = ()) -> None:
        self._parent = list(range(dim))
        self.components = dim
        for p in pairs:
            self.join(p)

    def _root(self, j: int) -> int:
        while self._parent[j] != j:
            self._parent[j] = self._parent[self._parent[j]]
            j = self._parent[j]
        return j

    def join(self, subset: tuple[int, ...]) -> None:
        """Merge the components of the columns of ``subset`` (a pair, or a 3-way marginal's)."""
        for j in subset[1:]:
            a, b = self._root(subset[0]), self._root(j)
            if a != b:
                self._parent[a] = b
                self.components -= 1

    def crossing(self, pairs: Sequence[tuple[int, ...]] | np.ndarray) -> list[int]:
        """Indices of the ``pairs`` whose columns lie in two different components (``pairs``: a
        sequence of 2-tuples, or a ``(k, 2)`` integer array, faster when asked every round)."""
        P = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        roots = np.array([self._root(j) for j in range(len(self._parent))], dtype=np.int64)
        return np.flatnonzero(roots[P[:, 0]] != roots[P[:, 1]]).tolist()
