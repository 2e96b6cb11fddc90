"""RFF feature sum: opendp_sketch's exact fixed-point path vs plain numpy kernels and pycle.

Setting (full mode): RFF with d = 10, m = 1000 features (500 frequencies), bandwidth 1,
n = 10^6 rows uniform in [0, 1]^10 (seeded numpy RNG). Configurations, all in one run:

* ``make_feature_sum(box_domain((0, 1), num_columns=10), symmetric_distance(), fm, p=1)`` invoked
  on ``X`` (default ``n_jobs``: the RFF sum of the release path), and ``fm.fixed_sum(X, clip=box)``
  with ``n_jobs`` default and 1;
* the same sum with the dense work tiled at 256 … 4096 rows (``base.TILE_ENTRIES`` patched), to
  choose the default tile;
* baselines: the chunked **float32** numpy kernel (``X @ W``, ``cos``, ``sin``, column sums; 2
  threads, BLAS single-threaded) written plainly (new arrays per chunk) and with reused ``out=``
  buffers, the float64 one-shot kernel, and pycle 1.2's ``computeSketch`` (complex exponential
  map with the same frequencies) if it is installed;
* with ``--baseline-library DIR`` (an older ``opendp_sketch`` copy, e.g. from ``git archive``):
  the RFF sum and the other maps (Histogram, RACE, QuantizedRFF, SubsampledRFF) with both
  libraries, for a before/after table measured in the same run.

Every configuration runs ``--repeats`` times (default 9), each time in a fresh subprocess that
imports, generates the data and then measures one call: wall time, CPU time and peak extra RSS
(peak RSS during the call minus RSS just before it; see ``lib/memory.py``). Runs are interleaved
round-robin across configurations so slow drifts of the machine load hit all of them alike;
medians are reported. **Paired ratios**: in every round the RFF sum (``make_feature_sum``) and
the float32 kernels run back to back (their order alternating between rounds), and the ratio of
each such pair is reported as min / median / max over the rounds, in wall and in CPU time; on a
shared machine these are the figures to quote. The tile sweep runs in the first three rounds;
the float64 one-shot kernel, pycle (tens of seconds, reference only) and the other maps of the
before/after table run in the first round only.

Usage: ``python benchmarks/bench_feature_sum.py [--quick] [--out-dir DIR] [--baseline-library DIR]``
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

NAME = "feature_sum"
DIM = 10
BANDWIDTH = 1.0
FM_SEED = 0
DATA_SEED = 20240601
#: rows per chunk of the numpy baselines (each at the size measured fastest for it)
PLAIN_CHUNK, BUFFER_CHUNK = 1024, 512
BASELINE_JOBS = 2
TIME_RATIO_TARGET = 1.1
MEM_TARGET_MB = 100.0
TILES = (256, 512, 1024, 2048, 4096)

FULL = {"n": 1_000_000, "m": 1000}
QUICK = {"n": 20_000, "m": 200}

#: (key, label, kind, params); params: n_jobs, tile, library ("current" / "before"), once (first
#: round only), rounds (the first few rounds only), paired (run back to back with the other
#: paired configurations, in an order that alternates between rounds)
RFF_CONFIGS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("t_default", "RFF sum: make_feature_sum, n_jobs=default", "transformation", {"paired": True}),
    (
        "f32_buf",
        f"numpy float32 chunked kernel, out= buffers, {BUFFER_CHUNK} rows, 2 threads",
        "f32_buf",
        {"paired": True},
    ),
    (
        "f32_plain",
        f"numpy float32 chunked kernel, plain, {PLAIN_CHUNK} rows, 2 threads",
        "f32_plain",
        {"paired": True},
    ),
    ("fs_default", "fm.fixed_sum(X, clip=box), n_jobs=default", "fixed_sum", {}),
    ("fs_1", "fm.fixed_sum(X, clip=box), n_jobs=1", "fixed_sum", {"n_jobs": 1}),
    ("f64_oneshot", "numpy float64 one-shot kernel", "f64_oneshot", {"once": True}),
    ("pycle", "pycle 1.2 computeSketch (complex exponential)", "pycle", {"once": True}),
    ("stages", "stage profile (ns per phase, one thread)", "stages", {"once": True}),
]
TILE_CONFIGS = [
    (f"tile_{t}", f"fm.fixed_sum, n_jobs=default, tiles of {t} rows", "fixed_sum", {"tile": t, "rounds": 3})
    for t in TILES
]
#: paired ratios reported: (numerator, denominator, label); pairs with a missing key are skipped
PAIRS = [
    ("t_default", "f32_buf", "RFF sum ÷ float32 buffered kernel"),
    ("t_default", "f32_plain", "RFF sum ÷ float32 plain kernel"),
    ("t_default_before", "f32_buf", "RFF sum BEFORE ÷ float32 buffered kernel"),
    ("t_default", "t_default_before", "RFF sum after ÷ before"),
]
#: other maps for the before/after table: name -> constructor(opendp_sketch module, m)
OTHER_MAPS: dict[str, Callable[[Any, int], Any]] = {
    "Histogram": lambda dps, m: dps.Histogram(bounds=(0.0, 1.0), bins=32, dim=DIM),
    "RACE": lambda dps, m: dps.RACE(dim=DIM, rows=100, buckets=1000, bucket_width=1.0, seed=0),
    "QuantizedRFF": lambda dps, m: dps.QuantizedRFF(dim=DIM, num_features=m, seed=0),
    "SubsampledRFF r=1": lambda dps, m: dps.features.SubsampledRFF(dim=DIM, num_features=m, seed=0, r=1),
    "SubsampledRFF r=50": lambda dps, m: dps.features.SubsampledRFF(dim=DIM, num_features=m, seed=0, r=50),
}


def _data(n: int) -> np.ndarray:
    return np.random.default_rng(DATA_SEED).random((n, DIM))


def numpy_oneshot(X: np.ndarray, omega: np.ndarray) -> np.ndarray:
    Z = X @ omega
    return np.concatenate([np.cos(Z).sum(0), np.sin(Z).sum(0)])


def _threaded_chunks(n: int, chunk: int, part: Callable[[int], np.ndarray]) -> np.ndarray:
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    with threadpool_limits(1), ThreadPoolExecutor(BASELINE_JOBS) as pool:
        return np.sum(list(pool.map(part, range(0, n, chunk))), axis=0, dtype=np.float64)


def numpy_f32_plain(X: np.ndarray, omega: np.ndarray, chunk: int = PLAIN_CHUNK) -> np.ndarray:
    """The float32 kernel as usually written: new arrays for every chunk."""
    w = omega.astype(np.float32)

    def part(s: int) -> np.ndarray:
        Z = X[s : s + chunk].astype(np.float32) @ w
        return np.concatenate([np.cos(Z).sum(0), np.sin(Z).sum(0)])

    return _threaded_chunks(X.shape[0], chunk, part)


def numpy_f32_buffered(X: np.ndarray, omega: np.ndarray, chunk: int = BUFFER_CHUNK) -> np.ndarray:
    """The float32 kernel with per-thread arrays reused through ``out=`` (no allocation per chunk)."""
    import threading

    w = omega.astype(np.float32)
    local = threading.local()

    def part(s: int) -> np.ndarray:
        if not hasattr(local, "z"):
            local.x = np.empty((chunk, DIM), np.float32)
            local.z = np.empty((chunk, w.shape[1]), np.float32)
            local.cs = np.empty((2, chunk, w.shape[1]), np.float32)
        r = min(chunk, X.shape[0] - s)
        x, z, cs = local.x[:r], local.z[:r], local.cs[:, :r]
        np.copyto(x, X[s : s + r], casting="same_kind")
        np.matmul(x, w, out=z)
        np.cos(z, out=cs[0])
        np.sin(z, out=cs[1])
        return cs.sum(axis=1).reshape(-1)

    return _threaded_chunks(X.shape[0], chunk, part)


def stage_profile(X: np.ndarray, fm: Any, rows: int = 512, passes: int = 5) -> dict[str, float]:
    """Nanoseconds per phase (one cos/sin pair) of each stage, one thread, BLAS single-threaded,
    on tiles of ``rows`` rows of ``X`` (best of ``passes`` passes): the stages of the exact RFF
    sum (as ``features/rff.py`` runs them) and of the float32 buffered kernel, and both whole."""
    import math
    import time

    from threadpoolctl import threadpool_limits

    from opendp_sketch._fixed import exact_bits, quantize_rows

    w64, k = fm.frequencies, fm.frac_bits
    w32 = w64.astype(np.float32)
    n, mp = X.shape[0] - X.shape[0] % rows, w64.shape[1]
    Xq = quantize_rows(X[:n], exact_bits(DIM))
    scale, limit = np.float32(math.ldexp(fm.gain, k)), np.float32(math.ldexp(1 - 2.0**-20, 2 * k))
    Z = np.empty((rows, mp))
    z32, t, x32 = (
        np.empty((rows, mp), np.float32),
        np.empty((rows, mp), np.float32),
        np.empty((rows, DIM), np.float32),
    )
    ab = Z.reshape(-1).view(np.float32).reshape(2, rows, mp)
    cs = np.empty((2, rows, mp), np.float32)
    stages: dict[str, Callable[[int], Any]] = {
        "exact: projection X_q @ Ω (float64, exact)": lambda s: np.matmul(Xq[s : s + rows], w64, out=Z),
        "exact: phases rounded to float32": lambda s: np.copyto(z32, Z, casting="same_kind"),
        "exact: cos (float32)": lambda s: np.cos(z32, out=ab[0]),
        "exact: sin (float32)": lambda s: np.sin(z32, out=ab[1]),
        "exact: scale by γ·2^k": lambda s: np.multiply(ab, scale, out=ab),
        "exact: pair certificate (a², b², sum, max)": lambda s: (
            np.multiply(ab[0], ab[0], out=t),
            np.multiply(ab[1], ab[1], out=z32),
            np.add(t, z32, out=t),
            bool(t.max() <= limit),
        ),
        "exact: truncation + int32 column sums": lambda s: np.add.reduce(ab, axis=1, dtype=np.int32),
        "float32: rows to float32": lambda s: np.copyto(x32, X[s : s + rows], casting="same_kind"),
        "float32: projection x @ Ω (float32)": lambda s: np.matmul(x32, w32, out=z32),
        "float32: cos": lambda s: np.cos(z32, out=cs[0]),
        "float32: sin": lambda s: np.sin(z32, out=cs[1]),
        "float32: column sums": lambda s: cs.sum(axis=1),
    }
    best = dict.fromkeys(stages, math.inf)
    whole = {"whole: fm.fixed_sum, n_jobs=1": math.inf, "whole: float32 buffered kernel, 1 thread": math.inf}
    with threadpool_limits(1):
        for _ in range(passes):
            for (
                name,
                f,
            ) in stages.items():  # stage by stage over all tiles: each reads what the one before wrote
                t0 = time.perf_counter()
                for s in range(0, n, rows):
                    f(s)
                best[name] = min(best[name], time.perf_counter() - t0)
            t0 = time.perf_counter()
            fm.fixed_sum(X[:n], n_jobs=1)
            whole["whole: fm.fixed_sum, n_jobs=1"] = min(
                whole["whole: fm.fixed_sum, n_jobs=1"], time.perf_counter() - t0
            )
            t0 = time.perf_counter()
            for s in range(0, n, rows):
                np.copyto(x32, X[s : s + rows], casting="same_kind")
                np.matmul(x32, w32, out=z32)
                np.cos(z32, out=cs[0])
                np.sin(z32, out=cs[1])
                cs.sum(axis=1)
            key = "whole: float32 buffered kernel, 1 thread"
            whole[key] = min(whole[key], time.perf_counter() - t0)
    return {name: v / (n * mp) * 1e9 for name, v in {**best, **whole}.items()}


def pycle_sketch(X: np.ndarray, omega: np.ndarray) -> np.ndarray:
    import pycle.sketching as sk

    z = sk.computeSketch(X, sk.SimpleFeatureMap("complexExponential", omega))  # mean of exp(iΩᵀx)
    return np.concatenate([z.real, z.imag]) * X.shape[0]


# -- child ------------------------------------------------------------------------------------


def setup(config: dict[str, Any]) -> Callable[[], Any]:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    n, m, kind = config["n"], config["m"], config["kind"]
    X = _data(n)
    lo, hi = np.zeros(DIM), np.ones(DIM)
    if kind == "map":
        fm = OTHER_MAPS[config["map"]](dps, m)
        return lambda: fm.fixed_sum(X, clip=(lo, hi))
    fm = dps.RFF(dim=DIM, num_features=m, bandwidth=BANDWIDTH, seed=FM_SEED)
    if config.get("tile"):
        from opendp_sketch.features import base

        base.TILE_ENTRIES = config["tile"] * (m // 2)
    omega = fm.frequencies
    if kind == "f64_oneshot":
        return lambda: numpy_oneshot(X, omega)
    if kind == "f32_plain":
        return lambda: numpy_f32_plain(X, omega)
    if kind == "f32_buf":
        return lambda: numpy_f32_buffered(X, omega)
    if kind == "pycle":
        return lambda: pycle_sketch(X, omega)
    if kind == "stages":
        rows = min(n, 200_000)
        return lambda: stage_profile(X[:rows], fm)
    if kind == "fixed_sum":
        return lambda: fm.fixed_sum(X, clip=(lo, hi), n_jobs=config.get("n_jobs"))
    if kind == "transformation":
        t = dps.make_feature_sum(
            dps.box_domain((0, 1), num_columns=DIM),
            dp.symmetric_distance(),
            feature_map=fm,
            p=1,
            fixed_point=True,
            n_jobs=config.get("n_jobs"),
        )
        return lambda: t(X)
    raise ValueError(kind)


def post(config: dict[str, Any], result: Any) -> dict[str, Any]:
    """Exact integers (ours) as strings, and the sum in float64 feature units for accuracy."""
    from opendp_sketch.features.rff import RFF_FRAC_BITS, RFF_GAIN

    if config["kind"] == "stages":
        return {"units": None, "stages": result}
    if config["kind"] in ("fixed_sum", "transformation", "map"):
        units = [int(v) for v in result]
        scale = 1.0 if config["kind"] == "map" else 2.0**-RFF_FRAC_BITS / RFF_GAIN
        return {
            "units": [str(v) for v in units],
            "value": (np.array(units, dtype=np.float64) * scale).tolist(),
        }
    return {"units": None, "value": np.asarray(result, dtype=np.float64).tolist()}


# -- parent -----------------------------------------------------------------------------------


def _pop_baseline_library() -> str | None:
    """``--baseline-library DIR`` (a directory holding an ``opendp_sketch`` package), removed from argv."""
    if "--baseline-library" not in sys.argv:
        return None
    i = sys.argv.index("--baseline-library")
    path = str(Path(sys.argv[i + 1]).resolve())
    del sys.argv[i : i + 2]
    if not (Path(path) / "opendp_sketch" / "__init__.py").is_file():
        raise SystemExit(f"--baseline-library ({path}) must contain an opendp_sketch package")
    return path


def _env(library: str, baseline: str | None) -> dict[str, str]:
    if library == "current":
        return {}
    assert baseline is not None
    return {"OPENDP_SKETCH_BENCH_SNAPSHOT": baseline, "PYTHONPATH": baseline}


def _configs(baseline: str | None, have_pycle: bool) -> list[tuple[str, str, str, dict[str, Any]]]:
    configs = [c for c in RFF_CONFIGS if have_pycle or c[2] != "pycle"] + TILE_CONFIGS
    if baseline is None:
        return configs
    configs.insert(
        2,
        (
            "t_default_before",
            "RFF sum: make_feature_sum, n_jobs=default — BEFORE",
            "transformation",
            {"library": "before", "paired": True},
        ),
    )
    for name in OTHER_MAPS:
        for lib in ("before", "current"):
            configs.append(
                (f"map_{name}_{lib}", f"{name} ({lib})", "map", {"map": name, "library": lib, "once": True})
            )
    return configs


def _round(
    configs: list[tuple[str, str, str, dict[str, Any]]], rep: int
) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The configurations of round ``rep``: the paired ones first, back to back, reversed in
    odd rounds (so neither side always runs first), then the others that run in this round."""
    paired = [c for c in configs if c[3].get("paired")]
    rest = [
        c
        for c in configs
        if not c[3].get("paired") and not (c[3].get("once") and rep > 0) and rep < c[3].get("rounds", rep + 1)
    ]
    return (paired[::-1] if rep % 2 else paired) + rest


def _paired(runs: dict[str, list[dict[str, Any]]], a: str, b: str, field: str) -> list[float]:
    """Ratios ``a / b`` of ``field`` round by round (both ran back to back in each round)."""
    return [ra[field] / rb[field] for ra, rb in zip(runs[a], runs[b])]


def _spread(xs: list[float]) -> str:
    return f"{C.fmt(min(xs))} / **{C.fmt(C.median(xs))}** / {C.fmt(max(xs))}"


def _pycle_status() -> tuple[bool, str]:
    try:
        from importlib.metadata import version

        import pycle.sketching  # noqa: F401

        return True, f"pycle {version('pycle')} (installed with `pip install pycle==1.2`)"
    except Exception as e:  # any import failure is reported, not fatal
        return False, f"pycle not measured: `import pycle.sketching` failed ({type(e).__name__}: {e})"


def main() -> None:
    baseline = _pop_baseline_library()
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=9)
    if args.child is not None:
        C.child_main(args.child, setup, post)
        return
    size = QUICK if args.quick else FULL
    n, m = size["n"], size["m"]
    info = C.machine_info()
    default_jobs = min(os.cpu_count() or 1, 4)
    have_pycle, pycle_note = _pycle_status()
    configs = _configs(baseline, have_pycle)
    C.progress(f"{NAME}: n={n}, d={DIM}, m={m}, repeats={args.repeats}, {len(configs)} configurations")

    runs: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in configs}
    for rep in range(args.repeats):
        for key, label, kind, params in _round(configs, rep):
            cfg = {
                "n": n,
                "m": m,
                "kind": kind,
                **params,
                "env": _env(params.get("library", "current"), baseline),
            }
            r = C.run_child_quietly(__file__, cfg, args)
            runs[key].append(r)
            C.progress(
                f"rep {rep + 1}: {label}: {r['time_s']:.2f} s (cpu {r['cpu_s']:.1f} s), "
                f"peak extra {r['peak_extra_mb']:.0f} MB, background {_bg(r['background_cores'])} cores"
            )

    med = {k: C.median([r["time_s"] for r in v]) for k, v in runs.items() if v}
    cpu = {k: C.median([r["cpu_s"] for r in v]) for k, v in runs.items() if v}
    mem = {k: C.median([r["peak_extra_mb"] for r in v]) for k, v in runs.items() if v}
    ref = np.array(runs["f64_oneshot"][0]["result"]["value"])

    # every opendp_sketch RFF configuration must give the same exact integers
    rff_units = {
        k: runs[k][0]["result"]["units"]
        for k, _, kind, p in configs
        if kind in ("fixed_sum", "transformation")
    }
    same_units = len({tuple(u) for u in rff_units.values()}) == 1
    same_maps = (
        all(
            runs[f"map_{name}_before"][0]["result"]["units"]
            == runs[f"map_{name}_current"][0]["result"]["units"]
            for name in OTHER_MAPS
        )
        if baseline
        else None
    )

    def ratio(k: str, base: str) -> str:
        return C.fmt(med[k] / med[base]) if base in med else "–"

    main_keys = [c for c in configs if not c[0].startswith(("tile_", "map_", "stages"))]
    rows = []
    for key, label, _, _ in main_keys:
        ts = [r["time_s"] for r in runs[key]]
        err = float(np.max(np.abs(np.array(runs[key][0]["result"]["value"]) - ref))) / n
        bgs = [r["background_cores"] for r in runs[key] if r["background_cores"] is not None]
        rows.append(
            [
                label,
                C.fmt(med[key]),
                f"{C.fmt(min(ts))}–{C.fmt(max(ts))} ({len(ts)})",
                C.fmt(cpu[key]),
                ratio(key, "f32_buf"),
                ratio(key, "f32_plain"),
                ratio(key, "f64_oneshot"),
                ratio(key, "pycle"),
                C.fmt(mem[key]),
                "0 (reference)" if key == "f64_oneshot" else C.fmt(err),
                f"{C.fmt(C.median(bgs))} / {C.fmt(max(bgs))}" if bgs else "n/a",
            ]
        )
    headers = [
        "configuration",
        "median time (s)",
        "min–max (s) (runs)",
        "median CPU (s)",
        "÷ float32 buffered",
        "÷ float32 plain",
        "÷ float64 one-shot",
        "÷ pycle",
        "median peak extra RSS (MB)",
        "max abs diff / n vs float64",
        "other processes' CPU, median / max (cores)",
    ]
    tile_rows = [
        [
            f"{t} rows ({t * m // 2:,} phases)",
            C.fmt(med[f"tile_{t}"]),
            C.fmt(cpu[f"tile_{t}"]),
            ratio(f"tile_{t}", "f32_buf"),
            C.fmt(mem[f"tile_{t}"]),
        ]
        for t in TILES
    ]
    pairs = [(a, b, label) for a, b, label in PAIRS if a in runs and b in runs]
    pair_rows = [
        [
            label,
            _spread(_paired(runs, a, b, "time_s")),
            _spread(_paired(runs, a, b, "cpu_s")),
            str(len(runs[a])),
        ]
        for a, b, label in pairs
    ]
    buf_wall = _paired(runs, "t_default", "f32_buf", "time_s")
    plain_wall = _paired(runs, "t_default", "f32_plain", "time_s")
    verdict = (
        f"RFF sum ÷ two-thread float32 kernel, paired wall-time ratios min / **median** / max over "
        f"{len(buf_wall)} rounds: {_spread(buf_wall)} against the buffered kernel and "
        f"{_spread(plain_wall)} against the plain one (target ≤ {TIME_RATIO_TARGET}: "
        f"**{'met' if C.median(buf_wall) <= TIME_RATIO_TARGET else 'not met'}** against the buffered kernel); "
        f"peak extra memory **{mem['t_default']:.0f} MB** (target ≤ {MEM_TARGET_MB:.0f} MB). "
        f"Same exact integers in every opendp_sketch configuration (n_jobs, tiles"
        f"{', and the library before this change' if baseline else ''}): **{'yes' if same_units else 'NO'}**."
    )
    stage_section = ""
    if runs.get("stages"):
        prof = runs["stages"][0]["result"]["stages"]
        stage_section = f"""
## Where the time goes (one thread)

Nanoseconds per phase (one cos/sin pair, i.e. two of the m features) of each stage, one thread,
BLAS single-threaded, tiles of 512 rows, best of 5 passes over {min(n, 200_000):,} rows
(`stage_profile` in the script; the stages as `features/rff.py` runs them). The exact sum pays,
on top of the float32 kernel's projection, cos, sin and sums: the float64 projection (exact, so a
row's phases do not depend on its chunk), the rounding of the phases to float32, the scaling,
the pair certificate behind the sensitivity, and the truncation to integers before the exact
column sums.

{C.md_table(["stage", "ns per phase"], [[k, C.fmt(v)] for k, v in prof.items()])}
"""
    before_section = ""
    if baseline:
        brows = [
            [
                f"RFF m = {m} (make_feature_sum)",
                C.fmt(med["t_default_before"]),
                C.fmt(med["t_default"]),
                C.fmt(med["t_default"] / med["t_default_before"]),
                C.fmt(mem["t_default_before"]),
                C.fmt(mem["t_default"]),
            ]
        ]
        for name in OTHER_MAPS:
            b, a = f"map_{name}_before", f"map_{name}_current"
            brows.append(
                [name, C.fmt(med[b]), C.fmt(med[a]), C.fmt(med[a] / med[b]), C.fmt(mem[b]), C.fmt(mem[a])]
            )
        before_section = f"""
## Before / after (same run)

`before` = the library in `{baseline}` (the code before this change), `after` = the measured
snapshot. `fm.fixed_sum(X, clip=box)`, n_jobs = default, n = {n:,}, d = {DIM}; Histogram 32 bins
per column, RACE 100 rows × 1000 buckets, QuantizedRFF and SubsampledRFF with m = {m}.
Exact integer sums identical before and after for every map: **{"yes" if same_maps else "NO"}**.

{C.md_table(["map", "before: median time (s)", "after (s)", "after ÷ before", "before: peak extra RSS (MB)", "after (MB)"], brows)}
"""
    mem_method = runs["t_default"][0]["mem_method"]
    body = f"""## Summary

{verdict}

## Paired ratios

Each round runs the paired configurations back to back in fresh processes (order alternating
between rounds); the ratio of each pair, min / **median** / max over the rounds. Wall time is
what a user waits; CPU time is less sensitive to other processes on the shared cores.

{C.md_table(["pair", "wall-time ratio", "CPU-time ratio", "rounds"], pair_rows)}
{stage_section}
## Setting

RFF (Gaussian kernel), d = {DIM}, m = {m} features ({m // 2} frequencies), bandwidth {BANDWIDTH},
feature-map seed {FM_SEED}; X: n = {n:,} rows uniform in [0, 1]^{DIM} from
`np.random.default_rng({DATA_SEED})`; the box is [0, 1]^{DIM}. Default `n_jobs` = min(usable CPUs, 4)
= {default_jobs} threads. The numpy float32 baselines run {BASELINE_JOBS} threads over chunks
({PLAIN_CHUNK} rows plain, {BUFFER_CHUNK} rows buffered: each at its fastest measured size) with
BLAS single-threaded, and sum in float32 per chunk. {pycle_note}; it evaluates exp(iΩᵀx) in complex128
with its default batches, single-threaded (numpy), with the same Ω.

Each configuration was measured up to {args.repeats} times, each time **in a fresh subprocess**
(import, generate X, then one measured call), interleaved round-robin; the tile sweep in the
first 3 rounds, the float64 one-shot kernel, pycle, the stage profile and the other maps once.
Times are wall-clock medians. **Memory = peak extra RSS** ({mem_method}): peak
resident set size during the call minus the RSS just before it, counting every allocation of the
process. X itself ({n * DIM * 8 / 2**20:.0f} MB) exists before the call and is not counted.
The last column is the CPU used by *other* processes during the call (0 = quiet; the machine has
2 cores, so a busy neighbour inflates wall times).

Accuracy: max over the m coordinates of |sum − float64 one-shot sum| / n (opendp_sketch sums are
divided by `fm.gain` = 1 − 2^-12; pycle's mean is multiplied by n).

## Results

{C.md_table(headers, rows)}

## Tile size of the dense RFF work

`fm.fixed_sum(X, clip=box)`, n_jobs = default; rows are clipped and rounded per chunk of 4096,
then the phase / cos / sin / certificate / integer-sum arrays run on tiles of the given number of
rows (about 16 bytes per phase of work arrays per thread).

{C.md_table(["tile", "median time (s)", "median CPU (s)", "÷ float32 buffered", "median peak extra RSS (MB)"], tile_rows)}
{before_section}"""
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, [(label, med[key], mem[key]) for key, label, *_ in main_keys], n, m)
    body += f"\nPlot: `{png.name}` (wall time and peak extra memory per configuration).\n"
    C.write_report(
        od / f"{NAME}.md",
        f"RFF feature sum vs numpy kernels and pycle (n = {n:,}, m = {m})",
        info,
        body,
        args.quick,
    )


def _bg(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _plot(path: Path, bars: list[tuple[str, float, float]], n: int, m: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.2))
    y = np.arange(len(bars))[::-1]
    colors = ["#1f77b4" if "RFF sum" in lab or "fixed_sum" in lab else "#888888" for lab, *_ in bars]
    a1.barh(y, [t for _, t, _ in bars], color=colors)
    a1.set_xscale("log")
    a1.set_yticks(y, [lab for lab, *_ in bars], fontsize=7)
    a1.set_xlabel("median wall time (s, log scale)")
    a2.barh(y, [max(mb, 1e-3) for *_, mb in bars], color=colors)
    a2.axvline(MEM_TARGET_MB, color="red", ls="--", lw=1, label=f"target: {MEM_TARGET_MB:.0f} MB")
    a2.set_xscale("log")
    a2.set_yticks(y, [""] * len(bars))
    a2.set_xlabel("median peak extra RSS (MB, log scale)")
    a2.legend(fontsize=8)
    fig.suptitle(f"RFF feature sum, n = {n:,}, d = {DIM}, m = {m}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
