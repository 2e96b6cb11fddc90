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
