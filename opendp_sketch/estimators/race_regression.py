r"""Linear regression from a RACE sketch with the asymmetric signed-random-projection surrogate
loss (RACE paper, §4).

The sketch is a :class:`~opendp_sketch.RACE` map with ``family="srp"`` over rows ``z = [x, y]``
(the target in the last column). Each of its ``R`` rows hashes ``z`` to the ``K`` sign bits of
``wᵀz``. For a coefficient vector ``θ`` the query is ``q = [θ, −1]``, so ``⟨z, q⟩ = θᵀx − y`` is the
residual. Reading the sketch at the bucket of ``q`` *and* at the bucket of ``−q`` counts the rows
colliding with ``q`` or with ``−q``:

``L(θ) = (1/(R·n̂)) Σ_r (S[r, b_r(q)] + S[r, b_r(−q)]) ≈ (1/n) Σ_i g(a_i)``,
``g(a) = (1 − a/π)^K + (a/π)^K``,

where ``a_i`` is the angle between ``z_i`` and ``q`` (reading ``−q`` is the asymmetric part: for
SRP, ``z`` collides with ``−q`` exactly when ``−z`` collides with ``q``, so no second sketch of
``−z`` is needed — it is post-processing of the one ``[x, y]`` sketch). ``g`` is smallest at
``a = π/2`` (zero residual) and grows with ``|cos a_i| = |θᵀx_i − y_i| / (‖z_i‖·‖q‖)``: a monotone
surrogate of each squared residual, normalised by ``‖z_i‖·‖q‖``. With ``K = 1`` ``g ≡ 1``, so
the map needs ``hashes_per_row ≥ 2``; ``K = 3`` or ``4`` gives the largest curvature ``3(a/π − 1/2)²``.

``L`` is piecewise constant in ``θ`` (it changes only when ``q`` crosses one of the ``R·K`` public
hyperplanes), so it is minimised without derivatives: ``L`` at ``n_candidates`` seeded uniform
points of the public box ``coef_bounds``, then Nelder–Mead inside the box from the best
``n_starts`` of them; the smallest value wins. Everything reads the sketch and the public hash
draws only: no privacy cost.

**What it estimates.** For exact linear data (``y = θ*ᵀx``) every residual is 0 and ``θ*``
minimises the expected surrogate. With noisy targets the minimiser is that of the normalised
angular loss above, not of the squared error, and the random hyperplanes add an ``O(1/√R)``
roughness to ``L``: expect a larger test error than least squares even without DP noise
(``benchmarks/bench_race_regression.py`` measures it).

**Noise.** The surrogate sums ``2R`` counters. Laplace noise (scale ``R/ε`` per counter) gives it
a std of about ``2√R/(ε·n)``, growing with ``R``; Gaussian noise (``rho=`` or ``delta=`` in
:func:`~opendp_sketch.release_sketch`, ``σ = √R/√(2ρ)``) gives ``1/(√ρ·n)``, independent of
``R``. Many rows are needed against the LSH roughness, so release with Gaussian noise.

**Intercept.** SRP hyperplanes pass through the origin, so an intercept needs a constant column:
release the sketch of ``[x, c, y]`` with a public constant ``c`` (default 1; pass
``bounds`` that contain it) and set ``fit_intercept=True``; the coefficient of that column times
``c`` is ``intercept_``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.optimize

from ..features.race import RACE
from ..sketch import Sketch

__all__ = ["RACELinearRegression"]


def _check_count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} ({value!r}) must be an integer ≥ {minimum}")
    return int(value)


class RACELinearRegression:
    r"""Linear regression ``y ≈ xᵀcoef_ + intercept_`` from a private RACE (SRP) sketch of ``[x, y]``
    (post-processing; see the module notes for the surrogate loss and its limits).

    Fitted attributes: ``coef_`` (``(p,)``), ``intercept_`` (``0.0`` unless ``fit_intercept``),
    ``loss_`` (the surrogate at the solution), ``n_features_in_`` (``p``).

    :param coef_bounds: public box ``(lower, upper)`` for the coefficients (and, with
        ``fit_intercept``, the coefficient of the constant column), scalars or one value per
        coefficient; never derive it from the data
    :param fit_intercept: the second-to-last sketch column is the public constant ``constant``
    :param constant: value of the constant column (``fit_intercept`` only)
    :param n_candidates: random points of the box where the surrogate is evaluated first
    :param n_starts: Nelder–Mead runs from the best candidates
    :param seed: seed of the candidates (public)

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.estimators.race_regression import RACELinearRegression
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(50_000, 2)); y = X @ [0.8, -0.4] + rng.normal(0, 0.05, 50_000)
    >>> fm = dps.RACE(dim=3, rows=1000, buckets=8, family="srp", seed=0)   # K = 3 sign bits per row
    >>> sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=([-1, -1, -2], [1, 1, 2]), rho=0.5)
    >>> reg = RACELinearRegression(coef_bounds=(-2.0, 2.0)).fit(sk)
    >>> reg.coef_.shape, reg.predict(X[:3]).shape
    ((2,), (3,))
    >>> bool(np.mean((reg.predict(X) - y) ** 2) < np.mean(y ** 2) / 4)      # most variance explained
    True
    """

    def __init__(
        self,
        *,
        coef_bounds: Any = (-10.0, 10.0),
        fit_intercept: bool = False,
        constant: float = 1.0,
        n_candidates: int = 2000,
        n_starts: int = 5,
        seed: int = 0,
    ) -> None:
        self.coef_bounds = coef_bounds
        self.fit_intercept = fit_intercept
        self.constant = constant
        self.n_candidates = n_candidates
        self.n_starts = n_starts
        self.seed = seed

    def _check(self, sketch: Any) -> tuple[RACE, np.ndarray, np.ndarray]:
        """Validate everything before any work; return the map and the box of the free parameters."""
        if not isinstance(sketch, Sketch):
            raise ValueError(f"RACELinearRegression.fit needs a Sketch, got {type(sketch).__name__}")
        fm = sketch.feature_map
        if not isinstance(fm, RACE) or fm.family != "srp":
            got = f"RACE(family={fm.family!r})" if isinstance(fm, RACE) else type(fm).__name__
            raise ValueError(f"RACELinearRegression needs a RACE sketch with family='srp', got {got}")
        if fm.hashes_per_row < 2:
            raise ValueError(
                "RACELinearRegression needs hashes_per_row ≥ 2: with one sign bit per row the surrogate "
                "loss is the same for every coefficient vector"
            )
        if not isinstance(self.fit_intercept, bool):
            raise ValueError(f"fit_intercept ({self.fit_intercept!r}) must be True or False")
        need = 3 if self.fit_intercept else 2
        if fm.dim < need:
            raise ValueError(
                f"the sketch has {fm.dim} columns; regression needs at least {need} "
                "(features"
                + (", the constant column" if self.fit_intercept else "")
                + " and the target last)"
            )
        c = self.constant
        if (
            isinstance(c, bool)
            or not isinstance(c, (int, float, np.integer, np.floating))
            or not np.isfinite(c)
            or c == 0
        ):
            raise ValueError(f"constant ({c!r}) must be a finite non-zero number")
        p = fm.dim - 1
        try:
            lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), (p,)).copy() for b in self.coef_bounds)
        except (TypeError, ValueError):
            raise ValueError(f"coef_bounds must be (lower, upper), each a number or {p} numbers") from None
        if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
            raise ValueError("coef_bounds must be finite with lower < upper")
        _check_count(self.n_candidates, "n_candidates", 1)
        _check_count(self.n_starts, "n_starts", 1)
        _check_count(self.seed, "seed", 0)
        if sketch.count <= 0:
            raise ValueError(
                f"the noisy count ({sketch.count}) is not positive: too little data for this budget"
            )
        return fm, lo, hi

    def surrogate_loss(self, theta: Any) -> np.ndarray:
        """``L(θ)`` for each row of ``theta`` (``(t, p)`` or one ``(p,)`` vector) on the fitted sketch.

        :raises ValueError: before ``fit``, or for a wrong shape
        """
        if not hasattr(self, "_fm"):
            raise ValueError("RACELinearRegression is not fitted: call fit(sketch) first")
        T = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        if T.ndim != 2 or T.shape[1] != self._fm.dim - 1 or not np.isfinite(T).all():
            raise ValueError(f"theta must be finite with shape (t, {self._fm.dim - 1})")
        Q = np.column_stack([T, -np.ones(T.shape[0])])
        hits = self._sum[self._fm._flat(Q)] + self._sum[self._fm._flat(-Q)]  # (t, R): q and −q
        return hits.mean(axis=1) / self._n_hat

    def fit(self, sketch: Sketch) -> RACELinearRegression:
        """Minimise the surrogate loss over the public box.

        :param sketch: a released RACE sketch (``family="srp"``, ``hashes_per_row ≥ 2``) of
            ``[x, y]`` or, with ``fit_intercept``, of ``[x, constant, y]``
        :return: ``self``, fitted
        :raises ValueError: for another map or family, ``hashes_per_row < 2``, fewer than two
            columns, bad ``coef_bounds`` or search settings, or a non-positive noisy count
        """
        fm, lo, hi = self._check(sketch)
        self._fm, self._sum, self._n_hat = fm, sketch.sum, sketch.n_hat
        rng = np.random.default_rng(self.seed)
        cand = rng.uniform(lo, hi, size=(int(self.n_candidates), lo.size))
        starts = cand[np.argsort(self.surrogate_loss(cand), kind="stable")[: int(self.n_starts)]]
        width = hi - lo

        def objective(t: np.ndarray) -> float:
            return float(self.surrogate_loss(np.clip(t, lo, hi))[0])

        runs = []
        for x0 in starts:
            # a wide first simplex: L is flat between hyperplanes, a tiny simplex would stall at once
            simplex = np.vstack([x0, x0 + np.diag(0.1 * width)])
            simplex = np.where(simplex > hi, 2 * x0 - simplex, simplex)  # reflect steps that leave the box
            runs.append(
                scipy.optimize.minimize(
                    objective,
                    x0,
                    method="Nelder-Mead",
                    bounds=list(zip(lo, hi)),
                    options={"initial_simplex": simplex, "xatol": 1e-4 * float(width.max()), "fatol": 1e-12},
                )
            )
        best = min(runs, key=lambda r: r.fun)
        theta = np.clip(best.x, lo, hi)
        if self.fit_intercept:
            self.coef_ = theta[:-1]
            self.intercept_ = float(theta[-1] * self.constant)
        else:
            self.coef_ = theta
            self.intercept_ = 0.0
        self.loss_ = float(best.fun)
        self.n_features_in_ = self.coef_.size
        return self

    def predict(self, X: Any) -> np.ndarray:
        """``X · coef_ + intercept_`` for ``X`` of shape ``(n, p)`` (without the constant column).

        :raises ValueError: before ``fit``, or for a wrong shape or non-finite values
        """
        if not hasattr(self, "coef_"):
            raise ValueError("RACELinearRegression is not fitted: call fit(sketch) first")
        X = np.asarray(X, dtype=np.float64)
        p = self.n_features_in_
        if X.ndim == 1 and p == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != p:
            raise ValueError(f"X must have shape (n, {p}), got {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        return X @ self.coef_ + self.intercept_
