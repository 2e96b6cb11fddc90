"""Neighbouring Spark DataFrames give the same kind of outcome (issue 15, item 5).

For a base dataset ``D`` and ``D' = D + one adversarial row`` (null, NaN, ±inf, ±1e308), as in
``test_neighbours.py`` for the other paths:

* the **measurement** (``make_private_spark_sketch``, as an analyst would run it) releases on
  both, never raising, and the exact integer sums it noises differ by at most the stated
  sensitivity (p = 1 and 2) for every map family;
* the **one-call release** (``release_spark_sketch``, the curator's) releases on both, or refuses
  ``D'`` with a ``ValueError`` naming the fix before anything is released — and releases on both
  whenever the declared null rule (``impute``) admits the row.

On a local Spark (``local[2]``); skipped without PySpark or a Java 17+ runtime.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import opendp.prelude as dp
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


def _java_major() -> int:
    if shutil.which("java") is None:
        return 0
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not found:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


if _java_major() < 17:
    pytest.skip("PySpark 4 needs a Java 17+ runtime on PATH", allow_module_level=True)

import opendp_sketch as dps  # noqa: E402
from opendp_sketch.testing import assert_within_sensitivity  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

BOX = (0.0, 1.0)
D = 2
NAMES = ["x0", "x1"]
#: the value placed in column 0 of the added row ("null" puts a null there)
ADVERSARIAL = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf, "+1e308": 1e308, "-1e308": -1e308}
KINDS = [*ADVERSARIAL, "null"]
REFUSED_WITHOUT_IMPUTE = {"nan", "null", "+inf", "-inf"}


def _maps() -> dict[str, dps.FeatureMap]:
    return {
        "histogram": dps.Histogram(bounds=BOX, bins=4, dim=D),
        "rff": dps.RFF(dim=D, num_features=16, bandwidth=0.5, seed=3),
        "race": dps.RACE(dim=D, rows=5, buckets=7, bucket_width=0.5, seed=4),
    }


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("opendp-sketch-privacy-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def base() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, size=(40, D))


def _frame(spark, X: np.ndarray, null_last: bool = False):
    """``X`` as a Spark DataFrame in 3 partitions; with ``null_last`` the last row's first cell
    is a null."""
    rows = [tuple(float(v) for v in r) for r in X]
    if null_last:
        rows[-1] = (None, *rows[-1][1:])
    return spark.createDataFrame(
        spark.sparkContext.parallelize(rows, 3), ", ".join(f"{c} double" for c in NAMES)
    )


def _neighbour(spark, base: np.ndarray, kind: str):
    row = np.full((1, D), 0.5)
    row[0, 0] = math.nan if kind == "null" else ADVERSARIAL[kind]
    return _frame(spark, np.vstack([base, row]), null_last=kind == "null")


@pytest.fixture(scope="module")
def base_sums(spark, base) -> dict[str, list[int]]:
    """The exact sums of the base dataset, per map (computed once)."""
    dom = dps.backends.spark.spark_box_domain(BOX, NAMES)
    df = _frame(spark, base)
    return {
        name: list(dps.backends.spark.make_spark_feature_sum(dom, dp.symmetric_distance(), fm)(df))
        for name, fm in _maps().items()
    }


@pytest.mark.parametrize("kind", KINDS)
def test_measurement_releases_on_both_neighbours(spark, base, kind):
    fm = _maps()["rff"]
    dom = dps.backends.spark.spark_box_domain(BOX, NAMES)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, 1.0)
    for df in (_frame(spark, base), _neighbour(spark, base, kind)):
        out = meas(df)  # never raises on values: an uncharged error would be a free oracle
        assert isinstance(out, dps.Sketch) and out.privacy["loss"] == meas.map(1)


@pytest.mark.parametrize("name", sorted(_maps()))
@pytest.mark.parametrize("kind", KINDS)
def test_neighbour_sums_within_sensitivity(spark, base, base_sums, name, kind):
    fm = _maps()[name]
    t = dps.backends.spark.make_spark_feature_sum(
        dps.backends.spark.spark_box_domain(BOX, NAMES), dp.symmetric_distance(), fm
    )
    other = list(t(_neighbour(spark, base, kind)))
    for p in (1, 2):
        assert_within_sensitivity(fm, base_sums[name], other, p)


@pytest.fixture(scope="module")
def base_releases(spark, base) -> dict:
    """The one-call release on the base dataset, with and without impute (it must release)."""
    fm = _maps()["histogram"]
    return {
        impute: dps.release_sketch(_frame(spark, base), fm, BOX, epsilon=1.0, impute=impute)
        for impute in (None, 0.25)
    }


@pytest.mark.parametrize("impute", [None, 0.25])
@pytest.mark.parametrize("kind", KINDS)
def test_release_spark_sketch_same_kind_of_outcome(spark, base, base_releases, kind, impute):
    fm = _maps()["histogram"]
    assert isinstance(base_releases[impute], dps.Sketch)
    try:
        out = dps.release_sketch(_neighbour(spark, base, kind), fm, BOX, epsilon=1.0, impute=impute)
        outcome = "released"
        assert isinstance(out, dps.Sketch) and out.privacy == base_releases[impute].privacy
    except ValueError as e:  # a curator-side refusal, never OpenDP's wrapper of an inner error
        assert not isinstance(e, dp.OpenDPException)
        outcome = str(e)
    if impute is None and kind in REFUSED_WITHOUT_IMPUTE:
        assert outcome != "released" and ("impute" in outcome or "infinite" in outcome), outcome
    elif kind in ("+inf", "-inf"):
        assert "infinite" in outcome, outcome  # inf is refused with or without impute
    else:
        assert outcome == "released", outcome


#: a table under a schema: one more row of each kind (values the schema's rules must handle)
MIXED = dps.Schema({"x": (0.0, 1.0), "c": dps.Categorical(["a", "b"], null="category")})
MIXED_KINDS = {
    "null x": (None, "a"),
    "nan x": (math.nan, "a"),
    "+inf x": (math.inf, "a"),
    "-1e308 x": (-1e308, "a"),
    "null c": (0.5, None),
    "unknown c": (0.5, "zzz"),
    "empty c": (0.5, ""),
}
#: refused by the curator's check (no null rule for x; ±inf never), before anything is built
MIXED_REFUSED = {"null x", "nan x", "+inf x"}


def _mixed_frame(spark, row=None):
    rng = np.random.default_rng(3)
    rows = [(float(x), str(c)) for x, c in zip(rng.uniform(0, 1, 40), rng.choice(["a", "b"], 40))]
    if row is not None:
        rows.append(row)
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), "x double, c string")


@pytest.mark.parametrize("kind", list(MIXED_KINDS))
def test_schema_table_neighbours_within_sensitivity_and_same_kind_of_outcome(spark, kind):
    """The schema path on Spark: the measurement releases on both neighbours and its exact sums
    differ within the sensitivity (p = 1, 2); the one-call release releases on both or refuses
    the neighbour on the driver, with a ``ValueError`` naming the fix, before anything is built."""
    import warnings

    from opendp_sketch.backends.spark import make_spark_table_sum_and_count, spark_table_domain

    fm = dps.auto_feature_map(MIXED, pairs="all")
    dom = spark_table_domain(MIXED)
    pair = make_spark_table_sum_and_count(dom, dp.symmetric_distance(), fm)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    a, b = _mixed_frame(spark), _mixed_frame(spark, MIXED_KINDS[kind])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # PySpark's own notice about the installed pandas (on every first Arrow task, whatever the data)
        warnings.filterwarnings("ignore", "PySpark does not yet fully support pandas", FutureWarning)
        assert isinstance(meas(a), dps.Sketch) and isinstance(meas(b), dps.Sketch)
    (sa, na), (sb, nb) = pair(a), pair(b)
    assert nb - na == 1
    for p in (1, 2):
        assert_within_sensitivity(fm, sa, sb, p)
    assert isinstance(dps.release_sketch(a, schema=MIXED, epsilon=1.0), dps.Sketch)
    try:
        out = dps.release_sketch(b, schema=MIXED, epsilon=1.0)
    except ValueError as e:
        assert not isinstance(e, dp.OpenDPException) and kind in MIXED_REFUSED, (kind, e)
        return
    assert isinstance(out, dps.Sketch) and kind not in MIXED_REFUSED
