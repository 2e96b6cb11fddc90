"""The decoder's row-count estimate: pooled over every coordinate, or group by group.

The synthetic decoder scales every answer by its estimate ``n̂`` of the row count, combined from
the released count and the released sums. Before, the sums entered as ``1ᵀS/s`` (``s``: every
row's feature total): every coordinate at the same weight, so a pair's 256 noisy cells had a
larger say than a 1-way table weighted 3. ``_count`` now takes one estimate per group of
coordinates that sums to a public constant for every row (a marginal table at its weight) and
combines them, and the count, by inverse variance (``_COUNT_BY_GROUPS``).

The user's path (``bench_real_tables``' schema releases: a Polars frame and a ``dps.Schema``,
every default), ``--reps`` releases per table and ε. Each release is decoded both ways from the
same sketch and seed (common noise). Errors are as in ``bench_synthetic_points``.

Run: ``python benchmarks/bench_count_groups.py`` (``--quick``: CPSSW8 at ε = 3, 2 releases).
Writes ``benchmarks/results/bench_count_groups.md`` and ``.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import variants as points  # noqa: E402

VARIANTS = {
    "n̂ from 1ᵀS/s and the count (before)": False,
    "n̂ group by group, by inverse variance": True,
}


def main(argv: list[str] | None = None) -> None:
    _, out = points.variants_main(
        argv,
        __doc__,
        "bench_count_groups",
        {label: points.switched(_COUNT_BY_GROUPS=flag) for label, flag in VARIANTS.items()},
        title="The decoder's row-count estimate, on the same schema releases (issue 16)",
        what="each decoded with n̂ pooled over every coordinate and group by group (same seed)",
        column="count estimate",
        reps=5,
    )
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
