"""Unit tests of suggest_sketch_size and noise_to_signal (opendp_sketch/planning.py)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import polars as pl
import pytest

from opendp_sketch.features.subsampled import SubsampledRFF
from opendp_sketch.planning import SketchSizePlan, noise_to_signal, suggest_sketch_size


# -- the formula --------------------------------------------------------------------------------
def test_laplace_terms_match_the_derivation():
    t = noise_to_signal(500, 10**5, mechanism="laplace", budget=2.0, r=50, signal=0.25, count_fraction=0.1)
    assert math.isclose(t["nsr_noise"], 8 * 500**2 / (0.25 * (2.0 * 0.9 * 1e5) ** 2))
    assert math.isclose(t["nsr_subsampling"], (10 - 1) / (0.25 * 1e5))
    assert math.isclose(t["nsr_count"], 2 / (0.1 * 2.0 * 1e5) ** 2)
    assert math.isclose(t["nsr"], t["nsr_noise"] + t["nsr_subsampling"] + t["nsr_count"])


def test_gaussian_terms_match_the_derivation():
    t = noise_to_signal(500, 10**5, mechanism="gaussian", budget=0.5, r=50, signal=0.25, count_fraction=0.1)
    assert math.isclose(t["nsr_noise"], 500**2 / (0.25 * 50 * 0.5 * 0.9 * 1e10))
    assert math.isclose(t["nsr_count"], 1 / (2 * 0.1 * 0.5 * 1e10))
    full = noise_to_signal(500, 10**5, mechanism="gaussian", budget=0.5, signal=0.25, count_fraction=0.1)
    assert full["nsr_subsampling"] == 0 and math.isclose(t["nsr_noise"] / full["nsr_noise"], 10)  # × B


def test_noise_term_matches_the_variance_of_a_real_release():
    # E‖ξ‖²/n² from the formula equals 2m'·sum_variance/n² of an actual release's noise description
    import opendp_sketch as dps

    fm = SubsampledRFF(dim=2, num_features=40, bandwidth=0.5, seed=0, r=4)
    X = np.random.default_rng(1).uniform(size=(500, 2))
    for budget, kind in (({"epsilon": 1.0}, "laplace"), ({"rho": 0.5}, "gaussian")):
        sk = dps.release_sketch(X, fm, bounds=(0.0, 1.0), **budget)
        t = noise_to_signal(20, 500, mechanism=kind, budget=next(iter(budget.values())), r=4, signal=1.0)
        predicted = t["nsr_noise"] * 20 * 500**2  # undo the division by signal·m'·n²
        assert abs(40 * sk.sum_variance / predicted - 1) < 0.01


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.2}, {"epsilon": 1.0, "delta": 1e-7}])
@pytest.mark.parametrize("r", [None, 1, 5])
def test_nsr_increases_with_m_and_the_choice_is_the_largest_within_target(budget, r):
    budget = dict(budget)
    eps = budget.pop("epsilon", None)
    plan = suggest_sketch_size(30_000, eps, 4, 5, r=r, **budget)
    t = plan.table
    assert isinstance(t, pl.DataFrame) and t["nsr"].is_sorted() and t["num_features"].is_sorted()
    assert (t["num_features"] % 2 == 0).all() and (t["num_frequencies"] % (r or 1) == 0).all()
    assert t["num_features"].min() >= 200 and t["num_features"].max() <= 2000
    within = t.filter(pl.col("nsr") <= 0.1)
    if plan.meets_target:
        assert plan.num_features == within["num_features"].max()
        assert plan.nsr <= 0.1
    else:
        assert within.height == 0 and plan.num_features == t["num_features"].min()


def test_more_rows_or_budget_never_give_a_smaller_sketch():
    sizes = [suggest_sketch_size(n, 1.0, 10, 10).num_features for n in (10**4, 3 * 10**4, 10**5, 10**6)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    sizes = [suggest_sketch_size(10**5, e, 10, 10).num_features for e in (0.1, 0.3, 1.0, 3.0)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_subsampling_costs_accuracy_for_gaussian_noise():
    full = suggest_sketch_size(10**5, None, 10, 10, rho=0.05)
    sub = suggest_sketch_size(10**5, None, 10, 10, rho=0.05, r=5)
    assert sub.num_features < full.num_features


def test_approx_dp_uses_opendps_conversion():
    plan = suggest_sketch_size(10**5, 1.0, 10, 10, delta=1e-6)
    # between the classical bound ρ = (√(ε+L) − √L)², L = log(1/δ), and ε²/2... OpenDP's is tighter
    L = math.log(1e6)
    assert plan.mechanism == "gaussian" and (math.sqrt(1 + L) - math.sqrt(L)) ** 2 < plan.rho < 0.5


def test_defaults_follow_the_identifiability_rule():
    plan = suggest_sketch_size(10**3, 0.1, 3, 4)
    assert not plan.meets_target and plan.num_features == 10 * 3 * 4
    plan = suggest_sketch_size(10**9, 1.0, 3, 4)
    assert plan.meets_target and plan.num_features == 100 * 3 * 4


def test_plan_is_frozen():
    plan = suggest_sketch_size(10**5, 1.0, 2, 2)
    assert isinstance(plan, SketchSizePlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.num_features = 4  # type: ignore[misc]


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((0, 1.0, 2, 2), {}, r"^n \(0\)"),
        ((1.5, 1.0, 2, 2), {}, r"^n \(1.5\)"),
        ((True, 1.0, 2, 2), {}, r"^n \(True\)"),
        ((100, 0.0, 2, 2), {}, r"^epsilon"),
        ((100, float("nan"), 2, 2), {}, r"^epsilon"),
        ((100, None, 2, 2), {}, "exactly one of epsilon"),
        ((100, 1.0, 2, 2), {"rho": 0.5}, "exactly one of epsilon"),
        ((100, 1.0, 2, 2), {"delta": 1.5}, r"^delta"),
        ((100, 1.0, 0, 2), {}, r"^k \(0\)"),
        ((100, 1.0, 2, -1), {}, r"^d \(-1\)"),
        ((100, 1.0, 2, 2), {"r": 0}, r"^r \(0\)"),
        ((100, 1.0, 2, 2), {"r": 1000}, "multiple of r"),
        ((100, 1.0, 2, 2), {"signal": 1.5}, r"^signal"),
        ((100, 1.0, 2, 2), {"signal": 0}, r"^signal"),
        ((100, 1.0, 2, 2), {"target_nsr": -1}, r"^target_nsr"),
        ((100, 1.0, 2, 2), {"count_fraction": 1.0}, r"^count_fraction"),
        ((100, 1.0, 2, 2), {"min_features": 41}, "must be even"),
        ((100, 1.0, 2, 2), {"min_features": 400, "max_features": 200}, "must not exceed"),
    ],
)
def test_bad_arguments_raise_clear_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        suggest_sketch_size(*args, **kwargs)


def test_unknown_mechanism_is_refused():
    with pytest.raises(ValueError, match="mechanism"):
        noise_to_signal(10, 100, mechanism="exponential", budget=1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"budget": 0.0}, r"^budget"),
        ({"signal": 2.0}, r"^signal"),
        ({"r": 20}, "r ≤ num_frequencies"),
        ({"num_frequencies": 0}, "≥ 1"),
    ],
)
def test_noise_to_signal_validates_its_arguments(kwargs, match):
    args = {"num_frequencies": 10, "n": 100, "mechanism": "laplace", "budget": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        noise_to_signal(**args)
