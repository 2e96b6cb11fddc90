"""``opendp_sketch.backends.domains``: the box domain's descriptor, identifier and membership (adversarial
rows included), the descriptors' lookups and refusals, a table domain's encoded box, ByClass data
bounds, and the public NaN fill of the cluster descriptors."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.domains import (
    BoxDescriptor,
    DaskBoxDomain,
    NPArray2BoxDomain,
    TableDomain,
    box_data_bounds,
    box_descriptor,
    box_domain,
    descriptor_of,
    table_descriptor,
)
from opendp_sketch.backends.tables import table_domain

LO, HI = np.array([0.0, -2.0]), np.array([1.0, 5.0])


@pytest.fixture(scope="module")
def dom() -> dp.Domain:
    return box_domain((LO, HI), column_names=["a", "b"])


# -- box_domain: descriptor and identifier ------------------------------------------------------
def test_descriptor_holds_the_public_box_and_names(dom: dp.Domain) -> None:
    desc = dom.descriptor
    assert isinstance(desc, NPArray2BoxDomain) and isinstance(desc, BoxDescriptor)
    assert desc == NPArray2BoxDomain(
        lower=(0.0, -2.0), upper=(1.0, 5.0), num_columns=2, column_names=("a", "b"), T="f64"
    )
    lo, hi = desc.bounds
    assert lo.dtype == hi.dtype == np.float64 and lo.tolist() == [0.0, -2.0] and hi.tolist() == [1.0, 5.0]
    assert str(dom) == (
        "NPArray2BoxDomain(num_columns=2, lower=[0.0, -2.0], upper=[1.0, 5.0], column_names=['a', 'b'])"
    )


def test_descriptor_is_frozen_and_hashable(dom: dp.Domain) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        dom.descriptor.lower = (-1.0, -1.0)  # type: ignore[misc]
    assert hash(dom.descriptor) == hash(box_domain((LO, HI), column_names=["a", "b"]).descriptor)


def test_scalar_bounds_need_and_take_the_column_count() -> None:
    d = box_domain((0, 1), num_columns=3)
    assert d.descriptor.num_columns == 3 and d.descriptor.upper == (1.0, 1.0, 1.0)
    assert d.descriptor.column_names is None
    assert str(d) == "NPArray2BoxDomain(num_columns=3, lower=[0.0, 0.0, 0.0], upper=[1.0, 1.0, 1.0])"
    assert box_domain((0, 1)).descriptor.num_columns == 1


def test_column_names_are_taken_as_text() -> None:
    assert box_domain((0, 1), num_columns=2, column_names=[1, 2]).descriptor.column_names == ("1", "2")


@pytest.mark.parametrize(
    "names, message",
    [
        (["a", "a"], r"^column_names \(\['a', 'a'\]\) must be 2 distinct names$"),
        (["a"], r"^column_names \(\['a'\]\) must be 2 distinct names$"),
        (["a", "b", "c"], r"must be 2 distinct names$"),
    ],
)
def test_bad_column_names_are_refused(names: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        box_domain((0, 1), num_columns=2, column_names=names)


@pytest.mark.parametrize(
    "bounds, num_columns, message",
    [
        ((1, 0), None, "lower < upper"),
        ((0, np.nan), None, "must be finite"),
        ((0, [1, 2, 3]), 2, r"one value per column \(2 columns\)"),
        (0, None, r"must be a pair"),
    ],
)
def test_bad_bounds_are_refused(bounds: Any, num_columns: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        box_domain(bounds, num_columns)


# -- box_domain: membership ---------------------------------------------------------------------
def test_members_are_finite_float64_rows_inside_the_closed_box(dom: dp.Domain) -> None:
    assert dom.member(np.zeros((0, 2)))
    assert dom.member(np.array([[0.0, -2.0], [1.0, 5.0], [0.5, 0.0]]))  # corners are inside
    assert dom.member(np.array([[0.0, -0.0]]))


@pytest.mark.parametrize(
    "row",
    [
        [np.nan, 0.0],
        [0.5, np.nan],
        [np.inf, 0.0],
        [0.5, -np.inf],
        [1e300, 0.0],
        [-1e300, 0.0],
        [np.finfo(np.float64).max, 0.0],
        [float(np.nextafter(1.0, 2.0)), 0.0],
        [0.0, float(np.nextafter(-2.0, -3.0))],
        [-5e-324, 0.0],
    ],
)
def test_adding_an_adversarial_row_leaves_the_domain(dom: dp.Domain, row: list[float]) -> None:
    """A neighbour that adds one row outside the box is not a member; the base dataset is."""
    base = np.array([[0.25, 1.0], [0.75, 4.0]])
    assert dom.member(base)
    assert not dom.member(np.vstack([base, [row]]))
    assert not dom.member(np.vstack([[row], base]))


def test_removing_a_row_keeps_membership(dom: dp.Domain) -> None:
    base = np.array([[0.0, -2.0], [1.0, 5.0], [0.5, 0.0]])
    for i in range(base.shape[0]):
        assert dom.member(np.delete(base, i, axis=0))


@pytest.mark.parametrize(
    "value",
    [
        np.zeros((2, 2), dtype=np.float32),
        np.zeros((2, 2), dtype=np.int64),
        np.zeros((2, 3)),
        np.zeros((2, 1)),
        np.zeros(2),
        np.zeros((1, 2, 2)),
        [[0.0, 0.0]],
        "0,0",
        None,
    ],
)
def test_other_containers_and_shapes_are_not_members(dom: dp.Domain, value: Any) -> None:
    assert dom.member(value) is False


# -- descriptor lookups -------------------------------------------------------------------------
SCHEMA = dps.Schema({"age": (18, 90), "cut": ["Fair", "Good", "Ideal"]})


def test_box_descriptor_takes_only_a_box_domain(dom: dp.Domain) -> None:
    assert box_descriptor(dom) is dom.descriptor
    for other in (table_domain(SCHEMA), dp.numpy.array2_domain(T=float), dp.atom_domain(T=float)):
        with pytest.raises(ValueError, match=r"must be a box_domain \(see opendp_sketch\.box_domain\)$"):
            box_descriptor(other)


def test_descriptor_of_takes_every_box_descriptor(dom: dp.Domain) -> None:
    assert descriptor_of(dom) is dom.descriptor
    assert isinstance(descriptor_of(table_domain(SCHEMA)), TableDomain)
    for other in (dp.numpy.array2_domain(T=float), dp.vector_domain(dp.atom_domain(T=float))):
        with pytest.raises(
            ValueError, match=r"must be a box_domain, frame_box_domain, dask_box_domain or a table"
        ):
            descriptor_of(other)


def test_table_descriptor_is_the_schemas_encoded_box() -> None:
    desc = table_descriptor(SCHEMA)
    assert type(desc) is TableDomain
    assert desc.lower == (0.0, 0.0) and desc.upper == (1.0, 2.0)  # numeric [0, 1], coded [0, K-1]
    assert desc.num_columns == 2 and desc.column_names == ("age", "cut") and desc.schema is SCHEMA
    lo, hi = SCHEMA.bounds
    assert desc.bounds[0].tolist() == lo.tolist() and desc.bounds[1].tolist() == hi.tolist()


def test_table_descriptor_of_a_backend_kind() -> None:
    from opendp_sketch.backends.domains import DaskTableDomain, SparkTableDomain

    for kind in (DaskTableDomain, SparkTableDomain):
        desc = table_descriptor(SCHEMA, kind)
        assert type(desc) is kind and isinstance(desc, TableDomain) and desc.upper == (1.0, 2.0)


@pytest.mark.parametrize("schema", [{"age": (18, 90)}, None, "Schema", SCHEMA.to_dict()])
def test_table_descriptor_refuses_anything_but_a_schema(schema: Any) -> None:
    with pytest.raises(ValueError, match=r"must be an opendp_sketch\.Schema$"):
        table_descriptor(schema)


# -- box_data_bounds ----------------------------------------------------------------------------
def test_plain_maps_take_the_bounds_as_given() -> None:
    fm = dps.Histogram(bounds=(0, 1), bins=2, dim=3)
    lo, hi = box_data_bounds((0, [1, 2, 3]), fm)
    assert lo.tolist() == [0.0, 0.0, 0.0] and hi.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=r"one value per column \(3 columns\)"):
        box_data_bounds((0, [1, 2]), fm)


def test_byclass_label_column_defaults_to_the_class_codes() -> None:
    fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=4)
    lo, hi = box_data_bounds((0.0, 1.0), fm)
    assert lo.tolist() == [0.0, 0.0, 0.0] and hi.tolist() == [1.0, 1.0, 3.0]
    lo, hi = box_data_bounds(((0.0, -1.0), (1.0, 2.0)), fm)  # one value per feature column
    assert lo.tolist() == [0.0, -1.0, 0.0] and hi.tolist() == [1.0, 2.0, 3.0]
    lo, hi = box_data_bounds(((0, 0, 0), (1, 1, 9)), fm)  # every column given: kept as given
    assert hi.tolist() == [1.0, 1.0, 9.0]
    with pytest.raises(ValueError, match=r"one value per column \(3 columns\)"):
        box_data_bounds(((0, 0, 0, 0), (1, 1, 1, 1)), fm)


# -- the cluster descriptors' public fill -------------------------------------------------------
def _cluster(nan: bool) -> DaskBoxDomain:
    return DaskBoxDomain(
        lower=(0.0, 10.0), upper=(1.0, 20.0), num_columns=2, column_names=None, nan=nan, inf=True
    )


def test_fill_without_impute_is_the_lower_bound_unless_nan_is_admitted() -> None:
    domain = dp.atom_domain(T=float)
    assert _cluster(nan=False).fill(None, domain) is None
    with pytest.raises(ValueError, match=r"permits NaN: pass impute=<public value> or use nan=False$"):
        _cluster(nan=True).fill(None, domain)


def test_fill_checks_impute_against_the_box() -> None:
    domain = dp.atom_domain(T=float)
    for nan in (False, True):
        assert _cluster(nan).fill([0.5, 15.0], domain).tolist() == [0.5, 15.0]
    with pytest.raises(ValueError, match=r"column 1 is \[10\.0, 20\.0\]$"):
        _cluster(True).fill(0.5, domain)
    with pytest.raises(ValueError, match=r"impute values must be finite"):
        _cluster(True).fill(np.nan, domain)
