"""Streamed releases from LazyFrames and files: exact sums equal to the in-memory path, validation
before release, and the frame domain in OpenDP constructors."""

from __future__ import annotations

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.backends.streaming import (
    frame_box_domain,
    make_frame_feature_sum,
    make_frame_row_count,
    scan,
)

MAPS = {
    "rff": lambda: dps.RFF(dim=3, num_features=32, bandwidth=0.5, seed=1),
    "race": lambda: dps.RACE(dim=3, rows=6, buckets=16, bucket_width=0.4, seed=2),
    "histogram": lambda: dps.Histogram(bounds=(0, 1), bins=5, dim=3),
    "byclass": lambda: dps.ByClass(dps.Histogram(bounds=(0, 1), bins=4, dim=2), 2),
}


@pytest.fixture
def data(rng) -> np.ndarray:
    X = rng.uniform(-0.5, 1.5, size=(5000, 3))  # values outside the box too
    X[:, 2] = np.where(rng.random(5000) < 0.5, X[:, 2], 1.0)
    return X


def frame(X: np.ndarray, names=("a", "b", "c")) -> pl.LazyFrame:
    return pl.LazyFrame({n: X[:, j] for j, n in enumerate(names)})


@pytest.mark.parametrize("name", list(MAPS))
@pytest.mark.parametrize("batch_rows", [1, 333, 100_000])
def test_streamed_sum_equals_the_in_memory_sum(name, batch_rows, data):
    fm = MAPS[name]()
    X = data[:400] if batch_rows == 1 else data
    t = make_frame_feature_sum(
        frame_box_domain((0, 1), ["a", "b", "c"]), dp.symmetric_distance(), fm, batch_rows=batch_rows
    )
    assert list(t(frame(X))) == fm.fixed_sum(np.clip(X, 0, 1))
    assert t.map(2) == 2 * fm.int_sensitivity(1)
    count = make_frame_row_count(frame_box_domain((0, 1), ["a", "b", "c"]), dp.symmetric_distance())
    assert count(frame(X)) == X.shape[0] and count.map(3) == 3


def test_release_from_a_lazyframe_matches_the_numpy_release(data):
    fm = MAPS["rff"]()
    a = dps.release_sketch(frame(data), fm, bounds=(0, 1), epsilon=1.0)
    b = dps.release_sketch(data, fm, bounds=(0, 1), epsilon=1.0)
    assert a.noise["sum_scale"] == b.noise["sum_scale"] and a.privacy == b.privacy
    assert a.column_names == ["a", "b", "c"]
    # both are the same exact sum plus independent noise of known scale
    diff = (a.sum - b.sum) / (np.sqrt(2 * a.sum_variance))
    assert np.abs(diff).max() < 8


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".ipc"])
def test_release_from_a_file_path(suffix, data, tmp_path):
    path = tmp_path / f"rows{suffix}"
    df = pl.DataFrame({"a": data[:, 0], "b": data[:, 1], "c": data[:, 2], "note": ["x"] * len(data)})
    {".parquet": df.write_parquet, ".csv": df.write_csv, ".ipc": df.write_ipc}[suffix](path)
    fm = MAPS["histogram"]()
    sk = dps.release_sketch(str(path), fm, bounds=(0, 1), epsilon=1.0, column_names=["a", "b", "c"])
    assert sk.column_names == ["a", "b", "c"] and abs(sk.count - len(data)) < 2000
    assert dps.M2M(sk, n_samples=2000).mean().shape == (3,)


def test_nulls_need_a_public_imputation(data):
    X = data.copy()
    X[10, 1] = np.nan
    lf = frame(X).with_columns(
        pl.when(pl.int_range(pl.len()) == 20).then(None).otherwise(pl.col("c")).alias("c")
    )
    fm = MAPS["histogram"]()
    with pytest.raises(ValueError, match=r"columns \['b', 'c'\] contain null or NaN values"):
        dps.release_sketch(lf, fm, bounds=(0, 1), epsilon=1.0)
    sk = dps.release_sketch(lf, fm, bounds=(0, 1), epsilon=1.0, impute=0.5)
    assert sk.count > 0
    dom = frame_box_domain((0, 1), ["a", "b", "c"], impute=0.5)
    filled = np.where(np.isnan(X), 0.5, X)
    filled[20, 2] = 0.5
    assert list(make_frame_feature_sum(dom, dp.symmetric_distance(), fm)(lf)) == fm.fixed_sum(
        np.clip(filled, 0, 1)
    )


def test_bad_frames_are_refused_before_any_release(data, secret, tmp_path):
    fm = MAPS["histogram"]()
    X = data.copy()
    X[3, 0] = np.inf
    with pytest.raises(ValueError, match=r"columns \['a'\] contain infinite values"):
        dps.release_sketch(frame(X), fm, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match=r"columns \['zz'\] are not in the data"):
        dps.release_sketch(frame(data), fm, bounds=(0, 1), epsilon=1.0, column_names=["a", "b", "zz"])
    text = frame(data).with_columns(pl.lit(str(secret)).alias("c"))
    with pytest.raises(ValueError, match=r"columns \['c'\] must be numeric") as err:
        dps.release_sketch(text, fm, bounds=(0, 1), epsilon=1.0)
    assert str(secret) not in str(err.value)
    with pytest.raises(ValueError, match="empty"):
        dps.release_sketch(frame(data[:0]), fm, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="2 columns but the feature map expects 3"):
        dps.release_sketch(frame(data[:, :2], ("a", "b")), fm, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="unknown file type"):
        scan(tmp_path / "rows.xlsx")
    with pytest.raises(ValueError, match="no such file"):
        dps.release_sketch(str(tmp_path / "missing.parquet"), fm, bounds=(0, 1), epsilon=1.0)
    with pytest.raises(ValueError, match="projection= needs in-memory data"):
        dps.release_sketch(
            frame(data),
            dps.RFF(dim=2, num_features=4),
            bounds=(0, 1),
            epsilon=1.0,
            projection=dps.JLProjection(3, 2),
        )


def test_frame_domain_in_make_private_sketch_and_a_context(data):
    fm = MAPS["rff"]()
    dom = frame_box_domain((0, 1), ["a", "b", "c"])
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=2.0)
    numpy_meas = dps.make_private_sketch(
        dps.box_domain((0, 1), 3), dp.symmetric_distance(), dp.max_divergence(), fm, scale=2.0
    )
    assert meas.map(1) == numpy_meas.map(1)
    ctx = dp.Context.compositor(
        data=frame(data),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=2,
        domain=dom,
    )
    sk = ctx.query().private_sketch(fm).release()
    assert sk.column_names == ["a", "b", "c"] and sk.privacy["loss"] <= 0.5 + 1e-12
    assert ctx.query().private_sketch(fm).m2m("mean", n_samples=1000).release().shape == (3,)


def test_frame_domain_validation():
    with pytest.raises(ValueError, match="distinct"):
        frame_box_domain((0, 1), ["a", "a"])
    with pytest.raises(ValueError, match="impute values must be finite"):
        frame_box_domain((0, 1), ["a"], impute=np.nan)
    with pytest.raises(ValueError, match="frame_box_domain"):
        make_frame_feature_sum(dps.box_domain((0, 1), 1), dp.symmetric_distance(), MAPS["histogram"]())
    with pytest.raises(ValueError, match="batch_rows"):
        make_frame_feature_sum(
            frame_box_domain((0, 1), list("abc")), dp.symmetric_distance(), MAPS["rff"](), batch_rows=0
        )


@pytest.mark.opendp_polars
def test_sketch_and_native_polars_queries_share_one_context(data):
    lf = frame(data)
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=2,
        margins=[dp.polars.Margin(by=[], max_length=100_000)],
    )
    fm = MAPS["histogram"]()
    sk = dps.release_sketch_in_context(ctx, fm, bounds=(0, 1), column_names=["a", "b", "c"])
    assert isinstance(sk, dps.Sketch) and sk.privacy["loss"] <= 0.5 + 1e-12
    assert sk.column_names == ["a", "b", "c"] and abs(sk.count - len(data)) < 1000
    mean = ctx.query().select(pl.col("a").fill_null(0.5).dp.mean((0.0, 1.0))).release().collect()
    assert mean.shape == (1, 1)
    assert ctx.remaining_privacy_loss() == []  # the sketch and the native query used the two shares
    with pytest.raises(ValueError):
        dps.release_sketch_in_context(ctx, fm, bounds=(0, 1), column_names=["a", "b", "c"])


@pytest.mark.opendp_polars
def test_context_release_checks_columns_before_anything(data):
    lf = frame(data).with_columns(pl.lit("t").alias("txt"))
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_evenly_over=1,
    )
    fm = MAPS["histogram"]()
    with pytest.raises(ValueError, match=r"columns \['zz'\] are not in the data"):
        dps.release_sketch_in_context(ctx, fm, bounds=(0, 1), column_names=["a", "b", "zz"])
    with pytest.raises(ValueError, match=r"columns \['txt'\] must be numeric"):
        dps.release_sketch_in_context(ctx, fm, bounds=(0, 1), column_names=["a", "b", "txt"])
    with pytest.raises(ValueError, match="2 columns given"):
        dps.release_sketch_in_context(ctx, fm, bounds=(0, 1), column_names=["a", "b"])
    assert ctx.remaining_privacy_loss() == [1.0]  # nothing was spent
    with pytest.raises(ValueError, match="LazyFrame domain"):
        dps.backends.streaming.make_lazyframe_to_frame_box(
            dps.box_domain((0, 1), 3), dp.symmetric_distance(), (0, 1), ["a", "b", "c"]
        )


def test_progress_reports_every_streamed_row_once(data):
    import polars as pl

    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=data.shape[1])
    seen: list[tuple[int, int]] = []
    frame = pl.LazyFrame({f"c{j}": data[:, j] for j in range(data.shape[1])})
    dps.release_sketch(
        frame,
        fm,
        bounds=(0, 1),
        epsilon=1.0,
        chunk_rows=1000,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen and seen[-1] == (data.shape[0], data.shape[0])
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    with pytest.raises(ValueError, match="progress"):
        dps.release_sketch(frame, fm, bounds=(0, 1), epsilon=1.0, progress="bar")
    # a failing display never stops the release
    sk = dps.release_sketch(frame, fm, bounds=(0, 1), epsilon=1.0, progress=lambda d, t: 1 / 0)
    assert isinstance(sk, dps.Sketch) and sk.sum.shape == (fm.num_features,)


@pytest.mark.parametrize("batch_rows", [7, 1000])
def test_parquet_with_large_row_groups_streams_in_small_batches_to_the_same_sum(batch_rows, data, tmp_path):
    from opendp_sketch.backends.streaming import scan_parquet_bounded

    path = tmp_path / "groups.parquet"
    X = data[:2000]
    frame(X).collect().write_parquet(path, row_group_size=1500)  # groups larger than the batches
    fm = MAPS["rff"]()
    lf = scan_parquet_bounded(path, batch_rows=batch_rows)
    sizes = [b.height for b in lf.collect_batches(chunk_size=batch_rows, maintain_order=True)]
    assert sum(sizes) == 2000 and max(sizes) <= batch_rows
    t = make_frame_feature_sum(
        frame_box_domain((0, 1), ["a", "b", "c"]), dp.symmetric_distance(), fm, batch_rows=batch_rows
    )
    assert list(t(lf)) == list(t(scan(path))) == fm.fixed_sum(np.clip(X, 0, 1))
    # projections, filters and head go through the reader
    assert lf.select("b").filter(pl.col("b") > 0.5).head(3).collect().shape == (3, 1)
