"""Exact fixed-point helpers: integer norm enforcement and overflow-free accumulation.

Every feature map is summed as integers (``int64``), so the sum is exact and independent of
chunking, thread scheduling or how the data is split across machines. The helpers here make a
stated integer norm bound hold for the integers that are actually summed, whatever rounding
happened before quantization.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = [
    "Accumulator",
    "enforce_l1",
    "enforce_l2",
    "isqrt_ceil",
    "sqrt_up",
    "exact_bits",
    "quantize_rows",
    "quantize_columns",
    "exact_matmul",
    "rowwise_sq_norm",
]

_SPILL = 1 << 62


def isqrt_ceil(v: int) -> int:
    """Smallest integer ``r`` with ``r * r >= v`` (``v >= 0``)."""
    r = math.isqrt(v)
    return r if r * r == v else r + 1


def sqrt_up(v: int) -> float:
    """A float ``s`` with ``s >= sqrt(v)`` exactly (``v`` a non-negative integer).

    ``math.sqrt`` may round down; this steps up until the float squared, computed exactly as a
    fraction, is at least ``v``.

    >>> sqrt_up(2) ** 2 >= 2
    True
    >>> sqrt_up(16)
    4.0
    """
    s = math.sqrt(v)
    while Fraction(s) ** 2 < v:
        s = math.nextafter(s, math.inf)
    return s


def enforce_l1(q: np.ndarray, bound: int) -> np.ndarray:
    """Shrink rows of integer matrix ``q`` so that each row's L1 norm is at most ``bound``.

    Rows already within the bound are untouched. A violating row is replaced by
    ``sign(q) * (|q| * bound // S)`` with ``S`` its L1 norm, computed with Python integers, so
    the new norm is at most ``bound * S / S = bound`` exactly.
    """
    s1 = np.abs(q).sum(axis=1, dtype=np.int64)
    bad = np.flatnonzero(s1 > bound)
    for i in bad:
        s = int(s1[i])
        row = [int(v) for v in q[i]]
        q[i] = [(1 if v >= 0 else -1) * (abs(v) * bound // s) for v in row]
    return q


def enforce_l2(q: np.ndarray, bound_sq: int) -> np.ndarray:
    """Shrink rows of integer matrix ``q`` so that each row's squared L2 norm is at most ``bound_sq``.

    A violating row with squared norm ``S`` becomes ``sign(q) * (|q| * R // N)`` with
    ``R = isqrt(bound_sq)`` and ``N = isqrt_ceil(S)``: its squared norm is at most
    ``R^2 * S / N^2 <= R^2 <= bound_sq``. Exact integer arithmetic throughout.
    """
    qq = q.astype(np.float64)
    # float64 squares are exact below 2**53; the exact check below runs on any row near the bound
    s2f = np.einsum("ij,ij->i", qq, qq)
    suspect = np.flatnonzero(s2f >= bound_sq * (1.0 - 1e-9))
    r = math.isqrt(bound_sq)
    for i in suspect:
        row = [int(v) for v in q[i]]
        s = sum(v * v for v in row)
        if s > bound_sq:
            n = isqrt_ceil(s)
            q[i] = [(1 if v >= 0 else -1) * (abs(v) * r // n) for v in row]
    return q


class Accumulator:
    """Exact running sum of ``int64`` vectors that never overflows.

    Partial sums live in an ``int64`` buffer; before it could overflow they are moved into
    Python integers. ``total()`` returns exact Python ints.

    >>> acc = Accumulator(2)
    >>> acc.add(np.array([1, -2], dtype=np.int64)); acc.add(np.array([3, 4], dtype=np.int64))
    >>> acc.total()
    [4, 2]
    """

    def __init__(self, size: int) -> None:
        self._low = np.zeros(size, dtype=np.int64)
        self._high: list[int] | None = None

    def add(self, part: np.ndarray) -> None:
        """Add an ``int64`` vector whose entries are below ``2**62`` in magnitude."""
        if part.size and (
            np.abs(self._low).max(initial=0) >= _SPILL or np.abs(part).max(initial=0) >= _SPILL
        ):
            self._spill()
            if np.abs(part).max(initial=0) >= _SPILL:
                self._add_high(part)
                return
        self._low += part

    def add_exact(self, values: list[int]) -> None:
        """Add a vector of Python integers of any size."""
        self._add_high(values)

    def merge(self, other: Accumulator) -> None:
        """Add another accumulator's exact sum: in ``int64`` while both are small (no Python
        integers per coordinate), through Python integers only when ``other`` spilled.

        >>> a, b = Accumulator(2), Accumulator(2)
        >>> a.add(np.array([1, 2], dtype=np.int64)); b.add(np.array([2**62 - 1, -5], dtype=np.int64))
        >>> b.add(np.array([2**62 - 1, 0], dtype=np.int64)); a.merge(b); a.total()
        [9223372036854775807, -3]
        """
        if other._high is not None:
            self._add_high(other.total())
        else:
            self.add(other._low)

    def _add_high(self, values) -> None:
        if self._high is None:
            self._high = [0] * self._low.size
        self._high = [a + int(b) for a, b in zip(self._high, values)]

    def _spill(self) -> None:
        self._add_high(self._low)
        self._low[:] = 0

    def clipped(self, limit: int) -> np.ndarray:
        """The exact sum saturated to ``[-limit, limit]`` (``limit < 2^63``) as ``int64``.

        Saturation is 1-Lipschitz per coordinate, so it never increases a sensitivity.
        """
        if self._high is None:
            return np.clip(self._low, -limit, limit)
        return np.array([min(max(v, -limit), limit) for v in self.total()], dtype=np.int64)

    def total(self) -> list[int]:
        """The exact sum as a list of Python ints."""
        low = [int(v) for v in self._low]
        if self._high is None:
            return low
        return [a + b for a, b in zip(self._high, low)]


#: magnitude limits of :func:`quantize_rows`: larger values are clipped, smaller rows become 0,
#: so no product in an exact matmul can overflow or become subnormal
_ROW_MAX, _ROW_MIN = 2.0**300, 2.0**-300


def exact_bits(dim: int) -> int:
    """Significant bits per factor such that every dot product of length ``dim`` between a
    :func:`quantize_rows` row and a :func:`quantize_columns` column is exact in float64:
    ``2·bits + ⌈log2 dim⌉ ≤ 52``.

    >>> exact_bits(10)
    24
    """
    return (52 - math.ceil(math.log2(max(dim, 1)))) // 2


def quantize_rows(X: np.ndarray, bits: int, out: np.ndarray | None = None) -> np.ndarray:
    """Round every row to ``bits`` significant bits relative to its largest entry (row-wise).

    Row ``x`` with ``max|x| ≤ 2^e`` becomes ``rint(x·2^(bits-e))·2^(e-bits)``: integers of at
    most ``bits`` bits times one power of two per row. NaN becomes 0, magnitudes are clipped to
    ``2^300`` and rows below ``2^-300`` become 0. The result depends on the row alone.

    :param out: optional float64 array of ``X``'s shape for the result (may be ``X`` itself);
        Fortran order is fastest (long inner loops), and is what a new result gets
    """
    q = np.empty(np.shape(X), order="F") if out is None else out
    np.copyto(q, X, casting="same_kind")
    qt = q.T  # columns of q as rows: every step below is elementwise or per column of qt
    np.clip(qt, -_ROW_MAX, _ROW_MAX, out=qt)  # ±inf to ±2^300; NaN stays NaN until the next line
    np.copyto(qt, 0.0, where=np.isnan(qt))
    peak = np.abs(qt).max(axis=0)
    peak[peak < _ROW_MIN] = 0.0  # such rows become 0 below
    _, e = np.frexp(peak)  # peak = m·2^e with m in [0.5, 1): |x| ≤ 2^e
    # multiplying by powers of two is exact here (no overflow, results are normal or zero)
    qt *= np.ldexp(1.0, bits - e)
    np.rint(qt, out=qt)
    qt *= np.ldexp(1.0, e - bits)
    np.copyto(qt, 0.0, where=peak == 0.0)
    return q


def quantize_columns(W: np.ndarray, bits: int) -> np.ndarray:
    """:func:`quantize_rows` applied to the columns of ``W`` (public draws, done once)."""
    return quantize_rows(np.asarray(W, dtype=np.float64).T, bits).T.copy()


def exact_matmul(Xq: np.ndarray, Wq: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``Xq @ Wq`` for quantized factors, where the float64 result is **exact**.

    Entry ``(i, j)`` is ``Σ_k a_k b_k · 2^(s_i + t_j)`` with integers ``|a_k|, |b_k| ≤ 2^bits``;
    by the choice of :func:`exact_bits` every partial sum is an integer of magnitude at most
    ``2^52`` times that one power of two, hence representable (and never subnormal, by the
    magnitude limits of :func:`quantize_rows`). Any summation order, blocking, FMA use or thread
    split gives the same exact result, so a row's output depends on that row alone — what the
    add/remove-one-row argument needs. Assumed of the BLAS: a classical product (each entry a sum
    of its ``d`` IEEE products; no Strassen-type or reduced-precision mode), as in OpenBLAS, MKL
    and Accelerate's default modes. ``out``: optional float64 array for the result.
    """
    return np.matmul(Xq, Wq, out=out)


def rowwise_sq_norm(Y: np.ndarray) -> np.ndarray:
    """``Σ_j Y[:, j]²`` accumulated column by column: a row-wise deterministic squared norm."""
    s = Y[:, 0] * Y[:, 0]
    for j in range(1, Y.shape[1]):
        s = s + Y[:, j] * Y[:, j]
    return s
