"""Plots of a decoded column: the shares drawn, their intervals, and the bars on the axes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.estimators.plot import column_shares, pair_shares

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


@pytest.fixture(scope="module")
def est():
    rng = np.random.default_rng(4)
    n = 20_000
    frame = pl.DataFrame(
        {
            "age": rng.integers(18, 91, n),
            "income": np.exp(rng.normal(3, 0.8, n)).clip(0, 500),
            "city": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
        }
    )
    schema = dps.Schema(
        {
            "age": dps.Numeric(18, 90, integer=True),
            "income": dps.Numeric(0, 500, scale="log"),
            "city": ["a", "b", "c"],
        },
        rows=20_000,
    )
    return dps.M2M(dps.release_sketch(frame, schema=schema, epsilon=2.0), n_samples=20_000), frame


def test_cell_shares_are_a_distribution_bracketed_by_their_intervals(est):
    m, frame = est
    s = column_shares(m, "income")
    assert s["share"].min() >= 0 and abs(s["share"].sum() - 1) < 1e-9
    assert (s["low"] <= s["high"]).all() and s["low"].min() >= 0
    assert (
        s["low_edge"][0] == 0
        and s["high_edge"][-1] == 500
        and (s["low_edge"][1:] == s["high_edge"][:-1]).all()
    )
    x = frame["income"].to_numpy()  # the true shares per cell are inside most intervals
    a, b = s["low_edge"].to_numpy(), s["high_edge"].to_numpy()
    truth = np.array(
        [
            ((x >= lo) & ((x <= hi) if k == a.size - 1 else (x < hi))).mean()
            for k, (lo, hi) in enumerate(zip(a, b))
        ]
    )
    assert np.mean((s["low"].to_numpy() <= truth) & (truth <= s["high"].to_numpy())) >= 0.8
    cats = column_shares(m, "city")
    assert cats["label"].to_list() == ["a", "b", "c"]
    np.testing.assert_allclose(cats["share"].to_numpy(), [0.5, 0.3, 0.2], atol=0.02)


def test_plot_draws_one_bar_per_cell_or_label(est):
    m, _ = est
    ax = m.plot("city")
    assert len(ax.patches) == 3 and [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    ax = m.plot("income", interval=None)
    assert len(ax.patches) == column_shares(m, "income", interval=None).height
    assert ax.get_xscale() == "symlog"  # a log-scale column on a log axis
    # an integer column: the share per whole value, so cells of 2 and of 3 ages draw level bars
    # on uniform ages (the shares per cell alternate by half)
    ax = m.plot("age")
    heights = np.array([p.get_height() for p in ax.patches])
    assert ax.get_ylabel() == "share of rows per value"
    assert np.abs(heights[2:-2] / heights[2:-2].mean() - 1).max() < 0.25
    per_cell = column_shares(m, "age")["share"].to_numpy()[2:-2]
    assert np.abs(per_cell / per_cell.mean() - 1).max() > 0.2


def test_maps_without_cells_plot_bins_without_intervals_and_bad_levels_are_refused():
    X = np.random.default_rng(0).uniform(0, 1, (3000, 2))
    sk = dps.release_sketch(
        X, dps.RFF(dim=2, num_features=100, bandwidth=0.3, seed=0), bounds=(0.0, 1.0), epsilon=1.0
    )
    m = dps.M2M(sk, n_samples=3000)
    s = column_shares(m, 0)
    assert s.height == 32 and "low" not in s.columns
    assert len(m.plot("x1").patches) == 32
    trees = dps.release_sketch(
        X, dps.DyadicTrees(bounds=(0, 1), levels=5, dim=2), bounds=(0.0, 1.0), epsilon=1.0
    )
    t = column_shares(dps.M2M(trees, n_samples=3000), 0)  # cells, but no interval machinery: shares alone
    assert "low" not in t.columns and abs(t["share"].sum() - 1) < 1e-9
    with pytest.raises(ValueError, match="interval"):
        m.plot(0, interval=1.5)
    with pytest.raises(ValueError, match="column"):
        m.plot("nope")


def test_a_joint_heat_map_holds_the_released_pair(est):
    m, frame = est
    xe, ye, shares = pair_shares(m, "city", "age")
    assert shares.shape == (3, ye.size - 1) and abs(shares.sum() - 1) < 1e-9 and shares.min() >= 0
    np.testing.assert_allclose(shares.sum(axis=1), [0.5, 0.3, 0.2], atol=0.02)  # its margin: the city shares
    ax = m.plot("income", "city")
    assert ax.get_xlabel() == "income" and ax.get_ylabel() == "city" and ax.get_xscale() == "symlog"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="two different columns"):
        m.plot("age", "age")


def test_many_labels_are_slanted_and_thinned_and_bars_sit_in_their_intervals(est):
    m, _ = est
    rng = np.random.default_rng(5)
    states = [f"state {i:02d}" for i in range(53)]
    frame = pl.DataFrame({"state": rng.choice(states, 5000), "x": rng.uniform(0, 1, 5000)})
    sk = dps.release_sketch(frame, schema=dps.Schema({"state": states, "x": (0, 1)}), epsilon=1.0)
    many = dps.M2M(sk, n_samples=3000)
    ax = many.plot("state")
    texts = [t.get_text() for t in ax.get_xticklabels()]
    assert len(ax.patches) == 53 and len(texts) == 53
    assert [t for t in texts if t] == states[::2]  # 27 of 53 written: at most about 30
    assert all(t.get_rotation() == 90 for t in ax.get_xticklabels())
    ax = many.plot("x", "state")
    assert len([t for t in ax.get_yticklabels() if t.get_text()]) == 27
    for frame_ in (column_shares(many, "state"), column_shares(m, "income"), column_shares(m, "city")):
        assert ((frame_["low"] <= frame_["share"]) & (frame_["share"] <= frame_["high"])).all()
