"""Low-order moment maps: ``Moments`` (``[x, ‖x‖²]``) and ``RandomQuadratic`` (``(ω_jᵀx)²``).

Proofs: ``docs/features/moments.md`` and ``docs/features/random_quadratic.md``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._fixed import enforce_l1, enforce_l2
from .base import (
    FeatureMap,
    _check_positive_float,
    _check_positive_int,
    _check_seed,
    register_feature_map,
)

__all__ = ["Moments", "RandomQuadratic"]

#: integer resolution of a bounded feature: its bound maps to about 2^20 units
_RESOLUTION_BITS = 20


def _frac_bits_for(bound: float) -> int:
    """``k`` with ``bound · 2^k ≤ 2^20`` (may be negative for huge bounds)."""
    return _RESOLUTION_BITS - math.ceil(math.log2(bound))


def _shift_down(v: Any, k: int) -> Any:
    """``⌊v / 2^k⌋`` for non-negative integers (numpy or Python), any sign of ``k``."""
    return v >> k if k >= 0 else v << -k


def _clip_to_ball(Y: np.ndarray, radius: float) -> np.ndarray:
    norms = np.linalg.norm(Y, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > radius, radius / norms, 1.0)
    return np.nan_to_num(Y * factor, nan=0.0, posinf=0.0, neginf=0.0)


@register_feature_map
class Moments(FeatureMap):
    r"""First and second moments ``Φ(x) = [y, ‖y‖²]`` with ``y = clip_r(x - c)``.

    ``clip_r`` projects onto the public ball of radius ``r`` (row-wise, so 1-stable); ``c`` is a
    public center (default 0). ``Σ Φ`` and the count answer every squared-ℓ2 distance query:
    ``Σ‖x_i - q‖² = Σ‖y_i‖² - 2⟨Σ y_i, q - c⟩ + n‖q - c‖²``.

    **Sensitivity.** ``‖y‖₂ ≤ r`` gives ``‖y‖₁ ≤ √d·r`` and ``‖Φ(x)‖₁ ≤ √d·r + r²``,
    ``‖Φ(x)‖₂ ≤ √(r² + r⁴)``. The implemented map quantizes ``q_y = trunc(2^k y)``, enforces
    ``S = ‖q_y‖² ≤ R²`` with ``R = ⌊2^k r⌋`` in exact integers, and uses ``q_s = ⌊S / 2^k⌋`` for
    ``‖y‖²``; then ``‖q‖₁ ≤ ⌊√d·R⌋ + ⌊R²/2^k⌋`` and ``‖q‖₂² ≤ R² + ⌊R²/2^k⌋²`` exactly.

    :param dim: number of data columns
    :param radius: public norm bound ``r``
    :param center: public center ``c`` (default the origin)
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Moments(dim=2, radius=5.0)
    >>> fm.transform(np.array([[3.0, 4.0], [6.0, 8.0]])).tolist()
    [[3.0, 4.0, 25.0], [3.0, 4.0, 25.0]]
    >>> round(fm.sensitivity(1), 3)   # √2·5 + 25
    32.071
    """

    kernel_name = "first and second moments"

    def __init__(self, dim: int, radius: float, center: Any = None) -> None:
        self.dim = _check_positive_int(dim, "dim")
        self.radius = _check_positive_float(radius, "radius")
        c = np.zeros(self.dim) if center is None else np.asarray(center, dtype=np.float64)
        if c.shape != (self.dim,) or not np.isfinite(c).all():
            raise ValueError(f"center must be {self.dim} finite numbers")
        self.center = c
        self.num_features = self.dim + 1
        self.frac_bits = _frac_bits_for(max(self.radius, 1.0))
        self._R = math.floor(math.ldexp(self.radius, self.frac_bits))

    def _params(self) -> dict[str, Any]:
        return {"dim": self.dim, "radius": self.radius, "center": self.center.tolist()}

    def transform(self, X: Any) -> np.ndarray:
        Y = _clip_to_ball(self._as_rows(X) - self.center, self.radius)
        return np.concatenate([Y, np.sum(Y**2, axis=1, keepdims=True)], axis=1)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        Y = _clip_to_ball(X - self.center, self.radius)
        q = np.trunc(np.ldexp(Y, self.frac_bits)).astype(np.int64)
        q = enforce_l2(q, self._R * self._R)
        sq = np.einsum("ij,ij->i", q, q)  # exact int64: |q| ≤ 2^20, d·2^40 < 2^63 for d < 2^22
        return np.concatenate([q, _shift_down(sq, self.frac_bits)[:, None]], axis=1)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        R2 = self._R * self._R
        sq_max = _shift_down(R2, self.frac_bits)
        if p == 1:
            return math.isqrt(self.dim * R2) + sq_max
        return R2 + sq_max * sq_max


@register_feature_map
class RandomQuadratic(FeatureMap):
    r"""Random quadratic features ``Φ(x)_j = (ω_jᵀy)²`` with ``y = clip_r(x)``, for compressive PCA.

    ``ω_j ~ N(0, I/m)`` (public, seeded), so ``Σ_j Φ(x)_j ≈ ‖y‖²`` and ``E[Φ] = tr``-type
    projections of the second-moment matrix.

    **Sensitivity.** Entries are non-negative and ``Σ_j (ω_jᵀy)² = ‖Ωᵀy‖² ≤ ‖Ω‖₂²·r²``
    (spectral norm), so ``‖Φ(x)‖₂ ≤ ‖Φ(x)‖₁ ≤ ‖Ω‖₂² r²``. The code states the integer bound
    ``B = ⌈2^k·‖Ω‖₂²·r²·(1 + 10⁻⁶)⌉`` (margin for the SVD's rounding) and enforces
    ``Σ_j q_j ≤ B`` on the integers ``q_j = trunc(2^k Φ_j) ≥ 0`` it sums.

    :param dim: number of data columns
    :param num_features: ``m``
    :param radius: public norm bound ``r`` (default 1)
    :param seed: seed of ``Ω``
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RandomQuadratic(dim=3, num_features=20, seed=0)
    >>> fm.transform(np.eye(3)).shape
    (3, 20)
    >>> bool(fm.sensitivity(1) >= fm.transform(np.eye(3)).sum(axis=1).max())
    True
    """

    kernel_name = "random quadratic projections"

    def __init__(self, dim: int, num_features: int, radius: float = 1.0, seed: int = 0) -> None:
        self.dim = _check_positive_int(dim, "dim")
        self.num_features = _check_positive_int(num_features, "num_features")
        self.radius = _check_positive_float(radius, "radius")
        self.seed = _check_seed(seed)
        rng = np.random.default_rng(self.seed)
        self.projections = rng.standard_normal((self.dim, self.num_features)) / math.sqrt(self.num_features)
        bound = float(np.linalg.norm(self.projections, 2)) ** 2 * self.radius**2 * (1 + 1e-6)
        self.frac_bits = _frac_bits_for(max(bound, 1.0))
        self._B = math.ceil(math.ldexp(bound, self.frac_bits))

    def _params(self) -> dict[str, Any]:
        return {"dim": self.dim, "num_features": self.num_features, "radius": self.radius, "seed": self.seed}

    def _draws(self) -> list[np.ndarray]:
        return [self.projections]

    def transform(self, X: Any) -> np.ndarray:
        return (_clip_to_ball(self._as_rows(X), self.radius) @ self.projections) ** 2

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        F = (_clip_to_ball(X, self.radius) @ self.projections) ** 2
        q = np.trunc(np.minimum(np.ldexp(F, self.frac_bits), self._B)).astype(np.int64)
        return enforce_l1(q, self._B)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return self._B if p == 1 else self._B * self._B


