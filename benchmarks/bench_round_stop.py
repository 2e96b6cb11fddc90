"""When the decoder's rounds stop: at a 0.1 % or a 1 % gain of the best misfit.

Each round of the synthetic decoder resamples and perturbs the points, then refits the weights.
It is the decoder's main cost. The rounds stop once one of them lowers the best misfit by less
than ``tol = 1e-3`` (relative), and the best round is kept. On CPSSW8 at ε = 1 a round gained
0.65 %, so a third one ran, and its misfit was worse. ``_ROUND_TOL = 0.01`` stops the rounds at a
1 % gain instead (the steps inside a round keep ``tol``).

The user's path (``bench_real_tables``' schema releases: a Polars frame and a ``dps.Schema``,
every default), ``--reps`` releases per table and ε. Each release is decoded both ways from the
same sketch and seed (common noise). Errors are as in ``bench_synthetic_points``.

Run: ``python benchmarks/bench_round_stop.py`` (``--quick``: CPSSW8 at ε = 3, 2 releases).
Writes ``benchmarks/results/bench_round_stop.md`` and ``.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import variants as points  # noqa: E402

VARIANTS = {
    "rounds stop below a 0.1 % gain (tol)": None,
    "rounds stop below a 1 % gain": 0.01,
}


def main(argv: list[str] | None = None) -> None:
    _, out = points.variants_main(
        argv,
        __doc__,
        "bench_round_stop",
        {label: points.switched(_ROUND_TOL=t) for label, t in VARIANTS.items()},
        title="When the decoder's rounds stop, on the same schema releases (issue 16)",
        what="each decoded with the rounds stopping below a 0.1 % and below a 1 % gain of the best misfit (same seed)",
        column="round stop",
        reps=3,
    )
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
