"""Decode variants on common noise: the same schema releases decoded by each variant.

The user's path of ``bench_real_tables.py`` (a Polars frame and a ``dps.Schema`` with every
default, ``release_sketch(frame, schema=...)``) is released ``--reps`` times per table and ε; every
release is decoded by each variant (``decode(sketch, rep)``), so differences between variants are
the variants' alone. Per decode: the decode time, mean ``|err|/n`` of the 1 000 grid counts and
of the 1 000 off-grid counts, the mean ``|err|`` of the off-grid CDF points, and the relative error
of the numeric columns' means; the table gives the means over releases and the mean paired
difference against the first variant as a share of its error. Used by ``bench_synthetic_points``,
``bench_round_stop``, ``bench_bound_piles``, ``bench_count_groups`` and ``bench_forest_start``.
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

from . import tables as real
from .cli import out_stem
from .snapshot import git_commit

KEYS = ("seconds", "grid", "off_grid", "cdf", "means")


def run_variants(name: str, eps: float, variants: dict[str, Any], reps: int) -> list[dict[str, Any]]:
    """Each release of the schema path decoded by every ``variants[label](sketch, rep)``."""
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    X, cols, lo, hi = real.load_table(name)
    n = X.shape[0]
    E = real.edges(lo, hi)
    queries = real.make_queries(lo, hi, np.random.default_rng(12345))
    user = real.UserQueries(name, lo, hi)
    truth = np.array([real.in_range(X, q, E).sum() for q in queries], dtype=np.float64)
    true_off, true_cdf = user.truth(X)
    true_means = X[:, user.numeric].mean(axis=0)
    frame, schema = real.schema_frame(name, X, cols, lo, hi)
    rows = []
    for rep in range(reps):
        sk = dps.release_sketch(frame, schema=schema, epsilon=eps)
        for k, decode in variants.items():
            t0 = time.perf_counter()
            est = decode(sk, rep)
            seconds = time.perf_counter() - t0
            counts = np.array([est.count(lambda Z, q=q: real.in_range(Z, q, E)) for q in queries])
            off, cdf = user.answer(est)
            means = np.asarray(est.mean())[user.numeric]
            rows.append(
                {
                    "table": name,
                    "epsilon": eps,
                    "rep": rep,
                    "variant": k,
                    "seconds": seconds,
                    "grid": float(np.mean(np.abs(counts - truth)) / n),
                    "off_grid": float(np.mean(np.abs(off - true_off)) / n),
                    "cdf": float(np.mean(np.abs(cdf - true_cdf))),
                    "means": float(np.mean(np.abs(means - true_means) / np.abs(true_means))),
                }
            )
        print(f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps:g} release {rep}", file=sys.stderr, flush=True)
    return rows


def write(
    rows: list[dict[str, Any]],
    out: Path,
    points: list[Any],
    reps: int,
    title: str = "Synthetic points of the decoder, on the same schema releases (issue 16)",
    what: str = "each decoded with every point count (same seed)",
    column: str = "points",
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    base = points[0]
    lines = [
        f"# {title}",
        "",
        f"Command: `python benchmarks/{Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs.",
        "",
        f"{reps} releases per table and ε, {what}. Decode "
        "time in s; errors as in `bench_real_tables.py` (grid and off-grid counts: mean |err|/n; "
        "off-grid CDF points: mean |err|; means: relative error of the numeric columns). "
        f"*Δ*: the mean paired difference against {base} as a share of its mean.",
        "",
        f"| table | ε | {column} | decode s | Δ time | grid counts | Δ | off-grid counts | Δ | CDF | Δ | means | Δ |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["table"] for r in rows):
        for eps in dict.fromkeys(r["epsilon"] for r in rows if r["table"] == name):
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            ref = sorted((r for r in rs if r["variant"] == str(base)), key=lambda r: r["rep"])
            for k in points:
                ra = sorted((r for r in rs if r["variant"] == str(k)), key=lambda r: r["rep"])
                cells = []
                for key in KEYS:
                    mean = np.mean([r[key] for r in ra])
                    d = np.mean([a[key] - b[key] for a, b in zip(ra, ref)]) / np.mean([b[key] for b in ref])
                    cells += [f"{mean:.3g}", "–" if k == base else f"{100 * d:+.1f} %"]
                label = f"{k:,}" if isinstance(k, int) else str(k)
                lines.append(f"| {name} | {eps:g} | {label} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def switched(**settings: Any) -> Any:
    """A ``decode(sketch, rep)``: ``dps.M2M(sketch, seed=rep)`` with the synthetic decoder's module
    switches set to ``settings`` (e.g. ``_POINT_PILE=False``) while it runs, then restored."""

    def run(sk: Any, rep: int) -> Any:
        import opendp_sketch as dps
        import opendp_sketch.estimators.synthetic as synthetic

        before = {k: getattr(synthetic, k) for k in settings}  # the switches a benchmark measures
        try:
            for k, v in settings.items():
                setattr(synthetic, k, v)
            return dps.M2M(sk, seed=rep)
        finally:
            for k, v in before.items():
                setattr(synthetic, k, v)

    return run


def variants_main(
    argv: list[str] | None,
    doc: str,
    name: str,
    variants: dict[str, Any],
    *,
    title: str,
    what: str,
    column: str,
    reps: int = 4,
) -> tuple[argparse.Namespace, Path]:
    """The command line of a benchmark decoding the same schema releases by each of ``variants``
    (label → ``decode(sketch, rep)``): ``--reps``, ``--epsilons``, ``--tables``, ``--out`` and
    ``--quick`` (CPSSW8 at ε = 3, 2 releases, under ``results/quick/``). Runs and writes the table;
    returns the parsed arguments and the output path (without suffix)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--epsilons", default="0.1,1,3")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument("--out", default=None, help=f"results path without suffix (default: results/{name})")
    args = p.parse_args(argv)
    tables, epsilons = args.tables.split(","), [float(e) for e in args.epsilons.split(",")]
    runs, out = args.reps, out_stem(args.out, args.quick, name)
    if args.quick:
        tables, epsilons, runs = ["CPSSW8"], [3.0], 2
    rows: list[dict[str, Any]] = []
    for table in tables:
        for eps in epsilons:
            rows += run_variants(table, eps, variants, runs)
    write(rows, out, list(variants), runs, title=title, what=what, column=column)
    return args, out
