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

from .features.marginals import MarginalBlock

__all__ = [
    "SCORE_SENSITIVITY",
    "independence_score",
    "independence_scores",
    "make_independence_scores",
    "noisy_max_scale",
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
