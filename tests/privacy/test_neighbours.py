"""Neighbouring datasets give the same kind of outcome on every release path (issue 13).

For a base dataset ``D`` and ``D' = D + one adversarial row`` (null, NaN, ±inf, ±1e308):

* **analyst-facing paths** — measurements run inside a ``dp.Context`` or called directly, where
  the data is not the caller's to inspect — must release on both, be charged exactly once, and
  never raise or warn (OpenDP does not charge a query that raised: a free, repeatable oracle).
  The exact integer sums they noise differ by at most the stated sensitivity.
* **curator-side one-call releases** (``release_sketch`` and friends, sessions, the CLI) either
  release on both, or refuse ``D'`` with a ``ValueError`` naming the fix *before anything is
  built or released* (the curator sees their own data; nothing is spent) — and they release
  on both whenever the declared null rule (``impute``) admits the row.

Every test here failed on the code before issue 13's fix, or guards a path that never raised.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.testing import assert_within_sensitivity

BOX = (0.0, 1.0)
D = 2
#: the value placed in column 0 of the added row; None is a null where the input has nulls
ADVERSARIAL = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf, "+1e308": 1e308, "-1e308": -1e308}
REFUSED_WITHOUT_IMPUTE = {"nan", "null", "+inf", "-inf"}  # the one-call releases' documented rules


def _maps() -> dict[str, dps.FeatureMap]:
    return {
        "histogram": dps.Histogram(bounds=BOX, bins=4, dim=D),
        "rff": dps.RFF(dim=D, num_features=16, bandwidth=0.5, seed=3),
        "race": dps.RACE(dim=D, rows=5, buckets=7, bucket_width=0.5, seed=4),
    }


@pytest.fixture(scope="module")
def base() -> np.ndarray:
    return np.random.default_rng(0).uniform(0, 1, size=(40, D))


def _neighbour(base: np.ndarray, value: float) -> np.ndarray:
    row = np.full((1, D), 0.5)
    row[0, 0] = value
    return np.vstack([base, row])


def _frame(X: np.ndarray, null: bool = False) -> pl.DataFrame:
    """``X`` as a Polars frame; with ``null`` its last row's first cell becomes a null."""
    df = pl.DataFrame({f"x{j}": X[:, j] for j in range(X.shape[1])})
    if null:
        df = df.with_columns(
            pl.when(pl.int_range(pl.len()) == X.shape[0] - 1).then(None).otherwise(pl.col("x0")).alias("x0")
        )
    return df


def _kinds() -> list[str]:
    return [*ADVERSARIAL, "null"]


def _data(base: np.ndarray, kind: str) -> tuple[np.ndarray, bool]:
    """The neighbour's rows (a null is a NaN in numpy) and whether the added cell is a null."""
    return _neighbour(base, math.nan if kind == "null" else ADVERSARIAL[kind]), kind == "null"


def _compositor(data, loss, domain=None, parts: int = 2):
    kwargs = {"domain": domain} if domain is not None else {}
    return dp.Context.compositor(
        data=data,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=loss,
        split_evenly_over=parts,
        **kwargs,
    )


# -- analyst-facing: always release, charged once, within the sensitivity ----------------------


@pytest.mark.parametrize("kind", _kinds())
@pytest.mark.parametrize("chain", ["private_sketch", "feature_sum_laplace", "m2m_mean", "jl_projection"])
def test_context_numpy_queries_release_on_both_neighbours(base, kind, chain):
    X2, _ = _data(base, kind)
    fm = _maps()["histogram"]
    dom = dp.numpy.array2_domain(num_columns=D, T=float, nan=False)  # the declared domain excludes NaN
    for X in (base, X2):
        ctx = _compositor(X, dp.loss_of(epsilon=1.0), dom)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a warning would raise out of the measurement
            q = ctx.query().box_clip(BOX)
            if chain == "private_sketch":
                out = q.private_sketch(fm).release()
                assert isinstance(out, dps.Sketch)
            elif chain == "feature_sum_laplace":
                out = q.feature_sum(fm).laplace().release()
                assert len(out) == fm.num_features
            elif chain == "m2m_mean":
                out = q.private_sketch(fm).m2m("mean", n_samples=2000).release()
                assert out is not None
            else:
                proj = dps.RFF(dim=3, num_features=8, bandwidth=1.0, seed=0)
                out = q.jl_projection(3, seed=1).private_sketch(proj).release()
                assert isinstance(out, dps.Sketch)
        assert ctx.remaining_privacy_loss() == [0.5]  # charged exactly once


PAIRS = dps.Composite(
    [
        dps.MarginalTables(bounds=BOX, subsets=[0, 1], bins=8, dim=D),
        dps.MarginalTables(bounds=BOX, subsets=[(0, 1)], bins=4, dim=D),
    ],
    weights=[3.0, 1.0],
)


@pytest.mark.parametrize("fm", [_maps()["histogram"], PAIRS], ids=["histogram", "marginals_with_pairs"])
def test_context_m2m_on_tiny_data_is_charged_once_per_query_and_never_warns(fm):
    """Split 20 ways on 3 rows, noisy counts ≤ 0 happen: no answer raises or warns, each is charged.
    With pairs, the decoder draws its first points along the released pair table (its forest)."""
    X = np.full((3, D), 0.5)
    ctx = _compositor(X, dp.loss_of(epsilon=1.0), dps.box_domain(BOX, D), parts=20)
    counts = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(20):
            out = ctx.query().private_sketch(fm).m2m(None, n_samples=500).release()
            assert out is not None  # the estimator, or a FailedEstimate saying why
            if not isinstance(out, dps.postprocessors.FailedEstimate):
                counts.append(out.sketch.count)
                out.mean()  # an estimate on a count ≤ 0 sketch must not raise or warn either
            assert len(ctx.remaining_privacy_loss()) == 19 - i  # each query charged once
    assert min(counts) <= 0  # at ε = 0.05 per query a count ≤ 0 happens (P(all 20 positive) < 1e-6)


@pytest.mark.opendp_polars
@pytest.mark.parametrize("kind", _kinds())
def test_context_lazyframe_release_on_both_neighbours(base, kind):
    X2, null = _data(base, kind)
    fm = _maps()["rff"]
    for frame in (_frame(base), _frame(X2, null)):
        ctx = _compositor(frame.lazy(), dp.loss_of(epsilon=1.0))
        sk = dps.release_sketch_in_context(ctx, fm, BOX, ["x0", "x1"])
        assert isinstance(sk, dps.Sketch)
        assert ctx.remaining_privacy_loss() == [0.5]


@pytest.mark.parametrize("name", ["histogram", "rff", "race"])
@pytest.mark.parametrize("kind", _kinds())
def test_frame_measurement_sums_stay_within_sensitivity(base, kind, name):
    """``make_private_sketch`` on a frame domain: releases on both; exact sums within Δ."""
    X2, null = _data(base, kind)
    fm = _maps()[name]
    dom = dps.backends.streaming.frame_box_domain(BOX, ["x0", "x1"])
    t = dps.backends.streaming.make_frame_feature_sum(dom, dp.symmetric_distance(), fm)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    f1, f2 = _frame(base).lazy(), _frame(X2, null).lazy()
    assert dom.member(f1) and dom.member(f2)
    assert isinstance(meas(f1), dps.Sketch) and isinstance(meas(f2), dps.Sketch)
    for p in (1, 2):
        assert_within_sensitivity(fm, t(f1), t(f2), p)


@pytest.mark.parametrize("name", ["histogram", "rff", "race"])
@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_numpy_measurement_sums_stay_within_sensitivity(base, kind, name):
    """``box_clip >> make_private_sketch`` on NaN-free domains, fed data with NaN anyway."""
    X2, _ = _data(base, kind)
    fm = _maps()[name]
    clip = dps.make_box_clip(
        dp.numpy.array2_domain(num_columns=D, T=float, nan=False), dp.symmetric_distance(), BOX
    )
    t = clip >> dps.then_feature_sum(fm, p=1, fixed_point=True)
    meas = clip >> dps.then_private_sketch(dp.max_divergence(), fm, 1.0)
    assert isinstance(meas(base), dps.Sketch) and isinstance(meas(X2), dps.Sketch)
    for p in (1, 2):
        assert_within_sensitivity(fm, t(base), t(X2), p)


@pytest.mark.parametrize("kind", [*ADVERSARIAL, "null"])
def test_dask_measurement_releases_on_both_neighbours(base, kind):
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    import dask

    X2, null = _data(base, kind)
    fm = _maps()["rff"]
    names = ["x0", "x1"]
    dom = dps.backends.dask.dask_box_domain(BOX, column_names=names)
    t = dps.backends.dask.make_dask_feature_sum(dom, dp.symmetric_distance(), fm)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, 1.0)
    with dask.config.set(scheduler="synchronous"):
        if null:  # a null in a DataFrame partition
            a = dd.from_pandas(_frame(base).to_pandas(), npartitions=3)
            b = dd.from_pandas(_frame(X2, null).to_pandas(), npartitions=3)
        else:
            a, b = da.from_array(base, chunks=(15, D)), da.from_array(X2, chunks=(15, D))
        assert isinstance(meas(a), dps.Sketch) and isinstance(meas(b), dps.Sketch)
        for p in (1, 2):
            assert_within_sensitivity(fm, t(a), t(b), p)


# -- curator-side one-call releases: release on both, or refuse D' before building ------------


def _one_call(release, make_input, base, kind, impute):
    """Run ``release`` on D and D'; return D' outcome ("released" or the refusal's message)."""
    X2, null = _data(base, kind)
    assert isinstance(release(make_input(base, False), impute), (dps.Sketch, list))
    try:
        out = release(make_input(X2, null), impute)
    except ValueError as e:  # a curator-side refusal, never OpenDP's wrapper of an inner error
        assert not isinstance(e, dp.OpenDPException)
        return str(e)
    assert isinstance(out, (dps.Sketch, list))
    return "released"


def _expect(kind: str, impute, outcome: str) -> None:
    if impute is None and kind in REFUSED_WITHOUT_IMPUTE:
        assert outcome != "released" and ("impute" in outcome or "infinite" in outcome), outcome
    elif kind in ("+inf", "-inf"):
        assert "infinite" in outcome, outcome  # inf is refused with or without impute
    else:
        assert outcome == "released", outcome


def _inputs(tmp_path):
    def numpy_input(X, null):
        return X

    def polars_input(X, null):
        return _frame(X, null)

    def lazy_input(X, null):
        return _frame(X, null).lazy()

    def parquet_input(X, null):
        path = tmp_path / f"d{len(X)}.parquet"
        _frame(X, null).write_parquet(path)
        return str(path)

    def csv_input(X, null):
        path = tmp_path / f"d{len(X)}.csv"
        _frame(X, null).write_csv(path)
        return str(path)

    return {
        "numpy": numpy_input,
        "polars": polars_input,
        "lazy": lazy_input,
        "parquet": parquet_input,
        "csv": csv_input,
    }


@pytest.mark.parametrize("impute", [None, 0.25])
@pytest.mark.parametrize("kind", _kinds())
@pytest.mark.parametrize("source", ["numpy", "polars", "lazy", "parquet", "csv"])
def test_release_sketch_same_kind_of_outcome(base, kind, impute, source, tmp_path):
    fm = _maps()["histogram"]

    def release(data, impute):
        return dps.release_sketch(data, fm, BOX, epsilon=1.0, impute=impute)

    _expect(kind, impute, _one_call(release, _inputs(tmp_path)[source], base, kind, impute))


@pytest.mark.parametrize("impute", [None, 0.25])
@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_release_dask_sketch_same_kind_of_outcome(base, kind, impute):
    da = pytest.importorskip("dask.array")
    import dask

    fm = _maps()["histogram"]

    def release(X, impute):
        with dask.config.set(scheduler="synchronous"):
            return dps.release_sketch(da.from_array(X, chunks=(15, D)), fm, BOX, epsilon=1.0, impute=impute)

    _expect(kind, impute, _one_call(release, lambda X, null: X, base, kind, impute))


@pytest.mark.parametrize("impute", [None, 0.25])
@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_smooth_sketches_same_kind_of_outcome(base, kind, impute):
    plan = dps.SmoothKernelPlan(dim=D, bandwidth=0.3, num_features=16, num_terms=3, t_max=20.0)

    def release(X, impute):
        return dps.release_smooth_sketches(X, plan, BOX, epsilon=1.0, impute=impute)

    _expect(kind, impute, _one_call(release, lambda X, null: X, base, kind, impute))


@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_session_same_kind_of_outcome_and_nothing_spent_on_refusal(base, kind, tmp_path):
    fm = _maps()["histogram"]
    X2, _ = _data(base, kind)
    for i, X in enumerate((base, X2)):
        session = dps.Session.open(tmp_path / f"ledger{i}.db", "d", epsilon=2.0)
        try:
            sk = session.release_sketch(X, fm, BOX, epsilon=1.0)
        except ValueError as e:
            assert i == 1 and kind in REFUSED_WITHOUT_IMPUTE, e
            assert session.spent == 0.0  # a refusal spends nothing
            continue
        finally:
            session.close()
        assert isinstance(sk, dps.Sketch)


@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_cli_same_kind_of_outcome(base, kind, tmp_path, capsys):
    from opendp_sketch.cli import main

    schema = tmp_path / "s.json"
    schema.write_text('{"columns": {"x0": [0, 1], "x1": [0, 1]}}')
    codes = []
    for i, X in enumerate((base, _data(base, kind)[0])):
        path = tmp_path / f"d{i}.parquet"
        _frame(X).write_parquet(path)
        codes.append(
            main(
                [
                    "release",
                    str(path),
                    "--schema",
                    str(schema),
                    "--out",
                    str(tmp_path / f"s{i}.sketch"),
                    "--map",
                    "histogram",
                    "--epsilon",
                    "1",
                    "--no-progress",
                ]
            )
        )
    capsys.readouterr()
    assert codes[0] == 0
    if kind in REFUSED_WITHOUT_IMPUTE:
        assert codes[1] != 0 and not (tmp_path / "s1.sketch").exists()
    else:
        assert codes[1] == 0


# -- tables under a public schema: unknown categories and text too ---------------------------

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


def _mixed(n_extra: int = 0, row=None) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    df = pl.DataFrame({"x": rng.uniform(0, 1, 40), "c": rng.choice(["a", "b"], 40)})
    if row is not None:
        df = pl.concat([df, pl.DataFrame({"x": [row[0]], "c": [row[1]]}, schema=df.schema)])
    return df


@pytest.mark.parametrize("pairs", ["all", "none", "tree"])
@pytest.mark.parametrize("kind", list(MIXED_KINDS))
def test_table_measurement_releases_on_both_neighbours_within_sensitivity(kind, pairs):
    """Also the two-level 1-way tree the rule adds with 64-bin cells and every pair ("tree": a
    row estimate and a budget that keep the pair): a row takes one cell in each level."""
    from opendp_sketch.backends.tables import make_table_sum_and_count, table_domain

    if pairs == "tree":
        fm = dps.auto_feature_map(dps.Schema(MIXED.to_dict()["columns"], rows=60_000), epsilon=3.0)
        assert [b.shape for m in fm.maps for b in m.blocks] == [(16,), (3,), (64,), (16, 3)]
    else:
        fm = dps.auto_feature_map(MIXED, pairs=pairs)  # without a row estimate the rule keeps every pair
    dom = table_domain(MIXED)
    pair = make_table_sum_and_count(dom, dp.symmetric_distance(), fm)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    a, b = _mixed(), _mixed(row=MIXED_KINDS[kind])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(meas(a), dps.Sketch) and isinstance(meas(b), dps.Sketch)
    (sa, na), (sb, nb) = pair(a), pair(b)
    assert nb - na == 1
    for p in (1, 2):
        assert_within_sensitivity(fm, sa, sb, p)


@pytest.mark.parametrize("kind", list(MIXED_KINDS))
def test_schema_release_same_kind_of_outcome(kind):
    """Nulls and unknown labels in ``c`` fall under its null rule (a null category): both
    release. A null/NaN in ``x`` (no impute value) and ±inf are refused by the curator-side
    check before anything is built; ±1e308 is clipped."""
    assert isinstance(dps.release_sketch(_mixed(), schema=MIXED, epsilon=1.0), dps.Sketch)
    try:
        out = dps.release_sketch(_mixed(row=MIXED_KINDS[kind]), schema=MIXED, epsilon=1.0)
    except ValueError as e:
        assert not isinstance(e, dp.OpenDPException)
        assert kind in ("null x", "nan x", "+inf x"), (kind, e)
        return
    assert isinstance(out, dps.Sketch) and kind not in ("null x", "nan x", "+inf x")


@pytest.mark.parametrize("kind", list(ADVERSARIAL))
def test_jl_projection_chained_into_a_release_takes_any_row(base, kind):
    """The JL projection runs inside the measurement: a NaN, ±inf or ±1e308 row (outside the
    box domain) is clipped into the box like ``make_box_clip`` does, never raised on or warned
    about; the projected neighbour adds exactly one row inside the output bounds."""
    dom = dps.box_domain(BOX, num_columns=D)
    t = dps.backends.projections.make_jl_projection(dom, dp.symmetric_distance(), output_dim=2, seed=5)
    meas = t >> dps.then_private_sketch(dp.max_divergence(), dps.RFF(dim=2, num_features=8, seed=1), 1.0)
    X2 = _neighbour(base, ADVERSARIAL[kind])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Y, Y2 = t(base), t(X2)
        assert isinstance(meas(base), dps.Sketch) and isinstance(meas(X2), dps.Sketch)
    lo, hi = t.output_domain.descriptor.bounds
    assert np.array_equal(Y2[:-1], Y) and ((Y2[-1] >= lo) & (Y2[-1] <= hi)).all()


@pytest.mark.parametrize("kind", list(MIXED_KINDS))
def test_dask_schema_table_neighbours_within_sensitivity_and_same_kind_of_outcome(kind):
    """The schema path on Dask: as on one machine, the measurement releases on both neighbours
    within the sensitivity, and the one-call release releases on both or refuses the neighbour
    on the client before anything is built."""
    dd = pytest.importorskip("dask.dataframe")
    import dask

    from opendp_sketch.backends.dask import dask_table_domain, make_dask_table_sum_and_count

    fm = dps.auto_feature_map(MIXED, pairs="all")
    dom = dask_table_domain(MIXED)
    pair = make_dask_table_sum_and_count(dom, dp.symmetric_distance(), fm)
    meas = dps.make_private_sketch(dom, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    a = dd.from_pandas(_mixed().to_pandas(), npartitions=3)
    b = dd.from_pandas(_mixed(row=MIXED_KINDS[kind]).to_pandas(), npartitions=3)
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(meas(a), dps.Sketch) and isinstance(meas(b), dps.Sketch)
        (sa, na), (sb, nb) = pair(a), pair(b)
        assert nb - na == 1
        for p in (1, 2):
            assert_within_sensitivity(fm, sa, sb, p)
        assert isinstance(dps.release_sketch(a, schema=MIXED, epsilon=1.0), dps.Sketch)
        try:
            out = dps.release_sketch(b, schema=MIXED, epsilon=1.0)
        except ValueError as e:
            assert not isinstance(e, dp.OpenDPException) and kind in ("null x", "nan x", "+inf x"), (kind, e)
            return
    assert isinstance(out, dps.Sketch) and kind not in ("null x", "nan x", "+inf x")
