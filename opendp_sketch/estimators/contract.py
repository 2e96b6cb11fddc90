"""The one estimator contract: ``Est(**params).fit(sketch)``, and ``Est(sketch, **params)`` its
short form, exactly that in one call.

A class keeps its parameters in its ``__init__`` signature (for help and type checkers) and
hands them to :meth:`SketchEstimator._start`; :meth:`SketchEstimator.fit` then reads the
released sketch with them (``_fit(sketch, **params)``) and returns the estimator.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..backends.domains import box_data_bounds
from ..features.base import FeatureMap
from ..features.byclass import ByClass
from ..sketch import Sketch

__all__ = ["SketchEstimator", "renamed_keyword", "fitted", "default_column_names", "resolve_box"]

_E = TypeVar("_E", bound="SketchEstimator")


class SketchEstimator:
    """Base of the estimators that read a released sketch: parameters first, then :meth:`fit`.

    >>> class Count(SketchEstimator):
    ...     def __init__(self, sketch=None, *, scale=1.0):
    ...         self._start(sketch, scale=scale)
    ...     def _fit(self, sketch, *, scale):
    ...         self.count_ = sketch * scale
    >>> Count(scale=2.0).fit(21).count_, Count(21, scale=2.0).count_
    (42.0, 42.0)
    """

    _params: dict[str, Any]
    #: ``_fit(sketch, **params)``: each estimator's own reading of a sketch, with its parameters
    _fit: Callable[..., None]

    def _start(self, sketch: Any, **params: Any) -> None:
        """Keep ``params``; with a ``sketch``, fit it now (the short form)."""
        self._params = params
        if sketch is not None:
            self.fit(sketch)

    def fit(self: _E, sketch: Any) -> _E:
        """Read the released ``sketch`` with the estimator's parameters and return the estimator.
        Post-processing: no budget.

        :raises ValueError: for a sketch the estimator cannot read (its class says which)
        """
        self._fit(sketch, **self._params)
        return self


def renamed_keyword(owner: str, old: str, old_value: Any, new: str, new_value: Any) -> Any:
    """``new_value``, or ``old_value`` with a ``DeprecationWarning`` when the caller used the
    keyword's old name (kept one release after a rename).

    >>> renamed_keyword("KDE", "estimator", None, "aggregate", "mean")
    'mean'
    """
    if old_value is None:
        return new_value
    warnings.warn(
        f"{owner}({old}=) is deprecated and goes in the next release: use {new}=",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


def fitted(name: str) -> property:
    """The fitted attribute ``name`` under scikit-learn's name for it, ``name_`` (read-only).

    >>> class Est:
    ...     n_hat_ = fitted("n_hat")
    >>> e = Est(); e.n_hat = 3.0; e.n_hat_
    3.0
    """
    return property(lambda self: getattr(self, name), doc=f"``{name}``, fitted from the sketch")


def default_column_names(fm: FeatureMap) -> list[str]:
    """The names of a sketch's columns when it records none: ``x0, x1, …`` (and ``label``).

    >>> import opendp_sketch as dps
    >>> default_column_names(dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=2))
    ['x0', 'x1', 'label']
    """
    names = [f"x{j}" for j in range(fm.dim)]
    return names + ["label"] if isinstance(fm, ByClass) else names


def resolve_box(bounds: Any, sketch: Sketch, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The public box an estimator reads ``sketch`` in: ``bounds`` if given (``d`` columns),
    else the box the sketch records.

    :raises ValueError: without either, or for bounds of another width
    """
    if bounds is None:
        if sketch.bounds is None:
            raise ValueError("bounds are required: the sketch does not record the public box")
        lo, hi = (np.asarray(b, dtype=np.float64) for b in sketch.bounds)
        return lo, hi
    lo, hi = box_data_bounds(bounds, sketch.feature_map)
    if lo.size != d:
        raise ValueError(f"bounds must describe {d} columns")
    return lo.astype(np.float64), hi.astype(np.float64)
