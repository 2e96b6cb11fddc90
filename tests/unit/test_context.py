"""``dp.Context`` integration of the registered constructors ``private_sketch``, ``box_clip``,
``feature_sum``, and the promise that a refused call spends no budget.

Note: every ``private_sketch`` query makes OpenDP search for the noise scale; each release here
takes a noticeable time, so the tests share releases where they can.
"""

from __future__ import annotations

import re

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps

BOX = (0.0, 1.0)


@pytest.fixture
def box2():
    return dps.box_domain(BOX, num_columns=2)


def _compositor(data, loss, domain, **kwargs):
    return dp.Context.compositor(
        data=data, privacy_unit=dp.unit_of(contributions=1), privacy_loss=loss, domain=domain, **kwargs
    )


# (a) -------------------------------------------------------------------------------------------


def test_split_evenly_two_sketches(data2d, hist2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2, split_evenly_over=2)
    assert ctx.remaining_privacy_loss() == [0.5, 0.5]

    sk1 = ctx.query().private_sketch(hist2d).release()
    assert isinstance(sk1, dps.Sketch)
    assert ctx.remaining_privacy_loss() == [0.5]
    assert ctx.current_privacy_loss() == [0.5]

    sk2 = ctx.query().private_sketch(hist2d).release()
    assert ctx.remaining_privacy_loss() == []
    assert ctx.current_privacy_loss() == [0.5, 0.5]

    for sk in (sk1, sk2):
        assert sk.noise["mechanism"] == "laplace"
        assert 0.495 <= sk.privacy["loss"] <= 0.5
        # ε_sum = 0.98 · 0.5 = Δ₁ / sum_scale
        assert hist2d.sensitivity(1) / sk.noise["sum_scale"] == pytest.approx(0.98 * 0.5, rel=1e-6)
        assert sk.bounds == ([0.0, 0.0], [1.0, 1.0])
    # two independent noise draws (8 + 1 discrete Laplace coordinates of scale ≈ 4 and 100)
    assert not (np.array_equal(sk1.sum_units, sk2.sum_units) and sk1.count == sk2.count)

    with pytest.raises(ValueError, match="exhausted"):
        ctx.query().private_sketch(hist2d).release()


# (b) + (g) with a privacy filter -----------------------------------------------------------------


def test_filter_release_failure_and_refusal(data2d, hist2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2)

    # (g) a query that fails while being built spends nothing and leaves the filter usable
    wrong = dps.Histogram(bounds=BOX, bins=4, dim=3)
    with pytest.raises(ValueError):
        ctx.query(epsilon=0.3).private_sketch(wrong).release()
    assert ctx.current_privacy_loss() == 0.0
    assert ctx.remaining_privacy_loss() == 1.0

    # (b) a query within the budget
    sk = ctx.query(epsilon=0.3).private_sketch(hist2d).release()
    assert 0.297 <= sk.privacy["loss"] <= 0.3
    assert ctx.current_privacy_loss() == pytest.approx(0.3, rel=1e-9)
    assert ctx.remaining_privacy_loss() == pytest.approx(0.7, rel=1e-9)

    # ... and one exceeding the remainder is refused
    with pytest.raises(dp.OpenDPException, match="exceed"):
        ctx.query(epsilon=0.8).private_sketch(hist2d).release()


def test_failed_construction_in_split_context_spends_nothing(data2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2, split_evenly_over=2)
    with pytest.raises(ValueError):
        ctx.query().private_sketch(dps.Histogram(bounds=BOX, bins=4, dim=3)).release()
    assert ctx.remaining_privacy_loss() == [0.5, 0.5]
    assert ctx.current_privacy_loss() == []


def test_context_construction_error_names_the_cause(data2d, box2):
    """The error of a mis-specified query must name its cause (the column mismatch).

    OpenDP's parameter search first evaluates the constructor at scale 0.0, so the feature map
    must be checked before the scale (OpenDP appends a note about the search to the message).
    """
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2)
    with pytest.raises(ValueError, match="^feature_map expects 3 columns but input_domain has 2"):
        ctx.query(epsilon=0.3).private_sketch(dps.Histogram(bounds=BOX, bins=4, dim=3)).release()


# (c), (d) other measures --------------------------------------------------------------------------


def test_zcdp_context_gives_gaussian(data2d, hist2d, box2):
    ctx = _compositor(data2d, dp.loss_of(rho=0.5), box2, split_evenly_over=1)
    sk = ctx.query().private_sketch(hist2d, output_measure=dp.zero_concentrated_divergence()).release()
    assert sk.noise["mechanism"] == "gaussian"
    assert sk.privacy["measure"] == "ZeroConcentratedDivergence"
    assert 0.495 <= sk.privacy["loss"] <= 0.5
    # ρ_sum = Δ₂²/(2σ²) = 0.98 ρ
    assert hist2d.sensitivity(2) ** 2 / (2 * sk.noise["sum_scale"] ** 2) == pytest.approx(
        0.98 * 0.5, rel=1e-6
    )
    assert ctx.remaining_privacy_loss() == []


def test_approx_dp_context_gives_gaussian(data2d, hist2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0, delta=1e-6), box2, split_evenly_over=1)
    sk = ctx.query().private_sketch(hist2d, output_measure=dp.zero_concentrated_divergence()).release()
    assert sk.noise["mechanism"] == "gaussian"
    ((eps, delta),) = ctx.current_privacy_loss()
    assert eps <= 1.0 and delta <= 1e-6
    # the same budget through release_sketch must give the same noise scale
    one_call = dps.release_sketch(data2d, hist2d, bounds=BOX, epsilon=1.0, delta=1e-6)
    assert sk.noise["sum_scale"] == pytest.approx(one_call.noise["sum_scale"], rel=1e-6)
    assert sk.noise["count_scale"] == pytest.approx(one_call.noise["count_scale"], rel=1e-6)


# (e) box_clip chain ----------------------------------------------------------------------------


def test_box_clip_then_private_sketch(hist2d):
    n = 1000
    X = np.tile([[-3.0, 5.0]], (n, 1))  # outside the box: clipped to (0, 1)
    dom = dp.numpy.array2_domain(num_columns=2, T=float, nan=False)
    ctx = _compositor(X, dp.loss_of(epsilon=1.0), dom, split_evenly_over=1)
    sk = ctx.query().box_clip(BOX).private_sketch(hist2d).release()
    assert sk.bounds == ([0.0, 0.0], [1.0, 1.0])
    assert 0.99 <= sk.privacy["loss"] <= 1.0
    # noise scale ≈ 2: |noise| < 60 fails with probability < 1e-12
    assert abs(sk.sum_units[0] - n) < 60
    assert abs(sk.sum_units[7] - n) < 60
    assert np.all(np.abs(sk.sum_units[[1, 2, 3, 4, 5, 6]]) < 60)


def test_context_nan_data_is_released_and_charged(hist2d):
    """A query that raised would not be charged: a free, repeatable oracle (issue 13, finding 3).

    The Context declares ``nan=False``, but a NaN actually in the data must not make the query
    fail: ``box_clip`` maps it to the public lower bound, the release goes through, and the
    budget is spent exactly once.
    """
    X = np.full((50, 2), 0.5)
    X[7, 0] = np.nan
    dom = dp.numpy.array2_domain(num_columns=2, T=float, nan=False)
    ctx = _compositor(X, dp.loss_of(epsilon=1.0), dom)
    sk = ctx.query(epsilon=0.3).box_clip(BOX).private_sketch(hist2d).release()
    assert isinstance(sk, dps.Sketch)
    assert ctx.current_privacy_loss() == pytest.approx(0.3)
    clip = dps.make_box_clip(dom, dp.symmetric_distance(), BOX)
    assert clip(X)[7].tolist() == [0.0, 0.5]  # NaN -> the public lower bound


# (f) feature_sum with OpenDP's own noise --------------------------------------------------------


def test_feature_sum_then_opendp_laplace(data2d, hist2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2, split_evenly_over=1)
    out = ctx.query().feature_sum(hist2d).laplace().release()
    out = np.asarray(out, dtype=np.float64)
    exact = np.asarray(hist2d.fixed_sum(data2d), dtype=np.float64)
    assert out.shape == exact.shape
    # Laplace scale Δ₁/ε = 2: |noise| < 60 fails with probability < 1e-12; the noise is real
    assert np.all(np.abs(out - exact) < 60)
    assert not np.array_equal(out, exact)
    assert ctx.remaining_privacy_loss() == []


def test_feature_sum_rff_then_opendp_laplace(data2d, rff2d, box2):
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), box2, split_evenly_over=1)
    out = np.asarray(ctx.query().feature_sum(rff2d).laplace().release())
    exact = np.ldexp(np.asarray(rff2d.fixed_sum(data2d), dtype=np.float64), -rff2d.frac_bits)
    # scale Δ₁/ε = √2·8 ≈ 11.3 in feature units: |noise| < 400 fails with probability < 1e-12
    assert np.all(np.abs(out - exact) < 400)


# a refused one-call release spends nothing ----------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        lambda X: np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X),
        lambda X: X[:, :1],
        lambda X: X.astype(object),
        lambda X: X.tolist(),
    ],
    ids=["nan", "columns", "object", "list"],
)
def test_release_sketch_bad_data_releases_nothing(data2d, hist2d, monkeypatch, bad):
    calls = []
    original = dp.Measurement.__call__

    def spy(self, arg):
        calls.append(type(arg).__name__)
        return original(self, arg)

    monkeypatch.setattr(dp.Measurement, "__call__", spy)
    with pytest.raises(ValueError):
        dps.release_sketch(bad(np.array(data2d)), hist2d, bounds=BOX, epsilon=1.0)
    assert calls == []
    # the spy does see a successful release (so the check above can fail)
    dps.release_sketch(np.array(data2d), hist2d, bounds=BOX, epsilon=1.0)
    assert calls, "the release did not go through Measurement.__call__"


def test_context_query_names_constructor_errors_for_registered_ops(data2d, box2):
    """Registered constructors validate their own arguments (bad bounds for box_clip)."""
    dom = dp.numpy.array2_domain(num_columns=2, T=float, nan=False)
    ctx = _compositor(data2d, dp.loss_of(epsilon=1.0), dom, split_evenly_over=1)
    with pytest.raises(ValueError, match=re.escape("must have lower < upper in every column")):
        ctx.query().box_clip((1.0, 0.0))
    assert ctx.remaining_privacy_loss() == [1.0]


# -- a schema sketch in the analyst's own Context on a mixed-type LazyFrame (issue 38, item 3) --------


def _mixed(n: int = 4000, seed: int = 0):
    import datetime as dt

    import polars as pl

    rng = np.random.default_rng(seed)
    income = rng.lognormal(10, 1, n)
    income[rng.random(n) < 0.2] = np.nan
    return pl.LazyFrame(
        {
            "income": income,
            "age": rng.integers(18, 91, n),
            "region": rng.choice(["North", "South", "East"], n),
            "member": rng.random(n) < 0.3,
            "joined": [dt.date(2020, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 366, n)],
        }
    )


MIXED = {
    "income": dps.Numeric(0, 1e6, scale="log", null="category"),
    "age": dps.Numeric(18, 90, integer=True),
    "region": ["North", "South", "East"],
    "member": bool,
    "joined": dps.Date("2020-01-01", "2020-12-31"),
}


def test_schema_sketch_and_opendp_polars_query_share_one_context():
    import polars as pl

    lf = _mixed()
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=2.0),
        split_by_weights=[1, 3],
        margins=[dp.polars.Margin(max_length=10_000)],
    )
    n = ctx.query().select(dp.len(signed=False)).release().collect().item()
    assert abs(n - 4000) < 100
    sk = dps.release_sketch_in_context(ctx, schema=dps.Schema(MIXED))
    assert ctx.remaining_privacy_loss() == []  # both shares spent, on one accountant
    assert sk.privacy["loss"] <= 1.5 + 1e-9 and sk.privacy["d_in"] == 1
    assert sk.column_names == ["income", "income:null", "age", "region", "member", "joined"]
    est = dps.M2M(sk)
    frame = lf.collect()
    assert est.mean()[1] == pytest.approx(frame["income"].is_nan().mean(), abs=0.03)
    assert est.shares("region")["region"].to_list() == ["North", "South", "East"]
    assert est.weighted_frame()["joined"].dtype == pl.Date


def test_schema_sketch_in_context_is_total_on_neighbouring_frames():
    """A frame and its neighbour with one adversarial row (NaN, inf, null, an unknown label, a
    date outside the range) both release, and are charged the same loss."""
    import datetime as dt

    import polars as pl

    base = _mixed(300, seed=1)
    bad = pl.LazyFrame(
        {
            "income": [float("inf")],
            "age": [None],
            "region": ["Atlantis"],
            "member": [None],
            "joined": [dt.date(1900, 1, 1)],
        },
        schema=base.collect_schema(),
    )
    losses = []
    for data in (base, pl.concat([base, bad])):
        ctx = dp.Context.compositor(
            data=data,
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(epsilon=1.0),
            split_evenly_over=1,
        )
        schema = dps.Schema({**MIXED, "region": dps.Categorical(["North", "South", "East"], null="category")})
        sk = dps.release_sketch_in_context(ctx, schema=schema)
        losses.append(sk.privacy["loss"])
    assert losses[0] == losses[1]


def test_schema_sketch_in_context_refusals_name_the_fix():
    ctx = dp.Context.compositor(
        data=_mixed(50),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=3,
    )
    with pytest.raises(ValueError, match="drop bounds"):
        dps.release_sketch_in_context(ctx, schema=dps.Schema({"age": (18, 90)}), bounds=(0, 1))
    with pytest.raises(ValueError, match=r"columns \['wage'\] are not in the data"):
        dps.release_sketch_in_context(ctx, schema=dps.Schema({"wage": (0, 1)}))
    with pytest.raises(ValueError, match=r"dps\.Date\(lower, upper\)"):
        dps.release_sketch_in_context(ctx, schema=dps.Schema({"joined": (0, 1)}))
    with pytest.raises(ValueError, match="give schema="):
        dps.release_sketch_in_context(ctx)
    assert len(ctx.remaining_privacy_loss()) == 3  # nothing was charged
