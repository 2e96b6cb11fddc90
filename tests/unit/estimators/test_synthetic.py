"""The synthetic decoder: feasible answers by construction, accuracy on a skewed correlated table,
never raising on degenerate sketches, and the M2M method switch (ridge kept)."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
import scipy.sparse

import opendp_sketch as dps
from opendp_sketch.estimators.synthetic import SyntheticDecoder, cell_edges

dp.enable_features("contrib", "honest-but-curious")

BOX = ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0])


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    """A skewed table with strongly dependent columns (a shared latent factor)."""
    rng = np.random.default_rng(11)
    z = rng.gamma(1.5, 1.0, 6000)
    x0 = np.clip(z / 6, 0, 1)
    x1 = np.clip(0.8 * x0 + rng.beta(1, 6, 6000) * 0.3, 0, 1)
    x2 = rng.beta(5, 2, 6000)
    return np.column_stack([x0, x1, x2])


def exact_sketch(fm, X, noise=None, count=None):
    return dps.Sketch(
        feature_map=fm,
        sum_units=np.array(fm.fixed_sum(X), dtype=np.int64),
        count=X.shape[0] if count is None else count,
        noise=noise or {},
        bounds=BOX,
        column_names=["a", "b", "c"],
    )


def range_counts(rng, X_or_est, n_queries=60):
    """The same random 2-column boxes, counted on data or estimated by an M2M."""
    out = []
    for _ in range(n_queries):
        cols = rng.choice(3, size=2, replace=False)
        lo = rng.uniform(0, 0.6, 2)
        hi = lo + rng.uniform(0.1, 0.4, 2)

        def pred(Z, cols=cols, lo=lo, hi=hi):
            return np.all((Z[:, cols] >= lo) & (Z[:, cols] < hi), axis=1)

        out.append(pred(X_or_est).sum() if isinstance(X_or_est, np.ndarray) else X_or_est.count(pred))
    return np.array(out, dtype=np.float64)


def marginals_2way():
    return dps.MarginalTables(
        bounds=(0, 1),
        subsets=[0, 1, 2, (0, 1), (0, 2), (1, 2)],
        bins=[[16], [16], [16], [8, 8], [8, 8], [8, 8]],
        dim=3,
    )


@pytest.fixture(scope="module")
def released(table):
    return dps.release_sketch(
        table, marginals_2way(), bounds=(0.0, 1.0), epsilon=1.0, column_names=["a", "b", "c"]
    )


@pytest.fixture(scope="module")
def est(released):
    return dps.M2M(released, n_samples=20_000, seed=3)


def test_answers_are_feasible_by_construction(est, released):
    w = est.weights
    assert est.method == "synthetic" and est.lam is None
    assert (w >= 0).all() and w.sum() == pytest.approx(1.0, abs=1e-12)
    counts = range_counts(np.random.default_rng(0), est, 100)
    assert ((counts >= 0) & (counts <= est.n_hat)).all()
    for j in range(3):
        F = est.cdf(j, np.linspace(0, 1, 41))
        assert ((F >= 0) & (F <= 1)).all() and (np.diff(F) >= 0).all() and F[-1] == pytest.approx(1.0)
    mu = est.mean()
    assert ((mu >= 0) & (mu <= 1)).all()
    assert ((est.samples >= 0) & (est.samples <= 1)).all()
    C = est.covariance()
    assert np.linalg.eigvalsh(C).min() >= -1e-12  # a genuine distribution's covariance


def test_joint_counts_follow_the_data(table, est):
    """2-way marginals + the decoder answer 2-column boxes far better than the ridge 1-way baseline."""
    n = table.shape[0]
    truth = range_counts(np.random.default_rng(1), table)
    err = np.mean(np.abs(range_counts(np.random.default_rng(1), est) - truth)) / n
    ridge_sk = dps.release_sketch(
        table, dps.Histogram(bounds=(0, 1), bins=16, dim=3), bounds=(0.0, 1.0), epsilon=1.0
    )
    ridge = dps.M2M(ridge_sk, n_samples=20_000, method="ridge")
    err_ridge = np.mean(np.abs(range_counts(np.random.default_rng(1), ridge) - truth)) / n
    assert err < 0.015  # observed about 0.004
    assert err < err_ridge / 2
    np.testing.assert_allclose(est.mean(), table.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(est.quantile("c", [0.5]), np.quantile(table[:, 2], [0.5]), atol=0.05)


def test_noise_free_histogram_marginals_are_reproduced(table):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=3)
    est = dps.M2M(exact_sketch(fm, table), n_samples=10_000)
    edges = np.linspace(0, 1, 9)[1:-1]
    for j in range(3):
        np.testing.assert_allclose(est.cdf(j, edges), (table[:, j][:, None] < edges).mean(axis=0), atol=3e-3)
    assert est.n_hat == table.shape[0]


def test_count_combines_the_released_count_with_the_marginal_totals(table):
    """A one-hot map's cells sum to s·n: with a very noisy count, n̂ follows the cell totals."""
    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=3)
    sk = exact_sketch(
        fm, table, noise={"sum_variance": 1.0, "count_variance": 1e8}, count=table.shape[0] + 5000
    )
    dec = SyntheticDecoder(n_points=2000).fit(sk)
    assert dec.n_hat_ == pytest.approx(table.shape[0], abs=5)


def test_sample_is_an_ordinary_frame_drawn_from_the_weights(est):
    a, b = est.sample(5000, seed=1), est.sample(5000, seed=1)
    assert a.columns == ["a", "b", "c"] and a.height == 5000 and a.equals(b)
    assert not a.equals(est.sample(5000, seed=2))
    # its column means agree with the weighted ones to sampling error (sd ≈ 0.003)
    np.testing.assert_allclose(a.select(pl.all().mean()).to_numpy()[0], est.mean(), atol=0.02)
    assert est.sample(0).height == 0
    with pytest.raises(ValueError, match="non-negative integer"):
        est.sample(-1)


def test_polars_queries_and_the_weighted_frame(est):
    frame = est.weighted_frame()
    assert frame.columns == ["a", "b", "c", "weight"] and frame["weight"].min() >= 0
    by_expr = est.expect(pl.col("a") * pl.col("b"))
    assert by_expr == pytest.approx(float((frame["a"] * frame["b"] * frame["weight"]).sum()), rel=1e-9)
    assert 0 <= est.count((pl.col("a") > 0.2) & (pl.col("c") < 0.5)) <= est.n_hat


def test_categorical_columns_are_decoded_as_codes():
    rng = np.random.default_rng(5)
    g = rng.choice([0, 1, 2], size=3000, p=[0.6, 0.3, 0.1]).astype(float)
    x = np.clip(rng.beta(2, 5, 3000) + 0.2 * g, 0, 1)
    fm = dps.MarginalTables(
        bounds=([0, 0], [1, 2]), subsets=[0, 1, (0, 1)], bins=[[8], [3], [4, 3]], categorical=[1]
    )
    sk = dps.Sketch(
        fm, np.array(fm.fixed_sum(np.column_stack([x, g])), dtype=np.int64), 3000, bounds=([0, 0], [1, 2])
    )
    est = dps.M2M(sk, n_samples=5000)
    assert set(np.unique(est.samples[:, 1])) <= {0.0, 1.0, 2.0}
    assert est.count(lambda Z: Z[:, 1] == 2) == pytest.approx(np.sum(g == 2), rel=0.05)


def test_dense_maps_decode(table):
    fm = dps.RFF(dim=3, num_features=200, bandwidth=0.3, seed=0)
    est = dps.M2M(exact_sketch(fm, table), n_samples=3000)
    assert est.n_samples == 3000 and (est.weights >= 0).all()
    np.testing.assert_allclose(est.mean(), table.mean(axis=0), atol=0.03)


@pytest.mark.slow
def test_dense_maps_cap_the_number_of_points(table):
    fm = dps.RFF(dim=3, num_features=1500, bandwidth=0.3, seed=0)
    est = dps.M2M(exact_sketch(fm, table), n_samples=50_000)
    assert est.n_samples == (1 << 22) // 1500  # float32 Φ(x̃) holds at most 2²² entries
    np.testing.assert_allclose(est.mean(), table.mean(axis=0), atol=0.03)


def test_ridge_is_still_available(table):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=3)
    sk = exact_sketch(fm, table, noise={"sum_variance": 50.0})
    ridge = dps.M2M(sk, n_samples=5000, method="ridge")
    assert ridge.method == "ridge" and ridge.lam > 0 and (ridge.weights < 0).any()
    value, std = ridge.expect(lambda Z: Z[:, 0], return_std=True)
    assert std > 0
    with pytest.raises(ValueError, match="return_std needs method='ridge'"):
        dps.M2M(sk, n_samples=5000).expect(lambda Z: Z[:, 0], return_std=True)
    with pytest.raises(ValueError, match="method"):
        dps.M2M(sk, method="nnls")


@pytest.mark.parametrize(
    "sum_units, count, noise",
    [
        (np.zeros(24, dtype=np.int64), 0, {}),
        (np.full(24, -50, dtype=np.int64), -3, {"sum_variance": 4.0, "count_variance": 4.0}),
        (np.full(24, -50, dtype=np.int64), 10, {"sum_variance": 4.0, "count_variance": 1e-9}),
    ],
    ids=["empty", "negative", "negative-cells"],
)
def test_degenerate_sketches_never_raise(sum_units, count, noise):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=3)
    sk = dps.Sketch(fm, sum_units, count, noise=noise, bounds=BOX)
    est = dps.M2M(sk, n_samples=1000)
    assert (est.weights >= 0).all() and est.weights.sum() == pytest.approx(1.0)
    c = est.count(lambda Z: Z[:, 0] < 0.5)
    assert 0 <= c <= max(est.n_hat, 0)
    if est.n_hat <= 0:
        assert est.degenerate and "not positive" in est.reason and c == 0
    mu = est.mean()
    assert ((mu >= 0) & (mu <= 1)).all()


@pytest.mark.parametrize("variance", [1e30, np.inf, 0.0])
def test_extreme_noise_never_raises(table, variance):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=3)
    units = np.array(fm.fixed_sum(table), dtype=np.int64)
    units[::3] = np.iinfo(np.int64).max // 4  # absurd released values
    sk = dps.Sketch(fm, units, 17, noise={"sum_variance": variance, "count_variance": variance}, bounds=BOX)
    est = dps.M2M(sk, n_samples=1000)
    assert np.isfinite(est.weights).all() and (est.weights >= 0).all()
    assert est.weights.sum() == pytest.approx(1.0)
    assert ((est.mean() >= 0) & (est.mean() <= 1)).all()


def test_same_seed_same_answer_and_bad_parameters_refused(released):
    a = SyntheticDecoder(n_points=3000, seed=7).fit(released)
    b = SyntheticDecoder(n_points=3000, seed=7).fit(released)
    np.testing.assert_array_equal(a.weights_, b.weights_)
    np.testing.assert_array_equal(a.samples_, b.samples_)
    assert a.history_ and a.residual_ >= 0 and a.noise_norm_ > 0
    for kwargs, match in [
        ({"n_points": 10}, "n_points"),
        ({"rounds": 0}, "rounds"),
        ({"tol": 2.0}, "tol"),
        ({"move": -0.1}, "move"),
        ({"discrete": {5: [0.0]}}, "discrete column"),
    ]:
        with pytest.raises(ValueError, match=match):
            SyntheticDecoder(**kwargs).fit(released)
    with pytest.raises(ValueError, match="sketch must be a Sketch"):
        SyntheticDecoder().fit("not a sketch")


def test_the_design_stores_each_distinct_one_hot_row_once_without_changing_its_products():
    from opendp_sketch.estimators.synthetic import _Design, _distinct_rows

    rng = np.random.default_rng(4)
    fm = dps.MarginalTables((0, 1), [0, 1, (0, 1)], bins=4, dim=2)
    X = rng.choice([0.1, 0.3, 0.6, 0.9], size=(500, 2))  # 16 distinct cells for 500 points
    design = _Design(fm, X)
    assert design.P.shape[0] == 16
    dense = fm.transform(X)
    w, r = rng.dirichlet(np.ones(500)), rng.normal(size=fm.num_features)
    np.testing.assert_allclose(design.mix(w), dense.T @ w, atol=1e-12)
    np.testing.assert_allclose(design.score(r), dense @ r, atol=1e-12)
    # the grouping is exact: every row is rebuilt from its distinct row
    idx = np.array([[0, 1], [1, 0], [0, 1]])
    distinct, inverse = _distinct_rows(idx)
    assert np.array_equal(distinct[inverse], idx) and distinct.shape[0] == 2


def test_the_fit_on_distinct_rows_gives_the_weights_of_the_fit_on_points():
    """From uniform weights, points sharing a design row keep equal weights, so fitting the rows
    (weighted by their number of points) is the same descent at the cost of the rows."""
    from opendp_sketch.estimators.synthetic import _Design, _fit_weights

    rng = np.random.default_rng(7)
    fm = dps.MarginalTables((0, 1), [0, 1, (0, 1)], bins=4, dim=2)
    X = rng.choice([0.1, 0.3, 0.6, 0.9], size=(2_000, 2), p=[0.1, 0.2, 0.3, 0.4])
    target = fm.transform(rng.uniform(size=(300, 2)) ** 2).mean(axis=0)
    wt = np.full(fm.num_features, 50.0)
    rows = _Design(fm, X)
    assert rows.multiplicity is not None and rows.P.shape[0] == 16
    points = _Design(fm, X)
    points.rows = None  # the same matrix, one row per point
    points.P = scipy.sparse.csr_matrix(fm.transform(X))
    points.PT = points.P.T.tocsr()
    theta_r, loss_r, it_r = _fit_weights(rows, target, wt, np.zeros(2_000), 300, 1e-9)
    theta_p, loss_p, it_p = _fit_weights(points, target, wt, np.zeros(2_000), 300, 1e-9)
    w_r, w_p = np.exp(theta_r - theta_r.max()), np.exp(theta_p - theta_p.max())
    np.testing.assert_allclose(w_r / w_r.sum(), w_p / w_p.sum(), rtol=1e-9, atol=1e-15)
    # rounding differs between the two products, so the stopping step may differ a little
    assert abs(it_r - it_p) <= 0.2 * it_p and abs(loss_r - loss_p) <= 1e-9 * max(loss_p, 1.0)


def test_skewed_columns_keep_every_released_cell():
    """Eight heavy-tailed columns (most rows in the first bin, tens of rows in far bins), 1-way
    marginals with noise: the fit must follow every released cell. Points resampled ∝ w once
    left no point in cells whose weight fell to 0, and those cells decoded to 0 rows whatever
    their released count (here |fit − released| was 12.6 noise std's per cell; now 0.5)."""
    rng = np.random.default_rng(7)
    n, d = 37_000, 8
    X = np.clip(rng.lognormal(0.0, 2.0, (n, d)) / 300.0, 0, 1)  # 93 % of each column in bin 0
    fm = dps.MarginalTables(([0.0] * d, [1.0] * d), list(range(d)), bins=16)
    sd = 11.5
    units = np.asarray(fm.fixed_sum(X), dtype=np.int64) + np.rint(rng.normal(0, sd, fm.num_features)).astype(
        np.int64
    )
    sk = dps.Sketch(
        fm, units, n, noise={"sum_variance": sd**2, "count_variance": 50.0**2}, bounds=([0.0] * d, [1.0] * d)
    )
    dec = SyntheticDecoder(50_000, seed=0).fit(sk)
    fitted = np.bincount(
        fm.cells(dec.samples_).ravel(), weights=np.repeat(dec.weights_, d), minlength=fm.num_features
    )
    misfit = np.abs(fitted * dec.n_hat_ - sk.sum)
    assert misfit.mean() < sd, misfit.mean() / sd


def test_weighted_composites_of_cell_maps_decode_on_every_point(table):
    """A composite of marginals is a cell map up to its weights: it keeps all N points (it used to
    be capped like a dense map, at 2²²/m) and, noise-free, decodes like the unweighted marginals."""
    plain = marginals_2way()
    ones = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, 2], bins=16, dim=3)
    pairs = dps.MarginalTables(bounds=(0, 1), subsets=[(0, 1), (0, 2), (1, 2)], bins=8, dim=3)
    weighted = dps.Composite([ones, pairs], weights=[3.0, 1.0])
    assert weighted.num_features * 20_000 > 1 << 22  # the dense cap would have applied
    rng = np.random.default_rng(5)
    truth = range_counts(rng, table)
    errs = []
    for fm in (plain, weighted):
        est = dps.M2M(exact_sketch(fm, table), n_samples=20_000, seed=1)
        assert est.n_samples == 20_000
        errs.append(np.mean(np.abs(range_counts(np.random.default_rng(5), est) - truth)) / table.shape[0])
    assert errs[1] < 0.01, errs
    assert errs[1] < 1.5 * errs[0] + 1e-3, errs


def test_progress_reports_each_round_then_every_round_done(released):
    calls: list[tuple[int, int]] = []
    dec = SyntheticDecoder(
        n_points=3000, seed=1, progress=lambda done, total: calls.append((done, total))
    ).fit(released)
    assert calls and all(total == dec.rounds for _, total in calls)
    done = [c[0] for c in calls]
    assert done == sorted(done) and done[-1] == dec.rounds and len(calls) == len(dec.history_)
    # the same fit with or without a progress callback
    quiet = SyntheticDecoder(n_points=3000, seed=1).fit(released)
    np.testing.assert_array_equal(quiet.weights_, dec.weights_)
    # a degenerate sketch reports the end too, and M2M passes the callback on
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=3)
    empty = dps.Sketch(fm, np.zeros(24, dtype=np.int64), 0, noise={"sum_variance": 1.0}, bounds=BOX)
    ends: list[tuple[int, int]] = []
    est = dps.M2M(empty, n_samples=1000, progress=lambda d, t: ends.append((d, t)))
    assert est.degenerate and ends == [(5, 5)]
    with pytest.raises(ValueError, match="progress"):
        SyntheticDecoder(progress="bar").fit(released)


# -- raking the 1-way marginals -------------------------------------------------------------------
PAIR_MAP = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, (0, 1)], bins=[[4], [4], [4, 4]], dim=2)
SKEWED = np.array([0.85, 0.05, 0.05, 0.05])


def _pair_sketch(excess_on_small_cells: int) -> dps.Sketch:
    """Exact 1-way blocks of two skewed independent columns; the pair table gets
    ``excess_on_small_cells`` extra rows in each of its 9 small cells (2.5 rows each), as
    positive noise on near-empty cells does; recorded noise std 10, exact count."""
    n = 1000
    pair = np.outer(SKEWED, SKEWED) * n
    pair[1:, 1:] += excess_on_small_cells
    sums = np.concatenate([SKEWED * n, SKEWED * n, pair.ravel()])
    noise = {"sum_variance": 100.0, "count_variance": 0.0}
    return dps.Sketch(PAIR_MAP, np.rint(sums).astype(np.int64), n, noise=noise, bounds=([0.0] * 2, [1.0] * 2))


def _first_column_marginal(dec: SyntheticDecoder) -> np.ndarray:
    cells = np.minimum((dec.samples_[:, 0] * 4).astype(int), 3)
    return np.bincount(cells, weights=dec.weights_, minlength=4)


def test_rake_sets_a_one_way_marginal_the_joint_fit_biases_to_its_own_block():
    sk = _pair_sketch(80)
    joint = SyntheticDecoder(n_points=2000, rake=False).fit(sk)
    raked = SyntheticDecoder(n_points=2000).fit(sk)
    # the joint fit moves mass into the pair's inflated small cells, out of the big cell
    assert _first_column_marginal(joint)[0] < 0.83 and joint.raked_ == ()
    assert raked.raked_ == (0, 1)
    np.testing.assert_allclose(_first_column_marginal(raked), SKEWED, atol=1e-3)
    # the dependence the pair table shows is kept: more mass in the small cells than independence
    small = raked.weights_ @ ((raked.samples_[:, 0] >= 0.25) & (raked.samples_[:, 1] >= 0.25))
    assert small > 0.15**2 + 0.02
    assert (raked.weights_ >= 0).all() and raked.weights_.sum() == pytest.approx(1.0)


def test_rake_threshold_is_a_twentieth_of_a_noise_variance_per_cell():
    """A bias above a twentieth of a noise variance per cell is raked (the threshold was a
    quarter, which left such columns biased: 10 extra rows per small cell were not raked);
    a smaller one is left to the joint fit."""
    for excess in (10, 25):
        moderate = SyntheticDecoder(n_points=2000).fit(_pair_sketch(excess))
        assert moderate.raked_ == (0, 1)
        np.testing.assert_allclose(_first_column_marginal(moderate), SKEWED, atol=1e-3)
    assert SyntheticDecoder(n_points=2000).fit(_pair_sketch(8)).raked_ == ()


def test_rake_leaves_a_fit_that_agrees_with_its_one_way_blocks():
    sk = _pair_sketch(0)
    joint = SyntheticDecoder(n_points=2000, rake=False).fit(sk)
    raked = SyntheticDecoder(n_points=2000).fit(sk)
    assert raked.raked_ == ()
    np.testing.assert_array_equal(raked.weights_, joint.weights_)


def test_rake_only_applies_to_marginals_with_joint_blocks(table):
    fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, 1, 2], bins=8, dim=3)
    units = np.array(fm.fixed_sum(table), dtype=np.int64)
    units[::5] += 400  # a misfit the 1-way fit cannot have beyond its own projection
    sk = dps.Sketch(fm, units, table.shape[0], noise={"sum_variance": 1.0, "count_variance": 1.0}, bounds=BOX)
    assert SyntheticDecoder(n_points=2000).fit(sk).raked_ == ()
    with pytest.raises(ValueError, match="rake"):
        SyntheticDecoder(rake=1).fit(sk)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(5))
def test_simplex_projection_is_the_closest_distribution(seed):
    from opendp_sketch.estimators.synthetic import _simplex_projection

    v = np.random.default_rng(seed).normal(0.1, 0.5, 12)
    t = _simplex_projection(v)
    assert (t >= 0).all() and t.sum() == pytest.approx(1.0)
    # optimality (KKT): v − t is one constant τ on the support and at most τ off it
    gap = v - t
    tau = gap[t > 0]
    assert np.ptp(tau) < 1e-12 and (gap[t == 0] <= tau[0] + 1e-12).all()


@pytest.mark.parametrize("variance", [0.0, np.inf, 1e30])
def test_rake_never_raises_on_absurd_joint_sketches(variance):
    units = np.array([10**15, -(10**15), 0, 7] * 6, dtype=np.int64)
    sk = dps.Sketch(
        PAIR_MAP,
        units,
        50,
        noise={"sum_variance": variance, "count_variance": 1.0},
        bounds=([0.0] * 2, [1.0] * 2),
    )
    dec = SyntheticDecoder(n_points=500).fit(sk)
    assert np.isfinite(dec.weights_).all() and (dec.weights_ >= 0).all()
    assert dec.weights_.sum() == pytest.approx(1.0)


# -- where points sit inside their cells -------------------------------------------------------------
def _skewed_sketch(values: np.ndarray, bins: int = 8) -> dps.Sketch:
    """A noise-free 1-column histogram sketch of ``values`` in [0, 1]."""
    fm = dps.Histogram(bounds=(0, 1), bins=bins, dim=1)
    units = np.array(fm.fixed_sum(values[:, None]), dtype=np.int64)
    return dps.Sketch(fm, units, values.size, bounds=([0.0], [1.0]))


def _cells(x: np.ndarray, bins: int = 8) -> np.ndarray:
    return np.minimum((x * bins).astype(int), bins - 1)


def test_linear_placement_keeps_every_point_in_its_cell_and_every_weight():
    x = np.random.default_rng(3).exponential(0.15, 20_000).clip(0, 1)
    sk = _skewed_sketch(x)
    lin = SyntheticDecoder(n_points=4000).fit(sk)
    uni = SyntheticDecoder(n_points=4000, within_cells="uniform").fit(sk)
    np.testing.assert_array_equal(lin.weights_, uni.weights_)
    np.testing.assert_array_equal(_cells(lin.samples_[:, 0]), _cells(uni.samples_[:, 0]))
    assert not np.array_equal(lin.samples_, uni.samples_)


def test_linear_placement_moves_a_skewed_columns_mean_and_moments_toward_the_truth():
    x = np.random.default_rng(4).exponential(0.15, 20_000).clip(0, 1)
    sk = _skewed_sketch(x)
    errors = {}
    for how in ("linear", "uniform"):  # over 4 seeds: one draw scatters the mean by about 0.0008
        found = []
        for seed in range(4):
            dec = SyntheticDecoder(n_points=4000, within_cells=how, seed=seed).fit(sk)
            z = dec.samples_[:, 0]
            found.append((abs(dec.weights_ @ z - x.mean()), abs(dec.weights_ @ z**2 - (x**2).mean())))
        errors[how] = np.mean(found, axis=0)
    # uniform placement puts each cell's mean at its centre: here 0.0084 above the true mean (0.15)
    assert errors["linear"][0] < 0.2 * errors["uniform"][0]
    assert errors["linear"][1] < 0.5 * errors["uniform"][1]


def test_linear_placement_leaves_a_flat_column_flat():
    x = np.random.default_rng(5).uniform(0, 1, 20_000)
    dec = SyntheticDecoder(n_points=4000).fit(_skewed_sketch(x))
    z = dec.samples_[:, 0]
    assert abs(dec.weights_ @ z - x.mean()) < 0.005
    with pytest.raises(ValueError, match="within_cells"):
        SyntheticDecoder(within_cells="cubic").fit(_skewed_sketch(x))


def test_linear_placement_does_not_read_a_thin_bound_cell_as_a_density():
    rng = np.random.default_rng(6)
    x = np.concatenate([np.zeros(8000), rng.uniform(0, 1, 12_000)])  # 40 % on the lower bound
    fm = dps.MarginalTables(bounds=(0, 1), subsets=[0], bins=[[[1e-6, *np.linspace(0, 1, 9)[1:-1]]]], dim=1)
    units = np.array(fm.fixed_sum(x[:, None]), dtype=np.int64)
    sk = dps.Sketch(fm, units, x.size, bounds=([0.0], [1.0]))
    dec = SyntheticDecoder(n_points=4000).fit(sk)
    z, w = dec.samples_[:, 0], dec.weights_
    assert abs(w @ (z <= 1e-6) - 0.4) < 1e-3
    # the flat part stays flat: its first regular cell is not tilted toward the point mass (read
    # as a density, it gives the cell the steepest slope, β = -2: means 0.038-0.045 over 5 seeds;
    # with the guard 0.058-0.067, as the ~300 points there scatter it by 0.002 around 0.0625)
    first = (z > 1e-6) & (z < 0.125)
    assert abs((w[first] @ z[first]) / w[first].sum() - 0.0625) < 0.01


def test_marginals_start_from_their_released_one_way_blocks(table):
    """With a 1-way block for every column, round 1's points are drawn from the released blocks
    (projected on the simplex): no round is fitted on points spread over the box."""
    fm = marginals_2way()  # 1-way blocks of 16 cells first, then the pairs
    sk = exact_sketch(fm, table)
    noisy = np.asarray(sk.sum, dtype=np.float64) / table.shape[0]
    noisy[:4] += [-0.2, 0.05, 0.0, 0.03]  # column 0's block leaves the simplex
    dec = SyntheticDecoder(n_points=3000, seed=1)
    dec.lower_, dec.upper_, dec.discrete_ = np.zeros(3), np.ones(3), {}
    dec.edges_ = cell_edges(fm, dec.lower_, dec.upper_)
    X = np.random.default_rng(0).uniform(size=(3000, 3))
    var = np.ones_like(noisy)
    per_column = dec._released_one_way(fm, X, noisy, var, np.random.default_rng(0))  # noqa: SLF001
    assert per_column is not None and len(per_column) == 3
    for j, w in enumerate(per_column):
        mass = np.bincount(_cells(X[:, j], 16), weights=w, minlength=16)
        y = noisy[16 * j : 16 * j + 16]
        # the projection on the simplex: max(y - τ, 0) summing to 1 (τ by bisection)
        lo_, hi_ = y.min() - 1, y.max()
        for _ in range(200):
            tau = (lo_ + hi_) / 2
            lo_, hi_ = (tau, hi_) if np.maximum(y - tau, 0).sum() > 1 else (lo_, tau)
        np.testing.assert_allclose(mass, np.maximum(y - tau, 0), atol=1e-9)
        assert w.min() >= 0 and abs(w.sum() - 1) < 1e-12
    assert np.bincount(_cells(X[:, 0], 16), weights=per_column[0], minlength=16)[0] == 0
    # the fit: round 0 is skipped, and the 1-way marginals come out right
    fitted = SyntheticDecoder(n_points=3000, seed=1, rounds=2).fit(sk)
    assert len(fitted.history_) == 1
    for j in range(3):
        m = np.bincount(_cells(fitted.samples_[:, j], 16), weights=fitted.weights_, minlength=16)
        truth = np.bincount(_cells(table[:, j], 16), minlength=16) / table.shape[0]
        np.testing.assert_allclose(m, truth, atol=0.005)


def test_a_prior_or_a_column_without_its_one_way_block_fits_round_0(table):
    pairs_only = dps.MarginalTables(bounds=(0, 1), subsets=[(0, 1), (1, 2)], bins=4, dim=3)
    prior = lambda n, rng: rng.uniform(0, 1, size=(n, 3))  # noqa: E731
    for fm, kwargs in ((pairs_only, {}), (marginals_2way(), {"prior": prior})):
        dec = SyntheticDecoder(n_points=2000, seed=2, rounds=2, **kwargs).fit(exact_sketch(fm, table))
        assert len(dec.history_) == 2


def test_every_public_value_stays_among_the_points_when_its_cell_is_released_empty():
    """A category whose released cell is noise below 0 gets no point from the start (its
    projection is 0); the one point kept at that value must survive every round's movers, or a
    group-by on the decoded rows loses the category (a CLI group mean lost the null category in
    5 of 20 releases before the kept points were put in after the movers)."""
    rng = np.random.default_rng(7)
    n = 4000
    X = np.column_stack([rng.uniform(0, 1, n), rng.choice([0.0, 1.0, 2.0], n)])  # code 3 empty
    fm = dps.MarginalTables(
        bounds=([0, 0], [1, 3]), subsets=[0, 1, (0, 1)], bins=[[8], [4], [8, 4]], categorical=[1]
    )
    units = np.array(fm.fixed_sum(X), dtype=np.int64)
    empty = fm.blocks[1].offset + 3
    units[empty] -= 6 * int(round(1 / fm.unit))  # the empty category's cell released at -6 rows
    sk = dps.Sketch(fm, units, n, noise={"sum_variance": 4.0}, bounds=([0.0, 0.0], [1.0, 3.0]))
    for seed in range(30):
        dec = SyntheticDecoder(n_points=2000, seed=seed).fit(sk)
        assert set(np.unique(dec.samples_[:, 1])) == {0.0, 1.0, 2.0, 3.0}, seed


def test_a_pile_at_a_bound_is_placed_at_the_bound_and_a_hole_is_not_read_as_one():
    import opendp_sketch.estimators.synthetic as synthetic

    rng = np.random.default_rng(8)
    # 30 % of the rows clipped onto the upper bound, the rest uniform: the last cell holds 0.34
    x = np.concatenate([rng.uniform(0, 1, 14_000), np.ones(6000)])
    sk = _skewed_sketch(x)
    last, on_bound = {}, {}
    for pile, point in ((True, True), (True, False), (False, True)):
        synthetic._PILE_AT_BOUNDS, synthetic._POINT_PILE = pile, point
        try:
            dec = SyntheticDecoder(n_points=4000, seed=1).fit(sk)
        finally:
            synthetic._PILE_AT_BOUNDS, synthetic._POINT_PILE = True, True
        z, w = dec.samples_[:, 0], dec.weights_
        top = z >= 0.875
        last[pile, point] = (w[top] @ z[top]) / w[top].sum()
        on_bound[pile, point] = w[z == 1.0].sum()
        assert abs(w[top].sum() - ((x >= 0.875).mean())) < 1e-3  # the cell keeps its mass
    # truth 0.9856 with 30 % of the rows on the bound: the trend and a point mass give 0.9863 and
    # 30.6 %; one steep exponential for the whole cell 0.962 and none on the bound; a line 0.944
    truth = x[x >= 0.875].mean()
    assert abs(last[True, True] - truth) < 0.005 and abs(on_bound[True, True] - 0.3) < 0.02
    assert last[True, False] > last[False, True] + 0.01 and on_bound[True, False] == 0.0
    # a density that steepens toward the bound without reaching it (Pareto from 0.01, like
    # movies' votes from 5) is no pile: its neighbours already rise steeply, so the end cell is
    # placed by one exponential (mean 0.0222 against the true 0.0219; as a point mass on the
    # bound, which the rise rule prevents, 0.0022 with 94 % of the rows on 0)
    u = np.random.default_rng(9).uniform(size=60_000)
    p = 0.01 * (1 - u) ** (-1 / 1.5)
    p = p[p <= 1][:20_000]
    dec = SyntheticDecoder(n_points=4000, seed=1).fit(_skewed_sketch(p))
    z, w = dec.samples_[:, 0], dec.weights_
    first = z < 0.125
    assert abs((w[first] @ z[first]) / w[first].sum() - p[p < 0.125].mean()) < 0.003
    assert w[z == 0.0].sum() == 0.0
    # gridded values: the cell next to the lower bound is empty, which is a hole, not a slope
    g = rng.choice([0.05, 0.3, 0.55, 0.8], size=20_000, p=[0.7, 0.1, 0.1, 0.1])
    dec = SyntheticDecoder(n_points=4000, seed=1).fit(_skewed_sketch(g))
    z, w = dec.samples_[:, 0], dec.weights_
    first = z < 0.125
    # 0.052 against the true 0.05; read as a pile (no hole guard) it goes to 0.009
    assert abs((w[first] @ z[first]) / w[first].sum() - 0.05) < 0.02


# -- round 1 drawn along the released pairs ---------------------------------------------------------
def _chain_table(n: int = 8000) -> np.ndarray:
    """x0 skewed; x1 follows x0 closely and x2 follows x1: the pair (0, 2) is strongly dependent
    only through x1."""
    rng = np.random.default_rng(5)
    x0 = np.clip(rng.gamma(1.2, 1.0, n) / 5, 0, 1)
    x1 = np.clip(x0 + rng.normal(0, 0.04, n), 0, 1)
    x2 = np.clip(1 - x1 + rng.normal(0, 0.04, n), 0, 1)
    return np.column_stack([x0, x1, x2])


def _chain_map() -> dps.MarginalTables:
    return dps.MarginalTables(
        bounds=(0, 1), subsets=[0, 1, 2, (0, 1), (1, 2)], bins=[[16], [16], [16], [16, 16], [16, 16]], dim=3
    )


def test_the_forest_of_released_pairs_is_a_maximum_spanning_tree_in_draw_order(table):
    from opendp_sketch.estimators.synthetic import _released_forest

    sk = exact_sketch(marginals_2way(), table)
    forest = _released_forest(sk.feature_map, np.asarray(sk.sum, dtype=np.float64) / table.shape[0])
    # 3 columns, 3 pairs: a spanning tree keeps 2, and the strongly dependent pair (0, 1) is one
    assert len(forest) == 2
    assert {(p, c) for p, c, *_ in forest} >= {(0, 1)}
    drawn = {forest[0][0]}
    for parent, child, _, _, _, t in forest:
        assert parent in drawn  # every parent is drawn before its child
        drawn.add(child)
        assert (t >= 0).all() and t.sum() == pytest.approx(1.0)
    assert drawn == {0, 1, 2}


def test_round_one_along_the_pairs_carries_a_chain_to_the_pair_it_does_not_measure(monkeypatch):
    """Only (0, 1) and (1, 2) are released: counts over (0, 2) follow the data only if the
    decoder passes the dependence along the chain, as a tree-shaped model does. Independent
    draws of the first points leave most of them where no row is, and the weights cannot fix it
    within the rounds."""
    import opendp_sketch.estimators.synthetic as synthetic

    X = _chain_table()
    sk = dps.Sketch(
        feature_map=_chain_map(),
        sum_units=np.array(_chain_map().fixed_sum(X), dtype=np.int64),
        count=X.shape[0],
        noise={},
        bounds=BOX,
    )
    edges = np.linspace(0, 1, 9)

    def unmeasured_pair_error(dec: SyntheticDecoder) -> float:
        fit = np.histogram2d(
            dec.samples_[:, 0], dec.samples_[:, 2], bins=[edges, edges], weights=dec.weights_
        )[0]
        truth = np.histogram2d(X[:, 0], X[:, 2], bins=[edges, edges])[0] / X.shape[0]
        return float(np.abs(fit - truth).sum())

    along = unmeasured_pair_error(SyntheticDecoder(n_points=6000, seed=3).fit(sk))
    monkeypatch.setattr(synthetic, "_FOREST_START", False)
    independent = unmeasured_pair_error(SyntheticDecoder(n_points=6000, seed=3).fit(sk))
    # 5 decoder seeds: 0.04–0.064 along the forest, 0.16–0.23 from independent draws
    assert along < 0.1 and along < 0.5 * independent, (along, independent)


def test_the_conditional_tables_take_their_marginals_from_the_one_way_blocks():
    from opendp_sketch.estimators.synthetic import _conditional

    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(12)).reshape(3, 4)
    table[1] = 0.0  # a row the pair table leaves empty
    rows, cols = np.array([0.5, 0.2, 0.3]), np.array([0.1, 0.2, 0.3, 0.4])
    cond = _conditional(table, rows, cols)
    assert (cond >= 0).all()
    np.testing.assert_allclose(cond.sum(axis=1), 1.0)
    np.testing.assert_allclose(rows @ cond, cols, atol=1e-6)  # the child's marginal is its block's
    # odds ratios of the populated rows are the table's (up to the 1e-6 independent mix)
    np.testing.assert_allclose(
        cond[0] / cond[2],
        (table[0] / table[2]) * (cond[0, 0] / cond[2, 0]) / (table[0, 0] / table[2, 0]),
        rtol=1e-3,
    )
    for bad in (np.full((3, 4), np.nan), np.full((3, 4), np.inf), -np.ones((3, 4))):
        c = _conditional(bad, rows, cols)
        assert np.isfinite(c).all() and np.allclose(c.sum(axis=1), 1.0)
    c = _conditional(table, np.full(3, np.nan), np.zeros(4))
    assert np.isfinite(c).all() and np.allclose(c.sum(axis=1), 1.0)


def test_a_discrete_column_puts_a_pile_on_its_bound_value_and_keeps_every_weight():
    """An integer column clipped at its upper bound: 1 % of the rows sit on the bound value. Its
    cells hold several values each; the pile goes to the bound value itself, not spread over the
    top cell's values, and no weight changes (other columns keep their marginals)."""
    from opendp_sketch.estimators.synthetic import _discrete_in_cells

    rng = np.random.default_rng(0)
    values = np.arange(0.0, 101.0)  # public integer values
    edges = np.linspace(0.0, 100.0, 11)  # 10 cells of 10 values (the last one holds 90..100)
    c = np.repeat(np.arange(10), 500)
    dens = np.array([1.0] * 9 + [3.0])  # the top cell holds 3× its neighbours' density: a pile
    beta = np.zeros(10)
    wide = np.ones(10, dtype=bool)
    current = values[np.clip(c * 10 + 5, 0, 100)]
    out = _discrete_in_cells(current, values, edges, c, beta, dens, wide, rng)
    assert np.isin(out, values).all()
    assert (np.minimum(np.searchsorted(edges, out, side="right") - 1, 9) == c).all()  # same cells
    top = out[c == 9]
    # the trend is 1, the cell 3: two thirds of its points on 100, the rest spread over 90..100
    assert abs(np.mean(top == 100.0) - (2 / 3 + 1 / 3 / 11)) < 0.05
    flat = out[c == 4]
    assert np.unique(flat).size == 10 and abs(flat.mean() - 44.5) < 1.0  # no pile, no slope: even


def test_discrete_columns_are_decoded_with_their_pile_at_the_bound():
    """A count-like integer column with 3 % of its rows clipped at 60: the decoded mean and the
    share at the bound follow the data (both fell short with values spread evenly in a cell)."""
    import opendp_sketch.estimators.synthetic as synthetic

    rng = np.random.default_rng(3)
    x = np.minimum(np.floor(rng.exponential(8.0, 20_000)), 60.0)
    x[:600] = 60.0
    fm = dps.MarginalTables(bounds=(0, 60), subsets=[0], bins=12, dim=1)
    sk = dps.Sketch(
        fm, np.array(fm.fixed_sum(x[:, None]), dtype=np.int64), x.size, noise={}, bounds=([0.0], [60.0])
    )
    values = {0: np.arange(0.0, 61.0)}
    dec = SyntheticDecoder(n_points=20_000, seed=1, discrete=values).fit(sk)
    share = float(dec.weights_ @ (dec.samples_[:, 0] == 60.0))
    mean = float(dec.weights_ @ dec.samples_[:, 0])
    assert abs(share - np.mean(x == 60.0)) < 0.006, share
    assert abs(mean - x.mean()) / x.mean() < 0.01, (mean, x.mean())
    previous = synthetic._DISCRETE_PROFILE
    try:
        synthetic._DISCRETE_PROFILE = False
        even = SyntheticDecoder(n_points=20_000, seed=1, discrete=values).fit(sk)
    finally:
        synthetic._DISCRETE_PROFILE = previous
    assert float(even.weights_ @ (even.samples_[:, 0] == 60.0)) < 0.5 * np.mean(x == 60.0)


def test_end_cell_profiles_never_raise_on_extreme_densities():
    # fitted densities are finite and >= 0, but may be subnormal or huge: the pile rules read them
    # inside a measurement's post-processing (Context), where an exception would be an oracle
    import itertools

    from opendp_sketch.estimators.synthetic import _end_pile, _pile_rate, _trend_at_edge

    values = [0.0, 5e-324, 1e-300, 1e-16, 1.0, 1e16, 1e300, 1.7e308, math.inf, math.nan]
    for a, b, c in itertools.product(values, repeat=3):
        trend, pile, rate = _trend_at_edge(a, b, c), _end_pile(a, b, c), _pile_rate(a, b, c)
        assert (trend is None) == (pile is None)
        if pile is not None:
            assert 0.0 <= pile[1] <= 1.0 and not math.isnan(pile[0])
        assert 0.0 <= rate <= 50.0


# -- a column measured at two resolutions (the automatic map's 1-way tree) ----------------------


def tree_map(fine_weight: float = 1.0) -> dps.Composite:
    """Columns 0 and 1 at 4 coarse cells (weight 4) and 16 fine ones (``fine_weight``), column 2 at
    16 cells (weight 3), the pairs at 1."""
    full = dps.MarginalTables.auto(BOX, fine_bins=16, coarse_bins=4, coarse_one_way=4).take(
        [0, 1, 2, 3, 4, 6, 7, 8]
    )
    coarse, single, fine, pairs = full.take([3, 4]), full.take([2]), full.take([0, 1]), full.take([5, 6, 7])
    return dps.Composite([coarse, single, fine, pairs], weights=[4.0, 3.0, fine_weight, 1.0])


def test_one_way_estimate_of_a_tree_is_the_least_squares_fit_of_both_levels():
    """The fine cells' estimate from a coarse and a fine block is the generalised least-squares
    solution (checked against scipy's lstsq on the whitened system), its distribution keeps the
    coarse shares of the projected coarse sums, and a column with one block is unchanged."""
    import scipy.linalg

    from opendp_sketch.estimators.synthetic import _one_way_estimates, _simplex_projection

    fm = tree_map()
    rng = np.random.default_rng(4)
    X = rng.beta(2, 5, size=(5000, 3))
    target = np.asarray(fm.fixed_sum(X), dtype=np.float64) * fm.unit / X.shape[0]
    target = target + rng.normal(0, 0.02, target.size) * np.repeat(
        fm.weights, [m.num_features for m in fm.maps]
    )
    var = np.full(target.size, 4e-4)
    est = {column: rest for _, column, *rest in _one_way_estimates(fm, target, var)}
    assert sorted(est) == [0, 1, 2]
    offsets = {m_i: b.offset for m_i, b in enumerate(fm.blocks)}
    for j in (0, 1):
        offset, size, y, t, v, two_levels = est[j]
        assert size == 16 and offset == offsets[2] + 16 * j and two_levels
        y_fine = target[offset : offset + 16] / 1.0
        y_coarse = target[offsets[0] + 4 * j : offsets[0] + 4 * j + 4] / 4.0
        A = np.kron(np.eye(4), np.ones((1, 4)))
        # whitened: fine rows at σ = 0.02 / 1, coarse rows at σ = 0.02 / 4
        M = np.vstack([np.eye(16) / 0.02, A / (0.02 / 4)])
        b = np.concatenate([y_fine / 0.02, y_coarse / (0.02 / 4)])
        np.testing.assert_allclose(y, scipy.linalg.lstsq(M, b)[0], atol=1e-10)
        shares = _simplex_projection(A @ y)
        np.testing.assert_allclose(A @ t, shares, atol=1e-12)
        assert t.min() >= 0 and abs(t.sum() - 1) < 1e-12
        assert v < 4e-4  # two levels: less noise per fine cell than the fine block alone
    offset, size, y, t, v, two_levels = est[2]
    np.testing.assert_allclose(y, target[offset : offset + 16] / 3.0)
    np.testing.assert_allclose(t, _simplex_projection(y))
    assert not two_levels and v == pytest.approx(4e-4 / 9)


def test_one_way_estimate_keeps_a_discrete_column_off_cells_without_values():
    """A fine cell holding none of a discrete column's values gets no mass, and never raises on
    NaN sums (post-processing of any release)."""
    from opendp_sketch.estimators.synthetic import _one_way_estimates

    fm = tree_map()
    target = np.full(fm.num_features, 1.0 / 16)
    target[3] = np.nan
    values = np.array([0.0, 0.25, 0.5, 0.75, 1.0])  # 5 values: fine cells 0, 4, 8, 12 and 15
    est = {
        column: rest
        for _, column, *rest in _one_way_estimates(fm, target, np.ones_like(target), discrete={0: values})
    }
    t = est[0][3]
    assert np.flatnonzero(t > 0).tolist() == [0, 4, 8, 12, 15] and abs(t.sum() - 1) < 1e-12
    assert all(np.isfinite(r[3]).all() for r in est.values())


def test_tree_decodes_the_grid_from_the_coarse_level(table):
    """An exact sketch of a tree map decodes each column's coarse cells to the data's, and with
    noisy fine cells the coarse shares follow the low-noise coarse level: the decoded 4-cell
    marginals are closer to the data than those of the fine level alone."""
    fm = tree_map()
    exact = dps.M2M(exact_sketch(fm, table), seed=0)
    edges = np.linspace(0, 1, 5)
    for j in (0, 1):
        truth = np.histogram(table[:, j], bins=edges)[0] / table.shape[0]
        got = np.histogram(exact.samples[:, j], bins=edges, weights=exact.weights)[0]
        np.testing.assert_allclose(got, truth, atol=2e-3)
    # noisy fine cells (σ = 60 rows per fine cell), nearly exact coarse ones (σ = 60 / 4 / 4)
    rng = np.random.default_rng(8)
    s = np.asarray(fm.fixed_sum(table), dtype=np.float64) * fm.unit
    noisy = s + rng.normal(0, 60.0, s.size)
    sk = dps.Sketch(
        feature_map=fm,
        sum_units=np.rint(noisy / fm.unit).astype(np.int64),
        count=table.shape[0],
        noise={"mechanism": "gaussian", "sum_variance": 3600.0, "count_variance": 1.0},
        bounds=BOX,
        column_names=["a", "b", "c"],
    )
    est = dps.M2M(sk, seed=0)
    fine_only = noisy[fm.blocks[2].offset : fm.blocks[2].offset + 16].reshape(4, 4).sum(1) / table.shape[0]
    truth = np.histogram(table[:, 0], bins=edges)[0] / table.shape[0]
    got = np.histogram(est.samples[:, 0], bins=edges, weights=est.weights)[0]
    assert np.abs(got - truth).sum() < 0.5 * np.abs(fine_only - truth).sum()


# -- decode once: the fitted decoder is cached by the sketch's digest (issue 39, item 7) -------
def _schema_sketch(seed: int = 0):
    import polars as pl

    rng = np.random.default_rng(seed)
    t = pl.DataFrame({"age": rng.integers(18, 90, 5000), "cut": rng.choice(["Fair", "Ideal"], 5000)})
    schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"]})
    return dps.release_sketch(t, schema=schema, epsilon=1.0)


def test_a_sketch_is_decoded_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENDP_SKETCH_CACHE", str(tmp_path))
    sk = _schema_sketch()
    first, second = dps.M2M(sk), dps.M2M(sk)
    assert not first.decoder.from_cache_ and second.decoder.from_cache_
    assert np.array_equal(first.samples, second.samples) and np.array_equal(first.weights, second.weights)
    assert np.array_equal(first.mean(), second.mean(), equal_nan=True)
    path = tmp_path / "s.sketch"
    sk.save(path)
    assert dps.M2M(dps.Sketch.load(path)).decoder.from_cache_  # the same file, loaded again
    assert not dps.M2M(sk, n_samples=5000).decoder.from_cache_  # another option: another entry
    assert not dps.M2M(_schema_sketch(1)).decoder.from_cache_  # another release: a miss


def test_the_cache_can_be_turned_off_and_never_fails(tmp_path, monkeypatch):
    sk = _schema_sketch()
    monkeypatch.setenv("OPENDP_SKETCH_CACHE", "off")
    assert not dps.M2M(sk).decoder.from_cache_ and not dps.M2M(sk).decoder.from_cache_
    monkeypatch.setenv("OPENDP_SKETCH_CACHE", str(tmp_path))
    dps.M2M(sk)
    (tmp_path / "decoders.sqlite").write_bytes(b"not a database")  # corrupted: a miss, no error
    assert not dps.M2M(sk).decoder.from_cache_
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    monkeypatch.setenv("OPENDP_SKETCH_CACHE", str(blocked / "sub"))  # cannot be created
    assert not dps.M2M(sk).decoder.from_cache_
