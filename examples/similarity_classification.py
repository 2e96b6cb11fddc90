"""Private-similarity paper, §11.3: classification from one private sketch, accuracy and speed.

What it reproduces: the private-similarity paper's DP classification experiment (its Figs. 3
and 4). A private similarity structure per class — all classes in one ``ByClass`` release, one
budget, because each row touches only its own class — classifies held-out embeddings; building
it is one pass over the data, so it is orders of magnitude faster than training a model, and its
accuracy approaches the non-private one as ε grows. The paper's data (CIFAR-10 embeddings of a
pre-trained network) and its DP-SGD baselines are not reproduced; generated 64-dimensional
unit-norm "embeddings" in 10 classes stand in for the data, and the baselines are non-private:
the nearest class mean and a softmax regression trained with L-BFGS on the same rows. All times
are measured in the same run and reported as ratios to the softmax regression's training time.

Methods:

* nearest noisy mean (the paper's choice, an ℓ2² structure per class):
  ``ByClass(Moments(dim=64, radius=1, squared_norm=False), 10)`` + ``NearestMeanClassifier``;
* KDE classifier: ``ByClass(RFF(dim=64, num_features=1000, bandwidth=1), 10)`` +
  ``KDEClassifier`` (MAP rule: argmax of noisy class size × class density).

Setting (full run): 50,000 training and 10,000 test rows (10 class centres on the unit sphere,
isotropic noise, rows normalised to unit length; public bounds (−1, 1) per coordinate),
ε ∈ {0.03, 0.1, 0.3, 1, 3, 10}, 3 releases each; OpenDP discrete Laplace noise, budget split
0.98 / 0.02 (sum / count). Times: median over the releases of ``release_sketch`` + ``fit``
(build) and of ``predict`` on the test rows.
``--quick``: 5,000 / 1,000 rows, ε ∈ {1, 10}, 1 release, RFF with 200 features.

Usage: ``python examples/similarity_classification.py [--quick] [--out DIR]``
Writes ``DIR/similarity_classification.png`` and ``.csv`` (columns: method, epsilon,
accuracy_mean, accuracy_min, accuracy_max, build_seconds, predict_seconds, build_ratio,
releases; ``build_ratio`` = build time ÷ the softmax regression's training time in the same
run); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
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

NAME = "similarity_classification"
FULL = {
    "n": 50_000,
    "test": 10_000,
    "d": 64,
    "m": 1000,
    "eps": [0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
    "releases": 3,
}
QUICK = {"n": 5_000, "test": 1_000, "d": 64, "m": 200, "eps": [1.0, 10.0], "releases": 1}
CLASSES = 10


def embeddings(
    n: int, d: int, rng: np.random.Generator, centres: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, CLASSES, n)
    X = centres[y] + rng.normal(0.0, 0.3, size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True), y


def softmax_regression(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    Z = np.column_stack([X, np.ones(len(X))])
    Y = np.eye(CLASSES)[y]

    def loss(flat: np.ndarray) -> tuple[float, np.ndarray]:
        W = flat.reshape(Z.shape[1], CLASSES)
        logits = Z @ W
        logp = logits - scipy.special.logsumexp(logits, axis=1, keepdims=True)
        grad = Z.T @ (np.exp(logp) - Y) / len(y) + 1e-4 * W
        return float(-np.mean(np.sum(Y * logp, axis=1)) + 0.5e-4 * np.sum(W**2)), grad.ravel()

    res = scipy.optimize.minimize(loss, np.zeros(Z.shape[1] * CLASSES), jac=True, method="L-BFGS-B")
    return res.x.reshape(Z.shape[1], CLASSES)


def run(cfg: dict) -> pl.DataFrame:
    rng = np.random.default_rng(6)
    d = cfg["d"]
    centres = rng.normal(size=(CLASSES, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X, y = embeddings(cfg["n"], d, rng, centres)
    X_test, y_test = embeddings(cfg["test"], d, rng, centres)
    data = np.column_stack([X, y])
    box = ([-1.0] * d + [0], [1.0] * d + [CLASSES - 1])

    t0 = time.perf_counter()
    W = softmax_regression(X, y)
    lr_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    lr_acc = float(np.mean(np.argmax(np.column_stack([X_test, np.ones(len(X_test))]) @ W, axis=1) == y_test))
    lr_predict = time.perf_counter() - t0
    t0 = time.perf_counter()
    means = np.stack([X[y == c].mean(axis=0) for c in range(CLASSES)])
    nm_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    nm_acc = float(
        np.mean(np.argmin(((X_test[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1) == y_test)
    )
    nm_predict = time.perf_counter() - t0
    print(f"non-private softmax regression: accuracy {lr_acc:.3f}, training {lr_train:.2f} s", flush=True)
    print(f"non-private nearest mean: accuracy {nm_acc:.3f}", flush=True)

    methods = {
        "private nearest noisy mean": (
            dps.ByClass(dps.Moments(dim=d, radius=1.0, squared_norm=False), CLASSES),
            dps.NearestMeanClassifier,
        ),
        "private KDE classifier (RFF)": (
            dps.ByClass(dps.RFF(dim=d, num_features=cfg["m"], bandwidth=1.0, seed=0), CLASSES),
            dps.KDEClassifier,
        ),
    }
    rows = []
    for name, (fm, model) in methods.items():
        for eps in cfg["eps"]:
            acc, build, predict = [], [], []
            for _ in range(cfg["releases"]):
                t0 = time.perf_counter()
                clf = model().fit(dps.release_sketch(data, fm, bounds=box, epsilon=eps))
                build.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                pred = clf.predict(X_test)
                predict.append(time.perf_counter() - t0)
                acc.append(float(np.mean(pred == y_test)))
            rows.append(
                {
                    "method": name,
                    "epsilon": eps,
                    "accuracy_mean": float(np.mean(acc)),
                    "accuracy_min": min(acc),
                    "accuracy_max": max(acc),
                    "build_seconds": float(np.median(build)),
                    "predict_seconds": float(np.median(predict)),
                    "releases": len(acc),
                }
            )
            print(
                f"{name:29s} ε={eps:<5g} accuracy {np.mean(acc):.3f}, build {np.median(build):.2f} s",
                flush=True,
            )
    for name, value, b, p in (
        ("non-private softmax regression", lr_acc, lr_train, lr_predict),
        ("non-private nearest mean", nm_acc, nm_build, nm_predict),
    ):
        rows += [
            {
                "method": name,
                "epsilon": eps,
                "accuracy_mean": value,
                "accuracy_min": value,
                "accuracy_max": value,
                "build_seconds": b,
                "predict_seconds": p,
                "releases": 0,
            }
            for eps in cfg["eps"]
        ]
    table = pl.DataFrame(rows)
    return table.with_columns(build_ratio=pl.col("build_seconds") / lr_train).select(
        "method",
        "epsilon",
        "accuracy_mean",
        "accuracy_min",
        "accuracy_max",
        "build_seconds",
        "predict_seconds",
        "build_ratio",
        "releases",
    )


def plot(table: pl.DataFrame, path: pathlib.Path, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11.5, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    ratios = {}
    for method in table["method"].unique(maintain_order=True):
        t = table.filter(pl.col("method") == method)
        ratios[method] = float(t["build_ratio"].median())
        if t["releases"][0] == 0:
            ax.semilogx(
                t["epsilon"],
                t["accuracy_mean"],
                "--" if "softmax" in method else ":",
                color="black",
                label=method,
            )
            continue
        line = ax.semilogx(t["epsilon"], t["accuracy_mean"], "o-", label=method)[0]
        ax.fill_between(
            t["epsilon"], t["accuracy_min"], t["accuracy_max"], color=line.get_color(), alpha=0.15
        )
    ax.set_xlabel("ε")
    ax.set_ylabel("test accuracy (10 classes)")
    ax.set_title(f"(a) accuracy, n = {n:,} training rows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    bx.barh(list(ratios), list(ratios.values()), color="tab:gray")
    bx.set_xscale("log")
    bx.axvline(1.0, color="black", lw=0.8)
    bx.set_xlabel("build time ÷ softmax regression training time")
    bx.set_title("(b) time to build (same run)")
    bx.tick_params(axis="y", labelsize=8)
    fig.suptitle("Private classification from one ByClass release; private-similarity paper §11.3")
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
