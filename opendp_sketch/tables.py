"""Tables as users have them → the schema's unit-free coordinates, a batch at a time.

:func:`as_frame` turns numpy arrays, Polars frames, pandas DataFrames, PyArrow tables and
datasets, and Parquet/CSV/IPC paths into a Polars ``LazyFrame`` without reading it (files and
Arrow datasets are scanned lazily). :func:`table_domain` is the OpenDP domain of such inputs
under a public :class:`~opendp_sketch.Schema`, and :func:`make_table_sum_and_count` is the
table backend of the release layer: it streams the input in batches, encodes each batch with the
schema (which never raises on values) and adds the batch's exact integer feature sums.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

from ._fixed import Accumulator
from ._validate import check_chunking
from .domains import TableDomain, table_descriptor
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .schema import Schema
from .streaming import DEFAULT_BATCH_ROWS, report_batch, scan, scan_csv_text, stream_frames
from .transformations import I64_MAX, check_source_arguments, pair_transformation

__all__ = ["as_frame", "table_domain", "make_table_sum_and_count"]


def as_frame(data: Any, columns: list[str] | None = None, text_csv: bool = False) -> pl.LazyFrame:
    """A lazy Polars view of ``data`` (nothing is read yet for files and Arrow datasets).

    numpy arrays need ``columns`` (their names, in order); pandas needs pyarrow (a dependency).
    Columns of Python objects (pandas ``object``, numpy ``object`` arrays) are read as text value
    by value (:func:`_object_text`): their conversion can then not fail on one odd value, which
    would otherwise refuse the whole table from inside a measurement. With ``text_csv`` a CSV
    file is scanned as text (the schema parses every value leniently), so no value can stop
    the read part-way; the curator's checks read it with Polars' inferred types.

    :raises ValueError: for an input of another kind (naming the kinds accepted)
    :example:

    >>> import numpy as np
    >>> as_frame(np.zeros((2, 2)), ["a", "b"]).collect().shape
    (2, 2)
    """
    if isinstance(data, pl.LazyFrame):
        return data
    if isinstance(data, pl.DataFrame):
        return data.lazy()
    if isinstance(data, (str, os.PathLike)):
        if str(data).lower().endswith(".csv") and os.path.exists(data):
            if text_csv:  # inside a measurement: text, then the schema parses each value
                return scan_csv_text(data)
            return pl.scan_csv(os.fspath(data))  # the curator's checks: Polars' own types
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
        objects = [
            c for c, dt in data.dtypes.items() if str(dt) in ("object", "str") or str(dt).startswith("string")
        ]
        if not objects:
            return pl.from_pandas(data).lazy()
        text = pl.DataFrame({str(c): _object_text(data[c].to_numpy()) for c in objects})
        if len(objects) == data.shape[1]:
            return text.lazy()
        rest = pl.from_pandas(data.drop(columns=objects))
        return pl.concat([rest, text], how="horizontal").select([str(c) for c in data.columns]).lazy()
    if module == "pyarrow":
        import pyarrow.dataset as pads

        if isinstance(data, pads.Dataset):
            return pl.scan_pyarrow_dataset(data)
        if hasattr(data, "read_all"):  # a RecordBatchReader
            data = data.read_all()
        frame = pl.from_arrow(data)
        return (frame if isinstance(frame, pl.DataFrame) else frame.to_frame()).lazy()
    raise ValueError(
        "data must be a numpy array, a Polars DataFrame/LazyFrame, a pandas DataFrame, a PyArrow "
        f"Table/Dataset/RecordBatchReader or a Parquet/CSV/IPC path, got {type(data).__name__}"
    )


def _object_text(values: np.ndarray) -> pl.Series:
    """Python objects as text, one value at a time: ``None`` and float NaN (and pandas' NA/NaT)
    are null, text stays, bytes are decoded as UTF-8 (invalid bytes replaced), booleans read
    ``true``/``false`` and anything else its ``str``. The schema then parses each value for its
    column: a number from ``"41"``, a label from ``"South"``, and ``null`` from what does not parse.

    >>> _object_text(np.array([1, "a", None, 2**70, b"\\xff", True, float("nan")], dtype=object)).to_list()[:4]
    ['1', 'a', None, '1180591620717411303424']
    """
    out: list[str | None] = []
    for v in values.tolist():
        if v is None or (isinstance(v, float) and v != v) or type(v).__name__ in ("NAType", "NaTType"):
            out.append(None)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
                out.append(v)
            except UnicodeEncodeError:  # a lone surrogate: replaced, as invalid bytes are
                out.append(v.encode("utf-8", "replace").decode("utf-8"))
        elif isinstance(v, (bytes, bytearray)):
            out.append(bytes(v).decode("utf-8", "replace"))
        elif isinstance(v, (bool, np.bool_)):
            out.append("true" if v else "false")
        else:
            try:
                out.append(str(v))
            except Exception:  # noqa: BLE001 - an object whose str fails reads as null
                out.append(None)
    return pl.Series(out, dtype=pl.String)


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
    :func:`~opendp_sketch.transformations.pair_transformation`). Encoding is row-wise, so the
    sum's stability is ``d_in·Δ_p`` of the map on the encoded box.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.tables import make_table_sum_and_count, table_domain
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
    schema: Schema = desc.schema
    lo, hi = desc.bounds
    names = list(schema.columns)

    def function(data: Any) -> tuple[np.ndarray, int]:
        lf = as_frame(data, names, text_csv=True)
        present = set(lf.collect_schema().names())
        # a column the table lacks reads as nulls (the schema then maps them to public values)
        cols = [pl.col(c) if c in present else pl.lit(None).alias(c) for c in names]
        total, rows = Accumulator(feature_map.num_features), 0
        for batch in stream_frames(lf.select(cols), batch_rows):
            if not batch.height:
                continue
            X = schema.encode(batch)
            total.add_exact(feature_map._accumulate(X, (lo, hi), chunk_rows, n_jobs).total())
            rows += batch.height
            report_batch(batch.height)
        return total.clipped(I64_MAX), min(rows, I64_MAX)

    return pair_transformation(input_domain, input_metric, feature_map, function)
