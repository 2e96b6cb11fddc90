"""One figure from the three real-table runs (ε = 0.1, 1, 3): error and time against ε.

Reads ``results/real_tables_eps0_1.csv``, ``results/real_tables.csv`` and
``results/real_tables_eps3.csv`` (written by ``bench_real_tables.py``) and writes
``results/real_tables.png``: one row per table; range counts and CDF points on the peers' 16-bin
grid and at a user's thresholds anywhere in the box, column means and release + fit time per
column; the mean over releases for each system, on log axes (a run without a metric leaves it
out). A system
whose releases failed at some ε gets a cross at the top of the panel, labelled with the share of
failed releases (OpenDP 0.16's MST can stop with an "insufficient budget" rounding error).

    python benchmarks/plot_real_tables.py
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = {0.1: "real_tables_eps0_1.csv", 1.0: "real_tables.csv", 3.0: "real_tables_eps3.csv"}
#: system → (label, colour, marker); the per-query peer answers counts only
SYSTEMS = {
    "schema": ("opendp_sketch: schema release, every default", "tab:blue", "o"),
    "schema_fine64": ("opendp_sketch: fine_bins=64, no tree (option)", "tab:purple", "P"),
    "marginals_synthetic": ("opendp_sketch: 16-bin marginals", "tab:cyan", "^"),
    "hist_ridge": ("Histogram + ridge M2M (old default)", "tab:gray", "v"),
    "mst": ("dp.mbi MST", "tab:orange", "s"),
    "aim": ("dp.mbi AIM", "tab:green", "D"),
    "opendp_polars": ("OpenDP Polars per query", "tab:red", "x"),
}
METRICS = (
    ("count_err", "range counts on the 16-bin grid: |err| / n"),
    ("user_count_err", "range counts at any thresholds: |err| / n"),
    ("cdf_err", "CDF on the grid: |err|"),
    ("user_cdf_err", "CDF at any point: |err|"),
    ("means_mre", "column means: relative error"),
    ("fit_seconds", "release + fit, s"),
)


def read(results: Path) -> dict[tuple[str, str, float], list[dict[str, str]]]:
    """Rows of every run found, keyed by (table, system, ε)."""
    rows: dict[tuple[str, str, float], list[dict[str, str]]] = defaultdict(list)
    for eps, name in RUNS.items():
        path = results / name
        if not path.exists():
            continue
        with path.open() as f:
            for r in csv.DictReader(f):
                rows[(r["table"], r["system"], eps)].append(r)
    return rows


def mean_of(rows: list[dict[str, str]], key: str) -> tuple[float, int]:
    """Mean of ``key`` over the releases that ran, and the number of failed releases."""
    failed = sum(1 for r in rows if r.get("failure"))
    vals = []
    for r in rows:
        if r.get("failure"):
            continue
        try:
            v = float(r.get(key, "nan"))
        except ValueError:
            continue
        if math.isfinite(v) and v > 0:
            vals.append(v)
    return (sum(vals) / len(vals) if vals else float("nan")), failed


def plot(results: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read(results)
    tables = sorted({t for t, _, _ in rows}, key=["movies", "CPSSW8", "countymurders"].index)
    fig, axes = plt.subplots(
        len(tables), len(METRICS), figsize=(3.3 * len(METRICS), 3.4 * len(tables)), squeeze=False
    )
    for i, table in enumerate(tables):
        for j, (key, title) in enumerate(METRICS):
            ax = axes[i][j]
            for system, (label, colour, marker) in SYSTEMS.items():
                xs, ys, fails = [], [], []
                for eps in RUNS:
                    rs = rows.get((table, system, eps))
                    if not rs:
                        continue
                    v, failed = mean_of(rs, key)
                    if failed:
                        fails.append((eps, f"{failed}/{len(rs)} failed"))
                    if math.isfinite(v):
                        xs.append(eps)
                        ys.append(v)
                if xs:
                    ax.plot(xs, ys, marker=marker, color=colour, label=label)
                for eps, text in fails:
                    ax.annotate(
                        "✕ " + text,
                        (eps, 0.97),
                        xycoords=("data", "axes fraction"),
                        color=colour,
                        fontsize=7,
                        ha="left" if eps == min(RUNS) else "right" if eps == max(RUNS) else "center",
                        va="top",
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(0.07, 4.5)
            ax.set_xticks(list(RUNS), [f"{e:g}" for e in RUNS])
            ax.grid(True, which="both", alpha=0.3)
            if i == 0:
                ax.set_title(title, fontsize=9)
            if j == 0:
                ax.set_ylabel(table)
            if i == len(tables) - 1:
                ax.set_xlabel("ε (pure DP)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    fig.suptitle("Real tables: one release, then every answer (mean over 5 releases; lower is better)")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--out", type=Path, default=RESULTS / "real_tables.png")
    a = p.parse_args()
    plot(a.results, a.out)


if __name__ == "__main__":
    main()
