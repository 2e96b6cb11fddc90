"""Noise cost of a sketch release: OpenDP's exact samplers vs the rest, for m = 10^3 … 10^6.

Setting (full mode): a ``Histogram`` with m bins on one column (m features, one 1 per row) over
n = 10^4 rows uniform in [0, 1] (seeded numpy RNG), so the feature sum itself is cheap and the
release cost is dominated by what scales with m. For each m:

(a)  the feature-sum transformation alone: ``make_feature_sum(..., fixed_point=True)`` — the
     integer transformation ``make_private_sketch`` noises — invoked on X; also ``fm.fixed_sum(X)``
     alone (the numpy part without the Python-int post-processing and OpenDP conversions);
(b)  the whole ``make_private_sketch`` measurement invoked on X, Laplace (``max_divergence``) and
     Gaussian (``zero_concentrated_divergence``); noise scale 1.0 in feature units;
(c)  OpenDP's ``make_laplace`` / ``make_gaussian`` alone on an i64 vector of length m, fed by a
     ``dp.t.make_user_transformation`` that returns a constant numpy int64 array (numpy → Rust and
     Rust → Python conversions included), at the same integer scale as (b);
(d)  conversion only: that user transformation invoked with no noise.

(c) − (d) estimates the pure sampler time; (b) − (c) what the release adds around the samplers.
Each (m, component) is timed in-process ``--repeats`` times (default 5) after one warm-up call (median); for
m = 10^6 a component whose first (warm-up) call takes longer than ``SLOW_S`` seconds is measured
only once, reusing that call. A second table sweeps the noise scale at m = 10^4.

Usage: ``python benchmarks/bench_noise.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_noise"
DATA_SEED = 20240603
SCALE = 1.0  # noise scale in feature units (Histogram: 1 unit = 1 count)
SLOW_S = 5.0  # at the largest m, a component slower than this is timed once

FULL = {
    "n": 10_000,
    "ms": [10**3, 10**4, 10**5, 10**6],
    "sweep_m": 10**4,
    "sweep_scales": [1.0, 1e3, 1e6, 1e9],
}
QUICK = {"n": 1_000, "ms": [10**2, 10**3], "sweep_m": 10**3, "sweep_scales": [1.0, 1e6]}

COMPONENTS: list[tuple[str, str]] = [
    ("fixed_sum", "(a0) fm.fixed_sum(X) (numpy only)"),
    ("feature_sum", "(a) make_feature_sum(fixed_point=True) invoked"),
    ("private_laplace", "(b) make_private_sketch, Laplace"),
    ("private_gaussian", "(b) make_private_sketch, Gaussian"),
    ("const_laplace", "(c) const i64 vector >> make_laplace"),
    ("const_gaussian", "(c) const i64 vector >> make_gaussian"),
    ("const_only", "(d) const i64 vector, no noise"),
]


def _const_transformation(const: np.ndarray, metric: str):
    import opendp.prelude as dp

    if metric == "l1":
        out_metric, stab = dp.l1_distance(T=dp.i64), (lambda d_in: d_in)
    else:
        out_metric, stab = dp.l2_distance(T=float), (lambda d_in: float(d_in))
    return dp.t.make_user_transformation(
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        dp.symmetric_distance(),
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        out_metric,
        lambda _x: const,
        stab,
    )


def build(m: int, n: int, scale: float) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """The callables of every component for ``m`` features, and their construction times."""
    import time

    import opendp.prelude as dp

    import opendp_sketch as dps

    X = np.random.default_rng(DATA_SEED).random((n, 1))
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=m, dim=1)
    dom, sym = dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance()
    built: dict[str, float] = {}

    def timed(key, f):
        t0 = time.perf_counter()
        obj = f()
        built[key] = time.perf_counter() - t0
        return obj

    t_sum = timed("feature_sum", lambda: dps.make_feature_sum(dom, sym, fm, p=1, fixed_point=True))
    m_lap = timed(
        "private_laplace", lambda: dps.make_private_sketch(dom, sym, dp.max_divergence(), fm, scale)
    )
    m_gau = timed(
        "private_gaussian",
        lambda: dps.make_private_sketch(dom, sym, dp.zero_concentrated_divergence(), fm, scale),
    )
    int_scale = np.ldexp(scale, fm.frac_bits)
    # a constant that looks like a histogram of X (so values are realistic), built outside the timing
    const = np.asarray(fm.fixed_sum(X), dtype=np.int64)
    t_l1 = _const_transformation(const, "l1")
    t_l2 = _const_transformation(const, "l2")
    c_lap = timed("const_laplace", lambda: t_l1 >> dp.m.then_laplace(int_scale))
    c_gau = timed("const_gaussian", lambda: t_l2 >> dp.m.then_gaussian(int_scale))
    dummy = [0]
    calls = {
        "fixed_sum": lambda: fm.fixed_sum(X),
        "feature_sum": lambda: t_sum(X),
        "private_laplace": lambda: m_lap(X),
        "private_gaussian": lambda: m_gau(X),
        "const_laplace": lambda: c_lap(dummy),
        "const_gaussian": lambda: c_gau(dummy),
        "const_only": lambda: t_l1(dummy),
    }
    return calls, built


def _time_component(
    fn: Callable[[], Any], repeats: int, allow_single: bool
) -> tuple[list[float], float | None]:
    """Times (s) and the CPU cores other processes used meanwhile."""
    with C.Probe() as p:
        first, _ = C.time_call(fn)  # warm-up
        if allow_single and first > SLOW_S:
            ts = [first]
        else:
            ts = [C.time_call(fn)[0] for _ in range(repeats)]
    return ts, p.background_cores


def _share(c: float, d: float, a: float) -> float:
    """Sampler share of a release estimated from direct measurements only."""
    return (c - d) / (c + a)


def _sweep_block(fn: Callable[[], Any], args) -> list[float]:
    def measure():
        with C.Probe() as p:
            ts = C.time_repeats(fn, args.repeats)
        return ts, p.background_cores

    return C.quiet_measure(measure, args)[0]


def main() -> None:
    # the samplers' time varies by about ±15% from call to call: 5 repeats by default
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=5)
    import opendp.prelude as dp

    dp.enable_features("contrib", "honest-but-curious")
    size = QUICK if args.quick else FULL
    n, ms = size["n"], size["ms"]
    info = C.machine_info()
    C.progress(f"{NAME}: n={n}, m in {ms}, repeats={args.repeats}")

    times: dict[int, dict[str, list[float]]] = {}
    background: list[float] = []
    builds: dict[int, dict[str, float]] = {}
    for m in ms:
        is_last = m == max(ms)
        calls, builds[m] = build(m, n, SCALE)
        times[m] = {}
        for key, label in COMPONENTS:
            ts, bg = C.quiet_measure(
                lambda fn=calls[key], last=is_last: _time_component(fn, args.repeats, allow_single=last),
                args,
            )
            times[m][key] = ts
            if bg is not None:
                background.append(bg)
            C.progress(f"m={m:>8,}: {label}: median {C.median(ts):.4f} s over {len(ts)} run(s)")
        del calls

    # noise-scale sweep at one m (samplers only, plus conversion)
    sweep_m = size["sweep_m"]
    sweep_rows = []
    const = np.arange(sweep_m, dtype=np.int64)
    t_l1, t_l2 = _const_transformation(const, "l1"), _const_transformation(const, "l2")
    conv = C.median(_sweep_block(lambda: t_l1([0]), args))
    for s in size["sweep_scales"]:
        lap = t_l1 >> dp.m.then_laplace(s)
        gau = t_l2 >> dp.m.then_gaussian(s)
        tl = C.median(_sweep_block(lambda meas=lap: meas([0]), args))
        tg = C.median(_sweep_block(lambda meas=gau: meas([0]), args))
        sweep_rows.append(
            [
                C.fmt(s),
                C.fmt(tl / sweep_m * 1e6),
                C.fmt((tl - conv) / sweep_m * 1e6),
                C.fmt(tg / sweep_m * 1e6),
                C.fmt((tg - conv) / sweep_m * 1e6),
            ]
        )
        C.progress(f"scale {s:g}: laplace {tl:.4f} s, gaussian {tg:.4f} s (m={sweep_m})")

    # tables
    headers = ["component"] + [f"m = {m:,}" for m in ms]
    t_rows, us_rows = [], []
    for key, label in COMPONENTS:
        t_rows.append(
            [label]
            + [C.fmt(C.median(times[m][key])) + ("" if len(times[m][key]) > 1 else " (1 run)") for m in ms]
        )
        us_rows.append([label] + [C.fmt(C.median(times[m][key]) / m * 1e6) for m in ms])

    def med(m, k):
        return C.median(times[m][k])

    derived = [
        ["Laplace sampler ≈ (c) − (d)"]
        + [C.fmt((med(m, "const_laplace") - med(m, "const_only")) / m * 1e6) for m in ms],
        ["Gaussian sampler ≈ (c) − (d)"]
        + [C.fmt((med(m, "const_gaussian") - med(m, "const_only")) / m * 1e6) for m in ms],
        ["sampler share of Laplace release, (c) / (b)"]
        + [f"{100 * med(m, 'const_laplace') / med(m, 'private_laplace'):.0f}%" for m in ms],
        ["sampler share of Gaussian release, (c) / (b)"]
        + [f"{100 * med(m, 'const_gaussian') / med(m, 'private_gaussian'):.0f}%" for m in ms],
        ["rest of Laplace release, (b) − (c)"]
        + [C.fmt((med(m, "private_laplace") - med(m, "const_laplace")) / m * 1e6) for m in ms],
        ["rest of Gaussian release, (b) − (c)"]
        + [C.fmt((med(m, "private_gaussian") - med(m, "const_gaussian")) / m * 1e6) for m in ms],
        ["non-sampler work measured directly, (a) + (d)"]
        + [C.fmt((med(m, "feature_sum") + med(m, "const_only")) / m * 1e6) for m in ms],
        ["Laplace sampler share, direct: [(c) − (d)] / [(c) + (a)]"]
        + [
            f"{100 * _share(med(m, 'const_laplace'), med(m, 'const_only'), med(m, 'feature_sum')):.0f}%"
            for m in ms
        ],
        ["Gaussian sampler share, direct: [(c) − (d)] / [(c) + (a)]"]
        + [
            f"{100 * _share(med(m, 'const_gaussian'), med(m, 'const_only'), med(m, 'feature_sum')):.0f}%"
            for m in ms
        ],
        ["Python/OpenDP overhead of the sum, (a) − (a0)"]
        + [C.fmt((med(m, "feature_sum") - med(m, "fixed_sum")) / m * 1e6) for m in ms],
    ]
    b_rows = [
        [label.replace(" invoked", "")] + [C.fmt(builds[m][key] * 1e3) for m in ms]
        for key, label in COMPONENTS
        if key in builds[ms[0]]
    ]

    bg_txt = f"{C.fmt(sum(background) / len(background))} / {C.fmt(max(background))}" if background else "n/a"
    body = f"""## Setting

`Histogram(bounds=(0, 1), bins=m, dim=1)` (m features, exactly one 1 per row, integer features so
1 unit = 1 count), X: n = {n:,} rows uniform in [0, 1] from `np.random.default_rng({DATA_SEED})`.
Noise scale {SCALE:g} (feature units = integer units here) for both mechanisms.
(b) is `make_private_sketch(box_domain((0, 1), num_columns=1), symmetric_distance(), measure, fm, scale)`
invoked on X: feature sum + noise on the m-vector + noisy count + `Sketch` construction.
(c)/(d) use `dp.t.make_user_transformation(vector_domain(atom_domain(T=i64)), symmetric_distance(),
vector_domain(atom_domain(T=i64)), l1_distance(T=i64) | l2_distance(T=f64), lambda _: const, ...)`
with a constant numpy int64 array `const` (the histogram of X), chained with
`dp.m.then_laplace(scale)` / `dp.m.then_gaussian(scale)` for (c), invoked on `[0]`.

Timing: in-process wall clock, one warm-up call then {args.repeats} timed calls, median. At the largest
m a component whose warm-up call took more than {SLOW_S:g} s is reported from that single call
(marked "(1 run)"). Before each component the script waited up to {args.wait_quiet:g} s for other processes
to go idle, and a component during which other processes used more than {C.BUSY_CORES} cores was measured
again (up to {args.max_attempts} attempts in all, the least disturbed kept); other processes used {bg_txt} cores (mean / max over the timed blocks; 0 = quiet machine).

## Wall time per release (s)

{C.md_table(headers, t_rows)}

## Cost per coordinate (µs = time / m)

{C.md_table(headers, us_rows)}

## Derived (µs per coordinate unless a percentage)

Differences of separately timed medians: the samplers' own time varies by roughly ±15% from
call to call on this machine (e.g. 12 consecutive Laplace calls at m = 10^5: 0.95–1.32 s; the
samplers are randomised rejection samplers), so where (b) and (c)
are within that noise the "(c) / (b)" share can exceed 100% and "(b) − (c)" can be negative. The
rows "measured directly" avoid that subtraction: the non-sampler part of a release is the feature
sum transformation (a) (numpy sum, Python-int accumulation, int64 conversion into OpenDP) plus
the Rust → Python conversion of the noisy vector, bounded by (d).

{C.md_table(["quantity"] + headers[1:], derived)}

## Construction time of the measurement / transformation (ms, not included above)

{C.md_table(headers, b_rows)}

## Noise-scale sweep at m = {sweep_m:,} (µs per coordinate)

Constant i64 vector >> sampler as in (c); "minus conversion" subtracts (d) measured at the same m
({C.fmt(conv / sweep_m * 1e6)} µs / coordinate).

{C.md_table(["integer scale", "Laplace", "Laplace minus conversion", "Gaussian", "Gaussian minus conversion"], sweep_rows)}
"""
    od = C.out_dir(args)
    png = od / f"{NAME}.png"
    _plot(png, times, ms, n)
    body += f"\nPlot: `{png.name}` (log-log wall time vs m, and µs per coordinate vs m).\n"
    C.write_report(
        od / f"{NAME}.md", f"Noise cost vs number of features m (n = {n:,})", info, body, args.quick
    )


def _plot(path: Path, times: dict[int, dict[str, list[float]]], ms: list[int], n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {
        "fixed_sum": ("#7f7f7f", ":", "o"),
        "feature_sum": ("#7f7f7f", "-", "o"),
        "private_laplace": ("#1f77b4", "-", "s"),
        "private_gaussian": ("#d62728", "-", "s"),
        "const_laplace": ("#1f77b4", "--", "^"),
        "const_gaussian": ("#d62728", "--", "^"),
        "const_only": ("#2ca02c", "-.", "v"),
    }
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.6))
    x = np.array(ms, dtype=float)
    for key, label in COMPONENTS:
        c, ls, mk = styles[key]
        t = np.array([C.median(times[m][key]) for m in ms])
        a1.loglog(x, t, color=c, ls=ls, marker=mk, label=label)
        a2.semilogx(x, t / x * 1e6, color=c, ls=ls, marker=mk, label=label)
    a1.set_xlabel("m (number of features)")
    a1.set_ylabel("median wall time (s)")
    a1.set_title("time per release (log-log)")
    a1.grid(True, which="both", alpha=0.3)
    a2.set_yscale("log")
    a2.set_xlabel("m (number of features)")
    a2.set_ylabel("µs per coordinate")
    a2.set_title("cost per coordinate")
    a2.grid(True, which="both", alpha=0.3)
    a2.legend(fontsize=7)
    fig.suptitle(f"Noise cost, Histogram with m bins, n = {n:,}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
