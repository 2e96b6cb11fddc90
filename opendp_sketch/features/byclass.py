"""Class-conditional wrapper: one sketch holds a block per class. Proof: ``docs/features/byclass.md``."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from .._validate import check_positive_int
from .base import FeatureMap, register_feature_map

__all__ = ["ByClass"]


@register_feature_map
class ByClass(FeatureMap):
    r"""``Φ_C(x, y) = e_y ⊗ [Φ(x), 1]``: the inner features and a count, in the block of class ``y``.

    Rows carry ``dim + 1`` columns, the last being the class label; labels are mapped to
    ``clip(round(y), 0, C - 1)`` (a public, row-wise rule). Block ``c`` of the summed sketch is
    ``[Σ_{y_i = c} Φ(x_i), n_c]``: per-class sketches and per-class counts from one release.

    **Sensitivity.** A row touches only its own block, so ``‖Φ_C‖₁ = ‖Φ‖₁ + 1`` and
    ``‖Φ_C‖₂ = √(‖Φ‖₂² + 1)``; the implemented integers use the inner map's enforced bound plus
    the count unit ``⌊γ·2^k⌋``.

    :param feature_map: the inner map ``Φ``
    :param num_classes: ``C``
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=1), num_classes=2)
    >>> fm.transform(np.array([[0.2, 1.0]])).tolist()   # x = 0.2 in class 1
    [[0.0, 0.0, 0.0, 1.0, 0.0, 1.0]]
    >>> fm.sensitivity(1)
    2.0
    """

    kernel_name = "class-conditional"

    def __init__(self, feature_map: FeatureMap, num_classes: int) -> None:
        if not isinstance(feature_map, FeatureMap) or isinstance(feature_map, ByClass):
            raise ValueError(f"feature_map ({feature_map!r}) must be a feature map other than ByClass")
        self.feature_map = feature_map
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.dim = feature_map.dim
        self.block_size = feature_map.num_features + 1
        self.num_features = self.num_classes * self.block_size
        self.frac_bits = feature_map.frac_bits
        self.gain = feature_map.gain
        self._count_unit = math.floor(math.ldexp(self.gain, self.frac_bits))

    @property
    def input_dim(self) -> int:
        return self.dim + 1

    def _params(self) -> dict[str, Any]:
        return {"feature_map": self.feature_map.to_dict(), "num_classes": self.num_classes}

    def _draws(self) -> list[np.ndarray]:
        return self.feature_map._draws()

    def labels(self, X: np.ndarray) -> np.ndarray:
        """The class of each row: ``clip(round(last column), 0, C - 1)``; NaN maps to class 0."""
        y = np.nan_to_num(X[:, -1], nan=0.0)
        return np.clip(np.rint(y), 0, self.num_classes - 1).astype(np.int64)

    def transform(self, X: Any) -> np.ndarray:
        X = self._as_rows(X)
        inner = self.feature_map.transform(X[:, :-1])
        out = np.zeros((X.shape[0], self.num_features))
        y = self.labels(X)
        for c in range(self.num_classes):
            rows = y == c
            out[rows, c * self.block_size : (c + 1) * self.block_size - 1] = inner[rows]
            out[rows, (c + 1) * self.block_size - 1] = 1.0
        return out

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        inner = self.feature_map._fixed_block(X[:, :-1])
        out = np.zeros((X.shape[0], self.num_features), dtype=np.int64)
        y = self.labels(X)
        for c in range(self.num_classes):
            rows = y == c
            out[rows, c * self.block_size : (c + 1) * self.block_size - 1] = inner[rows]
            out[rows, (c + 1) * self.block_size - 1] = self._count_unit
        return out

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        out = np.zeros(self.num_features, dtype=np.int64)
        y = self.labels(X)
        for c in range(self.num_classes):
            rows = X[y == c, :-1]
            start = c * self.block_size
            if rows.shape[0]:
                out[start : start + self.block_size - 1] = self.feature_map._fixed_block_sum(rows)
            out[start + self.block_size - 1] = rows.shape[0] * self._count_unit
        return out

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return self.feature_map._int_bound(p) + (self._count_unit if p == 1 else self._count_unit**2)

    def block(self, values: np.ndarray, c: int) -> tuple[np.ndarray, Any]:
        """Split a vector laid out like ``Φ_C`` into class ``c``'s inner part and its count."""
        b = np.asarray(values)[..., c * self.block_size : (c + 1) * self.block_size]
        return b[..., :-1], b[..., -1]
