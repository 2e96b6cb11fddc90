"""Where noise is added: the sketch-release measurement, built from OpenDP's own mechanisms.

``make_private_sketch`` = composition of

* ``make_feature_sum(fixed_point=True) >> make_laplace | make_gaussian`` (exact integer sum,
  OpenDP's exact discrete Laplace / discrete Gaussian sampler), and
* ``make_row_count >> make_laplace | make_gaussian``,

followed by a post-processor that packs the result into a :class:`~opendp_sketch.Sketch`.
No noise is drawn anywhere else in this package.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from ._bounds import check_bounds
from .domains import box_descriptor
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .features.byclass import ByClass
from .sketch import Sketch, discrete_laplace_variance
from .streaming import (
    bad_value_counts,
    frame_box_domain,
    frame_descriptor,
    make_frame_feature_sum,
    make_frame_row_count,
    report_progress,
    scan,
)
from .transformations import _check_chunking, make_box_clip, make_feature_sum, make_row_count

__all__ = ["make_private_sketch", "then_private_sketch", "release_sketch", "DEFAULT_COUNT_FRACTION"]

#: share of the privacy budget spent on the count (the rest goes to the feature sum)
DEFAULT_COUNT_FRACTION = 0.02


def _mechanism_of(output_measure: dp.Measure) -> str:
    if output_measure == dp.max_divergence():
        return "laplace"
    if output_measure == dp.zero_concentrated_divergence():
        return "gaussian"
    raise ValueError(
        f"output_measure ({output_measure}) must be dp.max_divergence() (Laplace) or "
        "dp.zero_concentrated_divergence() (Gaussian); for (ε, δ) use release_sketch(delta=...) "
        "or OpenDP's make_zCDP_to_approxDP"
    )


def _count_scale(mechanism: str, scale: float, count_fraction: float, fm: FeatureMap) -> float:
    """Count noise scale giving the count ``count_fraction`` of the total loss (ε or ρ)."""
    c = count_fraction
    if mechanism == "laplace":
        # ε_sum = Δ₁/scale, ε_count = 1/count_scale, ε_count/ε_sum = c/(1-c)
        return scale * (1 - c) / (c * fm.sensitivity(1))
    # ρ_sum = Δ₂²/(2σ²), ρ_count = 1/(2σ_c²), ρ_count/ρ_sum = c/(1-c)
    return scale * math.sqrt((1 - c) / c) / fm.sensitivity(2)


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
    (Gaussian).

    :param input_domain: a :func:`~opendp_sketch.box_domain`
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
    mechanism = _mechanism_of(output_measure)
    _check_chunking(chunk_rows, n_jobs)  # before they become part of a cache key
    desc = frame_descriptor(input_domain) or box_descriptor(input_domain)
    p = 1 if mechanism == "laplace" else 2
    # domain and feature map first, so a mismatch is reported as such even inside a search
    t_sum, t_count = _sources(input_domain, input_metric, feature_map, p, chunk_rows, n_jobs)
    # scale 0 is accepted like OpenDP's own mechanisms (infinite loss); parameter searches probe it
    scale = _number(scale, "scale", allow_zero=True)
    count_fraction = _fraction(count_fraction)
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
        composed = dp.m.make_user_measurement(
            input_domain, input_metric, output_measure,
            lambda x: [t_sum(x), t_count(x)],
            lambda d_in: math.inf if d_in else 0.0,
        )
    else:
        noise = dp.m.then_laplace if mechanism == "laplace" else dp.m.then_gaussian
        try:
            composed = dp.c.make_composition([t_sum >> noise(int_scale), t_count >> noise(count_scale)])
        except dp.OpenDPException as e:  # e.g. a loss that overflows at a subnormal scale
            raise ValueError(f"scale ({scale!r}) is outside the range OpenDP can account for ({e.variant})") from None

    bounds = (list(desc.lower), list(desc.upper))
    names = None if desc.column_names is None else list(desc.column_names)
    return _finish_sketch(composed, feature_map, mechanism, int_scale, count_scale, count_fraction, bounds, names)


then_private_sketch = to_then(make_private_sketch)


def _finish_sketch(
    composed: dp.Measurement,
    feature_map: FeatureMap,
    mechanism: str,
    int_scale: float,
    count_scale: float,
    count_fraction: float,
    bounds: tuple[list[float], list[float]],
    names: list[str] | None,
) -> dp.Measurement:
    """``composed`` (releasing ``[noisy integer sum, noisy count]``) followed by packing into a
    :class:`~opendp_sketch.Sketch` with its noise description.

    Shared by :func:`make_private_sketch` and :func:`~opendp_sketch.dask.make_private_dask_sketch`.
    """
    unit = feature_map.unit
    if mechanism == "laplace":
        sum_var = discrete_laplace_variance(int_scale) * unit**2
        count_var = discrete_laplace_variance(count_scale)
    else:
        sum_var = int_scale**2 * unit**2
        count_var = count_scale**2
    noise_info = {
        "mechanism": mechanism,
        "sum_scale": int_scale * unit,
        "count_scale": count_scale,
        "sum_variance": sum_var,
        "count_variance": count_var,
        "count_fraction": count_fraction,
    }
    measure_name = "MaxDivergence" if mechanism == "laplace" else "ZeroConcentratedDivergence"
    # the loss is recorded in every sketch: computed once here, so a loss that overflows is refused
    # at construction instead of failing after the noise was drawn
    try:
        loss = composed.map(1)
    except dp.OpenDPException as e:
        raise ValueError(f"the privacy loss at noise scale {int_scale * unit!r} is not representable ({e.variant})") from None

    def to_sketch(released: list[Any]) -> Sketch:
        return Sketch(
            feature_map=feature_map,
            sum_units=np.asarray(released[0], dtype=np.int64),
            count=int(released[1]),
            noise=dict(noise_info),
            privacy={"measure": measure_name, "d_in": 1, "loss": loss},
            bounds=bounds,
            column_names=names,
        )

    return composed >> dp.new_function(to_sketch, TO="ExtrinsicObject")


def _sources(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: int,
    chunk_rows: int,
    n_jobs: int | None,
) -> tuple[dp.Transformation, dp.Transformation]:
    """The scale-independent feature-sum and count transformations, cached on the feature map.

    OpenDP's parameter search (``dp.Context``, ``binary_search``) rebuilds the measurement
    hundreds of times; only the noise depends on the scale. Domains compare equal exactly when
    their identifiers do, so the identifier is a sound cache key.
    """
    key = (str(input_domain), str(input_metric), p, chunk_rows, n_jobs)
    cache = feature_map.__dict__.setdefault("_source_cache", {})
    if key not in cache and frame_descriptor(input_domain) is not None:
        cache[key] = (
            make_frame_feature_sum(input_domain, input_metric, feature_map, p=p, chunk_rows=chunk_rows, n_jobs=n_jobs),
            make_frame_row_count(input_domain, input_metric),
        )
    if key not in cache:
        cache[key] = (
            make_feature_sum(
                input_domain, input_metric, feature_map, p=p, fixed_point=True,
                chunk_rows=chunk_rows, n_jobs=n_jobs,
            ),
            make_row_count(input_domain, input_metric),
        )
    return cache[key]


def _make_private_sketch_in_context(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    scale: float,
    output_measure: dp.Measure | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Measurement:
    """``make_private_sketch`` with ``scale`` as the one parameter ``dp.Context`` solves for.

    Registered as ``private_sketch``: ``context.query(epsilon=1.0).private_sketch(fm).release()``.
    ``output_measure`` defaults to ``dp.max_divergence()`` (Laplace); pass
    ``dp.zero_concentrated_divergence()`` for Gaussian noise in a zCDP or (ε, δ) context.
    """
    return make_private_sketch(
        input_domain, input_metric, output_measure or dp.max_divergence(), feature_map, scale,
        count_fraction=count_fraction, chunk_rows=chunk_rows, n_jobs=n_jobs,
    )


# -- one-call release ------------------------------------------------------------------------

def _as_frame_source(data: Any) -> Any:
    """A path to a Parquet/CSV/IPC file becomes a lazy scan; anything else is returned as is."""
    if isinstance(data, (str, os.PathLike)):
        return scan(data)
    return data


def _is_lazyframe(data: Any) -> bool:
    import polars as pl

    return isinstance(data, pl.LazyFrame)


def _to_array(data: Any, column_names: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """numpy 2-D float64 view of numpy or Polars input; errors never echo data values."""
    try:
        import polars as pl
    except ImportError:  # pragma: no cover - polars is a dependency
        pl = None
    if pl is not None and isinstance(data, (pl.DataFrame, pl.LazyFrame)):
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
        raise ValueError(f"data must be a numpy array or a Polars DataFrame/LazyFrame, got {type(data).__name__}")
    if data.dtype.kind not in "biuf":
        raise ValueError(f"data dtype ({data.dtype}) must be numeric (bool, int or float)")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-dimensional (rows × columns), got {data.ndim} dimension(s)")
    return data.astype(np.float64, copy=False), None if column_names is None else list(column_names)


def release_sketch(
    data: Any,
    feature_map: FeatureMap,
    bounds: Any,
    *,
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
) -> Sketch:
    r"""Release a sketch of ``data`` in one call, spending exactly the given budget.

    * ``epsilon`` alone: pure ε-DP with discrete Laplace noise;
    * ``epsilon`` and ``delta > 0``: (ε, δ)-DP with discrete Gaussian noise (zCDP converted by
      OpenDP's ``make_zCDP_to_approxDP``);
    * ``rho``: ρ-zCDP with discrete Gaussian noise.

    The noise scale is the smallest one OpenDP certifies for that budget (binary search over
    the measurement's privacy map). Data is validated *before* anything is released: a refused
    call releases nothing and spends nothing, and its error never shows a data value.

    :param data: numpy array ``(n, d)``, Polars DataFrame, or — streamed in batches with memory
        independent of ``n`` — a Polars LazyFrame or the path of a Parquet/CSV/IPC file
    :param feature_map: the public feature map (``ByClass`` expects the label as last column)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped
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
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> X = np.random.default_rng(0).uniform(0, 1, size=(1000, 2))
    >>> sk = dps.release_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=2),
    ...                         bounds=(0, 1), epsilon=1.0)
    >>> sk.privacy["epsilon"] <= 1.0, sk.sum.shape
    (True, (8,))
    """
    measure, d_out, budget, count_fraction = _release_arguments(feature_map, contributions, epsilon, delta, rho, count_fraction)
    column_names = _column_names(column_names)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress ({progress!r}) must be a callable progress(rows_done, rows_total) or None")
    _check_chunking(chunk_rows, n_jobs)  # here too: inside the scale search an error would be swallowed

    data = _as_frame_source(data)
    if _is_lazyframe(data):
        if projection is not None:
            raise ValueError("projection= needs in-memory data (a numpy array or a Polars DataFrame)")
        return _release_frame(
            data, feature_map, bounds, measure, d_out, budget, delta, contributions, count_fraction,
            impute, column_names, chunk_rows, n_jobs, progress,
        )
    X, source = _memory_source(data, feature_map, bounds, impute, column_names, projection)

    def build(scale: float) -> dp.Measurement:
        return source >> then_private_sketch(measure, feature_map, scale, count_fraction, chunk_rows, n_jobs)

    return _search_and_release(build, X, feature_map, budget, d_out, contributions, delta)


def _memory_source(
    data: Any, feature_map: FeatureMap, bounds: Any, impute: Any, column_names: Sequence[str] | None, projection: Any
) -> tuple[np.ndarray, dp.Transformation]:
    """In-memory data checked (nothing released yet) and its clip (and projection) transformation."""
    X, names = _to_array(data, column_names)
    if projection is not None:
        from .projections import JLProjection

        if not isinstance(projection, JLProjection):
            raise ValueError(f"projection ({projection!r}) must be a JLProjection")
        if isinstance(feature_map, ByClass):
            raise ValueError("a projection cannot be combined with ByClass (it would mix the label into the features)")
        if projection.output_dim != feature_map.input_dim:
            raise ValueError(
                f"the projection outputs {projection.output_dim} columns but the feature map expects {feature_map.input_dim}"
            )
    d = feature_map.input_dim if projection is None else projection.input_dim
    if X.shape[1] != d:
        what = "the feature map" if projection is None else "the projection"
        raise ValueError(f"data has {X.shape[1]} columns but {what} expects {d}")
    if X.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")
    lo, hi = _full_bounds(bounds, feature_map) if projection is None else check_bounds(bounds, d)
    if impute is None and not np.isfinite(X).all():
        raise ValueError("data contains NaN or infinite values; clean it or pass impute=<public value>")
    if impute is not None and np.isinf(X).any():
        raise ValueError("data contains infinite values; impute replaces NaN only")

    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute, column_names=names)
    if projection is not None:
        from .projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    return X, source


def _column_names(names: Any) -> list[str] | None:
    """``None`` or a list of distinct strings (a bare string is not a list of names)."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence) or not all(isinstance(c, str) for c in names):
        raise ValueError(f"column_names ({names!r}) must be a list of strings")
    if len(set(names)) != len(names):
        raise ValueError(f"column_names ({list(names)}) must be distinct")
    return list(names)


def _release_arguments(
    feature_map: Any, contributions: Any, epsilon: Any, delta: Any, rho: Any, count_fraction: Any
) -> tuple[dp.Measure, Any, str, float]:
    """Checks shared by every one-call release: ``(measure, d_out, budget kind, count_fraction)``."""
    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    measure, d_out, budget = _parse_budget(epsilon, delta, rho)
    return measure, d_out, budget, _fraction(count_fraction)


def _search_measurement(
    make: Any, feature_map: FeatureMap, budget: str, d_out: Any, contributions: int, delta: Any = None
) -> dp.Measurement:
    """The measurement at the smallest noise scale OpenDP certifies for the budget.

    ``make(scale)`` builds the zCDP or pure-ε measurement; with ``delta`` it is converted to
    (ε, δ) by OpenDP (``make_zCDP_to_approxDP``, ``make_fix_delta``).
    """

    def build(scale: float) -> dp.Measurement:
        chain = make(scale)
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(chain), delta) if delta else chain

    # bracket the search around the analytic scale (~60 steps instead of ~1000): Laplace needs
    # d_in·Δ₁/(ε(1-c)) and ρ-zCDP d_in·Δ₂/√(2ρ(1-c)), both above ref; (ε, δ) Gaussian stays
    # mostly within [ref/20, 10⁴·ref]; extreme δ fall back to wider brackets
    if budget == "epsilon":
        ref = contributions * feature_map.sensitivity(1) / d_out
    elif budget == "rho":
        ref = contributions * feature_map.sensitivity(2) / math.sqrt(2 * d_out)
    else:
        ref = contributions * feature_map.sensitivity(2) / d_out[0]
    meas = None
    for lo_f, hi_f in ((1 / 20, 1e4), (1.0, 1e8), (1e-4, 1 / 20)):
        try:
            meas = dp.binary_search_chain(build, d_in=contributions, d_out=d_out, bounds=(ref * lo_f, ref * hi_f))
            break
        except (ValueError, dp.OpenDPException):  # boundary outside, or loss overflow at tiny scales
            continue
    if meas is None:
        try:
            meas = dp.binary_search_chain(build, d_in=contributions, d_out=d_out, T=float)
        except (ValueError, dp.OpenDPException) as e:
            raise ValueError(
                f"no noise scale OpenDP can represent gives {budget} = {d_out!r} "
                f"({type(e).__name__}): the budget or count_fraction is too extreme"
            ) from None
    return meas


def _search_and_release(
    make: Any, data: Any, feature_map: FeatureMap, budget: str, d_out: Any, contributions: int, delta: Any = None
) -> Sketch:
    """:func:`_search_measurement`, then release once and record what was spent."""
    meas = _search_measurement(make, feature_map, budget, d_out, contributions, delta)
    sketch = meas(data)
    spent = meas.map(contributions)
    sketch.privacy = {"measure": str(meas.output_measure), "d_in": contributions, **_spent(budget, spent)}
    return sketch


def _release_frame(
    frame: Any,
    feature_map: FeatureMap,
    bounds: Any,
    measure: dp.Measure,
    d_out: Any,
    budget: str,
    delta: float | None,
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
        raise ValueError(f"columns {bad} must be numeric")
    d = feature_map.input_dim
    if len(names) != d:
        raise ValueError(f"data has {len(names)} columns but the feature map expects {d}")
    lo, hi = _full_bounds(bounds, feature_map)
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
    domain = frame_box_domain((lo, hi), names, impute=impute)

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain, dp.symmetric_distance(), measure, feature_map, scale, count_fraction, chunk_rows, n_jobs
        )

    if progress is None:
        return _search_and_release(build, frame, feature_map, budget, d_out, contributions, delta)
    done = 0

    def advance(batch: int) -> None:
        nonlocal done
        done += batch
        progress(done, rows)

    with report_progress(advance):
        return _search_and_release(build, frame, feature_map, budget, d_out, contributions, delta)


def _number(v: Any, name: str, allow_zero: bool = False) -> float:
    """A real number (not bool or str) that is finite and positive (or zero if allowed)."""
    kind = "non-negative" if allow_zero else "positive"
    if isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} ({v!r}) must be a {kind} finite number")
    f = float(v)
    if not (math.isfinite(f) and (f > 0 or (allow_zero and f == 0))):
        raise ValueError(f"{name} ({v!r}) must be a {kind} finite number")
    return f


def _fraction(v: Any) -> float:
    """The count's share of the budget: a number strictly between 0 and 1."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and 0.0 < float(v) < 1.0:
        return float(v)
    raise ValueError(f"count_fraction ({v!r}) must be strictly between 0 and 1")


def _parse_budget(epsilon: float | None, delta: float | None, rho: float | None) -> tuple[dp.Measure, Any, str]:
    positive = _number

    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (optionally with delta) or rho")
    if rho is not None:
        if delta is not None:
            raise ValueError("delta cannot be combined with rho")
        return dp.zero_concentrated_divergence(), positive(rho, "rho"), "rho"
    eps = positive(epsilon, "epsilon")
    if delta is None or delta == 0:
        return dp.max_divergence(), eps, "epsilon"
    dl = positive(delta, "delta")
    if dl >= 1:
        raise ValueError(f"delta ({delta!r}) must be below 1")
    return dp.zero_concentrated_divergence(), (eps, dl), "epsilon_delta"


def _spent(budget: str, spent: Any) -> dict[str, float]:
    if budget == "rho":
        return {"rho": float(spent)}
    if budget == "epsilon":
        return {"epsilon": float(spent)}
    return {"epsilon": float(spent[0]), "delta": float(spent[1])}


def _full_bounds(bounds: Any, feature_map: FeatureMap) -> tuple[np.ndarray, np.ndarray]:
    """Bounds for every data column; for ``ByClass`` the label column defaults to ``[0, C-1]``."""
    if isinstance(feature_map, ByClass):
        lo, hi = check_bounds(bounds)
        if lo.size in (1, feature_map.dim) and lo.size != feature_map.input_dim:
            lo = np.append(np.broadcast_to(lo, (feature_map.dim,)), 0.0)
            hi = np.append(np.broadcast_to(hi, (feature_map.dim,)), feature_map.num_classes - 1.0)
        return check_bounds((lo, hi), feature_map.input_dim)
    return check_bounds(bounds, feature_map.input_dim)
