"""Bins of the automatic 1-way marginals, on queries between the cells' edges (issue 16).

``bench_real_tables.py`` asks every system range counts and CDF points on one 16-bin grid, the
discretisation MST and AIM are given: there no answer splits a cell. A user's thresholds fall
anywhere ("earnings ≤ 25", "age in [30, 45)"), so an answer also depends on how the decoder
places rows inside the cells it splits, which finer 1-way cells help and which more cells' noise
hurts. Here the automatic marginals (``auto_marginals`` with the public row estimate, the same
pairs) are decoded with 16, 32 and 64 bins per numeric 1-way marginal and with the rule
``fine_bins=None`` (64 when an average cell of 64 still holds ``AUTO_FINE_SNR`` noise std's of
rows, else 32), all from the *same* noise draws (common random numbers, as in
``bench_one_way_weight.py``: numpy Laplace noise with the mechanism's law, scaled to each map's
sensitivity; simulated releases for a design choice, not privacy releases).

Queries: 600 range counts over 1–3 columns with endpoints drawn uniformly in the public box
(``lo ≤ x < hi``; a categorical column takes the codes in ``[⌊lo⌋, ⌈hi⌉]``), 20 CDF points
``P(x ≤ t)`` per numeric column at uniform points, and the column means (error as a share of the
range). Query seed 777, noise seed 20261127, decoder seed = repetition.

Run: ``python benchmarks/bench_fine_bins.py`` (``--quick``: CPSSW8 at ε = 1, 2 repetitions).
Writes ``benchmarks/results/bench_fine_bins.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import tables as real  # noqa: E402
from lib.cli import out_stem  # noqa: E402
from lib.simulated import paired, simulated_release  # noqa: E402
from lib.snapshot import git_commit  # noqa: E402

N_QUERIES = 600
N_POINTS = 20
KEYS = ["counts", "counts_1", "counts_2", "counts_3", "cdf", "means"]


def run_table(name: str, eps: float, settings: list[str], reps: int) -> list[dict[str, Any]]:
    import opendp_sketch as dps
    from opendp_sketch.plan import auto_marginals

    X, cols, lo, hi = real.load_table(name)
    n, d = X.shape
    cats = real.CATEGORICAL.get(name, [])
    rng_q = np.random.default_rng(777)
    queries = real.off_grid_queries(lo, hi, rng_q, N_QUERIES)
    arity = np.array([len(q[0]) for q in queries])
    truth = np.array([real.holds(X, q, cats).mean() for q in queries])
    nums = [j for j in range(d) if j not in cats]
    points = {j: rng_q.uniform(lo[j], hi[j], N_POINTS) for j in nums}
    true_cdf = np.concatenate([(X[:, j][:, None] <= points[j]).mean(axis=0) for j in nums])
    true_means = X[:, nums].mean(axis=0)
    maps = {}
    for s in settings:
        fm = auto_marginals(
            (lo.tolist(), hi.tolist()),
            categorical=cats or None,
            fine_bins=None if s == "rule" else int(s),
            rows=real.public_rows(n),
            epsilon=eps,
        )
        ones = [b for m in getattr(fm, "maps", [fm]) for b in m.blocks if len(b.subset) == 1]
        bins = max(b.size for b in ones)
        exact = np.asarray(fm.fixed_sum(X), dtype=np.float64) * fm.unit
        maps[s] = (fm, exact, bins)
    rng = np.random.default_rng(20261127)
    rows = []
    for rep in range(reps):
        z = rng.laplace(size=max(fm.num_features for fm, _, _ in maps.values()))
        zc = rng.laplace()
        for s, (fm, exact, bins) in maps.items():
            sk = simulated_release(fm, exact, n, z, zc, eps, lo, hi, cols)
            est = dps.M2M(sk, seed=rep)
            counts = np.array([est.count(lambda Z, q=q: real.holds(Z, q, cats)) for q in queries]) / n
            err = np.abs(counts - truth)
            cdf = np.concatenate([np.atleast_1d(est.cdf(j, points[j])) for j in nums])
            means = np.asarray(est.mean())[nums]
            rows.append(
                {
                    "table": name,
                    "epsilon": eps,
                    "rep": rep,
                    "setting": s,
                    "bins": bins,
                    "counts": float(err.mean()),
                    **{f"counts_{k}": float(err[arity == k].mean()) for k in (1, 2, 3)},
                    "cdf": float(np.abs(cdf - true_cdf).mean()),
                    "means": float(np.mean(np.abs(means - true_means) / (hi[nums] - lo[nums]))),
                }
            )
        print(
            f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps:g} repetition {rep}", file=sys.stderr, flush=True
        )
    return rows


def write(rows: list[dict[str, Any]], out: Path, settings: list[str], reps: int) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    base = settings[0]
    lines = [
        "# Bins of the automatic 1-way marginals, on queries between the cells' edges (issue 16)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs.",
        "",
        f"{reps} repetitions per table and ε; in each, every setting is decoded from the same standard "
        "Laplace draw scaled to its map's noise (simulated releases for a design choice, not privacy "
        f"releases; see the script's docstring). Mean |err|/n over {N_QUERIES} range counts over 1–3 "
        f"columns with endpoints anywhere in the box (and by number of columns), mean |err| over "
        f"{N_POINTS} CDF points per numeric column at uniform points, mean |err| of the column means "
        f"as a share of the range. *rule*: `fine_bins=None` (its choice in *bins*). *Δ vs {base}*: "
        "mean paired difference ± its standard error (negative: smaller error). Errors × 10⁻⁴.",
        "",
        f"| table | ε | setting | bins | counts | 1-col | 2-col | 3-col | counts Δ vs {base} | CDF | "
        f"CDF Δ vs {base} | means | means Δ vs {base} |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["table"] for r in rows):
        for eps in dict.fromkeys(r["epsilon"] for r in rows if r["table"] == name):
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            ref = {r["rep"]: r for r in rs if r["setting"] == base}
            for s in settings:
                ra = sorted((r for r in rs if r["setting"] == s), key=lambda r: r["rep"])
                m = {k: 1e4 * np.mean([r[k] for r in ra]) for k in KEYS}
                first = s == base
                dc, df, dm = (
                    ("–", "–", "–")
                    if first
                    else (
                        paired(ra, ref, "counts"),
                        paired(ra, ref, "cdf"),
                        paired(ra, ref, "means"),
                    )
                )
                lines.append(
                    f"| {name} | {eps:g} | {s} | {ra[0]['bins']} | {m['counts']:.2f} | {m['counts_1']:.2f} | "
                    f"{m['counts_2']:.2f} | {m['counts_3']:.2f} | {dc} | {m['cdf']:.2f} | {df} | "
                    f"{m['means']:.2f} | {dm} |"
                )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--settings", default="32,16,64,rule", help="1-way bins to compare, and 'rule'")
    p.add_argument("--epsilons", default="0.1,1,3")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument(
        "--out", default=None, help="results path without suffix (default: results/bench_fine_bins)"
    )
    args = p.parse_args(argv)
    tables, epsilons = args.tables.split(","), [float(e) for e in args.epsilons.split(",")]
    settings, reps = args.settings.split(","), args.reps
    out = out_stem(args.out, args.quick, "bench_fine_bins")
    if args.quick:
        tables, epsilons, reps = ["CPSSW8"], [1.0], 2
    rows: list[dict[str, Any]] = []
    for name in tables:
        for eps in epsilons:
            rows += run_table(name, eps, settings, reps)
    write(rows, out, settings, reps)
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
