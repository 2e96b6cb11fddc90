"""Weighted concatenation of feature maps: one sketch, several blocks, a public budget split.

Proof of the sensitivity of the implemented integers: ``docs/features/composite.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np

from .base import FeatureMap, OneHotFeatureMap, feature_map_from_dict, register_feature_map, scratch_array

__all__ = ["Composite", "CompositeBlock"]

#: every block keeps at least this many bits per unit of its own feature value
RESOLUTION_BITS = 20
#: most blocks in one composite
MAX_BLOCKS = 64
#: supported range of a weight (only ratios matter; extreme ones would overflow the integers)
MIN_WEIGHT, MAX_WEIGHT = 2.0**-30, 2.0**30
#: a product ``|q|·M`` of an inner integer and a block multiplier stays below this (int64-safe)
_PRODUCT_LIMIT = 1 << 62
#: at most this many fraction bits in a block multiplier ``M/2^t``
_MAX_SHIFT = 40


class CompositeBlock(NamedTuple):
    """One block of a :class:`Composite`: where it sits and how it is weighted."""

    feature_map: FeatureMap
    """the inner map ``Φ_i``"""
    weight: float
    """the implemented weight ``â_i`` (the requested ``a_i`` to about 20 significant bits or better)"""
    offset: int
    """index of the block's first feature"""
    size: int
    """number of features of the block (the inner map's ``m_i``)"""


class _Plan(NamedTuple):
    """Exact integer scaling of one block: ``Q = sign(q)·⌊|q|·M / 2^t⌋``."""

    multiplier: int  # M
    shift: int  # t; 0 means Q = M·q exactly
    bound1: int  # ⌊B₁·M / 2^t⌋
    bound2: int  # ⌊B₂·M² / 2^(2t)⌋


def _min_frac_bits(weight: float, resolution: int) -> int:
    """Smallest ``k`` with ``weight · 2^k ≥ 2^resolution``."""
    _, e = math.frexp(weight)  # weight in [2^(e-1), 2^e)
    return resolution - e + 1


def _plan(fm: FeatureMap, mu: Fraction) -> _Plan:
    """Multiplier ``M/2^t ≤ μ`` for the block's integers, as precise as int64 products allow."""
    b1, b2 = fm._int_bound(1), fm._int_bound(2)
    if isinstance(fm, OneHotFeatureMap):
        m, t = math.floor(mu), 0  # entries are 0 or 1: ⌊q·μ⌋ = q·⌊μ⌋
    else:
        entry = max(1, min(b1, math.isqrt(b2)))  # |q_j| ≤ ‖q‖₁ and |q_j|² ≤ ‖q‖₂²
        room = _PRODUCT_LIMIT.bit_length() - 1 - entry.bit_length() - math.ceil(mu).bit_length()
        t = max(0, min(_MAX_SHIFT, room))
        m = math.floor(mu * (1 << t))
        while t > 0 and m % 2 == 0:  # an integer multiplier takes the exact fast path
            m, t = m >> 1, t - 1
    if m < 1 or b1 * m >= _PRODUCT_LIMIT << t or max(1, min(b1, math.isqrt(b2))) * m >= _PRODUCT_LIMIT:
        raise ValueError(
            f"the weights put {fm!r} at {float(mu):g} integer units per unit: outside the int64 range; "
            "use weights of similar size"
        )
    return _Plan(m, t, (b1 * m) >> t, (b2 * m * m) >> (2 * t))


def _scaled(q: np.ndarray, plan: _Plan) -> np.ndarray:
    """``sign(q)·⌊|q|·M / 2^t⌋`` in int64, in place on ``q`` (a block's fresh or scratch integers).

    Exact: ``|q|·M < 2^62`` by :func:`_plan`. The arithmetic shift floors, so ``2^t - 1`` is
    added to negative products first: ``⌊(p + 2^t - 1)/2^t⌋ = ⌈p/2^t⌉`` rounds them toward zero.
    """
    q = np.asarray(q, dtype=np.int64)
    if not q.flags.writeable:
        q = q.copy()
    q *= plan.multiplier
    if plan.shift:
        neg = np.right_shift(q, 63, out=scratch_array("composite.neg", q.shape, np.int64))  # -1 or 0
        neg &= (1 << plan.shift) - 1
        q += neg
        q >>= plan.shift
    return q


@register_feature_map
class Composite(FeatureMap):
    r"""``Φ(x) = [a₁Φ₁(x), …, a_kΦ_k(x)]``: feature maps side by side with public weights.

    The blocks share one release and one noise scale, so the weights are the budget split between
    them: a block with weight ``a`` sees noise of standard deviation ``σ/a`` in its own units,
    and adds ``a·Δ_p(Φ_i)`` to the sensitivity. E.g. fine 1-way marginals, coarse 2-way
    marginals and an RFF block, weighted from the schema alone.

    **Sensitivity.** ``‖Φ(x)‖₁ = Σ aᵢ‖Φᵢ(x)‖₁ ≤ Σ aᵢΔ₁(Φᵢ)`` and
    ``‖Φ(x)‖₂² = Σ aᵢ²‖Φᵢ(x)‖₂² ≤ Σ aᵢ²Δ₂(Φᵢ)²``. The implemented integers are
    ``Qᵢ = sign(qᵢ)·⌊|qᵢ|·Mᵢ/2^tᵢ⌋`` (exact int64) from each block's enforced integers ``qᵢ``, so
    ``‖Qᵢ‖₁ ≤ ⌊Bᵢ₁Mᵢ/2^tᵢ⌋`` and ``‖Qᵢ‖₂² ≤ ⌊Bᵢ₂Mᵢ²/2^(2tᵢ)⌋`` and the composite states the sums
    of these integer bounds: they hold for the arithmetic that runs (``docs/features/composite.md``).

    :param maps: the blocks' feature maps (or their :meth:`~FeatureMap.to_dict` specs), all with
        the same input columns
    :param weights: public positive weights, one per map (default all 1); only their ratios
        change the privacy–accuracy trade-off
    :raises ValueError: for an empty or mismatched list of maps, or weights that are not positive,
        finite and within ``[2^-30, 2^30]``, or whose ratios overflow the integers
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> one = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1], bins=4, dim=2)
    >>> two = dps.MarginalTables(bounds=(0, 1), subsets=[(0, 1)], bins=2, dim=2)
    >>> fm = dps.Composite([one, two], weights=[1.0, 0.5])
    >>> [(b.offset, b.size, b.weight) for b in fm.blocks]
    [(0, 8, 1.0), (8, 4, 0.5)]
    >>> fm.transform(np.array([[0.3, 0.9]])).tolist()
    [[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.0, 0.0]]
    >>> fm.sensitivity(1), fm.sensitivity(2) ** 2          # 1·2 + 0.5·1 and 1²·2 + 0.5²·1
    (2.5, 2.25)
    >>> [a.tolist() for a in fm.split(fm.transform(np.array([[0.3, 0.9]]))[0])]   # own units
    [[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
    """

    kernel_name = "weighted blocks"

    def __init__(
        self, maps: Sequence[FeatureMap | dict[str, Any]], weights: Sequence[float] | None = None
    ) -> None:
        if isinstance(maps, (str, bytes, dict, FeatureMap)) or not isinstance(maps, Sequence) or not maps:
            raise ValueError(f"maps ({maps!r}) must be a non-empty sequence of feature maps")
        if len(maps) > MAX_BLOCKS:
            raise ValueError(f"maps has {len(maps)} blocks; it must have at most {MAX_BLOCKS}")
        inner = [feature_map_from_dict(m) if isinstance(m, dict) else m for m in maps]
        for m in inner:
            if not isinstance(m, FeatureMap):
                raise ValueError(f"maps entry ({m!r}) must be a feature map")
        if len({(m.dim, m.input_dim) for m in inner}) != 1:
            raise ValueError(
                f"maps must all read the same columns; their (dim, input_dim) are {[(m.dim, m.input_dim) for m in inner]}"
            )
        self.weights = self._check_weights(weights, len(inner))
        self.maps = tuple(inner)
        self.dim = inner[0].dim
        self._input_dim = inner[0].input_dim
        self.frac_bits = max(
            _min_frac_bits(a, max(m.frac_bits, RESOLUTION_BITS)) for m, a in zip(inner, self.weights)
        )
        self.gain = 1.0
        # block i's integers per unit of its own feature value: a_i·2^k against q_i ≈ γ_i·2^k_i·Φ_i
        mus = [
            Fraction(a) * Fraction(2) ** (self.frac_bits - m.frac_bits) / Fraction(m.gain)
            for m, a in zip(inner, self.weights)
        ]
        self._plans = [_plan(m, mu) for m, mu in zip(inner, mus)]
        blocks, offset = [], 0
        for m, p in zip(inner, self._plans):
            eff = math.ldexp(p.multiplier * m.gain, m.frac_bits - self.frac_bits - p.shift)
            blocks.append(CompositeBlock(m, eff, offset, m.num_features))
            offset += m.num_features
        self.blocks: tuple[CompositeBlock, ...] = tuple(blocks)
        self.num_features = offset
        if self._int_bound(1) >= _PRODUCT_LIMIT:
            raise ValueError("the composite's integer sensitivity exceeds 2^62; use fewer or smaller blocks")

    @staticmethod
    def _check_weights(weights: Any, k: int) -> tuple[float, ...]:
        if weights is None:
            return (1.0,) * k
        if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != k:
            raise ValueError(f"weights ({weights!r}) must be {k} numbers, one per map")
        out = []
        for w in weights:
            real = isinstance(w, (int, float, np.integer, np.floating)) and not isinstance(w, bool)
            v = float(w) if real else math.nan
            if not MIN_WEIGHT <= v <= MAX_WEIGHT:
                raise ValueError(f"weight ({w!r}) must be a finite number in [2^-30, 2^30]")
            out.append(v)
        return tuple(out)

    @property
    def input_dim(self) -> int:
        return self._input_dim

    def _params(self) -> dict[str, Any]:
        return {"maps": [m.to_dict() for m in self.maps], "weights": list(self.weights)}

    def _draws(self) -> list[np.ndarray]:
        return [a for m in self.maps for a in m._draws()]

    # -- layout ---------------------------------------------------------------------------------
    def split(self, values: Any) -> list[np.ndarray]:
        """Block ``i`` of a vector laid out like ``Φ`` (``(..., m)``), divided by its weight ``âᵢ``:
        each part in the units of a sketch of ``Φᵢ`` alone."""
        v = np.asarray(values, dtype=np.float64)
        if v.shape[-1:] != (self.num_features,):
            raise ValueError(f"values must have {self.num_features} entries in the last axis, got {v.shape}")
        return [v[..., b.offset : b.offset + b.size] / b.weight for b in self.blocks]

    def block_variances(self, sum_variance: float) -> list[float]:
        """Noise variance of each block in its own units, ``σ²/âᵢ²``, from the sketch's per-coordinate
        ``sum_variance`` (``Sketch.sum_variance`` or ``noise["sum_variance"]``)."""
        s = float(sum_variance)
        return [s / (b.weight * b.weight) for b in self.blocks]

    # -- evaluation -----------------------------------------------------------------------------
    def transform(self, X: Any) -> np.ndarray:
        X = self._as_rows(X)
        return np.concatenate([b.weight * b.feature_map.transform(X) for b in self.blocks], axis=1)

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.num_features), dtype=np.int64)
        for b, p in zip(self.blocks, self._plans):
            out[:, b.offset : b.offset + b.size] = _scaled(b.feature_map._fixed_block(X), p)
        return out

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        # each block is written out before the next runs: inner results may live in scratch arrays
        out = np.empty(self.num_features, dtype=np.int64)
        for b, p in zip(self.blocks, self._plans):
            if p.shift == 0:  # Σ M·q = M·Σ q: the inner map's own (e.g. bincount) sum
                part = _scaled(b.feature_map._fixed_block_sum(X), p)
            else:
                part = _scaled(b.feature_map._fixed_block(X), p).sum(axis=0, dtype=np.int64)
            out[b.offset : b.offset + b.size] = part
        return out

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return sum(plan.bound1 if p == 1 else plan.bound2 for plan in self._plans)

    def _row_width(self) -> int:
        return sum(m._row_width() if p.shift == 0 else m.num_features for m, p in zip(self.maps, self._plans))
