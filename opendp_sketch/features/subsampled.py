"""Feature-subsampled random Fourier features: each row computes ``r`` of the ``m'`` frequencies.

Proof of the sensitivities and of row-wise determinism: ``docs/features/subsampled.md``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._fixed import exact_bits, exact_matmul, quantize_rows
from .._validate import check_positive_int
from .base import register_feature_map
from .rff import RFF, certified_pairs

__all__ = ["SubsampledRFF", "row_hash"]

#: gather the block's frequencies per row (one batched product) while ``r·d`` is at most this;
#: above it, rows are grouped by block and each group is one matrix product (measured faster)
_GATHER_MAX = 64
#: splitmix64 constants (Steele, Lea and Flood 2014): a bijective avalanche mixer on 64 bits
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
#: separates the mask stream from the frequency stream drawn from the same seed
_MASK_TAG = 0x5B5B_0001


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a ``uint64`` array (array arithmetic wraps modulo ``2^64``)."""
    z = (z ^ (z >> np.uint64(30))) * _MUL1
    z = (z ^ (z >> np.uint64(27))) * _MUL2
    return z ^ (z >> np.uint64(31))


def row_hash(X: np.ndarray, key: int) -> np.ndarray:
    """A 64-bit hash of each row's float64 bit pattern, keyed by the public ``key``.

    A function of the row alone (columns are mixed in one after another), so a row gets the
    same hash in any chunk, position or dataset. ``-0.0`` is first turned into ``+0.0``: equal
    values hash equally.

    :param X: float64 array ``(n, d)``
    :param key: public non-negative integer (below ``2^64``)
    :return: ``uint64`` array ``(n,)``
    :example:

    >>> import numpy as np
    >>> X = np.array([[0.5, 1.0], [0.5, 1.0], [-0.0, 2.0], [0.0, 2.0]])
    >>> h = row_hash(X, key=7)
    >>> h.dtype, bool(h[0] == h[1]), bool(h[2] == h[3]), bool(h[0] == h[2])
    (dtype('uint64'), True, True, False)
    >>> bool(row_hash(X[:1], key=8)[0] == h[0])
    False
    """
    bits = np.ascontiguousarray(X + 0.0, dtype=np.float64).view(np.uint64)
    h = np.full(bits.shape[0], _mix64(np.array([key % (1 << 64)], dtype=np.uint64))[0], dtype=np.uint64)
    for j in range(bits.shape[1]):
        h = _mix64((h + _GOLDEN) ^ bits[:, j])
    return h


@register_feature_map
class SubsampledRFF(RFF):
    r"""Random Fourier features where each row contributes only ``r`` of the ``m'`` frequencies.

    The ``m' = m/2`` frequencies of :class:`~opendp_sketch.RFF` (same ``dim``, ``num_features``,
    ``bandwidth``, ``kernel``, ``seed``: the same ``Ω``) are cut into ``B = m'/r`` consecutive
    blocks of ``r``. Row ``x`` evaluates one block, ``b(x) = h(x̃) mod B``, where ``x̃`` is the
    row rounded as in :class:`~opendp_sketch.RFF` and ``h`` a 64-bit hash of its bit pattern
    keyed by the public seed (:func:`row_hash`). The block's cos/sin pairs are multiplied by
    ``B``; every other feature is 0:

    ``Φ_sub(x) = B · [cos(Ω_bᵀx), sin(Ω_bᵀx)]`` on block ``b(x)``, so ``E_h[Φ_sub(x)] = Φ(x)``.

    The selection depends on the row's content, never on its position, so ``Φ_sub`` is a fixed
    row-wise function and adding or removing a row changes no other row's features. The
    expectation is over the hash treated as random; identical rows get the same block (see
    ``docs/features/subsampled.md``). Only the ``r`` selected phases are computed, so a release
    costs about ``r/m'`` of the full map's time.

    **Sensitivity.** Selected pairs are the certified RFF integers (``q_c² + q_s² ≤ 4^20``) times
    the integer ``B``, so ``‖q(x)‖₂² ≤ B²·r·4^20`` and ``‖q(x)‖₁ ≤ B·⌊√2·r·2^20⌋ ≤ √2·m'·2^20``:
    the L1 sensitivity equals the full map's, the L2 sensitivity grows to ``m'/√r`` (``√(m'/r)``
    times the full map's ``√m'``).

    ``transform`` (public points, estimators) is the *expected* map: plain RFF features of the
    same frequencies, as is :attr:`base_map`.

    :param dim: number of data columns ``d``
    :param num_features: ``m``, an even number (``m' = m/2`` frequencies)
    :param bandwidth: kernel bandwidth ``σ`` (public)
    :param kernel: ``"gaussian"`` or ``"laplacian"``
    :param seed: seed of the public frequencies and of the row hash
    :param r: frequencies (cos/sin pairs) per row, a divisor of ``m'``; default ``m'`` (no
        subsampling)
    :raises ValueError: if ``r`` is not a positive divisor of ``m'`` (or as for ``RFF``)
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> from opendp_sketch.features.subsampled import SubsampledRFF
    >>> fm = SubsampledRFF(dim=2, num_features=8, bandwidth=0.5, seed=0, r=1)
    >>> fm.num_frequencies, fm.r, fm.num_blocks
    (4, 1, 4)
    >>> q = fm.fixed_features(np.array([[0.1, 0.2], [0.3, 0.4]]))
    >>> q.shape, (q != 0).sum(axis=1).tolist()          # one cos/sin pair per row
    ((2, 8), [2, 2])
    >>> round(fm.sensitivity(1), 4), round(fm.sensitivity(2), 4)   # √2·m' and m'/√r
    (5.6569, 4.0)
    >>> np.array_equal(fm.transform(np.zeros((1, 2))), fm.base_map.transform(np.zeros((1, 2))))
    True
    """

    kernel_name = "gaussian / laplacian (shift-invariant), feature-subsampled"

    def __init__(
        self,
        dim: int,
        num_features: int,
        bandwidth: float = 1.0,
        kernel: Literal["gaussian", "laplacian"] = "gaussian",
        seed: int = 0,
        r: int | None = None,
    ) -> None:
        super().__init__(dim, num_features, bandwidth, kernel, seed)
        mp = self.num_frequencies
        r = mp if r is None else check_positive_int(r, "r")
        if r > mp or mp % r:
            raise ValueError(
                f"r ({r}) must divide the number of frequencies m' = num_features/2 = {mp}, "
                "so that the rescale m'/r is an exact integer"
            )
        self.r = r
        self.num_blocks = mp // r
        self._base = RFF(self.dim, self.num_features, self.bandwidth, self.kernel, self.seed)  # type: ignore[arg-type]
        # block b holds frequencies b·r … b·r + r − 1, as a (B, d, r) stack for gathers
        self._blocks = np.ascontiguousarray(
            self.frequencies.reshape(self.dim, self.num_blocks, r).transpose(1, 0, 2)
        )

    @property
    def base_map(self) -> RFF:
        """The plain :class:`~opendp_sketch.RFF` with the same frequencies (the expected map)."""
        return self._base

    def _params(self) -> dict[str, Any]:
        return {**super()._params(), "r": self.r}

    # -- fixed point ------------------------------------------------------------------------
    def blocks(self, X: Any) -> np.ndarray:
        """Block index ``b(x) ∈ [0, m'/r)`` of each row (public function of the row content).

        :param X: rows ``(n, dim)``; hashed after the map's own rounding, as they are summed
        :return: ``int64`` array ``(n,)``
        """
        return self._blocks_of(quantize_rows(self._as_rows(X), exact_bits(self.dim)))

    def _blocks_of(self, Xq: np.ndarray) -> np.ndarray:
        if self.num_blocks == 1:
            return np.zeros(Xq.shape[0], dtype=np.int64)
        return (row_hash(Xq, self.seed ^ _MASK_TAG) % np.uint64(self.num_blocks)).astype(np.int64)

    def _selected_phases(self, Xq: np.ndarray, block: np.ndarray) -> np.ndarray:
        """Exact float64 phases ``x̃ᵀΩ_{b(x)}`` ``(n, r)``: every product is exact (Lemma 2 of
        ``docs/fixed_point.md``), so each row's phases depend on that row alone."""
        if self.num_blocks == 1:
            return exact_matmul(Xq, self.frequencies)
        if self.r * self.dim <= _GATHER_MAX:
            return np.einsum("nd,ndr->nr", Xq, self._blocks[block])
        out = np.empty((Xq.shape[0], self.r))
        order = np.argsort(block, kind="stable")
        sorted_blocks = block[order]
        cuts = np.flatnonzero(np.diff(sorted_blocks)) + 1
        for rows in np.split(order, cuts):
            if rows.size:
                out[rows] = exact_matmul(Xq[rows], self._blocks[block[rows[0]]])
        return out

    def _selected_pairs(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(block, q_c, q_s)``: each row's block and its ``r`` certified integer pairs (not yet
        multiplied by ``B``), ``q_c² + q_s² ≤ 4^k`` for every pair."""
        Xq = quantize_rows(X, exact_bits(self.dim))
        block = self._blocks_of(Xq)
        # the float32 pair certificate of RFF (docs/fixed_point.md#the-rff-pair-certificate)
        q = certified_pairs(self._selected_phases(Xq, block), self.gain, self.frac_bits)
        return block, q[0].astype(np.int64), q[1].astype(np.int64)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        block, qc, qs = self._selected_pairs(X)
        mp, n = self.num_frequencies, X.shape[0]
        out = np.zeros((n, 2 * mp), dtype=np.int64)
        cols = block[:, None] * self.r + np.arange(self.r)
        np.put_along_axis(out, cols, qc * self.num_blocks, axis=1)
        np.put_along_axis(out, cols + mp, qs * self.num_blocks, axis=1)
        return out

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        block, qc, qs = self._selected_pairs(X)
        mp = self.num_frequencies
        out = np.zeros(2 * mp, dtype=np.int64)
        if block.size == 0:
            return out
        order = np.argsort(block, kind="stable")
        sorted_blocks = block[order]
        starts = np.flatnonzero(np.r_[True, sorted_blocks[1:] != sorted_blocks[:-1]])
        present = sorted_blocks[starts]
        # exact int64 block sums: |entries| ≤ rows·B·2^k ≤ 2^62 by the chunk cap in base.py
        sums_c = np.add.reduceat(qc[order], starts, axis=0) * self.num_blocks
        sums_s = np.add.reduceat(qs[order], starts, axis=0) * self.num_blocks
        cols = (present[:, None] * self.r + np.arange(self.r)).ravel()
        out[cols] = sums_c.ravel()
        out[cols + mp] = sums_s.ravel()
        return out

    def _int_bound(self, p: Literal[1, 2]) -> int:
        one = 1 << self.frac_bits
        if p == 1:
            # Σ over the r pairs of |q_c|+|q_s| ≤ √2·r·2^k, an integer, times the exact rescale B
            return self.num_blocks * math.isqrt(2 * (self.r * one) ** 2)
        return self.num_blocks**2 * self.r * one * one

    def _row_width(self) -> int:
        # gathered frequencies (r·d) plus the phase, cos, sin and integer arrays of r pairs
        return self.r * (self.dim + 6)
