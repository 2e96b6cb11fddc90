"""Transitional alias of :mod:`opendp_sketch.release` (the release layer moved there).

Kept only so that modules not yet moved to the new layout keep importing; new code imports
from :mod:`opendp_sketch.release`. To be removed once nothing imports it.
"""

from __future__ import annotations

from typing import Any

from ._validate import check_column_names as _column_names  # noqa: F401
from ._validate import check_fraction as _fraction  # noqa: F401
from ._validate import check_number as _number  # noqa: F401
from .domains import box_data_bounds as _full_bounds  # noqa: F401
from .release import (  # noqa: F401
    DEFAULT_COUNT_FRACTION,
    Budget,
    check_release_arguments,
    make_private_sketch,
    memory_source,
    release_once,
    release_sketch,
    search_measurement,
    then_private_sketch,
)
from .release import memory_source as _memory_source  # noqa: F401
from .release import to_array as _to_array  # noqa: F401


def _parse_budget(epsilon: Any, delta: Any, rho: Any) -> tuple[Any, Any, str]:
    b = Budget.of(epsilon, delta, rho)
    return b.measure, b.d_out, b.kind


def _release_arguments(feature_map: Any, contributions: Any, epsilon: Any, delta: Any, rho: Any, count_fraction: Any):
    fraction = check_release_arguments(feature_map, contributions, count_fraction)
    b = Budget.of(epsilon, delta, rho)
    return b.measure, b.d_out, b.kind, fraction


def _spent(budget: str, spent: Any) -> dict[str, float]:
    return Budget(budget, None).record(spent)  # type: ignore[arg-type]


def _search_measurement(make: Any, feature_map: Any, budget: str, d_out: Any, contributions: int, delta: Any = None):
    b = Budget(budget, d_out)  # type: ignore[arg-type]
    return search_measurement(make, b, contributions, feature_map.sensitivity(b.p))
