"""``opendp_sketch.backends.spark``: exact sums identical to the in-memory path for every registered map
and partitioning, privacy maps equal to the numpy path, one-call releases (one Spark job), bad
input refused on the driver before any release; on a local Spark (``local[2]``).
"""

from __future__ import annotations

import decimal
import inspect
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
    """Major version of the ``java`` on PATH (0 if there is none)."""
    if shutil.which("java") is None:
        return 0
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not found:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


if _java_major() < 17:
    pytest.skip("PySpark 4 needs a Java 17+ runtime on PATH", allow_module_level=True)

import opendp_sketch as dps  # noqa: E402
from opendp_sketch.backends.domains import box_data_bounds  # noqa: E402
from opendp_sketch.backends.memory import pair_parts  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")

D = 3
BOX = (-1.0, 2.0)
NAMES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this interpreter (and package)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("opendp-sketch-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "16")  # several Arrow batches per partition
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _frame(spark, X: np.ndarray, partitions: int, names=NAMES, nulls=()):
    """``X`` as a Spark DataFrame of doubles in exactly ``partitions`` partitions (no shuffle);
    the cells listed in ``nulls`` (row, column) become nulls."""
    rows = [tuple(None if (i, j) in nulls else float(v) for j, v in enumerate(r)) for i, r in enumerate(X)]
    rdd = spark.sparkContext.parallelize(rows, partitions)
    return spark.createDataFrame(rdd, ", ".join(f"{c} double" for c in names))


def _maps() -> dict[str, dps.FeatureMap]:
    """One small instance of every feature map class the package registers (``D`` columns)."""
    return {
        "RFF": dps.RFF(dim=D, num_features=40, bandwidth=0.7, seed=1),
        "QuantizedRFF": dps.QuantizedRFF(dim=D, num_features=24, bandwidth=0.7, seed=2),
        "SubsampledRFF": dps.SubsampledRFF(dim=D, num_features=48, bandwidth=0.7, seed=3, r=2),
        "RACE": dps.RACE(dim=D, rows=8, buckets=16, seed=4),
        "Histogram": dps.Histogram(bounds=BOX, bins=5, dim=D),
        "DyadicTrees": dps.DyadicTrees(bounds=BOX, levels=4, dim=D),
        "Moments": dps.Moments(dim=D, radius=2.3, center=[0.5, -0.5, 0.0]),
        "RandomQuadratic": dps.RandomQuadratic(dim=D, num_features=20, radius=1.5, seed=5),
        "ByClass": dps.ByClass(dps.RFF(dim=D - 1, num_features=12, seed=6), num_classes=3),
        "MarginalTables": dps.MarginalTables(([BOX[0]] * D, [BOX[1]] * D), [0, 1, (0, 2), (2, 1, 0)], bins=4),
        "Composite": dps.Composite(
            [dps.Histogram(bounds=BOX, bins=4, dim=D), dps.RFF(dim=D, num_features=8, bandwidth=0.5, seed=7)],
            [1.0, 0.4],
        ),
    }


def _data(rng: np.random.Generator, n: int = 120) -> np.ndarray:
    """Rows partly outside the box, with ±inf and ±1e308, and a valid label in the last column."""
    X = rng.normal(0.5, 1.5, size=(n, D))
    X[:, -1] = rng.integers(0, 3, size=n)
    X[3, 0], X[7, 1], X[11, 0], X[13, 1] = np.inf, -np.inf, 1e308, -1e308
    return X


def _in_memory_sum(fm: dps.FeatureMap, X: np.ndarray, p: int = 1) -> list[int]:
    """``make_feature_sum(fixed_point=True)`` of the rows clipped by the documented rule (NaN to
    the lower bound, ±inf to the faces)."""
    lo, hi = box_data_bounds(BOX, fm)
    t = dps.make_feature_sum(dps.box_domain((lo, hi)), dp.symmetric_distance(), fm, p=p, fixed_point=True)
    return [int(v) for v in t(np.fmin(np.fmax(X, lo), hi))]


def _pair(fm: dps.FeatureMap, **kwargs) -> dp.Transformation:
    dom = dps.backends.spark.spark_box_domain(
        box_data_bounds(BOX, fm), NAMES, nan=bool(kwargs.get("impute") is not None)
    )
    return dps.backends.spark.make_spark_sum_and_count(dom, dp.symmetric_distance(), fm, **kwargs)


def test_every_registered_map_is_covered():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    package = {
        c.__name__
        for c in subclasses(dps.FeatureMap)
        if c.__module__.startswith("opendp_sketch.") and not inspect.isabstract(c)
    }
    assert package - {"OneHotFeatureMap"} <= set(_maps())


@pytest.mark.parametrize("name", sorted(_maps()))
def test_sum_identical_to_in_memory_for_every_map_and_partitioning(spark, name, rng):
    fm = _maps()[name]
    X = _data(rng)
    expected = _in_memory_sum(fm, X)
    t = _pair(fm)
    # one partition, or several of uneven sizes, each holding several 16-row Arrow batches or fewer
    for partitions in (1, 3) if name != "RFF" else (1, 2, 7):
        s, n = t(_frame(spark, X, partitions))
        assert s.dtype == np.int64 and s.tolist() == expected and n == len(X), partitions
    if name == "RFF":  # more partitions than rows: empty partitions contribute zeros
        s, n = t(_frame(spark, X[:20], 24))
        assert s.tolist() == _in_memory_sum(fm, X[:20]) and n == 20


@pytest.mark.parametrize("p", [1, 2])
def test_feature_sum_matches_make_feature_sum(spark, p, rng):
    fm = _maps()["RFF"]
    X = _data(rng)
    lo, hi = box_data_bounds(BOX, fm)
    t_spark = dps.backends.spark.make_spark_feature_sum(
        dps.backends.spark.spark_box_domain((lo, hi), NAMES), dp.symmetric_distance(), fm, p=p
    )
    t_np = dps.make_feature_sum(dps.box_domain((lo, hi)), dp.symmetric_distance(), fm, p=p, fixed_point=True)
    assert list(t_spark(_frame(spark, X, 2))) == _in_memory_sum(fm, X, p)
    assert t_spark.output_metric == t_np.output_metric and t_spark.output_domain == t_np.output_domain
    assert t_spark.map(1) == t_np.map(1) and t_spark.map(4) == t_np.map(4)


def test_null_nan_and_inf_never_raise_and_follow_the_public_rule(spark, rng):
    fm = _maps()["Histogram"]
    X = _data(rng)
    X[5, 2], X[9, 0] = np.nan, np.nan
    nulls = {(17, 1), (40, 0)}
    holes = X.copy()
    for i, j in nulls:
        holes[i, j] = np.nan
    df = _frame(spark, X, 3, nulls=nulls)
    # without impute: null and NaN read as the lower bound, ±inf and ±1e308 are clipped
    s, n = _pair(fm)(df)
    assert s.tolist() == _in_memory_sum(fm, holes) and n == len(X)
    # with impute: null and NaN read as the public values, one per column
    fill = np.array([0.5, 1.5, -0.5])
    s, _ = _pair(fm, impute=fill.tolist())(df)
    assert s.tolist() == _in_memory_sum(fm, np.where(np.isnan(holes), fill, holes))


@pytest.mark.parametrize("measure", [dp.max_divergence(), dp.zero_concentrated_divergence()])
@pytest.mark.parametrize("scale", [0.0, 0.3, 5.0])
def test_privacy_map_equals_numpy_measurement(measure, scale):
    fm = _maps()["RFF"]
    m_spark = dps.make_private_sketch(
        dps.backends.spark.spark_box_domain(BOX, NAMES), dp.symmetric_distance(), measure, fm, scale
    )
    m_np = dps.make_private_sketch(
        dps.box_domain(BOX, num_columns=D), dp.symmetric_distance(), measure, fm, scale
    )
    for d_in in (0, 1, 3):
        assert m_spark.map(d_in) == m_np.map(d_in)


@pytest.fixture
def spy_release(monkeypatch):
    """Records every Sketch built (= every release): the release layer packs them all."""
    built = []
    real = dps.Sketch

    def spy(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dps.measurements, "Sketch", spy)
    return built


@pytest.fixture
def jobs(spark):
    """Counts the Spark jobs started from this thread during the test."""
    sc = spark.sparkContext
    group = f"test-{os.getpid()}-{id(sc)}-{np.random.default_rng().integers(1 << 30)}"
    sc.setJobGroup(group, "counted")
    yield lambda: len(sc.statusTracker().getJobIdsForGroup(group))
    sc.setLocalProperty("spark.jobGroup.id", None)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}, {"epsilon": 1.0, "delta": 1e-6}])
def test_release_matches_release_sketch_in_one_job(spark, budget, rng, jobs, spy_release, monkeypatch):
    fm = _maps()["Histogram"]
    X = np.clip(_data(rng, 300), *BOX)
    df = _frame(spark, X, 3, names=["u", "v", "w"])

    def refuse_pickle(self, protocol):
        raise AssertionError("the feature map must travel as JSON, not pickled")

    monkeypatch.setattr(type(fm), "__reduce_ex__", refuse_pickle)
    sk = dps.release_sketch(df, fm, BOX, contributions=2, **budget)
    ref = dps.release_sketch(X, fm, BOX, contributions=2, **budget)
    assert isinstance(sk, dps.Sketch) and sk.column_names == ["u", "v", "w"]
    assert sk.privacy == ref.privacy and sk.noise == ref.noise and sk.bounds == ref.bounds
    assert jobs() == 1 and spy_release == [1, 1]


def test_release_selects_and_casts_columns(spark, rng, jobs):
    from pyspark.sql.types import (
        BooleanType,
        DecimalType,
        DoubleType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    fm = dps.Histogram(bounds=(0.0, 4.0), bins=4, dim=3)
    X = np.column_stack([rng.uniform(0, 4, 50), rng.integers(0, 4, 50), rng.integers(0, 2, 50)])
    schema = StructType(
        [
            StructField("note", StringType()),
            StructField("x.y", DoubleType()),
            StructField("k", IntegerType()),
            StructField("flag", BooleanType()),
            StructField("dec", DecimalType(10, 3)),
        ]
    )
    rows = [("n", float(a), int(b), bool(c), decimal.Decimal("1.250")) for a, b, c in X]
    df = spark.createDataFrame(rows, schema)
    names = ["x.y", "k", "flag"]
    expected = fm.fixed_sum(X)
    t = dps.backends.spark.make_spark_feature_sum(
        dps.backends.spark.spark_box_domain((0.0, 4.0), names), dp.symmetric_distance(), fm
    )
    assert list(t(df)) == expected  # a dot in a name is part of the name
    dec = dps.Histogram(bounds=(0.0, 4.0), bins=4, dim=1)
    t = dps.backends.spark.make_spark_feature_sum(
        dps.backends.spark.spark_box_domain((0.0, 4.0), ["dec"]), dp.symmetric_distance(), dec
    )
    assert list(t(df)) == dec.fixed_sum(np.full((50, 1), 1.25))
    sk = dps.release_sketch(df, fm, (0.0, 4.0), epsilon=1.0, column_names=names)
    assert sk.column_names == names and jobs() == 3


def test_null_nan_inf_and_empty_refused_before_release(spark, rng, secret, spy_release):
    fm = _maps()["RFF"]
    X = np.full((40, D), secret)
    cases = [
        (_frame(spark, X, 2, nulls={(33, 1)}), "null or NaN"),
        (_frame(spark, np.where(np.arange(40)[:, None] == 21, np.nan, X), 2), "null or NaN"),
        (_frame(spark, np.where(np.arange(40)[:, None] == 5, -np.inf, X), 2), "infinite"),
        (_frame(spark, X[:0], 2), "empty"),
    ]
    for df, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            dps.release_sketch(df, fm, BOX, epsilon=1.0)
        assert str(secret) not in str(err.value)
    assert spy_release == []
    # impute admits null and NaN, not inf
    sk = dps.release_sketch(cases[0][0].union(cases[1][0]), fm, BOX, rho=0.5, impute=0.0)
    assert sk.privacy["rho"] <= 0.5 and spy_release == [1]
    with pytest.raises(ValueError, match="infinite"):
        dps.release_sketch(cases[2][0], fm, BOX, epsilon=1.0, impute=0.0)
    assert spy_release == [1]


def test_bad_structure_refused_from_the_schema(spark, secret, jobs, spy_release):
    fm = _maps()["Histogram"]
    df = spark.createDataFrame([(secret, secret, secret, "x")], "a double, b double, c double, s string")
    twice = df.select("a", "b", df["c"].alias("a"))
    cases = [
        (
            lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0, column_names=["a", "b", "zz"]),
            "not in the data",
        ),
        (lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0, column_names=["a", "b", "s"]), "numeric"),
        (lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0), "numeric"),
        (lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0, column_names=["a", "b"]), "expects 3"),
        (lambda: dps.release_sketch(twice, fm, BOX, epsilon=1.0), "more than once"),
        (lambda: dps.release_sketch(df.drop("s"), fm, (1.0, 0.0), epsilon=1.0), "lower < upper"),
        (lambda: dps.release_sketch(df.drop("s"), fm, BOX), "exactly one"),
        (lambda: dps.release_sketch(df.drop("s"), fm, BOX, epsilon=-1.0), "epsilon"),
        (lambda: dps.release_sketch(df.drop("s"), fm, BOX, epsilon=1.0, impute=np.nan), "impute"),
        (
            lambda: dps.release_sketch(df.drop("s"), fm, BOX, epsilon=1.0, contributions=0),
            "contributions",
        ),
        (
            lambda: dps.release_sketch(df.drop("s"), fm, BOX, epsilon=1.0, count_fraction=1.0),
            "count_fraction",
        ),
        (lambda: dps.release_sketch(df.drop("s"), "fm", BOX, epsilon=1.0), "feature map"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert str(secret) not in str(err.value)
    assert spy_release == [] and jobs() == 0  # decided from the schema: no Spark job ran


def test_domain_membership_and_constructor_arguments(spark):
    fm = _maps()["Histogram"]
    dom = dps.backends.spark.spark_box_domain(BOX, NAMES)
    df = spark.createDataFrame([(0.1, 1, True, "x")], "a double, b long, c boolean, s string")
    assert dom.member(df) and not dom.member(df.drop("c")) and not dom.member(np.zeros((1, D)))
    assert not dps.backends.spark.spark_box_domain(BOX, ["a", "s", "c"]).member(df)
    assert dom.descriptor.column_names == tuple(NAMES) and dom.descriptor.num_columns == D
    with pytest.raises(ValueError, match="distinct"):
        dps.backends.spark.spark_box_domain(BOX, ["a", "a", "c"])
    with pytest.raises(ValueError, match="list of column names"):
        dps.backends.spark.spark_box_domain(BOX, "abc")
    with pytest.raises(ValueError, match="spark_box_domain"):
        dps.backends.spark.make_spark_feature_sum(
            dps.box_domain(BOX, num_columns=D), dp.symmetric_distance(), fm
        )
    with pytest.raises(ValueError, match="expects"):
        dps.backends.spark.make_spark_feature_sum(
            dps.backends.spark.spark_box_domain(BOX, ["a", "b"]), dp.symmetric_distance(), fm
        )
    with pytest.raises(ValueError, match="permits NaN"):
        dps.backends.spark.make_spark_feature_sum(
            dps.backends.spark.spark_box_domain(BOX, NAMES, nan=True), dp.symmetric_distance(), fm
        )
    with pytest.raises(ValueError, match="impute"):
        dps.backends.spark.make_spark_feature_sum(dom, dp.symmetric_distance(), fm, impute=[0.0, 1.0])
    with pytest.raises(ValueError, match="symmetric_distance"):
        dps.backends.spark.make_spark_feature_sum(dom, dp.insert_delete_distance(), fm)
    with pytest.raises(ValueError, match="n_jobs"):
        dps.backends.spark.make_spark_feature_sum(dom, dp.symmetric_distance(), fm, n_jobs=0)
    with pytest.raises(ValueError, match="p "):
        dps.backends.spark.make_spark_feature_sum(dom, dp.symmetric_distance(), fm, p=3)
    with pytest.raises(ValueError, match="output_measure"):
        dps.make_private_sketch(dom, dp.symmetric_distance(), dp.smoothed_max_divergence(), fm, 1.0)


def test_measurement_runs_on_spark_and_in_a_chain(spark, rng):
    fm = _maps()["ByClass"]
    lo, hi = box_data_bounds(BOX, fm)
    dps.release_sketch(np.clip(_data(rng), lo, hi), fm, BOX, epsilon=1.0)  # the map now caches OpenDP objects
    dom = dps.backends.spark.spark_box_domain((lo, hi), NAMES)
    m = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, 2.0)
    sk = m(_frame(spark, _data(rng), 2))
    assert isinstance(sk, dps.Sketch) and sk.sum.shape == (fm.num_features,) and sk.column_names == NAMES
    assert sk.privacy["loss"] == m.map(1)
    t = dps.backends.spark.make_spark_sum_and_count(dom, dp.symmetric_distance(), fm)
    assert (t >> pair_parts(t, fm, 1)[1])(_frame(spark, _data(rng, 77), 2)) == 77


# -- tables under a public schema ------------------------------------------------------------


def _mixed_schema(rows: int | None = None) -> dps.Schema:
    return dps.Schema(
        {
            "age": dps.Numeric(18, 90, integer=True),
            "income": dps.Numeric(0, 1e5, impute=0.0),
            "cut": dps.Categorical(["Fair", "Good", "Ideal"], null="category"),
            "member": dps.Boolean(null=False),
        },
        rows=rows,
    )


def _mixed_rows(rng: np.random.Generator, n: int) -> list[tuple]:
    """Rows of every kind the schema's rules cover: out-of-range ages, null and NaN incomes,
    null and unknown labels (read as the null category), null booleans."""
    out = []
    for i in range(n):
        age = int(rng.integers(10, 100))
        income = None if i % 17 == 3 else (float("nan") if i % 23 == 5 else float(rng.lognormal(10, 1)))
        cut = [None, "Fair", "Good", "Ideal", "Ideal", "Premium"][int(rng.integers(0, 6))]
        member = None if i % 19 == 7 else bool(rng.integers(0, 2))
        out.append((age, income, cut, member))
    return out


_MIXED_DDL = "age long, income double, cut string, member boolean"


def test_schema_table_sum_identical_to_the_in_memory_table_for_every_partitioning(spark, rng, monkeypatch):
    import polars as pl

    from opendp_sketch.backends.spark import make_spark_table_sum_and_count, spark_table_domain
    from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain

    schema = _mixed_schema()
    rows = _mixed_rows(rng, 300)
    frame = pl.DataFrame(rows, schema=["age", "income", "cut", "member"], orient="row")
    fm = dps.auto_feature_map(schema)

    def refuse_pickle(self, protocol):
        raise AssertionError("the schema must travel as JSON, not pickled")

    monkeypatch.setattr(dps.Schema, "__reduce_ex__", refuse_pickle)
    ref = make_table_sum_and_count(table_domain(schema), dp.symmetric_distance(), fm)(frame)
    t = make_spark_table_sum_and_count(spark_table_domain(schema), dp.symmetric_distance(), fm)
    for partitions in (1, 3, 7):
        df = spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), _MIXED_DDL)
        s, n = t(df)
        assert list(s) == list(ref[0]) and n == ref[1] == 300
    # extra columns are ignored, and the schema's columns are read by name in any order
    df = spark.createDataFrame(rows, _MIXED_DDL).selectExpr("'x' as note", "cut", "member", "income", "age")
    assert list(t(df)[0]) == list(ref[0])


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_schema_release_matches_release_sketch(spark, rng, jobs, spy_release, budget):
    import polars as pl

    schema = _mixed_schema(rows=3000)
    rows = _mixed_rows(rng, 3000)
    frame = pl.DataFrame(rows, schema=["age", "income", "cut", "member"], orient="row")
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), _MIXED_DDL)
    sk = dps.release_sketch(df, schema=schema, pair_selection=None, **budget)
    ref = dps.release_sketch(frame, schema=schema, pair_selection=None, **budget)
    assert sk.feature_map == ref.feature_map and sk.schema == ref.schema == schema.to_dict()
    assert sk.privacy == ref.privacy and sk.noise == ref.noise and sk.column_names == ref.column_names
    assert jobs() == 1 and spy_release == [1, 1]  # one job: the pair and the curator's problem counts
    # answers in the table's labels
    shares = dps.M2M(sk, seed=0).shares("cut")
    assert shares["cut"].to_list() == ["Fair", "Good", "Ideal", None]


def test_schema_release_chooses_a_tree_on_the_cluster(spark, rng, jobs):
    """``pair_selection="auto"`` runs MST's choice on Spark too, within the budget, in **one**
    job: the check gathers every block the tree could take, and the candidates' counts and the
    chosen map's sums are read off it (three jobs before: the check, the candidates, the release)."""
    from opendp_sketch.budget import Budget
    from opendp_sketch.plan import auto_tree, schema_blocks

    schema = dps.Schema({f"x{j}": (0.0, 1.0) for j in range(6)}, rows=40_000)
    full, keep = schema_blocks(schema, epsilon=1.0)
    assert auto_tree(Budget.of(epsilon=1.0), full, keep, schema.rows) is not None
    x = rng.uniform(0, 1, (40_000, 3))
    X = np.column_stack([x, 1 - x])
    ddl = ", ".join(f"x{j} double" for j in range(6))
    df = spark.createDataFrame([tuple(map(float, r)) for r in X], ddl)
    sk = dps.release_sketch(df, schema=schema, epsilon=1.0)
    tree = sk.privacy["pair_selection"]["pairs"]
    assert len(tree) == 5 and sk.privacy["epsilon"] <= 1.0
    assert sum(sorted(p) in ([0, 3], [1, 4], [2, 5]) for p in tree) >= 2  # the dependent pairs stand out
    assert jobs() == 1
    # the same measurement as in memory: the same noise, the same losses
    import polars as pl

    ref = dps.release_sketch(pl.DataFrame(X, schema=[f"x{j}" for j in range(6)]), schema=schema, epsilon=1.0)
    assert sk.noise == ref.noise and sk.feature_map.num_features == ref.feature_map.num_features
    assert {k: v for k, v in sk.privacy.items() if k != "pair_selection"} == {
        k: v for k, v in ref.privacy.items() if k != "pair_selection"
    }


def test_a_gathered_pass_gives_the_jobs_exact_pairs_for_every_map_of_its_blocks(spark, rng, jobs, tree_maps):
    """``gather_spark_table``: one job checks the table and counts every block a tree could take;
    the Spark pairs of the candidates and of every map a choice could give (weighted, with targets,
    a weight that is not a power of two) are read off it, integer for integer the jobs' own."""
    from opendp_sketch.backends.spark import (
        gather_spark_table,
        make_spark_table_sum_and_count,
        spark_table_domain,
    )

    schema = _mixed_schema(rows=3000)
    df = spark.createDataFrame(spark.sparkContext.parallelize(_mixed_rows(rng, 3000), 3), _MIXED_DDL)
    union, maps = tree_maps(schema)
    handle, n = gather_spark_table(df, schema, union)
    assert n == 3000 and jobs() == 1
    domain = spark_table_domain(schema)
    for fm in maps:
        pair = make_spark_table_sum_and_count(domain, dp.symmetric_distance(), fm)
        before = jobs()
        s, m = pair(handle)
        assert jobs() == before  # read off the pass
        ref = pair(df)  # a job of its own
        assert jobs() == before + 1 and list(s) == list(ref[0]) and m == ref[1] == 3000
    # a map with a block the pass did not count, or another kind of map: a job, the same pair
    three_way = dps.MarginalTables(
        schema.bounds, subsets=[0, (0, 1, 3)], bins=2, categorical=schema.categorical
    )
    for fm in (three_way, dps.Histogram(bounds=schema.bounds, bins=3)):
        pair = make_spark_table_sum_and_count(domain, dp.symmetric_distance(), fm)
        before = jobs()
        s, m = pair(handle)
        assert jobs() == before + 1 and list(s) == list(pair(df)[0]) and m == 3000
    with pytest.raises(ValueError, match="must be a MarginalTables"):
        gather_spark_table(df, schema, dps.Histogram(bounds=schema.bounds, bins=3))


def test_schema_refusals_on_the_driver_before_any_release(spark, secret, spy_release, jobs):
    schema = dps.Schema({"x": (0.0, 1.0), "cut": ["Fair", "Ideal"]})
    cases = [
        (spark.createDataFrame([(None, "Fair")], "x double, cut string"), "nulls"),
        (spark.createDataFrame([(float("nan"), "Fair")], "x double, cut string"), "nulls"),
        (spark.createDataFrame([(float("inf"), "Fair")], "x double, cut string"), "infinite"),
        (
            spark.createDataFrame([(secret, str(secret))], "x double, cut string"),
            "not among their public labels",
        ),
        (spark.createDataFrame([(secret, "Fair")], "x double, cut string").limit(0), "empty"),
        (spark.createDataFrame([("a", "Fair")], "x string, cut string"), "text that is not a number"),
        (spark.createDataFrame([(secret,)], "x double"), r"columns \['cut'\] are not in the data"),
    ]
    for df, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            dps.release_sketch(df, schema=schema, epsilon=1.0)
        assert str(secret) not in str(err.value)
    assert spy_release == []
    with pytest.raises(ValueError, match="drop bounds="):
        dps.release_sketch(cases[0][0], bounds=(0, 1), schema=schema, epsilon=1.0)
    with pytest.raises(ValueError, match="shape the automatic map of a schema"):
        dps.release_sketch(cases[0][0], _maps()["Histogram"], BOX, epsilon=1.0, fine_bins=16)
    assert spy_release == []


def test_schema_release_with_a_map_of_the_users_choice(spark, rng, jobs):
    import polars as pl

    schema = _mixed_schema()
    rows = _mixed_rows(rng, 500)
    frame = pl.DataFrame(rows, schema=["age", "income", "cut", "member"], orient="row")
    fm = dps.Histogram(bounds=schema.bounds, bins=4)
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), _MIXED_DDL)
    sk = dps.release_sketch(df, fm, schema=schema, epsilon=1.0)
    ref = dps.release_sketch(frame, fm, schema=schema, epsilon=1.0)
    assert sk.feature_map == fm and sk.schema == schema.to_dict() and sk.privacy == ref.privacy
    assert jobs() == 1


def test_a_local_session_whose_workers_run_another_python_is_refused_naming_pyspark_python(
    spark, monkeypatch
):
    """Issue 39, item 9: without PYSPARK_PYTHON a local session's workers run python3 from PATH."""
    import sys

    frame = spark.createDataFrame([(0.5, 0.5)], "x0 double, x1 double")
    monkeypatch.setattr(spark.sparkContext, "pythonExec", "/usr/bin/env")  # another executable
    with pytest.raises(ValueError, match=r"PYSPARK_PYTHON=.*before the\s+SparkSession is created"):
        dps.release_sketch(frame, dps.Histogram(bounds=(0, 1), bins=2, dim=2), bounds=(0, 1), epsilon=1.0)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", sys.executable)
    assert dps.release_sketch(frame, dps.Histogram(bounds=(0, 1), bins=2, dim=2), bounds=(0, 1), epsilon=1.0)


def test_one_map_gives_the_same_exact_pair_on_spark_as_on_numpy(spark):
    """The Spark leg of ``test_backends``' check: one dispatch, the same exact pair, for a box
    domain and for a table under a schema (whose encoded bins are the same bins)."""
    from opendp_sketch.backends import make_sum_and_count
    from opendp_sketch.backends.spark import spark_box_domain, spark_table_domain

    X = np.random.default_rng(5).uniform(-1.0, 2.0, size=(300, D))
    fm = dps.Histogram(bounds=BOX, bins=4, dim=D)
    expected = make_sum_and_count(dps.box_domain(BOX, num_columns=D), dp.symmetric_distance(), fm)(X)
    df = _frame(spark, X, partitions=3)
    got = make_sum_and_count(spark_box_domain(BOX, NAMES), dp.symmetric_distance(), fm)(df)
    assert got[1] == expected[1] and np.array_equal(got[0], expected[0])
    schema = dps.Schema({c: dps.Numeric(*BOX) for c in NAMES})
    encoded = dps.Histogram(bounds=schema.bounds, bins=4)
    got = make_sum_and_count(spark_table_domain(schema), dp.symmetric_distance(), encoded)(df)
    assert got[1] == expected[1] and np.array_equal(got[0], expected[0])


def test_one_plan_gives_the_same_exact_pair_and_release_on_spark(spark):
    """The Spark leg of ``test_plan``'s one-plan check: the planned map's exact pair on a Spark
    DataFrame equals the local table's, and ``release_sketch(spark_df, plan)`` measures that map
    at the same noise and records the plan."""
    import polars as pl

    from opendp_sketch.backends import make_sum_and_count
    from opendp_sketch.backends.spark import spark_table_domain
    from opendp_sketch.backends.tables import table_domain

    rng = np.random.default_rng(11)
    schema = dps.Schema(
        {"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Good", "Ideal"]}, rows=600
    )
    people = pl.DataFrame(
        {"age": rng.integers(18, 91, 600), "cut": rng.choice(["Fair", "Good", "Ideal"], 600)}
    )
    plan = dps.Plan(schema, epsilon=1.0, pair_selection=None)
    fm = plan.planned_map()
    expected = make_sum_and_count(table_domain(schema), dp.symmetric_distance(), fm)(people)
    df = spark.createDataFrame(people.to_pandas())
    got = make_sum_and_count(spark_table_domain(schema), dp.symmetric_distance(), fm)(df)
    assert got[1] == expected[1] == 600 and np.array_equal(got[0], expected[0])
    local, remote = dps.release_sketch(people, plan), dps.release_sketch(df, plan)
    assert remote.feature_map == local.feature_map == fm
    assert remote.noise["sum_scale"] == local.noise["sum_scale"] and remote.privacy["plan"] == plan.options()
