r"""Compressive PCA: principal directions from a released :class:`~opendp_sketch.RandomQuadratic` sketch.

A ``RandomQuadratic`` map has features ``Φ(x)_j = (ω_jᵀy)²`` with ``y = clip_r(x)`` (the public ball
of radius ``r`` around the origin), so the sketch mean is ``m`` rank-one linear measurements of the
uncentred second-moment matrix ``M = (1/n) Σ_i y_i y_iᵀ``:

``ẑ_j ≈ ω_jᵀ M ω_j = ⟨ω_j ω_jᵀ, M⟩``,   i.e.  ``ẑ ≈ A(M)``.

``fit`` inverts ``A`` (post-processing: it reads the sketch and the public ``Ω`` only):

* ``method="lstsq"`` — ordinary least squares for the ``d(d+1)/2`` free entries of the symmetric
  ``M`` (``scipy.linalg.lstsq``; row ``j`` of the design holds ``ω_ja²`` for the diagonal and
  ``2 ω_ja ω_jb`` for ``a < b``), then the projection onto the PSD cone (negative eigenvalues set
  to 0). Needs ``m ≥ d(d+1)/2``. The DP noise is i.i.d. across features with one variance, so
  unweighted least squares is the right estimator.
* ``method="low_rank"`` — least squares over rank-``k`` PSD matrices ``M = VVᵀ`` (``V`` is
  ``d × k``), minimised with L-BFGS from the spectral estimate ``(m·Σ_j ẑ_j ω_jω_jᵀ − Σ_j ẑ_j·I)/2``
  (its expectation over Gaussian ``Ω`` is ``M``). Needs only ``m ≥ dk − k(k−1)/2`` measurements,
  the number of free parameters of a rank-``k`` PSD matrix; recovery is reliable from a small
  multiple of ``dk``.
* ``method="auto"`` (default) — ``"lstsq"`` when ``m ≥ d(d+1)/2``, otherwise ``"low_rank"``.

**Centring.** ``RandomQuadratic`` has no centre: this is PCA of the *uncentred* clipped data, whose
leading direction points towards the mean when the mean is far from the origin. For a covariance
PCA, shift the data by a public centre (e.g. the midpoint of the public box) before the release,
and shift query points by the same centre before :meth:`CompressivePCA.transform`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import scipy.linalg
import scipy.optimize

from ..backends.tables import encode_rows
from ..features.base import single_threaded_blas
from ..features.moments import RandomQuadratic
from ..schema import Schema
from ..sketch import Sketch

__all__ = ["CompressivePCA", "compressive_pca"]

_METHODS = ("auto", "lstsq", "low_rank")


def _quadratic_design(omega: np.ndarray) -> np.ndarray:
    """``A`` with ``A @ vech(M) = [ω_jᵀ M ω_j]_j`` for symmetric ``M`` (upper-triangle order)."""
    a, b = np.triu_indices(omega.shape[0])
    return (omega[a] * omega[b] * np.where(a == b, 1.0, 2.0)[:, None]).T


def _sym_from_upper(u: np.ndarray, d: int) -> np.ndarray:
    M = np.zeros((d, d))
    M[np.triu_indices(d)] = u
    return M + np.triu(M, 1).T


def _top_eigen(M: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues (descending) and their eigenvectors as rows, signs fixed so the
    largest-magnitude entry of each row is positive (deterministic output, as sklearn's
    ``svd_flip``)."""
    d = M.shape[0]
    vals, vecs = scipy.linalg.eigh(M, subset_by_index=[d - k, d - 1])
    vals, rows = vals[::-1], vecs[:, ::-1].T
    signs = np.sign(rows[np.arange(k), np.argmax(np.abs(rows), axis=1)])
    return vals, rows * np.where(signs == 0, 1.0, signs)[:, None]


class CompressivePCA:
    r"""The leading principal directions of the uncentred second-moment matrix from a private
    :class:`~opendp_sketch.RandomQuadratic` sketch (post-processing; see the module notes).

    Fitted attributes:

    * ``components_`` — ``(k, d)`` orthonormal rows, the leading eigenvectors of the recovered
      second-moment matrix (largest entry of each row positive);
    * ``explained_variance_`` — ``(k,)`` their eigenvalues ``E[(vᵀy)²]`` (mean squared projection of
      the clipped data; a variance only if the data was centred before the release);
    * ``second_moment_`` — ``(d, d)`` recovered PSD estimate of ``(1/n) Σ y_i y_iᵀ`` (rank ``k`` for
      ``"low_rank"``);
    * ``method_`` — the method used; ``noise_std_`` — the DP-noise std of each measurement
      ``ẑ_j`` (``σ_ξ / n̂``); ``n_features_in_`` — ``d``.

    :param n_components: ``k``, number of directions, ``1 ≤ k ≤ d``
    :param method: ``"auto"``, ``"lstsq"`` or ``"low_rank"``
    :param max_iter: L-BFGS iterations of ``"low_rank"``

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.estimators.pca import CompressivePCA
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20_000, 4)) * [0.4, 0.1, 0.1, 0.1]       # centred, long axis e₁
    >>> fm = dps.RandomQuadratic(dim=4, num_features=40, radius=1.0, seed=0)
    >>> sk = dps.release_sketch(X, fm, bounds=(-1.0, 1.0), epsilon=1.0)
    >>> pca = CompressivePCA(n_components=1).fit(sk)
    >>> pca.components_.shape, pca.method_, pca.transform(X[:5]).shape
    ((1, 4), 'lstsq', (5, 1))
    >>> bool(abs(pca.components_[0, 0]) > 0.95)
    True
    """

    def __init__(
        self,
        n_components: int = 1,
        *,
        method: Literal["auto", "lstsq", "low_rank"] = "auto",
        max_iter: int = 500,
        n_restarts: int = 4,
        seed: int = 0,
    ) -> None:
        self.n_components = n_components
        self.method = method
        self.max_iter = max_iter
        self.n_restarts = n_restarts
        self.seed = seed

    def _check(self, sketch: Any) -> tuple[RandomQuadratic, int, str]:
        if not isinstance(sketch, Sketch):
            raise ValueError(f"CompressivePCA.fit needs a Sketch, got {type(sketch).__name__}")
        fm = sketch.feature_map
        if not isinstance(fm, RandomQuadratic):
            raise ValueError(f"CompressivePCA needs a RandomQuadratic sketch, got {type(fm).__name__}")
        d, m, k = fm.dim, fm.num_features, self.n_components
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= d:
            raise ValueError(f"n_components ({k!r}) must be an integer between 1 and the dimension {d}")
        k = int(k)
        if self.method not in _METHODS:
            raise ValueError(f"method ({self.method!r}) must be one of {_METHODS}")
        it = self.max_iter
        if isinstance(it, bool) or not isinstance(it, (int, np.integer)) or it < 1:
            raise ValueError(f"max_iter ({it!r}) must be a positive integer")
        r = self.n_restarts
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
            raise ValueError(f"n_restarts ({r!r}) must be a non-negative integer")
        sd = self.seed
        if isinstance(sd, bool) or not isinstance(sd, (int, np.integer)) or sd < 0:
            raise ValueError(f"seed ({sd!r}) must be a non-negative integer")
        full = d * (d + 1) // 2
        method = self.method if self.method != "auto" else ("lstsq" if m >= full else "low_rank")
        if method == "lstsq" and m < full:
            raise ValueError(
                f"method='lstsq' needs num_features ≥ d(d+1)/2 = {full} to identify the symmetric "
                f"{d}×{d} matrix, the map has {m}; use method='low_rank' or a map with more features"
            )
        dof = d * k - k * (k - 1) // 2
        if m < dof:
            raise ValueError(
                f"num_features ({m}) is below the {dof} free parameters of a rank-{k} PSD {d}×{d} "
                "matrix: the components are not identifiable from this sketch"
            )
        if sketch.count <= 0:
            raise ValueError(
                f"the noisy count ({sketch.count}) is not positive: too little data for this budget"
            )
        return fm, k, method

    def fit(self, sketch: Sketch) -> CompressivePCA:
        """Recover the second-moment matrix and its ``k`` leading eigenvectors from ``sketch``.

        :param sketch: a released sketch of a :class:`~opendp_sketch.RandomQuadratic` map
        :return: ``self``, fitted
        :raises ValueError: for another map, ``n_components`` outside ``[1, d]``, too few features
            for the method (``m < d(d+1)/2`` for ``"lstsq"``, ``m < dk − k(k−1)/2`` always), an
            unknown method, or a non-positive noisy count
        """
        fm, k, method = self._check(sketch)
        #: the sketch's public schema (``None`` without one): ``transform`` then reads rows in its units
        self.schema_ = None if sketch.schema is None else Schema.from_dict(sketch.schema)
        d = fm.dim
        z = sketch.mean
        omega = fm.projections
        if method == "lstsq":
            u = scipy.linalg.lstsq(_quadratic_design(omega), z)[0]
            vals, vecs = scipy.linalg.eigh(_sym_from_upper(u, d))
            M = (vecs * np.maximum(vals, 0.0)) @ vecs.T  # nearest PSD matrix in Frobenius norm
        else:
            M = self._low_rank(omega, z, k)
        M = (M + M.T) / 2
        vals, rows = _top_eigen(M, k)
        self.second_moment_ = M
        self.components_ = rows
        self.explained_variance_ = np.maximum(vals, 0.0)
        self.method_ = method
        self.noise_std_ = math.sqrt(sketch.sum_variance) / sketch.n_hat
        self.n_components_ = k
        self.n_features_in_ = d
        return self

    def _low_rank(self, omega: np.ndarray, z: np.ndarray, k: int) -> np.ndarray:
        """``VVᵀ + s·I`` (``s ≥ 0``) minimising ``Σ_j (‖Vᵀω_j‖² + s‖ω_j‖² − ẑ_j)²``: L-BFGS from the
        spectral estimate and from seeded random starts, keeping the smallest residual."""
        d, m = omega.shape
        W = omega * math.sqrt(m)  # unit-variance directions: measurements of size tr(M)
        zs = z * m
        scale = max(float(np.abs(zs).mean()), 1e-300)  # scale-free objective for L-BFGS tolerances
        zs = zs / scale
        norms = (W * W).sum(axis=0)
        S = (W * zs) @ W.T / m  # E[S] = 2M + tr(M)·I for Gaussian W
        vals, rows = _top_eigen((S - zs.mean() * np.eye(d)) / 2, k)
        t0 = 0.1 / math.sqrt(d)  # s = t² > 0: at t = 0 the gradient in t vanishes
        starts = [np.append(rows.T * np.sqrt(np.maximum(vals, 1e-12)), t0)]
        rng = np.random.default_rng(self.seed)
        starts += [
            np.append(rng.standard_normal((d, k)) / math.sqrt(d * k), t0) for _ in range(self.n_restarts)
        ]

        def loss(v: np.ndarray) -> tuple[float, np.ndarray]:
            V, t = v[:-1].reshape(d, k), v[-1]
            P = W.T @ V  # (m, k): projections of each measurement direction
            r = (P * P).sum(axis=1) + t * t * norms - zs
            grad_v = 4.0 * (W * r) @ P / m
            return 0.5 * float(r @ r) / m, np.append(grad_v.ravel(), 2.0 * t * float(r @ norms) / m)

        opts = {"maxiter": int(self.max_iter), "gtol": 1e-12}
        with single_threaded_blas():  # tiny products: BLAS threads only add overhead and contention
            fits = [
                scipy.optimize.minimize(loss, v0, jac=True, method="L-BFGS-B", options=opts) for v0 in starts
            ]
        best = min(fits, key=lambda r: r.fun)
        V, t = best.x[:-1].reshape(d, k), best.x[-1]
        return (V @ V.T + t * t * np.eye(d)) * scale

    def _check_X(self, X: Any) -> np.ndarray:
        if not hasattr(self, "components_"):
            raise ValueError("CompressivePCA is not fitted: call fit(sketch) first")
        schema = getattr(self, "schema_", None)
        if schema is not None:  # rows in the table's units and labels
            X = encode_rows(schema, X)
        X = np.asarray(X, dtype=np.float64)
        d = self.n_features_in_
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"X must have shape (n, {d}), got {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        return X

    def transform(self, X: Any) -> np.ndarray:
        """Coordinates ``X · components_ᵀ`` (no mean is subtracted: shift ``X`` by the public centre
        used before the release, if any).

        :param X: ``(n, d)`` public points, or the curator's own data
        :return: ``(n, k)`` array
        :raises ValueError: before ``fit``, or for a wrong shape or non-finite values
        """
        return self._check_X(X) @ self.components_.T

    def inverse_transform(self, Z: Any) -> np.ndarray:
        """Points ``Z · components_`` of the principal subspace with coordinates ``Z`` (``(n, k)``)."""
        if not hasattr(self, "components_"):
            raise ValueError("CompressivePCA is not fitted: call fit(sketch) first")
        Z = np.asarray(Z, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != self.n_components_:
            raise ValueError(f"Z must have shape (n, {self.n_components_}), got {Z.shape}")
        return Z @ self.components_


def compressive_pca(sketch: Sketch, n_components: int, **options: Any) -> np.ndarray:
    """The ``(k, d)`` orthonormal principal directions :class:`CompressivePCA` recovers from ``sketch``.

    :param sketch: a released sketch of a :class:`~opendp_sketch.RandomQuadratic` map
    :param n_components: ``k``
    :param options: ``method`` and ``max_iter`` as for :class:`CompressivePCA`
    :return: ``components_``
    :raises ValueError: as :meth:`CompressivePCA.fit`
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> from opendp_sketch.estimators.pca import compressive_pca
    >>> fm = dps.RandomQuadratic(dim=3, num_features=12, seed=0)
    >>> X = np.random.default_rng(0).normal(size=(1000, 3)) * [0.05, 0.3, 0.05]
    >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), 1000)     # noise-free, for illustration
    >>> np.round(np.abs(compressive_pca(sk, 1)), 2).tolist()
    [[0.0, 1.0, 0.0]]
    """
    return CompressivePCA(n_components, **options).fit(sketch).components_
