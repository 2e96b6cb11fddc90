"""SubsampledRFF: the stated sensitivities hold for the integers actually summed.

Adversarial rows (box corners, zeros, out-of-box, ±inf, NaN, phases at odd multiples of π/4
and at multiples of π), neighbouring datasets under the exact integer sums, int64 headroom of
chunk sums, and full releases (Laplace, Gaussian) that round-trip through Sketch files.
"""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.features.subsampled import SubsampledRFF
from opendp_sketch.testing import adversarial_rows, check_neighbour_sensitivity, check_row_norms

#: id -> (map factory, public box, lower limit of observed/stated for p=1 and p=2)
CASES = {
    # one frequency per row: every row can reach |cos| = |sin| (π/4 rows), so both bounds are tight
    "r1-gather": (
        lambda: SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1, r=1),
        (-2.0, 2.0),
        (0.999, 0.999),
    ),
    "r4-gather": (
        lambda: SubsampledRFF(dim=3, num_features=64, bandwidth=0.7, seed=1, r=4),
        (-2.0, 2.0),
        (0.9, 0.999),
    ),
    # d ≥ r: all r phases of a block can sit at odd multiples of π/4 at once
    "r8-grouped-laplacian": (
        lambda: SubsampledRFF(dim=12, num_features=32, bandwidth=2.0, kernel="laplacian", seed=2, r=8),
        (-1.0, 1.0),
        (0.9, 0.999),
    ),
    "r-full": (
        lambda: SubsampledRFF(dim=3, num_features=16, bandwidth=0.5, seed=3),
        (-3.0, 3.0),
        (0.9, 0.999),
    ),
}


def _pi_rows(fm: SubsampledRFF, lo: float, hi: float) -> np.ndarray:
    """Rows whose phase for some frequency is a multiple of π/2 (cos = ±1 or sin = ±1), zeros,
    and box corners: the extremes of a single coordinate."""
    rows = [np.zeros(fm.dim), np.full(fm.dim, -0.0), np.full(fm.dim, lo), np.full(fm.dim, hi)]
    for j in range(fm.num_frequencies):
        w = fm.frequencies[:, j]
        for t in (math.pi, -math.pi, math.pi / 2, 2 * math.pi):
            x = w * t / (w @ w)
            if np.all((x >= lo) & (x <= hi)):
                rows.append(x)
    return np.array(rows)


def _pi4_rows_for_each_block(fm: SubsampledRFF, lo: float, hi: float, rng: np.random.Generator) -> np.ndarray:
    """For each block, rows whose phases of *that* block's frequencies are odd multiples of π/4,
    kept when the row's own hash selects that block (these maximise ‖q‖₁)."""
    out = []
    for b in range(fm.num_blocks):
        omega_t = fm._blocks[b].T  # (r, d)
        pinv = np.linalg.pinv(omega_t)
        for x0 in rng.uniform(lo, hi, (200, fm.dim)):
            z = omega_t @ x0
            target = np.pi / 4 + np.round((z - np.pi / 4) / (np.pi / 2)) * (np.pi / 2)
            x = x0 + pinv @ (target - z)
            if fm.blocks(x[None])[0] == b:
                out.append(x)
                break
    return np.array(out).reshape(-1, fm.dim)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("p", [1, 2])
def test_neighbours_move_the_exact_sum_by_at_most_the_stated_sensitivity(case, p):
    make, (lo, hi), tight = CASES[case]
    fm = make()
    rng = np.random.default_rng(17)
    rows = np.vstack(
        [
            adversarial_rows(fm, (lo, hi), seed=17, max_corners=64),
            _pi_rows(fm, lo, hi),
            _pi4_rows_for_each_block(fm, lo, hi, rng),
        ]
    )
    X = np.vstack([rng.uniform(lo, hi, (60, fm.dim)), rows[:20]])
    # chunk_rows=16 puts the added row into chunks of different composition
    observed, stated = check_neighbour_sensitivity(fm, X, (lo, hi), p, rows=rows, chunk_rows=16)
    assert observed <= stated
    assert observed >= tight[p - 1] * stated  # the bound is not vacuous: adversarial rows reach it


@pytest.mark.parametrize("case", list(CASES))
def test_every_row_meets_the_integer_bounds_even_unclipped(case):
    make, (lo, hi), _ = CASES[case]
    fm = make()
    rows = np.vstack([adversarial_rows(fm, (lo, hi), seed=3), _pi_rows(fm, lo, hi)])
    check_row_norms(fm, rows)  # raw: ±inf, NaN, 1e300 go through the fix path
    norms = check_row_norms(fm, rows, clip=(lo, hi))
    one = 1 << fm.frac_bits
    # the phase-0 row (all zeros) has cos = 1 on every selected frequency: ‖q‖₂² = B²·r·(γ2^k)² (truncated)
    q0 = fm.fixed_features(np.zeros((1, fm.dim)))[0]
    assert int((q0.astype(object) ** 2).sum()) == fm.num_blocks**2 * fm.r * int(fm.gain * one) ** 2
    assert norms.max_l2_squared <= fm._int_bound(2)


def test_exact_bounds_are_the_documented_integers():
    fm = SubsampledRFF(dim=4, num_features=200, r=10)
    B, r, one = 10, 10, 1 << 20
    assert fm.int_sensitivity(1) == B * math.isqrt(2 * (r * one) ** 2)
    assert fm._int_bound(2) == B * B * r * one * one
    assert fm.int_sensitivity(1) <= math.isqrt(2 * (100 * one) ** 2)  # never above the full RFF's L1


def test_int64_headroom_of_large_chunks():
    # many identical rows (all in one block, every coordinate at its largest value) summed in
    # one chunk: the exact sum is n·B·q₀ and must not wrap around in int64
    fm = SubsampledRFF(dim=2, num_features=2000, r=1)  # B = 1000
    n = 200_000
    X = np.zeros((n, 2))
    q0 = fm.fixed_features(X[:1])[0]
    total = fm.fixed_sum(X, chunk_rows=n, n_jobs=1)
    assert total == [n * int(v) for v in q0]
    assert max(abs(v) for v in total) > 2**37  # large, and exact
    # the chunk cap of base.py keeps chunk sums within 2^62 however large the chunk asked for
    assert ((1 << 62) // fm._int_bound(1)) * fm.num_blocks * (1 << fm.frac_bits) <= 1 << 62


def test_feature_sum_transformation_states_the_map_sensitivity():
    fm = CASES["r4-gather"][0]()
    for p in (1, 2):
        t = dps.make_feature_sum(
            dps.box_domain((-2.0, 2.0), num_columns=3), dp.symmetric_distance(), feature_map=fm, p=p
        )
        assert t.map(1) >= fm.sensitivity(p) and t.map(1) <= math.nextafter(fm.sensitivity(p), math.inf)


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}, {"epsilon": 1.0, "delta": 1e-6}])
def test_release_spends_the_budget_and_roundtrips_through_a_file(budget, tmp_path):
    fm = SubsampledRFF(dim=3, num_features=40, bandwidth=0.5, seed=5, r=4)
    X = np.random.default_rng(8).uniform(0.0, 1.0, (2_000, 3))
    sk = dps.release_sketch(X, fm, bounds=(0.0, 1.0), **budget)
    gaussian = "rho" in budget or "delta" in budget
    assert sk.noise["mechanism"] == ("gaussian" if gaussian else "laplace")
    if "rho" in budget:
        assert sk.privacy["rho"] <= 0.5
        # ρ_sum = Δ₂²/(2σ²) is 98 % of ρ: σ = Δ₂/√(2·0.98·0.5), Δ₂ = m'/√r = 20/2 (feature units of Φ̃)
        expected = fm.sensitivity(2) / math.sqrt(2 * 0.98 * 0.5) / fm.gain
        assert abs(sk.noise["sum_scale"] / expected - 1) < 1e-3
    else:
        assert sk.privacy["epsilon"] <= 1.0
    if not gaussian:
        expected = fm.sensitivity(1) / 0.98 / fm.gain
        assert abs(sk.noise["sum_scale"] / expected - 1) < 1e-3
    path = tmp_path / "sub.npz"
    sk.save(path)
    back = dps.Sketch.load(path)
    assert isinstance(back.feature_map, SubsampledRFF) and back.feature_map == fm and back.feature_map.r == 4
    np.testing.assert_array_equal(back.sum_units, sk.sum_units)
    assert back.count == sk.count and back.noise == sk.noise


def test_refused_data_spends_nothing_and_hides_values(secret):
    fm = SubsampledRFF(dim=2, num_features=8, r=1)
    X = np.array([[0.1, np.nan], [secret, 0.2]])
    with pytest.raises(ValueError) as err:
        dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=1.0)
    assert str(secret) not in str(err.value) and "123456" not in str(err.value)
