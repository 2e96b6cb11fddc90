"""Oblivious JL projection: seeded public matrix, row-wise exact map (1-stable), sound output box
under floating-point rounding, chaining into a private sketch, query projection, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch._fixed import quantize_rows
from opendp_sketch.backends.domains import box_domain
from opendp_sketch.backends.projections import (
    JLProjection,
    _round_rows,
    make_jl_projection,
    then_jl_projection,
)

SYM = dp.symmetric_distance()
LO = np.array([-1.0, 0.0, -3.5, 2.0, -1e-3, 0.25, -7.0, 0.0, -2.0, 10.0])
HI = np.array([1.0, 1.0, 0.5, 2.5, 1e-3, 0.75, 9.0, 1e-6, 4.0, 12.0])


def corners(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """All 2^d corners of the box (d ≤ 12)."""
    return np.array(list(itertools.product(*zip(lo, hi))), dtype=np.float64)


def adversarial(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Corners, the lower/upper corner, a row of one huge coordinate, tiny rows, random points."""
    d = lo.size
    tiny = np.full((2, d), 0.0)
    tiny[1, 0] = 1e-310 if lo[0] <= 0 <= hi[0] else lo[0]
    spike = lo.copy()
    spike[np.argmax(np.maximum(np.abs(lo), np.abs(hi)))] = hi[np.argmax(np.maximum(np.abs(lo), np.abs(hi)))]
    pts = [
        corners(lo, hi),
        lo[None],
        hi[None],
        spike[None],
        np.clip(tiny, lo, hi),
        rng.uniform(lo, hi, (200, d)),
    ]
    return np.concatenate(pts)


def test_matrix_is_public_seeded_and_scaled():
    a, b = JLProjection(300, 40, seed=5), JLProjection(300, 40, seed=5)
    assert np.array_equal(a.matrix, b.matrix) and a == b and a.fingerprint() == b.fingerprint()
    assert not np.array_equal(a.matrix, JLProjection(300, 40, seed=6).matrix)
    assert a.matrix.shape == (40, 300) and not a.matrix.flags.writeable
    # entries of G/√k: variance 1/k
    assert a.matrix.var() * 40 == pytest.approx(1.0, rel=0.05)
    # an RFF map drawn with the same seed uses a different stream
    fm = dps.RFF(dim=40, num_features=600, bandwidth=1.0, seed=5)
    assert abs(np.corrcoef(fm.frequencies[:, :300].ravel(), a.matrix.ravel())[0, 1]) < 0.05
    # distances are preserved in expectation: E‖Wᵀx‖² = ‖x‖²
    x = np.random.default_rng(0).normal(size=(1, 300))
    ratios = [np.sum(JLProjection(300, 40, seed=s).transform(x) ** 2) / np.sum(x**2) for s in range(200)]
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.05)


def test_round_rows_is_quantize_rows():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 17)) * np.exp(rng.uniform(-30, 30, size=(300, 1)))
    X[0] = 0.0
    X[1] = 1e-305  # below 2^-300: zeroed
    X[2, :5] = -(2.0**200)
    np.testing.assert_array_equal(_round_rows(X, 22), quantize_rows(X, 22))


def test_rowwise_and_one_stable_under_adversarial_rows():
    rng = np.random.default_rng(2)
    t = make_jl_projection(box_domain((LO, HI)), SYM, output_dim=6, seed=3)
    assert t.map(1) == 1 and t.map(7) == 7
    X = adversarial(LO, HI, rng)
    Y = t(X)
    # one output row per input row, and each depends on its own row alone: bitwise equal when
    # the row is computed alone, in another order, or with other chunk sizes
    single = np.concatenate([t(X[i : i + 1]) for i in range(0, X.shape[0], 97)])
    np.testing.assert_array_equal(single, Y[::97])
    perm = rng.permutation(X.shape[0])
    np.testing.assert_array_equal(t(X[perm]), Y[perm])
    chunked = make_jl_projection(box_domain((LO, HI)), SYM, output_dim=6, seed=3, chunk_rows=7)
    np.testing.assert_array_equal(chunked(X), Y)
    # neighbours: adding one (extreme) row adds exactly one output row, all others unchanged
    extra = HI.copy()
    extra[::2] = LO[::2]
    X2 = np.insert(X, 50, extra, axis=0)
    Y2 = t(X2)
    np.testing.assert_array_equal(np.delete(Y2, 50, axis=0), Y)
    np.testing.assert_array_equal(Y2[50], t(extra[None])[0])
    assert t(np.empty((0, LO.size))).shape == (0, 6)


@pytest.mark.parametrize("scale", [1.0, 1e50, 1e-50])
def test_output_bounds_contain_every_projected_point(scale):
    lo, hi = LO * scale, HI * scale
    proj = JLProjection(LO.size, 12, seed=4)
    lower, upper = proj.output_bounds((lo, hi))
    pts = adversarial(lo, hi, np.random.default_rng(3))
    raw = proj.transform(pts)  # the exact product, before the transformation's clip
    assert (raw >= lower).all() and (raw <= upper).all()
    # tight: the worst corner per coordinate reaches the bound up to the rounding allowances
    best = corners(lo, hi)
    r = proj.transform(best)
    width = upper - lower
    assert np.all(r.min(axis=0) - lower <= 1e-5 * width) and np.all(upper - r.max(axis=0) <= 1e-5 * width)
    # the transformation's output is a member of its declared output domain
    t = make_jl_projection(box_domain((lo, hi)), SYM, output_dim=12, seed=4)
    assert t.output_domain.member(t(pts))
    np.testing.assert_array_equal(t(pts), raw)  # the clip never bites on members


def test_queries_are_projected_like_data_and_kde_survives():
    rng = np.random.default_rng(4)
    d, k = 400, 256
    centers = rng.normal(size=(3, d)) / np.sqrt(d)
    X = (centers[rng.integers(0, 3, 600)] + rng.normal(scale=0.3 / np.sqrt(d), size=(600, d))).clip(-1, 1)
    t = dps.make_box_clip(
        dp.numpy.array2_domain(num_columns=d, T=float, nan=False), SYM, (-1.0, 1.0)
    ) >> then_jl_projection(k, seed=9)
    proj = JLProjection(d, k, seed=9)
    np.testing.assert_array_equal(proj.transform(X), t(X))
    np.testing.assert_array_equal(proj.transform(X[0]), t(X[:1]))  # a 1-D point is one row
    # Gaussian KDE on the projected points vs the original ones (Thm 7.2: additive error)
    Q = centers + rng.normal(scale=0.3 / np.sqrt(d), size=(3, d))
    sigma = 0.5

    def kde(A, B):
        return np.exp(-((A[None] - B[:, None]) ** 2).sum(-1) / (2 * sigma**2)).mean(1)

    assert np.abs(kde(t(X), proj.transform(Q)) - kde(X, Q)).max() < 0.05


def test_chain_into_private_sketch_and_release():
    rng = np.random.default_rng(5)
    d, k = 40, 8
    X = rng.uniform(0.0, 1.0, size=(2000, d))
    fm = dps.RFF(dim=k, num_features=200, bandwidth=1.5, seed=0)
    clip = dps.make_box_clip(dp.numpy.array2_domain(num_columns=d, T=float, nan=False), SYM, (0.0, 1.0))
    chain = clip >> then_jl_projection(k, seed=2)
    meas = chain >> dps.then_private_sketch(dp.max_divergence(), fm, 50.0)
    direct = dps.make_private_sketch(chain.output_domain, SYM, dp.max_divergence(), fm, 50.0)
    assert meas.map(1) == direct.map(1)  # the projection is 1-stable: no extra loss
    sk = meas(X)
    assert isinstance(sk, dps.Sketch) and sk.feature_map == fm
    lower, upper = JLProjection(d, k, seed=2).output_bounds((0.0, 1.0))
    assert sk.bounds == (lower.tolist(), upper.tolist())
    # budgeted release of the chain, then KDE of projected queries
    released = dp.binary_search_chain(
        lambda s: chain >> dps.then_private_sketch(dp.max_divergence(), fm, s), d_in=1, d_out=5.0
    )
    assert released.map(1) <= 5.0
    sk = released(X)
    Q = JLProjection(d, k, seed=2).transform(X[:20])
    Y = chain(X)
    exact = fm.kernel_value(Y[None], Q[:, None]).mean(1)
    assert np.abs(dps.KDE(sk)(Q) - exact).max() < 0.25


def test_registered_for_context():
    from opendp.context import constructors

    if "jl_projection" not in constructors:  # the package registers it on import
        dp.register(make_jl_projection, name="jl_projection")
    X = np.random.default_rng(6).uniform(size=(300, 20))
    ctx = dp.Context.compositor(
        data=X,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        domain=box_domain((0.0, 1.0), num_columns=20),
        split_evenly_over=1,
    )
    fm = dps.RFF(dim=4, num_features=20, bandwidth=1.0, seed=0)
    sk = ctx.query().jl_projection(4, seed=1).private_sketch(fm).release()
    assert isinstance(sk, dps.Sketch) and sk.feature_map.input_dim == 4


def test_serialization_round_trip():
    proj = JLProjection(30, 5, seed=11)
    spec = proj.to_dict()
    assert JLProjection.from_dict(spec) == proj
    with pytest.raises(ValueError, match="fingerprint"):
        JLProjection.from_dict({**spec, "fingerprint": "0" * 32})
    with pytest.raises(ValueError, match="JLProjection"):
        JLProjection.from_dict({"kind": "RFF", "params": {}})


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8", None])
def test_bad_output_dim(bad):
    with pytest.raises(ValueError, match="output_dim"):
        make_jl_projection(box_domain((0.0, 1.0), num_columns=3), SYM, output_dim=bad)


def test_bad_arguments_and_data(secret):
    box = box_domain((0.0, 1.0), num_columns=3)
    with pytest.raises(ValueError, match="box_domain"):
        make_jl_projection(dp.numpy.array2_domain(num_columns=3, T=float), SYM, output_dim=2)
    with pytest.raises(ValueError, match="symmetric_distance"):
        make_jl_projection(box, dp.insert_delete_distance(), output_dim=2)
    with pytest.raises(ValueError, match="seed"):
        make_jl_projection(box, SYM, output_dim=2, seed=-1)
    with pytest.raises(ValueError, match="chunk_rows"):
        make_jl_projection(box, SYM, output_dim=2, chunk_rows=0)
    for huge_or_tiny in (1e70, 1e-70):
        with pytest.raises(ValueError, match="2\\^-200 and 2\\^200"):
            make_jl_projection(box_domain((0.0, huge_or_tiny), num_columns=3), SYM, output_dim=2)
    proj = JLProjection(3, 2)
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        proj.transform(np.zeros((4, 5)))
    with pytest.raises(ValueError, match="NaN"):
        proj.transform([[0.1, np.nan, 0.2]])
    # a non-member (NaN) reaching the function directly is refused without echoing data
    t = make_jl_projection(box, SYM, output_dim=2)
    # inside a measurement a row outside the box is clipped into it (NaN to the lower bound), as
    # make_box_clip does: raising there would be an uncharged oracle on that row
    assert np.array_equal(t(np.array([[secret, np.nan, 0.5]])), t(np.array([[1.0, 0.0, 0.5]])))
