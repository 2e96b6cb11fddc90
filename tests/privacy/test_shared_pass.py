"""One pass for a tree of pairs (issue 40): the candidates' scores and the release read one pass.

A schema release that chooses its pairs privately counts every candidate block and the blocks
measured in any case in one read of the table (:class:`opendp_sketch.adaptive.SharedPass`), then
reads the release's exact pair off those counts. These tests hold the pair to the map's own pass
(the earlier behaviour) on every adversarial row, show the table is read and encoded once, and
that a map or backend the pass cannot serve runs its own pass.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.adaptive import SharedPass, make_spanning_sketch
from opendp_sketch.backends import make_sum_and_count
from opendp_sketch.backends.tables import table_domain
from opendp_sketch.budget import Budget
from opendp_sketch.plan import AUTO_ONE_WAY_WEIGHT, schema_blocks, tree_rounds, weighted_map
from opendp_sketch.schema import Schema

dp.enable_features("contrib", "honest-but-curious")

SCHEMA = dps.Schema(
    {
        "x": (0.0, 1.0),
        "y": (0.0, 1.0),
        "z": (0.0, 1.0),
        "c": dps.Categorical(["a", "b", "c"], null="category"),
        "w": (0.0, 10.0),
    },
    rows=2000,
)
#: every kind of value a row can hold: the pass runs inside the measurement, so none may raise
ROWS = {
    "null x": (None, 0.5, 0.5, "a", 1.0),
    "nan y": (0.5, math.nan, 0.5, "a", 1.0),
    "+inf z": (0.5, 0.5, math.inf, "b", 1.0),
    "-inf w": (0.5, 0.5, 0.5, "b", -math.inf),
    "-1e308 x": (-1e308, 0.5, 0.5, "a", 1.0),
    "1e308 y": (0.5, 1e308, 0.5, "b", 1.0),
    "bound": (1.0, 0.0, 1.0, "b", 10.0),
    "null c": (0.5, 0.5, 0.5, None, 1.0),
    "unknown c": (0.5, 0.5, 0.5, "zzz", 1.0),
}


def _frame(extra=None, n: int = 3000, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, n)
    df = pl.DataFrame(
        {
            "x": x,
            "y": np.clip(x + rng.normal(0, 0.05, n), 0, 1),
            "z": rng.uniform(0, 1, n),
            "c": rng.choice(["a", "b", "c"], n),
            "w": rng.uniform(0, 10, n),
        }
    )
    if extra is not None:
        df = pl.concat([df, pl.DataFrame([extra], schema=df.schema, orient="row")])
    return df


def _blocks(schema: Schema = SCHEMA):
    full, keep = schema_blocks(schema, epsilon=1.0)
    candidates, rounds = tree_rounds(full, keep)
    return full, sorted(keep), candidates, rounds


def _released_maps(full, keep, candidates, seed: int = 0, k: int = 6):
    """Maps a release could measure: the kept blocks and a few random sets of candidates."""
    rng = np.random.default_rng(seed)
    out = []
    for size in (1, 2, 4):
        for _ in range(k // 3):
            chosen = rng.choice(len(candidates), size=min(size, len(candidates)), replace=False)
            blocks = full.take(sorted(keep + [candidates[int(c)] for c in chosen]))
            out.append(weighted_map(blocks, AUTO_ONE_WAY_WEIGHT))
    return out


@pytest.mark.parametrize("kind", [None, *ROWS])
@pytest.mark.parametrize("lazy", [False, True])
def test_the_pair_read_off_the_pass_is_the_maps_own(kind, lazy):
    """The release's exact pair read off the shared pass equals its map's own pass (the earlier
    behaviour), integer for integer, with every adversarial row, and the candidates' counts equal
    theirs; nothing warns or raises."""
    full, keep, candidates, rounds = _blocks()
    assert rounds >= 2 and keep
    cand, measured = full.take(candidates), full.take(keep)
    dom, metric = table_domain(SCHEMA), dp.symmetric_distance()
    data = _frame(None if kind is None else ROWS[kind])
    if lazy:
        data = data.lazy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shared = SharedPass(dom, metric, cand, measured, chunk_rows=700)
        got, rows = shared.candidate_counts(data)
        want, n = make_sum_and_count(dom, metric, cand)(data)
        assert rows == n == 3000 + (kind is not None)
        assert np.array_equal(np.asarray(got), np.asarray(want))
        for fm in _released_maps(full, keep, candidates):
            own_sum, own_n = make_sum_and_count(dom, metric, fm)(data)
            pair_sum, pair_n = shared.pair_of(fm)(data)
            assert pair_n == own_n
            assert np.asarray(pair_sum).dtype == np.int64
            assert np.array_equal(np.asarray(pair_sum), np.asarray(own_sum))


def test_the_pass_serves_only_its_own_dataset_and_blocks():
    """Another dataset (the memo is by identity) or a block outside the pass: the map's own pass."""
    full, keep, candidates, _ = _blocks()
    cand, measured = full.take(candidates), full.take(keep)
    dom, metric = table_domain(SCHEMA), dp.symmetric_distance()
    a, b = _frame(seed=0), _frame(seed=1)
    shared = SharedPass(dom, metric, cand, None)  # no measured blocks: the 1-way ones are missing
    shared.candidate_counts(a)
    fm = weighted_map(full.take(sorted(keep + candidates[:1])), AUTO_ONE_WAY_WEIGHT)
    for data in (a, b):
        assert np.array_equal(
            np.asarray(shared.pair_of(fm)(data)[0]), np.asarray(make_sum_and_count(dom, metric, fm)(data)[0])
        )
    shared = SharedPass(dom, metric, cand, measured)
    shared.candidate_counts(a)
    got = shared.pair_of(fm)(b)[0]  # b was not read: its own pass, not a's counts
    assert np.array_equal(np.asarray(got), np.asarray(make_sum_and_count(dom, metric, fm)(b)[0]))
    assert not np.array_equal(np.asarray(got), np.asarray(make_sum_and_count(dom, metric, fm)(a)[0]))


def test_a_release_with_a_choice_reads_and_encodes_the_table_once(monkeypatch):
    """The candidates' scores and the release share one pass: each batch is encoded once (the
    earlier release encoded the table twice: the scores' pass, then the release's)."""
    encoded = []
    encode = Schema.encode

    def counting(self, batch, *args, **kwargs):
        encoded.append(batch.height)
        return encode(self, batch, *args, **kwargs)

    monkeypatch.setattr(Schema, "encode", counting)
    full, keep, _, rounds = _blocks()
    m, _, k = make_spanning_sketch(
        table_domain(SCHEMA), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, full, keep, 0.2
    )
    assert k == rounds >= 2
    sk = m(_frame())
    assert sum(encoded) == 3000
    assert len(sk.privacy["pair_selection"]["pairs"]) == rounds
    assert m.map(1) <= 1.0


def test_other_backends_keep_their_passes():
    """A numpy box: the candidates' own pass, and the release's own pair (the same integers)."""
    d = 4
    fm = dps.MarginalTables.auto(([0.0] * d, [1.0] * d), fine_bins=4, coarse_bins=2)
    ones = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]
    candidates, _ = tree_rounds(fm, ones)
    dom, metric = dps.box_domain(([0.0] * d, [1.0] * d)), dp.symmetric_distance()
    X = np.random.default_rng(0).random((500, d))
    X[0, 0], X[1, 1] = np.nan, np.inf
    shared = SharedPass(dom, metric, fm.take(candidates), fm.take(ones))
    want = make_sum_and_count(dom, metric, fm.take(candidates))(X)
    got = shared.candidate_counts(X)
    assert got[1] == want[1] and np.array_equal(np.asarray(got[0]), np.asarray(want[0]))
    released = weighted_map(fm.take(sorted(ones + candidates[:2])), AUTO_ONE_WAY_WEIGHT)
    assert np.array_equal(
        np.asarray(shared.pair_of(released)(X)[0]),
        np.asarray(make_sum_and_count(dom, metric, released)(X)[0]),
    )


def _hostile(n: int, d: int, seed: int, lo: float, hi: float) -> np.ndarray:
    """Rows in and around the box, with NaN, ±inf, ±1e308, the bounds and half-integers."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(lo - 0.3 * (hi - lo), hi + 0.3 * (hi - lo), size=(n, d))
    specials = np.array([np.nan, np.inf, -np.inf, 1e308, -1e308, lo, hi, 0.5, -0.0, 1.5, 2.5])
    mask = rng.random((n, d)) < 0.1
    X[mask] = rng.choice(specials, size=int(mask.sum()))
    return X


@pytest.mark.parametrize("seed", range(12))
def test_pair_counts_equal_the_maps_own_counts(seed):
    """:class:`PairCounts` (the candidates' Gram product without each column's last bin) gives
    the map's own exact counts on hostile rows, for random bounds, bins, categorical codes, cut
    points, one-bin columns and domain boxes inside, equal to or wider than the map's."""
    from opendp_sketch.features.marginals import MarginalTables
    from opendp_sketch.selection import PairCounts

    rng = np.random.default_rng(1000 + seed)
    d = int(rng.integers(3, 9))
    unit = seed % 3 == 0
    lower = np.zeros(d) if unit else np.round(rng.uniform(-5, 5, d), 1)
    upper = np.ones(d) if unit else lower + np.round(rng.uniform(0.5, 10, d), 1)
    categorical = [j for j in range(d) if rng.random() < 0.35]
    for j in categorical:
        lower[j], upper[j] = float(rng.integers(-2, 3)), 0.0
        upper[j] = lower[j] + float(rng.integers(1, 5))  # 2 to 5 codes
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d) if rng.random() < 0.6] or [(0, 1)]
    pairs = [(j, i) if rng.random() < 0.5 else (i, j) for i, j in pairs]  # either axis order
    bins = []
    for p in pairs:
        spec = []
        for j in p:
            if j in categorical:
                spec.append(int(upper[j] - lower[j] + 1))
            elif rng.random() < 0.2:
                spec.append(sorted({float(np.round(v, 2)) for v in rng.uniform(lower[j], upper[j], 2)}))
            else:
                spec.append(int(rng.integers(1, 6)))
        bins.append(spec)
    fm = MarginalTables((lower, upper), subsets=pairs, bins=bins, categorical=categorical)
    X = _hostile(int(rng.integers(1, 4000)), d, seed, float(lower.min()), float(upper.max()))
    pc = PairCounts(fm)
    for box in ((lower, upper), (lower - 1.0, upper + 1.0), (lower + 0.0, np.maximum(lower, upper - 0.2))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            raw = pc._accumulate(X, box, 1 << 14, None).clipped(2**63 - 1)
            got = pc.cells(raw, X.shape[0])
            want = fm._accumulate(X, box, 1 << 14, 1).clipped(2**63 - 1)
        assert got.dtype == np.int64 and np.array_equal(got, want), box


def test_pair_counts_of_an_empty_batch_and_a_single_row():
    from opendp_sketch.features.marginals import MarginalTables
    from opendp_sketch.selection import PairCounts

    fm = MarginalTables(([0.0] * 3, [1.0] * 3), subsets=[(0, 1), (2, 0)], bins=[[2, 3], [4, 2]])
    pc = PairCounts(fm)
    box = (fm.lower, fm.upper)
    assert pc.cells(pc._accumulate(np.zeros((0, 3)), box, 8, None).clipped(2**63 - 1), 0).tolist() == [0] * 14
    one = np.array([[0.9, np.nan, 0.3]])
    got = pc.cells(pc._accumulate(one, box, 8, None).clipped(2**63 - 1), 1)
    assert got.tolist() == fm._accumulate(one, box, 8, 1).total()
