"""Exact-arithmetic helpers: quantized products are exact, quantization is row-wise."""

from fractions import Fraction

import numpy as np
import pytest

from opendp_sketch._fixed import exact_bits, exact_matmul, quantize_columns, quantize_rows


@pytest.mark.parametrize("dim", [1, 3, 10, 64, 1000])
def test_exact_matmul_equals_rational_arithmetic(dim):
    rng = np.random.default_rng(dim)
    X = rng.normal(size=(40, dim)) * rng.uniform(1e-3, 1e3, (40, 1))
    W = rng.standard_cauchy((dim, 12))
    b = exact_bits(dim)
    Xq, Wq = quantize_rows(X, b), quantize_columns(W, b)
    Z = exact_matmul(Xq, Wq)
    for i in range(0, 40, 7):
        for j in range(12):
            exact = sum(Fraction(Xq[i, k]) * Fraction(Wq[k, j]) for k in range(dim))
            assert Fraction(Z[i, j]) == exact


def test_exact_bits_leave_room_for_every_partial_sum():
    for dim in (1, 2, 3, 10, 64, 1000, 4096):
        b = exact_bits(dim)
        # |a_k b_k| ≤ 2^(2b) and dim of them stay below 2^52: every partial sum is representable
        assert dim * 2 ** (2 * b) <= 2**52
        assert b >= 20


def test_quantize_rows_is_rowwise_and_close():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5)) * rng.uniform(1e-6, 1e6, (300, 1))
    Q = quantize_rows(X, 24)
    assert all(np.array_equal(Q[i : i + 1], quantize_rows(X[i : i + 1], 24)) for i in range(300))
    rel = np.abs(Q - X).max(axis=1) / np.abs(X).max(axis=1)
    assert rel.max() <= 2.0**-24


def test_quantize_rows_handles_non_finite_and_tiny_rows():
    X = np.array([[np.nan, 1.0], [np.inf, -np.inf], [1e-310, 0.0], [1e308, 1e308]])
    Q = quantize_rows(X, 24)
    assert np.isfinite(Q).all()
    assert Q[0].tolist() == [0.0, 1.0]
    assert Q[1].tolist() == [2.0**300, -(2.0**300)]
    assert Q[2].tolist() == [0.0, 0.0]
    assert np.abs(Q[3]).max() <= 2.0**300


def test_accumulator_clipped_saturates_exactly_with_and_without_spill():
    from opendp_sketch._fixed import Accumulator

    acc = Accumulator(3)
    acc.add(np.array([5, -7, 2], dtype=np.int64))
    assert acc.clipped(6).tolist() == [5, -6, 2]
    big = np.array([2**62 - 1, -(2**62 - 1), 0], dtype=np.int64)
    for _ in range(4):  # forces the spill into Python integers
        acc.add(big)
    assert acc.total() == [4 * (2**62 - 1) + 5, -4 * (2**62 - 1) - 7, 2]
    assert acc.clipped(2**63 - 1).tolist() == [2**63 - 1, -(2**63 - 1), 2]
