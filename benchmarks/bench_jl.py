"""JL projection before a private KDE sketch on 2048-dimensional clustered vectors, and smooth kernels.

Setting (full mode):

* **Data**: n = 20,000 training and 200 held-out query vectors in d = 2048 from 10 Gaussian
  clusters: centres μ_c are random unit vectors, a point is μ_c + s·z/√d (z ~ N(0, I), s = 0.5),
  then normalised to unit length (like embeddings), so the public box is [−1, 1]^d
  (``np.random.default_rng(DATA_SEED)``).
* **Bandwidth from public information**: the data are unit vectors with a relative within-cluster
  spread s = 0.5. That spread is known from the embedding model, not read off the data. Two
  points of one cluster are then at squared distance ≈ 2s²/(1 + s²) = 0.4, so
  σ = √0.4 ≈ 0.63 (the typical within-cluster distance). The kernel is exp(−‖x − q‖²/(2σ²)).
  Since E‖Gx/√k‖² = ‖x‖², the same σ is used in the projected space.
* **Sketches**: ``RFF(num_features=1000, bandwidth=σ)``, released with discrete Laplace noise
  at ε = 1 (budget split 0.98 / 0.02 between the sum and the count).
  *Projected*: ``make_box_clip >> then_jl_projection(k) >> then_private_sketch`` with the scale
  found by ``dp.binary_search_chain``, for k ∈ {32, 64, 128, 256, 512}, with an RFF of dim k.
  *Direct*: ``dps.release_sketch`` of an RFF in 2048 dimensions. Each of the ``--repeats``
  releases uses seed r for G and for the RFF frequencies, and fresh OpenDP noise.
* **Metrics**: relative error |K̂(q) − K(q)| / K(q) and absolute error |K̂(q) − K(q)|, averaged
  over the 200 queries and the releases, where K is the exact Gaussian KDE in the **original**
  2048-dimensional space. The "JL only" column is the exact KDE of the projected data and queries
  (no sketch, no noise). Construction = the whole release (clip, projection, binary search for
  the scale, feature sum, noise), median over releases; the configurations are interleaved in
  each round so that a disturbance from other processes hits them alike. Query = projecting the
  200 queries and evaluating the KDE (median of 5, interleaved, one BLAS thread).
* **Smooth kernels**: certified error of ``smooth_kernel_terms(J, T)``. The smooth-KDE accuracy
  uses k = 64 projected data, h = √2·σ, T = 100 (a public choice: unit vectors are within
  distance 2 of each other, so t ≤ 4/h² ≈ 5 even with JL distortion), J = 4 and 8 RFF maps of
  m = 1000 each; ``release_smooth_sketches`` with ``projection=``.

Usage: ``python benchmarks/bench_jl.py [--quick] [--out-dir DIR] [--repeats R]``
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_jl"
DATA_SEED = 20240614
SPREAD = 0.5
QUERY_NOTE = (
    "Query times are measured with BLAS limited to one thread (threadpoolctl). Queries are small "
    "products, and on a busy 2-core machine a multi-threaded OpenBLAS call of that size stalls "
    "for about 10 ms in thread hand-off (measured: 9 ms instead of 0.1 ms for 50×256 @ 256×100), "
    "which would swamp the arithmetic. Construction uses the default threads."
)
FULL = {
    "n": 20_000,
    "d": 2048,
    "clusters": 10,
    "queries": 200,
    "m": 1000,
    "ks": [32, 64, 128, 256, 512],
    "eps": 1.0,
    "smooth_k": 64,
    "smooth_terms": [4, 8],
    "terms_J": [2, 4, 6, 8, 10, 12],
    "terms_T": [10.0, 100.0, 1000.0],
}
QUICK = {
    "n": 2_000,
    "d": 256,
    "clusters": 10,
    "queries": 50,
    "m": 200,
    "ks": [16, 32, 64],
    "eps": 1.0,
    "smooth_k": 32,
    "smooth_terms": [4],
    "terms_J": [4, 8],
    "terms_T": [100.0],
}


def make_data(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors from Gaussian clusters: training rows and held-out queries."""
    rng = np.random.default_rng(DATA_SEED)
    d = cfg["d"]
    mu = rng.normal(size=(cfg["clusters"], d))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)

    def draw(n: int) -> np.ndarray:
        x = mu[rng.integers(0, cfg["clusters"], n)] + SPREAD * rng.normal(size=(n, d)) / np.sqrt(d)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return draw(cfg["n"]), draw(cfg["queries"])


def sq_dists(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``‖a − b‖²`` for all pairs (queries × rows), chunked."""
    out = np.empty((B.shape[0], A.shape[0]))
    a2 = np.einsum("ij,ij->i", A, A)
    for s in range(0, B.shape[0], 256):
        b = B[s : s + 256]
        out[s : s + 256] = np.maximum(np.einsum("ij,ij->i", b, b)[:, None] + a2[None, :] - 2 * b @ A.T, 0.0)
    return out


def gaussian_kde(A: np.ndarray, B: np.ndarray, sigma: float) -> np.ndarray:
    return np.exp(-sq_dists(A, B) / (2 * sigma**2)).mean(axis=1)


def smooth_kde(A: np.ndarray, B: np.ndarray, h: float) -> np.ndarray:
    return (1.0 / (1.0 + sq_dists(A, B) / h**2)).mean(axis=1)


def answer(kde: Any, proj: Any, Q: np.ndarray) -> np.ndarray:
    """KDE at the queries, projected first when the sketch lives in the projected space."""
    return kde(Q if proj is None else proj.transform(Q))


def rel_err(est: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.abs(est - truth) / truth))


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=3)
    import opendp.prelude as dp
    from threadpoolctl import threadpool_limits

    import opendp_sketch as dps
    from opendp_sketch import SmoothKernelPlan, release_smooth_sketches
    from opendp_sketch.backends.projections import JLProjection, then_jl_projection
    from opendp_sketch.estimators.smooth import smooth_kernel_terms

    dp.enable_features("contrib", "honest-but-curious")
    cfg = QUICK if args.quick else FULL
    repeats = 1 if args.quick else args.repeats
    info = C.machine_info()
    n, d, m, eps = cfg["n"], cfg["d"], cfg["m"], cfg["eps"]
    X, Q = make_data(cfg)
    sigma = float(np.sqrt(2 * SPREAD**2 / (1 + SPREAD**2)))
    truth = gaussian_kde(X, Q, sigma)
    C.progress(f"data {n}×{d}, σ = {sigma:.3f}, exact KDE at the queries: median {np.median(truth):.4f}")
    clip = dps.make_box_clip(
        dp.numpy.array2_domain(num_columns=d, T=float, nan=False), dp.symmetric_distance(), (-1.0, 1.0)
    )

    def release_projected(k: int, seed: int) -> tuple[Any, Any]:
        fm = dps.RFF(dim=k, num_features=m, bandwidth=sigma, seed=seed)
        chain = clip >> then_jl_projection(k, seed=seed)
        ref = fm.sensitivity(1) / eps
        meas = dp.binary_search_chain(
            lambda s: chain >> dps.then_private_sketch(dp.max_divergence(), fm, s),
            d_in=1,
            d_out=eps,
            bounds=(ref / 20, ref * 1e4),
        )
        assert meas.map(1) <= eps
        return meas(X), JLProjection(d, k, seed=seed)

    # -- JL + RFF vs direct RFF -------------------------------------------------------------------
    # configurations are interleaved within each round, so a disturbance hits them alike
    configs: list[int | None] = [*cfg["ks"], None]
    acc: dict[Any, dict[str, list[Any]]] = {
        k: {"err": [], "abs": [], "jl": [], "build": [], "bg": [], "query": [], "proj": []} for k in configs
    }
    last: dict[Any, tuple[Any, Any]] = {}
    for r in range(repeats):
        C.wait_for_quiet(args.wait_quiet, C.BUSY_CORES)  # full runs: up to --wait-quiet s for an idle machine
        for k in configs:
            with C.Probe() as probe:
                if k is None:
                    fm = dps.RFF(dim=d, num_features=m, bandwidth=sigma, seed=r)
                    t, sk = C.time_call(partial(dps.release_sketch, X, fm, bounds=(-1.0, 1.0), epsilon=eps))
                    proj = None
                else:
                    t, (sk, proj) = C.time_call(partial(release_projected, k, r))
            a = acc[k]
            a["build"].append(t)
            a["bg"].append(probe.background_cores)
            kde = dps.KDE(sk)
            est = answer(kde, proj, Q)
            a["err"].append(rel_err(est, truth))
            a["abs"].append(float(np.mean(np.abs(est - truth))))
            if proj is not None:
                a["jl"].append(rel_err(gaussian_kde(proj.transform(X), proj.transform(Q), sigma), truth))
            last[k] = (kde, proj)
            C.progress(f"round {r + 1}/{repeats}, {'direct' if k is None else f'k={k}'}: build {t:.2f} s")
    for _ in range(5):  # interleaved; queries with one BLAS thread (see QUERY_NOTE)
        for k in configs:
            kde, proj = last[k]
            with threadpool_limits(1, user_api="blas"):
                acc[k]["query"] += C.time_repeats(partial(answer, kde, proj, Q), 1, warmup=1)
            if proj is not None:
                acc[k]["proj"] += C.time_repeats(partial(proj.transform, X), 1, warmup=0)
    rows: list[dict[str, Any]] = []
    for k in configs:
        a = acc[k]
        row = {
            "k": k,
            "err": float(np.mean(a["err"])),
            "err_sd": float(np.std(a["err"])),
            "abs": float(np.mean(a["abs"])),
            "jl": float(np.mean(a["jl"])) if a["jl"] else None,
            "build": C.median(a["build"]),
            "proj": C.median(a["proj"]) if a["proj"] else None,
            "query": C.median(a["query"]),
            "noise_std": last[k][0].noise_std(),
            "bg": max((b for b in a["bg"] if b is not None), default=None),
        }
        rows.append(row)
        C.progress(
            f"{'direct d=' + str(d) if k is None else 'k=' + str(k)}: rel. error {row['err']:.4f}"
            + (f" (JL only {row['jl']:.4f})" if row["jl"] is not None else "")
            + f", build {row['build']:.2f} s, query {row['query'] * 1e3:.1f} ms"
        )

    # -- smooth kernels ---------------------------------------------------------------------------
    term_rows = []
    for J in cfg["terms_J"]:
        cells = []
        for T in cfg["terms_T"]:
            c, _, err = smooth_kernel_terms(J, T)
            cells.append(f"{err:.1e} ({c.size})")
        term_rows.append([str(J), *cells])
    C.progress("smooth-kernel fit table done")

    ks = cfg["smooth_k"]
    h = float(np.sqrt(2.0) * sigma)
    proj = JLProjection(d, ks, seed=0)
    Y, Qp = (clip >> then_jl_projection(ks, seed=0))(X), proj.transform(Q)
    smooth_truth = smooth_kde(X, Q, h)
    smooth_truth_proj = smooth_kde(Y, Qp, h)
    smooth_rows = []
    budgets: list[tuple[str, dict[str, float] | None]] = [
        ("noise-free sketches", None),
        (f"ε = {eps:g} (Laplace, optimal split)", {"epsilon": eps}),
        (f"ε = {eps:g}, δ = 1e-6 (Gaussian, zCDP split)", {"epsilon": eps, "delta": 1e-6}),
    ]
    for J in cfg["smooth_terms"]:
        plan = SmoothKernelPlan(dim=ks, bandwidth=h, num_features=m, num_terms=J, t_max=100.0, seed=0)
        for label, budget in budgets:
            t0 = time.perf_counter()
            if budget is None:
                sks = [
                    dps.Sketch(fm, np.array(fm.fixed_sum(Y), dtype=np.int64), n) for fm in plan.feature_maps
                ]
            else:
                sks = release_smooth_sketches(X, plan, (-1.0, 1.0), projection=proj, **budget)
            t_rel = time.perf_counter() - t0
            est = plan.kde(sks)
            vals = est(Qp)
            smooth_rows.append(
                [
                    str(plan.coefficients.size),
                    label,
                    C.fmt(plan.max_error),
                    C.fmt(est.noise_std()),
                    C.fmt(rel_err(vals, smooth_truth_proj)),
                    C.fmt(rel_err(vals, smooth_truth)),
                    C.fmt(t_rel),
                ]
            )
            C.progress(f"smooth J={J} {label}: rel. error {rel_err(vals, smooth_truth):.4f} ({t_rel:.1f} s)")

    # -- report -----------------------------------------------------------------------------------
    direct = rows[-1]
    table = C.md_table(
        [
            "dimension",
            "rel. error (private)",
            "± sd over releases",
            "abs. error (private)",
            "JL only: rel. error of the exact projected KDE",
            "DP-noise std",
            "construction (s)",
            "of which projection (s)",
            f"query ×{cfg['queries']} (ms)",
            "max other CPU (cores)",
        ],
        [
            [
                f"k = {r['k']}" if r["k"] is not None else f"none (d = {d})",
                C.fmt(r["err"]),
                C.fmt(r["err_sd"]),
                C.fmt(r["abs"]),
                C.fmt(r["jl"]),
                C.fmt(r["noise_std"]),
                C.fmt(r["build"]),
                C.fmt(r["proj"]),
                C.fmt(r["query"] * 1e3),
                C.fmt(r["bg"]),
            ]
            for r in rows
        ],
    )
    speed = C.md_table(
        ["k", "construction speed-up vs direct", "query speed-up vs direct", "extra rel. error vs direct"],
        [
            [
                str(r["k"]),
                C.fmt(direct["build"] / r["build"]),
                C.fmt(direct["query"] / r["query"]),
                C.fmt(r["err"] - direct["err"]),
            ]
            for r in rows[:-1]
        ],
    )
    terms_table = C.md_table(["J"] + [f"T = {T:g}" for T in cfg["terms_T"]], term_rows)
    smooth_table = C.md_table(
        [
            "terms",
            "budget",
            "fit error bound",
            "DP-noise std",
            "rel. error vs exact (projected)",
            "rel. error vs exact (original)",
            "release (s)",
        ],
        smooth_rows,
    )
    # judged on the timed calls themselves (the run average also covers the waits for quiet)
    bg = max((r["bg"] for r in rows if r["bg"] is not None), default=None)
    disturbed = bg is not None and bg > C.BUSY_CORES
    body = f"""## Setting

n = {n:,} unit vectors in d = {d} from {cfg["clusters"]} Gaussian clusters (relative spread {SPREAD}),
{cfg["queries"]} held-out queries from the same clusters, public box [−1, 1]^{d}. Gaussian kernel
exp(−‖x − q‖²/(2σ²)) with σ = √(2s²/(1 + s²)) = {sigma:.3f}, the typical within-cluster distance
derived from the public spread s = {SPREAD} (not from the data). The same σ is used after
projection, because E‖Gx/√k‖² = ‖x‖². Exact KDE at the queries: median {np.median(truth):.4f}, range
[{truth.min():.4f}, {truth.max():.4f}]. RFF maps of m = {m} features (m' = {m // 2} frequencies), discrete
Laplace at ε = {eps:g}; {repeats} release(s) per row (seeds 0..{repeats - 1} for G and the frequencies).

## Gaussian KDE: JL projection to k dimensions vs an RFF sketch in d = {d}

Relative error against the exact KDE in the original space. "JL only" is the error of the exact
KDE computed on the projected points: the projection's own contribution, with no sketch and no noise.

{table}

{speed}

{QUERY_NOTE}

Reading the tables. The projection adds its own error ("JL only"), which shrinks as k grows. In
absolute terms this is the additive error of Theorem 7.2. It looks large in relative terms
because here K is dominated by the between-cluster terms exp(−‖x − q‖²/(2σ²)) ≈ e^{{−2.5}}. The
JL distortion of a query's distance to a whole cluster, with relative std ≈ √(2/k), is shared
by every point of that cluster and does not average out. Costs: the projected release does
O(ndk) work for the projection plus O(nkm') for the features, while the direct release does
O(ndm'). The gain is therefore roughly m'/k when k ≪ m' (m' = {m // 2} here); at k ≈ m' the two
cost the same. A query costs O(dk + km') instead of O(dm'). The direct map also stores d·m'
frequencies ({d * m // 2 * 8 / 2**20:.1f} MiB) instead of k·m' plus the k·d projection.

## Smooth kernels 1/(1 + ‖x − q‖²/h²)

Certified max error of the exponential-sum fit `smooth_kernel_terms(J, T)` on t ∈ [0, T]
(number of terms kept in parentheses). Beyond T, the error is at most max(1/(1 + T), g(T)).

{terms_table}

Smooth KDE on the k = {ks} projection (h = √2·σ = {h:.3f}, T = 100), `release_smooth_sketches(...,
projection=JLProjection({d}, {ks}))` as one composed OpenDP measurement, with m = {m} per term.
The relative errors are averaged over the {cfg["queries"]} queries. The exact smooth KDE is
{np.median(smooth_truth):.3f} (median).

{smooth_table}

With Gaussian noise and the optimal split (ρ_j ∝ c_j) the DP-noise std does not grow with the
number of terms. With Laplace noise (ε_j ∝ c_j^{{2/3}}) it grows like (Σ c_j^{{2/3}})^{{3/2}}; see
`docs/estimators/smooth_kernels.md`.

Error budget of the smooth KDE: fit error (≤ the certified bound; negligible here) + random-feature
error (about √(Σ c_j²/(2m')) per query) + DP noise (the std column) + the JL distortion (the gap
between the two relative-error columns, as read from the noise-free rows).
"""
    if disturbed:
        body += (
            f"\n**Timings disturbed**: other processes used up to {bg:.2f} cores during a timed release "
            "(this is a 2-core machine), so absolute times are inflated. The configurations are "
            "interleaved, so their ratios are more reliable than the absolute values.\n"
        )
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, rows, cfg, term_rows)
    body += f"\nPlot: `{png.name}`.\n"
    C.write_report(
        od / f"{NAME}.md", f"JL projection + private KDE (n = {n:,}, d = {d})", info, body, args.quick
    )


def _plot(path: Path, rows: list[dict[str, Any]], cfg: dict[str, Any], term_rows: list[list[str]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    proj_rows, direct = rows[:-1], rows[-1]
    ks = [r["k"] for r in proj_rows]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    ax = axes[0]
    ax.errorbar(
        ks,
        [r["err"] for r in proj_rows],
        yerr=[r["err_sd"] for r in proj_rows],
        marker="o",
        label="JL + private RFF",
    )
    ax.plot(ks, [r["jl"] for r in proj_rows], marker="s", ls="--", label="JL only (exact KDE)")
    ax.axhline(direct["err"], color="k", ls=":", label=f"private RFF, d = {cfg['d']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_title("relative KDE error")
    ax.legend(fontsize=8)
    for ax, key, title in ((axes[1], "build", "construction (s)"), (axes[2], "query", "query time (s)")):
        ax.plot(ks, [r[key] for r in proj_rows], marker="o", label="JL + RFF(dim=k)")
        ax.axhline(direct[key], color="k", ls=":", label=f"RFF(dim={cfg['d']})")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_title(title)
        ax.legend(fontsize=8)
    ax = axes[3]
    Js = [int(r[0]) for r in term_rows]
    for i, T in enumerate(cfg["terms_T"]):
        ax.semilogy(Js, [float(r[1 + i].split()[0]) for r in term_rows], marker="o", label=f"T = {T:g}")
    ax.set_xlabel("J (terms)")
    ax.set_title("smooth kernel: certified fit error")
    ax.legend(fontsize=8)
    fig.suptitle("Oblivious JL projection before a private KDE sketch; smooth kernels from exponential sums")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
