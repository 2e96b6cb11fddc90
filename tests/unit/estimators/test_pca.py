"""Compressive PCA from RandomQuadratic sketches: exact recovery from noise-free sketches (both
methods), accuracy of a real release, and bad input."""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest
import scipy.linalg

import opendp_sketch as dps
from opendp_sketch.estimators.pca import CompressivePCA, compressive_pca


def exact_sketch(fm, X):
    return dps.Sketch(fm, np.array(fm.fixed_sum(X), dtype=np.int64), X.shape[0])


def spiked(n, d, top, tail, seed):
    """Rows inside the unit ball with second moment ≈ U diag(top², tail², …) Uᵀ (U random)."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.normal(size=(d, d)))[0]
    scales = np.array(list(top) + [tail] * (d - len(top)))
    X = rng.normal(size=(n, d)) * scales @ U.T
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]


def top_subspace(X, k):
    vals, vecs = np.linalg.eigh(X.T @ X / X.shape[0])
    return vecs[:, ::-1][:, :k]


def sin_angle(rows, V):
    return float(np.sin(scipy.linalg.subspace_angles(rows.T, V).max()))


def test_lstsq_recovers_the_second_moment_exactly_from_a_noise_free_sketch():
    X = spiked(3000, 5, [0.4, 0.25], 0.1, seed=0)
    fm = dps.RandomQuadratic(dim=5, num_features=40, seed=1)
    pca = CompressivePCA(n_components=2).fit(exact_sketch(fm, X))
    assert pca.method_ == "lstsq"
    M = X.T @ X / X.shape[0]
    np.testing.assert_allclose(pca.second_moment_, M, atol=1e-6)  # fixed-point truncation only
    assert sin_angle(pca.components_, top_subspace(X, 2)) < 1e-4
    np.testing.assert_allclose(pca.explained_variance_, np.linalg.eigvalsh(M)[::-1][:2], rtol=1e-4)
    np.testing.assert_allclose(pca.components_ @ pca.components_.T, np.eye(2), atol=1e-12)


def test_low_rank_recovers_a_spiked_model_from_fewer_than_d_d1_2_features():
    X = spiked(5000, 8, [0.4, 0.25], 0.05, seed=2)
    fm = dps.RandomQuadratic(dim=8, num_features=30, seed=3)  # 30 < 8·9/2 = 36 unknowns
    pca = CompressivePCA(n_components=2).fit(exact_sketch(fm, X))
    assert pca.method_ == "low_rank"
    assert sin_angle(pca.components_, top_subspace(X, 2)) < 0.02
    with pytest.raises(ValueError, match="d\\(d\\+1\\)/2 = 36"):
        CompressivePCA(n_components=2, method="lstsq").fit(exact_sketch(fm, X))


def test_a_real_release_finds_the_leading_direction():
    dp.enable_features("contrib", "honest-but-curious")
    X = spiked(20_000, 5, [0.4], 0.1, seed=4)
    fm = dps.RandomQuadratic(dim=5, num_features=60, seed=5)
    sk = dps.release_sketch(X, fm, bounds=(-1.0, 1.0), epsilon=1.0)
    pca = CompressivePCA(n_components=1).fit(sk)
    # over 200 releases: median 0.007, max 0.019, std 0.003; 0.06 is > 15 std above the median
    assert sin_angle(pca.components_, top_subspace(X, 1)) < 0.06
    assert pca.noise_std_ == pytest.approx(np.sqrt(sk.sum_variance) / sk.n_hat)


def test_transform_function_form_and_sign_convention():
    X = spiked(2000, 4, [0.4, 0.2], 0.05, seed=6)
    fm = dps.RandomQuadratic(dim=4, num_features=30, seed=7)
    sk = exact_sketch(fm, X)
    pca = CompressivePCA(n_components=2).fit(sk)
    np.testing.assert_allclose(pca.transform(X[:10]), X[:10] @ pca.components_.T)
    np.testing.assert_allclose(
        pca.inverse_transform(pca.transform(X[:3])), X[:3] @ pca.components_.T @ pca.components_
    )
    np.testing.assert_array_equal(compressive_pca(sk, 2), pca.components_)
    peak = pca.components_[np.arange(2), np.argmax(np.abs(pca.components_), axis=1)]
    assert (peak > 0).all()


def test_bad_input_is_refused_with_clear_errors():
    X = spiked(500, 3, [0.4], 0.1, seed=8)
    sk = exact_sketch(dps.RandomQuadratic(dim=3, num_features=12, seed=0), X)
    rff = dps.RFF(dim=3, num_features=10, bandwidth=1.0, seed=0)
    with pytest.raises(ValueError, match="CompressivePCA needs a RandomQuadratic sketch, got RFF"):
        CompressivePCA(1).fit(exact_sketch(rff, X))
    with pytest.raises(ValueError, match="needs a Sketch"):
        CompressivePCA(1).fit(X)
    for k in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match="n_components"):
            CompressivePCA(k).fit(sk)
    with pytest.raises(ValueError, match="method"):
        CompressivePCA(1, method="svd").fit(sk)
    with pytest.raises(ValueError, match="not identifiable"):
        CompressivePCA(3).fit(exact_sketch(dps.RandomQuadratic(dim=3, num_features=5, seed=0), X))
    with pytest.raises(ValueError, match="noisy count"):
        CompressivePCA(1).fit(dps.Sketch(sk.feature_map, sk.sum_units, 0))
    with pytest.raises(ValueError, match="not fitted"):
        CompressivePCA(1).transform(X)
    pca = CompressivePCA(1).fit(sk)
    with pytest.raises(ValueError, match="shape"):
        pca.transform(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        pca.transform(np.full((1, 3), np.nan))
