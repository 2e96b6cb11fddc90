"""Streamed releases from Polars LazyFrames, Parquet and CSV files: memory independent of ``n``.

A *frame domain* (:func:`frame_box_domain`) holds Polars frames with named numeric columns and a
public box per column. :func:`make_frame_feature_sum` reads such a frame in batches (Polars'
streaming engine, ``LazyFrame.sink_batches``; a read that fails part-way raises, never passes a
partial sum as the whole), clamps each batch into the box, and adds the
batch's exact integer feature sums; :func:`make_frame_row_count` counts the rows. Both are
row-wise per batch, so their stabilities are those of the in-memory path: ``d_in·Δ_p`` and
``d_in``. :func:`~opendp_sketch.make_private_sketch` accepts a frame domain wherever it accepts a
``box_domain``, and :func:`~opendp_sketch.release_sketch` streams a ``LazyFrame`` or a file path.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
import polars as pl

from .._compat import require_opendp_polars
from .._fixed import Accumulator
from .._validate import check_bounds, check_chunking, impute_values, require_symmetric
from ..batches import DEFAULT_BATCH_ROWS, STREAM_FAILED, StreamReadError, stream_frames
from ..features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .domains import FrameBoxDomain, box_data_bounds
from .memory import I64_MAX, count_transformation, integer_sum_transformation, pair_transformation
from .protocol import Backend, register_backend

__all__ = [
    "frame_box_domain",
    "FrameBoxDomain",
    "make_frame_feature_sum",
    "make_frame_row_count",
    "make_frame_sum_and_count",
    "make_lazyframe_to_frame_box",
    "scan",
    "scan_csv_lenient",
    "scan_csv_text",
    "csv_quoted_lines",
    "stream_frames",
    "StreamReadError",
    "check_frame_box",
]

#: bytes PyArrow reads from a Parquet file at a time (no pre-buffering of whole row groups)
PARQUET_READ_BUFFER = 1 << 20


def scan_parquet_bounded(path: str | os.PathLike[str], batch_rows: int = DEFAULT_BATCH_ROWS) -> pl.LazyFrame:
    """A Parquet file as a LazyFrame read through PyArrow in batches of at most ``batch_rows``
    rows, whatever the file's row-group size.

    Polars' own Parquet readers decode whole row groups, several at a time: a file written with
    10⁶-row groups took 1.2–1.7 GB to stream. PyArrow's ``iter_batches`` without pre-buffering
    reads ``PARQUET_READ_BUFFER`` bytes at a time (about 0.1–0.2 GB at that size). The frame is an
    ordinary LazyFrame (a Polars IO source): projections, filters and ``head`` are pushed into
    the batch reader.

    >>> import polars as pl, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pl.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "z"]}).write_parquet(path, row_group_size=2)
    >>> scan_parquet_bounded(path, batch_rows=1).filter(pl.col("a") > 1).select("a").collect()["a"].to_list()
    [2.0, 3.0]
    """
    import pyarrow.parquet as pq
    from polars.io.plugins import register_io_source

    source_path = os.fspath(path)
    schema = pl.from_arrow(pq.read_schema(source_path).empty_table()).schema  # type: ignore[union-attr]

    def batches(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        reader = pq.ParquetFile(source_path, pre_buffer=False, buffer_size=PARQUET_READ_BUFFER)
        left = n_rows
        for batch in reader.iter_batches(
            batch_size=min(batch_size or batch_rows, batch_rows), columns=with_columns
        ):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            if predicate is not None:
                frame = frame.filter(predicate)
            if left is not None:
                frame = frame.head(left)
                left -= frame.height
            yield frame
            if left is not None and left <= 0:
                return

    return register_io_source(batches, schema=schema)


def _scan_lines(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A CSV file as text, one row per line: no quote parsing, invalid UTF-8 replaced, extra
    fields dropped and missing ones null, an empty file read as no rows."""
    return pl.scan_csv(
        os.fspath(path),
        infer_schema=False,
        quote_char=None,
        truncate_ragged_lines=True,
        encoding="utf8-lossy",
        raise_if_empty=False,
    )


def scan_csv_text(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A CSV file as a LazyFrame of text columns, **one row per line**, that no byte can fail.

    Quotes are not parsed: a field that starts and ends with ``"`` loses them (and ``""``
    inside reads as ``"``), but a quote elsewhere, an unclosed one or a separator inside quotes
    is text of that line only. So whatever one line holds (stray or unclosed quotes, invalid
    UTF-8, a BOM, NUL bytes, too many or too few fields), it changes that line's row and no
    other, and the read cannot stop part-way: the privacy unit of a CSV file read inside a
    measurement is its line (``docs/testing_privacy.md``). The curator's checks refuse files
    whose quoted fields hold a separator or a line break (:func:`csv_quoted_lines`), which a
    line-by-line read would split.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = path.write_text('"a",b\\n1,"x"\\n2\\n3,5 ft 11"\\n4,"a ""b"" c"\\n')
    >>> scan_csv_text(path).collect().rows()
    [('1', 'x'), ('2', None), ('3', '5 ft 11"'), ('4', 'a "b" c')]
    """
    lf = _scan_lines(path)
    names = lf.collect_schema().names()
    return total_read(lf.select([_unquoted(pl.col(c)).alias(_unquote_text(c)) for c in names]))


#: LazyFrames made by this package's own total readers (by ``id``; weak, so they still free)
_TOTAL_READS: weakref.WeakValueDictionary[int, pl.LazyFrame] = weakref.WeakValueDictionary()


def total_read(lf: pl.LazyFrame) -> pl.LazyFrame:
    """Mark ``lf`` as a read no value can fail (made by this package's readers) and return it."""
    _TOTAL_READS[id(lf)] = lf
    return lf


def is_total_read(lf: pl.LazyFrame) -> bool:
    """Whether ``lf`` was made by one of this package's total readers (:func:`total_read`)."""
    return _TOTAL_READS.get(id(lf)) is lf


def _unquote_text(text: str) -> str:
    """A header field without its surrounding quotes (``""`` inside read as ``"``)."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def _unquoted(c: pl.Expr) -> pl.Expr:
    """A text column whose fields lose their surrounding quotes, value by value."""
    quoted = c.str.starts_with('"') & c.str.ends_with('"') & (c.str.len_chars() >= 2)
    inner = c.str.slice(1, c.str.len_chars() - 2).str.replace_all('""', '"', literal=True)
    return pl.when(quoted).then(inner).otherwise(c)


def csv_quoted_lines(path: str | os.PathLike[str]) -> int:
    """How many lines of a CSV file a line-by-line read splits wrongly: lines with a field that
    opens a quote it does not close (a quoted separator or line break). The curator's check;
    never inside a measurement (it reads values).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = path.write_text('a,b\\n1,"x, y"\\n2,"z"\\n')
    >>> csv_quoted_lines(path)
    1
    """
    lf = _scan_lines(path)
    names = lf.collect_schema().names()
    if not names:
        return 0
    split = [
        (pl.col(c).str.starts_with('"') & ~(pl.col(c).str.ends_with('"') & (pl.col(c).str.len_chars() >= 2)))
        .fill_null(False)
        .cast(pl.Int64)
        for c in names
    ]
    return int(lf.select(pl.max_horizontal(split).sum()).collect(engine="streaming").item() or 0)


def scan_csv_lenient(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A CSV file as a LazyFrame whose read does not fail on a value: every field is read as text
    (invalid UTF-8 replaced) and cast to its column's type without strictness, so a value that
    does not parse is null.

    Polars' own ``scan_csv`` infers the types from the first rows and fails the whole query at
    a later value that does not parse. The types here come from the same first rows, read once
    when the scan is made (on the curator's side, before any measurement), and every numeric
    column is Float64. A line with extra fields keeps the first ones (missing ones are null).

    **Limits.** A row is what the CSV parser reads as one: a quote inside an unquoted field or
    left open makes the read fail (:class:`StreamReadError`, nothing released), and a line ending
    in a lone carriage return joins the next line. The privacy unit is that parsed row; check a
    file you did not write on the curator's side first (``release_sketch`` and the CLI do).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = path.write_text("a,b\\n" + "1,x\\n" * 200 + "oops,y\\n")
    >>> scan_csv_lenient(path).select(pl.col("a").is_null().sum(), pl.len()).collect().row(0)
    (1, 201)
    """
    source = os.fspath(path)
    text = scan_csv_text(source)
    try:
        inferred = pl.scan_csv(source, truncate_ragged_lines=True, encoding="utf8-lossy").collect_schema()
    except pl.exceptions.PolarsError:  # an empty file, or no header: the read reports it later
        return text
    # every numeric column is Float64: an integer type inferred from the first rows would make a
    # later non-integer null, and that depends on which rows come first
    types = {c: pl.Float64 if t.is_numeric() else t for c, t in inferred.items()}
    return total_read(
        text.with_columns([pl.col(c).cast(t, strict=False) for c, t in types.items() if t != pl.String])
    )


_SCANNERS = {
    ".parquet": scan_parquet_bounded,
    ".pq": scan_parquet_bounded,
    ".csv": scan_csv_lenient,
    ".ipc": pl.scan_ipc,
    ".arrow": pl.scan_ipc,
}


def frame_box_domain(bounds: Any, column_names: Sequence[str], impute: Any = None) -> dp.Domain:
    """Domain of Polars ``LazyFrame``/``DataFrame`` values with the named numeric columns.

    Every frame holding the named numeric columns is a member, whatever its values: the
    transformations clamp values into the public box, row by row, and read null/NaN as the
    public ``impute`` values (one per column, or one for all) or, without them, as the lower
    bound. So no value can make a transformation on this domain raise — inside a
    ``dp.Context`` a data-dependent error would be an uncharged, repeatable oracle.
    :func:`~opendp_sketch.release_sketch` still refuses null/NaN without ``impute`` on the
    curator's side, before building anything. Membership is checked on the schema only.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dom = dps.backends.streaming.frame_box_domain(bounds=(0.0, 1.0), column_names=["a", "b"])
    >>> dom.member(pl.LazyFrame({"a": [0.5], "b": [2.0], "c": ["x"]}))
    True
    >>> dom.member(pl.LazyFrame({"a": [None, 0.5], "b": [0.1, float("nan")]}))
    True
    >>> dom.member(pl.LazyFrame({"a": ["text"], "b": [0.1]}))
    False
    """
    names = tuple(str(c) for c in column_names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"column_names ({list(names)}) must be distinct and non-empty")
    lo, hi = check_bounds(bounds, len(names))
    fill = None if impute is None else impute_values(impute, len(names), (lo, hi))
    desc = FrameBoxDomain(
        lower=tuple(lo.tolist()),
        upper=tuple(hi.tolist()),
        num_columns=len(names),
        column_names=names,
        impute=None if fill is None else tuple(fill.tolist()),
    )

    def _member(x: Any) -> bool:
        if not isinstance(x, (pl.LazyFrame, pl.DataFrame)):
            return False
        schema = x.collect_schema() if isinstance(x, pl.LazyFrame) else x.schema
        return all(c in schema and schema[c].is_numeric() for c in names)

    ident = f"FrameBoxDomain(column_names={list(names)}, lower={list(desc.lower)}, upper={list(desc.upper)}"
    ident += ")" if desc.impute is None else f", impute={list(desc.impute)})"
    return dp.user_domain(ident, _member, desc)


def frame_descriptor(domain: dp.Domain) -> FrameBoxDomain | None:
    desc = getattr(domain, "descriptor", None)
    return desc if isinstance(desc, FrameBoxDomain) else None


def scan(source: str | os.PathLike[str]) -> pl.LazyFrame:
    """A lazy scan of a Parquet, CSV or Arrow IPC file (by extension); nothing is read yet.

    CSV files are read leniently (:func:`scan_csv_lenient`): a value that does not parse as its
    column's type is null, so a streamed release cannot stop part-way on it.

    :raises ValueError: for a missing file or an unknown extension
    """
    path = Path(source)
    scanner: Any = _SCANNERS.get(path.suffix.lower())
    if scanner is None:
        raise ValueError(f"{path.name}: unknown file type; expected one of {sorted(_SCANNERS)}")
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    return scanner(path)


#: the curator's progress callback for the streamed pass in progress (see :func:`report_progress`)
_PROGRESS: ContextVar[Callable[[int], None] | None] = ContextVar("opendp_sketch_progress", default=None)


@contextmanager
def report_progress(callback: Callable[[int], None] | None) -> Iterator[None]:
    """Within the block, every streamed batch calls ``callback(rows_in_batch)`` after it is summed.

    The callback runs on the curator's machine and only sees batch sizes; it is never part of a
    release. An exception it raises is swallowed and further calls are skipped, so a broken
    progress display cannot abort a release half-way.
    """
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def iter_batches(
    frame: pl.LazyFrame | pl.DataFrame, names: Sequence[str], batch_rows: int
) -> Iterator[np.ndarray]:
    """float64 ``(rows, len(names))`` blocks of at most ``batch_rows`` rows (nulls, and values
    that do not cast to a number, become NaN); a read that fails part-way raises
    :class:`StreamReadError` (:func:`stream_frames`)."""
    lf = frame.lazy() if isinstance(frame, pl.DataFrame) else frame
    query = lf.select([pl.col(c).cast(pl.Float64, strict=False) for c in names])
    for batch in stream_frames(query, batch_rows):
        if batch.height:
            yield batch.to_numpy()
            report_batch(batch.height)


def report_batch(rows: int) -> None:
    """Tell the curator's progress callback (if any) that ``rows`` more rows were summed. A
    callback that raises is dropped for the rest of the pass: a display problem must not stop
    (and so make data-dependent) a release."""
    callback = _PROGRESS.get()
    if callback is None:
        return
    try:
        callback(rows)
    except Exception:  # noqa: BLE001 - any display error
        _PROGRESS.set(None)


def _check_common(input_domain: dp.Domain, input_metric: dp.Metric) -> FrameBoxDomain:
    dp.assert_features("contrib", "honest-but-curious")
    desc = frame_descriptor(input_domain)
    if desc is None:
        raise ValueError(f"input_domain ({input_domain}) must be a frame_box_domain")
    require_symmetric(input_metric)
    return desc


def make_frame_feature_sum(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: Literal[1, 2] = 1,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    r"""Exact integer ``Σ_i q(clamp(x_i))`` over a streamed frame (``i64``, like
    ``make_feature_sum(..., fixed_point=True)``).

    Each batch is clamped into the public box (after replacing NaN/null by the domain's public
    ``impute`` values), summed exactly in integers and added to
    a running exact sum; the total saturates at the int64 range. Batches partition the rows, so
    the total equals the in-memory sum of the same rows, and the stability is ``d_in·Δ_p``.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
    >>> dom = dps.backends.streaming.frame_box_domain((0, 1), ["x"])
    >>> t = dps.backends.streaming.make_frame_feature_sum(dom, dp.symmetric_distance(), fm, batch_rows=2)
    >>> t(pl.LazyFrame({"x": [0.1, 0.2, 0.9, 7.0]})), t.map(1)
    ([2, 2], 1)
    """
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    function = _frame_sum_function(input_domain, input_metric, feature_map, batch_rows, chunk_rows, n_jobs)
    return integer_sum_transformation(
        input_domain, input_metric, feature_map, p, lambda frame: function(frame)[0]
    )


def make_frame_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Transformation:
    """The Polars backend: the exact pair ``(Σ q(clamp(x_i)), n)`` of a frame in one streamed
    pass (see :func:`~opendp_sketch.backends.memory.pair_transformation`); the release layer
    adds the noise.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0, 1), bins=2, dim=1)
    >>> t = dps.backends.streaming.make_frame_sum_and_count(dps.backends.streaming.frame_box_domain((0, 1), ["x"]), dp.symmetric_distance(), fm)
    >>> s, n = t(pl.LazyFrame({"x": [0.1, None, 0.9]}))
    >>> s.tolist(), n
    ([2, 1], 3)
    """
    function = _frame_sum_function(input_domain, input_metric, feature_map, batch_rows, chunk_rows, n_jobs)
    return pair_transformation(input_domain, input_metric, feature_map, function)


def _frame_sum_function(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    batch_rows: int,
    chunk_rows: int,
    n_jobs: int | None,
) -> Callable[[Any], tuple[np.ndarray, int]]:
    """Checked arguments, then the streamed ``frame -> (exact sum, rows)`` (never raises on values)."""
    desc = _check_common(input_domain, input_metric)
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if feature_map.input_dim != desc.num_columns:
        raise ValueError(
            f"feature_map expects {feature_map.input_dim} columns but the frame domain has {desc.num_columns}"
        )
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows <= 0:
        raise ValueError(f"batch_rows ({batch_rows!r}) must be a positive integer")
    check_chunking(chunk_rows, n_jobs)
    lo, hi = desc.bounds
    fill = None if desc.impute is None else np.array(desc.impute)
    names = desc.column_names or ()

    def function(frame: Any) -> tuple[np.ndarray, int]:
        total, rows = Accumulator(feature_map.num_features), 0
        for X in iter_batches(frame, names, batch_rows):
            X = _fill(X, fill)
            total.merge(feature_map._accumulate(X, (lo, hi), chunk_rows, n_jobs))
            rows += X.shape[0]
        return total.clipped(I64_MAX), min(rows, I64_MAX)

    return function


def make_frame_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """Number of rows of a frame (``i64``, 1-stable); Parquet files answer from their metadata."""
    _check_common(input_domain, input_metric)

    def function(frame: Any) -> int:
        lf = frame.lazy() if isinstance(frame, pl.DataFrame) else frame
        try:
            rows = int(lf.select(pl.len()).collect().item())
        except Exception:  # noqa: BLE001 - a plan that fails: a fixed message, never the reader's
            raise StreamReadError(STREAM_FAILED) from None
        return min(rows, I64_MAX)

    return count_transformation(input_domain, input_metric, function)


def _fill(X: np.ndarray, fill: np.ndarray | None) -> np.ndarray:
    """Null/NaN (nulls arrive as NaN) become the public ``fill``; without it they stay NaN, which
    the per-chunk clip sends to the lower bound. Never raises; ±inf are clamped like any value."""
    if fill is None:
        return X
    bad = np.isnan(X)
    return np.where(bad, fill, X) if bad.any() else X


def bad_value_counts(
    frame: pl.LazyFrame | pl.DataFrame, names: Sequence[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Per column, the numbers of null/NaN and of infinite values (one streaming pass, before
    releasing: the counts decide whether to refuse, they are never released)."""
    lf = frame.lazy() if isinstance(frame, pl.DataFrame) else frame
    exprs = []
    for c in names:
        v = pl.col(c).cast(pl.Float64)
        exprs += [(v.is_null() | v.is_nan()).sum().alias(f"n{c}"), v.is_infinite().sum().alias(f"i{c}")]
    row = lf.select(exprs).collect(engine="streaming").row(0)
    return (
        {c: int(row[2 * j] or 0) for j, c in enumerate(names)},
        {c: int(row[2 * j + 1] or 0) for j, c in enumerate(names)},
    )


def check_lazyframe_source(input_domain: dp.Domain, input_metric: dp.Metric) -> None:
    """Refuse anything but OpenDP's own LazyFrame domain (a ``dp.Context`` opened on a
    ``LazyFrame``) under the symmetric distance, with the features and the Polars it needs.

    :raises ValueError: naming what is wrong (the domain, the metric, the Polars version)
    """
    dp.assert_features("contrib", "honest-but-curious")
    require_opendp_polars("a dp.Context on a LazyFrame")
    if type(input_domain).__name__ != "LazyFrameDomain":
        raise ValueError(
            f"input_domain ({input_domain}) must be OpenDP's LazyFrame domain (a dp.Context opened on a LazyFrame)"
        )
    require_symmetric(input_metric)


def make_lazyframe_to_frame_box(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    bounds: Any,
    column_names: Sequence[str],
    impute: Any = None,
) -> dp.Transformation:
    """From OpenDP's own LazyFrame domain (a ``dp.Context`` opened on a ``LazyFrame``) to a
    :func:`frame_box_domain`: the identity on the frame, so 1-stable under the symmetric distance.

    The named columns must be numeric in the context's schema; ``bounds`` are public.
    """
    check_lazyframe_source(input_domain, input_metric)
    names = [str(c) for c in column_names]
    missing = [c for c in names if c not in input_domain.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the data (columns: {list(input_domain.columns)})")
    numeric = ("T=f", "T=i", "T=u")
    bad = [
        c
        for c in names
        if not any(t in str(input_domain.get_series_domain(c).element_domain) for t in numeric)
    ]
    if bad:
        raise ValueError(f"columns {bad} must be numeric")
    out = frame_box_domain(bounds, names, impute=impute)
    return dp.t.make_user_transformation(
        input_domain, input_metric, out, dp.symmetric_distance(), lambda x: x, lambda d: d
    )


def check_frame_box(
    frame: pl.LazyFrame,
    feature_map: FeatureMap,
    bounds: Any,
    impute: Any,
    column_names: Sequence[str] | None,
) -> tuple[dp.Domain, int]:
    """The curator's side of a one-call release of a LazyFrame in a public box, before any
    measurement is built: the columns (present, numeric, as many as the map expects), then one
    streamed pass refusing null/NaN without ``impute`` and ``±inf``; returns the
    :func:`frame_box_domain` and the row count (never released).

    :raises ValueError: naming columns and the fix, never a data value
    """
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
    return domain, rows


register_backend(
    FrameBoxDomain,
    Backend("polars", make_frame_sum_and_count, feature_sum=make_frame_feature_sum),
)
