"""M2M paper, Fig. 3: one-dimensional statistics from one private sketch, error vs ε.

What it reproduces: the M2M paper's Fig. 3 (top row, Random10): the mean, the second moment and
the CDF (10 equi-spaced points) of every column, estimated by M2M from an RFF, a RACE and a
Histogram sketch, averaged over the columns, for ε from 10⁻² to 10². The paper's bottom row
(the LifeSci data, not bundled) shows what happens when the data are far from M2M's uniform
prior; a generated stand-in with clustered, correlated columns plays that role here.

Setting (full run):

* Random10: n = 27,000 rows uniform on [0, 1]¹⁰ (the paper's n and d); Clustered: n = 27,000
  rows of a seeded mixture of 4 correlated Gaussian clusters, clipped to [0, 1]¹⁰.
* Sketches (the paper's, except RACE): ``RFF(dim=10, num_features=200, bandwidth=1)``,
  ``Histogram(bins=100)`` per column, ``RACE(rows=40, buckets=40)`` — the paper uses 80 × 80;
  40 × 40 keeps M2M's Gram matrix (R·W = 1,600 features instead of 6,400) to seconds.
  Released with ``dps.release_sketch(..., epsilon=ε)``: OpenDP's discrete Laplace noise, budget
  split 0.98 / 0.02 between the sum and the count, as in the paper.
* ε ∈ {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 100}, 5 releases each (the paper: 50).
  ``M2M(sketch, n_samples=50_000)`` (the paper: 10⁵).
* Errors: mean relative error (MRE) of the means and of the second moments, earth mover's
  distance of the 10-point CDF (Σ_k |F̂(t_k) − F(t_k)|·0.1), each averaged over the 10 columns
  and the releases.

``--quick``: n = 3,000, d = 3, small maps, ε ∈ {0.1, 1, 10}, 1 release (a smoke run).

Usage: ``python examples/m2m_fig3_statistics.py [--quick] [--out DIR]``
Writes ``DIR/m2m_fig3_statistics.png`` and ``.csv`` (columns: dataset, sketch, epsilon,
mean_mre, moment2_mre, cdf_emd, releases); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import opendp.prelude as dp
import polars as pl
from _setup import DEFAULT_OUT, require_matplotlib  # noqa: E402 - examples/ is on sys.path when run

import opendp_sketch as dps

NAME = "m2m_fig3_statistics"
FULL = {
    "n": 27_000,
    "d": 10,
    "eps": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0],
    "releases": 5,
    "ns": 50_000,
    "rff_m": 200,
    "race": 40,
    "bins": 100,
}
QUICK = {
    "n": 3_000,
    "d": 3,
    "eps": [0.1, 1.0, 10.0],
    "releases": 1,
    "ns": 5_000,
    "rff_m": 50,
    "race": 8,
    "bins": 10,
}
GRID = np.linspace(0.1, 1.0, 10)


def datasets(n: int, d: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    centres = rng.uniform(0.2, 0.8, size=(4, d))
    mix = rng.normal(size=(d, d)) * 0.06
    k = rng.integers(0, 4, n)
    clustered = np.clip(centres[k] + rng.normal(size=(n, d)) @ mix, 0.0, 1.0)
    return {"Random10" if d == 10 else f"Random{d}": rng.uniform(size=(n, d)), "Clustered": clustered}


def errors(est: dps.M2M, X: np.ndarray) -> dict[str, float]:
    mean, m2 = X.mean(axis=0), (X**2).mean(axis=0)
    cdf_true = (X[:, :, None] <= GRID).mean(axis=0)
    cdf = np.stack([est.cdf(j, GRID) for j in range(X.shape[1])])
    return {
        "mean_mre": float(np.mean(np.abs(est.mean() - mean) / mean)),
        "moment2_mre": float(np.mean(np.abs(est.moment(2) - m2) / m2)),
        "cdf_emd": float(np.mean(np.abs(cdf - cdf_true).sum(axis=1) * (GRID[1] - GRID[0]))),
    }


def run(cfg: dict) -> pl.DataFrame:
    d = cfg["d"]
    maps = {
        "RFF": dps.RFF(dim=d, num_features=cfg["rff_m"], bandwidth=1.0, seed=0),
        "RACE": dps.RACE(dim=d, rows=cfg["race"], buckets=cfg["race"], seed=0),
        "Histogram": dps.Histogram(bounds=(0.0, 1.0), bins=cfg["bins"], dim=d),
    }
    rows = []
    for data_name, X in datasets(cfg["n"], d).items():
        for map_name, fm in maps.items():
            for eps in cfg["eps"]:
                runs = []
                for _ in range(cfg["releases"]):
                    sk = dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=eps)
                    runs.append(errors(dps.M2M(sk, n_samples=cfg["ns"]), X))
                row = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
                rows.append(
                    {"dataset": data_name, "sketch": map_name, "epsilon": eps, **row, "releases": len(runs)}
                )
                print(f"{data_name:9s} {map_name:9s} ε={eps:<6g} mean MRE {row['mean_mre']:.4f}", flush=True)
    return pl.DataFrame(rows)


def plot(table: pl.DataFrame, path: pathlib.Path, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = table["dataset"].unique(maintain_order=True).to_list()
    metrics = {"mean_mre": "mean: MRE", "moment2_mre": "second moment: MRE", "cdf_emd": "CDF: EMD"}
    fig, axes = plt.subplots(len(names), 3, figsize=(12, 3.3 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        for j, (col, title) in enumerate(metrics.items()):
            ax = axes[i, j]
            for sketch in table["sketch"].unique(maintain_order=True):
                t = table.filter((pl.col("dataset") == name) & (pl.col("sketch") == sketch))
                ax.loglog(t["epsilon"], t[col], "o-", label=sketch)
            ax.set_title(f"{name}: {title}")
            ax.set_xlabel("ε")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle(f"M2M from one private sketch (n = {n:,}); M2M paper Fig. 3")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seconds-long smoke run (small n, few ε)")
    ap.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help="output directory (default: ./opendp-sketch-output; the committed reference runs are in examples/output)",
    )
    args = ap.parse_args(argv)
    require_matplotlib()
    dp.enable_features("contrib", "honest-but-curious")
    cfg = QUICK if args.quick else FULL
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table = run(cfg)
    table.write_csv(out / f"{NAME}.csv")
    plot(table, out / f"{NAME}.png", cfg["n"])
    print(f"wrote {out / NAME}.png and .csv in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
