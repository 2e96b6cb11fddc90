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
raked to its columns' 1-way blocks, :func:`released_forest`): a child column's cell is drawn
given its parent's, so the first points already hold the pairs' dependences, chains of pairs
included, as a tree-shaped model (MST's) would. With only (0, 1) and (1, 2) released, the
decoded (0, 2) table then follows the data; from independent draws the weights could not get
there (measured: ``docs/design/synthetic_decoder.md``). Each later round resamples ``N`` points ``∝ w``
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
cells (:func:`~opendp_sketch.estimators.released_marginals.rake_one_way`).

**Inside the cells.** The final points of a column with public cells are redrawn inside their
cell from a linear density that follows the neighbouring cells' fitted densities (mass kept,
slope limited so it stays ≥ 0; ``within_cells="uniform"`` draws them uniformly): means, moments
and quantiles of skewed columns then lean the way the data does (:mod:`.within_cells`).

**Count.** When every point has the same feature total ``1ᵀΦ(x) = s`` (one-hot maps: histograms,
marginals, trees, RACE), ``1ᵀS / s`` is a second estimate of ``n`` with variance ``Σσ_k²/s²``; it is
combined with the released count by inverse-variance weighting.

**Privacy.** Everything here reads the released sketch and public parameters only; the random
numbers come from ``numpy.random.default_rng(seed)`` with a public seed. It is post-processing,
and it never raises on any sketch: a sketch whose count estimate is not positive gives a
*degenerate* fit (flagged by ``degenerate_`` and ``reason_``) with uniform weights on the
starting points and ``n_hat_ = 0``.

**Where the parts live.** This module holds :class:`SyntheticDecoder` (its rounds of points and
its count) and the switches that benchmarks turn; it is built from :mod:`.cells` (a map's public
cells), :mod:`.point_weights` (the design and the fit of the weights), :mod:`.released_marginals`
(the starting points and the raking read off released marginals) and :mod:`.within_cells` (the
final placement inside the cells).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import scipy.sparse

from ..features.base import FeatureMap
from ..features.byclass import ByClass
from ..features.composite import Composite
from ..features.histogram import DyadicTrees, Histogram
from ..features.marginals import MarginalTables
from ..sketch import Sketch
from . import cells as _cells
from . import point_weights as _point_weights
from . import released_marginals as _released_marginals
from . import within_cells as _within_cells
from ._cache import decoder_key, lookup, store
from .cells import (
    FoldedBlocks,
    block_bins,
    cell_columns,
    cell_edges,
    cell_index,  # noqa: F401 - imported from here by intervals.py
    cell_of,
    fold_blocks,
    is_cell_map,
    map_categories,
)
from .point_weights import Design, distinct_rows, fit_weights, one_blas_thread, softmax
from .released_marginals import (
    conditional,
    one_way_estimates,
    rake_one_way,
    released_forest,
    simplex_projection,
)
from .within_cells import discrete_in_cells, end_pile, pile_rate, place_in_cells, trend_at_edge

__all__ = ["DEFAULT_SYNTHETIC_POINTS", "SyntheticDecoder"]

#: the modules the decoder is built from: their tuning constants key the decoder cache too
_HELPERS = (_cells, _point_weights, _released_marginals, _within_cells)

# the helpers' names in this module before they moved out, for older imports
_Design, _distinct_rows, _fit_weights = Design, distinct_rows, fit_weights
_conditional, _one_way_estimates, _released_forest = conditional, one_way_estimates, released_forest
_simplex_projection = simplex_projection
_discrete_in_cells, _end_pile, _pile_rate, _trend_at_edge = (
    discrete_in_cells,
    end_pile,
    pile_rate,
    trend_at_edge,
)

#: default number of synthetic points (chosen by measurement: ``docs/design/synthetic_decoder.md``)
DEFAULT_SYNTHETIC_POINTS = 30_000

#: A user prior: ``prior(n, rng) -> (n, d)`` array of public points inside the box.
Prior = Callable[[int, np.random.Generator], np.ndarray]

#: entries of a dense design ``Φ(x̃)`` (float32) at most: caps ``N`` for dense maps (16 MiB), as
#: every mirror-descent step multiplies by it twice; at least _MIN_DENSE_POINTS points are kept
_MAX_DENSE_ENTRIES = 1 << 22
_MIN_DENSE_POINTS = 2000
#: points kept in every public cell of a column when points are resampled
_CELL_POINTS = 2
#: multiply-adds a round of mirror descent may spend beyond ``iterations`` steps: a small design
#: (few distinct cell combinations) gets more steps, up to ``_MAX_STEP_FACTOR × iterations``
_ROUND_WORK = 1 << 29
_MAX_STEP_FACTOR = 50
#: the rounds stop once a round lowers the best misfit by less than this share (or ``tol``,
#: whichever is larger; ``None``: ``tol`` alone; measured: ``docs/design/synthetic_decoder.md``)
_ROUND_TOL: float | None = 0.01
#: a 1-way marginal of the fit is raked to its own released block when the fit misses that block
#: by more than this many noise variances per cell beyond the block's best distribution (1 left
#: half the bias in place at ε = 3; a quarter left column means 11–40 % worse at ε = 1 once
#: round 1 follows the released pairs: see released_marginals.rake_one_way)
_RAKE_EXCESS = 0.05
#: round 1 draws the columns along a maximum spanning forest of the released 2-way marginals
#: (Chow–Liu on the noisy tables) instead of independently (see released_forest)
_FOREST_START = True
#: keys and array at least this long: a search sorts its keys first (see _search)
_SORTED_SEARCH = 2048
#: a map of marginals' design holds one non-zero per point and folded block (a column's 1-way
#: table folded into a pair table: cells.fold_blocks) instead of one per block; the same products
#: up to rounding (measured: docs/design/synthetic_decoder.md)
_FOLD_BLOCKS = True


class FoldedDesign(Design):
    """``P = Φ(X)`` of a map of marginals as ``φ(X) · fold``: ``φ`` one-hot in each folded block
    (:class:`~opendp_sketch.estimators.cells.FoldedBlocks`), each distinct row stored once, and
    ``fold`` sending folded cells to the map's cells. ``Pᵀw = foldᵀ(φᵀw)`` and ``P r =
    φ(fold r)`` cost the folded blocks' non-zeros, not the blocks'."""

    def __init__(self, folded: FoldedBlocks, X: np.ndarray) -> None:
        idx = folded.index(X)
        self.rows = None
        if X.shape[0]:
            idx, self.rows = distinct_rows(idx)
        u, width = idx.shape
        indptr = np.arange(0, u * width + 1, width, dtype=np.int64)
        self.P = scipy.sparse.csr_matrix(
            (np.ones(u * width), np.ascontiguousarray(idx).ravel(), indptr), shape=(u, folded.num_features)
        )
        self.PT = self.P.T
        self.fold, self.fold_t = folded.fold, folded.fold.T
        #: entries of the unfolded design (distinct rows × blocks): the steps of a round read these
        self.nnz = u * folded.blocks

    def mix_rows(self, v: np.ndarray) -> np.ndarray:
        return self.fold_t @ (self.PT @ v)

    def score_rows(self, r: np.ndarray) -> np.ndarray:
        return self.P @ (self.fold @ r)

    def mix(self, w: np.ndarray) -> np.ndarray:
        if self.rows is not None:
            w = np.bincount(self.rows, weights=w, minlength=self.P.shape[0])
        return self.mix_rows(w)

    def score(self, r: np.ndarray) -> np.ndarray:
        out = self.score_rows(r)
        return out[self.rows] if self.rows is not None else out


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

    >>> from opendp_sketch import Composite, MarginalTables
    >>> fm = Composite([MarginalTables(bounds=(0, 1), subsets=[0, 1], bins=2, dim=2),
    ...                 MarginalTables(bounds=(0, 1), subsets=[(0, 1)], bins=2, dim=2)], weights=[3, 1])
    >>> [(g.tolist(), c) for g, c in _row_sum_groups(fm)]
    [([0, 1], 3.0), ([2, 3], 3.0), ([4, 5, 6, 7], 1.0)]
    """
    if isinstance(fm, MarginalTables):
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


#: end cells whose density rises toward the box's bound are filled with an exponential profile
#: (:meth:`SyntheticDecoder._place_in_cells`), unless the neighbour is a hole
_PILE_AT_BOUNDS = True
#: a discrete column's points take the values of their cell by the same profile (a pile at a
#: bound: on the bound value), instead of as they fell (:func:`discrete_in_cells`)
_DISCRETE_PROFILE = True
#: a continuous column's end cell above its neighbours' trend: the trend continued into it and
#: the excess on the bound itself (:func:`end_pile`), instead of one steeper exponential
_POINT_PILE = True


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
        :func:`~opendp_sketch.estimators.released_marginals.rake_one_way`); ``False`` keeps the joint fit as it is
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
            for j, v in map_categories(sketch.feature_map).items()
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
        with np.errstate(all="ignore"), one_blas_thread():
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
                # (this module's switches and its helpers' constants)
                "constants": dict(
                    sorted(
                        (k, v)
                        for scope in (globals(), *(vars(m) for m in _HELPERS))
                        for k, v in scope.items()
                        if k.lstrip("_").isupper() and isinstance(v, (bool, int, float, str))
                    )
                ),
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
        design = None if is_cell_map(fm) else Design(fm, X)
        n_hat = self._count(sketch, Design(fm, X[:1]) if design is None else design, S, var)
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
        best: tuple[float, np.ndarray, np.ndarray, Design | None] | None = None
        w = uniform
        folded = fold_blocks(fm) if _FOLD_BLOCKS else None

        def build(X: np.ndarray) -> Design:
            return Design(fm, X) if folded is None else FoldedDesign(folded, X)

        # with a released 1-way marginal for every column, round 1 draws from those directly:
        # the fit of round 0 (on points spread over the box) only served to estimate them
        start = self._released_one_way(fm, X, target, var, rng) if self.rounds > 1 else None
        round_tol = self.tol if _ROUND_TOL is None else max(self.tol, _ROUND_TOL)
        self._forest = released_forest(fm, target) if start is not None and _FOREST_START else []
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
                design = build(X)
            theta, loss, its = fit_weights(
                design, target, wt, np.zeros(X.shape[0]), self._steps(design), self.tol * 1e-2
            )
            self.n_iter_ += its
            w = softmax(theta)
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
        design = kept if kept is not None else build(X)
        self.raked_ = ()
        if self.rake:
            w, self.raked_ = rake_one_way(
                fm, X, w, target, var / n_hat**2, self.discrete_, excess=_RAKE_EXCESS
            )
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
            for position, column, offset, size, _, t, _, _ in one_way_estimates(
                fm, target, var, joint=False, discrete=self.discrete_
            )
        }
        if len(blocks) != X.shape[1]:
            return None
        self._keep_every_cell(X, rng)
        full = cell_columns(fm, X, [blocks[j][0] for j in range(X.shape[1])])
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

    def _steps(self, design: Design) -> int:
        """Mirror-descent steps of a round: ``iterations``, or more when a step is cheap (each
        costs about three products with the design's ``nnz`` entries), within ``_ROUND_WORK``
        multiply-adds and ``_MAX_STEP_FACTOR × iterations``."""
        if isinstance(design, FoldedDesign):
            nnz = design.nnz
        else:
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

    def _count(self, sketch: Sketch, design: Design, S: np.ndarray, var: np.ndarray) -> float:
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
        self, X: np.ndarray, cdf: np.ndarray, j: int, size: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Values of column ``j`` drawn from its weighted marginal, given as the running sums
        ``cdf`` of the points' weights (:func:`_running`), then spread within cells. The draw is
        ``rng.choice(n, size, p=w)``'s own (uniforms searched in the normalised running sums),
        without summing the weights again for every column."""
        idx = np.minimum(_search(cdf, rng.random(size)), X.shape[0] - 1)
        return self._spread(X[idx, j], j, rng, 0)

    def _independent(
        self, X: np.ndarray, j: int, draw: tuple[np.ndarray, np.ndarray, np.ndarray | None], at: np.ndarray
    ) -> np.ndarray:
        """The values :meth:`_marginal_draw` gives column ``j`` at the points ``at`` from its
        running sums and uniforms ``draw = (cdf, uniforms of the pick, uniforms in the cell)``
        (``None``: a discrete column, not spread): every step is elementwise, so a subset of
        the points gets the same values as the whole draw."""
        cdf, pick, inside = draw
        vals = X[np.minimum(cdf.searchsorted(pick[at], side="right"), X.shape[0] - 1), j]
        if inside is None:
            return vals
        e = self.edges_[j]
        assert e is not None  # lazy draws are made for discrete columns and columns with cells
        c = cell_of(e, vals)
        low = e[c]
        return low + (e[c + 1] - low) * inside[at]

    def _spread(self, vals: np.ndarray, j: int, rng: np.random.Generator, r: int) -> np.ndarray:
        """Redraw values uniformly inside their public cell, or jitter a cell-less column."""
        lo, hi = self.lower_[j], self.upper_[j]
        if j in self.discrete_:
            return vals
        e = self.edges_[j]
        if e is not None:  # Generator.uniform(e[c], e[c + 1])'s own draw, low + width · U[0, 1)
            c = cell_of(e, vals)
            low = e[c]
            return low + (e[c + 1] - low) * rng.random(vals.size)
        h = self.bandwidth * (hi - lo) * 0.7**r
        v = vals + rng.normal(0.0, h, size=vals.size)
        v = np.where(v < lo, 2 * lo - v, v)  # reflect into the box, then clip what is still outside
        v = np.where(v > hi, 2 * hi - v, v)
        return np.clip(v, lo, hi)

    def _place_in_cells(self, X: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Points redrawn inside their cells from a linear density that follows the neighbours,
        with piles at the bounds (:func:`~opendp_sketch.estimators.within_cells.place_in_cells`,
        under this module's switches)."""
        return place_in_cells(
            X,
            w,
            self.edges_,
            self.discrete_,
            rng,
            piles_at_bounds=_PILE_AT_BOUNDS,
            point_pile=_POINT_PILE,
            discrete_profile=_DISCRETE_PROFILE,
        )

    def _draw_along_forest(
        self,
        new: np.ndarray,
        X: np.ndarray,
        start: list[np.ndarray],
        rng: np.random.Generator,
        lazy: Mapping[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] | None = None,
    ) -> None:
        """Redraw each child column of :func:`released_forest` given its parent's cell, in place.

        Each new point's child cell ``b`` is drawn from ``P(b | a)`` (``a``: its parent's cell in
        the pair table, raked to both columns' released 1-way marginals, :func:`conditional`,
        so the child keeps its own block's less noisy marginal); its value is then drawn from the
        child's released 1-way marginal within ``b`` (the starting points of that cell, weighted
        by ``start[child]``) and spread in its public cell. Parents are drawn before children
        (breadth-first), so a chain of pairs carries its dependence along, as a tree-shaped model
        does. A cell with no starting point keeps the independent draw (two points sit in every
        public cell, so this is the rare case of a table coarser than nothing). ``lazy`` holds,
        per child whose independent draw was not made, that draw's running sums and uniforms
        (:meth:`_independent`): it is made for those points only."""
        n = int(new.shape[0])
        fm = self._forest_map
        bins_x: dict[tuple[Any, ...], np.ndarray] = {}  # each column binning of X, computed once
        for parent, child, position, _, first, table in self._forest:
            k_parent, k_child = table.shape
            # the pair table's bins of the parent's current values (a parent is redrawn as a
            # child before it is a parent: breadth-first) and of the starting points
            a = block_bins(fm, new, position)[0 if first else 1]
            a_x, b_x = block_bins(fm, X, position, bins_x)[:: 1 if first else -1]
            cond = conditional(
                table,
                np.bincount(a_x, weights=start[parent], minlength=k_parent),
                np.bincount(b_x, weights=start[child], minlength=k_child),
            )
            b = _draw_rows(cond, a, rng)
            # the child's value: a starting point of cell b drawn ∝ its weight (uniformly when
            # the cell's weights are all 0), all points at once on the cells' running sums
            # a stable sort of small integers: radix sort (the same order as sorting int64)
            order = np.argsort(b_x.astype(np.int16 if k_child < 2**15 else np.int64), kind="stable")
            edges = np.searchsorted(b_x[order], np.arange(k_child + 1))
            size = np.diff(edges)
            running = np.concatenate([[0.0], np.cumsum(start[child][order])])
            total = running[edges[1:]] - running[edges[:-1]]
            u = rng.uniform(size=n)
            weighted = _search(running, running[edges[b]] + u * total[b]) - 1
            even = edges[b] + np.floor(u * size[b]).astype(np.int64)
            at = np.clip(
                np.where(total[b] > 0, weighted, even), edges[b], np.maximum(edges[b + 1] - 1, edges[b])
            )
            vals = X[order[np.minimum(at, order.size - 1)], child]
            empty = size[b] == 0
            if empty.any():
                vals[empty] = (
                    new[empty, child]
                    if lazy is None or child not in lazy
                    else self._independent(X, child, lazy[child], empty)
                )
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
            cdfs = [_running(v) for v in w] if isinstance(w, list) else [_running(w)] * d
            forest = isinstance(w, list) and bool(getattr(self, "_forest", None))
            children = {edge[1] for edge in self._forest} if forest else set()
            # a child's independent draw is kept only where the forest finds no starting point:
            # its uniforms are drawn here (the same random stream), its values where needed
            lazy: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}
            new = np.empty((n, d))
            for j in range(d):
                if j in children and (j in self.discrete_ or self.edges_[j] is not None):
                    pick = np.asarray(rng.random(n))
                    lazy[j] = (cdfs[j], pick, None if j in self.discrete_ else np.asarray(rng.random(n)))
                else:
                    new[:, j] = self._marginal_draw(X, cdfs[j], j, n, rng)
            if forest and isinstance(w, list):
                self._draw_along_forest(new, X, w, rng, lazy)  # then children, given their parent
        else:  # systematic resampling ∝ w: each point is copied about n·w_i times
            idx = np.minimum(np.searchsorted(np.cumsum(w), (rng.uniform() + np.arange(n)) / n), n - 1)
            new = X[idx]
            for j in range(d):
                new[:, j] = self._spread(new[:, j], j, rng, r)
            movers = np.flatnonzero(rng.uniform(size=n) < self.move)
            if movers.size and d > 1:
                cols = rng.integers(0, d, size=movers.size)
                cdf = _running(np.asarray(w))  # one set of running sums for every column's draw
                for j in range(d):
                    sel = movers[cols == j]
                    if sel.size:
                        new[sel, j] = self._marginal_draw(X, cdf, j, sel.size, rng)
        # last, so no mover takes them: every public value stays present (maybe at weight 0; a
        # value whose released cell was projected to 0 has no other point) and every cell kept
        for j, values in self.discrete_.items():
            new[: values.size, j] = values[: min(values.size, n)]
        self._keep_every_cell(new, rng)
        return new


def _draw_rows(cond: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column cell per entry of ``rows``, drawn from ``cond[row]`` (rows of probabilities):
    one search of the uniforms, each offset by its row index, in the rows' running sums laid end
    to end (row ``a`` spans ``[a, a + 1]``), instead of a comparison with every cell.

    >>> cond = np.array([[0.0, 1.0], [1.0, 0.0]])
    >>> _draw_rows(cond, np.array([0, 1, 0]), np.random.default_rng(0)).tolist()
    [1, 0, 1]
    """
    k_rows, k = cond.shape
    cum = np.cumsum(cond, axis=1)
    cum /= np.where(cum[:, -1:] > 0, cum[:, -1:], 1.0)
    flat = (cum + np.arange(k_rows)[:, None]).ravel()
    u = rng.uniform(size=rows.size)
    return np.clip(np.searchsorted(flat, rows + u, side="right") - rows * k, 0, k - 1)


def _search(a: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``a.searchsorted(keys, side="right")``, the keys searched in increasing order when there
    are many in a long array: each key's answer is the same, and a search that starts where the
    last one ended stays in cache (30 000 uniforms in 30 000 running sums: about 5× faster).

    >>> a = np.linspace(0, 1, 5000)
    >>> keys = np.random.default_rng(0).uniform(size=3000)
    >>> bool((_search(a, keys) == a.searchsorted(keys, side="right")).all())
    True
    """
    if keys.size < _SORTED_SEARCH or a.size < _SORTED_SEARCH:
        return a.searchsorted(keys, side="right")
    order = np.argsort(keys)
    out = np.empty(keys.size, dtype=np.intp)
    out[order] = a.searchsorted(keys[order], side="right")
    return out


def _running(w: np.ndarray) -> np.ndarray:
    """The normalised running sums of weights ``w``, as ``Generator.choice(p=w)`` forms them."""
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return cdf
