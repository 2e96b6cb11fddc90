"""``opendp_sketch.selection``: scores of several blocks read from a marginal map's cell counts,
the scores transformation (output, stated stability, one read of the data per dataset, the subset
it returns, adversarial neighbours), and the spanning forest's bookkeeping. The score's bound of 4
per row and the private choice itself are tested in ``tests/privacy/test_pair_selection.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.features.marginals import MarginalBlock, MarginalTables
from opendp_sketch.selection import (
    SCORE_SENSITIVITY,
    Forest,
    independence_score,
    independence_scores,
    make_independence_scores,
)

SYM = dp.symmetric_distance()
BOX = ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])


@pytest.fixture(scope="module")
def marginals() -> MarginalTables:
    """1-way blocks of 2 cells per column, then the pairs (0, 1), (0, 2), (1, 2) of 2×2 cells."""
    return MarginalTables.auto(BOX, fine_bins=2, coarse_bins=2)


def _pairs(fm: MarginalTables) -> list[MarginalBlock]:
    return [b for b in fm.blocks if len(b.subset) == 2]


# -- independence_score and independence_scores ----------------------------------------------------
@pytest.mark.parametrize(
    "table, score",
    [
        ([[3, 1], [1, 3]], 4),  # |8·3 − 4·4| = 8 on each of 4 cells: 32 / 8
        ([[6, 0], [0, 0]], 0),  # one cell: its own margins' product
        ([[1, 2, 3], [2, 4, 6]], 0),  # an exact product table
        ([[0, 5], [5, 0]], 10),
        ([[2, 1], [0, 0]], 0),
        ([[1, 0], [0, 2]], 2),  # Σ|3·N − r·cᵀ| = 8 over n = 3 rows: ⌊8/3⌋
        ([[7]], 0),
        (np.zeros((0, 0), dtype=np.int64), 0),
    ],
)
def test_score_values(table: Any, score: int) -> None:
    assert independence_score(table) == score
    assert independence_score(np.asarray(table).T) == score  # symmetric in the two columns


def test_scores_read_each_block_at_its_offset(marginals: MarginalTables) -> None:
    pairs = _pairs(marginals)
    sums = np.zeros(marginals.num_features, dtype=np.int64)
    table01, table12 = np.array([[3, 1], [1, 3]]), np.array([[0, 5], [5, 0]])
    for block, table in ((pairs[0], table01), (pairs[2], table12)):
        sums[block.offset : block.offset + block.size] = table.ravel()
    scores = independence_scores(sums, pairs)
    assert scores.dtype == np.float64 and scores.tolist() == [4.0, 0.0, 10.0]
    assert independence_scores(sums, pairs[::-1]).tolist() == [10.0, 0.0, 4.0]
    assert independence_scores(sums, []).tolist() == []


def test_scores_of_the_exact_sums_follow_the_dependence(marginals: MarginalTables) -> None:
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, 400)
    X = np.column_stack([x, x, rng.uniform(0, 1, 400)])  # columns 0 and 1 equal, 2 independent
    sums = np.asarray(marginals.fixed_sum(X), dtype=np.int64)
    scores = independence_scores(sums, _pairs(marginals))
    # the equal pair is far from independence (≈ n = 400); an independent pair's score has sd ≈ 2√n/π
    # ≈ 13, so 100 is beyond 7 standard deviations of it
    assert scores[0] >= 380 and scores[1] < 100 and scores[2] < 100


# -- make_independence_scores -----------------------------------------------------------------------
class _Counts:
    """A backend's ``(cell counts, n)`` of a box's rows, counting how often it reads data."""

    def __init__(self, fm: MarginalTables) -> None:
        self.fm, self.reads = fm, 0

    def __call__(self, data: np.ndarray) -> tuple[np.ndarray, int]:
        self.reads += 1
        clipped = np.fmin(np.fmax(np.nan_to_num(data, nan=0.0), 0.0), 1.0)
        return np.asarray(self.fm.fixed_sum(clipped), dtype=np.int64), data.shape[0]


@pytest.fixture
def data() -> np.ndarray:
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, 300)
    return np.column_stack([x, np.clip(x + rng.normal(0, 0.05, 300), 0, 1), rng.uniform(0, 1, 300)])


def test_scores_transformation_output_and_stability(marginals: MarginalTables, data: np.ndarray) -> None:
    counts = _Counts(marginals)
    pairs = _pairs(marginals)
    dom = dps.box_domain(BOX)
    t = make_independence_scores(dom, SYM, counts, pairs, [2, 0], {})
    assert t.output_metric == dp.linf_distance(T=float)
    assert t.output_domain == dp.vector_domain(dp.atom_domain(T=float, nan=False))
    assert SCORE_SENSITIVITY == 4 and [t.map(d) for d in (0, 1, 5)] == [0.0, 4.0, 20.0]
    full = independence_scores(counts(data)[0], pairs)
    assert t(data) == [full[2], full[0]]


def test_one_memo_reads_a_dataset_once_and_a_new_dataset_again(
    marginals: MarginalTables, data: np.ndarray
) -> None:
    counts, memo = _Counts(marginals), {}
    pairs = _pairs(marginals)
    dom = dps.box_domain(BOX)
    rounds = [
        make_independence_scores(dom, SYM, counts, pairs, subset, memo) for subset in ([0, 1, 2], [1], [2])
    ]
    first = [t(data) for t in rounds]
    assert counts.reads == 1
    assert first[1] == [first[0][1]] and first[2] == [first[0][2]]
    other = data[:-1]  # another dataset (a neighbour): read again, never the first one's scores
    again = rounds[0](other)
    assert counts.reads == 2
    assert again == make_independence_scores(dom, SYM, _Counts(marginals), pairs, [0, 1, 2], {})(other)
    fresh = make_independence_scores(dom, SYM, counts, pairs, [0, 1, 2], {})(data)  # a new memo: a new read
    assert counts.reads == 3 and fresh == first[0]


@pytest.mark.parametrize(
    "row", [[np.nan, 0.5, 0.5], [np.inf, -np.inf, 0.5], [1e308, -1e308, 1e-320], [1.0, 0.0, 1.0]]
)
def test_scores_of_neighbours_move_by_at_most_four(
    marginals: MarginalTables, data: np.ndarray, row: list[float]
) -> None:
    pairs = _pairs(marginals)
    dom = dps.box_domain(BOX)
    t = make_independence_scores(dom, SYM, _Counts(marginals), pairs, range(len(pairs)), {})
    a = np.array(t(data))
    for neighbour in (np.vstack([data, row]), np.vstack([row, data]), data[1:]):
        b = np.array(make_independence_scores(dom, SYM, _Counts(marginals), pairs, range(3), {})(neighbour))
        assert b.shape == a.shape == (3,) and np.all(np.isfinite(b))
        assert np.max(np.abs(a - b)) <= t.map(1)


# -- Forest -----------------------------------------------------------------------------------------
def test_forest_counts_components_as_pairs_join_them() -> None:
    f = Forest(5)
    assert f.components == 5
    f.join((0, 1))
    f.join((1, 0))  # already joined: nothing changes
    assert f.components == 4
    f.join((2, 3))
    f.join((1, 3))
    assert f.components == 2
    f.join((0, 2))  # a cycle: no change
    assert f.components == 2


def test_forest_crossing_lists_pairs_between_components() -> None:
    f = Forest(4, [(0, 1), (2, 3)])
    candidates = [(0, 1), (1, 2), (2, 3), (0, 3), (3, 2)]
    assert f.crossing(candidates) == [1, 3]
    f.join((1, 2))
    assert f.crossing(candidates) == [] and f.components == 1


def test_forest_joins_every_column_of_a_larger_marginal() -> None:
    f = Forest(6, [(0, 2, 4)])
    assert f.components == 4
    assert f.crossing([(0, 4), (2, 4), (0, 1), (4, 5)]) == [2, 3]
    f.join((1, 3, 5))
    assert f.components == 2
    f.join((5,))  # one column joins nothing
    assert f.components == 2


def test_a_spanning_tree_leaves_one_component() -> None:
    rng = np.random.default_rng(2)
    d = 12
    f = Forest(d)
    order = rng.permutation(d)
    for a, b in zip(order[:-1], order[1:]):
        assert f.crossing([(int(a), int(b))]) == [0]
        f.join((int(a), int(b)))
    assert f.components == 1
    assert f.crossing([(i, j) for i in range(d) for j in range(i + 1, d)]) == []


def test_the_batched_scores_equal_the_one_table_formula():
    """``independence_scores`` scores the tables of one shape together; each score is the exact
    ``independence_score`` of its table (random and adversarial tables, empty ones included)."""
    from opendp_sketch.features.marginals import MarginalTables
    from opendp_sketch.selection import independence_score, independence_scores

    fm = MarginalTables.auto(([0.0] * 6, [1.0] * 6), categorical=[5], fine_bins=4, coarse_bins=4)
    fm = fm.take([i for i, b in enumerate(fm.blocks) if len(b.subset) == 2])
    rng = np.random.default_rng(3)
    for sums in (
        rng.integers(0, 1000, fm.num_features),
        np.zeros(fm.num_features, dtype=np.int64),
        rng.integers(0, 2, fm.num_features) * (2**30),
    ):
        expected = [
            independence_score(sums[b.offset : b.offset + b.size].reshape(b.shape)) for b in fm.blocks
        ]
        np.testing.assert_array_equal(independence_scores(sums, fm.blocks), np.array(expected, dtype=float))
