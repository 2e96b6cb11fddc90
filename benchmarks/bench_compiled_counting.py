"""A compiled counting kernel against the library's numpy counting (issue 40, "tall": the decision).

Issue 40 asks for the in-memory schema release of a 10⁷-row table within 3× ``pl.read_parquet``'s
CPU; ``bench_tall.py`` measures the library at 4.6–4.9×, most of the gap in counting the map's
tables (about 100 numpy passes a chunk). This script measures what a compiled kernel would give,
on ``bench_tall.py``'s table (10⁷ × 10, three text columns), so that the decision rests on numbers.
The kernel (``lib/compiled_counting.py``, numba, not part of the library) counts each chunk's joint
tables in one pass, with the numpy path's float operations in the same order.

Every measurement runs in a fresh interpreter (CPU time of every thread):

* **same integers**: the kernel's counts of every ``MarginalTables`` of the release's map, against
  the numpy path's, on the first 2¹⁷ encoded rows with hostile values added (NaN, ±inf, outside
  the box): the script stops if one integer differs;
* **counting alone**: the release's map summed over the whole encoded table, numpy path against
  kernel (the encoding done before the measured call);
* **the compiler's cost per process**: ``import numba`` and the first call of the kernel, loaded
  from numba's on-disk cache (compiled by an earlier child), which a release in a new process pays;
* **alternated pairs**: ``pl.read_parquet``, the in-memory release (numpy path), the in-memory
  release (kernel), ``--pairs K`` times in turn; the ratios are each release's CPU over the read's
  of the same pair (median, min and max).

Usage: ``python benchmarks/bench_compiled_counting.py [--quick] [--out-dir DIR] [--pairs K]``
(``--quick``: 2·10⁵ rows; ``--pairs`` default 5, 2 with ``--quick``). Needs numba.
Writes ``benchmarks/results/bench_compiled_counting.md``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402
from lib import compiled_counting as K  # noqa: E402
from lib.tall import SCHEMA, write_tall  # noqa: E402

NAME = "bench_compiled_counting"
FULL = {"n": 10_000_000, "part": 1_000_000}
QUICK = {"n": 200_000, "part": 50_000}
CHECK_ROWS = 1 << 17


def _marginal_parts(fm: Any) -> list[Any]:
    from opendp_sketch.features.marginals import MarginalTables

    parts = list(getattr(fm, "maps", [fm]))
    return [p for p in parts if isinstance(p, MarginalTables)]


def _release_map(frame: Any, schema: Any) -> Any:
    import opendp_sketch as dps

    return dps.release_sketch(frame, schema=schema, epsilon=1.0).feature_map  # the release's own map


def setup(config: dict[str, Any]):
    import opendp.prelude as dp
    import polars as pl

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    path, mode = config["path"], config["mode"]
    schema = dps.Schema.from_dict(SCHEMA)
    if mode == "read":
        return lambda: pl.read_parquet(path).height
    if mode == "overhead":  # a new process's cost of the compiler: import, then the cached kernel

        def overhead() -> int:
            import numba  # noqa: F401

            fm = dps.MarginalTables(bounds=([0.0], [1.0]), subsets=[0], bins=[[4]])
            return int(K.compiled_joint_sum(fm, np.zeros((4, 1))).sum())

        return overhead
    frame = pl.read_parquet(path)
    if mode == "same":  # hostile rows too: NaN, ±inf and values outside the unit box

        def same() -> int:
            fm = _release_map(frame, schema)
            X = schema.encode(frame.head(CHECK_ROWS))
            rng = np.random.default_rng(0)
            bad = rng.random(X.shape)
            X[bad < 0.01] = np.nan
            X[(bad >= 0.01) & (bad < 0.02)] = np.inf
            X[(bad >= 0.02) & (bad < 0.03)] = -np.inf
            X[(bad >= 0.03) & (bad < 0.04)] = rng.uniform(
                -2.0, 3.0, int(((bad >= 0.03) & (bad < 0.04)).sum())
            )
            parts = _marginal_parts(fm)
            ok = all(K.same_integers(p, X) for p in parts)
            if not ok:
                raise SystemExit("the kernel's integers differ from the numpy path's")
            return len(parts)

        return same
    if mode in ("count_numpy", "count_compiled"):
        fm = _release_map(frame, schema)
        X = np.vstack([schema.encode(frame.slice(s, 1 << 20)) for s in range(0, frame.height, 1 << 20)])
        lo, hi = schema.bounds
        if mode == "count_compiled":
            K.install()
            K.compiled_joint_sum(_marginal_parts(fm)[0], X[:16])  # the kernel loaded before the call
        return lambda: int(sum(fm.fixed_sum(X, clip=(lo, hi))))
    if mode == "release_compiled":
        K.install()
    return lambda: dps.release_sketch(frame, schema=schema, epsilon=1.0).count


def main() -> None:
    pairs_arg = C.pop_positive_int(sys.argv, "--pairs")  # alternated rounds
    args = C.parse_args(__doc__.splitlines()[0])
    if args.child is not None:
        C.child_main(args.child, setup, post=lambda cfg, out: int(out))
        return
    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    root = Path(tempfile.mkdtemp(prefix="bench_compiled_"))
    one: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, float]] = []
    try:
        path = root / "tall.parquet"
        C.progress(f"writing {cfg['n']:,} rows × 10 columns of Parquet")
        write_tall(path, cfg["n"], cfg["part"])
        for mode in ("same", "overhead", "overhead", "count_numpy", "count_compiled"):
            C.progress(f"{mode}")
            one[mode] = C.run_child(__file__, {"path": str(path), "mode": mode})  # the 1st overhead compiles
        k = pairs_arg if pairs_arg is not None else (2 if args.quick else 5)
        for i in range(k):
            C.progress(f"pair {i + 1} of {k}: read, release (numpy), release (kernel)")
            got = {
                m: C.run_child(__file__, {"path": str(path), "mode": m})
                for m in ("read", "release", "release_compiled")
            }
            pairs.append({m: r["cpu_s"] for m, r in got.items()})
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def spread(values: list[float]) -> str:
        return f"{np.median(values):.2f}× (min {min(values):.2f}×, max {max(values):.2f}×)"

    numpy_ratio = [p["release"] / p["read"] for p in pairs]
    kernel_ratio = [p["release_compiled"] / p["read"] for p in pairs]
    saved = [p["release"] - p["release_compiled"] for p in pairs]
    count_np, count_k = one["count_numpy"]["cpu_s"], one["count_compiled"]["cpu_s"]
    rows = [
        [
            "the kernel's integers = the numpy path's (every MarginalTables of the map, 2¹⁷ hostile rows)",
            str(one["same"]["result"] > 0),
            "",
        ],
        ["counting alone, numpy path (the release's map over the encoded table)", C.fmt(count_np), "1.00×"],
        ["counting alone, kernel", C.fmt(count_k), f"{count_k / count_np:.2f}×"],
        [
            "a new process: `import numba` and the cached kernel's first call",
            C.fmt(one["overhead"]["cpu_s"]),
            "",
        ],
        [
            f"in-memory release ÷ `pl.read_parquet` CPU, numpy path ({len(pairs)} pairs)",
            spread(numpy_ratio),
            "",
        ],
        [f"in-memory release ÷ `pl.read_parquet` CPU, kernel ({len(pairs)} pairs)", spread(kernel_ratio), ""],
        ["release CPU saved by the kernel (median)", f"{np.median(saved):.2f} s", ""],
    ]
    body = "\n".join(
        [
            f"n = {cfg['n']:,} rows × 10 columns (7 numeric, 3 text), `bench_tall.py`'s table. Each measurement "
            "is one fresh process; CPU seconds count every thread. The kernel is `lib/compiled_counting.py` "
            f"(numba {_numba_version()}), not part of the library.",
            "",
            C.md_table(["measure", "CPU s / result", "× numpy path"], rows),
            "",
            "## Issue 40's target: in-memory release ≤ 3× `pl.read_parquet`",
            "",
            C.md_table(
                ["counting", "median ratio", "met"],
                [
                    [
                        "numpy (the library)",
                        f"{np.median(numpy_ratio):.2f}×",
                        str(np.median(numpy_ratio) <= 3),
                    ],
                    ["compiled kernel", f"{np.median(kernel_ratio):.2f}×", str(np.median(kernel_ratio) <= 3)],
                ],
            ),
            "",
            "```json",
            json.dumps(
                {
                    "one": {m: {"cpu_s": r["cpu_s"], "time_s": r["time_s"]} for m, r in one.items()},
                    "pairs": pairs,
                }
            ),
            "```",
        ]
    )
    out = C.out_dir(args) / f"{NAME}.md"
    C.write_report(
        out, "A compiled counting kernel against the numpy path (issue 40, tall)", info, body, args.quick
    )


def _numba_version() -> str:
    try:
        import numba

        return str(numba.__version__)
    except ImportError:
        return "missing"


if __name__ == "__main__":
    main()
