r"""The M2M paper's ridge decoder: prior samples weighted by one linear solve, ``λ`` chosen by risk.

The analyst draws public samples ``x̃_1..x̃_ns`` from a prior ``ψ`` on the public box and fits a
ridge model ``⟨a_f, Φ(x)⟩ ≈ f(x)``. The estimate of ``f̄ = (1/n) Σ f(x_i)`` is ``⟨a_f, ẑ⟩``. With
``P = Φ(x̃)`` and ``G = PᵀP/ns``, ``a_f = (G + λI)⁻¹ PᵀF/ns``, so

.. math:: ⟨a_f, ẑ⟩ = (1/ns) Σ_i w_i f(x̃_i), \qquad w = P (G + λI)^{-1} ẑ

and **one weight vector** ``w`` serves every query: the sketch becomes a weighted synthetic dataset
(implicit-M2M). Everything here is post-processing of the released sketch and public draws.

Choosing ``λ``. ``G = V diag(s) Vᵀ`` is diagonalised once, after which any ``λ`` costs ``O(m·q)``
for ``q`` queries. ``lam="auto"`` minimises, over a reference family of queries (every column's
mean, second moment and CDF at interior points), the expected squared error of the estimate when
the data follow the prior::

    (E_ψ r)² + Var_ψ(r) / n̂ + ‖a‖² σ_ξ² / n̂²,     r = f − ⟨a, Φ⟩,

each query normalised by ``Var_ψ f``. Its ingredients are public: the prior samples, the released
noise variance ``σ_ξ²`` and the released count ``n̂``. Theorem 3.1 of the M2M paper bounds the same
error by ``E_ψ r² + ‖a‖² σ_ξ²/n²`` (minimised by ``λ = σ_ξ²/n²``, ``lam="theorem"``); the paper's
experiments used the larger ``λ = σ_ξ²/n̂`` (eq. 5, ``lam="paper"``).

:class:`RidgeDesign` holds what depends on public choices only (the prior samples, ``eig(G)`` and
the reference queries' moments); :class:`~opendp_sketch.estimators.m2m.M2M` (``method="ridge"``)
caches it and solves for one sketch's weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import scipy.linalg
import scipy.sparse

from ..features.base import FeatureMap, OneHotFeatureMap

#: default number of prior samples of the ridge estimator
DEFAULT_PRIOR_SAMPLES = 100_000
#: rows of ``Φ`` computed at a time
_CHUNK = 8192
#: interior CDF points per column, and functions at most, of the reference queries
_N_CDF_REF = 8
_MAX_REF_QUERIES = 512


class RidgeDesign:
    """Everything the ridge decoder needs that depends only on public choices: prior samples and
    ``eig(G)``.

    Cached per (map fingerprint, box, discrete columns, ns, seed) for the default uniform prior,
    so re-analysing several sketches of one map (e.g. one per ε) pays the Gram matrix once.
    """

    def __init__(self, fm: FeatureMap, samples: np.ndarray, ref: Callable[[np.ndarray], np.ndarray]):
        ns, m = samples.shape[0], fm.num_features
        self.samples = samples
        G = np.zeros((m, m))
        G_sparse = None
        phi_mean = np.zeros(m)
        b = None
        f_sum = f_sq = None
        for s, P in feature_chunks(fm, samples):
            F = ref(samples[s])
            if b is None:
                b = np.zeros((m, F.shape[1]))
                f_sum, f_sq = np.zeros(F.shape[1]), np.zeros(F.shape[1])
            if scipy.sparse.issparse(P):
                gram = (P.T @ P).tocsr()
                G_sparse = gram if G_sparse is None else G_sparse + gram
            else:
                G += P.T @ P
            phi_mean += np.asarray(P.sum(axis=0)).ravel()
            b += P.T @ F
            f_sum += F.sum(axis=0)
            f_sq += (F * F).sum(axis=0)
        if G_sparse is not None:
            G += G_sparse.toarray()
        G /= ns
        s_, V = scipy.linalg.eigh(G, driver="evd", overwrite_a=True, check_finite=False)
        self.eigvals = np.clip(s_, 0.0, None)
        self.eigvecs = V
        self.phi_mean_rot = V.T @ (phi_mean / ns)
        self.ref_rot = V.T @ (b / ns)
        self.ref_mean = f_sum / ns
        self.ref_sq = f_sq / ns
        self.ref_var = np.maximum(self.ref_sq - self.ref_mean**2, 1e-300)
        self.scale = float(max(self.eigvals.mean(), 1e-300))

    def nbytes(self) -> int:
        return self.samples.nbytes + self.eigvecs.nbytes + self.ref_rot.nbytes

    def risk(self, lam: np.ndarray, noise_var: float, n_hat: float) -> np.ndarray:
        """Normalised expected squared error summed over the reference queries, for each ``λ``."""
        out = np.empty(lam.shape)
        s, beta = self.eigvals[:, None], self.ref_rot
        for i, lam_i in enumerate(lam):
            alpha = beta / (s + lam_i)
            bias = self.ref_mean - self.phi_mean_rot @ alpha
            sq = self.ref_sq - 2 * (beta * alpha).sum(axis=0) + (s * alpha * alpha).sum(axis=0)
            var = np.maximum(sq - bias**2, 0.0)
            noise = (alpha * alpha).sum(axis=0) * noise_var / n_hat**2
            out[i] = float(((bias**2 + var / n_hat + noise) / self.ref_var).sum())
        return out

    def choose_lam(self, lam: str | float, noise_var: float, n_hat: float) -> float:
        """``λ`` for ``lam``: ``"paper"`` (``σ_ξ²/n̂``), ``"theorem"`` (``σ_ξ²/n̂²``), ``"auto"`` (the
        least :meth:`risk` on a grid, refined once) or the number itself."""
        if lam == "paper":
            return noise_var / n_hat
        if lam == "theorem":
            return noise_var / n_hat**2
        if lam == "auto":
            grid = self.scale * np.logspace(-12, 2, 57)
            i = int(np.argmin(self.risk(grid, noise_var, n_hat)))
            fine = grid[i] * np.logspace(-0.25, 0.25, 11)
            return float(fine[int(np.argmin(self.risk(fine, noise_var, n_hat)))])
        return float(lam)

    def solve(self, b: np.ndarray, lam: float) -> np.ndarray:
        """``(G + λI)⁺ b`` through the eigendecomposition (pseudo-inverse on a null space at λ=0)."""
        V, s = self.eigvecs, self.eigvals
        denom = s + lam
        inv = np.where(denom > 1e-12 * self.scale, 1.0 / np.where(denom > 0, denom, 1.0), 0.0)
        rot = V.T @ b
        return V @ (rot * (inv if rot.ndim == 1 else inv[:, None]))

    def weights(self, fm: FeatureMap, mean: np.ndarray, lam: float) -> np.ndarray:
        """The samples' weights for a sketch's mean feature vector ``ẑ``: ``P (G + λI)⁺ ẑ / ns``."""
        ns = self.samples.shape[0]
        c = self.solve(mean, lam)
        w = np.empty(ns)
        for s, P in feature_chunks(fm, self.samples):
            w[s] = P @ c
        return w / ns

    def noise_std(
        self, fm: FeatureMap, F: np.ndarray, lam: float, noise_var: float, n_hat: float
    ) -> np.ndarray:
        """Standard deviation ``‖a_f‖ σ_ξ / n̂`` of the DP-noise term of each column of ``F`` (the
        queries' values on the samples)."""
        ns = self.samples.shape[0]
        b = np.zeros((fm.num_features, F.shape[1]))
        for s, P in feature_chunks(fm, self.samples):
            b += P.T @ F[s]
        a = self.solve(b / ns, lam)
        return np.linalg.norm(a, axis=0) * math.sqrt(noise_var) / n_hat


def feature_chunks(fm: FeatureMap, X: np.ndarray):
    """``(slice, Φ(X[slice]))`` in chunks; one-hot maps give sparse matrices (``G`` in O(ns·k²))."""
    for start in range(0, X.shape[0], _CHUNK):
        s = slice(start, min(start + _CHUNK, X.shape[0]))
        if isinstance(fm, OneHotFeatureMap):
            idx = fm._flat(X[s])
            rows = np.repeat(np.arange(idx.shape[0]), idx.shape[1])
            P = scipy.sparse.csr_matrix(
                (np.ones(idx.size), (rows, idx.ravel())), shape=(idx.shape[0], fm.num_features)
            )
        else:
            P = fm.transform(X[s])
        yield s, P


def reference_queries(
    lo: np.ndarray, hi: np.ndarray, discrete: set[int]
) -> Callable[[np.ndarray], np.ndarray]:
    """Means, second moments and interior CDF points of every column (at most 512 functions)."""
    d = lo.size
    cols = list(range(d))
    per_col = 2 + _N_CDF_REF
    if d * per_col > _MAX_REF_QUERIES:  # many columns: a public, evenly spaced subset
        cols = sorted(set(np.linspace(0, d - 1, _MAX_REF_QUERIES // per_col).astype(int).tolist()))
    t = np.linspace(0, 1, _N_CDF_REF + 2)[1:-1]

    def ref(X: np.ndarray) -> np.ndarray:
        out = []
        for j in cols:
            u = (X[:, j] - lo[j]) / (hi[j] - lo[j])
            out += [u, u * u]
            if j not in discrete:
                out += [(u[:, None] <= t).astype(np.float64)]
        return np.column_stack(out)

    return ref


def draw_prior(
    prior: Callable[[int, np.random.Generator], np.ndarray] | None,
    n: int,
    rng: np.random.Generator,
    lower: np.ndarray,
    upper: np.ndarray,
    discrete: Mapping[int, np.ndarray],
) -> np.ndarray:
    """``n`` prior samples in the box ``[lower, upper]``: uniform, or ``prior(n, rng)`` checked to
    be finite and inside the box; discrete columns drawn uniformly from their values.

    :raises ValueError: if the prior's points have the wrong shape or leave the box
    """
    d = lower.size
    if prior is None:
        X = rng.uniform(lower, upper, size=(n, d))
    else:
        X = np.array(prior(n, rng), dtype=np.float64)  # a copy: discrete columns are written below
        if X.shape != (n, d):
            raise ValueError(f"prior(n, rng) must return an array of shape ({n}, {d}), got {X.shape}")
        if not np.isfinite(X).all() or (X < lower).any() or (X > upper).any():
            raise ValueError("prior samples must be finite and inside the bounds")
    for j, values in discrete.items():
        X[:, j] = rng.choice(values, size=n)
    return X
