"""Reading one value of a schema column, whatever its container's type.

Each reader is a Polars expression built from the column's dtype. They are total (no value
makes them fail) and agree across types: a value reads the same whether its column holds
numbers, booleans, dates or text (pandas and CSV readers change a column's type with one row,
so a row's reading must not depend on the others). :meth:`Schema.encode` (inside measurements)
and the curator's :meth:`Schema.problems` use the same readers, so the curator's check counts
exactly what a release reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from .columns import NULL_CATEGORY, Categorical, Numeric

__all__ = [
    "safe_cast",
    "text_expr",
    "number_expr",
    "time_expr",
    "value_expr",
    "boolean_expr",
    "code_expr",
    "codes",
]


def safe_cast(s: pl.Series, dtype: Any) -> pl.Series:
    """``s`` cast to ``dtype`` value by value, never raising (it runs inside measurements):
    values that do not cast become null; Binary is decoded as UTF-8 first, invalid bytes
    replaced (Polars' own cast of one invalid value fails the whole column); a column whose type
    casts to nothing (lists, structs, objects) reads as all null — a property of its type, the
    same for every row.

    >>> safe_cast(pl.Series([b"ok", b"\\xff"]), pl.String).to_list() == ["ok", "\\ufffd"]
    True
    >>> safe_cast(pl.Series(["1.5", "x", None]), pl.Float64).to_list()
    [1.5, None, None]
    >>> safe_cast(pl.Series([[1.0], [2.0]]), pl.Float64).to_list()
    [None, None]
    """
    if s.dtype.is_nested() or s.dtype == pl.Object:  # no value of these casts: every row alike
        return pl.Series(s.name, [None] * s.len(), dtype=dtype)
    if s.dtype == pl.Binary:
        s = pl.Series(
            s.name,
            [None if b is None else bytes(b).decode("utf-8", "replace") for b in s.to_list()],
            pl.String,
        )
    try:
        return s.cast(dtype, strict=False)
    except Exception:  # noqa: BLE001 - a type with no cast: every row alike
        return pl.Series(s.name, [None] * s.len(), dtype=dtype)


#: text read as a boolean (CSV files scanned as text, pandas object columns); other text is null
_BOOLEAN_TEXT = {"true": 1, "false": 0, "t": 1, "f": 0, "yes": 1, "no": 0}


# Each reader below is a Polars expression built from the column's dtype. They are total (no
# value makes them fail) and agree across types: a value reads the same whether its column holds
# numbers, booleans or text (pandas and CSV readers change a column's type with one row, so a
# row's reading must not depend on the others). ``encode`` and the curator's ``problems`` use the
# same readers, so the curator's check counts exactly what a release reads.


def is_text(dtype: Any) -> bool:
    return dtype in (pl.String, pl.Binary, pl.Categorical) or isinstance(dtype, pl.Enum)


def text_expr(name: str, dtype: Any) -> pl.Expr:
    """The column as text (numbers in Polars' shortest form, booleans ``true``/``false``, dates
    ``YYYY-MM-DD``, datetimes in UTC ``YYYY-MM-DDTHH:MM:SS.ffffff``, as Python objects of those
    types read); types with no text (times of day, durations, nested, objects) read as null,
    every row alike."""
    c = pl.col(name)
    if dtype == pl.Date:
        return c.dt.to_string("%Y-%m-%d")
    if isinstance(dtype, pl.Datetime):
        utc = c.dt.convert_time_zone("UTC").dt.replace_time_zone(None) if dtype.time_zone else c
        return utc.dt.to_string("%Y-%m-%dT%H:%M:%S%.6f")
    if dtype == pl.Binary:
        return c.map_batches(lambda s: safe_cast(s, pl.String), return_dtype=pl.String)
    if is_text(dtype) or dtype.is_numeric() or dtype == pl.Boolean:
        return c.cast(pl.String, strict=False)
    return pl.lit(None, pl.String)


def number_expr(name: str, dtype: Any) -> pl.Expr:
    """The column as Float64: numbers as they are, booleans 1/0, text parsed (``true``/``false``
    as 1/0; what does not parse is null), anything else null.

    >>> pl.DataFrame({"x": ["1.5", "true", "x", None]}).select(number_expr("x", pl.String)).to_series().to_list()
    [1.5, 1.0, None, None]
    """
    c = pl.col(name)
    if dtype.is_numeric() or dtype == pl.Boolean:
        return c.cast(pl.Float64, strict=False)
    if is_text(dtype):
        text = text_expr(name, dtype).str.strip_chars()
        flag = text.str.to_lowercase().replace_strict(
            {"true": 1.0, "false": 0.0}, default=None, return_dtype=pl.Float64
        )
        return flag.fill_null(text.cast(pl.Float64, strict=False))
    return pl.lit(None, pl.Float64)


#: the text layouts a time column reads (fixed, so a value's reading never depends on others')
_DATE_FORMATS = ("%Y-%m-%d",)
_DATETIME_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M")


def time_expr(name: str, dtype: Any, time: str) -> pl.Expr:
    """A date/datetime column as Float64 days (dates) or seconds (datetimes, UTC) since
    1970-01-01: from Date and Datetime values, or from ISO text (a fixed list of layouts; a time
    zone in a Datetime type is respected); anything else reads as null, every row alike.

    >>> pl.DataFrame({"d": ["1970-01-03", "x", None]}).select(time_expr("d", pl.String, "date")).to_series().to_list()
    [2.0, None, None]
    """
    c = pl.col(name)
    if dtype == pl.Date:
        days = c.cast(pl.Int32, strict=False).cast(pl.Float64)
        return days if time == "date" else days * 86400.0
    if isinstance(dtype, pl.Datetime):
        seconds = c.dt.epoch("us").cast(pl.Float64) / 1e6
        return (seconds / 86400.0).floor() if time == "date" else seconds
    if not is_text(dtype):
        return pl.lit(None, pl.Float64)
    text = text_expr(name, dtype).str.strip_chars()
    day = pl.coalesce([text.str.slice(0, 10).str.to_date(f, strict=False) for f in _DATE_FORMATS])
    days = day.cast(pl.Int32, strict=False).cast(pl.Float64)
    if time == "date":
        return days
    stamp = pl.coalesce([text.str.to_datetime(f, time_unit="us", strict=False) for f in _DATETIME_FORMATS])
    seconds = stamp.dt.epoch("us").cast(pl.Float64) / 1e6
    whole_day = pl.when(text.str.len_chars() == 10).then(days * 86400.0)
    return seconds.fill_null(whole_day)


def value_expr(name: str, dtype: Any, col: Numeric) -> pl.Expr:
    """A numeric column's reader: numbers, or days/seconds for a time column."""
    return number_expr(name, dtype) if col.time is None else time_expr(name, dtype, col.time)


def boolean_expr(name: str, dtype: Any) -> pl.Expr:
    """The column as Int64 0/1 (anything else null), from booleans, numbers or text; a number or
    its text is 0/1 only when it equals 0 or 1."""
    v = number_expr(name, dtype)
    numeric = pl.when(v == 0.0).then(pl.lit(0, pl.Int64)).when(v == 1.0).then(pl.lit(1, pl.Int64))
    if not is_text(dtype):
        return numeric.otherwise(pl.lit(None, pl.Int64))
    low = text_expr(name, dtype).str.strip_chars().str.to_lowercase()
    named = low.replace_strict(_BOOLEAN_TEXT, default=None, return_dtype=pl.Int64)
    return named.fill_null(numeric.otherwise(pl.lit(None, pl.Int64)))


def code_expr(name: str, dtype: Any, col: Categorical) -> pl.Expr:
    """The column's label codes (null for nulls and unknown labels): matched on the value's text,
    or, for labels that are numbers, on the value's number, so ``41``, ``41.0`` and ``"41"``
    read alike whatever the column's type."""
    numeric_labels = col.numeric_labels
    labels, codes = list(col.labels), list(range(len(col.labels)))
    if dtype.is_numeric() and numeric_labels:  # numbers: by number only ("41.0" is not text of 41)
        code = pl.lit(None, pl.Int64)
    else:
        code = text_expr(name, dtype).replace_strict(labels, codes, default=None, return_dtype=pl.Int64)
    if numeric_labels:
        by_number = number_expr(name, dtype).replace_strict(
            list(numeric_labels), list(numeric_labels.values()), default=None, return_dtype=pl.Int64
        )
        code = code.fill_null(by_number)
    return code


def codes(codes: pl.Series, col: Categorical) -> np.ndarray:
    """Label codes with nulls (nulls and unknown labels) filled by the null rule (the null
    category, the imputed label, or code 0 when there is no rule)."""
    if col.null == NULL_CATEGORY:
        fill = len(col.labels)
    elif col.null is not None:
        fill = col.labels.index(col.null)
    else:
        fill = 0
    return codes.fill_null(fill).to_numpy().astype(np.float64)
