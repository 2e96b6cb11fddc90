"""``opendp_sketch.estimators.queries`` called directly: SQL text to Polars (columns checked,
parse errors), the label check on each comparison form (``eq_missing``, ``ne_missing``, Series and
quoted labels, nested), what is left unchecked, and ``as_expressions`` on every kind of query.
The typo forms M2M refuses end to end are in ``tests/unit/estimators/test_m2m.py``."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.estimators.queries import as_expressions, check_labels, sql_predicate

SCHEMA = dps.Schema({"age": (0, 99), "region": ["North", "O'Hare", "South"], "y": ["no", "yes"]})
LABELS = r"its labels are \['North', \"O'Hare\", 'South'\]"


def _frame() -> pl.DataFrame:
    return pl.DataFrame({"age": [20, 40, 60, 80], "region": ["North", "O'Hare", "South", "North"]})


# -- sql_predicate ----------------------------------------------------------------------------------
def test_sql_predicate_evaluates_like_the_polars_expression() -> None:
    expr = sql_predicate("age >= 40 AND region <> 'North'", ["age", "region"], SCHEMA)
    assert sorted(expr.meta.root_names()) == ["age", "region"]
    assert _frame().filter(expr)["age"].to_list() == [40, 60]
    quoted = sql_predicate("region IN ('North', 'O''Hare')", ["age", "region"], SCHEMA)
    assert _frame().filter(quoted)["age"].to_list() == [20, 40, 80]


def test_sql_predicate_without_a_schema_checks_columns_only() -> None:
    expr = sql_predicate("region = 'Nowhere'", ["region"])
    assert _frame().filter(expr).height == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("height > 2", r"^the query 'height > 2' names columns \['height'\] that are not in the sketch; "),
        ("age > 1 AND w < 2 AND w > 0 AND v = 1", r"names columns \['w', 'v'\] that are not in the sketch"),
        (
            "age >>>> 2",
            r"^the query 'age >>>> 2' is not a SQL predicate over the columns \['age', 'region'\]",
        ),
        ("", r"is not a SQL predicate"),
    ],
)
def test_sql_predicate_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sql_predicate(text, ["age", "region"])


@pytest.mark.parametrize(
    "text, bad",
    [
        ("region IN ('North', 'O''Harre')", "O'Harre"),
        ("age > 3 OR region = 'Nrth'", "Nrth"),
        ("NOT (region = 'x')", "x"),
        ("region NOT IN ('South', 'Sout')", "Sout"),
    ],
)
def test_sql_predicate_checks_labels_with_a_schema(text: str, bad: str) -> None:
    with pytest.raises(ValueError, match=rf"^{bad!r} is not a label of column 'region': {LABELS}$"):
        sql_predicate(text, ["age", "region"], SCHEMA)
    assert isinstance(sql_predicate(text, ["age", "region"]), pl.Expr)  # no schema: no label check


# -- check_labels -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expr",
    [
        pl.col("region").eq_missing("Nort"),
        pl.col("region").ne_missing("Nort"),
        pl.col("region").is_in(pl.Series(["North", "Nort"])),
        pl.lit("Nort") != pl.col("region"),
        pl.col("age").filter(pl.col("region") == "Nort").mean(),
        pl.when(pl.col("age") > 3).then(pl.col("region") == "Nort").otherwise(False),
        (pl.col("y") == "yes") | ((pl.col("age") < 3) & (pl.col("region") == "Nort")),
    ],
)
def test_each_comparison_form_is_checked_anywhere_in_the_tree(expr: pl.Expr) -> None:
    with pytest.raises(ValueError, match=rf"^'Nort' is not a label of column 'region': {LABELS}$"):
        check_labels(expr, SCHEMA)


def test_the_first_unknown_label_of_another_column_is_named() -> None:
    with pytest.raises(
        ValueError, match=r"^'maybe' is not a label of column 'y': its labels are \['no', 'yes'\]$"
    ):
        check_labels(pl.col("y").is_in(["no", "maybe"]), SCHEMA)


@pytest.mark.parametrize(
    "expr",
    [
        pl.col("region") == "O'Hare",
        pl.col("region").is_in(["North", "South"]),
        pl.col("region").is_in(["North", None]),  # a null is not a label typo
        pl.col("age") == "x",  # a numeric column: not a label comparison
        pl.col("region") == 3,  # not a string
        pl.col("region") > "Zzz",  # ordering comparisons are not checked
        pl.col("region").cast(pl.String) == "north",  # a transformed column is not checked
        pl.col("region").cast(pl.String).str.contains("Nort"),
        pl.col("other") == "anything",  # a column outside the schema
        pl.lit(1) == pl.lit(1),
    ],
)
def test_what_is_not_refused(expr: pl.Expr) -> None:
    assert check_labels(expr, SCHEMA) is None


def test_a_schema_without_categorical_columns_checks_nothing() -> None:
    numeric = dps.Schema({"age": (0, 99)})
    assert check_labels(pl.col("age") == "Nort", numeric) is None
    assert check_labels(pl.col("region") == "Nort", numeric) is None


# -- as_expressions ---------------------------------------------------------------------------------
def test_as_expressions_turns_text_and_lists_into_expressions() -> None:
    out = as_expressions(["age < 30", pl.col("region") == "South"], ["age", "region"], SCHEMA)
    assert isinstance(out, list) and len(out) == 2 and all(isinstance(e, pl.Expr) for e in out)
    assert _frame().filter(out[0])["age"].to_list() == [20]
    assert _frame().filter(out[1])["age"].to_list() == [60]
    single = as_expressions("age > 50", ["age"])
    assert isinstance(single, pl.Expr) and _frame().filter(single)["age"].to_list() == [60, 80]
    assert isinstance(as_expressions(("age > 1",), ["age"]), list)


def test_as_expressions_checks_every_member_of_a_list() -> None:
    with pytest.raises(ValueError, match=r"^'Sooth' is not a label of column 'region'"):
        as_expressions(["age < 30", pl.col("region") == "Sooth"], ["age", "region"], SCHEMA)
    with pytest.raises(ValueError, match=r"names columns \['z'\] that are not in the sketch"):
        as_expressions([pl.col("age") > 1, "z > 1"], ["age", "region"])
    expr = pl.col("region") == "Sooth"
    assert as_expressions(expr, ["region"]) is expr  # no schema: returned as given


@pytest.mark.parametrize("query", [len, None, 3, [], ["age > 1", 2], {"age": 1}])
def test_anything_else_is_returned_unchanged(query: Any) -> None:
    assert as_expressions(query, ["age"], SCHEMA) is query
