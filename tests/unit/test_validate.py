"""The shared argument checks of ``opendp_sketch._validate``: values returned, every refusal's
message (it names the argument and the value given), and the types each check turns away."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import opendp.prelude as dp
import pytest

from opendp_sketch._validate import (
    check_bounds,
    check_chunking,
    check_column_names,
    check_fraction,
    check_number,
    check_positive_float,
    check_positive_int,
    check_seed,
    impute_values,
    require_symmetric,
)


# -- check_bounds ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bounds, num_columns, lower, upper",
    [
        ((0, 1), None, [0.0], [1.0]),
        ((0, 1), 3, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
        ((0, [1, 2]), None, [0.0, 0.0], [1.0, 2.0]),
        ([[-1, -2], 5], 2, [-1.0, -2.0], [5.0, 5.0]),
        ((np.float32(0.5), np.int64(3)), 1, [0.5], [3.0]),
        ((-1e300, 1e300), None, [-1e300], [1e300]),
    ],
)
def test_bounds_are_broadcast_to_float64_vectors(
    bounds: Any, num_columns: int | None, lower: list[float], upper: list[float]
) -> None:
    lo, hi = check_bounds(bounds, num_columns)
    assert lo.dtype == hi.dtype == np.float64
    assert lo.tolist() == lower and hi.tolist() == upper


def test_bounds_returned_are_fresh_writable_copies() -> None:
    given = np.array([0.0, 1.0])
    lo, hi = check_bounds((given, 2.0))
    lo[0] = 7.0
    hi[1] = 9.0
    assert given.tolist() == [0.0, 1.0]
    assert check_bounds((given, 2.0))[1].tolist() == [2.0, 2.0]


@pytest.mark.parametrize(
    "bounds, num_columns, message",
    [
        ((0, 1, 2), None, "must be a pair (lower, upper)"),
        ("01", None, "must be a pair (lower, upper)"),
        (np.array([0.0, 1.0]), None, "must be a pair (lower, upper)"),
        (None, None, "must be a pair (lower, upper)"),
        (("a", 1), None, "must be numeric"),
        ((None, 1), None, "must be finite"),  # None reads as NaN
        ((np.zeros((1, 2)), 1), None, "must be scalars or 1-D sequences"),
        (([0, 0], [1, 1, 1]), None, "lower and upper must have the same length"),
        ((0, [1, 2, 3]), 2, "must have one value per column (2 columns)"),
        (([0, 0], 1), 3, "must have one value per column (3 columns)"),
        ((0, np.inf), None, "must be finite"),
        ((np.nan, 1), None, "must be finite"),
        ((-np.inf, 0), None, "must be finite"),
        ((-1e308, 1e308), None, "must have a finite width (upper - lower)"),
        ((1, 0), None, "must have lower < upper in every column"),
        ((0, [1, 0]), None, "must have lower < upper in every column"),
        ((1, 1), None, "must have lower < upper in every column"),
    ],
)
def test_bad_bounds_are_refused_naming_them(bounds: Any, num_columns: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=r"^bounds \(.*\) " + re.escape(message)):
        check_bounds(bounds, num_columns)


# -- scalar checks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1, 7, np.int64(3), 2**70])
def test_positive_int_accepts_and_returns_a_python_int(value: Any) -> None:
    out = check_positive_int(value, "bins")
    assert type(out) is int and out == int(value)


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "3", None, np.float64(2.0)])
def test_positive_int_refuses(value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^bins \({re.escape(repr(value))}\) must be a positive integer$"):
        check_positive_int(value, "bins")


@pytest.mark.parametrize("value, expected", [(0.5, 0.5), ("2.5", 2.5), (3, 3.0), (np.float32(0.25), 0.25)])
def test_positive_float_accepts_numbers_and_numeric_text(value: Any, expected: float) -> None:
    out = check_positive_float(value, "bandwidth")
    assert type(out) is float and out == expected


@pytest.mark.parametrize("value", [0, -0.5, np.inf, np.nan, "-1", "x", None, [1.0], 1e309])
def test_positive_float_refuses(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^bandwidth \(.*\) must be a positive finite number$"):
        check_positive_float(value, "bandwidth")


@pytest.mark.parametrize(
    "value, allow_zero, expected",
    [
        (2, False, 2.0),
        (0.5, False, 0.5),
        (0, True, 0.0),
        (np.int32(4), True, 4.0),
        (np.float16(1.5), False, 1.5),
    ],
)
def test_number_accepts(value: Any, allow_zero: bool, expected: float) -> None:
    out = check_number(value, "scale", allow_zero=allow_zero)
    assert type(out) is float and out == expected


@pytest.mark.parametrize(
    "value, allow_zero, kind",
    [
        (0, False, "positive"),
        (-0.0, False, "positive"),
        (-1, True, "non-negative"),
        (True, True, "non-negative"),
        ("1", False, "positive"),
        (b"1", False, "positive"),
        (np.nan, True, "non-negative"),
        (np.inf, False, "positive"),
        (None, False, "positive"),
        (1 + 0j, False, "positive"),
    ],
)
def test_number_refuses_naming_the_kind(value: Any, allow_zero: bool, kind: str) -> None:
    with pytest.raises(ValueError, match=rf"^scale \(.*\) must be a {kind} finite number$"):
        check_number(value, "scale", allow_zero=allow_zero)


@pytest.mark.parametrize("value", [0.02, 0.5, np.float32(0.75), 1e-300, float(np.nextafter(1.0, 0.0))])
def test_fraction_accepts_values_strictly_inside(value: Any) -> None:
    assert check_fraction(value) == float(value)


@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, -0.1, 1.5, True, np.nan, "0.5", None])
def test_fraction_refuses_the_ends_and_non_numbers(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^selection_share \(.*\) must be strictly between 0 and 1$"):
        check_fraction(value, "selection_share")
    with pytest.raises(ValueError, match=r"^count_fraction \("):
        check_fraction(value)


@pytest.mark.parametrize("seed", [0, 1, np.uint64(2**63), 2**80])
def test_seed_accepts_non_negative_integers(seed: Any) -> None:
    out = check_seed(seed)
    assert type(out) is int and out == int(seed)


@pytest.mark.parametrize("seed", [-1, True, 1.0, "7", None])
def test_seed_refuses(seed: Any) -> None:
    with pytest.raises(ValueError, match=r"^seed \(.*\) must be a non-negative integer$"):
        check_seed(seed)


# -- chunking and names -----------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_rows, n_jobs", [(1, None), (4096, 1), (10, 8)])
def test_chunking_accepts(chunk_rows: int, n_jobs: int | None) -> None:
    assert check_chunking(chunk_rows, n_jobs) is None


@pytest.mark.parametrize(
    "chunk_rows, n_jobs, message",
    [
        (0, None, r"^chunk_rows \(0\) must be a positive integer$"),
        (True, None, r"^chunk_rows \(True\) must be a positive integer$"),
        (2.0, None, r"^chunk_rows \(2\.0\) must be a positive integer$"),
        (10, 0, r"^n_jobs \(0\) must be a positive integer or None$"),
        (10, -2, r"^n_jobs \(-2\) must be a positive integer or None$"),
        (10, False, r"^n_jobs \(False\) must be a positive integer or None$"),
        (10, "2", r"^n_jobs \('2'\) must be a positive integer or None$"),
    ],
)
def test_chunking_refuses(chunk_rows: Any, n_jobs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_chunking(chunk_rows, n_jobs)


@pytest.mark.parametrize(
    "names, expected", [(None, None), (("a", "b"), ["a", "b"]), (["x"], ["x"]), ([], [])]
)
def test_column_names_accepts(names: Any, expected: list[str] | None) -> None:
    assert check_column_names(names) == expected


@pytest.mark.parametrize(
    "names, message",
    [
        ("ab", r"must be a list of strings$"),
        (b"ab", r"must be a list of strings$"),
        (["a", 1], r"must be a list of strings$"),
        ({"a", "b"}, r"must be a list of strings$"),
        (5, r"must be a list of strings$"),
        (("a", "b", "a"), r"^column_names \(\['a', 'b', 'a'\]\) must be distinct$"),
    ],
)
def test_column_names_refuses(names: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_column_names(names)


# -- impute_values ----------------------------------------------------------------------------------
def test_impute_broadcasts_one_value_or_takes_one_per_column() -> None:
    assert impute_values(0.5, 3).tolist() == [0.5, 0.5, 0.5]
    assert impute_values([1, 2], 2).tolist() == [1.0, 2.0]
    out = impute_values(np.array([0.0]), 2)
    out[0] = 9.0  # a fresh, writable copy
    assert impute_values(np.array([0.0]), 2).tolist() == [0.0, 0.0]


def test_impute_on_the_bounds_is_accepted() -> None:
    lo, hi = np.array([0.0, 10.0]), np.array([1.0, 20.0])
    assert impute_values([0.0, 20.0], 2, (lo, hi)).tolist() == [0.0, 20.0]
    assert impute_values(0.5, 1, (0.0, 1.0)).tolist() == [0.5]


@pytest.mark.parametrize(
    "impute, message",
    [
        ([1, 2, 3], r"^impute \(\[1, 2, 3\]\) must be one number or 2 numbers$"),
        ("x", r"^impute \('x'\) must be one number or 2 numbers$"),
        (None, r"^impute values must be finite \(got None\)$"),
        (np.nan, r"^impute values must be finite"),
        ([0.0, np.inf], r"^impute values must be finite"),
    ],
)
def test_impute_refuses_malformed_values(impute: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        impute_values(impute, 2)


def test_impute_outside_a_column_names_that_column() -> None:
    bounds = (np.array([0.0, 10.0]), np.array([1.0, 20.0]))
    with pytest.raises(ValueError, match=r"column 1 is \[10\.0, 20\.0\]$"):
        impute_values([0.5, 25.0], 2, bounds)
    with pytest.raises(ValueError, match=r"column 0 is \[0\.0, 1\.0\]$"):
        impute_values(-0.5, 2, bounds)
    with pytest.raises(ValueError, match=r"column 0 is"):
        impute_values(float(np.nextafter(1.0, 2.0)), 2, bounds)


# -- require_symmetric ------------------------------------------------------------------------------
def test_only_the_symmetric_distance_is_accepted() -> None:
    assert require_symmetric(dp.symmetric_distance()) is None
    for metric in (dp.insert_delete_distance(), dp.change_one_distance(), dp.absolute_distance(T=float)):
        with pytest.raises(ValueError, match=r"must be dp\.symmetric_distance\(\)$"):
            require_symmetric(metric)
