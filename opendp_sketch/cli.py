"""The ``opendp-sketch`` command line: ``demo`` (a private release on generated data) and ``inspect``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import numpy as np

__all__ = ["main"]

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
        sk = Sketch.load(args.path)
    except (SketchFormatError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    info = {
        "feature_map": sk.feature_map.to_dict(),
        "num_features": sk.feature_map.num_features,
        "count": sk.count,
        "noise": sk.noise,
        "privacy": sk.privacy,
        "bounds": sk.bounds,
        "column_names": sk.column_names,
    }
    print(json.dumps(info, indent=2, default=str))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``opendp-sketch``."""
    parser = argparse.ArgumentParser(prog="opendp-sketch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="release sketches of generated data and print estimates")
    p_demo.add_argument("--n", type=int, default=200_000, help="rows to generate (default 200000)")
    p_demo.add_argument("--epsilon", type=float, default=1.0, help="total privacy budget ε (default 1)")
    p_demo.add_argument("--seed", type=int, default=0, help="seed of the data and the public maps")
    p_demo.add_argument("--out", help="directory to save the released sketches in")
    p_demo.set_defaults(func=_demo)
    p_insp = sub.add_parser("inspect", help="show what a sketch file holds and its privacy parameters")
    p_insp.add_argument("path", help="a file written by Sketch.save")
    p_insp.set_defaults(func=_inspect)
    args = parser.parse_args(argv)
    if getattr(args, "n", 1) <= 0 or getattr(args, "epsilon", 1.0) <= 0:
        parser.error("--n and --epsilon must be positive")
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
