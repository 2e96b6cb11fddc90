"""Unit tests of the shared chunked exact sum (opendp_sketch/features/base.py)."""

from __future__ import annotations

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.features import base
from opendp_sketch.features.base import scratch_array

RNG = np.random.default_rng(7)
X = RNG.uniform(-2.0, 2.0, (500, 3))
BOX = (np.full(3, -1.0), np.full(3, 1.0))
MAPS = {
    "rff": lambda: dps.RFF(dim=3, num_features=32, bandwidth=0.5, seed=1),
    "histogram": lambda: dps.Histogram(bounds=(-1.0, 1.0), bins=5, dim=3),
    "race": lambda: dps.RACE(dim=3, rows=4, buckets=9, seed=2),
    "moments": lambda: dps.Moments(dim=3, radius=2.0),
}


@pytest.mark.parametrize("name", list(MAPS))
def test_fixed_sum_reads_any_real_dtype_and_layout(name):
    # chunks are converted one by one; the result is the float64 sum whatever the input's layout
    fm = MAPS[name]()
    expected = fm.fixed_sum(X.astype(np.float32).astype(np.float64), clip=BOX)
    for view in (X.astype(np.float32), np.asfortranarray(X.astype(np.float32))):
        assert fm.fixed_sum(view, clip=BOX, chunk_rows=37, n_jobs=2) == expected
    wide = np.zeros((500, 6))
    wide[:, ::2] = X
    assert fm.fixed_sum(wide[:, ::2], clip=BOX, chunk_rows=64) == fm.fixed_sum(X, clip=BOX)
    ints = RNG.integers(-3, 4, (200, 3))
    assert fm.fixed_sum(ints, clip=BOX, chunk_rows=9) == fm.fixed_sum(ints.astype(np.float64), clip=BOX)


@pytest.mark.parametrize("name", list(MAPS))
def test_per_chunk_clip_sends_nan_to_the_lower_corner_and_clips_infinities(name):
    fm = MAPS[name]()
    bad = X.copy()
    bad[::7, 0] = np.nan
    bad[1::7, 1] = np.inf
    bad[2::7, 2] = -np.inf
    clipped = np.clip(np.where(np.isnan(bad), -1.0, bad), -1.0, 1.0)
    assert fm.fixed_sum(bad, clip=BOX, chunk_rows=13, n_jobs=2) == fm.fixed_sum(clipped)


def test_rff_tiles_and_rejected_pairs_give_the_row_by_row_integers(monkeypatch):
    # tiny tiles (16 rows) and rows whose float32 phase overflows in some tiles only: each row's
    # integers are those it has alone, so the sum equals the sum of single-row evaluations
    monkeypatch.setattr(base, "TILE_ENTRIES", 16 * 16)
    fm = dps.RFF(dim=3, num_features=32, bandwidth=0.5, seed=1)
    Y = X[:100].copy()
    Y[[3, 40, 41, 99], 0] = 1e300
    alone = sum(fm.fixed_features(Y[i : i + 1]).astype(object).sum(axis=0) for i in range(Y.shape[0]))
    with np.errstate(all="ignore"):
        for chunk_rows, n_jobs in ((100, 1), (7, 2), (33, 3)):
            assert fm.fixed_sum(Y, chunk_rows=chunk_rows, n_jobs=n_jobs) == list(alone)
    assert (fm.fixed_features(Y[3:4]) == 0).all()  # an overflowed phase gives the pair (0, 0)


def test_scratch_array_is_fresh_outside_a_sum():
    a, b = scratch_array("t", (4, 2)), scratch_array("t", (4, 2), np.int32)
    assert a.shape == (4, 2) and a.dtype == np.float64 and b.dtype == np.int32
    assert not np.shares_memory(a, scratch_array("t", (4, 2)))
