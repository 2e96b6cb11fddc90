"""The demo behind ``opendp-sketch demo``: a synthetic mixed-type table with a public schema,
one release, and the answers printed beside the truth."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import polars as pl

__all__ = ["DEMO_COLUMNS", "DEMO_SCHEMA", "demo_data", "run_demo"]

DEMO_COLUMNS = ("age", "income_k", "hours", "sector")
DEMO_SECTORS = ("public", "private", "self-employed")
#: the demo table's public schema: what a curator knows without looking at the data
DEMO_SCHEMA = {
    "columns": {
        "age": {"type": "numeric", "range": [18, 90], "integer": True},
        "income_k": {"type": "numeric", "range": [0, 250]},
        "hours": {"type": "numeric", "range": [0, 80]},
        "sector": {"type": "categorical", "labels": list(DEMO_SECTORS)},
    }
}


def demo_data(n: int, seed: int = 0) -> pl.DataFrame:
    """A synthetic mixed-type table (age, income in k$, weekly hours, sector) with two sub-populations.

    >>> demo_data(5).shape
    (5, 4)
    """
    rng = np.random.default_rng(seed)
    young = rng.random(n) < 0.4
    age = np.rint(np.where(young, rng.normal(28, 5, n), rng.normal(50, 10, n)))
    income = np.exp(rng.normal(np.log(np.where(young, 35, 70)), 0.45, n))
    hours = np.where(young, rng.normal(32, 8, n), rng.normal(42, 6, n))
    sector = rng.choice(np.array(DEMO_SECTORS), size=n, p=[0.25, 0.6, 0.15])
    return pl.DataFrame({"age": age.astype(np.int64), "income_k": income, "hours": hours, "sector": sector})


def run_demo(n: int = 100_000, seed: int = 0, epsilon: float = 1.0, out: str | None = None) -> int:
    """The main job of ``opendp-sketch demo``: release one sketch of :func:`demo_data` under its
    public schema, decode it, and print estimates beside the true values (the data is
    synthetic) and the budget spent; with ``out``, save the sketch there. Returns 0."""
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    frame = demo_data(n, seed)
    # the row estimate is public here: the demo chose the size before generating the rows
    schema = dps.Schema.from_dict({**DEMO_SCHEMA, "rows": n})
    print(
        f"opendp-sketch demo: {n:,} synthetic rows, columns {list(DEMO_COLUMNS)}, total budget ε = {epsilon}"
    )
    print(f"public schema (no data read): {json.dumps(DEMO_SCHEMA['columns'])}, rows ≈ {n:,}")
    t0 = time.perf_counter()
    sk = dps.release_sketch(frame, schema=schema, epsilon=epsilon)
    released = time.perf_counter() - t0
    t0 = time.perf_counter()
    est = dps.M2M(sk)
    decoded = time.perf_counter() - t0
    print(
        f"\nreleased one sketch ({type(sk.feature_map).__name__}, {sk.feature_map.num_features} cells) in "
        f"{released:.2f} s; decoded in {decoded:.2f} s; privacy spent: ε = {sk.privacy['epsilon']:.4f}"
    )
    print(f"noisy count n̂ = {sk.count:,} (true {n:,})")
    print("\nanalyses of the one release (true values shown because the data is synthetic):")
    clipped = frame.with_columns(
        pl.col("income_k").clip(0, 250), pl.col("hours").clip(0, 80), pl.col("age").clip(18, 90)
    )
    means = dict(zip(est.columns, est.mean()))
    for c in ("age", "income_k", "hours"):
        true_mean, true_median = float(clipped[c].mean()), float(clipped[c].median())  # type: ignore[arg-type]
        print(
            f"  {c:>9}: mean {means[c]:8.2f} (true {true_mean:8.2f})   "
            f"median {est.quantile(c, [0.5])[0]:8.2f} (true {true_median:8.2f})"
        )
    shares = est.shares("sector")
    true_shares = frame["sector"].value_counts(normalize=True)
    for label, share in shares.iter_rows():
        got = true_shares.filter(pl.col("sector") == label)["proportion"]
        print(f"  share of sector {label!s:>13}: {share:.3f} (true {got[0] if len(got) else 0.0:.3f})")
    by = est.group_mean("sector", "income_k")
    truth = clipped.group_by("sector").agg(pl.col("income_k").mean())
    for label, value, _ in by.iter_rows():
        t = truth.filter(pl.col("sector") == label)["income_k"]
        print(
            f"  mean income_k in {label!s:>13}: {value:7.2f} (true {t[0] if len(t) else float('nan'):7.2f})"
        )
    older = est.count((pl.col("age") > 30) & (pl.col("sector") == "private"))
    true_older = clipped.filter((pl.col("age") > 30) & (pl.col("sector") == "private")).height
    print(f"  rows with age > 30 in the private sector: {older:,.0f} (true {true_older:,})")
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        sk.save(folder / "demo.sketch")
        print(
            f"\nsketch saved to {folder}/demo.sketch (try: opendp-sketch query {folder}/demo.sketch --mean --shares "
            f"sector; or draw it: opendp-sketch plot {folder}/demo.sketch --out {folder}/demo.png)"
        )
    print("\nEvery estimate above is post-processing of the one released sketch: no further privacy cost.")
    return 0
