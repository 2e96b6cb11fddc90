"""The domains sketches are computed from: one descriptor base class, one subclass per backend.

Follows OpenDP's convention (``dp.numpy.array2_domain`` → ``NPArray2Domain``): a lowercase
factory returning an OpenDP domain whose ``descriptor`` is a frozen dataclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import opendp.prelude as dp

from .._validate import check_bounds, impute_values
from ..features.base import FeatureMap
from ..features.byclass import ByClass

__all__ = [
    "BoxDescriptor",
    "NPArray2BoxDomain",
    "FrameBoxDomain",
    "ClusterBoxDomain",
    "DaskBoxDomain",
    "SparkBoxDomain",
    "TableDomain",
    "DaskTableDomain",
    "SparkTableDomain",
    "box_domain",
    "box_descriptor",
    "descriptor_of",
    "table_descriptor",
    "box_data_bounds",
]


@dataclass(frozen=True, kw_only=True)
class BoxDescriptor:
    """What every domain a sketch is computed from shares: a public box and the column names.

    Backends subclass it (numpy arrays, Polars frames, Dask collections, Spark DataFrames);
    the release layer reads only these fields, whatever the backend.
    """

    lower: tuple[float, ...]
    """per-column lower bounds"""
    upper: tuple[float, ...]
    """per-column upper bounds"""
    num_columns: int
    """``d``"""
    column_names: tuple[str, ...] | None
    """column names (read from frames; carried into the released sketch)"""

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` as float64 vectors."""
        return np.array(self.lower), np.array(self.upper)


@dataclass(frozen=True, kw_only=True)
class NPArray2BoxDomain(BoxDescriptor):
    """Descriptor of :func:`box_domain`: float64 arrays ``(n, d)`` inside a public box."""

    T: str = "f64"
    """atom type"""


@dataclass(frozen=True, kw_only=True)
class FrameBoxDomain(BoxDescriptor):
    """Descriptor of :func:`~opendp_sketch.backends.streaming.frame_box_domain`: Polars frames with numeric columns."""

    impute: tuple[float, ...] | None
    """public values that replace null/NaN (``None``: the lower bound)"""


@dataclass(frozen=True, kw_only=True)
class ClusterBoxDomain(BoxDescriptor):
    """What the cluster backends (Dask, Spark) add: whether a one-call release accepts NaN and
    ``±inf``, which the one pass over the cluster reports so the client refuses them before the
    noise is drawn."""

    nan: bool
    """whether a one-call release accepts null/NaN (then it needs ``impute``)"""
    inf: bool
    """whether a one-call release accepts ``±inf`` (clipped to the bounds)"""

    def fill(self, impute: Any, input_domain: dp.Domain) -> np.ndarray | None:
        """The public per-column values replacing null/NaN (``None``: the lower bound), checked
        against the box; a domain that admits NaN needs them."""
        if impute is None:
            if self.nan:
                raise ValueError(
                    f"input_domain ({input_domain}) permits NaN: pass impute=<public value> or use nan=False"
                )
            return None
        return impute_values(impute, self.num_columns, self.bounds)


@dataclass(frozen=True, kw_only=True)
class DaskBoxDomain(ClusterBoxDomain):
    """Descriptor of :func:`~opendp_sketch.backends.dask.dask_box_domain`: 2-D Dask collections."""


@dataclass(frozen=True, kw_only=True)
class SparkBoxDomain(ClusterBoxDomain):
    """Descriptor of :func:`~opendp_sketch.backends.spark.spark_box_domain`: Spark DataFrames
    with named numeric columns."""


@dataclass(frozen=True, kw_only=True)
class TableDomain(BoxDescriptor):
    """Descriptor of :func:`~opendp_sketch.backends.tables.table_domain`: tables under a public schema;
    the box is the schema's encoded box (``[0, 1]`` numeric, ``[0, K−1]`` coded)."""

    schema: Any
    """the :class:`~opendp_sketch.Schema`"""


@dataclass(frozen=True, kw_only=True)
class DaskTableDomain(TableDomain):
    """Descriptor of :func:`~opendp_sketch.backends.dask.dask_table_domain`: Dask DataFrames under a
    public schema (each partition encoded by the schema on its worker)."""


@dataclass(frozen=True, kw_only=True)
class SparkTableDomain(TableDomain):
    """Descriptor of :func:`~opendp_sketch.backends.spark.spark_table_domain`: Spark DataFrames under a
    public schema (each partition encoded by the schema on its executor)."""


def table_descriptor(schema: Any, kind: type = TableDomain) -> Any:
    """The descriptor (``kind``: :class:`TableDomain` or a backend's subclass) of tables under a
    public schema: the schema's encoded box and column names."""
    if type(schema).__name__ != "Schema":  # by name: doctests may import the schema module twice
        raise ValueError(f"schema ({schema!r}) must be an opendp_sketch.Schema")
    lo, hi = schema.bounds
    return kind(
        lower=tuple(lo.tolist()),
        upper=tuple(hi.tolist()),
        num_columns=len(schema),
        column_names=tuple(schema.columns),
        schema=schema,
    )


def descriptor_of(domain: dp.Domain) -> BoxDescriptor:
    """The :class:`BoxDescriptor` of any domain a sketch can be computed from, or a clear error."""
    desc = getattr(domain, "descriptor", None)
    if not isinstance(desc, BoxDescriptor):
        raise ValueError(
            f"input_domain ({domain}) must be a box_domain, frame_box_domain, dask_box_domain or a table "
            "domain (see opendp_sketch.box_domain and opendp_sketch.table_domain)"
        )
    return desc


def box_data_bounds(bounds: Any, feature_map: FeatureMap) -> tuple[np.ndarray, np.ndarray]:
    """Bounds for every data column of ``feature_map``; for ``ByClass`` the label column
    defaults to ``[0, C-1]``.

    >>> import opendp_sketch as dps
    >>> fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=3)
    >>> [b.tolist() for b in box_data_bounds((0.0, 1.0), fm)]
    [[0.0, 0.0, 0.0], [1.0, 1.0, 2.0]]
    """
    if isinstance(feature_map, ByClass):
        lo, hi = check_bounds(bounds)
        if lo.size in (1, feature_map.dim) and lo.size != feature_map.input_dim:
            lo = np.append(np.broadcast_to(lo, (feature_map.dim,)), 0.0)
            hi = np.append(np.broadcast_to(hi, (feature_map.dim,)), feature_map.num_classes - 1.0)
        return check_bounds((lo, hi), feature_map.input_dim)
    return check_bounds(bounds, feature_map.input_dim)


def box_domain(
    bounds: Any,
    num_columns: int | None = None,
    column_names: Sequence[str] | None = None,
) -> dp.Domain:
    """Domain of float64 arrays ``(n, d)``, ``n ≥ 0``, with finite values inside ``bounds``.

    Bounds are public: they must come from knowledge about the data's schema, never from the
    data. Use :func:`~opendp_sketch.make_box_clip` to map arbitrary float arrays into it.

    :param bounds: ``(lower, upper)``, scalars or one value per column
    :param num_columns: ``d`` (needed only when both bounds are scalars)
    :param column_names: optional names, one per column
    :return: an OpenDP domain whose ``descriptor`` is :class:`NPArray2BoxDomain`
    :raises ValueError: on malformed bounds or names
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> dom = dps.box_domain(bounds=(0.0, [1.0, 5.0]))
    >>> dom.descriptor.num_columns, dom.descriptor.upper
    (2, (1.0, 5.0))
    >>> dom.member(np.array([[0.5, 4.0]]))
    True
    >>> dom.member(np.array([[0.5, 6.0]]))
    False
    """
    lo, hi = check_bounds(bounds, num_columns)
    names = None
    if column_names is not None:
        names = tuple(str(c) for c in column_names)
        if len(names) != lo.size or len(set(names)) != len(names):
            raise ValueError(f"column_names ({list(names)}) must be {lo.size} distinct names")
    desc = NPArray2BoxDomain(
        lower=tuple(lo.tolist()), upper=tuple(hi.tolist()), num_columns=lo.size, column_names=names
    )

    def _member(x: Any) -> bool:
        return (
            isinstance(x, np.ndarray)
            and x.dtype == np.float64
            and x.ndim == 2
            and x.shape[1] == lo.size
            and bool(np.all((x >= lo) & (x <= hi)))  # False for NaN
        )

    ident = f"NPArray2BoxDomain(num_columns={lo.size}, lower={list(desc.lower)}, upper={list(desc.upper)}"
    ident += ")" if names is None else f", column_names={list(names)})"
    return dp.user_domain(ident, _member, desc)


def box_descriptor(domain: dp.Domain) -> NPArray2BoxDomain:
    """The :class:`NPArray2BoxDomain` of ``domain``, or a clear error."""
    desc = getattr(domain, "descriptor", None)
    if not isinstance(desc, NPArray2BoxDomain):
        raise ValueError(f"input_domain ({domain}) must be a box_domain (see opendp_sketch.box_domain)")
    return desc
