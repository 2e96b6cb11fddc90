"""Histograms of 1-D marginals and per-coordinate dyadic trees.

Proofs: ``docs/features/histogram.md`` and ``docs/features/dyadic_trees.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validate import check_bounds, check_positive_int
from .base import OneHotFeatureMap, register_feature_map

__all__ = ["Histogram", "DyadicTrees"]


def _bin_index(X: np.ndarray, lo: np.ndarray, hi: np.ndarray, nbins: np.ndarray) -> np.ndarray:
    """Bin of each value among ``nbins`` equal bins of ``[lo, hi]``; out-of-box values clip to the
    end bins and NaN goes to bin 0, so every row gets exactly one bin per column."""
    Xc = np.fmin(np.fmax(X, lo), hi)  # fmax/fmin map NaN to the bound
    idx = np.floor((Xc - lo) / (hi - lo) * nbins).astype(np.int64)
    return np.minimum(idx, nbins - 1)


@register_feature_map
class Histogram(OneHotFeatureMap):
    r"""One-hot bin of every column: ``d`` marginal histograms side by side.

    Column ``j`` has ``nbins_j`` equal-width bins over the public range ``[lo_j, hi_j]``; values
    outside are counted in the end bins (clipping). ``Φ(x)`` has one 1 per column.

    **Sensitivity.** Exactly ``d`` entries equal 1, the rest 0 (integers, no rounding):
    ``‖Φ(x)‖₁ = d`` and ``‖Φ(x)‖₂ = √d``.

    :param bounds: public ``(lower, upper)`` per column (scalars broadcast)
    :param bins: number of bins, one int for all columns or one per column
    :param dim: number of columns (needed only when both bounds are scalars)
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=([0, 0], [1, 10]), bins=[2, 5])
    >>> fm.transform(np.array([[0.75, 3.0]])).tolist()
    [[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]]
    >>> fm.sensitivity(1)
    2.0
    """

    kernel_name = "histogram bins (indicator kernel)"

    def __init__(self, bounds: Any, bins: int | list[int] = 32, dim: int | None = None) -> None:
        self.lower, self.upper = check_bounds(bounds, dim)
        self.dim = self.lower.size
        b = np.atleast_1d(np.asarray(bins))
        if (
            b.ndim != 1
            or b.size not in (1, self.dim)
            or not np.issubdtype(b.dtype, np.integer)
            or (b <= 0).any()
        ):
            raise ValueError(f"bins ({bins!r}) must be a positive int or one positive int per column")
        self.bins = np.broadcast_to(b.astype(np.int64), (self.dim,)).copy()
        self.offsets = np.concatenate([[0], np.cumsum(self.bins)[:-1]])
        self.num_features = int(self.bins.sum())

    def _params(self) -> dict[str, Any]:
        return {"bounds": [self.lower.tolist(), self.upper.tolist()], "bins": self.bins.tolist()}

    def bin_edges(self, column: int) -> np.ndarray:
        """The ``nbins + 1`` public edges of column ``column``."""
        return np.linspace(self.lower[column], self.upper[column], int(self.bins[column]) + 1)

    def _flat(self, X: np.ndarray) -> np.ndarray:
        return _bin_index(X, self.lower, self.upper, self.bins) + self.offsets

    def _ones_per_row(self) -> int:
        return self.dim


@register_feature_map
class DyadicTrees(OneHotFeatureMap):
    r"""Per-coordinate complete binary trees over ``2^L`` equal bins of ``[lo_j, hi_j]``.

    Coordinate ``j`` owns ``2^(L+1) - 1`` nodes in heap order (level ``ℓ`` holds ``2^ℓ`` nodes
    starting at offset ``2^ℓ - 1``). A value adds 1 to the leaf containing it and to each of its
    ``L`` ancestors. Any interval of leaves is a sum of ``O(L)`` canonical nodes, which is what
    the ℓ1-distance structure uses.

    **Sensitivity.** A row adds exactly one 1 per level per coordinate: ``d·(L+1)`` ones, so
    ``‖Φ(x)‖₁ = d(L+1)`` and ``‖Φ(x)‖₂ = √(d(L+1))`` (integers, no rounding).

    :param bounds: public ``(lower, upper)`` per column
    :param levels: ``L``; the finest level has ``2^L`` leaves (``1 ≤ L ≤ 24``)
    :param dim: number of columns (needed only when both bounds are scalars)
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=2, dim=1)
    >>> fm.transform(np.array([[0.3]])).astype(int).tolist()   # root, left child, leaf 1 of 4
    [[1, 1, 0, 0, 1, 0, 0]]
    >>> fm.sensitivity(1)
    3.0
    """

    kernel_name = "dyadic interval counts"

    def __init__(self, bounds: Any, levels: int = 10, dim: int | None = None) -> None:
        self.lower, self.upper = check_bounds(bounds, dim)
        self.dim = self.lower.size
        self.levels = check_positive_int(levels, "levels")
        if self.levels > 24:
            raise ValueError(f"levels ({levels}) must be at most 24")
        self.nodes_per_tree = (1 << (self.levels + 1)) - 1
        self.num_features = self.dim * self.nodes_per_tree

    def _params(self) -> dict[str, Any]:
        return {"bounds": [self.lower.tolist(), self.upper.tolist()], "levels": self.levels}

    def node_index(self, level: int, position: np.ndarray | int, column: int = 0) -> np.ndarray:
        """Flat feature index of node ``position`` at ``level`` in the tree of ``column``."""
        return column * self.nodes_per_tree + (1 << level) - 1 + np.asarray(position)

    def _flat(self, X: np.ndarray) -> np.ndarray:
        leaves = _bin_index(X, self.lower, self.upper, np.int64(1 << self.levels))
        lv = np.arange(self.levels + 1)
        nodes = (leaves[:, :, None] >> (self.levels - lv)) + ((1 << lv) - 1)
        nodes += (np.arange(self.dim) * self.nodes_per_tree)[:, None]
        return nodes.reshape(X.shape[0], -1)

    def _ones_per_row(self) -> int:
        return self.dim * (self.levels + 1)
