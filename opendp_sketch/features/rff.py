"""Random Fourier features: ``RFF`` (cos/sin pairs) and ``QuantizedRFF`` (one-bit, dithered).

Proofs of the sensitivities: ``docs/features/rff.md`` and ``docs/features/quantized_rff.md``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._fixed import exact_bits, exact_matmul, quantize_columns, quantize_rows
from .._validate import check_positive_float, check_positive_int, check_seed
from . import base
from .base import FeatureMap, register_feature_map, scratch_array

__all__ = ["RFF", "QuantizedRFF"]

_KERNELS = ("gaussian", "laplacian")
#: fixed-point fraction bits of RFF features (|cos|, |sin| <= 1)
RFF_FRAC_BITS = 20
#: public shrink γ = 1 - 2^-12: leaves room for float32 rounding so the cheap check certifies
RFF_GAIN = 1.0 - 2.0**-12


def _draw_frequencies(dim: int, count: int, bandwidth: float, kernel: str, seed: int) -> np.ndarray:
    """Public frequencies, each column rounded to :func:`exact_bits` significant bits so that
    phases ``Ωᵀx`` of quantized rows are exact in float64 (see :mod:`opendp_sketch._fixed`)."""
    if not 2.0**-200 <= bandwidth <= 2.0**200:
        raise ValueError(f"bandwidth ({bandwidth:g}) must be between 2^-200 and 2^200")
    rng = np.random.default_rng(seed)
    if kernel == "gaussian":
        omega = rng.standard_normal((dim, count)) / bandwidth
    else:
        omega = rng.standard_cauchy((dim, count)) / bandwidth
    return quantize_columns(omega, exact_bits(dim))


def _rounded_rows(X: np.ndarray) -> np.ndarray:
    """``quantize_rows(X, exact_bits(d))`` in per-thread scratch (Fortran order: fast to round)."""
    n, d = X.shape
    return quantize_rows(X, exact_bits(d), out=scratch_array("rff.rows", (d, n)).T)


def _exact_phases(Xq: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Exact float64 ``Xq @ Ω`` of rounded rows, in per-thread scratch: a function of each row
    alone, whatever BLAS does (the add/remove-one-row argument needs that)."""
    return exact_matmul(Xq, omega, out=scratch_array("rff.phase64", (Xq.shape[0], omega.shape[1])))


def _phases(X: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """Exact float64 ``Xq @ Ω`` with ``Xq`` the row-wise rounded data (:func:`_exact_phases`)."""
    return _exact_phases(_rounded_rows(X), omega)


def _check_kernel(kernel: str) -> str:
    if kernel not in _KERNELS:
        raise ValueError(f"kernel ({kernel!r}) must be one of {_KERNELS}")
    return kernel


def _kernel_value(kernel: str, diff: np.ndarray, bandwidth: float) -> np.ndarray:
    if kernel == "gaussian":
        return np.exp(-0.5 * np.sum(diff**2, axis=-1) / bandwidth**2)
    return np.exp(-np.sum(np.abs(diff), axis=-1) / bandwidth)


@register_feature_map
class RFF(FeatureMap):
    r"""Random Fourier features ``Φ(x) = [cos(Ωᵀx), sin(Ωᵀx)] ∈ R^m``, ``m = 2m'``.

    ``(1/m')⟨Φ(x), Φ(y)⟩`` is an unbiased estimate of a shift-invariant kernel:

    * ``kernel="gaussian"``: ``ω ~ N(0, σ⁻² I)`` and ``k(x, y) = exp(-‖x-y‖²/(2σ²))``;
    * ``kernel="laplacian"``: ``ω_i ~ Cauchy(0, 1/σ)`` and ``k(x, y) = exp(-‖x-y‖₁/σ)``.

    **Sensitivity.** Each pair satisfies ``cos² + sin² = 1``, so ``‖Φ(x)‖₂ = √m'`` and
    ``‖Φ(x)‖₁ ≤ √2·m'``. The implemented map computes the phases ``Ωᵀx`` exactly in float64
    from the row rounded to ``exact_bits(d)`` (21–26) significant bits (frequencies are stored
    rounded the same way, so a row's result never depends on the rows around it), takes float32
    ``cos``/``sin``, quantizes
    ``γ·cos`` and ``γ·sin`` to integers ``q = trunc(2^20·γ·value)`` and *certifies* every pair:
    ``q_c² + q_s² ≤ 2^40``. A float32 check proves it for the whole chunk at once; any pair it
    cannot certify is shrunk in exact integer arithmetic. Cauchy–Schwarz on each pair then
    gives ``|q_c| + |q_s| ≤ √2·2^20``. Hence ``‖q(x)‖₂² ≤ m'·4^20`` and
    ``‖q(x)‖₁ ≤ ⌊√2·m'·2^20⌋`` hold for the integers actually summed (``docs/features/rff.md``).

    :param dim: number of data columns ``d``
    :param num_features: ``m``, an even number (``m/2`` frequencies)
    :param bandwidth: kernel bandwidth ``σ`` (public)
    :param kernel: ``"gaussian"`` or ``"laplacian"``
    :param seed: seed of the public frequencies
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RFF(dim=2, num_features=8, bandwidth=0.5, seed=0)
    >>> fm.transform(np.zeros((3, 2))).shape
    (3, 8)
    >>> round(fm.sensitivity(1), 4), round(fm.sensitivity(2), 4)   # √2·m' and √m', m' = 4
    (5.6569, 2.0)
    """

    kernel_name = "gaussian / laplacian (shift-invariant)"

    def __init__(
        self,
        dim: int,
        num_features: int,
        bandwidth: float = 1.0,
        kernel: Literal["gaussian", "laplacian"] = "gaussian",
        seed: int = 0,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        m = check_positive_int(num_features, "num_features")
        if m % 2:
            raise ValueError(f"num_features ({m}) must be even: features come in cos/sin pairs")
        self.num_features = m
        self.num_frequencies = m // 2
        self.bandwidth = check_positive_float(bandwidth, "bandwidth")
        self.kernel = _check_kernel(kernel)
        self.seed = check_seed(seed)
        self.frequencies = _draw_frequencies(
            self.dim, self.num_frequencies, self.bandwidth, self.kernel, self.seed
        )
        self.frac_bits = RFF_FRAC_BITS
        self.gain = RFF_GAIN

    def _params(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "num_features": self.num_features,
            "bandwidth": self.bandwidth,
            "kernel": self.kernel,
            "seed": self.seed,
        }

    def _draws(self) -> list[np.ndarray]:
        return [self.frequencies]

    def transform(self, X: Any) -> np.ndarray:
        Z = self._as_rows(X) @ self.frequencies
        return np.concatenate([np.cos(Z), np.sin(Z)], axis=1)

    def kernel_value(self, x: Any, y: Any) -> np.ndarray:
        """The kernel ``k(x, y)`` that ``(1/m')⟨Φ(x), Φ(y)⟩`` estimates (broadcasting rows)."""
        return _kernel_value(self.kernel, np.asarray(x, float) - np.asarray(y, float), self.bandwidth)

    # -- fixed point ------------------------------------------------------------------------
    def _pairs(self, Xq: np.ndarray) -> np.ndarray:
        """Certified integer pairs of rounded rows: ``int32`` ``(2, n, m')``, cos then sin."""
        return certified_pairs(_exact_phases(Xq, self.frequencies), self.gain, self.frac_bits)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        q = self._pairs(_rounded_rows(X))
        return np.concatenate([q[0], q[1]], axis=1, dtype=np.int64)

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        # rows are rounded for the whole chunk (few numpy calls); the m'-wide work runs on tiles
        # of rows small enough to stay in cache
        Xq = _rounded_rows(X)
        tile = max(16, base.TILE_ENTRIES // self.num_frequencies)
        total = np.zeros(self.num_features, dtype=np.int64)
        for s in range(0, Xq.shape[0], tile):
            Z = _exact_phases(Xq[s : s + tile], self.frequencies)
            total += _certified_pair_sums(Z, self.gain, self.frac_bits)
        return total

    def _row_width(self) -> int:
        # a chunk holds the clipped and the rounded rows; the m'-wide arrays are per tile
        return 2 * self.dim

    def _int_bound(self, p: Literal[1, 2]) -> int:
        one = 1 << self.frac_bits
        if p == 1:
            # Σ_j |q_c|+|q_s| <= Σ_j √2·√(q_c²+q_s²) <= √2·m'·2^k
            return math.isqrt(2 * (self.num_frequencies * one) ** 2)
        return self.num_frequencies * one * one


def certified_pairs(Z: np.ndarray, gain: float, frac_bits: int) -> np.ndarray:
    """``q_c = trunc(fl(γ·2^k·cos z))`` and ``q_s = trunc(fl(γ·2^k·sin z))`` with ``z = fl32(Z)``
    the float64 phases rounded to float32, as ``int32`` ``(2, *Z.shape)`` in per-thread scratch,
    every pair certified ``q_c² + q_s² ≤ 4^k``. Proof: ``docs/fixed_point.md#the-rff-pair-certificate``.

    The float32 certificate decides for the whole chunk; pairs it cannot certify (NaN from a
    phase beyond the float32 range) go through :func:`_exact_pair_fix` alone, so such a chunk
    costs about one extra pass, not a second evaluation. ``Z`` is left as it is.
    """
    ab = scratch_array("rff.scaled", (2, *Z.shape), np.float32)
    z32 = scratch_array("rff.phase32", Z.shape, np.float32)
    t = scratch_array("rff.norm2", Z.shape, np.float32)
    q = scratch_array("rff.pairs", ab.shape, np.int32)
    ok = _scaled_certified(Z, ab, z32, t, gain, frac_bits)
    _cast_pairs(ab, t, q, ok, frac_bits)
    return q


def _certified_pair_sums(Z: np.ndarray, gain: float, frac_bits: int) -> np.ndarray:
    """``int64`` column sums ``[Σ q_c, Σ q_s]`` of :func:`certified_pairs` of ``Z`` (the same
    integers, row by row), computed in ``Z``'s own memory: ``Z`` (C-contiguous float64) is
    overwritten.

    When the chunk is certified (every finite phase), the float32-to-int32 truncation happens
    inside the ``int32`` column sums (the reduction casts element by element, then adds exact
    integers), so no integer array is written; otherwise the pairs are cast and repaired exactly
    as in :func:`certified_pairs` and then summed.
    """
    # Z's bytes hold the float32 pairs once the float32 phases are taken (Z is dead by then)
    ab = Z.reshape(-1).view(np.float32).reshape(2, *Z.shape)
    z32 = scratch_array("rff.phase32", Z.shape, np.float32)
    t = scratch_array("rff.norm2", Z.shape, np.float32)
    if _scaled_certified(Z, ab, z32, t, gain, frac_bits):
        return _pair_sums(ab, frac_bits)
    q = scratch_array("rff.pairs", ab.shape, np.int32)
    _cast_pairs(ab, t, q, False, frac_bits)
    return _pair_sums(q, frac_bits)


def _scaled_certified(
    Z: np.ndarray, ab: np.ndarray, z32: np.ndarray, t: np.ndarray, gain: float, frac_bits: int
) -> bool:
    """Fill ``ab`` with ``a = fl(γ·2^k·cos z)``, ``b = fl(γ·2^k·sin z)``, ``z = fl32(Z)``, and ``t``
    with ``fl(fl(a·a) + fl(b·b))``; return the float32 certificate ``max t ≤ 4^k(1 - 2^-20)``
    for the whole array (``False`` if any ``t`` exceeds it or is NaN).

    ``z32`` is scratch of ``Z``'s shape (it also holds ``b·b``); ``ab`` may share ``Z``'s memory:
    ``Z`` is read once, into ``z32``, before ``ab`` is written.
    """
    # an infinite phase gives NaN here; the caller repairs such pairs, so no warning
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(z32, Z, casting="same_kind")  # the float32 rounding of every phase, once
        np.cos(z32, out=ab[0])
        np.sin(z32, out=ab[1])
        ab *= np.float32(math.ldexp(gain, frac_bits))
        # fl(a²+b²) >= (a²+b²)(1-2^-23) in float32, so fl(...) <= 4^k(1-2^-20) proves a²+b² <= 4^k
        np.multiply(ab[0], ab[0], out=t)
        np.multiply(ab[1], ab[1], out=z32)
        t += z32
    return bool(t.max(initial=0.0) <= _pair_limit(frac_bits))


def _pair_limit(frac_bits: int) -> np.float32:
    """The float32 certificate's threshold ``4^k(1 - 2^-20)`` (exact in float32)."""
    return np.float32(math.ldexp(1.0 - 2.0**-20, 2 * frac_bits))


def _cast_pairs(ab: np.ndarray, t: np.ndarray, q: np.ndarray, certified: bool, frac_bits: int) -> None:
    """``q = trunc(ab)`` (float32 -> int32 truncates toward zero: ``|q| ≤ |a|``); unless the whole
    array is ``certified``, the pairs whose own ``t`` fails the certificate are repaired by
    :func:`_exact_pair_fix`."""
    with np.errstate(invalid="ignore"):  # a NaN's garbage cast is replaced below
        np.copyto(q, ab, casting="unsafe")
    if certified:
        return
    bad = np.flatnonzero(~(t.reshape(-1) <= _pair_limit(frac_bits)))  # NaN compares False: fixed too
    qa, qb = _exact_pair_fix(ab[0].reshape(-1)[bad], ab[1].reshape(-1)[bad], frac_bits)
    q[0].reshape(-1)[bad] = qa
    q[1].reshape(-1)[bad] = qb


def _pair_sums(q: np.ndarray, frac_bits: int) -> np.ndarray:
    """``int64`` column sums ``[Σ trunc(q_c), Σ trunc(q_s)]`` of pairs ``q`` (``(2, n, r)``, ``int32``
    or certified float32, ``|q| ≤ 2^k``): each entry is truncated to ``int32`` (a no-op for
    integers) inside the reduction, blocks of ``2^(30-k)`` rows are summed in ``int32`` (at most
    ``2^30``: exact), then in ``int64``."""
    step = 1 << (30 - frac_bits)
    total = np.zeros(q.shape[::2], dtype=np.int64)
    for s in range(0, q.shape[1], step):
        total += np.add.reduce(q[:, s : s + step], axis=1, dtype=np.int32)
    return total.reshape(-1)


def _exact_pair_fix(a: np.ndarray, b: np.ndarray, frac_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Rare path: integers ``q_a, q_b`` with ``q_a² + q_b² ≤ 4^k`` exactly for pairs the float32
    certificate did not certify.

    Non-finite values (from out-of-range inputs) become 0; others are clipped to ``±2^k``,
    truncated, and the larger magnitude of a violating pair is stepped toward zero until the
    integer inequality holds. A pair the certificate would pass comes out as ``trunc(a), trunc(b)``.
    """
    one = 1 << frac_bits
    qa = np.trunc(np.clip(np.where(np.isfinite(a), a, 0.0), -one, one)).astype(np.int64)
    qb = np.trunc(np.clip(np.where(np.isfinite(b), b, 0.0), -one, one)).astype(np.int64)
    limit = one * one
    bad = qa * qa + qb * qb > limit
    while bad.any():
        step_a = bad & (np.abs(qa) >= np.abs(qb))
        step_b = bad & ~step_a
        qa[step_a] -= np.sign(qa[step_a])
        qb[step_b] -= np.sign(qb[step_b])
        bad = qa * qa + qb * qb > limit
    return qa, qb


@register_feature_map
class QuantizedRFF(FeatureMap):
    r"""One-bit random Fourier features ``Φ(x)_j = sign(cos(ω_jᵀx + u_j)) ∈ {-1, +1}``.

    Frequencies ``ω_j`` as in :class:`RFF`; dithers ``u_j ~ U[0, 2π)``. Averaging over the
    dither, ``E_u[Φ(x)_j Φ(y)_j] = 1 - 2|δ|/π`` with ``δ = ω_jᵀ(x-y)`` wrapped to ``[-π, π]``
    (a triangle wave), so ``(1/m)⟨Φ(x), Φ(y)⟩`` estimates a shift-invariant kernel.

    **Sensitivity.** Every entry is exactly ``±1`` (an integer; no rounding anywhere), so
    ``‖Φ(x)‖₁ = m`` and ``‖Φ(x)‖₂ = √m``.

    :param dim: number of data columns
    :param num_features: ``m`` (one frequency each)
    :param bandwidth: bandwidth ``σ`` of the frequency distribution
    :param kernel: ``"gaussian"`` or ``"laplacian"`` frequency distribution
    :param seed: seed of the public frequencies and dithers
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.QuantizedRFF(dim=3, num_features=16, seed=1)
    >>> sorted(set(fm.transform(np.ones((4, 3))).ravel().tolist()))
    [-1.0, 1.0]
    >>> fm.sensitivity(1), fm.sensitivity(2)
    (16.0, 4.0)
    """

    kernel_name = "triangle-wave kernel of one-bit dithered RFF"

    def __init__(
        self,
        dim: int,
        num_features: int,
        bandwidth: float = 1.0,
        kernel: Literal["gaussian", "laplacian"] = "gaussian",
        seed: int = 0,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.num_features = check_positive_int(num_features, "num_features")
        self.bandwidth = check_positive_float(bandwidth, "bandwidth")
        self.kernel = _check_kernel(kernel)
        self.seed = check_seed(seed)
        self.frequencies = _draw_frequencies(
            self.dim, self.num_features, self.bandwidth, self.kernel, self.seed
        )
        self.dither = np.random.default_rng([self.seed, 1]).uniform(0.0, 2 * np.pi, self.num_features)

    def _params(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "num_features": self.num_features,
            "bandwidth": self.bandwidth,
            "kernel": self.kernel,
            "seed": self.seed,
        }

    def _draws(self) -> list[np.ndarray]:
        return [self.frequencies, self.dither]

    def _signs(self, X: np.ndarray) -> np.ndarray:
        # NaN phases (inputs beyond float range) compare False and give -1: still ±1
        with np.errstate(invalid="ignore", over="ignore"):
            phase = _phases(X, self.frequencies) + self.dither
            return np.where(np.cos(phase) >= 0.0, 1, -1).astype(np.int8)

    def transform(self, X: Any) -> np.ndarray:
        return self._signs(self._as_rows(X)).astype(np.float64)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        return self._signs(X).astype(np.int64)

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        return self._signs(X).sum(axis=0, dtype=np.int64)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return self.num_features
