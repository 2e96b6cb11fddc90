r"""A sketch decoded as a distribution: weighted synthetic points fitted to every released block.

The decoder returns public points ``x̃_1..x̃_N`` in the public box and weights ``w`` in the
probability simplex that minimise the noise-weighted misfit to the released sketch

.. math:: L(w) = Σ_k \frac{(n̂ (P w)_k − S_k)^2}{σ_k^2}, \qquad P = Φ(x̃) ∈ R^{m×N}, \; w ≥ 0, \; Σ w = 1,

where ``S`` is the noisy feature sum, ``σ_k²`` the recorded noise variance of feature ``k`` and
``n̂`` the count. For a composite map every feature carries its block's weight, so the sum runs
over all blocks with their own noise levels. Because ``w`` is a distribution, every answer is an
average over a genuine distribution: counts lie in ``[0, n̂]``, CDFs are monotone in ``[0, 1]``,
means lie inside the box.

**Fitting ``w``.** Entropic mirror descent (exponentiated gradient) on ``w = softmax(θ)`` from
uniform weights, with a backtracking step; as in Private-PGM's estimation from noisy marginals,
the multiplicative update keeps ``w`` positive and, started from uniform, favours spread-out
(high-entropy) solutions among the many that fit equally well.

**Moving the points.** Round 0 fits weights on points drawn uniformly from the box (or from a
user prior). The next points are drawn column by column from the fitted 1-way marginals. When
the map is one of marginals with a 1-way block for every column and no prior is given, round 0 is
skipped: round 1 draws each column from its released 1-way block projected on the probability
simplex. When the map also releases 2-way marginals, round 1 then redraws the columns along a
maximum spanning forest of the released pair tables (Chow–Liu on the noisy tables, each pair
raked to its columns' 1-way blocks, :func:`_released_forest`): a child column's cell is drawn
given its parent's, so the first points already hold the pairs' dependences, chains of pairs
included, as a tree-shaped model (MST's) would. With only (0, 1) and (1, 2) released, the
decoded (0, 2) table then follows the data; from independent draws the weights could not get
there (countymurders' 7 Chow–Liu pair tables at ε = 1000: 2-column range counts 0.41 × 10⁻³ off
from independent draws, 0.23 along the forest, 0.24 from the tree model's exact answers). On the
schema path's releases where pairs are released, range counts on the grid were 8–22 % lower
(movies at ε = 1: +8 % in one run, −5 % in another) and off the grid 1.8–20 % lower
(``benchmarks/results/bench_forest_start.md``). Each later round resamples ``N`` points ``∝ w``
(systematic resampling) and perturbs them: coordinates of columns with public cells (histogram
bins) are redrawn uniformly inside their cell, and a share of points moves one column to a cell
drawn from its fitted marginal; other columns get Gaussian jitter with a shrinking bandwidth.
Every public cell of every column keeps two points (and every public value of a discrete column
one), so a cell whose weight fell to 0 in one round can still take mass in the next.
Rounds stop when a round lowers the best misfit by less than 1 % (``_ROUND_TOL``; ``tol`` when
larger), after ``rounds`` at most; the best round is kept.

**Raking.** For marginals with multi-column blocks, a column whose fitted 1-way marginal misses
its own released 1-way block by more than one noise variance per cell beyond the block's best
distribution is raked to that distribution (iterative proportional fitting): non-negative
weights fitted to the noise on a pair table's empty cells otherwise take mass from its populated
cells (:func:`_rake_one_way`).

**Inside the cells.** The final points of a column with public cells are redrawn inside their
cell from a linear density that follows the neighbouring cells' fitted densities (mass kept,
slope limited so it stays ≥ 0; ``within_cells="uniform"`` draws them uniformly): means, moments
and quantiles of skewed columns then lean the way the data does (:meth:`SyntheticDecoder._place_in_cells`).

**Count.** When every point has the same feature total ``1ᵀΦ(x) = s`` (one-hot maps: histograms,
marginals, trees, RACE), ``1ᵀS / s`` is a second estimate of ``n`` with variance ``Σσ_k²/s²``; it is
combined with the released count by inverse-variance weighting.

**Privacy.** Everything here reads the released sketch and public parameters only; the random
numbers come from ``numpy.random.default_rng(seed)`` with a public seed. It is post-processing,
and it never raises on any sketch: a sketch whose count estimate is not positive gives a
*degenerate* fit (flagged by ``degenerate_`` and ``reason_``) with uniform weights on the
starting points and ``n_hat_ = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse

from ..features.base import FeatureMap, OneHotFeatureMap
from ..features.byclass import ByClass
from ..features.composite import Composite
from ..features.histogram import DyadicTrees, Histogram
from ..features.marginals import Marginals
from ..sketch import Sketch
from ._cache import decoder_key, lookup, store

__all__ = ["DEFAULT_SYNTHETIC_POINTS", "SyntheticDecoder"]

#: default number of synthetic points: on three real tables 50 000 points answered 1 000 counts
#: as well as 100 000 (mean |err|/n equal to 10⁻⁴) in about half the time, and 30 000 decoded the
#: same schema releases in 10–40 % less time than 50 000, errors within ±1.5 % except CPSSW8 at
#: ε = 1 (counts +2–3 %, means +7 %; benchmarks/results/bench_synthetic_points.md)
DEFAULT_SYNTHETIC_POINTS = 30_000

#: A user prior: ``prior(n, rng) -> (n, d)`` array of public points inside the box.
Prior = Callable[[int, np.random.Generator], np.ndarray]

#: entries of a dense design ``Φ(x̃)`` (float32) at most: caps ``N`` for dense maps (16 MiB), as
#: every mirror-descent step multiplies by it twice; at least _MIN_DENSE_POINTS points are kept
_MAX_DENSE_ENTRIES = 1 << 22
_MIN_DENSE_POINTS = 2000
#: entries of a transient dense chunk when a map has no sparse evaluation
_CHUNK_ENTRIES = 1 << 21
#: a design with fewer non-zeros than this share is kept sparse
_SPARSE_SHARE = 0.25
#: points kept in every public cell of a column when points are resampled
_CELL_POINTS = 2
#: multiply-adds a round of mirror descent may spend beyond ``iterations`` steps: a small design
#: (few distinct cell combinations) gets more steps, up to ``_MAX_STEP_FACTOR × iterations``
_ROUND_WORK = 1 << 29
_MAX_STEP_FACTOR = 50
#: the rounds stop once a round lowers the best misfit by less than this share (or ``tol``,
#: whichever is larger; ``None``: ``tol`` alone). On the same schema releases of three real tables
#: (benchmarks/results/bench_round_stop.md, 5 each at ε = 0.1, 1, 3) 1 % against 0.1 % decoded
#: CPSSW8 21–25 % faster at ε ≤ 1 and the others up to 11 % faster, every error within 2.3 %
_ROUND_TOL: float | None = 0.01
#: heavy-ball momentum of the mirror-descent steps (0: plain exponentiated gradient)
_MOMENTUM = 0.9
#: the step size grows by this factor after a step accepted at the first try, and is kept after
#: one that needed a retry (a restart or a halving): each retry costs a product with the design
_STEP_GROWTH = 1.2
#: a 1-way marginal of the fit is raked to its own released block when the fit misses that block
#: by more than this many noise variances per cell beyond the block's best distribution (1 left
#: half the bias in place at ε = 3; a quarter left column means 11–40 % worse at ε = 1 once
#: round 1 follows the released pairs: see _rake_one_way)
_RAKE_EXCESS = 0.05
#: sweeps of iterative proportional fitting over the raked 1-way marginals
_RAKE_SWEEPS = 10
#: a cell narrower than this share of its column's median cell width holds a point mass: the
#: within-cell placement gives it no slope and does not read its density as a neighbour's
_THIN_CELL = 0.01
#: round 1 draws the columns along a maximum spanning forest of the released 2-way marginals
#: (Chow–Liu on the noisy tables) instead of independently (see _released_forest)
_FOREST_START = True
#: sweeps of iterative proportional fitting of a pair table to its columns' 1-way marginals at
#: most (a table of at most 64 × 64 cells: cheap; a row the table leaves empty converges slowly)
_CONDITIONAL_SWEEPS = 500


_BLAS: Any = None


def _one_blas_thread() -> Any:
    """Limit BLAS to one thread: the fit is a long chain of small matrix-vector products, which
    threaded BLAS runs up to 30× slower on a loaded machine (measured on 2 shared cores)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController

        _BLAS = ThreadpoolController()  # built once: inspecting the loaded libraries is slow
    return _BLAS.limit(limits=1, user_api="blas")


def _check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} ({value!r}) must be an integer ≥ {low}")
    return int(value)


def _check_fraction(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} ({value!r}) must be a number in [{low}, {high}]")
    v = float(value)
    if not (math.isfinite(v) and low <= v <= high):
        raise ValueError(f"{name} ({value!r}) must be a number in [{low}, {high}]")
    return v


#: the count estimate pools the released sums group by group (``_count``); False: ``1ᵀS/s``
_COUNT_BY_GROUPS = True


def _row_sum_groups(fm: FeatureMap) -> list[tuple[np.ndarray, float]] | None:
    """Groups of coordinates whose sum is one public constant for every row, as
    ``(indices, constant)`` pairs; ``None`` for a map without such a layout.

    A marginal table, a column's histogram and one level of a column's dyadic tree each hold
    exactly one 1 per row (values outside the box are clipped into a cell, NaN has its cell), and
    a composite scales its block by the block's weight.

    >>> from opendp_sketch import Composite, Marginals
    >>> fm = Composite([Marginals(bounds=(0, 1), subsets=[0, 1], bins=2, dim=2),
    ...                 Marginals(bounds=(0, 1), subsets=[(0, 1)], bins=2, dim=2)], weights=[3, 1])
    >>> [(g.tolist(), c) for g, c in _row_sum_groups(fm)]
    [([0, 1], 3.0), ([2, 3], 3.0), ([4, 5, 6, 7], 1.0)]
    """
    if isinstance(fm, Marginals):
        return [(np.arange(b.offset, b.offset + b.size), 1.0) for b in fm.blocks]
    if isinstance(fm, Histogram):
        return [(np.arange(o, o + k), 1.0) for o, k in zip(fm.offsets.tolist(), fm.bins.tolist())]
    if isinstance(fm, DyadicTrees):
        return [
            (np.arange(j * fm.nodes_per_tree + (1 << lv) - 1, j * fm.nodes_per_tree + (2 << lv) - 1), 1.0)
            for j in range(fm.dim)
            for lv in range(fm.levels + 1)
        ]
    if isinstance(fm, Composite):
        out: list[tuple[np.ndarray, float]] = []
        for m, b in zip(fm.maps, fm.blocks):
            inner = _row_sum_groups(m)
            if inner is None:
                return None
            out.extend((idx + b.offset, c * float(b.weight)) for idx, c in inner)
        return out
    return None


class _Design:
    """``P = Φ(X)`` as a sparse CSR matrix (one-hot-like maps) or a dense float32 array.

    One-hot maps give identical rows to every point in the same cells; those rows are stored
    once (``self.rows`` maps each point to its distinct row), which leaves ``Pᵀw`` and ``P r``
    unchanged and makes them cost the distinct rows, not the points.
    """

    def __init__(self, fm: FeatureMap, X: np.ndarray) -> None:
        n, m = X.shape[0], fm.num_features
        self.rows: np.ndarray | None = None
        if is_cell_map(fm):
            idx, vals = _cell_index_int32(fm, X)
            if n:
                idx, self.rows = _distinct_rows(idx)
            u, width = idx.shape
            # CSR built directly: each row holds one cell per block, so the row pointers are a
            # range and the column indices the cell indices themselves (no COO triplets, no copy
            # for the transpose: Pᵀv is P.T @ v on the same arrays). On 80 columns with every
            # pair this took the decode's peak from 4.9 GB to about a quarter of it.
            indices = np.ascontiguousarray(idx, dtype=np.int32 if m < 2**31 else np.int64).ravel()
            indptr = np.arange(0, u * width + 1, width, dtype=np.int64)
            data = np.tile(np.asarray(vals, dtype=np.float64), u)
            self.P: Any = scipy.sparse.csr_matrix((data, indices, indptr), shape=(u, m))
            del idx
        else:
            step = max(1, _CHUNK_ENTRIES // max(1, m))
            parts = [np.asarray(fm.transform(X[s : s + step]), dtype=np.float32) for s in range(0, n, step)]
            dense = np.concatenate(parts) if parts else np.zeros((0, m), dtype=np.float32)
            share = np.count_nonzero(dense) / max(1, dense.size)
            self.P = scipy.sparse.csr_matrix(dense.astype(np.float64)) if share < _SPARSE_SHARE else dense
        #: ``Pᵀ`` as a view of the same arrays (CSC), or ``None`` for a dense ``P``
        self.PT = self.P.T if scipy.sparse.issparse(self.P) else None

    @property
    def multiplicity(self) -> np.ndarray | None:
        """Points per distinct row (``None`` when rows are not deduplicated)."""
        if self.rows is None:
            return None
        return np.bincount(self.rows, minlength=self.P.shape[0]).astype(np.float64)

    def mix_rows(self, v: np.ndarray) -> np.ndarray:
        """``Pᵀv`` for a weight ``v`` per distinct row."""
        return self.PT @ v

    def score_rows(self, r: np.ndarray) -> np.ndarray:
        """``P r`` per distinct row."""
        return self.P @ r

    def mix(self, w: np.ndarray) -> np.ndarray:
        """``Pᵀw``: the mean feature vector of the weighted points."""
        if self.rows is not None:  # the weight of each distinct row, then its features
            w = np.bincount(self.rows, weights=w, minlength=self.P.shape[0])
        if self.PT is not None:
            return self.PT @ w
        return (w.astype(np.float32) @ self.P).astype(np.float64)

    def score(self, r: np.ndarray) -> np.ndarray:
        """``P r``: each point's inner product with a feature-space vector."""
        if self.PT is not None:
            out = self.P @ r
            return out[self.rows] if self.rows is not None else out
        return (self.P @ r.astype(np.float32)).astype(np.float64)


def is_cell_map(fm: FeatureMap) -> bool:
    """One-hot maps (Marginals, Histogram, DyadicTrees, RACE) and weighted composites of them: a
    few non-zero features per point, decoded on sparse matrices."""
    if isinstance(fm, Composite):
        return all(isinstance(m, OneHotFeatureMap) for m in fm.maps)
    return isinstance(fm, OneHotFeatureMap)


def cell_index(fm: FeatureMap, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(indices (n, s) of each point's non-zero features, their s values)`` for a map of
    :func:`is_cell_map`: the values are the same for every point (1, or the block weights of a
    composite), so ``Φ(X)`` is one-hot up to those weights.

    >>> import numpy as np, opendp_sketch as dps
    >>> one = dps.Marginals(bounds=(0, 1), subsets=[0], bins=4, dim=1)
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


def _cell_index_int32(fm: FeatureMap, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cell_index` a bounded number of entries at a time, as one int32 (or, past 2³¹
    features, int64) matrix: wide maps (thousands of blocks) would otherwise hold the whole
    int64 index, and a composite's parts, at once."""
    kind = np.int32 if fm.num_features < 2**31 else np.int64
    n = X.shape[0]
    if n == 0:
        idx, vals = cell_index(fm, X)
        return idx.astype(kind), vals
    first, vals = cell_index(fm, X[:1])
    step = max(1, _CHUNK_ENTRIES // max(1, first.shape[1]))
    out = np.empty((n, first.shape[1]), dtype=kind)
    for s in range(0, n, step):
        out[s : s + step] = cell_index(fm, X[s : s + step])[0]
    return out, vals


def _cell_columns(fm: FeatureMap, X: np.ndarray, positions: Sequence[int]) -> np.ndarray:
    """Columns ``positions`` of :func:`cell_index` (the cells of a few blocks, e.g. the 1-way
    ones), computed a bounded number of entries at a time: ``(n, len(positions))`` int64."""
    n = X.shape[0]
    out = np.empty((n, len(positions)), dtype=np.int64)
    if n == 0:
        return out
    width = cell_index(fm, X[:1])[0].shape[1]
    step = max(1, _CHUNK_ENTRIES // max(1, width))
    for s in range(0, n, step):
        out[s : s + step] = cell_index(fm, X[s : s + step])[0][:, positions]
    return out


def _distinct_rows(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an integer matrix and each row's index among them.

    Rows are grouped by a 64-bit multiplicative key (wrapping arithmetic), then checked against
    their group's first row; any collision falls back to the exact, slower row sort.
    """
    n, width = idx.shape
    mult = np.random.default_rng(0).integers(1, 1 << 62, size=width, dtype=np.int64) | 1
    step = max(1, _CHUNK_ENTRIES // max(1, width))  # rows at a time: no full-size temporaries
    key = np.empty(n, dtype=np.int64)
    for s in range(0, n, step):
        key[s : s + step] = (idx[s : s + step].astype(np.int64) * mult).sum(axis=1)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if first.size == n:  # every key distinct, so every row: no copy of a wide index
        return idx, np.arange(n)
    distinct = idx[first]
    if all(np.array_equal(distinct[inverse[s : s + step]], idx[s : s + step]) for s in range(0, n, step)):
        return distinct, inverse
    distinct, inverse = np.unique(idx, axis=0, return_inverse=True)
    return distinct, inverse.reshape(-1)


def _softmax(theta: np.ndarray) -> np.ndarray:
    e = theta - theta.max()  # a new array, then updated in place: one allocation per call
    np.exp(e, out=e)
    e /= e.sum()
    return e


def _fit_weights(
    design: _Design, target: np.ndarray, wt: np.ndarray, theta: np.ndarray, iterations: int, tol: float
) -> tuple[np.ndarray, float, int]:
    """Minimise ``½ Σ wt_k ((Pᵀw)_k − target_k)²`` over the simplex by exponentiated gradient.

    Returns ``(θ, loss, iterations run)`` with ``w = softmax(θ)``; the step grows after a success
    and halves until the loss decreases, so the loss never increases.

    Points that share a distinct design row get the same gradient at every step, so from a ``θ``
    constant on each row (uniform weights) they keep equal ``θ``: the descent then runs on the
    distinct rows, each weighted by its number of points, and gives the same weights at the cost
    of the rows.
    """
    mult = design.multiplicity
    if mult is not None and not theta.any():
        log_mult = np.log(mult)
        rows = design.rows
        assert rows is not None
        theta_rows, loss, it = _descend(
            lambda t: _softmax(t + log_mult),
            design.mix_rows,
            design.score_rows,
            target,
            wt,
            np.zeros(mult.size),
            iterations,
            tol,
        )
        return theta_rows[rows], loss, it
    return _descend(_softmax, design.mix, design.score, target, wt, theta, iterations, tol)


def _descend(
    weights: Callable[[np.ndarray], np.ndarray],
    mix: Callable[[np.ndarray], np.ndarray],
    score: Callable[[np.ndarray], np.ndarray],
    target: np.ndarray,
    wt: np.ndarray,
    theta: np.ndarray,
    iterations: int,
    tol: float,
) -> tuple[np.ndarray, float, int]:
    """The exponentiated-gradient loop of :func:`_fit_weights` on ``w = weights(θ)``, with
    heavy-ball momentum in ``θ``: each step adds ``_MOMENTUM`` times the previous one; a step
    that does not lower the loss is retried without it (a restart), then with half the step
    size. Measured on three real tables at ε = 1: the same answers in 0.55–0.85 of the steps.

    The step size grows by ``_STEP_GROWTH = 1.2`` only after a step accepted at the first try:
    growing by 1.5 after every step made 1.7 tries per step, this makes 1.4, for the same
    answers on the same 15 sketches (three tables, ε = 1) in 0.74–0.90 of the time."""
    w = weights(theta)
    r = mix(w) - target
    loss = 0.5 * float(wt @ (r * r))
    eta = None
    it = 0
    previous = np.zeros_like(theta)
    while it < iterations:
        it += 1
        g = score(wt * r)
        spread = float(g.max() - g.min())
        if not spread > 0 or not math.isfinite(spread):
            break
        if eta is None:
            eta = 1.0 / spread
        accepted = False
        push = _MOMENTUM
        tries = 0
        g -= g.min()
        while tries < 30:
            tries += 1
            step = -eta * g
            if push:
                step = step + push * previous
            theta_new = theta + step
            w_new = weights(theta_new)
            r_new = mix(w_new) - target
            loss_new = 0.5 * float(wt @ (r_new * r_new))
            if loss_new < loss:
                accepted = True
                break
            if push:  # restart: drop the momentum before shrinking the step
                push = 0.0
                continue
            eta *= 0.5
        if not accepted:
            break
        improvement = loss - loss_new
        previous = theta_new - theta
        theta, r, loss = theta_new, r_new, loss_new
        if tries == 1:
            eta *= _STEP_GROWTH
        if improvement <= tol * loss:
            break
    return theta, loss, it


#: end cells whose density rises toward the box's bound are filled with an exponential profile
#: (:meth:`SyntheticDecoder._place_in_cells`), unless the neighbour is a hole: its density below
#: this share of the next cell's
_PILE_AT_BOUNDS = True
#: a discrete column's points take the values of their cell by the same profile (a pile at a
#: bound: on the bound value), instead of as they fell (:func:`_discrete_in_cells`)
_DISCRETE_PROFILE = True
#: a continuous column's end cell above its neighbours' trend: the trend continued into it and
#: the excess on the bound itself (:func:`_end_pile`), instead of one steeper exponential
_POINT_PILE = True
#: ... when the neighbours' trend rises toward the bound by at most this log-ratio per cell
#: (``λ = ln(d₁/d₂)``): a jump above nearly flat or falling neighbours is a pile; above a steep
#: rise it may be the density steepening further, placed by one exponential as before
_POINT_PILE_RISE = 0.25
_PILE_HOLE = 0.5


def _discrete_in_cells(
    current: np.ndarray,
    values: np.ndarray,
    edges: np.ndarray,
    c: np.ndarray,
    beta: np.ndarray,
    dens: np.ndarray,
    wide: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """A discrete column's values redrawn within their cells from the placement profile.

    ``current``: the points' values, ``values``: the column's public values (sorted), ``c``:
    each point's cell of ``edges`` (a cell without public values keeps its points' values),
    ``beta``: each cell's slope (the linear density ``1 + β(u − ½)``, ``u`` the position in the
    cell), ``dens``: each cell's fitted density and ``wide`` its width test. A point of cell
    ``c`` takes one of the public values in ``c`` with probability ``∝ 1 + β_c(u_v − ½)``. In an
    end cell that rises above its neighbours' trend (:func:`_trend_at_edge`: density ``e`` at the
    inner edge, decay ``λ`` per cell), the trend is continued into the cell (``∝ e^{−λ s}``, ``s``
    the distance from the bound as a share of the cell, which holds ``e (e^λ − 1)/λ`` of its
    density ``d``), and what the cell holds beyond it, the share ``1 − e (e^λ − 1)/(λ d)``, is a
    pile: on a discrete column the bound value itself (clipped values, the zeros of a count).
    Weights are not touched: every cell keeps its mass, and the other columns theirs. Never raises."""
    k = dens.size
    out = current.copy()
    cell_of_value = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, k - 1)
    piles = _end_piles(dens, wide)
    for cell in np.unique(c):
        inside = values[cell_of_value == cell]
        who = np.flatnonzero(c == cell)
        if inside.size == 0:
            continue
        if inside.size == 1:
            out[who] = inside[0]
            continue
        width = edges[cell + 1] - edges[cell]
        u = np.clip((inside - edges[cell]) / width if width > 0 else 0.5, 0.0, 1.0)
        p = 1.0 + beta[cell] * (u - 0.5)
        p = np.where(np.isfinite(p) & (p > 0), p, 0.0)
        p = p / p.sum() if p.sum() > 0 else np.full(inside.size, 1.0 / inside.size)
        if cell in piles:
            lam, share = piles[cell]
            from_bound = u if cell == 0 else 1.0 - u
            p = np.exp(-lam * from_bound)  # the neighbours' decay, continued toward the bound
            p = p / p.sum()
            bound = 0 if cell == 0 else inside.size - 1
            if share > 0 and np.isclose(inside[bound], edges[0] if cell == 0 else edges[-1]):
                p = (1.0 - share) * p
                p[bound] += share
        out[who] = rng.choice(inside, size=who.size, p=p / p.sum())
    return out


def _trend_at_edge(d_end: float, d_inner: float, d_next: float) -> tuple[float, float] | None:
    """``(e, λ)``: the density the neighbours extrapolate at an end cell's inner edge,
    ``e = d_inner·λ/(1 − e^{−λ})`` with ``λ = ln(d_inner/d_next)`` (their decay rate per cell
    toward the bound), when the end cell rises above it (a pile at the bound); ``None`` when it
    does not or the neighbour is a hole (``d_inner < _PILE_HOLE · d_next``)."""
    if not (d_end > d_inner >= _PILE_HOLE * d_next) or not math.isfinite(d_end):
        return None
    # the density at the inner edge, if the decay from d_next to d_inner goes on as exp(−λ·cells)
    lam = math.log(d_inner / d_next) if d_inner > 0 and d_next > 0 else 0.0
    edge = d_inner * (lam / -math.expm1(-lam) if abs(lam) > 1e-12 else 1.0)
    return (edge, lam) if d_end > edge else None


def _end_pile(d_end: float, d_inner: float, d_next: float) -> tuple[float, float] | None:
    """``(λ, share)`` of an end cell above its neighbours' trend (:func:`_trend_at_edge`), else
    ``None``: the trend continued into the cell, density ``∝ e^{−λ s}`` (``s``: the distance from
    the bound, as a share of the cell), holds ``e (e^λ − 1)/λ`` of the cell's density ``d``; the
    rest, the share ``1 − e (e^λ − 1)/(λ d)`` of the cell's mass, is a pile on the bound itself
    (values clipped to it, a count's zeros). An exponential tail has no excess (share 0).

    >>> lam, share = _end_pile(6.0, 1.0, 1.0)  # flat neighbours: 5 of the end cell's 6 are a pile
    >>> round(lam, 6), round(share, 4)
    (0.0, 0.8333)
    >>> round(_end_pile(np.e**2 + 1.0, np.e, 1.0)[1], 4)  # an exponential tail, and a pile of 1
    0.1192
    >>> _end_pile(1.0, 2.0, 2.0) is None  # no rise toward the bound
    True
    """
    trend = _trend_at_edge(d_end, d_inner, d_next)
    if trend is None:
        return None
    edge, lam = trend
    continued = edge * (math.expm1(lam) / lam if abs(lam) > 1e-12 else 1.0)
    return lam, min(max(1.0 - continued / d_end, 0.0), 1.0)


def _end_piles(dens: np.ndarray, wide: np.ndarray) -> dict[int, tuple[float, float]]:
    """``{end cell: (λ, share)}`` (:func:`_end_pile`) of each end cell (``0``, ``k − 1``) above its
    neighbours' trend, where it and the next two cells pass the width test ``wide``; ``{}`` with
    fewer than 3 cells or ``_PILE_AT_BOUNDS`` off."""
    k = dens.size
    piles: dict[int, tuple[float, float]] = {}
    if _PILE_AT_BOUNDS and k >= 3:
        for end, inner, nxt in ((0, 1, 2), (k - 1, k - 2, k - 3)):
            if wide[end] and wide[inner] and wide[nxt]:
                pile = _end_pile(dens[end], dens[inner], dens[nxt])
                if pile is not None:
                    piles[end] = pile
    return piles


def _from_bound(r: np.ndarray, rate: float) -> np.ndarray:
    """Inverse CDF of the density ``∝ e^{−rate·s}`` on ``[0, 1]`` at ``r``: the distance ``s``
    from the bound, as a share of the end cell (uniform at ``rate`` 0)."""
    return r if abs(rate) < 1e-12 else -np.log1p(-r * -np.expm1(-rate)) / rate


def _pile_rate(d_end: float, d_inner: float, d_next: float) -> float:
    """``a`` of a density ``∝ exp(−a·s)`` (``s``: distance from the bound, as a share of the
    end cell) whose mean over the cell is ``d_end`` and whose value at the inner edge is the
    density the neighbours extrapolate there, ``e = d_inner·λ/(1 − e^{−λ})`` with
    ``λ = ln(d_inner/d_next)`` (exact for a density decaying exponentially across the cells):
    ``(eᵃ − 1)/a = d_end/e``. So an exponential tail is placed as one (``a = λ``), and a density
    steepening toward the bound gets a steeper ``a``. 0 when the density does not rise toward the
    bound beyond that trend or the neighbour is a hole (``d_inner < _PILE_HOLE · d_next``); at
    most 50. Used above steeply rising neighbours only: above nearly flat ones, the excess is a
    point mass on the bound (:func:`_end_pile`).

    >>> round(_pile_rate(6.0, 1.0, 1.0), 2), _pile_rate(6.0, 0.0, 1.0), _pile_rate(1.0, 2.0, 2.0)
    (2.91, 0.0, 0.0)
    >>> round(_pile_rate(np.e**2, np.e, 1.0), 6)  # cells e², e, 1: an exponential tail, a = 1
    1.0
    """
    trend = _trend_at_edge(d_end, d_inner, d_next)
    if trend is None:
        return 0.0
    edge = trend[0]
    ratio = d_end / edge if edge > 0 else math.inf
    lo, hi = 0.0, 50.0
    if math.expm1(hi) / hi <= ratio:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if math.expm1(mid) / mid < ratio else (lo, mid)
    return 0.5 * (lo + hi)


def _cell_of(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of the cell ``[edges[c], edges[c + 1])`` holding each value (the last cell closed)."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)


def _simplex_projection(v: np.ndarray) -> np.ndarray:
    """The closest point of the probability simplex to ``v`` (Euclidean): ``max(v − τ, 0)`` with
    the one ``τ`` that makes it sum to 1.

    >>> _simplex_projection(np.array([0.7, 0.5, -0.1])).round(3).tolist()
    [0.6, 0.4, 0.0]
    """
    u = np.sort(v)[::-1]
    excess = np.cumsum(u) - 1.0
    k = np.flatnonzero(u * np.arange(1, u.size + 1) > excess)[-1] + 1  # k = 1 always qualifies
    return np.maximum(v - excess[k - 1] / k, 0.0)


def _marginal_parts(fm: FeatureMap) -> list[tuple[Marginals, int, float]]:
    """``(map of marginals, offset, block weight)`` of a map of marginals or of each part of a
    composite of them; ``[]`` for any other map."""
    if isinstance(fm, Marginals):
        return [(fm, 0, 1.0)]
    if isinstance(fm, Composite) and all(isinstance(m, Marginals) for m in fm.maps):
        return [(m, b.offset, b.weight) for m, b in zip(fm.maps, fm.blocks)]  # type: ignore[misc]
    return []


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


def _one_way_estimates(
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
                    A[_cell_of(e, 0.5 * (fine[:-1] + fine[1:])), np.arange(size)] = 1.0
                    nested.append((k, A, np.nan_to_num(target[o : o + k] / wgt), vb))
        if not (nested and math.isfinite(v) and v > 0):
            out.append((position, column, offset, size, y, _simplex_projection(y), v, False))
            continue
        free = np.ones(size, dtype=bool)
        if discrete is not None and column in discrete:
            free = np.bincount(_cell_of(fine, discrete[column]), minlength=size) > 0
        H = np.eye(size) / v + sum(A.T @ A / vb for _, A, _, vb in nested)
        cov = np.zeros((size, size))
        cov[np.ix_(free, free)] = np.linalg.inv(H[np.ix_(free, free)])
        y = cov @ (y / v + sum(A.T @ yb / vb for _, A, yb, vb in nested))
        _, A, _, _ = min(nested, key=lambda t: t[0])  # the coarsest level
        reach = A @ free > 0  # coarse cells holding a free fine cell
        shares = np.zeros(A.shape[0])
        shares[reach] = _simplex_projection((A @ y)[reach])
        t = np.zeros(size)
        for c in np.flatnonzero(shares > 0):
            inside = (A[c] > 0) & free
            t[inside] = shares[c] * _simplex_projection(y[inside] / shares[c])
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


def _pair_maps(fm: FeatureMap, positions: Sequence[int]) -> dict[int, Marginals]:
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


def _conditional(table: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
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


def _split_cells(
    flat: np.ndarray, parent_first: bool, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """``(parent cell, child cell)`` from a pair table's flat C-order cell index; ``shape``:
    ``(parent cells, child cells)``."""
    k_parent, k_child = shape
    if parent_first:
        return flat // k_child, flat % k_child
    return flat % k_parent, flat // k_parent


def _released_forest(fm: FeatureMap, target: np.ndarray) -> list[tuple[int, int, int, int, bool, np.ndarray]]:
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
        t = _simplex_projection(np.nan_to_num(target[offset : offset + size] / weight)).reshape(shape)
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


def _rake_one_way(
    fm: FeatureMap,
    X: np.ndarray,
    w: np.ndarray,
    target: np.ndarray,
    var: np.ndarray,
    discrete: Mapping[int, np.ndarray] | None = None,
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Weights raked to the released 1-way marginals the joint fit misses; the raked columns.

    With multi-column marginals, most cells of a skewed table's pair tables are empty, and the
    noise there is half positive, half negative. Weights cannot go below 0, so the fit matches
    the positive half and takes that mass from the populated cells: a 1-way marginal read off the
    joint fit is biased, by up to 5 % of the rows (countymurders at ε = 3, 28 pairs of 16 × 16).
    A column's own 1-way block measures its marginal without that bias. So a column whose fitted
    marginal ``m`` misses its block ``y`` (``target / a``, noise variance ``v`` per cell) by
    more than its best distribution ``t`` does (``t``: ``y`` projected on the simplex) by
    ``_RAKE_EXCESS = 1/20`` noise variance per cell, ``‖m − y‖² − ‖t − y‖² > v · cells / 20``, is
    raked: iterative proportional fitting scales the weights of each raked column's cells to
    ``t``, which keeps the joint fit's dependence between columns (its odds ratios) and sets the
    column's marginal to ``t``. Where the fit already agrees with the 1-way cells, nothing
    changes: at ε = 0.1 on CPSSW8 the joint fit's marginals were better than ``t``.

    The threshold, decoded from the same noise draws (8 per cell, ``benchmarks`` tables, CDF
    errors × 10⁻⁴): a whole noise variance per cell left countymurders at ε = 3 at 3.89 and
    movies at 1.79; a quarter gave 3.27 and 1.54 (counts 1–3 % lower too). Since round 1 follows
    the released pairs (:func:`_released_forest`), the joint fit matches the pair tables more
    closely, their noise included: with a quarter, column means at ε = 1 were 11–40 % farther
    than before the forest on CPSSW8 and movies in two runs of 5 releases; a twentieth puts them
    14–29 % closer than a quarter (``benchmarks/results/bench_forest_start.md``). Raking every
    column (0) gave the same answers as a twentieth at ε = 1; at ε = 0.1 (CPSSW8, whose
    categorical pairs stay) two runs of 10 releases disagreed on its sign against a quarter (CDF
    +6 % and −3 %), and a twentieth moved the errors by +0.1 % to −6.3 %.

    A column measured at two resolutions (:func:`_one_way_estimates`) is always raked, to the
    distribution of its two levels.

    Post-processing: it reads the released targets, their recorded noise variances and public
    cells only, and never raises.
    """
    blocks = _one_way_estimates(fm, target, var, discrete=discrete)
    if not blocks or X.shape[0] == 0:
        return w, ()
    idx = _cell_columns(fm, X, [b[0] for b in blocks])
    chosen = []
    for k, (_position, column, offset, size, y, t, v, two_levels) in enumerate(blocks):
        cells = idx[:, k] - offset
        m = np.bincount(cells, weights=w, minlength=size)
        excess = float(np.sum((m - y) ** 2) - np.sum((t - y) ** 2))
        # two levels: t is the best estimate there is of this marginal (the joint fit weighs each
        # level's cells apart), so the column is raked to it
        if two_levels or (math.isfinite(excess) and excess > max(_RAKE_EXCESS * v * size, 1e-12)):
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
    if isinstance(fm, Marginals):  # the common refinement of every resolution a column has
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


def _map_categories(fm: FeatureMap) -> dict[int, np.ndarray]:
    """Columns a map reads as integer codes (categorical marginals): their public code values."""
    if isinstance(fm, Marginals):
        return {j: np.arange(fm.lower[j], fm.upper[j] + 1) for j in fm.categories}
    if isinstance(fm, Composite):
        out: dict[int, np.ndarray] = {}
        for m in fm.maps:
            out.update(_map_categories(m))
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


class SyntheticDecoder:
    r"""Decode a sketch into weighted synthetic points: a distribution fitted to every block.

    :param n_points: number of synthetic points ``N`` (for dense maps capped at
        ``max(2000, 2²² / m)``: each step multiplies by ``Φ(x̃)`` twice)
    :param seed: public seed of every random draw
    :param rounds: resample-and-perturb rounds at most
    :param iterations: mirror-descent steps per round at most, raised for small designs to what
        ``2²⁹`` multiply-adds allow (at most 50 × ``iterations``): a table of few cell combinations
        converges where 200 steps left its zero cells half-filled
    :param tol: stop a round's steps when the misfit improves by less than a hundredth of this
        share, and the rounds when a round improves it by less than this share or 1 %
    :param move: share of resampled points that move one column to a new cell
    :param bandwidth: initial Gaussian jitter of cell-less columns, as a share of the box width
    :param bounds: public box ``(lower, upper)``; defaults to the sketch's
    :param discrete: ``{column index: values}`` for columns that take finitely many values
    :param prior: ``prior(n, rng) -> (n, d)``: public starting points instead of the uniform box
    :param progress: ``progress(rounds_done, rounds)`` after each round (e.g. a progress bar's
        update; the CLI shows one on a terminal); reports ``(rounds, rounds)`` when the fit stops
    :param rake: for marginals with multi-column blocks, rake the fitted weights to a column's
        released 1-way marginal where the joint fit misses it beyond its noise (see
        :func:`_rake_one_way`); ``False`` keeps the joint fit as it is
    :param within_cells: where the final points sit inside their public cells: ``"linear"``
        (default) draws them from a linear density that follows the neighbouring cells (see
        :meth:`_place_in_cells`), ``"uniform"`` uniformly; counts and CDFs at cell edges are the
        same, means, moments and quantiles inside cells differ

    Fitted attributes: ``samples_`` ``(N, d)``, ``weights_`` (non-negative, sum 1), ``n_hat_``
    (count estimate, ``0`` when degenerate), ``residual_`` (``‖Pᵀw − ẑ‖``), ``noise_norm_``
    (``√Σσ_k² / n̂``, the residual that noise alone explains), ``history_`` (misfit per round),
    ``raked_`` (the columns whose 1-way marginal was raked), ``degenerate_`` and ``reason_``.

    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> from opendp_sketch.estimators.synthetic import SyntheticDecoder
    >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=1)
    >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array([10, 20, 30, 40]), count=100,
    ...                 bounds=([0.0], [1.0]))
    >>> dec = SyntheticDecoder(n_points=2_000).fit(sk)
    >>> dec.samples_.shape, bool(np.isclose(dec.weights_.sum(), 1.0)), bool((dec.weights_ >= 0).all())
    ((2000, 1), True, True)
    >>> round(float(dec.weights_ @ (dec.samples_[:, 0] < 0.5)), 2)
    0.3
    """

    degenerate_: bool
    reason_: str | None
    raked_: tuple[int, ...]

    def __init__(
        self,
        n_points: int = DEFAULT_SYNTHETIC_POINTS,
        *,
        seed: int = 0,
        rounds: int = 5,
        iterations: int = 200,
        tol: float = 1e-3,
        move: float = 0.25,
        bandwidth: float = 0.05,
        bounds: Any = None,
        discrete: Mapping[int, Any] | None = None,
        prior: Prior | None = None,
        progress: Callable[[int, int], None] | None = None,
        rake: bool = True,
        within_cells: str = "linear",
    ) -> None:
        self.n_points = n_points
        self.seed = seed
        self.rounds = rounds
        self.iterations = iterations
        self.tol = tol
        self.move = move
        self.bandwidth = bandwidth
        self.bounds = bounds
        self.discrete = discrete
        self.prior = prior
        self.progress = progress
        self.rake = rake
        self.within_cells = within_cells

    # -- checks (public parameters only: they may raise) -----------------------------------------
    def _check(self, sketch: Sketch) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
        if not isinstance(sketch, Sketch):
            raise ValueError(f"sketch must be a Sketch, got {type(sketch).__name__}")
        _check_int(self.n_points, "n_points", 100)
        _check_int(self.seed, "seed", 0)
        _check_int(self.rounds, "rounds", 1)
        _check_int(self.iterations, "iterations", 1)
        _check_fraction(self.tol, "tol", 0.0, 1.0)
        _check_fraction(self.move, "move", 0.0, 1.0)
        _check_fraction(self.bandwidth, "bandwidth", 0.0, 1.0)
        if not isinstance(self.rake, bool):
            raise ValueError(f"rake ({self.rake!r}) must be True or False")
        if self.within_cells not in ("linear", "uniform"):
            raise ValueError(f"within_cells ({self.within_cells!r}) must be 'linear' or 'uniform'")
        if self.progress is not None and not callable(self.progress):
            raise ValueError(
                f"progress ({self.progress!r}) must be a callable progress(rounds_done, rounds) or None"
            )
        d = sketch.feature_map.input_dim
        box = self.bounds if self.bounds is not None else sketch.bounds
        if box is None:
            raise ValueError("bounds are required: the sketch does not record the public box")
        lo, hi = (np.asarray(b, dtype=np.float64).reshape(-1) for b in box)
        if (
            lo.size != d
            or hi.size != d
            or not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all())
        ):
            raise ValueError(f"bounds ({box!r}) must be {d} finite lower < upper pairs")
        discrete = {
            j: v
            for j, v in _map_categories(sketch.feature_map).items()
            if lo[j] <= v.min() and v.max() <= hi[j]
        }
        if isinstance(sketch.feature_map, ByClass):
            discrete[sketch.feature_map.dim] = np.arange(sketch.feature_map.num_classes, dtype=np.float64)
        for j, values in (self.discrete or {}).items():
            if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < d:
                raise ValueError(f"discrete column ({j!r}) must be an index in [0, {d})")
            v = np.unique(np.asarray(values, dtype=np.float64))
            if v.size == 0 or not np.isfinite(v).all() or v.min() < lo[j] or v.max() > hi[j]:
                raise ValueError(f"discrete values of column {j} must be finite and inside its bounds")
            discrete[int(j)] = v
        return lo, hi, discrete

    # -- fitting --------------------------------------------------------------------------------
    def fit(self, sketch: Sketch) -> SyntheticDecoder:
        """Fit weights and points to ``sketch``.

        :raises ValueError: only for bad parameters or a prior returning bad points — never
            because of the sketch's released values
        """
        lo, hi, discrete = self._check(sketch)
        fm = sketch.feature_map
        self.lower_, self.upper_, self.discrete_ = lo, hi, discrete
        n = self.n_points
        if not is_cell_map(fm):
            n = min(n, max(_MIN_DENSE_POINTS, _MAX_DENSE_ENTRIES // max(1, fm.num_features)))
        self.edges_ = cell_edges(fm, lo, hi)
        key = self._cache_key(sketch, n) if self.prior is None else None
        #: whether the fit was read from the decoder cache (:mod:`._cache`) instead of computed
        self.from_cache_ = key is not None and self._restore(key)
        if self.from_cache_:
            return self
        rng = np.random.default_rng(self.seed)
        X = self._start(n, rng)
        with np.errstate(all="ignore"), _one_blas_thread():
            self._fit(sketch, X, rng)
        if key is not None:
            self._keep(key)
        return self

    # -- the decoder cache: one sketch is decoded once (post-processing; never raises) ----------
    def _cache_key(self, sketch: Sketch, n: int) -> str | None:
        try:
            params = {
                "n": n,
                "seed": self.seed,
                "rounds": self.rounds,
                "iterations": self.iterations,
                "tol": self.tol,
                "move": self.move,
                "bandwidth": self.bandwidth,
                "lower": self.lower_,
                "upper": self.upper_,
                "discrete": {str(j): v for j, v in sorted(self.discrete_.items())},
                "rake": self.rake,
                "within_cells": self.within_cells,
                # the module's tuning constants too: a changed rule is another fit
                "constants": {
                    k: v
                    for k, v in sorted(globals().items())
                    if k.lstrip("_").isupper() and isinstance(v, (bool, int, float, str))
                },
            }
            return decoder_key(sketch, params)
        except Exception:  # noqa: BLE001 - no key, no cache
            return None

    def _restore(self, key: str) -> bool:
        found = lookup(key)
        if found is None:
            return False
        arrays, meta = found
        try:
            self.samples_, self.weights_ = arrays["samples"], arrays["weights"]
            self.n_hat_, self.residual_ = float(meta["n_hat"]), float(meta["residual"])
            self.noise_norm_, self.n_iter_ = float(meta["noise_norm"]), int(meta["n_iter"])
            self.degenerate_, self.reason_ = bool(meta["degenerate"]), meta["reason"]
            self.raked_ = tuple(meta["raked"])
        except Exception:  # noqa: BLE001 - an entry of another layout: refit
            return False
        return True

    def _keep(self, key: str) -> None:
        try:
            meta = {
                "n_hat": float(self.n_hat_),
                "residual": float(self.residual_),
                "noise_norm": float(self.noise_norm_),
                "n_iter": int(self.n_iter_),
                "degenerate": bool(self.degenerate_),
                "reason": self.reason_,
                "raked": [int(j) for j in self.raked_],
            }
        except Exception:  # noqa: BLE001 - nothing kept
            return
        store(key, {"samples": self.samples_, "weights": self.weights_}, meta)

    def _start(self, n: int, rng: np.random.Generator) -> np.ndarray:
        lo, hi = self.lower_, self.upper_
        if self.prior is None:
            X = rng.uniform(lo, hi, size=(n, lo.size))
        else:
            X = np.array(self.prior(n, rng), dtype=np.float64)
            if X.shape != (n, lo.size):
                raise ValueError(
                    f"prior(n, rng) must return an array of shape ({n}, {lo.size}), got {X.shape}"
                )
            if not np.isfinite(X).all() or (X < lo).any() or (X > hi).any():
                raise ValueError("prior samples must be finite and inside the bounds")
        for j, values in self.discrete_.items():
            X[:, j] = rng.choice(values, size=n)
        return X

    def _fit(self, sketch: Sketch, X: np.ndarray, rng: np.random.Generator) -> None:
        fm = sketch.feature_map
        S = sketch.sum
        var = np.broadcast_to(np.asarray(sketch.sum_variance, dtype=np.float64), S.shape)
        var = np.where(np.isfinite(var) & (var >= 0), var, np.inf)
        # the count needs every point's feature total: one point's for one-hot maps, whose points
        # all share it; their round-0 design is built only if round 0 is fitted (no released start)
        design = None if is_cell_map(fm) else _Design(fm, X)
        n_hat = self._count(sketch, _Design(fm, X[:1]) if design is None else design, S, var)
        self.history_: list[float] = []
        self.n_iter_ = 0
        uniform = np.full(X.shape[0], 1.0 / X.shape[0])
        if not (math.isfinite(n_hat) and n_hat > 0):
            self._finish(X, uniform, 0.0, float("nan"), float("nan"))
            if self.progress is not None:
                self.progress(self.rounds, self.rounds)
            self.degenerate_ = True
            self.raked_ = ()
            self.reason_ = f"the sketch's count estimate ({n_hat:g}) is not positive: no distribution to fit"
            return
        target = S / n_hat
        # weight of a feature in the misfit: n̂²/σ_k² (the scale only sets the step; noise-free → 1)
        wt = np.where(var > 0, n_hat**2 / np.where(var > 0, var, 1.0), 0.0)
        if not (var > 0).any():
            wt = np.ones_like(S)
        best: tuple[float, np.ndarray, np.ndarray, _Design | None] | None = None
        w = uniform
        # with a released 1-way marginal for every column, round 1 draws from those directly:
        # the fit of round 0 (on points spread over the box) only served to estimate them
        start = self._released_one_way(fm, X, target, var, rng) if self.rounds > 1 else None
        round_tol = self.tol if _ROUND_TOL is None else max(self.tol, _ROUND_TOL)
        self._forest = _released_forest(fm, target) if start is not None and _FOREST_START else []
        self._forest_map = fm
        for r in range(0 if start is None else 1, self.rounds):
            if r > 0:
                X = self._propose(X, start if r == 1 and start is not None else w, r, rng)
            if r > 0 or design is None:
                # one design in memory at a time: the last round's (and the best round's, rebuilt
                # below if it is needed again) goes before the next is built
                design = None
                if best is not None:
                    best = (best[0], best[1], best[2], None)
                design = _Design(fm, X)
            theta, loss, its = _fit_weights(
                design, target, wt, np.zeros(X.shape[0]), self._steps(design), self.tol * 1e-2
            )
            self.n_iter_ += its
            w = _softmax(theta)
            self.history_.append(loss)
            improved = best is None or loss < best[0] * (1 - round_tol)
            if best is None or loss < best[0]:
                best = (loss, X, w, design)
            stop = not improved and r > 1
            if self.progress is not None:  # the last call always reports every round done
                self.progress(self.rounds if stop else r + 1, self.rounds)
            if stop:
                break
        assert best is not None
        _, X, w, kept = best
        design = kept if kept is not None else _Design(fm, X)
        self.raked_ = ()
        if self.rake:
            w, self.raked_ = _rake_one_way(fm, X, w, target, var / n_hat**2, self.discrete_)
        residual = float(np.linalg.norm(design.mix(w) - target)) if X.shape[0] else float("nan")
        noise = float(np.sqrt(np.sum(np.where(np.isfinite(var), var, 0.0)))) / n_hat
        if self.within_cells == "linear":
            X = self._place_in_cells(X, w, rng)
        self._finish(X, w, n_hat, residual, noise)
        self.degenerate_ = False
        self.reason_ = None

    def _released_one_way(
        self, fm: FeatureMap, X: np.ndarray, target: np.ndarray, var: np.ndarray, rng: np.random.Generator
    ) -> list[np.ndarray] | None:
        """Per column, weights on the starting points whose marginal is that column's released
        1-way block projected on the simplex; ``None`` (round 0 is fitted) when the map is not
        one of marginals with a 1-way block for every column, or a prior gives the start.

        Each point of a cell gets ``t_c / (points in c)``; two points are first put in every
        public cell (:meth:`_keep_every_cell`), so every cell the block gives mass is reachable.
        The projection reads released sums only (post-processing) and never raises.
        """
        if self.prior is not None or X.shape[0] == 0:
            return None
        blocks = {
            column: (position, offset, size, t)
            for position, column, offset, size, _, t, _, _ in _one_way_estimates(
                fm, target, var, joint=False, discrete=self.discrete_
            )
        }
        if len(blocks) != X.shape[1]:
            return None
        self._keep_every_cell(X, rng)
        full = _cell_columns(fm, X, [blocks[j][0] for j in range(X.shape[1])])
        out = []
        for j in range(X.shape[1]):
            position, offset, size, t = blocks[j]
            cells = full[:, j] - offset
            count = np.bincount(cells, minlength=size).astype(np.float64)
            v = np.divide(t, count, out=np.zeros(size), where=count > 0)[cells]
            total = v.sum()
            if not (total > 0 and math.isfinite(total)):
                return None
            out.append(v / total)
        return out

    def _steps(self, design: _Design) -> int:
        """Mirror-descent steps of a round: ``iterations``, or more when a step is cheap (each
        costs about three products with the design's ``nnz`` entries), within ``_ROUND_WORK``
        multiply-adds and ``_MAX_STEP_FACTOR × iterations``."""
        nnz = design.P.nnz if scipy.sparse.issparse(design.P) else design.P.size
        extra = _ROUND_WORK // max(1, 3 * nnz)
        return int(max(self.iterations, min(extra, _MAX_STEP_FACTOR * self.iterations)))

    def _finish(self, X: np.ndarray, w: np.ndarray, n_hat: float, residual: float, noise: float) -> None:
        w = np.clip(np.where(np.isfinite(w), w, 0.0), 0.0, None)
        total = w.sum()
        self.samples_ = X
        self.weights_ = w / total if total > 0 else np.full(X.shape[0], 1.0 / X.shape[0])
        self.n_hat_ = n_hat
        self.residual_ = residual
        self.noise_norm_ = noise

    def _count(self, sketch: Sketch, design: _Design, S: np.ndarray, var: np.ndarray) -> float:
        """The released count, combined by inverse variance with what the released sums say of it.

        Maps with public groups of coordinates whose sum is the same constant ``c_g`` for every
        row (:func:`_row_sum_groups`: a marginal table, a column's histogram, a tree level, each at
        its weight in a composite) give one estimate per group, ``Σ_{k∈g} S_k / c_g``, of variance
        ``Σ_{k∈g} σ_k² / c_g²``. The noise is independent across coordinates, so the estimates
        are independent and their inverse-variance mean has the smallest variance of any
        unbiased linear combination of them. A small table weighted 3 counts more than a pair's
        256 noisy cells: pooling every coordinate into ``1ᵀS/s`` instead gave the noisy cells the
        larger say. Other maps: ``1ᵀS/s`` when every point has the same feature total ``s``.
        """
        count, vc = float(sketch.count), sketch.count_variance
        groups = _row_sum_groups(sketch.feature_map) if _COUNT_BY_GROUPS else None
        if groups is not None and np.isfinite(var).all() and not vc == 0.0:
            # an exact count is the answer; a count without finite noise variance takes no part
            num, den = (count / vc, 1.0 / vc) if vc > 0 and math.isfinite(vc) else (0.0, 0.0)
            for idx, c in groups:
                v = float(var[idx].sum()) / c**2
                if not v > 0:  # a noise-free group is the count itself
                    return float(S[idx].sum()) / c
                num += float(S[idx].sum()) / c / v
                den += 1.0 / v
            return num / den if den > 0 else count
        totals = np.asarray(design.score(np.ones(S.size)))
        s = float(totals[0]) if totals.size else 0.0
        if not (s > 0 and np.allclose(totals, s, rtol=1e-6, atol=0.0)) or not np.isfinite(var).all():
            return count
        n_sum, v_sum = float(S.sum()) / s, float(var.sum()) / s**2
        if not (vc > 0 and math.isfinite(vc)):
            return count
        if v_sum <= 0:
            return n_sum
        return (count / vc + n_sum / v_sum) / (1.0 / vc + 1.0 / v_sum)

    # -- moving the points ---------------------------------------------------------------------
    def _marginal_draw(
        self, X: np.ndarray, w: np.ndarray | list[np.ndarray], j: int, size: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Values of column ``j`` drawn from its weighted marginal (``w[j]`` for weights per
        column), then spread within cells."""
        vals = X[rng.choice(X.shape[0], size=size, p=w[j] if isinstance(w, list) else w), j]
        return self._spread(vals, j, rng, 0)

    def _spread(self, vals: np.ndarray, j: int, rng: np.random.Generator, r: int) -> np.ndarray:
        """Redraw values uniformly inside their public cell, or jitter a cell-less column."""
        lo, hi = self.lower_[j], self.upper_[j]
        if j in self.discrete_:
            return vals
        e = self.edges_[j]
        if e is not None:
            c = _cell_of(e, vals)
            return rng.uniform(e[c], e[c + 1])
        h = self.bandwidth * (hi - lo) * 0.7**r
        v = vals + rng.normal(0.0, h, size=vals.size)
        v = np.where(v < lo, 2 * lo - v, v)  # reflect into the box, then clip what is still outside
        v = np.where(v > hi, 2 * hi - v, v)
        return np.clip(v, lo, hi)

    def _place_in_cells(self, X: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Points redrawn inside their cells from a linear density that follows the neighbours.

        Every cell keeps its points and their weights, so every released cell is fitted as
        before; only where a point sits inside its cell changes. In cell ``c`` of a column with
        public cells the density is ``f(x) = d_c + s_c (x − centre_c)``: ``d_c`` is the fitted
        mass of the cell over its width, and the slope ``s_c`` is the central difference of the
        neighbours' densities (one-sided at the box's bounds), limited so that ``f ≥ 0`` on the
        cell. The linear term integrates to 0 over the cell, so its mass is kept. Uniform
        placement puts a cell's mean at its centre; on a skewed column (most rows near a bound,
        a long tail) the true within-cell mean sits towards the denser neighbour.

        **Piles at the bounds.** Values clipped to a bound, or the zeros of a count, pile up in
        the end cell, which then holds far more mass than its neighbour (movies' votes clipped
        at 5 000: 2.9 % of the rows in the last of 16 cells, 0.16 % in the one before). A line
        cannot put that mass at the bound. So where an end cell's density ``d`` exceeds what the
        trend of the next two cells (``d₁``, ``d₂``) gives at the shared edge, and the neighbour
        is no hole (``d₁ ≥ ½ d₂``; a column of gridded values leaves cells empty), the end cell is
        a pile or a steepening density, which its mass alone cannot tell apart:

        - above nearly flat or falling neighbours (``λ = ln(d₁/d₂) ≤ _POINT_PILE_RISE = 0.25``),
          a jump is a pile: the trend is continued into the cell (``∝ e^{−λ s}``, ``s``: distance
          from the bound as a share of the cell) and the excess is a point mass on the bound
          itself (:func:`_end_pile`), where clipped values are;
        - above neighbours that already rise steeply, the density ``∝ exp(−a·s)`` with ``a`` set
          so the density at the inner edge is the trend's (:func:`_pile_rate`): an exponential
          tail is placed as one, and a density steepening toward the bound (movies' ``votes``
          from 5 in a cell from 0) is not moved onto it.

        On a test column with 30 % of its rows clipped onto the bound, the end cell's mean reads
        0.9863 against the true 0.9856 (30.6 % on the bound); one exponential read 0.962, none on
        the bound. Through the command line (movies' ``votes``, log scale, 2.8 % of the rows
        clipped at 5 000) the pile was decoded with 0.1 % of the rows within 10 votes of 5 000;
        now with 2.7–3.0 %.

        **Discrete columns** (integer columns, whose points sit on public values) draw their
        points' values within each cell from the same profile over the cell's public values,
        a pile at a bound going to the bound value (:func:`_discrete_in_cells`). Their values
        were otherwise spread evenly over a cell's values: countymurders' arrests, clipped at 100
        (0.95 % of the rows at the bound), were decoded with 0.06 % of the rows at 100 and the
        mean 3 % low.
        """
        X = X.copy()
        for j, e in enumerate(self.edges_):
            if e is None or e.size < 3:
                continue
            k = e.size - 1
            c = _cell_of(e, X[:, j])
            width = np.diff(e)
            dens = np.bincount(c, weights=w, minlength=k) / width
            centre = 0.5 * (e[:-1] + e[1:])
            # a thin cell (e.g. one cut at a bound for the rows clipped onto it) holds a point
            # mass, not a density: it neither gets a slope nor lends one to its neighbours
            wide = width >= _THIN_CELL * np.median(width)
            slope = np.zeros(k)
            if np.count_nonzero(wide) >= 2:  # central inside, one-sided at the ends
                slope[wide] = np.gradient(dens[wide], centre[wide])
            # β = s·width/d ∈ [−2, 2]: the density at the cell's edges is d(1 ± β/2) ≥ 0
            beta = np.divide(slope * width, dens, out=np.zeros(k), where=dens > 0)
            beta = np.clip(np.where(np.isfinite(beta), beta, 0.0), -2.0, 2.0)
            if j in self.discrete_:
                if _DISCRETE_PROFILE:
                    X[:, j] = _discrete_in_cells(X[:, j], self.discrete_[j], e, c, beta, dens, wide, rng)
                continue
            b = beta[c]
            v = rng.uniform(size=c.size)
            # inverse of F(u) = u + β(u² − u)/2 on [0, 1]
            half = 1.0 - 0.5 * b
            flat = np.abs(b) < 1e-9
            root = np.sqrt(np.maximum(half * half + 2.0 * b * v, 0.0))
            u = np.where(flat, v, (root - half) / np.where(flat, 1.0, b))
            for end, (lam, share) in _end_piles(dens, wide).items():
                at = c == end
                if _POINT_PILE and lam <= _POINT_PILE_RISE:
                    # the share on the bound itself, the rest by the trend continued, ∝ e^{−λ s}
                    r = np.clip((v[at] - share) / max(1.0 - share, 1e-300), 0.0, 1.0)
                    s_ = np.where(v[at] < share, 0.0, _from_bound(r, lam))
                else:  # one exponential holding the cell's mass: density ∝ exp(−rate·s)
                    inner, nxt = (1, 2) if end == 0 else (k - 2, k - 3)
                    s_ = _from_bound(v[at], _pile_rate(dens[end], dens[inner], dens[nxt]))
                u[at] = s_ if end == 0 else 1.0 - s_
            X[:, j] = e[c] + np.clip(u, 0.0, 1.0) * width[c]
        return X

    def _draw_along_forest(
        self, new: np.ndarray, X: np.ndarray, start: list[np.ndarray], rng: np.random.Generator
    ) -> None:
        """Redraw each child column of :func:`_released_forest` given its parent's cell, in place.

        Each new point's child cell ``b`` is drawn from ``P(b | a)`` (``a``: its parent's cell in
        the pair table, raked to both columns' released 1-way marginals, :func:`_conditional`,
        so the child keeps its own block's less noisy marginal); its value is then drawn from the
        child's released 1-way marginal within ``b`` (the starting points of that cell, weighted
        by ``start[child]``) and spread in its public cell. Parents are drawn before children
        (breadth-first), so a chain of pairs carries its dependence along, as a tree-shaped model
        does. A cell with no starting point keeps the independent draw (two points sit in every
        public cell, so this is the rare case of a table coarser than nothing)."""
        n = int(new.shape[0])
        # each edge's pair table as a map of its own: its cells of the parent's current values
        # (a parent is redrawn as a child first), without the map's other blocks
        pair_maps = _pair_maps(self._forest_map, [edge[2] for edge in self._forest])
        for parent, child, position, _, first, table in self._forest:
            k_parent, k_child = table.shape
            pair = pair_maps[position]
            a, _ = _split_cells(cell_index(pair, new)[0][:, 0], first, table.shape)
            a_x, b_x = _split_cells(cell_index(pair, X)[0][:, 0], first, table.shape)
            cond = _conditional(
                table,
                np.bincount(a_x, weights=start[parent], minlength=k_parent),
                np.bincount(b_x, weights=start[child], minlength=k_child),
            )
            cum = np.cumsum(cond, axis=1)
            b = np.minimum((cum[a] < rng.uniform(size=n)[:, None]).sum(axis=1), k_child - 1)
            order = np.argsort(b_x, kind="stable")
            edges = np.searchsorted(b_x[order], np.arange(k_child + 1))
            p = start[child]
            vals = new[:, child].copy()
            for cell in np.unique(b):
                want = np.flatnonzero(b == cell)
                pool = order[edges[cell] : edges[cell + 1]]
                if pool.size == 0:
                    continue
                pw = p[pool]
                total = float(pw.sum())
                pick = rng.choice(pool, size=want.size, p=pw / total if total > 0 else None)
                vals[want] = X[pick, child]
            new[:, child] = self._spread(vals, child, rng, 0)

    def _keep_every_cell(self, X: np.ndarray, rng: np.random.Generator) -> None:
        """Put ``_CELL_POINTS`` points in every public cell of every column with cells.

        Resampling ∝ ``w`` leaves no point in a cell whose weight went to 0 in a round, and no
        later weight can bring it back: the fit then misses every released count there (on a
        skewed table, cells worth 30 rows decoded to 0). A few points per cell, each in its own
        rows (after the discrete columns' rows), keep every cell reachable; they start each round
        at the common weight and the fit decides.
        """
        n = X.shape[0]
        start = max((v.size for v in self.discrete_.values()), default=0)
        for j, e in enumerate(self.edges_):
            if e is None or j in self.discrete_ or e.size < 2:
                continue
            cells = np.repeat(np.arange(e.size - 1), _CELL_POINTS)
            stop = min(n, start + cells.size)
            if stop <= start:
                return
            cells = cells[: stop - start]
            X[start:stop, j] = rng.uniform(e[cells], e[cells + 1])
            start = stop

    def _propose(
        self, X: np.ndarray, w: np.ndarray | list[np.ndarray], r: int, rng: np.random.Generator
    ) -> np.ndarray:
        n, d = X.shape
        if r == 1:  # start from the fitted (or released) 1-way marginals: columns drawn independently
            new = np.column_stack([self._marginal_draw(X, w, j, n, rng) for j in range(d)])
            if isinstance(w, list) and getattr(self, "_forest", None):
                self._draw_along_forest(new, X, w, rng)  # then children again, given their parent
        else:  # systematic resampling ∝ w: each point is copied about n·w_i times
            idx = np.minimum(np.searchsorted(np.cumsum(w), (rng.uniform() + np.arange(n)) / n), n - 1)
            new = X[idx]
            for j in range(d):
                new[:, j] = self._spread(new[:, j], j, rng, r)
            movers = np.flatnonzero(rng.uniform(size=n) < self.move)
            if movers.size and d > 1:
                cols = rng.integers(0, d, size=movers.size)
                for j in range(d):
                    sel = movers[cols == j]
                    if sel.size:
                        new[sel, j] = self._marginal_draw(X, w, j, sel.size, rng)
        # last, so no mover takes them: every public value stays present (maybe at weight 0; a
        # value whose released cell was projected to 0 has no other point) and every cell kept
        for j, values in self.discrete_.items():
            new[: values.size, j] = values[: min(values.size, n)]
        self._keep_every_cell(new, rng)
        return new
