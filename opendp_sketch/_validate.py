"""Argument checks shared by every module: one place, one message style.

Every check raises ``ValueError(f"name (value) must be ...")`` naming the argument, the value
given and what it must be. None of them is ever called on private data values inside a
measurement: they run on the caller's side, before anything is built or released.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import opendp.prelude as dp

__all__ = [
    "check_bounds",
    "check_positive_int",
    "check_positive_float",
    "check_number",
    "check_fraction",
    "check_seed",
    "check_chunking",
    "check_column_names",
    "impute_values",
    "require_symmetric",
]


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


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as an int if it is a positive integer (not a bool).

    >>> check_positive_int(3, "bins")
    3
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} ({value!r}) must be a positive integer")
    return int(value)


def check_positive_float(value: Any, name: str) -> float:
    """``value`` as a float if it is a positive finite number (strings of numbers included).

    >>> check_positive_float(0.5, "bandwidth")
    0.5
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} ({value!r}) must be a positive finite number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} ({value!r}) must be a positive finite number")
    return v


def check_number(value: Any, name: str, allow_zero: bool = False) -> float:
    """A real number (not bool or str) that is finite and positive (or zero if allowed).

    >>> check_number(0, "scale", allow_zero=True)
    0.0
    """
    kind = "non-negative" if allow_zero else "positive"
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} ({value!r}) must be a {kind} finite number")
    f = float(value)
    if not (math.isfinite(f) and (f > 0 or (allow_zero and f == 0))):
        raise ValueError(f"{name} ({value!r}) must be a {kind} finite number")
    return f


def check_fraction(value: Any, name: str = "count_fraction") -> float:
    """A number strictly between 0 and 1 (e.g. the count's share of the budget).

    >>> check_fraction(0.02)
    0.02
    """
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if 0.0 < float(value) < 1.0:
            return float(value)
    raise ValueError(f"{name} ({value!r}) must be strictly between 0 and 1")


def check_seed(seed: Any) -> int:
    """A non-negative integer seed of a public random draw.

    >>> check_seed(7)
    7
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed ({seed!r}) must be a non-negative integer")
    return int(seed)


def check_chunking(chunk_rows: Any, n_jobs: Any) -> None:
    """``chunk_rows`` a positive int, ``n_jobs`` a positive int or ``None`` (every exact-sum source)."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) or chunk_rows <= 0:
        raise ValueError(f"chunk_rows ({chunk_rows!r}) must be a positive integer")
    if n_jobs is not None and (
        isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs <= 0
    ):
        raise ValueError(f"n_jobs ({n_jobs!r}) must be a positive integer or None")


def check_column_names(names: Any) -> list[str] | None:
    """``None`` or a list of distinct strings (a bare string is not a list of names).

    >>> check_column_names(("a", "b"))
    ['a', 'b']
    """
    if names is None:
        return None
    if (
        isinstance(names, (str, bytes))
        or not isinstance(names, Sequence)
        or not all(isinstance(c, str) for c in names)
    ):
        raise ValueError(f"column_names ({names!r}) must be a list of strings")
    if len(set(names)) != len(names):
        raise ValueError(f"column_names ({list(names)}) must be distinct")
    return list(names)


def impute_values(
    impute: Any, num_columns: int, bounds: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Public NaN replacements: one finite number, or one per column, as a float64 vector; with
    ``bounds``, each inside its column's public range (an outside value would be silently
    clipped to the bound, which is not what the curator asked for).

    >>> impute_values(0.5, 2)
    array([0.5, 0.5])
    >>> impute_values(0, 1, (np.array([950.0]), np.array([1060.0])))
    Traceback (most recent call last):
        ...
    ValueError: impute (0) must lie inside the public bounds of every column; column 0 is [950.0, 1060.0]
    """
    try:
        fill = np.broadcast_to(np.asarray(impute, dtype=np.float64), (num_columns,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"impute ({impute!r}) must be one number or {num_columns} numbers") from None
    if not np.isfinite(fill).all():
        raise ValueError(f"impute values must be finite (got {impute!r})")
    if bounds is not None:
        lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), (num_columns,)) for b in bounds)
        outside = np.flatnonzero((fill < lo) | (fill > hi))
        if outside.size:
            j = int(outside[0])
            raise ValueError(
                f"impute ({impute!r}) must lie inside the public bounds of every column; "
                f"column {j} is [{lo[j]}, {hi[j]}]"
            )
    return fill


def require_symmetric(input_metric: dp.Metric) -> None:
    """Refuse any input metric but the symmetric distance (the privacy unit is a number of rows)."""
    if input_metric != dp.symmetric_distance():
        raise ValueError(f"input_metric ({input_metric}) must be dp.symmetric_distance()")
