"""KDE from RFF and RACE sketches: the formulas on noise-free sketches, the released noise scale
against the sensitivity, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import opendp_sketch as dps


def exact_sketch(fm, X, lo=0.0, hi=1.0):
    d = fm.input_dim
    return dps.Sketch(fm, np.array(fm.fixed_sum(X), dtype=np.int64), X.shape[0], bounds=([lo] * d, [hi] * d))


@pytest.fixture(scope="module")
def blob() -> np.ndarray:
    return np.random.default_rng(5).normal(0.4, 0.08, size=(3000, 2)).clip(0, 1)


def test_rff_kde_is_the_feature_inner_product_and_close_to_the_kernel(blob):
    fm = dps.RFF(dim=2, num_features=4000, bandwidth=0.15, seed=0)
    kde = dps.KDE(exact_sketch(fm, blob))
    Q = np.random.default_rng(1).uniform(size=(20, 2))
    direct = fm.transform(Q) @ fm.transform(blob).sum(axis=0) / (fm.num_frequencies * blob.shape[0])
    np.testing.assert_allclose(kde(Q), direct, atol=1e-5)  # fixed-point sum vs float64
    exact = kde.kernel(blob[None, :, :], Q[:, None, :]).mean(axis=1)
    np.testing.assert_allclose(kde(Q), exact, atol=0.05)  # RFF error ~ 1/√m'


def test_race_kde_counts_collisions_and_estimates_the_collision_kernel(blob):
    fm = dps.RACE(dim=2, rows=400, buckets=64, bucket_width=0.3, seed=0)
    kde = dps.KDE(exact_sketch(fm, blob))
    Q = np.random.default_rng(2).uniform(size=(15, 2))
    hits = (fm._flat(blob)[None, :, :] == fm._flat(Q)[:, None, :]).mean(axis=(1, 2))
    np.testing.assert_allclose(kde(Q), hits, rtol=1e-12)
    exact = kde.kernel(blob[None, :, :], Q[:, None, :]).mean(axis=1)
    np.testing.assert_allclose(kde(Q), exact, atol=0.04)  # R = 400 rows, plus 1/W hash collisions


def test_median_of_means_resists_a_corrupted_row(blob):
    fm = dps.RACE(dim=2, rows=64, buckets=32, bucket_width=0.3, seed=3)
    sk = exact_sketch(fm, blob)
    q = np.array([[0.4, 0.4]])
    bad = sk.sum_units.copy()
    bad[fm._flat(q)[0, :4]] += 10**6  # four rows' buckets hit by huge (e.g. noise) values
    corrupted = dps.Sketch(fm, bad, sk.count, bounds=sk.bounds)
    clean = dps.KDE(sk)(q)[0]
    assert abs(dps.KDE(corrupted, aggregate="median_of_means", groups=16)(q)[0] - clean) < 0.1
    assert abs(dps.KDE(corrupted)(q)[0] - clean) > 10


def test_density_integrates_to_one_for_a_gaussian_rff_sketch():
    X = np.random.default_rng(4).normal(0.5, 0.05, size=(4000, 1))
    fm = dps.RFF(dim=1, num_features=2000, bandwidth=0.05, seed=0)
    kde = dps.KDE(exact_sketch(fm, X))
    grid = np.linspace(0, 1, 2001)
    mass = np.trapezoid(kde(grid, density=True), grid)
    assert mass == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="density=True needs an RFF"):
        dps.KDE(exact_sketch(dps.RACE(dim=1, rows=4, buckets=4, seed=0), X))(grid, density=True)


@pytest.mark.parametrize(
    "fm",
    [
        dps.RACE(dim=2, rows=50, buckets=20, seed=0),
        dps.RFF(dim=2, num_features=100, seed=0),
        dps.ByClass(dps.RACE(dim=2, rows=30, buckets=10, seed=0), 3),
    ],
    ids=lambda fm: type(fm).__name__,
)
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_released_noise_scale_matches_the_sensitivity(fm, epsilon, blob):
    """The RACE paper's public code used R/(Nε): ours must be ≥ Δ₁/ε on the raw counts."""
    X = blob if not isinstance(fm, dps.ByClass) else np.column_stack([blob, np.arange(blob.shape[0]) % 3])
    sk = dps.release_sketch(
        X, fm, bounds=(0, 1) if not isinstance(fm, dps.ByClass) else ([0, 0, 0], [1, 1, 2]), epsilon=epsilon
    )
    share = 1 - sk.noise["count_fraction"]
    delta_features = fm.sensitivity(1) / fm.gain  # in the units of Sketch.sum
    assert sk.noise["sum_scale"] >= delta_features / (epsilon * share) * (1 - 1e-12)
    assert sk.noise["sum_scale"] <= delta_features / (epsilon * share) * 1.01  # not needlessly noisy
    label = {"label": 0} if isinstance(fm, dps.ByClass) else {}
    kde = dps.KDE(sk, **label)
    terms = (
        fm.feature_map.rows
        if isinstance(fm, dps.ByClass)
        else getattr(fm, "rows", getattr(fm, "num_frequencies", None))
    )
    assert kde.noise_std() == pytest.approx(np.sqrt(sk.sum_variance / terms) / kde.n_hat)


def test_anomaly_score_and_mode(blob):
    fm = dps.RFF(dim=2, num_features=1000, bandwidth=0.1, seed=0)
    kde = dps.KDE(dps.release_sketch(blob, fm, bounds=(0, 1), epsilon=5.0))
    scores = kde.anomaly_score([[0.4, 0.4], [0.95, 0.05]])
    assert scores[1] > scores[0]
    np.testing.assert_allclose(kde.mode(), [0.4, 0.4], atol=0.05)
    with pytest.raises(ValueError, match="n_starts"):
        kde.mode(n_starts=0)


def test_byclass_kde_reads_one_class(blob):
    y = (blob[:, 0] > 0.4).astype(float)
    fm = dps.ByClass(dps.RFF(dim=2, num_features=500, bandwidth=0.1, seed=0), 2)
    sk = exact_sketch(fm, np.column_stack([blob, y]))
    k1 = dps.KDE(sk, label=1)
    assert k1.n_hat == y.sum()
    direct = dps.KDE(exact_sketch(fm.feature_map, blob[y == 1]))
    np.testing.assert_allclose(k1([[0.5, 0.4]]), direct([[0.5, 0.4]]), atol=1e-6)


def test_bad_input_is_refused(blob):
    sk = exact_sketch(dps.RFF(dim=2, num_features=10, seed=0), blob)
    kde = dps.KDE(sk)
    with pytest.raises(ValueError, match=r"queries must have shape \(q, 2\)"):
        kde(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        kde([[np.nan, 0.1]])
    with pytest.raises(ValueError, match="KDE needs an RFF or RACE sketch, got Histogram"):
        dps.KDE(exact_sketch(dps.Histogram(bounds=(0, 1), bins=4, dim=2), blob))
    with pytest.raises(ValueError, match="median_of_means applies to RACE"):
        dps.KDE(sk, aggregate="median_of_means")
    with pytest.raises(ValueError, match="aggregate"):
        dps.KDE(sk, aggregate="max")
    with pytest.raises(ValueError, match="label= applies only"):
        dps.KDE(sk, label=0)
    by = dps.ByClass(dps.RFF(dim=2, num_features=10, seed=0), 2)
    with pytest.raises(ValueError, match="needs label="):
        dps.KDE(exact_sketch(by, np.column_stack([blob, np.zeros(len(blob))])))
    race = exact_sketch(dps.RACE(dim=2, rows=4, buckets=4, seed=0), blob)
    with pytest.raises(ValueError, match="groups"):
        dps.KDE(race, aggregate="median_of_means", groups=5)
    empty = dps.Sketch(sk.feature_map, sk.sum_units, -2, bounds=sk.bounds)
    with pytest.raises(ValueError, match="not positive"):
        dps.KDE(empty)
    with pytest.raises(ValueError, match="must be a Sketch"):
        dps.KDE(blob)


def test_a_schema_kde_reads_query_rows_in_the_tables_units():
    """Issue 39, item 1: queries as rows in the table's units and labels."""
    import polars as pl

    rng = np.random.default_rng(2)
    table = pl.DataFrame(
        {"age": rng.normal(40, 5, 20_000).clip(18, 90), "cut": rng.choice(["a", "b"], 20_000, p=[0.8, 0.2])}
    )
    schema = dps.Schema({"age": (18, 90), "cut": ["a", "b"]})
    sk = dps.release_sketch(
        table, dps.RFF(dim=2, num_features=400, bandwidth=0.1, seed=0), schema=schema, epsilon=5.0
    )
    kde = dps.KDE(sk)
    dense, sparse = kde(pl.DataFrame({"age": [40.0, 85.0], "cut": ["a", "a"]}))
    assert dense > 5 * max(sparse, kde.noise_std())  # 40 years is where the rows are, 85 is not
    assert np.allclose(kde([[40.0, "a"], [85.0, "a"]]), [dense, sparse])
    with pytest.raises(ValueError, match=r"the rows lack columns \['cut'\]"):
        kde(pl.DataFrame({"age": [40.0]}))
    mode = kde.schema_.decode([kde.mode()]).row(0)
    assert 30 < mode[0] < 50 and mode[1] == "a"


def test_the_old_estimator_keyword_still_works_for_one_release_with_a_warning():
    fm = dps.RACE(dim=2, rows=20, buckets=50, bucket_width=0.3, seed=0)
    X = np.random.default_rng(0).uniform(0, 1, size=(2000, 2))
    sk = dps.release_sketch(X, fm, bounds=(0, 1), epsilon=5.0)
    with pytest.warns(DeprecationWarning, match="aggregate="):
        kde = dps.KDE(sk, estimator="median_of_means", groups=4)
    assert kde.aggregate == "median_of_means"
    with pytest.warns(DeprecationWarning, match="aggregate="):
        assert dps.KDEClassifier(estimator="mean").aggregate == "mean"
