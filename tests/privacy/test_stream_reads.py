"""Inputs whose *reading* can fail on one value: files streamed in batches, and tables of Python
objects converted to Polars inside a measurement.

Before this file's fixes:

* Polars' ``LazyFrame.collect_batches`` (1.36) runs the query on a background thread and drops
  its error: a CSV row that did not parse ended the stream early, and the partial sum was
  released as the whole table's. One added row changed the count by tens of thousands.
* The table backend converted pandas ``object`` columns, numpy ``object`` arrays and Polars
  ``Binary`` columns inside the measurement, and one odd value (an int in a label column, a
  string in a numeric one, ``2**70``, invalid UTF-8) raised there: an uncharged oracle.

Each neighbour pair here must give two releases whose exact sums differ by at most the stated
sensitivity (and counts by at most one); a stream that fails must raise a fixed message that
quotes nothing from the file, never pass a partial sum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import opendp.prelude as dp
import pandas as pd
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.streaming import STREAM_FAILED, StreamReadError, scan
from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain
from opendp_sketch.testing import assert_within_sensitivity

ROWS = 3000  # more than one batch of BATCH rows, and a bad row far past the type inference
BATCH = 512


@pytest.fixture(autouse=True)
def _features() -> None:
    dp.enable_features("contrib", "honest-but-curious")


def _csv(path: Path, bad_row: str | None) -> Path:
    lines = ["a,b"] + [f"{(i % 10) / 10},0.5" for i in range(ROWS)]
    if bad_row is not None:
        lines.append(bad_row)
    path.write_text("\n".join(lines) + "\n")
    return path


BAD_ROWS = ["abc,0.5", "0.5,", "1e999,0.5", '"",0.5', "0.5,0.5,0.5"]


@pytest.mark.parametrize("bad", BAD_ROWS)
def test_frame_backend_reads_a_scanned_csv_to_the_end(tmp_path: Path, bad: str) -> None:
    fm = dps.Histogram(bounds=(0, 1), bins=2, dim=2)
    dom = dps.backends.streaming.frame_box_domain((0.0, 1.0), ["a", "b"], impute=0.5)
    t = dps.backends.streaming.make_frame_sum_and_count(dom, dp.symmetric_distance(), fm, batch_rows=BATCH)
    try:
        base = scan(_csv(tmp_path / "d.csv", None))
        added = scan(_csv(tmp_path / "d2.csv", bad))
    except pl.exceptions.PolarsError:  # a malformed line refused when the scan is made: curator side
        pytest.skip("the scan itself refuses this line before any measurement")
    (sa, na), (sb, nb) = t(base), t(added)
    assert (na, nb) == (ROWS, ROWS + 1)
    assert_within_sensitivity(fm, sa, sb, p=1)


def test_a_failing_stream_raises_a_fixed_message_not_a_partial_sum(tmp_path: Path) -> None:
    """A LazyFrame the analyst's side built with Polars' strict CSV reader: the row that does not
    parse stops the read. The release must not happen (no partial sum), and the error must not
    quote the file."""
    fm = dps.Histogram(bounds=(0, 1), bins=2, dim=2)
    dom = dps.backends.streaming.frame_box_domain((0.0, 1.0), ["a", "b"], impute=0.5)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    strict = pl.scan_csv(_csv(tmp_path / "d2.csv", "secret-value,0.5"))
    with pytest.raises(Exception) as info:
        meas(strict)
    text = str(info.value) + repr(info.value.__cause__) + repr(info.value.__context__)
    assert "secret-value" not in text
    assert STREAM_FAILED.split(",")[0] in text


def test_stream_frames_surfaces_the_error_after_the_batches_read() -> None:
    from opendp_sketch.backends.streaming import stream_frames

    lf = pl.LazyFrame({"a": ["1"] * 2000 + ["x"]}).select(pl.col("a").cast(pl.Float64, strict=True))
    seen = 0
    with pytest.raises(StreamReadError):
        for batch in stream_frames(lf, 256):
            seen += batch.height
    assert seen < 2001


def test_stream_frames_stops_cleanly_when_the_consumer_stops() -> None:
    from opendp_sketch.backends.streaming import stream_frames

    lf = pl.LazyFrame({"a": np.arange(100_000, dtype=np.float64)})
    for batch in stream_frames(lf, 1000):
        assert batch.height <= 1000
        break  # the generator is closed here: the producer thread must end


SCHEMA = dps.Schema(
    {
        "x": dps.Numeric(0, 10, impute=5),
        "c": dps.Categorical(["a", "b"], null="category"),
        "f": dps.Boolean(null=False),
    }
)


def _table_pair(D: Any, D2: Any) -> None:
    fm = dps.auto_feature_map(SCHEMA)
    t = make_table_sum_and_count(table_domain(SCHEMA), dp.symmetric_distance(), fm, batch_rows=BATCH)
    (sa, na), (sb, nb) = t(D), t(D2)
    assert nb - na == 1
    assert_within_sensitivity(fm, sa, sb, p=1)


def _pandas(x: list[Any], c: list[Any], f: list[Any]) -> pd.DataFrame:
    return pd.DataFrame(
        {"x": pd.Series(x, dtype=object), "c": pd.Series(c, dtype=object), "f": pd.Series(f, dtype=object)}
    )


BASE = {"x": [1.0, 2.0, 3.0] * 400, "c": ["a", "b", None] * 400, "f": [True, False, None] * 400}
ODD_ROWS = {
    "int in a label column": (3.0, 7, True),
    "text in a numeric column": ("oops", "a", True),
    "int beyond int64": (2**70, "a", False),
    "bytes with invalid UTF-8": (b"\xff", b"\xff", b"\xff"),
    "a list": ([1.0], ["a"], [True]),
    "a dict": ({"k": 1}, {"k": 1}, {"k": 1}),
    "text in a boolean column": (1.0, "b", "maybe"),
}


@pytest.mark.parametrize("name", sorted(ODD_ROWS))
def test_pandas_object_columns_take_any_value(name: str) -> None:
    x, c, f = ODD_ROWS[name]
    D = _pandas(BASE["x"], BASE["c"], BASE["f"])
    D2 = _pandas(BASE["x"] + [x], BASE["c"] + [c], BASE["f"] + [f])
    _table_pair(D, D2)


def test_numpy_object_arrays_take_any_value() -> None:
    D = np.array([BASE["x"], BASE["c"], BASE["f"]], dtype=object).T
    D2 = np.vstack([D, np.array([["oops", 7, b"\xff"]], dtype=object)])
    _table_pair(D, D2)


def test_binary_label_columns_with_invalid_utf8() -> None:
    D = pl.DataFrame({"x": [1.0] * 50, "c": [b"a"] * 50, "f": [True] * 50})
    D2 = pl.DataFrame({"x": [1.0] * 51, "c": [b"a"] * 50 + [b"\xff"], "f": [True] * 51})
    _table_pair(D, D2)


def test_object_text_keeps_what_typed_columns_would_read() -> None:
    """The text path gives the same codes as typed columns for ordinary values: a table is not
    read differently because one of its columns happens to be of Python objects."""
    fm = dps.auto_feature_map(SCHEMA)
    t = make_table_sum_and_count(table_domain(SCHEMA), dp.symmetric_distance(), fm)
    typed = pd.DataFrame({"x": BASE["x"], "c": BASE["c"], "f": pd.array(BASE["f"], dtype="boolean")})
    objects = _pandas(BASE["x"], BASE["c"], BASE["f"])
    assert t(typed)[0].tolist() == t(objects)[0].tolist()


@pytest.mark.parametrize("bad", ["oops,a,true", "2e400,b,false", ",,", "7,zz,maybe"])
def test_table_backend_reads_a_csv_path_to_the_end(tmp_path: Path, bad: str) -> None:
    lines = ["x,c,f"] + [f"{i % 10},{'ab'[i % 2]},{'true' if i % 3 else 'false'}" for i in range(ROWS)]
    base = tmp_path / "d.csv"
    base.write_text("\n".join(lines) + "\n")
    added = tmp_path / "d2.csv"
    added.write_text("\n".join([*lines, bad]) + "\n")
    _table_pair(str(base), str(added))


def test_csv_booleans_read_as_text_keep_their_values(tmp_path: Path) -> None:
    fm = dps.auto_feature_map(SCHEMA)
    t = make_table_sum_and_count(table_domain(SCHEMA), dp.symmetric_distance(), fm)
    frame = pl.DataFrame({"x": [1.0, 2.0, 3.0], "c": ["a", "b", "a"], "f": [True, False, True]})
    path = tmp_path / "t.csv"
    frame.write_csv(path)
    assert t(str(path))[0].tolist() == t(frame)[0].tolist()


def test_a_failing_row_count_quotes_nothing(tmp_path: Path) -> None:
    lf = pl.scan_csv(_csv(tmp_path / "d.csv", "secret-value,0.5")).filter(pl.col("a").cast(pl.Float64) > -1)
    t = dps.backends.streaming.make_frame_row_count(
        dps.backends.streaming.frame_box_domain((0.0, 1.0), ["a", "b"]), dp.symmetric_distance()
    )
    with pytest.raises(Exception) as info:
        t(lf)
    assert "secret-value" not in str(info.value) and STREAM_FAILED.split(",")[0] in str(info.value)


@pytest.mark.parametrize("bad", [b"\xff,a,true", b"1,caf\xe9,true", b"\xff\xfe,\xff,\xff"])
def test_non_utf8_bytes_in_a_csv_read_as_replaced_text(tmp_path: Path, bad: bytes) -> None:
    lines = ["x,c,f"] + [f"{i % 10},{'ab'[i % 2]},true" for i in range(ROWS)]
    base, added = tmp_path / "d.csv", tmp_path / "d2.csv"
    base.write_text("\n".join(lines) + "\n")
    added.write_bytes(
        ("\n".join(lines[:1500]) + "\n").encode() + bad + ("\n" + "\n".join(lines[1500:]) + "\n").encode()
    )
    _table_pair(str(base), str(added))
    fm = dps.Histogram(bounds=(0, 10), bins=4, dim=1)
    t = dps.backends.streaming.make_frame_sum_and_count(
        dps.backends.streaming.frame_box_domain((0.0, 10.0), ["x"], impute=5.0), dp.symmetric_distance(), fm
    )
    (sa, na), (sb, nb) = t(scan(base)), t(scan(added))
    assert nb - na == 1
    assert_within_sensitivity(fm, sa, sb, p=1)


def test_integer_columns_of_a_scanned_csv_read_as_floats(tmp_path: Path) -> None:
    """An integer type inferred from the first rows would null every later non-integer, and
    whether it is inferred depends on which rows come first: one row added at the top changed
    the sum by thousands of rows."""
    body = ["1,1"] * 150 + ["0.9,0.9"] * 2000
    base, added = tmp_path / "d.csv", tmp_path / "d2.csv"
    base.write_text("\n".join(["a,b", *body]) + "\n")
    added.write_text("\n".join(["a,b", "0.9,0.9", *body]) + "\n")
    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
    dom = dps.backends.streaming.frame_box_domain((0.0, 1.0), ["a", "b"], impute=0.5)
    t = dps.backends.streaming.make_frame_sum_and_count(dom, dp.symmetric_distance(), fm)
    (sa, na), (sb, nb) = t(scan(base)), t(scan(added))
    assert nb - na == 1
    assert_within_sensitivity(fm, sa, sb, p=1)


def test_lone_surrogates_in_pandas_text_read_as_replaced_text() -> None:
    D = _pandas(BASE["x"], BASE["c"], BASE["f"])
    D2 = _pandas(BASE["x"] + ["\ud800"], BASE["c"] + ["\udfff"], BASE["f"] + ["\ud800"])
    _table_pair(D, D2)
    E = pd.DataFrame({"x": BASE["x"], "c": pd.array(BASE["c"], dtype="string[python]"), "f": BASE["f"]})
    E2 = pd.DataFrame(
        {
            "x": [*BASE["x"], 1.0],
            "c": pd.array([*BASE["c"], "\ud800"], dtype="string[python]"),
            "f": [*BASE["f"], True],
        }
    )
    _table_pair(E, E2)


def test_a_struct_column_reads_as_nulls_on_both_sides() -> None:
    D = pl.DataFrame({"x": [{"a": 1.0}] * 5, "c": ["a"] * 5, "f": [True] * 5})
    D2 = pl.DataFrame({"x": [{"a": 1.0}] * 6, "c": ["a"] * 6, "f": [True] * 6})
    _table_pair(D, D2)


def test_an_open_stream_at_interpreter_exit_does_not_abort_the_process() -> None:
    import subprocess
    import sys

    code = (
        "import numpy as np, polars as pl\n"
        "from opendp_sketch.backends.streaming import stream_frames\n"
        "g = stream_frames(pl.LazyFrame({'a': np.arange(10**6, dtype=float)}), 1000)\n"
        "next(g)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr


def test_scan_csv_text_reads_every_field_as_text_and_a_missing_file_is_an_error(tmp_path: Path) -> None:
    from opendp_sketch.backends.streaming import scan_csv_text

    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,\xff\n2\n3,4,5\n")
    frame = scan_csv_text(path).collect()
    assert frame.dtypes == [pl.String, pl.String]
    assert frame.rows() == [("1", "\ufffd"), ("2", None), ("3", "4")]
    with pytest.raises(FileNotFoundError):
        scan_csv_text(tmp_path / "missing.csv").collect()
