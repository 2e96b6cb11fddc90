"""Unit tests of MarginalTables (opendp_sketch/features/marginals.py)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.features.marginals import MAX_CELLS, MAX_SUBSETS
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

B2 = ([0.0, 0.0], [1.0, 1.0])


def _mixed() -> dps.MarginalTables:
    """Column 0 numeric on [0, 1], column 1 numeric on [-5, 5], column 2 categorical with codes 0..3."""
    return dps.MarginalTables(
        bounds=([0, -5, 0], [1, 5, 3]),
        subsets=[0, 1, 2, (0, 2), (2, 1, 0)],
        bins=[[4], [5], [4], [2, 4], [4, 5, 2]],
        categorical=[2],
    )


# -- values and layout --------------------------------------------------------------------------
def test_hand_checked_cells():
    fm = _mixed()
    assert [(b.subset, b.shape, b.offset) for b in fm.blocks] == [
        ((0,), (4,), 0),
        ((1,), (5,), 4),
        ((2,), (4,), 9),
        ((0, 2), (2, 4), 13),
        ((2, 1, 0), (4, 5, 2), 21),
    ]
    assert fm.num_features == 61 and fm.dim == 3 and fm.sensitivity(1) == 5.0
    X = np.array(
        [
            [0.3, -5.0, 2.0],  # bins 1 | 0 | code 2; (0,2): 0·4+2; (2,1,0): (2·5+0)·2+0
            [1.0, 5.0, 3.0],  # upper edges belong to the last bin
            [0.5, 1.0, 0.0],  # interior edges open the next bin: 0.5 → bin 2 of 4, bin 1 of 2
            [np.nan, np.nan, np.nan],  # NaN → lowest cell everywhere
            [np.inf, -np.inf, np.inf],  # ±inf clipped to the end bins
            [-1e308, 1e308, -1e308],
            [0.2, 0.0, 1.49],  # a non-integer code rounds to the nearest code (1)
        ]
    )
    expected = [
        [1, 4 + 0, 9 + 2, 13 + 2, 21 + 20],
        [3, 4 + 4, 9 + 3, 13 + 7, 21 + 39],
        [2, 4 + 3, 9 + 0, 13 + 4, 21 + 7],
        [0, 4, 9, 13, 21],
        [3, 4, 9 + 3, 13 + 7, 21 + 31],
        [0, 4 + 4, 9, 13, 21 + 8],
        [0, 4 + 2, 9 + 1, 13 + 1, 21 + 14],
    ]
    assert fm.cells(X).tolist() == expected
    T = fm.transform(X)
    assert T.sum(axis=1).tolist() == [5.0] * len(X)
    assert [np.flatnonzero(r).tolist() for r in T] == [sorted(e) for e in expected]
    assert fm.fixed_features(X).tolist() == T.astype(np.int64).tolist()


@pytest.mark.parametrize("k", [2, 3, 7, 10, 50, 1000])
def test_integer_codes_land_in_their_own_bin(k):
    codes = np.arange(k, dtype=np.float64)
    cat = dps.MarginalTables(bounds=(0, k - 1), subsets=[0], categorical=[0], dim=1)
    assert cat.blocks[0].shape == (k,)
    assert cat.cells(codes[:, None])[:, 0].tolist() == list(range(k))
    # also without the flag: K equal bins of [0, K - 1] hold one code each (c·K/(K-1) stays in [c, c+1))
    num = dps.MarginalTables(bounds=(0, k - 1), subsets=[0], bins=k, dim=1)
    assert num.cells(codes[:, None])[:, 0].tolist() == list(range(k))
    # codes offset from 0 (bounds [lo, hi]) and the half-integer edges
    shifted = dps.MarginalTables(bounds=(-3, k - 4), subsets=[0], categorical=[0], dim=1)
    assert shifted.cells(codes[:, None] - 3)[:, 0].tolist() == list(range(k))
    np.testing.assert_array_equal(shifted.edges(0, k), np.arange(k + 1) - 3.5)


def test_numeric_bin_midpoints_and_edges():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lo = rng.uniform(-100, 100)
        hi = lo + rng.uniform(1e-3, 50)
        b = int(rng.integers(1, 40))
        fm = dps.MarginalTables(bounds=(lo, hi), subsets=[0], bins=b, dim=1)
        edges = fm.edges(0, b)
        assert edges[0] == lo and edges[-1] == hi and edges.size == b + 1
        mids = (edges[:-1] + edges[1:]) / 2
        assert fm.bin_index(mids, 0, b).tolist() == list(range(b))


def test_marginal_reshapes_and_transposes():
    fm = _mixed()
    v = np.arange(fm.num_features)
    t = fm.marginal(v, (0, 2))
    assert t.shape == (2, 4) and t.tolist() == (13 + np.arange(8)).reshape(2, 4).tolist()
    np.testing.assert_array_equal(fm.marginal(v, (2, 0)), t.T)
    three = fm.marginal(v, (0, 1, 2))  # stored as (2, 1, 0): axes reversed
    np.testing.assert_array_equal(three, (21 + np.arange(40)).reshape(4, 5, 2).transpose(2, 1, 0))
    assert fm.marginal(v, 1).tolist() == [4, 5, 6, 7, 8]
    batch = fm.marginal(np.stack([v, 2 * v]), (0, 2))  # leading axes are kept
    assert batch.shape == (2, 2, 4) and batch[1].tolist() == (2 * t).tolist()
    with pytest.raises(ValueError, match=r"subset \(\(0, 1\)\) is not one of the marginals"):
        fm.marginal(v, (0, 1))
    with pytest.raises(ValueError, match="values must have 61 entries"):
        fm.marginal(v[:-1], 0)


def test_marginal_tables_of_a_sum_are_the_true_counts():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.uniform(0, 1, 500), rng.uniform(-6, 6, 500), rng.integers(0, 4, 500)])
    fm = _mixed()
    S = np.array(fm.fixed_sum(X, clip=([0, -5, 0], [1, 5, 3])))
    Xc = np.clip(X, [0, -5, 0], [1, 5, 3])
    e0, e2 = fm.edges(0, 2), fm.edges(2, 4)
    expected = np.histogram2d(Xc[:, 0], Xc[:, 2], bins=[e0, e2])[0]
    np.testing.assert_array_equal(fm.marginal(S, (0, 2)), expected)
    for blk in fm.blocks:  # every table counts every row once
        assert fm.marginal(S, blk.subset).sum() == 500


def test_exact_sum_is_invariant_to_chunks_and_threads():
    rng = np.random.default_rng(2)
    X = rng.uniform([-0.5, -8, -1], [1.5, 8, 4], (300, 3))
    X[::17] = np.nan
    X[5::23, 1] = np.inf
    fm = _mixed()
    total = check_sum_invariance(fm, X, clip=([0, -5, 0], [1, 5, 3]), chunk_rows=(1, 7, 4096), n_jobs=(1, 2))
    assert (
        total
        == np.bincount(
            fm.cells(np.clip(np.nan_to_num(X, nan=-9), [0, -5, 0], [1, 5, 3])).ravel(), minlength=61
        ).tolist()
    )


# -- automatic choice -----------------------------------------------------------------------------
def test_auto_all_pairs_within_the_budget():
    fm = dps.MarginalTables.auto((0.0, 1.0), dim=4, fine_bins=32, coarse_bins=8, max_cells=1000)
    assert [b.subset for b in fm.blocks] == [
        (0,),
        (1,),
        (2,),
        (3,),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (2, 3),
    ]
    assert [b.shape for b in fm.blocks][3:5] == [(32,), (8, 8)] and fm.num_features == 4 * 32 + 6 * 64


def test_auto_halves_coarse_bins_then_drops_the_largest_pairs():
    # 4·32 + 6·64 = 512 > 400: coarse bins halve to 4 (128 + 96 = 224 cells)
    fm = dps.MarginalTables.auto((0.0, 1.0), dim=4, fine_bins=32, coarse_bins=8, max_cells=400)
    assert {b.shape for b in fm.blocks[4:]} == {(4, 4)} and len(fm.blocks) == 10
    # with a categorical column of 30 codes, c reaches 2 and pairs are added cheapest first
    fm = dps.MarginalTables.auto(
        ([0, 0, 0], [1, 1, 29]), categorical=[2], fine_bins=8, coarse_bins=8, max_cells=60
    )
    assert [(b.subset, b.shape) for b in fm.blocks] == [
        ((0,), (8,)),
        ((1,), (8,)),
        ((2,), (30,)),
        ((0, 1), (2, 2)),
    ]
    # budget exactly filled: the next pair (0, 2) would need 60 more cells
    fm = dps.MarginalTables.auto(
        ([0, 0, 0], [1, 1, 29]), categorical=[2], fine_bins=8, coarse_bins=2, max_cells=110
    )
    assert [b.subset for b in fm.blocks[3:]] == [(0, 1), (0, 2)] and fm.num_features == 110


def test_auto_refuses_a_budget_below_the_one_way_marginals():
    with pytest.raises(ValueError, match=r"max_cells \(50\) is below the 64 cells of the 1-way marginals"):
        dps.MarginalTables.auto((0.0, 1.0), dim=2, fine_bins=32, max_cells=50)
    with pytest.raises(ValueError, match=r"fine_bins \(0\) must be a positive integer"):
        dps.MarginalTables.auto((0.0, 1.0), dim=2, fine_bins=0)


# -- serialization --------------------------------------------------------------------------------
def test_roundtrip_and_fingerprint():
    fm = _mixed()
    X = np.random.default_rng(3).uniform([-1, -6, -1], [2, 6, 4], (20, 3))
    copy = check_roundtrip(fm, X)
    assert copy.blocks == fm.blocks and copy.categories == {2: 4}
    # bins given per column or per subset describe the same map, with the same fingerprint
    a = dps.MarginalTables(B2, [0, (0, 1)], bins=[6, 3])
    b = dps.MarginalTables(B2, [(0,), [0, 1]], bins=[[6], [6, 3]])
    assert a == b and a.fingerprint() == b.fingerprint() and a.to_dict() == b.to_dict()
    # every parameter changes it: bins, subsets, their order, bounds, categorical flags
    others = [
        dps.MarginalTables(B2, [0, (0, 1)], bins=[6, 4]),
        dps.MarginalTables(B2, [0, (1, 0)], bins=[6, 3]),
        dps.MarginalTables(B2, [(0, 1), 0], bins=[6, 3]),
        dps.MarginalTables(([0, 0], [1, 2]), [0, (0, 1)], bins=[6, 3]),
        dps.MarginalTables(([0, 0], [5, 2]), [0, (0, 1)], bins=[6, 3], categorical=[1]),
        dps.MarginalTables(([0, 0], [5, 2]), [0, (0, 1)], bins=[6, 3]),
    ]
    prints = {m.fingerprint() for m in [a, *others]}
    assert len(prints) == 7
    spec = json.loads(json.dumps(a.to_dict()))
    spec["params"]["bins"][1] = [6, 4]
    with pytest.raises(ValueError, match="does not match the stored fingerprint"):
        dps.features.feature_map_from_dict(spec)


def test_sketch_save_and_load(tmp_path):
    fm = _mixed()
    sk = dps.Sketch(
        feature_map=fm, sum_units=np.arange(fm.num_features), count=10, bounds=([0, -5, 0], [1, 5, 3])
    )
    sk.save(tmp_path / "m.npz")
    back = dps.Sketch.load(tmp_path / "m.npz")
    assert back.feature_map == fm and back.feature_map.blocks == fm.blocks


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"subsets": []}, r"subsets \(\[\]\) must be a non-empty sequence"),
        ({"subsets": "01"}, r"subsets \('01'\) must be a non-empty sequence"),
        ({"subsets": [(0, 1, 2, 0)]}, r"must hold 1 to 3 distinct columns"),
        ({"subsets": [(0, 0)]}, r"subset \(\(0, 0\)\) must hold 1 to 3 distinct columns"),
        ({"subsets": [()]}, r"must hold 1 to 3 distinct columns"),
        ({"subsets": [(0, 3)]}, r"subset \(\(0, 3\)\) must hold column indices in \[0, 2\]"),
        ({"subsets": [-1]}, r"must hold column indices in \[0, 2\]"),
        ({"subsets": [(0, 1), (1, 0)]}, r"subset \(\(1, 0\)\) appears twice"),
        ({"subsets": [(0, 1.0)]}, r"must be a column index or a tuple of column indices"),
        ({"subsets": [True]}, r"must be a column index or a tuple"),
        ({"bins": 0}, r"bins \(0\) of column 0 must be a positive integer"),
        ({"bins": 2.5}, r"bins \(2.5\) must be an int, one int per column"),
        ({"bins": True}, r"must be an int, one int per column"),
        ({"bins": [4, 4]}, r"as a flat list must have one int per column \(3\)"),
        ({"bins": [[4], [4, 4]]}, r"per-subset bins need one per subset \(3\)"),
        ({"bins": [[4], [4, 4], [4]]}, r"bins \(\[4, 4\]\) of subset \(1,\) must be an int or 1 entries"),
        ({"bins": [4, 4, 5]}, r"bins \(5\) of categorical column 2 must equal its number of codes \(4\)"),
        ({"bins": [4, 4, MAX_CELLS + 1]}, r"must be a positive integer at most"),
        ({"categorical": [3]}, r"categorical column \(3\) must be a distinct column index"),
        ({"categorical": [2, 2]}, r"categorical column \(2\) must be a distinct column index"),
        ({"categorical": [0]}, r"categorical column 0 has bounds \(0.0, 1.5\); they must be integer codes"),
        ({"categorical": 2}, r"categorical \(2\) must be a sequence of column indices"),
        ({"bounds": ([0, 0, 0], [1, 1])}, r"lower and upper must have the same length"),
        ({"bounds": ([0, 0, 0], [1, np.nan, 3])}, r"must be finite"),
    ],
)
def test_bad_parameters_are_refused(kwargs, match):
    base = {"bounds": ([0, 0, 0], [1.5, 1, 3]), "subsets": [0, 1, 2], "bins": 4, "categorical": [2]}
    with pytest.raises(ValueError, match=match):
        dps.MarginalTables(**{**base, **kwargs})


def test_size_limits():
    with pytest.raises(ValueError, match=f"more than {MAX_CELLS} cells in all"):
        dps.MarginalTables(bounds=(0, 1), subsets=[(0, 1, 2)], bins=300, dim=3)  # 2.7e7 cells
    with pytest.raises(ValueError, match=f"it must have at most {MAX_SUBSETS}"):
        dps.MarginalTables(bounds=(0, 1), subsets=list(range(MAX_SUBSETS + 1)), bins=1, dim=MAX_SUBSETS + 1)
    with pytest.raises(ValueError, match=r"categorical column 0 has 16777217 codes"):
        dps.MarginalTables(bounds=(0, MAX_CELLS), subsets=[0], categorical=[0], dim=1)
    # a crafted spec is refused before any table is allocated
    spec = dps.MarginalTables(bounds=(0, 1), subsets=[(0, 1, 2)], bins=2, dim=3).to_dict()
    spec["params"]["bins"] = [[1 << 20, 1 << 20, 1 << 20]]
    with pytest.raises(ValueError, match="cells in all"):
        dps.features.feature_map_from_dict(spec)


def test_helpers_validate_their_arguments():
    fm = _mixed()
    with pytest.raises(ValueError, match=r"column \(3\) must be an index in \[0, 2\]"):
        fm.edges(3, 4)
    with pytest.raises(ValueError, match=r"bins \(5\) of categorical column 2 must equal"):
        fm.bin_index([1.0], 2, 5)
    with pytest.raises(ValueError, match=r"X must have shape \(n, 3\)"):
        fm.cells(np.zeros((2, 2)))


# -- releases and estimators ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def skewed():
    """A skewed, dependent 2-column table and its true 8 × 8 table."""
    rng = np.random.default_rng(0)
    n = 5000
    x0 = rng.beta(1.5, 8, n)
    x1 = np.clip(0.7 * x0 + 0.3 * rng.beta(8, 2, n) * (x0 > 0.15) + 0.05 * rng.standard_normal(n), 0, 1)
    X = np.column_stack([x0, x1])
    e = np.linspace(0, 1, 9)
    return X, np.histogram2d(x0, x1, bins=[e, e])[0]


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"epsilon": 1.0, "delta": 1e-6}, {"rho": 0.5}])
def test_release_sketch_end_to_end(skewed, budget):
    dp.enable_features("contrib", "honest-but-curious")
    X, true = skewed
    fm = dps.MarginalTables(B2, [0, 1, (0, 1)], bins=[[32], [32], [8, 8]])
    sk = dps.release_sketch(X, fm, bounds=B2, **budget)
    assert sk.feature_map == fm and sk.sum_units.shape == (fm.num_features,)
    assert sk.noise["mechanism"] == (
        "laplace" if "delta" not in budget and "rho" not in budget else "gaussian"
    )
    table = fm.marginal(sk.sum, (0, 1))
    assert table.shape == (8, 8)
    # noise per cell: Laplace scale ≈ 3, Gaussian σ ≤ 9 (ε = 1, δ = 1e-6); failing needs a > 30-scale draw
    assert np.abs(table - true).max() < 300


@pytest.mark.parametrize("method", ["ridge", "synthetic"])
def test_m2m_answers_two_way_counts_from_a_marginals_sketch(skewed, method):
    dp.enable_features("contrib", "honest-but-curious")
    X, true = skewed
    n = X.shape[0]
    e = np.linspace(0, 1, 9)
    e[-1] = 1.01  # the upper edge belongs to the last cell

    def cells(S: np.ndarray) -> np.ndarray:
        i, j = np.digitize(S[:, 0], e) - 1, np.digitize(S[:, 1], e) - 1
        return (i * 8 + j)[:, None] == np.arange(64)[None, :]

    hist = dps.release_sketch(X, dps.Histogram(B2, bins=32), bounds=B2, epsilon=1.0)
    marg = dps.release_sketch(
        X, dps.MarginalTables(B2, [0, 1, (0, 1)], bins=[[32], [32], [8, 8]]), bounds=B2, epsilon=1.0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ridge warns about few samples per feature
        err_h = np.abs(dps.M2M(hist, n_samples=5000, method=method).count(cells) - true.ravel()).mean() / n
        err_m = np.abs(dps.M2M(marg, n_samples=5000, method=method).count(cells) - true.ravel()).mean() / n
    # measured: Histogram 0.014 (synthetic) to 0.027 (ridge), MarginalTables 3e-4 to 7e-4: the 2-way table carries
    # the dependence that 1-way histograms cannot
    assert err_m < 0.004 and err_m < err_h / 3


def test_auto_gives_small_integer_columns_one_bin_per_value_in_every_marginal():
    fm = dps.MarginalTables.auto(([0, 0, 0], [1, 1, 2]), categorical=[2], levels={1: 11}, fine_bins=32)
    assert [(b.subset, b.shape) for b in fm.blocks] == [
        ((0,), (32,)),
        ((1,), (11,)),
        ((2,), (3,)),
        ((0, 1), (8, 11)),
        ((0, 2), (8, 3)),
        ((1, 2), (11, 3)),
    ]
    # the encoded integers k/10 of a column with 11 values land in bins 0, 1, ..., 10
    u = np.column_stack([np.zeros(11), np.arange(11) / 10, np.zeros(11)])
    np.testing.assert_array_equal(fm._flat(u)[:, 1] - fm.blocks[1].offset, np.arange(11))
    # pair_levels: a column with more values gets the pairs' equal bins there (each a run of
    # neighbouring values, every value in exactly one), and keeps one bin per value in its 1-way marginal
    wide = dps.MarginalTables.auto(
        ([0, 0, 0], [1, 1, 2]), categorical=[2], levels={1: 11}, fine_bins=32, pair_levels=10
    )
    assert [(b.subset, b.shape) for b in wide.blocks][1:] == [
        ((1,), (11,)),
        ((2,), (3,)),
        ((0, 1), (8, 8)),
        ((0, 2), (8, 3)),
        ((1, 2), (8, 3)),
    ]
    pair = wide._flat(u)[:, 5] - wide.blocks[5].offset
    np.testing.assert_array_equal(pair // 3, np.minimum((np.arange(11) / 10 * 8).astype(int), 7))
    assert set(pair // 3) == set(range(8)) and wide.sensitivity(1) == fm.sensitivity(1) == 6.0
    assert (
        dps.MarginalTables.auto(([0, 0, 0], [1, 1, 2]), categorical=[2], levels={1: 11}, pair_levels=11) == fm
    )
    with pytest.raises(ValueError, match=r"pair_levels \(0\) must be a positive integer"):
        dps.MarginalTables.auto((0.0, 1.0), dim=2, levels={1: 5}, pair_levels=0)
    with pytest.raises(ValueError, match=r"levels column \(2\) must be the index of a numeric column"):
        dps.MarginalTables.auto(([0, 0, 0], [1, 1, 2]), categorical=[2], levels={2: 3})
    with pytest.raises(ValueError, match=r"levels\[1\] \(0\) must be a positive integer"):
        dps.MarginalTables.auto((0.0, 1.0), dim=2, levels={1: 0})


def test_explicit_cut_points_bin_like_searchsorted_and_keep_the_sensitivity():
    """Cut points ``c`` give bins ``[lo, c₁), …, [c_k, hi]``: the bin of ``x`` is the number of cut
    points at or below it, after clipping into the bounds (NaN to the lowest bin); still one
    cell per marginal, so Δ₁ = number of marginals. The spec survives a JSON round trip."""
    cuts = [0.5, 2.0, 7.5]
    fm = dps.MarginalTables(bounds=(0, 10), subsets=[0, (0, 1)], bins=[[16], [cuts, 4]], dim=2)
    x = np.array([-3.0, 0.0, 0.5, 1.9, 2.0, 7.49, 7.5, 10.0, 12.0, np.nan, np.inf, -np.inf])
    X = np.column_stack([x, np.full(x.size, 3.0)])
    got = (fm.cells(X)[:, 1] - fm.blocks[1].offset) // 4
    want = np.searchsorted(cuts, np.nan_to_num(np.clip(x, 0, 10), nan=0.0), side="right")
    assert got.tolist() == want.tolist()
    assert fm.sensitivity(1) == 2.0 and fm.blocks[1].shape == (4, 4)
    assert (fm.transform(X).sum(axis=1) == 2).all()
    back = dps.FeatureMap.from_dict(json.loads(json.dumps(fm.to_dict())))
    assert back == fm and back.blocks[1].cuts == (tuple(cuts), None)
    for bad in ([0.0, 1.0], [1.0, 1.0], [3.0, 2.0], [1.0, 10.0], [np.nan]):
        with pytest.raises(ValueError, match="cut points"):
            dps.MarginalTables(bounds=(0, 10), subsets=[(0, 1)], bins=[[bad, 4]], dim=2)
    with pytest.raises(ValueError, match="categorical"):
        dps.MarginalTables(bounds=([0, 0], [10, 3]), subsets=[(0, 1)], bins=[[4, [1.0]]], categorical=[1])


def test_bound_cells_measure_rows_at_the_bounds_apart():
    """A count column with many zeros and values clipped at its upper bound: with cells at the
    bounds the decoder puts those rows on the bounds, and the mean is right. Without them,
    points spread uniformly over their bins are off by most of a bin's half-width; the
    decoder's default placement (a profile piling toward the bound in an end cell that rises
    beyond its neighbours' trend) recovers part of it."""
    from opendp_sketch.estimators.synthetic import SyntheticDecoder

    rng = np.random.default_rng(4)
    x = np.where(rng.random(20_000) < 0.5, 0.0, np.minimum(rng.exponential(30.0, 20_000), 100.0))
    X = x[:, None]
    errs = []
    for cells in (None, 1e-6):
        fm = dps.MarginalTables.auto((0, 100), dim=1, fine_bins=16, bound_cells=cells)
        sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), X.shape[0], bounds=([0.0], [100.0]))
        errs.append(abs(float(dps.M2M(sk, n_samples=5000).mean()[0]) - x.mean()))
        if cells is None:
            dec = SyntheticDecoder(n_points=5000, within_cells="uniform").fit(sk)
            uniform = abs(float(dec.weights_ @ dec.samples_[:, 0]) - x.mean())
    assert errs[1] < 0.2 < 1.0 < uniform and errs[0] < 0.8 * uniform, (errs, uniform)
    with pytest.raises(ValueError, match="bound_cells"):
        dps.MarginalTables.auto((0, 1), dim=1, fine_bins=16, bound_cells=0.1)


def test_a_subset_at_two_resolutions_is_a_two_level_tree():
    """``MarginalTables.auto(coarse_one_way=K)`` adds a K-bin 1-way block for each numeric column with
    equal bins (categories and ``levels`` columns keep one), every coarse edge a fine edge; a row
    takes one cell in each block, so Δ₁ is the number of blocks on neighbours too; the same subset
    at the same bins is still refused, and bad K or positions are named."""
    fm = dps.MarginalTables.auto(
        ([0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 3.0, 9.0]),
        categorical=[2],
        levels={3: 10},
        fine_bins=64,
        coarse_bins=16,
        coarse_one_way=16,
    )
    ones = [(b.subset, b.shape) for b in fm.blocks if len(b.subset) == 1]
    assert ones == [((0,), (64,)), ((1,), (64,)), ((2,), (4,)), ((3,), (10,)), ((0,), (16,)), ((1,), (16,))]
    for j in (0, 1):
        fine, coarse = (fm.block_edges(i)[0] for i, b in enumerate(fm.blocks) if b.subset == (j,))
        assert np.isin(coarse, fine).all()
    assert fm.block_index(0) == 0  # the first (finest) block of a subset
    rng = np.random.default_rng(0)
    X = np.column_stack(
        [rng.uniform(size=50), rng.uniform(size=50), rng.integers(0, 4, 50), rng.integers(0, 10, 50)]
    )
    for row in ([0.0, 1.0, 0, 0], [np.nan, -np.inf, 3, 9], [1e308, 0.5, 1, 4]):
        d1 = np.abs(np.asarray(fm.fixed_sum(np.vstack([X, row])), float) - np.asarray(fm.fixed_sum(X), float))
        assert d1.sum() * fm.unit <= fm.sensitivity(1) == len(fm.blocks)
    check_roundtrip(fm, X)
    with pytest.raises(ValueError, match="appears twice with the same bins"):
        dps.MarginalTables(bounds=(0, 1), subsets=[0, 0], bins=[[4], [4]], dim=1)
    assert len(dps.MarginalTables(bounds=(0, 1), subsets=[0, 0], bins=[[8], [4]], dim=1).blocks) == 2
    for bad in (3, 64, 0, True):
        with pytest.raises(ValueError, match="coarse_one_way"):
            dps.MarginalTables.auto((0, 1), dim=1, fine_bins=64, coarse_one_way=bad)
    with pytest.raises(ValueError, match=rf"position \(99\) must be an index in \[0, {len(fm.blocks)}\]"):
        fm.insert(99, [0], [[4]])


# -- the Gram product of many 2-way tables ---------------------------------------------------------


def _hostile_rows(rng, n, d, codes):
    X = rng.random((n, d)) * 1.2 - 0.1  # some values outside the box
    X[:, codes] = rng.integers(-1, 7, (n, len(codes)))  # codes outside their range too
    X[::97, 0] = np.nan
    X[::89, 1] = np.inf
    X[::83, 2] = -np.inf
    X[::71, 4] = 1e308
    return X


@pytest.mark.parametrize("chunk_rows, n_jobs", [(4096, 1), (333, 2), (1 << 20, 3)])
def test_many_pairs_sum_by_gram_product_exactly_as_the_indices_count(chunk_rows, n_jobs):
    """Every pair of 60 columns (1 770 tables): the Gram product of the bin indicators gives
    exactly the counts of the one-hot indices, whatever the chunks and threads, for rows holding
    NaN, ±inf, huge and out-of-range values and codes."""
    rng = np.random.default_rng(3)
    d, codes = 60, [3, 7, 11]
    hi = np.ones(d)
    hi[codes] = 4
    fm = dps.MarginalTables.auto((np.zeros(d), hi), categorical=codes, fine_bins=8, coarse_bins=4)
    assert fm._gram is not None  # the product path is the one under test
    X = _hostile_rows(rng, 3000, d, codes)
    want = np.bincount(fm._flat(X).ravel(), minlength=fm.num_features)
    got = np.asarray(fm.fixed_sum(X, chunk_rows=chunk_rows, n_jobs=n_jobs))
    assert np.array_equal(got, want)
    assert got.sum() == len(fm.blocks) * 3000  # one cell per table and row: the sensitivity's premise


def test_gram_product_with_cut_points_and_two_resolutions(monkeypatch):
    import opendp_sketch.features.marginals as marginals

    monkeypatch.setattr(marginals, "GRAM_MIN_PAIRS", 1)
    monkeypatch.setattr(marginals, "GRAM_PAIRS_PER_INDICATOR", 0.0)
    subsets = [0, 1, (0, 1), (0, 1), (1, 2), (2, 0)]
    bins = [[10], [5], [[1.0, 2.0], 3], [4, 5], [[2.5], [5.0, 7.5]], [2, [3.0]]]
    fm = dps.MarginalTables((0, 10), subsets=subsets, bins=bins, dim=3)
    assert fm._gram is not None
    X = np.random.default_rng(4).random((3000, 3)) * 12 - 1
    X[::13, 1] = np.nan
    want = np.bincount(fm._flat(X).ravel(), minlength=fm.num_features)
    assert np.array_equal(np.asarray(fm.fixed_sum(X)), want)


def test_few_pairs_or_three_way_tables_keep_the_index_count():
    assert (
        dps.MarginalTables.auto(([0.0] * 5, [1.0] * 5), fine_bins=8, coarse_bins=4)._gram is None
    )  # 10 pairs
    # every pair of 40 columns: 780 tables on 960 indicators count faster by their indices
    assert dps.MarginalTables.auto(([0.0] * 40, [1.0] * 40), fine_bins=16, coarse_bins=8)._gram is None
    fm = dps.MarginalTables(
        (0, 1), subsets=[(0, 1, 2)] + [(i, j) for i in range(9) for j in range(i + 1, 9)], dim=9
    )
    assert fm._gram is None  # a 3-way table


def test_take_lays_out_the_same_map_as_building_it_from_its_blocks():
    """``take`` reuses the checked blocks instead of re-parsing them: the result is the map the
    constructor builds from the same subsets, bins and cuts (same fingerprint, cells and sums)."""
    from opendp_sketch.features.marginals import _bins_spec

    fm = dps.MarginalTables.auto(
        ([0.0] * 5, [1.0] * 5), categorical=[4], fine_bins=8, coarse_bins=4, coarse_one_way=2
    )
    X = np.random.default_rng(0).uniform(0, 1, size=(300, 5))
    X[:, 4] = np.floor(X[:, 4] * 2)
    rng = np.random.default_rng(1)
    for _ in range(20):
        idx = rng.choice(len(fm.blocks), size=rng.integers(1, len(fm.blocks) + 1), replace=False).tolist()
        fast = fm.take(idx)
        slow = dps.MarginalTables(
            (fm.lower, fm.upper),
            [fm.blocks[i].subset for i in idx],
            [_bins_spec(fm.blocks[i]) for i in idx],
            categorical=sorted(fm.categories),
            dim=fm.dim,
        )
        assert fast == slow and fast.blocks == slow.blocks and fast.num_features == slow.num_features
        np.testing.assert_array_equal(fast.fixed_sum(X), slow.fixed_sum(X))
    with pytest.raises(ValueError, match="distinct positions"):
        fm.take([0, 0])
