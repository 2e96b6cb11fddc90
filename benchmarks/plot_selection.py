"""One figure from the private-choice-of-pairs runs (``pair_selection``; ε = 0.1, 0.3, 1).

Reads ``results/real_tables_selection_eps0_1.csv``, ``_eps0_3.csv`` and ``_eps1.csv`` (written by
``bench_real_tables.py --systems schema,schema_select,marginals_synthetic,marginals_select,mst``)
and writes ``results/real_tables_selection.png``. It has one row per table where the rule leaves
columns apart (countymurders, movies) and four panels per row: range counts on the peers'
16-bin grid, by number of columns (1, and 2–3), the CDF on the grid, and range counts at any
thresholds. Each point is the mean over releases, on log axes. A failed peer gets a cross at the
top of its panel. Solid lines are the maps without the tree; dashed lines are the same maps with
it.

    python benchmarks/plot_selection.py
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = {
    0.1: "real_tables_selection_eps0_1.csv",
    0.3: "real_tables_selection_eps0_3.csv",
    1.0: "real_tables_selection_eps1.csv",
}
TABLES = ("countymurders", "movies")
#: system → (label, colour, line style, marker)
SYSTEMS = {
    "marginals_synthetic": ("16-bin marginals, the rule's pairs", "tab:cyan", "-", "^"),
    "marginals_select": ("16-bin marginals + private tree", "tab:cyan", "--", "^"),
    "schema": ("schema default", "tab:blue", "-", "o"),
    "schema_select": ("schema default + private tree", "tab:blue", "--", "o"),
    "mst": ("dp.mbi MST", "tab:orange", "-", "s"),
}
#: panel → (title, the CSV columns averaged into it)
PANELS = {
    "1-column counts on the grid": ("count_err_1",),
    "2- and 3-column counts on the grid": ("count_err_2", "count_err_3"),
    "CDF on the grid": ("cdf_err",),
    "range counts at any thresholds": ("user_count_err",),
}


def read(results: Path = RESULTS) -> dict[tuple[str, str, float], list[dict[str, str]]]:
    """Rows of every run (CSV files in ``results``) by (table, system, ε)."""
    rows: dict[tuple[str, str, float], list[dict[str, str]]] = defaultdict(list)
    for eps, name in RUNS.items():
        path = results / name
        if not path.exists():
            continue
        with open(path) as f:
            for r in csv.DictReader(f):
                rows[(r["table"], r["system"], eps)].append(r)
    return rows


def value(rs: list[dict[str, str]], keys: tuple[str, ...]) -> float:
    """Mean over the releases that did not fail of the mean of ``keys``; NaN when all failed."""
    ok = [r for r in rs if not r.get("failure")]
    vals = [sum(float(r[k]) for k in keys) / len(keys) for r in ok if all(r.get(k) for k in keys)]
    return sum(vals) / len(vals) if vals else math.nan


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="where the runs' CSV files are")
    p.add_argument("--out", default=str(RESULTS / "real_tables_selection.png"))
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read(args.results)
    eps = sorted(RUNS)
    fig, axes = plt.subplots(len(TABLES), len(PANELS), figsize=(4.2 * len(PANELS), 3.4 * len(TABLES)))
    for i, table in enumerate(TABLES):
        for j, (title, keys) in enumerate(PANELS.items()):
            ax = axes[i][j]
            for system, (label, colour, style, marker) in SYSTEMS.items():
                ys = [value(rows.get((table, system, e), []), keys) for e in eps]
                ax.plot(eps, ys, style, color=colour, marker=marker, label=label)
                failed = [e for e, y in zip(eps, ys) if math.isnan(y) and rows.get((table, system, e))]
                for e in failed:
                    ax.annotate(
                        "×", (e, 1.0), xycoords=("data", "axes fraction"), color=colour, ha="center", va="top"
                    )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(eps, [f"{e:g}" for e in eps])
            ax.set_xlabel("ε")
            ax.set_title(f"{table}: {title}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        "A private spanning tree of 2-way marginals (pair_selection=0.1): mean |err|/n over 5 releases; "
        "× a failed peer",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
