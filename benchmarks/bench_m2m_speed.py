"""M2M speed alone: building the weights (cold and warm) and each further query.

Setting (full mode): ``RFF(dim=10, num_features=1000, bandwidth=1)`` sketches of n = 27,000 rows
uniform on [0, 1]^10 (two releases, ε = 1 and 2), ``M2M(sketch, n_samples=100_000, method="ridge")``. *Cold*
clears the design cache, so it includes the Gram matrix and its eigendecomposition; *warm* is a
second sketch of the same map (the eigendecomposition is reused). Each query is timed in-process:
one warm-up call, then ``--repeats`` calls, median. The same measurement is part of
``bench_m2m.py``; this script runs it alone, so it can be run on a quiet machine.

What changed since the script was written (2026-11-22): ``M2M``'s default decoder became
``method="synthetic"`` (2026-11-23), which has no design cache (so no cold/warm difference to
measure) and refuses ``return_std`` ("return_std needs method='ridge'"). The timed decoder is the
M2M paper's ridge estimator, as before, now named explicitly (``lib.random10.M2M_METHOD``).

Usage: ``python benchmarks/bench_m2m_speed.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402
from lib.random10 import DATA_SEED, FULL, QUICK, speed  # noqa: E402

NAME = "bench_m2m_speed"


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], default_repeats=5)
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    X = np.random.default_rng(DATA_SEED).uniform(size=(cfg["n"], cfg["d"]))
    C.wait_for_quiet(args.wait_quiet)
    with C.Probe() as probe:
        t_cold, t_warm, rows = speed(X, cfg["speed_m"], cfg["ns"], dps)
    bg = probe.read().background_cores
    body = f"""## Setting

RFF with m = {cfg["speed_m"]} features on n = {cfg["n"]:,} rows (d = {cfg["d"]}),
`M2M(sketch, n_samples={cfg["ns"]:,}, method="ridge")` (the M2M paper's ridge estimator).
Other processes used {C.fmt(bg) if bg is not None else "n/a"} cores during the measurement.

## Result

Building the weights cold (Gram matrix + eigendecomposition + λ + weights): **{t_cold:.2f} s**
(median of 3); warm (a second sketch of the same map): {t_warm:.2f} s. Each further query:

{C.md_table(["query", "ms", "÷ cold weight time", "≤ 1/100"], rows)}

`return_std=True` recomputes the map on the prior samples to get ‖a_f‖ (one pass), so it costs
about a warm construction.
"""
    C.write_report(
        C.out_dir(args) / f"{NAME}.md", "M2M weight computation and query speed", info, body, args.quick
    )


if __name__ == "__main__":
    main()
