"""``dps.Plan``: one validated, serialisable object for what a release measures and spends, taken
by ``release_sketch`` on every backend, the CLI and sessions, and recorded in the sketch (issue 38,
item 3). The automatic map's rules themselves are tested in ``test_schema.py`` and
``test_planning.py``."""

from __future__ import annotations

import json

import dask
import dask.dataframe as dd
import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.backends import make_sum_and_count
from opendp_sketch.backends.dask import dask_table_domain
from opendp_sketch.backends.tables import table_domain

SCHEMA = dps.Schema(
    {"age": dps.Numeric(18, 90, integer=True), "income": (0, 100_000), "cut": ["Fair", "Good", "Ideal"]},
    rows=3000,
)


@pytest.fixture(scope="module")
def people() -> pl.DataFrame:
    rng = np.random.default_rng(11)
    return pl.DataFrame(
        {
            "age": rng.integers(18, 91, 3000),
            "income": rng.gamma(2.0, 15_000, 3000),
            "cut": rng.choice(["Fair", "Good", "Ideal"], 3000),
        }
    )


def test_plans_round_trip_through_json():
    for plan in (
        dps.Plan(SCHEMA, epsilon=1.0, pairs="all", pair_selection=None),
        dps.Plan(SCHEMA, rho=0.3, fine_bins=16, contributions=2),
        dps.Plan(dps.Schema({"x": (0, 1)}), epsilon=1.0, delta=1e-6, rows_fraction=0.05),
        dps.Plan(dps.Histogram(bounds=(0, 1), bins=4, dim=2), (0, 1), epsilon=0.5, impute=0.5),
    ):
        again = dps.Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
        assert again == plan and again.to_dict() == plan.to_dict()
    with pytest.raises(ValueError, match=r"unknown plan keys \['pairz'\]"):
        dps.Plan.from_dict({**dps.Plan(SCHEMA, epsilon=1.0).to_dict(), "pairz": "all"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"schema": SCHEMA, "bounds": (0, 1), "epsilon": 1.0}, "drop bounds="),
        (
            {
                "schema": SCHEMA,
                "feature_map": dps.Histogram(bounds=(0, 1), bins=2, dim=3),
                "pairs": "all",
                "epsilon": 1.0,
            },
            "drop feature_map= or pairs=",
        ),
        ({"schema": SCHEMA, "pairs": "all", "pair_selection": 0.1, "epsilon": 1.0}, "nothing to choose"),
        ({"schema": SCHEMA, "rows_fraction": 0.05, "epsilon": 1.0}, "no rows estimate"),
        (
            {"schema": SCHEMA, "feature_map": dps.Histogram(bounds=(0, 1), bins=2, dim=2), "epsilon": 1.0},
            "expects 2 columns",
        ),
        (
            {
                "feature_map": dps.Histogram(bounds=(0, 1), bins=2, dim=2),
                "bounds": (0, 1),
                "pairs": "all",
                "epsilon": 1.0,
            },
            "shape the automatic map",
        ),
        ({"feature_map": dps.Histogram(bounds=(0, 1), bins=2, dim=2), "epsilon": 1.0}, "public bounds"),
        ({"schema": SCHEMA}, "exactly one"),
        ({"schema": SCHEMA, "epsilon": 1.0, "contributions": 0}, "contributions"),
        ({"schema": SCHEMA, "epsilon": 1.0, "pairz": "all"}, "pairz"),
    ],
)
def test_options_that_exclude_each_other_cannot_make_a_plan(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        dps.Plan(**kwargs)


def test_release_takes_a_plan_and_records_it(people, tmp_path):
    plan = dps.Plan(SCHEMA, epsilon=1.0, pair_selection=None)
    sk = dps.release_sketch(people, plan)
    assert sk.privacy["plan"] == plan.options() and sk.privacy["epsilon"] == 1.0
    assert sk.feature_map == plan.planned_map()
    path = tmp_path / "s.sketch"
    sk.save(path)
    assert dps.Sketch.load(path).privacy["plan"]["pairs"] == "rule"
    # the keyword form builds the same plan
    again = dps.release_sketch(people, schema=SCHEMA, epsilon=1.0, pair_selection=None)
    assert again.privacy["plan"] == sk.privacy["plan"] and again.feature_map == sk.feature_map
    with pytest.raises(ValueError, match=r"drop \['epsilon'\]"):
        dps.release_sketch(people, plan, epsilon=2.0)


def test_one_plan_gives_the_same_exact_sum_and_the_same_release_on_every_backend(people, tmp_path):
    """One plan on tables in memory (Polars, pandas, a numpy object array), in a Parquet file and
    on Dask: the planned map's exact pair is identical, and each backend's release measures that
    map at the same noise (the Spark leg is in ``test_spark.py``)."""
    plan = dps.Plan(SCHEMA, epsilon=1.0, pair_selection=None)
    fm = plan.planned_map()
    path = tmp_path / "people.parquet"
    people.write_parquet(path)
    ddf = dd.from_pandas(people.to_pandas(), npartitions=3)
    sym = dp.symmetric_distance()
    expected = make_sum_and_count(table_domain(SCHEMA), sym, fm)(people)
    assert expected[1] == 3000
    with dask.config.set(scheduler="synchronous"):
        for data, domain in (
            (str(path), table_domain(SCHEMA)),
            (people.lazy(), table_domain(SCHEMA)),
            (people.to_numpy(), table_domain(SCHEMA)),
            (ddf, dask_table_domain(SCHEMA)),
        ):
            got = make_sum_and_count(domain, sym, fm)(data)
            assert got[1] == expected[1] and np.array_equal(got[0], expected[0])
        tables = (people, str(path), people.to_pandas(), people.to_numpy(), ddf)
        sketches = [dps.release_sketch(data, plan) for data in tables]
    for sk in sketches:
        assert sk.feature_map == fm and sk.noise["sum_scale"] == sketches[0].noise["sum_scale"]
        assert sk.privacy["plan"] == plan.options()


def test_a_plan_decided_inside_the_release_says_so():
    with pytest.raises(ValueError, match="counts the rows privately"):
        dps.Plan(dps.Schema({"x": (0, 1), "y": (0, 1)}), epsilon=1.0).planned_map()
    fm = dps.Plan(dps.Schema({"x": (0, 1), "y": (0, 1)}), epsilon=1.0, rows_fraction=0).planned_map()
    assert fm.input_dim == 2


def test_a_session_takes_a_box_plan(tmp_path):
    s = dps.Session.open(tmp_path / "l.db", "survey", epsilon=1.0)
    X = np.random.default_rng(0).uniform(0, 1, size=(500, 2))
    plan = dps.Plan(dps.Histogram(bounds=(0, 1), bins=4, dim=2), (0, 1), epsilon=0.25)
    sk = s.release_sketch(X, plan)
    assert sk.privacy["epsilon"] <= 0.25 and s.remaining >= 0.75 - 1e-9


def test_a_session_takes_a_schema_plan(tmp_path, people):
    s = dps.Session.open(tmp_path / "l.db", "people", epsilon=1.0)
    plan = dps.Plan(SCHEMA, epsilon=0.5)
    sk = s.release_sketch(people, plan)
    assert sk.privacy["plan"] == plan.options() and sk.column_names == SCHEMA.columns
    assert s.remaining <= 0.5 + 1e-9 and s.remaining >= 0.5 - 1e-9
    assert s.load_sketch(sk.privacy["release_id"]).feature_map == sk.feature_map
    with pytest.raises(dps.PrivacyBudgetError):
        s.release_sketch(people, dps.Plan(SCHEMA, epsilon=0.75))
    assert s.remaining >= 0.5 - 1e-9  # refused: nothing spent


@pytest.mark.opendp_polars
def test_a_context_takes_a_schema_plan_beside_opendps_own_query():
    lf = pl.LazyFrame({"age": [23, 41, 35, 67] * 50, "cut": ["Fair", "Good", "Ideal", "Good"] * 50})
    ctx = dp.Context.compositor(
        data=lf,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=1.0),
        split_by_weights=[1, 1],
        margins=[dp.polars.Margin(max_length=1000)],
    )
    ctx.query().select(dp.len(signed=False)).release().collect()
    plan = dps.Plan(
        dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Good", "Ideal"]}), epsilon=0.5
    )
    sk = dps.release_sketch_in_context(ctx, plan)
    assert sk.column_names == ["age", "cut"] and sk.privacy["loss"] <= 0.5
    assert ctx.remaining_privacy_loss() == []
    with pytest.raises(ValueError, match="the context accounts epsilon"):
        dps.release_sketch_in_context(ctx, dps.Plan(plan.schema, rho=0.1))
