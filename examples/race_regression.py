"""RACE paper, §4 regression experiment: linear regression from one private RACE sketch, vs ε.

What it reproduces: the RACE paper's private linear regression. One RACE sketch (angular SRP
hashes) is released for the rows ``[x, 1, y]``. The surrogate loss of a parameter θ is a
collision count of the query ``[θ, −1]`` (and its negation, the paper's asymmetric hash). It is
minimised without derivatives (``dps.RACELinearRegression``), all as post-processing. The figure
plots test MSE relative to non-private least squares as ε grows. The error levels off at the
LSH variance of the surrogate, not at zero, as the paper's own figure does.

Setting (full run): n = 20 000 training rows and 5 000 test rows, p = 3 features uniform in
[−1, 1], y = xᵀ[0.5, −0.3, 0.2] + 0.1 + N(0, 0.1²), public box x ∈ [−1, 1]^3 and y ∈ [−2, 2]. The
sketch is RACE with R = 2 000 rows and 8 buckets (3 sign bits). Noise is Gaussian at
(ε, δ = 10⁻⁶), which the docs recommend because its scale does not grow with R, and Laplace at ε.
ε ∈ {0.1, 0.3, 1, 3, 10}, with 3 releases each. The reference is ordinary least squares on the
same data. ``--quick``: n = 4 000, R = 400, ε ∈ {1}, 1 release.

Usage: ``python examples/race_regression.py [--quick] [--out DIR]``
Writes ``DIR/race_regression.png`` and ``.csv`` (columns: noise, epsilon, test_mse, mse_ratio,
releases); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
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

NAME = "race_regression"
FULL = {"n": 20_000, "rows": 2000, "eps": [0.1, 0.3, 1.0, 3.0, 10.0], "releases": 3}
QUICK = {"n": 4_000, "rows": 400, "eps": [1.0], "releases": 1}
BETA, INTERCEPT = np.array([0.5, -0.3, 0.2]), 0.1


def data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, X @ BETA + INTERCEPT + rng.normal(0, 0.1, n)


def run(cfg: dict) -> pl.DataFrame:
    X, y = data(cfg["n"], 0)
    Xt, yt = data(5_000, 1)
    ols = np.linalg.lstsq(np.column_stack([X, np.ones(len(X))]), y, rcond=None)[0]
    ols_mse = float(np.mean((np.column_stack([Xt, np.ones(len(Xt))]) @ ols - yt) ** 2))
    fm = dps.RACE(dim=5, rows=cfg["rows"], buckets=8, family="srp", seed=1)
    Z = np.column_stack([X, np.ones(len(X)), y])
    bounds = ([-1, -1, -1, 0, -2], [1, 1, 1, 1, 2])
    rows = [
        {
            "noise": "non-private least squares",
            "epsilon": eps,
            "test_mse": ols_mse,
            "mse_ratio": 1.0,
            "releases": 1,
        }
        for eps in cfg["eps"]
    ]
    for noise in ("gaussian", "laplace"):
        for eps in cfg["eps"]:
            mses = []
            for r in range(cfg["releases"]):
                budget = {"epsilon": eps, "delta": 1e-6} if noise == "gaussian" else {"epsilon": eps}
                sk = dps.release_sketch(Z, fm, bounds=bounds, **budget)
                reg = dps.RACELinearRegression(coef_bounds=(-2, 2), fit_intercept=True, seed=r).fit(sk)
                mses.append(float(np.mean((reg.predict(Xt) - yt) ** 2)))
            rows.append(
                {
                    "noise": f"RACE, {noise}",
                    "epsilon": eps,
                    "test_mse": float(np.mean(mses)),
                    "mse_ratio": float(np.mean(mses)) / ols_mse,
                    "releases": len(mses),
                }
            )
            print(f"{noise} ε={eps:g}: test MSE / OLS = {rows[-1]['mse_ratio']:.2f}", flush=True)
    return pl.DataFrame(rows)


def plot(table: pl.DataFrame, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for (noise,), part in table.group_by("noise", maintain_order=True):
        ax.plot(part["epsilon"], part["mse_ratio"], marker="o", label=noise)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="ε",
        ylabel="test MSE / least-squares MSE",
        title="linear regression from one RACE sketch",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args()
    require_matplotlib()
    dp.enable_features("contrib", "honest-but-curious")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table = run(QUICK if args.quick else FULL)
    table.write_csv(out / f"{NAME}.csv")
    plot(table, out / f"{NAME}.png")
    print(table)
    print(f"wrote {out / NAME}.png and .csv in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
