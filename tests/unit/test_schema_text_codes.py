"""A String column with text labels is read by Polars' Enum cast (schema.text_codes) and checked
with ``is_in``: the same codes and counts as the general reader (readers.code_expr)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.readers import code_expr, codes
from opendp_sketch.schema import text_codes

VALUES = ["a", "b", "", " a", "A", "zz", None, "é", "b ", "7", "7.0", "nan", "a\n", "c"]


@pytest.mark.parametrize(
    ("labels", "null"),
    [(["a", "b", "c"], None), (["a", "", "é", "nan"], "category"), (["b", "zz"], "zz"), (["x"], None)],
)
def test_text_codes_equal_the_general_reader(labels, null):
    col = dps.Categorical(labels, null=null)
    rng = np.random.default_rng(0)
    frame = pl.DataFrame(
        {"c": [VALUES[i] for i in rng.integers(0, len(VALUES), 5000)]}, schema={"c": pl.String}
    )
    fast = frame.select(text_codes("c", col)).to_series()
    general = frame.select(code_expr("c", pl.String, col)).to_series()
    assert fast.dtype == general.dtype == pl.Int64
    assert fast.to_list() == general.to_list()
    schema = dps.Schema({"c": col})
    assert np.array_equal(schema.encode(frame)[:, 0], codes(general, col))
    known = set(labels)
    expected_unknown = sum(1 for v in frame["c"].to_list() if v is not None and v not in known)
    found = schema.problems(frame)["c"]
    assert found == {"null": frame["c"].null_count(), "unknown": expected_unknown}
    assert schema.problems(frame.lazy())["c"] == found


def test_numeric_labels_keep_the_general_reader():
    # "7" matches 7.0 and "7.0" by number: the Enum cast would not, so it is not used
    schema = dps.Schema({"c": ["7", "x"]})
    frame = pl.DataFrame({"c": ["7", "7.0", "x", "y", None]})
    assert schema.problems(frame)["c"] == {"null": 1, "unknown": 1}
    assert schema.encode(frame.filter(pl.col("c") != "y").drop_nulls())[:, 0].tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "col",
    [dps.Numeric(0, 200), dps.Numeric(-3.5, 1e6, impute=7.0), dps.Numeric(0, 5000, null="category")],
)
def test_encode_of_numbers_is_the_fill_then_unit_rule(col):
    rng = np.random.default_rng(2)
    v = rng.normal(0, 300, 3000)
    v[rng.random(3000) < 0.1] = np.nan
    v[:6] = [np.inf, -np.inf, 1e308, -1e308, col.lower, col.upper]
    values = [None if i % 17 == 0 else x for i, x in enumerate(v.tolist())]
    frame = pl.DataFrame({"x": values}, schema={"x": pl.Float64})
    schema = dps.Schema({"x": col})
    got = schema.encode(frame)
    filled = frame["x"].to_numpy().copy()
    gone = np.isnan(filled)
    filled[gone] = col.lower if col.impute is None else col.impute
    expected = np.clip((filled - col.lower) / col.width, 0.0, 1.0)
    assert got[:, 0].tobytes() == expected.tobytes()  # bit for bit
    if col.null == "category":
        assert got[:, 1].tolist() == gone.astype(float).tolist()
    # a scalar stays a scalar
    assert np.ndim(col.unit(3.0)) == 0 and col.unit(3.0) == expected[0:1].dtype.type(
        col.unit(np.array([3.0]))[0]
    )


def test_log_unit_is_the_clipped_ratio_then_the_log():
    from opendp_sketch.columns import _LOG_SPAN, LOG_KNEE

    col = dps.Numeric(0, 5000, scale="log")
    v = np.random.default_rng(3).gamma(1.0, 500.0, 2000)
    v[:4] = [np.nan, np.inf, -1.0, 6000.0]
    t = np.clip((v - col.lower) / col.width, 0.0, 1.0)
    assert col.unit(v).tobytes() == (np.log1p(t / LOG_KNEE) / _LOG_SPAN).tobytes()
