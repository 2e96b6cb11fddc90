"""M2M paper, Fig. 4: logistic regression trained from one private sketch, test AUC vs ε.

What it reproduces: the M2M paper's Fig. 4 — implicit M2M (weighted empirical risk minimisation on
M2M's weighted prior samples, ``dps.SketchLogisticRegression``) fits a logistic regression from RFF,
RACE and Histogram sketches of (features, label), and its test AUC approaches the non-private fit
as ε grows, while Histogram marginals cannot represent the label's dependence on the features.
The paper's occupancy data (n = 20,560, 5 features + a binary label, AUC > 0.99) are not
bundled; a generated stand-in of the same shape is used.

Setting (full run):

* Data: 5 features in [0, 1] drawn given the label from two correlated Gaussians (label 1 with
  probability 0.23, as in occupancy), clipped to the box; 20,560 rows, 90 % train / 10 % test
  (the paper's split).
* Sketches of (features, label) over the box [0, 1]⁶: ``RFF(dim=6, num_features=200,
  bandwidth=1)`` (the paper's), ``ByClass(RFF(dim=5, num_features=200, bandwidth=1), 2)``,
  ``RACE(dim=6, rows=40, buckets=40, bucket_width=0.5)`` (the paper: 80 × 80, σ = 0.1 — smaller
  here to keep M2M's Gram matrix to seconds) and ``Histogram(bins=20)`` (the paper's).
  OpenDP discrete Laplace noise, budget split 0.98 / 0.02 (sum / count).
* ``SketchLogisticRegression(m2m_options={"n_samples": 40_000})``; the label is drawn from {0, 1}.
* ε ∈ {0.03, 0.1, 0.3, 1, 3, 10, 100}, 5 releases each (the paper: 10). Reference: a non-private
  logistic regression on the same training rows (scipy L-BFGS). The paper's DP-ERM and
  synthetic-data baselines are not run.

``--quick``: 3,000 rows, small maps, ε ∈ {1, 10}, 1 release.

Usage: ``python examples/m2m_fig4_logistic.py [--quick] [--out DIR]``
Writes ``DIR/m2m_fig4_logistic.png`` and ``.csv`` (columns: sketch, epsilon, auc_mean, auc_min,
auc_max, releases); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
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
import scipy.stats
from _setup import DEFAULT_OUT, require_matplotlib  # noqa: E402 - examples/ is on sys.path when run

import opendp_sketch as dps

NAME = "m2m_fig4_logistic"
FULL = {
    "n": 20_560,
    "eps": [0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0],
    "releases": 5,
    "ns": 40_000,
    "m": 200,
    "race": 40,
    "bins": 20,
}
QUICK = {"n": 3_000, "eps": [1.0, 10.0], "releases": 1, "ns": 4_000, "m": 40, "race": 8, "bins": 5}


def occupancy_like(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.uniform(size=n) < 0.23).astype(float)
    centres = np.array([[0.3, 0.4, 0.5, 0.25, 0.45], [0.7, 0.55, 0.45, 0.65, 0.55]])
    mix = np.array(
        [
            [0.12, 0, 0, 0, 0],
            [0.05, 0.1, 0, 0, 0],
            [0, 0.03, 0.12, 0, 0],
            [0.06, 0, 0.02, 0.1, 0],
            [0, 0.04, 0.05, 0, 0.1],
        ]
    )
    X = centres[y.astype(int)] + rng.normal(size=(n, 5)) @ mix.T
    return np.clip(X, 0.0, 1.0), y


def auc(y: np.ndarray, score: np.ndarray) -> float:
    r = scipy.stats.rankdata(score)
    pos = y.sum()
    return float((r[y == 1].sum() - pos * (pos + 1) / 2) / (pos * (len(y) - pos)))


def nonprivate_scores(X: np.ndarray, y: np.ndarray, X_test: np.ndarray) -> np.ndarray:
    Z = np.column_stack([X, np.ones(len(X))])

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = Z @ theta
        return float(np.mean(np.logaddexp(0.0, eta) - y * eta)), Z.T @ (scipy.special.expit(eta) - y) / len(y)

    theta = scipy.optimize.minimize(loss, np.zeros(Z.shape[1]), jac=True, method="L-BFGS-B").x
    return X_test @ theta[:-1]


def run(cfg: dict) -> tuple[pl.DataFrame, float]:
    X, y = occupancy_like(cfg["n"], np.random.default_rng(4))
    cut = int(0.9 * cfg["n"])
    train = np.column_stack([X[:cut], y[:cut]])
    X_test, y_test = X[cut:], y[cut:]
    reference = auc(y_test, nonprivate_scores(X[:cut], y[:cut], X_test))
    print(f"non-private logistic regression: test AUC {reference:.3f}", flush=True)
    m = cfg["m"]
    maps = {
        "RFF": dps.RFF(dim=6, num_features=m, bandwidth=1.0, seed=0),
        "ByClass(RFF)": dps.ByClass(dps.RFF(dim=5, num_features=m, bandwidth=1.0, seed=0), num_classes=2),
        "RACE": dps.RACE(dim=6, rows=cfg["race"], buckets=cfg["race"], bucket_width=0.5, seed=0),
        "Histogram": dps.Histogram(bounds=(0.0, 1.0), bins=cfg["bins"], dim=6),
    }
    rows = []
    for name, fm in maps.items():
        for eps in cfg["eps"]:
            aucs = []
            for _ in range(cfg["releases"]):
                sk = dps.release_sketch(train, fm, bounds=(0.0, 1.0), epsilon=eps)
                clf = dps.SketchLogisticRegression(m2m_options={"n_samples": cfg["ns"]}).fit(sk)
                aucs.append(auc(y_test, clf.decision_function(X_test)))
            rows.append(
                {
                    "sketch": name,
                    "epsilon": eps,
                    "auc_mean": float(np.mean(aucs)),
                    "auc_min": float(np.min(aucs)),
                    "auc_max": float(np.max(aucs)),
                    "releases": len(aucs),
                }
            )
            print(f"{name:13s} ε={eps:<6g} test AUC {np.mean(aucs):.3f}", flush=True)
    rows += [
        {
            "sketch": "non-private",
            "epsilon": eps,
            "auc_mean": reference,
            "auc_min": reference,
            "auc_max": reference,
            "releases": 0,
        }
        for eps in cfg["eps"]
    ]
    return pl.DataFrame(rows), reference


def plot(table: pl.DataFrame, path: pathlib.Path, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name in table["sketch"].unique(maintain_order=True):
        t = table.filter(pl.col("sketch") == name)
        if name == "non-private":
            ax.semilogx(t["epsilon"], t["auc_mean"], "k--", label="non-private logistic regression")
            continue
        line = ax.semilogx(t["epsilon"], t["auc_mean"], "o-", label=name)[0]
        ax.fill_between(t["epsilon"], t["auc_min"], t["auc_max"], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("ε")
    ax.set_ylabel("test AUC")
    ax.set_ylim(0.0, 1.02)
    ax.set_title(f"Logistic regression from one private sketch (n = {n:,}); M2M paper Fig. 4")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
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
    table, _ = run(cfg)
    table.write_csv(out / f"{NAME}.csv")
    plot(table, out / f"{NAME}.png", cfg["n"])
    print(f"wrote {out / NAME}.png and .csv in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
