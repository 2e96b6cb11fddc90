"""RFF feature sum: opendp_sketch's exact fixed-point path vs plain float64 numpy.

Setting (full mode): RFF with d = 10, m = 1000 features (500 frequencies), bandwidth 1,
n = 10^6 rows uniform in [0, 1]^10 (seeded numpy RNG). Configurations:

* baseline ``numpy one-shot``: ``Z = X @ fm.frequencies; concatenate([cos(Z).sum(0), sin(Z).sum(0)])``
* baseline ``numpy chunked``: the same kernel in float64 over chunks of 4096 rows
* ``make_feature_sum(box_domain((0,1), num_columns=10), symmetric_distance(), feature_map=fm, p=1)``
  invoked on ``X`` (default ``n_jobs`` and ``n_jobs=1``)
* ``fm.fixed_sum(X)`` directly (default ``n_jobs`` and ``n_jobs=1``)

Every configuration runs ``--repeats`` times (default 3), each time in a fresh subprocess that
imports, generates the data, and then measures one call: wall time and peak extra RSS (peak RSS
during the call minus RSS just before it; see ``_common.py``). Runs are interleaved round-robin
across configurations so slow drifts of the machine load hit all of them alike. Medians are
reported. Accuracy: max |opendp_sketch sum / gain − one-shot float64 sum| / n.

Usage: ``python benchmarks/bench_feature_sum.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

NAME = "bench_feature_sum"
DIM = 10
BANDWIDTH = 1.0
FM_SEED = 0
DATA_SEED = 20240601
CHUNK = 4096
TIME_RATIO_TARGET = 0.3
MEM_TARGET_MB = 300.0

FULL = {"n": 1_000_000, "m": 1000}
QUICK = {"n": 20_000, "m": 200}

_BLAS1 = {"OPENBLAS_NUM_THREADS": "1"}

# (key, label, kind, n_jobs, extra environment of the child)
CONFIGS: list[tuple[str, str, str, int | None, dict[str, str]]] = [
    ("np_oneshot", "numpy float64 one-shot (baseline)", "oneshot", None, {}),
    ("np_chunked", f"numpy float64 chunked, {CHUNK} rows (baseline 2)", "chunked", None, {}),
    ("t_default", "make_feature_sum transformation, n_jobs=default", "transformation", None, {}),
    ("t_1", "make_feature_sum transformation, n_jobs=1", "transformation", 1, {}),
    (
        "t_default_blas1",
        "make_feature_sum transformation, n_jobs=default, OPENBLAS_NUM_THREADS=1",
        "transformation",
        None,
        _BLAS1,
    ),
    ("fs_default", "fm.fixed_sum(X), n_jobs=default", "fixed_sum", None, {}),
    ("fs_1", "fm.fixed_sum(X), n_jobs=1", "fixed_sum", 1, {}),
    (
        "fs_default_blas1",
        "fm.fixed_sum(X), n_jobs=default, OPENBLAS_NUM_THREADS=1",
        "fixed_sum",
        None,
        _BLAS1,
    ),
]


def _data(n: int) -> np.ndarray:
    return np.random.default_rng(DATA_SEED).random((n, DIM))


def _feature_map(m: int):
    import opendp_sketch as dps

    return dps.RFF(dim=DIM, num_features=m, bandwidth=BANDWIDTH, seed=FM_SEED)


def numpy_oneshot(X: np.ndarray, omega: np.ndarray) -> np.ndarray:
    Z = X @ omega
    return np.concatenate([np.cos(Z).sum(0), np.sin(Z).sum(0)])


def numpy_chunked(X: np.ndarray, omega: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    k = omega.shape[1]
    acc = np.zeros(2 * k)
    for s in range(0, X.shape[0], chunk):
        Z = X[s : s + chunk] @ omega
        acc[:k] += np.cos(Z).sum(0)
        acc[k:] += np.sin(Z).sum(0)
    return acc


# -- child ------------------------------------------------------------------------------------


def setup(config: dict[str, Any]) -> Callable[[], Any]:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    X = _data(config["n"])
    fm = _feature_map(config["m"])
    kind, n_jobs = config["kind"], config["n_jobs"]
    if kind == "oneshot":
        return lambda: numpy_oneshot(X, fm.frequencies)
    if kind == "chunked":
        return lambda: numpy_chunked(X, fm.frequencies)
    if kind == "fixed_sum":
        return lambda: fm.fixed_sum(X, n_jobs=n_jobs)
    if kind == "transformation":
        t = dps.make_feature_sum(
            dps.box_domain((0, 1), num_columns=DIM),
            dp.symmetric_distance(),
            feature_map=fm,
            p=1,
            n_jobs=n_jobs,
        )
        return lambda: t(X)
    raise ValueError(kind)


def post(config: dict[str, Any], result: Any) -> list[float]:
    """The sum in float64 feature units (opendp_sketch outputs divided by ``fm.gain``)."""
    from opendp_sketch.features.rff import RFF_FRAC_BITS, RFF_GAIN

    kind = config["kind"]
    if kind == "fixed_sum":  # exact integers in units of 2^-k
        v = np.ldexp(np.array([float(x) for x in result]), -RFF_FRAC_BITS) / RFF_GAIN
    elif kind == "transformation":
        v = np.asarray(result, dtype=np.float64) / RFF_GAIN
    else:
        v = np.asarray(result, dtype=np.float64)
    return v.tolist()


# -- parent -----------------------------------------------------------------------------------


def _bg(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    if args.child is not None:
        C.child_main(args.child, setup, post)
        return
    size = QUICK if args.quick else FULL
    n, m = size["n"], size["m"]
    info = C.machine_info()
    default_jobs = min(os.cpu_count() or 1, 4)
    C.progress(f"{NAME}: n={n}, d={DIM}, m={m}, repeats={args.repeats} (fresh subprocess each)")

    runs: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in CONFIGS}
    for rep in range(args.repeats):
        for key, label, kind, n_jobs, env in CONFIGS:
            r = C.run_child_quietly(
                __file__, {"n": n, "m": m, "kind": kind, "n_jobs": n_jobs, "env": env}, args
            )
            runs[key].append(r)
            C.progress(
                f"rep {rep + 1}: {label}: {r['time_s']:.2f} s (cpu {r['cpu_s']:.1f} s), "
                f"peak extra {r['peak_extra_mb']:.0f} MB, background {_bg(r['background_cores'])} cores"
            )

    ref = np.array(runs["np_oneshot"][0]["result"])
    t_ref = C.median([r["time_s"] for r in runs["np_oneshot"]])
    t_chunk = C.median([r["time_s"] for r in runs["np_chunked"]])
    rows, summary = [], {}
    for key, label, kind, _, _ in CONFIGS:
        ts = [r["time_s"] for r in runs[key]]
        ms = [r["peak_extra_mb"] for r in runs[key]]
        cpu = C.median([r["cpu_s"] for r in runs[key]])
        bgs = [r["background_cores"] for r in runs[key] if r["background_cores"] is not None]
        t, mem = C.median(ts), C.median(ms)
        err = float(np.max(np.abs(np.array(runs[key][0]["result"]) - ref))) / n
        ours = kind in ("fixed_sum", "transformation")
        verdict = "–"
        if ours:
            ok_t, ok_m = t / t_ref <= TIME_RATIO_TARGET, mem <= MEM_TARGET_MB
            verdict = f"time {'yes' if ok_t else 'NO'}, memory {'yes' if ok_m else 'NO'}"
        summary[key] = (t, mem, err)
        rows.append(
            [
                label,
                C.fmt(t),
                f"{C.fmt(min(ts))}–{C.fmt(max(ts))}",
                C.fmt(cpu),
                C.fmt(t / t_ref),
                C.fmt(t / t_chunk),
                C.fmt(mem),
                f"{C.fmt(min(ms))}–{C.fmt(max(ms))}",
                C.fmt(err) if key != "np_oneshot" else "0 (reference)",
                verdict,
                f"{C.fmt(C.median(bgs))} / {C.fmt(max(bgs))}" if bgs else "n/a",
            ]
        )

    headers = [
        "configuration",
        "median time (s)",
        "min–max (s)",
        "median CPU time (s)",
        "time / one-shot",
        "time / chunked",
        "median peak extra RSS (MB)",
        "min–max (MB)",
        "max abs diff / n vs one-shot",
        "targets met",
        "other processes' CPU, median / max (cores)",
    ]
    mem_method = runs["np_oneshot"][0]["mem_method"]
    rss_before = C.median([r["rss_before_mb"] for rs in runs.values() for r in rs])
    body = f"""## Setting

RFF (Gaussian kernel), d = {DIM}, m = {m} features ({m // 2} frequencies), bandwidth {BANDWIDTH},
feature-map seed {FM_SEED}; X: n = {n:,} rows uniform in [0, 1]^{DIM} from
`np.random.default_rng({DATA_SEED})`. Default `n_jobs` = min(os.cpu_count(), 4) = {default_jobs} threads;
chunk = {CHUNK} rows (the library default `DEFAULT_CHUNK_ROWS`).

The `OPENBLAS_NUM_THREADS=1` rows run the same call in a child whose OpenBLAS is limited to one
thread (numpy's default OpenBLAS otherwise starts one BLAS thread per core inside each worker thread).

Each configuration was measured {args.repeats} times, each time **in a fresh subprocess** (import,
generate X, then one measured call); runs were interleaved round-robin across configurations.
Times are wall-clock (`time.perf_counter`) medians. **Memory = peak extra RSS**: peak resident set
size during the call minus the RSS just before it ({mem_method}); it counts every allocation of the
process (numpy buffers, Python objects, thread stacks), not only numpy. X itself ({n * DIM * 8 / 2**20:.0f} MB)
is allocated before the call and not counted; median RSS before the call was {rss_before:.0f} MB.

Accuracy: the opendp_sketch outputs are divided by `fm.gain` (= 1 − 2^-12) and compared with the
float64 one-shot sum: max over the m coordinates of |difference|, divided by n.

CPU time = user + system time of the measuring process (all its threads). The last column is the
CPU used by *other* processes during the measured call (0 = quiet machine, 1 = one core busy
elsewhere). Before each run the script waited up to {args.wait_quiet:g} s for the machine to go quiet, and
a run during which other processes used more than {C.BUSY_CORES} cores was repeated (up to
{args.max_attempts} attempts in all, the least disturbed one kept).
On a 2-core machine a busy neighbour inflates wall times, mostly of the multi-threaded rows.

Targets (informational, not asserted): time ratio vs the one-shot kernel ≤ {TIME_RATIO_TARGET},
peak extra memory ≤ {MEM_TARGET_MB:.0f} MB.

## Results

{C.md_table(headers, rows)}
"""
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, summary, n, m)
    body += f"\nPlot: `{png.name}` (wall time and peak extra memory per configuration).\n"
    C.write_report(
        od / f"{NAME}.md", f"RFF feature sum vs float64 numpy (n = {n:,}, m = {m})", info, body, args.quick
    )


def _plot(path: Path, summary: dict[str, tuple[float, float, float]], n: int, m: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [lab for _, lab, *_ in CONFIGS]
    keys = [k for k, *_ in CONFIGS]
    colors = ["#888888" if k.startswith("np_") else "#1f77b4" for k in keys]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.2))
    y = np.arange(len(keys))[::-1]
    a1.barh(y, [summary[k][0] for k in keys], color=colors)
    a1.axvline(
        TIME_RATIO_TARGET * summary["np_oneshot"][0],
        color="red",
        ls="--",
        lw=1,
        label=f"target: {TIME_RATIO_TARGET} × one-shot",
    )
    a1.set_yticks(y, labels, fontsize=8)
    a1.set_xlabel("median wall time (s)")
    a1.legend(fontsize=8)
    a2.barh(y, [max(summary[k][1], 1e-3) for k in keys], color=colors)
    a2.axvline(MEM_TARGET_MB, color="red", ls="--", lw=1, label=f"target: {MEM_TARGET_MB:.0f} MB")
    a2.set_xscale("log")
    a2.set_yticks(y, [""] * len(keys))
    a2.set_xlabel("median peak extra RSS (MB, log scale)")
    a2.legend(fontsize=8)
    fig.suptitle(f"RFF feature sum, n = {n:,}, d = {DIM}, m = {m}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
