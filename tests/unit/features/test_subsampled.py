"""Unit tests of SubsampledRFF (opendp_sketch/features/subsampled.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

import opendp_sketch as dps
from opendp_sketch.features.base import feature_map_from_dict
from opendp_sketch.features.subsampled import SubsampledRFF, row_hash
from opendp_sketch.testing import check_roundtrip, check_sum_invariance

RNG = np.random.default_rng(20240705)
X_PROBE = RNG.uniform(-2.0, 2.0, (400, 3))

#: r·d ≤ 64 takes the gather path, larger r·d the grouped-product path, r = m' the plain product
MAPS = {
    "gather-r1": lambda: SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1, r=1),
    "gather-r4": lambda: SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1, r=4),
    "grouped-r8-laplacian": lambda: SubsampledRFF(
        dim=12, num_features=64, bandwidth=2.0, kernel="laplacian", seed=2, r=8
    ),
    "full-r32": lambda: SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1, r=32),
}


def _probe(fm: SubsampledRFF) -> np.ndarray:
    return np.random.default_rng(3).uniform(-2.0, 2.0, (400, fm.dim))


# -- construction -----------------------------------------------------------------------------
@pytest.mark.parametrize("r", [0, -1, 3, 33, 64, 2.0, True, "4"])
def test_r_must_be_a_divisor_of_the_number_of_frequencies(r):
    with pytest.raises(ValueError, match=r"^r \("):
        SubsampledRFF(dim=3, num_features=64, r=r)


def test_rff_arguments_are_still_validated():
    with pytest.raises(ValueError, match="num_features"):
        SubsampledRFF(dim=3, num_features=7, r=1)
    with pytest.raises(ValueError, match="kernel"):
        SubsampledRFF(dim=3, num_features=8, kernel="cosine", r=1)


def test_default_r_is_no_subsampling_and_equals_rff_integers():
    fm = SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1)
    full = dps.RFF(dim=3, num_features=64, bandwidth=0.7, seed=1)
    assert fm.r == 32 and fm.num_blocks == 1
    np.testing.assert_array_equal(fm.fixed_features(X_PROBE), full.fixed_features(X_PROBE))
    assert fm.fixed_sum(X_PROBE) == full.fixed_sum(X_PROBE)
    assert fm.int_sensitivity(1) == full.int_sensitivity(1) and fm.int_sensitivity(2) == full.int_sensitivity(
        2
    )


def test_base_map_is_the_rff_with_the_same_frequencies():
    fm = MAPS["gather-r4"]()
    base = fm.base_map
    assert type(base) is dps.RFF and base == dps.RFF(dim=3, num_features=64, bandwidth=0.7, seed=1)
    np.testing.assert_array_equal(base.frequencies, fm.frequencies)
    np.testing.assert_array_equal(fm.transform(X_PROBE), base.transform(X_PROBE))
    # a different map from RFF and from another r, although the frequencies agree
    assert fm != base and fm.fingerprint() != base.fingerprint()
    assert fm != MAPS["gather-r1"]()


# -- the selection ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_each_row_has_one_block_of_rescaled_rff_pairs(name):
    fm = MAPS[name]()
    X = _probe(fm)
    q = fm.fixed_features(X)
    full = fm.base_map.fixed_features(X)
    b = fm.blocks(X)
    mp, r, B = fm.num_frequencies, fm.r, fm.num_blocks
    assert q.dtype == np.int64 and q.shape == (400, 2 * mp)
    assert b.min() >= 0 and b.max() < B
    cols = b[:, None] * r + np.arange(r)
    # the selected pairs are the certified RFF integers times the exact rescale B
    np.testing.assert_array_equal(
        np.take_along_axis(q[:, :mp], cols, 1), B * np.take_along_axis(full[:, :mp], cols, 1)
    )
    np.testing.assert_array_equal(
        np.take_along_axis(q[:, mp:], cols, 1), B * np.take_along_axis(full[:, mp:], cols, 1)
    )
    # and nothing else is set
    mask = np.zeros((400, mp), dtype=bool)
    np.put_along_axis(mask, cols, True, axis=1)
    assert not q[:, :mp][~mask].any() and not q[:, mp:][~mask].any()


@pytest.mark.parametrize("name", list(MAPS))
def test_features_are_a_function_of_the_row_alone(name):
    fm = MAPS[name]()
    X = _probe(fm)
    q = fm.fixed_features(X)
    perm = np.random.default_rng(0).permutation(400)
    np.testing.assert_array_equal(fm.fixed_features(X[perm]), q[perm])
    for i in range(0, 400, 37):
        np.testing.assert_array_equal(fm.fixed_features(X[i : i + 1]), q[i : i + 1])
    # removing a row leaves every other row's features unchanged (no position-based masks)
    np.testing.assert_array_equal(fm.fixed_features(np.delete(X, 5, axis=0)), np.delete(q, 5, axis=0))


@pytest.mark.parametrize("name", list(MAPS))
def test_sum_is_exact_for_every_chunking_and_thread_count(name):
    fm = MAPS[name]()
    check_sum_invariance(fm, _probe(fm), clip=(-1.5, 1.5), chunk_rows=(1, 7, 4096), n_jobs=(1, 2))


def test_identical_rows_share_a_block_and_signed_zero_is_one_value():
    fm = MAPS["gather-r1"]()
    X = np.array([[0.25, -1.0, 0.5]] * 5 + [[0.0, 1.0, 0.0], [-0.0, 1.0, -0.0]])
    b = fm.blocks(X)
    assert len(set(b[:5].tolist())) == 1 and b[5] == b[6]
    np.testing.assert_array_equal(fm.fixed_features(X[5:6]), fm.fixed_features(X[6:7]))


def test_the_block_depends_on_the_seed():
    X = _probe(MAPS["gather-r1"]())
    b0 = SubsampledRFF(dim=3, num_features=64, seed=0, r=1).blocks(X)
    b1 = SubsampledRFF(dim=3, num_features=64, seed=1, r=1).blocks(X)
    assert (b0 != b1).mean() > 0.8  # independent uniform blocks agree 1/32 of the time


def test_row_hash_is_uniform_over_blocks():
    # chi-square test of uniformity of 32 blocks over 20 000 distinct rows (fails at p < 1e-4 only)
    fm = SubsampledRFF(dim=5, num_features=64, seed=9, r=1)
    X = np.random.default_rng(5).normal(size=(20_000, 5))
    counts = np.bincount(fm.blocks(X), minlength=32)
    assert stats.chisquare(counts).pvalue > 1e-4
    # rows differing only in the last bit the rounding keeps (2^-24 for max|x| = 0.75, d = 5)
    # are spread as well: the hash avalanches
    Y = np.full((20_000, 5), 0.75)
    Y[:, 2] = 0.25 + np.arange(20_000) * 2.0**-24
    assert np.unique(fm.fixed_features(Y[:2000]), axis=0).shape[0] > 1000
    counts = np.bincount(fm.blocks(Y), minlength=32)
    assert stats.chisquare(counts).pvalue > 1e-4
    # rows equal after the map's rounding are the same row to the map: same block
    assert np.unique(fm.blocks(Y[:1] + np.arange(50)[:, None] * 2.0**-40)).size == 1


def test_row_hash_of_columns_in_another_order_differs():
    X = np.array([[1.0, 2.0], [2.0, 1.0]])
    h = row_hash(X, key=0)
    assert h[0] != h[1]


@pytest.mark.parametrize("name", ["gather-r1", "grouped-r8-laplacian"])
def test_subsampled_mean_is_unbiased_for_the_rff_mean(name):
    # D_ij = Φ_sub(x_i)_j − Φ(x_i)_j has mean 0 and variance (B − 1)Φ_j(x_i)² over a uniform block;
    # each standardised coordinate sum is ≈ N(0, 1); Bonferroni over the 64 coordinates at 1e-4
    fm = MAPS[name]()
    # concentrated data: |E Φ_j| is large, so the power check below has a large effect
    X = 0.3 + 0.2 * np.random.default_rng(11).normal(size=(20_000, fm.dim))
    sub = fm.fixed_features(X) * fm.unit
    full = fm.transform(X)
    z = (sub - full).sum(axis=0) / np.sqrt((fm.num_blocks - 1) * (full**2).sum(axis=0))
    limit = stats.norm.isf(1e-4 / (2 * z.size))
    assert np.abs(z).max() < limit
    # and the test has power: a mask that never picks block 0 is detected
    biased = sub.copy()
    biased[:, : fm.r] = 0.0
    z_b = (biased - full).sum(axis=0) / np.sqrt((fm.num_blocks - 1) * (full**2).sum(axis=0))
    assert np.abs(z_b).max() > limit


def test_sensitivities_follow_the_formulas():
    for r in (1, 2, 4, 8, 16, 32):
        fm = SubsampledRFF(dim=3, num_features=64, r=r)
        B = 32 // r
        assert fm._int_bound(2) == B * B * r * 4**20
        assert fm._int_bound(1) == B * int(np.floor(np.sqrt(2) * r * 2**20))
        assert abs(fm.sensitivity(2) - 32 / np.sqrt(r)) < 1e-9
        assert fm.sensitivity(1) <= np.sqrt(2) * 32 and fm.sensitivity(1) > np.sqrt(2) * 32 * (1 - 1e-6)


# -- serialisation ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MAPS))
def test_roundtrip_through_json(name):
    fm = MAPS[name]()
    copy = check_roundtrip(fm, _probe(fm)[:20])
    assert isinstance(copy, SubsampledRFF) and copy.r == fm.r
    spec = json.loads(json.dumps(fm.to_dict()))
    assert spec["kind"] == "SubsampledRFF" and spec["params"]["r"] == fm.r
    spec["params"]["r"] = fm.r * 2 if fm.r * 2 <= fm.num_frequencies else 1
    with pytest.raises(ValueError, match="fingerprint"):
        feature_map_from_dict(spec)


def test_kde_reads_a_subsampled_sketch_like_an_rff_sketch():
    # exact (noise-free) sums: the subsampled KDE is close to the full one
    fm = SubsampledRFF(dim=2, num_features=400, bandwidth=0.5, seed=4, r=20)
    X = np.random.default_rng(6).normal(size=(20_000, 2)) * 0.5
    Q = np.random.default_rng(7).normal(size=(50, 2)) * 0.5
    sk_sub = dps.Sketch(feature_map=fm, sum_units=np.array(fm.fixed_sum(X), dtype=np.int64), count=20_000)
    base = fm.base_map
    sk_full = dps.Sketch(
        feature_map=base, sum_units=np.array(base.fixed_sum(X), dtype=np.int64), count=20_000
    )
    np.testing.assert_allclose(dps.KDE(sk_sub)(Q), dps.KDE(sk_full)(Q), atol=0.03)
