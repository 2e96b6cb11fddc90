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

from .._fixed import Accumulator
from .._validate import check_bounds, check_chunking, impute_values, require_symmetric
from ..features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from ..features.byclass import ByClass
from .domains import BoxDescriptor, NPArray2BoxDomain, box_data_bounds, box_descriptor, box_domain
from .protocol import Backend, register_backend

__all__ = [
    "make_box_clip",
    "then_box_clip",
    "make_feature_sum",
    "then_feature_sum",
    "make_row_count",
    "make_sum_and_count",
    "make_clamped_sum_and_count",
    "integer_sum_transformation",
    "count_transformation",
    "pair_transformation",
    "pair_parts",
    "I64_MAX",
    "to_array",
    "check_rows",
    "check_finite",
    "memory_source",
]

#: exact sums and counts saturate here (saturation is 1-Lipschitz: stabilities still hold)
I64_MAX = (1 << 63) - 1
_F64_EXACT = 1 << 53
#: metric of a (sum, count) pair: the symmetric distance between the datasets it came from
_SOURCE_DISTANCE = "SymmetricDistanceOfSource()"


def _stability_up(d_in: int, sens: float) -> float:
    """``d_in · sens`` rounded up, so the stated stability is never below the true one."""
    return math.nextafter(d_in * sens, math.inf)


def integer_sum_transformation(
    input_domain: dp.Domain, input_metric: dp.Metric, feature_map: FeatureMap, p: Literal[1, 2], function: Any
) -> dp.Transformation:
    """An ``int64`` feature-sum transformation computed by ``function``, under ``l1_distance(T=i64)``
    (``p=1``) or ``l2_distance(T=f64)`` (``p=2``) with stability ``d_in·Δ_p`` in integer units.

    Every exact-sum source (in memory, streamed, Dask, Spark) shares this output type and stability.
    """
    isens = feature_map.int_sensitivity(p)
    output_domain = dp.vector_domain(dp.atom_domain(T=dp.i64))
    if p == 1:
        metric, stability = dp.l1_distance(T=dp.i64), lambda d_in: d_in * isens
    else:
        metric, stability = dp.l2_distance(T=float), lambda d_in: _stability_up(d_in, isens)
    return dp.t.make_user_transformation(
        input_domain, input_metric, output_domain, metric, function, stability
    )


def count_transformation(
    input_domain: dp.Domain, input_metric: dp.Metric, function: Any
) -> dp.Transformation:
    """A row count (``i64``, 1-stable under the symmetric distance) computed by ``function``."""
    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        dp.atom_domain(T=dp.i64),
        dp.absolute_distance(T=dp.i64),
        function,
        lambda d_in: d_in,
    )


def pair_transformation(
    input_domain: dp.Domain, input_metric: dp.Metric, feature_map: FeatureMap, function: Any
) -> dp.Transformation:
    """The exact pair ``(Σ q(x_i), n)`` computed by a backend's ``function`` in one pass.

    The output metric is ``SymmetricDistanceOfSource()``: the distance of two pairs is the
    symmetric distance of the datasets they came from, so the pair is 1-stable by definition;
    :func:`pair_parts` reads each half with the stability of its single-process counterpart
    (sum: ``d_in·Δ_p``, count: ``d_in``). The release layer noises the two halves *after* the
    pair, so a composition of the two noisy halves makes one pass over the data, not two.
    """
    m = feature_map.num_features
    output_domain = dp.user_domain(
        f"SumAndCount(num_features={m})",
        lambda v: isinstance(v, tuple) and len(v) == 2 and np.shape(v[0]) == (m,) and isinstance(v[1], int),
    )
    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        output_domain,
        dp.user_distance(_SOURCE_DISTANCE),
        function,
        lambda d_in: d_in,
    )


def pair_parts(
    pair: dp.Transformation, feature_map: FeatureMap, p: Literal[1, 2]
) -> tuple[dp.Transformation, dp.Transformation]:
    """The sum half (stability ``d_in·Δ_p``) and the count half (``d_in``) of a pair's output."""
    return (
        integer_sum_transformation(pair.output_domain, pair.output_metric, feature_map, p, lambda v: v[0]),
        count_transformation(pair.output_domain, pair.output_metric, lambda v: v[1]),
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
    desc: Any = getattr(input_domain, "descriptor", None)
    if type(desc).__name__ != "NPArray2Domain" or desc.T != "f64":
        raise ValueError(f"input_domain ({input_domain}) must be dp.numpy.array2_domain(T=float)")
    require_symmetric(input_metric)
    lo, hi = check_bounds(bounds, desc.num_columns)
    if desc.num_columns is not None and desc.num_columns != lo.size:
        raise ValueError(f"bounds have {lo.size} columns but input_domain has {desc.num_columns}")
    fill = None
    if impute is not None:
        fill = impute_values(impute, lo.size, (lo, hi))
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


def check_source_arguments(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: Any,
    n_jobs: Any,
    kind: type[BoxDescriptor],
    name: str,
) -> Any:
    """The arguments of a backend's ``(sum, count)`` constructor (tables, Dask, Spark), checked:
    the domain's descriptor (an instance of ``kind``, made by ``name``), the metric, a feature
    map of as many columns, and ``n_jobs``. Returns the descriptor."""
    dp.assert_features("contrib", "honest-but-curious")
    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, kind):
        raise ValueError(f"input_domain ({input_domain}) must be a {name}")
    require_symmetric(input_metric)
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    columns = int(getattr(desc, "num_columns"))  # noqa: B009 - every BoxDescriptor has it
    if feature_map.input_dim != columns:
        raise ValueError(
            f"feature_map expects {feature_map.input_dim} columns but input_domain has {columns}"
        )
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs <= 0):
        raise ValueError(f"n_jobs ({n_jobs!r}) must be a positive integer or None")
    return desc


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
    require_symmetric(input_metric)
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    if not isinstance(fixed_point, bool):
        raise ValueError(f"fixed_point ({fixed_point!r}) must be a bool")
    check_chunking(chunk_rows, n_jobs)

    def exact(x: np.ndarray, limit: int) -> np.ndarray:
        return feature_map._accumulate(x, (lo, hi), chunk_rows, n_jobs).clipped(limit)

    if fixed_point:
        return integer_sum_transformation(
            input_domain, input_metric, feature_map, p, lambda x: exact(x, I64_MAX)
        )

    sens = feature_map.sensitivity(p)
    k = feature_map.frac_bits

    def function_float(x: np.ndarray) -> np.ndarray:
        return np.ldexp(exact(x, _F64_EXACT).astype(np.float64), -k)  # |v| ≤ 2^53: exact

    metric = dp.l1_distance(T=float) if p == 1 else dp.l2_distance(T=float)
    return dp.t.make_user_transformation(
        input_domain,
        input_metric,
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        metric,
        function_float,
        lambda d_in: _stability_up(d_in, sens),
    )


then_feature_sum = to_then(make_feature_sum)


def make_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """Number of rows of a bounded array as ``i64`` (1-stable under the symmetric distance).

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = dps.backends.memory.make_row_count(dps.box_domain((0, 1), num_columns=2), dp.symmetric_distance())
    >>> t(np.zeros((5, 2))), t.map(3)
    (5, 3)
    """
    dp.assert_features("contrib", "honest-but-curious")
    box_descriptor(input_domain)
    require_symmetric(input_metric)
    return count_transformation(input_domain, input_metric, lambda x: min(int(np.shape(x)[0]), I64_MAX))


def make_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    """The numpy backend: the exact pair ``(Σ q(x_i), n)`` of a bounded array (see
    :func:`pair_transformation`); the release layer adds the noise.

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.memory import make_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = make_sum_and_count(dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance(), fm)
    >>> s, n = t(np.array([[0.1], [0.2], [0.9]]))
    >>> s.tolist(), n
    ([2, 1], 3)
    """
    dp.assert_features("contrib", "honest-but-curious")
    lo, hi = _check_feature_map(input_domain, feature_map)
    require_symmetric(input_metric)
    check_chunking(chunk_rows, n_jobs)

    def function(x: np.ndarray) -> tuple[np.ndarray, int]:
        total = feature_map._accumulate(x, (lo, hi), chunk_rows, n_jobs).clipped(I64_MAX)
        return total, min(int(np.shape(x)[0]), I64_MAX)

    return pair_transformation(input_domain, input_metric, feature_map, function)


#: rows imputed at a time by :func:`make_clamped_sum_and_count` (bounded extra memory)
_IMPUTE_BLOCK_ROWS = 1 << 16


def make_clamped_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    bounds: Any,
    impute: float | Sequence[float] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    """The numpy backend without a clipped copy: the exact pair ``(Σ q(clamp(x_i)), n)`` of any
    float64 array, each chunk clipped into the public box inside the sum.

    Equal to ``make_box_clip >> make_sum_and_count`` (row-wise clip, then the sum), but the table
    is never copied: NaN reads as the public ``impute`` value (imputed in blocks of rows) or,
    without one, the lower bound; ``±inf`` and out-of-box values are clipped. Never raises on
    values.

    :param input_domain: ``dp.numpy.array2_domain(num_columns=d, T=float)``
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.memory import make_clamped_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = make_clamped_sum_and_count(dp.numpy.array2_domain(num_columns=1, T=float, nan=True),
    ...                                dp.symmetric_distance(), fm, (0.0, 1.0), impute=0.9)
    >>> s, n = t(np.array([[0.1], [-5.0], [np.nan], [np.inf]]))
    >>> s.tolist(), n
    ([2, 2], 4)
    """
    dp.assert_features("contrib", "honest-but-curious")
    desc: Any = getattr(input_domain, "descriptor", None)
    if type(desc).__name__ != "NPArray2Domain" or desc.T != "f64":
        raise ValueError(f"input_domain ({input_domain}) must be dp.numpy.array2_domain(T=float)")
    require_symmetric(input_metric)
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    lo, hi = check_bounds(bounds, feature_map.input_dim)
    if desc.num_columns is not None and desc.num_columns != lo.size:
        raise ValueError(f"bounds have {lo.size} columns but input_domain has {desc.num_columns}")
    fill = None if impute is None else impute_values(impute, lo.size, (lo, hi))
    check_chunking(chunk_rows, n_jobs)

    def function(x: np.ndarray) -> tuple[np.ndarray, int]:
        if fill is None:  # the per-chunk clip sends NaN to the lower bound
            total = feature_map._accumulate(x, (lo, hi), chunk_rows, n_jobs)
        else:
            total = Accumulator(feature_map.num_features)
            for s in range(0, x.shape[0], _IMPUTE_BLOCK_ROWS):
                block = x[s : s + _IMPUTE_BLOCK_ROWS]
                block = np.where(np.isnan(block), fill, block)
                total.merge(feature_map._accumulate(block, (lo, hi), chunk_rows, n_jobs))
        return total.clipped(I64_MAX), min(int(x.shape[0]), I64_MAX)

    return pair_transformation(input_domain, input_metric, feature_map, function)


# -- the curator's side of a one-call release of an array ----------------------------------


def to_array(data: Any, column_names: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """numpy 2-D float64 view of numpy or Polars input; errors never echo data values."""
    import polars as pl

    if isinstance(data, (pl.DataFrame, pl.LazyFrame)):
        frame = data.collect() if isinstance(data, pl.LazyFrame) else data
        cols = list(column_names) if column_names is not None else frame.columns
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in the data (columns: {frame.columns})")
        bad = [c for c in cols if not frame.schema[c].is_numeric()]
        if bad:
            raise ValueError(f"columns {bad} must be numeric")
        return frame.select(cols).cast(pl.Float64).to_numpy(), cols
    if not isinstance(data, np.ndarray):
        raise ValueError(
            f"data must be a numpy array or a Polars DataFrame/LazyFrame, got {type(data).__name__}"
        )
    if data.dtype.kind not in "biuf":
        raise ValueError(f"data dtype ({data.dtype}) must be numeric (bool, int or float)")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-dimensional (rows × columns), got {data.ndim} dimension(s)")
    return data.astype(np.float64, copy=False), None if column_names is None else list(column_names)


def check_rows(X: np.ndarray, d: int, what: str) -> None:
    if X.shape[1] != d:
        raise ValueError(f"data has {X.shape[1]} columns but {what} expects {d}")
    if X.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")


def check_finite(X: np.ndarray, impute: Any, block_rows: int = 1 << 16) -> None:
    """The curator-side rule for in-memory data: NaN needs ``impute``; ±inf is refused.
    Checked in blocks of rows, so no full-size temporary is made."""
    for s in range(0, X.shape[0], block_rows):
        block = X[s : s + block_rows]
        if impute is None and not np.isfinite(block).all():
            raise ValueError("data contains NaN or infinite values; clean it or pass impute=<public value>")
        if impute is not None and np.isinf(block).any():
            raise ValueError("data contains infinite values; impute replaces NaN only")


def memory_source(
    data: Any,
    feature_map: FeatureMap,
    bounds: Any,
    impute: Any,
    column_names: Sequence[str] | None,
    projection: Any,
) -> tuple[np.ndarray, dp.Transformation]:
    """In-memory data checked (nothing released yet) and its clip (and projection) transformation."""
    X, names = to_array(data, column_names)
    if projection is not None:
        from .projections import JLProjection

        if not isinstance(projection, JLProjection):
            raise ValueError(f"projection ({projection!r}) must be a JLProjection")
        if isinstance(feature_map, ByClass):
            raise ValueError(
                "a projection cannot be combined with ByClass (it would mix the label into the features)"
            )
        if projection.output_dim != feature_map.input_dim:
            raise ValueError(
                f"the projection outputs {projection.output_dim} columns but the feature map expects {feature_map.input_dim}"
            )
    d = feature_map.input_dim if projection is None else projection.input_dim
    check_rows(X, d, "the feature map" if projection is None else "the projection")
    lo, hi = box_data_bounds(bounds, feature_map) if projection is None else check_bounds(bounds, d)
    check_finite(X, impute)
    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute, column_names=names)
    if projection is not None:
        from .projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    return X, source


register_backend(
    NPArray2BoxDomain,
    Backend(
        "numpy",
        make_sum_and_count,
        frozenset({"chunk_rows", "n_jobs", "fixed_point"}),
        feature_sum=make_feature_sum,
    ),
)
