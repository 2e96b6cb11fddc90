"""Simulated releases on common noise, for comparing design choices.

Every setting is decoded from the *same* noise draw (common random numbers): one vector of
standard Laplace variates per repetition, scaled by each map's noise scale — the law of the
Laplace measurement ``release_sketch`` builds — and added to that map's exact sum, so differences
between settings are paired. These are simulated releases (numpy noise with the mechanism's
law); no sketch made here is a privacy release. Used by ``bench_one_way_weight``,
``bench_one_way_tree`` and ``bench_fine_bins``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def simulated_release(fm, exact, n: int, z, zc: float, eps: float, lo, hi, cols, schema: Any = None) -> Any:
    """A sketch of ``fm`` whose sum is the exact sum ``exact`` plus the standard Laplace draws
    ``z`` scaled to the Laplace measurement's scale ``Δ₁ / (ε (1 − count share))``, and whose
    count is ``n`` plus ``zc`` at the count's scale: a simulated release for comparing design
    choices on common noise (numpy noise with the mechanism's law; not a privacy release).
    ``schema``: the public schema the columns were encoded by (recorded in the sketch)."""
    import opendp_sketch as dps
    from opendp_sketch.budget import DEFAULT_COUNT_FRACTION

    b = fm.sensitivity(1) / (eps * (1.0 - DEFAULT_COUNT_FRACTION))
    bc = 1.0 / (eps * DEFAULT_COUNT_FRACTION)
    return dps.Sketch(
        feature_map=fm,
        sum_units=np.rint((exact + b * z[: exact.size]) / fm.unit).astype(np.int64),
        count=int(round(n + bc * zc)),
        noise={"mechanism": "laplace", "sum_variance": 2 * b * b, "count_variance": 2 * bc * bc},
        bounds=(lo.tolist(), hi.tolist()),
        column_names=cols,
        schema=None if schema is None else schema.to_dict(),
    )


def paired(rows: list[dict[str, Any]], ref: dict[int, dict[str, Any]], key: str) -> str:
    """Mean paired difference (× 10⁻⁴) of ``key`` from the reference weight, ± its standard error."""
    diffs = np.array([r[key] - ref[r["rep"]][key] for r in rows]) * 1e4
    se = diffs.std(ddof=1) / np.sqrt(diffs.size) if diffs.size > 1 else float("nan")
    return f"{diffs.mean():+.2f} ± {se:.2f}"
