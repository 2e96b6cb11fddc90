r"""Sums of distances from a released sketch: ℓ1 from dyadic trees, squared ℓ2 from moments.

Both answer ``D(q) = Σ_i dist(x_i, q)`` for any number of public queries ``q`` by post-processing
one release. Guide and measurements: ``docs/estimators/distance.md``.

**ℓ1** (:class:`L1DistanceSum`, a :class:`~opendp_sketch.DyadicTrees` sketch).
``Σ_i ‖x_i − q‖₁ = Σ_j Σ_i |x_ij − q_j|``, so each coordinate is answered from its own tree of
noisy dyadic counts (``N = 2^L`` leaves of width ``δ_j``, every node's noise of variance
``σ² = sketch.sum_variance``). Three estimators, all linear in the noisy counts:

* ``"consistent"`` (default): the least-squares leaf counts of the whole tree (Hay et al.'s
  two-pass "boosting", the best linear unbiased estimate of every leaf from all ``2N − 1``
  nodes), then ``Σ_l ĉ_l · g_l(q)`` with ``g_l(q) = |centre_l − q|``; the leaf that contains
  ``q`` is taken as uniformly filled, ``g = ((q − a)² + (b − q)²) / 2δ`` for the leaf ``[a, b]``.
  Noise variance ``σ² · wᵀ(AᵀA)⁻¹w`` (``A`` the node-by-leaf incidence, ``w = g(q)``).
* ``"geometric"``: the structure of the paper. Right of the leaf containing ``q``, intervals of
  ``w_k = max(1, ⌊α·a_k⌋)`` leaves start ``a_k`` leaves away (``a_{k+1} = a_k + w_k``: widths grow
  by ``1 + α``), likewise on the left; each interval is counted from its canonical nodes (at
  most two per level) and placed at its midpoint. Noise variance ``σ² Σ_I c_I r_I²`` (``c_I``
  nodes at distance ``r_I``).
* ``"leaves"``: the raw noisy leaves with the same ``g``; noise variance ``σ² Σ_l g_l(q)²``.

Approximation (noise-free). A row in a leaf that does not contain ``q`` is off by at most
``δ/2`` (``"consistent"``, ``"leaves"``) or ``δ/2 + α·|x − q|/2`` (``"geometric"``), a row in
``q``'s leaf by at most ``δ``. Rows on leaf centres and ``q`` on a leaf edge (or outside the
box) make ``"consistent"`` and ``"leaves"`` exact.

**Squared ℓ2** (:class:`SquaredL2DistanceSum`, a :class:`~opendp_sketch.Moments` sketch of
``[y, ‖y‖²]``, ``y = clip_r(x − c)``):
``Σ_i ‖x_i − q‖² = Σ‖y_i‖² − 2⟨Σ y_i, q − c⟩ + n‖q − c‖²``, exact for rows inside the ball
``‖x − c‖ ≤ r`` (rows outside count as their projection onto the ball). Noise variance
``σ²(1 + 4‖q − c‖²) + σ_n²‖q − c‖⁴`` with ``σ_n²`` the count's noise variance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..features.histogram import DyadicTrees
from ..features.moments import Moments
from ..sketch import Sketch
from .contract import SketchEstimator, fitted

__all__ = ["L1DistanceSum", "SquaredL2DistanceSum"]

L1_METHODS = ("consistent", "geometric", "leaves")
#: cap on the entries of the per-query work arrays (queries × leaves or × intervals)
_WORK_ENTRIES = 1 << 21


def _check_sketch(sketch: Any, kind: type, who: str) -> Sketch:
    if not isinstance(sketch, Sketch):
        raise ValueError(f"{who} needs a Sketch, got {type(sketch).__name__}")
    if not isinstance(sketch.feature_map, kind):
        raise ValueError(f"{who} needs a {kind.__name__} sketch, got {type(sketch.feature_map).__name__}")
    return sketch


def _check_queries(queries: Any, d: int) -> np.ndarray:
    """``(q, d)`` float array of finite queries (``(q,)`` accepted when ``d = 1``)."""
    try:
        Q = np.asarray(queries, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("queries must be an array of numbers") from None
    if Q.ndim == 1 and d == 1:
        Q = Q[:, None]
    if Q.ndim != 2 or Q.shape[1] != d:
        hint = " (one query: reshape it to (1, d))" if Q.ndim == 1 else ""
        raise ValueError(f"queries must have shape (q, {d}), got {Q.shape}{hint}")
    if not np.isfinite(Q).all():
        raise ValueError("queries must be finite (no NaN or infinity)")
    return Q


def _positive_count(sketch: Sketch) -> float:
    if sketch.count <= 0:
        raise ValueError(
            f"the sketch's noisy count ({sketch.count}) is not positive: too little data for its "
            "privacy budget to estimate a mean distance"
        )
    return float(sketch.count)


def _chunks(q: int, width: int):
    """Slices of the queries so that ``rows × width`` stays near :data:`_WORK_ENTRIES`."""
    step = max(1, _WORK_ENTRIES // max(1, width))
    for s in range(0, q, step):
        yield slice(s, min(s + step, q))


def consistent_leaves(nodes: np.ndarray, levels: int) -> np.ndarray:
    r"""Least-squares leaf counts of complete binary trees of equally noisy node counts.

    Hay, Rastogi, Miklau & Suciu (2010): a bottom-up pass
    ``z_v = ((2^h − 2^{h−1}) ỹ_v + (2^{h−1} − 1) Σ_children z) / (2^h − 1)`` (``h`` the height,
    leaves ``h = 1``), then a top-down pass ``ȳ_v = z_v + (ȳ_parent − Σ_siblings z) / 2``. The
    result is the ordinary least-squares fit of leaf counts to all nodes: linear, unbiased, and of
    least variance for every linear function of the leaves (Gauss–Markov, equal node variances).

    :param nodes: ``(..., 2^(L+1) − 1)`` node counts in heap order (level ``ℓ`` from ``2^ℓ − 1``)
    :param levels: ``L``
    :return: ``(..., 2^L)`` leaf estimates whose sums match every consistent parent
    :example:

    >>> import numpy as np
    >>> from opendp_sketch.estimators.distance import consistent_leaves
    >>> consistent_leaves(np.array([10.0, 3.0, 7.0]), 1).tolist()   # root 10, leaves 3 and 7
    [3.0, 7.0]
    >>> consistent_leaves(np.array([12.0, 3.0, 7.0]), 1).tolist()   # the 2 extra split evenly
    [3.666..., 7.666...]
    """
    h = np.asarray(nodes, dtype=np.float64)
    level = [h[..., (1 << lv) - 1 : (1 << (lv + 1)) - 1] for lv in range(levels + 1)]
    z = [level[levels]] * (levels + 1)
    for lv in range(levels - 1, -1, -1):
        height = levels - lv + 1
        a, b = 2.0**height - 2.0 ** (height - 1), 2.0 ** (height - 1) - 1.0
        children = z[lv + 1][..., 0::2] + z[lv + 1][..., 1::2]
        z[lv] = (a * level[lv] + b * children) / (a + b)
    fit = z[0]
    for lv in range(1, levels + 1):
        pair_sum = z[lv][..., 0::2] + z[lv][..., 1::2]
        fit = z[lv] + np.repeat((fit - pair_sum) / 2.0, 2, axis=-1)
    return fit


def _range_sums(
    tree: np.ndarray, levels: int, start: np.ndarray, stop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum of the leaves ``[start, stop)`` of one heap-ordered tree, read from the canonical
    nodes (at most two per level), and the number of nodes used."""
    s, e = start.copy(), stop.copy()
    total = np.zeros(s.shape)
    used = np.zeros(s.shape, dtype=np.int64)
    for lv in range(levels, -1, -1):
        last = (1 << lv) - 1  # the level's last position, and its offset in heap order
        take = (s < e) & (s & 1 == 1)
        total += np.where(take, tree[last + np.minimum(s, last)], 0.0)
        used += take
        s = s + take
        take = (s < e) & (e & 1 == 1)
        total += np.where(take, tree[last + np.clip(e - 1, 0, last)], 0.0)
        used += take
        e = e - take
        s, e = s >> 1, e >> 1
    return total, used


def interval_offsets(alpha: float, leaves: int) -> np.ndarray:
    """Leaf offsets ``a_0 = 0 < a_1 < … ≥ leaves`` of the geometric intervals on one side of ``q``:
    interval ``k`` is ``[a_k, a_{k+1})`` leaves away from ``q``'s leaf, ``a_{k+1} − a_k =
    max(1, ⌊α a_k⌋)``, so its midpoint is within ``δ/2 + α·|x − q|/2`` of every row in it."""
    a = [0]
    while a[-1] < leaves:
        a.append(a[-1] + min(leaves, max(1, int(np.floor(alpha * a[-1])))))
    return np.array(a, dtype=np.int64)


class L1DistanceSum(SketchEstimator):
    r"""``Σ_i ‖x_i − q‖₁`` for any queries, from one :class:`~opendp_sketch.DyadicTrees` sketch.

    :param sketch: a released sketch whose map is ``DyadicTrees``
    :param method: ``"consistent"`` (least-squares tree, then exact piecewise-uniform distances;
        the most accurate in our measurements), ``"geometric"`` (the paper's ``(1 + α)``
        intervals over canonical nodes) or ``"leaves"`` (raw leaf counts at their centres)
    :param alpha: growth ``α > 0`` of the geometric intervals (``method="geometric"`` only)
    :raises ValueError: for a sketch of another map, an unknown method or a bad ``alpha``

    ``leaf_counts_`` holds the ``(d, 2^L)`` leaf counts the ``"consistent"`` and ``"leaves"``
    methods use. Rows outside the map's box were counted in its end leaves (distances to the
    clipped rows). Queries may lie anywhere, inside the box or not.

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.estimators.distance import L1DistanceSum
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=2, dim=1)
    >>> X = np.array([[0.125], [0.125], [0.875]])          # leaf centres
    >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X)), count=3)
    >>> est = L1DistanceSum(sk)
    >>> est([0.0, 0.5, 2.0]).tolist()                       # Σ|x − q| for three queries
    [1.125, 1.125, 4.875]
    >>> est.mean([0.5]).tolist()
    [0.375]
    >>> released = dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=1.0)
    >>> value, std = L1DistanceSum(released)([0.5], return_std=True)
    >>> value.shape, bool(std[0] > 0)
    ((1,), True)
    """

    #: the fitted attributes under scikit-learn's trailing-underscore names
    sketch_ = fitted("sketch")
    levels_ = fitted("levels")
    n_leaves_ = fitted("n_leaves")
    lower_ = fitted("lower")
    upper_ = fitted("upper")
    width_ = fitted("width")
    noise_var_ = fitted("noise_var")

    def __init__(
        self, sketch: Sketch | None = None, *, method: str = "consistent", alpha: float = 0.1
    ) -> None:
        self._start(sketch, method=method, alpha=alpha)

    def _fit(self, sketch: Sketch, *, method: str = "consistent", alpha: float = 0.1) -> None:
        self.sketch = _check_sketch(sketch, DyadicTrees, "L1DistanceSum")
        if method not in L1_METHODS:
            raise ValueError(f"method ({method!r}) must be one of {L1_METHODS}")
        try:
            a = float(alpha)
        except (TypeError, ValueError):
            raise ValueError(f"alpha ({alpha!r}) must be a positive finite number") from None
        if not (np.isfinite(a) and a > 0):
            raise ValueError(f"alpha ({alpha!r}) must be a positive finite number")
        self.method = method
        self.alpha = a
        fm: DyadicTrees = sketch.feature_map  # type: ignore[assignment]
        self.levels = fm.levels
        self.n_leaves = 1 << fm.levels
        self.lower, self.upper = fm.lower.copy(), fm.upper.copy()
        self.width = (self.upper - self.lower) / self.n_leaves
        self.trees_ = sketch.sum.reshape(fm.dim, fm.nodes_per_tree)
        self.noise_var = sketch.sum_variance
        leaf_start = self.n_leaves - 1
        if method == "consistent":
            self.leaf_counts_ = consistent_leaves(self.trees_, self.levels)
        else:
            self.leaf_counts_ = self.trees_[:, leaf_start:].copy()
        # prefix sums of counts and of count × leaf centre: O(1) per query and coordinate
        centres = self.lower[:, None] + (np.arange(self.n_leaves) + 0.5) * self.width[:, None]
        zero = np.zeros((fm.dim, 1))
        self._count_prefix = np.hstack([zero, np.cumsum(self.leaf_counts_, axis=1)])
        self._moment_prefix = np.hstack([zero, np.cumsum(self.leaf_counts_ * centres, axis=1)])
        self._offsets = interval_offsets(self.alpha, self.n_leaves) if method == "geometric" else None

    # -- per-coordinate geometry -------------------------------------------------------------------
    def _leaf_of(self, q: np.ndarray, j: int) -> np.ndarray:
        """Leaf of each query: ``-1`` left of the box, ``N`` right of it (the top edge is in leaf ``N − 1``)."""
        lo, hi = self.lower[j], self.upper[j]
        k = np.clip(np.floor((q - lo) / self.width[j]), 0, self.n_leaves - 1).astype(np.int64)
        return np.where(q < lo, -1, np.where(q > hi, self.n_leaves, k))

    def _own_leaf_weight(self, q: np.ndarray, k: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Mean distance to ``q`` of a uniformly filled leaf ``k`` that contains it (0 if none)."""
        inside = (k >= 0) & (k < self.n_leaves)
        a = self.lower[j] + np.clip(k, 0, self.n_leaves - 1) * self.width[j]
        b = a + self.width[j]
        g = np.where(inside, ((q - a) ** 2 + (b - q) ** 2) / (2 * self.width[j]), 0.0)
        return g, inside

    def _leaf_weights(self, q: np.ndarray, j: int) -> np.ndarray:
        """``g_l(q)`` for every leaf: the linear functional the leaf methods apply (``(q, N)``)."""
        centres = self.lower[j] + (np.arange(self.n_leaves) + 0.5) * self.width[j]
        W = np.abs(centres[None, :] - q[:, None])
        k = self._leaf_of(q, j)
        g, inside = self._own_leaf_weight(q, k, j)
        rows = np.nonzero(inside)[0]
        W[rows, k[rows]] = g[rows]
        return W

    def _leaf_method(self, q: np.ndarray, j: int) -> np.ndarray:
        N = self.n_leaves
        C, M = self._count_prefix[j], self._moment_prefix[j]
        k = self._leaf_of(q, j)
        left, right = np.clip(k, 0, N), np.clip(k + 1, 0, N)
        total = q * C[left] - M[left] + (M[N] - M[right]) - q * (C[N] - C[right])
        g, inside = self._own_leaf_weight(q, k, j)
        own = np.where(inside, self.leaf_counts_[j, np.clip(k, 0, N - 1)], 0.0)
        return total + own * g

    def _leaf_method_var(self, q: np.ndarray, j: int) -> np.ndarray:
        out = np.empty(q.shape)
        for s in _chunks(q.size, 2 * self.n_leaves):
            W = self._leaf_weights(q[s], j)
            if self.method == "leaves":
                out[s] = (W * W).sum(axis=1)
            else:  # wᵀ(AᵀA)⁻¹w: the least-squares map applied to w placed on the leaves
                Z = np.zeros((W.shape[0], 2 * self.n_leaves - 1))
                Z[:, self.n_leaves - 1 :] = W
                out[s] = (W * consistent_leaves(Z, self.levels)).sum(axis=1)
        return out

    def _geometric(self, q: np.ndarray, j: int, want_var: bool) -> tuple[np.ndarray, np.ndarray]:
        N, tree, off = self.n_leaves, self.trees_[j], self._offsets
        assert off is not None  # set whenever method == "geometric", the only caller
        lo, w = self.lower[j], self.width[j]
        value, var = np.empty(q.shape), np.zeros(q.shape)
        for s in _chunks(q.size, 2 * off.size):
            qs = q[s]
            k = self._leaf_of(qs, j)[:, None]
            g, inside = self._own_leaf_weight(qs, k[:, 0], j)
            own = np.where(inside, tree[N - 1 + np.clip(k[:, 0], 0, N - 1)], 0.0)
            val, v = own * g, inside * g * g
            for start, stop, sign in (
                (k + 1 + off[None, :-1], k + 1 + off[None, 1:], 1.0),  # right of q's leaf
                (k - off[None, 1:], k - off[None, :-1], -1.0),  # left of it
            ):
                a, b = np.clip(start, 0, N), np.clip(stop, 0, N)
                count, used = _range_sums(tree, self.levels, a, b)
                r = sign * (lo + (a + b) * (w / 2) - qs[:, None])
                r = np.where(a < b, r, 0.0)
                val = val + (count * r).sum(axis=1)
                if want_var:
                    v = v + (used * r * r).sum(axis=1)
            value[s], var[s] = val, v
        return value, var

    # -- queries --------------------------------------------------------------------------------
    def __call__(self, queries: Any, *, return_std: bool = False) -> Any:
        r"""Estimated ``Σ_i ‖x_i − q‖₁`` for each query.

        :param queries: ``(q, d)`` array (``(q,)`` when ``d = 1``); any finite values
        :param return_std: also return the standard deviation of the DP-noise term (it excludes
            the discretisation error, at most ``δ`` per row, see the module docstring)
        :return: array of ``q`` estimates; with ``return_std`` a pair ``(estimates, std)``
        :raises ValueError: for queries of the wrong shape or that are not finite
        """
        Q = _check_queries(queries, self.lower.size)
        value, var = np.zeros(Q.shape[0]), np.zeros(Q.shape[0])
        for j in range(Q.shape[1]):
            q = Q[:, j]
            if self.method == "geometric":
                vj, wj = self._geometric(q, j, return_std)
                value += vj
                var += wj
            else:
                value += self._leaf_method(q, j)
                if return_std:
                    var += self._leaf_method_var(q, j)
        if not return_std:
            return value
        return value, np.sqrt(var * self.noise_var)

    def mean(self, queries: Any, *, return_std: bool = False) -> Any:
        """Estimated mean distance ``(1/n) Σ_i ‖x_i − q‖₁``: the sum divided by the noisy count
        (the std divides likewise; the count's own noise, relative size ``σ_n/n``, is not in it).

        :raises ValueError: as :meth:`__call__`, or if the sketch's noisy count is ``≤ 0``
        """
        n = _positive_count(self.sketch)
        out = self(queries, return_std=return_std)
        return (out[0] / n, out[1] / n) if return_std else out / n


class SquaredL2DistanceSum(SketchEstimator):
    r"""``Σ_i ‖x_i − q‖²`` for any queries, from one :class:`~opendp_sketch.Moments` sketch.

    With ``S₁ = Σ y_i``, ``S₂ = Σ ‖y_i‖²`` (noisy, ``y = clip_r(x − c)``) and the noisy count
    ``n̂``: ``Σ‖x_i − q‖² ≈ S₂ − 2⟨S₁, q − c⟩ + n̂‖q − c‖²``. Exact (up to the map's 2^-k
    fixed-point units) for rows within the map's radius of its centre; a row outside counts as
    its projection onto that ball, so choose ``radius`` to cover the data's public box.

    :param sketch: a released sketch whose map is ``Moments``
    :raises ValueError: for a sketch of another map

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.estimators.distance import SquaredL2DistanceSum
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Moments(dim=2, radius=2.0)
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0]])
    >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X)), count=2)
    >>> SquaredL2DistanceSum(sk)([[1.0, 0.0], [3.0, 1.0]]).tolist()   # 1 + 1, 10 + 4
    [2.0, 14.0]
    >>> SquaredL2DistanceSum(sk).mean([[1.0, 0.0]]).tolist()
    [1.0]
    """

    #: the fitted attributes under scikit-learn's trailing-underscore names
    sketch_ = fitted("sketch")
    center_ = fitted("center")
    noise_var_ = fitted("noise_var")
    count_var_ = fitted("count_var")

    def __init__(self, sketch: Sketch | None = None) -> None:
        self._start(sketch)

    def _fit(self, sketch: Sketch) -> None:
        self.sketch = _check_sketch(sketch, Moments, "SquaredL2DistanceSum")
        fm: Moments = sketch.feature_map  # type: ignore[assignment]
        if not fm.squared_norm:
            raise ValueError(
                "SquaredL2DistanceSum needs the ‖y‖² feature: a Moments(..., squared_norm=True) sketch"
            )
        self.center = fm.center.copy()
        s = sketch.sum
        self.first_, self.second_ = s[:-1], float(s[-1])
        self.noise_var = sketch.sum_variance
        self.count_var = sketch.count_variance

    def _estimate(self, queries: Any, n: float, return_std: bool) -> Any:
        D = _check_queries(queries, self.center.size) - self.center
        sq = np.einsum("ij,ij->i", D, D)
        value = self.second_ - 2.0 * (D @ self.first_) + n * sq
        if not return_std:
            return value
        return value, np.sqrt(self.noise_var * (1.0 + 4.0 * sq) + self.count_var * sq * sq)

    def __call__(self, queries: Any, *, return_std: bool = False) -> Any:
        """Estimated ``Σ_i ‖x_i − q‖²`` for each query (uses the noisy count as it is).

        :param queries: ``(q, d)`` array (``(q,)`` when ``d = 1``)
        :param return_std: also return the std of the DP-noise term
            ``√(σ²(1 + 4‖q − c‖²) + σ_n²‖q − c‖⁴)``
        :raises ValueError: for queries of the wrong shape or that are not finite
        """
        return self._estimate(queries, float(self.sketch.count), return_std)

    def mean(self, queries: Any, *, return_std: bool = False) -> Any:
        """Estimated ``(1/n) Σ_i ‖x_i − q‖² = S₂/n̂ − 2⟨S₁/n̂, q − c⟩ + ‖q − c‖²``
        (the std, ``σ√(1 + 4‖q − c‖²)/n̂``, leaves out the count's noise).

        :raises ValueError: as :meth:`__call__`, or if the sketch's noisy count is ``≤ 0``
        """
        n = _positive_count(self.sketch)
        D = _check_queries(queries, self.center.size) - self.center
        sq = np.einsum("ij,ij->i", D, D)
        value = (self.second_ - 2.0 * (D @ self.first_)) / n + sq
        if not return_std:
            return value
        return value, np.sqrt(self.noise_var * (1.0 + 4.0 * sq)) / n
