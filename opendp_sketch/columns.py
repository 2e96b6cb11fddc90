"""The columns of a public schema: each kind with its public domain and null rule, and the
spec layouts that name them (Python shorthand, dicts and JSON), refused key by key.

* :class:`Numeric`: a public range, linear or log scale, integer or not, and a null rule
  (``impute=v`` or ``null="category"``: nulls as a state of their own); :func:`Date` and
  :func:`Datetime` are numeric columns in days or seconds since 1970-01-01;
* :class:`Categorical`: public labels and a null rule;
* :class:`Boolean`: true/false and a null rule.

:class:`~opendp_sketch.Schema` puts them together; :mod:`opendp_sketch.readers` reads their
values from any column type.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

__all__ = ["Numeric", "Categorical", "Boolean", "Date", "Datetime", "Column"]

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
            v = np.asarray(values, dtype=np.float64)
            t = np.subtract(v, self.lower, out=np.empty(v.shape))  # a fresh array, then in place
            t /= self.width
            np.clip(t, 0.0, 1.0, out=t)
        if self.scale == "log":
            return np.log1p(t / LOG_KNEE) / _LOG_SPAN
        return t if t.ndim else t[()]  # a scalar for a scalar, as numpy's expressions give

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
        if self.time is None or np.asarray(values).dtype.kind == "M":  # not a time, or already one
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


def epoch_number(value: Any, time: str) -> float:
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

    >>> from opendp_sketch.schema import Schema
    >>> col = Date("2020-01-01", "2020-12-31")
    >>> col.width, col.to_dict()
    (365.0, {'type': 'date', 'range': ['2020-01-01', '2020-12-31']})
    >>> Schema({"d": col}).decode([[0.5]]).to_series().to_list()
    [datetime.date(2020, 7, 1)]
    """
    return Numeric(
        epoch_number(lower, "date"),
        epoch_number(upper, "date"),
        integer=True,
        impute=None if impute is None else epoch_number(impute, "date"),
        null=null,
        time="date",
    )


def Datetime(lower: Any, upper: Any, *, impute: Any = None, null: str | None = None) -> Numeric:
    """A datetime column with a public range (ISO text or ``datetime.datetime``; naive times are
    read as UTC): released as seconds since 1970-01-01, answered as datetimes (microseconds).

    >>> from opendp_sketch.schema import Schema
    >>> col = Datetime("2024-01-01T00:00", "2024-01-02T00:00")
    >>> col.width
    86400.0
    >>> Schema({"t": col}).decode([[0.25]]).to_series().to_list()
    [datetime.datetime(2024, 1, 1, 6, 0)]
    """
    return Numeric(
        epoch_number(lower, "datetime"),
        epoch_number(upper, "datetime"),
        impute=None if impute is None else epoch_number(impute, "datetime"),
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
COLUMN_KEYS = {
    "numeric": ("type", "range", "integer", "impute", "scale", "null"),
    "date": ("type", "range", "impute", "null"),
    "datetime": ("type", "range", "impute", "null"),
    "categorical": ("type", "labels", "null"),
    "boolean": ("type", "null"),
}
#: what a schema draft writes where only a person can say (a release refuses it until replaced)
PLACEHOLDER = "FILL IN"


def check_keys(keys: Iterable[Any], allowed: Sequence[str], where: str) -> None:
    """Refuse keys outside ``allowed`` before anything is built, naming each and its closest
    valid spelling (a misspelt key would otherwise be ignored while the budget is spent).

    >>> check_keys(["type", "range", "integr"], COLUMN_KEYS["numeric"], "column 'age'")
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


def named_column(name: str, spec: Any) -> Column:
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
    if kind in COLUMN_KEYS:
        check_keys(spec, COLUMN_KEYS[kind], f"column {name!r}")
    elif "type" not in spec:
        import difflib

        near = [k for k in spec if difflib.get_close_matches(str(k), ["type"], n=1, cutoff=0.5)]
        hint = f" (is {near[0]!r} a misspelt 'type'?)" if near else ""
        raise ValueError(
            f"column {name!r}: a dict spec needs \"type\": 'numeric', 'categorical', 'boolean', 'date' or 'datetime'{hint}"
        )
    else:
        import difflib

        close = difflib.get_close_matches(str(kind), list(COLUMN_KEYS), n=1, cutoff=0.5)
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
