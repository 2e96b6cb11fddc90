"""CKM paper, Fig. 1: k-means from one private sketch, relative SSE vs ε, next to DP-Lloyd.

What it reproduces: Schellekens et al., "Compressive k-Means with Differential Privacy", Fig. 1 —
the privacy-utility trade-off of compressive k-means (a Laplace-noised random-Fourier sketch,
decoded by CL-OMPR) against DP-Lloyd: SSE relative to non-private k-means, as a function of ε.
Compressive k-means stays close to 1 down to small ε, where DP-Lloyd, which spends its budget
over several passes, degrades much earlier.

Setting (full run): k = d = 10, Gaussian mixture with identity covariances and centres
N(0, (2.5·k^{1/d})² I); **n = 200 000** (the paper uses 10⁷; ``benchmarks/bench_ckm.py`` runs
10⁶ and 10⁷), public box [-20, 20]^10, sketch ``dps.estimators.compressive_feature_map(box, k)``
(m' = 10kd = 1000 frequencies, bandwidth from the box alone), ε ∈ {0.001, 0.01, 0.1, 1, 10},
3 trials (fresh mixture each), median and worst. Reference SSE: Lloyd's algorithm
(``scipy.cluster.vq.kmeans2``, k-means++ starts, best of 3). DP-Lloyd: 7 iterations, ε/7 each,
split between noisy per-cluster counts and sums (OpenDP Laplace), centres started at random in
the box. ``--quick``: k = 3, d = 2, n = 20 000, ε ∈ {0.1, 1}, 1 trial.

Usage: ``python examples/ckm_fig1_kmeans.py [--quick] [--out DIR]``
Writes ``DIR/ckm_fig1_kmeans.png`` and ``.csv`` (columns: method, epsilon, relative_sse_median,
relative_sse_worst, trials); DIR defaults to ``./opendp-sketch-output`` (``examples/output`` holds the committed reference runs).
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import opendp.prelude as dp
import polars as pl
from _setup import DEFAULT_OUT, require_matplotlib  # noqa: E402 - examples/ is on sys.path when run
from scipy.cluster.vq import kmeans2

import opendp_sketch as dps

NAME = "ckm_fig1_kmeans"
FULL = {"n": 200_000, "k": 10, "d": 10, "box": 20.0, "eps": [1e-3, 1e-2, 0.1, 1.0, 10.0], "trials": 3}
QUICK = {"n": 20_000, "k": 3, "d": 2, "box": 10.0, "eps": [0.1, 1.0], "trials": 1}
LLOYD_ITERS = 7


def sse(X: np.ndarray, centres: np.ndarray) -> float:
    c2 = (centres**2).sum(1)
    return float(sum(((B**2).sum(1) + (c2 - 2 * B @ centres.T).min(1)).sum() for B in np.array_split(X, 20)))


def dp_lloyd(X: np.ndarray, k: int, box: float, eps: float, rng: np.random.Generator) -> np.ndarray:
    """SuLQ k-means: each iteration releases noisy cluster counts and coordinate sums."""
    n, d = X.shape
    centres = rng.uniform(-box, box, (k, d))
    vec = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    eps_t = eps / LLOYD_ITERS
    counts_m = dp.m.make_laplace(vec, dp.l1_distance(T=float), 2.0 / eps_t)  # L1 sensitivity 1
    sums_m = dp.m.make_laplace(vec, dp.l1_distance(T=float), 2.0 * d * box / eps_t)  # Σ_j |x_j| ≤ d·box
    for _ in range(LLOYD_ITERS):
        lab = ((centres**2).sum(1) - 2 * X @ centres.T).argmin(1)
        counts = np.bincount(lab, minlength=k).astype(float)
        sums = np.stack([np.bincount(lab, weights=X[:, j], minlength=k) for j in range(d)], axis=1)
        nc = np.asarray(counts_m(counts.tolist()))
        ns = np.asarray(sums_m(sums.ravel().tolist())).reshape(k, d)
        ok = nc >= 1
        centres[ok] = np.clip(ns[ok] / nc[ok, None], -box, box)
    return centres


def run(cfg: dict) -> pl.DataFrame:
    n, k, d, box = cfg["n"], cfg["k"], cfg["d"], cfg["box"]
    bounds = ([-box] * d, [box] * d)
    fm = dps.estimators.compressive_feature_map(bounds, k)
    results: dict[tuple[str, float], list[float]] = {}
    for t in range(cfg["trials"]):
        rng = np.random.default_rng([2019, t])
        mu = rng.normal(0.0, 2.5 * k ** (1.0 / d), (k, d))
        X = np.clip(mu[rng.integers(0, k, n)] + rng.normal(size=(n, d)), -box, box)
        np.random.seed(t)  # kmeans2's k-means++ starts draw from numpy's global generator
        ref = min(sse(X, kmeans2(X, k, minit="++", iter=50)[0]) for _ in range(3))
        for eps in cfg["eps"]:
            sk = dps.release_sketch(X, fm, bounds=bounds, epsilon=eps)
            try:
                centres = dps.CompressiveKMeans(k, seed=t).fit(sk).cluster_centers_
            except ValueError:  # a non-positive noisy count at tiny ε: nothing to decode
                centres = np.zeros((k, d))
            results.setdefault(("compressive k-means", eps), []).append(sse(X, centres) / ref)
            lloyd = dp_lloyd(X, k, box, eps, np.random.default_rng([7, t]))
            results.setdefault(("DP-Lloyd", eps), []).append(sse(X, lloyd) / ref)
            print(
                f"trial {t} ε={eps:g}: CKM {results[('compressive k-means', eps)][-1]:.3f}, "
                f"DP-Lloyd {results[('DP-Lloyd', eps)][-1]:.3f}",
                flush=True,
            )
    return pl.DataFrame(
        [
            {
                "method": m,
                "epsilon": e,
                "relative_sse_median": float(np.median(v)),
                "relative_sse_worst": float(np.max(v)),
                "trials": len(v),
            }
            for (m, e), v in results.items()
        ]
    ).sort("method", "epsilon")


def plot(table: pl.DataFrame, cfg: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for (method,), part in table.group_by("method", maintain_order=True):
        ax.plot(part["epsilon"], part["relative_sse_median"], marker="o", label=f"{method} (median)")
        ax.fill_between(part["epsilon"], 1.0, part["relative_sse_worst"], alpha=0.12)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="ε",
        ylabel="SSE / SSE(k-means)",
        title=f"k = {cfg['k']}, d = {cfg['d']}, n = {cfg['n']:,} (shaded: up to the worst trial)",
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
    cfg = QUICK if args.quick else FULL
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    table = run(cfg)
    table.write_csv(out / f"{NAME}.csv")
    plot(table, cfg, out / f"{NAME}.png")
    print(table)
    print(f"wrote {out / NAME}.png and .csv in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
