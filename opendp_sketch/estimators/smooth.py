r"""Smooth-kernel densities ``(1/n) Σ_i 1/(1 + ‖x_i − q‖²/h²)`` from Gaussian RFF sketches.

The kernel is a function of ``t = ‖x − q‖²/h²``. On ``t ∈ [0, T]`` the function ``1/(1 + t)`` is
approximated by a short public sum of exponentials ``g(t) = Σ_j c_j e^{−a_j t}`` with
``c_j > 0``, ``a_j > 0`` (:func:`smooth_kernel_terms`). Each term is a Gaussian kernel,
``e^{−a_j ‖x − q‖²/h²} = exp(−‖x − q‖²/(2σ_j²))`` with ``σ_j = h/√(2a_j)``, so

``K̂(q) = Σ_j c_j · KDE_j(q)``, ``KDE_j`` the estimate of a Gaussian :class:`~opendp_sketch.RFF`
sketch of bandwidth ``σ_j``.

:class:`SmoothKernelPlan` builds the ``J`` public maps, :func:`release_smooth_sketches` releases
them as **one** composed OpenDP measurement that spends exactly the given budget, and
:class:`SmoothKDE` answers queries. Error = fit error (certified, :func:`smooth_kernel_terms`) +
random-feature error + DP noise; see ``docs/estimators/smooth_kernels.md``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import scipy.optimize

from .._validate import check_bounds, check_positive_float, check_positive_int, check_seed
from ..features.rff import RFF
from ..sketch import Sketch
from .contract import SketchEstimator, fitted
from .kde import KDE, check_queries

__all__ = [
    "smooth_kernel",
    "smooth_kernel_terms",
    "exp_sum_error_bound",
    "SmoothKernelPlan",
    "SmoothKDE",
]

_MAX_TERMS = 24
_MAX_T = 1e8
#: geometric grid in ``1 + t`` used by the fit (coarse) and the certificate (fine)
_FIT_POINTS, _FINAL_POINTS, _CERT_POINTS = 300, 2000, 20001


def smooth_kernel(x: Any, y: Any, bandwidth: float) -> np.ndarray:
    """``1/(1 + ‖x − y‖²/h²)``, broadcasting over leading axes (the last axis is the point).

    >>> float(smooth_kernel([0.0, 0.0], [3.0, 4.0], bandwidth=5.0))
    0.5
    """
    h = check_positive_float(bandwidth, "bandwidth")
    diff = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    return 1.0 / (1.0 + np.sum(diff * diff, axis=-1) / (h * h))


def _t_grid(t_max: float, points: int) -> np.ndarray:
    t = np.geomspace(1.0, 1.0 + t_max, points) - 1.0
    t[0], t[-1] = 0.0, t_max
    return t


def _exponents(p: np.ndarray, num_terms: int) -> np.ndarray:
    """``a_j = exp(p0 + p1·s + p2·s(1 − s))``, ``s = j/(J − 1)``: a geometric grid, bent."""
    s = np.arange(num_terms) / max(num_terms - 1, 1)
    return np.exp(np.clip(p[0] + p[1] * s + p[2] * s * (1 - s), -700.0, 700.0))


def _minimax_weights(a: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
    """``c ≥ 0`` minimising ``max_t |1/(1+t) − Σ c_j e^{−a_j t}|`` on the grid (a linear program)."""
    f = 1.0 / (1.0 + t)
    E = np.exp(-np.outer(t, a))
    ones = np.ones((t.size, 1))
    lp = scipy.optimize.linprog(
        np.r_[np.zeros(a.size), 1.0],
        A_ub=np.vstack([np.hstack([E, -ones]), np.hstack([-E, -ones])]),
        b_ub=np.r_[f, -f],
        bounds=(0, None),
        method="highs",
    )
    if lp.status == 0:
        return lp.x[: a.size], float(lp.x[-1])
    c, _ = scipy.optimize.nnls(E, f)  # pragma: no cover - HiGHS solves these small LPs
    return c, float(np.abs(E @ c - f).max())  # pragma: no cover


@functools.lru_cache(maxsize=64)
def _fit(num_terms: int, t_max: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Deterministic fit: exponents on a bent geometric grid chosen by Nelder–Mead (inner
    non-negative least squares, scored by the max error), then minimax ``c ≥ 0`` by an LP."""
    t = _t_grid(t_max, _FIT_POINTS)
    f = 1.0 / (1.0 + t)

    def score(p: np.ndarray) -> float:
        E = np.exp(-np.outer(t, _exponents(p, num_terms)))
        c, _ = scipy.optimize.nnls(E, f)
        return float(np.abs(E @ c - f).max())

    starts = [
        np.array([math.log(lo / t_max), math.log(max(top * num_terms / lo, 1.5)), 0.0])
        for lo in (0.1, 0.3, 1.0)
        for top in (0.5, 2.0, 8.0)
    ]
    p0 = min(starts, key=score)
    p = scipy.optimize.minimize(
        score, p0, method="Nelder-Mead", options={"xatol": 1e-3, "fatol": 1e-12, "maxiter": 600}
    ).x
    a = _exponents(p, num_terms)
    t_fine = _t_grid(t_max, _FINAL_POINTS)
    c, err = _minimax_weights(a, t_fine)
    keep = c > 0.05 * err  # a term this small buys nothing but a sketch: drop it and refit
    if not keep.all():
        a = a[keep]
        c, err = _minimax_weights(a, t_fine)
    order = np.argsort(a)
    return tuple(c[order].tolist()), tuple(a[order].tolist())


def exp_sum_error_bound(coefficients: Any, exponents: Any, t_max: float) -> float:
    r"""A certified bound on ``max_{t∈[0,T]} |1/(1+t) − Σ_j c_j e^{−a_j t}|`` (``c_j ≥ 0``).

    The error ``e`` is evaluated on 20 001 points geometric in ``1 + t``. Between two points
    ``|e| ≤ max(|e_i|, |e_{i+1}|) + Δ²/8 · sup|e''|``; since ``f'' = 2/(1+t)³`` and
    ``g'' = Σ c_j a_j² e^{−a_j t}`` are both non-negative and decreasing,
    ``sup|e''| ≤ max(f''(t_i), g''(t_i))``. A relative ``10⁻¹²`` and absolute ``10⁻¹³`` allow for
    float64 evaluation.

    >>> round(exp_sum_error_bound([1.0], [1.0], 10.0), 4)   # e^{-t} vs 1/(1+t): worst near t≈1.3
    0.2036
    """
    c = np.asarray(coefficients, dtype=np.float64).ravel()
    a = np.asarray(exponents, dtype=np.float64).ravel()
    if c.shape != a.shape or c.size == 0 or not (np.isfinite(c).all() and np.isfinite(a).all()):
        raise ValueError("coefficients and exponents must be finite arrays of the same length")
    if (c < 0).any() or (a <= 0).any():
        raise ValueError("coefficients must be >= 0 and exponents > 0")
    t = _t_grid(_t_max(t_max), _CERT_POINTS)
    E = np.exp(-np.outer(t, a))
    err = np.abs(1.0 / (1.0 + t) - E @ c)
    curv = np.maximum(2.0 / (1.0 + t[:-1]) ** 3, E[:-1] @ (c * a * a))
    bound = np.maximum(err[:-1], err[1:]) + np.diff(t) ** 2 / 8.0 * curv
    return float(bound.max()) * (1 + 1e-12) + 1e-13


def _t_max(t_max: Any) -> float:
    v = check_positive_float(t_max, "t_max")
    if v > _MAX_T:
        raise ValueError(f"t_max ({t_max!r}) must be at most {_MAX_T:g}")
    return v


def smooth_kernel_terms(num_terms: int = 8, t_max: float = 100.0) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Public ``c_j > 0``, ``a_j > 0`` with ``1/(1+t) ≈ Σ_j c_j e^{−a_j t}`` on ``[0, T]``.

    Fit: exponents on a geometric grid (bent by one extra parameter) chosen by Nelder–Mead,
    minimax non-negative weights by a linear program on 2 000 points; terms whose weight is
    below 5 % of the error are dropped (so at most ``num_terms`` terms come back). Deterministic
    and cached. Beyond ``T`` both functions are positive and decreasing, so for ``t ≥ T`` the
    error is at most ``max(1/(1+T), g(T))`` (:attr:`SmoothKernelPlan.tail_bound`).

    :param num_terms: ``J``, at most 24
    :param t_max: ``T``, the largest squared scaled distance ``‖x − q‖²/h²`` that matters,
        e.g. the squared box diameter over ``h²``
    :return: ``(c, a, max_error)`` with ``max_error`` the certified bound of
        :func:`exp_sum_error_bound`
    :raises ValueError: on a bad ``num_terms`` or ``t_max``

    >>> c, a, err = smooth_kernel_terms(num_terms=6, t_max=100.0)
    >>> c.shape == a.shape, bool((c > 0).all() and (a > 0).all()), err < 1e-3
    (True, True, True)
    """
    num_terms = check_positive_int(num_terms, "num_terms")
    if num_terms > _MAX_TERMS:
        raise ValueError(f"num_terms ({num_terms}) must be at most {_MAX_TERMS}")
    t_max = _t_max(t_max)
    c, a = _fit(num_terms, t_max)
    c_arr, a_arr = np.array(c), np.array(a)
    return c_arr, a_arr, exp_sum_error_bound(c_arr, a_arr, t_max)


class SmoothKernelPlan:
    r"""The public ingredients of a smooth-kernel sketch: ``J`` Gaussian RFF maps and weights.

    Term ``j`` is ``RFF(dim, num_features, bandwidth=h/√(2a_j), kernel="gaussian", seed=seed + j)``
    with weight ``c_j`` from :func:`smooth_kernel_terms`. The approximated kernel
    ``Σ_j c_j exp(−a_j‖x − y‖²/h²)`` is within :attr:`max_error` of ``1/(1 + ‖x − y‖²/h²)``
    wherever ``‖x − y‖²/h² ≤ T``, and within :attr:`tail_bound` beyond.

    :param dim: number of data columns (after any projection)
    :param bandwidth: ``h`` (public, in data units)
    :param num_features: ``m`` of every RFF map (even)
    :param num_terms: ``J`` (at most; tiny terms are dropped)
    :param t_max: ``T``; ``None`` takes ``diameter²/h²`` of ``bounds`` (no tail at all), or 100
    :param bounds: optional public box, used only for the default ``t_max``
    :param seed: seed of the first map (term ``j`` uses ``seed + j``)
    :ivar coefficients: ``c`` (``J``,)
    :ivar exponents: ``a`` (``J``,)
    :ivar bandwidths: ``σ_j = h/√(2a_j)``
    :ivar feature_maps: the ``J`` :class:`~opendp_sketch.RFF` maps
    :ivar max_error: certified fit error on ``[0, T]``
    :ivar tail_bound: bound on the fit error for ``t > T``

    >>> plan = SmoothKernelPlan(dim=2, bandwidth=0.2, num_features=100, num_terms=6, t_max=50.0)
    >>> len(plan.feature_maps) == plan.coefficients.size, plan.feature_maps[0].dim
    (True, 2)
    >>> float(plan.kernel([0.0, 0.0], [0.2, 0.0]))
    0.5
    >>> abs(float(plan.approx_kernel([0.0, 0.0], [0.2, 0.0])) - 0.5) <= plan.max_error
    True
    """

    def __init__(
        self,
        dim: int,
        bandwidth: float,
        num_features: int = 1000,
        num_terms: int = 8,
        t_max: float | None = None,
        bounds: Any = None,
        seed: int = 0,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.bandwidth = check_positive_float(bandwidth, "bandwidth")
        self.num_features = check_positive_int(num_features, "num_features")
        self.seed = check_seed(seed)
        if t_max is None:
            if bounds is None:
                t_max = 100.0
            else:
                lo, hi = check_bounds(bounds, self.dim)
                t_max = min(float(np.sum((hi - lo) ** 2)) / self.bandwidth**2, _MAX_T)
        self.t_max = _t_max(t_max)
        self.num_terms = check_positive_int(num_terms, "num_terms")
        c, a, _ = smooth_kernel_terms(self.num_terms, self.t_max)
        self._set_terms(c, a)

    def _set_terms(self, c: Any, a: Any) -> None:
        """Weights, exponents and everything derived from them (the certificate, the maps)."""
        self.max_error = exp_sum_error_bound(c, a, self.t_max)  # also validates c ≥ 0, a > 0
        self.coefficients = np.asarray(c, dtype=np.float64).ravel()
        self.exponents = np.asarray(a, dtype=np.float64).ravel()
        g_at_t = float(self.coefficients @ np.exp(-self.exponents * self.t_max))
        self.tail_bound = max(1.0 / (1.0 + self.t_max), g_at_t)
        self.bandwidths = self.bandwidth / np.sqrt(2.0 * self.exponents)
        self.feature_maps = [
            RFF(self.dim, self.num_features, bandwidth=float(s), kernel="gaussian", seed=self.seed + j)
            for j, s in enumerate(self.bandwidths)
        ]

    def kernel(self, x: Any, y: Any) -> np.ndarray:
        """The smooth kernel ``1/(1 + ‖x − y‖²/h²)`` (broadcasting)."""
        return smooth_kernel(x, y, self.bandwidth)

    def approx_kernel(self, x: Any, y: Any) -> np.ndarray:
        """``Σ_j c_j exp(−a_j‖x − y‖²/h²)``: what the sketches estimate (broadcasting)."""
        return _exp_sum_kernel(x, y, self.coefficients, self.bandwidths)

    def kde(self, sketches: Sequence[Sketch]) -> SmoothKDE:
        """:class:`SmoothKDE` of sketches released for this plan (their maps are checked)."""
        if len(sketches) != len(self.feature_maps) or any(
            not isinstance(s, Sketch) or s.feature_map != fm for s, fm in zip(sketches, self.feature_maps)
        ):
            raise ValueError(
                f"sketches must be the {len(self.feature_maps)} sketches of this plan's maps, in order"
            )
        return SmoothKDE(sketches, self.coefficients, bandwidth=self.bandwidth)

    def budget_weights(
        self, mechanism: Literal["laplace", "gaussian"], split: Literal["optimal", "even"] = "optimal"
    ) -> np.ndarray:
        r"""Shares ``w_j`` (summing to 1) of the privacy loss (ε or ρ) per sketch.

        ``"optimal"`` minimises the noise variance of ``Σ c_j KDE_j``: with Laplace noise the
        variance is ``∝ Σ c_j² m/ε_j²``, minimised by ``ε_j ∝ c_j^{2/3}``; with Gaussian noise
        (zCDP) it is ``∝ Σ c_j²/ρ_j``, minimised by ``ρ_j ∝ c_j``, which gives the noise of a
        *single* Gaussian KDE at the full ``ρ`` times ``Σ c_j ≈ 1``. ``"even"``: ``1/J`` each.
        """
        if split == "even":
            w = np.ones_like(self.coefficients)
        elif split == "optimal":
            if mechanism not in ("laplace", "gaussian"):
                raise ValueError(f"mechanism ({mechanism!r}) must be 'laplace' or 'gaussian'")
            w = self.coefficients ** (2.0 / 3.0) if mechanism == "laplace" else self.coefficients.copy()
        else:
            raise ValueError(f"split ({split!r}) must be 'optimal' or 'even'")
        return w / w.sum()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready spec with the fitted ``c`` and ``a`` stored (not refitted on load)."""
        return {
            "kind": "SmoothKernelPlan",
            "params": {
                "dim": self.dim,
                "bandwidth": self.bandwidth,
                "num_features": self.num_features,
                "num_terms": self.num_terms,
                "t_max": self.t_max,
                "seed": self.seed,
            },
            "coefficients": self.coefficients.tolist(),
            "exponents": self.exponents.tolist(),
        }

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> SmoothKernelPlan:
        """Rebuild from :meth:`to_dict`, keeping the stored ``c`` and ``a`` (the fit may differ
        slightly across scipy versions; the released sketches' bandwidths depend on ``a``)."""
        if not isinstance(spec, dict) or spec.get("kind") != "SmoothKernelPlan":
            raise ValueError("spec must be a dict with kind 'SmoothKernelPlan'")
        plan = cls.__new__(cls)
        p = spec["params"]
        plan.dim = check_positive_int(p["dim"], "dim")
        plan.bandwidth = check_positive_float(p["bandwidth"], "bandwidth")
        plan.num_features = check_positive_int(p["num_features"], "num_features")
        plan.num_terms = check_positive_int(p["num_terms"], "num_terms")
        plan.t_max = _t_max(p["t_max"])
        plan.seed = check_seed(p["seed"])
        plan._set_terms(spec["coefficients"], spec["exponents"])
        return plan

    def __repr__(self) -> str:
        return (
            f"SmoothKernelPlan(dim={self.dim}, bandwidth={self.bandwidth:g}, terms={self.coefficients.size}, "
            f"t_max={self.t_max:g}, max_error={self.max_error:.2e})"
        )


def _exp_sum_kernel(x: Any, y: Any, c: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    diff = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    sq = np.sum(diff * diff, axis=-1)[..., None]
    return np.sum(c * np.exp(-0.5 * sq / sigmas**2), axis=-1)


class SmoothKDE(SketchEstimator):
    r"""``K̂(q) = Σ_j c_j · KDE_j(q)``, estimating ``(1/n) Σ_i Σ_j c_j exp(−‖x_i − q‖²/(2σ_j²))``.

    Every ``KDE_j`` is read with one pooled count ``n̂`` (the inverse-variance-weighted mean of
    the ``J`` noisy counts, floored at 1), so ``K̂(q) = Σ_j c_j ⟨Φ_j(q), S_j⟩ / (m'_j n̂)``.
    Post-processing only.

    :param sketches: released Gaussian :class:`~opendp_sketch.RFF` sketches, one per term, all
        of the same dimension
    :param coefficients: ``c_j`` (finite, one per sketch)
    :param bandwidth: ``h`` of the smooth kernel, needed only by :meth:`kernel`
    :raises ValueError: on a length mismatch, non-RFF or non-Gaussian sketches, mixed
        dimensions, or non-finite coefficients

    >>> import numpy as np
    >>> from opendp_sketch.sketch import Sketch
    >>> plan = SmoothKernelPlan(dim=1, bandwidth=0.1, num_features=400, num_terms=4, t_max=100.0)
    >>> X = np.random.default_rng(0).uniform(0, 1, size=(500, 1))
    >>> exact = [Sketch(fm, np.array(fm.fixed_sum(X)), 500) for fm in plan.feature_maps]
    >>> kde = plan.kde(exact)
    >>> kde([[0.5], [0.9]]).shape
    (2,)
    """

    #: the fitted attributes under scikit-learn's trailing-underscore names
    kdes_ = fitted("kdes")
    dim_ = fitted("dim")
    sigmas_ = fitted("sigmas")

    def __init__(
        self,
        sketches: Sequence[Sketch] | None = None,
        coefficients: Any = None,
        bandwidth: float | None = None,
    ) -> None:
        if coefficients is None:
            raise ValueError("coefficients are needed: one finite number per sketch")
        self._start(sketches, coefficients=coefficients, bandwidth=bandwidth)

    def _fit(self, sketches: Sequence[Sketch], coefficients: Any, bandwidth: float | None = None) -> None:
        if isinstance(sketches, Sketch) or not isinstance(sketches, Sequence) or len(sketches) == 0:
            raise ValueError("sketches must be a non-empty list of Sketch objects")
        c = np.asarray(coefficients, dtype=np.float64).ravel()
        if c.size != len(sketches) or not np.isfinite(c).all():
            raise ValueError(
                f"coefficients must be {len(sketches)} finite numbers, got {np.shape(coefficients)}"
            )
        self.kdes = [KDE(s) for s in sketches]
        for kde in self.kdes:
            fm = kde.feature_map
            if not isinstance(fm, RFF) or fm.kernel != "gaussian":
                raise ValueError(f"SmoothKDE needs Gaussian RFF sketches, got {fm!r}")
        dims = {k.dim for k in self.kdes}
        if len(dims) != 1:
            raise ValueError(f"sketches must all have the same dimension, got {sorted(dims)}")
        self.dim = dims.pop()
        self.coefficients = c
        self.bandwidth = None if bandwidth is None else check_positive_float(bandwidth, "bandwidth")
        self.sigmas = np.array([getattr(k.feature_map, "bandwidth", np.nan) for k in self.kdes])
        counts = np.array([float(s.count) for s in sketches])
        var = np.array([s.count_variance for s in sketches])
        if (var <= 0).any():  # a noise-free count is exact: use it
            self.n_hat = float(max(counts[var <= 0][0], 1.0))
        else:
            self.n_hat = float(max(np.sum(counts / var) / np.sum(1.0 / var), 1.0))
        self.sketches = list(sketches)

    def __call__(self, queries: Any, *, return_std: bool = False) -> Any:
        """``K̂(q)`` per query row (``(q,)``); ``return_std`` adds the DP-noise std."""
        Q = check_queries(queries, self.dim)
        out = np.zeros(Q.shape[0])
        for c, kde in zip(self.coefficients, self.kdes):
            out += c * kde(Q) * (kde.n_hat / self.n_hat)
        if not return_std:
            return out
        return out, np.full(Q.shape[0], self.noise_std())

    def noise_std(self) -> float:
        """Std of the DP-noise term of one estimate: ``√(Σ_j c_j² σ_j²)`` with ``σ_j`` the noise
        std of ``KDE_j`` read with the pooled count."""
        parts = [c * kde.noise_std() * kde.n_hat / self.n_hat for c, kde in zip(self.coefficients, self.kdes)]
        return float(np.sqrt(np.sum(np.square(parts))))

    def approx_kernel(self, x: Any, y: Any) -> np.ndarray:
        """``Σ_j c_j exp(−‖x − y‖²/(2σ_j²))``, the kernel this estimate targets."""
        return _exp_sum_kernel(x, y, self.coefficients, self.sigmas)

    def kernel(self, x: Any, y: Any) -> np.ndarray:
        """The smooth kernel ``1/(1 + ‖x − y‖²/h²)`` (needs ``bandwidth=``)."""
        if self.bandwidth is None:
            raise ValueError("kernel() needs the smooth kernel's bandwidth: pass bandwidth=h")
        return smooth_kernel(x, y, self.bandwidth)
