"""A public table schema: per column a numeric range, categorical labels or a boolean, and a null rule.

The schema is what a curator knows *without* looking at the data. It turns a table into
unit-free coordinates that every feature map understands the same way, whatever the units:

* a numeric column ``x`` in ``[lower, upper]`` becomes ``(x − lower)/(upper − lower)`` in ``[0, 1]``
  (clipped; integer columns too), or its logarithmic version for a column declared
  ``scale="log"`` (skewed counts and amounts);
* a categorical column with ``K`` public labels becomes its code ``0 … K−1`` (a null category,
  if the rule asks for one, is the last code);
* a boolean column becomes ``0``/``1`` (``2`` for a null category).

:meth:`Schema.encode` runs inside measurements, so it never raises on a batch with the right
columns: nulls/NaN follow the column's null rule, or (without one) go to the lowest public value;
±inf are clipped; unknown labels are read as nulls. :meth:`Schema.check` is the curator-side
validation that refuses, before anything is built, data the rules do not cover.
:meth:`Schema.decode` maps coordinates back to user units and labels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .batches import DEFAULT_BATCH_ROWS, stream_frames
from .columns import (
    MAX_INTEGER_LEVELS,
    NULL_CATEGORY,
    NULL_SUFFIX,
    PLACEHOLDER,
    Boolean,
    Categorical,
    Column,
    Date,
    Datetime,
    Numeric,
    check_keys,
    epoch_number,
    named_column,
)
from .readers import boolean_expr, code_expr, codes, value_expr

__all__ = ["Schema", "Numeric", "Categorical", "Boolean", "Date", "Datetime", "schema_draft", "sum_problems"]


#: the keys a schema's JSON/dict may hold at the top level
_SCHEMA_KEYS = ("columns", "order", "rows", "targets", "note")


class Schema:
    """A public table schema: the columns to release, in order, each with its public domain.

    :param columns: ``{name: spec}``; a spec is ``(lower, upper)`` (numeric), a list of labels
        (categorical), ``bool``, or a :class:`Numeric` / :class:`Categorical` / :class:`Boolean`
    :param rows: optional public estimate of the number of rows (an order of magnitude is
        enough; never read from the data). With it, the automatic map measures 2-way marginals
        at 16 bins where their cells hold well above the noise, and leaves them out where they do
        not (:func:`~opendp_sketch.auto_feature_map`); a wrong estimate costs accuracy, never
        privacy.
    :raises ValueError: for an empty schema, a malformed column (naming it) or a bad ``rows``
    :example:

    >>> import polars as pl, opendp_sketch as dps
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"], "vip": bool})
    >>> schema.columns, schema.cardinalities
    (['age', 'cut', 'vip'], [None, 2, 2])
    >>> schema.encode(pl.DataFrame({"age": [18, 54, 200], "cut": ["Ideal", "Fair", None], "vip": [True, False, None]}))
    array([[0. , 1. , 1. ],
           [0.5, 0. , 0. ],
           [1. , 0. , 0. ]])
    >>> schema.decode([[0.5, 1.0, 1.0]]).row(0)
    (54, 'Ideal', True)
    """

    def __init__(
        self, columns: Mapping[str, Any], rows: int | None = None, targets: str | Sequence[str] | None = None
    ) -> None:
        if not isinstance(columns, Mapping) or not columns:
            raise ValueError("columns must be a non-empty mapping {name: spec}")
        self._columns: dict[str, Column] = {str(n): named_column(str(n), s) for n, s in columns.items()}
        # the released coordinates: every column, and after a numeric column whose nulls are a
        # state of their own, its companion 0/1 coordinate ``name:null`` (read from the column)
        self._coords: dict[str, tuple[Column, str]] = {}
        for name, col in self._columns.items():
            self._coords[name] = (col, name)
            if isinstance(col, Numeric) and col.null_state:
                companion = name + NULL_SUFFIX
                if companion in self._columns:
                    raise ValueError(
                        f"column {companion!r} clashes with the null state of column {name!r}; rename it"
                    )
                self._coords[companion] = (Boolean(), name)
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
            raise ValueError(
                f"rows ({rows!r}) must be a positive integer: a public estimate of the row count"
            )
        self.rows = rows
        named = [targets] if isinstance(targets, str) else list(targets or [])
        unknown = [t for t in named if t not in self._coords]
        if unknown or len(set(named)) != len(named):
            raise ValueError(
                f"targets ({named!r}) must be distinct columns of the schema ({list(self._coords)})"
            )
        #: columns a model will predict: the automatic map measures every (column, target) pair
        self.targets: list[str] = [str(t) for t in named]

    # -- description --------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        """The released coordinates, in order: every column, each numeric column with
        ``null="category"`` followed by its null state ``name:null`` (a 0/1 column).

        >>> Schema({"income": Numeric(0, 1e5, null="category"), "vip": bool}).columns
        ['income', 'income:null', 'vip']
        """
        return list(self._coords)

    @property
    def data_columns(self) -> list[str]:
        """The columns a table must hold (the schema's own, without null-state companions)."""
        return list(self._columns)

    def source(self, name: str) -> str:
        """The table column a coordinate is read from (itself, or the column of a null state)."""
        return self._coords[name][1]

    @property
    def null_states(self) -> dict[str, str]:
        """``{column: its null-state coordinate}`` of the numeric columns with ``null="category"``."""
        return {src: c for c, (_, src) in self._coords.items() if c != src}

    def __getitem__(self, name: str) -> Column:
        return self._coords[name][0]

    def __len__(self) -> int:
        return len(self._coords)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Schema) and self.to_dict() == other.to_dict() and self.columns == other.columns
        )

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        rows = "" if self.rows is None else f", rows={self.rows}"
        return f"Schema({ {n: c.to_dict() for n, c in self._columns.items()} }{rows})"

    @property
    def cardinalities(self) -> list[int | None]:
        """Codes per coordinate (``None`` for numeric columns)."""
        return [c.cardinality for c, _ in self._coords.values()]

    @property
    def categorical(self) -> list[int]:
        """Indices of the categorical and boolean columns (coded ``0 … K−1``)."""
        return [j for j, k in enumerate(self.cardinalities) if k is not None]

    @property
    def integer_levels(self) -> dict[int, np.ndarray]:
        """Encoded coordinates of every value of each integer column with integer bounds and at
        most :data:`MAX_INTEGER_LEVELS` values (``{column index: coordinates}``): public, so maps
        can give each value its own bin and decoders can put rows on the integers.

        >>> Schema({"rank": Numeric(1, 5, integer=True), "x": (0, 1)}).integer_levels
        {0: array([0.  , 0.25, 0.5 , 0.75, 1.  ])}
        """
        out = {}
        for j, (col, _) in enumerate(self._coords.values()):
            if (
                isinstance(col, Numeric)
                and col.integer
                and float(col.lower).is_integer()
                and float(col.upper).is_integer()
                and col.width + 1 <= MAX_INTEGER_LEVELS
            ):
                out[j] = col.unit(np.arange(col.lower, col.upper + 1))
        return out

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The box of the encoded coordinates: ``[0, 1]`` numeric, ``[0, K−1]`` coded."""
        hi = np.array([1.0 if k is None else float(k - 1) for k in self.cardinalities])
        hi[hi == 0] = 1.0  # a one-label column still needs a box of positive width
        return np.zeros(len(self)), hi

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The one JSON layout (also the CLI's ``--schema`` file): ``{"columns": {name: spec},
        "order": [names]}`` (``order`` keeps the column order through JSON writers that sort keys;
        it may be left out of hand-written files), and ``"rows"`` when the schema has one."""
        out: dict[str, Any] = {
            "columns": {n: c.to_dict() for n, c in self._columns.items()},
            "order": self.data_columns,
        }
        if self.rows is not None:
            out["rows"] = self.rows
        if self.targets:
            out["targets"] = list(self.targets)
        return out

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, spec: Any) -> Schema:
        """From :meth:`to_dict` output (the old CLI layout ``{"columns": {"x": [lo, hi]}}`` too).

        >>> Schema.from_dict({"columns": {"x": [0, 10], "c": {"type": "categorical", "labels": ["a"]}}}).columns
        ['x', 'c']
        """
        if isinstance(spec, dict):
            check_keys(spec, _SCHEMA_KEYS, "schema")
        cols = spec.get("columns") if isinstance(spec, dict) else None
        if not isinstance(cols, dict) or not cols:
            raise ValueError('a schema must be {"columns": {"name": spec, ...}} with at least one column')
        order = spec.get("order")
        if order is not None:
            if not isinstance(order, list) or sorted(map(str, order)) != sorted(map(str, cols)):
                raise ValueError(f"order ({order!r}) must list exactly the schema's columns")
            cols = {str(n): cols[str(n)] for n in order}
        return cls(cols, rows=spec.get("rows"), targets=spec.get("targets"))

    @classmethod
    def from_json(cls, source: str | os.PathLike[str]) -> Schema:
        """From a JSON file path or a JSON text."""
        text = str(source)
        if not text.lstrip().startswith("{"):
            try:
                text = Path(source).read_text(encoding="utf-8")
            except OSError as e:
                raise ValueError(f"{source}: not a readable schema file ({type(e).__name__})") from None
        try:
            spec = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"{source}: not valid JSON") from None
        return cls.from_dict(spec)

    # -- the curator's checks (never inside a measurement) ---------------------------------
    def check_dtypes(self, dtypes: Mapping[str, Any]) -> None:
        """Refuse missing columns and dtypes that do not fit the column kinds (schema only)."""
        missing = [c for c in self._columns if c not in dtypes]
        if missing:
            raise ValueError(f"columns {missing} are not in the data (columns: {list(dtypes)})")
        bad, temporal = [], []
        for name, col in self._columns.items():
            dt = dtypes[name]
            if isinstance(col, Numeric) and col.time is None and dt.is_temporal():
                temporal.append(name)
                continue
            ok = (
                (
                    isinstance(col, Numeric)
                    and col.time is not None
                    and (dt in (pl.Date, pl.Null, pl.String) or isinstance(dt, pl.Datetime))
                )
                or (
                    isinstance(col, Numeric)
                    and col.time is None
                    and (dt.is_numeric() or dt in (pl.Boolean, pl.Null, pl.String))
                )
                or (
                    isinstance(col, Categorical)
                    and (
                        dt in (pl.String, pl.Categorical, pl.Null)
                        or isinstance(dt, pl.Enum)
                        or dt.is_integer()
                        or dt == pl.Boolean
                    )
                )
                or (isinstance(col, Boolean) and (dt in (pl.Boolean, pl.Null, pl.String) or dt.is_numeric()))
            )
            if not ok:
                bad.append(f"{name} ({dt}, schema: {type(col).__name__.lower()})")
        if temporal:
            raise ValueError(
                f"columns {temporal} hold dates or times but the schema declares them numeric; declare "
                "each as dps.Date(lower, upper) / dps.Datetime(lower, upper) with a public range, or in "
                'JSON {"type": "date", "range": ["2000-01-01", "2024-12-31"]} (or "datetime")'
            )
        if bad:
            raise ValueError(f"columns do not fit the schema: {', '.join(bad)}")

    def problems(self, frame: pl.LazyFrame | pl.DataFrame) -> dict[str, dict[str, int]]:
        """Per column, counts of values the rules must handle (one streaming pass; never released):
        ``null`` (nulls, NaN and text that does not read as a number), ``inf``, ``outside`` (out
        of range) and ``unknown`` (labels). Values are read as :meth:`encode` reads them."""
        lf = frame.lazy()
        dtypes = lf.collect_schema()
        exprs = []
        for name, col in self._columns.items():
            c = pl.col(name)
            if isinstance(col, Numeric):
                v = value_expr(name, dtypes[name], col)
                exprs += [
                    (v.is_null() | v.is_nan()).sum().alias(f"{name}\0null"),
                    v.is_infinite().sum().alias(f"{name}\0inf"),
                    ((v < col.lower) | (v > col.upper)).sum().alias(f"{name}\0outside"),
                ]
            elif isinstance(col, Categorical) and _text_labels_only(dtypes[name], col):
                # code_expr's code is null exactly where the text is not a label: is_in says so
                # without building the codes (3x faster on 10⁷ rows)
                exprs += [
                    c.is_null().sum().alias(f"{name}\0null"),
                    (c.is_not_null() & ~c.is_in(list(col.labels)).fill_null(False))
                    .sum()
                    .alias(f"{name}\0unknown"),
                ]
            else:
                code = (
                    code_expr(name, dtypes[name], col)
                    if isinstance(col, Categorical)
                    else boolean_expr(name, dtypes[name])
                )
                exprs += [
                    c.is_null().sum().alias(f"{name}\0null"),
                    (code.is_null() & c.is_not_null()).sum().alias(f"{name}\0unknown"),
                ]
        # batch by batch, eagerly: Polars' streaming engine materialises a whole text column for
        # the label lookup (1.7 GB extra at 10⁷ rows × 3 text columns); batches keep it flat in n
        # (0.19 GB, and 4× faster)
        if isinstance(frame, pl.DataFrame):
            parts: Iterable[pl.DataFrame] = [frame]
        else:
            parts = stream_frames(lf.select(self.data_columns), DEFAULT_BATCH_ROWS)
        out: dict[str, dict[str, int]] = {n: {} for n in self._columns}
        for part in parts:
            for key, v in part.select(exprs).row(0, named=True).items():
                name, kind = key.split("\0")
                out[name][kind] = out[name].get(kind, 0) + int(v or 0)
        return out

    def check(self, frame: pl.LazyFrame | pl.DataFrame) -> None:
        """Curator-side validation before a release: dtypes from the schema, then one pass that
        refuses nulls without a null rule, ±inf, and unknown labels without a null rule, naming
        the columns and the fix. Values outside a numeric range are clipped, not refused.

        :raises ValueError: naming the columns and the fix (never a data value)
        """
        lf = frame.lazy()
        self.check_dtypes(lf.collect_schema())
        self.refuse(self.problems(lf))

    def refuse(self, found: Mapping[str, Mapping[str, int]]) -> None:
        """The refusals of :meth:`check` from counts of :meth:`problems` (summed over the
        partitions of a cluster table, for instance): nulls without a null rule, ±inf, and
        unknown labels without a null rule.

        >>> s = Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]})
        >>> s.refuse({"age": {"null": 0, "inf": 0, "outside": 3}, "cut": {"null": 0, "unknown": 0}})
        >>> s.refuse({"age": {"null": 2}, "cut": {}})
        Traceback (most recent call last):
        ...
        ValueError: columns ['age'] contain nulls (or NaN, or text that is not a number) and have no null rule; ...

        :raises ValueError: naming the columns and the fix (never a data value)
        """
        found = {n: found.get(n, {}) for n in self._columns}
        nulls = [n for n, c in self._columns.items() if found[n].get("null") and _no_null_rule(c)]
        if nulls:
            raise ValueError(
                f"columns {nulls} contain nulls (or NaN, or text that is not a number) and have no null "
                "rule; give each a public "
                "impute value (Numeric(..., impute=v)) or null='category' / a label to read them as"
            )
        infs = [n for n in self._columns if found[n].get("inf")]
        if infs:
            raise ValueError(f"columns {infs} contain infinite values; clean them first")
        unknown = [n for n, c in self._columns.items() if found[n].get("unknown") and _no_null_rule(c)]
        if unknown:
            raise ValueError(
                f"columns {unknown} hold values that are not among their public labels; add the labels to "
                "the schema or give a null rule (null='category' or a label) to read them as"
            )

    # -- encoding (inside measurements: never raises) -------------------------------------
    def encode(self, batch: pl.DataFrame) -> np.ndarray:
        """Unit-free float64 coordinates ``(rows, len(schema))`` of a batch holding the columns.

        Never raises on values, and reads each value alone, the same whatever type its column
        has: nulls/NaN (and text that is not a number) follow the null rule or go to the lowest
        public value (0), ±inf and out-of-range values are clipped, unknown labels are read as
        nulls.
        """
        n = batch.height
        out = np.empty((n, len(self)), dtype=np.float64)
        read = batch.select(self._readers(batch.schema))
        missing: dict[str, np.ndarray] = {}
        for j, (name, (col, src)) in enumerate(self._coords.items()):
            if name != src:  # a null state: 1 where its column read as null or NaN
                out[:, j] = missing[src]
                continue
            s = read.get_column(name)
            if isinstance(col, Numeric):
                # unit is elementwise and NaN only at NaN (±inf and huge values clip to 0 or 1), so
                # filling its NaNs with unit(fill) is filling the values with fill first
                u = col.unit(s.to_numpy())
                gone = np.isnan(u)
                if gone.any():
                    u[gone] = col.unit(np.array([col.lower if col.impute is None else col.impute]))[0]
                out[:, j] = u
                if col.null_state:
                    missing[name] = gone.astype(np.float64)
            elif isinstance(col, Categorical):
                out[:, j] = codes(s, col)
            else:
                known = s.is_in([0, 1]).fill_null(False).to_numpy()
                vals = s.fill_null(0).to_numpy().astype(np.float64)
                null_code = (
                    2.0
                    if col.null == NULL_CATEGORY
                    else (float(col.null) if isinstance(col.null, bool) else 0.0)
                )
                out[:, j] = np.where(known, vals, null_code)
        return out

    def _readers(self, dtypes: Mapping[str, Any]) -> list[pl.Expr]:
        """One expression per column reading its values (numbers, label codes or 0/1; null
        where the value does not read), from the column's dtype; total and row by row."""
        exprs = []
        for name, col in self._columns.items():
            dtype = dtypes.get(name, pl.Null)
            if isinstance(col, Numeric):
                exprs.append(value_expr(name, dtype, col).alias(name))
            elif isinstance(col, Categorical) and _text_labels_only(dtype, col):
                exprs.append(text_codes(name, col).alias(name))
            elif isinstance(col, Categorical):
                exprs.append(code_expr(name, dtype, col).alias(name))
            else:
                exprs.append(boolean_expr(name, dtype).alias(name))
        return exprs

    def decode(self, U: Any) -> pl.DataFrame:
        """Encoded points back to user units and labels (Float64, Int64 for integer columns,
        Date/Datetime, Enum of the public labels, Boolean), one column per coordinate: a numeric
        column with a null state is null where the state is on, and the state is a Boolean
        column ``name:null`` beside it (so a query can name either).

        >>> Schema({"x": (0, 10), "c": ["a", "b"]}).decode([[0.25, 1.0]]).to_dicts()
        [{'x': 2.5, 'c': 'b'}]
        """
        U = np.atleast_2d(np.asarray(U, dtype=np.float64))
        if U.shape[1] != len(self):
            raise ValueError(f"points have {U.shape[1]} coordinates but the schema has {len(self)} columns")
        index = {c: j for j, c in enumerate(self._coords)}
        cols: dict[str, pl.Series] = {}
        for name, col in self._columns.items():
            u = U[:, index[name]]
            if isinstance(col, Numeric):
                x = col.value(u)
                series = _numeric_series(name, x, col)
                cols[name] = series
                if col.null_state:  # the column null where its state is on, and the state itself
                    gone = U[:, index[name + NULL_SUFFIX]] >= 0.5
                    cols[name] = series.scatter(np.flatnonzero(gone), None) if gone.any() else series
                    cols[name + NULL_SUFFIX] = pl.Series(name + NULL_SUFFIX, gone, dtype=pl.Boolean)
            elif isinstance(col, Categorical):
                k = np.clip(np.rint(u), 0, col.cardinality - 1).astype(np.int64)
                levels = col.levels
                cols[name] = pl.Series(name, [levels[i] for i in k], dtype=pl.Enum(list(col.labels)))
            else:
                k = np.clip(np.rint(u), 0, col.cardinality - 1).astype(np.int64)
                cols[name] = pl.Series(name, [None if i == 2 else bool(i) for i in k], dtype=pl.Boolean)
        return pl.DataFrame(cols)

    def to_unit(self, column: str, values: Any) -> np.ndarray:
        """User-unit values of a numeric column as encoded coordinates (clipped to [0, 1]; dates
        and datetimes as ISO text or date objects too); labels of a coded column as codes."""
        col = self[column]
        if isinstance(col, Numeric):
            if col.time is not None:
                values = [epoch_number(v, col.time) for v in np.atleast_1d(np.asarray(values, dtype=object))]
            return col.unit(values)
        if isinstance(col, Categorical):
            return np.array([float(col.labels.index(str(v))) for v in np.atleast_1d(values)])
        return np.asarray(values, dtype=np.float64)

    def as_numbers(self, column: str, values: Any) -> np.ndarray:
        """Points of a numeric column in its units as numbers: dates and datetimes (ISO text,
        ``datetime`` or ``numpy.datetime64``) as days/seconds since 1970-01-01, the way the
        column is released; other columns' values as floats.

        >>> Schema({"d": Date("2020-01-01", "2020-12-31")}).as_numbers("d", ["2020-01-02", "1970-01-11"]).tolist()
        [18263.0, 10.0]
        """
        col = self[column]
        time = col.time if isinstance(col, Numeric) else None
        if time is None:
            return np.atleast_1d(np.asarray(values, dtype=np.float64))
        out = []
        for v in np.atleast_1d(np.asarray(values, dtype=object)):
            if isinstance(v, np.datetime64):
                v = v.astype("datetime64[us]").item()
            out.append(epoch_number(v, time))
        return np.asarray(out, dtype=np.float64)

    def from_unit(self, column: str, u: Any) -> np.ndarray:
        """Encoded coordinates of a numeric column back to user units."""
        col = self[column]
        if not isinstance(col, Numeric):
            raise ValueError(f"column {column!r} is not numeric")
        return col.value(u)


def _numeric_series(name: str, x: np.ndarray, col: Numeric) -> pl.Series:
    """User-unit values as a Series: Float64, Int64 for integer columns, Date/Datetime for time."""
    if col.time == "date":
        return pl.Series(name, np.rint(x).astype(np.int32)).cast(pl.Date)
    if col.time == "datetime":
        return pl.Series(name, np.rint(x * 1e6).astype(np.int64)).cast(pl.Datetime("us"))
    return pl.Series(name, np.rint(x).astype(np.int64)) if col.integer else pl.Series(name, x)


def _text_labels_only(dtype: Any, col: Categorical) -> bool:
    """A String column whose labels include no number: :func:`code_expr` then matches the
    value's text to the labels exactly, and nothing else."""
    return dtype == pl.String and not col.numeric_labels


def text_codes(name: str, col: Categorical) -> pl.Expr:
    """:func:`code_expr` of a String column whose labels include no number, by Polars' Enum cast:
    the same Int64 codes (a label's position where the text equals it; null for nulls and for
    text that is no label, which the non-strict cast never refuses), about 2x faster.

    >>> pl.DataFrame({"c": ["b", "zz", None, "a"]}).select(text_codes("c", Categorical(["a", "b"]))).to_series().to_list()
    [1, None, None, 0]
    """
    return pl.col(name).cast(pl.Enum(list(col.labels)), strict=False).to_physical().cast(pl.Int64)


def sum_problems(parts: Iterable[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    """Counts of :meth:`Schema.problems` added up, column by column and kind by kind (e.g. over
    the partitions of a cluster table), for :meth:`Schema.refuse`.

    >>> sum_problems([{"x": {"null": 1}}, {"x": {"null": 2, "inf": 1}, "c": {"unknown": 0}}])
    {'x': {'null': 3, 'inf': 1}, 'c': {'unknown': 0}}
    """
    totals: dict[str, dict[str, int]] = {}
    for part in parts:
        for column, kinds in part.items():
            into = totals.setdefault(column, {})
            for kind, v in kinds.items():
                into[kind] = into.get(kind, 0) + int(v)
    return totals


def _no_null_rule(col: Column) -> bool:
    if isinstance(col, Numeric):
        return col.impute is None and col.null is None
    return col.null is None


def schema_draft(source: str | os.PathLike[str]) -> dict[str, Any]:
    """A schema file's draft from a table file's **column list** only: names, and a type guessed
    from each column's declared dtype (Parquet and IPC files declare them in their metadata; a
    CSV file has only its header line, so every type is left to fill in). Ranges and labels are
    placeholders: they would come from the data and stop being public, so they are never read;
    nor are dictionaries or Enum categories. A release refuses the draft until a person fills them in.

    >>> import tempfile, pathlib, polars as pl
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.parquet"
    >>> pl.DataFrame({"age": [30], "city": ["x"], "vip": [True], "w": [1.5]}).write_parquet(path)
    >>> draft = schema_draft(path)
    >>> draft["columns"]["age"], draft["columns"]["vip"]
    ({'type': 'numeric', 'range': ['FILL IN: lower', 'FILL IN: upper'], 'integer': True}, {'type': 'boolean'})
    >>> Schema.from_dict(draft)
    Traceback (most recent call last):
    ...
    ValueError: column 'age': 'range' still holds the draft's placeholder (FILL IN ...); ...
    """
    path = Path(source)
    suffix = path.suffix.lower()
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if suffix in (".parquet", ".pq", ".ipc", ".arrow", ".feather"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if suffix in (".parquet", ".pq"):
            arrow_schema = pq.read_schema(path)  # the footer: names and types, no values
        else:
            with pa.memory_map(str(path)) as f:
                arrow_schema = pa.ipc.open_file(f).schema
        columns = {field.name: _draft_column(field.type) for field in arrow_schema}
    elif suffix == ".csv":
        import csv

        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            header = next(csv.reader(f), [])  # the first line only
        columns = {
            name: {"type": f"{PLACEHOLDER}: numeric, categorical or boolean (a CSV file declares no types)"}
            for name in header
        }
    else:
        raise ValueError(f"{path.name}: unknown file type; expected .csv, .parquet or .ipc/.arrow")
    if not columns:
        raise ValueError(f"{path}: no columns found")
    return {
        "note": (
            "A draft written from the file's column list only; no value was read. Replace every "
            f"'{PLACEHOLDER}' with what you know of the column without looking at the data (public ranges, "
            "every public label, the type), give null rules where columns may be empty, and drop the "
            "columns you will not release. A release refuses the file until then."
        ),
        "columns": columns,
    }


def _draft_column(arrow_type: Any) -> dict[str, Any]:
    """A column's draft from its Arrow type (never from its values)."""
    import pyarrow.types as pt

    if pt.is_boolean(arrow_type):
        return {"type": "boolean"}
    if pt.is_integer(arrow_type):
        return {
            "type": "numeric",
            "range": [f"{PLACEHOLDER}: lower", f"{PLACEHOLDER}: upper"],
            "integer": True,
        }
    if pt.is_floating(arrow_type) or pt.is_decimal(arrow_type):
        return {"type": "numeric", "range": [f"{PLACEHOLDER}: lower", f"{PLACEHOLDER}: upper"]}
    if pt.is_string(arrow_type) or pt.is_large_string(arrow_type) or pt.is_dictionary(arrow_type):
        return {"type": "categorical", "labels": [f"{PLACEHOLDER}: every public label"]}
    if pt.is_date(arrow_type):
        return {
            "type": "date",
            "range": [f"{PLACEHOLDER}: first date (2000-01-01)", f"{PLACEHOLDER}: last date"],
        }
    if pt.is_timestamp(arrow_type):
        return {
            "type": "datetime",
            "range": [f"{PLACEHOLDER}: first time (2000-01-01T00:00:00)", f"{PLACEHOLDER}: last time"],
        }
    return {
        "type": f"{PLACEHOLDER}: numeric, categorical, boolean, date or datetime (declared as {arrow_type})"
    }
