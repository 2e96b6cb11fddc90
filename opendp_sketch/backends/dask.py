"""Dask adapter: the same sketch release on a Dask array or DataFrame.

What runs where:

* **workers**, one task per partition: impute NaN (if asked), clip into the public box, and the
  exact integer feature sum ``Σ q(x)`` (:meth:`~opendp_sketch.FeatureMap.fixed_sum`) plus the row
  count — plain Python ints, no noise, no data leaves the worker except these totals;
* **client**: add the per-partition totals exactly (Python ints), saturate to int64 as the
  single-process path does, then draw the noise **once** with OpenDP's own mechanisms.

Every row lives in exactly one partition and integer addition is exact and order-free, so the
combined sum is identical to ``feature_map.fixed_sum`` of the clipped rows in one process,
whatever the partitioning; the stability (``d_in · Δ_p``) is the one of
:func:`~opendp_sketch.make_feature_sum`.

A schema release with a private choice (MST's tree of pairs) is one pass too
(:func:`gather_dask_table`): the checking pass counts every block the choice could take, and the
candidates' counts and the chosen map's sums are read off its exact integers
(:mod:`opendp_sketch.backends.gathered`).

Dask is an optional dependency (``pip install opendp-sketch[dask]``): it is imported only when a
function here needs it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from .._fixed import Accumulator
from .._validate import check_bounds
from ..features.base import FeatureMap, feature_map_from_dict
from ..schema import Schema, sum_problems
from .domains import DaskBoxDomain, DaskTableDomain, table_descriptor
from .gathered import gather_table, pair_or_pass
from .memory import I64_MAX, check_source_arguments, pair_parts, pair_transformation
from .protocol import Backend, register_backend

__all__ = [
    "dask_box_domain",
    "DaskBoxDomain",
    "make_dask_sum_and_count",
    "make_dask_feature_sum",
    "then_dask_feature_sum",
    "sum_and_count_dask",
    "check_dask_collection",
    "dask_table_domain",
    "make_dask_table_sum_and_count",
    "check_dask_table",
    "check_dask_table_types",
    "table_sum_and_count_dask",
    "gather_dask_table",
]


def _numeric(dtype: Any) -> bool:
    return getattr(dtype, "kind", "O") in "biuf"


def _is_dask_array(x: Any) -> bool:
    da = sys.modules.get("dask.array")  # a Dask array exists only once dask.array is imported
    return da is not None and isinstance(x, da.Array)


def _is_dask_frame(x: Any) -> bool:
    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(x, dd.DataFrame)


def dask_box_domain(
    bounds: Any,
    num_columns: int | None = None,
    column_names: Sequence[str] | None = None,
    nan: bool = False,
    inf: bool = True,
) -> dp.Domain:
    """Domain of Dask collections of ``d`` numeric columns, with a public clipping box.

    Members are a ``dask.array.Array`` with ``ndim == 2`` and ``d`` columns of a numeric dtype, or
    a ``dask.dataframe.DataFrame`` holding the numeric columns ``column_names``. Values may lie
    outside ``bounds``: the transformations clip them into the box, row by row. Membership is
    checked on the collection's structure only (values stay on the cluster). ``nan`` and
    ``inf`` state which values the curator's data may hold: :func:`release_dask_sketch` finds
    NaN (without ``impute``) and ``±inf`` in its single pass and refuses them on the client
    before the noise is drawn. The transformations never raise on values: a NaN without
    ``impute`` reads as the lower bound and ``±inf`` are clipped, within the stated sensitivity.

    :param bounds: public ``(lower, upper)``, scalars or one value per column
    :param num_columns: ``d`` (needed only when both bounds are scalars and no names are given)
    :param column_names: columns to read from a DataFrame (required for DataFrames); names recorded
        in the sketch
    :param nan: whether members may contain NaN (requires ``impute`` in the transformations)
    :param inf: whether members may contain ``±inf`` (clipped to the bounds)
    :return: an OpenDP domain whose ``descriptor`` is :class:`DaskBoxDomain`
    :raises ValueError: on malformed bounds or names
    :example:

    >>> import numpy as np, opendp.prelude as dp, dask.array as da
    >>> from opendp_sketch.backends.dask import dask_box_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dom = dask_box_domain((0.0, [1.0, 5.0]))
    >>> dom.descriptor.num_columns, dom.descriptor.upper
    (2, (1.0, 5.0))
    >>> dom.member(da.zeros((10, 2), chunks=5)), dom.member(da.zeros((10, 3), chunks=5))
    (True, False)
    """
    if not isinstance(nan, bool) or not isinstance(inf, bool):
        raise ValueError(f"nan ({nan!r}) and inf ({inf!r}) must be True or False")
    if num_columns is None and column_names is not None:
        num_columns = len(column_names)
    lo, hi = check_bounds(bounds, num_columns)
    names = None
    if column_names is not None:
        names = tuple(str(c) for c in column_names)
        if len(names) != lo.size or len(set(names)) != len(names):
            raise ValueError(f"column_names ({list(names)}) must be {lo.size} distinct names")
    desc = DaskBoxDomain(
        lower=tuple(lo.tolist()),
        upper=tuple(hi.tolist()),
        num_columns=lo.size,
        column_names=names,
        nan=nan,
        inf=inf,
    )

    def _member(x: Any) -> bool:
        if _is_dask_array(x):
            return x.ndim == 2 and x.shape[1] == lo.size and _numeric(x.dtype)
        if _is_dask_frame(x) and names is not None:
            return all(c in x.columns and _numeric(x.dtypes[c]) for c in names)
        return False

    ident = (
        f"DaskBoxDomain(num_columns={lo.size}, lower={list(desc.lower)}, upper={list(desc.upper)}, "
        f"column_names={None if names is None else list(names)}, nan={nan}, inf={inf})"
    )
    return dp.user_domain(ident, _member, desc)


def _dask_descriptor(domain: dp.Domain) -> DaskBoxDomain:
    desc = getattr(domain, "descriptor", None)
    if not isinstance(desc, DaskBoxDomain):
        raise ValueError(
            f"input_domain ({domain}) must be a dask_box_domain (see opendp_sketch.backends.dask)"
        )
    return desc


# -- per-partition work (runs on the workers) -------------------------------------------------


def _partition_stats(block: Any, config: tuple) -> tuple[list[int], int, bool, bool]:
    """``(Σ q(x) as Python ints, rows, has NaN, has ±inf)`` of one partition.

    Imputes, then clips into the box inside ``fixed_sum`` (``fmin(fmax(x, lo), hi)``, the rule of
    :func:`~opendp_sketch.make_box_clip`: a NaN left without imputation goes to the lower bound).
    The flags are for the client's refusal in :func:`release_dask_sketch`; they never stop the sum.
    """
    feature_map, lo, hi, fill, n_jobs = config
    if not isinstance(block, np.ndarray):  # a pandas partition of a Dask DataFrame
        block = block.to_numpy(dtype=np.float64, na_value=np.nan)
    x = np.asarray(block, dtype=np.float64)
    isnan = np.isnan(x)
    has_nan = bool(isnan.any())
    if has_nan and fill is not None:
        x = np.where(isnan, fill, x)
    has_inf = bool(np.isinf(x).any())
    return feature_map.fixed_sum(x, clip=(lo, hi), n_jobs=n_jobs), x.shape[0], has_nan, has_inf


def _partitions(data: Any, desc: DaskBoxDomain) -> list[Any]:
    """One delayed 2-D block per row partition, all ``d`` columns in each."""
    if _is_dask_array(data):
        if data.numblocks[1] != 1:
            data = data.rechunk({1: -1})  # a task needs whole rows
        return list(data.to_delayed().ravel())
    return list(data[list(desc.column_names or ())].to_delayed())


def _sum_and_count(
    data: Any,
    desc: DaskBoxDomain,
    feature_map: FeatureMap,
    fill: np.ndarray | None,
    n_jobs: int | None,
    found: dict[str, bool] | None = None,
) -> tuple[np.ndarray, int]:
    """Run the partition tasks on the current Dask scheduler and combine exactly on the client.

    Never raises on values. ``found``, when given, receives whether NaN and ±inf occurred (for
    the curator's refusal in :func:`release_dask_sketch`; never part of a release).
    """
    import dask

    lo, hi = desc.bounds
    # one graph node for the public configuration, shared by every partition task
    config = dask.delayed((feature_map, lo, hi, fill, n_jobs), traverse=False)
    task = dask.delayed(_partition_stats, pure=True)
    results = dask.compute(*[task(block, config) for block in _partitions(data, desc)])
    if found is not None:
        found["nan"] = any(r[2] for r in results)
        found["inf"] = any(r[3] for r in results)
    acc = Accumulator(feature_map.num_features)
    for part, _, _, _ in results:
        acc.add_exact(part)
    # same saturation as make_feature_sum(fixed_point=True) and make_row_count
    return acc.clipped(I64_MAX), min(sum(r[1] for r in results), I64_MAX)


# -- transformations --------------------------------------------------------------------------


def sum_and_count_dask(
    data: Any,
    input_domain: dp.Domain,
    feature_map: FeatureMap,
    impute: Any = None,
    n_jobs: int | None = 1,
    found: dict[str, bool] | None = None,
) -> tuple[np.ndarray, int]:
    """The exact ``(Σ q(x_i), n)`` of a Dask collection (what :func:`make_dask_sum_and_count`
    computes), optionally reporting in ``found`` whether NaN and ±inf occurred — for the
    curator's refusal before noising, never part of a release. Never raises on values."""
    desc = _dask_descriptor(input_domain)
    fill = desc.fill(impute, input_domain)
    # workers get a fresh copy: the caller's map may cache OpenDP objects, which cannot be pickled
    portable = feature_map_from_dict(feature_map.to_dict())
    return _sum_and_count(data, desc, portable, fill, n_jobs, found)


def make_dask_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """The pair ``(Σ q(x_i), n)`` of a Dask collection, computed in **one** pass over the cluster.

    The output is an ``(int64 vector, int)`` pair under the metric ``SymmetricDistanceOfSource()``:
    the distance of two pairs is the symmetric distance of the datasets they were computed from,
    so this transformation is 1-stable by definition, and each half is read off by a
    transformation with the stability of its single-process counterpart
    (:func:`~opendp_sketch.make_feature_sum`: ``d_in·Δ_p``; the row count: ``d_in``).
    :func:`make_private_dask_sketch` composes the two noisy halves *after* this transformation,
    so OpenDP's composition, which hands the input to each branch, does not trigger two passes.

    :param input_domain: a :func:`dask_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map (``input_dim`` columns)
    :param impute: public value(s) replacing NaN; without it NaN is refused (nothing released)
    :param n_jobs: threads inside each partition task (Dask already runs partitions in parallel)
    :return: a Transformation
    :example:

    >>> import numpy as np, dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.dask import dask_box_domain, make_dask_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = make_dask_sum_and_count(dask_box_domain((0.0, 1.0), num_columns=1),
    ...                             dp.symmetric_distance(), fm)
    >>> X = da.from_array(np.array([[0.1], [0.2], [0.9], [7.0]]), chunks=(3, 1))
    >>> with dask.config.set(scheduler="synchronous"):
    ...     s, n = t(X)
    >>> s.tolist(), n
    ([2, 2], 4)
    """
    desc = check_source_arguments(
        input_domain,
        input_metric,
        feature_map,
        n_jobs,
        DaskBoxDomain,
        "dask_box_domain (see opendp_sketch.backends.dask)",
    )
    fill = desc.fill(impute, input_domain)
    # workers get a fresh copy: the caller's map may cache OpenDP objects, which cannot be pickled
    portable = feature_map_from_dict(feature_map.to_dict())
    return pair_transformation(
        input_domain, input_metric, feature_map, lambda x: _sum_and_count(x, desc, portable, fill, n_jobs)
    )


def make_dask_feature_sum(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: Literal[1, 2] = 1,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """``Σ_i q(x_i)`` of a Dask collection: the output of ``make_feature_sum(fixed_point=True)``.

    An ``int64`` vector (units of ``2^-k``) under ``l1_distance(T=i64)`` (``p=1``) or
    ``l2_distance(T=f64)`` (``p=2``) with stability ``d_in·Δ_p`` in integer units, identical to
    the single-process sum of the clipped rows for any partitioning.

    :param input_domain: a :func:`dask_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map
    :param p: 1 or 2, the norm of the output metric
    :param impute: public value(s) replacing NaN; without it NaN is refused
    :param n_jobs: threads inside each partition task
    :return: a Transformation
    :example:

    >>> import numpy as np, dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.dask import dask_box_domain, make_dask_feature_sum
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> t = make_dask_feature_sum(dask_box_domain((0.0, 1.0), num_columns=1),
    ...                           dp.symmetric_distance(), fm)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     print(t(da.from_array(np.array([[0.1], [0.2], [0.9]]), chunks=(2, 1))))
    [2, 0, 0, 1]
    >>> t.map(1), t.output_metric
    (1, L1Distance(i64))
    """
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    pair = make_dask_sum_and_count(input_domain, input_metric, feature_map, impute=impute, n_jobs=n_jobs)
    return pair >> pair_parts(pair, feature_map, p)[0]


then_dask_feature_sum = to_then(make_dask_feature_sum)


# -- curator-side checks of a one-call release ----------------------------------------------


def check_dask_collection(data: Any, d: int, column_names: Sequence[str] | None) -> list[str] | None:
    """Structural checks of a Dask collection (no data is computed); returns the column names.

    Errors name columns and shapes, never data values.
    """
    if _is_dask_frame(data):
        cols = [str(c) for c in data.columns] if column_names is None else [str(c) for c in column_names]
        missing = [c for c in cols if c not in data.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in the data (columns: {list(data.columns)})")
        bad = [c for c in cols if not _numeric(data.dtypes[c])]
        if bad:
            raise ValueError(f"columns {bad} must be numeric")
        if len(cols) != d:
            raise ValueError(f"data has {len(cols)} columns but the feature map expects {d}")
        return cols
    if not _is_dask_array(data):
        raise ValueError(
            f"data must be a dask.array.Array or dask.dataframe.DataFrame, got {type(data).__name__}"
        )
    if not _numeric(data.dtype):
        raise ValueError(f"data dtype ({data.dtype}) must be numeric (bool, int or float)")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-dimensional (rows × columns), got {data.ndim} dimension(s)")
    if data.shape[1] != d:
        raise ValueError(f"data has {data.shape[1]} columns but the feature map expects {d}")
    if data.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")
    return None if column_names is None else [str(c) for c in column_names]


# -- tables under a public schema (mixed types: labels, integers, booleans, nulls) ----------


def dask_table_domain(schema: Schema) -> dp.Domain:
    """Domain of Dask DataFrames holding the columns of a public :class:`~opendp_sketch.Schema`.

    Every value is admitted: each worker encodes its partition with the schema
    (:meth:`~opendp_sketch.Schema.encode`: nulls, NaN, ±inf, out-of-range values and unknown
    labels go to public values), so nothing raises inside a measurement on this domain.
    Membership reads the column names only; types and values are the curator's
    :func:`check_dask_table`. The box is the schema's encoded box.

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dask_table_domain(dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]})).descriptor.column_names
    ('age', 'cut')
    """
    desc = table_descriptor(schema, DaskTableDomain)
    names = desc.column_names

    def _member(x: Any) -> bool:
        return _is_dask_frame(x) and all(c in x.columns for c in names)

    return dp.user_domain(f"DaskTableDomain(schema={schema.to_dict()})", _member, desc)


def _encoded(block: Any, schema: Schema) -> Any:
    """A pandas partition as the Polars frame the schema reads (text columns value by value)."""
    from .tables import as_frame

    return as_frame(block[list(schema.data_columns)]).collect()


def _partition_table_stats(block: Any, config: tuple) -> tuple[list[int], int, dict[str, dict[str, int]]]:
    """``(Σ q(encode(x)) as Python ints, rows, problem counts)`` of one pandas partition:
    encoded by the schema (never raises on values), then summed exactly in the encoded box; the
    problem counts (:meth:`Schema.problems`, when the config asks for them) are for the
    curator's refusal on the client, never part of a release."""
    feature_map, schema_spec, n_jobs, problems = config
    schema = Schema.from_dict(schema_spec)
    frame = _encoded(block, schema)
    X = schema.encode(frame)
    found = schema.problems(frame) if problems else {}
    return feature_map.fixed_sum(X, clip=schema.bounds, n_jobs=n_jobs), X.shape[0], found


def _partition_problems(block: Any, schema_spec: dict[str, Any]) -> tuple[dict[str, dict[str, int]], int]:
    """Problem counts (:meth:`Schema.problems`) and rows of one partition: for the curator's
    refusal on the client, never part of a release."""
    schema = Schema.from_dict(schema_spec)
    frame = _encoded(block, schema)
    return schema.problems(frame), frame.height


def _table_sum_and_count(
    data: Any,
    feature_map: FeatureMap,
    schema: Schema,
    n_jobs: int | None,
    found: dict[str, Any] | None = None,
) -> tuple[np.ndarray, int]:
    """One pass over the partitions; the totals combined exactly on the client. Never raises on
    values. ``found``, when given, receives the problem counts of the same pass
    (``found["problems"]``) for the curator's refusal before noising."""
    import dask

    config = dask.delayed((feature_map, schema.to_dict(), n_jobs, found is not None), traverse=False)
    task = dask.delayed(_partition_table_stats, pure=True)
    results = dask.compute(*[task(block, config) for block in data[list(schema.data_columns)].to_delayed()])
    acc = Accumulator(feature_map.num_features)
    for part, _, _ in results:
        acc.add_exact(part)
    if found is not None:
        found["problems"] = sum_problems(r[2] for r in results)
    return acc.clipped(I64_MAX), min(sum(r[1] for r in results), I64_MAX)


def table_sum_and_count_dask(
    data: Any,
    input_domain: dp.Domain,
    feature_map: FeatureMap,
    n_jobs: int | None = 1,
    found: dict[str, Any] | None = None,
) -> tuple[np.ndarray, int]:
    """The exact ``(Σ q(encode(x_i)), n)`` of a Dask DataFrame under a schema (what
    :func:`make_dask_table_sum_and_count` computes), in one pass that can also report in
    ``found`` the per-column problem counts the schema's rules must handle — for the curator's
    refusal before noising (:func:`~opendp_sketch.release_sketch`), never part of a
    release. Never raises on values."""
    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, DaskTableDomain):
        raise ValueError(f"input_domain ({input_domain}) must be a dask_table_domain(schema)")
    portable = feature_map_from_dict(feature_map.to_dict())
    return _table_sum_and_count(data, portable, desc.schema, n_jobs, found)


def make_dask_table_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    n_jobs: int | None = 1,
) -> dp.Transformation:
    """The pair ``(Σ q(encode(x_i)), n)`` of a Dask DataFrame under a public schema, in one pass:
    each worker encodes its partition with the schema (row by row, never raising on values) and
    sums it exactly, as :func:`~opendp_sketch.backends.tables.make_table_sum_and_count` does in one
    process; so the stability is ``d_in·Δ_p`` of the map on the encoded box.

    :param input_domain: a :func:`dask_table_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map on the schema's encoded columns
    :param n_jobs: threads inside each partition task
    :return: a Transformation
    :example:

    >>> import pandas as pd, dask, dask.dataframe as dd, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"cut": ["Fair", "Ideal"]})
    >>> t = make_dask_table_sum_and_count(dask_table_domain(schema), dp.symmetric_distance(),
    ...                                   dps.Histogram(bounds=schema.bounds, bins=2))
    >>> frame = dd.from_pandas(pd.DataFrame({"cut": ["Ideal", "Ideal", "Fair", None]}), npartitions=2)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     s, n = t(frame)
    >>> s.tolist(), n
    ([2, 2], 4)
    """
    desc = check_source_arguments(
        input_domain, input_metric, feature_map, n_jobs, DaskTableDomain, "dask_table_domain(schema)"
    )
    # workers get a fresh copy: the caller's map may cache OpenDP objects, which cannot be pickled
    portable = feature_map_from_dict(feature_map.to_dict())
    schema = desc.schema
    # read off a pass gather_dask_table ran for the input, if any
    pair = pair_or_pass(feature_map, schema, lambda x: _table_sum_and_count(x, portable, schema, n_jobs))
    return pair_transformation(input_domain, input_metric, feature_map, pair)


def check_dask_table_types(data: Any, schema: Schema) -> None:
    """The curator's structural checks of a Dask DataFrame under a schema, from its metadata
    alone (nothing computed): a DataFrame, the schema's columns present once, types that fit.

    :raises ValueError: naming columns and types, never a data value
    """
    from .tables import as_frame

    if not _is_dask_frame(data):
        raise ValueError(f"data must be a dask.dataframe.DataFrame, got {type(data).__name__}")
    columns = [str(c) for c in data.columns]
    repeated = sorted({c for c in schema.data_columns if columns.count(c) > 1})
    if repeated:
        raise ValueError(f"columns {repeated} occur more than once in the data: rename them")
    meta = data._meta  # the empty pandas frame of the collection's types
    schema.check_dtypes(dict(as_frame(meta).collect_schema()))


def check_dask_table(data: Any, schema: Schema) -> int:
    """The curator's checks of a Dask DataFrame under a schema, before anything is released: the
    columns and their types from the collection's metadata (nothing computed), then one pass
    counting, per column, nulls, ±inf and unknown labels (:meth:`Schema.problems` on every
    partition), refused as :meth:`Schema.check` refuses them. Returns the row count (never
    released).

    :raises ValueError: naming columns, types and the fix, never a data value
    """
    import dask

    check_dask_table_types(data, schema)
    task = dask.delayed(_partition_problems, pure=True)
    spec = schema.to_dict()
    results = dask.compute(*[task(block, spec) for block in data[list(schema.data_columns)].to_delayed()])
    found = sum_problems(r[0] for r in results)
    rows = sum(r[1] for r in results)
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found)
    return rows


def gather_dask_table(
    data: Any, schema: Schema, feature_map: FeatureMap, n_jobs: int | None = 1
) -> tuple[Any, int]:
    """The curator's checks of a Dask DataFrame under a schema (:func:`check_dask_table`) and,
    in the **same** pass over the partitions, the exact cell counts of every block of
    ``feature_map`` (a :class:`~opendp_sketch.MarginalTables`: every block a release with a choice
    to make could measure, e.g. the kept blocks and the candidate pairs of a private tree). Returns
    what the release's measurement reads — the same collection as an object of its own
    (``data.copy()``: the same graph, no data copied), whose Dask pairs
    (:func:`make_dask_table_sum_and_count`) of any map made of those blocks, weighted or not, are
    read off this pass instead of computing the partitions again — and the row count (never
    released).

    The pairs are the same function of the rows either way: every cell count is exact, and a
    map's block sums are its cells' counts times the integer each cell adds per row
    (:mod:`opendp_sketch.backends.gathered`). So the candidates' counts, the noisy-max choices and
    the chosen map's sums of one release all read one pass over one set of rows.

    :raises ValueError: as :func:`check_dask_table` (types, problems, an empty table), naming
        columns and never a data value, or for a map that is not a ``MarginalTables``
    """
    return gather_table(
        data,
        schema,
        feature_map,
        check_dask_table_types,
        lambda d, blocks, found: _table_sum_and_count(
            d, feature_map_from_dict(blocks.to_dict()), schema, n_jobs, found
        ),
        lambda d: d.copy(),  # the same rows (the same graph), an object of this release's own
    )


def _box_domain(bounds: Any, names: Sequence[str] | None, num_columns: int, nan: bool) -> dp.Domain:
    return dask_box_domain(bounds, num_columns=num_columns, column_names=names, nan=nan, inf=False)


def _check_table(data: Any, schema: Schema) -> tuple[Any, int]:
    return data, check_dask_table(data, schema)


#: Dask collections: one pass over the cluster computes the pair and the checks
DASK = Backend(
    "dask",
    make_dask_sum_and_count,
    frozenset({"impute", "n_jobs"}),
    feature_sum=make_dask_feature_sum,
    accepts=lambda data: _is_dask_array(data) or _is_dask_frame(data),
    table_domain=dask_table_domain,
    check_table=_check_table,
    gather_table=gather_dask_table,
    check_types=check_dask_table_types,
    compute_table=table_sum_and_count_dask,
    box_names=check_dask_collection,
    box_domain=_box_domain,
    compute_box=sum_and_count_dask,
)
register_backend(DaskBoxDomain, DASK)
register_backend(
    DaskTableDomain,
    dataclasses.replace(
        DASK, sum_and_count=make_dask_table_sum_and_count, options=frozenset({"n_jobs"}), feature_sum=None
    ),
)
