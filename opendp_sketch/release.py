"""One call from a table to a released :class:`~opendp_sketch.Sketch`: the curator's side.

The data flow, one module each: **schema** (:mod:`~opendp_sketch.schema`) → **plan** (the map
and its budget, :mod:`~opendp_sketch.plan`, :mod:`~opendp_sketch.adaptive`) → **backend** (the
exact ``(Σ q(x_i), n)``, :mod:`~opendp_sketch.backends`, chosen by the data or the domain's
descriptor) → **one noisy release** (:mod:`~opendp_sketch.measurements`, the only place noise
is drawn) → **Sketch** → estimators.

:func:`release_sketch` validates everything it can before building a measurement (a refused
call releases and spends nothing, and no error shows a data value), finds the smallest noise
scale OpenDP certifies for the budget (:func:`~opendp_sketch.budget.search_measurement`), then
runs the measurement once. Backends never import this module, and post-processing
(``estimators/``) never does either.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import opendp.prelude as dp

from ._validate import check_chunking
from .adaptive import DEFAULT_ROWS_FRACTION, make_row_estimated_sketch, make_spanning_sketch
from .backends.domains import box_data_bounds
from .backends.memory import check_finite, check_rows, make_clamped_sum_and_count, memory_source, to_array
from .backends.protocol import Backend, backend_of_data, make_sum_and_count
from .backends.streaming import check_frame_box, report_progress, scan
from .backends.tables import check_table as check_local_table
from .backends.tables import table_domain as local_table_domain
from .budget import DEFAULT_COUNT_FRACTION, Budget, search_measurement
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .measurements import (
    check_release_arguments,
    make_noisy_sketch,
    make_private_sketch,
    release_once,
    then_private_sketch,
    warn_if_noise_swamps,
)
from .plan import (
    AUTO_ONE_WAY_WEIGHT,
    AUTO_SELECTION,
    PairsRule,
    Plan,
    auto_feature_map,
    schema_targets,
    tree_ratio,
    tree_rounds,
    warn_if_tree_is_noise,
)
from .schema import Schema
from .sketch import Sketch

__all__ = ["release_sketch", "prepare_table_release", "PreparedRelease"]


def release_sketch(
    data: Any,
    feature_map: FeatureMap | Plan | None = None,
    bounds: Any = None,
    *,
    plan: Plan | None = None,
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
    :param plan: a :class:`~opendp_sketch.Plan` holding everything the release measures and
        spends (also accepted in ``feature_map``'s place: ``release_sketch(data, plan)``); then no
        other argument that shapes the release may be given. Without it, the plan is built from
        the arguments below (``Plan(schema, feature_map, bounds, epsilon=..., ...)``) and
        validated before any data is read. The sketch records it in ``sk.privacy["plan"]``
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

    >>> import numpy as np, polars as pl, opendp.prelude as dp, opendp_sketch as dps
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

    A Dask (or Spark) DataFrame is recognised as a LazyFrame is, and released in one pass over
    the cluster (the nulls, ``±inf`` and unknown labels the schema does not cover are counted in
    the same pass and refused on the client before the noise is drawn):

    >>> import dask, dask.dataframe as dd
    >>> ddf = dd.from_pandas(table.to_pandas(), npartitions=3)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     sk = dps.release_sketch(ddf, schema=schema, epsilon=1.0)
    >>> sk.column_names
    ['age', 'cut']
    """
    if progress is not None and not callable(progress):
        raise ValueError(
            f"progress ({progress!r}) must be a callable progress(rows_done, rows_total) or None"
        )
    check_chunking(chunk_rows, n_jobs)  # here too: inside the scale search an error would be swallowed
    if isinstance(feature_map, Plan):
        plan, feature_map = feature_map, None
    shaping = {
        "feature_map": feature_map is None, "bounds": bounds is None, "schema": schema is None,
        "epsilon": epsilon is None, "delta": delta is None, "rho": rho is None,
        "contributions": contributions == 1, "count_fraction": count_fraction == DEFAULT_COUNT_FRACTION,
        "impute": impute is None, "column_names": column_names is None, "projection": projection is None,
        "pair_selection": isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION,
        "fine_bins": fine_bins is None, "pairs": pairs == "rule", "rows_fraction": rows_fraction is None,
    }  # fmt: skip
    if plan is None:
        plan = Plan(
            schema, feature_map, bounds, epsilon=epsilon, delta=delta, rho=rho, contributions=contributions,
            count_fraction=count_fraction, pairs=pairs, pair_selection=pair_selection, fine_bins=fine_bins,
            rows_fraction=rows_fraction, impute=impute, column_names=column_names, projection=projection,
        )  # fmt: skip
    elif not isinstance(plan, Plan):
        raise ValueError(f"plan ({plan!r}) must be a dps.Plan")
    elif not all(shaping.values()):
        given = [name for name, default in shaping.items() if not default]
        raise ValueError(
            f"the plan holds what the release measures and spends: drop {given} or build the plan with them"
        )
    sketch = _release(data, plan, chunk_rows, n_jobs, progress)
    sketch.privacy["plan"] = plan.options()
    return sketch


def _release(
    data: Any, plan: Plan, chunk_rows: int, n_jobs: int | None, progress: Callable[[int, int], None] | None
) -> Sketch:
    """Release ``data`` as ``plan`` says: by its backend, checked on the curator's side first."""
    cluster = backend_of_data(data)  # a Dask or Spark collection: its backend, else None (local)
    if cluster is not None and (plan.projection is not None or progress is not None):
        raise ValueError(f"projection= and progress= need local data, not a {cluster.name} collection")
    if plan.schema is not None:
        return _release_table(data, plan, chunk_rows, n_jobs, progress, cluster)
    feature_map, bounds, budget = plan.feature_map, plan.bounds, plan.budget
    assert feature_map is not None
    count_fraction = check_release_arguments(feature_map, plan.contributions, plan.count_fraction)
    contributions, impute, column_names, projection = (
        plan.contributions,
        plan.impute,
        plan.column_names,
        plan.projection,
    )
    if cluster is not None:
        return _release_cluster_box(
            cluster,
            data,
            feature_map,
            bounds,
            budget,
            contributions,
            count_fraction,
            impute,
            column_names,
            n_jobs,
        )

    if isinstance(data, (str, os.PathLike)):
        data = scan(data)
    elif type(data).__module__.split(".")[0] in ("pandas", "pyarrow"):  # as Polars, by name
        from .backends.tables import as_frame

        data = as_frame(data).collect()
    import polars as pl

    if isinstance(data, pl.LazyFrame):
        if projection is not None:
            raise ValueError("projection= needs in-memory data (a numpy array or a Polars DataFrame)")
        domain, rows = check_frame_box(data, feature_map, bounds, impute, column_names)

        def build_frame(scale: float) -> dp.Measurement:
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

        return _release_streamed(build_frame, data, feature_map, budget, contributions, rows, progress)
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
        check_rows(X, feature_map.input_dim, "the feature map")
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


@dataclass(frozen=True)
class PreparedRelease:
    """A table's release, built and checked on the curator's side but not yet run: the
    measurement, the input it reads (the checked frame), the map it measures (for the noise
    warning) and the rows and passes it will read (for progress). ``Session`` runs it through
    its privacy filter; :func:`release_sketch` runs it once."""

    measurement: dp.Measurement
    data: Any
    feature_map: FeatureMap
    rows: int
    passes: int


def prepare_table_release(
    data: Any,
    plan: Plan,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    backend: Backend | None = None,
    blocks: tuple[FeatureMap, Any, Any, float | None] | None = None,
) -> PreparedRelease:
    """The release of a table under ``plan``'s public schema, checked and built, not run.

    The table is checked by the schema first (one pass: dtypes, then the nulls, ``±inf`` and
    unknown labels its rules do not cover), so a refused table spends nothing; then the
    measurement is the plan's: a noisy row count before the map (a schema without ``rows``),
    a private tree of pairs before the sketch, or the sketch alone, at the smallest noise
    scale OpenDP certifies for the plan's budget.

    :param backend: the cluster backend of a Dask or Spark DataFrame (``None``: any table
        :func:`~opendp_sketch.backends.tables.as_frame` reads)
    :param blocks: ``plan.table_blocks()`` if the caller has it already (planning a wide map is
        not free)
    :raises ValueError: for a plan without a schema, or a table the schema refuses
    """
    schema, budget, contributions = plan.schema, plan.budget, plan.contributions
    if schema is None:
        raise ValueError("prepare_table_release needs a schema plan (dps.Plan(schema, ...))")
    if backend is not None and plan.rows_fraction:
        raise ValueError(
            "rows_fraction counts the rows to plan the automatic map of a table in memory or in files: "
            f"a {backend.name} release plans from the schema's rows estimate; drop it here"
        )
    if plan.counts_rows and backend is None:
        smallest = auto_feature_map(schema, **budget.kwargs(), pairs="none")  # for the checks only
        check_release_arguments(smallest, contributions, plan.count_fraction)
        frame, domain, rows = _checked_table(data, schema, backend)
        auto = isinstance(plan.pair_selection, str)
        meas = make_row_estimated_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            schema,
            DEFAULT_ROWS_FRACTION if plan.rows_fraction is None else plan.rows_fraction,
            count_fraction=plan.count_fraction,
            fine_bins=plan.fine_bins,
            pairs=plan.pairs,
            pair_selection=AUTO_SELECTION if auto else plan.pair_selection,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        # the count reads no batch; the release (and a tree's choices, in the same pass) reads it once
        return PreparedRelease(meas, frame, smallest, rows, 1)
    fm, full, keep, selection = plan.table_blocks() if blocks is None else blocks
    count_fraction = check_release_arguments(fm, contributions, plan.count_fraction)
    gather = None
    if selection is not None and full is not None and backend is not None and backend.gather_table:
        # a choice to make: the backend sums every block it could take in its checking pass
        gather = full.take(sorted({*keep, *tree_rounds(full, keep)[0]}))
    frame, domain, rows = _checked_table(data, schema, backend, gather, n_jobs)
    if selection is not None:
        meas, fm, rounds = make_spanning_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            full,
            keep,
            selection,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            count_fraction=count_fraction,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
            targets=schema_targets(schema),
        )
        if rounds and schema.rows is not None and not isinstance(plan.pair_selection, str):
            ratio = tree_ratio(budget, fm, full, keep, schema.rows, count_fraction, selection)
            warn_if_tree_is_noise(ratio, schema.rows)
        # with a choice to make, a table is read once (the candidates' counts and the release's in
        # one pass, adaptive.SharedPass); a cluster's steps count two
        return PreparedRelease(meas, frame, fm, rows, 2 if rounds and backend is not None else 1)

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain, dp.symmetric_distance(), budget.measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    meas = search_measurement(build, budget, contributions, fm.sensitivity(budget.p))
    return PreparedRelease(meas, frame, fm, rows, 1)


def _release_table(
    data: Any,
    plan: Plan,
    chunk_rows: int,
    n_jobs: int | None,
    progress: Callable[[int, int], None] | None,
    backend: Backend | None = None,
) -> Sketch:
    """A table under the plan's public schema: checked by the schema, then released once (on a
    cluster without a choice to make, in one pass)."""
    assert plan.schema is not None
    blocks = None
    if backend is not None and not plan.rows_fraction:
        blocks = plan.table_blocks()
        fm, _, _, selection = blocks
        if selection is None:
            count_fraction = check_release_arguments(fm, plan.contributions, plan.count_fraction)
            return _release_cluster_table_once(
                backend, data, plan.schema, fm, plan.budget, plan.contributions, count_fraction, n_jobs
            )
    p = prepare_table_release(data, plan, chunk_rows, n_jobs, backend, blocks)
    return _release_measured(
        p.measurement, p.data, p.feature_map, plan.budget, plan.contributions, p.rows, progress, p.passes
    )


def _release_cluster_table_once(
    backend: Backend,
    data: Any,
    schema: Schema,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    n_jobs: int | None,
) -> Sketch:
    """A schema release on a cluster without a choice to make, in **one** pass: the column types
    checked from the collection's schema (nothing computed), the scale searched, then one job
    computing the exact pair and, per column, the nulls, ±inf and unknown labels the schema's
    rules do not cover; those (and an empty table) are refused on the client **before** the
    noise is drawn, as the numeric cluster path refuses NaN (:func:`_release_on_cluster`). The
    pair is 1-stable in the rows, so noising the computed pair is the chained measurement."""
    assert backend.check_types and backend.table_domain and backend.compute_table  # a one-pass backend
    backend.check_types(data, schema)
    domain = backend.table_domain(schema)
    n_jobs = 1 if n_jobs is None else n_jobs
    pair = make_sum_and_count(domain, dp.symmetric_distance(), feature_map, n_jobs=n_jobs)

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, Any] = {}
    value = backend.compute_table(data, domain, feature_map, n_jobs, found)
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found["problems"])
    return release_once(meas, value, budget, contributions)


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


def _checked_table(
    data: Any,
    schema: Schema,
    backend: Backend | None,
    gather: FeatureMap | None = None,
    n_jobs: int | None = None,
) -> tuple[Any, dp.Domain, int]:
    """The curator's side of a schema release, before any measurement is built: the table
    checked by its backend (dtypes, then one pass refusing nulls, ±inf and unknown labels the
    rules do not cover; a backend with ``gather_table`` also sums every block of ``gather`` in
    that pass), its domain and its row count (never released)."""
    if backend is None:
        frame, rows = check_local_table(data, schema)
        return frame, local_table_domain(schema), rows
    assert backend.check_table is not None and backend.table_domain is not None
    if gather is not None and backend.gather_table is not None:
        value, rows = backend.gather_table(data, schema, gather, 1 if n_jobs is None else n_jobs)
    else:
        value, rows = backend.check_table(data, schema)
    return value, backend.table_domain(schema), rows


def _release_cluster_box(
    backend: Backend,
    data: Any,
    feature_map: FeatureMap,
    bounds: Any,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    impute: Any,
    column_names: Sequence[str] | None,
    n_jobs: int | None,
) -> Sketch:
    """The one-call release of a numeric Dask or Spark collection in one pass: the structure
    checked from the collection's schema, the scale searched (every parameter checked before
    the data is touched), the one pass run; null/NaN without ``impute``, ``±inf`` and an empty
    table are refused on the client before the noise is drawn. The pair is 1-stable in the
    rows, so noising the computed pair is the chained measurement."""
    assert backend.box_names and backend.box_domain and backend.compute_box  # a one-pass backend
    n_jobs = 1 if n_jobs is None else n_jobs
    d = feature_map.input_dim
    names = backend.box_names(data, d, column_names)
    domain = backend.box_domain(box_data_bounds(bounds, feature_map), names, d, impute is not None)
    pair = make_sum_and_count(domain, dp.symmetric_distance(), feature_map, n_jobs=n_jobs, impute=impute)

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, bool] = {}
    value = backend.compute_box(data, domain, feature_map, impute, n_jobs, found)
    if found["nan"] and impute is None:
        raise ValueError("data contains null or NaN values; clean them or pass impute=<public value>")
    if found["inf"]:
        raise ValueError("data contains infinite values; clean them (impute replaces null/NaN only)")
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    return release_once(meas, value, budget, contributions)


def __getattr__(name: str) -> Any:
    """Names this module held before the redesign (issue 38), for one release, with a warning
    naming their module now: the plan's (:mod:`~opendp_sketch.plan`), the budget's, the noise
    step's (:mod:`~opendp_sketch.measurements`) and the adaptive releases'."""
    import importlib
    import warnings

    for module in ("plan", "adaptive", "budget", "measurements", "smooth_release", "backends.memory"):
        found = importlib.import_module(f"opendp_sketch.{module}")
        if name in getattr(found, "__all__", ()) or (name.isupper() and hasattr(found, name)):
            warnings.warn(
                f"opendp_sketch.release.{name} moved to opendp_sketch.{module}.{name}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(found, name)
    raise AttributeError(f"module 'opendp_sketch.release' has no attribute {name!r}")
