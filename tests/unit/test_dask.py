"""``opendp_sketch.backends.dask``: exact sums across partitionings, privacy maps equal to the numpy path,
one-call releases on arrays and DataFrames, bad input refused before any release, a local cluster.
"""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

import opendp_sketch as dps  # noqa: E402
from opendp_sketch.backends import dask as dsk  # noqa: E402
from opendp_sketch.backends.domains import box_data_bounds  # noqa: E402

D = 3
BOX = (-1.0, 2.0)
CHUNKINGS = [200, 64, 17, (13, 80, 1, 0, 106)]


@pytest.fixture(autouse=True)
def _synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _maps() -> dict[str, dps.FeatureMap]:
    return {
        "rff": dps.RFF(dim=D, num_features=40, bandwidth=0.7, seed=1),
        "race": dps.RACE(dim=D, rows=8, buckets=16, seed=2),
        "hist": dps.Histogram(bounds=BOX, bins=5, dim=D),
        "byclass": dps.ByClass(dps.RFF(dim=D - 1, num_features=12, seed=3), num_classes=3),
    }


def _data(rng: np.random.Generator, n: int = 200) -> np.ndarray:
    """Rows partly outside the box, with ±inf, and a valid label in the last column."""
    X = rng.normal(0.5, 1.5, size=(n, D))
    X[3, 0], X[7, 1] = np.inf, -np.inf
    X[:, -1] = rng.integers(0, 3, size=n)
    return X


def _numpy_sum(fm: dps.FeatureMap, X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[int]:
    return fm.fixed_sum(np.clip(X, lo, hi))


def _bounds(fm: dps.FeatureMap) -> tuple[np.ndarray, np.ndarray]:
    return box_data_bounds(BOX, fm)


@pytest.mark.parametrize("name", ["rff", "race", "hist", "byclass"])
def test_sum_identical_to_numpy_for_every_partitioning(name, rng):
    fm = _maps()[name]
    X = _data(rng)
    lo, hi = _bounds(fm)
    expected = _numpy_sum(fm, X, lo, hi)
    t = dsk.make_dask_sum_and_count(dsk.dask_box_domain((lo, hi)), dp.symmetric_distance(), fm)
    for chunks in CHUNKINGS:
        s, n = t(da.from_array(X, chunks=(chunks, D)))
        assert s.dtype == np.int64 and s.tolist() == expected and n == X.shape[0]
    # column-split chunks are re-joined into whole rows
    s, _ = t(da.from_array(X, chunks=(50, 1)))
    assert s.tolist() == expected


@pytest.mark.parametrize("p", [1, 2])
def test_feature_sum_matches_make_feature_sum(p, rng):
    fm = _maps()["rff"]
    X = _data(rng)
    lo, hi = _bounds(fm)
    t_dask = dsk.make_dask_feature_sum(dsk.dask_box_domain((lo, hi)), dp.symmetric_distance(), fm, p=p)
    t_np = dps.make_feature_sum(dps.box_domain((lo, hi)), dp.symmetric_distance(), fm, p=p, fixed_point=True)
    assert list(t_dask(da.from_array(X, chunks=(37, D)))) == list(t_np(np.clip(X, lo, hi)))
    assert t_dask.output_metric == t_np.output_metric and t_dask.output_domain == t_np.output_domain
    assert t_dask.map(1) == t_np.map(1) and t_dask.map(4) == t_np.map(4)


def test_dataframe_partitions_and_column_selection(rng):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    fm = _maps()["hist"]
    X = _data(rng)
    frame = pd.DataFrame({"a": X[:, 0], "note": ["x"] * len(X), "b": X[:, 1], "c": X[:, 2].astype(int)})
    expected = _numpy_sum(fm, X, *_bounds(fm))
    dom = dsk.dask_box_domain(BOX, column_names=["a", "b", "c"])
    t = dsk.make_dask_sum_and_count(dom, dp.symmetric_distance(), fm)
    for k in (1, 3, 7):
        df = dd.from_pandas(frame, npartitions=k)
        assert dom.member(df)
        s, n = t(df)
        assert s.tolist() == expected and n == len(X)


@pytest.mark.parametrize("measure", [dp.max_divergence(), dp.zero_concentrated_divergence()])
@pytest.mark.parametrize("scale", [0.0, 0.3, 5.0])
def test_privacy_map_equals_numpy_measurement(measure, scale):
    fm = _maps()["rff"]
    m_dask = dps.make_private_sketch(
        dsk.dask_box_domain(BOX, num_columns=D), dp.symmetric_distance(), measure, fm, scale
    )
    m_np = dps.make_private_sketch(
        dps.box_domain(BOX, num_columns=D), dp.symmetric_distance(), measure, fm, scale
    )
    for d_in in (0, 1, 3):
        assert m_dask.map(d_in) == m_np.map(d_in)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}, {"epsilon": 1.0, "delta": 1e-6}])
def test_release_matches_release_sketch(budget, rng):
    fm = _maps()["hist"]
    X = _data(rng, 2000)
    X[np.isinf(X)] = 0.0
    sk = dps.release_sketch(
        da.from_array(X, chunks=(300, D)), fm, BOX, column_names=["u", "v", "w"], contributions=2, **budget
    )
    ref = dps.release_sketch(X, fm, BOX, contributions=2, **budget)
    assert isinstance(sk, dps.Sketch) and sk.column_names == ["u", "v", "w"]
    assert sk.privacy == ref.privacy and sk.noise == ref.noise
    assert abs(sk.count - len(X)) < 2000  # count noise scale ≤ ~100 at these budgets


def test_release_dataframe_and_impute(rng):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    fm = _maps()["hist"]
    X = _data(rng)
    X[np.isinf(X)] = np.nan
    df = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=4)
    lo, hi = _bounds(fm)
    # exact sum with NaN imputed, per partition, equals the numpy path on the imputed rows
    t = dsk.make_dask_feature_sum(
        dsk.dask_box_domain(BOX, column_names=["a", "b", "c"], nan=True),
        dp.symmetric_distance(),
        fm,
        impute=0.5,
    )
    assert list(t(df)) == _numpy_sum(fm, np.where(np.isnan(X), 0.5, X), lo, hi)
    sk = dps.release_sketch(df, fm, BOX, epsilon=1.0, impute=0.5)
    assert sk.column_names == ["a", "b", "c"] and sk.privacy["epsilon"] <= 1.0


def test_release_is_one_pass(rng, monkeypatch):
    fm = _maps()["rff"]
    X = np.clip(_data(rng), *BOX)
    calls = []
    real = dsk._partition_stats

    def counting(block, config):
        calls.append(len(block))
        return real(block, config)

    monkeypatch.setattr(dsk, "_partition_stats", counting)
    dps.release_sketch(da.from_array(X, chunks=(60, D)), fm, BOX, epsilon=1.0)
    assert sorted(calls) == [20, 60, 60, 60]  # each partition summed once, sum and count together


@pytest.fixture
def spy_release(monkeypatch):
    """Records every Sketch built (= every release), wherever the packing code lives."""
    built = []
    real = dps.Sketch

    def spy(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dps.measurements, "Sketch", spy)  # the one place a Sketch is packed
    return built


def test_nan_in_one_partition_is_refused_before_release(rng, secret, spy_release):
    fm = _maps()["rff"]
    X = np.full((100, D), secret)
    X[57, 1] = np.nan
    with pytest.raises(ValueError, match="NaN") as err:
        dps.release_sketch(da.from_array(X, chunks=(25, D)), fm, BOX, epsilon=1.0)
    assert str(secret) not in str(err.value) and spy_release == []
    X[57, 1] = np.inf
    with pytest.raises(ValueError, match="infinite") as err:
        dps.release_sketch(da.from_array(X, chunks=(25, D)), fm, BOX, rho=0.5)
    assert str(secret) not in str(err.value) and spy_release == []
    # the measurement itself never raises on values (an uncharged error would be an oracle):
    # NaN reads as the lower bound and inf is clipped, exactly as the in-memory clip does
    dom = dsk.dask_box_domain(BOX, num_columns=D)
    t = dsk.make_dask_feature_sum(dom, dp.symmetric_distance(), fm)
    X[57, 1], X[3, 0] = np.nan, -np.inf
    lo, hi = np.broadcast_to(BOX[0], (D,)), np.broadcast_to(BOX[1], (D,))
    expected = fm.fixed_sum(np.fmin(np.fmax(X, lo), hi))
    assert np.array_equal(t(da.from_array(X, chunks=(25, D))), expected)
    m = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, 1.0)
    assert spy_release == []
    m(da.from_array(X, chunks=(25, D)))
    dps.release_sketch(da.from_array(np.zeros((100, D)), chunks=(25, D)), fm, BOX, epsilon=1.0)
    assert spy_release == [1, 1]  # the spy sees both releases


def test_bad_structure_refused(rng, secret, spy_release):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    fm = _maps()["hist"]
    frame = pd.DataFrame({"a": [secret] * 10, "b": [secret] * 10, "s": ["x"] * 10})
    df = dd.from_pandas(frame, npartitions=2)
    cases = [
        (lambda: dps.release_sketch(da.zeros((10, D + 1), chunks=5), fm, BOX, epsilon=1.0), "columns"),
        (lambda: dps.release_sketch(da.zeros((10,), chunks=5), fm, BOX, epsilon=1.0), "2-dimensional"),
        (
            lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0, column_names=["a", "b", "zz"]),
            "not in the data",
        ),
        (lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0, column_names=["a", "b", "s"]), "numeric"),
        (lambda: dps.release_sketch(df, fm, BOX, epsilon=1.0), "numeric"),
        (
            lambda: dps.release_sketch(da.zeros((10, D), chunks=5), fm, (1.0, 0.0), epsilon=1.0),
            "lower < upper",
        ),
        (lambda: dps.release_sketch(da.zeros((10, D), chunks=5), fm, BOX), "exactly one"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            call()
        assert str(secret) not in str(err.value)
    assert spy_release == []


def test_constructor_arguments_checked():
    fm = _maps()["hist"]
    dom = dsk.dask_box_domain(BOX, num_columns=D)
    with pytest.raises(ValueError, match="dask_box_domain"):
        dsk.make_dask_feature_sum(dps.box_domain(BOX, num_columns=D), dp.symmetric_distance(), fm)
    with pytest.raises(ValueError, match="expects"):
        dsk.make_dask_feature_sum(dsk.dask_box_domain(BOX, num_columns=2), dp.symmetric_distance(), fm)
    with pytest.raises(ValueError, match="permits NaN"):
        dsk.make_dask_feature_sum(
            dsk.dask_box_domain(BOX, num_columns=D, nan=True), dp.symmetric_distance(), fm
        )
    with pytest.raises(ValueError, match="impute"):
        dsk.make_dask_feature_sum(dom, dp.symmetric_distance(), fm, impute=np.nan)
    with pytest.raises(ValueError, match="symmetric_distance"):
        dsk.make_dask_feature_sum(dom, dp.insert_delete_distance(), fm)
    with pytest.raises(ValueError, match="output_measure"):
        dps.make_private_sketch(dom, dp.symmetric_distance(), dp.smoothed_max_divergence(), fm, 1.0)


def test_local_cluster_two_workers(rng):
    distributed = pytest.importorskip("distributed")
    fm = _maps()["byclass"]
    X = _data(rng, 1000)
    lo, hi = _bounds(fm)
    dps.release_sketch(
        np.where(np.isinf(X), 0.0, X), fm, BOX, epsilon=1.0
    )  # the map now caches OpenDP objects
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster),
    ):
        with dask.config.set(scheduler=None):  # the client's scheduler, not the synchronous one
            Xd = da.from_array(X, chunks=(90, D))
            t = dsk.make_dask_feature_sum(dsk.dask_box_domain((lo, hi)), dp.symmetric_distance(), fm)
            assert list(t(Xd)) == _numpy_sum(fm, X, lo, hi)
            Xd = da.where(da.isinf(Xd), 0.0, Xd)
            sk = dps.release_sketch(Xd, fm, BOX, epsilon=1.0)
    assert sk.privacy["epsilon"] <= 1.0 and sk.sum.shape == (fm.num_features,)


# -- DataFrames under a public schema ---------------------------------------------------------


def _mixed(rng: np.random.Generator, n: int):
    """A pandas frame of every kind the schema's rules cover: out-of-range integers, null and
    NaN numbers, null and unknown labels (object column), null booleans; and its schema."""
    pd = pytest.importorskip("pandas")
    cut = np.array([None, "Fair", "Good", "Ideal", "Ideal", "Premium"], dtype=object)[rng.integers(0, 6, n)]
    income = rng.lognormal(10, 1, n)
    income[::17] = np.nan
    member = pd.array(rng.integers(0, 2, n).astype(bool), dtype="boolean")
    member[::19] = pd.NA
    frame = pd.DataFrame({"age": rng.integers(10, 100, n), "income": income, "cut": cut, "member": member})
    schema = dps.Schema(
        {
            "age": dps.Numeric(18, 90, integer=True),
            "income": dps.Numeric(0, 1e5, impute=0.0),
            "cut": dps.Categorical(["Fair", "Good", "Ideal"], null="category"),
            "member": dps.Boolean(null=False),
        },
        rows=n,
    )
    return frame, schema


def test_schema_table_sum_identical_to_the_in_memory_table_for_every_partitioning(rng):
    dd = pytest.importorskip("dask.dataframe")
    from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain

    frame, schema = _mixed(rng, 300)
    fm = dps.auto_feature_map(schema)
    ref = make_table_sum_and_count(table_domain(schema), dp.symmetric_distance(), fm)(frame)
    t = dsk.make_dask_table_sum_and_count(dsk.dask_table_domain(schema), dp.symmetric_distance(), fm)
    for partitions in (1, 3, 7):
        s, n = t(dd.from_pandas(frame, npartitions=partitions))
        assert list(s) == list(ref[0]) and n == ref[1] == 300
    extra = frame.assign(note="x")[["note", "cut", "member", "income", "age"]]  # by name, any order
    assert list(t(dd.from_pandas(extra, npartitions=2))[0]) == list(ref[0])


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}])
def test_schema_release_matches_release_sketch_in_one_pass(rng, spy_release, budget, monkeypatch):
    dd = pytest.importorskip("dask.dataframe")
    frame, schema = _mixed(rng, 3000)
    calls = []
    real = dsk._partition_table_stats
    monkeypatch.setattr(
        dsk, "_partition_table_stats", lambda block, config: calls.append(1) or real(block, config)
    )
    monkeypatch.setattr(dsk, "_partition_problems", None)  # the separate check pass is not run
    sk = dps.release_sketch(dd.from_pandas(frame, npartitions=3), schema=schema, **budget)
    ref = dps.release_sketch(frame, schema=schema, **budget)
    assert sk.feature_map == ref.feature_map and sk.schema == ref.schema == schema.to_dict()
    assert sk.privacy == ref.privacy and sk.noise == ref.noise and spy_release == [1, 1]
    assert len(calls) == 3  # one task per partition: the pair and the problem counts together
    assert dps.M2M(sk, seed=0).shares("cut")["cut"].to_list() == ["Fair", "Good", "Ideal", None]


@pytest.fixture
def passes(monkeypatch):
    """Counts the passes over the data: every ``dask.compute`` the backend runs, and the
    partition tasks it computes (the checks' and the sums')."""
    computes, tasks = [], []
    real_compute = dask.compute

    def compute(*args, **kwargs):
        computes.append(1)
        return real_compute(*args, **kwargs)

    monkeypatch.setattr(dask, "compute", compute)
    for name in ("_partition_table_stats", "_partition_problems"):
        real = getattr(dsk, name)
        monkeypatch.setattr(
            dsk, name, lambda block, config, real=real: tasks.append(1) or real(block, config)
        )
    return computes, tasks


def test_schema_release_chooses_a_tree_in_one_pass(rng, passes, secret, spy_release):
    """``pair_selection="auto"`` runs MST's choice on Dask, within the budget, in **one** pass:
    the check gathers every block the tree could take, and the candidates' counts and the chosen
    map's sums are read off it (three passes before: the check, the candidates, the release)."""
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    schema = dps.Schema({f"x{j}": (0.0, 1.0) for j in range(6)}, rows=40_000)
    x = rng.uniform(0, 1, (40_000, 3))
    frame = pd.DataFrame(np.column_stack([x, 1 - x]), columns=schema.columns)
    computes, tasks = passes
    sk = dps.release_sketch(dd.from_pandas(frame, npartitions=4), schema=schema, epsilon=1.0)
    tree = sk.privacy["pair_selection"]["pairs"]
    assert len(tree) == 5 and sk.privacy["epsilon"] <= 1.0
    assert sum(sorted(p) in ([0, 3], [1, 4], [2, 5]) for p in tree) >= 2  # the dependent pairs stand out
    assert len(computes) == 1 and len(tasks) == 4  # one pass: each partition read once
    # the same measurement as in memory: the same noise, the same losses
    ref = dps.release_sketch(frame, schema=schema, epsilon=1.0)
    assert sk.noise == ref.noise and sk.feature_map.num_features == ref.feature_map.num_features
    assert {k: v for k, v in sk.privacy.items() if k != "pair_selection"} == {
        k: v for k, v in ref.privacy.items() if k != "pair_selection"
    }
    # an explicit pair_selection, as the benchmarks' private-tree plan: one pass too
    computes.clear()
    tasks.clear()
    sk = dps.release_sketch(
        dd.from_pandas(frame, npartitions=4), schema=schema, epsilon=1.0, pairs="none", pair_selection=0.1
    )
    assert len(sk.privacy["pair_selection"]["pairs"]) == 5 and len(computes) == 1 and len(tasks) == 4
    # the gathering pass refuses what the schema's rules do not cover, before any measurement
    spy_release.clear()
    bad = frame.head(100).copy()
    bad.iloc[7, 2] = np.nan
    bad.iloc[9, 4] = secret
    with pytest.raises(ValueError, match="nulls") as err:
        dps.release_sketch(
            dd.from_pandas(bad, npartitions=2), schema=schema, epsilon=1.0, pairs="none", pair_selection=0.1
        )
    assert str(secret) not in str(err.value) and spy_release == []


def test_a_gathered_pass_gives_the_exact_pairs_of_every_map_of_its_blocks(rng, passes, tree_maps):
    """``gather_dask_table``: one pass checks the table and counts every block a tree could take;
    the Dask pairs of the candidates and of every map a choice could give (weighted, with targets,
    a weight that is not a power of two) are read off it, integer for integer the passes' own."""
    import gc

    dd = pytest.importorskip("dask.dataframe")
    from opendp_sketch.backends import gathered

    frame, schema = _mixed(rng, 3000)
    df = dd.from_pandas(frame, npartitions=3)
    union, maps = tree_maps(schema)
    computes, tasks = passes
    handle, n = dsk.gather_dask_table(df, schema, union)
    assert n == 3000 and len(computes) == 1 and len(tasks) == 3
    assert dsk.dask_table_domain(schema).member(handle)
    domain = dsk.dask_table_domain(schema)
    for fm in maps:
        pair = dsk.make_dask_table_sum_and_count(domain, dp.symmetric_distance(), fm)
        before = len(computes)
        s, m = pair(handle)
        assert len(computes) == before  # read off the pass
        ref = pair(df)  # a pass of its own
        assert len(computes) == before + 1 and list(s) == list(ref[0]) and m == ref[1] == 3000
    # a map with a block the pass did not count, another kind of map, or another schema's
    # encoding of the same columns: a pass, the same pair as on the collection itself
    three_way = dps.MarginalTables(
        schema.bounds, subsets=[0, (0, 1, 3)], bins=2, categorical=schema.categorical
    )
    spec = schema.to_dict()
    spec["columns"]["income"]["impute"] = 5e4  # the same box, another encoding of a NaN
    other = dps.Schema.from_dict(spec)
    cases = [(three_way, domain), (dps.Histogram(bounds=schema.bounds, bins=3), domain)]
    cases.append((union, dsk.dask_table_domain(other)))
    for fm, dom in cases:
        pair = dsk.make_dask_table_sum_and_count(dom, dp.symmetric_distance(), fm)
        before = len(computes)
        s, m = pair(handle)
        assert len(computes) == before + 1 and list(s) == list(pair(df)[0]) and m == 3000
    with pytest.raises(ValueError, match="must be a MarginalTables"):
        dsk.gather_dask_table(df, schema, dps.Histogram(bounds=schema.bounds, bins=3))
    # the record lives as long as the collection it was returned with
    key = id(handle)
    assert key in gathered._GATHERED
    del handle
    gc.collect()
    assert key not in gathered._GATHERED


def test_schema_refusals_before_any_release(secret, spy_release):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    schema = dps.Schema({"x": (0.0, 1.0), "cut": ["Fair", "Ideal"]})

    def frame(x, cut):
        return dd.from_pandas(pd.DataFrame({"x": x, "cut": cut}), npartitions=2)

    cases = [
        (frame([0.5, None, 0.1], ["Fair"] * 3), "nulls"),
        (frame([0.5, 0.2, np.inf], ["Fair"] * 3), "infinite"),
        (frame([secret] * 3, ["Fair", str(secret), "Ideal"]), "not among their public labels"),
        (frame(pd.Series([], dtype=float), pd.Series([], dtype=object)), "empty"),
        (frame(["a", "b", "c"], ["Fair"] * 3), "text that is not a number"),
        (
            dd.from_pandas(pd.DataFrame({"x": [secret]}), npartitions=1),
            r"columns \['cut'\] are not in the data",
        ),
    ]
    for df, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            dps.release_sketch(df, schema=schema, epsilon=1.0)
        assert str(secret) not in str(err.value)
    with pytest.raises(ValueError, match="dask.dataframe.DataFrame"):
        dps.release_sketch(da.zeros((10, 2), chunks=5), schema=schema, epsilon=1.0)
    with pytest.raises(ValueError, match="drop bounds="):
        dps.release_sketch(cases[0][0], bounds=(0, 1), schema=schema, epsilon=1.0)
    assert spy_release == []


def test_schema_release_with_a_map_of_the_users_choice(rng):
    """A feature map over the schema's encoded columns is released as release_sketch does, with
    the schema recorded (answers in the table's units)."""
    dd = pytest.importorskip("dask.dataframe")
    frame, schema = _mixed(rng, 2000)
    fm = dps.Histogram(bounds=schema.bounds, bins=4)
    sk = dps.release_sketch(dd.from_pandas(frame, npartitions=2), fm, schema=schema, epsilon=1.0)
    ref = dps.release_sketch(frame, fm, schema=schema, epsilon=1.0)
    assert sk.feature_map == fm and sk.schema == schema.to_dict() and sk.privacy == ref.privacy
    with pytest.raises(ValueError, match="fine_bins shapes the automatic map"):
        dps.release_sketch(dd.from_pandas(frame, npartitions=2), fm, schema=schema, epsilon=1.0, fine_bins=16)
