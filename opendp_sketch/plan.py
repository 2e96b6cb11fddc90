"""The plan of a schema release: which marginals the automatic map measures, from public facts.

Everything here reads public information only (the schema's columns, kinds, ranges, labels,
integer levels and declared targets, a public or privately released row estimate, and the
budget), so neighbouring tables always get the same plan and the sensitivity of the planned map
is fixed before any data is read:

* :func:`auto_marginals` / :func:`auto_feature_map`: every 1-way marginal, and the 2-way
  marginals whose cells stand above the noise (the pair rule, ``AUTO_*`` constants below), at
  resolutions chosen from the row estimate; a schema's ``targets`` keep their pairs always, at
  the 1-way blocks' weight, and the feature pairs the rule leaves out at 16 bins come back at 8
  where their cells pass the rule there (a model needs both);
* :func:`auto_tree`: whether a private spanning tree of pairs pays (the share of the budget to
  spend on it, or ``None``), and the rounds it needs (:func:`tree_rounds`).

The measured evidence behind each rule and constant is in ``docs/design/planning.md``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ._validate import check_bounds, check_column_names, check_fraction
from .backends.domains import box_data_bounds
from .budget import DEFAULT_COUNT_FRACTION, Budget
from .features.base import FeatureMap
from .features.composite import Composite
from .features.marginals import MarginalTables
from .schema import Schema
from .selection import Forest

__all__ = [
    "AUTO_SELECTION",
    "Plan",
    "as_schema",
    "DEFAULT_SELECTION_FRACTION",
    "PairsRule",
    "auto_blocks",
    "auto_feature_map",
    "auto_marginals",
    "auto_tree",
    "check_pairs",
    "kept_map",
    "schema_targets",
    "schema_blocks",
    "tree_ratio",
    "tree_rounds",
    "warn_if_tree_is_noise",
    "weighted_map",
]

#: bins of a numeric column's 1-way marginal in the automatic map
AUTO_FINE_BINS = 32

#: ... and with a public row estimate and a budget that leave an average cell of that many bins
#: ``AUTO_FINE_SNR`` noise std's of rows (evidence: docs/design/planning.md)
AUTO_FINER_BINS = 64

AUTO_FINE_SNR = 8.0

#: bins of a numeric column in the automatic 2-way marginals without a row estimate
AUTO_PAIR_BINS = 8

AUTO_PAIRS: tuple[str, ...] = ("rule", "all", "none")

#: the finest 2-way resolution the automatic map picks (decoding cost grows with the cells)
AUTO_MAX_PAIR_BINS = 16

#: 2-way marginals are measured when an average cell holds this many noise std's of rows
AUTO_PAIR_SNR = 3 * math.sqrt(2)

#: weight of the 1-way blocks against the 2-way blocks in the automatic marginals (a composite):
#: 1-way cells see a third of the noise of 2-way cells (evidence: docs/design/planning.md)
AUTO_ONE_WAY_WEIGHT = 3.0

#: a numeric column whose automatic 1-way cells are finer than the pairs' (64 or 32 bins with
#: 2-way marginals) is also measured at the pairs' 16 bins, a two-level tree: the coarse level at
#: ``one_way_weight + AUTO_TREE_EXTRA_WEIGHT``, the fine one at ``AUTO_TREE_FINE_WEIGHT``
#: (:func:`auto_marginals`; evidence: docs/design/planning.md)
AUTO_TREE_EXTRA_WEIGHT = 1.0

AUTO_TREE_FINE_WEIGHT = 1.0

#: with a declared model target (``Schema(targets=)``): the weight of the (feature, target) pairs
#: and of the other pairs against the 1-way blocks' ``one_way_weight``; and a feature pair the rule
#: leaves out at the pairs' 16 bins is measured at the finest bins per numeric column, from 15 down
#: to ``AUTO_TARGET_FEATURE_PAIR_BINS``, where its average cell passes the rule (none: left out). A
#: model fitted to the decoded points needs how the features
#: vary together (with the target pairs alone they come back independent given the target: naive
#: Bayes) and the target pairs' cells precise (evidence: docs/design/planning.md, "Declared
#: targets")
AUTO_TARGET_PAIR_WEIGHT = 3.0

AUTO_TARGET_FEATURE_PAIR_WEIGHT = 1.0

AUTO_TARGET_FEATURE_PAIR_BINS = AUTO_PAIR_BINS

#: with a declared model target: a pair of two numeric features (equal bins on both axes) goes on
#: down to ``AUTO_TARGET_NUMERIC_PAIR_BINS`` bins a column where ``AUTO_TARGET_FEATURE_PAIR_BINS``
#: fails the rule: how two numeric features vary together is what a model on naive-Bayes points
#: misses most, and a coarse table of them is cheap; pairs with a categorical or few-valued axis
#: keep the floor of 8 (measured: docs/design/planning.md, "The floor")
AUTO_TARGET_NUMERIC_PAIR_BINS = 2

#: the pair rule reads the noise of the map whose 1-way blocks weigh at most this much: the
#: weight ``AUTO_PAIR_SNR`` was measured at, so a heavier 1-way weight keeps the same pairs
AUTO_RULE_ONE_WAY_WEIGHT = 2.0

#: a width (share of the range) for the cells at each bound of a numeric column's 1-way marginal,
#: ``auto_marginals(bound_cells=AUTO_BOUND_CELL)``: not the default (see auto_marginals)
AUTO_BOUND_CELL = 1e-6

#: share of the budget spent choosing the 2-way marginals of a spanning tree (make_spanning_sketch)
DEFAULT_SELECTION_FRACTION = 0.1

#: ``release_sketch(pair_selection="auto")``, the default: choose a tree (at
#: ``DEFAULT_SELECTION_FRACTION``) when the rule leaves columns apart and :func:`auto_tree` says it pays
AUTO_SELECTION = "auto"

#: ``release_sketch(pair_selection=)`` warns when an average cell of the candidate pairs holds fewer
#: noise std's of (estimated) rows than this: on three real tables the tree lowered multi-column
#: counts from a ratio of 1.6 up and raised every error at 0.87 and below
#: (evidence: docs/design/planning.md)
AUTO_TREE_SNR = 1.2


#: which 2-way marginals the automatic map measures: ``"rule"`` (the row-estimate rule), ``"all"``
#: or ``"none"`` (``auto_marginals(pairs=)``)
PairsRule = Literal["rule", "all", "none"]


def auto_marginals(
    bounds: Any,
    *,
    categorical: Sequence[int] | None = None,
    levels: dict[int, int] | None = None,
    fine_bins: int | None = None,
    rows: int | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    bound_cells: float | None = None,
    pairs: PairsRule = "rule",
) -> FeatureMap:
    r"""Every 1-way marginal, and the 2-way marginals when a public row estimate says they pay.

    Without ``rows`` or a budget: every 1-way and every 2-way marginal, the 2-way ones with
    ``AUTO_PAIR_BINS = 8`` bins per numeric column (categories keep theirs, integer columns with
    at most 16 values theirs). With both, the 2-way marginals get ``AUTO_MAX_PAIR_BINS = 16``
    bins per numeric column (at most ``fine_bins``), and a pair is measured only if its average
    cell holds at least ``AUTO_PAIR_SNR = 3√2`` noise standard deviations of rows,
    ``rows / (cells of the pair) ≥ 3√2 · σ`` (``σ``: the noise std of one cell of the map with
    every pair, its 1-way blocks at weight ``min(one_way_weight, 2)``). With pairs the map is a
    :class:`~opendp_sketch.Composite` of the 1-way and the 2-way marginals at weights
    ``(one_way_weight, 1)``; with 64-bin 1-way cells and every pair, numeric columns are also
    measured at the pairs' 16 bins (a two-level tree). Everything read is public: the box, the
    column kinds, the budget and the estimate ``rows``, never the data's row count.

    The measurements behind each rule and constant: ``docs/design/planning.md``.

    :param bounds: the encoded box ``(lower, upper)`` of every column
    :param categorical: indices of coded (categorical, boolean) columns
    :param levels: ``{column: values}`` of integer columns with few values (one bin each)
    :param fine_bins: bins of every numeric 1-way marginal (``None``: ``AUTO_FINE_BINS = 32``;
        with ``rows`` and a budget 16 when pairs are left out, 64 when every pair is kept and an
        average 64-bin cell holds ``AUTO_FINE_SNR = 8`` noise std's of rows)
    :param rows: a public estimate of the row count (a wrong one costs accuracy, never privacy)
    :param epsilon: the budget the map is planned for (or ``delta`` with it, or ``rho``)
    :param count_fraction: the share of the budget spent on the noisy count
    :param one_way_weight: weight of the 1-way blocks against the 2-way blocks (``1``: one
        plain :class:`~opendp_sketch.features.marginals.MarginalTables`)
    :param bound_cells: a width (share of the range) for a cell at each bound of every numeric
        1-way marginal (``AUTO_BOUND_CELL``; not the default)
    :param pairs: ``"rule"`` (default) the rule above, ``"all"`` every 2-way marginal at the
        rule's bins, ``"none"`` none
    :raises ValueError: for a malformed ``pairs``, ``one_way_weight``, ``rows`` or budget
    :example:

    >>> from opendp_sketch.plan import auto_marginals
    >>> box = ([0.0] * 6, [1.0] * 6)
    >>> def pairs(fm):
    ...     return [b.shape for m in getattr(fm, "maps", [fm]) for b in m.blocks if len(b.subset) == 2]
    >>> [len(pairs(auto_marginals(box, rows=60_000, epsilon=e))) for e in (0.1, 0.3, 1.0, 3.0)]
    [0, 0, 15, 15]
    >>> pairs(auto_marginals(box, rows=60_000, epsilon=1.0))[-1], pairs(auto_marginals(box))[-1]
    ((16, 16), (8, 8))
    >>> fm = auto_marginals(box, rows=60_000, epsilon=3.0)
    >>> type(fm).__name__, fm.weights, [len(m.blocks) for m in fm.maps]
    ('Composite', (4.0, 1.0, 1.0), [6, 6, 15])
    >>> [len(pairs(auto_marginals(box, rows=60_000, epsilon=0.1, pairs=p))) for p in ("rule", "all", "none")]
    [0, 15, 0]
    """
    full, keep = auto_blocks(
        bounds,
        categorical=categorical,
        levels=levels,
        fine_bins=fine_bins,
        rows=rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        bound_cells=bound_cells,
        pairs=pairs,
    )
    return kept_map(full, keep, one_way_weight)


def kept_map(
    full: MarginalTables, keep: Sequence[int], weight: float, targets: Sequence[int] = ()
) -> FeatureMap:
    """The blocks ``keep`` of ``full``, weighted by :func:`weighted_map` for the model ``targets``
    (column indices; :func:`schema_targets` of the schema ``full`` was planned from)."""
    return weighted_map(full if len(keep) == len(full.blocks) else full.take(keep), weight, targets)


def schema_targets(schema: Schema) -> list[int]:
    """The coordinates of the schema's declared model targets (public: the schema names them).

    >>> schema_targets(Schema({"a": (0, 1), "y": ["n", "y"]}, targets="y"))
    [1]
    """
    return [schema.columns.index(t) for t in getattr(schema, "targets", [])]


def weighted_map(fm: MarginalTables, weight: float, targets: Sequence[int] = ()) -> FeatureMap:
    """The 1-way blocks of ``fm`` at ``weight`` against its 2- and 3-way blocks at 1 (a
    :class:`~opendp_sketch.Composite`), or ``fm`` itself at weight 1 or without pairs.

    A column with two 1-way blocks (a tree: ``MarginalTables.auto(coarse_one_way=)``) has its coarse
    block at ``weight + AUTO_TREE_EXTRA_WEIGHT`` and its fine block at ``AUTO_TREE_FINE_WEIGHT``,
    parts of their own (see :func:`auto_marginals`); at ``weight`` 1 every block, the tree's too,
    stays at weight 1 in ``fm`` itself.

    With model ``targets`` (column indices), the 2-way blocks holding a target weigh
    ``AUTO_TARGET_PAIR_WEIGHT`` and the other pairs ``AUTO_TARGET_FEATURE_PAIR_WEIGHT``, each a part
    of its own.

    >>> from opendp_sketch.features.marginals import MarginalTables
    >>> fm = MarginalTables.auto(([0.0] * 3, [1.0] * 3), fine_bins=8, coarse_bins=2, coarse_one_way=2)
    >>> w = weighted_map(fm, 3.0)
    >>> w.weights, [[(b.subset, b.shape) for b in m.blocks] for m in w.maps][:2]
    ((4.0, 1.0, 1.0), [[((0,), (2,)), ((1,), (2,)), ((2,), (2,))], [((0,), (8,)), ((1,), (8,)), ((2,), (8,))]])
    >>> w.sensitivity(1) == 3 * (4 + 1) + 3
    True
    >>> fm = MarginalTables(([0.0] * 3, [1.0] * 3), subsets=[0, 1, 2, (0, 2), (1, 2), (0, 1)], bins=4)
    >>> weighted_map(fm, 3.0, targets=[2]).weights   # 1-way, the target pairs, the feature pair
    (3.0, 3.0, 1.0)
    """
    ones = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]
    pairs = [i for i, b in enumerate(fm.blocks) if len(b.subset) > 1]
    if weight == 1.0 or not pairs:
        return fm
    wanted = set(targets)
    pair_parts = [(pairs, 1.0)]
    if wanted:
        held = [i for i in pairs if wanted & set(fm.blocks[i].subset)]
        rest = [i for i in pairs if i not in held]
        pair_parts = [(held, AUTO_TARGET_PAIR_WEIGHT), (rest, AUTO_TARGET_FEATURE_PAIR_WEIGHT)]
    levels: dict[int, list[int]] = {}  # each column's 1-way blocks
    for i in ones:
        levels.setdefault(fm.blocks[i].subset[0], []).append(i)
    fine = [max(blocks, key=lambda i: fm.blocks[i].size) for blocks in levels.values() if len(blocks) > 1]
    if not fine:
        parts = [(ones, float(weight)), *pair_parts]
        parts = [(p, w) for p, w in parts if p]
        return Composite([fm.take(p) for p, _ in parts], weights=[w for _, w in parts])
    single = [i for i in ones if len(levels[fm.blocks[i].subset[0]]) == 1]
    coarse = [i for i in ones if i not in fine and i not in single]
    parts = [
        (coarse, float(weight) + AUTO_TREE_EXTRA_WEIGHT),
        (single, float(weight)),
        (fine, AUTO_TREE_FINE_WEIGHT),
        *pair_parts,
    ]
    parts = [(p, w) for p, w in parts if p]
    return Composite([fm.take(p) for p, _ in parts], weights=[w for _, w in parts])


def check_pairs(pairs: Any) -> PairsRule:
    """``pairs`` of the automatic map, checked: ``"rule"``, ``"all"`` or ``"none"``.

    >>> check_pairs("all")
    'all'
    """
    if isinstance(pairs, str) and pairs in AUTO_PAIRS:
        return pairs  # type: ignore[return-value]
    raise ValueError(
        f"pairs ({pairs!r}) must be 'rule' (the row-estimate rule, the default), 'all' (every 2-way "
        "marginal) or 'none' (1-way marginals only)"
    )


def auto_blocks(
    bounds: Any,
    *,
    categorical: Sequence[int] | None,
    levels: dict[int, int] | None,
    fine_bins: int | None,
    rows: int | None,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    count_fraction: float,
    one_way_weight: float,
    bound_cells: float | None,
    pairs: str = "rule",
    targets: Sequence[int] = (),
    links: Sequence[tuple[int, int]] = (),
) -> tuple[MarginalTables, list[int]]:
    """:func:`auto_marginals` before the weighting: every 1-way and 2-way block at the chosen
    bins, and the indices of the blocks the rule keeps (every 1-way block among them). With
    ``targets`` (a schema's declared model targets), the rule also keeps every pair holding a
    target, whatever its cells' signal: a model needs how each feature varies with it. Each
    pair in ``links`` (a numeric column and its null state) is always kept too: it says which
    rows are null, so the column's statistics among the others come back.

    With ``targets``, a feature pair the rule leaves out at the pairs' bins is also measured at the
    finest bins per numeric column, between ``AUTO_TARGET_FEATURE_PAIR_BINS`` (a pair of two
    numeric columns: ``AUTO_TARGET_NUMERIC_PAIR_BINS``) and the pairs' bins, where an average cell
    passes the rule (a model needs how the features vary together); :func:`kept_map` weighs the
    blocks for the same ``targets``."""
    pairs = check_pairs(pairs)
    if not (isinstance(one_way_weight, (int, float)) and not isinstance(one_way_weight, bool)) or not (
        1.0 <= one_way_weight <= 1024.0
    ):
        raise ValueError(f"one_way_weight ({one_way_weight!r}) must be a number in [1, 1024]")

    chosen_bins: int = AUTO_FINE_BINS if fine_bins is None else fine_bins

    def build(c: int, fine: int = chosen_bins) -> MarginalTables:
        return MarginalTables.auto(
            bounds,
            categorical=categorical,
            fine_bins=fine,
            coarse_bins=c,
            levels=levels,
            bound_cells=bound_cells,
            pair_levels=AUTO_MAX_PAIR_BINS,
        )

    def ones(fm: MarginalTables) -> list[int]:
        return [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]

    wanted = set(targets)
    linked = {tuple(sorted(p)) for p in links}

    def with_targets(fm: MarginalTables, keep: list[int]) -> list[int]:
        extra = [
            i
            for i, b in enumerate(fm.blocks)
            if len(b.subset) == 2 and (wanted & set(b.subset) or tuple(sorted(b.subset)) in linked)
        ]
        return sorted(set(keep) | set(extra))

    given = [epsilon, delta, rho]
    if rows is None or all(v is None for v in given):
        fm = build(min(AUTO_PAIR_BINS, chosen_bins))
        return fm, with_targets(fm, ones(fm) if pairs == "none" else list(range(len(fm.blocks))))
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows ({rows!r}) must be a positive integer: a public estimate of the row count")
    budget = Budget.of(epsilon, delta, rho)
    share = 1.0 - check_fraction(count_fraction)

    def by_rule(fine: int) -> tuple[MarginalTables, list[int]]:
        """``fine``-bin 1-way blocks and the 2-way blocks the row-estimate rule keeps."""
        fm = build(min(AUTO_MAX_PAIR_BINS, fine), fine)
        # the noise of the map with every pair, its 1-way blocks at weight min(a, 2): dropping blocks
        # only lowers it, so up to weight 2 a kept pair's cells hold at least this many noise std's of
        # rows in the final map too; a heavier 1-way weight keeps the pairs weight 2 keeps
        rule = weighted_map(fm, min(float(one_way_weight), AUTO_RULE_ONE_WAY_WEIGHT))
        if pairs != "rule":
            return fm, with_targets(fm, ones(fm) if pairs == "none" else list(range(len(fm.blocks))))
        std = budget.coordinate_std(rule.sensitivity(1), rule.sensitivity(2), share)
        keep = [
            i
            for i, b in enumerate(fm.blocks)
            if len(b.subset) == 1 or rows / math.prod(b.shape) >= AUTO_PAIR_SNR * std
        ]
        return with_feature_pairs(fm, with_targets(fm, keep), fine, std)

    def with_feature_pairs(
        fm: MarginalTables, keep: list[int], fine: int, std: float
    ) -> tuple[MarginalTables, list[int]]:
        """With targets: each 2-way block the rule left out, again at the finest bins per numeric
        column from one below the pairs' down to ``AUTO_TARGET_FEATURE_PAIR_BINS`` (two numeric
        axes: ``AUTO_TARGET_NUMERIC_PAIR_BINS``) where an average cell holds ``AUTO_PAIR_SNR``
        noise std's of rows (appended, kept); the left-out blocks stay in ``fm`` (candidates, not
        measured). Only public facts decide: the bins, the categories and the row estimate."""
        if not wanted:
            return fm, keep
        coarse = build(min(AUTO_TARGET_FEATURE_PAIR_BINS, fine), fine)
        subsets, bins = [], []
        for i, b in enumerate(fm.blocks):
            if len(b.subset) != 2 or i in keep:
                continue
            c = coarse.blocks[coarse.block_index(b.subset)]
            # the axes with equal numeric bins, the ones the coarse table coarsens; categories and
            # integer levels keep theirs
            scaled = [k for k in range(2) if c.shape[k] != b.shape[k]]
            if not scaled:
                continue
            floor = AUTO_TARGET_NUMERIC_PAIR_BINS if len(scaled) == 2 else c.shape[scaled[0]]
            for level in range(max(b.shape[k] for k in scaled) - 1, floor - 1, -1):
                shape = [level if k in scaled else c.shape[k] for k in range(2)]
                if rows / math.prod(shape) >= AUTO_PAIR_SNR * std:
                    subsets.append(c.subset)
                    bins.append(shape)
                    break
        if not subsets:
            return fm, keep
        n = len(fm.blocks)
        return fm.insert(n, subsets, bins), keep + list(range(n, n + len(subsets)))

    fm, keep = by_rule(chosen_bins)
    if fine_bins is None:
        if any(len(b.subset) == 2 and i not in keep for i, b in enumerate(fm.blocks)):
            # the budget leaves pairs out: multi-column counts lean on the 1-way cells (and on a
            # tree, release_sketch(pair_selection=)), so they take the pairs' resolution; the
            # sensitivity and the pairs kept do not depend on the 1-way bins
            return by_rule(AUTO_MAX_PAIR_BINS)
        chosen = kept_map(fm, keep, one_way_weight, targets)
        # the 1-way cells' noise in rows: the map's coordinate noise over the 1-way blocks' weight
        weight = float(one_way_weight) if isinstance(chosen, Composite) else 1.0
        one_way_std = budget.coordinate_std(chosen.sensitivity(1), chosen.sensitivity(2), share) / weight
        if rows / AUTO_FINER_BINS >= AUTO_FINE_SNR * one_way_std:
            # the same blocks with finer 1-way cells: every block still takes one cell per row, so
            # the sensitivity, the noise and the pairs the rule keeps are the same
            fm, keep = by_rule(AUTO_FINER_BINS)
            # four 1-way cells to a pair's bin: the numeric columns also get a 1-way block at the
            # pairs' bins (a two-level tree, weighted by weighted_map); the pairs the rule kept stay
            numeric = [j for j in range(fm.dim) if j not in fm.categories and j not in (levels or {})]
            if any(len(fm.blocks[i].subset) > 1 for i in keep):
                return _with_coarse_one_way(fm, keep, numeric, AUTO_MAX_PAIR_BINS)
    return fm, keep


def _with_coarse_one_way(
    fm: MarginalTables, keep: list[int], columns: Sequence[int], bins: int
) -> tuple[MarginalTables, list[int]]:
    """``fm`` with a second 1-way block of ``bins`` equal bins for each of ``columns`` whose 1-way
    block has more cells (a multiple of ``bins``), after the 1-way blocks; the indices of ``keep``
    moved to match, the new blocks kept. ``fm`` itself when no column qualifies."""
    one = {b.subset[0]: b for b in fm.blocks if len(b.subset) == 1}
    tree = [
        j
        for j in columns
        if j in one and one[j].size > bins and (one[j].size - (2 if one[j].cuts else 0)) % bins == 0
    ]
    if not tree:
        return fm, keep
    first = sum(1 for b in fm.blocks if len(b.subset) == 1)  # the 1-way blocks come first
    out = fm.insert(first, [(j,) for j in tree], [[bins] for _ in tree])
    moved = [i if i < first else i + len(tree) for i in keep]
    return out, sorted(moved + list(range(first, first + len(tree))))


def auto_feature_map(
    schema: Schema,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> FeatureMap:
    """The map :func:`release_sketch` uses with a schema and no ``feature_map``: public
    information only (the schema's columns, kinds and row estimate, and the budget), and
    unit-free, since it acts on encoded coordinates.

    The rule (:func:`auto_marginals` on the encoded box): every column's
    1-way marginal (32 equal bins of a numeric column's public range, one cell per category, and
    one bin per value of a linear integer column with at most 32 values) and every 2-way marginal
    at 8×8 bins (an integer column keeps one bin per value there up to 16 values); when the schema carries a public ``rows`` estimate, the 2-way marginals are
    measured at 16×16 if the budget leaves an average cell well above its noise, and left out
    otherwise. Numeric 1-way marginals then get 64 bins when every pair is measured and an average
    cell of 64 still holds 8 noise std's of rows (with a second 1-way level at the pairs' 16 bins,
    a two-level tree: see :func:`auto_marginals`), and the pairs' 16 bins when the budget leaves
    pairs out (multi-column counts then lean on the 1-way cells). Categories and small integer
    columns keep their cells. With pairs, the 1-way and
    2-way marginals are blocks of a :class:`~opendp_sketch.Composite` at weights
    ``(one_way_weight, 1)``: 1-way cells see a third of the noise of 2-way cells by default (a
    tree's coarse level a quarter, its fine level as much as the pairs). Means,
    shares, CDFs, group statistics and 2-way counts are then averages over cells the sketch
    measures.

    >>> import opendp_sketch as dps
    >>> fm = auto_feature_map(dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]}))
    >>> fm.weights, [[(b.subset, b.shape) for b in m.blocks] for m in fm.maps]
    ((3.0, 1.0), [[((0,), (32,)), ((1,), (2,))], [((0, 1), (8, 2))]])
    >>> s = dps.Schema({"age": (18, 90), "income": (0, 1e6), "cut": ["Fair", "Ideal"]}, rows=50_000)
    >>> [b.shape for m in auto_feature_map(s, epsilon=1.0).maps for b in m.blocks]
    [(16,), (16,), (2,), (64,), (64,), (16, 16), (16, 2), (16, 2)]
    >>> fm = auto_feature_map(s, epsilon=0.01)   # no pair pays at this budget: the pairs' 16 bins
    >>> type(fm).__name__, [b.shape for b in fm.blocks]
    ('MarginalTables', [(16,), (16,), (2,)])

    With a map like this, :func:`release_sketch` also spends a tenth of the budget choosing a
    tree of pairs from the data when that pays (``pair_selection="auto"``, :func:`auto_tree`).

    ``fine_bins`` fixes the bins of every numeric 1-way marginal instead of the rule (e.g. 16 when
    the questions are asked on a known grid of 16 equal cells: each grid-aligned answer then sums
    one cell's noise per grid cell, not four):

    >>> [b.shape for m in auto_feature_map(s, epsilon=1.0, fine_bins=16).maps for b in m.blocks][:3]
    [(16,), (16,), (2,)]

    ``pairs="all"`` measures every 2-way marginal whatever the rule says (for regression and
    classifiers), ``pairs="none"`` none:

    >>> [b.shape for m in auto_feature_map(s, epsilon=0.01, pairs="all").maps for b in m.blocks]
    [(32,), (32,), (2,), (16, 16), (16, 2), (16, 2)]
    >>> [b.shape for b in auto_feature_map(s, epsilon=0.01, pairs="none").blocks]
    [(16,), (16,), (2,)]
    """
    full, keep = schema_blocks(
        schema,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        fine_bins=fine_bins,
        pairs=pairs,
    )
    return kept_map(full, keep, one_way_weight, schema_targets(schema))


def schema_blocks(
    schema: Schema,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    fine_bins: int | None = None,
    pairs: str = "rule",
) -> tuple[MarginalTables, list[int]]:
    """:func:`auto_feature_map` before the weighting (see :func:`auto_blocks`)."""
    levels = {
        j: v.size
        for j, v in schema.integer_levels.items()
        if v.size <= AUTO_FINE_BINS and getattr(schema[schema.columns[j]], "scale", None) == "linear"
    }
    return auto_blocks(
        schema.bounds,
        categorical=schema.categorical,
        levels=levels,
        fine_bins=fine_bins,
        rows=schema.rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        bound_cells=None,
        pairs=pairs,
        targets=schema_targets(schema),
        links=[(schema.columns.index(c), schema.columns.index(z)) for c, z in schema.null_states.items()],
    )


def tree_rounds(marginals: MarginalTables, measured: Sequence[int]) -> tuple[list[int], int]:
    """The candidate pairs (2-way blocks not in ``measured``) and the number of rounds Kruskal
    takes: as many as the candidates can join components of the measured blocks. While fewer are
    picked, some candidate joins two components, so no round is ever without a choice."""
    blocks = marginals.blocks
    kept = set(measured)
    joins = [blocks[i].subset for i in measured if len(blocks[i].subset) > 1]
    candidates = [i for i, b in enumerate(blocks) if len(b.subset) == 2 and i not in kept]
    rounds = (
        Forest(marginals.input_dim, joins).components
        - Forest(marginals.input_dim, joins + [blocks[i].subset for i in candidates]).components
    )
    return candidates, rounds


def tree_ratio(
    budget: Budget,
    fm: FeatureMap,
    full: MarginalTables,
    keep: Sequence[int],
    rows: int,
    count_fraction: float,
    selection_fraction: float,
) -> float:
    """Noise std's of ``rows`` in an average cell of the candidate pairs (the 2-way blocks of
    ``full`` not in ``keep``), for the released map ``fm`` (a tree's shape): public inputs only."""
    cells = [math.prod(b.shape) for i, b in enumerate(full.blocks) if len(b.subset) == 2 and i not in keep]
    share = (1 - count_fraction) * (1 - selection_fraction)
    std = budget.coordinate_std(fm.sensitivity(1), fm.sensitivity(2), share)
    return rows * len(cells) / sum(cells) / std


def auto_tree(
    budget: Budget,
    full: MarginalTables,
    keep: Sequence[int],
    rows: int | None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
) -> float | None:
    """``release_sketch(pair_selection="auto")``: the share of the budget to spend on a tree of
    2-way marginals (:func:`make_spanning_sketch`), or ``None`` for none.

    A tree is chosen when the public rule left the columns in more than one connected piece and
    an average cell of the candidate pairs holds at least ``AUTO_TREE_SNR = 1.2`` noise standard
    deviations of the schema's ``rows`` in the released map (the 1-way blocks, the rule's pairs
    and the tree's pairs; every block takes one cell per row, so which pairs win does not change
    the noise). Everything read is public: the budget, the blocks and the row estimate, so
    neighbouring tables get the same choice. Measured on three real tables
    (``docs/design/planning.md``): the tree lowered 2- and 3-column counts by
    25–50 % from a ratio of 1.6 up and raised every error at 0.87 and below.

    :param budget: the release's budget
    :param full: every candidate block (:func:`auto_marginals` before the rule)
    :param keep: the blocks the rule keeps
    :param rows: the schema's public row estimate (``None``: no tree)
    :param count_fraction: the count's share of the budget
    :example:

    >>> from opendp_sketch.plan import Budget, auto_blocks, auto_tree
    >>> box = ([0.0] * 6, [1.0] * 6)
    >>> def tree(e):
    ...     full, keep = auto_blocks(box, categorical=None, levels=None, fine_bins=None, rows=40_000,
    ...         epsilon=e, delta=None, rho=None, count_fraction=0.02, one_way_weight=3.0, bound_cells=None)
    ...     return auto_tree(Budget.of(epsilon=e), full, keep, 40_000)
    >>> [tree(e) for e in (0.1, 1.0, 10.0)]   # too noisy / columns apart / every pair kept
    [None, 0.1, None]
    """
    if rows is None:
        return None
    candidates, rounds = tree_rounds(full, keep)
    if rounds == 0:
        return None
    shape = weighted_map(full.take(sorted([*keep, *candidates[:rounds]])), AUTO_ONE_WAY_WEIGHT)
    ratio = tree_ratio(budget, shape, full, keep, rows, count_fraction, DEFAULT_SELECTION_FRACTION)
    return DEFAULT_SELECTION_FRACTION if ratio >= AUTO_TREE_SNR else None


def warn_if_tree_is_noise(ratio: float, rows: int) -> None:
    """Curator side, public inputs only (:func:`tree_ratio` of the budget, the map and the
    schema's row estimate): warn when the pairs a tree would add are mostly noise at this budget."""
    if ratio < AUTO_TREE_SNR:
        import warnings

        warnings.warn(
            f"pair_selection: at this budget an average cell of the candidate 2-way marginals holds {ratio:.2g} "
            f"noise std's of the schema's {rows} rows (below {AUTO_TREE_SNR}): the tree would likely cost more "
            "accuracy than it adds (docs/design/planning.md). Consider pair_selection=None "
            "or a larger budget",
            stacklevel=4,
        )


# -- the Plan: everything that decides what a release measures, validated once ---------------


def as_schema(schema: Any) -> Schema:
    """A :class:`~opendp_sketch.Schema` from itself, its dict, or a JSON file path / text."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema) if "columns" in schema else Schema(schema)
    if isinstance(schema, (str, os.PathLike)):
        return Schema.from_json(schema)
    raise ValueError(f"schema ({schema!r}) must be a dps.Schema, a dict or a JSON file path")


def _positive_contributions(contributions: Any) -> int:
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    return contributions


class Plan:
    r"""What a release measures and spends, decided once from public facts and validated before
    any data is read: a public **schema** (the automatic map, or a map of yours on its encoded
    columns) or a **box** (a feature map and its public bounds), the budget, the privacy unit,
    the count's share, and for a schema the pair rule, the private tree's share, the 1-way
    resolution and the row count's share.

    Options that belong to the other kind of plan are refused here, naming the fix, so a plan
    that exists is one a release can run. :func:`~opendp_sketch.release_sketch` takes it
    (``release_sketch(data, plan)``) on every backend and records it in
    ``sketch.privacy["plan"]``; it round-trips through :meth:`to_dict` / :meth:`from_dict`
    (JSON-ready).

    :param schema: a :class:`~opendp_sketch.Schema`, its dict, or a JSON path (a schema plan)
    :param feature_map: the public map (a box plan; with a schema, a map on its encoded columns)
    :param bounds: the public box ``(lower, upper)`` (box plans only)
    :param epsilon: ε; ``delta`` switches to Gaussian noise; or ``rho`` for zCDP
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the noisy count
    :param pairs: schema plans with the automatic map: ``"rule"``, ``"all"`` or ``"none"``
    :param pair_selection: schema plans with the automatic map: the private tree's share,
        ``"auto"`` or ``None``
    :param fine_bins: schema plans with the automatic map: bins of numeric 1-way marginals
    :param rows_fraction: schema plans without a ``rows`` estimate: the noisy row count's share
        (``0``: none)
    :param impute: box plans: public value(s) replacing NaN
    :param column_names: box plans: the columns to read (frames) or names to record (arrays)
    :param projection: box plans: a :class:`~opendp_sketch.JLProjection` applied before the map
    :raises ValueError: on anything a release would refuse before reading data
    :example:

    >>> import opendp_sketch as dps
    >>> plan = dps.Plan(dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]}), epsilon=1.0, pairs="all")
    >>> plan.kind, plan.budget.d_out, plan.pairs
    ('schema', 1.0, 'all')
    >>> dps.Plan.from_dict(plan.to_dict()) == plan
    True
    >>> dps.Plan(dps.Schema({"age": (18, 90)}), epsilon=1.0, bounds=(0, 1))
    Traceback (most recent call last):
    ...
    ValueError: with a schema, bounds, null rules and columns come from the schema: drop bounds=, impute=, column_names= and projection=
    """

    kind: Literal["schema", "box"]
    schema: Schema | None
    feature_map: FeatureMap | None
    bounds: tuple[np.ndarray, np.ndarray] | None
    budget: Budget
    contributions: int
    count_fraction: float
    pairs: PairsRule
    pair_selection: float | str | None
    fine_bins: int | None
    rows_fraction: float | None
    impute: Any
    column_names: list[str] | None
    projection: Any

    def __init__(
        self,
        schema: Any = None,
        feature_map: FeatureMap | None = None,
        bounds: Any = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        contributions: int = 1,
        count_fraction: float = DEFAULT_COUNT_FRACTION,
        pairs: PairsRule = "rule",
        pair_selection: float | Literal["auto"] | None = "auto",
        fine_bins: int | None = None,
        rows_fraction: float | None = None,
        impute: float | Sequence[float] | None = None,
        column_names: Sequence[str] | None = None,
        projection: Any = None,
    ) -> None:
        if isinstance(schema, FeatureMap):  # Plan(feature_map, bounds, ...)
            if bounds is not None:
                raise ValueError("give Plan(feature_map, bounds, ...) or Plan(schema, feature_map, ...)")
            schema, feature_map, bounds = None, schema, feature_map
        if feature_map is not None and not isinstance(feature_map, FeatureMap):
            raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
        self.feature_map = feature_map
        self.count_fraction = check_fraction(count_fraction)
        if schema is not None:
            if bounds is not None or impute is not None or column_names is not None or projection is not None:
                raise ValueError(
                    "with a schema, bounds, null rules and columns come from the schema: "
                    "drop bounds=, impute=, column_names= and projection="
                )
            self.kind = "schema"
            self.schema = as_schema(schema)
            self.budget = Budget.of(epsilon, delta, rho)
            self._check_schema_options(pairs, pair_selection, fine_bins, rows_fraction)
            self.bounds = None
            self.impute, self.column_names, self.projection = None, None, None
        else:
            if rows_fraction is not None:
                raise ValueError(
                    "rows_fraction plans the automatic map of a schema release: give schema= or drop it"
                )
            if pair_selection not in (None, AUTO_SELECTION) or fine_bins is not None or pairs != "rule":
                raise ValueError(
                    "pair_selection, fine_bins and pairs shape the automatic map of a schema: give "
                    "schema=dps.Schema({...}) and no feature_map"
                )
            if feature_map is None or bounds is None:
                raise ValueError(
                    "give a schema (schema=dps.Schema({...})), or a feature_map and its public bounds"
                )
            self.kind, self.schema = "box", None
            self.budget = Budget.of(epsilon, delta, rho)
            self.pairs, self.pair_selection, self.fine_bins, self.rows_fraction = "rule", None, None, None
            if projection is None:
                lo, hi = box_data_bounds(bounds, feature_map)
            else:
                lo, hi = check_bounds(bounds, getattr(projection, "input_dim", None))
            self.bounds = (lo, hi)
            self.impute = impute
            self.column_names = check_column_names(column_names)
            self.projection = projection
        self.contributions = _positive_contributions(contributions)

    def _check_schema_options(
        self, pairs: Any, pair_selection: Any, fine_bins: Any, rows_fraction: Any
    ) -> None:
        fm, schema = self.feature_map, self.schema
        assert schema is not None
        if fine_bins is not None and fm is not None:
            raise ValueError("fine_bins shapes the automatic map: drop feature_map= or fine_bins=")
        pairs = check_pairs(pairs)
        if pairs != "rule" and fm is not None:
            raise ValueError("pairs shapes the automatic map: drop feature_map= or pairs=")
        auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION
        if not auto and pair_selection is not None:
            if pairs == "all":
                raise ValueError(
                    "pairs='all' measures every 2-way marginal, so pair_selection has nothing to choose: "
                    "drop one of them"
                )
            if fm is not None:
                raise ValueError(
                    "pair_selection chooses 2-way marginals of the automatic map: drop feature_map= or "
                    "pair_selection="
                )
            pair_selection = check_fraction(pair_selection, "pair_selection")
        no_count = rows_fraction is not None and not isinstance(rows_fraction, bool) and rows_fraction == 0
        if rows_fraction is not None and not no_count:
            check_fraction(rows_fraction, "rows_fraction")
            if fm is not None or schema.rows is not None:
                raise ValueError(
                    "rows_fraction counts the rows to plan the automatic map of a table in memory or in "
                    "files whose schema has no rows estimate (and no feature_map): drop it here"
                )
        if fm is not None and fm.input_dim != len(schema):
            raise ValueError(
                f"the feature map expects {fm.input_dim} columns but the schema has {len(schema)}"
            )
        self.pairs, self.pair_selection, self.fine_bins = pairs, pair_selection, fine_bins
        self.rows_fraction = 0.0 if no_count else rows_fraction

    @property
    def counts_rows(self) -> bool:
        """Whether the release first counts the rows privately to plan its map: a schema plan
        with the automatic map, no public ``rows`` and a non-zero ``rows_fraction``."""
        return (
            self.kind == "schema"
            and self.feature_map is None
            and self.schema is not None
            and self.schema.rows is None
            and self.rows_fraction != 0
        )

    def planned_map(self) -> FeatureMap:
        """The map the release will measure, when public facts decide it: a given map, or the
        automatic map of a schema with a public ``rows`` estimate (or none counted) and no
        private tree to choose.

        :raises ValueError: when the map depends on released values (a noisy row count, or a
            private tree of pairs): those are decided inside the release
        """
        if self.feature_map is not None:
            return self.feature_map
        if self.counts_rows:
            raise ValueError(
                "this plan counts the rows privately before choosing its map: give the schema a public "
                "rows estimate, or rows_fraction=0, to see the map beforehand"
            )
        fm, full, keep, tree = self.table_blocks()
        if tree is not None and tree_rounds(full, keep)[1] > 0:
            raise ValueError(
                "this plan chooses a tree of pairs privately inside the release: pass pair_selection=None "
                "to see the map beforehand"
            )
        return fm

    def table_blocks(self) -> tuple[FeatureMap, Any, Any, float | None]:
        """A schema plan's map when no noisy row count decides it: the map, the candidate blocks
        and kept indices of the automatic map (``None``, ``None`` for a given map), and the
        private tree's share (``None``: no tree; ``"auto"`` decided here from public inputs)."""
        assert self.schema is not None
        chosen = self.pair_selection
        tree = float(chosen) if isinstance(chosen, (int, float)) else None
        if self.feature_map is not None:
            return self.feature_map, None, None, tree
        full, keep = schema_blocks(
            self.schema,
            **self.budget.kwargs(),
            count_fraction=self.count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=self.fine_bins,
            pairs=self.pairs,
        )
        if isinstance(chosen, str) and self.pairs == "rule":  # "auto": public inputs decide
            tree = auto_tree(self.budget, full, keep, self.schema.rows, self.count_fraction)
        return kept_map(full, keep, AUTO_ONE_WAY_WEIGHT, schema_targets(self.schema)), full, keep, tree

    def options(self) -> dict[str, Any]:
        """The plan's choices as plain values (no schema, map or box): what a sketch records."""
        budget: dict[str, Any] = {"kind": self.budget.kind}
        if self.budget.kind == "epsilon_delta":
            budget["epsilon"], budget["delta"] = self.budget.d_out
        else:
            budget["rho" if self.budget.kind == "rho" else "epsilon"] = float(self.budget.d_out)
        return {
            "kind": self.kind,
            "budget": budget,
            "contributions": self.contributions,
            "count_fraction": self.count_fraction,
            "pairs": self.pairs,
            "pair_selection": self.pair_selection,
            "fine_bins": self.fine_bins,
            "rows_fraction": self.rows_fraction,
            "automatic_map": self.kind == "schema" and self.feature_map is None,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict :meth:`from_dict` reads back."""
        out = self.options()
        out["schema"] = None if self.schema is None else self.schema.to_dict()
        out["feature_map"] = None if self.feature_map is None else self.feature_map.to_dict()
        if self.kind == "box":
            assert self.bounds is not None
            out["bounds"] = [self.bounds[0].tolist(), self.bounds[1].tolist()]
            out["impute"] = None if self.impute is None else np.asarray(self.impute, dtype=float).tolist()
            out["column_names"] = self.column_names
            out["projection"] = None if self.projection is None else self.projection.to_dict()
        return out

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Plan:
        """The plan :meth:`to_dict` wrote (validated again).

        :raises ValueError: on an unknown key, naming it
        """
        known = {
            "kind", "budget", "contributions", "count_fraction", "pairs", "pair_selection", "fine_bins",
            "rows_fraction", "automatic_map", "schema", "feature_map", "bounds", "impute", "column_names",
            "projection",
        }  # fmt: skip
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(f"unknown plan keys {unknown}; a plan has {sorted(known)}")
        budget = dict(spec["budget"])
        budget.pop("kind", None)
        fm = spec.get("feature_map")
        feature_map = None if fm is None else FeatureMap.from_dict(fm)
        common: dict[str, Any] = {
            **budget,
            "contributions": spec.get("contributions", 1),
            "count_fraction": spec.get("count_fraction", DEFAULT_COUNT_FRACTION),
        }
        if spec.get("kind") == "schema":
            return cls(
                Schema.from_dict(spec["schema"]),
                feature_map,
                pairs=spec.get("pairs", "rule"),
                pair_selection=spec.get("pair_selection", AUTO_SELECTION),
                fine_bins=spec.get("fine_bins"),
                rows_fraction=spec.get("rows_fraction"),
                **common,
            )
        projection = spec.get("projection")
        if projection is not None:
            from .backends.projections import JLProjection

            projection = JLProjection.from_dict(projection)
        bounds = spec.get("bounds")
        return cls(
            None,
            feature_map,
            None if bounds is None else (bounds[0], bounds[1]),
            impute=spec.get("impute"),
            column_names=spec.get("column_names"),
            projection=projection,
            **common,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        o = self.options()
        what = f"schema={list(self.schema.columns)}" if self.schema is not None else "box"
        return f"Plan({what}, budget={o['budget']}, contributions={self.contributions}, pairs={self.pairs!r})"
