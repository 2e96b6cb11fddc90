"""Intervals from the released cells: calibrated where a block holds the query, a true bound where
none does, refusals for maps without cells."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

import opendp_sketch as dps
from opendp_sketch.estimators import m2m
from opendp_sketch.estimators.intervals import CellIndex, cell_intervals

BOX2 = ([0.0, 0.0], [1.0, 1.0])


def sketch_of(fm, X, *, sd=0.0, rng=None, box=BOX2, names=("a", "b")):
    units = np.asarray(fm.fixed_sum(X), dtype=np.int64)
    if sd > 0:
        units = units + np.rint(rng.normal(0.0, sd, units.size)).astype(np.int64)
    return dps.Sketch(
        feature_map=fm,
        sum_units=units,
        count=X.shape[0],
        noise={"sum_variance": sd**2, "count_variance": sd**2},
        bounds=box,
        column_names=list(names),
    )


@pytest.fixture(scope="module")
def dependent() -> np.ndarray:
    """Two columns equal up to a little jitter: independence is badly wrong for them."""
    rng = np.random.default_rng(3)
    a = rng.beta(2, 5, 4000)
    return np.column_stack([a, np.clip(a + rng.normal(0, 0.02, a.size), 0, 1)])


def test_supported_counts_are_calibrated_noise_bands():
    """A count of whole cells of one block: the interval is the released cells' sum ± z·σ√cells.
    Over 4 000 independent noise draws its coverage is 95 % (binomial test, fails at p < 1e-4)."""
    rng = np.random.default_rng(0)
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
    X = rng.beta(2, 3, (3000, 1))
    truth = float((X[:, 0] < 0.5).sum())
    points = np.linspace(0.01, 0.99, 400)[:, None]
    index = CellIndex(fm, points, np.full(400, 3000 / 400))
    F = (points < 0.5).astype(np.float64)
    hits, reps = 0, 4000
    for _ in range(reps):
        sk = sketch_of(fm, X, sd=15.0, rng=rng, box=([0.0], [1.0]), names=("x",))
        low, high, sup = cell_intervals(sk, index, F, level=0.95)
        assert sup[0]
        hits += int(low[0] <= truth <= high[0])
        assert high[0] - low[0] == pytest.approx(2 * 1.959964 * 15.0 * 2.0, rel=1e-4)  # 4 cells
    p = stats.binomtest(hits, reps, 0.95).pvalue
    assert p > 1e-4, (hits / reps, p)


def test_laplace_noise_on_few_cells_is_covered_at_the_level():
    """OpenDP's discrete Laplace on one cell has heavier tails than a normal law: ``z = 1.96``
    standard deviations covered it 93.7 % of the time. With the Cornish–Fisher term of its
    kurtosis the 95 % band of a one-cell count covers at least 95 % (one-sided binomial test over
    12 000 draws, fails at p < 1e-4; the normal band fails it at p ≈ 6e-8) and at most 97 %; a
    sum of many cells keeps the normal ``z``."""
    from opendp_sketch.sketch import discrete_laplace_variance

    rng = np.random.default_rng(1)
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
    X = rng.beta(2, 3, (3000, 1))
    exact = np.asarray(fm.fixed_sum(X), dtype=np.int64)
    scale = 15.0  # integer units
    noise = {
        "mechanism": "laplace",
        "sum_scale": scale * fm.unit,
        "sum_variance": discrete_laplace_variance(scale) * fm.unit**2,
        "count_variance": 0.0,
    }
    points = np.linspace(0.01, 0.99, 400)[:, None]
    index = CellIndex(fm, points, np.full(400, 3000 / 400))
    F = np.column_stack([points[:, 0] < 0.125, np.ones(400)]).astype(np.float64)  # 1 cell, all 8
    truth = np.array([float((X[:, 0] < 0.125).sum()), 3000.0])
    q = np.exp(-1.0 / scale)
    hits, reps = np.zeros(2, dtype=int), 12_000
    for _ in range(reps):
        xi = rng.geometric(1 - q, exact.size) - rng.geometric(1 - q, exact.size)
        sk = dps.Sketch(
            feature_map=fm,
            sum_units=exact + xi,
            count=3000,
            noise=noise,
            bounds=([0.0], [1.0]),
            column_names=["x"],
        )
        low, high, sup = cell_intervals(sk, index, F, level=0.95)
        assert sup.all()
        hits += (low <= truth) & (truth <= high)
    assert stats.binomtest(int(hits[0]), reps, 0.95, alternative="less").pvalue > 1e-4, hits / reps
    assert stats.binomtest(int(hits[0]), reps, 0.97, alternative="greater").pvalue > 1e-4, hits / reps
    sd = np.sqrt(noise["sum_variance"])
    assert high[1] - low[1] == pytest.approx(2 * sd * np.sqrt(8) * (1.959964 + 0.0687 * 3.0 / 8), rel=1e-2)


def test_unsupported_counts_are_bounds_the_cells_allow(dependent):
    """With 1-way marginals only, a joint count of two dependent columns is far from what
    independence gives; noise-free, its interval must still hold the truth, and it is flagged."""
    fm = dps.MarginalTables(BOX2, [0, 1], bins=10)
    est = dps.M2M(sketch_of(fm, dependent), n_samples=5000)
    rng = np.random.default_rng(1)
    for _ in range(30):
        a, b = np.sort(rng.uniform(0, 1, 2)), np.sort(rng.uniform(0, 1, 2))
        pred = pl.col("a").is_between(*a) & pl.col("b").is_between(*b)
        truth = float(
            (
                (dependent[:, 0] >= a[0])
                & (dependent[:, 0] <= a[1])
                & (dependent[:, 1] >= b[0])
                & (dependent[:, 1] <= b[1])
            ).sum()
        )
        iv = est.count(pred, interval=0.95)
        assert iv.low <= truth <= iv.high, (a, b, truth, iv)
        assert not iv.supported
    # a count the 1-way table holds is a point when there is no noise (up to the decoder's fit
    # tolerance: the interval is widened to hold the value)
    iv = est.count(pl.col("a") < 0.3, interval=0.95)
    exact = float((dependent[:, 0] < 0.3).sum())
    assert iv.supported and iv.low == pytest.approx(exact, rel=1e-4) and iv.high == pytest.approx(exact)
    assert iv.low <= iv.value <= iv.high


def test_a_query_empty_on_the_decoder_points_is_not_an_empty_interval(dependent):
    """The decoder puts no mass where ``a`` is high and ``b`` low; the cells still allow rows
    there, so the bound must not collapse to 0 (uniform probes read the query in every cell)."""
    fm = dps.MarginalTables(BOX2, [0, 1], bins=4)
    est = dps.M2M(sketch_of(fm, dependent), n_samples=2000)
    pred = (pl.col("a") > 0.5) & (pl.col("b") < 0.5)
    iv = est.count(pred, interval=0.95)
    assert iv.high >= min((dependent[:, 0] > 0.5).sum(), (dependent[:, 1] < 0.5).sum()) * 0.99


def test_pairs_make_two_column_counts_supported(dependent):
    fm = dps.MarginalTables(BOX2, [0, 1, (0, 1)], bins=8)
    rng = np.random.default_rng(2)
    est = dps.M2M(sketch_of(fm, dependent, sd=5.0, rng=rng), n_samples=5000)
    iv = est.count((pl.col("a") < 0.5) & (pl.col("b") >= 0.25), interval=0.9)
    assert iv.supported and iv.low < iv.value < iv.high
    # 4 × 6 cells of the pair table: the noise band of their sum
    assert iv.high - iv.low == pytest.approx(2 * 1.644854 * 5.0 * np.sqrt(24), rel=1e-4)


def test_means_and_cdfs_have_intervals(dependent):
    fm = dps.MarginalTables(BOX2, [0, 1], bins=16)
    est = dps.M2M(sketch_of(fm, dependent), n_samples=5000)
    iv = est.mean(interval=0.95)
    truth = dependent.mean(axis=0)
    assert np.all(iv.low <= truth) and np.all(truth <= iv.high)
    assert np.all(iv.high - iv.low <= 1 / 16 + 1e-9)  # a mean is bracketed by its cells' ends
    # x ≤ t at a bin edge also counts rows sitting on t, which lie in the bin above: flagged, and
    # bracketed by that bin's share
    cdf = est.cdf("a", [0.25, 0.5], interval=0.95)
    truth = [(dependent[:, 0] <= t).mean() for t in (0.25, 0.5)]
    assert not np.any(cdf.supported) and np.all(cdf.low <= truth) and np.all(truth <= cdf.high)
    assert np.allclose(cdf.low, [(dependent[:, 0] < t).mean() for t in (0.25, 0.5)], atol=1e-4)
    below = est.expect(pl.col("a") < 0.5, interval=0.95)
    exact = (dependent[:, 0] < 0.5).mean()
    assert (
        below.supported and below.low == pytest.approx(exact, rel=1e-4) and below.high == pytest.approx(exact)
    )


def test_refusals_name_the_fix(dependent):
    rff = dps.RFF(dim=2, num_features=50, bandwidth=0.3, seed=0)
    sk = dps.Sketch(feature_map=rff, sum_units=np.asarray(rff.fixed_sum(dependent)), count=4000, bounds=BOX2)
    est = dps.M2M(sk, n_samples=2000)
    with pytest.raises(ValueError, match="MarginalTables"):
        est.count(lambda Z: Z[:, 0] < 0.5, interval=0.95)
    est = dps.M2M(sketch_of(dps.Histogram(BOX2, bins=4), dependent), n_samples=2000)
    for bad in (0.0, 1.0, 95, True):
        with pytest.raises(ValueError, match="level"):
            est.count(lambda Z: Z[:, 0] < 0.5, interval=bad)
    with pytest.raises(ValueError, match="not both"):
        est.count(lambda Z: Z[:, 0] < 0.5, interval=0.95, return_std=True)


def test_fit_ratio_flags_blocks_the_decoder_cannot_reconcile(dependent):
    """A noisy but consistent sketch fits to about its noise; one whose 1-way table contradicts
    its pair table (every row in the first bin against every row in the last) cannot."""
    fm = dps.MarginalTables(BOX2, [0, (0, 1)], bins=4)
    rng = np.random.default_rng(5)
    good = dps.M2M(sketch_of(fm, dependent, sd=10.0, rng=rng), n_samples=5000)
    assert good.fit_ratio < 1.5 and "fit_ratio=" in repr(good)
    units = np.zeros(fm.num_features, dtype=np.int64)
    units[0] = 4000  # column a: all in bin 0 ...
    units[4 + 15] = 4000  # ... and all in the pair's cell (3, 3)
    bad = dps.Sketch(fm, units, 4000, noise={"sum_variance": 100.0, "count_variance": 100.0}, bounds=BOX2)
    assert dps.M2M(bad, n_samples=5000).fit_ratio > 2
    assert np.isnan(dps.M2M(bad, n_samples=5000, method="ridge").fit_ratio)


def test_shares_of_a_schema_sketch_have_intervals():
    rng = np.random.default_rng(4)
    schema = dps.Schema({"x": (0, 1), "c": ["a", "b", "c"]})
    labels = rng.choice(["a", "b", "c"], 3000, p=[0.6, 0.3, 0.1])
    table = pl.DataFrame({"x": rng.uniform(0, 1, 3000), "c": labels})
    sk = dps.release_sketch(table, schema=schema, rho=2.0)
    out = dps.M2M(sk, n_samples=5000).shares("c", interval=0.999999)  # Gaussian noise: fails ~1e-6
    assert out.columns == ["c", "share", "low", "high", "supported"] and out["supported"].all()
    truth = [(labels == v).mean() for v in ("a", "b", "c")]
    assert ((out["low"] <= truth) & (out["high"] >= truth)).all()


def test_group_means_are_bracketed_by_their_sum_and_count():
    """Noise-free, the group mean lies in its interval; with the pair measured and integer-coded
    values it is supported; bad levels are refused."""
    rng = np.random.default_rng(8)
    schema = dps.Schema({"x": dps.Numeric(0, 10, integer=True), "c": ["a", "b"]})
    c = rng.choice(["a", "b"], 4000, p=[0.7, 0.3])
    x = np.where(c == "a", rng.integers(0, 5, 4000), rng.integers(5, 11, 4000))
    table = pl.DataFrame({"x": x.astype(float), "c": c})
    sk = dps.release_sketch(table, schema=schema, rho=50.0)
    est = dps.M2M(sk, n_samples=5000)
    out = est.group_mean("c", "x", interval=0.999999)  # Gaussian noise: fails about 1e-6 of runs
    truth = {g: x[c == g].mean() for g in ("a", "b")}
    for row in out.iter_rows(named=True):
        assert row["low"] <= truth[row["c"]] <= row["high"] and row["supported"]
        assert row["high"] - row["low"] < 1.0
    with pytest.raises(ValueError, match="level"):
        est.group_mean("c", "x", interval=1.5)


def test_composite_blocks_give_intervals_in_their_own_noise(dependent):
    """In a weighted composite, a block of weight ``a`` holds ``a`` per row with noise ``σ``: its
    cells are read as rows with noise ``σ/a``. A count the 1-way block (weight 4) holds gets the
    band of its cells at ``σ/4``."""
    ones = dps.MarginalTables(BOX2, [0, 1], bins=8)
    pair = dps.MarginalTables(BOX2, [(0, 1)], bins=8)
    fm = dps.Composite([ones, pair], weights=[4.0, 1.0])
    rng = np.random.default_rng(4)
    est = dps.M2M(sketch_of(fm, dependent, sd=20.0, rng=rng), n_samples=5000)
    iv = est.count(pl.col("a") < 0.5, interval=0.9)
    truth = float((dependent[:, 0] < 0.5).sum())
    assert iv.supported and iv.low <= truth <= iv.high
    assert iv.high - iv.low == pytest.approx(2 * 1.644854 * 5.0 * 2.0, rel=1e-4)  # 4 cells at σ/4
    joint = est.count((pl.col("a") < 0.5) & (pl.col("b") < 0.5), interval=0.9)
    assert joint.supported  # the pair block holds it, at the full σ over 16 cells
    assert joint.high - joint.low == pytest.approx(2 * 1.644854 * 20.0 * 4.0, rel=1e-4)


def test_quantile_intervals_cover_at_least_their_level():
    """Quantile bounds from the CDF bounds at every public edge, simultaneously (union bound):
    over 200 noise draws the true median and 90th percentile are covered at least 95 % of the
    time (one-sided binomial test against 95 %, fails at p < 1e-4)."""
    rng = np.random.default_rng(8)
    fm = dps.Histogram(bounds=(0, 1), bins=16, dim=1)
    X = rng.beta(2, 5, (5000, 1))
    truth = np.quantile(X[:, 0], [0.5, 0.9], method="inverted_cdf")
    hits, reps, widths = np.zeros(2), 200, []
    for _ in range(reps):
        sk = sketch_of(fm, X, sd=30.0, rng=rng, box=([0.0], [1.0]), names=("x",))
        iv = dps.M2M(sk, n_samples=2000).quantile("x", [0.5, 0.9], interval=0.95)
        assert np.all(iv.low <= iv.value) and np.all(iv.value <= iv.high) and not iv.supported.any()
        hits += (iv.low <= truth) & (truth <= iv.high)
        widths.append(iv.high - iv.low)
    for h in hits:
        assert stats.binomtest(int(h), reps, 0.95, alternative="less").pvalue > 1e-4, hits / reps
    assert np.mean(widths) < 0.25  # a few of the 1/16-wide cells, not the whole box
    scalar = dps.M2M(sketch_of(fm, X, box=([0.0], [1.0]), names=("x",)), n_samples=2000).quantile(
        "x", 0.5, interval=0.9
    )
    assert isinstance(scalar.low, float) and scalar.low <= truth[0] <= scalar.high
    rff = dps.RFF(dim=1, num_features=20, bandwidth=0.3, seed=0)
    est = dps.M2M(dps.Sketch(rff, np.asarray(rff.fixed_sum(X)), 5000, bounds=([0.0], [1.0])), n_samples=2000)
    with pytest.raises(ValueError, match="MarginalTables"):
        est.quantile(0, 0.5, interval=0.95)
    with pytest.raises(ValueError, match="level"):
        dps.M2M(sketch_of(fm, X, box=([0.0], [1.0]), names=("x",)), n_samples=2000).quantile(
            0, 0.5, interval=1.5
        )


@pytest.mark.parametrize("method", ["synthetic", "ridge"])
def test_every_interval_holds_its_value(method, monkeypatch):
    """The value draws on every block and the bounds on one: where that block's noise put them
    past the value, the side that misses it is widened to it, for every kind of answer (a seeded
    noisy sketch of the schema's default map where unwidened CDF bounds do miss the value)."""
    rng = np.random.default_rng(11)
    schema = dps.Schema({"x": dps.Numeric(0, 10, integer=True), "y": (0, 1), "c": ["a", "b", "c"]})
    n = 3000
    table = pl.DataFrame(
        {
            "x": rng.integers(0, 11, n).astype(float),
            "y": rng.beta(2, 5, n),
            "c": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
        }
    )
    fm = dps.auto_feature_map(schema)
    lo, hi = (b.tolist() for b in schema.bounds)
    units = np.asarray(fm.fixed_sum(schema.encode(table)), dtype=np.int64)
    units = units + np.rint(rng.normal(0.0, 40.0, units.size)).astype(np.int64)
    sk = dps.Sketch(
        fm,
        units,
        n,
        noise={"sum_variance": 40.0**2, "count_variance": 40.0**2},
        bounds=(lo, hi),
        column_names=schema.columns,
        schema=schema.to_dict(),
    )
    est = dps.M2M(sk, n_samples=3000, method=method)
    preds = [pl.col("x") <= t for t in range(0, 11)] + [pl.col("y") < t for t in (0.1, 0.3, 0.55)]
    preds += [(pl.col("c") == "a") & (pl.col("x") > 4), pl.col("c") != "c"]
    preds = [p.alias(f"q{i}") for i, p in enumerate(preds)]

    def answers():
        return [
            est.count(preds, interval=0.95),
            est.expect(preds, interval=0.9),
            est.mean(interval=0.95),
            est.moment(2, interval=0.95),
            est.cdf("y", np.linspace(0, 1, 41), interval=0.95),
            est.quantile("y", [0.1, 0.5, 0.9], interval=0.95),
        ]

    def outside(iv):
        keep = np.isfinite(iv.value)  # categorical columns have no mean
        return int(np.sum((iv.value[keep] < iv.low[keep]) | (iv.value[keep] > iv.high[keep])))

    with monkeypatch.context() as m:  # the bounds of one block alone
        m.setattr(m2m, "_around", lambda value, low, high: (low, high))
        missed = sum(outside(iv) for iv in answers())
    assert method == "ridge" or missed > 0  # the widening is needed on this sketch
    assert sum(outside(iv) for iv in answers()) == 0
    for frame, col in (
        (est.shares("c", interval=0.95), "share"),
        (est.group_mean("c", "y", interval=0.95), "y"),
    ):
        assert ((frame["low"] <= frame[col]) & (frame[col] <= frame["high"])).all(), frame


def test_predicate_ranges_by_sparse_counts_equal_the_sorted_ranges():
    """For 0/1 queries a cell's least and greatest values come from its count of ones (one
    sparse product per block); they equal the ranges of the rows sorted by cell, block by block."""

    rng = np.random.default_rng(5)
    n = 5000
    frame = pl.DataFrame(
        {"x": rng.uniform(0, 10, n), "k": rng.integers(0, 20, n), "c": rng.choice(["a", "b", "c"], n)}
    )
    schema = dps.Schema({"x": (0, 10), "k": dps.Numeric(0, 19, integer=True), "c": ["a", "b", "c"]})
    est = dps.M2M(dps.release_sketch(frame, schema=schema, epsilon=1.0), n_samples=3000)
    index = est._cell_index()
    F = (rng.random((index._cells_of.shape[0], 6)) < 0.3).astype(np.int8)
    F[:, 5] = 1  # a constant query too
    fmin, fmax = F.min(axis=0), F.max(axis=0)
    for k in range(len(index.parts)):
        by_sort = index.ranges(k, F, fmin, fmax)
        by_counts = index.ranges(k, F, fmin, fmax, np.ascontiguousarray(F, dtype=np.float32))
        for a, b in zip(by_sort, by_counts):
            assert a.dtype == b.dtype and np.array_equal(a, b)
