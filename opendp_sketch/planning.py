"""Planning a release from public quantities only: the sketch size ``m`` from the noise-to-signal ratio.

The derivation of the formula is in ``docs/planning.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl

from ._validate import check_fraction
from .budget import DEFAULT_COUNT_FRACTION, Budget

__all__ = ["SketchSizePlan", "noise_to_signal", "suggest_sketch_size", "FEATURES_PER_PARAMETER"]

#: rule of thumb of compressive k-means: ``m ≥ 10·k·d`` features identify ``k`` centroids in ``R^d``
FEATURES_PER_PARAMETER = 10
#: default largest size considered, ``100·k·d`` (the larger sketch of the CKM experiments)
_MAX_PER_PARAMETER = 100
#: points of the geometric grid of sizes in the table
_GRID_POINTS = 60


@dataclass(frozen=True, eq=False)
class SketchSizePlan:
    """Result of :func:`suggest_sketch_size`.

    :ivar num_features: suggested ``m`` (pass it as ``num_features=`` to the feature map)
    :ivar nsr: predicted noise-to-signal ratio at ``num_features``
    :ivar meets_target: whether ``nsr ≤ target_nsr``; if not, ``num_features`` is the smallest
        size considered, and the release will be noisier than the target
    :ivar mechanism: ``"laplace"`` or ``"gaussian"``
    :ivar rho: the zCDP budget the Gaussian plan uses (``None`` for Laplace)
    :ivar table: Polars DataFrame, one row per candidate size: ``num_features``,
        ``num_frequencies``, ``r``, ``nsr_noise``, ``nsr_subsampling``, ``nsr_count``, ``nsr``,
        ``within_target``
    """

    num_features: int
    nsr: float
    meets_target: bool
    mechanism: str
    rho: float | None
    table: pl.DataFrame


def _positive_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} ({v!r}) must be an integer ≥ 1")
    return int(v)


def _positive_float(v: Any, name: str, upper: float = math.inf) -> float:
    if isinstance(v, (bool, str, bytes)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} ({v!r}) must be a finite number in (0, {upper:g}]")
    f = float(v)
    if not (math.isfinite(f) and 0 < f <= upper):
        raise ValueError(f"{name} ({v!r}) must be a finite number in (0, {upper:g}]")
    return f


def _rho_of_approx_dp(epsilon: float, delta: float) -> float:
    """The ρ whose zCDP guarantee OpenDP converts to exactly ``(ε, δ)`` — the conversion
    :func:`~opendp_sketch.release_sketch` applies with ``delta=`` (a unit-sensitivity discrete
    Gaussian has ``ρ = 1/(2·scale²)``)."""

    def build(scale: float) -> dp.Measurement:
        gauss = dp.m.make_gaussian(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=scale)
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(gauss), delta)

    scale = dp.binary_search_param(build, d_in=1, d_out=(epsilon, delta))
    return 1.0 / (2.0 * scale * scale)


def noise_to_signal(
    num_frequencies: np.ndarray | int,
    n: int,
    *,
    mechanism: str,
    budget: float,
    r: np.ndarray | int | None = None,
    signal: float = 1.0,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
) -> dict[str, np.ndarray]:
    r"""The three terms of the predicted NSR ``E‖ẑ − z̄‖² / ‖z̄‖²`` of an RFF sketch.

    ``z̄ = (1/n)ΣΦ(xᵢ)`` is the noise-free sketch mean, ``‖z̄‖² = signal·m'``. With ``B = m'/r``
    and ``c = count_fraction`` (derivation in ``docs/planning.md``):

    * ``nsr_noise``: Laplace ``8m'²/(signal·(ε(1−c)n)²)``; Gaussian ``m'²/(signal·r·ρ(1−c)n²)``;
    * ``nsr_subsampling``: ``(B − 1)/(signal·n)``;
    * ``nsr_count``: Laplace ``2/(cεn)²``; Gaussian ``1/(2cρn²)``.

    :param num_frequencies: ``m'`` (scalar or array)
    :param n: number of rows (a public estimate)
    :param mechanism: ``"laplace"`` (``budget`` = ε) or ``"gaussian"`` (``budget`` = ρ)
    :param budget: ε or ρ of the whole release (sum and count)
    :param r: frequencies per row (``None``: ``r = m'``, no subsampling)
    :param signal: ``‖z̄‖²/m'``, the mean squared modulus of the sketch per frequency, in (0, 1]
    :param count_fraction: share of the budget spent on the count
    :return: dict with ``nsr_noise``, ``nsr_subsampling``, ``nsr_count``, ``nsr`` (float arrays)
    :raises ValueError: on an unknown mechanism or a non-positive ``n``, ``budget`` or ``signal``
    """
    n = _positive_int(n, "n")
    budget = _positive_float(budget, "budget")
    signal = _positive_float(signal, "signal", upper=1.0)
    c = check_fraction(count_fraction)
    mp = np.asarray(num_frequencies, dtype=np.float64)
    rr = mp if r is None else np.asarray(r, dtype=np.float64)
    if not (np.all(mp >= 1) and np.all(rr >= 1) and np.all(rr <= mp)):
        raise ValueError("num_frequencies and r must be ≥ 1 with r ≤ num_frequencies")
    if mechanism == "laplace":
        noise = 8.0 * mp**2 / (signal * (budget * (1 - c) * n) ** 2)
        count = np.full_like(mp, 2.0 / (c * budget * n) ** 2)
    elif mechanism == "gaussian":
        noise = mp**2 / (signal * rr * budget * (1 - c) * n**2)
        count = np.full_like(mp, 1.0 / (2.0 * c * budget * n**2))
    else:
        raise ValueError(f"mechanism ({mechanism!r}) must be 'laplace' or 'gaussian'")
    sub = (mp / rr - 1.0) / (signal * n)
    return {"nsr_noise": noise, "nsr_subsampling": sub, "nsr_count": count, "nsr": noise + sub + count}


def _grid(lo: int, hi: int, r: int | None) -> np.ndarray:
    """Candidate ``m'`` values: a geometric grid over ``[lo, hi]``, multiples of ``r``."""
    step = 1 if r is None else r
    first, last = -(-lo // step) * step, hi // step * step
    if first > last:
        raise ValueError(
            f"no number of frequencies in [{lo}, {hi}] is a multiple of r ({r}); "
            "lower r or raise max_features"
        )
    raw = np.geomspace(first, last, _GRID_POINTS)
    return np.unique(np.clip(np.round(raw / step).astype(np.int64) * step, first, last))


def suggest_sketch_size(
    n: int,
    epsilon: float | None,
    k: int,
    d: int,
    *,
    delta: float | None = None,
    rho: float | None = None,
    r: int | None = None,
    signal: float | None = None,
    target_nsr: float = 0.1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    min_features: int | None = None,
    max_features: int | None = None,
) -> SketchSizePlan:
    r"""Suggest the number of RFF features ``m`` for a planned release, from public quantities.

    The predicted noise-to-signal ratio (:func:`noise_to_signal`) *increases* with ``m`` for
    every mechanism, so minimising it alone would pick the smallest sketch, which cannot
    identify ``k`` centroids. The rule here: among sizes ``m ∈ [min_features, max_features]``
    (default ``[10·k·d, 100·k·d]``), pick the **largest** whose NSR is at most ``target_nsr``
    (more features give a better kernel approximation and a better conditioned decoder); if
    even ``min_features`` misses the target, return ``min_features`` with
    ``meets_target=False``. Nothing here reads data: ``n`` is a public (estimated) row count.

    :param n: number of rows, a public estimate (e.g. from the schema or a prior release)
    :param epsilon: ε of the release (Laplace noise), or with ``delta`` of the (ε, δ) release
        (Gaussian noise, converted to ρ exactly as ``release_sketch(delta=...)`` does, which
        needs the OpenDP feature ``"contrib"``); ``None`` when ``rho`` is given
    :param k: number of clusters to learn
    :param d: number of data columns
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ of a zCDP release (Gaussian noise)
    :param r: frequencies per row of a :class:`~opendp_sketch.features.subsampled.SubsampledRFF`
        (every candidate ``m' = m/2`` is a multiple of ``r``); ``None``: no subsampling
    :param signal: ``‖z̄‖²/m'``, the mean squared modulus of the noise-free sketch per frequency,
        in (0, 1]; default ``1/k`` (``k`` well separated, equally weighted clusters)
    :param target_nsr: the largest acceptable NSR
    :param count_fraction: share of the budget for the count, as in ``release_sketch``
    :param min_features: smallest ``m`` considered (even; default ``10·k·d``)
    :param max_features: largest ``m`` considered (even; default ``100·k·d``)
    :return: a :class:`SketchSizePlan`
    :raises ValueError: on invalid arguments (``n``, ``k``, ``d`` must be integers ≥ 1, the budget
        positive, ``signal`` in (0, 1], sizes even with ``min_features ≤ max_features``)
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.planning import suggest_sketch_size
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> plan = suggest_sketch_size(n=10**5, epsilon=1.0, k=10, d=10)
    >>> plan.num_features, plan.meets_target, plan.mechanism
    (6768, True, 'laplace')
    >>> round(plan.nsr, 3)
    0.095
    >>> plan.table.columns[:3], plan.table.height > 10
    (['num_features', 'num_frequencies', 'r'], True)
    >>> suggest_sketch_size(n=10**5, epsilon=1.0, k=10, d=10, r=1).num_features   # one frequency per row
    1796
    >>> suggest_sketch_size(n=0, epsilon=1.0, k=10, d=10)
    Traceback (most recent call last):
        ...
    ValueError: n (0) must be an integer ≥ 1
    """
    n = _positive_int(n, "n")
    k = _positive_int(k, "k")
    d = _positive_int(d, "d")
    parsed = Budget.of(epsilon, delta, rho)
    d_out, budget_kind = parsed.d_out, parsed.kind
    count_fraction = check_fraction(count_fraction)
    target = _positive_float(target_nsr, "target_nsr")
    signal = 1.0 / k if signal is None else _positive_float(signal, "signal", upper=1.0)
    if r is not None:
        r = _positive_int(r, "r")
    lo = (
        FEATURES_PER_PARAMETER * k * d
        if min_features is None
        else _positive_int(min_features, "min_features")
    )
    hi = _MAX_PER_PARAMETER * k * d if max_features is None else _positive_int(max_features, "max_features")
    for name, v in (("min_features", lo), ("max_features", hi)):
        if v % 2:
            raise ValueError(f"{name} ({v}) must be even: features come in cos/sin pairs")
    if lo > hi:
        raise ValueError(f"min_features ({lo}) must not exceed max_features ({hi})")

    if budget_kind == "epsilon":
        mechanism, budget, plan_rho = "laplace", float(d_out), None
    else:
        mechanism = "gaussian"
        plan_rho = float(d_out) if budget_kind == "rho" else _rho_of_approx_dp(*d_out)
        budget = plan_rho

    mp = _grid(lo // 2, hi // 2, r)
    rr = mp if r is None else np.full_like(mp, r)
    terms = noise_to_signal(
        mp, n, mechanism=mechanism, budget=budget, r=rr, signal=signal, count_fraction=count_fraction
    )
    table = pl.DataFrame(
        {
            "num_features": 2 * mp,
            "num_frequencies": mp,
            "r": rr,
            **terms,
            "within_target": terms["nsr"] <= target,
        }
    )
    ok = np.flatnonzero(terms["nsr"] <= target)
    # NSR increases with m (docs/planning.md), so the largest size within target is the last
    best = int(ok[-1]) if ok.size else 0
    return SketchSizePlan(
        num_features=int(2 * mp[best]),
        nsr=float(terms["nsr"][best]),
        meets_target=bool(ok.size),
        mechanism=mechanism,
        rho=plan_rho,
        table=table,
    )
