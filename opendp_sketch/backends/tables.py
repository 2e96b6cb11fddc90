"""Tables as users have them → the schema's unit-free coordinates, a batch at a time.

:func:`as_frame` turns numpy arrays, Polars frames, pandas DataFrames, PyArrow tables and
datasets, and Parquet/CSV/IPC paths into a Polars ``LazyFrame`` without reading it (files and
Arrow datasets are scanned lazily). :func:`table_domain` is the OpenDP domain of such inputs
under a public :class:`~opendp_sketch.Schema`, and :func:`make_table_sum_and_count` is the
table backend of the release layer: it streams the input in batches, encodes each batch with the
schema (which never raises on values) and adds the batch's exact integer feature sums.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import opendp.prelude as dp
import polars as pl

from .._fixed import Accumulator
from .._validate import check_chunking, require_symmetric
from ..features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from ..schema import Schema
from .domains import DaskTableDomain, SparkTableDomain, TableDomain, table_descriptor
from .memory import I64_MAX, check_source_arguments, pair_transformation
from .protocol import Backend, register_backend
from .streaming import (
    DEFAULT_BATCH_ROWS,
    check_lazyframe_source,
    csv_quoted_lines,
    is_total_read,
    report_batch,
    scan,
    scan_csv_text,
    stream_frames,
    total_read,
)

__all__ = [
    "as_frame",
    "encode_rows",
    "table_domain",
    "make_table_sum_and_count",
    "make_table_row_count",
    "check_table",
]


def as_frame(data: Any, columns: list[str] | None = None, text_csv: bool = False) -> pl.LazyFrame:
    """A lazy Polars view of ``data`` (nothing is read yet for files and Arrow datasets).

    numpy arrays need ``columns`` (their names, in order). Every conversion is **total and row
    by row**: no value can make it fail, and each row's converted value depends on that row
    alone, whatever type the container gave its column (``schema._readers``). pandas
    columns of Python objects, categories or other extension types, and Arrow columns Polars
    cannot take, are read as text value by value (:func:`_object_text`), and the schema parses
    each value for its column. With ``text_csv`` a CSV file is read one row per line, as text
    (:func:`~opendp_sketch.backends.streaming.scan_csv_text`), so no byte can stop the read; the
    curator's checks read it the same way.

    :raises ValueError: for an input of another kind (naming the kinds accepted), and, with
        ``text_csv``, for a ``LazyFrame`` whose plan scans a CSV or NDJSON file with inferred
        types (its read can fail on one value: pass the path instead). Both are properties of
        the input's kind and plan, never of its values.
    :example:

    >>> import numpy as np
    >>> as_frame(np.zeros((2, 2)), ["a", "b"]).collect().shape
    (2, 2)
    """
    if isinstance(data, pl.LazyFrame):
        if text_csv and not is_total_read(data) and _scans_text_files(data):
            raise ValueError(
                "this LazyFrame scans a CSV or NDJSON file with types inferred by Polars, and such a read "
                "can fail on one value; pass the file's path instead (read line by line, every value "
                "parsed by the schema)"
            )
        return data
    if isinstance(data, pl.DataFrame):
        return data.lazy()
    if isinstance(data, (str, os.PathLike)):
        if str(data).lower().endswith(".csv") and os.path.exists(data):
            if text_csv:  # inside a measurement: one row per line, then the schema parses each value
                return scan_csv_text(data)
            return pl.scan_csv(os.fspath(data))  # the box path's checks: Polars' own types
        return scan(data)
    if isinstance(data, np.ndarray):
        if data.ndim != 2 or columns is None or data.shape[1] != len(columns):
            raise ValueError(
                f"a numpy array must be 2-D with one column per schema column ({columns}), got shape {data.shape}"
            )
        if data.dtype == object:
            return pl.DataFrame({c: _object_text(data[:, j]) for j, c in enumerate(columns)}).lazy()
        return pl.DataFrame({c: data[:, j] for j, c in enumerate(columns)}).lazy()
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        return _pandas_frame(data)
    if module == "pyarrow":
        import pyarrow.dataset as pads

        if isinstance(data, pads.Dataset):
            return _dataset_frame(data) if text_csv else pl.scan_pyarrow_dataset(data)
        if hasattr(data, "read_all"):  # a RecordBatchReader
            data = data.read_all()
        if hasattr(data, "column_names"):  # a Table or a RecordBatch: column by column
            return pl.DataFrame(
                [_arrow_column(str(n), data.column(i)) for i, n in enumerate(data.column_names)]
            ).lazy()
        return _arrow_column("", data).to_frame().lazy()
    raise ValueError(
        "data must be a numpy array, a Polars DataFrame/LazyFrame, a pandas DataFrame, a PyArrow "
        f"Table/Dataset/RecordBatchReader or a Parquet/CSV/IPC path, got {type(data).__name__}"
    )


def _dataset_frame(dataset: Any) -> pl.LazyFrame:
    """A PyArrow dataset read file by file, each with its own types, every column as text
    (:func:`_arrow_column`, then Polars' text of the value: the shortest text that reads back to
    the same number). Files whose types differ (one written with a text column where the others
    have numbers) then read each value as a typed file would; a dataset whose unified schema does
    not fit one file would otherwise fail the whole read."""
    from polars.io.plugins import register_io_source

    names = [str(n) for n in dataset.schema.names]
    schema = {n: pl.String for n in names}

    def batches(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        wanted = with_columns or names
        left = n_rows
        for fragment in dataset.get_fragments():
            physical = fragment.physical_schema
            present = [n for n in wanted if n in physical.names]
            for batch in fragment.to_batches(schema=physical, columns=present, batch_size=DEFAULT_BATCH_ROWS):
                cols = {n: _arrow_column(n, batch.column(batch.schema.get_field_index(n))) for n in present}
                frame = pl.DataFrame(
                    [
                        _text_series(cols[n])
                        if n in cols
                        else pl.Series(n, [None] * batch.num_rows, pl.String)
                        for n in wanted
                    ]
                )
                if predicate is not None:
                    frame = frame.filter(predicate)
                if left is not None:
                    frame = frame.head(left)
                    left -= frame.height
                yield frame
                if left is not None and left <= 0:
                    return

    return total_read(register_io_source(batches, schema=schema))


def _text_series(s: pl.Series) -> pl.Series:
    """A series as text, value by value (temporal, nested and object values read as null)."""
    if s.dtype == pl.String:
        return s
    if (
        s.dtype.is_numeric()
        or s.dtype == pl.Boolean
        or s.dtype in (pl.Categorical,)
        or isinstance(s.dtype, pl.Enum)
    ):
        return s.cast(pl.String, strict=False)
    if s.dtype == pl.Binary:
        return pl.Series(
            s.name,
            [None if b is None else bytes(b).decode("utf-8", "replace") for b in s.to_list()],
            pl.String,
        )
    return pl.Series(s.name, [None] * s.len(), dtype=pl.String)


def _scans_text_files(lf: pl.LazyFrame) -> bool:
    """Whether a LazyFrame's plan reads a CSV or NDJSON file (its types inferred from values)."""
    try:
        plan = lf.explain(optimized=False).lower()
    except Exception:  # noqa: BLE001 - a plan Polars cannot print: not a text scan we can see
        return False
    return "csv scan" in plan or "ndjson scan" in plan or "scan csv" in plan or "scan ndjson" in plan


def _pandas_frame(df: Any) -> pl.LazyFrame:
    """A pandas DataFrame as Polars, column by column, total and row by row.

    numpy numeric and boolean columns are taken as they are; pandas' nullable numbers and
    booleans as float64 with NaN for their missing values; categories through their labels
    (each label read as text once, then taken by code); everything else (Python objects,
    strings, dates, intervals, ...) value by value as text (:func:`_object_text`).
    """
    cols = []
    for name, s in df.items():
        cols.append(_pandas_column(str(name), s))
    return pl.DataFrame(cols).lazy() if cols else pl.LazyFrame()


def _pandas_column(name: str, s: Any) -> pl.Series:
    dtype = s.dtype
    kind = getattr(dtype, "kind", "O")
    if isinstance(dtype, np.dtype) and kind in "iufb":
        return pl.Series(name, s.to_numpy())
    if isinstance(dtype, np.dtype) and kind == "c":  # complex: the real part when it is all
        z = s.to_numpy()
        return pl.Series(name, np.where(z.imag == 0, z.real, np.nan))
    if str(dtype) == "category":
        labels = _object_text(np.asarray(s.cat.categories, dtype=object))
        codes = s.cat.codes.to_numpy().astype(np.int64)
        missing = pl.Series([None] * len(codes), dtype=pl.String)
        if not labels.len():
            return missing.alias(name)
        text = labels.gather(np.where(codes < 0, 0, codes))
        return text.zip_with(pl.Series(codes >= 0), missing).alias(name)
    if not (isinstance(dtype, np.dtype) and kind == "O"):
        # a typed extension column (nullable numbers and booleans, strings, dates): Polars reads
        # it by its type; what it cannot read is read value by value below
        try:
            read = pl.from_pandas(s)
            if isinstance(read, pl.Series):
                return read.alias(name)
        except Exception:  # noqa: BLE001 - value by value, as an object column
            pass
    return _object_text(s.to_numpy(dtype=object)).alias(name)


def _arrow_column(name: str, col: Any) -> pl.Series:
    """An Arrow column as a Polars series; a type Polars cannot take, or a conversion that fails,
    is read value by value as text (each value on its own: a failure is that value's null)."""
    try:
        out = pl.from_arrow(col)
        series = out if isinstance(out, pl.Series) else out.to_series()
        return series.alias(name)
    except Exception:  # noqa: BLE001 - value by value below
        pass
    values: list[Any] = []
    for i in range(len(col)):
        try:
            values.append(col[i].as_py())
        except Exception:  # noqa: BLE001 - a value Python cannot hold reads as null
            values.append(None)
    return _object_text(np.array(values + [None], dtype=object)[:-1]).alias(name)


def _object_text(values: np.ndarray) -> pl.Series:
    """Python objects as text, one value at a time: ``None`` and float NaN (and pandas' NA/NaT)
    are null, text stays, bytes are decoded as UTF-8 (invalid bytes replaced), booleans read
    ``true``/``false``, numbers their exact shortest text (``repr`` of the float64 for floats of
    any width, so ``"0.1"`` parses back to the same double a float column holds; a complex
    number its real part when it has no imaginary part, as pandas turns a whole column complex
    for one complex value, and null otherwise) and anything
    else its ``str``. The schema then parses each value for its column: a number from ``"41"``, a
    label from ``"South"``, and ``null`` from what does not parse. Dates and datetimes read as
    their ISO text (as typed Date and Datetime columns do); times of day and durations as null.

    >>> _object_text(np.array([1, "a", None, 2**70, b"\\xff", True, float("nan")], dtype=object)).to_list()[:4]
    ['1', 'a', None, '1180591620717411303424']
    >>> _object_text(np.array([np.float32(0.1), np.int8(-3), False], dtype=object)).to_list()
    ['0.10000000149011612', '-3', 'false']
    """
    out: list[str | None] = []
    for v in values.tolist():
        try:
            out.append(_value_text(v))
        except Exception:  # noqa: BLE001 - an object whose text fails reads as null
            out.append(None)
    return pl.Series(out, dtype=pl.String)


def iso_text(v: datetime.datetime) -> str:
    """A datetime as the text a typed Datetime column gives (:func:`~opendp_sketch.schema`'s
    readers): UTC when it has a time zone, ``YYYY-MM-DDTHH:MM:SS.ffffff``.

    >>> iso_text(datetime.datetime(2024, 1, 1, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=2))))
    '2024-01-01T04:00:00.000000'
    """
    if v.tzinfo is not None:
        v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}"


def _value_text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and v != v) or type(v).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(v, str):
        try:
            v.encode("utf-8")
            return v
        except UnicodeEncodeError:  # a lone surrogate: replaced, as invalid bytes are
            return v.encode("utf-8", "replace").decode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return None if f != f else repr(f)
    if isinstance(v, (complex, np.complexfloating)):  # pandas makes a whole column complex for one
        return repr(float(v.real)) if v.imag == 0 and v.real == v.real else None
    if isinstance(v, np.datetime64):
        v = v.astype("datetime64[us]").item()  # a datetime, or an int outside Python's range
        if not isinstance(v, datetime.datetime):
            return None
    if isinstance(v, datetime.datetime):
        return iso_text(v)
    if isinstance(v, datetime.date):
        return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
    if isinstance(v, (datetime.time, datetime.timedelta, np.timedelta64)):
        return None
    text = str(v)
    return text.encode("utf-8", "replace").decode("utf-8")


def encode_rows(schema: Schema, X: Any, columns: Sequence[str] | None = None) -> np.ndarray:
    """Rows in the table's own units and labels → the coordinates of ``columns`` (default
    every column), as a model fitted on a sketch of this schema reads them.

    This is the analyst's side (no privacy is involved: the rows are theirs), so rows the
    schema cannot read are refused rather than mapped: a missing column, a null in a column
    without a null rule, a label that is not public, or text where a number is expected.

    :param X: a Polars or pandas DataFrame (columns by name, others ignored), a PyArrow
        table, or a 2-D array whose columns are ``columns`` in order (or every schema column)
    :raises ValueError: naming the columns and the fix (never a value)
    :example:

    >>> import polars as pl, opendp_sketch as dps
    >>> s = dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"], "y": ["no", "yes"]})
    >>> encode_rows(s, pl.DataFrame({"age": [18, 54], "cut": ["Ideal", "Fair"]}), ["age", "cut"]).tolist()
    [[0.0, 1.0], [0.5, 0.0]]
    >>> encode_rows(s, [[90, "Fair"]], ["age", "cut"]).tolist()
    [[1.0, 0.0]]
    >>> encode_rows(s, pl.DataFrame({"age": [20]}), ["age", "cut"])
    Traceback (most recent call last):
    ...
    ValueError: the rows lack columns ['cut'] (the model reads ['age', 'cut'])
    """
    names = schema.columns if columns is None else [str(c) for c in columns]
    unknown = [c for c in names if c not in schema.columns]
    if unknown:
        raise ValueError(f"columns {unknown} are not in the schema ({schema.columns})")
    # the table columns the coordinates are read from (a null state is read from its column)
    need = list(dict.fromkeys(schema.source(c) for c in names))
    every = schema.data_columns
    if isinstance(X, (list, tuple)) or (isinstance(X, np.ndarray)):
        arr = np.asarray(X, dtype=object)
        if arr.ndim == 1 and len(need) == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[1] not in (len(need), len(every)):
            raise ValueError(
                f"an array of rows must have {len(need)} columns ({need}) or one per schema column "
                f"({len(every)}), got shape {arr.shape}; or pass a DataFrame with the columns by name"
            )
        order = need if arr.shape[1] == len(need) else every
        frame = as_frame(arr, order).collect()
    else:
        frame = as_frame(X).collect()
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise ValueError(f"the rows lack columns {missing} (the model reads {need})")
    rest = [pl.lit(None).alias(c) for c in every if c not in need]
    frame = frame.select([pl.col(c) for c in need] + rest).select(every)
    part = Schema({c: schema[c] for c in need})
    part.refuse(part.problems(frame.select(need)))
    index = [schema.columns.index(c) for c in names]
    return schema.encode(frame)[:, index]


def _is_table(x: Any) -> bool:
    module = type(x).__module__.split(".")[0]
    return isinstance(x, (pl.LazyFrame, pl.DataFrame, np.ndarray, str, os.PathLike)) or module in (
        "pandas",
        "pyarrow",
    )


def table_domain(schema: Schema) -> dp.Domain:
    """Domain of tables (any kind :func:`as_frame` reads) holding the schema's columns.

    Every value is admitted: the schema encodes nulls, NaN, ±inf, out-of-range values and
    unknown labels to public values, so nothing raises inside a measurement on this domain.
    Membership is checked on the input's kind only (columns are checked by the curator's
    :meth:`~opendp_sketch.Schema.check`; a missing column reads as nulls).
    """
    desc = table_descriptor(schema)
    ident = f"TableDomain(schema={schema.to_dict()})"
    return dp.user_domain(ident, _is_table, desc)


def make_lazyframe_to_table(
    input_domain: dp.Domain, input_metric: dp.Metric, schema: Schema
) -> dp.Transformation:
    """From OpenDP's own LazyFrame domain (a ``dp.Context`` opened on a mixed-type ``LazyFrame``)
    to :func:`table_domain` of a public schema: the identity on the frame, so 1-stable under the
    symmetric distance. The schema's columns and their types are checked against the domain
    (public: the domain describes the frame's schema, not its rows); the values are read, totally,
    by the release.

    :raises ValueError: for another domain, a missing column, or a type that does not fit
    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> lf = pl.LazyFrame({"age": [30, 40], "region": ["N", "S"]})
    >>> ctx = dp.Context.compositor(data=lf, privacy_unit=dp.unit_of(contributions=1),
    ...     privacy_loss=dp.loss_of(epsilon=1.0), split_evenly_over=1)
    >>> a = ctx.accountant
    >>> t = make_lazyframe_to_table(a.input_domain, a.input_metric, dps.Schema({"age": (0, 99), "region": ["N", "S"]}))
    >>> t.map(1)
    1
    >>> make_lazyframe_to_table(a.input_domain, a.input_metric, dps.Schema({"income": (0, 1)}))
    Traceback (most recent call last):
    ...
    ValueError: columns ['income'] are not in the data (columns: ['age', 'region'])
    """
    check_lazyframe_source(input_domain, input_metric)
    schema.check_dtypes({c: _domain_dtype(input_domain, c) for c in input_domain.columns})
    return dp.t.make_user_transformation(
        input_domain, input_metric, table_domain(schema), dp.symmetric_distance(), lambda x: x, lambda d: d
    )


def _domain_dtype(domain: Any, column: str) -> Any:
    """The Polars dtype of a column of OpenDP's LazyFrame domain, from its element domain."""
    try:
        text = str(domain.get_series_domain(column).element_domain)
    except Exception:  # noqa: BLE001 - OpenDP 0.16 cannot name an Enum column's element domain
        return pl.Categorical
    for key, dtype in (
        ("NaiveDateTime", pl.Datetime),
        ("DateTime", pl.Datetime),
        ("NaiveDate", pl.Date),
        ("T=f", pl.Float64),
        ("T=i", pl.Int64),
        ("T=u", pl.Int64),
        ("T=String", pl.String),
        ("T=bool", pl.Boolean),
        ("Categorical", pl.Categorical),
    ):
        if key in text:
            return dtype
    return pl.Object


def make_table_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    """The table backend: the exact pair ``(Σ q(encode(x_i)), n)`` of any table, streamed in
    batches of at most ``batch_rows`` rows (see
    :func:`~opendp_sketch.backends.memory.pair_transformation`). Encoding is row-wise, so the
    sum's stability is ``d_in·Δ_p`` of the map on the encoded box.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"cut": ["Fair", "Ideal"]})
    >>> fm = dps.Histogram(bounds=schema.bounds, bins=2)
    >>> t = make_table_sum_and_count(table_domain(schema), dp.symmetric_distance(), fm)
    >>> s, n = t(pl.DataFrame({"cut": ["Ideal", "Ideal", "Fair", None]}))
    >>> s.tolist(), n
    ([2, 2], 4)
    """
    desc = check_source_arguments(
        input_domain, input_metric, feature_map, n_jobs, TableDomain, "table_domain(schema)"
    )
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows <= 0:
        raise ValueError(f"batch_rows ({batch_rows!r}) must be a positive integer")
    check_chunking(chunk_rows, n_jobs)
    run = table_pass(desc, [feature_map], batch_rows, chunk_rows, n_jobs)

    def function(data: Any) -> tuple[np.ndarray, int]:
        sums, rows = run(data)
        return sums[0], rows

    return pair_transformation(input_domain, input_metric, feature_map, function)


class Summer(Protocol):
    """What :func:`table_pass` sums per batch: a feature map, or a counter with its shape
    (:class:`~opendp_sketch.selection.PairCounts`)."""

    @property
    def num_features(self) -> int: ...

    @property
    def input_dim(self) -> int: ...

    def _accumulate(
        self, X: Any, clip: tuple[np.ndarray, np.ndarray] | None, chunk_rows: int, n_jobs: int | None
    ) -> Accumulator: ...


def table_pass(
    desc: TableDomain,
    feature_maps: Sequence[Summer],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> Callable[[Any], tuple[list[np.ndarray], int]]:
    """``data → ([Σ q_k(encode(x_i)) for each map k], n)``: the exact sums of several public maps
    (or counters, :class:`Summer`) of the same columns in **one** pass, each batch read and
    encoded once and then summed by every map (:func:`make_table_sum_and_count`'s pass, which is this one with one map). Each
    sum is the one a pass of its map alone computes, saturated the same way; nothing raises on
    data. Arguments are public and checked by the caller."""
    schema: Schema = desc.schema
    lo, hi = desc.bounds
    names = list(schema.data_columns)
    maps = list(feature_maps)

    def function(data: Any) -> tuple[list[np.ndarray], int]:
        lf = as_frame(data, names, text_csv=True)
        present = set(lf.collect_schema().names())
        # a column the table lacks reads as nulls (the schema then maps them to public values)
        cols = [pl.col(c) if c in present else pl.lit(None).alias(c) for c in names]
        totals, rows = [Accumulator(fm.num_features) for fm in maps], 0
        for batch in stream_frames(lf.select(cols), batch_rows):
            if not batch.height:
                continue
            X = schema.encode(batch)
            for fm, total in zip(maps, totals):
                total.merge(fm._accumulate(X, (lo, hi), chunk_rows, n_jobs))
            rows += batch.height
            report_batch(batch.height)
        return [total.clipped(I64_MAX) for total in totals], min(rows, I64_MAX)

    return function


def table_pass_of(
    input_domain: dp.Domain,
    feature_maps: Sequence[Summer],
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> Callable[[Any], tuple[list[np.ndarray], int]] | None:
    """:func:`table_pass` of ``feature_maps`` on ``input_domain`` when it is a
    :func:`table_domain` (a table in memory or in files), else ``None`` (the caller runs each
    map's own pass). Public arguments only."""
    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, TableDomain) or isinstance(desc, (DaskTableDomain, SparkTableDomain)):
        return None
    check_chunking(chunk_rows, n_jobs)
    columns = int(desc.num_columns)
    if any(fm.input_dim != columns for fm in feature_maps):
        return None
    return table_pass(desc, feature_maps, chunk_rows=chunk_rows, n_jobs=n_jobs)


def make_table_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """The number of rows of a table under a schema (``table_domain``), 1-stable: each row
    read as a release reads it (a CSV file's line), so no value can make it fail.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends.tables import table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = make_table_row_count(table_domain(dps.Schema({"x": (0, 1)})), dp.symmetric_distance())
    >>> t(pl.DataFrame({"x": [0.5, None, 7.0]}))
    3
    """
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


def check_table(data: Any, schema: Schema) -> tuple[pl.LazyFrame, int]:
    """The curator's side of a schema release of a table in memory or in files, before any
    measurement is built: the table read as the measurement will read it (a CSV file line by
    line, as text), checked by the schema (dtypes, then one pass refusing nulls, ±inf and
    unknown labels the rules do not cover); returns the frame and its row count (never
    released).

    :raises ValueError: naming columns, kinds and the fix, never a data value
    """
    # the curator reads the table as the measurement will (a CSV file line by line, as text)
    frame = as_frame(data, schema.data_columns, text_csv=True)
    if isinstance(data, (str, os.PathLike)) and str(data).lower().endswith(".csv"):
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
    return frame, rows


register_backend(
    TableDomain,
    Backend("polars", make_table_sum_and_count, table_domain=table_domain, check_table=check_table),
)
