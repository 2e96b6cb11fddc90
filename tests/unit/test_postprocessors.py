"""Chaining a sketch release with an M2M estimate, directly and in dp.Context."""

from __future__ import annotations

import warnings

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps


@pytest.fixture
def X(rng):
    return rng.uniform(size=(3000, 2))


def test_chain_keeps_the_privacy_map_and_returns_the_estimate(X):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    meas = dps.make_private_sketch(
        dps.box_domain((0, 1), 2), dp.symmetric_distance(), dp.max_divergence(), fm, scale=2.0
    )
    chained = meas >> dps.then_m2m("mean", n_samples=5000)
    assert chained.map(1) == meas.map(1) and chained.map(3) == meas.map(3)
    mean = chained(X)
    assert mean.shape == (2,) and np.all(np.abs(mean - X.mean(axis=0)) < 0.05)
    est = (meas >> dps.then_m2m(None, n_samples=2000))(X)
    assert isinstance(est, dps.M2M)
    cdf = (meas >> dps.then_m2m("cdf", (1, [0.5]), n_samples=2000))(X)
    assert cdf.shape == (1,)


def test_unknown_query_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="query .* must be None or one of"):
        dps.then_m2m("median")
    with pytest.raises(ValueError, match="query_args"):
        dps.then_m2m("cdf", 0)


def test_context_query_and_budget(X):
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    ctx = dp.Context.compositor(
        data=X,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=2,
        domain=dps.box_domain((0, 1), 2),
    )
    mean = ctx.query().private_sketch(fm).m2m("mean", n_samples=5000).release()
    assert mean.shape == (2,) and np.all(np.abs(mean - X.mean(axis=0)) < 0.1)
    frame = ctx.query().private_sketch(fm).m2m("weighted_frame", n_samples=1000).release()
    assert frame.columns == ["x0", "x1", "weight"]
    assert ctx.remaining_privacy_loss() == []  # both queries of the split are spent
    with pytest.raises(ValueError):  # no queries left in the split
        ctx.query().private_sketch(fm).m2m("mean").release()


def test_a_failing_estimate_is_flagged_and_still_charged(X):
    """After the noise is drawn the post-processor must neither raise nor warn (a raising query
    would go uncharged while its error could show released values; under ``-W error`` a warning
    raises)."""
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    ctx = dp.Context.compositor(
        data=X,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=2,
        domain=dps.box_domain((0, 1), 2),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning escaping the post-processor fails the test
        out = ctx.query().private_sketch(fm).m2m("cdf", query_args=("zzz", [0.5]), n_samples=500).release()
    assert isinstance(out, dps.postprocessors.FailedEstimate) and not out and "zzz" in out.reason
    assert len(ctx.remaining_privacy_loss()) == 1  # the failed query was charged
    cdf = ctx.query().private_sketch(fm).m2m("cdf", query_args=("x1", [0.5]), n_samples=2000).release()
    assert cdf.shape == (1,)


@pytest.mark.parametrize("kwargs", [{"n_samples": 5}, {"seed": -1}, {"lam": "large"}, {"lam": -1.0}])
def test_bad_options_are_refused_before_any_release(kwargs):
    with pytest.raises(ValueError):
        dps.then_m2m("mean", **kwargs)
