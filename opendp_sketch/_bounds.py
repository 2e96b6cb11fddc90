"""Parsing and checking of public bounds (a box per column)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_bounds"]


def check_bounds(bounds: Any, num_columns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(lower, upper)`` as float64 vectors after checking the public box.

    ``bounds`` is ``(lower, upper)`` where each side is a scalar (broadcast to ``num_columns``)
    or a sequence with one value per column.

    :raises ValueError: if the bounds are malformed, non-finite, or ``lower >= upper`` anywhere.

    >>> check_bounds((0, [1, 2]))
    (array([0., 0.]), array([1., 2.]))
    """
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise ValueError(f"bounds ({bounds!r}) must be a pair (lower, upper)")
    try:
        lo = np.atleast_1d(np.asarray(bounds[0], dtype=np.float64))
        hi = np.atleast_1d(np.asarray(bounds[1], dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"bounds ({bounds!r}) must be numeric") from None
    if lo.ndim != 1 or hi.ndim != 1:
        raise ValueError(f"bounds ({bounds!r}) must be scalars or 1-D sequences")
    width = max(lo.size, hi.size, num_columns or 1)
    if num_columns is not None and (lo.size not in (1, num_columns) or hi.size not in (1, num_columns)):
        raise ValueError(f"bounds ({bounds!r}) must have one value per column ({num_columns} columns)")
    if lo.size not in (1, width) or hi.size not in (1, width):
        raise ValueError(f"bounds ({bounds!r}) lower and upper must have the same length")
    lo = np.broadcast_to(lo, (width,)).copy()
    hi = np.broadcast_to(hi, (width,)).copy()
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError(f"bounds ({bounds!r}) must be finite")
    with np.errstate(over="ignore"):
        if not np.isfinite(hi - lo).all():
            raise ValueError(f"bounds ({bounds!r}) must have a finite width (upper - lower)")
    if not (lo < hi).all():
        raise ValueError(f"bounds ({bounds!r}) must have lower < upper in every column")
    return lo, hi
