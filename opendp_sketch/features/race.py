"""RACE: repeated arrays of LSH count sketches. Proof: ``docs/features/race.md``."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from scipy.special import ndtr

from .._fixed import exact_bits, exact_matmul, quantize_columns, quantize_rows
from .._validate import check_positive_float, check_positive_int, check_seed
from .base import OneHotFeatureMap, register_feature_map

__all__ = ["RACE"]

_FAMILIES = ("l2", "srp")


@register_feature_map
class RACE(OneHotFeatureMap):
    r"""RACE count array: ``R`` rows of ``W`` buckets; a point adds 1 to one bucket per row.

    Row ``r`` hashes ``x`` with ``K`` independent locality-sensitive hashes and maps the
    ``K``-tuple to a bucket with a public multiply-add-shift hash:
    ``u = (Σ_k a_k·h_k + c) mod 2^64`` (odd random ``a_k``), bucket ``= ⌊⌊u / 2^32⌋·W / 2^32⌋``.
    Families:

    * ``"l2"`` (p-stable): ``h(x) = ⌊(wᵀx + b)/r⌋``, ``w ~ N(0, I)``, ``b ~ U[0, r)`` (stored
      pre-divided by ``r``);
    * ``"srp"`` (angular, signed random projections): ``K`` sign bits of ``wᵀx``; when
      ``2^K ≤ W`` the ``K``-bit code is the bucket itself.

    ``Φ(x)`` is the concatenation of ``R`` one-hot vectors of length ``W``. The mean count of the
    buckets a query hits, divided by ``n``, estimates the LSH collision-probability kernel
    (:meth:`kernel_value`).

    **Sensitivity.** A row has exactly ``R`` ones and nothing else (integers, no rounding):
    ``‖Φ(x)‖₁ = R`` and ``‖Φ(x)‖₂ = √R``.

    :param dim: number of data columns
    :param rows: ``R``, number of repetitions
    :param buckets: ``W``, buckets per row
    :param family: ``"l2"`` or ``"srp"``
    :param bucket_width: ``r`` of the ``l2`` family (public, in data units)
    :param hashes_per_row: ``K``, hashes concatenated per row (default 1 for ``l2``,
        ``⌊log2 W⌋`` capped at 16 for ``srp``)
    :param seed: seed of the public hash functions
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RACE(dim=2, rows=3, buckets=5, bucket_width=1.0, seed=0)
    >>> fm.transform(np.zeros((1, 2))).sum(), fm.num_features
    (np.float64(3.0), 15)
    >>> fm.sensitivity(1), round(fm.sensitivity(2), 6)
    (3.0, 1.732051)
    """

    kernel_name = "LSH collision probability"

    def __init__(
        self,
        dim: int,
        rows: int,
        buckets: int,
        family: Literal["l2", "srp"] = "l2",
        bucket_width: float = 1.0,
        hashes_per_row: int | None = None,
        seed: int = 0,
    ) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.rows = check_positive_int(rows, "rows")
        self.buckets = check_positive_int(buckets, "buckets")
        if family not in _FAMILIES:
            raise ValueError(f"family ({family!r}) must be one of {_FAMILIES}")
        self.family = family
        self.bucket_width = check_positive_float(bucket_width, "bucket_width")
        if hashes_per_row is None:
            hashes_per_row = 1 if family == "l2" else max(1, min(16, self.buckets.bit_length() - 1))
        self.hashes_per_row = check_positive_int(hashes_per_row, "hashes_per_row")
        self.seed = check_seed(seed)
        self.num_features = self.rows * self.buckets
        rng = np.random.default_rng(self.seed)
        nh = self.rows * self.hashes_per_row
        # columns rounded so that projections of quantized rows are exact (row-wise determinism)
        w = rng.standard_normal((self.dim, nh))
        b = rng.uniform(0.0, 1.0, nh)
        if self.family == "l2":  # h = ⌊wᵀx/r + b/r⌋: fold r into the public draws once
            w = w / self.bucket_width
        # columns rounded so that projections of quantized rows are exact (row-wise determinism)
        self.projections = quantize_columns(w, exact_bits(self.dim))
        self.offsets = b
        # inputs beyond ±limit are clipped so every projection stays below 2^61 (safe int cast)
        self._limit = 2.0**61 / max(float(np.abs(self.projections).sum(axis=0).max()), 1.0)
        self.hash_mult = rng.integers(0, 2**63, (self.rows, self.hashes_per_row), dtype=np.uint64) * 2 + 1
        self.hash_add = rng.integers(0, 2**63, self.rows, dtype=np.uint64) * 2
        self._direct = self.family == "srp" and (1 << self.hashes_per_row) <= self.buckets

    def _params(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "rows": self.rows,
            "buckets": self.buckets,
            "family": self.family,
            "bucket_width": self.bucket_width,
            "hashes_per_row": self.hashes_per_row,
            "seed": self.seed,
        }

    def _draws(self) -> list[np.ndarray]:
        return [self.projections, self.offsets, self.hash_mult, self.hash_add]

    def bucket_index(self, X: Any) -> np.ndarray:
        """Bucket of each point in each row: ``int64`` array of shape ``(n, R)`` in ``[0, W)``."""
        X = self._as_rows(X)
        return self._buckets(X)

    def _buckets(self, X: np.ndarray) -> np.ndarray:
        n, K = X.shape[0], self.hashes_per_row
        Xq = quantize_rows(np.clip(X, -self._limit, self._limit), exact_bits(self.dim))
        P = exact_matmul(Xq, self.projections)
        if self.family == "l2":
            P += self.offsets
            np.floor(P, out=P)
            h = P.astype(np.int64).reshape(n, self.rows, K)  # |P| < 2^61 + 1: exact cast
        else:
            h = (P >= 0).reshape(n, self.rows, K).astype(np.int64)
        if self._direct:
            code = h[:, :, 0].astype(np.int64)
            for k in range(1, K):
                code += h[:, :, k].astype(np.int64) << k
            return code
        # multiply-add-shift in wrapping uint64 arithmetic, then the top 32 bits scaled to [0, W)
        h = h.astype(np.int64, copy=False)
        u = h[:, :, 0].view(np.uint64) * self.hash_mult[:, 0]
        for k in range(1, K):
            u += h[:, :, k].view(np.uint64) * self.hash_mult[:, k]
        u += self.hash_add
        top = u.view(np.uint32)[..., 1::2] if np.little_endian else u.view(np.uint32)[..., 0::2]
        u = top * np.uint64(self.buckets)
        u >>= np.uint64(32)
        return u.view(np.int64)

    def _flat(self, X: np.ndarray) -> np.ndarray:
        return self._buckets(X) + np.arange(self.rows) * self.buckets

    def _ones_per_row(self) -> int:
        return self.rows

    def kernel_value(self, x: Any, y: Any) -> np.ndarray:
        """Collision probability of one row's LSH (``K`` concatenated hashes), ignoring the
        ``≈ 1/W`` chance of a universal-hash collision. Broadcasts over leading axes."""
        diff = np.asarray(x, float) - np.asarray(y, float)
        if self.family == "l2":
            c = np.linalg.norm(diff, axis=-1)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = self.bucket_width / c
                p = 1.0 - 2.0 * ndtr(-t) - 2.0 / (np.sqrt(2 * np.pi) * t) * (1.0 - np.exp(-(t**2) / 2))
            p = np.where(c == 0, 1.0, p)
        else:
            xa, ya = np.broadcast_arrays(np.asarray(x, float), np.asarray(y, float))
            num = np.sum(xa * ya, axis=-1)
            den = np.linalg.norm(xa, axis=-1) * np.linalg.norm(ya, axis=-1)
            with np.errstate(divide="ignore", invalid="ignore"):
                cos = np.clip(np.where(den > 0, num / den, 1.0), -1.0, 1.0)
            p = (1.0 - np.arccos(cos) / np.pi) ** self.hashes_per_row
            # the zero vector has every sign bit set (wᵀ0 = 0 ≥ 0): it meets y ≠ 0 w.p. 2^-K
            xz = np.linalg.norm(xa, axis=-1) == 0
            yz = np.linalg.norm(ya, axis=-1) == 0
            return np.where(xz & yz, 1.0, np.where(xz | yz, 0.5**self.hashes_per_row, p))
        return p**self.hashes_per_row
