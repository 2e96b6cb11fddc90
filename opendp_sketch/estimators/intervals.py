r"""Intervals from the released cells: what a one-hot sketch itself says about an answer.

A one-hot map (marginal tables, histograms) releases, for every block, the row count of each of
its cells plus noise of a recorded law: ``y_c = x_c + ξ_c`` with ``E ξ_c = 0`` and
``Var ξ_c = σ²``. The cells of one block partition the box, so for a query ``f``:

.. math:: Σ_c \underline{f}_c\, x_c \;≤\; Σ_i f(x_i) \;≤\; Σ_c \overline{f}_c\, x_c,

where ``f̲_c`` and ``f̄_c`` are the least and greatest values ``f`` takes in cell ``c``. They are
read on *probe points*: the decoder's points, and as many public points drawn uniformly in the
box with a quarter of each column's values moved onto public cell edges (where integer data and
clipped values sit); a cell without probes takes the query's whole range. Both sides are linear
in the true counts, so replacing ``x_c`` by ``y_c`` gives unbiased bounds whose noise has
variance ``σ² Σ_c f̲_c²`` (resp. ``f̄_c``); each bound is widened by ``z`` of those standard
deviations: the normal quantile of the level, corrected for the tails of Laplace noise (below). Every block gives such an interval; a query
takes the one of the block with the narrowest *expected* width — the decoder's mass in the cells
the query cuts plus the noise band — so the choice does not read that block's own noise draw
(taking the tightest of several noisy intervals would under-cover). For a mean (``expect``) the
counts are divided by the block's own total ``T = Σ_c y_c`` and the noise follows by the delta
method, ``σ² Σ_c (f̲_c − L)² / T²``.

**Laplace tails.** A sum of a few Laplace draws has heavier tails than a normal law of the same
variance: at ``z = 1.96`` a single cell's Laplace noise is covered 93.7 % of the time, not 95 %.
The bound ``Σ_c a_c ξ_c`` of coefficients ``a_c`` has excess kurtosis ``κ = κ_ξ Σ a_c⁴ / (Σ a_c²)²``
(``κ_ξ`` that of one draw: ``(1 + 4t + t²) / (2t)`` for OpenDP's discrete Laplace of scale
``s``, ``t = e^{−1/s}``, which tends to 3, the continuous law's; 0 for Gaussian noise), and the
quantile takes its Cornish–Fisher term, ``z + (z³ − 3z) κ / 24``: 2.17 instead of 1.96 for one
cell at 95 % (the exact Laplace quantile is 2.12 standard deviations), and ``z`` again as the
cells add up (``κ → 0``). A sum of merged sketches' noise (mechanism ``"laplace"`` without one
scale, or ``"mixed"``) takes ``κ_ξ = 3``.

**What it covers.** DP noise exactly (up to the approximation of a sum of noise draws above), the
count's noise (a bound is a sum of released cells: it needs no row count), and the *fit error*:
the decoder's answer may be any point of the interval, and where the query cuts cells of every
block — a 3-column count when only 2-way marginals were released, a range edge
inside a bin — the interval is the range the released cells allow, however the decoder filled
them in. A query is **supported** when the chosen block holds it exactly (``f̲_c = f̄_c`` in
every cell with probes), so the interval is noise only. An unsupported answer is flagged: its interval
is a worst-case bound, not a noise band.

**The value inside.** The bounds here are one block's; :class:`~opendp_sketch.M2M` reports its
decoder's value (which draws on every block) with them, and where that block's noise put a
bound past the value it moves that bound out to the value, so ``low ≤ value ≤ high`` holds for
every reported interval and the coverage can only rise.

**Privacy.** Reads the released sums, the recorded noise variance, the public map and the
decoder's points: post-processing. Nothing here raises on released values (a non-positive
total gives the trivial interval).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse
from scipy.stats import norm

from ..features.base import FeatureMap
from ..features.composite import Composite
from ..features.histogram import Histogram
from ..features.marginals import MarginalTables
from ..sketch import Sketch
from .synthetic import cell_edges, cell_index

__all__ = [
    "CellIndex",
    "Interval",
    "cell_intervals",
    "noise_kurtosis",
    "partitions",
    "probe_points",
    "require_cells",
]


class Interval(NamedTuple):
    """An answer with its interval: ``value`` (the decoder's estimate), ``low`` and ``high`` (the
    bounds at the requested level, ``low ≤ value ≤ high``) and ``supported`` (``True`` when one
    released block holds the query exactly, so the width is noise only, up to the widening that
    keeps the value inside; ``False``: a worst-case bound over what the released cells allow).
    Scalars for one query, arrays for several."""

    value: Any
    low: Any
    high: Any
    supported: Any


def partitions(fm: FeatureMap) -> list[tuple[int, int, float]] | None:
    """``(offset, size, weight)`` of each partition of the box into cells in the features of
    ``fm`` (a MarginalTables table, a Histogram column, a block of a weighted composite of those:
    ``weight`` is what a cell's feature equals for a point inside it), or ``None`` for maps
    without one."""
    if isinstance(fm, MarginalTables):
        return [(b.offset, b.size, 1.0) for b in fm.blocks]
    if isinstance(fm, Histogram):
        return [(int(o), int(b), 1.0) for o, b in zip(fm.offsets, fm.bins)]
    if isinstance(fm, Composite):
        out: list[tuple[int, int, float]] = []
        for m, blk in zip(fm.maps, fm.blocks):
            inner = partitions(m)
            if inner is None:
                return None
            out.extend((blk.offset + o, size, blk.weight * a) for o, size, a in inner)
        return out
    return None


def probe_points(
    fm: FeatureMap,
    lower: np.ndarray,
    upper: np.ndarray,
    discrete: dict[int, np.ndarray],
    n: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Public points that read a query in every cell: uniform in the box, a quarter of each
    column's values moved onto a public cell edge (where integer data and clipped values sit,
    so ``x ≤ t`` at an edge is seen to cut the cell above it), public values for discrete
    columns."""
    P = rng.uniform(lower, upper, size=(n, lower.size))
    for j, e in enumerate(cell_edges(fm, lower, upper)):
        if j in discrete:
            P[:, j] = rng.choice(discrete[j], size=n)
            continue
        if e is None:
            continue
        snap = rng.uniform(size=n) < 0.25
        if e.size and snap.any():
            P[snap, j] = rng.choice(e, size=int(snap.sum()))
    return P


def require_cells(fm: FeatureMap) -> list[tuple[int, int, float]]:
    """:func:`partitions` of ``fm``, or a ``ValueError`` that names the maps with cells."""
    parts = partitions(fm)
    if parts is None:
        raise ValueError(
            f"intervals need a sketch of marginal tables or histograms (MarginalTables, Histogram), not "
            f"{type(fm).__name__}: release with a schema (its default map is made of MarginalTables) or dps.MarginalTables"
        )
    return parts


class CellIndex:
    """The cell of every probe point in every block of a one-hot map, sorted once per block.

    :param fm: the sketch's map (:func:`partitions` must know it)
    :param points: probe points (the decoder's points, then uniform points of the box) in the
        map's coordinates
    :param mass: each probe point's share of the rows (the decoder's weights; 0 for the uniform
        probes): it ranks the blocks by the width they leave, before any query is read
    """

    def __init__(self, fm: FeatureMap, points: np.ndarray, mass: np.ndarray) -> None:
        self.parts = require_cells(fm)
        idx, _ = cell_index(fm, points)  # column k: the cell in partition k (same order)
        self.order: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.cells: list[np.ndarray] = []
        self.mass: list[np.ndarray] = []
        for k, (offset, size, _) in enumerate(self.parts):
            c = idx[:, k] - offset
            order = np.argsort(c, kind="stable")
            cs = c[order]
            starts = np.flatnonzero(np.r_[True, cs[1:] != cs[:-1]]) if cs.size else np.zeros(0, np.int64)
            self.order.append(order)
            self.starts.append(starts)
            self.cells.append(cs[starts])
            self.mass.append(np.bincount(c, weights=mass, minlength=size))
        self._cells_of = idx.astype(np.int32)  # each probe point's cell per block (for predicates)
        self._members: dict[int, Any] = {}

    def _membership(self, k: int) -> tuple[Any, np.ndarray]:
        """Block ``k``'s cells × probe points 0/1 matrix (CSR, built once) and each cell's points."""
        if k not in self._members:
            offset, size, _ = self.parts[k]
            c = self._cells_of[:, k] - offset
            n = c.size
            S = scipy.sparse.csr_matrix((np.ones(n, np.float32), (c, np.arange(n))), shape=(size, n))
            self._members[k] = (S, np.bincount(c, minlength=size))
        return self._members[k]

    def ranges(
        self, k: int, F: np.ndarray, fmin: np.ndarray, fmax: np.ndarray, ones: np.ndarray | None = None
    ):
        """Least and greatest value of each column of ``F`` in each cell of block ``k``, and which
        cells hold probe points (``fmin``/``fmax`` for the others).

        ``ones``: ``F`` as float32 when it holds only 0 and 1 (predicates). A cell's least value is
        then 1 exactly when its count of ones equals its points, and its greatest when the count
        is positive: one sparse product per block (exact: counts below 2²⁴), the same ranges about
        three times sooner than sorting the rows by cell."""
        size = self.parts[k][1]
        if ones is not None and ones.shape[0] < (1 << 24):
            S, points = self._membership(k)
            counts = S @ ones
            held = points > 0
            lo = np.where(held[:, None], counts == points[:, None], fmin[None, :]).astype(F.dtype)
            hi = np.where(held[:, None], counts > 0, fmax[None, :]).astype(F.dtype)
            return lo, hi, held
        lo = np.broadcast_to(fmin, (size, F.shape[1])).astype(F.dtype)
        hi = np.broadcast_to(fmax, (size, F.shape[1])).astype(F.dtype)
        held = np.zeros(size, dtype=bool)
        if self.starts[k].size:
            Fo = F[self.order[k]]
            lo[self.cells[k]] = np.minimum.reduceat(Fo, self.starts[k], axis=0)
            hi[self.cells[k]] = np.maximum.reduceat(Fo, self.starts[k], axis=0)
            held[self.cells[k]] = True
        return lo, hi, held


def noise_kurtosis(sketch: Sketch) -> float:
    """Excess kurtosis of one coordinate's noise in ``sketch`` (module text: *Laplace tails*).

    >>> import opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
    >>> sk = dps.Sketch(feature_map=fm, sum_units=[5, 5], count=10,
    ...                 noise={"mechanism": "laplace", "sum_scale": 20.0 * fm.unit})
    >>> round(noise_kurtosis(sk), 3), noise_kurtosis(dps.Sketch(feature_map=fm, sum_units=[5, 5], count=10))
    (3.001, 0.0)
    """
    mechanism = sketch.noise.get("mechanism")
    if mechanism == "gaussian" or mechanism is None:
        return 0.0
    scale = sketch.noise.get("sum_scale")
    if mechanism != "laplace" or not isinstance(scale, (int, float)) or not scale > 0:
        return 3.0
    t = math.exp(-float(sketch.feature_map.unit) / float(scale))  # e^{-1/s}, s in integer units
    return (1.0 + 4.0 * t + t * t) / (2.0 * t)


def band(a: np.ndarray, z: float, kurtosis: float) -> tuple[np.ndarray, np.ndarray]:
    """For each column's bound ``Σ_c a_c ξ_c``: ``√Σ a_c²`` (its noise std over one draw's) and its
    quantile ``z``, corrected for the noise's excess ``kurtosis`` by the Cornish–Fisher term
    (module text: *Laplace tails*)."""
    a2 = a * a
    s2 = np.sum(a2, axis=0)
    if kurtosis == 0.0:
        return np.sqrt(s2), np.full(s2.shape, z)
    s4 = np.sum(a2 * a2, axis=0)
    k = kurtosis * np.divide(s4, s2 * s2, out=np.zeros_like(s2), where=s2 > 0)
    return np.sqrt(s2), z + (z**3 - 3.0 * z) * k / 24.0


def cell_intervals(
    sketch: Sketch,
    index: CellIndex,
    F: np.ndarray,
    *,
    level: float = 0.95,
    kind: str = "count",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower and upper bounds at ``level`` for each column of ``F`` (values of the queries on the
    probe points of ``index``), and whether each query is supported (see the module's text).

    Each query takes the bounds of the one block that leaves it the narrowest expected interval:
    the width of its cut cells at the decoder's masses plus the noise band. The choice reads the
    decoder's fit, not the block's own noise draw.

    :param kind: ``"count"`` (``Σ f(x_i)``) or ``"mean"`` (``(1/n) Σ f(x_i)``)
    :raises ValueError: for a level outside ``(0, 1)`` or an unknown kind
    """
    if isinstance(level, bool) or not (isinstance(level, float | int) and 0 < level < 1):
        raise ValueError(f"level ({level!r}) must be in (0, 1), e.g. 0.95")
    if kind not in ("count", "mean"):
        raise ValueError(f"kind ({kind!r}) must be 'count' or 'mean'")
    z = float(norm.ppf(0.5 + level / 2))
    kurtosis = noise_kurtosis(sketch)
    y = np.asarray(sketch.sum, dtype=np.float64)
    sd_all = float(np.sqrt(max(sketch.sum_variance, 0.0)))
    q = F.shape[1]
    fmin, fmax = F.min(axis=0), F.max(axis=0)
    ones = None
    if ((F == 0) | (F == 1)).all():  # predicates: their cell ranges in a byte per value
        F = F.astype(np.int8)
        ones = np.ascontiguousarray(F, dtype=np.float32)  # C order: the sparse product reads it as is
    low = np.full(q, -np.inf)
    high = np.full(q, np.inf)
    best = np.full(q, np.inf)
    supported = np.zeros(q, dtype=bool)
    for k, (offset, size, weight) in enumerate(index.parts):
        lo, hi, held = index.ranges(k, F, fmin, fmax, ones)
        lo, hi = lo.astype(np.float64), hi.astype(np.float64)
        yc = y[offset : offset + size] / weight  # rows per cell, with noise of std sd / weight
        sd = sd_all / weight
        m = index.mass[k]
        total = float(m.sum())
        if kind == "count":
            L, U = yc @ lo, yc @ hi
            (rL, zL), (rU, zU) = band(lo, z, kurtosis), band(hi, z, kurtosis)
            sL, sU = sd * rL, sd * rU
            cut = m @ (hi - lo)
        else:
            T = float(yc.sum())
            if not T > 0:
                continue
            L, U = (yc @ lo) / T, (yc @ hi) / T
            (rL, zL), (rU, zU) = band(lo - L, z, kurtosis), band(hi - U, z, kurtosis)
            sL, sU = sd * rL / T, sd * rU / T
            cut = m @ (hi - lo) / (total if total > 0 else 1.0)
        width = cut + zL * sL + zU * sU
        take = width < best
        best = np.where(take, width, best)
        low = np.where(take, L - zL * sL, low)
        high = np.where(take, U + zU * sU, high)
        supported = np.where(take, np.all((lo == hi) | ~held[:, None], axis=0), supported)
    if kind == "mean":  # an average lies within the query's range
        low, high = np.maximum(low, fmin), np.minimum(high, fmax)
    else:  # a count of a non-negative query is non-negative
        low = np.where(fmin >= 0, np.maximum(low, 0.0), low)
    return np.minimum(low, high), np.maximum(low, high), supported


def quantile_bounds(
    cdf_low: np.ndarray,
    cdf_high: np.ndarray,
    edges: np.ndarray,
    q: np.ndarray,
    value: np.ndarray,
    lo: float,
    hi: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of the quantiles at levels ``q`` from simultaneous CDF bounds at a column's cell
    ``edges`` (see :meth:`~opendp_sketch.M2M.quantile`): above the edge before the first whose
    upper bound reaches ``q``, at or below the first whose lower bound does; widened to hold
    ``value``; ``lo``/``hi`` (the column's range) where no edge qualifies.

    >>> quantile_bounds(np.array([0.1, 0.4, 0.9]), np.array([0.3, 0.6, 1.0]), np.array([1.0, 2.0, 3.0]),
    ...                 np.array([0.5]), np.array([2.2]), 0.0, 4.0)
    (array([1.]), array([3.]))
    """
    k = edges.size
    reach_hi = cdf_high[None, :] >= q[:, None] - 1e-12
    reach_lo = cdf_low[None, :] >= q[:, None] - 1e-12
    first_hi = np.where(reach_hi.any(axis=1), reach_hi.argmax(axis=1), k - 1)
    low = np.where(first_hi > 0, edges[np.maximum(first_hi - 1, 0)], lo)
    high = np.where(reach_lo.any(axis=1), edges[reach_lo.argmax(axis=1)], hi)
    return np.minimum(low, value), np.maximum(high, value)
