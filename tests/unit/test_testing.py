"""``opendp_sketch.testing``: the helpers catch what they are for. Maps that understate their
bound, sum differently per chunk or rebuild differently are caught, with the offending row or
chunking named; the adversarial rows hold what they promise (corners, NaN, ±inf, huge, tiny,
one ulp outside, extreme labels) and are reproducible. The helpers' passing side is used across
``tests/privacy`` and ``tests/unit/features``."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.testing import (
    RowNorms,
    SensitivityCheck,
    adversarial_rows,
    assert_within_sensitivity,
    check_neighbour_sensitivity,
    check_roundtrip,
    check_row_norms,
    check_sum_invariance,
    resolve_bounds,
)


class Understated(dps.Histogram):
    """A histogram that claims one unit per row (a row really sets one bin per column)."""

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return 1


class ChunkDependent(dps.Histogram):
    """A histogram whose sum changes when summed in chunks of 3 rows."""

    def fixed_sum(
        self,
        X: Any,
        *,
        clip: tuple[np.ndarray, np.ndarray] | None = None,
        chunk_rows: int = 4096,
        n_jobs: int | None = None,
    ) -> list[int]:
        out = super().fixed_sum(X, clip=clip, chunk_rows=chunk_rows, n_jobs=n_jobs)
        if chunk_rows == 3:
            out[1] += 1
        return out


@pytest.fixture(scope="module")
def hist() -> dps.Histogram:
    return dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)


# -- resolve_bounds -------------------------------------------------------------------------------
def test_resolve_bounds_adds_the_label_column_of_byclass() -> None:
    fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=5)
    lo, hi = resolve_bounds(fm, (0.0, [1.0, 2.0]))
    assert lo.tolist() == [0.0, 0.0, 0.0] and hi.tolist() == [1.0, 2.0, 4.0]
    lo, hi = resolve_bounds(fm, ([0, 0, 0], [1, 1, 9]))  # every column given: as given
    assert hi.tolist() == [1.0, 1.0, 9.0]
    lo, hi = resolve_bounds(dps.Histogram(bounds=(0, 1), bins=2, dim=3), (-1.0, 1.0))
    assert lo.tolist() == [-1.0] * 3 and hi.tolist() == [1.0] * 3
    with pytest.raises(ValueError, match=r"must have lower < upper"):
        resolve_bounds(fm, (1.0, 0.0))


# -- adversarial_rows -----------------------------------------------------------------------------
def test_adversarial_rows_hold_every_promised_kind(hist: dps.Histogram) -> None:
    rows = adversarial_rows(hist, (0.0, 1.0), n_random=5)
    assert rows.dtype == np.float64 and rows.shape[1] == 2
    listed = rows.tolist()
    for corner in ([0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]):
        assert corner in listed
    assert any(np.isnan(r).all() for r in rows)
    assert [np.inf, -np.inf] in listed and [-np.inf, np.inf] in listed
    assert [np.inf, np.inf] in listed and [-np.inf, -np.inf] in listed
    for v in (1e300, -1e300, np.finfo(np.float64).max, 5e-324, -5e-324):
        assert [v, v] in listed
    assert any(r[0] == 0.0 and np.signbit(r[0]) for r in rows)  # -0.0
    one_ulp_out = float(np.nextafter(1.0, 2.0))
    assert [one_ulp_out, one_ulp_out] in listed and [0.5, one_ulp_out] in listed
    edges = [0.25, 0.5, 0.75]  # the map's interior bin edges
    assert any(r[0] in edges and r[1] in edges for r in rows)


def test_adversarial_rows_are_reproducible_and_seeded(hist: dps.Histogram) -> None:
    a = adversarial_rows(hist, (0.0, 1.0), seed=4)
    b = adversarial_rows(hist, (0.0, 1.0), seed=4)
    c = adversarial_rows(hist, (0.0, 1.0), seed=5)
    assert np.array_equal(a, b, equal_nan=True)
    assert a.shape == c.shape and not np.array_equal(a, c, equal_nan=True)


def test_many_columns_get_a_sample_of_corners_plus_the_two_extremes() -> None:
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=12)
    rows = adversarial_rows(fm, (0.0, 1.0), n_random=0, max_corners=16)
    corners = [r for r in rows if np.isin(r, (0.0, 1.0)).all()]
    assert [0.0] * 12 in [c.tolist() for c in corners] and [1.0] * 12 in [c.tolist() for c in corners]
    assert len(corners) < 2**12
    full = adversarial_rows(dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=3), (0.0, 1.0), n_random=0)
    assert len({tuple(r) for r in full if np.isin(r, (0.0, 1.0)).all()}) == 8  # 2^3 ≤ max_corners


def test_byclass_rows_carry_extreme_labels() -> None:
    fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=3)
    rows = adversarial_rows(fm, (0.0, 1.0), n_random=2)
    assert rows.shape[1] == 3
    labels = rows[:, -1]
    for v in (-1.0, 0.0, 2.0, 3.0, -0.5, 2.5, 1e300, -1e300, np.inf, -np.inf):
        assert (labels == v).any(), v
    assert np.isnan(labels).any()


# -- assert_within_sensitivity ----------------------------------------------------------------------
def test_assert_within_sensitivity_returns_the_norm_or_names_the_excess(hist: dps.Histogram) -> None:
    assert assert_within_sensitivity(hist, [0] * 8, [1, 0, 0, 0, 1, 0, 0, 0], 1) == 2
    assert assert_within_sensitivity(hist, [0] * 8, [1, 0, 0, 0, 1, 0, 0, 0], 2) == 2  # ‖Δ‖₂² = 2 ≤ (√2)²
    with pytest.raises(
        AssertionError, match=r"the sums differ by 3 \(p=1\), above int_sensitivity\(1\) = 2$"
    ):
        assert_within_sensitivity(hist, [0] * 8, [1, 1, 0, 0, 1, 0, 0, 0], 1)
    with pytest.raises(AssertionError, match=r"the sums differ by 4 \(p=2\), above int_sensitivity\(2\)"):
        assert_within_sensitivity(hist, [0] * 8, [2, 0, 0, 0, 0, 0, 0, 0], 2)
    with pytest.raises(ValueError):  # the two sums have one value per feature
        assert_within_sensitivity(hist, [0] * 8, [0] * 7, 1)


def test_assert_within_sensitivity_compares_huge_integers_exactly(hist: dps.Histogram) -> None:
    big = 2**70
    assert assert_within_sensitivity(hist, [big] * 8, [big + 1, big + 1] + [big] * 6, 1) == 2
    with pytest.raises(AssertionError):
        assert_within_sensitivity(hist, [big] * 8, [big + 3] + [big] * 7, 1)


# -- check_neighbour_sensitivity --------------------------------------------------------------------
def test_neighbour_check_reports_observed_and_stated(hist: dps.Histogram) -> None:
    X = np.random.default_rng(0).uniform(0, 1, (10, 2))
    assert check_neighbour_sensitivity(hist, X, (0.0, 1.0), p=1) == SensitivityCheck(2.0, 2)
    out = check_neighbour_sensitivity(hist, X, (0.0, 1.0), p=2)
    assert out.observed == out.stated == hist.int_sensitivity(2)


@pytest.mark.parametrize("p", [1, 2])
def test_neighbour_check_catches_an_understated_map_naming_the_row(p: Literal[1, 2]) -> None:
    fm = Understated(bounds=(0.0, 1.0), bins=4, dim=2)
    with pytest.raises(
        AssertionError,
        match=rf"^Understated\(.*\): adding row \[.*\] changes .* above int_sensitivity\({p}\) = 1",
    ):
        check_neighbour_sensitivity(fm, np.zeros((3, 2)), (0.0, 1.0), p=p)


def test_neighbour_check_catches_removals_too() -> None:
    fm = Understated(bounds=(0.0, 1.0), bins=4, dim=2)
    rows = np.empty((0, 2))  # no additions: only the removals can fail
    with pytest.raises(
        AssertionError, match=r": removing row \[0\.5, 0\.5\] changes the exact integer sum by"
    ):
        check_neighbour_sensitivity(fm, np.full((3, 2), 0.5), (0.0, 1.0), p=1, rows=rows)


def test_neighbour_check_refuses_other_norms(hist: dps.Histogram) -> None:
    with pytest.raises(ValueError, match=r"^p \(3\) must be 1 or 2$"):
        check_neighbour_sensitivity(hist, np.zeros((2, 2)), (0.0, 1.0), p=3)  # type: ignore[arg-type]


# -- check_row_norms --------------------------------------------------------------------------------
def test_row_norms_are_exact_and_clipped_first(hist: dps.Histogram) -> None:
    rows = np.array([[np.nan, np.inf], [0.3, 0.9]])
    assert check_row_norms(hist, rows, clip=(0.0, 1.0)) == RowNorms(2, 2)
    moments = dps.Moments(dim=2, radius=1.0)
    assert check_row_norms(moments, np.array([[1.0, 0.0]])) == RowNorms(2**27, 2**53)


def test_row_norms_catch_an_understated_map() -> None:
    fm = Understated(bounds=(0.0, 1.0), bins=4, dim=2)
    with pytest.raises(
        AssertionError, match=r"row \[0\.1, 0\.9\] has ‖q‖₁ = 2 \(bound 1\), ‖q‖₂² = 2 \(bound 1\)$"
    ):
        check_row_norms(fm, np.array([[0.1, 0.9]]))


# -- check_sum_invariance ---------------------------------------------------------------------------
def test_sum_invariance_returns_the_exact_sum() -> None:
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    assert check_sum_invariance(fm, np.array([[0.1], [0.7], [2.0], [np.nan]]), clip=(0.0, 1.0)) == [2, 2]
    assert check_sum_invariance(fm, np.zeros((0, 1))) == [0, 0]


def test_sum_invariance_catches_a_chunk_dependent_sum() -> None:
    fm = ChunkDependent(bounds=(0.0, 1.0), bins=2, dim=1)
    with pytest.raises(
        AssertionError,
        match=r"fixed_sum\(chunk_rows=3, n_jobs=1\) differs from the exact sum of fixed_features at features \[1\]$",
    ):
        check_sum_invariance(fm, np.array([[0.1], [0.7]]))
    assert check_sum_invariance(fm, np.array([[0.1], [0.7]]), chunk_rows=(1, 4096)) == [1, 1]


# -- check_roundtrip --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fm",
    [
        dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=2),
        dps.RFF(dim=2, num_features=6, seed=9),
        dps.Moments(dim=2, radius=2.0),
    ],
    ids=["histogram", "rff", "moments"],
)
def test_roundtrip_returns_an_equal_copy(fm: Any) -> None:
    copy = check_roundtrip(fm, np.array([[0.2, 0.4], [0.9, 0.1]]))
    assert copy == fm and copy is not fm and copy.fingerprint() == fm.fingerprint()


def test_roundtrip_catches_state_outside_the_description() -> None:
    fm = dps.RFF(dim=2, num_features=4, seed=3)
    fm.frac_bits -= 1  # state the description does not carry: the rebuilt map sums other integers
    with pytest.raises(AssertionError, match=r"rebuilt map has other fixed_features$"):
        check_roundtrip(fm, np.full((1, 2), 0.3))


def test_roundtrip_refuses_a_map_whose_draws_changed() -> None:
    fm = dps.RFF(dim=2, num_features=4, seed=3)
    fm.frequencies = fm.frequencies * 2.0
    with pytest.raises(ValueError, match=r"does not match the stored fingerprint"):
        check_roundtrip(fm, np.zeros((1, 2)))
