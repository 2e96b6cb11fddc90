"""RACE sketch on a skin-sized dataset: hashing + counting time, and the whole release.

Setting (full mode): n = 241,000 rows × 3 columns uniform in [0, 255]^3 (the size and range of
the RACE paper's skin dataset; seeded numpy RNG), R = 100 rows, W = 1000 buckets. Families:
``l2`` with public ``bucket_width = 20`` and ``hashes_per_row`` K = 1 and 2; ``srp`` with K = 2
and the default K = ⌊log2 W⌋ = 9 (both index buckets directly, since 2^K ≤ W) and K = 12
(2^K > W, so the universal-hash path).

For each configuration (in-process, one warm-up call, then ``--repeats`` timed calls, medians):

* ``fm.fixed_sum(X)`` — hashing + counting (default ``n_jobs`` and ``n_jobs=1``);
* ``dps.release_sketch(X, fm, bounds=(0, 255), epsilon=1.0)`` — the whole one-call release
  (validation, binary search for the noise scale, clipping, feature sum, noise, Sketch);
* the pre-built release chain ``make_box_clip >> then_private_sketch(max_divergence, fm, scale)``
  invoked on X at the scale the release found (invocation only, no scale search);
* noise directly: OpenDP's ``make_laplace`` on an i64 vector of length R·W at that integer scale,
  fed by a ``make_user_transformation`` returning a constant numpy int64 array (numpy → Rust
  conversion included);
* noise by subtraction: release time − feature-sum time.

Peak extra memory (RSS) of ``fixed_sum`` and of ``release_sketch`` is measured in fresh
subprocesses (``--repeats`` each, median); see ``lib/memory.py``.

Usage: ``python benchmarks/bench_race.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_race"
DIM = 3
LOW, HIGH = 0.0, 255.0
BUCKET_WIDTH = 20.0  # public constant, in data units
EPSILON = 1.0
FM_SEED = 0
DATA_SEED = 20240602
FIXED_SUM_TARGET_S = 0.5

FULL = {"n": 241_000, "rows": 100, "buckets": 1000}
QUICK = {"n": 5_000, "rows": 10, "buckets": 100}

# (key, family, hashes_per_row or None for the family default)
CONFIGS: list[tuple[str, str, int | None]] = [
    ("l2_K1", "l2", 1),
    ("l2_K2", "l2", 2),
    ("srp_K2", "srp", 2),
    ("srp_Kdefault", "srp", None),
    ("srp_K12", "srp", 12),
]


def _data(n: int) -> np.ndarray:
    return np.random.default_rng(DATA_SEED).uniform(LOW, HIGH, size=(n, DIM))


def _feature_map(size: dict[str, int], family: str, k: int | None):
    import opendp_sketch as dps

    return dps.RACE(
        dim=DIM,
        rows=size["rows"],
        buckets=size["buckets"],
        family=family,
        bucket_width=BUCKET_WIDTH,
        hashes_per_row=k,
        seed=FM_SEED,
    )


def _label(fm) -> str:
    k = f"K={fm.hashes_per_row}"
    if fm.family == "l2":
        return f"l2, r={fm.bucket_width:g}, {k}"
    path = "direct bucket" if fm._direct else "universal hash"
    return f"srp, {k} ({path})"


def _noise_measurement(length: int, int_scale: float):
    """``make_user_transformation`` (constant int64 vector) >> OpenDP's ``make_laplace``."""
    import opendp.prelude as dp

    const = np.arange(length, dtype=np.int64)
    t = dp.t.make_user_transformation(
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        dp.symmetric_distance(),
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        dp.l1_distance(T=dp.i64),
        lambda _x: const,
        lambda d_in: d_in,
    )
    return t >> dp.m.then_laplace(int_scale)


# -- child (memory) ---------------------------------------------------------------------------


def setup(config: dict[str, Any]) -> Callable[[], Any]:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    X = _data(config["size"]["n"])
    fm = _feature_map(config["size"], config["family"], config["k"])
    if config["what"] == "fixed_sum":
        return lambda: fm.fixed_sum(X)
    return lambda: dps.release_sketch(X, fm, bounds=(LOW, HIGH), epsilon=EPSILON)


# -- parent -----------------------------------------------------------------------------------


def _bg(xs: list[float | None]) -> str:
    v = [x for x in xs if x is not None]
    return f"{C.fmt(sum(v) / len(v))} / {C.fmt(max(v))}" if v else "n/a"


def _measure_config(size: dict[str, int], family: str, k: int | None, args) -> dict[str, Any]:
    import opendp.prelude as dp

    import opendp_sketch as dps

    X = _data(size["n"])
    fm = _feature_map(size, family, k)
    res: dict[str, Any] = {"label": _label(fm), "fm": fm, "background": []}

    def timed(fn):
        def measure():
            with C.Probe() as p:
                ts = C.time_repeats(fn, args.repeats)
            return ts, p.background_cores

        ts, bg = C.quiet_measure(measure, args)
        res["background"].append(bg)
        return ts

    res["fixed_sum"] = timed(lambda: fm.fixed_sum(X))
    res["fixed_sum_1"] = timed(lambda: fm.fixed_sum(X, n_jobs=1))
    counts = np.array(fm.fixed_sum(X))
    assert counts.sum() == size["n"] * size["rows"]  # sanity: one 1 per row and sketch row
    res["occupied"] = float(np.mean(counts > 0))

    sketches = []

    def release():
        sketches.append(dps.release_sketch(X, fm, bounds=(LOW, HIGH), epsilon=EPSILON))

    res["release"] = timed(release)
    sk = sketches[-1]
    int_scale = sk.noise["sum_scale"] / fm.unit
    res["int_scale"] = int_scale
    res["epsilon_spent"] = sk.privacy["epsilon"]

    # the release chain at the scale found, invoked only (no binary search, no validation)
    in_domain = dp.numpy.array2_domain(num_columns=DIM, T=float, nan=False)
    chain = dps.make_box_clip(in_domain, dp.symmetric_distance(), (LOW, HIGH)) >> dps.then_private_sketch(
        dp.max_divergence(), fm, sk.noise["sum_scale"]
    )
    res["invoke"] = timed(lambda: chain(X))
    noise = _noise_measurement(fm.num_features, int_scale)
    res["noise"] = timed(lambda: noise([0]))
    return res


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    if args.child is not None:
        C.child_main(args.child, setup)
        return
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    size = QUICK if args.quick else FULL
    info = C.machine_info()
    C.progress(f"{NAME}: {size}, repeats={args.repeats}")

    results = {}
    for key, family, k in CONFIGS:
        r = _measure_config(size, family, k, args)
        for what in ("fixed_sum", "release"):
            cfg = {"size": size, "family": family, "k": k, "what": what}
            r[f"mem_{what}"] = [C.run_child_quietly(__file__, cfg, args) for _ in range(args.repeats)]
        # fixed_sum with OpenBLAS limited to one thread (child process: set before numpy loads);
        # the child's background reading covers only its first call, so wrap the whole child
        cfg = {
            "size": size,
            "family": family,
            "k": k,
            "what": "fixed_sum",
            "warm_repeats": args.repeats,
            "env": {"OPENBLAS_NUM_THREADS": "1"},
        }

        def blas1(cfg=cfg):
            with C.Probe(include_children=True) as p:
                out = C.run_child(__file__, cfg)["warm_times"]
            return out, p.background_cores

        r["fixed_sum_blas1"], bg = C.quiet_measure(blas1, args)
        r["background"].append(bg)
        results[key] = r
        C.progress(
            f"{r['label']}: fixed_sum {C.median(r['fixed_sum']):.3f} s, release {C.median(r['release']):.3f} s, "
            f"noise {C.median(r['noise']):.3f} s"
        )

    m = size["rows"] * size["buckets"]
    jobs = min(os.cpu_count() or 1, 4)
    t_rows, b_rows, m_rows = [], [], []
    for key, *_ in CONFIGS:
        r = results[key]
        fs, fs1 = C.median(r["fixed_sum"]), C.median(r["fixed_sum_1"])
        rel, inv, noi = C.median(r["release"]), C.median(r["invoke"]), C.median(r["noise"])
        t_rows.append(
            [
                r["label"],
                r["fm"].hashes_per_row,
                C.fmt(fs),
                f"{C.fmt(min(r['fixed_sum']))}–{C.fmt(max(r['fixed_sum']))}",
                C.fmt(fs1),
                C.fmt(C.median(r["fixed_sum_blas1"])),
                "yes" if fs <= FIXED_SUM_TARGET_S else "NO",
                f"{100 * r['occupied']:.1f}%",
                _bg(r["background"]),
            ]
        )
        b_rows.append(
            [
                r["label"],
                C.fmt(rel),
                f"{C.fmt(min(r['release']))}–{C.fmt(max(r['release']))}",
                C.fmt(fs),
                C.fmt(rel - fs),
                C.fmt(noi),
                C.fmt(noi / m * 1e6),
                C.fmt(inv),
                C.fmt(rel - inv),
                C.fmt(r["int_scale"]),
                C.fmt(r["epsilon_spent"]),
            ]
        )
        mf = [x["peak_extra_mb"] for x in r["mem_fixed_sum"]]
        mr = [x["peak_extra_mb"] for x in r["mem_release"]]
        m_rows.append(
            [
                r["label"],
                C.fmt(C.median(mf)),
                f"{C.fmt(min(mf))}–{C.fmt(max(mf))}",
                C.fmt(C.median([x["time_s"] for x in r["mem_fixed_sum"]])),
                C.fmt(C.median(mr)),
                f"{C.fmt(min(mr))}–{C.fmt(max(mr))}",
                C.fmt(C.median([x["time_s"] for x in r["mem_release"]])),
            ]
        )

    mem_method = results[CONFIGS[0][0]]["mem_fixed_sum"][0]["mem_method"]
    body = f"""## Setting

X: n = {size["n"]:,} rows × {DIM} columns uniform in [{LOW:g}, {HIGH:g}]^{DIM} from
`np.random.default_rng({DATA_SEED})` (size and range of the RACE paper's skin dataset; the real data
is not used). RACE with R = {size["rows"]} rows × W = {size["buckets"]} buckets (m = R·W = {m:,} features),
hash seed {FM_SEED}; `l2` uses the public bucket width r = {BUCKET_WIDTH:g}. Release:
`dps.release_sketch(X, fm, bounds=({LOW:g}, {HIGH:g}), epsilon={EPSILON})` (discrete Laplace noise;
2% of ε for the count). Default `n_jobs` = min(os.cpu_count(), 4) = {jobs}.

In-process timings: one warm-up call, then {args.repeats} timed calls; medians (wall clock). Before each
block of calls the script waited up to {args.wait_quiet:g} s for other processes to go idle, and a block during
which other processes used more than {C.BUSY_CORES} cores was repeated (up to {args.max_attempts} attempts in all,
the least disturbed kept). The CPU used by other processes during the kept blocks of a configuration
is reported (0 = quiet machine).

## Hashing + counting: `fm.fixed_sum(X)`

Target (informational): ≤ {FIXED_SUM_TARGET_S} s. The `OPENBLAS_NUM_THREADS=1` column runs the default
`n_jobs` in a child process whose OpenBLAS is limited to one thread (one warm-up call, then
{args.repeats} timed calls).

{C.md_table(["family", "K", "median time (s)", "min–max (s)", "n_jobs=1 median (s)", "OPENBLAS_NUM_THREADS=1 median (s)", f"≤ {FIXED_SUM_TARGET_S} s", "buckets occupied", "other processes' CPU, mean / max over blocks (cores)"], t_rows)}

## Whole release and its noise

* **release** = `release_sketch(...)` end to end;
* **release − feature sum** = noise time by subtraction (it also contains validation, the binary
  search over the noise scale, clipping and the Sketch construction);
* **noise (direct)** = OpenDP `make_laplace` on an i64 vector of length R·W = {m:,} at the same
  integer scale, fed by a user transformation that returns a constant numpy int64 array
  (numpy → Rust conversion and Rust → Python list conversion of the output included);
* **invoke** = the release chain `make_box_clip >> then_private_sketch(...)` pre-built at the scale
  the release found, invoked on X; **release − invoke** is then the cost of `release_sketch`'s
  validation and `binary_search_chain` (measurement construction).

{C.md_table(["family", "release median (s)", "release min–max (s)", "feature sum (s)", "release − feature sum (s)", "noise direct (s)", "noise µs / coordinate", "invoke pre-built chain (s)", "release − invoke (s)", "integer noise scale", "ε spent"], b_rows)}

## Peak extra memory (fresh subprocess per run)

{args.repeats} fresh subprocesses per cell, median; peak extra RSS = peak RSS during the call − RSS just before
it ({mem_method}). The subprocess wall time (first call in a fresh process, no warm-up) is shown too.
X is {size["n"] * DIM * 8 / 2**20:.1f} MB.

{C.md_table(["family", "fixed_sum peak extra (MB)", "min–max (MB)", "fixed_sum cold time (s)", "release peak extra (MB)", "min–max (MB)", "release cold time (s)"], m_rows)}
"""
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, results, size)
    body += f"\nPlot: `{png.name}` (release time split into feature sum, noise and the rest).\n"
    C.write_report(
        od / f"{NAME}.md",
        f"RACE sketch, n = {size['n']:,}, R = {size['rows']}, W = {size['buckets']}",
        info,
        body,
        args.quick,
    )


def _plot(path: Path, results: dict[str, dict[str, Any]], size: dict[str, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k, *_ in CONFIGS]
    labels = [results[k]["label"] for k in keys]
    fs = np.array([C.median(results[k]["fixed_sum"]) for k in keys])
    noi = np.array([C.median(results[k]["noise"]) for k in keys])
    rel = np.array([C.median(results[k]["release"]) for k in keys])
    rest = np.maximum(rel - fs - noi, 0)
    x = np.arange(len(keys))
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.bar(x, fs, label="feature sum (hash + count)")
    ax.bar(x, noi, bottom=fs, label=f"Laplace noise, R·W = {size['rows'] * size['buckets']:,} (direct)")
    ax.bar(x, rest, bottom=fs + noi, label="rest of release (validation, scale search, clip, Sketch; ≥ 0)")
    ax.axhline(
        FIXED_SUM_TARGET_S, color="red", ls="--", lw=1, label=f"feature-sum target {FIXED_SUM_TARGET_S} s"
    )
    ax.scatter(x, rel, marker="_", s=900, color="black", zorder=3, label="release_sketch, measured total")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("median wall time (s)")
    ax.set_title(f"RACE release, n = {size['n']:,}, R = {size['rows']}, W = {size['buckets']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
