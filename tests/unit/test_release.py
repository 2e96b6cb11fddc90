"""``release_sketch``: budgets, the privacy unit, the budget split, Polars input, ByClass, bad input.

Every valid release is checked against quantities computed here from the feature map's stated
sensitivities (not copied from a run): the recorded loss is within 1% of the budget and never
above it, and the recorded noise scales reproduce the loss through the documented formulas.
"""

from __future__ import annotations

import math
import re

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps

EPS = 1.0
RHO = 0.5
DELTA = 1e-6


def _within_budget(spent: float, budget: float) -> None:
    assert spent <= budget
    assert spent >= 0.99 * budget


def _laplace_loss(sk: dps.Sketch, d_in: int = 1) -> float:
    """ε implied by the recorded scales: Δ₁·d/(sum scale in Φ̃ units) + d/(count scale)."""
    fm = sk.feature_map
    return d_in * fm.sensitivity(1) / (sk.noise["sum_scale"] * fm.gain) + d_in / sk.noise["count_scale"]


def _gaussian_rho(sk: dps.Sketch, d_in: int = 1) -> float:
    """ρ implied by the recorded scales: (dΔ₂)²/(2σ²) + d²/(2σ_c²)."""
    fm = sk.feature_map
    sigma = sk.noise["sum_scale"] * fm.gain
    return (d_in * fm.sensitivity(2)) ** 2 / (2 * sigma**2) + d_in**2 / (2 * sk.noise["count_scale"] ** 2)


@pytest.fixture(scope="module")
def laplace_sketch(data2d, hist2d) -> dps.Sketch:
    return dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS)


@pytest.fixture(scope="module")
def rho_sketch(data2d, hist2d) -> dps.Sketch:
    return dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), rho=RHO)


# -- budgets -----------------------------------------------------------------------------------


def test_epsilon_gives_laplace_within_budget(laplace_sketch, hist2d):
    sk = laplace_sketch
    assert isinstance(sk, dps.Sketch)
    assert sk.noise["mechanism"] == "laplace"
    assert sk.privacy["measure"] == "MaxDivergence"
    assert sk.privacy["d_in"] == 1
    _within_budget(sk.privacy["epsilon"], EPS)
    assert _laplace_loss(sk) == pytest.approx(EPS, rel=1e-6)
    assert sk.feature_map == hist2d
    assert sk.sum_units.shape == (hist2d.num_features,)
    assert sk.bounds == ([0.0, 0.0], [1.0, 1.0])
    assert sk.column_names is None


def test_epsilon_delta_gives_gaussian_within_budget(data2d, hist2d):
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS, delta=DELTA)
    assert sk.noise["mechanism"] == "gaussian"
    assert "Approximate" in sk.privacy["measure"]
    _within_budget(sk.privacy["epsilon"], EPS)
    assert sk.privacy["delta"] <= DELTA
    assert sk.privacy["delta"] >= 0.99 * DELTA
    # the ρ implied by the recorded scales must convert (OpenDP's zCDP → (ε, δ)) to the recorded ε
    rho = _gaussian_rho(sk)
    conv = dp.c.make_fix_delta(
        dp.c.make_zCDP_to_approxDP(
            dp.m.make_gaussian(
                dp.atom_domain(T=float, nan=False),
                dp.absolute_distance(T=float),
                scale=1.0 / math.sqrt(2 * rho),
            )
        ),
        DELTA,
    )
    assert conv.map(1.0)[0] == pytest.approx(sk.privacy["epsilon"], rel=1e-6)


def test_delta_zero_means_pure_dp(data2d, hist2d):
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS, delta=0)
    assert sk.noise["mechanism"] == "laplace"
    _within_budget(sk.privacy["epsilon"], EPS)


def test_rho_gives_gaussian_within_budget(rho_sketch):
    sk = rho_sketch
    assert sk.noise["mechanism"] == "gaussian"
    assert sk.privacy["measure"] == "ZeroConcentratedDivergence"
    _within_budget(sk.privacy["rho"], RHO)
    assert _gaussian_rho(sk) == pytest.approx(RHO, rel=1e-6)
    assert sk.noise["sum_variance"] == pytest.approx(sk.noise["sum_scale"] ** 2, rel=1e-12)
    assert sk.noise["count_variance"] == pytest.approx(sk.noise["count_scale"] ** 2, rel=1e-12)


def test_laplace_variances_are_discrete_laplace(laplace_sketch, hist2d):
    sk = laplace_sketch
    s = sk.noise["sum_scale"] / hist2d.unit  # integer units
    t = math.exp(-1.0 / s)
    assert sk.sum_variance == pytest.approx(2 * t / (1 - t) ** 2 * hist2d.unit**2, rel=1e-9)
    c = sk.noise["count_scale"]
    tc = math.exp(-1.0 / c)
    assert sk.count_variance == pytest.approx(2 * tc / (1 - tc) ** 2, rel=1e-9)


def test_rff_release_accounts_for_gain(data2d, rff2d):
    sk = dps.release_sketch(data2d, rff2d, bounds=(0.0, 1.0), epsilon=EPS)
    _within_budget(sk.privacy["epsilon"], EPS)
    assert _laplace_loss(sk) == pytest.approx(EPS, rel=1e-6)


# -- privacy unit ------------------------------------------------------------------------------


def test_two_contributions_double_laplace_scale(data2d, hist2d, laplace_sketch):
    sk2 = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS, contributions=2)
    assert sk2.privacy["d_in"] == 2
    _within_budget(sk2.privacy["epsilon"], EPS)
    assert sk2.noise["sum_scale"] / laplace_sketch.noise["sum_scale"] == pytest.approx(2.0, rel=1e-6)
    assert sk2.noise["count_scale"] / laplace_sketch.noise["count_scale"] == pytest.approx(2.0, rel=1e-6)
    assert _laplace_loss(sk2, d_in=2) == pytest.approx(EPS, rel=1e-6)


def test_two_contributions_double_gaussian_scale(data2d, hist2d, rho_sketch):
    sk2 = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), rho=RHO, contributions=2)
    assert sk2.privacy["d_in"] == 2
    _within_budget(sk2.privacy["rho"], RHO)
    assert sk2.noise["sum_scale"] / rho_sketch.noise["sum_scale"] == pytest.approx(2.0, rel=1e-6)
    assert sk2.noise["count_scale"] / rho_sketch.noise["count_scale"] == pytest.approx(2.0, rel=1e-6)


# -- budget split ------------------------------------------------------------------------------


def test_default_count_fraction_split(laplace_sketch, hist2d):
    # ε_count = c·ε with c = 0.02 and ε_sum = (1 - c)·ε
    sk = laplace_sketch
    assert sk.noise["count_fraction"] == 0.02
    assert 1.0 / sk.noise["count_scale"] == pytest.approx(0.02 * EPS, rel=1e-6)
    assert hist2d.sensitivity(1) / sk.noise["sum_scale"] == pytest.approx(0.98 * EPS, rel=1e-6)


@pytest.mark.parametrize("c", [0.5, 0.1])
def test_count_fraction_changes_laplace_split(data2d, hist2d, laplace_sketch, c):
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS, count_fraction=c)
    assert sk.noise["count_fraction"] == c
    _within_budget(sk.privacy["epsilon"], EPS)
    assert 1.0 / sk.noise["count_scale"] == pytest.approx(c * EPS, rel=1e-6)
    assert hist2d.sensitivity(1) / sk.noise["sum_scale"] == pytest.approx((1 - c) * EPS, rel=1e-6)
    # more budget on the count: the count gets less noise and the sum more than with c = 0.02
    assert sk.noise["count_scale"] < laplace_sketch.noise["count_scale"]
    assert sk.noise["sum_scale"] > laplace_sketch.noise["sum_scale"]


def test_count_fraction_changes_gaussian_split(data2d, hist2d):
    c = 0.25
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), rho=RHO, count_fraction=c)
    _within_budget(sk.privacy["rho"], RHO)
    # ρ_count = 1/(2σ_c²) = c·ρ, ρ_sum = Δ₂²/(2σ²) = (1 - c)·ρ
    assert 1.0 / (2 * sk.noise["count_scale"] ** 2) == pytest.approx(c * RHO, rel=1e-6)
    assert hist2d.sensitivity(2) ** 2 / (2 * sk.noise["sum_scale"] ** 2) == pytest.approx(
        (1 - c) * RHO, rel=1e-6
    )


# -- inputs ------------------------------------------------------------------------------------


def _skewed_frame(n: int = 2000) -> pl.DataFrame:
    """Column a sits in bin 0 of [0, 1] (4 bins), column b in bin 3; plus a text column."""
    return pl.DataFrame({"a": np.full(n, 0.1), "b": np.full(n, 0.9), "name": ["row"] * n})


def test_numpy_column_names_recorded(data2d, hist2d):
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=EPS, column_names=["x", "y"])
    assert sk.column_names == ["x", "y"]


@pytest.mark.parametrize("lazy", [False, True], ids=["DataFrame", "LazyFrame"])
@pytest.mark.parametrize("cols", [["a", "b"], ["b", "a"]])
def test_polars_input_selects_columns(hist2d, lazy, cols):
    df = _skewed_frame()
    sk = dps.release_sketch(
        df.lazy() if lazy else df, hist2d, bounds=(0.0, 1.0), epsilon=EPS, column_names=cols
    )
    assert sk.column_names == cols
    _within_budget(sk.privacy["epsilon"], EPS)
    # noise scale ≈ 2: |noise| < 60 fails with probability < 1e-12
    first, second = sk.sum_units[:4], sk.sum_units[4:]
    expected_bin = {"a": 0, "b": 3}
    for block, col in ((first, cols[0]), (second, cols[1])):
        assert abs(block[expected_bin[col]] - 2000) < 60
        others = np.delete(block, expected_bin[col])
        assert np.all(np.abs(others) < 60)


def test_polars_without_column_names_uses_all_columns(hist2d):
    df = _skewed_frame().drop("name")
    sk = dps.release_sketch(df, hist2d, bounds=(0.0, 1.0), epsilon=EPS)
    assert sk.column_names == ["a", "b"]


def test_byclass_label_bounds_extended(rng):
    n = 600
    X = rng.uniform(0.0, 1.0, size=(n, 2))
    y = np.repeat([0.0, 1.0, 2.0], n // 3)
    fm = dps.ByClass(dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2), num_classes=3)
    sk = dps.release_sketch(np.c_[X, y], fm, bounds=(0.0, 1.0), epsilon=EPS)
    assert sk.bounds == ([0.0, 0.0, 0.0], [1.0, 1.0, 2.0])
    _within_budget(sk.privacy["epsilon"], EPS)
    assert _laplace_loss(sk) == pytest.approx(EPS, rel=1e-6)
    # every class keeps its own rows (label 2 is not clipped into class 1); noise scale ≈ 3
    for c in range(3):
        inner, count = fm.block(sk.sum_units, c)
        assert abs(count - n // 3) < 80
        assert abs(inner[:4].sum() - n // 3) < 160


def test_byclass_explicit_full_bounds(rng):
    X = np.c_[rng.uniform(0, 1, size=(90, 1)), np.arange(90) % 2]
    fm = dps.ByClass(dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=1), num_classes=2)
    sk = dps.release_sketch(X, fm, bounds=([0.0, 0.0], [1.0, 1.0]), epsilon=EPS)
    assert sk.bounds == ([0.0, 0.0], [1.0, 1.0])


def test_impute_replaces_nan(hist2d):
    n = 400
    X = np.full((n, 2), 0.1)
    X[:300, 0] = np.nan  # imputed to 0.9: bin 3 of column 0
    sk = dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS, impute=0.9)
    _within_budget(sk.privacy["epsilon"], EPS)
    assert abs(sk.sum_units[3] - 300) < 60
    assert abs(sk.sum_units[0] - 100) < 60


def test_out_of_box_values_are_clipped(hist2d):
    X = np.array([[-5.0, 7.0]] * 500)
    sk = dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS)
    assert abs(sk.sum_units[0] - 500) < 60
    assert abs(sk.sum_units[7] - 500) < 60


# -- bad data: exact messages, never the data value ---------------------------------------------


def _raises_without_value(secret, call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$") as info:
        call()
    text = str(info.value)
    assert str(secret) not in text
    assert "123456" not in text
    return info.value


NONFINITE = "data contains NaN or infinite values; clean it or pass impute=<public value>"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "+inf", "-inf"])
def test_nonfinite_refused(hist2d, secret, bad):
    X = np.full((20, 2), secret)
    X[5, 1] = bad
    _raises_without_value(
        secret, lambda: dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS), NONFINITE
    )


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_inf_refused_even_with_impute(hist2d, secret, bad):
    X = np.full((20, 2), secret)
    X[3, 0] = bad
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS, impute=0.5),
        "data contains infinite values; impute replaces NaN only",
    )


def test_polars_null_refused(hist2d, secret):
    df = pl.DataFrame({"a": [secret, None, 0.5], "b": [0.1, 0.2, secret]})
    _raises_without_value(secret, lambda: dps.release_sketch(df, hist2d, (0.0, 1.0), epsilon=EPS), NONFINITE)


def test_wrong_number_of_columns(hist2d, secret):
    X = np.full((10, 3), secret)
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS),
        "data has 3 columns but the feature map expects 2",
    )


@pytest.mark.parametrize("shape,ndim", [((10,), 1), ((4, 5, 2), 3), ((), 0)])
def test_wrong_dimensionality(hist2d, secret, shape, ndim):
    X = np.full(shape, secret)
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS),
        f"data must be 2-dimensional (rows × columns), got {ndim} dimension(s)",
    )


@pytest.mark.parametrize(
    "X,dtype",
    [
        (np.array([[123456.789, "x"]], dtype=object), "object"),
        (np.array([["123456.789", "0.5"]]), "<U10"),
        (np.array([[123456.789 + 1j, 0.5]]), "complex128"),
    ],
    ids=["object", "str", "complex"],
)
def test_non_numeric_dtype(hist2d, secret, X, dtype):
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(X, hist2d, bounds=(0.0, 1.0), epsilon=EPS),
        f"data dtype ({dtype}) must be numeric (bool, int or float)",
    )


def test_empty_data(hist2d, secret):
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(np.empty((0, 2)), hist2d, bounds=(0.0, 1.0), epsilon=EPS),
        "data is empty (0 rows)",
    )


@pytest.mark.parametrize(
    "data,name",
    [
        ([[123456.789, 0.5]], "list"),
        ({"a": [123456.789]}, "dict"),
        ((123456.789, 0.5), "tuple"),
        (123456.789, "float"),
    ],
)
def test_non_array_input(hist2d, secret, data, name):
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(data, hist2d, bounds=(0.0, 1.0), epsilon=EPS),
        f"data must be a numpy array or a Polars DataFrame/LazyFrame, got {name}",
    )


def test_polars_text_column_refused(hist2d, secret):
    df = pl.DataFrame({"a": [0.5], "name": [str(secret)]})
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(df, hist2d, (0.0, 1.0), epsilon=EPS, column_names=["a", "name"]),
        "columns ['name'] must be numeric",
    )


def test_polars_missing_column(hist2d, secret):
    df = pl.DataFrame({"a": [secret], "b": [secret]})
    _raises_without_value(
        secret,
        lambda: dps.release_sketch(df, hist2d, (0.0, 1.0), epsilon=EPS, column_names=["a", "zz"]),
        "columns ['zz'] are not in the data (columns: ['a', 'b'])",
    )


# -- bad parameters ------------------------------------------------------------------------------


def _bad_param(data2d, hist2d, message, **kwargs):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), **kwargs)


@pytest.mark.parametrize(
    "kwargs", [{}, {"epsilon": 1.0, "rho": 0.5}, {"delta": 1e-6}], ids=["neither", "both", "delta-only"]
)
def test_exactly_one_budget(data2d, hist2d, kwargs):
    _bad_param(data2d, hist2d, "give exactly one of epsilon (optionally with delta) or rho", **kwargs)


@pytest.mark.parametrize(
    "eps,shown",
    [
        (-1.0, "-1.0"),
        (0.0, "0.0"),
        (0, "0"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("abc", "'abc'"),
        (None, None),
    ],
)
def test_bad_epsilon(data2d, hist2d, eps, shown):
    if eps is None:  # epsilon=None and rho=None: neither given
        _bad_param(data2d, hist2d, "give exactly one of epsilon (optionally with delta) or rho", epsilon=None)
        return
    _bad_param(data2d, hist2d, f"epsilon ({shown}) must be a positive finite number", epsilon=eps)


@pytest.mark.parametrize("rho,shown", [(-0.5, "-0.5"), (0.0, "0.0"), (float("nan"), "nan")])
def test_bad_rho(data2d, hist2d, rho, shown):
    _bad_param(data2d, hist2d, f"rho ({shown}) must be a positive finite number", rho=rho)


@pytest.mark.parametrize("delta", [1.0, 1.5])
def test_delta_at_least_one(data2d, hist2d, delta):
    _bad_param(data2d, hist2d, f"delta ({delta!r}) must be below 1", epsilon=1.0, delta=delta)


@pytest.mark.parametrize("delta,shown", [(-1e-6, "-1e-06"), (float("nan"), "nan")])
def test_delta_negative_or_nan(data2d, hist2d, delta, shown):
    _bad_param(data2d, hist2d, f"delta ({shown}) must be a positive finite number", epsilon=1.0, delta=delta)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_delta_with_rho(data2d, hist2d, delta):
    _bad_param(data2d, hist2d, "delta cannot be combined with rho", rho=0.5, delta=delta)


@pytest.mark.parametrize("contributions", [0, -1, 1.5, True, "2", None])
def test_bad_contributions(data2d, hist2d, contributions):
    _bad_param(
        data2d,
        hist2d,
        f"contributions ({contributions!r}) must be a positive integer",
        epsilon=1.0,
        contributions=contributions,
    )


@pytest.mark.parametrize("c", [0, 0.0, 1, 1.0, -0.1, 1.5, float("nan"), True])
def test_bad_count_fraction(data2d, hist2d, c):
    _bad_param(
        data2d,
        hist2d,
        f"count_fraction ({c!r}) must be strictly between 0 and 1",
        epsilon=1.0,
        count_fraction=c,
    )


def test_bad_feature_map(data2d):
    with pytest.raises(ValueError, match=r"^feature_map \('rff'\) must be an opendp_sketch feature map$"):
        dps.release_sketch(data2d, "rff", bounds=(0.0, 1.0), epsilon=1.0)


def test_bad_bounds(data2d, hist2d):
    with pytest.raises(ValueError, match=r"must have lower < upper in every column$"):
        dps.release_sketch(data2d, hist2d, bounds=(1.0, 0.0), epsilon=1.0)


def test_bad_column_names_count(data2d, hist2d):
    with pytest.raises(ValueError, match=re.escape("column_names (['a']) must be 2 distinct names")):
        dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=1.0, column_names=["a"])


# -- make_private_sketch arguments -------------------------------------------------------------


@pytest.fixture
def box2():
    return dps.box_domain((0.0, 1.0), num_columns=2)


@pytest.mark.parametrize(
    "scale,shown",
    [
        (-1.0, "-1.0"),
        (-1, "-1"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("abc", "'abc'"),
        (None, "None"),
    ],
)
def test_make_private_sketch_bad_scale(box2, hist2d, scale, shown):
    with pytest.raises(
        ValueError, match=f"^{re.escape(f'scale ({shown}) must be a non-negative finite number')}$"
    ):
        dps.make_private_sketch(box2, dp.symmetric_distance(), dp.max_divergence(), hist2d, scale=scale)


@pytest.mark.parametrize("c", [0.0, 1.0, -2.0])
def test_make_private_sketch_bad_count_fraction(box2, hist2d, c):
    with pytest.raises(
        ValueError, match=re.escape(f"count_fraction ({c!r}) must be strictly between 0 and 1")
    ):
        dps.make_private_sketch(
            box2, dp.symmetric_distance(), dp.max_divergence(), hist2d, 1.0, count_fraction=c
        )


@pytest.mark.parametrize(
    "measure",
    [
        dp.approximate(dp.max_divergence()),
        dp.renyi_divergence(),
        dp.approximate(dp.zero_concentrated_divergence()),
    ],
    ids=str,
)
def test_make_private_sketch_wrong_output_measure(box2, hist2d, measure):
    pattern = (
        f"^{re.escape(f'output_measure ({measure}) must be dp.max_divergence() (Laplace) or ')}"
        + re.escape("dp.zero_concentrated_divergence() (Gaussian)")
    )
    with pytest.raises(ValueError, match=pattern):
        dps.make_private_sketch(box2, dp.symmetric_distance(), measure, hist2d, 1.0)


@pytest.mark.parametrize(
    "domain",
    [
        dp.numpy.array2_domain(num_columns=2, T=float, nan=False),
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
    ],
    ids=["array2_domain", "vector_domain"],
)
def test_make_private_sketch_wrong_input_domain(hist2d, domain):
    message = f"input_domain ({domain}) must be one of the sketch domains: box_domain (numpy)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        dps.make_private_sketch(domain, dp.symmetric_distance(), dp.max_divergence(), hist2d, 1.0)


@pytest.mark.parametrize("metric", [dp.insert_delete_distance(), dp.change_one_distance()], ids=str)
def test_make_private_sketch_wrong_metric(box2, hist2d, metric):
    with pytest.raises(
        ValueError, match=f"^{re.escape(f'input_metric ({metric}) must be dp.symmetric_distance()')}$"
    ):
        dps.make_private_sketch(box2, metric, dp.max_divergence(), hist2d, 1.0)


def test_make_private_sketch_feature_map_domain_mismatch(hist2d):
    box3 = dps.box_domain((0.0, 1.0), num_columns=3)
    with pytest.raises(ValueError, match="^feature_map expects 2 columns but input_domain has 3$"):
        dps.make_private_sketch(box3, dp.symmetric_distance(), dp.max_divergence(), hist2d, 1.0)


def test_make_private_sketch_privacy_map(box2, hist2d):
    # documented: loss at d_in is d_in·Δ₁/(scale·(1 - c)) (Laplace), (d_in·Δ₂)²/(2·scale²·(1 - c)) (Gaussian)
    lap = dps.make_private_sketch(
        box2, dp.symmetric_distance(), dp.max_divergence(), hist2d, 4.0, count_fraction=0.2
    )
    assert lap.map(3) == pytest.approx(3 * hist2d.sensitivity(1) / (4.0 * 0.8), rel=1e-9)
    gau = dps.make_private_sketch(
        box2, dp.symmetric_distance(), dp.zero_concentrated_divergence(), hist2d, 4.0, count_fraction=0.2
    )
    assert gau.map(3) == pytest.approx((3 * hist2d.sensitivity(2)) ** 2 / (2 * 16.0 * 0.8), rel=1e-9)


@pytest.mark.parametrize(
    "budget",
    [
        {"epsilon": 0.001, "delta": 0.5},
        {"epsilon": 20.0, "delta": 1e-300},
        {"epsilon": 1e-3},
        {"epsilon": 200.0},
        {"rho": 1e-6},
    ],
    ids=str,
)
def test_extreme_budgets_are_spent_fully_and_never_exceeded(data2d, hist2d, budget):
    sk = dps.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), **budget)
    key = "rho" if "rho" in budget else "epsilon"
    assert budget[key] * 0.99 <= sk.privacy[key] <= budget[key]
    if "delta" in budget:
        assert sk.privacy["delta"] <= budget["delta"]


def test_release_with_a_jl_projection(rng):
    proj = dps.JLProjection(input_dim=40, output_dim=8, seed=3)
    X = rng.uniform(-1, 1, size=(3000, 40))
    fm = dps.RFF(dim=8, num_features=400, bandwidth=2.0, seed=0)
    sk = dps.release_sketch(X, fm, bounds=(-1, 1), epsilon=5.0, projection=proj)
    assert sk.privacy["epsilon"] <= 5.0 and len(sk.bounds[0]) == 8
    Q = rng.uniform(-1, 1, size=(5, 40))
    exact = fm.kernel_value(proj.transform(X)[None, :, :], proj.transform(Q)[:, None, :]).mean(axis=1)
    np.testing.assert_allclose(dps.KDE(sk)(proj.transform(Q)), exact, atol=0.1)
    with pytest.raises(ValueError, match="the projection outputs 8 columns but the feature map expects 4"):
        dps.release_sketch(X, dps.RFF(dim=4, num_features=10), bounds=(-1, 1), epsilon=1.0, projection=proj)
    with pytest.raises(ValueError, match="data has 39 columns but the projection expects 40"):
        dps.release_sketch(X[:, :39], fm, bounds=(-1, 1), epsilon=1.0, projection=proj)
    with pytest.raises(ValueError, match="ByClass"):
        dps.release_sketch(
            X, dps.ByClass(fm, 2), bounds=(-1, 1), epsilon=1.0, projection=dps.JLProjection(40, 9)
        )
    with pytest.raises(ValueError, match="must be a JLProjection"):
        dps.release_sketch(X, fm, bounds=(-1, 1), epsilon=1.0, projection="jl")


def test_a_release_whose_noise_swamps_the_data_warns_before_releasing(monkeypatch):
    import warnings as _w

    X = np.random.default_rng(0).uniform(size=(1000, 2))
    fm = dps.Histogram(bounds=(0, 1), bins=8, dim=2)
    released = []
    real = dps.release.release_once
    monkeypatch.setattr(dps.release, "release_once", lambda *a: released.append(1) or real(*a))
    with _w.catch_warnings():
        _w.simplefilter("error")
        dps.release_sketch(X, fm, (0, 1), epsilon=1.0)  # a sensible budget: silent
        with pytest.raises(UserWarning, match="mostly noise"):
            dps.release_sketch(X, fm, (0, 1), epsilon=1e-6)
    assert released == [1]  # the warning came before the noisy release (here raised: nothing released)


def test_an_impute_value_outside_the_public_range_is_refused():
    """A pressure column bounded [950, 1060] cannot impute 0 (it used to be clipped to 950 silently)."""
    X = np.full((10, 1), 1000.0)
    X[3, 0] = np.nan
    fm = dps.Histogram(bounds=(950.0, 1060.0), bins=4, dim=1)
    with pytest.raises(
        ValueError, match=r"impute \(0\) must lie inside the public bounds .* \[950.0, 1060.0\]"
    ):
        dps.release_sketch(X, fm, (950.0, 1060.0), epsilon=1.0, impute=0)
    with pytest.raises(ValueError, match="must lie inside the public bounds"):
        dps.backends.streaming.frame_box_domain((950.0, 1060.0), ["p"], impute=0)
    assert isinstance(dps.release_sketch(X, fm, (950.0, 1060.0), epsilon=1.0, impute=1000.0), dps.Sketch)


def test_pandas_and_arrow_tables_release_on_the_box_path_by_column_name():
    """Issue 39, item 9: pandas (and PyArrow) tables are read as Polars is, columns by name."""
    import pandas as pd
    import pyarrow as pa

    rng = np.random.default_rng(9)
    df = pd.DataFrame({"a": rng.uniform(0, 1, 400), "b": rng.uniform(0, 1, 400), "note": ["x"] * 400})
    fm = dps.Histogram(bounds=(0, 1), bins=4, dim=2)
    for data in (df, pa.Table.from_pandas(df)):
        sk = dps.release_sketch(data, fm, bounds=(0, 1), epsilon=1.0, column_names=["a", "b"])
        assert sk.column_names == ["a", "b"]
    with pytest.raises(ValueError, match=r"columns \['note'\] must be numeric"):
        dps.release_sketch(df, dps.Histogram(bounds=(0, 1), bins=4, dim=3), bounds=(0, 1), epsilon=1.0)


# -- no hidden row estimate: a noisy row count plans the map (issue 39, item 2) ------------------
def _mixed_table(n: int = 30_000, seed: int = 0):
    import polars as pl

    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {"x": rng.uniform(0, 10, n), "y": rng.uniform(0, 10, n), "c": rng.choice(["a", "b", "c"], n)}
    )


MIXED = {"x": (0, 10), "y": (0, 10), "c": ["a", "b", "c"]}


@pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"epsilon": 1.0, "delta": 1e-6}, {"rho": 0.5}])
def test_without_rows_a_noisy_count_plans_the_map_within_the_budget(budget):
    from opendp_sketch.adaptive import DEFAULT_ROWS_FRACTION

    table = _mixed_table()
    sk = dps.release_sketch(table, schema=dps.Schema(MIXED), **budget)
    est = sk.privacy["rows_estimate"]
    assert est["fraction"] == DEFAULT_ROWS_FRACTION and abs(est["rows"] - 30_000) < 1_000
    for key, value in budget.items():  # exactly the budget given, never above
        assert sk.privacy[key] == value
    # the map is the one a schema with that many rows gets at the sketch's share
    hinted = dps.release_sketch(table, schema=dps.Schema(MIXED, rows=est["rows"]), **budget)
    assert sk.feature_map.num_features == hinted.feature_map.num_features
    assert sk.feature_map.num_features > dps.auto_feature_map(dps.Schema(MIXED), **budget).num_features


def test_a_given_row_estimate_wins_and_the_count_can_be_turned_off():
    table = _mixed_table(5_000)
    assert (
        "rows_estimate"
        not in dps.release_sketch(table, schema=dps.Schema(MIXED, rows=5_000), epsilon=1.0).privacy
    )
    off = dps.release_sketch(table, schema=dps.Schema(MIXED), epsilon=1.0, rows_fraction=0)
    assert "rows_estimate" not in off.privacy and off.privacy["epsilon"] == 1.0
    fm = dps.auto_feature_map(dps.Schema(MIXED))
    with pytest.raises(ValueError, match="rows_fraction counts the rows"):
        dps.release_sketch(table, fm, schema=dps.Schema(MIXED), epsilon=1.0, rows_fraction=0.05)
    with pytest.raises(ValueError, match="rows_fraction"):
        dps.release_sketch(table, schema=dps.Schema(MIXED), epsilon=1.0, rows_fraction=1.5)
    with pytest.raises(ValueError, match="give schema="):
        dps.release_sketch(
            np.zeros((10, 2)),
            dps.Histogram(bounds=(0, 1), bins=2, dim=2),
            bounds=(0, 1),
            epsilon=1.0,
            rows_fraction=0.1,
        )


def test_the_row_count_is_a_noisy_count_of_the_rows_at_its_share():
    """The count's noise: OpenDP's discrete Laplace at scale Δ/(ε·share), d_in = 1."""
    import opendp.prelude as dp

    from opendp_sketch.adaptive import make_row_estimated_sketch
    from opendp_sketch.backends.tables import table_domain
    from opendp_sketch.budget import Budget

    schema = dps.Schema(MIXED)
    m = make_row_estimated_sketch(
        table_domain(schema), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, schema, 0.5
    )
    assert m.map(1) <= 1.0  # the composition is built for d_in = 1 (the privacy unit)
    table = _mixed_table(2_000)
    draws = np.array([m(table).privacy["rows_estimate"]["noisy_count"] - 2_000 for _ in range(60)])
    # scale 1/0.5 = 2: the variance of a discrete Laplace of scale 2 is about 7.9
    assert abs(draws.mean()) < 2.5 and 2.0 < draws.var() < 25.0


def test_a_selection_with_99_rounds_stays_within_its_budget():
    """OpenDP rounds every addition of the adaptive composition up; with 99 selection rounds
    (100 columns) the share left to the release must shrink by tens of ulps, or the release's
    loss exceeds its budget and the default release of a 100-column table raised inside the
    measurement ("insufficient budget for query: 0.9700000000000026 > 0.97")."""
    from opendp_sketch.adaptive import make_spanning_sketch
    from opendp_sketch.budget import Budget
    from opendp_sketch.features.marginals import MarginalTables

    d = 100
    fm = MarginalTables.auto(([0.0] * d, [1.0] * d), fine_bins=2, coarse_bins=2)
    ones = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]
    m, _, rounds = make_spanning_sketch(
        dps.box_domain(([0.0] * d, [1.0] * d)),
        dp.symmetric_distance(),
        Budget.of(epsilon=0.97),
        1,
        fm,
        measured=ones,
    )
    assert rounds == d - 1
    assert m.map(1) <= 0.97
