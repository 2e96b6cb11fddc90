"""``opendp_sketch.backends.tables``: the table domain (identifier, membership by kind), the table backend
``make_table_sum_and_count`` (refusals, stabilities, batching, missing columns, adversarial
neighbours: None, NaN, ±inf, huge numbers, malformed text and bytes), ``as_frame``'s refusals
and ``encode_rows``' values and refusals. Every input kind's exact sum is checked in
``tests/unit/test_schema.py``; malformed CSV and object values in ``tests/privacy``."""

from __future__ import annotations

import datetime
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import opendp.prelude as dp
import pandas as pd
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.memory import pair_parts
from opendp_sketch.backends.tables import (
    as_frame,
    encode_rows,
    iso_text,
    make_table_sum_and_count,
    table_domain,
)
from opendp_sketch.testing import assert_within_sensitivity

SYM = dp.symmetric_distance()
SCHEMA = dps.Schema({"age": (18, 90), "cut": ["Fair", "Good", "Ideal"]})


@pytest.fixture(scope="module")
def fm() -> Any:
    return dps.auto_feature_map(SCHEMA)


@pytest.fixture(scope="module")
def pair(fm: Any) -> dp.Transformation:
    return make_table_sum_and_count(table_domain(SCHEMA), SYM, fm)


@pytest.fixture(scope="module")
def people() -> pl.DataFrame:
    rng = np.random.default_rng(17)
    return pl.DataFrame(
        {"age": rng.integers(18, 91, 50).astype(float), "cut": rng.choice(["Fair", "Good", "Ideal"], 50)}
    )


# -- table_domain -----------------------------------------------------------------------------------
def test_table_domain_identifier_and_descriptor() -> None:
    dom = table_domain(SCHEMA)
    assert str(dom) == f"TableDomain(schema={SCHEMA.to_dict()})"
    assert dom.descriptor.schema is SCHEMA and dom.descriptor.upper == (1.0, 2.0)
    with pytest.raises(ValueError, match=r"must be an opendp_sketch\.Schema$"):
        table_domain({"age": (18, 90)})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value, member",
    [
        (pl.DataFrame({"age": [1.0]}), True),
        (pl.LazyFrame(), True),  # columns are the curator's check, not membership
        (np.zeros((1, 2)), True),
        ("data.parquet", True),
        (Path("data.csv"), True),
        (pd.DataFrame({"x": ["?"]}), True),
        ({"age": [1]}, False),
        ([[20, "Fair"]], False),
        (None, False),
        (3, False),
    ],
)
def test_table_domain_admits_every_table_kind_and_nothing_else(value: Any, member: bool) -> None:
    assert table_domain(SCHEMA).member(value) is member


# -- make_table_sum_and_count: refusals and stabilities -------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_rows": 0}, r"^batch_rows \(0\) must be a positive integer$"),
        ({"batch_rows": True}, r"^batch_rows \(True\) must be a positive integer$"),
        ({"batch_rows": 10.0}, r"^batch_rows \(10\.0\) must be a positive integer$"),
        ({"chunk_rows": 0}, r"^chunk_rows \(0\) must be a positive integer$"),
        ({"n_jobs": -1}, r"^n_jobs \(-1\) must be a positive integer or None$"),
    ],
)
def test_table_backend_refuses_bad_options(fm: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_table_sum_and_count(table_domain(SCHEMA), SYM, fm, **kwargs)


def test_table_backend_refuses_other_domains_maps_and_metrics(fm: Any) -> None:
    with pytest.raises(ValueError, match=r"must be a table_domain\(schema\)$"):
        make_table_sum_and_count(dps.box_domain((0, 1), num_columns=2), SYM, fm)
    with pytest.raises(ValueError, match=r"^feature_map expects 3 columns but input_domain has 2$"):
        make_table_sum_and_count(table_domain(SCHEMA), SYM, dps.Histogram(bounds=(0, 1), bins=2, dim=3))
    with pytest.raises(ValueError, match=r"must be an opendp_sketch feature map$"):
        make_table_sum_and_count(table_domain(SCHEMA), SYM, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
        make_table_sum_and_count(table_domain(SCHEMA), dp.insert_delete_distance(), fm)


def test_table_pair_halves_state_the_maps_sensitivities(pair: dp.Transformation, fm: Any) -> None:
    assert str(pair.output_metric) == "SymmetricDistanceOfSource()" and pair.map(2) == 2
    s1, c = pair_parts(pair, fm, 1)
    s2, _ = pair_parts(pair, fm, 2)
    assert (pair >> s1).map(1) == fm.int_sensitivity(1) and (pair >> s1).map(3) == 3 * fm.int_sensitivity(1)
    assert (pair >> s2).map(1) == math.nextafter(fm.int_sensitivity(2), math.inf)
    assert (pair >> c).map(4) == 4


# -- make_table_sum_and_count: values -------------------------------------------------------------
def test_table_sum_is_the_exact_sum_of_the_encoded_rows(
    pair: dp.Transformation, fm: Any, people: pl.DataFrame
) -> None:
    total, n = pair(people)
    assert n == 50 and total.dtype == np.int64
    assert total.tolist() == [int(v) for v in fm.fixed_sum(SCHEMA.encode(people))]


@pytest.mark.parametrize("batch_rows, chunk_rows, n_jobs", [(1, 1, None), (7, 3, 2), (49, 4096, 1)])
def test_table_sum_does_not_depend_on_batching(
    pair: dp.Transformation, fm: Any, people: pl.DataFrame, batch_rows: int, chunk_rows: int, n_jobs: Any
) -> None:
    t = make_table_sum_and_count(
        table_domain(SCHEMA), SYM, fm, batch_rows=batch_rows, chunk_rows=chunk_rows, n_jobs=n_jobs
    )
    a, b = t(people), pair(people)
    assert a[0].tolist() == b[0].tolist() and a[1] == b[1]


def test_a_missing_column_reads_as_nulls(pair: dp.Transformation, people: pl.DataFrame) -> None:
    only_age = people.select("age")
    with_nulls = only_age.with_columns(pl.lit(None, dtype=pl.String).alias("cut"))
    a, b = pair(only_age), pair(with_nulls)
    assert a[0].tolist() == b[0].tolist() and a[1] == b[1] == 50
    extra = people.with_columns(pl.lit("secret").alias("other"))  # columns outside the schema: ignored
    assert pair(extra)[0].tolist() == pair(people)[0].tolist()


def test_an_empty_table_sums_to_zero(pair: dp.Transformation, fm: Any, people: pl.DataFrame) -> None:
    total, n = pair(people.head(0))
    assert n == 0 and total.tolist() == [0] * fm.num_features


# -- make_table_sum_and_count: adversarial neighbours ---------------------------------------------
ODD_VALUES: dict[str, tuple[Any, Any]] = {
    "null age": (None, "Fair"),
    "nan age": (math.nan, "Good"),
    "+inf age": (math.inf, "Ideal"),
    "-inf age": (-math.inf, "Fair"),
    "huge age": (1e308, "Fair"),
    "-huge age": (-1e308, "Fair"),
    "int beyond float": (10**400, "Fair"),
    "text age": ("forty", "Fair"),
    "numeric text age": ("41", "Fair"),
    "overflowing text": ("1e400", "Fair"),
    "bytes age": (b"\xff\xfe", "Fair"),
    "bool age": (True, "Fair"),
    "null cut": (40.0, None),
    "unknown cut": (40.0, "Premium"),
    "empty cut": (40.0, ""),
    "number cut": (40.0, 3),
    "bytes cut": (40.0, b"\xc3("),
    "surrogate cut": (40.0, "\udcff"),
    "everything odd": (b"\x00", float("nan")),
}


def _objects(people: pl.DataFrame, row: tuple[Any, Any] | None, at: int = -1) -> pd.DataFrame:
    """``people`` as a pandas frame of Python objects, with ``row`` inserted at ``at``."""
    ages: list[Any] = people["age"].to_list()
    cuts: list[Any] = people["cut"].to_list()
    if row is not None:
        pos = len(ages) if at < 0 else at
        ages.insert(pos, row[0])
        cuts.insert(pos, row[1])
    return pd.DataFrame({"age": pd.Series(ages, dtype=object), "cut": pd.Series(cuts, dtype=object)})


@pytest.mark.parametrize("kind", list(ODD_VALUES))
def test_adding_one_odd_row_moves_the_pair_within_its_stabilities(
    pair: dp.Transformation, fm: Any, people: pl.DataFrame, kind: str
) -> None:
    """The same outcome on both neighbours (a pair, no exception, no warning), the count moves by
    one and the exact sum by at most the map's sensitivity, wherever the row lands."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a_sum, a_n = pair(_objects(people, None))
        for at in (0, 25, -1):
            b_sum, b_n = pair(_objects(people, ODD_VALUES[kind], at))
            assert b_n == a_n + 1 == 51
            for p in (1, 2):
                assert_within_sensitivity(fm, a_sum, b_sum, p)


def test_object_frames_sum_like_typed_frames(pair: dp.Transformation, people: pl.DataFrame) -> None:
    a, b = pair(people), pair(_objects(people, None))
    assert a[0].tolist() == b[0].tolist() and a[1] == b[1]


def test_removing_a_row_moves_the_pair_within_its_stabilities(
    pair: dp.Transformation, fm: Any, people: pl.DataFrame
) -> None:
    a_sum, a_n = pair(people)
    for i in range(0, people.height, 5):
        b_sum, b_n = pair(pl.concat([people.head(i), people.slice(i + 1)]))
        assert b_n == a_n - 1
        assert_within_sensitivity(fm, a_sum, b_sum, 1)


# -- as_frame ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, columns, message",
    [
        (np.zeros((2, 2)), None, r"one column per schema column \(None\), got shape \(2, 2\)$"),
        (np.zeros(2), ["a"], r"one column per schema column \(\['a'\]\), got shape \(2,\)$"),
        (np.zeros((2, 3)), ["a", "b"], r"got shape \(2, 3\)$"),
        ({"a": [1]}, None, r"Parquet/CSV/IPC path, got dict$"),
        ([[1.0]], None, r"Parquet/CSV/IPC path, got list$"),
    ],
)
def test_as_frame_refuses_by_kind_and_shape(data: Any, columns: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        as_frame(data, columns)


def test_as_frame_refuses_a_lazy_csv_scan_inside_a_measurement_but_reads_its_path(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    pl.DataFrame({"age": [20, 30], "cut": ["Fair", "x"]}).write_csv(path)
    with pytest.raises(
        ValueError, match=r"^this LazyFrame scans a CSV or NDJSON file .* pass the file's path"
    ):
        as_frame(pl.scan_csv(path), text_csv=True)
    assert as_frame(pl.scan_csv(path)).collect()["age"].to_list() == [20, 30]  # outside a measurement
    text = as_frame(str(path), text_csv=True).collect()
    assert text.schema == pl.Schema({"age": pl.String, "cut": pl.String})
    assert text.rows() == [("20", "Fair"), ("30", "x")]


def test_as_frame_reads_object_arrays_value_by_value() -> None:
    arr = np.array([[1, "a"], [None, b"\xff"], [2.5, True]], dtype=object)
    frame = as_frame(arr, ["x", "y"]).collect()
    assert frame.schema == pl.Schema({"x": pl.String, "y": pl.String})
    assert frame.rows() == [("1", "a"), (None, "\ufffd"), ("2.5", "true")]


# -- encode_rows ------------------------------------------------------------------------------------
def test_encode_rows_values_clip_and_order() -> None:
    rows = pl.DataFrame({"cut": ["Ideal", "Fair"], "age": [100.0, 18.0], "other": ["x", "y"]})
    assert encode_rows(SCHEMA, rows).tolist() == [[1.0, 2.0], [0.0, 0.0]]
    assert encode_rows(SCHEMA, rows, ["cut"]).tolist() == [[2.0], [0.0]]
    assert encode_rows(SCHEMA, [18, 54, 90], ["age"]).tolist() == [[0.0], [0.5], [1.0]]
    assert encode_rows(SCHEMA, np.array([[54, "Good"]], dtype=object)).tolist() == [[0.5, 1.0]]


@pytest.mark.parametrize(
    "rows, columns, message",
    [
        (pl.DataFrame({"age": [20]}), ["height"], r"^columns \['height'\] are not in the schema"),
        (pl.DataFrame({"age": [20]}), None, r"^the rows lack columns \['cut'\]"),
        ([[1, 2, 3]], ["age"], r"must have 1 columns \(\['age'\]\) or one per schema column \(2\)"),
        (
            pl.DataFrame({"age": [20], "cut": ["Q9-label"]}),
            None,
            r"columns \['cut'\] hold values that are not",
        ),
        (pl.DataFrame({"age": ["q9-text"], "cut": ["Fair"]}), None, r"columns \['age'\] contain nulls"),
        (pl.DataFrame({"age": [None], "cut": ["Fair"]}), None, r"columns \['age'\] contain nulls"),
    ],
)
def test_encode_rows_refuses_rows_the_schema_cannot_read(rows: Any, columns: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        encode_rows(SCHEMA, rows, columns)
    assert "Q9" not in str(info.value) and "q9" not in str(info.value)  # never quotes a value


# -- iso_text -------------------------------------------------------------------------------------
def test_iso_text_is_utc_with_microseconds() -> None:
    assert iso_text(datetime.datetime(2024, 5, 6, 7, 8, 9, 10)) == "2024-05-06T07:08:09.000010"
    minus5 = datetime.timezone(datetime.timedelta(hours=-5))
    assert iso_text(datetime.datetime(2023, 12, 31, 22, 0, tzinfo=minus5)) == "2024-01-01T03:00:00.000000"
    assert iso_text(datetime.datetime(1, 1, 1)) == "0001-01-01T00:00:00.000000"
