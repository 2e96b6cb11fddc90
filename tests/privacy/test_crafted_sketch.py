"""A crafted sketch file cannot make ``Sketch.load`` exhaust memory (issue 37, item 4).

The audit's file: a feature-map spec of 1–12 maximal random-feature maps in a ``Composite``,
735–848 bytes, each member within the old per-map limit, drove the load to 0.9–3.7 GiB before
the fingerprint check refused it. The work a spec asks for is now bounded in total (every member,
nested ones included), before anything is built. Memory is measured with ``tracemalloc``
(numpy reports its allocations to it), never with timings.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.sketch import MAX_DRAWS, SketchFormatError, _digest

STORED = 130_000  # zeros: a 1 MiB entry that compresses to about a kilobyte


def _craft(path, members: list[dict], stored: int = STORED, nest: int = 0) -> None:
    """A sketch file whose header declares ``members`` (with a valid checksum: no key needed)."""
    spec: dict = {"kind": "Composite", "params": {"maps": members}, "fingerprint": "0" * 32}
    for _ in range(nest):
        spec = {"kind": "Composite", "params": {"maps": [spec]}, "fingerprint": "0" * 32}
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=4)
    meta = dps.Sketch(fm, np.zeros(4, dtype=np.int64), count=10, noise={}, privacy={}).to_dict()
    meta["feature_map"] = spec
    sums = np.zeros(stored, dtype="<i8")
    meta["sha256"] = _digest(meta, sums)
    with open(path, "wb") as f:
        header = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
        np.savez_compressed(f, meta=header, sum_units=sums)


def _rff(dim: int, features: int) -> dict:
    spec = dps.RFF(dim=2, num_features=16, bandwidth=0.5, seed=3).to_dict()
    return {
        "kind": "RFF",
        "params": {**spec["params"], "dim": dim, "num_features": features},
        "fingerprint": "x",
    }


def _race(dim: int, rows: int, hashes: int) -> dict:
    spec = dps.RACE(dim=2, rows=5, buckets=7, bucket_width=0.5, seed=4).to_dict()
    return {"kind": "RACE", "params": {**spec["params"], "dim": dim, "rows": rows, "hashes_per_row": hashes}}


def _load_peak(path, **kwargs) -> tuple[str, int]:
    tracemalloc.start()
    try:
        with pytest.raises(SketchFormatError) as err:
            dps.Sketch.load(path, **kwargs)
        return str(err.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("count", [1, 12])
def test_the_audits_maximal_rff_files_are_refused_in_little_memory(tmp_path, count):
    path = tmp_path / "crafted.sketch"
    _craft(path, [_rff(516, STORED)] * count)  # each 67 M draws: under the old per-map limit
    assert path.stat().st_size < 2_000
    message, peak = _load_peak(path)
    assert "public random numbers in all" in message and "max_draws" in message
    assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MiB traced"


def test_many_small_members_add_up(tmp_path):
    """Each member is small; only the total is too much (and nested composites count too)."""
    member = _rff(16, 40_000)  # 640 k draws each
    path = tmp_path / "many.sketch"
    _craft(path, [member] * 4, nest=3)
    message, peak = _load_peak(path)
    assert "2560000 public random numbers in all" in message
    assert peak < 100 * 2**20


def test_a_spec_at_the_limit_is_built_in_bounded_memory_then_refused_by_its_fingerprint(tmp_path):
    path = tmp_path / "limit.sketch"
    _craft(path, [_race(128, 1024, 16)])  # exactly MAX_DRAWS
    assert 128 * 1024 * 16 == MAX_DRAWS
    message, peak = _load_peak(path)
    assert "fingerprint" in message
    assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MiB traced"


def test_oversized_blocks_and_deep_nesting_are_refused(tmp_path):
    marg = dps.MarginalTables(bounds=([0.0] * 3, [1.0] * 3), subsets=[[0, 1, 2]], bins=[[4, 4, 4]]).to_dict()
    marg["params"]["bins"] = [[1000, 1000, 1000]]  # 10⁹ cells, each side under the stored length
    path = tmp_path / "block.sketch"
    _craft(path, [marg])
    assert "cells exceeds" in _load_peak(path)[0]
    path = tmp_path / "deep.sketch"
    _craft(path, [_rff(2, 16)], nest=40)
    assert "nested more than 32 levels" in _load_peak(path)[0]


def test_max_draws_admits_a_trusted_large_map(tmp_path):
    fm = dps.RFF(dim=64, num_features=40_000, bandwidth=1.0, seed=1)  # 2.56 M draws
    sk = dps.Sketch(fm, np.zeros(fm.num_features, dtype=np.int64), count=5, noise={}, privacy={})
    path = tmp_path / "big.sketch"
    sk.save(path)
    with pytest.raises(SketchFormatError, match="max_draws"):
        dps.Sketch.load(path)
    assert dps.Sketch.load(path, max_draws=1 << 22).feature_map.num_features == fm.num_features
