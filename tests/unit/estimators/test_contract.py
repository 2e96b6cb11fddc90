"""One estimator contract (issue 38, item 4): ``Est(**params).fit(sketch)`` everywhere, the
short form ``Est(sketch, **params)`` exactly that, and an estimator used before its fit says so."""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps

dp.enable_features("contrib", "honest-but-curious")


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).beta(2, 5, (3000, 1))


def test_m2m_fit_is_the_short_form(data):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
    sk = dps.Sketch(
        feature_map=fm, sum_units=np.asarray(fm.fixed_sum(data)), count=3000, bounds=([0.0], [1.0])
    )
    short = dps.M2M(sk, n_samples=5000, seed=3)
    fitted = dps.M2M(n_samples=5000, seed=3).fit(sk)
    assert np.array_equal(short.weights, fitted.weights) and np.array_equal(short.samples, fitted.samples)
    assert fitted.mean().tolist() == short.mean().tolist()
    assert (
        fitted.weights_ is fitted.weights
        and fitted.samples_ is fitted.samples
        and fitted.n_hat_ == fitted.n_hat
    )
    with pytest.raises(AttributeError, match=r"not fitted yet: call \.fit\(sketch\)"):
        dps.M2M(n_samples=5000).mean()
    with pytest.raises(ValueError, match="n_samples"):
        dps.M2M(n_samples=-1)  # parameters are checked when given, before any fit


@pytest.mark.parametrize(
    "make, fm, query",
    [
        (lambda **p: dps.KDE(**p), dps.RFF(dim=1, num_features=200, bandwidth=0.2, seed=0), [[0.3]]),
        (lambda **p: dps.L1DistanceSum(**p), dps.DyadicTrees(bounds=(0, 1), levels=4, dim=1), [0.3]),
        (lambda **p: dps.SquaredL2DistanceSum(**p), dps.Moments(dim=1, radius=1.0), [[0.3]]),
    ],
)
def test_every_sketch_reader_fits_the_same_way(data, make, fm, query):
    sk = dps.Sketch(feature_map=fm, sum_units=np.asarray(fm.fixed_sum(data)), count=3000)
    short, fitted = make(sketch=sk), make().fit(sk)
    assert np.asarray(short(query)).tolist() == np.asarray(fitted(query)).tolist()
    assert make().fit(sk) is not None and isinstance(make().fit(sk), type(short))


def test_smooth_kde_fits_its_sketches():
    from opendp_sketch.estimators.smooth import SmoothKDE, SmoothKernelPlan

    plan = SmoothKernelPlan(dim=1, bandwidth=0.1, num_features=200, num_terms=3, t_max=50.0)
    X = np.random.default_rng(1).uniform(0, 1, size=(400, 1))
    sketches = [dps.Sketch(fm, np.array(fm.fixed_sum(X)), 400) for fm in plan.feature_maps]
    c = plan.kde(sketches).coefficients
    short = SmoothKDE(sketches, c, 0.1)
    fitted = SmoothKDE(coefficients=c, bandwidth=0.1).fit(sketches)
    assert short([[0.4]]).tolist() == fitted([[0.4]]).tolist()
    with pytest.raises(ValueError, match="coefficients are needed"):
        SmoothKDE()


def test_fitted_attributes_have_their_trailing_underscore_names(data):
    """scikit-learn's convention: what a fit computes is readable as ``name_``."""
    hist = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
    est = dps.M2M(n_samples=2000, seed=0).fit(
        dps.Sketch(hist, np.asarray(hist.fixed_sum(data)), 3000, bounds=([0.0], [1.0]))
    )
    assert est.columns_ == est.columns and est.lower_ is est.lower and est.sketch_ is est.sketch
    rff = dps.RFF(dim=1, num_features=50, bandwidth=0.2, seed=0)
    kde = dps.KDE().fit(dps.Sketch(rff, np.asarray(rff.fixed_sum(data)), 3000))
    assert kde.n_hat_ == kde.n_hat and kde.feature_map_ is kde.feature_map and kde.sum_ is kde.sum
    trees = dps.DyadicTrees(bounds=(0, 1), levels=4, dim=1)
    l1 = dps.L1DistanceSum().fit(dps.Sketch(trees, np.asarray(trees.fixed_sum(data)), 3000))
    assert l1.n_leaves_ == 16 and l1.levels_ == 4 and l1.noise_var_ == l1.noise_var
    with pytest.raises(AttributeError):
        dps.KDE().n_hat_  # noqa: B018 - not fitted
