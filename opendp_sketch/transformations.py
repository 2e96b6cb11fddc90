"""OpenDP transformations: public-box clipping and the exact feature sum ``Σ Φ(x_i)``.

Each constructor validates every argument before returning, so the function it builds never
raises on a member of its input domain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from ._bounds import check_bounds
from .domains import box_descriptor, box_domain
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap

__all__ = ["make_box_clip", "then_box_clip", "make_feature_sum", "then_feature_sum", "make_row_count"]

_I64_MAX = (1 << 63) - 1
_F64_EXACT = 1 << 53


def _require_symmetric(input_metric: dp.Metric) -> None:
    if input_metric != dp.symmetric_distance():
        raise ValueError(f"input_metric ({input_metric}) must be symmetric_distance()")


def _check_chunking(chunk_rows: Any, n_jobs: Any) -> None:
    """``chunk_rows`` a positive int, ``n_jobs`` a positive int or ``None`` (every exact-sum source)."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows <= 0:
        raise ValueError(f"chunk_rows ({chunk_rows!r}) must be a positive integer")
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs <= 0):
        raise ValueError(f"n_jobs ({n_jobs!r}) must be a positive integer or None")


def impute_values(impute: Any, num_columns: int) -> np.ndarray:
    """Public NaN replacements: one finite number, or one per column, as a float64 vector."""
    try:
        fill = np.broadcast_to(np.asarray(impute, dtype=np.float64), (num_columns,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"impute ({impute!r}) must be one number or {num_columns} numbers") from None
    if not np.isfinite(fill).all():
        raise ValueError(f"impute values must be finite (got {impute!r})")
    return fill


def _stability_up(d_in: int, sens: float) -> float:
    """``d_in · sens`` rounded up, so the stated stability is never below the true one."""
    return math.nextafter(d_in * sens, math.inf)


def _integer_sum_transformation(
    input_domain: dp.Domain, input_metric: dp.Metric, feature_map: FeatureMap, p: int, function: Any
) -> dp.Transformation:
    """An ``int64`` feature-sum transformation computed by ``function``, under ``l1_distance(T=i64)``
    (``p=1``) or ``l2_distance(T=f64)`` (``p=2``) with stability ``d_in·Δ_p`` in integer units.

    Every exact-sum source (in memory, streamed, Dask) shares this output type and stability.
    """
    isens = feature_map.int_sensitivity(p)
    output_domain = dp.vector_domain(dp.atom_domain(T=dp.i64))
    if p == 1:
        metric, stability = dp.l1_distance(T=dp.i64), lambda d_in: d_in * isens
    else:
        metric, stability = dp.l2_distance(T=float), lambda d_in: _stability_up(d_in, isens)
    return dp.t.make_user_transformation(input_domain, input_metric, output_domain, metric, function, stability)


def _count_transformation(input_domain: dp.Domain, input_metric: dp.Metric, function: Any) -> dp.Transformation:
    """A row count (``i64``, 1-stable under the symmetric distance) computed by ``function``."""
    return dp.t.make_user_transformation(
        input_domain, input_metric, dp.atom_domain(T=dp.i64), dp.absolute_distance(T=dp.i64), function, lambda d_in: d_in
    )


def make_box_clip(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    bounds: Any,
    impute: float | Sequence[float] | None = None,
    column_names: Sequence[str] | None = None,
) -> dp.Transformation:
    """Clip each column into the public box; optionally replace NaN by a public constant.

    A row-wise map, so 1-stable under the symmetric distance. ``±inf`` clip to the bounds.
    Without ``impute`` the input domain must exclude NaN (``array2_domain(nan=False)``);
    :func:`release_sketch` refuses data containing NaN on the curator's side, before building
    anything. The function itself never raises on data: should a NaN reach it anyway (data
    outside the declared domain, e.g. in a ``dp.Context``), it becomes the public lower bound,
    like any other row-wise value, so the stability ``d_in`` still holds.

    :param input_domain: ``dp.numpy.array2_domain(num_columns=d, T=float)``
    :param input_metric: ``dp.symmetric_distance()``
    :param bounds: public ``(lower, upper)``
    :param impute: public value(s) that replace NaN, or ``None``
    :param column_names: names carried into the output domain
    :return: a Transformation into :func:`box_domain`
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = dps.make_box_clip(dp.numpy.array2_domain(num_columns=2, T=float, nan=False),
    ...                       dp.symmetric_distance(), bounds=(0.0, 1.0))
    >>> t(np.array([[-3.0, 0.5], [np.inf, 2.0], [np.nan, 0.25]])).tolist()
    [[0.0, 0.5], [1.0, 1.0], [0.0, 0.25]]
    >>> t.map(1)
    1
    """
    dp.assert_features("contrib", "honest-but-curious")
    desc = getattr(input_domain, "descriptor", None)
    if type(desc).__name__ != "NPArray2Domain" or desc.T != "f64":
        raise ValueError(f"input_domain ({input_domain}) must be dp.numpy.array2_domain(T=float)")
    _require_symmetric(input_metric)
    lo, hi = check_bounds(bounds, desc.num_columns)
    if desc.num_columns is not None and desc.num_columns != lo.size:
        raise ValueError(f"bounds have {lo.size} columns but input_domain has {desc.num_columns}")
    fill = None
    if impute is not None:
        fill = impute_values(impute, lo.size)
    elif desc.nan:
        raise ValueError(
            f"input_domain ({input_domain}) permits NaN: pass impute=<public value> or use nan=False"
        )
    output_domain = box_domain((lo, hi), column_names=column_names)

    def function(x: np.ndarray) -> np.ndarray:
        # never raises on data (a raised query is not charged: a free oracle); without impute a
        # NaN, outside the declared domain, goes to the public lower bound (fmax ignores NaN)
        x = np.asarray(x, dtype=np.float64)
        if fill is not None:
            x = np.where(np.isnan(x), fill, x)
        return np.fmin(np.fmax(x, lo), hi)

    return dp.t.make_user_transformation(
        input_domain, input_metric, output_domain, input_metric, function, lambda d_in: d_in
    )


then_box_clip = to_then(make_box_clip)


def _check_feature_map(input_domain: dp.Domain, feature_map: Any) -> tuple[np.ndarray, np.ndarray]:
    desc = box_descriptor(input_domain)
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if feature_map.input_dim != desc.num_columns:
        raise ValueError(
            f"feature_map expects {feature_map.input_dim} columns but input_domain has {desc.num_columns}"
        )
    return desc.bounds


def make_feature_sum(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: Literal[1, 2] = 1,
    fixed_point: bool = False,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    r"""``Σ_i Φ̃(x_i)`` over the rows of a bounded array, computed exactly in integers.

    ``Φ̃(x) = q(x)·2^-k`` is the feature map as implemented (see
    :class:`~opendp_sketch.features.base.FeatureMap`); the integer sum is exact, so the
    stability ``d_in · Δ_p`` (``Δ_p = feature_map.sensitivity(p)``) holds for the arithmetic
    that runs, with no ``idealized-numerics``. Rows are processed in chunks: memory is
    independent of ``n``.

    * ``fixed_point=False``: a float64 vector in feature units under ``l{p}_distance(T=f64)``
      (entries saturate at ``±2^53`` units, where float64 stops being exact; saturation is
      1-Lipschitz, so the stability still holds).
    * ``fixed_point=True``: the integer vector (units of ``2^-k``) under ``l1_distance(T=i64)``
      or ``l2_distance(T=f64)``, saturating at the int64 range; this is what
      :func:`~opendp_sketch.make_private_sketch` noises with OpenDP's exact integer samplers.

    :param input_domain: a :func:`~opendp_sketch.box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map
    :param p: 1 or 2, the norm of the output metric
    :param fixed_point: output integer units instead of floats
    :param chunk_rows: rows per chunk
    :param n_jobs: threads (result identical for any value)
    :return: a Transformation
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> t = dps.make_feature_sum(dps.box_domain((0.0, 1.0), num_columns=1),
    ...                          dp.symmetric_distance(), feature_map=fm, p=1)
    >>> t(np.array([[0.1], [0.2], [0.9]]))
    [2.0, 0.0, 0.0, 1.0]
    >>> t.map(1), t.output_metric
    (1.0, L1Distance(f64))
    """
    dp.assert_features("contrib", "honest-but-curious")
    lo, hi = _check_feature_map(input_domain, feature_map)
    _require_symmetric(input_metric)
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    if not isinstance(fixed_point, bool):
        raise ValueError(f"fixed_point ({fixed_point!r}) must be a bool")
    _check_chunking(chunk_rows, n_jobs)

    def exact(x: np.ndarray, limit: int) -> np.ndarray:
        return feature_map._accumulate(x, (lo, hi), chunk_rows, n_jobs).clipped(limit)

    if fixed_point:
        return _integer_sum_transformation(input_domain, input_metric, feature_map, p, lambda x: exact(x, _I64_MAX))

    sens = feature_map.sensitivity(p)
    k = feature_map.frac_bits

    def function_float(x: np.ndarray) -> np.ndarray:
        return np.ldexp(exact(x, _F64_EXACT).astype(np.float64), -k)  # |v| ≤ 2^53: exact

    metric = dp.l1_distance(T=float) if p == 1 else dp.l2_distance(T=float)
    return dp.t.make_user_transformation(
        input_domain, input_metric, dp.vector_domain(dp.atom_domain(T=float, nan=False)), metric,
        function_float, lambda d_in: _stability_up(d_in, sens),
    )


then_feature_sum = to_then(make_feature_sum)


def make_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """Number of rows of a bounded array as ``i64`` (1-stable under the symmetric distance).

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = dps.make_row_count(dps.box_domain((0, 1), num_columns=2), dp.symmetric_distance())
    >>> t(np.zeros((5, 2))), t.map(3)
    (5, 3)
    """
    dp.assert_features("contrib", "honest-but-curious")
    box_descriptor(input_domain)
    _require_symmetric(input_metric)
    return _count_transformation(input_domain, input_metric, lambda x: min(int(np.shape(x)[0]), _I64_MAX))
