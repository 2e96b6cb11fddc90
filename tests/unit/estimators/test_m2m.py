"""M2M: exact recovery where the query is in the span of the map, accuracy under noise, λ rules,
error bars, Polars queries and bad input."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.estimators import m2m as m2m_module


def exact_sketch(fm, X, bounds, names=None, noise=None):
    """A noise-free sketch of ``X`` (what the release computes before adding noise)."""
    return dps.Sketch(
        feature_map=fm,
        sum_units=np.array(fm.fixed_sum(X), dtype=np.int64),
        count=X.shape[0],
        noise=noise or {},
        bounds=bounds,
        column_names=names,
    )


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.column_stack([rng.beta(2, 5, 4000), rng.uniform(0, 1, 4000)])


BOX = ([0.0, 0.0], [1.0, 1.0])


def test_moments_mean_is_exact_when_the_query_is_in_the_span(data):
    sk = exact_sketch(dps.Moments(dim=2, radius=2.0), data, BOX)
    est = dps.M2M(sk, n_samples=5000, lam=0.0, method="ridge")
    np.testing.assert_allclose(est.mean(), data.mean(axis=0), rtol=1e-6)


def test_histogram_cdf_and_count_at_bin_edges_are_exact(data):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    sk = exact_sketch(fm, data, BOX, ["a", "b"])
    est = dps.M2M(sk, n_samples=20_000, lam=0.0, method="ridge")
    edges = np.linspace(0, 1, 9)[1:]
    truth = (data[:, 0][:, None] < edges).mean(axis=0)
    np.testing.assert_allclose(est.cdf("a", edges), truth, atol=1e-9)
    np.testing.assert_allclose(est.count(lambda X: X[:, 1] < 0.5), (data[:, 1] < 0.5).sum(), rtol=1e-9)
    assert est.count(pl.col("b") < 0.5) == pytest.approx((data[:, 1] < 0.5).sum(), rel=1e-9)


def test_polars_expressions_match_callables_and_the_weighted_frame(data):
    sk = exact_sketch(dps.RFF(dim=2, num_features=100, bandwidth=0.5, seed=1), data, BOX, ["a", "b"])
    est = dps.M2M(sk, n_samples=10_000)
    by_expr = est.expect(pl.col("a") * pl.col("b"))
    by_fn = est.expect(lambda X: X[:, 0] * X[:, 1])
    assert by_expr == pytest.approx(by_fn, rel=1e-12)
    assert type(by_expr) is float and type(est.count(pl.col("a") > 0.5)) is float
    frame = est.weighted_frame()
    assert frame.columns == ["a", "b", "weight"] and frame.height == 10_000
    assert float((frame["a"] * frame["b"] * frame["weight"]).sum()) == pytest.approx(by_fn, rel=1e-9)
    both = est.expect([pl.col("a"), pl.col("b") ** 2])
    np.testing.assert_allclose(both, [est.mean()[0], est.moment(2)[1]], rtol=1e-9)


def test_rff_noise_free_statistics_are_accurate(data):
    sk = exact_sketch(dps.RFF(dim=2, num_features=400, bandwidth=0.5, seed=0), data, BOX)
    est = dps.M2M(sk, n_samples=40_000)
    np.testing.assert_allclose(est.mean(), data.mean(axis=0), atol=2e-3)
    np.testing.assert_allclose(est.moment(2), (data**2).mean(axis=0), atol=3e-3)
    np.testing.assert_allclose(est.covariance(), np.cov(data.T, bias=True), atol=2e-3)
    med = est.quantile(0, [0.25, 0.5, 0.75])
    np.testing.assert_allclose(med, np.quantile(data[:, 0], [0.25, 0.5, 0.75]), atol=0.02)
    assert np.all(np.diff(med) > 0)


@pytest.mark.parametrize(
    "fm",
    [
        dps.QuantizedRFF(dim=2, num_features=400, bandwidth=0.5, seed=0),
        dps.RACE(dim=2, rows=40, buckets=20, bucket_width=0.5, seed=0),
        dps.DyadicTrees(bounds=(0, 1), levels=5, dim=2),
        dps.Histogram(bounds=(0, 1), bins=32, dim=2),
    ],
    ids=lambda fm: type(fm).__name__,
)
def test_every_map_gives_a_sensible_mean(fm, data):
    est = dps.M2M(exact_sketch(fm, data, BOX), n_samples=20_000)
    np.testing.assert_allclose(est.mean(), data.mean(axis=0), atol=0.02)


def test_private_rff_mean_error_on_random_uniform_data(rng):
    X = rng.uniform(size=(27_000, 10))
    fm = dps.RFF(dim=10, num_features=200, bandwidth=1.0, seed=0)
    sk = dps.release_sketch(X, fm, bounds=(0, 1), epsilon=1.0)
    mre = np.mean(np.abs(dps.M2M(sk).mean() - X.mean(axis=0)) / X.mean(axis=0))
    assert mre < 0.03  # typical 0.005; the paper reports 0.0096 at this setting


def test_lambda_rules_use_the_released_noise_and_count(data):
    noise = {"sum_variance": 8.0, "count_variance": 1.0}
    sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=8, dim=2), data, BOX, noise=noise)
    n = data.shape[0]
    assert dps.M2M(sk, n_samples=5000, lam="paper", method="ridge").lam == pytest.approx(8.0 / n)
    assert dps.M2M(sk, n_samples=5000, lam="theorem", method="ridge").lam == pytest.approx(8.0 / n**2)
    assert dps.M2M(sk, n_samples=5000, lam=0.25, method="ridge").lam == 0.25
    noisier = exact_sketch(sk.feature_map, data, BOX, noise={"sum_variance": 8e4})
    assert (
        dps.M2M(noisier, n_samples=5000, method="ridge").lam > dps.M2M(sk, n_samples=5000, method="ridge").lam
    )


def test_auto_lambda_minimises_the_public_risk(data):
    sk = exact_sketch(dps.RFF(dim=2, num_features=100, seed=0), data, BOX, noise={"sum_variance": 50.0})
    est = dps.M2M(sk, n_samples=10_000, method="ridge")
    design = est._design
    chosen = design.risk(np.array([est.lam]), est.noise_var, est.n_hat)[0]
    others = design.risk(est.lam * np.array([1e-3, 1e-1, 10.0, 1e3]), est.noise_var, est.n_hat)
    assert (chosen <= others).all()


def test_error_bar_is_the_norm_of_the_coefficients_times_the_noise(data):
    """The estimate is linear in the sketch: perturbing coordinate k moves it by a_k·unit/n̂."""
    fm = dps.Histogram(bounds=(0, 1), bins=6, dim=2)
    base = exact_sketch(fm, data, BOX, noise={"sum_variance": 4.0})
    est = dps.M2M(base, n_samples=5000, lam=1e-3, method="ridge")
    value, std = est.expect(lambda X: X[:, 0] ** 2, return_std=True)
    coef = []
    for k in range(fm.num_features):
        units = base.sum_units.copy()
        units[k] += 1000
        moved = dps.M2M(
            dps.Sketch(fm, units, base.count, base.noise, bounds=base.bounds),
            n_samples=5000,
            lam=1e-3,
            method="ridge",
        )
        coef.append((moved.expect(lambda X: X[:, 0] ** 2) - value) * base.n_hat / (1000 * fm.unit))
    assert std == pytest.approx(np.linalg.norm(coef) * 2.0 / base.n_hat, rel=1e-6)
    means, stds = est.mean(return_std=True)
    assert means.shape == stds.shape == (2,) and (stds > 0).all()


def test_count_variance_free_sketch_has_zero_error_bar(data):
    est = dps.M2M(
        exact_sketch(dps.Histogram(bounds=(0, 1), bins=4, dim=2), data, BOX), n_samples=2000, method="ridge"
    )
    assert est.cdf(1, [0.5], return_std=True)[1].tolist() == [0.0]


@pytest.mark.parametrize("method, atol", [("ridge", 1e-6), ("synthetic", 2e-3)])
def test_byclass_label_is_drawn_from_the_classes(method, atol, data):
    y = (data[:, 0] > 0.3).astype(float)
    fm = dps.ByClass(dps.RFF(dim=2, num_features=100, seed=0), 2)
    sk = exact_sketch(fm, np.column_stack([data, y]), ([0, 0, 0], [1, 1, 1]))
    est = dps.M2M(sk, n_samples=10_000, method=method)
    assert set(np.unique(est.samples[:, 2])) == {0.0, 1.0}
    assert est.columns == ["x0", "x1", "label"]
    # class counts are exact features: ridge reproduces them, the synthetic fit to its tolerance
    assert est.mean()[2] == pytest.approx(y.mean(), abs=atol)


def test_user_prior_and_discrete_columns(data):
    sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=4, dim=2), data, BOX, ["a", "b"])
    est = dps.M2M(
        sk, n_samples=1000, prior=lambda n, rng: rng.beta(2, 2, size=(n, 2)), discrete={"b": [0, 1]}
    )
    assert set(np.unique(est.samples[:, 1])) == {0.0, 1.0}
    with pytest.raises(ValueError, match="shape"):
        dps.M2M(sk, n_samples=1000, prior=lambda n, rng: rng.uniform(size=(n, 3)))
    with pytest.raises(ValueError, match="inside the bounds"):
        dps.M2M(sk, n_samples=1000, prior=lambda n, rng: rng.uniform(1, 2, size=(n, 2)))
    with pytest.raises(ValueError, match="discrete values"):
        dps.M2M(sk, n_samples=1000, discrete={"a": [2.0]})
    stored = np.random.default_rng(0).uniform(size=(1000, 2))
    kept = stored.copy()
    dps.M2M(sk, n_samples=1000, prior=lambda n, rng: stored, discrete={"b": [0, 1]})
    np.testing.assert_array_equal(stored, kept)  # the user's array is not written into


def test_the_design_is_shared_between_sketches_of_one_map(data):
    fm = dps.RFF(dim=2, num_features=50, seed=4)
    a = dps.M2M(exact_sketch(fm, data, BOX), n_samples=3000, method="ridge")
    b = dps.M2M(exact_sketch(fm, data[:100], BOX), n_samples=3000, method="ridge")
    c = dps.M2M(exact_sketch(fm, data, BOX), n_samples=3000, seed=1, method="ridge")
    assert a._design is b._design and a._design is not c._design
    assert not np.array_equal(a.samples, c.samples)


def test_repr(data):
    sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=4, dim=2), data, BOX)
    est = dps.M2M(sk, n_samples=1000)
    assert isinstance(est, dps.M2M) and "Histogram" in repr(est)


# -- bad input ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def est(data):
    return dps.M2M(
        exact_sketch(dps.Histogram(bounds=(0, 1), bins=4, dim=2), data, BOX, ["a", "b"]), n_samples=1000
    )


def test_unknown_columns_are_refused(est):
    with pytest.raises(
        ValueError, match=r"column \('c'\) is not in the sketch; its columns are \['a', 'b'\]"
    ):
        est.cdf("c", [0.5])
    with pytest.raises(ValueError, match="column index"):
        est.cdf(5, [0.5])
    with pytest.raises(ValueError, match="Polars expression could not be evaluated"):
        est.expect(pl.col("price") * 2)


def test_cdf_points_outside_the_box_are_0_or_1_and_nan_is_refused(est):
    inside = est.cdf("a", [0.5])[0]
    assert est.cdf("a", [-3.0, 0.5, 1.5, math.inf]).tolist() == [0.0, inside, 1.0, 1.0]
    assert est.cdf("a", [-math.inf]).tolist() == [0.0]
    iv = est.cdf("a", [-1.0, 0.5, 2.0], interval=0.95)
    assert iv.value[[0, 2]].tolist() == [0.0, 1.0] and iv.low[[0, 2]].tolist() == [0.0, 1.0]
    assert iv.high[[0, 2]].tolist() == [0.0, 1.0] and iv.supported[[0, 2]].all()
    ridge = dps.M2M(est.sketch, n_samples=1000, method="ridge")
    value, std = ridge.cdf("a", [-1.0, 2.0], return_std=True)
    assert value.tolist() == [0.0, 1.0] and std.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match=r"points of 'a' must be numbers \(not NaN\)"):
        est.cdf("a", [math.nan])
    with pytest.raises(ValueError, match="quantile levels"):
        est.quantile("a", [1.2])


def test_badly_shaped_queries_are_refused(est):
    with pytest.raises(ValueError, match="must be vectorised"):
        est.expect(lambda X: float(X[0, 0]))
    with pytest.raises(ValueError, match="must be vectorised"):
        est.expect(lambda X: X[:10, 0])
    with pytest.raises(ValueError, match="NaN or infinite"), np.errstate(invalid="ignore"):
        est.expect(lambda X: np.log(X[:, 0] - 2))
    with pytest.raises(ValueError, match="numbers"):
        est.expect(lambda X: np.array(["x"] * X.shape[0]))
    with pytest.raises(ValueError, match="elementwise"):
        est.expect(pl.col("a").sum())
    with pytest.raises(ValueError, match="vectorised function"):
        est.expect(42)
    with pytest.raises(ValueError, match="non-negative integer"):
        est.moment(-1)


@pytest.mark.parametrize("count", [0, -3])
def test_sketch_with_no_positive_count_is_refused_by_ridge(count, data):
    sk = dps.Sketch(
        dps.Histogram(bounds=(0, 1), bins=2, dim=1), np.array([1, 2]), count, bounds=([0.0], [1.0])
    )
    with pytest.raises(ValueError, match="noisy count .* is not positive"):
        dps.M2M(sk, method="ridge")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lam": "big"}, "lam"),
        ({"lam": -1.0}, "lam"),
        ({"lam": math.inf}, "lam"),
        ({"n_samples": 10}, "n_samples"),
        ({"seed": -1}, "seed"),
        ({"bounds": (1, 0)}, "bounds"),
        ({"method": "nnls"}, "method"),
    ],
)
def test_bad_options_are_refused(kwargs, match, data):
    sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=2, dim=2), data, BOX)
    with pytest.raises(ValueError, match=match):
        dps.M2M(sk, **kwargs)


def test_bounds_are_required_when_the_sketch_has_none(data):
    sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=2, dim=2), data, None)
    with pytest.raises(ValueError, match="bounds are required"):
        dps.M2M(sk)
    assert dps.M2M(sk, bounds=(0, 1), n_samples=500).lower.tolist() == [0.0, 0.0]


def test_design_cache_is_bounded(monkeypatch, data):
    monkeypatch.setattr(m2m_module, "_DESIGN_CACHE_BYTES", 1)
    monkeypatch.setattr(m2m_module, "_DESIGN_CACHE", m2m_module.OrderedDict())
    for seed in range(3):
        sk = exact_sketch(dps.Histogram(bounds=(0, 1), bins=2, dim=2), data, BOX)
        dps.M2M(sk, n_samples=500, seed=seed, method="ridge")
    assert len(m2m_module._DESIGN_CACHE) == 1


# -- queries of a schema sketch: SQL text, label checks, categorical quantiles --------------------
@pytest.fixture(scope="module")
def schema_est():
    rng = np.random.default_rng(6)
    n = 4000
    schema = dps.Schema(
        {"age": dps.Numeric(16, 99, integer=True), "region": ["Midwest", "Northeast", "South", "West"]}
    )
    frame = pl.DataFrame(
        {"age": rng.integers(16, 100, n).astype(float), "region": rng.choice(schema["region"].labels, n)}
    )
    fm = dps.auto_feature_map(schema)
    sk = dps.Sketch(
        fm,
        np.asarray(fm.fixed_sum(schema.encode(frame)), dtype=np.int64),
        n,
        bounds=tuple(b.tolist() for b in schema.bounds),
        column_names=schema.columns,
        schema=schema.to_dict(),
    )
    return dps.M2M(sk, n_samples=3000)


def test_sql_text_is_a_query(schema_est):
    est = schema_est
    south = (pl.col("region") == "South") & (pl.col("age") >= 40)
    assert est.count("region = 'South' AND age >= 40") == pytest.approx(est.count(south))
    assert est.expect("age < 30") == pytest.approx(est.expect(pl.col("age") < 30))
    both = est.expect(["age < 30", pl.col("region") == "West"])
    assert both.tolist() == pytest.approx(
        [est.expect(pl.col("age") < 30), est.expect(pl.col("region") == "West")]
    )
    iv = est.count("region IN ('South', 'West')", interval=0.95)
    assert iv.low <= iv.value <= iv.high
    with pytest.raises(ValueError, match=r"names columns \['height'\] that are not in the sketch"):
        est.count("height > 2")
    with pytest.raises(ValueError, match="is not a SQL predicate"):
        est.count("age >>>> 2")


@pytest.mark.parametrize(
    "query",
    [
        pl.col("region") == "Souht",
        pl.col("region") != "Souht",
        pl.lit("Souht") == pl.col("region"),
        pl.col("region").is_in(["South", "Souht"]),
        (pl.col("age") > 30) & ~(pl.col("region") == "Souht"),
        pl.when(pl.col("region") == "Souht").then(1.0).otherwise(0.0).alias("w"),
        "region = 'Souht'",
        "age > 30 AND region <> 'Souht'",
        "region IN ('South', 'Souht')",
        "region NOT IN ('Souht')",
    ],
)
def test_a_label_typo_is_refused_naming_the_labels(schema_est, query):
    labels = r"its labels are \['Midwest', 'Northeast', 'South', 'West'\]"
    with pytest.raises(ValueError, match=rf"'Souht' is not a label of column 'region': {labels}"):
        schema_est.count(query)


def test_unchecked_forms_evaluate_as_written(schema_est):
    """String functions and transformed columns are not label comparisons: no refusal."""
    assert schema_est.count(pl.col("region").cast(pl.String).str.contains("zz")) == 0.0
    assert schema_est.count(pl.col("region").cast(pl.String) == "south") == 0.0
    assert schema_est.count(pl.col("region") == "South") > 0


def test_quantiles_of_a_categorical_column_are_refused(schema_est):
    with pytest.raises(ValueError, match=r"column 'region' is categorical.*shares\('region'\).*count\("):
        schema_est.quantile("region", [0.5])
    assert 16 <= schema_est.quantile("age", [0.5])[0] <= 99
