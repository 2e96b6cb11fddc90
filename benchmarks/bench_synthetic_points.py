"""How many synthetic points the decoder needs: the same schema releases decoded with each count.

The user's path of ``bench_real_tables.py`` (a Polars frame and a ``dps.Schema`` with every
default, ``release_sketch(frame, schema=...)``) is released ``--reps`` times per table; every
release is decoded by ``dps.M2M(sketch, n_samples=N)`` for each ``N`` of ``--points`` with the same
decoder seed, so the differences are the point count's alone (common noise). Per decode: the
decode time, mean ``|err|/n`` of ``bench_real_tables``' 1 000 grid counts and of its 1 000
off-grid counts, the mean ``|err|`` of its off-grid CDF points, and the relative error of the
numeric columns' means. The table gives the means over releases and the mean paired difference
against the first ``N`` as a share of its error.

Run: ``python benchmarks/bench_synthetic_points.py`` (``--quick``: CPSSW8, ε = 1, 2 releases).
Writes ``benchmarks/results/bench_synthetic_points.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import tables as real  # noqa: E402
from lib.cli import out_stem  # noqa: E402
from lib.variants import run_variants, write  # noqa: E402


def run_table(name: str, eps: float, points: list[int], reps: int) -> list[dict[str, Any]]:
    import opendp_sketch as dps

    return run_variants(
        name, eps, {str(k): lambda sk, rep, k=k: dps.M2M(sk, seed=rep, n_samples=k) for k in points}, reps
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument(
        "--points", default="50000,30000", help="synthetic point counts; the first is the reference"
    )
    p.add_argument("--epsilons", default="0.1,1")
    p.add_argument("--tables", default=",".join(real.TABLES))
    p.add_argument(
        "--out", default=None, help="results path without suffix (default: results/bench_synthetic_points)"
    )
    args = p.parse_args(argv)
    tables, epsilons = args.tables.split(","), [float(e) for e in args.epsilons.split(",")]
    points, reps = [int(k) for k in args.points.split(",")], args.reps
    out = out_stem(args.out, args.quick, "bench_synthetic_points")
    if args.quick:
        tables, epsilons, reps = ["CPSSW8"], [1.0], 2
    rows: list[dict[str, Any]] = []
    for name in tables:
        for eps in epsilons:
            rows += run_table(name, eps, points, reps)
    write(rows, out, points, reps)
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
