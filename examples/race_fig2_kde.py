"""RACE paper, Fig. 2: private kernel density estimates from one RACE sketch, error vs ε.

What it reproduces: the RACE paper's Fig. 2 — the privacy-utility trade-off of private function
release for KDE: the L2 function error and the mean relative error over 2,000 held-out queries,
for ε from 10⁻² to 10, on a 1-D salary distribution with sharp peaks (NYC), 3-D skin tones
(skin) and 8-D genomic data (codrna). Those data sets are not bundled; generated stand-ins of the
same size and dimension are used. Next to RACE, a random Fourier feature sketch (a kernel mean
embedding, the paper's "KME" baseline) is released at the same ε. The paper's other baselines
(Bernstein, PFDA, Fourier basis) are not run.

Setting (full run):

* Salaries (1-D, n = 25,000, scaled to [0, 1] by a public maximum): a log-normal body plus
  spikes at a few pay grades. Skin (3-D, n = 100,000 in [0, 255]³; the paper: 241,000): six colour clusters.
  Codrna (8-D, n = 57,000 in [0, 1]⁸): three correlated clusters. Queries: 2,000 fresh draws
  from the same generator (held out).
* RACE: ``RACE(dim, rows=200, buckets=200, family="l2", bucket_width=w)`` with w = 0.03
  (salaries), 20 (skin), 0.5 (codrna); estimate ``dps.KDE(sketch)`` (mean over rows, divided by
  the noisy count). Its exact reference is its own kernel, the LSH collision probability
  (``kde.kernel``), averaged over all rows.
* RFF: ``RFF(dim, num_features=1000, bandwidth=w)`` (Gaussian kernel), exact reference the
  Gaussian KDE.
* ε ∈ {0.01, 0.03, 0.1, 0.3, 1, 3, 10}, 3 releases each (the paper: 10); OpenDP discrete Laplace,
  budget split 0.98 / 0.02 (sum / count). Errors of the normalised KDE ``(1/n) Σ k(xᵢ, q)``:
  L2 error ``(mean_q (K̂ − K)²)^{1/2}`` and mean relative error ``mean_q |K̂ − K| / K``.

``--quick``: n ÷ 20 rows, 200 queries, small sketches, ε ∈ {0.1, 1, 10}, 1 release.

Usage: ``python examples/race_fig2_kde.py [--quick] [--out DIR]``
Writes ``DIR/race_fig2_kde.png`` and ``.csv`` (columns: dataset, sketch, epsilon, l2_error,
mean_relative_error, releases); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
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

NAME = "race_fig2_kde"
FULL = {
    "scale": 1,
    "queries": 2_000,
    "rows": 200,
    "buckets": 200,
    "m": 1000,
    "eps": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
    "releases": 3,
}
QUICK = {
    "scale": 20,
    "queries": 200,
    "rows": 50,
    "buckets": 100,
    "m": 100,
    "eps": [0.1, 1.0, 10.0],
    "releases": 1,
}


def salaries(n: int, rng: np.random.Generator) -> np.ndarray:
    body = rng.lognormal(np.log(70_000), 0.45, n)
    grades = np.array([42_000, 58_500, 76_000, 95_000, 120_000])
    spike = rng.uniform(size=n) < 0.35
    body[spike] = rng.choice(grades, spike.sum()) + rng.normal(0, 300, spike.sum())
    return np.clip(body / 300_000, 0.0, 1.0)[:, None]


def skin(n: int, rng: np.random.Generator) -> np.ndarray:
    centres = np.array(
        [[190, 140, 110], [160, 110, 80], [110, 75, 55], [225, 185, 160], [80, 55, 40], [70, 130, 190]]
    )
    spread = np.array([14, 16, 12, 9, 13, 28])
    k = rng.choice(6, size=n, p=[0.25, 0.2, 0.15, 0.15, 0.1, 0.15])
    return np.clip(centres[k] + rng.normal(size=(n, 3)) * spread[k, None], 0, 255)


def codrna(n: int, rng: np.random.Generator) -> np.ndarray:
    centres = np.array([[0.3] * 8, [0.6] * 8, [0.45, 0.7, 0.3, 0.6, 0.4, 0.5, 0.6, 0.35]])
    mix = np.eye(8) * 0.07 + 0.03
    k = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    return np.clip(centres[k] + rng.normal(size=(n, 8)) @ mix, 0.0, 1.0)


DATASETS = {  # name: (generator, n, public box, kernel width)
    "salaries (1-D)": (salaries, 25_000, (0.0, 1.0), 0.03),
    "skin (3-D)": (skin, 100_000, (0.0, 255.0), 20.0),
    "codrna (8-D)": (codrna, 57_000, (0.0, 1.0), 0.5),
}


def exact_kde(kernel, X: np.ndarray, Q: np.ndarray) -> np.ndarray:
    total = np.zeros(len(Q))
    for s in range(0, len(X), 2_000):
        total += kernel(X[s : s + 2_000][None, :, :], Q[:, None, :]).sum(axis=1)
    return total / len(X)


def run(cfg: dict) -> pl.DataFrame:
    rows = []
    for i, (name, (gen, n, box, width)) in enumerate(DATASETS.items()):
        X = gen(n // cfg["scale"], np.random.default_rng(10 + i))
        Q = gen(cfg["queries"], np.random.default_rng(100 + i))
        d = X.shape[1]
        maps = {
            "RACE": dps.RACE(dim=d, rows=cfg["rows"], buckets=cfg["buckets"], bucket_width=width, seed=i),
            "RFF (KME)": dps.RFF(dim=d, num_features=cfg["m"], bandwidth=width, seed=i),
        }
        for sketch_name, fm in maps.items():
            truth = exact_kde(fm.kernel_value, X, Q)
            for eps in cfg["eps"]:
                l2, rel = [], []
                for _ in range(cfg["releases"]):
                    sk = dps.release_sketch(X, fm, bounds=box, epsilon=eps)
                    est = dps.KDE(sk)(Q)
                    l2.append(np.sqrt(np.mean((est - truth) ** 2)))
                    rel.append(np.mean(np.abs(est - truth) / truth))
                rows.append(
                    {
                        "dataset": name,
                        "sketch": sketch_name,
                        "epsilon": eps,
                        "l2_error": float(np.mean(l2)),
                        "mean_relative_error": float(np.mean(rel)),
                        "releases": len(l2),
                    }
                )
                print(
                    f"{name:15s} {sketch_name:9s} ε={eps:<5g} relative error {np.mean(rel):.4f}", flush=True
                )
    return pl.DataFrame(rows)


def plot(table: pl.DataFrame, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = table["dataset"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.5), squeeze=False)
    for j, name in enumerate(names):
        for i, (col, label) in enumerate(
            [("l2_error", "L2 function error"), ("mean_relative_error", "mean relative error")]
        ):
            ax = axes[i, j]
            for sketch in table["sketch"].unique(maintain_order=True):
                t = table.filter((pl.col("dataset") == name) & (pl.col("sketch") == sketch))
                ax.loglog(t["epsilon"], t[col], "o-", label=sketch)
            ax.set_title(f"{name}: {label}", fontsize=10)
            ax.set_xlabel("ε")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle("Private KDE from one sketch, 2,000 held-out queries; RACE paper Fig. 2")
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
    plot(table, out / f"{NAME}.png")
    print(f"wrote {out / NAME}.png and .csv in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
