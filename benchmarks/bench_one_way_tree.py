"""The two-level 1-way tree of the automatic map against one level, on common noise (issue 16).

With every pair kept, the schema path's automatic map measures numeric columns at 64 (or 32) bins
in 1-way marginals, four times the pairs' 16. A CDF point on the 16-bin grid then sums 4k noisy
cells where a 16-bin marginal sums k: with 64-bin cells, no split of a pure-DP budget reaches
MST's noise on grid CDF points (``docs/schema.md``). The tree measures those columns at both
resolutions: the 16 coarse cells at weight ``one_way_weight + AUTO_TREE_EXTRA_WEIGHT`` (4) and the
64 fine ones at ``AUTO_TREE_FINE_WEIGHT`` (1); the decoder estimates the fine cells from both
(generalised least squares) and keeps each coarse cell's share.

Settings, each decoded from the *same* noise draw (common random numbers, as in
``bench_one_way_weight.py``: numpy Laplace noise with the mechanism's law, scaled to each map's
sensitivity; simulated releases for a design choice, not privacy releases):

- ``tree``: the automatic map of ``release_sketch(frame, schema=...)`` (the default);
- ``one level``: the same map without the 16-bin 1-way blocks, every 1-way block at weight 3
  (the previous default);
- ``fine16``: ``fine_bins=16`` (the 1-way cells on the grid, one level).

Where the rule keeps no pair (countymurders at ε = 1) the three are one map and it is decoded
once. Queries as ``bench_real_tables.py``: 1 000 range counts and 10 CDF points per column on the
16-bin grid, and off it (a user's thresholds: 1 000 counts, 10 CDF points per numeric column),
and column means (relative error).

Run: ``python benchmarks/bench_one_way_tree.py`` (``--quick``: CPSSW8 at ε = 1, 2 repetitions).
Writes ``benchmarks/results/bench_one_way_tree.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import tables as real  # noqa: E402
from lib.cli import out_stem  # noqa: E402
from lib.simulated import simulated_release  # noqa: E402
from lib.snapshot import git_commit  # noqa: E402

SETTINGS = ("tree", "one level", "fine16")
KEYS = ["counts", "cdf", "user_counts", "user_cdf", "means", "decode_s"]


def one_level(fm: Any) -> Any:
    """The automatic map without its coarse 1-way blocks: every 1-way block at the single
    columns' weight, the pairs at 1 (the map before the tree); ``fm`` itself without a tree."""
    import opendp_sketch as dps
    from opendp_sketch.plan import AUTO_ONE_WAY_WEIGHT, AUTO_TREE_EXTRA_WEIGHT, AUTO_TREE_FINE_WEIGHT

    if not isinstance(fm, dps.Composite) or len(fm.maps) < 3:
        return fm
    coarse = AUTO_ONE_WAY_WEIGHT + AUTO_TREE_EXTRA_WEIGHT
    single = [m for m, w in zip(fm.maps, fm.weights) if w == AUTO_ONE_WAY_WEIGHT]
    (fine,) = [
        m for m, w in zip(fm.maps, fm.weights) if w == AUTO_TREE_FINE_WEIGHT and len(m.blocks[0].subset) == 1
    ]
    (pairs,) = [m for m, w in zip(fm.maps, fm.weights) if w == 1.0 and len(m.blocks[0].subset) == 2]
    assert all(w in (coarse, AUTO_ONE_WAY_WEIGHT, AUTO_TREE_FINE_WEIGHT, 1.0) for w in fm.weights)
    ones = fine
    for m in single:
        ones = ones.insert(0, [b.subset for b in m.blocks], [list(b.shape) for b in m.blocks])
    return dps.Composite([ones, pairs], weights=[AUTO_ONE_WAY_WEIGHT, 1.0])


def run_table(name: str, eps: float, reps: int) -> list[dict[str, Any]]:
    import opendp_sketch as dps

    X, cols, lo, hi = real.load_table(name)
    n, d = X.shape
    cats = real.CATEGORICAL.get(name, [])
    frame, schema = real.schema_frame(name, X, cols, lo, hi)
    encoded = schema.encode(frame)
    E = real.edges(lo, hi)
    P = real.cdf_points(E)
    queries = real.make_queries(lo, hi, np.random.default_rng(12345))
    truth = np.array([real.in_range(X, q, E).sum() for q in queries], dtype=np.float64) / n
    true_cdf = np.concatenate([(X[:, j][:, None] < P[j]).mean(axis=0) for j in range(d)])
    user = real.UserQueries(name, lo, hi)
    user_counts, user_cdf = user.truth(X)
    width = np.where([j in cats for j in range(d)], 1.0, hi - lo)
    base = np.where([j in cats for j in range(d)], 0.0, lo)
    tree = dps.auto_feature_map(schema, epsilon=eps)
    maps = {
        "tree": tree,
        "one level": one_level(tree),
        "fine16": dps.auto_feature_map(schema, epsilon=eps, fine_bins=16),
    }
    if maps["one level"] is tree:  # no tree (no pair kept): one map, decoded once
        maps = {"tree": tree}
    exact = {s: np.asarray(fm.fixed_sum(encoded), dtype=np.float64) * fm.unit for s, fm in maps.items()}
    rng = np.random.default_rng(20261128)
    rows = []
    for rep in range(reps):
        z = rng.laplace(size=max(fm.num_features for fm in maps.values()))
        zc = rng.laplace()
        for s, fm in maps.items():
            lo_e, hi_e = schema.bounds
            sk = simulated_release(fm, exact[s], n, z, zc, eps, lo_e, hi_e, schema.columns, schema)
            t0 = time.perf_counter()
            est = dps.M2M(sk, seed=rep)
            seconds = time.perf_counter() - t0
            counts = np.array([est.count(lambda Z, q=q: real.in_range(Z, q, E)) for q in queries]) / n
            cdf = np.concatenate(
                [
                    np.atleast_1d(est.cdf(j, np.nextafter(P[j], -np.inf)))
                    if j not in cats
                    else np.array([est.count(lambda Z, j=j, p=p: Z[:, j] <= p) / est.n_hat for p in P[j]])
                    for j in range(d)
                ]
            )
            uc, uf = user.answer(est)
            means = est.weights @ (base + est.samples * width)
            rows.append(
                {
                    "table": name,
                    "epsilon": eps,
                    "rep": rep,
                    "setting": s,
                    "features": fm.num_features,
                    "counts": float(np.abs(counts - truth).mean()),
                    "cdf": float(np.abs(cdf - true_cdf).mean()),
                    "user_counts": float(np.abs(uc - user_counts).mean() / n),
                    "user_cdf": float(np.abs(uf - user_cdf).mean()),
                    "means": float(np.mean(np.abs(means - X.mean(0)) / np.abs(X.mean(0)))),
                    "decode_s": seconds,
                }
            )
        print(
            f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps:g} repetition {rep}", file=sys.stderr, flush=True
        )
    return rows


def paired(rows: list[dict[str, Any]], ref: dict[int, dict[str, Any]], key: str) -> str:
    """Mean paired ratio of ``key`` to the reference setting's (per repetition), ± its standard error."""
    r = np.array([row[key] / ref[row["rep"]][key] for row in rows])
    se = r.std(ddof=1) / np.sqrt(r.size) if r.size > 1 else float("nan")
    return f"{r.mean():.2f} ± {se:.2f}"


def write(rows: list[dict[str, Any]], out: Path, reps: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = ["table", "epsilon", "rep", "setting", "features", *KEYS]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    lines = [
        "# The automatic map's two-level 1-way tree, on common noise (issue 16)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs.",
        "",
        f"{reps} repetitions per table and ε; in each, every setting is decoded from the same standard "
        "Laplace draw scaled to its map's noise (simulated releases, see the script's docstring). "
        "*tree*: the default automatic map; *one level*: the same map without the 16-bin 1-way blocks "
        "(the previous default); *fine16*: `fine_bins=16`. Grid: 1 000 range counts (mean |err|/n) and "
        "10 CDF points per column (mean |err|) on the 16-bin grid the peers are given; off the grid: "
        "the same at a user's thresholds; means: mean relative error. *ratio*: the mean per-repetition "
        "ratio to *one level* ± its standard error. Errors × 10⁻⁴ (means × 10⁻³).",
        "",
        "| table | ε | setting | features | grid counts | grid CDF | grid CDF ratio | off-grid counts | "
        "off-grid CDF | off-grid CDF ratio | means | decode s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["table"] for r in rows):
        for eps in dict.fromkeys(r["epsilon"] for r in rows if r["table"] == name):
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            ref = {r["rep"]: r for r in rs if r["setting"] == "one level"}
            for s in SETTINGS:
                ra = [r for r in rs if r["setting"] == s]
                if not ra:
                    continue
                m = {k: np.mean([r[k] for r in ra]) for k in KEYS}
                gr, ur = (
                    ("–", "–")
                    if s == "one level" or not ref
                    else (paired(ra, ref, "cdf"), paired(ra, ref, "user_cdf"))
                )
                label = s if ref else "tree = one level (no pair kept)"
                lines.append(
                    f"| {name} | {eps:g} | {label} | {ra[0]['features']} | {1e4 * m['counts']:.2f} | "
                    f"{1e4 * m['cdf']:.2f} | {gr} | {1e4 * m['user_counts']:.2f} | {1e4 * m['user_cdf']:.2f} | "
                    f"{ur} | {1e3 * m['means']:.2f} | {m['decode_s']:.1f} |"
                )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CPSSW8 at ε = 1, 2 repetitions")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--epsilons", default="1,3")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument(
        "--out", default=None, help="results path without suffix (default: results/bench_one_way_tree)"
    )
    args = p.parse_args(argv)
    tables, epsilons, reps = args.tables.split(","), [float(e) for e in args.epsilons.split(",")], args.reps
    out = out_stem(args.out, args.quick, "bench_one_way_tree")
    if args.quick:
        tables, epsilons, reps = ["CPSSW8"], [1.0], 2
    rows: list[dict[str, Any]] = []
    for name in tables:
        for eps in epsilons:
            rows += run_table(name, eps, reps)
            write(rows, out, reps)
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
