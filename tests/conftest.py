"""Shared fixtures: OpenDP features, seeded data.

OpenDP's plugin API (``dp.register``, user domains, user transformations) needs the
``"contrib"`` and ``"honest-but-curious"`` features; every test runs with both enabled.
"""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch._compat import OPENDP_POLARS, opendp_polars_available


def pytest_collection_modifyitems(config, items):
    """Tests marked ``opendp_polars`` use OpenDP's own Polars integration (LazyFrame Contexts,
    ``dp.mbi``), which needs exactly polars==1.36.1; with another Polars they are skipped (the
    rest of the package is tested against it)."""
    if opendp_polars_available():
        return
    skip = pytest.mark.skip(reason=f"OpenDP's Polars integration needs polars=={OPENDP_POLARS}")
    for item in items:
        if "opendp_polars" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _opendp_features():
    dp.enable_features("contrib", "honest-but-curious")
    yield


@pytest.fixture(autouse=True, scope="session")
def _decoder_cache(tmp_path_factory):
    """The decoder cache lives in the session's temporary directory, not the user's home."""
    import os

    before = os.environ.get("OPENDP_SKETCH_CACHE")
    os.environ["OPENDP_SKETCH_CACHE"] = str(tmp_path_factory.mktemp("decoder-cache"))
    yield
    if before is None:
        os.environ.pop("OPENDP_SKETCH_CACHE", None)
    else:
        os.environ["OPENDP_SKETCH_CACHE"] = before


@pytest.fixture(scope="session")
def secret() -> float:
    """A distinctive data value: tests put it into bad data and check that errors never echo it."""
    return 123456.789


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh seeded generator for each test (data only: OpenDP's noise cannot be seeded)."""
    return np.random.default_rng(20240611)


@pytest.fixture(scope="session")
def data2d() -> np.ndarray:
    """400 rows, 2 columns, uniform on [0, 1]² (read-only)."""
    X = np.random.default_rng(7).uniform(0.0, 1.0, size=(400, 2))
    X.setflags(write=False)
    return X


@pytest.fixture(scope="session")
def hist2d() -> dps.Histogram:
    """A small public map for ``data2d``: 4 bins per column, Δ₁ = 2, Δ₂ = √2."""
    return dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)


@pytest.fixture(scope="session")
def rff2d() -> dps.RFF:
    """A random Fourier feature map for ``data2d`` (fixed-point, gain < 1)."""
    return dps.RFF(dim=2, num_features=16, bandwidth=0.5, seed=3)


@pytest.fixture(scope="session")
def tree_maps():
    """``tree_maps(schema)`` → ``(union, maps)``: the blocks a schema release with a private tree
    could measure (its kept blocks and the 6 candidate pairs, checked), and the maps a choice
    could give from them (the candidates, weighted, with a target, a Composite weighted 0.3/1.7):
    what a cluster backend's gathered pass must serve, shared by the Dask and Spark tests."""
    from opendp_sketch.plan import tree_rounds, weighted_map

    def build(schema: dps.Schema) -> tuple[dps.MarginalTables, list]:
        _, full, keep, _ = dps.Plan(schema, epsilon=1.0, pairs="none", pair_selection=0.1).table_blocks()
        candidates, rounds = tree_rounds(full, keep)
        assert rounds == 3 and len(candidates) == 6
        union = full.take(sorted({*keep, *candidates}))
        chosen = full.take(sorted([*keep, *candidates[1:4]]))
        maps = [
            union,
            full.take(candidates),
            weighted_map(chosen, 3.0),
            weighted_map(chosen, 3.0, targets=[2]),
            dps.Composite([full.take(keep), full.take(candidates[::-1])], weights=[0.3, 1.7]),
        ]
        return union, maps

    return build
