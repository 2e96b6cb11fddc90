"""The release layer: the one place noise is added.

Every path — numpy and Polars in memory, streamed LazyFrames and files, Dask, Spark,
``dp.Context`` queries, sessions and smooth-kernel sketches — goes through this module:

1. a **backend** turns the data into a transformation producing the *exact* pair
   ``(Σ q(x_i), n)`` (integer feature sum and row count), 1-stable in the rows
   (:func:`~opendp_sketch.transformations.make_sum_and_count` for numpy,
   :func:`~opendp_sketch.streaming.make_frame_sum_and_count` for Polars frames,
   :func:`~opendp_sketch.dask.make_dask_sum_and_count` for Dask, the Spark backend likewise);
2. :func:`make_noisy_sketch` adds OpenDP's discrete Laplace or discrete Gaussian noise to both
   halves (``make_composition``) and packs a :class:`~opendp_sketch.Sketch`;
3. a :class:`Budget` (ε, (ε, δ) or ρ) and :func:`search_measurement` find the smallest scale
   OpenDP certifies for it;
4. optionally (:func:`make_spanning_sketch`, ``release_sketch(pair_selection=)``), OpenDP's
   ``make_noisy_max`` first chooses the 2-way marginals joining the columns from exact
   independence scores (:mod:`opendp_sketch.selection`), composed with the release by
   ``make_adaptive_composition``.

No noise is drawn anywhere else in this package. Backends never import this module, and
post-processing (``estimators/``) never does either.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from ._validate import (
    check_bounds,
    check_chunking,
    check_column_names,
    check_fraction,
    check_number,
    require_symmetric,
)
from .budget import (  # noqa: F401 - Budget and its constants are re-exported for older imports
    DEFAULT_COUNT_FRACTION,
    Budget,
    BudgetKind,
    as_rho,
    mechanism_of,
    search_measurement,
    search_scale,
)
from .domains import (
    DaskTableDomain,
    FrameBoxDomain,
    SparkTableDomain,
    TableDomain,
    box_data_bounds,
    descriptor_of,
)
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .features.byclass import ByClass
from .features.marginals import Marginals
from .plan import (  # noqa: F401 - the plan's names are re-exported for older imports
    AUTO_BOUND_CELL,
    AUTO_FINE_BINS,
    AUTO_FINE_SNR,
    AUTO_FINER_BINS,
    AUTO_MAX_PAIR_BINS,
    AUTO_ONE_WAY_WEIGHT,
    AUTO_PAIR_BINS,
    AUTO_PAIR_SNR,
    AUTO_PAIRS,
    AUTO_RULE_ONE_WAY_WEIGHT,
    AUTO_SELECTION,
    AUTO_TREE_EXTRA_WEIGHT,
    AUTO_TREE_FINE_WEIGHT,
    AUTO_TREE_SNR,
    DEFAULT_SELECTION_FRACTION,
    PairsRule,
    auto_blocks,
    auto_feature_map,
    auto_marginals,
    auto_tree,
    check_pairs,
    kept_map,
    schema_blocks,
    tree_ratio,
    tree_rounds,
    warn_if_tree_is_noise,
    weighted_map,
)
from .schema import Schema
from .selection import Forest, make_independence_scores
from .sketch import Sketch, discrete_laplace_variance
from .streaming import bad_value_counts, frame_box_domain, make_frame_sum_and_count, report_progress, scan
from .transformations import (
    I64_MAX,
    make_box_clip,
    make_clamped_sum_and_count,
    make_sum_and_count,
    pair_parts,
)

__all__ = [
    "Budget",
    "DEFAULT_COUNT_FRACTION",
    "make_private_sketch",
    "then_private_sketch",
    "make_noisy_sketch",
    "search_measurement",
    "search_scale",
    "make_spanning_sketch",
    "make_row_estimated_sketch",
    "make_table_row_count",
    "DEFAULT_ROWS_FRACTION",
    "make_private_dask_sketch",
    "then_private_dask_sketch",
    "make_private_spark_sketch",
    "then_private_spark_sketch",
    "release_sketch",
    "release_dask_sketch",
    "release_spark_sketch",
    "release_smooth_sketches",
    "memory_source",
    "auto_feature_map",
    "as_schema",
]

#: share of the budget a schema release without a public ``rows`` estimate spends on a noisy row
#: count first, to plan its map from (:func:`make_row_estimated_sketch`; measured in
#: docs/design/planning.md)
DEFAULT_ROWS_FRACTION = 0.03


def _count_scale(mechanism: str, scale: float, count_fraction: float, fm: FeatureMap) -> float:
    """Count noise scale giving the count ``count_fraction`` of the total loss (ε or ρ)."""
    c = count_fraction
    if mechanism == "laplace":
        # ε_sum = Δ₁/scale, ε_count = 1/count_scale, ε_count/ε_sum = c/(1-c)
        return scale * (1 - c) / (c * fm.sensitivity(1))
    # ρ_sum = Δ₂²/(2σ²), ρ_count = 1/(2σ_c²), ρ_count/ρ_sum = c/(1-c)
    return scale * math.sqrt((1 - c) / c) / fm.sensitivity(2)


# -- the one noise step --------------------------------------------------------------------


def make_noisy_sketch(
    pair: dp.Transformation,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    bounds: tuple[list[float], list[float]] | None = None,
    column_names: Sequence[str] | None = None,
) -> dp.Measurement:
    r"""From a backend's exact ``(Σ q(x_i), n)`` pair to a noisy :class:`~opendp_sketch.Sketch`.

    ``pair`` is any backend's sum-and-count transformation (1-stable under the symmetric
    distance, its halves ``d_in·Δ_p``- and ``d_in``-stable). The sum gets OpenDP's discrete
    Laplace (pure ε, L1) or discrete Gaussian (zCDP, L2) noise at ``scale`` (feature units), the
    count the share ``count_fraction`` of the loss; OpenDP's ``make_composition`` accounts both.
    The result takes the pair's *output* (chain it: ``pair >> make_noisy_sketch(pair, ...)``);
    it is the only place this package draws noise. Since the pair is 1-stable, its privacy map
    at ``d_in`` is that of the whole chain.

    :param pair: a backend's sum-and-count transformation (its output is the input here)
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map the pair sums
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)`` (0: no noise, infinite loss)
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param bounds: the public box recorded in the sketch (default: the input domain's)
    :param column_names: the names recorded in the sketch (default: the input domain's)
    :return: a Measurement from the pair's output to a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.release import make_noisy_sketch
    >>> from opendp_sketch.transformations import make_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> pair = make_sum_and_count(dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance(), fm)
    >>> m = pair >> make_noisy_sketch(pair, dp.max_divergence(), fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    """
    dp.assert_features("contrib", "honest-but-curious")
    mechanism = mechanism_of(output_measure)
    p: Literal[1, 2] = 1 if mechanism == "laplace" else 2
    t_sum, t_count = pair_parts(pair, feature_map, p)
    # scale 0 is accepted like OpenDP's own mechanisms (infinite loss); parameter searches probe it
    scale = check_number(scale, "scale", allow_zero=True)
    count_fraction = check_fraction(count_fraction)
    int_scale = math.ldexp(scale, feature_map.frac_bits)
    count_scale = _count_scale(mechanism, scale, count_fraction, feature_map)
    # the noise variances (scale²) are recorded in the sketch: they must be finite floats too
    if not all(math.isfinite(v * v) for v in (int_scale, count_scale)):
        raise ValueError(
            f"scale ({scale!r}) with count_fraction ({count_fraction!r}) gives a noise scale too large to represent"
        )
    if scale == 0:
        # no noise: an honest measurement with infinite loss. OpenDP's composition refuses to
        # add two infinite losses, and a raising predicate sends parameter searches down a
        # ~20x slower path, so this case is built directly.
        noisy = dp.m.make_user_measurement(
            pair.output_domain,
            pair.output_metric,
            output_measure,
            lambda v: [t_sum(v), t_count(v)],
            lambda d_in: math.inf if d_in else 0.0,
        )
    else:
        noise = dp.m.then_laplace if mechanism == "laplace" else dp.m.then_gaussian
        try:
            noisy = dp.c.make_composition([t_sum >> noise(int_scale), t_count >> noise(count_scale)])
        except dp.OpenDPException as e:  # e.g. a loss that overflows at a subnormal scale
            raise ValueError(
                f"scale ({scale!r}) is outside the range OpenDP can account for ({e.variant})"
            ) from None
    desc = descriptor_of(pair.input_domain) if bounds is None else None
    unit = feature_map.unit
    if mechanism == "laplace":
        sum_var = discrete_laplace_variance(int_scale) * unit**2
        count_var = discrete_laplace_variance(count_scale)
    else:
        sum_var, count_var = int_scale**2 * unit**2, count_scale**2
    noise_info = {
        "mechanism": mechanism,
        "sum_scale": int_scale * unit,
        "count_scale": count_scale,
        "sum_variance": sum_var,
        "count_variance": count_var,
        "count_fraction": count_fraction,
    }
    composed = noisy
    # the loss is recorded in every sketch: computed once here, so a loss that overflows is refused
    # at construction instead of failing after the noise was drawn
    try:
        loss = composed.map(1)
    except dp.OpenDPException as e:
        raise ValueError(
            f"the privacy loss at noise scale {int_scale * unit!r} is not representable ({e.variant})"
        ) from None
    record = {
        "measure": "MaxDivergence" if mechanism == "laplace" else "ZeroConcentratedDivergence",
        "d_in": 1,
        "loss": loss,
    }
    if desc is not None:
        bounds = (list(desc.lower), list(desc.upper))
        column_names = desc.column_names
    names = None if column_names is None else list(column_names)
    schema = desc.schema.to_dict() if isinstance(desc, TableDomain) else None

    def pack(released: list[Any]) -> Sketch:
        return Sketch(
            feature_map=feature_map,
            sum_units=np.asarray(released[0], dtype=np.int64),
            count=int(released[1]),
            noise=dict(noise_info),
            privacy=dict(record),
            bounds=bounds,
            column_names=names,
            schema=schema,
        )

    return composed >> dp.new_function(pack, TO="ExtrinsicObject")


def make_private_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Measurement:
    r"""Release ``Σ Φ(x_i) + ξ`` and ``n + ζ`` as a :class:`~opendp_sketch.Sketch`.

    ``ξ`` is OpenDP's discrete Laplace (``output_measure=dp.max_divergence()``, L1 sensitivity)
    or discrete Gaussian (``dp.zero_concentrated_divergence()``, L2 sensitivity) noise added to the
    exact integer feature sum; ``scale`` is its scale in feature units. The count gets
    ``count_fraction`` of the privacy loss (paper default 2%) and the sum the rest, so the loss
    at ``d_in`` is ``d_in·Δ₁/(scale·(1-c))`` (Laplace) or ``(d_in·Δ₂)²/(2·scale²·(1-c))``
    (Gaussian). The input domain picks the backend: a :func:`~opendp_sketch.box_domain` (numpy
    in memory) or a :func:`~opendp_sketch.frame_box_domain` (Polars frames, streamed); Dask
    has :func:`~opendp_sketch.make_private_dask_sketch`.

    :param input_domain: a :func:`~opendp_sketch.box_domain` or :func:`~opendp_sketch.frame_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)`` (the implemented map, whose
        sensitivity is ``feature_map.sensitivity(p)``); the :class:`~opendp_sketch.Sketch`
        reports it in units of ``Φ`` as ``scale / γ``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param chunk_rows: rows per chunk of the feature sum
    :param n_jobs: threads for the feature sum (result identical for any value)
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_sketch(dps.box_domain((0.0, 1.0), num_columns=1),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    >>> type(m(np.random.default_rng(0).random((100, 1)))).__name__
    'Sketch'
    """
    dp.assert_features("contrib", "honest-but-curious")
    mechanism_of(output_measure)
    check_chunking(chunk_rows, n_jobs)  # before they become part of a cache key
    pair = _pair_source(input_domain, input_metric, feature_map, chunk_rows, n_jobs)
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_sketch = to_then(make_private_sketch)


def _pair_source(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    chunk_rows: int,
    n_jobs: int | None,
) -> dp.Transformation:
    """The backend's scale-independent sum-and-count transformation, cached on the feature map.

    OpenDP's parameter search (``dp.Context``, ``binary_search``) rebuilds the measurement
    hundreds of times; only the noise depends on the scale. Domains compare equal exactly when
    their identifiers do, so the identifier is a sound cache key.
    """
    key = (str(input_domain), str(input_metric), chunk_rows, n_jobs)
    cache = feature_map.__dict__.setdefault("_source_cache", {})
    if key not in cache:
        desc = getattr(input_domain, "descriptor", None)
        if isinstance(desc, SparkTableDomain):  # before TableDomain: a subclass of it
            from .spark import make_spark_table_sum_and_count

            pair = make_spark_table_sum_and_count(input_domain, input_metric, feature_map, n_jobs=n_jobs)
        elif isinstance(desc, DaskTableDomain):
            from .dask import make_dask_table_sum_and_count

            pair = make_dask_table_sum_and_count(input_domain, input_metric, feature_map, n_jobs=n_jobs)
        elif isinstance(desc, TableDomain):
            from .tables import make_table_sum_and_count

            pair = make_table_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        elif isinstance(getattr(input_domain, "descriptor", None), FrameBoxDomain):
            pair = make_frame_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        else:
            pair = make_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        cache[key] = pair
    return cache[key]


def make_private_dask_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Measurement:
    r""":func:`make_private_sketch` for a Dask collection: one pass over the cluster for the exact
    ``(sum, count)`` pair (:func:`~opendp_sketch.make_dask_sum_and_count`), then the same noise,
    budget split and privacy map at the same ``scale``.

    :param input_domain: a :func:`~opendp_sketch.dask_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param impute: public value(s) replacing NaN (without: the lower bound)
    :param n_jobs: threads inside each partition task
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_dask_sketch(dps.dask_box_domain((0.0, 1.0), num_columns=1),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)
    0.510204...
    >>> X = da.random.default_rng(0).random((100, 1), chunks=(30, 1))
    >>> with dask.config.set(scheduler="synchronous"):
    ...     type(m(X)).__name__
    'Sketch'
    """
    from .dask import make_dask_sum_and_count

    pair = _cluster_pair(
        make_dask_sum_and_count, input_domain, input_metric, output_measure, feature_map, impute, n_jobs
    )
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_dask_sketch = to_then(make_private_dask_sketch)


def make_private_spark_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Measurement:
    r""":func:`make_private_sketch` for a Spark DataFrame: one Spark job for the exact
    ``(sum, count)`` pair (:func:`~opendp_sketch.make_spark_sum_and_count`), then the same noise,
    budget split and privacy map at the same ``scale``.

    :param input_domain: a :func:`~opendp_sketch.spark_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param impute: public value(s) replacing null/NaN (without: the lower bound)
    :param n_jobs: threads inside each partition task
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_spark_sketch(dps.spark_box_domain((0.0, 1.0), ["x"]),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    """
    from .spark import make_spark_sum_and_count

    pair = _cluster_pair(
        make_spark_sum_and_count, input_domain, input_metric, output_measure, feature_map, impute, n_jobs
    )
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_spark_sketch = to_then(make_private_spark_sketch)


def _cluster_pair(
    make: Callable[..., dp.Transformation],
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    impute: Any,
    n_jobs: int | None,
) -> dp.Transformation:
    """A cluster backend's ``(sum, count)`` transformation, cached on the feature map like
    :func:`_pair_source` (it does not depend on the scale a search varies)."""
    dp.assert_features("contrib", "honest-but-curious")
    mechanism_of(output_measure)
    key = (make.__name__, str(input_domain), str(input_metric), repr(impute), n_jobs)
    cache = feature_map.__dict__.setdefault("_source_cache", {})
    if key not in cache:
        cache[key] = make(input_domain, input_metric, feature_map, impute=impute, n_jobs=n_jobs)
    return cache[key]


# -- the one scale search ------------------------------------------------------------------


def warn_if_noise_swamps(budget: Budget, d_in: int, feature_map: FeatureMap, rows: int) -> None:
    """Warn the curator, before anything is released, when the noise of the planned release
    would exceed the largest signal ``rows`` rows can give (``‖Σ Φ(x_i)‖₂ ≤ n·Δ₂``): every
    estimate would then be mostly noise. Runs on the curator's side only; ``rows`` is never
    released."""
    scale = budget.reference_scale(d_in, feature_map.sensitivity(budget.p))
    per_coordinate = scale * math.sqrt(2.0) if budget.p == 1 else scale  # Laplace std = √2·scale
    noise = per_coordinate * math.sqrt(feature_map.num_features)
    signal = rows * feature_map.sensitivity(2)
    if noise > signal:
        import warnings

        warnings.warn(
            f"at this budget the noise (norm ≈ {noise:.3g}) exceeds the largest signal {rows} rows can give "
            f"(≤ {signal:.3g}): every estimate will be mostly noise. Raise the budget or release a smaller "
            "map (plan with dps.suggest_sketch_size); with warnings as errors the release is refused here",
            stacklevel=3,
        )


def forget_input(out: Any) -> Any:
    """``out`` without the record of the call OpenDP attaches to a measurement's output.

    ``Measurement.__call__`` sets ``out.__opendp_dict__ = {..., "arg": data}`` on any output that
    takes attributes (for ``dp.serialize``): a released object would then hold the sensitive
    data. :class:`~opendp_sketch.Sketch` refuses the attribute; this drops it from anything else
    (a post-processed estimator, a list of sketches is walked).
    """
    for item in out if isinstance(out, list) else [out]:
        try:
            del item.__opendp_dict__
        except AttributeError:
            pass
    return out


def release_once(meas: dp.Measurement, data: Any, budget: Budget, d_in: int) -> Any:
    """Run ``meas`` on ``data`` once and record, in each released sketch, what was spent."""
    out = forget_input(meas(data))
    spent = {"measure": str(meas.output_measure), "d_in": d_in, **budget.record(meas.map(d_in))}
    for sk in out if isinstance(out, list) else [out]:
        sk.privacy = {
            **spent,
            **{
                k: v
                for k, v in sk.privacy.items()
                if k in ("joint_release", "share", "pair_selection", "rows_estimate")
            },
        }
    return out


# -- one-call releases (curator side: validate, then build, then release once) -------------


def check_release_arguments(feature_map: Any, contributions: Any, count_fraction: Any) -> float:
    """Checks shared by every one-call release; returns the checked ``count_fraction``."""
    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    return check_fraction(count_fraction)


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


def _check_rows(X: np.ndarray, d: int, what: str) -> None:
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
    _check_rows(X, d, "the feature map" if projection is None else "the projection")
    lo, hi = box_data_bounds(bounds, feature_map) if projection is None else check_bounds(bounds, d)
    check_finite(X, impute)
    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute, column_names=names)
    if projection is not None:
        from .projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    return X, source


def release_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    column_names: Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    projection: Any = None,
    progress: Callable[[int, int], None] | None = None,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
    rows_fraction: float | None = None,
) -> Sketch:
    r"""Release a sketch of ``data`` in one call, spending exactly the given budget.

    * ``epsilon`` alone: pure ε-DP with discrete Laplace noise;
    * ``epsilon`` and ``delta > 0``: (ε, δ)-DP with discrete Gaussian noise (zCDP converted by
      OpenDP's ``make_zCDP_to_approxDP``);
    * ``rho``: ρ-zCDP with discrete Gaussian noise.

    **With a public** ``schema`` (a :class:`~opendp_sketch.Schema`, its dict, or a JSON path),
    any table works — numpy, Polars, pandas, PyArrow, Parquet/CSV/IPC files, with numeric,
    integer, categorical and boolean columns and nulls — streamed in batches. Columns are
    encoded unit-free by the schema (numeric to ``[0, 1]`` by its public range, categories to
    codes), ``bounds`` come from the schema, and without a ``feature_map`` the map is chosen
    from the schema alone (:func:`auto_feature_map`). The sketch records the schema, so every
    estimator answers in the table's units and labels.

    The noise scale is the smallest one OpenDP certifies for that budget (binary search over
    the measurement's privacy map). Data is validated *before* anything is released: a refused
    call releases nothing and spends nothing, and its error never shows a data value.

    :param data: numpy array ``(n, d)``, Polars DataFrame, or — streamed in batches with memory
        independent of ``n`` — a Polars LazyFrame or the path of a Parquet/CSV/IPC file; with a
        ``schema`` also pandas DataFrames and PyArrow tables and datasets
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (see above)
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing NaN; without it NaN/inf are refused
    :param column_names: columns to use (Polars) or names to record (numpy)
    :param projection: a :class:`~opendp_sketch.JLProjection` applied to every clipped row before
        the feature map (row-wise, 1-stable): the data and ``bounds`` have
        ``projection.input_dim`` columns, the map ``projection.output_dim``. Keep the projection
        (it is public and seeded) to project query points the same way.
    :param progress: for a file or LazyFrame, called as ``progress(rows_done, rows_total)`` after
        each streamed batch of the release pass (on the curator's machine; never released)
    :param pair_selection: with a ``schema`` and the automatic map, the share of the budget
        (e.g. ``0.1``) spent choosing, from the data, the 2-way marginals that join the columns
        the automatic rule leaves apart (:func:`make_spanning_sketch`: MST's selection); the
        pairs chosen are in ``sketch.privacy["pair_selection"]``. ``"auto"`` (default): a
        share of ``DEFAULT_SELECTION_FRACTION = 0.1`` when the rule leaves columns apart and the
        tree's cells would stand above the noise (:func:`auto_tree`: public inputs only), else
        none. ``None``: the public rule alone
    :param fine_bins: with a ``schema`` and the automatic map, the bins of every numeric 1-way
        marginal (:func:`auto_feature_map`; e.g. 16 when questions are asked on a known grid of
        16 equal cells). ``None`` (default): the rule's 16, 32 or 64
    :param pairs: with a ``schema`` and the automatic map, the 2-way marginals it measures:
        ``"rule"`` (default; where the schema's row estimate says an average cell stands above
        the noise, :func:`auto_marginals`), ``"all"`` (every pair: for regression and
        classifiers, which read how the columns vary together; counts and CDFs pay) or
        ``"none"`` (1-way marginals only)
    :param rows_fraction: with a ``schema`` without a ``rows`` estimate and the automatic map
        (in memory or in files), the share of the budget spent first on a noisy row count that
        plans the map as a given ``rows`` would (:func:`make_row_estimated_sketch`; recorded in
        ``sk.privacy["rows_estimate"]``). ``None`` (default): ``DEFAULT_ROWS_FRACTION = 0.03``;
        ``0``: no count (the map is planned without a row estimate). A schema's ``rows``
        always wins, and costs nothing
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    A mixed-type table under a public schema, then analyses in its own units and labels:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> table = pl.DataFrame({"age": rng.integers(18, 90, 5000), "cut": rng.choice(["Fair", "Ideal"], 5000)})
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"]})
    >>> sk = dps.release_sketch(table, schema=schema, epsilon=1.0)
    >>> sk.privacy["epsilon"], sk.column_names
    (1.0, ['age', 'cut'])
    >>> est = dps.M2M(sk)
    >>> bool(45 < est.mean()[0] < 63), sorted(est.shares("cut")["cut"].to_list())
    (True, ['Fair', 'Ideal'])

    A numeric array in a public box, with a map of your choice:

    >>> X = np.random.default_rng(0).uniform(0, 1, size=(1000, 2))
    >>> sk = dps.release_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=2),
    ...                         bounds=(0, 1), epsilon=1.0)
    >>> sk.privacy["epsilon"] <= 1.0, sk.sum.shape
    (True, (8,))
    """
    if progress is not None and not callable(progress):
        raise ValueError(
            f"progress ({progress!r}) must be a callable progress(rows_done, rows_total) or None"
        )
    check_chunking(chunk_rows, n_jobs)  # here too: inside the scale search an error would be swallowed
    if schema is not None:
        _no_box_arguments(bounds, impute, column_names, projection)
        return _release_table(
            data,
            as_schema(schema),
            feature_map,
            Budget.of(epsilon, delta, rho),
            contributions,
            count_fraction,
            chunk_rows,
            n_jobs,
            progress,
            pair_selection,
            fine_bins,
            pairs,
            rows_fraction=rows_fraction,
        )
    if rows_fraction is not None:
        raise ValueError("rows_fraction plans the automatic map of a schema release: give schema= or drop it")
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)
    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    column_names = check_column_names(column_names)

    if isinstance(data, (str, os.PathLike)):
        data = scan(data)
    elif type(data).__module__.split(".")[0] in ("pandas", "pyarrow"):  # as Polars, by name
        from .tables import as_frame

        data = as_frame(data).collect()
    import polars as pl

    if isinstance(data, pl.LazyFrame):
        if projection is not None:
            raise ValueError("projection= needs in-memory data (a numpy array or a Polars DataFrame)")
        return _release_frame(
            data,
            feature_map,
            bounds,
            budget,
            contributions,
            count_fraction,
            impute,
            column_names,
            chunk_rows,
            n_jobs,
            progress,
        )
    if projection is not None:
        X, source = memory_source(data, feature_map, bounds, impute, column_names, projection)

        def build(scale: float) -> dp.Measurement:
            return source >> then_private_sketch(
                budget.measure, feature_map, scale, count_fraction, chunk_rows, n_jobs
            )

    else:
        # no clipped copy of the table: every chunk is clipped inside the exact sum
        X, names = to_array(data, column_names)
        lo, hi = box_data_bounds(bounds, feature_map)
        _check_rows(X, feature_map.input_dim, "the feature map")
        if names is not None and len(names) != X.shape[1]:  # the sketch records them: checked before building
            raise ValueError(f"column_names ({list(names)}) must be {X.shape[1]} distinct names")
        check_finite(X, impute)
        in_domain = dp.numpy.array2_domain(num_columns=X.shape[1], T=float, nan=impute is not None)
        pair = make_clamped_sum_and_count(
            in_domain,
            dp.symmetric_distance(),
            feature_map,
            (lo, hi),
            impute=impute,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        record = ([float(v) for v in lo], [float(v) for v in hi])

        def build(scale: float) -> dp.Measurement:
            return pair >> make_noisy_sketch(
                pair, budget.measure, feature_map, scale, count_fraction, record, names
            )

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    warn_if_noise_swamps(budget, contributions, feature_map, X.shape[0])
    return release_once(meas, X, budget, contributions)


def _no_box_arguments(bounds: Any, impute: Any, column_names: Any, projection: Any = None) -> None:
    """With a schema, the box, the null rules and the columns are the schema's."""
    if bounds is not None or impute is not None or column_names is not None or projection is not None:
        raise ValueError(
            "with a schema, bounds, null rules and columns come from the schema: "
            "drop bounds=, impute=, column_names= and projection="
        )


def _map_and_bounds(
    feature_map: FeatureMap | None, bounds: Any, pair_selection: Any, fine_bins: Any, pairs: Any
) -> FeatureMap:
    """Without a schema: the release needs a map and its bounds, and takes none of the options
    that shape a schema's automatic map."""
    if pair_selection not in (None, AUTO_SELECTION) or fine_bins is not None or pairs != "rule":
        raise ValueError(
            "pair_selection, fine_bins and pairs shape the automatic map of a schema: give "
            "schema=dps.Schema({...}) and no feature_map"
        )
    if feature_map is None or bounds is None:
        raise ValueError("give a schema (schema=dps.Schema({...})), or a feature_map and its public bounds")
    return feature_map


def as_schema(schema: Any) -> Schema:
    """A :class:`~opendp_sketch.Schema` from itself, its dict, or a JSON file path / text."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema) if "columns" in schema else Schema(schema)
    if isinstance(schema, (str, os.PathLike)):
        return Schema.from_json(schema)
    raise ValueError(f"schema ({schema!r}) must be a dps.Schema, a dict or a JSON file path")


# -- a spanning tree of 2-way marginals, chosen privately (MST-style) ----------------------


def make_spanning_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    marginals: Marginals,
    measured: Sequence[int],
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> tuple[dp.Measurement, FeatureMap, int]:
    r"""A release that first chooses, privately, the 2-way marginals joining the columns, then
    measures them with ``measured`` (MST's selection, in one OpenDP measurement).

    ``marginals`` holds every candidate block; ``measured`` indexes the ones measured in any case
    (every 1-way block, the 2- and 3-way blocks a public rule kept). When those leave the columns
    in ``c`` connected components, each of ``k`` rounds picks the 2-way candidate of highest
    :mod:`independence score <opendp_sketch.selection>` among those joining two components
    (Kruskal on noisy scores: OpenDP's ``make_noisy_max``, ``4·d_in``-stable scores); ``k`` is
    the number of components the candidates can join (``c − 1`` when every pair is a candidate,
    as in the automatic map). The pairs picked then join ``measured`` in the sketch's map (1-way
    blocks at ``one_way_weight``), released by :func:`make_private_sketch`. OpenDP's
    ``make_adaptive_composition`` composes the ``k`` choices (``selection_fraction`` of the
    budget, split evenly) and the release (the rest), with every loss fixed before the data is
    read; each query is a measurement on the same input, chosen from earlier answers only.

    Every choice gives a map of the same sensitivity (each block, whatever its shape, takes one
    cell per row), so the release's noise scale is fixed up front and each query meets its
    share. Nothing raises on the data: while fewer than ``k`` pairs are picked some candidate
    joins two components, so every round has a choice, and the scores read exact counts.
    ``k = 0`` (a connected rule, or no candidate joining anything) needs no choice: the plain
    release of ``measured`` at the whole budget.

    :return: the measurement (data → :class:`~opendp_sketch.Sketch`), a map of the shape the
        release will have (its first ``k`` candidates: the same sensitivity and noise), and the
        number of rounds ``k``
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.release import Budget, make_spanning_sketch
    >>> from opendp_sketch.features.marginals import Marginals
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = Marginals.auto(([0.0] * 3, [1.0] * 3), fine_bins=8, coarse_bins=4)
    >>> m, shape, rounds = make_spanning_sketch(dps.box_domain(([0.0] * 3, [1.0] * 3)), dp.symmetric_distance(),
    ...     Budget.of(epsilon=1.0), 1, fm, measured=[0, 1, 2])
    >>> rounds, m.map(1) <= 1.0
    (2, True)
    >>> x = np.random.default_rng(0).random((2000, 1))
    >>> X = np.hstack([x, 1 - x, np.random.default_rng(1).random((2000, 1))])
    >>> tree = m(X).privacy["pair_selection"]["pairs"]   # 2 pairs join 3 columns: (0, 1) is almost sure
    >>> len(tree), [0, 1] in tree
    (2, True)
    """
    selection_fraction = check_fraction(selection_fraction, "selection_fraction")
    if not isinstance(marginals, Marginals):
        raise ValueError(f"marginals ({marginals!r}) must be a Marginals map holding every candidate block")
    blocks = marginals.blocks
    given = list(measured)
    if not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < len(blocks) for i in given
    ):
        raise ValueError(f"measured ({given!r}) must be indices of the {len(blocks)} blocks of marginals")
    measured = sorted({int(i) for i in given})
    pairs_of = [b.subset for b in blocks]
    joins = [pairs_of[i] for i in measured if len(pairs_of[i]) > 1]
    candidates, rounds = tree_rounds(marginals, measured)

    def final_map(chosen: Sequence[int]) -> FeatureMap:
        return weighted_map(
            marginals.take(sorted(measured + [candidates[c] for c in chosen])), one_way_weight
        )

    def sketch_of(fm: FeatureMap, measure: dp.Measure) -> Callable[[float], dp.Measurement]:
        return lambda scale: make_private_sketch(
            input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    if rounds == 0:
        fm = final_map([])
        return (
            search_measurement(sketch_of(fm, budget.measure), budget, d_in, fm.sensitivity(budget.p)),
            fm,
            0,
        )
    # the loss in the measure the noise is calibrated in: ε, or ρ (an (ε, δ) budget converts at the end)
    total = float(budget.d_out) if budget.kind == "epsilon" else as_rho(budget, d_in)
    measure = budget.measure
    template = final_map(range(rounds))
    other = final_map(range(len(candidates) - rounds, len(candidates)))
    if (template.sensitivity(1), template.sensitivity(2), template.unit) != (
        other.sensitivity(1),
        other.sensitivity(2),
        other.unit,
    ):  # not expected: every marginal block takes one cell per row
        raise ValueError("the candidate 2-way marginals give maps of different sensitivities")
    candidate_map = marginals.take(candidates)
    if candidate_map.unit != 1.0:  # the scores read the exact sums as cell counts
        raise ValueError("the candidate 2-way marginals must sum one integer per row and cell")
    counts = _pair_source(input_domain, input_metric, candidate_map, chunk_rows, n_jobs)
    cand_blocks = candidate_map.blocks
    cand_pairs = [b.subset for b in cand_blocks]

    def choose(subset: Sequence[int], memo: dict[str, Any], noise: float) -> dp.Measurement:
        return (
            make_independence_scores(input_domain, input_metric, counts, cand_blocks, subset, memo)
            >> dp.m.then_noisy_max(measure, noise)
            >> dp.new_function(int, TO="ExtrinsicObject")
        )

    per_round = total * selection_fraction / rounds
    noise = dp.binary_search_param(
        lambda v: choose(range(len(candidates)), {}, v), d_in=d_in, d_out=per_round, T=float
    )
    round_loss = choose(range(len(candidates)), {}, noise).map(d_in)
    # the release gets what the rounds left
    base = _rest_budget(input_domain, input_metric, measure, d_in, [round_loss] * rounds, total)
    # the final release at the smallest scale certified for its share; every choice has this map
    scale = search_scale(sketch_of(template, measure), base, d_in, template.sensitivity(base.p))
    d_mids = [round_loss] * rounds + [sketch_of(template, measure)(scale).map(d_in)]
    adaptive = dp.c.make_adaptive_composition(input_domain, input_metric, measure, d_in=d_in, d_mids=d_mids)

    names = getattr(getattr(input_domain, "descriptor", None), "column_names", None)
    spent = adaptive.map(d_in)  # every query's loss, fixed up front

    def drive(queryable: Any) -> Sketch:
        memo: dict[str, Any] = {}  # the candidate counts of this release's one dataset
        joined = Forest(marginals.input_dim, joins)
        chosen: list[int] = []
        for _ in range(rounds):
            open_ = joined.crossing(cand_pairs)  # never empty while fewer than k are picked
            c = open_[queryable(choose(open_, memo, noise))]
            chosen.append(c)
            joined.join(cand_pairs[c])
        memo.clear()
        fm = final_map(chosen)
        sk = queryable(
            make_private_sketch(
                input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
            )
        )
        record: dict[str, Any] = {
            "fraction": selection_fraction,
            "pairs": [list(cand_pairs[c]) for c in chosen],
        }
        if names is not None:
            record["columns"] = [[names[j] for j in cand_pairs[c]] for c in chosen]
        sk.privacy["pair_selection"] = record
        sk.privacy["loss"] = spent  # the choice's and the release's (release_sketch renames it)
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject")), template, rounds


def _rest_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    measure: dp.Measure,
    d_in: int,
    spent: list[float],
    total: float,
) -> Budget:
    """The budget left for a last query after ``spent``: the largest share whose sum with
    theirs, as OpenDP's ``make_adaptive_composition`` adds the losses (rounding up), stays within
    ``total`` (so ε = 1 is recorded as 1.0), in ``measure`` (ε, or ρ)."""
    rest, step = total - sum(spent), 0.0
    for _ in range(256):
        check = dp.c.make_adaptive_composition(
            input_domain, input_metric, measure, d_in=d_in, d_mids=[*spent, rest]
        )
        if rest > 0 and check.map(d_in) <= total:
            break
        # OpenDP rounds every addition up: with many earlier queries (a selection's rounds at
        # 100 columns) the sum can exceed the total by tens of ulps, so the step doubles
        step = max(2 * step, math.ulp(rest))
        rest = rest - step
    else:  # public arithmetic only: neighbouring datasets are refused alike, before any data
        raise ValueError(
            f"no share of the budget ({total}) is left after {len(spent)} queries costing {sum(spent)}"
        )
    return Budget.of(epsilon=rest) if measure == dp.max_divergence() else Budget.of(rho=rest)


def make_table_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """The number of rows of a table under a schema (``table_domain``), 1-stable: each row
    read as a release reads it (a CSV file's line), so no value can make it fail.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.tables import table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = make_table_row_count(table_domain(dps.Schema({"x": (0, 1)})), dp.symmetric_distance())
    >>> t(pl.DataFrame({"x": [0.5, None, 7.0]}))
    3
    """
    from .tables import as_frame

    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, TableDomain) or isinstance(desc, (DaskTableDomain, SparkTableDomain)):
        raise ValueError("make_table_row_count needs table_domain(schema) (a table in memory or in files)")
    require_symmetric(input_metric)
    names = list(desc.schema.data_columns)

    def count(data: Any) -> int:
        import polars as pl

        lf = as_frame(data, names, text_csv=True)
        return min(int(lf.select(pl.len()).collect(engine="streaming").item()), I64_MAX)

    return dp.t.make_user_transformation(
        input_domain, input_metric, dp.atom_domain(T="i64"), dp.absolute_distance(T="i64"), count, lambda d: d
    )


def make_row_estimated_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    schema: Schema,
    rows_fraction: float = DEFAULT_ROWS_FRACTION,
    *,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    fine_bins: int | None = None,
    pairs: str = "rule",
    pair_selection: float | str | None = AUTO_SELECTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Measurement:
    r"""A schema release that first counts the rows privately, then plans its map from the count.

    Without a public ``rows`` estimate, the automatic map cannot know whether 2-way marginals
    at 16 bins stand above the noise, nor where a tree of pairs pays. This measurement spends
    ``rows_fraction`` of the budget on a noisy row count (OpenDP's discrete Laplace or Gaussian
    on the table's 1-stable row count), and the rest on the sketch whose map
    (:func:`auto_feature_map`, with the pair rule and tree) is planned from that count as if it
    were the schema's ``rows``. OpenDP's ``make_adaptive_composition`` composes the two, both
    losses fixed before the data is read; the plan reads only the released count, so it is
    post-processing. The sketch records ``privacy["rows_estimate"]``.

    :return: a measurement from the table to the :class:`~opendp_sketch.Sketch`
    :example:

    >>> import polars as pl, numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.tables import table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"x": (0, 1), "c": ["a", "b"]})
    >>> m = make_row_estimated_sketch(table_domain(schema), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, schema)
    >>> m.map(1) <= 1.0
    True
    >>> rng = np.random.default_rng(0)
    >>> sk = m(pl.DataFrame({"x": rng.random(20_000), "c": rng.choice(["a", "b"], 20_000)}))
    >>> abs(sk.privacy["rows_estimate"]["rows"] - 20_000) < 2_000
    True
    """
    rows_fraction = check_fraction(rows_fraction, "rows_fraction")
    measure = budget.measure
    total = float(budget.d_out) if budget.kind == "epsilon" else as_rho(budget, d_in)
    counter = make_table_row_count(input_domain, input_metric)

    def count_of(scale: float) -> dp.Measurement:
        noise = dp.m.then_laplace(scale) if budget.kind == "epsilon" else dp.m.then_gaussian(scale)
        return counter >> noise

    count_scale = dp.binary_search_param(count_of, d_in=d_in, d_out=total * rows_fraction, T=float)
    count_loss = count_of(count_scale).map(d_in)
    # the sketch gets what the count left
    base = _rest_budget(input_domain, input_metric, measure, d_in, [count_loss], total)
    adaptive = dp.c.make_adaptive_composition(
        input_domain, input_metric, measure, d_in=d_in, d_mids=[count_loss, float(base.d_out)]
    )
    spent = adaptive.map(d_in)
    auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION

    def drive(queryable: Any) -> Sketch:
        noisy = int(queryable(count_of(count_scale)))
        rows = max(1, noisy)  # post-processing of the released count
        planned = Schema({c: schema[c] for c in schema.data_columns}, rows=rows, targets=schema.targets)
        full, keep = schema_blocks(
            planned,
            **base.kwargs(),
            count_fraction=count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=fine_bins,
            pairs=pairs,
        )
        selection = pair_selection
        if auto:
            selection = auto_tree(base, full, keep, rows, count_fraction) if pairs == "rule" else None
        if selection is not None:
            meas, _, _ = make_spanning_sketch(
                input_domain,
                input_metric,
                base,
                d_in,
                full,
                keep,
                float(selection),
                one_way_weight=AUTO_ONE_WAY_WEIGHT,
                count_fraction=count_fraction,
                chunk_rows=chunk_rows,
                n_jobs=n_jobs,
            )
        else:
            fm = kept_map(full, keep, AUTO_ONE_WAY_WEIGHT)

            def sketch_at(scale: float) -> dp.Measurement:
                return make_private_sketch(
                    input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
                )

            meas = sketch_at(search_scale(sketch_at, base, d_in, fm.sensitivity(base.p)))
        sk = queryable(meas)
        sk.privacy["rows_estimate"] = {"rows": rows, "fraction": rows_fraction, "noisy_count": noisy}
        sk.privacy["loss"] = spent
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject"))


def _release_table(
    data: Any,
    schema: Schema,
    feature_map: FeatureMap | None,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    chunk_rows: int,
    n_jobs: int | None,
    progress: Callable[[int, int], None] | None,
    pair_selection: float | str | None = None,
    fine_bins: int | None = None,
    pairs: str = "rule",
    backend: Literal["local", "dask", "spark"] = "local",
    rows_fraction: float | None = None,
) -> Sketch:
    """A table under a public schema: checked by the schema (one pass), then released once.
    ``backend``: where the table lives (any table :func:`~opendp_sketch.tables.as_frame`
    reads, a Dask DataFrame, a Spark DataFrame); everything else is the same."""

    if fine_bins is not None and feature_map is not None:
        raise ValueError("fine_bins shapes the automatic map: drop feature_map= or fine_bins=")
    pairs = check_pairs(pairs)
    if pairs != "rule" and feature_map is not None:
        raise ValueError("pairs shapes the automatic map: drop feature_map= or pairs=")
    auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION
    if auto:  # decided below from the blocks; a given map, or pairs="all"/"none", has no tree to add
        pair_selection = None
    if pairs == "all" and pair_selection is not None:
        raise ValueError(
            "pairs='all' measures every 2-way marginal, so pair_selection has nothing to choose: "
            "drop one of them"
        )
    if pair_selection is not None:
        if feature_map is not None:
            raise ValueError(
                "pair_selection chooses 2-way marginals of the automatic map: drop feature_map= or pair_selection="
            )
        pair_selection = check_fraction(pair_selection, "pair_selection")
    no_count = rows_fraction is not None and not isinstance(rows_fraction, bool) and rows_fraction == 0
    if rows_fraction is not None and not no_count:
        check_fraction(rows_fraction, "rows_fraction")
    estimate = feature_map is None and schema.rows is None and backend == "local" and not no_count
    if rows_fraction is not None and not no_count and not estimate:
        raise ValueError(
            "rows_fraction counts the rows to plan the automatic map of a table in memory or in files "
            "whose schema has no rows estimate (and no feature_map): drop it here"
        )
    if estimate:
        smallest = auto_feature_map(schema, **budget.kwargs(), pairs="none")  # for the checks only
        check_release_arguments(smallest, contributions, count_fraction)
        frame, domain, rows = _checked_table(data, schema, backend)
        meas = make_row_estimated_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            schema,
            DEFAULT_ROWS_FRACTION if rows_fraction is None else rows_fraction,
            count_fraction=count_fraction,
            fine_bins=fine_bins,
            pairs=pairs,
            pair_selection=AUTO_SELECTION if auto else pair_selection,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        # the count, then the release (and a tree's choices): the data is read twice or more
        return _release_measured(meas, frame, smallest, budget, contributions, rows, progress, 2)
    if feature_map is None:  # auto_feature_map's blocks: the selection also reads the ones it left out
        full, keep = schema_blocks(
            schema,
            **budget.kwargs(),
            count_fraction=count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=fine_bins,
            pairs=pairs,
        )
        if auto and pairs == "rule":
            pair_selection = auto_tree(budget, full, keep, schema.rows, count_fraction)
        fm = kept_map(full, keep, AUTO_ONE_WAY_WEIGHT)
    else:
        fm = feature_map
    count_fraction = check_release_arguments(fm, contributions, count_fraction)
    if fm.input_dim != len(schema):
        raise ValueError(f"the feature map expects {fm.input_dim} columns but the schema has {len(schema)}")
    if backend != "local" and pair_selection is None:
        return _release_cluster_table_once(
            data, schema, fm, budget, contributions, count_fraction, n_jobs, backend
        )
    frame, domain, rows = _checked_table(data, schema, backend)
    if pair_selection is not None:
        meas, fm, rounds = make_spanning_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            full,
            keep,
            pair_selection,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            count_fraction=count_fraction,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        if rounds and schema.rows is not None and not auto:
            ratio = tree_ratio(budget, fm, full, keep, schema.rows, count_fraction, pair_selection)
            warn_if_tree_is_noise(ratio, schema.rows)
        # with a choice to make, the data is read twice: the candidates' counts, then the release
        return _release_measured(meas, frame, fm, budget, contributions, rows, progress, 2 if rounds else 1)

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain, dp.symmetric_distance(), budget.measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    return _release_streamed(build, frame, fm, budget, contributions, rows, progress)


def _release_cluster_table_once(
    data: Any,
    schema: Schema,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    n_jobs: int | None,
    backend: str,
) -> Sketch:
    """A schema release on a cluster without a choice to make, in **one** pass: the column types
    checked from the collection's schema (nothing computed), the scale searched, then one job
    computing the exact pair and, per column, the nulls, ±inf and unknown labels the schema's
    rules do not cover; those (and an empty table) are refused on the client **before** the
    noise is drawn, as the numeric cluster path refuses NaN (:func:`_release_on_cluster`). The
    pair is 1-stable in the rows, so noising the computed pair is the chained measurement."""
    if backend == "spark":
        from .spark import check_spark_table_types as check_types
        from .spark import make_spark_table_sum_and_count as make_pair
        from .spark import spark_table_domain as table_domain_of
        from .spark import table_sum_and_count_spark as compute
    else:
        from .dask import check_dask_table_types as check_types
        from .dask import dask_table_domain as table_domain_of
        from .dask import make_dask_table_sum_and_count as make_pair
        from .dask import table_sum_and_count_dask as compute
    check_types(data, schema)
    domain = table_domain_of(schema)
    pair = make_pair(domain, dp.symmetric_distance(), feature_map, n_jobs=n_jobs)

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, Any] = {}
    value = compute(data, domain, feature_map, n_jobs, found)
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found["problems"])
    warn_if_noise_swamps(budget, contributions, feature_map, value[1])
    return release_once(meas, value, budget, contributions)


def _checked_table(data: Any, schema: Schema, backend: str) -> tuple[Any, dp.Domain, int]:
    """The curator's side of a schema release, before any measurement is built: the table
    checked by the schema (dtypes, then one pass refusing nulls, ±inf and unknown labels the
    rules do not cover), its domain and its row count (never released)."""
    if backend == "spark":
        from .spark import check_spark_table, spark_table_domain

        return data, spark_table_domain(schema), check_spark_table(data, schema)
    if backend == "dask":
        from .dask import check_dask_table, dask_table_domain

        return data, dask_table_domain(schema), check_dask_table(data, schema)
    import polars as pl

    from .tables import as_frame, table_domain

    # the curator reads the table as the measurement will (a CSV file line by line, as text)
    frame = as_frame(data, schema.data_columns, text_csv=True)
    if isinstance(data, (str, os.PathLike)) and str(data).lower().endswith(".csv"):
        from .streaming import csv_quoted_lines

        split = csv_quoted_lines(data)
        if split:
            raise ValueError(
                f"{split} line{'s' if split != 1 else ''} of the CSV file {'hold' if split != 1 else 'holds'} a "
                "quoted field with a separator or a line break; a "
                "release reads a CSV file one row per line, so save the table as Parquet (for example "
                "pl.read_csv(path).write_parquet(...)) and release that"
            )
    try:
        if frame.head(1).collect().height == 0:  # a header-only file
            raise ValueError("data is empty (0 rows)")
        schema.check(frame)  # the curator's side: dtypes, then nulls/inf/labels the rules do not cover
        rows = int(frame.select(pl.len()).collect().item())
    except pl.exceptions.PolarsError as e:  # the message may quote file contents: show its type only
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    return frame, table_domain(schema), rows


def _release_streamed(
    build: Callable[[float], dp.Measurement],
    frame: Any,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    rows: int,
    progress: Callable[[int, int], None] | None,
) -> Sketch:
    """Search the scale, warn if the noise would swamp ``rows`` rows, then release the streamed
    ``frame`` once, reporting ``progress(rows_done, rows)`` after each batch."""
    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    return _release_measured(meas, frame, feature_map, budget, contributions, rows, progress)


def _release_measured(
    meas: dp.Measurement,
    frame: Any,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    rows: int,
    progress: Callable[[int, int], None] | None,
    passes: int = 1,
) -> Sketch:
    """Warn if the noise would swamp ``rows`` rows, then run ``meas`` on the streamed ``frame``
    once, reporting ``progress(rows_done, passes · rows)`` after each batch of its ``passes``."""
    warn_if_noise_swamps(budget, contributions, feature_map, rows)
    if progress is None:
        return release_once(meas, frame, budget, contributions)
    done = 0

    def advance(batch: int) -> None:
        nonlocal done
        done += batch
        progress(done, passes * rows)

    with report_progress(advance):
        return release_once(meas, frame, budget, contributions)


def _release_frame(
    frame: Any,
    feature_map: FeatureMap,
    bounds: Any,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    impute: Any,
    column_names: Sequence[str] | None,
    chunk_rows: int,
    n_jobs: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> Sketch:
    """Streamed release of a LazyFrame: validated by streaming queries first, released once."""
    import polars as pl

    try:
        schema = frame.collect_schema()
    except pl.exceptions.PolarsError as e:  # the message may quote file contents: show its type only
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    names = list(column_names) if column_names is not None else list(schema.names())
    missing = [c for c in names if c not in schema]
    if missing:
        raise ValueError(f"columns {missing} are not in the data (columns: {list(schema.names())})")
    bad = [c for c in names if not schema[c].is_numeric()]
    if bad:
        # a header-only CSV has text-typed columns: say what is really wrong
        if frame.head(1).collect().height == 0:
            raise ValueError("data is empty (0 rows)")
        raise ValueError(f"columns {bad} must be numeric")
    d = feature_map.input_dim
    if len(names) != d:
        raise ValueError(f"data has {len(names)} columns but the feature map expects {d}")
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = frame_box_domain((lo, hi), names, impute=impute)  # checks impute before any pass
    try:  # one full pass before releasing: unreadable rows are refused here, not mid-release
        rows = int(frame.select(pl.len()).collect().item())
        nulls, infs = bad_value_counts(frame, names)
    except pl.exceptions.PolarsError as e:
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    if impute is None and any(nulls.values()):
        raise ValueError(
            f"columns {[c for c, v in nulls.items() if v]} contain null or NaN values; clean them or pass impute=<public value>"
        )
    if any(infs.values()):
        raise ValueError(f"columns {[c for c, v in infs.items() if v]} contain infinite values")

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain,
            dp.symmetric_distance(),
            budget.measure,
            feature_map,
            scale,
            count_fraction,
            chunk_rows,
            n_jobs,
        )

    return _release_streamed(build, frame, feature_map, budget, contributions, rows, progress)


def release_dask_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    column_names: Sequence[str] | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> Sketch:
    r""":func:`release_sketch` for a Dask array or DataFrame, in one pass over the cluster.

    Same budgets (``epsilon``; ``epsilon`` + ``delta``; ``rho``), same noise, same scale search,
    and the sketch equals in distribution the one ``release_sketch`` gives on the same rows.
    The collection's structure (type, columns, dtypes, bounds, budget) is checked before
    anything runs. The single pass computes the exact ``(sum, count)`` pair and whether the data
    holds NaN (without ``impute``) or ``±inf``; such data is refused on the client **before**
    the noise is drawn. A refused call releases nothing, and no error shows a data value.
    Runs on the current Dask scheduler (a ``distributed.Client`` if one is active).

    **With a public** ``schema``, a Dask DataFrame of any column kinds (numbers, integers, text
    labels, booleans, nulls) is released as :func:`release_sketch` releases a table with a
    schema: the automatic map (or ``feature_map`` on the encoded columns), its bin rule and,
    where it pays, its private tree of pairs (``pair_selection``, ``fine_bins``, ``pairs``).
    Each worker encodes its partition with the schema. One pass computes the exact sum and,
    per column, the nulls, ``±inf`` and unknown labels the schema's rules do not cover, refused
    on the client before the noise is drawn (with a tree of pairs: a check pass, then the
    candidates' counts and the release, :func:`~opendp_sketch.dask.check_dask_table`).

    :param data: ``dask.array.Array`` ``(n, d)`` or ``dask.dataframe.DataFrame``
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (a :class:`~opendp_sketch.Schema`, its dict, or a
        JSON path); the sketch records it, so every estimator answers in the table's units
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param column_names: DataFrame columns to use (default: all), or names to record (arrays)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing NaN; without it NaN/inf are refused
    :param n_jobs: threads inside each partition task
    :param pair_selection: with a ``schema``: as in :func:`release_sketch`
    :param fine_bins: with a ``schema``: as in :func:`release_sketch`
    :param pairs: with a ``schema``: as in :func:`release_sketch`
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    >>> import dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> X = da.random.default_rng(0).uniform(0, 1, size=(1000, 2), chunks=(300, 2))
    >>> with dask.config.set(scheduler="synchronous"):
    ...     sk = dps.release_dask_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=2),
    ...                                  bounds=(0, 1), epsilon=1.0)
    >>> sk.privacy["epsilon"] <= 1.0, sk.sum.shape
    (True, (8,))

    A mixed-type Dask DataFrame under a schema, answered in its units and labels:

    >>> import numpy as np, pandas as pd, dask.dataframe as dd
    >>> rng = np.random.default_rng(1)
    >>> pdf = pd.DataFrame({"age": rng.integers(18, 90, 4000),
    ...                     "cut": rng.choice(["Fair", "Ideal"], 4000, p=[0.3, 0.7])})
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"]},
    ...                     rows=4000)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     sk = dps.release_dask_sketch(dd.from_pandas(pdf, npartitions=3), schema=schema, epsilon=1.0)
    >>> shares = dps.M2M(sk, seed=0).shares("cut")
    >>> shares["cut"].to_list(), 0.6 < shares["share"][1] < 0.8
    (['Fair', 'Ideal'], True)
    """
    from .dask import check_dask_collection, dask_box_domain, make_dask_sum_and_count, sum_and_count_dask

    if schema is not None:
        _no_box_arguments(bounds, impute, column_names)
        check_chunking(DEFAULT_CHUNK_ROWS, n_jobs)
        budget = Budget.of(epsilon, delta, rho)
        return _release_table(
            data, as_schema(schema), feature_map, budget, contributions, count_fraction, DEFAULT_CHUNK_ROWS,
            n_jobs, None, pair_selection, fine_bins, pairs, backend="dask",
        )  # fmt: skip
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)

    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    d = feature_map.input_dim
    names = check_dask_collection(data, d, column_names)
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = dask_box_domain((lo, hi), num_columns=d, column_names=names, nan=impute is not None, inf=False)
    pair = make_dask_sum_and_count(domain, dp.symmetric_distance(), feature_map, impute=impute, n_jobs=n_jobs)

    def compute(found: dict[str, bool]) -> tuple[np.ndarray, int]:
        return sum_and_count_dask(data, domain, feature_map, impute, n_jobs, found)

    return _release_on_cluster(pair, compute, feature_map, budget, contributions, count_fraction, impute)


def release_spark_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    column_names: Sequence[str] | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> Sketch:
    r""":func:`release_sketch` for a Spark DataFrame, in one Spark job.

    Same budgets (``epsilon``; ``epsilon`` + ``delta``; ``rho``), same noise, same scale search,
    and the sketch equals in distribution the one ``release_sketch`` gives on the same rows.
    Everything is checked on the driver from the DataFrame's schema before any job runs: the
    type, the columns (present, numeric or boolean, as many as the map expects), the bounds,
    ``impute`` and the budget. The single job computes the exact ``(sum, count)`` pair and
    whether the data holds null/NaN (without ``impute``) or ``±inf``; such data, and an empty
    DataFrame, are refused on the driver **before** the noise is drawn. A refused call releases
    nothing, and no error shows a data value.

    **With a public** ``schema``, a Spark DataFrame of any column kinds (numbers, integers,
    string labels, booleans, nulls) is released as :func:`release_sketch` releases a table with
    a schema: the automatic map (or ``feature_map`` on the encoded columns), its bin rule and,
    where it pays, its private tree of pairs (``pair_selection``, ``fine_bins``, ``pairs``).
    Each executor reads its partition as Arrow batches and encodes them with the schema (sent as
    JSON). One job computes the exact sum and, per column, the nulls, ``±inf`` and unknown labels
    the schema's rules do not cover, refused on the driver before the noise is drawn (with a
    tree of pairs: a check job, :func:`~opendp_sketch.spark.check_spark_table`, then the
    candidates' counts and the release). The sketch records the schema, so every estimator
    answers in the table's units and labels.

    :param data: a ``pyspark.sql.DataFrame``
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (a :class:`~opendp_sketch.Schema`, its dict, or a
        JSON path)
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param column_names: the columns to use, in the map's order (default: all columns)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing null/NaN; without it null/NaN/inf are refused
    :param n_jobs: threads inside each partition task
    :param pair_selection: with a ``schema``: as in :func:`release_sketch`
    :param fine_bins: with a ``schema``: as in :func:`release_sketch`
    :param pairs: with a ``schema``: as in :func:`release_sketch`
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    """
    from .spark import check_spark_frame, make_spark_sum_and_count, spark_box_domain, sum_and_count_spark

    if schema is not None:
        _no_box_arguments(bounds, impute, column_names)
        check_chunking(DEFAULT_CHUNK_ROWS, n_jobs)
        budget = Budget.of(epsilon, delta, rho)
        return _release_table(
            data, as_schema(schema), feature_map, budget, contributions, count_fraction, DEFAULT_CHUNK_ROWS,
            n_jobs, None, pair_selection, fine_bins, pairs, backend="spark",
        )  # fmt: skip
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)

    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    names = check_spark_frame(data, feature_map.input_dim, column_names)
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = spark_box_domain((lo, hi), column_names=names, nan=impute is not None, inf=False)
    pair = make_spark_sum_and_count(
        domain, dp.symmetric_distance(), feature_map, impute=impute, n_jobs=n_jobs
    )

    def compute(found: dict[str, bool]) -> tuple[np.ndarray, int]:
        return sum_and_count_spark(data, domain, feature_map, impute, n_jobs, found)

    return _release_on_cluster(pair, compute, feature_map, budget, contributions, count_fraction, impute)


def _release_on_cluster(
    pair: dp.Transformation,
    compute: Callable[[dict[str, bool]], tuple[np.ndarray, int]],
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    impute: Any,
) -> Sketch:
    """The one-call release on a cluster: search the scale (every parameter is checked before
    the data is touched), run the one pass, refuse null/NaN without ``impute``, ``±inf`` and an
    empty table on the client before the noise is drawn, then noise the computed pair."""

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, bool] = {}
    value = compute(found)
    if found["nan"] and impute is None:
        raise ValueError("data contains null or NaN values; clean them or pass impute=<public value>")
    if found["inf"]:
        raise ValueError("data contains infinite values; clean them (impute replaces null/NaN only)")
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    # the pair is 1-stable in the rows: noising the computed pair is the chained measurement
    return release_once(meas, value, budget, contributions)


def release_smooth_sketches(
    data: Any,
    plan: Any,
    bounds: Any,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    split: Literal["optimal", "even"] | Sequence[float] = "optimal",
    projection: Any = None,
    contributions: int = 1,
    count_fraction: float | None = None,
    impute: float | Sequence[float] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> list[Sketch]:
    r"""Release the ``J`` sketches of ``plan`` as one composed measurement within one budget.

    The measurement is ``clip [>> jl_projection] >> make_composition([private_sketch(fm_j, s·b_j)])``
    (OpenDP's composition; one clip and projection, then one feature-sum pass per sketch). The per-sketch scales ``b_j`` are set so
    that sketch ``j`` spends the share ``w_j`` of the loss (:meth:`SmoothKernelPlan.budget_weights`,
    or your own weights), and the common factor ``s`` is the smallest one OpenDP certifies for
    the whole budget (binary search on the composed privacy map):

    * ``epsilon``: pure ε-DP, discrete Laplace, ``ε_j = w_j ε`` (basic composition);
    * ``rho``: ρ-zCDP, discrete Gaussian, ``ρ_j = w_j ρ``;
    * ``epsilon`` and ``delta``: zCDP composition of the ``J`` Gaussian sketches, converted once
      to (ε, δ) — tighter than splitting ε and δ.

    Every returned sketch records the loss of the **joint** release (do not add them up) and its
    share. Data is validated first: a refused call releases and spends nothing.

    :param data: numpy ``(n, d)`` array or Polars frame (``d = plan.dim``, or
        ``projection.input_dim``)
    :param plan: the :class:`~opendp_sketch.SmoothKernelPlan`
    :param bounds: public box of the data columns
    :param split: ``"optimal"``, ``"even"`` or ``J`` non-negative weights
    :param projection: an optional :class:`~opendp_sketch.projections.JLProjection` applied after
        clipping (then ``plan.dim`` must equal its ``output_dim``)
    :param count_fraction: share of each sketch's loss spent on its count (default as
        :func:`~opendp_sketch.release_sketch`)
    :return: the ``J`` sketches, in the plan's order
    :raises ValueError: on bad parameters or data (nothing is released)
    """
    from .estimators.smooth import SmoothKernelPlan

    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(plan, SmoothKernelPlan):
        raise ValueError(f"plan ({plan!r}) must be a SmoothKernelPlan")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    budget = Budget.of(epsilon, delta, rho)
    frac = check_fraction(DEFAULT_COUNT_FRACTION if count_fraction is None else count_fraction)
    if isinstance(split, str):
        w = plan.budget_weights(budget.mechanism, split)  # type: ignore[arg-type]
    else:
        w = np.asarray(split, dtype=np.float64).ravel()
        if w.size != len(plan.feature_maps) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"split weights must be {len(plan.feature_maps)} non-negative numbers, not all 0"
            )
        w = w / w.sum()
    if (w <= 0).any():
        raise ValueError("every sketch needs a positive share of the budget (drop zero-weight terms)")
    if projection is not None:
        from .projections import JLProjection

        if not isinstance(projection, JLProjection):
            raise ValueError(f"projection ({projection!r}) must be a JLProjection")
        if projection.output_dim != plan.dim:
            raise ValueError(
                f"projection outputs {projection.output_dim} columns but the plan expects {plan.dim}"
            )
    d = plan.dim if projection is None else projection.input_dim

    X, _ = to_array(data, None)
    if X.shape[1] != d:
        raise ValueError(f"data has {X.shape[1]} columns but {d} are expected")
    if X.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")
    lo, hi = check_bounds(bounds, d)
    check_finite(X, impute)
    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute)
    if projection is not None:
        from .projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    p = budget.p
    # scale_j = s · Δ_p(fm_j) / w_j^(1/p): sketch j then spends the share w_j of the loss
    base = [fm.sensitivity(p) / wj ** (1.0 / p) for fm, wj in zip(plan.feature_maps, w)]

    def build(s: float) -> dp.Measurement:
        parts = [
            make_private_sketch(
                source.output_domain,
                source.output_metric,
                budget.measure,
                fm,
                s * b,
                frac,
                chunk_rows,
                n_jobs,
            )
            for fm, b in zip(plan.feature_maps, base)
        ]
        # the clip (and projection) run once, before the composition; each part re-reads their output
        return source >> dp.c.make_composition(parts)

    # the common factor s multiplies sensitivity-normalised scales: unit sensitivity brackets it
    meas = search_measurement(build, budget, contributions, 1.0)
    sketches = release_once(meas, X, budget, contributions)
    for sk, wj in zip(sketches, w):
        sk.privacy["joint_release"] = (
            f"one of {len(sketches)} smooth-kernel sketches released together; the loss is the total"
        )
        sk.privacy["share"] = float(wj)
    return sketches
