"""Distance sums: least-squares trees, exact recovery and approximation bounds on noise-free
sketches, queries outside the box, linearity, calibrated error bars, private accuracy, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.estimators.distance import (
    L1DistanceSum,
    SquaredL2DistanceSum,
    consistent_leaves,
    interval_offsets,
)

METHODS = ("consistent", "geometric", "leaves")
LO, HI = np.array([0.0, -2.0]), np.array([1.0, 2.0])


def exact_sketch(fm, X, noise=None):
    """The noise-free sketch of ``X`` (what a release computes before adding noise)."""
    return dps.Sketch(
        feature_map=fm,
        sum_units=np.array(fm.fixed_sum(X), dtype=np.int64),
        count=X.shape[0],
        noise=noise or {},
    )


def l1_truth(X, Q):
    return np.abs(X[:, None, :] - Q[None, :, :]).sum(axis=(0, 2))


def tree_matrix(levels):
    """Node-by-leaf incidence ``A`` of one heap-ordered tree."""
    N = 1 << levels
    A = np.zeros((2 * N - 1, N))
    for level in range(levels + 1):
        for p in range(1 << level):
            A[(1 << level) - 1 + p, p << (levels - level) : (p + 1) << (levels - level)] = 1.0
    return A


@pytest.fixture(scope="module")
def trees():
    return dps.DyadicTrees(bounds=(LO.tolist(), HI.tolist()), levels=5)


@pytest.fixture(scope="module")
def centred(trees):
    """800 rows on leaf centres of the 2-D trees."""
    rng = np.random.default_rng(5)
    N = 1 << trees.levels
    leaves = rng.integers(0, N, size=(800, 2))
    return LO + (leaves + 0.5) * (HI - LO) / N


def edge_queries(rng, k=60):
    """Queries on leaf edges of the 2-D trees, inside and outside the box."""
    N = 32
    edges = rng.integers(-40, N + 41, size=(k, 2))
    return LO + edges * (HI - LO) / N


# -- the least-squares tree -----------------------------------------------------------------------


def test_consistent_leaves_are_the_least_squares_fit():
    rng = np.random.default_rng(0)
    A = tree_matrix(4)
    y = rng.normal(20.0, 7.0, size=(3, A.shape[0]))
    fit = consistent_leaves(y, 4)
    np.testing.assert_allclose(fit, np.linalg.lstsq(A, y.T, rcond=None)[0].T, atol=1e-10)
    # exact counts are a fixed point
    c = rng.integers(0, 50, size=A.shape[1]).astype(float)
    np.testing.assert_allclose(consistent_leaves(A @ c, 4), c, atol=1e-10)


def test_interval_offsets_grow_by_at_most_alpha():
    a = interval_offsets(0.1, 1024)
    assert a[0] == 0 and a[-2] < 1024 <= a[-1]
    w = np.diff(a)
    assert (w >= 1).all() and (w - 1 <= 0.1 * a[:-1]).all()
    assert len(a) < 80  # geometric, not one interval per leaf


# -- noise-free sketches ----------------------------------------------------------------------------


def test_leaf_methods_are_exact_for_leaf_centres_and_edge_queries(trees, centred):
    Q = edge_queries(np.random.default_rng(1))
    sk = exact_sketch(trees, centred)
    truth = l1_truth(centred, Q)
    for method in ("consistent", "leaves"):
        np.testing.assert_allclose(L1DistanceSum(sk, method=method)(Q), truth, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("alpha", [0.1, 0.3, 1.0])
def test_geometric_error_is_within_its_bound_on_leaf_centres(trees, centred, alpha):
    # a multi-leaf interval k leaves wide, a_k leaves away, moves a centred row by ≤ (w - 1)δ/2
    # ≤ α·a_k·δ/2 ≤ α·|x - q|/2, so the error is at most α/2 of the true sum
    Q = edge_queries(np.random.default_rng(2))
    truth = l1_truth(centred, Q)
    est = L1DistanceSum(exact_sketch(trees, centred), method="geometric", alpha=alpha)(Q)
    err = np.abs(est - truth)
    assert (err <= alpha / 2 * truth + 1e-9).all()
    assert err.max() > 0  # the bound is exercised, not trivially met


def test_error_bounds_for_any_data_and_queries(trees):
    rng = np.random.default_rng(3)
    X = rng.uniform(LO, HI, size=(500, 2))
    Q = rng.uniform(LO - 1.5, HI + 1.5, size=(80, 2))
    sk = exact_sketch(trees, X)
    truth = l1_truth(X, Q)
    # ≤ δ/2 per row and coordinate outside q's leaf, ≤ δ inside it
    disc = X.shape[0] * ((HI - LO) / 32).sum()
    for method in ("consistent", "leaves"):
        assert (np.abs(L1DistanceSum(sk, method=method)(Q) - truth) <= disc).all()
    alpha = 0.2
    est = L1DistanceSum(sk, method="geometric", alpha=alpha)(Q)
    assert (np.abs(est - truth) <= disc + alpha / 2 * truth).all()


def test_queries_outside_the_box(trees, centred):
    sk = exact_sketch(trees, centred)
    far = np.array([[-10.0, 0.0], [0.5, 7.5], [3.0, -4.0], [1.0, 2.0], [0.0, -2.0]])
    truth = l1_truth(centred, far)
    np.testing.assert_allclose(L1DistanceSum(sk)(far), truth, rtol=1e-12)
    # far away, the sum is n·|q - mean| per coordinate
    mean = centred.mean(axis=0)
    assert L1DistanceSum(sk)(np.array([[-10.0, 0.0]]))[0] == pytest.approx(
        800 * (mean[0] + 10) + np.abs(centred[:, 1]).sum(), rel=1e-12
    )
    geo = L1DistanceSum(sk, method="geometric", alpha=0.1)(far)
    assert (np.abs(geo - truth) <= 0.05 * truth + 1e-9).all()


def test_one_dimension_accepts_flat_queries_and_mean_divides_by_the_count():
    fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=3, dim=1)
    X = np.array([[0.0625], [0.3125], [0.9375], [0.9375]])
    sk = exact_sketch(fm, X)
    est = L1DistanceSum(sk)
    q = np.array([0.0, 0.25, 1.0, -1.0])
    np.testing.assert_allclose(est(q), np.abs(X - q).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(est(q[:, None]), est(q))
    np.testing.assert_allclose(est.mean(q), est(q) / 4)
    assert est(np.empty((0, 1))).shape == (0,)


def test_query_inside_a_leaf_takes_the_leaf_as_uniform():
    fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=2, dim=1)
    sk = exact_sketch(fm, np.full((8, 1), 0.125))  # all in leaf [0, 0.25)
    q = 0.05
    assert L1DistanceSum(sk)([q])[0] == pytest.approx(8 * (q**2 + (0.25 - q) ** 2) / 0.5)


# -- linearity and error bars ---------------------------------------------------------------------


def test_l1_estimate_is_linear_in_the_sketch(trees):
    rng = np.random.default_rng(4)
    m = trees.num_features
    a, b = rng.integers(-30, 300, m), rng.integers(-30, 300, m)
    Q = rng.uniform(LO - 1, HI + 1, size=(25, 2))

    def est(units, method):
        return L1DistanceSum(dps.Sketch(feature_map=trees, sum_units=units, count=100), method=method)(Q)

    for method in METHODS:
        np.testing.assert_allclose(est(a + b, method), est(a, method) + est(b, method), rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(est(3 * a, method), 3 * est(a, method), rtol=1e-9, atol=1e-6)
    # merging two releases of disjoint data adds their estimates
    ska = dps.Sketch(feature_map=trees, sum_units=a, count=100, bounds=(LO.tolist(), HI.tolist()))
    skb = dps.Sketch(feature_map=trees, sum_units=b, count=50, bounds=(LO.tolist(), HI.tolist()))
    np.testing.assert_allclose(
        L1DistanceSum(ska.merge(skb))(Q), L1DistanceSum(ska)(Q) + L1DistanceSum(skb)(Q), rtol=1e-9, atol=1e-6
    )


def test_reported_std_matches_the_spread_of_the_estimates():
    fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=4, dim=2)
    rng = np.random.default_rng(6)
    sigma, draws = 40.0, 400
    noise = {"sum_variance": sigma**2 + 1 / 12}  # integer-rounded Gaussian noise
    Q = np.array([[0.1, 0.5], [0.5, 0.93], [-0.2, 1.4]])
    zero = np.zeros(fm.num_features, dtype=np.int64)
    for method in METHODS:
        _, std = L1DistanceSum(
            dps.Sketch(feature_map=fm, sum_units=zero, count=1, noise=noise), method=method
        )(Q, return_std=True)
        samples = np.array(
            [
                L1DistanceSum(
                    dps.Sketch(
                        feature_map=fm,
                        sum_units=np.rint(rng.normal(0, sigma, fm.num_features)).astype(np.int64),
                        count=1,
                    ),
                    method=method,
                )(Q)
                for _ in range(draws)
            ]
        )
        np.testing.assert_allclose(samples.std(axis=0), std, rtol=0.15, err_msg=method)
    A = tree_matrix(4)
    est = L1DistanceSum(dps.Sketch(feature_map=fm, sum_units=zero, count=1, noise=noise))
    w = np.concatenate([est._leaf_weights(Q[:, j], j) for j in range(2)], axis=1)
    G = np.kron(np.eye(2), np.linalg.inv(A.T @ A))
    exact = np.sqrt(noise["sum_variance"] * np.einsum("qi,ij,qj->q", w, G, w))
    np.testing.assert_allclose(est(Q, return_std=True)[1], exact, rtol=1e-10)


def test_noise_free_sketch_reports_zero_std(trees, centred):
    value, std = L1DistanceSum(exact_sketch(trees, centred))(
        edge_queries(np.random.default_rng(7), 5), return_std=True
    )
    assert value.shape == std.shape == (5,) and (std == 0).all()


# -- private releases -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uniform_1d():
    return np.random.default_rng(8).uniform(size=(20_000, 1))


def test_private_l1_is_accurate_and_its_error_bars_hold(uniform_1d):
    fm = dps.DyadicTrees(bounds=(0.0, 1.0), levels=8, dim=1)
    sk = dps.release_sketch(uniform_1d, fm, bounds=(0.0, 1.0), epsilon=1.0)
    Q = np.linspace(-0.2, 1.2, 141)
    truth = l1_truth(uniform_1d, Q[:, None])
    value, std = L1DistanceSum(sk)(Q, return_std=True)
    # measured mean relative error ≈ 5e-4 (max 1.5e-3 over 40 releases); 0.5 % is generous
    assert np.mean(np.abs(value - truth) / truth) < 5e-3
    # the estimator is linear: value − noise-free value is the noise term the std describes
    noise_free = L1DistanceSum(exact_sketch(fm, uniform_1d))(Q)
    assert (np.abs(value - noise_free) <= 8 * std).all()
    mean = L1DistanceSum(sk).mean(Q)
    np.testing.assert_allclose(mean, value / sk.count)
    # the count's Laplace noise (scale 50) dominates here: measured ≈ 2e-3
    assert np.mean(np.abs(mean - truth / 20_000) / (truth / 20_000)) < 5e-2
    geo = L1DistanceSum(sk, method="geometric", alpha=0.1)(Q)
    assert np.mean(np.abs(geo - truth) / truth) < 0.05  # measured ≈ 5e-3


def test_private_squared_l2_is_accurate(uniform_1d):
    fm = dps.Moments(dim=1, radius=0.5, center=[0.5])
    sk = dps.release_sketch(uniform_1d, fm, bounds=(0.0, 1.0), epsilon=1.0)
    Q = np.linspace(-1.0, 2.0, 61)
    truth = ((uniform_1d - Q[None, :]) ** 2).sum(axis=0)
    value, std = SquaredL2DistanceSum(sk)(Q, return_std=True)
    # measured ≈ 2e-3 (max 6e-3 over 40 releases), dominated by the count's Laplace noise
    assert np.mean(np.abs(value - truth) / truth) < 3e-2
    assert (np.abs(value - truth) <= 10 * std + 1e-6 * truth).all()  # Laplace tails: 10 std


# -- squared ℓ2 -----------------------------------------------------------------------------------


def test_squared_l2_is_exact_inside_the_ball():
    rng = np.random.default_rng(9)
    c = np.array([1.0, -1.0, 0.5])
    X = c + rng.uniform(-1, 1, size=(300, 3))  # ‖x - c‖ ≤ √3 < 2
    sk = exact_sketch(dps.Moments(dim=3, radius=2.0, center=c), X)
    Q = rng.uniform(-5, 5, size=(40, 3))
    truth = ((X[:, None, :] - Q[None]) ** 2).sum(axis=(0, 2))
    est = SquaredL2DistanceSum(sk)
    np.testing.assert_allclose(est(Q), truth, rtol=1e-6)
    np.testing.assert_allclose(est.mean(Q), truth / 300, rtol=1e-6)
    value, std = est(Q, return_std=True)
    assert (std == 0).all()


def test_squared_l2_counts_rows_outside_the_ball_at_their_projection():
    X = np.array([[0.0, 0.0], [6.0, 8.0]])  # the second row is at distance 10 > r = 5
    sk = exact_sketch(dps.Moments(dim=2, radius=5.0), X)
    q = np.array([[1.0, 1.0]])
    projected = np.array([[0.0, 0.0], [3.0, 4.0]])
    assert SquaredL2DistanceSum(sk)(q)[0] == pytest.approx(((projected - q) ** 2).sum(), rel=1e-6)


def test_squared_l2_is_linear_and_its_std_has_the_stated_form():
    fm = dps.Moments(dim=2, radius=1.0)
    rng = np.random.default_rng(10)
    a, b = rng.integers(-(10**8), 10**8, 3), rng.integers(-(10**8), 10**8, 3)
    Q = rng.normal(size=(7, 2))

    def est(units, count, **kw):
        return SquaredL2DistanceSum(dps.Sketch(feature_map=fm, sum_units=units, count=count, **kw))

    np.testing.assert_allclose(est(a + b, 30)(Q), est(a, 10)(Q) + est(b, 20)(Q), rtol=1e-9)
    noisy = est(a, 10, noise={"sum_variance": 4.0, "count_variance": 9.0})
    sq = (Q**2).sum(axis=1)
    np.testing.assert_allclose(noisy(Q, return_std=True)[1], np.sqrt(4 * (1 + 4 * sq) + 9 * sq**2))
    np.testing.assert_allclose(noisy.mean(Q, return_std=True)[1], np.sqrt(4 * (1 + 4 * sq)) / 10)


# -- bad input --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def l1_est(trees, centred):
    return L1DistanceSum(exact_sketch(trees, centred))


@pytest.fixture(scope="module")
def l2_est():
    return SquaredL2DistanceSum(exact_sketch(dps.Moments(dim=2, radius=1.0), np.zeros((3, 2))))


@pytest.mark.parametrize("which", ["l1", "l2"])
@pytest.mark.parametrize(
    "queries, match",
    [
        (np.zeros((4, 3)), r"shape \(q, 2\), got \(4, 3\)"),
        (np.zeros(2), r"shape \(q, 2\), got \(2,\).*reshape"),
        (np.zeros((2, 2, 2)), r"shape \(q, 2\)"),
        (np.array([[0.1, np.nan]]), "finite"),
        (np.array([[np.inf, 0.0]]), "finite"),
        ([["a", "b"]], "numbers"),
    ],
)
def test_bad_queries_are_refused(l1_est, l2_est, which, queries, match):
    est = l1_est if which == "l1" else l2_est
    with pytest.raises(ValueError, match=match):
        est(queries)
    with pytest.raises(ValueError, match=match):
        est.mean(queries)


def test_sketches_of_the_wrong_kind_are_refused(rff2d, hist2d, trees):
    rff = dps.Sketch(feature_map=rff2d, sum_units=np.zeros(rff2d.num_features, dtype=np.int64), count=5)
    with pytest.raises(ValueError, match="L1DistanceSum needs a DyadicTrees sketch, got RFF"):
        L1DistanceSum(rff)
    hist = dps.Sketch(feature_map=hist2d, sum_units=np.zeros(hist2d.num_features, dtype=np.int64), count=5)
    with pytest.raises(ValueError, match="L1DistanceSum needs a DyadicTrees sketch, got Histogram"):
        L1DistanceSum(hist)
    tree = dps.Sketch(feature_map=trees, sum_units=np.zeros(trees.num_features, dtype=np.int64), count=5)
    with pytest.raises(ValueError, match="SquaredL2DistanceSum needs a Moments sketch, got DyadicTrees"):
        SquaredL2DistanceSum(tree)
    with pytest.raises(ValueError, match="needs a Sketch, got ndarray"):
        L1DistanceSum(np.zeros(3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "tree"}, "method"),
        ({"alpha": 0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"alpha": "big"}, "alpha"),
    ],
)
def test_bad_parameters_are_refused(trees, kwargs, match):
    sk = dps.Sketch(feature_map=trees, sum_units=np.zeros(trees.num_features, dtype=np.int64), count=5)
    with pytest.raises(ValueError, match=match):
        L1DistanceSum(sk, **kwargs)


@pytest.mark.parametrize("count", [0, -3])
def test_mean_needs_a_positive_noisy_count(trees, count):
    l1 = L1DistanceSum(
        dps.Sketch(feature_map=trees, sum_units=np.zeros(trees.num_features, dtype=np.int64), count=count)
    )
    fm = dps.Moments(dim=2, radius=1.0)
    l2 = SquaredL2DistanceSum(dps.Sketch(feature_map=fm, sum_units=np.zeros(3, dtype=np.int64), count=count))
    q = np.zeros((1, 2))
    for est in (l1, l2):
        assert est(q).shape == (1,)  # the sums are still defined
        with pytest.raises(ValueError, match=rf"noisy count \({count}\) is not positive"):
            est.mean(q)


def test_squared_l2_needs_the_squared_norm_feature():
    fm = dps.Moments(dim=2, radius=1.0, squared_norm=False)
    sk = dps.Sketch(fm, np.zeros(2, dtype=np.int64), 10, bounds=([0.0, 0.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match="squared_norm=True"):
        SquaredL2DistanceSum(sk)
