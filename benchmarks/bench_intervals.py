"""Coverage of the 95 % intervals on real tables (issue 16, "honest uncertainty").

Same tables, public boxes and 1 000 random 1–3-column range counts as ``bench_real_tables.py``
(query seed 12345), plus the first ``N_OFF_GRID`` of its off-grid counts, 10 CDF points and the
mean of every numeric column (a categorical column's codes have a few shares, which the 1-column
counts ask, not a CDF). ``--path schema`` (default) releases the user's way, a Polars frame and a
``dps.Schema`` with every default (``bench_real_tables.schema_frame``); ``--path marginals`` the
16-bin automatic marginals on the array.
For each table and ε, ``--releases`` independent releases; every answer asks
``M2M.count(..., interval=0.95)`` (``cdf``/``mean`` likewise) and the table reports the share of
(query, release) pairs whose interval holds the true answer — all, by number of columns, and
split into *supported* answers (one released block holds the query: a noise band) and flagged
ones (a bound on what the released cells allow) — with the median width against the decoder's
mean error, and the time the intervals took.

Run: ``python benchmarks/bench_intervals.py`` (``--quick``: CPSSW8 at ε = 1, one release).
Writes ``benchmarks/results/bench_intervals.md`` and ``.csv``.
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
from lib.snapshot import git_commit  # noqa: E402

LEVEL = 0.95
CHUNK = 100  # queries evaluated together (bounds the (points × queries) arrays)
#: off-grid range counts asked per release (the first of ``bench_real_tables.UserQueries``)
N_OFF_GRID = 300


def one_release(
    name: str, X, cols, lo, hi, eps: float, seed: int, queries, E, user, path: str = "schema"
) -> list[dict[str, Any]]:
    import opendp.prelude as dp

    import opendp_sketch as dps
    from opendp_sketch.estimators.intervals import partitions
    from opendp_sketch.plan import auto_marginals

    dp.enable_features("contrib", "honest-but-curious")
    n = X.shape[0]
    if path == "schema":  # the user's path: a frame and a public schema, every default
        frame, schema = real.schema_frame(name, X, cols, lo, hi)
        sk = dps.release_sketch(frame, schema=schema, epsilon=eps)
    else:
        fm = auto_marginals(
            (lo.tolist(), hi.tolist()),
            categorical=real.CATEGORICAL.get(name),
            fine_bins=real.BINS,
            rows=real.public_rows(n),
            epsilon=eps,
        )
        sk = dps.release_sketch(X, fm, bounds=(lo.tolist(), hi.tolist()), epsilon=eps, column_names=cols)
    est = dps.M2M(sk, seed=seed)
    t0 = time.perf_counter()
    out: list[dict[str, Any]] = []

    def counts(kind: Any, qs_all: list, holds: Any) -> None:
        for s in range(0, len(qs_all), CHUNK):
            qs = qs_all[s : s + CHUNK]
            iv = est.count(lambda Z, qs=qs: np.column_stack([holds(Z, q) for q in qs]), interval=LEVEL)
            for q, v, a, b, sup in zip(qs, iv.value, iv.low, iv.high, iv.supported):
                truth = float(holds(X, q).sum())
                out.append(
                    {
                        "kind": kind(q),
                        "covered": a <= truth <= b,
                        "supported": bool(sup),
                        "width": (b - a) / n,
                        "err": abs(v - truth) / n,
                    }
                )

    counts(lambda q: f"{len(q[0])}-col count", queries, lambda Z, q: real.in_range(Z, q, E))
    counts(
        lambda q: "off-grid count",
        user.counts[:N_OFF_GRID],
        lambda Z, q: real.holds(Z, q, user.categorical),
    )
    P = real.cdf_points(E)
    for j in user.numeric:  # a CDF of a categorical column's codes repeats its few shares
        iv = est.cdf(j, P[j], interval=LEVEL)
        for t, v, a, b, sup in zip(P[j], iv.value, iv.low, iv.high, iv.supported):
            truth = float((X[:, j] <= t).mean())
            out.append(
                {
                    "kind": "CDF",
                    "covered": a <= truth <= b,
                    "supported": bool(sup),
                    "width": b - a,
                    "err": abs(v - truth),
                }
            )
    iv = est.mean(interval=LEVEL)
    for j in user.numeric:
        truth, span = float(X[:, j].mean()), hi[j] - lo[j]
        out.append(
            {
                "kind": "mean",
                "covered": iv.low[j] <= truth <= iv.high[j],
                "supported": bool(iv.supported[j]),
                "width": (iv.high[j] - iv.low[j]) / span,
                "err": abs(iv.value[j] - truth) / span,
            }
        )
    seconds = time.perf_counter() - t0
    blocks = len(partitions(sk.feature_map) or [])
    for r in out:
        r.update(table=name, epsilon=eps, release=seed, blocks=blocks, seconds=seconds)
    return out


def summary(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "–"
    cov = np.mean([r["covered"] for r in rows])
    return f"{100 * cov:.1f} % of {len(rows):,}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--releases", type=int, default=5)
    p.add_argument("--epsilons", default="0.1,1,3")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument(
        "--path",
        choices=("schema", "marginals"),
        default="schema",
        help="schema: the user's frame + dps.Schema release with every default; marginals: the "
        "16-bin automatic marginals of bench_real_tables on the array",
    )
    p.add_argument(
        "--out", default=None, help="results path without suffix (default: results/bench_intervals)"
    )
    args = p.parse_args(argv)
    tables, epsilons, releases = (
        args.tables.split(","),
        [float(e) for e in args.epsilons.split(",")],
        args.releases,
    )
    if args.quick:
        tables, epsilons, releases = ["CPSSW8"], [1.0], 1
    rows: list[dict[str, Any]] = []
    for name in tables:
        X, cols, lo, hi = real.load_table(name)
        E = real.edges(lo, hi)
        queries = real.make_queries(lo, hi, np.random.default_rng(12345))
        user = real.UserQueries(name, lo, hi)
        for eps in epsilons:
            for r in range(releases):
                print(
                    f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps} release {r}", file=sys.stderr, flush=True
                )
                rows += one_release(name, X, cols, lo, hi, eps, r, queries, E, user, args.path)
    out = out_stem(args.out, args.quick, "bench_intervals")
    write(rows, out, tables, epsilons, releases, args.path)
    print(out.with_suffix(".md").read_text())


def write(rows, out: Path, tables, epsilons, releases, path: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = [
        "table",
        "epsilon",
        "release",
        "blocks",
        "kind",
        "covered",
        "supported",
        "width",
        "err",
        "seconds",
    ]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for row in rows:
            w.writerow({k: row[k] for k in keys})
    lines = [
        "# 95 % intervals on real tables: coverage (issue 16)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs.",
        "",
        (
            "The user's path (`--path schema`: a Polars frame and a `dps.Schema` of the public box "
            "with R's integer columns declared integer and the public row estimate, "
            "`release_sketch(frame, schema=...)`, `M2M(sketch)`, every default)"
            if path == "schema"
            else "Automatic marginals at 16 bins on the array (`--path marginals`, as in `real_tables.md`)"
        )
        + f", pure DP, {releases} independent release(s) per "
        "table and ε; 1 000 random 1–3-column range counts (whole bins of the 16-bin grid), "
        f"{N_OFF_GRID} range counts off the grid (endpoints anywhere in the box), 10 CDF points "
        "and the mean of every numeric column per release. A cell: the share of (query, release) pairs whose "
        "interval holds the truth. *Supported*: one released block holds the query, so the interval is "
        "a noise band; *flagged*: no block does (e.g. 2 or 3 columns without their pair), so the "
        "interval is the range the released cells allow. Width and error: counts and means as a share "
        "of n and of the column's range; CDFs as probabilities.",
        "",
        "| table | ε | marginal tables | counts: all | 1-col | 2-col | 3-col | supported counts | flagged counts | "
        "count width (median) | count \\|err\\| (mean) | off-grid counts | CDF | means | intervals s / release |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in tables:
        for eps in epsilons:
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            if not rs:
                continue
            counts = [r for r in rs if r["kind"].endswith("-col count")]
            secs = sorted({(r["release"], r["seconds"]) for r in rs})
            cells = [
                summary(counts),
                *(summary([r for r in counts if r["kind"] == f"{k}-col count"]) for k in (1, 2, 3)),
                summary([r for r in counts if r["supported"]]),
                summary([r for r in counts if not r["supported"]]),
                f"{np.median([r['width'] for r in counts]):.4f}",
                f"{np.mean([r['err'] for r in counts]):.4f}",
                summary([r for r in rs if r["kind"] == "off-grid count"]),
                summary([r for r in rs if r["kind"] == "CDF"]),
                summary([r for r in rs if r["kind"] == "mean"]),
                f"{np.mean([s for _, s in secs]):.1f}",
            ]
            blocks = sorted({r["blocks"] for r in rs})
            lines.append(f"| {name} | {eps:g} | {'/'.join(map(str, blocks))} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
