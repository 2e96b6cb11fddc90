"""A continuous column's pile at a bound: one steep exponential, or the trend and a point mass.

Values clipped to a public bound (movies' ``votes`` at 5 000: 2.8 % of the rows) and a count's
zeros sit *on* the bound. The decoder finds such a pile where an end cell holds more than its
neighbours' trend gives it (``_trend_at_edge``). Before, it placed the whole end cell by one
exponential density steep enough to hold the cell's mass (``_pile_rate``); now the trend is
continued into the cell and the excess goes on the bound itself (``_end_pile``,
``_POINT_PILE = True``), as it already did for integer columns.

The user's path (``bench_real_tables``' schema releases, a Polars frame and a ``dps.Schema``,
every default), ``--reps`` releases per table and ε, each decoded both ways from the same sketch
and seed (common noise). Errors as in ``bench_synthetic_points``.

Run: ``python benchmarks/bench_bound_piles.py`` (``--quick``: CPSSW8 at ε = 3, 2 releases).
Writes ``benchmarks/results/bench_bound_piles.md`` and ``.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import variants as points  # noqa: E402

VARIANTS = {
    "one exponential (before)": False,
    "trend + point mass on the bound (default)": True,
}


def main(argv: list[str] | None = None) -> None:
    _, out = points.variants_main(
        argv,
        __doc__,
        "bench_bound_piles",
        {label: points.switched(_POINT_PILE=on) for label, on in VARIANTS.items()},
        title="Piles at a bound in continuous columns, on the same schema releases (issue 16)",
        what="each decoded with an end cell above its neighbours' trend placed by one exponential and "
        "by the trend continued plus a point mass on the bound (same seed)",
        column="end cell",
        reps=3,
    )
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
