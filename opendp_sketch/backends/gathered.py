"""One pass for a cluster release with a choice to make (a private tree of pairs), shared by the
Dask and Spark backends.

A schema release that chooses pairs privately (MST's tree) measures the candidates' counts, then
the chosen map's sums. Every block either step could measure is a block of one public
:class:`~opendp_sketch.MarginalTables` map; a cluster backend sums that map in the pass that
checks the table (``Backend.gather_table``) and records the exact cell counts here, by the object
it returns as the measurement's input. The pair transformations of the backend then read the
exact pair of any map made of those blocks off the record (:func:`gathered_pair`) instead of
running a pass, and run their normal pass for anything the record cannot serve.

The pairs are the same function of the rows either way: every cell count is an exact integer,
and a map's block sums are its cells' counts times the integer each cell adds per row,
saturated as a pass's totals are. Nothing here raises or warns on data.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..features.base import FeatureMap
from ..features.composite import Composite
from ..features.marginals import MarginalTables
from ..schema import Schema
from .memory import I64_MAX

__all__ = [
    "GatherKeys",
    "block_cells",
    "check_gather_map",
    "gather_table",
    "gathered_keys",
    "gathered_pair",
    "pair_of_cells",
    "pair_or_pass",
    "remember_gathered",
]

#: a map as (its marginal blocks' keys, the integer a cell of them adds per row), part by part
GatherKeys = list[tuple[list[tuple[Any, ...]], int]]


class _Gathered(NamedTuple):
    """What one pass found: the exact cell counts of every block of a marginal map, by
    :func:`_block_keys`, the row count, and the schema it encoded the rows with."""

    cells: dict[tuple[Any, ...], np.ndarray]
    rows: int
    schema: str


#: the gathered passes, by ``id`` of the object a ``gather_table`` returned, with a weak reference
#: to it (held only while that object lives: one release's measurement). Keyed by identity, not
#: by the object: a Dask DataFrame's ``==`` is an element-wise lazy comparison.
_GATHERED: dict[int, tuple[weakref.ref[Any], _Gathered]] = {}


def _schema_key(schema: Schema) -> str:
    return json.dumps(schema.to_dict(), sort_keys=True, default=str)


def _block_keys(fm: MarginalTables) -> list[tuple[Any, ...]]:
    """One key per block of ``fm`` naming its cells exactly: the map's box and categorical codes,
    then the block's columns (in its axes' order), bins and cut points. Blocks with equal keys put
    every row in the same cell (:meth:`MarginalTables.cells` reads nothing else). The box is held
    as its ``repr``: equal reprs are equal boxes (a float's repr gives the float back), and a
    string keeps its hash, so the keys of thousands of blocks hash without re-reading the box."""
    box = repr((tuple(fm.lower.tolist()), tuple(fm.upper.tolist()), tuple(sorted(fm.categories.items()))))
    return [(box, b.subset, b.shape, b.cuts) for b in fm.blocks]


def check_gather_map(feature_map: FeatureMap) -> MarginalTables:
    """``feature_map`` if it is a :class:`MarginalTables` (the blocks a pass can gather).

    :raises ValueError: for any other map (a public argument, never data)
    """
    if not isinstance(feature_map, MarginalTables):
        raise ValueError(
            f"feature_map ({feature_map!r}) must be a MarginalTables map of the blocks to gather"
        )
    return feature_map


def block_cells(feature_map: MarginalTables, sums: np.ndarray) -> dict[tuple[Any, ...], np.ndarray]:
    """The exact sums ``sums`` of ``feature_map`` (one cell count per feature) by block key."""
    return {
        k: sums[b.offset : b.offset + b.size] for k, b in zip(_block_keys(feature_map), feature_map.blocks)
    }


def pair_of_cells(
    cells: dict[tuple[Any, ...], np.ndarray], rows: int, keys: GatherKeys | None
) -> tuple[np.ndarray, int] | None:
    """The exact pair of the map of ``keys`` (:func:`gathered_keys`) from exact cell counts by
    block key (:func:`block_cells`) and the row count, saturated as a pass's totals are
    (:meth:`Accumulator.clipped`); ``None`` when a block is missing. Never raises."""
    if keys is None:
        return None
    parts = []
    for block_keys, c in keys:
        for key in block_keys:
            counts = cells.get(key)
            if counts is None:
                return None
            if counts.size and int(counts.max()) > I64_MAX // max(1, c):  # exact, then saturated
                counts = np.array([min(c * int(v), I64_MAX) for v in counts], dtype=np.int64)
            else:
                counts = counts * c
            parts.append(counts)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64), rows


def remember_gathered(
    handle: Any, schema: Schema, feature_map: MarginalTables, sums: np.ndarray, rows: int
) -> None:
    """Record the exact sums ``sums`` of ``feature_map`` (one pass over the rows ``handle``
    stands for, encoded by ``schema``) for the pairs read off it, while ``handle`` lives."""
    cells = block_cells(feature_map, sums)
    key = id(handle)
    _GATHERED[key] = (weakref.ref(handle), _Gathered(cells, rows, _schema_key(schema)))
    weakref.finalize(handle, _GATHERED.pop, key, None)


def gathered_keys(fm: FeatureMap) -> GatherKeys | None:
    """``fm`` as marginal blocks and the integer each of their cells adds per row, so its exact
    sum can be read off a gathered pass: a :class:`MarginalTables` (1 per row in its cell), or a
    :class:`~opendp_sketch.Composite` of them (a part's integers are ``⌊qᵢ·Mᵢ/2^tᵢ⌋`` of one-hot
    ``qᵢ``, so ``cᵢ·qᵢ`` with ``cᵢ`` its integer for a 1, read off one public row and checked on
    it). ``None`` for any other map. Public inputs only."""
    if isinstance(fm, MarginalTables):
        return [(_block_keys(fm), 1)]
    if not isinstance(fm, Composite) or not all(isinstance(b.feature_map, MarginalTables) for b in fm.blocks):
        return None
    row = np.zeros((1, fm.input_dim))
    whole = fm.fixed_features(row)[0]
    parts = []
    for b in fm.blocks:
        inner = b.feature_map
        assert isinstance(inner, MarginalTables)
        ones = inner.fixed_features(row)[0]
        part = whole[b.offset : b.offset + b.size]
        c = int(part[int(np.argmax(ones))])
        if not np.array_equal(part, c * ones):  # not expected: a part that is not a multiple
            return None
        parts.append((_block_keys(inner), c))
    return parts


def gathered_pair(data: Any, keys: GatherKeys | None, schema: Schema) -> tuple[np.ndarray, int] | None:
    """The exact pair of the map of ``keys`` on the rows of ``data`` encoded by ``schema``, read
    off the pass gathered for ``data``, saturated as a pass's totals are
    (:meth:`Accumulator.clipped`); ``None`` when ``data`` has no gathered pass, the pass encoded
    by another schema or lacks a block (the caller then runs its pass). Never raises."""
    if keys is None:
        return None
    entry = _GATHERED.get(id(data))
    if entry is None or entry[0]() is not data:
        return None
    gathered = entry[1]
    if gathered.schema != _schema_key(schema):
        return None
    return pair_of_cells(gathered.cells, gathered.rows, keys)


def gather_table(
    data: Any,
    schema: Schema,
    feature_map: FeatureMap,
    check_types: Callable[[Any, Schema], None],
    count: Callable[[Any, MarginalTables, dict[str, Any]], tuple[np.ndarray, int]],
    handle_of: Callable[[Any], Any],
) -> tuple[Any, int]:
    """A cluster backend's ``gather_table``, from its parts: ``check_types(data, schema)`` (the
    collection's own schema, no pass), then ``count(data, blocks, found)`` — the one pass: the
    exact sums of ``feature_map``'s blocks and the row count, with the problems the schema's rules
    do not cover put in ``found["problems"]`` — refused on the curator's side as
    :meth:`Schema.refuse` refuses them; the pass is recorded for ``handle_of(data)`` (the same
    rows as an object of this release's own), which is returned with the row count (never
    released).

    :raises ValueError: for a map that is not a ``MarginalTables``, an empty table, or the
        problems, naming columns and never a data value
    """
    blocks = check_gather_map(feature_map)
    check_types(data, schema)
    found: dict[str, Any] = {}
    sums, rows = count(data, blocks, found)
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found["problems"])
    handle = handle_of(data)
    remember_gathered(handle, schema, blocks, sums, rows)
    return handle, rows


def pair_or_pass(
    feature_map: FeatureMap, schema: Schema, run_pass: Callable[[Any], tuple[np.ndarray, int]]
) -> Callable[[Any], tuple[np.ndarray, int]]:
    """A backend's pair function for ``feature_map``: read off the pass gathered for its input
    (:func:`gathered_pair`), else ``run_pass(input)``. Never raises on data itself."""
    keys = gathered_keys(feature_map)

    def pair(data: Any) -> tuple[np.ndarray, int]:
        gathered = gathered_pair(data, keys, schema)
        return gathered if gathered is not None else run_pass(data)

    return pair
