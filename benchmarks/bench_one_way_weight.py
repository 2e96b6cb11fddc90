"""The 1-way weight of the automatic marginals, compared on the same noise (issue 16).

``auto_marginals(one_way_weight=a)`` splits the budget between the 1-way and the 2-way blocks:
a larger ``a`` gives the 1-way cells (means, CDFs, 1-column counts) less noise and the pairs
(2- and 3-column counts) more. Independent releases per setting need many repetitions to show
differences of 10 %; here every setting is decoded from the *same* noise draw instead (common
random numbers): one vector of standard Laplace variates per repetition, scaled by each map's
noise scale ``b = Δ₁ / (ε (1 − count share))`` — the law of the Laplace measurement
``release_sketch`` builds — and added to that map's exact sum. Differences between settings are
then paired, and their standard error is reported.

These are simulated releases for a design choice (numpy noise with the mechanism's law); no
sketch made here is a privacy release, and nothing here is used by the library.

Same tables, boxes, 16-bin grid, 1 000 random 1–3-column range counts (query seed 12345) and 10
CDF points per column as ``bench_real_tables.py``; the pairs are those the automatic rule keeps
(the same for every ``a``: the rule reads the map at weight ``min(a, 2)``); where it keeps none,
the map is the 1-way blocks alone whatever ``a``, and it is decoded once.

``--fine-bins 32`` gives the 1-way marginals the schema path's 32 bins (``AUTO_FINE_BINS``; the
queries and CDF points stay on the 16-bin grid, whose edges are edges of the 32 bins).

``--rake-excess 1,0.25,0`` also decodes each weight at several thresholds of the decoder's
raking of 1-way marginals (``opendp_sketch.estimators.synthetic._RAKE_EXCESS``, set for the
decode; see ``_rake_one_way``): a decoder design choice, compared on the same noise draws.

Run: ``python benchmarks/bench_one_way_weight.py`` (``--quick``: CPSSW8 at ε = 1, 2 repetitions).
Writes ``benchmarks/results/bench_one_way_weight.md`` and ``.csv``.
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


def run_table(
    name: str,
    eps: float,
    weights: list[float],
    reps: int,
    excesses: list[float] | None = None,
    fine_bins: int = real.BINS,
) -> list[dict[str, Any]]:
    import opendp_sketch as dps
    from opendp_sketch.estimators import synthetic

    excesses = excesses or [synthetic._RAKE_EXCESS]
    from opendp_sketch.plan import auto_marginals

    X, cols, lo, hi = real.load_table(name)
    n, d = X.shape
    E = real.edges(lo, hi)
    P = real.cdf_points(E)
    queries = real.make_queries(lo, hi, np.random.default_rng(12345))
    arity = np.array([len(q[0]) for q in queries])
    truth = np.array([real.in_range(X, q, E).sum() for q in queries], dtype=np.float64) / n
    true_cdf = np.concatenate([(X[:, j][:, None] < P[j]).mean(axis=0) for j in range(d)])
    maps = {}
    for a in weights:
        fm = auto_marginals(
            (lo.tolist(), hi.tolist()),
            categorical=real.CATEGORICAL.get(name),
            fine_bins=fine_bins,
            rows=real.public_rows(n),
            epsilon=eps,
            one_way_weight=a,
        )
        exact = np.asarray(fm.fixed_sum(X), dtype=np.float64) * fm.unit  # Σ Φ(x_i), feature units
        maps[a] = (fm, exact)
    pairs = sum(len(m.blocks) for m in getattr(maps[weights[0]][0], "maps", [])[1:])
    if not pairs:  # 1-way blocks alone: every weight gives the same map, decoded once
        weights, excesses = weights[:1], excesses[:1]  # and no raking: it needs a joint block
    rng = np.random.default_rng(20261127)
    rows = []
    for rep in range(reps):
        z = rng.laplace(size=max(fm.num_features for fm, _ in maps.values()))
        zc = rng.laplace()
        for a, excess in [(a, x) for a in weights for x in excesses]:
            fm, exact = maps[a]
            sk = simulated_release(fm, exact, n, z, zc, eps, lo, hi, cols)
            default, synthetic._RAKE_EXCESS = synthetic._RAKE_EXCESS, excess
            try:
                est = dps.M2M(sk, seed=rep)
            finally:
                synthetic._RAKE_EXCESS = default
            counts = np.array([est.count(lambda Z, q=q: real.in_range(Z, q, E)) for q in queries]) / n
            err = np.abs(counts - truth)
            cdf = np.concatenate([np.atleast_1d(est.cdf(j, P[j])) for j in range(d)])
            rows.append(
                {
                    "table": name,
                    "epsilon": eps,
                    "rep": rep,
                    "weight": a,
                    "rake_excess": excess,
                    "fine_bins": fine_bins,
                    "pairs": pairs,
                    "counts": float(err.mean()),
                    **{f"counts_{k}": float(err[arity == k].mean()) for k in (1, 2, 3)},
                    "cdf": float(np.abs(cdf - true_cdf).mean()),
                    "means": float(np.mean(np.abs(np.asarray(est.mean()) - X.mean(0)) / (hi - lo))),
                }
            )
        print(
            f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps:g} repetition {rep}", file=sys.stderr, flush=True
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--weights", default="2,3,4")
    p.add_argument("--epsilons", default="0.1,1,3")
    p.add_argument(
        "--fine-bins",
        type=int,
        default=real.BINS,
        help="bins of the 1-way marginals (16: the benchmark grid; 32: the schema path's AUTO_FINE_BINS)",
    )
    p.add_argument("--rake-excess", default=None, help="thresholds of the decoder's raking, e.g. 1,0.25,0")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument(
        "--out", default=None, help="results path without suffix (default: results/bench_one_way_weight)"
    )
    args = p.parse_args(argv)
    tables, epsilons = args.tables.split(","), [float(e) for e in args.epsilons.split(",")]
    weights, reps = [float(w) for w in args.weights.split(",")], args.reps
    excesses = [float(x) for x in args.rake_excess.split(",")] if args.rake_excess else None
    out = out_stem(args.out, args.quick, "bench_one_way_weight")
    if args.quick:
        tables, epsilons, reps = ["CPSSW8"], [1.0], 2
    rows: list[dict[str, Any]] = []
    for name in tables:
        for eps in epsilons:
            rows += run_table(name, eps, weights, reps, excesses, args.fine_bins)
    write(rows, out, tables, epsilons, reps)
    print(out.with_suffix(".md").read_text())


KEYS = ["counts", "counts_1", "counts_2", "counts_3", "cdf", "means"]


def write(rows, out: Path, tables, epsilons, reps) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = ["table", "epsilon", "rep", "weight", "rake_excess", "fine_bins", "pairs", *KEYS]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    settings = list(dict.fromkeys((r["weight"], r["rake_excess"]) for r in rows))
    base = settings[0]
    several = len({x for _, x in settings}) > 1
    label = f"weight {base[0]:g}" + (f", threshold {base[1]:g}" if several else "")
    lines = [
        "# The automatic marginals' 1-way weight and the decoder's raking, on common noise (issue 16)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs.",
        "",
        f"{reps} repetitions per table and ε; in each, every setting is decoded from the same standard "
        "Laplace draw scaled to its map's noise (see the script's docstring: simulated releases, not "
        "privacy releases). Mean |err|/n over 1 000 random 1–3-column range counts (and by number of "
        "columns), mean |err| over 10 CDF points per column, and mean |err| of the column means as a "
        f"share of the range. *Δ*: the mean paired difference from {label} ± its standard error "
        "(negative: smaller error). *rake threshold*: the decoder's raking threshold (noise variances "
        f"per cell). 1-way marginals at {rows[0]['fine_bins']} bins. Errors × 10⁻⁴.",
        "",
        "| table | ε | pairs kept | 1-way weight | rake threshold | counts | 1-col | 2-col | 3-col | "
        "counts Δ | CDF | CDF Δ | means |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in tables:
        for eps in epsilons:
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            if not rs:
                continue
            ref = {r["rep"]: r for r in rs if (r["weight"], r["rake_excess"]) == base}
            for a, x in settings:
                ra = sorted(
                    (r for r in rs if (r["weight"], r["rake_excess"]) == (a, x)), key=lambda r: r["rep"]
                )
                if not ra:  # no pair kept: the weight changes nothing (one map, decoded once)
                    continue
                m = {k: 1e4 * np.mean([r[k] for r in ra]) for k in KEYS}
                first = (a, x) == base or not ref
                dc, df = ("–", "–") if first else (paired(ra, ref, "counts"), paired(ra, ref, "cdf"))
                lines.append(
                    f"| {name} | {eps:g} | {ra[0]['pairs']} | {a:g} | {x:g} | {m['counts']:.2f} | "
                    f"{m['counts_1']:.2f} | {m['counts_2']:.2f} | {m['counts_3']:.2f} | {dc} | "
                    f"{m['cdf']:.2f} | {df} | {m['means']:.1f} |"
                )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
