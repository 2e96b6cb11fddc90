"""Joint marginal tables: one-hot of a row's cell in every public 1-, 2- or 3-way marginal.

Proof of the sensitivity and the layout: ``docs/features/marginals.md``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._validate import check_bounds, check_positive_int
from .base import OneHotFeatureMap, chunk_memo, register_feature_map, scratch_array

__all__ = ["MarginalTables", "MarginalBlock"]

#: most columns in one marginal
MAX_WAY = 3
#: most marginals in one map
MAX_SUBSETS = 1 << 14
#: most cells in all marginals together (the sketch holds one int64 per cell: 128 MiB)
MAX_CELLS = 1 << 24
#: a map of 1- and 2-way marginals with at least this many 2-way tables, and at least
#: ``GRAM_PAIRS_PER_INDICATOR`` of them per bin indicator, sums its cells as one Gram product
#: of the columns' bin indicators. Measured on one core, n = 2·10⁵: the product costs about
#: ``2.2·10⁻⁶·width²`` s and counting indices about ``10⁻⁶·pairs²`` s (40 columns, 780 pairs,
#: 903 indicators: 1.7 s against 1.1 s; 80 columns, 3 160 pairs: 2.0 s against 9.1 s; 100
#: columns: 2.1 s against 21 s), so the product wins from about 1.5 pairs per indicator
GRAM_MIN_PAIRS = 32
GRAM_PAIRS_PER_INDICATOR = 1.5
#: ... and at most this many bin indicators in all (the product is ``width²`` floats per chunk)
GRAM_MAX_WIDTH = 4096


class MarginalBlock(NamedTuple):
    """Where one marginal table sits in the feature vector."""

    subset: tuple[int, ...]
    """the data columns of the marginal, in the order of the table's axes"""
    shape: tuple[int, ...]
    """bins per column of ``subset``: the table's shape"""
    offset: int
    """index of the table's first cell in the feature vector"""
    cuts: tuple[tuple[float, ...] | None, ...] = ()
    """per column of ``subset``: its public interior cut points when given explicitly (``None``:
    ``shape``'s equal bins, or the codes of a categorical column)"""

    @property
    def size(self) -> int:
        """Number of cells of the table."""
        return math.prod(self.shape)

    def column_cuts(self, k: int) -> tuple[float, ...] | None:
        """Cut points of the ``k``-th column of :attr:`subset` (``None``: equal bins or codes)."""
        return self.cuts[k] if self.cuts else None


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _parse_subsets(subsets: Any, dim: int) -> list[tuple[int, ...]]:
    """Subsets as tuples of distinct column indices (an int ``j`` means ``(j,)``), no set twice."""
    if isinstance(subsets, (str, bytes)) or not isinstance(subsets, Sequence) or len(subsets) == 0:
        raise ValueError(f"subsets ({subsets!r}) must be a non-empty sequence of column-index tuples")
    if len(subsets) > MAX_SUBSETS:
        raise ValueError(f"subsets has {len(subsets)} marginals; it must have at most {MAX_SUBSETS}")
    out: list[tuple[int, ...]] = []
    for s in subsets:
        cols = (s,) if _is_int(s) else s
        if (
            isinstance(cols, (str, bytes))
            or not isinstance(cols, Sequence)
            or not all(_is_int(j) for j in cols)
        ):
            raise ValueError(f"subset ({s!r}) must be a column index or a tuple of column indices")
        t = tuple(int(j) for j in cols)
        if not 1 <= len(t) <= MAX_WAY or len(set(t)) != len(t):
            raise ValueError(f"subset ({s!r}) must hold 1 to {MAX_WAY} distinct columns")
        if min(t) < 0 or max(t) >= dim:
            raise ValueError(f"subset ({s!r}) must hold column indices in [0, {dim - 1}]")
        out.append(t)
    return out


def _parse_categorical(categorical: Any, lo: np.ndarray, hi: np.ndarray) -> dict[int, int]:
    """``{column: cardinality K}`` for categorical columns (integer bounds, ``K = hi - lo + 1``)."""
    if categorical is None:
        return {}
    if isinstance(categorical, (str, bytes)) or not isinstance(categorical, Sequence):
        raise ValueError(f"categorical ({categorical!r}) must be a sequence of column indices")
    out: dict[int, int] = {}
    for j in categorical:
        if not _is_int(j) or not 0 <= j < lo.size or int(j) in out:
            raise ValueError(
                f"categorical column ({j!r}) must be a distinct column index in [0, {lo.size - 1}]"
            )
        if not (float(lo[j]).is_integer() and float(hi[j]).is_integer()):
            raise ValueError(
                f"categorical column {j} has bounds ({lo[j]}, {hi[j]}); they must be integer codes"
            )
        k = int(hi[j] - lo[j]) + 1
        if k > MAX_CELLS:
            raise ValueError(f"categorical column {j} has {k} codes; it must have at most {MAX_CELLS}")
        out[int(j)] = k
    return out


def _check_bins_value(v: Any, column: int, categories: dict[int, int]) -> int:
    if not _is_int(v) or not 1 <= v <= MAX_CELLS:
        raise ValueError(f"bins ({v!r}) of column {column} must be a positive integer at most {MAX_CELLS}")
    k = categories.get(column)
    if k is not None and int(v) != k:
        raise ValueError(f"bins ({v}) of categorical column {column} must equal its number of codes ({k})")
    return int(v)


def _parse_bins(
    bins: Any,
    subsets: list[tuple[int, ...]],
    lo: np.ndarray,
    hi: np.ndarray,
    categories: dict[int, int],
) -> list[tuple[tuple[int, ...], tuple[tuple[float, ...] | None, ...]]]:
    """``(shape, cuts)`` per subset from bins given as an int (numeric columns; categorical ones
    get ``K``), one int per column, or one entry per subset (an int, or one entry per column of the
    subset: an int or a list of cut points). ``cuts`` holds each column's cut points (``None``:
    equal bins or codes)."""
    dim = lo.size
    Cuts = tuple[tuple[float, ...] | None, ...]

    def equal(shape: tuple[int, ...]) -> tuple[tuple[int, ...], Cuts]:
        return shape, tuple(None for _ in shape)

    if _is_int(bins):
        return [equal(tuple(categories.get(j) or _check_bins_value(bins, j, {}) for j in s)) for s in subsets]
    if isinstance(bins, (str, bytes)) or not isinstance(bins, Sequence):
        raise ValueError(f"bins ({bins!r}) must be an int, one int per column, or one entry per subset")
    if all(_is_int(b) for b in bins):
        if len(bins) != dim:
            raise ValueError(
                f"bins ({bins!r}) as a flat list must have one int per column ({dim}); "
                "give per-subset bins as a list of lists"
            )
        return [equal(tuple(_check_bins_value(bins[j], j, categories) for j in s)) for s in subsets]
    if len(bins) != len(subsets):
        raise ValueError(
            f"bins has {len(bins)} entries; per-subset bins need one per subset ({len(subsets)})"
        )
    out: list[tuple[tuple[int, ...], Cuts]] = []
    for s, b in zip(subsets, bins):
        if _is_int(b):
            out.append(equal(tuple(categories.get(j) or _check_bins_value(b, j, {}) for j in s)))
        elif _is_cut_list(b) and len(b) == len(s):
            cuts: list[tuple[float, ...] | None] = [
                _check_cuts(v, j, lo, hi, categories) if _is_cut_list(v) else None for v, j in zip(b, s)
            ]
            shape = tuple(
                len(c) + 1 if c is not None else _check_bins_value(v, j, categories)
                for c, v, j in zip(cuts, b, s)
            )
            out.append((shape, tuple(cuts)))
        else:
            raise ValueError(f"bins ({b!r}) of subset {s} must be an int or {len(s)} entries")
    return out


def _is_cut_list(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes))


def _check_cuts(
    v: Any, j: int, lo: np.ndarray, hi: np.ndarray, categories: dict[int, int]
) -> tuple[float, ...]:
    """Public interior cut points of numeric column ``j``: increasing, strictly inside its bounds."""
    if j in categories:
        raise ValueError(f"categorical column {j} takes its codes, not cut points ({v!r})")
    try:
        c = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"cut points ({v!r}) of column {j} must be numbers") from None
    if (
        c.ndim != 1
        or c.size + 1 > MAX_CELLS
        or not np.isfinite(c).all()
        or (c.size and (c[0] <= lo[j] or c[-1] >= hi[j]))
        or (np.diff(c) <= 0).any()
    ):
        raise ValueError(
            f"cut points ({v!r}) of column {j} must be increasing numbers strictly inside ({lo[j]}, {hi[j]})"
        )
    return tuple(c.tolist())


def _bins_spec(b: MarginalBlock) -> list[Any]:
    """A block's bins as the constructor takes them: an int per column, or its cut points."""
    cuts = [b.column_cuts(k) for k in range(len(b.shape))]
    return [list(c) if c is not None else n for c, n in zip(cuts, b.shape)]


#: a map counts several of its tables in one pass: the joint table of at most
#: ``JOINT_MAX_COLUMNS`` (column, bins) axes and ``JOINT_MAX_CELLS`` cells, each table the sum of
#: the joint's cells over the axes it lacks. Measured per row on one core (chunks of 2¹⁴ rows): a
#: bincount into 16 cells 1.8 ns, into 256 to 4 096 cells 1.0-1.1 ns, a combined index 0.2-0.4 ns,
#: so three 2-way tables from one 3-way joint cost about a third of counting each
JOINT_MAX_COLUMNS = 3
JOINT_MAX_CELLS = 1 << 14


#: marks a memo of one call (not a sum's chunk memo): its arrays are fresh, not the thread's
#: scratch arrays, which the chunk memo's hold for the whole chunk (a ``ByClass`` part, say,
#: reads other rows between two parts that share the chunk's bins)
_LOCAL = "marginals.local"


class _Joint(NamedTuple):
    """One joint table a map counts: its axes ``(column, bins, cuts)`` as a block (offset 0), and
    per block read off it: ``(offset, size, axes summed out, transpose to the block's order)``."""

    block: MarginalBlock
    reads: tuple[tuple[int, int, tuple[int, ...], tuple[int, ...] | None], ...]


def _joint_axes(keys: Sequence[tuple[Any, ...]]) -> list[tuple[list[Any], list[int]]]:
    """The greedy cover of :func:`_joint_layout`: per joint, its axes (keys) in order and the
    blocks it reads (their positions in ``keys``, increasing). A joint
    starts from the first block not yet read and takes, one at a time, the key that lets it read
    the most unread blocks (ties: the first in order of appearance) while it stays within the
    limits. An index from key to the unread blocks holding it makes a step cost the blocks
    touching the joint's axes, not every unread block: a block the joint cannot read yet becomes
    readable with key ``k`` exactly when ``k`` is its one key outside the axes."""
    universe = {k: i for i, k in enumerate(dict.fromkeys(k for ks in keys for k in ks))}
    sets = [frozenset(ks) for ks in keys]
    holding: dict[Any, set[int]] = {k: set() for k in universe}
    alone: dict[Any, int] = {}  # unread blocks whose only key is k (readable once k is an axis)
    for i, ks in enumerate(sets):
        for k in ks:
            holding[k].add(i)
        if len(ks) == 1:
            (k,) = ks
            alone[k] = alone.get(k, 0) + 1
    read = [False] * len(keys)
    first, out = 0, []
    while first < len(keys):
        axes = list(keys[first])
        while len(axes) < JOINT_MAX_COLUMNS:
            have = set(axes)
            gain: dict[Any, int] = dict(alone)
            for i in set().union(*(holding[a] for a in axes)):
                rest = sets[i] - have
                if len(rest) == 1:
                    (k,) = rest
                    gain[k] = gain.get(k, 0) + 1
            cells = math.prod(a[1] for a in axes)
            best, most = None, 0
            for k, got in gain.items():
                if got <= 0 or k in have or cells * k[1] > JOINT_MAX_CELLS:
                    continue
                if got > most or (got == most and best is not None and universe[k] < universe[best]):
                    best, most = k, got
            if best is None:
                break
            axes.append(best)
        have = set(axes)
        members = sorted(i for i in set().union(*(holding[a] for a in axes)) if sets[i] <= have)
        for i in members:
            read[i] = True
            for k in sets[i]:
                holding[k].discard(i)
            if len(sets[i]) == 1:
                (k,) = sets[i]
                alone[k] -= 1
        out.append((axes, members))
        while first < len(keys) and read[first]:
            first += 1
    return out


def _joint_layout(blocks: Sequence[MarginalBlock]) -> tuple[_Joint, ...]:
    """Blocks grouped into joint tables within the limits above (public: it reads the blocks
    only), by the greedy cover of :func:`_joint_axes`. Every block is the marginal of its joint
    over the axes it lacks."""

    def keys_of(b: MarginalBlock) -> tuple[tuple[int, int, Any], ...]:
        return tuple((j, n, b.column_cuts(k)) for k, (j, n) in enumerate(zip(b.subset, b.shape)))

    keys = [keys_of(b) for b in blocks]
    out = []
    for axes, members in _joint_axes(keys):
        shape = tuple(a[1] for a in axes)
        cuts = tuple(a[2] for a in axes)
        joint = MarginalBlock(
            tuple(a[0] for a in axes), shape, 0, cuts if any(c is not None for c in cuts) else ()
        )
        plan = []
        for i in members:
            at = tuple(axes.index(k) for k in keys[i])
            rest = tuple(a for a in range(len(axes)) if a not in at)
            kept = sorted(at)  # the summed table's axes, in the joint's order
            perm = tuple(kept.index(a) for a in at)
            plan.append(
                (blocks[i].offset, blocks[i].size, rest, None if perm == tuple(range(len(perm))) else perm)
            )
        out.append(_Joint(joint, tuple(plan)))
    return tuple(out)


def _gram_layout(
    blocks: Sequence[MarginalBlock],
) -> tuple[dict[tuple[int, int, Any], int], int, np.ndarray, np.ndarray] | None:
    """Where each cell of 1- and 2-way ``blocks`` sits in the Gram product of the bin indicators:
    ``({(column, bins, cuts): first indicator}, indicators, row index, column index)`` per cell
    in feature order, or ``None`` when the map has 3-way tables, few pairs or too many bins."""
    if any(len(b.subset) > 2 for b in blocks) or sum(len(b.subset) == 2 for b in blocks) < GRAM_MIN_PAIRS:
        return None
    keys: dict[tuple[int, int, Any], int] = {}
    width = 0
    starts = []
    for b in blocks:
        here = []
        for k, (j, n) in enumerate(zip(b.subset, b.shape)):
            key = (j, n, b.column_cuts(k))
            if key not in keys:
                keys[key], width = width, width + n
            here.append(keys[key])
        starts.append(here)
    pairs = sum(len(b.subset) == 2 for b in blocks)
    if width > GRAM_MAX_WIDTH or pairs < GRAM_PAIRS_PER_INDICATOR * width:
        return None
    # the blocks of one shape at once (thousands of pairs share a few shapes), each block's cells
    # at its place in feature order
    sizes = [b.size for b in blocks]
    at = np.cumsum([0, *sizes[:-1]], dtype=np.int64)
    rows = np.empty(sum(sizes), dtype=np.int64)
    cols = np.empty(sum(sizes), dtype=np.int64)
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, b in enumerate(blocks):
        by_shape.setdefault(b.shape, []).append(i)
    for shape, index in by_shape.items():
        first = np.array([starts[i] for i in index], dtype=np.int64).reshape(len(index), -1)
        where = at[index][:, None] + np.arange(math.prod(shape))
        if len(shape) == 1:
            cells = first[:, :1] + np.arange(shape[0])
            rows[where], cols[where] = cells, cells
        else:  # C order: the cell index is a·b₂ + c
            rows[where] = first[:, :1] + np.repeat(np.arange(shape[0]), shape[1])
            cols[where] = first[:, 1:2] + np.tile(np.arange(shape[1]), shape[0])
    return keys, width, rows, cols


@register_feature_map
class MarginalTables(OneHotFeatureMap):
    r"""One-hot of a row's cell in every public marginal table, the tables side by side.

    Each marginal is a public subset ``S`` of 1 to 3 columns with public bins per column; its
    table has ``Π_{j∈S} b_j`` cells and a row falls in exactly one of them. Numeric column ``j``
    has ``b_j`` equal-width bins of ``[lo_j, hi_j]`` (values outside are clipped to the end bins,
    NaN goes to the lowest bin). A **categorical** column holds integer codes ``lo_j, …, hi_j``:
    its ``K = hi_j - lo_j + 1`` bins are centred on the codes (edges at half-integers), so every
    code has its own bin; non-integers round to the nearest code, outside values clip, NaN goes
    to code ``lo_j``. The same column may have fine bins in one marginal and coarse bins in
    another (numeric columns only).

    **Sensitivity.** Every row sets exactly one cell per marginal to 1 and nothing else
    (integers, no rounding), so with ``|𝒮|`` marginals ``‖Φ(x)‖₁ = |𝒮|`` and
    ``‖Φ(x)‖₂ = √|𝒮|``, for every float row including NaN and ``±inf``.

    :param bounds: public ``(lower, upper)`` per column (scalars broadcast; integers for
        categorical columns)
    :param subsets: the marginals: tuples of 1 to 3 distinct column indices (an int ``j`` is the
        1-way marginal ``(j,)``); the tuple's order is the order of the table's axes
    :param bins: bins per numeric column: one int for all (categorical columns always get their
        ``K``), one int per column, or one entry per subset (an int, or one entry per column of
        that subset: an int for equal bins, or a list of public interior cut points
        ``c₁ < … < c_k`` strictly inside the bounds for the bins ``[lo, c₁), …, [c_k, hi]``)
    :param categorical: indices of categorical columns (integer codes in their bounds)
    :param dim: number of columns (needed only when both bounds are scalars)
    :raises ValueError: for malformed bounds, subsets or bins, or more than ``MAX_CELLS``
        (``2^24``) cells or ``MAX_SUBSETS`` (``2^14``) marginals
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.MarginalTables(bounds=([0, 0], [1, 2]), subsets=[0, 1, (0, 1)], bins=[[4], [3], [2, 3]],
    ...                    categorical=[1])
    >>> [(b.subset, b.shape, b.offset) for b in fm.blocks]
    [((0,), (4,), 0), ((1,), (3,), 4), ((0, 1), (2, 3), 7)]
    >>> fm.cells(np.array([[0.3, 2.0], [np.nan, 7.0]])).tolist()   # one cell per marginal
    [[1, 6, 9], [0, 6, 9]]
    >>> fm.num_features, fm.sensitivity(1), fm.sensitivity(2) ** 2
    (13, 3.0, 3.0)
    >>> fm.marginal(np.arange(13), (1, 0)).tolist()                # the 2-way table, axes swapped
    [[7, 10], [8, 11], [9, 12]]
    >>> cut = dps.MarginalTables(bounds=(0, 10), subsets=[0, (0, 1)], bins=[[10], [[1.0, 2.0], 2]], dim=2)
    >>> cut.blocks[1].shape, cut.block_edges(1)[0].tolist()       # bins [0, 1), [1, 2), [2, 10]
    ((3, 2), [0.0, 1.0, 2.0, 10.0])
    >>> cut.cells(np.array([[0.5, 0.0], [1.0, 9.0], [7.0, 9.0]])).tolist()
    [[0, 10], [1, 13], [7, 15]]
    """

    kernel_name = "marginal tables (cell indicators)"
    #: the class's name before issue 38's rename (``dps.Marginals``, which clashed with OpenDP's
    #: ``dp.mbi.Marginals``): saved sketches that name it keep loading
    former_names = ("Marginals",)

    def __init__(
        self,
        bounds: Any,
        subsets: Sequence[int | Sequence[int]],
        bins: int | Sequence[int] | Sequence[int | Sequence[int | Sequence[float]]] = 16,
        *,
        categorical: Sequence[int] | None = None,
        dim: int | None = None,
    ) -> None:
        self.lower, self.upper = check_bounds(bounds, dim)
        self.dim = self.lower.size
        self.categories = _parse_categorical(categorical, self.lower, self.upper)
        parsed = _parse_subsets(subsets, self.dim)
        blocks, offset = [], 0
        seen: set[frozenset[Any]] = set()
        for s, (shape, cut) in zip(
            parsed, _parse_bins(bins, parsed, self.lower, self.upper, self.categories)
        ):
            # a subset may come back at another resolution (a coarse level over fine cells)
            # the same columns at the same bins and cuts, whatever their order (a subset's columns are distinct)
            key = frozenset(zip(s, shape, [None if c is None else tuple(c) for c in cut]))
            if key in seen:
                raise ValueError(
                    f"subset ({s!r}) appears twice with the same bins (column order does not make a new marginal)"
                )
            seen.add(key)
            blocks.append(MarginalBlock(s, shape, offset, cut if any(c is not None for c in cut) else ()))
            offset += math.prod(shape)
            if offset > MAX_CELLS:
                raise ValueError(f"the marginals have more than {MAX_CELLS} cells in all; use coarser bins")
        self.blocks: tuple[MarginalBlock, ...] = tuple(blocks)
        self.num_features = offset
        self._offsets = np.array([b.offset for b in blocks], dtype=np.int64)
        self._gram_cache: list[
            Any
        ] = []  # the Gram layout, built on the first sum (maps are planned by the dozen)

    def _params(self) -> dict[str, Any]:
        return {
            "bounds": [self.lower.tolist(), self.upper.tolist()],
            "subsets": [list(b.subset) for b in self.blocks],
            "bins": [_bins_spec(b) for b in self.blocks],
            "categorical": sorted(self.categories),
        }

    # -- public layout helpers ------------------------------------------------------------------
    def block_index(self, subset: int | Sequence[int]) -> int:
        """Position in :attr:`blocks` of the marginal over the columns of ``subset`` (any order)."""
        cols = (subset,) if _is_int(subset) else tuple(subset)  # type: ignore[arg-type]
        for i, b in enumerate(self.blocks):
            if len(b.subset) == len(cols) and set(b.subset) == set(cols):
                return i
        raise ValueError(f"subset ({subset!r}) is not one of the marginals {[b.subset for b in self.blocks]}")

    def marginal(self, values: Any, subset: int | Sequence[int]) -> np.ndarray:
        """The table of ``subset`` from a vector laid out like ``Φ`` (e.g. a sketch's sum or mean).

        ``values`` of shape ``(..., m)`` gives ``(..., b_1, …, b_s)`` with the axes in the order of
        ``subset`` (transposed if it lists the stored columns in another order).
        """
        blk = self.blocks[self.block_index(subset)]
        v = np.asarray(values)
        if v.shape[-1:] != (self.num_features,):
            raise ValueError(f"values must have {self.num_features} entries in the last axis, got {v.shape}")
        table = v[..., blk.offset : blk.offset + blk.size].reshape(v.shape[:-1] + blk.shape)
        cols = (subset,) if _is_int(subset) else tuple(subset)  # type: ignore[arg-type]
        lead = v.ndim - 1
        order = [lead + blk.subset.index(j) for j in cols]
        return np.transpose(table, list(range(lead)) + order)

    def edges(self, column: int, bins: int) -> np.ndarray:
        """The ``bins + 1`` public bin edges of ``column`` at ``bins`` bins (half-integers around the
        codes for a categorical column, whose ``bins`` must be its ``K``)."""
        j, b = self._check_column_bins(column, bins)
        if j in self.categories:
            return np.arange(b + 1, dtype=np.float64) + (self.lower[j] - 0.5)
        return np.linspace(self.lower[j], self.upper[j], b + 1)

    def insert(self, position: int, subsets: Sequence[Any], bins: Sequence[Any]) -> MarginalTables:
        """These marginals with the blocks ``subsets`` (bins as the constructor takes them, one
        entry per subset) inserted before block ``position``.

        >>> import opendp_sketch as dps
        >>> fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, (0, 1)], bins=[[8], [8], [2, 2]], dim=2)
        >>> [(b.subset, b.shape) for b in fm.insert(2, [0], [[4]]).blocks]
        [((0,), (8,)), ((1,), (8,)), ((0,), (4,)), ((0, 1), (2, 2))]
        """
        if not _is_int(position) or not 0 <= position <= len(self.blocks):
            raise ValueError(f"position ({position!r}) must be an index in [0, {len(self.blocks)}]")
        p, k = self._params(), int(position)
        return MarginalTables(
            p["bounds"],
            p["subsets"][:k] + list(subsets) + p["subsets"][k:],
            p["bins"][:k] + list(bins) + p["bins"][k:],
            categorical=p["categorical"],
        )

    def take(self, blocks: Sequence[int]) -> MarginalTables:
        """The marginals ``blocks`` (positions in :attr:`blocks`, in that order) as a map of their
        own, with their bins and cut points.

        >>> import opendp_sketch as dps
        >>> fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, (0, 1)], bins=[[[0.5]], [4], [2, 2]], dim=2)
        >>> [(b.subset, b.shape) for b in fm.take([2, 0]).blocks]
        [((0, 1), (2, 2)), ((0,), (2,))]
        """
        index = [int(i) for i in blocks]
        if len(set(index)) != len(index) or not all(-len(self.blocks) <= i < len(self.blocks) for i in index):
            raise ValueError(f"blocks ({list(blocks)!r}) must be distinct positions among {len(self.blocks)}")
        # the blocks were checked when this map was built: lay them out again without re-parsing
        # (a selection takes the candidate and kept blocks of a 100-column plan many times)
        out = object.__new__(MarginalTables)
        out.lower, out.upper, out.dim, out.categories = self.lower, self.upper, self.dim, self.categories
        laid, offset = [], 0
        for i in index:
            b = self.blocks[i]
            laid.append(MarginalBlock(b.subset, b.shape, offset, b.cuts))
            offset += b.size
        out.blocks = tuple(laid)
        out.num_features = offset
        out._offsets = np.array([b.offset for b in laid], dtype=np.int64)
        out._gram_cache = []
        return out

    def block_edges(self, block: int) -> list[np.ndarray]:
        """The public bin edges of each column of ``blocks[block]``: its cut points between the
        column's bounds, or :meth:`edges` for equal bins and categorical codes."""
        blk = self.blocks[block]
        out = []
        for k, (j, b) in enumerate(zip(blk.subset, blk.shape)):
            c = blk.column_cuts(k)
            out.append(self.edges(j, b) if c is None else np.array([self.lower[j], *c, self.upper[j]]))
        return out

    def bin_index(self, values: Any, column: int, bins: int) -> np.ndarray:
        """Bin (``0 … bins - 1``) of each value of ``column`` at ``bins`` bins, by the map's rule."""
        j, b = self._check_column_bins(column, bins)
        return self._column_bins(np.asarray(values, dtype=np.float64), j, b)

    def cells(self, X: Any) -> np.ndarray:
        """Feature index of each row's cell in every marginal: ``int64`` ``(n, len(blocks))``.

        Column ``i`` lies in ``[blocks[i].offset, blocks[i].offset + blocks[i].size)``; the cell
        within the table is the C-order (row-major) index of the per-column bins.
        """
        return self._flat(self._as_rows(X))

    # -- the map --------------------------------------------------------------------------------
    def _check_column_bins(self, column: Any, bins: Any) -> tuple[int, int]:
        if not _is_int(column) or not 0 <= column < self.dim:
            raise ValueError(f"column ({column!r}) must be an index in [0, {self.dim - 1}]")
        return int(column), _check_bins_value(bins, int(column), self.categories)

    def _column_bins(
        self, x: np.ndarray, j: int, b: int, name: Any = None, inside: bool = False
    ) -> np.ndarray:
        """Bin of each value of column ``j`` at ``b`` equal bins (codes: the nearest code), as
        ``int64`` in ``[0, b)``; NaN to the lowest bin, ``±inf`` and outside values clipped.

        The same floats as ``floor((clip(x) − lo) / (hi − lo) · b)``: ``clip(x) − lo ≥ 0``, so the
        truncating cast is the floor, and with ``lo = 0, hi = 1`` (a schema's unit box) the
        subtraction and division are exact and skipped. A NaN ratio (an overflowing range)
        casts to some integer that the final clip sends into ``[0, b)``. ``name``: the result
        goes to that :func:`scratch_array` (inside a sum, so it does not allocate). ``inside``:
        the caller knows every value lies in ``[lo, hi]`` (no NaN), where ``fmax``/``fmin`` are
        the identity (a signed zero may keep its sign, which no bin depends on), so they are skipped.
        """
        lo, hi = self.lower[j], self.upper[j]
        xc = scratch_array("marginals.x", x.shape)
        with np.errstate(invalid="ignore"):
            src = x
            if not inside:  # fmax/fmin send NaN to the lower bound and clip ±inf
                src = np.fmax(x, lo, out=xc)
                np.fmin(xc, hi, out=xc)
            if j in self.categories:
                np.rint(src, out=xc)
                xc -= lo
            elif lo != 0.0 or hi != 1.0:  # (xc - lo) / (hi - lo) lies in [0, 1]: monotone rounding
                np.subtract(src, lo, out=xc)
                xc /= hi - lo
                xc *= b
            else:
                np.multiply(src, b, out=xc)
            idx = np.empty(x.shape, np.int64) if name is None else scratch_array(name, x.shape, np.int64)
            np.copyto(idx, xc, casting="unsafe")  # astype's cast, into idx
        if inside:  # xc ≥ 0 there (x ≥ lo), so only the upper edge needs its bin
            return np.minimum(idx, b - 1, out=idx)
        return np.clip(idx, 0, b - 1, out=idx)  # the upper edge belongs to the last bin

    def _cut_bins(self, x: np.ndarray, j: int, cuts: tuple[float, ...], inside: bool = False) -> np.ndarray:
        """Bin of each value at explicit cut points: ``[lo, c₁), [c₁, c₂), …, [c_k, hi]``; NaN to
        the lowest bin, ``±inf`` and outside values clipped to the end bins (``inside``: as in
        :meth:`_column_bins`)."""
        xc = x
        if not inside:
            with np.errstate(invalid="ignore"):
                xc = np.fmin(np.fmax(x, self.lower[j]), self.upper[j])
        return np.searchsorted(np.asarray(cuts), xc, side="right").astype(np.int64, copy=False)

    def _column_key(self, j: int, b: int, cuts: Any) -> tuple[Any, ...]:
        """Everything column ``j``'s bins depend on: its index, bounds, kind, bins and cuts."""
        return (j, float(self.lower[j]), float(self.upper[j]), j in self.categories, b, cuts)

    def _codes(self, X: np.ndarray, memo: dict[Any, Any], j: int, b: int, cuts: Any) -> np.ndarray:
        """Bins of column ``j`` of ``X`` (``b`` equal bins, or ``cuts``), once per ``memo``: the key
        names everything the bins depend on (the column, its bounds, its kind, bins and cuts), so
        maps of other bounds sharing a chunk's memo never read each other's."""
        return self._codes_of(X, memo, (("bins", *self._column_key(j, b, cuts)), j, b, cuts))

    def _codes_of(self, X: np.ndarray, memo: dict[Any, Any], spec: tuple[Any, ...]) -> np.ndarray:
        """:meth:`_codes` from ``(key, column, bins, cuts)`` (a block's recipe holds them)."""
        key, j, b, cuts = spec
        out = memo.get(key)
        if out is None:
            x = X[:, j]
            name = None if _LOCAL in memo else key
            box = memo.get("clip")  # the box the sum clipped the chunk into, if it did
            inside = box is not None and self.lower[j] <= box[0][j] <= box[1][j] <= self.upper[j]
            out = memo[key] = (
                self._column_bins(x, j, b, name, inside)
                if cuts is None
                else self._cut_bins(x, j, cuts, inside)
            )
        return out

    def _recipe(self, blk: MarginalBlock) -> tuple[tuple[Any, ...], tuple[tuple[Any, ...], ...]]:
        """How :meth:`_block_cells` forms ``blk``'s cells, built once per block: the first
        column's bins, then per further column the memo key of the scaled leading cells, the
        column's bins ``b`` and its bins' spec."""
        cache = self.__dict__.setdefault("_recipe_cache", {})
        recipe = cache.get(blk)
        if recipe is None:
            cols = [(j, b, blk.column_cuts(k)) for k, (j, b) in enumerate(zip(blk.subset, blk.shape))]
            specs = [(("bins", *self._column_key(j, b, c)), j, b, c) for j, b, c in cols]
            steps = []
            lead: tuple[Any, ...] = ("lead", *specs[0][0][1:])
            for spec in specs[1:]:
                key = (*lead, spec[2])
                steps.append((key, spec[2], spec))
                lead = (*key, *spec[0][1:])
            recipe = cache[blk] = (specs[0], tuple(steps))
        return recipe

    def _block_cells(self, X: np.ndarray, memo: dict[Any, Any], blk: MarginalBlock) -> np.ndarray:
        """Each row's cell within table ``blk`` (C order, offset not added), from the memo's bins:
        a table's leading columns' scaled bins (``bins_a · b₂``, shared by the tables that start
        with them) are kept in the memo too."""
        first, steps = self._recipe(blk)
        cell = self._codes_of(X, memo, first)
        for k, (key, b, spec) in enumerate(steps):
            scaled = memo.get(key)
            if scaled is None:
                into = (
                    np.empty(cell.shape, np.int64)
                    if _LOCAL in memo
                    else scratch_array(key, cell.shape, np.int64)
                )
                scaled = memo[key] = np.multiply(cell, b, out=into)
            nxt = self._codes_of(X, memo, spec)
            if k == len(steps) - 1:
                cell = np.add(scaled, nxt, out=scratch_array("marginals.cell", scaled.shape, np.int64))
            else:
                cell = scaled + nxt
        return cell

    def _flat(self, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], len(self.blocks)), dtype=np.int64)
        memo: dict[Any, Any] = {_LOCAL: True}  # a column's bins, once per resolution
        for i, blk in enumerate(self.blocks):
            np.add(self._block_cells(X, memo, blk), blk.offset, out=out[:, i])
        return out

    def _ones_per_row(self) -> int:
        return len(self.blocks)

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        """The chunk's exact cell counts. Many 2-way tables: one Gram product ``HᵀH`` of the
        0/1 bin indicators ``H`` of every (column, bins) the tables use — the count of cell
        ``(a, b)`` of table ``(i, j)`` is ``Σ_rows H_ia·H_jb`` and of a 1-way cell ``Σ H_ia²`` —
        in float32, exact because every partial sum is an integer at most the chunk's rows
        (``< 2²⁴``, see :meth:`_row_width`), whatever order BLAS adds in. Otherwise the indices of
        the ones, counted."""
        gram = self._gram
        memo = chunk_memo(X)
        if memo is None:
            memo = {_LOCAL: True}
        if gram is None:
            return self._joint_sum(X, memo)
        keys, width, rows_of, cols_of = gram
        H = np.zeros((X.shape[0], width), dtype=np.float32)
        # every row's ones as flat positions, set in one call (not one fancy index per column)
        ones = np.empty((X.shape[0], len(keys)), dtype=np.int64)
        for k, ((j, b, cuts), start) in enumerate(keys.items()):
            np.add(self._codes(X, memo, j, b, cuts), start, out=ones[:, k])
        ones += (np.arange(X.shape[0], dtype=np.int64) * width)[:, None]
        H.reshape(-1)[ones.reshape(-1)] = 1.0
        G = H.T @ H
        return np.rint(G[rows_of, cols_of]).astype(np.int64)

    def _joint_sum(self, X: np.ndarray, memo: dict[Any, Any]) -> np.ndarray:
        """The chunk's exact cell counts, joint table by joint table (:func:`_joint_layout`): one
        bincount of the rows' joint cells, then each block's table is the joint's counts summed
        over the axes the block lacks (integers: every row is in exactly one joint cell, so the
        sum over a block cell's joint cells counts the rows in that block cell), transposed to the
        block's axis order."""
        return self._read_joints(
            np.bincount(self._block_cells(X, memo, joint.block), minlength=joint.block.size)
            for joint in self._joint
        )

    def _read_joints(self, counts: Iterable[np.ndarray]) -> np.ndarray:
        """The map's cell counts (feature order) from each joint table's counts (C order, in
        :attr:`_joint`'s order): each block's table is its joint summed over the axes the block
        lacks, transposed to the block's axis order."""
        out = np.empty(self.num_features, dtype=np.int64)
        for joint, flat in zip(self._joint, counts):
            table = flat.reshape(joint.block.shape)
            for offset, size, rest, perm in joint.reads:
                part = table.sum(axis=rest) if rest else table
                if perm is not None:
                    part = part.transpose(perm)
                out[offset : offset + size] = part.ravel()
        return out

    @property
    def _joint(self) -> tuple[_Joint, ...]:
        """:func:`_joint_layout` of the blocks, computed once, when a sum first needs it."""
        cache = self.__dict__.setdefault("_joint_cache", [])
        if not cache:
            cache.append(_joint_layout(self.blocks))
        return cache[0]

    @property
    def _gram(self) -> tuple[dict[tuple[int, int, Any], int], int, np.ndarray, np.ndarray] | None:
        """:func:`_gram_layout` of the blocks, computed once, when a sum first needs it."""
        if not self._gram_cache:
            self._gram_cache.append(_gram_layout(self.blocks))
        return self._gram_cache[0]

    def _threads_pay(self) -> bool:
        """Threads by default only for the Gram product (BLAS). Counting indices is many short
        numpy calls (bincount holds the GIL): a second thread only contends for the GIL and the
        cache. Measured on the tall table (issue 40, 2 cores, 2·10⁶ rows): 0.90-0.98 s CPU with
        threads against 0.69-0.74 s with one, wall no faster."""
        return self._gram is not None

    def _row_width(self) -> int:
        gram = self._gram
        if gram is None:
            return super()._row_width()
        return max(gram[1], 1 << 9)  # chunks of at most 2²² / 512 = 8 192 rows: exact in float32

    # -- automatic choice -----------------------------------------------------------------------
    @classmethod
    def auto(
        cls,
        bounds: Any,
        *,
        categorical: Sequence[int] | None = None,
        fine_bins: int = 32,
        coarse_bins: int = 8,
        max_cells: int = 1 << 16,
        dim: int | None = None,
        levels: Mapping[int, int] | None = None,
        bound_cells: float | None = None,
        pair_levels: int | None = None,
        coarse_one_way: int | None = None,
    ) -> MarginalTables:
        r"""MarginalTables chosen from public information only: every 1-way and as many 2-way as fit.

        The rule (deterministic; it reads the bounds, the categorical columns and the budget):

        1. every column gets a 1-way marginal: ``fine_bins`` bins if numeric, ``K`` if categorical;
        2. every pair ``(i, j)``, ``i < j``, gets a 2-way marginal with ``c`` bins per numeric
           column (categorical columns keep ``K``), starting from ``c = coarse_bins`` and halving
           ``c`` (not below 2) while all cells together exceed ``max_cells``;
        3. if they still exceed it, pairs are added in increasing order of their cell count
           (ties: by column indices) while the total stays within ``max_cells``.

        With ``fine_bins`` a multiple of ``coarse_bins`` (powers of two), every coarse bin is a
        union of fine bins, so the decoder can relate the two resolutions.

        :param bounds: public ``(lower, upper)`` per column
        :param categorical: indices of categorical columns (integer codes in their bounds)
        :param fine_bins: bins of numeric columns in 1-way marginals
        :param coarse_bins: largest bins of numeric columns in 2-way marginals
        :param max_cells: budget of cells in all marginals
        :param dim: number of columns (needed only when both bounds are scalars)
        :param levels: ``{column: K}`` for numeric columns that take ``K`` equally spaced public
            values (small integer ranges): ``K`` bins in every marginal, one value per bin
            (in 2-way marginals up to ``pair_levels``)
        :param bound_cells: ``δ`` in ``(0, 1/(2·fine_bins))``: the 1-way marginal of every other
            numeric column gets two more cells, ``[lo, lo + δw)`` and ``[hi − δw, hi]``
            (``w = hi − lo``), cut from its end bins: rows at a bound (clipped values, zeros of a
            count) are measured apart from the rest of their bin, so a decoder puts them there
        :param pair_levels: the most values a ``levels`` column keeps one bin each for in the
            2-way marginals; one with more gets ``c`` equal bins there, like any numeric column
            (each a run of neighbouring values). ``None`` (default): one bin per value everywhere
        :param coarse_one_way: ``K`` dividing ``fine_bins``: every numeric column with equal
            fine bins (not categorical, not in ``levels``) gets a second 1-way marginal of ``K``
            equal bins, after all the fine ones; each coarse bin is a union of fine bins (a
            two-level tree: a decoder estimates the fine cells from both levels). ``None``
            (default): one 1-way marginal per column
        :raises ValueError: if the 1-way marginals alone exceed ``max_cells``
        :example:

        >>> import opendp_sketch as dps
        >>> fm = dps.MarginalTables.auto(([0, 0, 0], [1, 1, 3]), categorical=[2], fine_bins=16,
        ...                         coarse_bins=4, max_cells=100)
        >>> [(b.subset, b.shape) for b in fm.blocks]
        [((0,), (16,)), ((1,), (16,)), ((2,), (4,)), ((0, 1), (4, 4)), ((0, 2), (4, 4)), ((1, 2), (4, 4))]
        >>> fm.num_features, fm.sensitivity(1)
        (84, 6.0)
        >>> one = dps.MarginalTables.auto((0, 10), dim=1, fine_bins=4, bound_cells=1e-3)
        >>> one.blocks[0].shape, one.block_edges(0)[0].tolist()
        ((6,), [0.0, 0.01, 2.5, 5.0, 7.5, 9.99, 10.0])
        >>> tree = dps.MarginalTables.auto(([0, 0, 0], [1, 1, 3]), categorical=[2], fine_bins=16,
        ...                           coarse_bins=4, coarse_one_way=4)
        >>> [(b.subset, b.shape) for b in tree.blocks][:5], tree.sensitivity(1)
        ([((0,), (16,)), ((1,), (16,)), ((2,), (4,)), ((0,), (4,)), ((1,), (4,))], 8.0)
        """
        lo, hi = check_bounds(bounds, dim)
        d = lo.size
        cats = _parse_categorical(categorical, lo, hi)
        fine = check_positive_int(fine_bins, "fine_bins")
        coarse = check_positive_int(coarse_bins, "coarse_bins")
        budget = check_positive_int(max_cells, "max_cells")
        fixed = dict(cats)
        for j, k in (levels or {}).items():
            if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < d or j in cats:
                raise ValueError(f"levels column ({j!r}) must be the index of a numeric column in [0, {d})")
            fixed[int(j)] = check_positive_int(k, f"levels[{j}]")
        delta = bound_cells
        if delta is not None and (
            isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 0.5 / fine
        ):
            raise ValueError(f"bound_cells ({bound_cells!r}) must be a number in (0, 1/(2·fine_bins))")
        ones = [fixed.get(j, fine if delta is None else fine + 2) for j in range(d)]
        tree: list[int] = []
        if coarse_one_way is not None:
            k = check_positive_int(coarse_one_way, "coarse_one_way")
            if fine % k or k >= fine:
                raise ValueError(
                    f"coarse_one_way ({coarse_one_way!r}) must divide fine_bins ({fine}) and be smaller"
                )
            tree = [j for j in range(d) if j not in fixed]
            ones = ones + [k] * len(tree)
        if sum(ones) > budget:
            raise ValueError(f"max_cells ({max_cells}) is below the {sum(ones)} cells of the 1-way marginals")
        subsets: list[Any] = [(j,) for j in range(d)] + [(j,) for j in tree]
        bins: list[Any] = [[b] for b in ones]
        if delta is not None:
            for j in range(d):
                if j not in fixed:
                    w = float(hi[j] - lo[j])
                    inner = np.linspace(lo[j], hi[j], fine + 1)[1:-1].tolist()
                    bins[j] = [[float(lo[j]) + delta * w, *inner, float(hi[j]) - delta * w]]
        pairs = list(itertools.combinations(range(d), 2))

        wide = set()
        if pair_levels is not None:
            most = check_positive_int(pair_levels, "pair_levels")
            wide = {j for j, k in fixed.items() if j not in cats and k > most}

        def axis(c: int) -> list[int]:
            """Each column's bins in the pairs at ``c`` bins: a pair ``(i, j)`` has ``f_i·f_j`` cells."""
            return [c if j in wide else fixed.get(j, c) for j in range(d)]

        def pair_cells(f: list[int]) -> int:
            # Σ_{i<j} f_i·f_j = ((Σf)² − Σf²)/2, in integers
            return (sum(f) ** 2 - sum(v * v for v in f)) // 2

        c = coarse
        while c > 2 and sum(ones) + pair_cells(axis(c)) > budget:
            c = max(2, c // 2)
        f = axis(c)
        total = sum(ones)
        for p in sorted(pairs, key=lambda p: (f[p[0]] * f[p[1]], p)):
            size = f[p[0]] * f[p[1]]
            if total + size <= budget:
                subsets.append(p)
                bins.append([f[p[0]], f[p[1]]])
                total += size
        first = d + len(tree)
        order = sorted(range(first, len(subsets)), key=lambda i: subsets[i])  # pairs in column order
        subsets = subsets[:first] + [subsets[i] for i in order]
        bins = bins[:first] + [bins[i] for i in order]
        return cls((lo, hi), subsets, bins, categorical=sorted(cats))
