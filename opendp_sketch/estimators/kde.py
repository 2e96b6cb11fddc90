r"""Private kernel density estimates from RFF and RACE sketches.

Both sketches answer ``K̂(q) ≈ (1/n) Σ_i k(x_i, q)``, the average kernel similarity of a query to
the data, for the kernel the map defines (:meth:`KDE.kernel`):

* **RFF** (``ω ~ N(0, σ⁻²I)`` Gaussian, or Cauchy for the Laplacian kernel):
  ``K̂(q) = (1/m')⟨Φ(q), ẑ⟩``, ``m'`` frequencies. The DP noise has std ``σ_ξ / (√m' · n̂)``.
* **RACE** (``R`` rows of LSH buckets): row ``r`` reads its bucket ``S[r, h_r(q)]``; the estimate
  is the mean over rows divided by ``n̂`` (or a median of group means, robust to heavy collisions).
  The kernel is the LSH collision probability. Noise std of the mean: ``σ_ξ / (√R · n̂)``.

Multiplying by the kernel's normalising constant turns ``K̂`` into a probability density
(``density=True``; Gaussian ``(2πσ²)^{-d/2}``, Laplacian ``(2σ)^{-d}``; RACE kernels have no
closed-form constant).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import scipy.optimize

from ..backends.tables import encode_rows
from ..features.base import FeatureMap
from ..features.byclass import ByClass
from ..features.race import RACE
from ..features.rff import RFF
from ..schema import Schema
from ..sketch import Sketch
from .contract import SketchEstimator, fitted, renamed_keyword

__all__ = ["KDE"]

QUERY_CHUNK = 4096  # queries per block: bounds the feature matrix held at once


def check_queries(Q: Any, dim: int) -> np.ndarray:
    """Queries as a finite ``(q, dim)`` float array (a 1-D array is one query, or ``q`` queries when
    ``dim == 1``)."""
    Q = np.asarray(Q, dtype=np.float64)
    if Q.ndim == 1:
        Q = Q[:, None] if dim == 1 else Q[None, :]
    if Q.ndim != 2 or Q.shape[1] != dim:
        raise ValueError(f"queries must have shape (q, {dim}), got {np.shape(Q)}")
    if not np.isfinite(Q).all():
        raise ValueError("queries contain NaN or infinite values")
    return Q


def _kde_map(fm: FeatureMap) -> RFF | RACE:
    if isinstance(fm, (RFF, RACE)):
        return fm
    raise ValueError(f"KDE needs an RFF or RACE sketch, got {type(fm).__name__}")


class KDE(SketchEstimator):
    r"""Kernel density estimates ``K̂(q) ≈ (1/n) Σ k(x_i, q)`` from an RFF or RACE sketch.

    :param sketch: a released sketch of an ``RFF`` or ``RACE`` map; a ``ByClass`` sketch of one
        with ``label=c`` gives class ``c``'s estimate (normalised by that class's noisy count)
    :param aggregate: for RACE, ``"mean"`` over rows or ``"median_of_means"`` (``estimator=``
        before; the old keyword works for one release, with a warning)
    :param groups: number of row groups for the median of means
    :param label: class to read from a ``ByClass`` sketch
    :param normalise: ``False`` estimates the kernel *sum* ``Σ k(x_i, q)`` instead: no division
        by the noisy count, so no count is needed (a ``ByClass`` count is one coordinate with the
        noise of every feature, and may come out ≤ 0)
    :raises ValueError: for other maps, a non-positive noisy count (with ``normalise=True``), or
        bad options

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> X = np.random.default_rng(0).normal(0.5, 0.1, size=(5000, 2))
    >>> fm = dps.RFF(dim=2, num_features=1000, bandwidth=0.2, seed=0)
    >>> sk = dps.release_sketch(X, fm, bounds=(0, 1), epsilon=10.0)
    >>> kde = dps.KDE(sk)
    >>> kde([[0.5, 0.5], [0.0, 1.0]]).shape
    (2,)
    >>> bool(kde([[0.5, 0.5]])[0] > kde([[0.0, 1.0]])[0])
    True
    """

    #: the fitted attributes under scikit-learn's trailing-underscore names
    sketch_ = fitted("sketch")
    feature_map_ = fitted("feature_map")
    sum_ = fitted("sum")
    n_hat_ = fitted("n_hat")
    noise_var_ = fitted("noise_var")
    bounds_ = fitted("bounds")

    def __init__(
        self,
        sketch: Sketch | None = None,
        aggregate: Literal["mean", "median_of_means"] = "mean",
        groups: int = 8,
        label: int | None = None,
        normalise: bool = True,
        *,
        estimator: Literal["mean", "median_of_means"] | None = None,
    ) -> None:
        aggregate = renamed_keyword(type(self).__name__, "estimator", estimator, "aggregate", aggregate)
        self._start(sketch, aggregate=aggregate, groups=groups, label=label, normalise=normalise)

    def _fit(
        self,
        sketch: Sketch,
        aggregate: Literal["mean", "median_of_means"] = "mean",
        groups: int = 8,
        label: int | None = None,
        normalise: bool = True,
    ) -> None:
        if not isinstance(sketch, Sketch):
            raise ValueError(f"sketch must be a Sketch, got {type(sketch).__name__}")
        fm = sketch.feature_map
        if isinstance(fm, ByClass):
            if (
                label is None
                or isinstance(label, bool)
                or not isinstance(label, (int, np.integer))
                or not 0 <= label < fm.num_classes
            ):
                raise ValueError(f"a ByClass sketch needs label= one of 0..{fm.num_classes - 1}")
            inner, count = fm.block(sketch.sum, int(label))
            self.feature_map = _kde_map(fm.feature_map)
            self.sum = np.asarray(inner, dtype=np.float64)
            self.n_hat = float(max(count, 1.0))
            noisy_count = float(count)
        else:
            if label is not None:
                raise ValueError("label= applies only to ByClass sketches")
            self.feature_map = _kde_map(fm)
            self.sum = sketch.sum
            self.n_hat = sketch.n_hat
            noisy_count = float(sketch.count)
        #: the sketch's public schema (``None`` without one, or for a ByClass sketch): queries are
        #: then rows in the table's units and labels (a DataFrame, or an array of every column)
        self.schema_ = (
            Schema.from_dict(sketch.schema)
            if sketch.schema is not None and not isinstance(fm, ByClass)
            else None
        )
        if not isinstance(normalise, bool):
            raise ValueError(f"normalise ({normalise!r}) must be True or False")
        if not normalise:
            self.n_hat = 1.0
        elif noisy_count <= 0:
            raise ValueError(
                f"the noisy count ({noisy_count:g}) is not positive: too little data for this budget"
            )
        if aggregate not in ("mean", "median_of_means"):
            raise ValueError(f"aggregate ({aggregate!r}) must be 'mean' or 'median_of_means'")
        if aggregate == "median_of_means" and not isinstance(self.feature_map, RACE):
            raise ValueError("median_of_means applies to RACE sketches (RFF features are not rows of counts)")
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"groups ({groups!r}) must be a positive integer")
        rows = getattr(self.feature_map, "rows", 0)
        if aggregate == "median_of_means" and groups > rows:
            raise ValueError(f"groups ({groups}) must be at most the number of RACE rows ({rows})")
        self.sketch = sketch
        self.aggregate = aggregate
        self.groups = int(groups)
        self.noise_var = sketch.sum_variance
        self.bounds = sketch.bounds

    @property
    def dim(self) -> int:
        return self.feature_map.dim

    def kernel(self, x: Any, y: Any) -> np.ndarray:
        """The kernel ``k(x, y)`` this sketch estimates (broadcasting over leading axes)."""
        return self.feature_map.kernel_value(x, y)

    def _norm_const(self) -> float:
        fm = self.feature_map
        if not isinstance(fm, RFF):
            raise ValueError("density=True needs an RFF sketch (RACE kernels have no closed-form normaliser)")
        if fm.kernel == "gaussian":
            return (2 * math.pi * fm.bandwidth**2) ** (-fm.dim / 2)
        return (2 * fm.bandwidth) ** (-fm.dim)

    def __call__(self, queries: Any, *, density: bool = False, return_std: bool = False) -> Any:
        """``K̂(q)`` for each query row (``(q,)`` array); ``density=True`` scales it to a density.
        For a schema sketch, the queries are rows in the table's own units and labels."""
        if self.schema_ is not None:
            queries = encode_rows(self.schema_, queries)
        return self._at(check_queries(queries, self.dim), density, return_std)

    def _at(self, Q: np.ndarray, density: bool = False, return_std: bool = False) -> Any:
        """:meth:`__call__` at points in the sketch's own coordinates."""
        out = np.empty(Q.shape[0])
        for s in range(0, Q.shape[0], QUERY_CHUNK):
            out[s : s + QUERY_CHUNK] = self._block(Q[s : s + QUERY_CHUNK])
        scale = self._norm_const() if density else 1.0
        if not return_std:
            return out * scale
        return out * scale, np.full(Q.shape[0], self.noise_std() * scale)

    def _block(self, Q: np.ndarray) -> np.ndarray:
        return self._estimate(self._features(Q))

    def _features(self, Q: np.ndarray) -> np.ndarray:
        """The map at the queries: RFF features, or each RACE row's bucket index."""
        fm = self.feature_map
        return fm.transform(Q) if isinstance(fm, RFF) else fm._flat(Q)

    def _estimate(self, features: np.ndarray) -> np.ndarray:
        """``K̂`` from :meth:`_features` (shared by every class of a ``ByClass`` sketch)."""
        fm = self.feature_map
        if isinstance(fm, RFF):
            return features @ self.sum / (fm.num_frequencies * self.n_hat)
        cells = self.sum[features]  # (q, R): each row's bucket
        if self.aggregate == "mean":
            return cells.mean(axis=1) / self.n_hat
        parts = np.array_split(cells, self.groups, axis=1)
        return np.median(np.stack([p.mean(axis=1) for p in parts]), axis=0) / self.n_hat

    def noise_std(self) -> float:
        """Std of the DP-noise term of one ``mean`` estimate (same for every query)."""
        fm = self.feature_map
        terms = fm.num_frequencies if isinstance(fm, RFF) else fm.rows
        return math.sqrt(self.noise_var / terms) / self.n_hat

    def anomaly_score(self, queries: Any) -> np.ndarray:
        """Low-density score ``-log max(K̂(q), floor)``: higher means more anomalous. The floor is
        the noise std, below which densities cannot be told apart."""
        floor = max(self.noise_std(), 1e-300)
        return -np.log(np.maximum(self(queries), floor))

    def mode(self, bounds: Any = None, n_starts: int = 20, seed: int = 0) -> np.ndarray:
        """The point of highest estimated density within the box (derivative-free search: the
        density at ``50·n_starts`` seeded random points, the best five refined with Nelder–Mead
        inside the box). For a schema sketch the point is in the sketch's unit-free coordinates:
        ``kde.schema_.decode([point])`` gives it as a row in the table's units and labels."""
        from ..backends.domains import box_data_bounds

        if bounds is None:
            if self.bounds is None:
                raise ValueError("bounds are required: the sketch does not record the public box")
            lo, hi = (np.asarray(b, dtype=np.float64)[: self.dim] for b in self.bounds)
        else:
            lo, hi = (np.asarray(b, dtype=np.float64) for b in box_data_bounds(bounds, self.feature_map))
        rng = np.random.default_rng(seed)
        if isinstance(n_starts, bool) or not isinstance(n_starts, (int, np.integer)) or n_starts < 1:
            raise ValueError(f"n_starts ({n_starts!r}) must be a positive integer")
        starts = rng.uniform(lo, hi, size=(int(n_starts) * 50, self.dim))
        best = starts[np.argsort(-self._at(starts))[:5]]

        def neg(x: np.ndarray) -> float:
            return -float(self._at(np.clip(x, lo, hi)[None, :])[0])

        results = [
            scipy.optimize.minimize(
                neg,
                x0,
                method="Nelder-Mead",
                options={"xatol": 1e-6 * float(np.max(hi - lo)), "fatol": 1e-12},
            )
            for x0 in best
        ]
        top = min(results, key=lambda r: r.fun)
        return np.clip(top.x, lo, hi)
