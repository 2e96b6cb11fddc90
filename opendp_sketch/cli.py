"""The ``opendp-sketch`` command line: ``release`` (CSV/Parquet → sketch file), ``query`` (sketch
file → estimates), ``inspect`` (what a sketch file holds) and ``demo`` (generated data).

Exit codes: 0 on success, 2 on a usage error or bad input (a message on stderr that never shows a
data value; nothing is released).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

__all__ = ["main"]

_DESCRIPTION = (
    "Release a table once as a differentially private sketch, then answer analyses from it. "
    "Commands: release (CSV/Parquet -> sketch file), query (sketch file -> estimates), "
    "inspect (what a sketch file holds), demo (generated data). Exit code 2 on bad input: "
    "the message never shows a data value, and nothing is released."
)

DEMO_COLUMNS = ("age", "income_k", "hours")
DEMO_BOUNDS = ((18.0, 0.0, 0.0), (90.0, 250.0, 80.0))


def demo_data(n: int, seed: int = 0) -> np.ndarray:
    """A synthetic table (age, income in k$, weekly hours) with two sub-populations.

    >>> demo_data(5).shape
    (5, 3)
    """
    rng = np.random.default_rng(seed)
    young = rng.random(n) < 0.4
    age = np.where(young, rng.normal(28, 5, n), rng.normal(50, 10, n))
    income = np.exp(rng.normal(np.log(np.where(young, 35, 70)), 0.45, n))
    hours = np.where(young, rng.normal(32, 8, n), rng.normal(42, 6, n))
    return np.column_stack([age, income, hours])


def _demo(args: argparse.Namespace) -> int:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    lo, hi = (np.array(b) for b in DEMO_BOUNDS)
    X = demo_data(args.n, args.seed)
    d = X.shape[1]
    print(f"opendp-sketch demo: {args.n:,} synthetic rows, columns {list(DEMO_COLUMNS)}")
    print(f"public bounds: lower {lo.tolist()}, upper {hi.tolist()}; total budget ε = {args.epsilon}")

    # one context, three sketches; the maps work on data rescaled to [0, 1]^d by the public box
    U = (np.clip(X, lo, hi) - lo) / (hi - lo)
    unit_box = dps.box_domain((0.0, 1.0), num_columns=d, column_names=DEMO_COLUMNS)
    ctx = dp.Context.compositor(
        data=U,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=args.epsilon),
        split_by_weights=[0.4, 0.3, 0.3],
        domain=unit_box,
    )
    maps = {
        "moments": dps.Moments(dim=d, radius=float(np.sqrt(d)) / 2, center=[0.5] * d),
        "histogram": dps.Histogram(bounds=(0.0, 1.0), bins=64, dim=d),
        "rff": dps.RFF(dim=d, num_features=400, bandwidth=0.15, seed=args.seed),
    }
    t0 = time.perf_counter()
    sketches = {name: ctx.query().private_sketch(fm).release() for name, fm in maps.items()}
    elapsed = time.perf_counter() - t0

    mom, hist, rff = sketches["moments"], sketches["histogram"], sketches["rff"]
    print(f"\nreleased 3 sketches in {elapsed:.2f} s; privacy spent per release (ε): "
          f"{[round(float(e), 4) for e in ctx.current_privacy_loss()]}")
    print(f"noisy count n̂ = {mom.count:,} (true {args.n:,})")
    print("\nestimates from the sketches (true values shown because the data is synthetic):")
    private_mean = lo + (hi - lo) * (mom.mean[:d] + 0.5)
    true_mean = np.clip(X, lo, hi).mean(axis=0)
    for j, c in enumerate(DEMO_COLUMNS):
        med = _hist_quantile(hist, j, 0.5)
        print(f"  {c:>9}: mean {private_mean[j]:9.3f} (true {true_mean[j]:9.3f})   "
              f"median {lo[j] + (hi[j] - lo[j]) * med:9.3f} (true {np.median(np.clip(X[:, j], lo[j], hi[j])):9.3f})")
    points = np.array([[0.15, 0.15, 0.4], [0.45, 0.3, 0.55]])
    est = rff.feature_map.transform(points) @ rff.mean / rff.feature_map.num_frequencies
    true = np.array([rff.feature_map.kernel_value(U, q).mean() for q in points])
    for q, e, t in zip(points, est, true):
        print(f"  Gaussian-kernel density at {q.tolist()}: {e:.4f} (true {t:.4f})")
    if args.out:
        import pathlib

        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, sk in sketches.items():
            sk.save(out / f"{name}.sketch")
        print(f"\nsketches saved to {out}/ (inspect with: opendp-sketch inspect {out}/rff.sketch)")
    print("\nEvery estimate above is post-processing of the released sketches: no further privacy cost.")
    return 0


def _hist_quantile(sketch, column: int, q: float) -> float:
    """Quantile of one column on the unit scale from a Histogram sketch (monotone noisy CDF)."""
    fm = sketch.feature_map
    start = int(fm.offsets[column])
    counts = np.maximum(sketch.sum[start : start + int(fm.bins[column])], 0.0)
    cdf = np.concatenate([[0.0], np.cumsum(counts) / max(counts.sum(), 1.0)])
    edges = np.linspace(0.0, 1.0, int(fm.bins[column]) + 1)
    return float(np.interp(q, cdf, edges))  # linear within the bin, like a histogram's CDF


def _inspect(args: argparse.Namespace) -> int:
    from .sketch import Sketch, SketchFormatError

    try:
        key = None if args.key_file is None else Path(args.key_file).read_bytes()
        sk = Sketch.load(args.path, key=key)
    except (SketchFormatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    privacy = sk.privacy
    info = {
        "feature_map": sk.feature_map.to_dict(),
        "num_features": sk.feature_map.num_features,
        "count": sk.count,
        "noise": sk.noise,
        "privacy": privacy,
        # a merged sketch: how its parts compose (sequential unless declared disjoint) and the total
        "composition": privacy.get("composition", "single release"),
        "signature": "valid (HMAC-SHA256, --key-file)" if key is not None else "not checked (give --key-file)",
        "bounds": sk.bounds,
        "column_names": sk.column_names,
    }
    print(json.dumps(info, indent=2, default=str))
    return 0


def _load_schema(path: str) -> tuple[list[str], list[float], list[float]]:
    """``{"columns": {"name": [lower, upper], ...}}`` → names and public bounds."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON schema ({type(e).__name__})") from None
    cols = spec.get("columns") if isinstance(spec, dict) else None
    if not isinstance(cols, dict) or not cols:
        raise ValueError(f'{path}: the schema must be {{"columns": {{"name": [lower, upper], ...}}}}')
    names, lo, hi = [], [], []
    for name, b in cols.items():
        if not (isinstance(b, list) and len(b) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)):
            raise ValueError(f"{path}: column {name!r} needs public bounds [lower, upper]")
        names.append(str(name))
        lo.append(float(b[0]))
        hi.append(float(b[1]))
    return names, lo, hi


def _feature_map(args: argparse.Namespace, lo: list[float], hi: list[float]):
    import opendp_sketch as dps

    d = len(lo)
    if args.map == "rff":
        return dps.RFF(dim=d, num_features=args.features, bandwidth=args.bandwidth, seed=args.seed)
    if args.map == "kmeans":
        return dps.compressive_feature_map((lo, hi), k=args.clusters, seed=args.seed)
    if args.map == "race":
        return dps.RACE(dim=d, rows=args.rows, buckets=args.buckets, bucket_width=args.bandwidth, seed=args.seed)
    if args.map == "histogram":
        return dps.Histogram(bounds=(lo, hi), bins=args.bins)
    if args.map == "dyadic":
        return dps.DyadicTrees(bounds=(lo, hi), levels=args.levels)
    center = [(a + b) / 2 for a, b in zip(lo, hi)]
    radius = args.radius or float(np.linalg.norm(np.subtract(hi, lo)) / 2)
    return dps.Moments(dim=d, radius=radius, center=center)


def _release(args: argparse.Namespace) -> int:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    names, lo, hi = _load_schema(args.schema)
    out = Path(args.out)
    # checked before the release: a sketch that cannot be saved would spend the budget for nothing
    if out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise ValueError(f"--out {args.out}: cannot write a file there (a directory, or a missing or read-only folder)")
    # an existing file is most likely an earlier release: overwriting it would spend budget again
    if out.exists() and not args.force:
        raise ValueError(f"--out {args.out} exists (an earlier release?); choose another path, or pass --force to replace it")
    fm = _feature_map(args, lo, hi)
    t0 = time.perf_counter()
    print(f"releasing {args.map} sketch of {args.data} (columns {names}) ...", file=sys.stderr)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    with tqdm(unit="rows", unit_scale=True, file=sys.stderr, disable=not show, desc="release pass") as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            sk = dps.release_sketch(
                args.data, fm, bounds=(lo, hi), epsilon=args.epsilon, delta=args.delta, rho=args.rho,
                column_names=names, impute=args.impute, progress=progress,
            )
        except ValueError as e:
            raise ValueError(_in_cli_words(str(e))) from None
    sk.save(args.out)
    print(f"released in {time.perf_counter() - t0:.1f} s: {sk!r}", file=sys.stderr)
    print(json.dumps({"out": args.out, "count": sk.count, "privacy": sk.privacy}, default=str))
    return 0


#: Python keyword → the CLI flag that sets it, so errors name what the user can type
_FLAGS = {
    "impute=<public value>": "--impute <public value>",
    "impute=<public value(s)>": "--impute <public value>",
    "impute=": "--impute ",
    "epsilon (optionally with delta) or rho": "--epsilon (optionally with --delta) or --rho",
    "data is empty (0 rows)": "the file has no rows (a header only?)",
}


def _in_cli_words(message: str) -> str:
    """A library error message with keyword names replaced by the CLI's flags."""
    for words, flag in _FLAGS.items():
        message = message.replace(words, flag)
    return message


def _parse_points(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"points ({text!r}) must be comma-separated numbers") from None


def _query(args: argparse.Namespace) -> int:
    import polars as pl

    from .estimators.compressive import CompressiveKMeans
    from .estimators.kde import KDE
    from .estimators.m2m import M2M
    from .sketch import Sketch, SketchFormatError

    try:
        sk = Sketch.load(args.sketch)
    except SketchFormatError as e:
        raise ValueError(
            f"{args.sketch} is not a sketch file ({e}); create one with: opendp-sketch release DATA --schema ... --out FILE"
        ) from None
    rows: list[dict[str, object]] = []
    needs_m2m = args.mean or args.cdf or args.quantile or args.count
    est: Any = M2M(sk, n_samples=args.n_samples) if needs_m2m else None
    if args.mean:
        for c, v in zip(est.columns, est.mean()):
            rows.append({"query": "mean", "column": c, "point": None, "value": float(v)})
    for spec in args.cdf or []:
        col, _, pts = spec.partition("=")
        points = _parse_points(pts)
        for t, v in zip(points, est.cdf(col, points)):
            rows.append({"query": "cdf", "column": col, "point": t, "value": float(v)})
    for spec in args.quantile or []:
        col, _, qs = spec.partition("=")
        levels = _parse_points(qs)
        for q, v in zip(levels, est.quantile(col, levels)):
            rows.append({"query": "quantile", "column": col, "point": q, "value": float(v)})
    for text in args.count or []:
        try:
            expr = pl.sql_expr(text)
        except Exception:  # noqa: BLE001 - Polars raises several SQL error types
            raise ValueError(f"--count {text!r} is not a SQL predicate over the columns {est.columns}") from None
        rows.append({"query": "count", "column": text, "point": None, "value": float(est.count(expr))})
    for text in args.kde or []:
        point = _parse_points(text)
        rows.append({"query": "kde", "column": None, "point": point, "value": float(KDE(sk)([point])[0])})
    if args.kmeans is not None:
        km = CompressiveKMeans(args.kmeans, n_restarts=args.restarts).fit(sk)
        for j, (c, w) in enumerate(zip(km.cluster_centers_, km.weights_)):
            rows.append({"query": "kmeans", "column": f"cluster {j}", "point": c.tolist(), "value": float(w)})
    if not rows:
        raise ValueError("ask for at least one of --mean, --cdf, --quantile, --count, --kde, --kmeans")
    if args.format == "json":
        print(json.dumps(rows))
    elif args.format == "csv":
        print(pl.DataFrame({k: [str(r[k]) if r[k] is not None else "" for r in rows] for k in rows[0]}).write_csv(), end="")
    else:
        for r in rows:
            where = "" if r["point"] is None else f" at {r['point']}"
            print(f"{r['query']:>8} {r['column'] or '':<24}{where}: {r['value']:.6g}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``opendp-sketch``."""
    parser = argparse.ArgumentParser(prog="opendp-sketch", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p_demo = sub.add_parser("demo", help="release sketches of generated data and print estimates", formatter_class=fmt)
    p_demo.add_argument("--n", type=int, default=200_000, help="rows to generate")
    p_demo.add_argument("--epsilon", type=float, default=1.0, help="total privacy budget ε")
    p_demo.add_argument("--seed", type=int, default=0, help="seed of the data and the public maps")
    p_demo.add_argument("--out", help="directory to save the released sketches in")
    p_demo.set_defaults(func=_demo)
    p_insp = sub.add_parser("inspect", help="show what a sketch file holds and its privacy parameters", formatter_class=fmt)
    p_insp.add_argument("path", help="a file written by Sketch.save")
    p_insp.add_argument(
        "--key-file", help="file holding the curator's secret key: the sketch must carry a matching signature"
    )
    p_insp.set_defaults(func=_inspect)

    p_rel = sub.add_parser(
        "release", help="release a sketch of a CSV/Parquet file (streamed) to a sketch file", formatter_class=fmt
    )
    p_rel.add_argument("data", help="a .csv, .parquet or .ipc file")
    p_rel.add_argument("--schema", required=True, help='JSON file: {"columns": {"name": [lower, upper], ...}}')
    p_rel.add_argument("--out", required=True, help="where to write the sketch (an existing file is refused)")
    p_rel.add_argument("--force", action="store_true", help="replace an existing --out file (spends the budget again)")
    p_rel.add_argument(
        "--map", choices=["rff", "race", "histogram", "dyadic", "moments", "kmeans"], default="rff",
        help="feature map (kmeans: an RFF map sized and scaled from the schema's box for --clusters)",
    )
    p_rel.add_argument("--clusters", type=int, default=10, help="clusters planned with --map kmeans")
    p_rel.add_argument("--epsilon", type=float, help="ε (with --delta: Gaussian noise)")
    p_rel.add_argument("--delta", type=float, help="δ")
    p_rel.add_argument("--rho", type=float, help="ρ for zCDP (instead of ε)")
    p_rel.add_argument("--features", type=int, default=1000, help="RFF features")
    p_rel.add_argument("--bandwidth", type=float, default=1.0, help="RFF bandwidth / RACE bucket width")
    p_rel.add_argument("--rows", type=int, default=100, help="RACE rows")
    p_rel.add_argument("--buckets", type=int, default=1000, help="RACE buckets per row")
    p_rel.add_argument("--bins", type=int, default=64, help="Histogram bins per column")
    p_rel.add_argument("--levels", type=int, default=10, help="DyadicTrees levels")
    p_rel.add_argument("--radius", type=float, help="Moments radius (default: the box's half-diagonal)")
    p_rel.add_argument("--seed", type=int, default=0, help="seed of the public map")
    p_rel.add_argument("--impute", type=float, help="public value replacing missing values")
    p_rel.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="progress bar of the release pass on stderr (default: when stderr is a terminal)",
    )
    p_rel.set_defaults(func=_release)

    p_q = sub.add_parser("query", help="estimates from a sketch file, as a table, JSON or CSV", formatter_class=fmt)
    p_q.add_argument("sketch", help="a file written by release or Sketch.save")
    p_q.add_argument("--mean", action="store_true", help="column means (M2M)")
    p_q.add_argument("--cdf", action="append", metavar="COL=T1,T2", help="CDF of a column at points")
    p_q.add_argument("--quantile", action="append", metavar="COL=Q1,Q2", help="quantiles of a column")
    p_q.add_argument("--count", action="append", metavar="SQL", help='rows satisfying a predicate, e.g. "age > 30"')
    p_q.add_argument("--kde", action="append", metavar="X1,X2,...", help="kernel density at a point (RFF/RACE)")
    p_q.add_argument("--kmeans", type=int, metavar="K", help="K cluster centres (value: cluster weight; RFF sketches)")
    p_q.add_argument("--restarts", type=int, default=3, help="compressive k-means restarts")
    p_q.add_argument("--n-samples", type=int, default=100_000, help="M2M prior samples")
    p_q.add_argument("--format", choices=["table", "json", "csv"], default="table")
    p_q.set_defaults(func=_query)

    args = parser.parse_args(argv)
    if args.command == "demo" and (args.n <= 0 or args.epsilon <= 0):
        parser.error("--n and --epsilon must be positive")
    try:
        return int(args.func(args))
    except ValueError as e:  # bad input: a clear message, nothing released
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
