"""Weighted-ERM learning from sketches: logistic and linear regression."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import rankdata

import opendp_sketch as dps


def auc(y: np.ndarray, score: np.ndarray) -> float:
    r = rankdata(score)
    n1 = y.sum()
    return float((r[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * (len(y) - n1)))


@pytest.fixture(scope="module")
def classification():
    rng = np.random.default_rng(7)
    beta = np.array([8.0, -6.0, 0.0])

    def draw(n):
        X = rng.uniform(size=(n, 3))
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X - 0.5) @ beta))).astype(float)
        return X, y

    return draw(20_000), draw(5_000), beta


def test_logistic_regression_from_a_private_rff_sketch(classification):
    (X, y), (Xt, yt), beta = classification
    fm = dps.RFF(dim=4, num_features=200, bandwidth=1.0, seed=0)
    sk = dps.release_sketch(
        np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=1.0, column_names=["a", "b", "c", "y"]
    )
    clf = dps.SketchLogisticRegression(target="y").fit(sk)
    assert clf.feature_names_in_ == ["a", "b", "c"] and clf.classes_.tolist() == [0.0, 1.0]
    assert auc(yt, clf.decision_function(Xt)) > auc(yt, (Xt - 0.5) @ beta) - 0.02
    assert np.sign(clf.coef_[:2]).tolist() == [1.0, -1.0]
    proba = clf.predict_proba(Xt)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(np.unique(clf.predict(Xt))) <= {0.0, 1.0}


def test_logistic_regression_from_a_byclass_sketch(classification):
    (X, y), (Xt, yt), beta = classification
    fm = dps.ByClass(dps.RFF(dim=3, num_features=200, bandwidth=1.0, seed=0), 2)
    sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=1.0)
    clf = dps.SketchLogisticRegression().fit(sk)
    assert auc(yt, clf.decision_function(Xt)) > auc(yt, (Xt - 0.5) @ beta) - 0.02


def test_soft_labels_with_a_continuous_label_prior(classification):
    (X, y), (Xt, yt), beta = classification
    fm = dps.RFF(dim=4, num_features=200, bandwidth=1.0, seed=0)
    sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=5.0)
    est = dps.M2M(sk, n_samples=30_000)  # label drawn uniformly from [0, 1]
    clf = dps.SketchLogisticRegression().fit(est)
    assert auc(yt, clf.decision_function(Xt)) > 0.85


def test_linear_regression_recovers_coefficients():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(30_000, 2))
    y = 0.6 * X[:, 0] - 0.3 * X[:, 1] + 0.1 + rng.normal(0, 0.05, 30_000)
    fm = dps.RFF(dim=3, num_features=300, bandwidth=1.0, seed=2)
    sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(-1, 1), epsilon=10.0)
    reg = dps.SketchLinearRegression().fit(sk)
    np.testing.assert_allclose(reg.coef_, [0.6, -0.3], atol=0.05)
    assert reg.intercept_ == pytest.approx(0.1, abs=0.05)
    assert reg.predict([[0.0, 0.0]]).shape == (1,)


def test_linear_regression_is_exact_when_second_moments_are_in_the_span():
    """Random quadratic features (m = 6 ≥ 3·4/2) span every quadratic form of (x0, x1, y): with
    λ = 0 and no intercept, least squares of y = x0 on the weighted samples is exact."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, size=(5000, 2))
    D = np.column_stack([X, X[:, 0]])
    fm = dps.RandomQuadratic(dim=3, num_features=6, radius=np.sqrt(3), seed=0)
    sk = dps.Sketch(fm, np.array(fm.fixed_sum(D)), 5000, bounds=([-1.0] * 3, [1.0] * 3))
    options = {"n_samples": 20_000, "lam": 0.0, "method": "ridge"}  # exactness is a ridge property
    reg = dps.SketchLinearRegression(penalty=0.0, fit_intercept=False, m2m_options=options).fit(sk)
    np.testing.assert_allclose(reg.coef_, [1.0, 0.0], atol=1e-4)
    assert reg.intercept_ == 0.0


def test_bad_input_is_refused(classification):
    (X, y), _, _ = classification
    fm = dps.RFF(dim=4, num_features=20, seed=0)
    sk = dps.release_sketch(
        np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=1.0, column_names=["a", "b", "c", "y"]
    )
    with pytest.raises(ValueError, match="not a column"):
        dps.SketchLogisticRegression(target="label").fit(sk)
    with pytest.raises(ValueError, match="target index"):
        dps.SketchLogisticRegression(target=7).fit(sk)
    with pytest.raises(ValueError, match="not fitted"):
        dps.SketchLogisticRegression().predict([[0, 0, 0]])
    clf = dps.SketchLogisticRegression(m2m_options={"n_samples": 2000}).fit(sk)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        clf.predict([[0, 0]])
    with pytest.raises(ValueError, match="NaN"):
        clf.predict([[0, np.nan, 0]])
    with pytest.raises(ValueError, match="Sketch or an M2M"):
        dps.SketchLogisticRegression().fit(X)
    with pytest.raises(ValueError, match="penalty"):
        dps.SketchLinearRegression(penalty=-1.0, m2m_options={"n_samples": 2000}).fit(sk)
    three = dps.ByClass(dps.RFF(dim=3, num_features=20, seed=0), 3)
    sk3 = dps.release_sketch(np.column_stack([X, y * 2]), three, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="3 classes"):
        dps.SketchLogisticRegression(m2m_options={"n_samples": 2000}).fit(sk3)


def test_no_intercept_predicts_in_the_data_units():
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, size=(5000, 2))
    D = np.column_stack([X, X[:, 0]])
    fm = dps.RandomQuadratic(dim=3, num_features=6, radius=np.sqrt(3), seed=0)
    sk = dps.Sketch(fm, np.array(fm.fixed_sum(D)), 5000, bounds=([0.0] * 3, [1.0] * 3))
    reg = dps.SketchLinearRegression(
        penalty=0.0, fit_intercept=False, m2m_options={"n_samples": 20_000, "lam": 0.0, "method": "ridge"}
    ).fit(sk)
    np.testing.assert_allclose(reg.predict([[1.0, 0.0], [0.5, 0.5]]), [1.0, 0.5], atol=1e-3)


def test_target_by_default_name_and_merged_discrete_options(classification):
    (X, y), (Xt, yt), beta = classification
    fm = dps.ByClass(dps.RFF(dim=3, num_features=50, seed=0), 2)
    sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=5.0)
    clf = dps.SketchLogisticRegression(target="label", m2m_options={"n_samples": 5000}).fit(sk)
    assert clf.feature_names_in_ == ["x0", "x1", "x2"]
    plain = dps.release_sketch(
        np.column_stack([X, y]), dps.RFF(dim=4, num_features=50, seed=0), bounds=(0, 1), epsilon=5.0
    )
    clf = dps.SketchLogisticRegression(
        m2m_options={"n_samples": 5000, "discrete": {"x0": [0.0, 0.5, 1.0]}}
    ).fit(plain)
    assert clf.classes_.tolist() == [0.0, 1.0]  # the label is still drawn from its two bounds


@pytest.mark.parametrize("penalty", [-1.0, np.inf, np.nan, "1"])
def test_bad_penalty_is_refused_before_any_work(penalty, classification):
    (X, y), _, _ = classification
    sk = dps.Sketch(
        dps.Histogram(bounds=(0, 1), bins=2, dim=4),
        np.ones(8, dtype=np.int64),
        10,
        bounds=([0.0] * 4, [1.0] * 4),
    )
    with pytest.raises(ValueError, match="penalty"):
        dps.SketchLinearRegression(penalty=penalty).fit(sk)


@pytest.mark.parametrize(
    "make",
    [
        lambda: dps.Histogram(bounds=(0, 1), bins=16, dim=4),
        lambda: dps.DyadicTrees(bounds=(0, 1), levels=4, dim=4),
        lambda: dps.MarginalTables((0, 1), [0, 1, 2, 3, (0, 1)], bins=8, dim=4),  # label (3) only alone
    ],
)
def test_maps_that_never_hold_the_label_with_a_feature_are_refused_before_decoding(make, classification):
    (X, y), _, _ = classification
    sk = dps.release_sketch(np.column_stack([X, y]), make(), bounds=(0, 1), epsilon=1.0)
    for model in (dps.SketchLogisticRegression(), dps.SketchLinearRegression()):
        with pytest.raises(ValueError, match=r"measures column 'x3' only on its own.*MarginalTables"):
            model.fit(sk)


def test_logistic_regression_from_pairwise_marginals(classification):
    (X, y), (Xt, yt), beta = classification
    fm = dps.MarginalTables((0, 1), [(0, 3), (1, 3), (2, 3)], bins=[(16, 2)] * 3, categorical=[3], dim=4)
    sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=1.0)
    clf = dps.SketchLogisticRegression().fit(sk)
    assert auc(yt, clf.decision_function(Xt)) > auc(yt, (Xt - 0.5) @ beta) - 0.03
    assert np.sign(clf.coef_[:2]).tolist() == [1.0, -1.0]


# -- a schema sketch reads rows in the table's own units and labels (issue 39, item 1) ----------
@pytest.fixture(scope="module")
def mixed():
    import polars as pl

    rng = np.random.default_rng(3)
    n = 30_000
    income = rng.lognormal(3.0, 0.8, n).clip(0, 500)
    region = rng.choice(["north", "south", "east"], n)
    age = rng.integers(18, 80, n)
    logit = 1.5 * np.log1p(income) - 5.0 + (region == "south") * 1.0 + 0.02 * (age - 50)
    bought = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-logit)), "yes", "no")
    frame = pl.DataFrame({"income": income, "region": region, "age": age, "bought": bought})
    schema = dps.Schema(
        {
            "income": dps.Numeric(0, 500, scale="log"),
            "region": ["north", "south", "east"],
            "age": dps.Numeric(18, 80, integer=True),
            "bought": ["no", "yes"],
        }
    )
    return frame.head(25_000), frame.tail(5_000), schema


def test_a_schema_model_predicts_raw_rows_in_the_tables_units(mixed):
    import polars as pl

    train, test, schema = mixed
    sk = dps.release_sketch(train, schema=schema, epsilon=1.0, pairs="all")
    clf = dps.SketchLogisticRegression(target="bought").fit(sk)
    assert clf.classes_.tolist() == ["no", "yes"]
    y = (test["bought"] == "yes").to_numpy().astype(int)
    p_raw = clf.predict_proba(test)[:, 1]  # a Polars frame with the target still in it
    assert auc(y, p_raw) > 0.75
    # the same rows as pandas, as an array of the features in order, and hand-encoded: alike
    assert np.allclose(clf.predict_proba(test.to_pandas())[:, 1], p_raw)
    features = test.select(clf.feature_names_in_).rows()
    assert np.allclose(clf.predict_proba(features)[:, 1], p_raw)
    assert set(clf.predict(test.head(50)).tolist()) <= {"no", "yes"}
    with pytest.raises(ValueError, match=r"the rows lack columns \['region'\]"):
        clf.predict(test.drop("region"))
    with pytest.raises(ValueError, match=r"columns \['region'\] hold values that are not among"):
        clf.predict(test.head(3).with_columns(pl.lit("west").alias("region")))


def test_a_schema_regression_predicts_in_the_targets_units(mixed):
    train, test, schema = mixed
    sk = dps.release_sketch(train, schema=schema, epsilon=2.0, pairs="all")
    reg = dps.SketchLinearRegression(target="age").fit(sk)
    pred = reg.predict(test)
    assert pred.shape == (test.height,) and 18 - 5 <= pred.mean() <= 80 + 5
    assert abs(pred.mean() - test["age"].mean()) < 5  # years, not a 0–1 coordinate


def test_a_declared_target_is_measured_with_every_feature_so_the_default_release_feeds_a_model(mixed):
    """Issue 39, item 3: at a budget where the rule leaves every pair out, a schema naming the
    target still measures (feature, target) pairs, and the model takes the target by default."""
    train, test, schema = mixed
    plain = dps.Schema({c: schema[c] for c in schema.columns}, rows=25_000)
    targeted = dps.Schema({c: schema[c] for c in schema.columns}, rows=25_000, targets="bought")
    eps = 0.01
    dropped = dps.release_sketch(train, schema=plain, epsilon=eps, pair_selection=None)
    with pytest.raises(ValueError, match="only on its own"):
        dps.SketchLogisticRegression(target="bought").fit(dropped)
    sk = dps.release_sketch(train, schema=targeted, epsilon=eps, pair_selection=None)
    pairs = sorted(b.subset for m in sk.feature_map.maps for b in m.blocks if len(b.subset) == 2)
    assert pairs == [(0, 3), (1, 3), (2, 3)]  # every feature with the target, and nothing else
    clf = dps.SketchLogisticRegression().fit(sk)  # the schema's target
    assert clf.classes_.tolist() == ["no", "yes"] and clf.feature_names_in_ == ["income", "region", "age"]
    # at ε = 0.1 (15 releases measured: AUC 0.750–0.757 against the non-private model's 0.782)
    sk = dps.release_sketch(
        train, schema=dps.Schema({c: schema[c] for c in schema.columns}, targets="bought"), epsilon=0.1
    )
    y = (test["bought"] == "yes").to_numpy().astype(int)
    assert auc(y, dps.SketchLogisticRegression().fit(sk).predict_proba(test)[:, 1]) > 0.65
    assert dps.Schema.from_dict(targeted.to_dict()).targets == ["bought"]
    with pytest.raises(ValueError, match="targets"):
        dps.Schema({"a": (0, 1)}, targets="b")


def test_the_old_alpha_keyword_still_works_for_one_release_with_a_warning():
    with pytest.warns(DeprecationWarning, match="penalty="):
        reg = dps.SketchLinearRegression(alpha=0.5)
    assert reg.penalty == 0.5
    with pytest.warns(DeprecationWarning, match="penalty="):
        assert dps.SketchLogisticRegression(alpha=0.25).penalty == 0.25


def test_a_declared_target_weighs_its_pairs_and_brings_back_coarse_feature_pairs():
    """Issue 39, item 3: with a declared target the (feature, target) pairs weigh as much as the
    1-way blocks, and feature pairs the rule leaves out at 16 × 16 come back at the finest bins
    from 15 down to 8 where their cells pass the rule (LR on the decoded points otherwise fits
    naive Bayes); a schema without targets plans the same map as before. Public inputs only."""
    from opendp_sketch.plan import (
        AUTO_TARGET_FEATURE_PAIR_WEIGHT,
        AUTO_TARGET_PAIR_WEIGHT,
        auto_feature_map,
    )

    cols = {"a": (0, 1), "b": (0, 1), "c": (0, 1), "d": (0, 1), "y": ["n", "y"]}

    def parts(fm):
        return [(w, [(b.subset, b.shape) for b in m.blocks]) for w, m in zip(fm.weights, fm.maps)]

    plain = auto_feature_map(dps.Schema(cols, rows=50_000), epsilon=0.3)
    assert [w for w, _ in parts(plain)] == [3.0, 1.0]  # 1-way blocks, the four (feature, y) pairs
    assert all(s[1] == 4 for s, _ in parts(plain)[1][1])
    fm = auto_feature_map(dps.Schema(cols, rows=50_000, targets="y"), epsilon=0.3)
    (w1, ones), (wt, held), (wf, rest) = parts(fm)
    assert (w1, wt, wf) == (3.0, AUTO_TARGET_PAIR_WEIGHT, AUTO_TARGET_FEATURE_PAIR_WEIGHT)
    assert held == parts(plain)[1][1]
    assert rest == [((i, j), (11, 11)) for i in range(4) for j in range(i + 1, 4)]
    # the finest bins whose average cell passes the rule: 11 does, 12 would not
    from opendp_sketch.budget import DEFAULT_COUNT_FRACTION, Budget
    from opendp_sketch.features.marginals import MarginalTables
    from opendp_sketch.plan import AUTO_PAIR_SNR, weighted_map

    rule = weighted_map(
        MarginalTables.auto(([0.0] * 5, [1.0] * 5), categorical=[4], fine_bins=16, coarse_bins=16), 2.0
    )
    std = Budget.of(0.3, None, None).coordinate_std(
        rule.sensitivity(1), rule.sensitivity(2), 1.0 - DEFAULT_COUNT_FRACTION
    )
    assert 50_000 / 11**2 >= AUTO_PAIR_SNR * std > 50_000 / 12**2
    # a smaller budget: coarser, down to 8 × 8
    lower = auto_feature_map(dps.Schema(cols, rows=50_000, targets="y"), epsilon=0.2)
    assert {b.shape for b in lower.maps[2].blocks} == {(9, 9)}
    # too small a budget for 8 × 8 cells: two numeric features go on down (to 2 bins at least)
    low = auto_feature_map(dps.Schema(cols, rows=50_000, targets="y"), epsilon=0.05)
    assert [len(m.blocks) for m in low.maps] == [5, 4, 6]
    assert {b.shape for b in low.maps[2].blocks} == {(4, 4)}
    # a pair with a categorical axis keeps the floor of 8: here only the numeric pair comes back
    mixed = {"a": (0, 1), "b": (0, 1), "g": ["p", "q", "r"], "y": ["n", "y"]}
    small = auto_feature_map(dps.Schema(mixed, rows=10_000, targets="y"), epsilon=0.1)
    assert [(b.subset, b.shape) for b in small.maps[2].blocks] == [((0, 1), (3, 3))]
    # and none at all where even 2 × 2 cells would be noise
    assert len(auto_feature_map(dps.Schema(mixed, rows=2_000, targets="y"), epsilon=0.1).maps) == 2
    # a budget that keeps every pair at 16 × 16: no coarse copies, the target pairs weighted
    high = auto_feature_map(dps.Schema(cols, rows=50_000, targets="y"), epsilon=10.0)
    pairs = [(w, b.shape) for w, m in zip(high.weights, high.maps) for b in m.blocks if len(b.subset) == 2]
    assert sorted({s for _, s in pairs}) == [(16, 2), (16, 16)]
    assert all(w == (AUTO_TARGET_PAIR_WEIGHT if s == (16, 2) else 1.0) for w, s in pairs)
