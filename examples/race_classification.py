"""RACE paper, Fig. 3: binary classification from one private RACE sketch, accuracy vs ε.

What it reproduces: the RACE paper's Fig. 3 — a maximum-likelihood kernel density classifier
built from private RACE sketches (one per class; here one ``ByClass(RACE)`` release holds all
classes for the cost of one sketch), held-out accuracy vs ε on occupancy, pulsar and nomao.
Those data sets are not bundled; generated stand-ins of the same size and dimension are used.
The paper's private baseline, logistic regression by objective perturbation, needs a noise
distribution OpenDP does not provide, so it is not run; instead the plot shows a second private
classifier from one release (``ByClass(RFF)``, Gaussian-kernel density) and the non-private
logistic regression on the same training rows as a reference.

Setting (full run):

* Occupancy-like (n = 17,000, d = 5), pulsar-like (n = 17,000, d = 8, 9 % positives) and
  nomao-like (n = 34,000, d = 26): two classes, each a mixture of Gaussian clusters with
  overlapping supports, clipped to [0, 1]^d; a seeded 80 % / 20 % train / test split.
* ``ByClass(RACE(dim=d, rows=200, buckets=100, bucket_width=w), 2)`` with the paper's kernel
  widths w = 0.5 (occupancy), 0.1 (pulsar), 0.6 (nomao), read by
  ``KDEClassifier(rule="ml")``; ``ByClass(RFF(dim=d, num_features=500, bandwidth=w), 2)`` read by
  ``KDEClassifier(rule="ml")``. OpenDP discrete Laplace noise, budget split 0.98 / 0.02.
* ε ∈ {0.01, 0.03, 0.1, 0.3, 1, 3, 10}, 5 releases each (the paper: 10 repetitions).

``--quick``: n ÷ 10 rows, small sketches, ε ∈ {0.1, 10}, 1 release.

Usage: ``python examples/race_classification.py [--quick] [--out DIR]``
Writes ``DIR/race_classification.png`` and ``.csv`` (columns: dataset, method, epsilon,
accuracy_mean, accuracy_min, accuracy_max, releases); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import opendp.prelude as dp
import polars as pl
import scipy.optimize
import scipy.special
from _setup import DEFAULT_OUT, require_matplotlib  # noqa: E402 - examples/ is on sys.path when run

import opendp_sketch as dps

NAME = "race_classification"
FULL = {
    "scale": 1,
    "rows": 200,
    "buckets": 100,
    "m": 500,
    "eps": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
    "releases": 5,
}
QUICK = {"scale": 10, "rows": 30, "buckets": 50, "m": 100, "eps": [0.1, 10.0], "releases": 1}
DATASETS = {  # name: (n, d, share of class 1, clusters per class, cluster spread, kernel width)
    "occupancy-like (d=5)": (17_000, 5, 0.23, 1, 0.12, 0.5),
    "pulsar-like (d=8)": (17_000, 8, 0.09, 2, 0.12, 0.1),
    "nomao-like (d=26)": (34_000, 26, 0.29, 3, 0.10, 0.6),
}


def make_data(
    n: int, d: int, share: float, clusters: int, spread: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.3, 0.7, size=(2, clusters, d))
    centres[1] += rng.normal(0.0, 0.6 / np.sqrt(d), size=(clusters, d))
    y = (rng.uniform(size=n) < share).astype(int)
    c = rng.integers(0, clusters, n)
    X = centres[y, c] + rng.normal(0.0, spread, size=(n, d))
    return np.clip(X, 0.0, 1.0), y


def logistic_accuracy(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray) -> float:
    Z = np.column_stack([X, np.ones(len(X))])

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = Z @ theta
        return float(np.mean(np.logaddexp(0.0, eta) - y * eta)), Z.T @ (scipy.special.expit(eta) - y) / len(y)

    theta = scipy.optimize.minimize(loss, np.zeros(Z.shape[1]), jac=True, method="L-BFGS-B").x
    return float(np.mean(((X_test @ theta[:-1] + theta[-1]) > 0) == y_test))


def run(cfg: dict) -> pl.DataFrame:
    rows = []
    for i, (name, (n, d, share, clusters, spread, width)) in enumerate(DATASETS.items()):
        X, y = make_data(n // cfg["scale"], d, share, clusters, spread, seed=30 + i)
        cut = int(0.8 * len(y))
        train, X_test, y_test = np.column_stack([X[:cut], y[:cut]]), X[cut:], y[cut:]
        box = ([0.0] * d + [0], [1.0] * d + [1])
        maps = {
            "ByClass(RACE), ML rule": dps.ByClass(
                dps.RACE(dim=d, rows=cfg["rows"], buckets=cfg["buckets"], bucket_width=width, seed=i), 2
            ),
            "ByClass(RFF), ML rule": dps.ByClass(
                dps.RFF(dim=d, num_features=cfg["m"], bandwidth=width, seed=i), 2
            ),
        }
        for method, fm in maps.items():
            for eps in cfg["eps"]:
                acc = []
                for _ in range(cfg["releases"]):
                    sk = dps.release_sketch(train, fm, bounds=box, epsilon=eps)
                    acc.append(float(np.mean(dps.KDEClassifier(rule="ml").fit(sk).predict(X_test) == y_test)))
                rows.append(
                    {
                        "dataset": name,
                        "method": method,
                        "epsilon": eps,
                        "accuracy_mean": float(np.mean(acc)),
                        "accuracy_min": min(acc),
                        "accuracy_max": max(acc),
                        "releases": len(acc),
                    }
                )
                print(f"{name:21s} {method:23s} ε={eps:<5g} accuracy {np.mean(acc):.3f}", flush=True)
        ref = logistic_accuracy(X[:cut], y[:cut], X_test, y_test)
        majority = float(max(np.mean(y_test), 1 - np.mean(y_test)))
        for method, value in (("non-private logistic regression", ref), ("majority class", majority)):
            rows += [
                {
                    "dataset": name,
                    "method": method,
                    "epsilon": eps,
                    "accuracy_mean": value,
                    "accuracy_min": value,
                    "accuracy_max": value,
                    "releases": 0,
                }
                for eps in cfg["eps"]
            ]
        print(f"{name:21s} non-private logistic regression accuracy {ref:.3f}, majority class {majority:.3f}")
    return pl.DataFrame(rows)


def plot(table: pl.DataFrame, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = table["dataset"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(1, len(names), figsize=(4.4 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        for method in table["method"].unique(maintain_order=True):
            t = table.filter((pl.col("dataset") == name) & (pl.col("method") == method))
            if t["releases"][0] == 0:
                ax.semilogx(
                    t["epsilon"],
                    t["accuracy_mean"],
                    "--" if "logistic" in method else ":",
                    color="gray" if "majority" in method else "black",
                    label=method,
                )
                continue
            line = ax.semilogx(t["epsilon"], t["accuracy_mean"], "o-", label=method)[0]
            ax.fill_between(
                t["epsilon"], t["accuracy_min"], t["accuracy_max"], color=line.get_color(), alpha=0.15
            )
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy")
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Private KDE classifiers from one ByClass release; RACE paper Fig. 3")
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
