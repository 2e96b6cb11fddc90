"""Low-order moment maps: ``Moments`` (``[x, ‖x‖²]``) and ``RandomQuadratic`` (``(ω_jᵀx)²``).

Proofs: ``docs/features/moments.md`` and ``docs/features/random_quadratic.md``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._fixed import (
    enforce_l1,
    enforce_l2,
    exact_bits,
    exact_matmul,
    quantize_columns,
    quantize_rows,
    rowwise_sq_norm,
)
from .._validate import check_positive_float, check_positive_int, check_seed
from .base import FeatureMap, register_feature_map

__all__ = ["Moments", "RandomQuadratic"]

#: the largest feature value maps to about 2^26 integer units
_RESOLUTION_BITS = 26
#: supported range of a map's feature bound; outside it, rescale the data by a public factor
_MIN_BOUND, _MAX_BOUND = 2.0**-20, 2.0**20


def _frac_bits_for(bound: float, what: str) -> int:
    """``k`` with ``2^25 < bound · 2^k ≤ 2^26``: the largest feature keeps 26 bits.

    :raises ValueError: outside ``[2^-20, 2^20]``; rescale the data by a public factor.
    """
    if not (_MIN_BOUND <= bound <= _MAX_BOUND):
        raise ValueError(
            f"{what} ({bound:g}) must be between 2^-20 and 2^20; rescale the data by a public factor"
        )
    return _RESOLUTION_BITS - math.ceil(math.log2(bound))


def _shift_down(v: Any, k: int) -> Any:
    """``⌊v / 2^k⌋`` for non-negative integers (numpy or Python), any sign of ``k``."""
    return v >> k if k >= 0 else v << -k


def _clip_to_ball(Y: np.ndarray, radius: float) -> np.ndarray:
    """Project rows onto the ball of ``radius`` (a row-wise map). Norms are computed on rows
    scaled by their largest entry, so huge finite values are projected, not lost to overflow;
    non-finite entries become 0 first."""
    Y = np.nan_to_num(Y, nan=0.0, posinf=0.0, neginf=0.0)
    peak = np.abs(Y).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = np.where(peak > 0, Y / peak, 0.0)
        unit_norm = np.sqrt(rowwise_sq_norm(unit))[:, None]  # row-wise deterministic (see _fixed)
        return np.where(peak * unit_norm > radius, unit * (radius / unit_norm), Y)


@register_feature_map
class Moments(FeatureMap):
    r"""First and second moments ``Φ(x) = [y, ‖y‖²]`` with ``y = clip_r(x - c)``.

    ``clip_r`` projects onto the public ball of radius ``r`` (row-wise, so 1-stable); ``c`` is a
    public center (default 0). ``Σ Φ`` and the count answer every squared-ℓ2 distance query:
    ``Σ‖x_i - q‖² = Σ‖y_i‖² - 2⟨Σ y_i, q - c⟩ + n‖q - c‖²``.

    **Sensitivity.** ``‖y‖₂ ≤ r`` gives ``‖y‖₁ ≤ √d·r`` and ``‖Φ(x)‖₁ ≤ √d·r + r²``,
    ``‖Φ(x)‖₂ ≤ √(r² + r⁴)``. The implemented map quantizes ``q_y = trunc(2^k y)``, enforces
    ``‖q_y‖₂² ≤ R²`` with ``R = ⌊2^k r⌋`` in exact integers, and caps
    ``q_s = min(trunc(2^k ‖y‖²), ⌊R²/2^k⌋)``; then ``‖q‖₁ ≤ ⌊√d·R⌋ + ⌊R²/2^k⌋`` and
    ``‖q‖₂² ≤ R² + ⌊R²/2^k⌋²`` exactly (Cauchy–Schwarz on the integers for the first term).
    With ``squared_norm=False`` the map is ``Φ(x) = y`` alone (class means, nearest-mean
    classification): ``‖q‖₁ ≤ ⌊√d·R⌋``, ``‖q‖₂² ≤ R²`` — without the ``r²`` term that dominates
    for large radii.

    :param dim: number of data columns
    :param radius: public norm bound ``r``
    :param center: public center ``c`` (default the origin)
    :param squared_norm: include the ``‖y‖²`` feature (needed for squared-ℓ2 distances)
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Moments(dim=2, radius=5.0)
    >>> fm.transform(np.array([[3.0, 4.0], [6.0, 8.0]])).tolist()
    [[3.0, 4.0, 25.0], [3.0, 4.0, 25.0]]
    >>> round(fm.sensitivity(1), 3)   # √2·5 + 25
    32.071
    >>> round(dps.Moments(dim=2, radius=5.0, squared_norm=False).sensitivity(1), 3)   # √2·5
    7.071
    """

    kernel_name = "first and second moments"

    def __init__(self, dim: int, radius: float, center: Any = None, squared_norm: bool = True) -> None:
        self.dim = check_positive_int(dim, "dim")
        if not isinstance(squared_norm, bool):
            raise ValueError(f"squared_norm ({squared_norm!r}) must be True or False")
        self.squared_norm = squared_norm
        self.radius = check_positive_float(radius, "radius")
        try:
            c = np.zeros(self.dim) if center is None else np.asarray(center, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"center must be {self.dim} finite numbers") from None
        if c.shape != (self.dim,) or not np.isfinite(c).all():
            raise ValueError(f"center must be {self.dim} finite numbers")
        self.center = c
        if self.dim > 1024:
            raise ValueError(f"dim ({self.dim}) must be at most 1024 (exact int64 squared norms)")
        if not (2.0**-10 <= self.radius <= 2.0**10):
            raise ValueError(f"radius ({self.radius:g}) must be between 2^-10 and 2^10; rescale the data")
        self.num_features = self.dim + int(squared_norm)
        # both y (≤ r) and ‖y‖² (≤ r²) keep ≥ 16 bits; the larger of the two gets 26
        self.frac_bits = _frac_bits_for(
            max(self.radius, self.radius**2) if squared_norm else self.radius, "radius"
        )
        self._R = math.floor(math.ldexp(self.radius, self.frac_bits))

    def _params(self) -> dict[str, Any]:
        params = {"dim": self.dim, "radius": self.radius, "center": self.center.tolist()}
        if not self.squared_norm:  # only when off, so earlier specs keep their fingerprints
            params["squared_norm"] = False
        return params

    def transform(self, X: Any) -> np.ndarray:
        Y = _clip_to_ball(self._as_rows(X) - self.center, self.radius)
        if not self.squared_norm:
            return Y
        return np.concatenate([Y, np.sum(Y**2, axis=1, keepdims=True)], axis=1)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        Y = _clip_to_ball(X - self.center, self.radius)
        q = np.trunc(np.ldexp(Y, self.frac_bits)).astype(np.int64)
        R2 = self._R * self._R
        q = enforce_l2(q, R2)
        if not self.squared_norm:
            return q
        # ‖y‖² from the float row (no propagation of the truncation of y), capped at the bound
        sq = np.trunc(np.ldexp(rowwise_sq_norm(Y), self.frac_bits))
        sq = np.minimum(sq, float(_shift_down(R2, self.frac_bits))).astype(np.int64)
        return np.concatenate([q, sq[:, None]], axis=1)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        R2 = self._R * self._R
        sq_max = _shift_down(R2, self.frac_bits) if self.squared_norm else 0
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
        self.dim = check_positive_int(dim, "dim")
        self.num_features = check_positive_int(num_features, "num_features")
        self.radius = check_positive_float(radius, "radius")
        self.seed = check_seed(seed)
        rng = np.random.default_rng(self.seed)
        omega = rng.standard_normal((self.dim, self.num_features)) / math.sqrt(self.num_features)
        self.projections = quantize_columns(omega, exact_bits(self.dim))
        spectral = float(np.linalg.norm(self.projections, 2))
        bound = (
            spectral * spectral * self.radius * self.radius * (1 + 1e-6)
        )  # inf (refused below), not OverflowError
        self.frac_bits = _frac_bits_for(bound, "‖Ω‖₂²·radius² (the feature bound)")
        self._B = math.ceil(math.ldexp(bound, self.frac_bits))

    def _params(self) -> dict[str, Any]:
        return {"dim": self.dim, "num_features": self.num_features, "radius": self.radius, "seed": self.seed}

    def _draws(self) -> list[np.ndarray]:
        return [self.projections]

    def transform(self, X: Any) -> np.ndarray:
        return (_clip_to_ball(self._as_rows(X), self.radius) @ self.projections) ** 2

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        Y = quantize_rows(_clip_to_ball(X, self.radius), exact_bits(self.dim))
        F = exact_matmul(Y, self.projections) ** 2  # exact products: a function of the row alone
        q = np.trunc(np.minimum(np.ldexp(F, self.frac_bits), self._B)).astype(np.int64)
        return enforce_l1(q, self._B)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return self._B if p == 1 else self._B * self._B
