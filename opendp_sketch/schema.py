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

import datetime as dt
import functools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
import polars as pl

from .streaming import DEFAULT_BATCH_ROWS, stream_frames

__all__ = ["Schema", "Numeric", "Categorical", "Boolean", "Date", "Datetime"]

#: the null rule "null is a category of its own"
NULL_CATEGORY = "category"
#: coordinate scales of a numeric column
SCALES = ("linear", "log")
#: kinds of time a numeric column may hold (days or seconds since 1970-01-01)
TIMES = ("date", "datetime")
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
#: suffix of the companion coordinate that releases a numeric column's null state
NULL_SUFFIX = ":null"
#: public knee of the log scale, as a share of the range: resolution near ``lower``
LOG_KNEE = 1e-3
_LOG_SPAN = math.log1p(1.0 / LOG_KNEE)
#: integer columns with at most this many values are decoded on their integers
MAX_INTEGER_LEVELS = 256
_MAX_LABELS = 1 << 16


@dataclass(frozen=True)
class Numeric:
    """A numeric column with a public range; ``impute`` (inside the range) replaces nulls/NaN.

    ``scale="log"`` declares a skewed column (counts, incomes, populations: most rows near
    ``lower``, a long tail towards ``upper``). Its coordinate is then logarithmic in the distance
    from ``lower``, ``u = log1p(t / k) / log1p(1 / k)`` with ``t = (x − lower)/(upper − lower)``
    and the public knee ``k = 10⁻³``, so equal bins of ``u`` are narrow where the rows are and
    wide in the tail. It is a fixed monotone map of each value alone: the sensitivity of every
    map on ``[0, 1]`` is unchanged, and answers come back through its inverse.

    >>> Numeric(18, 90, integer=True, impute=40).width
    72.0
    >>> col = Numeric(0, 5000, scale="log")
    >>> [round(float(v), 3) for v in col.unit([0, 5, 50, 500, 5000])]
    [0.0, 0.1, 0.347, 0.668, 1.0]
    >>> [round(float(v), 6) for v in col.value(col.unit([0, 5, 50, 500, 5000]))]
    [0.0, 5.0, 50.0, 500.0, 5000.0]
    """

    lower: float
    upper: float
    integer: bool = False
    impute: float | None = None
    scale: str = "linear"
    null: str | None = None
    time: str | None = None

    def __post_init__(self) -> None:
        if self.null is not None and self.null != NULL_CATEGORY:
            raise ValueError(
                f"null ({self.null!r}) must be None or {NULL_CATEGORY!r} (nulls as a public state of their "
                "own); to read nulls as a value, give impute=v"
            )
        if self.null is not None and self.impute is not None:
            raise ValueError(
                "give either impute=v (nulls read as v) or null='category' (nulls kept apart), not both"
            )
        if self.time is not None and self.time not in TIMES:
            raise ValueError(f"time ({self.time!r}) must be None or one of {list(TIMES)}")
        for name in ("lower", "upper"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float, np.integer, np.floating))
                or not math.isfinite(v)
            ):
                raise ValueError(f"{name} ({v!r}) must be a finite number")
        if not self.lower < self.upper or not math.isfinite(float(self.upper) - float(self.lower)):
            raise ValueError(
                f"range ({self.lower!r}, {self.upper!r}) must have lower < upper and a finite width"
            )
        if not isinstance(self.integer, bool):
            raise ValueError(f"integer ({self.integer!r}) must be True or False")
        if self.scale not in SCALES:
            raise ValueError(f"scale ({self.scale!r}) must be one of {list(SCALES)}")
        if self.impute is not None:
            v = self.impute
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float, np.integer, np.floating))
                or not math.isfinite(v)
            ):
                raise ValueError(f"impute ({v!r}) must be a finite number")
            if not self.lower <= v <= self.upper:
                raise ValueError(
                    f"impute ({v!r}) must lie in the column's public range [{self.lower}, {self.upper}]"
                )

    @property
    def width(self) -> float:
        return float(self.upper) - float(self.lower)

    @property
    def cardinality(self) -> None:
        return None

    def unit(self, values: Any) -> np.ndarray:
        """Values in user units → coordinates in ``[0, 1]`` (clipped; NaN stays NaN)."""
        with np.errstate(invalid="ignore", over="ignore"):
            t = np.clip((np.asarray(values, dtype=np.float64) - self.lower) / self.width, 0.0, 1.0)
        if self.scale == "log":
            return np.log1p(t / LOG_KNEE) / _LOG_SPAN
        return t

    def value(self, u: Any) -> np.ndarray:
        """Coordinates → user units (unrounded), the inverse of :meth:`unit` on ``[0, 1]``."""
        t = np.clip(np.asarray(u, dtype=np.float64), 0.0, 1.0)
        if self.scale == "log":
            t = np.clip(np.expm1(t * _LOG_SPAN) * LOG_KNEE, 0.0, 1.0)
        return self.lower + t * self.width

    def as_time(self, values: Any) -> Any:
        """Numbers of a date/datetime column (days/seconds since 1970-01-01) as
        ``numpy.datetime64`` (days or microseconds); other columns' values as they are.

        >>> Date("2020-01-01", "2020-12-31").as_time(18263.0)
        np.datetime64('2020-01-02')
        """
        if self.time is None:
            return values
        x = np.asarray(values, dtype=np.float64)
        out = (
            np.rint(x).astype("datetime64[D]")
            if self.time == "date"
            else np.rint(x * 1e6).astype("datetime64[us]")
        )
        return out if np.ndim(values) else out[()]

    @property
    def null_state(self) -> bool:
        """Whether nulls are a public state of their own (released as a companion coordinate)."""
        return self.null == NULL_CATEGORY

    def to_dict(self) -> dict[str, Any]:
        if self.time is not None:
            out: dict[str, Any] = {
                "type": self.time,
                "range": [_time_text(self.lower, self.time), _time_text(self.upper, self.time)],
            }
            if self.impute is not None:
                out["impute"] = _time_text(self.impute, self.time)
        else:
            out = {"type": "numeric", "range": [self.lower, self.upper]}
            if self.integer:
                out["integer"] = True
            if self.impute is not None:
                out["impute"] = self.impute
        if self.scale != "linear":
            out["scale"] = self.scale
        if self.null is not None:
            out["null"] = self.null
        return out


def _epoch(value: Any, time: str) -> float:
    """A public date/datetime bound (ISO text, ``datetime.date``/``datetime``, or a number
    already in days/seconds since 1970-01-01) as days (dates) or seconds (datetimes, UTC)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            value = (
                dt.datetime.fromisoformat(value.strip())
                if time == "datetime"
                else dt.date.fromisoformat(value.strip()[:10])
            )
        except ValueError:
            raise ValueError(
                f"{value!r} is not an ISO {time} ({'2024-01-31T12:00:00' if time == 'datetime' else '2024-01-31'})"
            ) from None
    if isinstance(value, dt.datetime):
        if time == "date":
            return float(value.date().toordinal() - _EPOCH_DAY)
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return aware.timestamp()
    if isinstance(value, dt.date):
        days = float(value.toordinal() - _EPOCH_DAY)
        return days if time == "date" else days * 86400.0
    raise ValueError(f"{value!r} is not a {time}: give ISO text or a datetime.{time}")


def _time_text(value: float, time: str) -> str:
    """Days/seconds since 1970-01-01 as ISO text (the JSON layout of a time column's range)."""
    if time == "date":
        return dt.date.fromordinal(int(round(value)) + _EPOCH_DAY).isoformat()
    return (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=float(value))).isoformat()


def Date(lower: Any, upper: Any, *, impute: Any = None, null: str | None = None) -> Numeric:
    """A date column with a public range (ISO text or ``datetime.date``): released as whole days
    since 1970-01-01, answered as dates.

    >>> col = Date("2020-01-01", "2020-12-31")
    >>> col.width, col.to_dict()
    (365.0, {'type': 'date', 'range': ['2020-01-01', '2020-12-31']})
    >>> Schema({"d": col}).decode([[0.5]]).to_series().to_list()
    [datetime.date(2020, 7, 1)]
    """
    return Numeric(
        _epoch(lower, "date"),
        _epoch(upper, "date"),
        integer=True,
        impute=None if impute is None else _epoch(impute, "date"),
        null=null,
        time="date",
    )


def Datetime(lower: Any, upper: Any, *, impute: Any = None, null: str | None = None) -> Numeric:
    """A datetime column with a public range (ISO text or ``datetime.datetime``; naive times are
    read as UTC): released as seconds since 1970-01-01, answered as datetimes (microseconds).

    >>> col = Datetime("2024-01-01T00:00", "2024-01-02T00:00")
    >>> col.width
    86400.0
    >>> Schema({"t": col}).decode([[0.25]]).to_series().to_list()
    [datetime.datetime(2024, 1, 1, 6, 0)]
    """
    return Numeric(
        _epoch(lower, "datetime"),
        _epoch(upper, "datetime"),
        impute=None if impute is None else _epoch(impute, "datetime"),
        null=null,
        time="datetime",
    )


@dataclass(frozen=True)
class Categorical:
    """A column with public labels. ``null``: ``None`` (refuse nulls), ``"category"`` (null is a
    category of its own, after the labels) or one of the labels (nulls are read as it).

    >>> Categorical(["F", "M"], null="category").cardinality
    3
    """

    labels: tuple[str, ...]
    null: str | None = None

    def __init__(self, labels: Sequence[Any], null: str | None = None) -> None:
        if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
            raise ValueError(f"labels ({labels!r}) must be a list of public labels")
        clean = tuple(str(v) for v in labels)
        if not clean or len(set(clean)) != len(clean) or len(clean) > _MAX_LABELS:
            raise ValueError(f"labels ({list(clean)[:10]}) must be 1 to {_MAX_LABELS} distinct values")
        if null is not None and null != NULL_CATEGORY and str(null) not in clean:
            raise ValueError(
                f"null ({null!r}) must be None, {NULL_CATEGORY!r} or one of the labels {list(clean)}"
            )
        object.__setattr__(self, "labels", clean)
        object.__setattr__(self, "null", None if null is None else str(null))

    @property
    def cardinality(self) -> int:
        return len(self.labels) + (self.null == NULL_CATEGORY)

    @functools.cached_property
    def numeric_labels(self) -> dict[float, int]:
        """``{number: code}`` of the labels that read as finite numbers (the first of equal ones),
        so a value matches them by number whatever its column's type; computed once per column,
        not per encoded batch.

        >>> Categorical(["7", "x", "7.0", "1e1"]).numeric_labels
        {7.0: 0, 10.0: 3}
        """
        out: dict[float, int] = {}
        for i, label in enumerate(self.labels):
            try:
                x = float(label)
            except ValueError:
                continue
            if math.isfinite(x):
                out.setdefault(x, i)
        return out

    @property
    def levels(self) -> list[str | None]:
        """The label of every code (``None`` for the null category)."""
        return [*self.labels, *([None] if self.null == NULL_CATEGORY else [])]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "categorical", "labels": list(self.labels)}
        if self.null is not None:
            out["null"] = self.null
        return out


@dataclass(frozen=True)
class Boolean:
    """A true/false column. ``null``: ``None``, ``"category"`` or ``True``/``False`` (impute).

    Booleans, numbers equal to 0 or 1 (a 0/1 float column with NaN for missing values reads as
    a boolean with nulls) and the text ``true``/``false``/``t``/``f``/``yes``/``no``/``0``/``1``
    read as its values; anything else is a null (or, on the curator's side, refused as an unknown
    value without a null rule).

    >>> Boolean(null="category").cardinality
    3
    """

    null: bool | str | None = None

    def __post_init__(self) -> None:
        if self.null is not None and self.null != NULL_CATEGORY and not isinstance(self.null, bool):
            raise ValueError(f"null ({self.null!r}) must be None, {NULL_CATEGORY!r}, True or False")

    @property
    def cardinality(self) -> int:
        return 2 + (self.null == NULL_CATEGORY)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "boolean"}
        if self.null is not None:
            out["null"] = self.null
        return out


Column = Union[Numeric, Categorical, Boolean]  # noqa: UP007 - a runtime alias on Python 3.10


def _column(name: str, spec: Any) -> Column:
    """A column from its shorthand: ``(lo, hi)`` numeric, a list of labels, ``bool``, or a dict."""
    if isinstance(spec, (Numeric, Categorical, Boolean)):
        return spec
    if spec is bool:
        return Boolean()
    if isinstance(spec, dict):
        return _column_from_dict(name, spec)
    if isinstance(spec, tuple) and len(spec) == 2:
        return Numeric(*spec)
    if (
        isinstance(spec, list)
        and len(spec) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in spec)
    ):
        return Numeric(*spec)  # the CLI's old layout: "name": [lower, upper]
    if isinstance(spec, (list, tuple)) and spec and all(isinstance(v, str) for v in spec):
        return Categorical(spec)
    if isinstance(spec, (list, tuple)):
        raise ValueError(
            f"column {name!r} needs public bounds [lower, upper] (two numbers) or public labels (strings), got {spec!r}"
        )
    raise ValueError(
        f"column {name!r}: {spec!r} is not a column spec; give (lower, upper), a list of labels, bool, "
        "or dps.Numeric / dps.Categorical / dps.Boolean"
    )


#: the keys each column type's spec may hold (anything else is refused, naming the closest)
_COLUMN_KEYS = {
    "numeric": ("type", "range", "integer", "impute", "scale", "null"),
    "date": ("type", "range", "impute", "null"),
    "datetime": ("type", "range", "impute", "null"),
    "categorical": ("type", "labels", "null"),
    "boolean": ("type", "null"),
}
#: the keys a schema's JSON/dict may hold at the top level
_SCHEMA_KEYS = ("columns", "order", "rows", "targets", "note")
#: what a schema draft writes where only a person can say (a release refuses it until replaced)
PLACEHOLDER = "FILL IN"


def _check_keys(keys: Iterable[Any], allowed: Sequence[str], where: str) -> None:
    """Refuse keys outside ``allowed`` before anything is built, naming each and its closest
    valid spelling (a misspelt key would otherwise be ignored while the budget is spent).

    >>> _check_keys(["type", "range", "integr"], _COLUMN_KEYS["numeric"], "column 'age'")
    Traceback (most recent call last):
    ...
    ValueError: column 'age': unknown key 'integr': did you mean 'integer'? (valid keys: type, range, integer, impute, scale, null)
    """
    import difflib

    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.5)
            hint = f": did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}: unknown key {key!r}{hint} (valid keys: {', '.join(allowed)})")


def _named_column(name: str, spec: Any) -> Column:
    """:func:`_column`, every refusal naming the column."""
    try:
        return _column(name, spec)
    except ValueError as e:
        if str(e).startswith("column "):
            raise
        raise ValueError(f"column {name!r}: {e}") from None


def _placeholders(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith(PLACEHOLDER)
    if isinstance(value, (list, tuple)):
        return any(_placeholders(v) for v in value)
    if isinstance(value, dict):
        return any(_placeholders(v) for v in value.values())
    return False


def _column_from_dict(name: str, spec: dict[str, Any]) -> Column:
    for key, value in spec.items():
        if _placeholders(value):
            raise ValueError(
                f"column {name!r}: {key!r} still holds the draft's placeholder ({PLACEHOLDER} ...); write "
                "what you know of the column without looking at the data (its public range, its labels, "
                "its type), or drop the column"
            )
    kind = spec.get("type")
    if kind in _COLUMN_KEYS:
        _check_keys(spec, _COLUMN_KEYS[kind], f"column {name!r}")
    elif "type" not in spec:
        import difflib

        near = [k for k in spec if difflib.get_close_matches(str(k), ["type"], n=1, cutoff=0.5)]
        hint = f" (is {near[0]!r} a misspelt 'type'?)" if near else ""
        raise ValueError(
            f"column {name!r}: a dict spec needs \"type\": 'numeric', 'categorical', 'boolean', 'date' or 'datetime'{hint}"
        )
    else:
        import difflib

        close = difflib.get_close_matches(str(kind), list(_COLUMN_KEYS), n=1, cutoff=0.5)
        hint = f": did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"column {name!r}: type ({kind!r}) must be 'numeric', 'categorical', 'boolean', 'date' or 'datetime'{hint}"
        )
    try:
        if kind == "numeric":
            lo, hi = spec["range"]
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and not lo < hi:
                raise ValueError(f"column {name!r}: range [{lo}, {hi}] must have lower < upper")
            return Numeric(
                lo,
                hi,
                integer=bool(spec.get("integer", False)),
                impute=spec.get("impute"),
                scale=spec.get("scale", "linear"),
                null=spec.get("null"),
            )
        if kind in TIMES:
            lo, hi = spec["range"]
            make = Date if kind == "date" else Datetime
            col = make(lo, hi, impute=spec.get("impute"), null=spec.get("null"))
            if not col.lower < col.upper:
                raise ValueError(f"column {name!r}: range [{lo}, {hi}] must have lower < upper")
            return col
        if kind == "categorical":
            return Categorical(spec["labels"], null=spec.get("null"))
        if kind == "boolean":
            return Boolean(null=spec.get("null"))
    except (KeyError, TypeError) as e:
        raise ValueError(f"column {name!r}: malformed spec {spec!r} ({type(e).__name__})") from None
    raise ValueError(f"column {name!r}: type ({kind!r}) must be 'numeric', 'categorical' or 'boolean'")


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
        self._columns: dict[str, Column] = {str(n): _named_column(str(n), s) for n, s in columns.items()}
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
            _check_keys(spec, _SCHEMA_KEYS, "schema")
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
                v = _value_expr(name, dtypes[name], col)
                exprs += [
                    (v.is_null() | v.is_nan()).sum().alias(f"{name}\0null"),
                    v.is_infinite().sum().alias(f"{name}\0inf"),
                    ((v < col.lower) | (v > col.upper)).sum().alias(f"{name}\0outside"),
                ]
            else:
                code = (
                    _code_expr(name, dtypes[name], col)
                    if isinstance(col, Categorical)
                    else _boolean_expr(name, dtypes[name])
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
                v = s.to_numpy().astype(np.float64, copy=True)
                fill = col.lower if col.impute is None else col.impute
                gone = np.isnan(v)
                v[gone] = fill
                out[:, j] = col.unit(v)
                if col.null_state:
                    missing[name] = gone.astype(np.float64)
            elif isinstance(col, Categorical):
                out[:, j] = _codes(s, col)
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
                exprs.append(_value_expr(name, dtype, col).alias(name))
            elif isinstance(col, Categorical):
                exprs.append(_code_expr(name, dtype, col).alias(name))
            else:
                exprs.append(_boolean_expr(name, dtype).alias(name))
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
                values = [_epoch(v, col.time) for v in np.atleast_1d(np.asarray(values, dtype=object))]
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
            out.append(_epoch(v, time))
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


def _safe_cast(s: pl.Series, dtype: Any) -> pl.Series:
    """``s`` cast to ``dtype`` value by value, never raising (it runs inside measurements):
    values that do not cast become null; Binary is decoded as UTF-8 first, invalid bytes
    replaced (Polars' own cast of one invalid value fails the whole column); a column whose type
    casts to nothing (lists, structs, objects) reads as all null — a property of its type, the
    same for every row.

    >>> _safe_cast(pl.Series([b"ok", b"\\xff"]), pl.String).to_list() == ["ok", "\\ufffd"]
    True
    >>> _safe_cast(pl.Series(["1.5", "x", None]), pl.Float64).to_list()
    [1.5, None, None]
    >>> _safe_cast(pl.Series([[1.0], [2.0]]), pl.Float64).to_list()
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


# -- reading one value, whatever its column's type ------------------------------------------
# Each reader below is a Polars expression built from the column's dtype. They are total (no
# value makes them fail) and agree across types: a value reads the same whether its column holds
# numbers, booleans or text (pandas and CSV readers change a column's type with one row, so a
# row's reading must not depend on the others). ``encode`` and the curator's ``problems`` use the
# same readers, so the curator's check counts exactly what a release reads.


def _is_text(dtype: Any) -> bool:
    return dtype in (pl.String, pl.Binary, pl.Categorical) or isinstance(dtype, pl.Enum)


def _text_expr(name: str, dtype: Any) -> pl.Expr:
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
        return c.map_batches(lambda s: _safe_cast(s, pl.String), return_dtype=pl.String)
    if _is_text(dtype) or dtype.is_numeric() or dtype == pl.Boolean:
        return c.cast(pl.String, strict=False)
    return pl.lit(None, pl.String)


def _number_expr(name: str, dtype: Any) -> pl.Expr:
    """The column as Float64: numbers as they are, booleans 1/0, text parsed (``true``/``false``
    as 1/0; what does not parse is null), anything else null.

    >>> pl.DataFrame({"x": ["1.5", "true", "x", None]}).select(_number_expr("x", pl.String)).to_series().to_list()
    [1.5, 1.0, None, None]
    """
    c = pl.col(name)
    if dtype.is_numeric() or dtype == pl.Boolean:
        return c.cast(pl.Float64, strict=False)
    if _is_text(dtype):
        text = _text_expr(name, dtype).str.strip_chars()
        flag = text.str.to_lowercase().replace_strict(
            {"true": 1.0, "false": 0.0}, default=None, return_dtype=pl.Float64
        )
        return flag.fill_null(text.cast(pl.Float64, strict=False))
    return pl.lit(None, pl.Float64)


#: the text layouts a time column reads (fixed, so a value's reading never depends on others')
_DATE_FORMATS = ("%Y-%m-%d",)
_DATETIME_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M")


def _time_expr(name: str, dtype: Any, time: str) -> pl.Expr:
    """A date/datetime column as Float64 days (dates) or seconds (datetimes, UTC) since
    1970-01-01: from Date and Datetime values, or from ISO text (a fixed list of layouts; a time
    zone in a Datetime type is respected); anything else reads as null, every row alike.

    >>> pl.DataFrame({"d": ["1970-01-03", "x", None]}).select(_time_expr("d", pl.String, "date")).to_series().to_list()
    [2.0, None, None]
    """
    c = pl.col(name)
    if dtype == pl.Date:
        days = c.cast(pl.Int32, strict=False).cast(pl.Float64)
        return days if time == "date" else days * 86400.0
    if isinstance(dtype, pl.Datetime):
        seconds = c.dt.epoch("us").cast(pl.Float64) / 1e6
        return (seconds / 86400.0).floor() if time == "date" else seconds
    if not _is_text(dtype):
        return pl.lit(None, pl.Float64)
    text = _text_expr(name, dtype).str.strip_chars()
    day = pl.coalesce([text.str.slice(0, 10).str.to_date(f, strict=False) for f in _DATE_FORMATS])
    days = day.cast(pl.Int32, strict=False).cast(pl.Float64)
    if time == "date":
        return days
    stamp = pl.coalesce([text.str.to_datetime(f, time_unit="us", strict=False) for f in _DATETIME_FORMATS])
    seconds = stamp.dt.epoch("us").cast(pl.Float64) / 1e6
    whole_day = pl.when(text.str.len_chars() == 10).then(days * 86400.0)
    return seconds.fill_null(whole_day)


def _value_expr(name: str, dtype: Any, col: Numeric) -> pl.Expr:
    """A numeric column's reader: numbers, or days/seconds for a time column."""
    return _number_expr(name, dtype) if col.time is None else _time_expr(name, dtype, col.time)


def _boolean_expr(name: str, dtype: Any) -> pl.Expr:
    """The column as Int64 0/1 (anything else null), from booleans, numbers or text; a number or
    its text is 0/1 only when it equals 0 or 1."""
    v = _number_expr(name, dtype)
    numeric = pl.when(v == 0.0).then(pl.lit(0, pl.Int64)).when(v == 1.0).then(pl.lit(1, pl.Int64))
    if not _is_text(dtype):
        return numeric.otherwise(pl.lit(None, pl.Int64))
    low = _text_expr(name, dtype).str.strip_chars().str.to_lowercase()
    named = low.replace_strict(_BOOLEAN_TEXT, default=None, return_dtype=pl.Int64)
    return named.fill_null(numeric.otherwise(pl.lit(None, pl.Int64)))


def _code_expr(name: str, dtype: Any, col: Categorical) -> pl.Expr:
    """The column's label codes (null for nulls and unknown labels): matched on the value's text,
    or, for labels that are numbers, on the value's number, so ``41``, ``41.0`` and ``"41"``
    read alike whatever the column's type."""
    numeric_labels = col.numeric_labels
    labels, codes = list(col.labels), list(range(len(col.labels)))
    if dtype.is_numeric() and numeric_labels:  # numbers: by number only ("41.0" is not text of 41)
        code = pl.lit(None, pl.Int64)
    else:
        code = _text_expr(name, dtype).replace_strict(labels, codes, default=None, return_dtype=pl.Int64)
    if numeric_labels:
        by_number = _number_expr(name, dtype).replace_strict(
            list(numeric_labels), list(numeric_labels.values()), default=None, return_dtype=pl.Int64
        )
        code = code.fill_null(by_number)
    return code


def _codes(codes: pl.Series, col: Categorical) -> np.ndarray:
    """Label codes with nulls (nulls and unknown labels) filled by the null rule (the null
    category, the imputed label, or code 0 when there is no rule)."""
    if col.null == NULL_CATEGORY:
        fill = len(col.labels)
    elif col.null is not None:
        fill = col.labels.index(col.null)
    else:
        fill = 0
    return codes.fill_null(fill).to_numpy().astype(np.float64)


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
