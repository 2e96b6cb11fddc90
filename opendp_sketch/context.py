"""``dp.Context`` integration: the constructors registered with ``dp.register``, and
:func:`release_sketch_in_context`.

Importing :mod:`opendp_sketch` registers ``box_clip``, ``feature_sum``, ``private_sketch``,
``m2m`` and ``jl_projection``, so they chain in Context queries::

    ctx.query(epsilon=0.5).box_clip(bounds).private_sketch(fm).release()
    ctx.query(epsilon=0.5).box_clip(bounds).private_sketch(fm).m2m("mean").release()

Registered names never collide with OpenDP's own (registration raises on duplicates).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import opendp.prelude as dp

from .backends.domains import box_data_bounds
from .backends.memory import make_box_clip, make_feature_sum
from .backends.projections import make_jl_projection
from .backends.streaming import make_lazyframe_to_frame_box
from .backends.tables import make_lazyframe_to_table
from .budget import DEFAULT_COUNT_FRACTION
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .measurements import make_private_sketch, then_private_sketch
from .plan import PairsRule, Plan, auto_feature_map
from .postprocessors import m2m_estimate
from .schema import Schema
from .sketch import Sketch

__all__ = ["release_sketch_in_context", "make_private_sketch_in_context", "make_m2m_in_context", "register"]


def make_private_sketch_in_context(
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
        input_domain,
        input_metric,
        output_measure or dp.max_divergence(),
        feature_map,
        scale,
        count_fraction=count_fraction,
        chunk_rows=chunk_rows,
        n_jobs=n_jobs,
    )


_SKETCH_DOMAIN: Any = None


def make_m2m_in_context(
    query: str | None,
    query_args: Sequence[Any] = (),
    *,
    bounds: Any = None,
    prior: Any = None,
    n_samples: int | None = None,
    seed: int = 0,
    lam: str | float = "auto",
    discrete: dict[str | int, Any] | None = None,
) -> dp.Transformation:
    """:func:`~opendp_sketch.make_m2m` for ``dp.Context`` queries (registered as ``m2m``).

    OpenDP's ``PartialChain`` (a query whose noise scale is still being solved for) chains only
    transformations and measurements, not functions. ``Measurement >> Transformation`` uses just
    the transformation's *function* (``make_chain_pm``), so the post-processor is wrapped in a
    transformation on sketches; its stability map is never used for privacy accounting. Like
    every chained post-processor it never raises or warns: a failed estimate is a falsy
    :class:`~opendp_sketch.postprocessors.FailedEstimate`.
    """
    global _SKETCH_DOMAIN
    options = {
        "bounds": bounds,
        "prior": prior,
        "n_samples": n_samples,
        "seed": seed,
        "lam": lam,
        "discrete": discrete,
    }
    function = m2m_estimate(query, query_args, options)
    if _SKETCH_DOMAIN is None:
        _SKETCH_DOMAIN = dp.user_domain("Sketch", lambda x: isinstance(x, Sketch))
    return dp.t.make_user_transformation(
        _SKETCH_DOMAIN,
        dp.symmetric_distance(),
        dp.user_domain("M2MEstimate", lambda _: True),
        dp.symmetric_distance(),
        function,
        lambda d_in: d_in,
    )


def release_sketch_in_context(
    context: Any,
    feature_map: FeatureMap | Plan | None = None,
    bounds: Any = None,
    column_names: Sequence[str] | None = None,
    *,
    schema: Schema | None = None,
    loss: Any = None,
    impute: Any = None,
    count_fraction: float | None = None,
) -> Sketch:
    """Release a sketch from a ``dp.Context`` against the same budget as the context's other
    queries (e.g. OpenDP's own Polars queries ``context.query().select(...)``).

    With ``schema=`` (a :class:`~opendp_sketch.Schema`) the context is the one an OpenDP user
    opens on a mixed-type ``LazyFrame``: the schema's columns are read as a release reads them
    (numbers, labels, booleans, dates; every value total, so nothing raises on data), the map
    defaults to :func:`~opendp_sketch.auto_feature_map` planned for this query's loss (and the
    schema's ``rows`` if it has one), and the sketch answers in the table's units and labels.
    The columns' types are checked against the schema from the context's domain, before
    anything is built; the rows are never read outside the measurement.

    Without a schema, the context may be opened on a Polars ``LazyFrame`` (``column_names``
    picks numeric columns) or on a numpy array (``dp.numpy.array2_domain``), with a
    ``feature_map`` and public ``bounds``.

    The noise scale is the smallest OpenDP certifies for ``loss`` (default: the context's next
    share from ``split_evenly_over``/``split_by_weights``); pure-ε contexts use discrete Laplace,
    zCDP contexts discrete Gaussian. The sketch records the loss at the context's privacy unit
    (its ``d_in``), which is what the context charged.

    Nothing in the released function raises on data: null/NaN read as ``impute`` (or the lower
    bound; a schema's null rules) and values outside ``bounds`` are clipped, so every query is
    charged.

    A :class:`~opendp_sketch.Plan` may stand in for the map (``release_sketch_in_context(ctx,
    plan)``): its schema or box, map, pair rule and count share are used, and its budget is the
    loss spent from the context (ε for a pure context, ρ for a zCDP one).

    :raises ValueError: for a context on other data, missing columns or columns whose types do
        not fit, a map without bounds or a schema, or no loss
    :example:

    A schema sketch and OpenDP's own Polars query, one budget:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> lf = pl.LazyFrame({"age": [23, 41, 35, 67] * 50, "region": ["N", "S", "S", "N"] * 50})
    >>> ctx = dp.Context.compositor(data=lf, privacy_unit=dp.unit_of(contributions=1),
    ...     privacy_loss=dp.loss_of(epsilon=1.0), split_evenly_over=2,
    ...     margins=[dp.polars.Margin(max_length=1000)])
    >>> count = ctx.query().select(dp.len(signed=False)).release().collect().item()   # OpenDP's own query
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "region": ["N", "S"]})
    >>> sk = dps.release_sketch_in_context(ctx, schema=schema)            # the second share
    >>> sk.column_names, sk.privacy["loss"] <= 0.5, ctx.remaining_privacy_loss()  # no share left
    (['age', 'region'], True, [])
    >>> dps.M2M(sk).shares("region")["region"].to_list()
    ['N', 'S']

    A numeric map on an array:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> X = np.random.default_rng(0).uniform(size=(100, 2))
    >>> ctx = dp.Context.compositor(data=X, privacy_unit=dp.unit_of(contributions=2),
    ...     privacy_loss=dp.loss_of(epsilon=1.0), split_evenly_over=2,
    ...     domain=dp.numpy.array2_domain(num_columns=2, T=float, nan=False))
    >>> sk = dps.release_sketch_in_context(ctx, dps.Histogram(bounds=(0, 1), bins=4, dim=2), (0, 1))
    >>> sk.privacy["d_in"], sk.privacy["loss"] <= 0.5
    (2, True)
    """
    accountant = context.accountant
    domain, metric = accountant.input_domain, accountant.input_metric
    pairs: PairsRule = "rule"
    fine_bins: int | None = None
    if isinstance(feature_map, Plan):  # the plan holds the map (or schema), the count's share and the loss
        plan, feature_map = feature_map, None
        if any(v is not None for v in (bounds, column_names, schema, loss, impute, count_fraction)):
            raise ValueError(
                "the plan holds what the sketch measures and spends: pass the context and the plan alone"
            )
        kind = "epsilon" if accountant.output_measure == dp.max_divergence() else "rho"
        if plan.budget.kind != kind:
            raise ValueError(
                f"the context accounts {kind}: build the plan with {kind}= (its share of the context)"
            )
        loss, count_fraction, pairs, fine_bins = (
            plan.budget.d_out,
            plan.count_fraction,
            plan.pairs,
            plan.fine_bins,
        )
        schema, feature_map, bounds = plan.schema, plan.feature_map, plan.bounds
        impute, column_names = plan.impute, plan.column_names
    if loss is None:
        mids = getattr(context, "d_mids", None)
        if not mids:
            raise ValueError("give loss=: this context has no predetermined share for the next query")
        loss = mids[0]
    measure = accountant.output_measure
    if measure not in (dp.max_divergence(), dp.zero_concentrated_divergence()):
        raise ValueError(f"the context's privacy measure ({measure}) must be pure ε or zCDP")
    fraction = DEFAULT_COUNT_FRACTION if count_fraction is None else count_fraction
    if schema is not None:
        if bounds is not None or column_names is not None or impute is not None:
            raise ValueError(
                "a schema gives the columns, their public ranges and null rules: drop bounds, column_names and impute"
            )
        source = make_lazyframe_to_table(domain, metric, schema)
        if feature_map is None:
            pure = measure == dp.max_divergence()
            feature_map = auto_feature_map(
                schema,
                epsilon=float(loss) if pure else None,
                rho=None if pure else float(loss),
                count_fraction=fraction,
                pairs=pairs,
                fine_bins=fine_bins,
            )
    elif feature_map is None or bounds is None:
        raise ValueError("give schema= (a table's public schema), or a feature_map and its public bounds")
    else:
        source = _box_source(domain, metric, feature_map, bounds, column_names, impute)
    fm = feature_map
    meas = dp.binary_search_chain(
        lambda s: source >> then_private_sketch(measure, fm, s, fraction),
        d_in=context.d_in,
        d_out=loss,
    )
    sketch = context(meas)
    sketch.privacy = {**sketch.privacy, "d_in": context.d_in, "loss": meas.map(context.d_in)}
    return sketch


def _box_source(
    domain: Any, metric: Any, feature_map: FeatureMap, bounds: Any, column_names: Any, impute: Any
) -> dp.Transformation:
    """The numeric source: a LazyFrame's named columns or an array, clipped to public bounds."""
    lo, hi = box_data_bounds(bounds, feature_map)
    if type(domain).__name__ == "LazyFrameDomain":
        if column_names is None or len(column_names) != feature_map.input_dim:
            got = None if column_names is None else len(column_names)
            raise ValueError(
                f"column_names: {got} columns given but the feature map expects {feature_map.input_dim}"
            )
        return make_lazyframe_to_frame_box(domain, metric, (lo, hi), column_names, impute)
    return make_box_clip(domain, metric, (lo, hi), impute=impute, column_names=column_names)


def register() -> None:
    """Register this package's constructors with ``dp.register`` (idempotent)."""
    from opendp.context import constructors

    for name, ctor in (
        ("box_clip", make_box_clip),
        ("feature_sum", make_feature_sum),
        ("private_sketch", make_private_sketch_in_context),
        ("m2m", make_m2m_in_context),
        ("jl_projection", make_jl_projection),
    ):
        if name not in constructors:  # importlib.reload must not fail on re-registration
            dp.register(ctor, name=name)
