"""Streamed release from Parquet: rows per second and peak memory, flat in the number of rows.

Setting (full mode): Parquet datasets of n = 10^7 and 5·10^7 rows × 10 float64 columns uniform
in [0, 1] (generated once into a temporary directory, 10^6 rows per part file, seeded), released
with ``dps.release_sketch(pl.scan_parquet(dir / "*.parquet"), RFF(dim=10, num_features=1000),
bounds=(0, 1), epsilon=1.0)``: validation queries (schema, row count, null/NaN/inf counts), the
scale search, and one streamed pass of exact feature sums plus OpenDP noise. At n = 10^7 the
same rows are also written as **one** file with 10^6-row row groups and released from its path. Each release runs in
a fresh subprocess that reports wall time and peak extra RSS (see ``lib/memory.py``); the target is a
peak ≤ 1 GB that does not grow with n. Baseline in the same run: the same rows read into memory
with ``pl.read_parquet(...).to_numpy()`` and released from the array (n = 10^7 only — 5·10^7 rows
are 4 GB as float64).

Usage: ``python benchmarks/bench_stream.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_stream"
SEED = 20240620
FULL = {"sizes": [10_000_000, 50_000_000], "part": 1_000_000, "in_memory": [10_000_000], "m": 1000}
QUICK = {"sizes": [100_000, 500_000], "part": 100_000, "in_memory": [100_000], "m": 100}


def _write(directory: Path, n: int, part: int) -> None:
    import polars as pl

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for i, start in enumerate(range(0, n, part)):
        rows = min(part, n - start)
        block = rng.uniform(size=(rows, 10))
        pl.DataFrame({f"x{j}": block[:, j] for j in range(10)}).write_parquet(
            directory / f"part-{i:04d}.parquet"
        )


def setup(config: dict[str, Any]):
    import opendp.prelude as dp
    import polars as pl

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    fm = dps.RFF(dim=10, num_features=config["m"], bandwidth=1.0, seed=0)
    pattern = str(Path(config["dir"]) / "*.parquet")
    if config["mode"] == "stream_file":  # a path: read through PyArrow in bounded batches
        one = str(Path(config["dir"]).parent / f"one-{Path(config['dir']).name}.parquet")
        return lambda: dps.release_sketch(one, fm, bounds=(0, 1), epsilon=1.0).count
    if config["mode"] == "stream":
        return lambda: dps.release_sketch(pl.scan_parquet(pattern), fm, bounds=(0, 1), epsilon=1.0).count
    return lambda: (
        dps.release_sketch(pl.read_parquet(pattern).to_numpy(), fm, bounds=(0, 1), epsilon=1.0).count
    )


LABELS = {
    "stream": "stream: pl.scan_parquet of the part files",
    "stream_file": "stream: path of one file (row groups of a part's size)",
    "in_memory": "in memory (pl.read_parquet → numpy)",
}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=3)
    if args.child is not None:
        C.child_main(args.child, setup, post=lambda cfg, count: int(count))
        return
    import polars as pl

    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    root = Path(tempfile.mkdtemp(prefix="bench_stream_"))
    rows = []
    try:
        for n in cfg["sizes"]:
            d = root / f"n{n}"
            C.progress(f"writing {n:,} rows of Parquet")
            _write(d, n, cfg["part"])
            size_mb = sum(f.stat().st_size for f in d.iterdir()) / 2**20
            modes = ["stream"] + (["in_memory"] if n in cfg["in_memory"] else [])
            if n in cfg["in_memory"]:  # the same rows as one file with row groups of cfg["part"] rows
                pl.scan_parquet(str(d / "*.parquet")).sink_parquet(
                    root / f"one-{d.name}.parquet", row_group_size=cfg["part"]
                )
                modes.insert(1, "stream_file")
            for mode in modes:
                r = C.run_child_quietly(__file__, {"dir": str(d), "mode": mode, "m": cfg["m"]}, args)
                rows.append(
                    [
                        f"{n:,}",
                        LABELS[mode],
                        f"{size_mb:,.0f}",
                        C.fmt(r["time_s"]),
                        f"{n / r['time_s']:,.0f}",
                        f"{r['peak_extra_mb']:,.0f}",
                        C.fmt(r["background_cores"]),
                    ]
                )
                C.progress(f"n={n:,} {mode}: {r['time_s']:.1f} s, peak extra {r['peak_extra_mb']:.0f} MB")
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = f"""## Setting

RFF with m = {cfg["m"]} features (d = 10), ε = 1, Parquet parts of {cfg["part"]:,} rows; one
release per row below, each in a fresh subprocess (wall time includes validation queries, the
scale search and the streamed pass). "in memory" reads the same files into one numpy array
first and releases from it.

## Result

{C.md_table(["rows", "path", "Parquet MB", "wall s", "rows / s", "peak extra RSS (MB)", "other CPU (cores)"], rows)}

Peak memory of the streamed path depends on the batch size (65,536 rows) and the map's chunk
buffers, not on the number of rows. A file path is read through PyArrow
(`opendp_sketch.backends.streaming.scan_parquet_bounded`: no pre-buffering of whole row groups), so its
peak does not depend on the row-group size either; a `pl.scan_parquet` frame given by the user
is read by Polars, which decodes whole row groups, several at a time.
"""
    C.write_report(C.out_dir(args) / f"{NAME}.md", "Streamed release from Parquet", info, body, args.quick)


if __name__ == "__main__":
    main()
