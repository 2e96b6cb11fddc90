"""Feature-subsampled RFF sketches: release time and sketch error against the full RFF map.

Setting (full mode): a Gaussian mixture as in the compressive k-means experiments — k = 10
centres ~ N(0, (2.5·k^{1/d})² I_d), unit covariance, d = 10, n = 10^6 rows
(``np.random.default_rng(DATA_SEED)``), public box [-12, 12]^d (from the generating law, not the
data); RFF with m = 2000 features (m' = 1000 = 10kd frequencies, the compressive k-means size),
Gaussian kernel, bandwidth 3 (= ``opendp_sketch.estimators.compressive_feature_map``'s box rule, mean width / 8).

Maps, all with the same frequencies: the baseline ``dps.RFF`` and
``SubsampledRFF(r)`` for r ∈ {1, m'/10, m'} (r = m' is no subsampling: the same integers as
``RFF``, through the subsampled code path).

Measured for each map, in the same run:

* **release time**: wall time of ``dps.release_sketch(X, fm, bounds, epsilon=1)`` (median of
  ``--repeats`` releases) and of the feature sum alone (``fm.fixed_sum``), each as a ratio to
  the RFF baseline;
* **sketch error** ``‖ẑ − z̄‖₂ / ‖z̄‖₂`` with ``z̄ = (1/n)ΣΦ(xᵢ)`` the exact float64 RFF mean:
  noise-free (the exact subsampled sum, ``fixed_sum``: subsampling error only), Laplace ε = 1
  (the timed releases) and Gaussian (ε = 1, δ = 10⁻⁶), each the root mean square over releases;
  next to each, the prediction ``√NSR`` of ``opendp_sketch.planning.noise_to_signal`` with the
  measured signal ``‖z̄‖²/m'``;
* **k-means**: :func:`kmeans_relative_sse` — relative SSE of ``dps.CompressiveKMeans`` (3
  restarts) decoded from the first Laplace release, against scikit-learn k-means on the data.

Usage: ``python benchmarks/bench_subsampling.py [--quick] [--out-dir DIR] [--repeats R]``
(full mode about 5 minutes on 2 cores; ``--quick``: n = 20 000, m = 200, a few seconds).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_subsampling"
DATA_SEED = 20240706
FULL = {"n": 1_000_000, "m": 2000, "d": 10, "k": 10, "bandwidth": 3.0, "box": 12.0, "eps": 1.0, "delta": 1e-6}
QUICK = {"n": 20_000, "m": 200, "d": 10, "k": 10, "bandwidth": 3.0, "box": 12.0, "eps": 1.0, "delta": 1e-6}


def mixture(n: int, d: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Gaussian mixture of the CKM experiments: centres N(0, (2.5·k^{1/d})² I), unit covariance."""
    centres = rng.normal(0.0, 2.5 * k ** (1.0 / d), (k, d))
    return centres[rng.integers(0, k, n)] + rng.normal(size=(n, d))


def exact_mean(fm: Any, X: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """``(1/n) Σ Φ(xᵢ)`` in float64 (plain RFF features), in chunks to bound memory."""
    total = np.zeros(fm.num_features)
    for s in range(0, X.shape[0], chunk):
        total += fm.transform(X[s : s + chunk]).sum(axis=0)
    return total / X.shape[0]


def rel_err(z_hat: np.ndarray, z_bar: np.ndarray) -> float:
    return float(np.linalg.norm(z_hat - z_bar) / np.linalg.norm(z_bar))


_LLOYD_SSE: dict[int, float] = {}


def _sse(X: np.ndarray, centres: np.ndarray) -> float:
    c2 = (centres**2).sum(1)
    return float(sum(((B**2).sum(1) + (c2 - 2 * B @ centres.T).min(1)).sum() for B in np.array_split(X, 50)))


def kmeans_relative_sse(sketch: Any, X: np.ndarray, k: int) -> float | None:
    """SSE of the centres ``dps.CompressiveKMeans`` decodes from ``sketch`` (a subsampled map is
    decoded with the plain atoms of ``sketch.feature_map.base_map``) divided by the SSE of
    scikit-learn's ``KMeans(k, n_init=3)`` on ``X`` (computed once per data set)."""
    from sklearn.cluster import KMeans

    import opendp_sketch as dps

    if id(X) not in _LLOYD_SSE:
        _LLOYD_SSE[id(X)] = float(KMeans(k, n_init=3, random_state=0).fit(X).inertia_)
    centres = dps.CompressiveKMeans(k, n_restarts=3).fit(sketch).cluster_centers_
    return _sse(X, centres) / _LLOYD_SSE[id(X)]


def run(cfg: dict, repeats: int, args: Any) -> tuple[list[dict], dict]:
    import opendp_sketch as dps
    from opendp_sketch.features.subsampled import SubsampledRFF
    from opendp_sketch.planning import noise_to_signal

    n, m, d, k = cfg["n"], cfg["m"], cfg["d"], cfg["k"]
    mp = m // 2
    rng = np.random.default_rng(DATA_SEED)
    bounds = (-cfg["box"], cfg["box"])
    X = np.clip(mixture(n, d, k, rng), *bounds)
    base = dps.RFF(dim=d, num_features=m, bandwidth=cfg["bandwidth"], seed=0)
    z_bar = exact_mean(base, X)
    signal = float(z_bar @ z_bar) / mp
    C.progress(f"n={n:,} m={m} d={d}: signal ‖z̄‖²/m' = {signal:.4f}")
    maps = [("RFF (baseline)", base, mp)] + [
        (
            f"SubsampledRFF r = {r}",
            SubsampledRFF(dim=d, num_features=m, bandwidth=cfg["bandwidth"], seed=0, r=r),
            r,
        )
        for r in (1, mp // 10, mp)
    ]
    rows: list[dict] = []
    for label, fm, r in maps:

        def measure_sum(fm=fm):
            with C.Probe() as p:
                s = fm.fixed_sum(X)
            return (p.wall, s), p.background_cores

        (t_sum, exact), bg_sum = C.quiet_measure(measure_sum, args)
        free = np.array(exact, dtype=np.float64) * fm.unit / n

        def measure_releases(fm=fm):
            times, sketches = [], []
            with C.Probe() as p:
                for _ in range(repeats):
                    t, sk = C.time_call(lambda: dps.release_sketch(X, fm, bounds=bounds, epsilon=cfg["eps"]))
                    times.append(t)
                    sketches.append(sk)
            return (times, sketches), p.background_cores

        (times, lap), bg = C.quiet_measure(measure_releases, args)
        gauss = [
            dps.release_sketch(X, fm, bounds=bounds, epsilon=cfg["eps"], delta=cfg["delta"])
            for _ in range(repeats)
        ]
        pred_lap = noise_to_signal(mp, n, mechanism="laplace", budget=cfg["eps"], r=r, signal=signal)["nsr"]
        rho_used = _rho_of(gauss[0], fm)
        pred_gauss = noise_to_signal(mp, n, mechanism="gaussian", budget=rho_used, r=r, signal=signal)["nsr"]
        row = {
            "label": label,
            "r": r,
            "B": mp // r,
            "release_s": C.median(times),
            "sum_s": t_sum,
            "err_free": rel_err(free, z_bar),
            "pred_free": float(np.sqrt((mp / r - 1) / (signal * n))),
            "err_lap": float(np.sqrt(np.mean([rel_err(sk.mean, z_bar) ** 2 for sk in lap]))),
            "pred_lap": float(np.sqrt(pred_lap)),
            "err_gauss": float(np.sqrt(np.mean([rel_err(sk.mean, z_bar) ** 2 for sk in gauss]))),
            "pred_gauss": float(np.sqrt(pred_gauss)),
            "kmeans": kmeans_relative_sse(lap[0], X, k),
            "bg": max(v for v in (bg, bg_sum, 0.0) if v is not None),
            "rho": rho_used,
        }
        rows.append(row)
        C.progress(
            f"{label}: release {row['release_s']:.2f} s, sum {t_sum:.2f} s, errors free {row['err_free']:.2e} "
            f"laplace {row['err_lap']:.2e} (pred {row['pred_lap']:.2e}) gauss {row['err_gauss']:.2e} "
            f"(pred {row['pred_gauss']:.2e})"
        )
    return rows, {"signal": signal}


def _rho_of(sketch: Any, fm: Any) -> float:
    """The ρ of a Gaussian release, from its noise scales: ρ = Δ₂²/(2σ²) + 1/(2σ_c²)."""
    sigma = sketch.noise["sum_scale"] * fm.gain  # scale of Σ Φ̃, whose sensitivity is fm.sensitivity(2)
    return fm.sensitivity(2) ** 2 / (2 * sigma**2) + 1 / (2 * sketch.noise["count_scale"] ** 2)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=3)
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    t0 = time.perf_counter()
    rows, extra = run(cfg, args.repeats, args)
    elapsed = time.perf_counter() - t0
    base = rows[0]
    mp = cfg["m"] // 2
    table = C.md_table(
        [
            "configuration",
            "r",
            "B = m'/r",
            "release (s)",
            "release / RFF",
            "feature sum (s)",
            "sum / RFF",
            "error, noise-free",
            "pred.",
            "error, Laplace ε=1",
            "pred.",
            "error, Gaussian (1, 1e-6)",
            "pred.",
            "k-means rel. SSE",
            "other CPU (cores)",
        ],
        [
            [
                r["label"],
                r["r"],
                r["B"],
                C.fmt(r["release_s"]),
                C.fmt(r["release_s"] / base["release_s"]),
                C.fmt(r["sum_s"]),
                C.fmt(r["sum_s"] / base["sum_s"]),
                C.fmt(r["err_free"]),
                C.fmt(r["pred_free"]),
                C.fmt(r["err_lap"]),
                C.fmt(r["pred_lap"]),
                C.fmt(r["err_gauss"]),
                C.fmt(r["pred_gauss"]),
                "–" if r["kmeans"] is None else C.fmt(r["kmeans"]),
                C.fmt(r["bg"]),
            ]
            for r in rows
        ],
    )
    body = f"""## Setting

n = {cfg["n"]:,} rows of a {cfg["k"]}-component Gaussian mixture in d = {cfg["d"]} (CKM protocol),
clipped to the public box [−{cfg["box"]:g}, {cfg["box"]:g}]^d; m = {cfg["m"]} features (m' = {mp}
frequencies), Gaussian kernel, bandwidth {cfg["bandwidth"]:g}, seed 0 for every map (same
frequencies). Signal ‖z̄‖²/m' = {extra["signal"]:.4f} (measured on the data; the planner's default
would be 1/k = {1 / cfg["k"]:g}). {args.repeats} releases per map and mechanism; release times are
medians over the Laplace releases (each includes OpenDP's scale search and the sum); the feature
sum is one `fm.fixed_sum(X)` call. Errors are ‖ẑ − z̄‖/‖z̄‖ (root mean square over releases),
z̄ = exact float64 mean of the plain RFF features; "pred." is √NSR from
`planning.noise_to_signal` with the measured signal (the noise-free prediction is the
subsampling term alone). Gaussian releases use OpenDP's zCDP → (ε, δ) conversion
(ρ = {rows[0]["rho"]:.4g}). Total run time {elapsed:.0f} s.

## Results

{table}

Reading: the error is the root sum of squares of a subsampling term, √((m'/r − 1)/(signal·n)),
and a noise term. The Laplace noise scale √2·m'/ε is the same for every r, so the Laplace noise
term does not change with r. The Gaussian noise standard deviation grows by √(m'/r), so the
Gaussian noise term grows by that factor. Whenever r < m' here, the subsampling term is the
larger one. The timings are wall clock on a shared 2-core machine; the last column shows how
much CPU other processes used meanwhile. The k-means column decodes the first ε = 1 Laplace
release with `dps.CompressiveKMeans` (3 restarts) and divides its SSE by scikit-learn k-means on
the data: the subsampling error shows up here as well.
"""
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, rows, mp)
    body += f"\nPlot: `{png.name}`.\n"
    C.write_report(
        od / f"{NAME}.md",
        f"Feature-subsampled RFF sketches (n = {cfg['n']:,}, m = {cfg['m']})",
        info,
        body,
        args.quick,
    )


def _plot(path: Path, rows: list[dict], mp: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = [r for r in rows if r["label"] != "RFF (baseline)"]
    rs = np.array([r["r"] for r in sub], dtype=float)
    base = rows[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    ax.loglog(rs, [r["release_s"] / base["release_s"] for r in sub], "o-", label="release / RFF release")
    ax.loglog(rs, [r["sum_s"] / base["sum_s"] for r in sub], "s-", label="feature sum / RFF feature sum")
    ax.loglog(rs, rs / mp, "k:", label="r/m'")
    ax.set_xlabel("r (frequencies per row)")
    ax.set_ylabel("time ratio")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, pred, style, label in (
        ("err_free", "pred_free", "o", "noise-free"),
        ("err_lap", "pred_lap", "s", "Laplace ε = 1"),
        ("err_gauss", "pred_gauss", "^", "Gaussian (1, 1e-6)"),
    ):
        line = ax.loglog(rs, [max(r[key], 1e-12) for r in sub], style + "-", label=f"{label}, measured")[0]
        ax.loglog(
            rs, [max(r[pred], 1e-12) for r in sub], ":", color=line.get_color(), label=f"{label}, predicted"
        )
    ax.set_xlabel("r (frequencies per row)")
    ax.set_ylabel("‖ẑ − z̄‖ / ‖z̄‖")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle("SubsampledRFF vs RFF (same frequencies)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
