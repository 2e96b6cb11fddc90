"""Queries as the analyst types them: SQL predicates and Polars expressions, checked against the
public schema before anything is evaluated.

A label typo in a comparison (``pl.col("region") == "Souht"``) would otherwise select no row and
answer 0, indistinguishable from an empty group. :func:`check_labels` walks the expression tree
with Polars' public ``Expr.meta`` API and refuses a string literal compared with a categorical
column that is not one of the column's public labels, naming the labels.

**What it checks.** A node whose two inputs are a column of a categorical column and a literal,
and which is one of ``col == lit``, ``col != lit`` (either side), ``col.eq_missing(lit)``,
``col.ne_missing(lit)`` or ``col.is_in([...])``, anywhere in the tree (under ``&``, ``|``, ``~``,
``.alias``, ``pl.when``…); SQL's ``=``, ``<>``, ``IN`` and ``NOT IN`` parse to these. **Not
checked:** a column transformed before the comparison (``pl.col("region").cast(pl.String) ==
"x"``, ``.str.to_lowercase()``), string functions (``.str.contains``), ordering comparisons, and
literals built from other expressions: those evaluate as written. A tree the ``meta`` API cannot
take apart is left unchecked, never refused.

Only the public schema and the query are read: nothing here looks at the sketch's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from ..schema import Categorical, Schema

__all__ = ["check_labels", "sql_predicate", "as_expressions"]


def sql_predicate(text: str, columns: Sequence[str], schema: Schema | None = None) -> pl.Expr:
    """A SQL predicate or expression over ``columns`` as a Polars expression (``pl.sql_expr``),
    its columns and (with a schema) its labels checked.

    >>> sql_predicate("age > 30 AND sex = 'F'", ["age", "sex"]).meta.root_names()
    ['age', 'sex']
    >>> sql_predicate("height > 2", ["age"])
    Traceback (most recent call last):
        ...
    ValueError: the query 'height > 2' names columns ['height'] that are not in the sketch; its columns are ['age']

    :raises ValueError: for text Polars cannot parse as SQL, unknown columns, or a label not
        among a categorical column's public labels
    """
    try:
        expr = pl.sql_expr(text)
    except Exception:  # noqa: BLE001 - Polars raises several SQL error types
        raise ValueError(
            f"the query {text!r} is not a SQL predicate over the columns {list(columns)} "
            "(e.g. \"age > 30 AND region = 'South'\")"
        ) from None
    try:
        names = expr.meta.root_names()
    except Exception:  # noqa: BLE001 - an expression the meta API cannot read: evaluated as is
        names = []
    unknown = [c for c in dict.fromkeys(names) if c not in columns]
    if unknown:
        raise ValueError(
            f"the query {text!r} names columns {unknown} that are not in the sketch; its columns are {list(columns)}"
        )
    if schema is not None:
        check_labels(expr, schema)
    return expr


def as_expressions(f: Any, columns: Sequence[str], schema: Schema | None = None) -> Any:
    """A query with SQL text turned into Polars expressions (:func:`sql_predicate`) and every
    expression's labels checked (:func:`check_labels`); anything else (a function) unchanged.

    >>> as_expressions("x < 0.5", ["x"]).meta.root_names()
    ['x']
    """
    if isinstance(f, str):
        return sql_predicate(f, columns, schema)
    if isinstance(f, pl.Expr):
        if schema is not None:
            check_labels(f, schema)
        return f
    if isinstance(f, (list, tuple)) and f and all(isinstance(e, (str, pl.Expr)) for e in f):
        return [as_expressions(e, columns, schema) for e in f]
    return f


def _literal_strings(expr: pl.Expr) -> list[str]:
    """The string values of a literal expression (a list literal flattened); [] for others."""
    values = pl.select(expr.alias("v")).to_series()
    if isinstance(values.dtype, pl.List):
        values = values.explode()
    if values.dtype not in (pl.String, pl.Categorical) and not isinstance(values.dtype, pl.Enum):
        return []
    return [v for v in values.cast(pl.String).to_list() if v is not None]


def _comparison(node: pl.Expr, column: pl.Expr, literal: pl.Expr) -> bool:
    """Whether ``node`` is an equality, inequality or membership test of ``column`` and ``literal``."""
    forms = (
        column == literal,
        column != literal,
        literal == column,
        literal != column,
        column.eq_missing(literal),
        column.ne_missing(literal),
        column.is_in(literal),
    )
    if any(node.meta.eq(form) for form in forms):
        return True
    # SQL's IN may parse to a function of its own (Polars 2: ``sql_is_in``): rebuild it from SQL
    values = _literal_strings(literal)
    if not values:
        return False
    name = column.meta.output_name().replace('"', '""')
    listed = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return node.meta.eq(pl.sql_expr(f'"{name}" IN ({listed})'))


def check_labels(expr: pl.Expr, schema: Schema) -> None:
    """Refuse a string compared with a categorical column (``==``, ``!=``, ``is_in``; SQL ``=``,
    ``<>``, ``IN``) that is not one of its public labels. See the module's text for what is
    checked and what is not.

    >>> import opendp_sketch as dps
    >>> schema = dps.Schema({"age": (0, 99), "region": ["North", "South"]})
    >>> check_labels((pl.col("region") == "South") & (pl.col("age") > 30), schema)
    >>> check_labels(pl.col("region").is_in(["North", "Souht"]), schema)
    Traceback (most recent call last):
        ...
    ValueError: 'Souht' is not a label of column 'region': its labels are ['North', 'South']

    :raises ValueError: naming the column and its labels
    """
    labels: dict[str, tuple[str, ...]] = {}
    for name in schema.columns:
        col = schema[name]
        if isinstance(col, Categorical):
            labels[name] = col.labels
    if not labels:
        return
    found = _first_unknown_label(expr, labels)
    if found is not None:
        value, name = found
        raise ValueError(f"{value!r} is not a label of column {name!r}: its labels are {list(labels[name])}")


def _first_unknown_label(expr: pl.Expr, labels: dict[str, tuple[str, ...]]) -> tuple[str, str] | None:
    """``(value, column)`` of the first compared string that is not a label, or None."""
    try:
        stack, seen = [expr], 0
        while stack and seen < 10_000:  # a bound on pathological trees: the rest stays unchecked
            node = stack.pop()
            seen += 1
            inputs = node.meta.pop()
            if len(inputs) == 2:
                for column, literal in (inputs, inputs[::-1]):
                    if not (column.meta.is_column() and literal.meta.is_literal()):
                        continue
                    name = column.meta.output_name()
                    if name in labels and _comparison(node, column, literal):
                        for v in _literal_strings(literal):
                            if v not in labels[name]:
                                return v, name
            stack.extend(inputs)
    except Exception:  # noqa: BLE001 - a tree the meta API cannot take apart stays unchecked
        return None
    return None


def label_shares(labels: pl.Series, weights: Any) -> pl.DataFrame:
    """The weighted share of each label of a decoded Enum or Boolean column, ``(column, share)``,
    labels in their public order and nulls last, only labels some point holds. Summed in numpy in
    the points' order: the same answer every time (Polars' parallel group-by adds in any order).

    >>> label_shares(pl.Series("c", ["b", "a", None, "b"], dtype=pl.Enum(["a", "b"])), [0.1, 0.2, 0.3, 0.4]).rows()
    [('a', 0.2), ('b', 0.5), (None, 0.3)]
    """
    if labels.dtype == pl.Boolean:
        levels: list[Any] = [False, True, None]
        codes = labels.cast(pl.Int64).fill_null(2).to_numpy()
    else:  # an Enum of the public labels, nulls for a null category
        levels = [*labels.dtype.categories.to_list(), None]  # type: ignore[attr-defined]
        codes = labels.to_physical().cast(pl.Int64).fill_null(len(levels) - 1).to_numpy()
    sums = np.bincount(codes, weights=np.asarray(weights, dtype=np.float64), minlength=len(levels))
    seen = np.bincount(codes, minlength=len(levels)) > 0
    return pl.DataFrame(
        {
            labels.name: pl.Series(labels.name, [v for v, k in zip(levels, seen) if k], dtype=labels.dtype),
            "share": sums[seen],
        }
    )
