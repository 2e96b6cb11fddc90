"""The privacy budget: one object for pure ε, (ε, δ) and ρ-zCDP, and the one scale search.

A :class:`Budget` is what a user gives (``epsilon=``, ``delta=``, ``rho=``) in the form every
release uses: the OpenDP measure the noise is calibrated in (pure ε: discrete Laplace; zCDP,
converted by OpenDP's ``make_zCDP_to_approxDP`` for (ε, δ): discrete Gaussian), the ``d_out`` a
search targets and the norm of the sensitivity. :func:`search_scale` finds the smallest noise
scale OpenDP certifies for a budget (bracketed by the analytic scale), and :func:`as_rho` the ρ
whose conversion meets an (ε, δ) budget. Release, planning, the Context integration and the
private choice of pairs all read the budget here; nothing here draws noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import opendp.prelude as dp

from ._validate import check_number

__all__ = [
    "rest_budget",
    "Budget",
    "BudgetKind",
    "DEFAULT_COUNT_FRACTION",
    "as_rho",
    "mechanism_of",
    "search_measurement",
    "search_scale",
]


#: share of the privacy budget spent on the count (the rest goes to the feature sum)
DEFAULT_COUNT_FRACTION = 0.02


BudgetKind = Literal["epsilon", "epsilon_delta", "rho"]


@dataclass(frozen=True)
class Budget:
    """A privacy budget in the one form every release uses: pure ε, (ε, δ), or ρ-zCDP.

    Build it with :meth:`of` from the keyword arguments users give (``epsilon=``, ``delta=``,
    ``rho=``). It knows the OpenDP measure the noise is calibrated in, the ``d_out`` a search
    targets, the mechanism (discrete Laplace for ε, discrete Gaussian otherwise) and the norm
    ``p`` of the sensitivity that mechanism uses.

    :example:

    >>> from opendp_sketch.budget import Budget
    >>> b = Budget.of(epsilon=1.0, delta=1e-6)
    >>> b.kind, b.mechanism, b.p, b.d_out
    ('epsilon_delta', 'gaussian', 2, (1.0, 1e-06))
    >>> Budget.of(epsilon=0.5).record(0.49)
    {'epsilon': 0.49}
    """

    kind: BudgetKind
    d_out: Any

    @classmethod
    def of(cls, epsilon: Any = None, delta: Any = None, rho: Any = None) -> Budget:
        """The budget named by exactly one of ``epsilon`` (optionally with ``delta``) or ``rho``.

        :raises ValueError: for none or both, a ``delta`` with ``rho``, or values that are not
            positive finite numbers (``delta`` below 1; ``delta=0`` means pure ε)
        """
        if (epsilon is None) == (rho is None):
            raise ValueError("give exactly one of epsilon (optionally with delta) or rho")
        if rho is not None:
            if delta is not None:
                raise ValueError("delta cannot be combined with rho")
            return cls("rho", check_number(rho, "rho"))
        eps = check_number(epsilon, "epsilon")
        if delta is None or delta == 0:
            return cls("epsilon", eps)
        dl = check_number(delta, "delta")
        if dl >= 1:
            raise ValueError(f"delta ({delta!r}) must be below 1")
        return cls("epsilon_delta", (eps, dl))

    @property
    def measure(self) -> dp.Measure:
        """The measure the noise is calibrated in (zCDP for (ε, δ): OpenDP converts it)."""
        return dp.max_divergence() if self.kind == "epsilon" else dp.zero_concentrated_divergence()

    @property
    def mechanism(self) -> str:
        return "laplace" if self.kind == "epsilon" else "gaussian"

    @property
    def p(self) -> Literal[1, 2]:
        return 1 if self.kind == "epsilon" else 2

    @property
    def delta(self) -> float | None:
        return self.d_out[1] if self.kind == "epsilon_delta" else None

    def reference_scale(self, d_in: int, sensitivity: float) -> float:
        """The analytic noise scale for the whole budget (count share ignored), to bracket a
        search: ``d_in·Δ₁/ε``, ``d_in·Δ₂/√(2ρ)``, or ``d_in·Δ₂/ε`` for (ε, δ)."""
        if self.kind == "epsilon":
            return d_in * sensitivity / self.d_out
        if self.kind == "rho":
            return d_in * sensitivity / math.sqrt(2 * self.d_out)
        return d_in * sensitivity / self.d_out[0]

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments that name this budget (``epsilon=``, ``delta=``, ``rho=``)."""
        if self.kind == "rho":
            return {"rho": self.d_out}
        if self.kind == "epsilon":
            return {"epsilon": self.d_out}
        return {"epsilon": self.d_out[0], "delta": self.d_out[1]}

    def coordinate_std(self, l1: float, l2: float, share: float = 1.0) -> float:
        """Analytic noise std of one coordinate when ``share`` of this budget goes to a query of
        L1/L2 sensitivity ``l1``/``l2``: Laplace ``√2·l1/ε``, Gaussian ``l2/√(2ρ)`` (for (ε, δ)
        through ``ρ = (√(ln(1/δ) + ε) − √ln(1/δ))²``, the usual zCDP conversion). Planning only."""
        if self.kind == "epsilon":
            return math.sqrt(2.0) * l1 / (self.d_out * share)
        if self.kind == "rho":
            rho = self.d_out
        else:
            eps, dl = self.d_out
            rho = (math.sqrt(math.log(1 / dl) + eps) - math.sqrt(math.log(1 / dl))) ** 2
        return l2 / math.sqrt(2.0 * rho * share)

    def finish(self, measurement: dp.Measurement) -> dp.Measurement:
        """``measurement`` in this budget's measure: zCDP converted to (ε, δ) at ``delta``."""
        if self.kind != "epsilon_delta":
            return measurement
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(measurement), self.d_out[1])

    def record(self, spent: Any) -> dict[str, float]:
        """The loss a measurement's privacy map reports, under this budget's names."""
        if self.kind == "rho":
            return {"rho": float(spent)}
        if self.kind == "epsilon":
            return {"epsilon": float(spent)}
        return {"epsilon": float(spent[0]), "delta": float(spent[1])}


def mechanism_of(output_measure: dp.Measure) -> str:
    """``"laplace"`` for pure ε, ``"gaussian"`` for zCDP; any other measure is refused."""
    if output_measure == dp.max_divergence():
        return "laplace"
    if output_measure == dp.zero_concentrated_divergence():
        return "gaussian"
    raise ValueError(
        f"output_measure ({output_measure}) must be dp.max_divergence() (Laplace) or "
        "dp.zero_concentrated_divergence() (Gaussian); for (ε, δ) use release_sketch(delta=...) "
        "or OpenDP's make_zCDP_to_approxDP"
    )


def search_measurement(
    make: Callable[[float], dp.Measurement], budget: Budget, d_in: int, sensitivity: float
) -> dp.Measurement:
    """The measurement at the smallest noise scale OpenDP certifies for ``budget`` at ``d_in``.

    ``make(scale)`` builds the pure-ε or zCDP measurement (for (ε, δ) the budget converts it);
    ``sensitivity`` (``Δ_p`` of what ``scale`` multiplies) brackets the search around the
    analytic scale: about 60 steps instead of about 1000.

    :raises ValueError: if no representable scale meets the budget
    """
    return budget.finish(make(search_scale(make, budget, d_in, sensitivity)))


def search_scale(
    make: Callable[[float], dp.Measurement], budget: Budget, d_in: int, sensitivity: float
) -> float:
    """The scale :func:`search_measurement` builds its measurement at."""

    def build(scale: float) -> dp.Measurement:
        return budget.finish(make(scale))

    # Laplace needs d_in·Δ₁/(ε(1-c)) and ρ-zCDP d_in·Δ₂/√(2ρ(1-c)), both above ref; (ε, δ)
    # Gaussian stays mostly within [ref/20, 10⁴·ref]; extreme δ fall back to wider brackets
    ref = budget.reference_scale(d_in, sensitivity)
    for lo_f, hi_f in ((1 / 20, 1e4), (1.0, 1e8), (1e-4, 1 / 20)):
        try:
            return float(
                dp.binary_search_param(build, d_in=d_in, d_out=budget.d_out, bounds=(ref * lo_f, ref * hi_f))
            )
        except (ValueError, dp.OpenDPException):  # boundary outside, or loss overflow at tiny scales
            continue
    try:
        return float(dp.binary_search_param(build, d_in=d_in, d_out=budget.d_out, T=float))
    except (ValueError, dp.OpenDPException) as e:
        raise ValueError(
            f"no noise scale OpenDP can represent gives {budget.kind} = {budget.d_out!r} "
            f"({type(e).__name__}): the budget or count_fraction is too extreme"
        ) from None


def as_rho(budget: Budget, d_in: int) -> float:
    """The ρ whose zCDP → (ε, δ) conversion (OpenDP's, as :meth:`Budget.finish`) meets an
    (ε, δ) budget; ``budget.d_out`` itself for ρ."""
    if budget.kind == "rho":
        return float(budget.d_out)
    eps, delta = budget.d_out

    def converted(rho: float) -> dp.Measurement:
        const = dp.m.make_user_measurement(
            dp.atom_domain(T=bool),
            dp.symmetric_distance(),
            dp.zero_concentrated_divergence(),
            lambda x: x,
            lambda d: rho,
        )
        return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(const), delta)

    def meets(rho: float) -> bool:
        try:
            return bool(converted(rho).map(d_in)[0] <= eps)
        except dp.OpenDPException:  # the conversion overflows far above any usable ρ
            return False

    return float(dp.binary_search(meets, bounds=(1e-12, 1e12), T=float))


def rest_budget(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    measure: dp.Measure,
    d_in: int,
    spent: list[float],
    total: float,
) -> Budget:
    """The budget left for a last query after ``spent``: the largest share whose sum with
    theirs, as OpenDP's ``make_adaptive_composition`` adds the losses (rounding up), stays within
    ``total`` (so ε = 1 is recorded as 1.0), in ``measure`` (ε, or ρ)."""
    rest, step = total - sum(spent), 0.0
    for _ in range(256):
        check = dp.c.make_adaptive_composition(
            input_domain, input_metric, measure, d_in=d_in, d_mids=[*spent, rest]
        )
        if rest > 0 and check.map(d_in) <= total:
            break
        # OpenDP rounds every addition up: with many earlier queries (a selection's rounds at
        # 100 columns) the sum can exceed the total by tens of ulps, so the step doubles
        step = max(2 * step, math.ulp(rest))
        rest = rest - step
    else:  # public arithmetic only: neighbouring datasets are refused alike, before any data
        raise ValueError(
            f"no share of the budget ({total}) is left after {len(spent)} queries costing {sum(spent)}"
        )
    return Budget.of(epsilon=rest) if measure == dp.max_divergence() else Budget.of(rho=rest)
