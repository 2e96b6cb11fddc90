"""The faster planning layouts give exactly what the earlier code gave (issue 40: the private
choice of pairs at 100 columns). The earlier code is written out here as the reference."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np
import pytest

from opendp_sketch._validate import check_bounds, check_positive_int
from opendp_sketch.features import marginals as M
from opendp_sketch.features.marginals import MarginalBlock, MarginalTables


def _old_reads(keys: Any, unread: Any, axes: Any) -> list[int]:
    have = set(axes)
    return [i for i in unread if set(keys[i]) <= have]


def _old_joint_layout(blocks: Any) -> tuple[Any, ...]:
    """``_joint_layout`` before the index (the quadratic greedy cover), verbatim in behaviour."""

    def keys_of(b: MarginalBlock) -> tuple[Any, ...]:
        return tuple((j, n, b.column_cuts(k)) for k, (j, n) in enumerate(zip(b.subset, b.shape)))

    keys = [keys_of(b) for b in blocks]
    universe = list(dict.fromkeys(k for ks in keys for k in ks))
    unread = list(range(len(blocks)))
    out = []
    while unread:
        axes = list(keys[unread[0]])
        while len(axes) < M.JOINT_MAX_COLUMNS:
            best, gain = None, len(_old_reads(keys, unread, axes))
            for k in universe:
                if k in axes or math.prod(a[1] for a in axes) * k[1] > M.JOINT_MAX_CELLS:
                    continue
                got = len(_old_reads(keys, unread, [*axes, k]))
                if got > gain:
                    best, gain = k, got
            if best is None:
                break
            axes.append(best)
        members = _old_reads(keys, unread, axes)
        unread = [i for i in unread if i not in members]
        shape = tuple(a[1] for a in axes)
        cuts = tuple(a[2] for a in axes)
        joint = MarginalBlock(
            tuple(a[0] for a in axes), shape, 0, cuts if any(c is not None for c in cuts) else ()
        )
        plan = []
        for i in members:
            at = tuple(axes.index(k) for k in keys[i])
            rest = tuple(a for a in range(len(axes)) if a not in at)
            kept = sorted(at)
            perm = tuple(kept.index(a) for a in at)
            plan.append(
                (blocks[i].offset, blocks[i].size, rest, None if perm == tuple(range(len(perm))) else perm)
            )
        out.append(M._Joint(joint, tuple(plan)))
    return tuple(out)


def _old_gram_layout(blocks: Any) -> Any:
    """``_gram_layout`` before the vectorised cells (one meshgrid per block)."""
    if any(len(b.subset) > 2 for b in blocks) or sum(len(b.subset) == 2 for b in blocks) < M.GRAM_MIN_PAIRS:
        return None
    keys: dict[Any, int] = {}
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
    if width > M.GRAM_MAX_WIDTH or pairs < M.GRAM_PAIRS_PER_INDICATOR * width:
        return None
    rows, cols = [], []
    for b, here in zip(blocks, starts):
        if len(b.subset) == 1:
            cells = np.arange(b.shape[0]) + here[0]
            rows.append(cells)
            cols.append(cells)
        else:
            a, c = np.meshgrid(np.arange(b.shape[0]), np.arange(b.shape[1]), indexing="ij")
            rows.append(a.ravel() + here[0])
            cols.append(c.ravel() + here[1])
    return keys, width, np.concatenate(rows), np.concatenate(cols)


def _random_map(seed: int) -> MarginalTables:
    """1-, 2- and 3-way marginals in random order, some columns twice at other bins or cuts."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(3, 9))
    cats = [j for j in range(d) if rng.random() < 0.3]
    hi = [4 if j in cats else 1 for j in range(d)]
    subsets: list[Any] = []
    bins: list[Any] = []
    seen = set()
    for _ in range(int(rng.integers(3, 40))):
        way = int(rng.choice([1, 2, 3], p=[0.3, 0.5, 0.2]))
        s = tuple(int(v) for v in rng.choice(d, size=way, replace=False))
        spec = []
        for j in s:
            if j in cats:
                spec.append(5)
            elif rng.random() < 0.2:
                spec.append([0.25, 0.5])
            else:
                spec.append(int(rng.choice([2, 4, 8, 16])))
        key = frozenset((j, repr(b)) for j, b in zip(s, spec))
        if key in seen:
            continue
        seen.add(key)
        subsets.append(s)
        bins.append(spec)
    return MarginalTables(bounds=([0] * d, hi), subsets=subsets, bins=bins, categorical=cats)


def _auto_maps() -> list[MarginalTables]:
    out = []
    for d, cats, coarse in [(12, [3, 7, 11], 4), (20, [3, 7, 11, 15, 19], 2), (9, [], 8), (30, [1, 5], 2)]:
        fm = MarginalTables.auto(
            ([0] * d, [4 if j in cats else 1 for j in range(d)]),
            categorical=cats,
            fine_bins=16,
            coarse_bins=coarse,
            max_cells=1 << 20,
        )
        out.append(fm)
        pairs = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 2]
        out.append(fm.take(pairs))  # a selection's candidates
        out.append(fm.take(list(reversed(range(len(fm.blocks))))))
    return out


MAPS = [_random_map(seed) for seed in range(40)] + _auto_maps()
#: wider maps for the Gram layout (1-way cut points at the bounds, categories, pairs in any order)
GRAM_MAPS = MAPS + [
    MarginalTables.auto(
        ([0] * d, [4 if j % 4 == 3 else 1 for j in range(d)]),
        categorical=[j for j in range(d) if j % 4 == 3],
        fine_bins=8,
        coarse_bins=2,
        bound_cells=bound,
        max_cells=1 << 20,
    )
    for d, bound in [(40, None), (40, 1e-3), (60, 1e-2)]
]
GRAM_MAPS += [fm.take(list(reversed(range(len(fm.blocks))))) for fm in GRAM_MAPS[-3:]]


@pytest.mark.parametrize("fm", MAPS, ids=[f"map{i}" for i in range(len(MAPS))])
def test_joint_layout_is_the_earlier_greedy_cover(fm: MarginalTables) -> None:
    assert M._joint_layout(fm.blocks) == _old_joint_layout(fm.blocks)


def test_joint_layout_of_blocks_the_limits_keep_apart() -> None:
    """Wide bins: a joint cannot take a third axis, and ties go to the first key."""
    d = 6
    subsets = [*range(d), *itertools.combinations(range(d), 2)]
    fm = MarginalTables(bounds=(0, 1), subsets=subsets, bins=[[128]] * d + [[128, 128]] * 15, dim=d)
    assert M._joint_layout(fm.blocks) == _old_joint_layout(fm.blocks)


@pytest.mark.parametrize("fm", GRAM_MAPS, ids=[f"map{i}" for i in range(len(GRAM_MAPS))])
def test_gram_layout_is_the_earlier_layout(fm: MarginalTables) -> None:
    new, old = M._gram_layout(fm.blocks), _old_gram_layout(fm.blocks)
    assert (new is None) == (old is None)
    if new is not None:
        assert new[0] == old[0] and list(new[0]) == list(old[0]) and new[1] == old[1]
        for a, b in zip(new[2:], old[2:]):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_some_maps_use_the_gram_layout() -> None:
    """The comparison above covers maps that take the Gram product, not only ``None``."""
    assert sum(_old_gram_layout(fm.blocks) is not None for fm in GRAM_MAPS) >= 5


@pytest.mark.parametrize("kind", ["epsilon", "rho"])
@pytest.mark.parametrize("d_in", [1, 2, 5])
@pytest.mark.parametrize("d_out", [1e-3, 0.01, 0.37, 2.0])
def test_noisy_max_scale_is_the_scale_the_whole_chain_finds(kind: str, d_in: int, d_out: float) -> None:
    """The selection's noise: the search on the noisy max alone finds exactly the scale the
    search on the chain (scores >> noisy max >> index) found before, and the same loss."""
    import opendp.prelude as dp

    from opendp_sketch.selection import make_independence_scores, noisy_max_scale

    dp.enable_features("contrib", "honest-but-curious")
    measure = dp.max_divergence() if kind == "epsilon" else dp.zero_concentrated_divergence()
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    fm = MarginalTables.auto(([0.0] * 4, [1.0] * 4), fine_bins=4, coarse_bins=2)
    pairs = [b for b in fm.blocks if len(b.subset) == 2]

    def chain(v: float) -> Any:
        scores = make_independence_scores(
            domain,
            dp.symmetric_distance(),
            lambda x: (np.zeros(fm.num_features), 0),
            pairs,
            range(len(pairs)),
            {},
        )
        return scores >> dp.m.then_noisy_max(measure, v) >> dp.new_function(int, TO="ExtrinsicObject")

    old = dp.binary_search_param(chain, d_in=d_in, d_out=d_out, T=float)
    new = noisy_max_scale(measure, d_in, d_out)
    assert new == old
    assert chain(new).map(d_in) == chain(old).map(d_in)


def _old_auto(
    bounds: Any,
    *,
    categorical: Any = None,
    fine_bins: int = 32,
    coarse_bins: int = 8,
    max_cells: int = 1 << 16,
    dim: Any = None,
    levels: Any = None,
    bound_cells: Any = None,
    pair_levels: Any = None,
    coarse_one_way: Any = None,
) -> MarginalTables:
    """``MarginalTables.auto`` before the pairs' cells were counted per column (its body)."""
    lo, hi = check_bounds(bounds, dim)
    d = lo.size
    cats = M._parse_categorical(categorical, lo, hi)
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

    def shape(pair: tuple[int, int], c: int) -> tuple[int, int]:
        return tuple(c if j in wide else fixed.get(j, c) for j in pair)  # type: ignore[return-value]

    c = coarse
    while c > 2 and sum(ones) + sum(math.prod(shape(p, c)) for p in pairs) > budget:
        c = max(2, c // 2)
    total = sum(ones)
    for p in sorted(pairs, key=lambda p: (math.prod(shape(p, c)), p)):
        size = math.prod(shape(p, c))
        if total + size <= budget:
            subsets.append(p)
            bins.append(list(shape(p, c)))
            total += size
    first = d + len(tree)
    order = sorted(range(first, len(subsets)), key=lambda i: subsets[i])  # pairs in column order
    subsets = subsets[:first] + [subsets[i] for i in order]
    bins = bins[:first] + [bins[i] for i in order]
    return MarginalTables((lo, hi), subsets, bins, categorical=sorted(cats))


def _auto_cases() -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    out = []
    for _ in range(100):
        d = int(rng.integers(1, 25))
        cats = sorted(int(j) for j in rng.choice(d, size=int(rng.integers(0, d + 1)), replace=False))
        hi = [
            int(rng.integers(1, 7)) if j in cats else float(rng.choice([1.0, 10.0, 100.0])) for j in range(d)
        ]
        free = [j for j in range(d) if j not in cats]
        levels = {j: int(rng.integers(2, 40)) for j in free if rng.random() < 0.2}
        fine = int(rng.choice([8, 16, 32]))
        ones = sum(hi[j] + 1 if j in cats else levels.get(j, fine + 2) for j in range(d)) + fine * d
        out.append(
            dict(
                bounds=([0] * d, hi),
                categorical=cats,
                fine_bins=fine,
                coarse_bins=int(rng.choice([2, 4, 8, 16])),
                max_cells=int(ones + rng.integers(0, (4 if rng.random() < 0.5 else 40) * d * d + 1)),
                levels=levels,
                bound_cells=1e-3 if rng.random() < 0.3 else None,
                pair_levels=int(rng.choice([4, 16])) if rng.random() < 0.5 else None,
                coarse_one_way=4 if rng.random() < 0.3 else None,
            )
        )
    return out


@pytest.mark.parametrize("kw", _auto_cases())
def test_auto_picks_the_blocks_the_earlier_rule_picked(kw: dict[str, Any]) -> None:
    try:
        old = _old_auto(**kw)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            MarginalTables.auto(**kw)
        return
    new = MarginalTables.auto(**kw)
    assert new.blocks == old.blocks
    assert new._params() == old._params()
