"""The backends' one protocol: the same exact pair from every backend, one dispatch on the
input domain's descriptor, no state written into feature maps, and the old names as warned
aliases (issue 38). The Spark leg of the same-sum check is in ``test_spark.py`` (it needs the
module's Spark session)."""

from __future__ import annotations

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.backends import backend_for, backend_of_data, make_sum_and_count
from opendp_sketch.backends.dask import dask_box_domain, dask_table_domain
from opendp_sketch.backends.streaming import frame_box_domain
from opendp_sketch.backends.tables import table_domain

BOX = (-1.0, 2.0)
NAMES = ["a", "b", "c"]
SYM = dp.symmetric_distance()


@pytest.fixture(scope="module")
def table():
    X = np.random.default_rng(5).uniform(-1.0, 2.0, size=(500, 3))
    fm = dps.Histogram(bounds=BOX, bins=4, dim=3)
    schema = dps.Schema({c: dps.Numeric(*BOX) for c in NAMES})
    # the schema encodes each column to [0, 1] by its public range: 4 equal bins there are
    # the same 4 bins of [-1, 2]
    encoded_fm = dps.Histogram(bounds=schema.bounds, bins=4)
    return X, fm, schema, encoded_fm


def _same(pair, expected):
    s, n = pair
    assert n == expected[1]
    np.testing.assert_array_equal(np.asarray(s), np.asarray(expected[0]))


def test_one_map_gives_the_same_exact_pair_on_every_local_and_dask_backend(table, tmp_path):
    X, fm, schema, encoded_fm = table
    expected = make_sum_and_count(dps.box_domain(BOX, num_columns=3), SYM, fm)(X)
    assert expected[1] == 500 and int(np.asarray(expected[0]).sum()) == 3 * 500
    frame = pl.DataFrame(X, schema=NAMES)
    _same(make_sum_and_count(frame_box_domain(BOX, NAMES), SYM, fm)(frame.lazy()), expected)
    path = tmp_path / "t.parquet"
    frame.write_parquet(path)
    _same(make_sum_and_count(table_domain(schema), SYM, encoded_fm)(str(path)), expected)
    _same(make_sum_and_count(table_domain(schema), SYM, encoded_fm)(frame), expected)
    with dask.config.set(scheduler="synchronous"):
        arr = da.from_array(X, chunks=(170, 3))
        _same(make_sum_and_count(dask_box_domain(BOX, num_columns=3), SYM, fm)(arr), expected)
        ddf = dd.from_pandas(frame.to_pandas(), npartitions=3)
        _same(make_sum_and_count(dask_table_domain(schema), SYM, encoded_fm)(ddf), expected)


def test_dispatch_follows_the_descriptor_class():
    assert backend_for(dps.box_domain(BOX, num_columns=3)).name == "numpy"
    assert backend_for(frame_box_domain(BOX, NAMES)).name == "polars"
    assert backend_for(dask_box_domain(BOX, num_columns=3)).name == "dask"
    schema = dps.Schema({"a": (0, 1)})
    assert backend_for(table_domain(schema)).name == "polars"
    assert backend_for(dask_table_domain(schema)).name == "dask"
    with pytest.raises(ValueError, match="must be one of the sketch domains"):
        backend_for(dp.numpy.array2_domain(num_columns=2, T=float))


def test_data_recognition_is_by_type_not_by_value():
    with dask.config.set(scheduler="synchronous"):
        assert backend_of_data(da.zeros((3, 2))).name == "dask"
    assert backend_of_data(np.zeros((3, 2))) is None
    assert backend_of_data(pl.DataFrame({"a": [1.0]})) is None


def test_options_a_backend_does_not_take_are_refused_with_the_place_to_put_them():
    fm = dps.Histogram(bounds=BOX, bins=2, dim=3)
    with pytest.raises(ValueError, match=r"make_box_clip\(impute=\)"):
        make_sum_and_count(dps.box_domain(BOX, num_columns=3), SYM, fm, impute=0.0)
    with pytest.raises(ValueError, match="make_sum_and_count"):
        dps.make_feature_sum(
            table_domain(dps.Schema({"a": (0, 1)})), SYM, dps.Histogram(bounds=(0, 1), bins=2)
        )
    with pytest.raises(ValueError, match="fixed_point=True"):
        dps.make_feature_sum(frame_box_domain(BOX, NAMES), SYM, fm)


def test_measurements_write_no_state_into_the_feature_map(table):
    X, fm, _, _ = table
    before = dict(vars(fm))
    m = dps.make_private_sketch(dps.box_domain(BOX, num_columns=3), SYM, dp.max_divergence(), fm, 2.0)
    dp.binary_search_param(
        lambda s: dps.make_private_sketch(
            dps.box_domain(BOX, num_columns=3), SYM, dp.max_divergence(), fm, s
        ),
        d_in=1,
        d_out=1.0,
        T=float,
    )
    assert isinstance(m(np.clip(X, *BOX)), dps.Sketch)
    assert vars(fm).keys() == before.keys()


def test_a_dask_dataframe_under_a_schema_is_released_by_release_sketch(table):
    X, _, schema, _ = table
    ddf = dd.from_pandas(pl.DataFrame(X, schema=NAMES).to_pandas(), npartitions=2)
    with dask.config.set(scheduler="synchronous"):
        sk = dps.release_sketch(ddf, schema=schema, epsilon=1.0, pair_selection=None)
    assert sk.column_names == NAMES and sk.privacy["epsilon"] == 1.0


def test_old_names_still_resolve_for_one_release_with_a_warning():
    with pytest.warns(DeprecationWarning, match="release_sketch"):
        old = dps.release_dask_sketch
    assert old is dps.release_sketch
    with pytest.warns(DeprecationWarning, match="opendp_sketch.backends.dask.dask_box_domain"):
        assert dps.dask_box_domain is dask_box_domain
    with pytest.warns(DeprecationWarning, match="opendp_sketch.plan.auto_marginals"):
        from opendp_sketch import release

        assert release.auto_marginals is not None
    with pytest.raises(AttributeError):
        dps.no_such_name  # noqa: B018


def test_the_package_root_stays_small():
    assert len(dps.__all__) <= 60
    assert len(set(dps.__all__)) == len(dps.__all__)
    for name in dps.__all__:
        assert getattr(dps, name) is not None


def test_renamed_estimators_keep_their_old_name_for_one_release():
    with pytest.warns(DeprecationWarning, match="SketchLogisticRegression"):
        old = dps.LogisticRegression
    assert old is dps.SketchLogisticRegression


def test_marginals_is_renamed_and_old_sketches_still_load(tmp_path):
    with pytest.warns(DeprecationWarning, match="MarginalTables"):
        assert dps.Marginals is dps.MarginalTables
    fm = dps.MarginalTables(bounds=(0, 1), subsets=[0, (0, 1)], bins=4, dim=2)
    spec = fm.to_dict()
    assert spec["kind"] == "MarginalTables"
    old = {**spec, "kind": "Marginals"}  # a sketch saved before the rename
    assert dps.FeatureMap.from_dict(old) == fm
