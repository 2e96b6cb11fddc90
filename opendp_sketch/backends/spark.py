"""Spark adapter: the same sketch release on a Spark DataFrame.

What runs where:

* **executors**, one Python task per partition (``DataFrame.mapInArrow``): read the partition's
  Arrow batches as float64 rows, impute null/NaN (if asked), clip into the public box, and the
  exact integer feature sum ``Σ q(x)`` (:meth:`~opendp_sketch.FeatureMap.fixed_sum`) plus the row
  count — Python ints sent back as decimal text, no noise; no row leaves the executor;
* **driver**: add the per-partition totals exactly (Python ints), saturate to int64 as the
  single-process path does; the release layer (:mod:`opendp_sketch.release`:
  ``make_private_spark_sketch``, ``release_spark_sketch``) then draws the noise **once** with
  OpenDP's own mechanisms.

Every row lives in exactly one partition and integer addition is exact and order-free, so the
combined sum is identical to ``feature_map.fixed_sum`` of the clipped rows in one process,
whatever the partitioning; the stability (``d_in · Δ_p``) is the one of
:func:`~opendp_sketch.make_feature_sum`.

A schema release with a private choice (MST's tree of pairs) is one job too
(:func:`gather_spark_table`): the checking job counts every block the choice could take, and the
candidates' counts and the chosen map's sums are read off its exact integers.

The feature map travels to the executors as its :meth:`~opendp_sketch.FeatureMap.to_dict` JSON
and is rebuilt there by :func:`~opendp_sketch.features.feature_map_from_dict` (which checks the
fingerprint of the regenerated random draws); no feature map object is pickled.

PySpark is an optional dependency (``pip install opendp-sketch[spark]``, plus a Java 17+
runtime): it is imported only when a function here needs it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from .._fixed import Accumulator
from .._validate import check_bounds
from ..features.base import FeatureMap, feature_map_from_dict
from ..schema import Schema, sum_problems
from .domains import SparkBoxDomain, SparkTableDomain, table_descriptor
from .gathered import gather_table, pair_or_pass
from .memory import I64_MAX, check_source_arguments, pair_parts, pair_transformation
from .protocol import Backend, register_backend

__all__ = [
    "spark_box_domain",
    "SparkBoxDomain",
    "make_spark_sum_and_count",
    "make_spark_feature_sum",
    "then_spark_feature_sum",
    "sum_and_count_spark",
    "check_spark_frame",
    "spark_table_domain",
    "make_spark_table_sum_and_count",
    "check_spark_table",
    "check_spark_table_types",
    "table_sum_and_count_spark",
    "gather_spark_table",
]

#: rows handed to one ``fixed_sum`` call on an executor: Arrow batches (10 000 rows by default)
#: are gathered up to this size so per-call overhead stays small and memory stays bounded
BLOCK_ROWS = 1 << 16
#: what each partition task returns: one row of exact totals
_RESULT_SCHEMA = "sums string, rows long, nan boolean, inf boolean"
#: ... of a table under a schema: its exact totals; and of the curator's check: the problem counts
_TABLE_RESULT_SCHEMA = "sums string, rows long, problems string"
_PROBLEMS_SCHEMA = "problems string, rows long"


def _is_spark_frame(x: Any) -> bool:
    sql = sys.modules.get("pyspark.sql")  # a Spark DataFrame exists only once pyspark.sql is imported
    return sql is not None and isinstance(x, sql.DataFrame)


def _column_types(frame: Any) -> dict[str, Any]:
    """Column name → Spark data type, from the schema only (no job runs)."""
    return {f.name: f.dataType for f in frame.schema.fields}


def _numeric(data_type: Any) -> bool:
    from pyspark.sql.types import BooleanType, NumericType

    return isinstance(data_type, (NumericType, BooleanType))


def spark_box_domain(
    bounds: Any,
    column_names: Sequence[str],
    nan: bool = False,
    inf: bool = True,
) -> dp.Domain:
    """Domain of Spark DataFrames holding the numeric columns ``column_names``, with a public box.

    Values may lie outside ``bounds``: the transformations clip them into the box, row by row.
    Membership is checked on the DataFrame's schema only (numeric and boolean column types;
    values stay on the cluster). ``nan`` and ``inf`` state which values the curator's data may
    hold: :func:`release_spark_sketch` finds null/NaN (without ``impute``) and ``±inf`` in its
    single pass and refuses them on the driver before the noise is drawn. The transformations
    never raise on values: a null or NaN without ``impute`` reads as the lower bound and
    ``±inf`` are clipped, within the stated sensitivity.

    :param bounds: public ``(lower, upper)``, scalars or one value per column
    :param column_names: the columns to read, in the feature map's order; recorded in the sketch
    :param nan: whether members may contain null/NaN (requires ``impute`` in the transformations)
    :param inf: whether members may contain ``±inf`` (clipped to the bounds)
    :return: an OpenDP domain whose ``descriptor`` is :class:`SparkBoxDomain`
    :raises ValueError: on malformed bounds or names
    :example:

    >>> import opendp.prelude as dp
    >>> from opendp_sketch.backends.spark import spark_box_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dom = spark_box_domain((0.0, [1.0, 5.0]), column_names=["a", "b"])
    >>> dom.descriptor.column_names, dom.descriptor.upper
    (('a', 'b'), (1.0, 5.0))
    """
    if not isinstance(nan, bool) or not isinstance(inf, bool):
        raise ValueError(f"nan ({nan!r}) and inf ({inf!r}) must be True or False")
    if isinstance(column_names, (str, bytes)) or not isinstance(column_names, Sequence):
        raise ValueError(f"column_names ({column_names!r}) must be a list of column names")
    names = tuple(str(c) for c in column_names)
    lo, hi = check_bounds(bounds, len(names))
    if len(names) != lo.size or len(set(names)) != len(names):
        raise ValueError(f"column_names ({list(names)}) must be {lo.size} distinct names")
    desc = SparkBoxDomain(
        lower=tuple(lo.tolist()),
        upper=tuple(hi.tolist()),
        num_columns=lo.size,
        column_names=names,
        nan=nan,
        inf=inf,
    )

    def _member(x: Any) -> bool:
        if not _is_spark_frame(x):
            return False
        types = _column_types(x)
        return all(c in types and _numeric(types[c]) for c in names)

    ident = (
        f"SparkBoxDomain(num_columns={lo.size}, lower={list(desc.lower)}, upper={list(desc.upper)}, "
        f"column_names={list(names)}, nan={nan}, inf={inf})"
    )
    return dp.user_domain(ident, _member, desc)


def _spark_descriptor(domain: dp.Domain) -> SparkBoxDomain:
    desc = getattr(domain, "descriptor", None)
    if not isinstance(desc, SparkBoxDomain):
        raise ValueError(
            f"input_domain ({domain}) must be a spark_box_domain (see opendp_sketch.backends.spark)"
        )
    return desc


# -- per-partition work (runs on the executors) -----------------------------------------------

#: objects rebuilt from their JSON spec on this Python worker (workers are reused across tasks)
_EXECUTOR_CACHE: dict[str, Any] = {}


def _rebuilt(spec: str, build: Any) -> Any:
    """``build(json.loads(spec))``, once per worker and spec; a long-lived worker serving many
    releases keeps only a few. No object is pickled: specs are JSON text."""
    obj = _EXECUTOR_CACHE.get(spec)
    if obj is None:
        if len(_EXECUTOR_CACHE) >= 16:
            _EXECUTOR_CACHE.clear()
        obj = _EXECUTOR_CACHE[spec] = build(json.loads(spec))
    return obj


def _executor_map(spec: str) -> FeatureMap:
    """The feature map of a JSON spec, rebuilt once per Python worker."""
    return _rebuilt(spec, feature_map_from_dict)


def _gathered(batches: Iterator[Any]) -> Iterator[list[Any]]:
    """Arrow batches gathered into groups of about :data:`BLOCK_ROWS` rows (empty ones dropped),
    so each block's work is large enough and memory stays bounded."""
    pending: list[Any] = []
    size = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            size += batch.num_rows
        if size >= BLOCK_ROWS:
            yield pending
            pending, size = [], 0
    if size:
        yield pending


def _row_blocks(batches: Iterator[Any], d: int) -> Iterator[np.ndarray]:
    """The rows of Arrow batches (``d`` float64 columns) as float64 ``(rows, d)`` blocks of about
    :data:`BLOCK_ROWS` rows (small batches are gathered; memory stays bounded); a null becomes NaN."""
    for group in _gathered(batches):
        yield _stack(group, sum(b.num_rows for b in group), d)


def _stack(batches: list[Any], size: int, d: int) -> np.ndarray:
    block = np.empty((size, d), dtype=np.float64)
    start = 0
    for b in batches:
        for j in range(d):
            # float64 Arrow arrays turn nulls into NaN here
            block[start : start + b.num_rows, j] = b.column(j).to_numpy(zero_copy_only=False)
        start += b.num_rows
    return block


def _partition_stats(
    batches: Iterator[Any],
    spec: str,
    lo: tuple[float, ...],
    hi: tuple[float, ...],
    fill: tuple[float, ...] | None,
    n_jobs: int | None,
) -> Iterator[Any]:
    """One Arrow row ``(Σ q(x) as decimal text, rows, has null/NaN, has ±inf)`` per partition.

    Imputes, then clips into the box inside ``fixed_sum`` (``fmin(fmax(x, lo), hi)``, the rule of
    :func:`~opendp_sketch.make_box_clip`: a NaN left without imputation goes to the lower bound).
    The flags are for the driver's refusal in :func:`release_spark_sketch`; they never stop the
    sum. Yields exactly one row, also for an empty partition.
    """
    import pyarrow as pa

    fm = _executor_map(spec)
    box = (np.asarray(lo), np.asarray(hi))
    acc = Accumulator(fm.num_features)
    rows, has_nan, has_inf = 0, False, False
    for x in _row_blocks(batches, len(lo)):
        isnan = np.isnan(x)
        if isnan.any():
            has_nan = True
            if fill is not None:
                np.copyto(x, np.broadcast_to(np.asarray(fill), x.shape), where=isnan)
        has_inf = has_inf or bool(np.isinf(x).any())
        acc.add_exact(fm.fixed_sum(x, clip=box, n_jobs=n_jobs))
        rows += x.shape[0]
    yield pa.RecordBatch.from_pydict(
        {"sums": [",".join(map(str, acc.total()))], "rows": [rows], "nan": [has_nan], "inf": [has_inf]}
    )


def _sum_and_count(
    data: Any,
    desc: SparkBoxDomain,
    spec: str,
    num_features: int,
    fill: np.ndarray | None,
    n_jobs: int | None,
    found: dict[str, bool] | None = None,
) -> tuple[np.ndarray, int]:
    """Run one Spark job (a task per partition) and combine the totals exactly on the driver.

    Never raises on values. ``found``, when given, receives whether null/NaN and ±inf occurred
    (for the curator's refusal in :func:`release_spark_sketch`; never part of a release).
    """
    from pyspark.sql import functions as F

    assert desc.column_names is not None  # spark_box_domain always names its columns
    # backquoted: a dot in a name is part of the name, not a struct field access; renamed to
    # plain positional names for mapInArrow; the cast of a numeric or boolean column to double
    # cannot fail, whatever the values (ANSI mode included)
    cols = [
        F.col("`" + c.replace("`", "``") + "`").cast("double").alias(f"c{j}")
        for j, c in enumerate(desc.column_names)
    ]
    task = functools.partial(
        _partition_stats,
        spec=spec,
        lo=desc.lower,
        hi=desc.upper,
        fill=None if fill is None else tuple(fill.tolist()),
        n_jobs=n_jobs,
    )
    results = data.select(*cols).mapInArrow(task, _RESULT_SCHEMA).collect()
    if found is not None:
        found["nan"] = any(r["nan"] for r in results)
        found["inf"] = any(r["inf"] for r in results)
    acc = Accumulator(num_features)
    for r in results:
        acc.add_exact([int(v) for v in r["sums"].split(",")])
    # same saturation as make_feature_sum(fixed_point=True) and make_row_count
    return acc.clipped(I64_MAX), min(sum(int(r["rows"]) for r in results), I64_MAX)


# -- transformations --------------------------------------------------------------------------


def _portable(feature_map: FeatureMap) -> str:
    """The map's JSON spec for the executors, checked here: it must rebuild the same map."""
    spec = json.dumps(feature_map.to_dict())
    if feature_map_from_dict(json.loads(spec)) != feature_map:
        raise ValueError(f"feature_map ({feature_map!r}) does not survive its to_dict() round trip")
    return spec


def sum_and_count_spark(
    data: Any,
    input_domain: dp.Domain,
    feature_map: FeatureMap,
    impute: Any = None,
    n_jobs: int | None = 1,
    found: dict[str, bool] | None = None,
) -> tuple[np.ndarray, int]:
    """The exact ``(Σ q(x_i), n)`` of a Spark DataFrame (what :func:`make_spark_sum_and_count`
    computes), optionally reporting in ``found`` whether null/NaN and ±inf occurred — for the
    curator's refusal before noising, never part of a release. Never raises on values."""
    desc = _spark_descriptor(input_domain)
    fill = desc.fill(impute, input_domain)
    return _sum_and_count(data, desc, _portable(feature_map), feature_map.num_features, fill, n_jobs, found)


def make_spark_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """The pair ``(Σ q(x_i), n)`` of a Spark DataFrame, computed in **one** Spark job.

    The output is an ``(int64 vector, int)`` pair under the metric ``SymmetricDistanceOfSource()``:
    the distance of two pairs is the symmetric distance of the datasets they were computed from,
    so this transformation is 1-stable by definition, and each half is read off by a
    transformation with the stability of its single-process counterpart
    (:func:`~opendp_sketch.make_feature_sum`: ``d_in·Δ_p``; the row count: ``d_in``).
    :func:`make_private_spark_sketch` composes the two noisy halves *after* this transformation,
    so the data is read once.

    :param input_domain: a :func:`spark_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map (``input_dim`` columns)
    :param impute: public value(s) replacing null/NaN; without it they read as the lower bound
    :param n_jobs: threads inside each partition task (Spark already runs partitions in parallel)
    :return: a Transformation
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.spark import spark_box_domain, make_spark_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = make_spark_sum_and_count(spark_box_domain((0.0, 1.0), ["x"]), dp.symmetric_distance(), fm)
    >>> t.map(3)
    3
    """
    desc = check_source_arguments(
        input_domain,
        input_metric,
        feature_map,
        n_jobs,
        SparkBoxDomain,
        "spark_box_domain (see opendp_sketch.backends.spark)",
    )
    fill = desc.fill(impute, input_domain)
    spec, m = _portable(feature_map), feature_map.num_features
    return pair_transformation(
        input_domain, input_metric, feature_map, lambda x: _sum_and_count(x, desc, spec, m, fill, n_jobs)
    )


def make_spark_feature_sum(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: Literal[1, 2] = 1,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """``Σ_i q(x_i)`` of a Spark DataFrame: the output of ``make_feature_sum(fixed_point=True)``.

    An ``int64`` vector (units of ``2^-k``) under ``l1_distance(T=i64)`` (``p=1``) or
    ``l2_distance(T=f64)`` (``p=2``) with stability ``d_in·Δ_p`` in integer units, identical to
    the single-process sum of the clipped rows for any partitioning.

    :param input_domain: a :func:`spark_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map
    :param p: 1 or 2, the norm of the output metric
    :param impute: public value(s) replacing null/NaN
    :param n_jobs: threads inside each partition task
    :return: a Transformation
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.spark import spark_box_domain, make_spark_feature_sum
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> t = make_spark_feature_sum(spark_box_domain((0.0, 1.0), ["x"]), dp.symmetric_distance(), fm)
    >>> t.map(1), t.output_metric
    (1, L1Distance(i64))
    """
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    pair = make_spark_sum_and_count(input_domain, input_metric, feature_map, impute=impute, n_jobs=n_jobs)
    return pair >> pair_parts(pair, feature_map, p)[0]


then_spark_feature_sum = to_then(make_spark_feature_sum)


# -- curator-side checks of a one-call release ----------------------------------------------


def check_local_workers(data: Any) -> None:
    """On a local Spark master, refuse a session whose Python workers run another interpreter than
    this one (PySpark starts ``python3`` from ``PATH`` unless ``PYSPARK_PYTHON`` says otherwise;
    one without this package fails every task with a worker traceback). The curator's check,
    before anything is built.

    :raises ValueError: naming ``PYSPARK_PYTHON`` and the interpreter to give it
    """
    import shutil
    import sys

    try:
        context = data.sparkSession.sparkContext
        master, python = str(context.master), str(context.pythonExec or "python3")
    except Exception:  # noqa: BLE001 - not a session we can ask: the job itself will say
        return
    if not master.startswith("local"):
        return  # a cluster's workers have interpreters of their own
    found = shutil.which(python) or python
    if os.path.realpath(found) != os.path.realpath(sys.executable):
        raise ValueError(
            f"this local Spark session's Python workers run {python!r} ({found}), not this interpreter "
            f"({sys.executable}), so they cannot import opendp_sketch: set the environment variable "
            f"PYSPARK_PYTHON={sys.executable} (os.environ['PYSPARK_PYTHON'] = sys.executable) before the "
            "SparkSession is created"
        )


def check_spark_frame(data: Any, d: int, column_names: Sequence[str] | None) -> list[str]:
    """Structural checks of a Spark DataFrame from its schema (no job runs); returns the column
    names to read. Errors name columns and types, never data values."""
    if not _is_spark_frame(data):
        raise ValueError(f"data must be a pyspark.sql.DataFrame, got {type(data).__name__}")
    check_local_workers(data)
    types = _column_types(data)
    cols = [str(c) for c in data.columns] if column_names is None else [str(c) for c in column_names]
    missing = [c for c in cols if c not in types]
    if missing:
        raise ValueError(f"columns {missing} are not in the data (columns: {list(data.columns)})")
    repeated = sorted({c for c in cols if list(data.columns).count(c) > 1})
    if repeated:
        raise ValueError(f"columns {repeated} occur more than once in the data: rename them")
    bad = [f"{c} ({types[c].simpleString()})" for c in cols if not _numeric(types[c])]
    if bad:
        raise ValueError(f"columns {bad} must be numeric")
    if len(cols) != d:
        raise ValueError(f"data has {len(cols)} columns but the feature map expects {d}")
    return cols


# -- tables under a public schema (mixed types: labels, integers, booleans, nulls) ----------


def spark_table_domain(schema: Schema) -> dp.Domain:
    """Domain of Spark DataFrames holding the columns of a public :class:`~opendp_sketch.Schema`.

    Every value is admitted: each executor encodes its partition with the schema
    (:meth:`~opendp_sketch.Schema.encode`: nulls, NaN, ±inf, out-of-range values and unknown
    labels go to public values), so nothing raises inside a measurement on this domain. Membership
    reads the DataFrame's column names only; their types and values are the curator's
    :func:`check_spark_table`. The box is the schema's encoded box.

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dom = spark_table_domain(dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]}))
    >>> dom.descriptor.column_names, dom.descriptor.upper
    (('age', 'cut'), (1.0, 1.0))
    """
    desc = table_descriptor(schema, SparkTableDomain)
    names = desc.column_names

    def _member(x: Any) -> bool:
        return _is_spark_frame(x) and all(c in x.columns for c in names)

    return dp.user_domain(f"SparkTableDomain(schema={schema.to_dict()})", _member, desc)


def _executor_schema(spec: str) -> Schema:
    """The schema of a JSON spec, rebuilt once per Python worker."""
    return _rebuilt(spec, Schema.from_dict)


def _table_frames(batches: Iterator[Any]) -> Iterator[Any]:
    """Arrow batches as Polars frames of about :data:`BLOCK_ROWS` rows (small batches gathered)."""
    import polars as pl
    import pyarrow as pa

    for group in _gathered(batches):
        yield pl.from_arrow(pa.Table.from_batches(group))


def _partition_table_stats(
    batches: Iterator[Any], spec: str, schema_spec: str, n_jobs: int | None, problems: bool = False
) -> Iterator[Any]:
    """One Arrow row ``(Σ q(encode(x)) as decimal text, rows, problem counts as JSON)`` per
    partition: each block encoded by the schema (never raises on values), then the exact integer
    sum in the encoded box; with ``problems``, :meth:`Schema.problems` of each block too (for the
    curator's refusal on the driver, never part of a release). Yields exactly one row, also for
    an empty partition."""
    import pyarrow as pa

    fm, schema = _executor_map(spec), _executor_schema(schema_spec)
    box = schema.bounds
    acc = Accumulator(fm.num_features)
    totals: dict[str, dict[str, int]] = {}
    rows = 0
    for frame in _table_frames(batches):
        if problems:
            totals = sum_problems([totals, schema.problems(frame)])
        acc.add_exact(fm.fixed_sum(schema.encode(frame), clip=box, n_jobs=n_jobs))
        rows += frame.height
    yield pa.RecordBatch.from_pydict(
        {"sums": [",".join(map(str, acc.total()))], "rows": [rows], "problems": [json.dumps(totals)]}
    )


def _partition_problems(batches: Iterator[Any], schema_spec: str) -> Iterator[Any]:
    """One Arrow row ``(problem counts as JSON, rows)`` per partition (:meth:`Schema.problems`):
    for the curator's refusal on the driver, never part of a release."""
    import pyarrow as pa

    schema = _executor_schema(schema_spec)
    totals: dict[str, dict[str, int]] = {}
    rows = 0
    for frame in _table_frames(batches):
        totals = sum_problems([totals, schema.problems(frame)])
        rows += frame.height
    yield pa.RecordBatch.from_pydict({"problems": [json.dumps(totals)], "rows": [rows]})


def _table_columns(names: Sequence[str]) -> list[Any]:
    from pyspark.sql import functions as F

    # backquoted: a dot in a name is part of the name, not a struct field access; no cast, the
    # schema reads each type on the executor
    return [F.col("`" + c.replace("`", "``") + "`") for c in names]


def _table_sum_and_count(
    data: Any,
    names: Sequence[str],
    spec: str,
    schema_spec: str,
    num_features: int,
    n_jobs: int | None,
    found: dict[str, Any] | None = None,
) -> tuple[np.ndarray, int]:
    """One Spark job encoding and summing every partition; the totals combined exactly on the
    driver. Never raises on values. ``found``, when given, receives the problem counts
    (``found["problems"]``, :meth:`Schema.problems` summed over the partitions) from the same
    job: for the curator's refusal before noising, never part of a release."""
    task = functools.partial(
        _partition_table_stats, spec=spec, schema_spec=schema_spec, n_jobs=n_jobs, problems=found is not None
    )
    results = data.select(*_table_columns(names)).mapInArrow(task, _TABLE_RESULT_SCHEMA).collect()
    acc = Accumulator(num_features)
    for r in results:
        acc.add_exact([int(v) for v in r["sums"].split(",")])
    if found is not None:
        found["problems"] = sum_problems(json.loads(r["problems"]) for r in results)
    return acc.clipped(I64_MAX), min(sum(int(r["rows"]) for r in results), I64_MAX)


def table_sum_and_count_spark(
    data: Any,
    input_domain: dp.Domain,
    feature_map: FeatureMap,
    n_jobs: int | None = 1,
    found: dict[str, Any] | None = None,
) -> tuple[np.ndarray, int]:
    """The exact ``(Σ q(encode(x_i)), n)`` of a Spark DataFrame under a schema (what
    :func:`make_spark_table_sum_and_count` computes), in one job that can also report in
    ``found`` the per-column problem counts the schema's rules must handle — for the curator's
    refusal before noising (:func:`~opendp_sketch.release_sketch`), never part of a
    release. Never raises on values."""
    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, SparkTableDomain):
        raise ValueError(f"input_domain ({input_domain}) must be a spark_table_domain(schema)")
    names = list(desc.schema.data_columns)
    schema_spec = json.dumps(desc.schema.to_dict())
    return _table_sum_and_count(
        data, names, _portable(feature_map), schema_spec, feature_map.num_features, n_jobs, found
    )


def make_spark_table_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """The pair ``(Σ q(encode(x_i)), n)`` of a Spark DataFrame under a public schema, in **one**
    Spark job: each executor encodes its rows with the schema (row by row, never raising on
    values) and sums them exactly, as :func:`~opendp_sketch.backends.tables.make_table_sum_and_count`
    does in one process; so the stability is ``d_in·Δ_p`` of the map on the encoded box. The
    schema and the map travel as JSON.

    :param input_domain: a :func:`spark_table_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map on the schema's encoded columns
    :param n_jobs: threads inside each partition task
    :return: a Transformation
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"cut": ["Fair", "Ideal"]})
    >>> t = make_spark_table_sum_and_count(spark_table_domain(schema), dp.symmetric_distance(),
    ...                                    dps.Histogram(bounds=schema.bounds, bins=2))
    >>> t.map(2)
    2
    """
    desc = check_source_arguments(
        input_domain, input_metric, feature_map, n_jobs, SparkTableDomain, "spark_table_domain(schema)"
    )
    spec, schema_spec, m = _portable(feature_map), json.dumps(desc.schema.to_dict()), feature_map.num_features
    names = list(desc.schema.data_columns)
    # read off a job gather_spark_table ran for the input, if any
    pair = pair_or_pass(
        feature_map, desc.schema, lambda x: _table_sum_and_count(x, names, spec, schema_spec, m, n_jobs)
    )
    return pair_transformation(input_domain, input_metric, feature_map, pair)


def _polars_dtype(data_type: Any) -> Any:
    """The Polars dtype a Spark column type reads as (for :meth:`Schema.check_dtypes`)."""
    import polars as pl

    name = type(data_type).__name__
    return {
        "ByteType": pl.Int8,
        "ShortType": pl.Int16,
        "IntegerType": pl.Int32,
        "LongType": pl.Int64,
        "FloatType": pl.Float32,
        "DoubleType": pl.Float64,
        "DecimalType": pl.Float64,
        "BooleanType": pl.Boolean,
        "StringType": pl.String,
        "VarcharType": pl.String,
        "CharType": pl.String,
        "NullType": pl.Null,
        "DateType": pl.Date,
        "TimestampType": pl.Datetime,
        "TimestampNTZType": pl.Datetime,
        "BinaryType": pl.Binary,
    }.get(name, pl.Object)


def check_spark_table_types(data: Any, schema: Schema) -> None:
    """The curator's structural checks of a Spark DataFrame under a schema, from its schema
    alone (no job): a DataFrame, the schema's columns present once, types that fit their kinds.

    :raises ValueError: naming columns and types, never a data value
    """
    if not _is_spark_frame(data):
        raise ValueError(f"data must be a pyspark.sql.DataFrame, got {type(data).__name__}")
    check_local_workers(data)
    columns = [str(c) for c in data.columns]
    repeated = sorted({c for c in schema.data_columns if columns.count(c) > 1})
    if repeated:
        raise ValueError(f"columns {repeated} occur more than once in the data: rename them")
    schema.check_dtypes({c: _polars_dtype(t) for c, t in _column_types(data).items()})


def check_spark_table(data: Any, schema: Schema) -> int:
    """The curator's checks of a Spark DataFrame under a schema, before anything is released:
    the columns and their types from the DataFrame's schema (no job), then one job counting, per
    column, nulls, ±inf and unknown labels (:meth:`Schema.problems` on every partition), refused
    as :meth:`Schema.check` refuses them. Returns the row count (never released).

    :raises ValueError: naming columns, types and the fix, never a data value
    """
    check_spark_table_types(data, schema)
    task = functools.partial(_partition_problems, schema_spec=json.dumps(schema.to_dict()))
    results = data.select(*_table_columns(schema.data_columns)).mapInArrow(task, _PROBLEMS_SCHEMA).collect()
    found = sum_problems(json.loads(r["problems"]) for r in results)
    rows = sum(int(r["rows"]) for r in results)
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found)
    return rows


# -- one pass for a release with a choice to make (a private tree of pairs) -------------------


def gather_spark_table(
    data: Any, schema: Schema, feature_map: FeatureMap, n_jobs: int = 1
) -> tuple[Any, int]:
    """The curator's checks of a Spark DataFrame under a schema (:func:`check_spark_table`) and,
    in the **same** job, the exact cell counts of every block of ``feature_map`` (a
    :class:`MarginalTables`: every block a release with a choice to make could measure, e.g. the
    kept blocks and the candidate pairs of a private tree). Returns what the release's measurement
    reads — the same rows as a DataFrame of its own (``data.select("*")``), whose Spark pairs
    (:func:`make_spark_table_sum_and_count`) of any map made of those blocks, weighted or not,
    are read off this pass instead of running a job — and the row count (never released).

    The pairs are the same function of the rows either way: every cell count is exact, and a
    map's block sums are its cells' counts times the integer each cell adds per row. So the
    candidates' counts, the noisy-max choices and the chosen map's sums of one release all read
    one pass over one set of rows.

    :raises ValueError: as :func:`check_spark_table` (types, problems, an empty table), naming
        columns and never a data value, or for a map that is not a :class:`MarginalTables`
    """
    return gather_table(
        data,
        schema,
        feature_map,
        check_spark_table_types,
        lambda d, blocks, found: table_sum_and_count_spark(
            d, spark_table_domain(schema), blocks, n_jobs, found
        ),
        lambda d: d.select("*"),  # the same rows (and cached data), an object of this release's own
    )


def _box_domain(bounds: Any, names: Sequence[str], num_columns: int, nan: bool) -> dp.Domain:
    return spark_box_domain(bounds, column_names=names, nan=nan, inf=False)


def _check_table(data: Any, schema: Schema) -> tuple[Any, int]:
    return data, check_spark_table(data, schema)


#: Spark DataFrames: one job computes the pair and the checks
SPARK = Backend(
    "spark",
    make_spark_sum_and_count,
    frozenset({"impute", "n_jobs"}),
    feature_sum=make_spark_feature_sum,
    accepts=_is_spark_frame,
    table_domain=spark_table_domain,
    check_table=_check_table,
    gather_table=gather_spark_table,
    check_types=check_spark_table_types,
    compute_table=table_sum_and_count_spark,
    box_names=check_spark_frame,
    box_domain=_box_domain,
    compute_box=sum_and_count_spark,
)
register_backend(SparkBoxDomain, SPARK)
register_backend(
    SparkTableDomain,
    dataclasses.replace(
        SPARK, sum_and_count=make_spark_table_sum_and_count, options=frozenset({"n_jobs"}), feature_sum=None
    ),
)
