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

__all__ = ["Accumulator", "enforce_l1", "enforce_l2", "isqrt_ceil", "sqrt_up", "fixed_shape_matmul", "GEMM_ROWS"]

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

    def _add_high(self, values) -> None:
        if self._high is None:
            self._high = [0] * self._low.size
        self._high = [a + int(b) for a, b in zip(self._high, values)]

    def _spill(self) -> None:
        self._add_high(self._low)
        self._low[:] = 0

    def total(self) -> list[int]:
        """The exact sum as a list of Python ints."""
        low = [int(v) for v in self._low]
        if self._high is None:
            return low
        return [a + b for a, b in zip(self._high, low)]


#: rows of every BLAS product in the feature maps (see :func:`fixed_shape_matmul`)
GEMM_ROWS = 256


def fixed_shape_matmul(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``X @ W`` computed in blocks of exactly :data:`GEMM_ROWS` rows (the tail zero-padded).

    BLAS may round a row's dot products differently depending on the matrix shape (a single
    row takes a gemv path, edge tiles other kernels). Calling it on one fixed shape makes each
    row's result depend on the row alone, so exact integer sums come out identical whatever
    the chunking, streaming or partitioning of the data.
    """
    n = X.shape[0]
    out = np.empty((n, W.shape[1]), dtype=np.result_type(X, W))
    full = n - n % GEMM_ROWS
    for s in range(0, full, GEMM_ROWS):
        np.matmul(X[s : s + GEMM_ROWS], W, out=out[s : s + GEMM_ROWS])
    if full < n:
        pad = np.zeros((GEMM_ROWS, X.shape[1]), dtype=X.dtype)
        pad[: n - full] = X[full:]
        out[full:] = (pad @ W)[: n - full]
    return out
