"""The command line end to end on a 10^6-row CSV: ``release`` then ``query``, wall time and peak memory.

Setting (full mode): a CSV of n = 10^6 rows × 10 float columns uniform in [0, 1] plus one text
column (seeded; about 190 MB), a JSON schema with the ten columns and bounds (0, 1). Measured,
each in a fresh subprocess (``lib.memory.run_child``: wall time and peak extra RSS of the call):

* ``opendp-sketch release rows.csv --schema schema.json --out s.sketch --epsilon 1`` with the
  default map (``--map auto``: 1- and 2-way marginals), with ``--map rff`` (m = 1000) and with
  ``--map histogram``;
* ``opendp-sketch query s.sketch --mean --cdf x0=0.25,0.5,0.75 --count "x0 > 0.5 AND x1 < 0.5"
  --format json`` on each sketch (the default decoder).

Baseline in the same run: reading the CSV into memory with ``pl.read_csv`` (what a release that
is not streamed would start with).

Usage: ``python benchmarks/bench_cli.py [--quick] [--out-dir DIR]``
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

NAME = "bench_cli"
SEED = 20240621
FULL = {"n": 1_000_000}
QUICK = {"n": 20_000}


def setup(config: dict[str, Any]):
    from opendp_sketch.cli import main as cli

    d = Path(config["dir"])
    if config["what"] == "read_csv":
        import polars as pl

        return lambda: pl.read_csv(d / "rows.csv").height
    if config["what"] == "release":
        extra = [] if config["map"] == "auto" else ["--map", config["map"]]
        argv = [
            "release",
            str(d / "rows.csv"),
            "--schema",
            str(d / "schema.json"),
            "--out",
            str(d / f"{config['map']}.sketch"),
            "--epsilon",
            "1",
            *extra,
        ]
    else:
        argv = [
            "query",
            str(d / f"{config['map']}.sketch"),
            "--mean",
            "--cdf",
            "x0=0.25,0.5,0.75",
            "--count",
            "x0 > 0.5 AND x1 < 0.5",
            "--format",
            "json",
        ]
    return lambda: cli(argv)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=3)
    if args.child is not None:
        C.child_main(args.child, setup, post=lambda cfg, out: out)
        return
    import polars as pl

    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    root = Path(tempfile.mkdtemp(prefix="bench_cli_"))
    rows = []
    try:
        rng = np.random.default_rng(SEED)
        X = rng.uniform(size=(cfg["n"], 10))
        frame = pl.DataFrame({f"x{j}": X[:, j] for j in range(10)}).with_columns(pl.lit("text").alias("note"))
        frame.write_csv(root / "rows.csv")
        (root / "schema.json").write_text(json.dumps({"columns": {f"x{j}": [0, 1] for j in range(10)}}))
        size_mb = (root / "rows.csv").stat().st_size / 2**20
        steps = [
            ("read_csv", None),
            ("release", "auto"),
            ("query", "auto"),
            ("release", "rff"),
            ("query", "rff"),
            ("release", "histogram"),
            ("query", "histogram"),
        ]
        for what, fmap in steps:
            r = C.run_child_quietly(__file__, {"dir": str(root), "what": what, "map": fmap}, args)
            label = "pl.read_csv (baseline)" if what == "read_csv" else f"opendp-sketch {what} ({fmap})"
            rows.append(
                [label, C.fmt(r["time_s"]), f"{r['peak_extra_mb']:,.0f}", C.fmt(r["background_cores"])]
            )
            C.progress(f"{label}: {r['time_s']:.1f} s, peak extra {r['peak_extra_mb']:.0f} MB")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = f"""## Setting

CSV of {cfg["n"]:,} rows × 10 numeric columns + 1 text column ({size_mb:,.0f} MB), schema with
bounds (0, 1) for the numeric columns, ε = 1. Each row below is one call in a fresh subprocess;
the release includes the validation queries, the scale search and the streamed pass.

## Result

{C.md_table(["command", "wall s", "peak extra RSS (MB)", "other CPU (cores)"], rows)}
"""
    C.write_report(C.out_dir(args) / f"{NAME}.md", "The command line on a CSV file", info, body, args.quick)


if __name__ == "__main__":
    main()
