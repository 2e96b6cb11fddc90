"""The decoder's work at width (issue 40): its folded design and its cached column bins give the
same fit as the plain design, to rounding, on a released schema sketch of a mixed table."""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.estimators import synthetic

dp.enable_features("contrib", "honest-but-curious")


@pytest.fixture(scope="module")
def sketch() -> dps.Sketch:
    """A default schema release of 12 correlated columns, every fourth categorical."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(5000, 3))
    cols, spec = {}, {}
    for j in range(12):
        x = z[:, j % 3] + 0.7 * rng.normal(size=5000)
        if j % 4 == 3:
            cols[f"c{j}"] = np.array(list("abcde"))[np.digitize(x, [-1, -0.3, 0.3, 1])]
            spec[f"c{j}"] = list("abcde")
        else:
            cols[f"x{j}"] = np.clip(x * 10 + 50, 0, 100)
            spec[f"x{j}"] = (0, 100)
    return dps.release_sketch(pl.DataFrame(cols), schema=dps.Schema(spec), epsilon=1.0)


def decode(sketch: dps.Sketch, monkeypatch, **switches) -> synthetic.SyntheticDecoder:
    monkeypatch.setenv("OPENDP_SKETCH_CACHE", "off")
    with monkeypatch.context() as m:
        for name, value in switches.items():
            m.setattr(synthetic, name, value)
        return synthetic.SyntheticDecoder(8000, seed=5, bounds=sketch.bounds).fit(sketch)


def test_folded_design_fits_as_the_plain_design(sketch, monkeypatch):
    plain = decode(sketch, monkeypatch, _FOLD_BLOCKS=False)
    folded = decode(sketch, monkeypatch, _FOLD_BLOCKS=True)
    assert folded.n_iter_ == plain.n_iter_ and len(folded.history_) == len(plain.history_)
    np.testing.assert_allclose(folded.history_, plain.history_, rtol=1e-9)
    np.testing.assert_allclose(folded.weights_, plain.weights_, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(folded.samples_, plain.samples_, rtol=0, atol=1e-9)
    assert (folded.weights_ >= 0).all()


def test_faster_draws_are_the_same_draws():
    """The sorted search and the uniform inside cells give what the plain numpy calls give,
    value for value (so the decoder's random stream is unchanged)."""
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.full(20_000, 0.3))
    w[rng.uniform(size=w.size) < 0.2] = 0.0  # flat stretches: ties in the running sums
    running = np.concatenate([[0.0], np.cumsum(w)])
    keys = rng.uniform(size=9000)
    np.testing.assert_array_equal(synthetic._search(running, keys), running.searchsorted(keys, side="right"))
    e = np.linspace(0.0, 1.0, 17)
    c = rng.integers(0, 16, size=5000)
    ours = e[c] + (e[c + 1] - e[c]) * np.random.default_rng(9).random(c.size)
    np.testing.assert_array_equal(ours, np.random.default_rng(9).uniform(e[c], e[c + 1]))


def test_a_deferred_draw_is_the_draw_at_those_points(sketch, monkeypatch):
    """A child column's independent draw made later for a few points (from the uniforms drawn
    in its turn) equals the whole draw at those points: the random stream is unchanged."""
    dec = decode(sketch, monkeypatch)
    X, w = dec.samples_, dec.weights_
    cdf = synthetic._running(w)
    for j in range(X.shape[1]):
        whole = dec._marginal_draw(X, cdf, j, X.shape[0], np.random.default_rng(j))
        rng = np.random.default_rng(j)
        pick = rng.random(X.shape[0])
        inside = None if j in dec.discrete_ else rng.random(X.shape[0])
        at = np.random.default_rng(100 + j).uniform(size=X.shape[0]) < 0.1
        np.testing.assert_array_equal(dec._independent(X, j, (cdf, pick, inside), at), whole[at])
