"""Property-based hardening: bad, extreme and corrupted input never crashes and never releases.

Every case drawn by hypothesis must end in either a valid result or a clear error —
``ValueError`` (``SketchFormatError`` is one) from the Python API, exit code 2 from the command
line — never another exception type. When a case errors, nothing was released: no OpenDP
measurement was invoked (counted on ``dp.Measurement.__call__``), a ``dp.Context`` budget is
unchanged, or the CLI wrote no sketch file. Inputs that are valid but extreme (``±1e308``,
subnormals, ``±inf`` through ``make_box_clip``) are released exactly (``scale=0``) next to a
neighbour, and the difference is checked against the stated integer sensitivity.

Examples per test are modest (about 50 s in all); ``HARDENING_SCALE=<k>`` multiplies them, and the
slow test at the end runs five times as many. With ``OPENDP_SKETCH_HARDENING_LOG`` set, every
case appends a JSON line to that file (see ``conftest.py``; counted by
``benchmarks/bench_hardening.py``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import opendp_sketch as dps
from opendp_sketch.cli import main as cli_main
from opendp_sketch.sketch import _digest
from opendp_sketch.testing import check_neighbour_sensitivity, check_roundtrip, check_row_norms

SECRET = 123456.789  # put into bad data: no error message may show it
SECRET_TEXT = "123456"
SCALE = max(1, int(os.environ.get("HARDENING_SCALE", "1")))


def examples(n: int) -> settings:
    return settings(
        max_examples=n * SCALE,
        deadline=None,
        derandomize=True,  # seeded: the same cases on every run
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def attempt(fn: Any) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", ValueError)``; any other exception fails the test."""
    try:
        return "ok", fn()
    except ValueError as e:
        assert str(e), "an error must say what is wrong"
        assert SECRET_TEXT not in str(e), f"the error shows a data value: {e}"
        return "error", e


# -- strategies ------------------------------------------------------------------------------------

EXTREME_FLOATS = st.sampled_from(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1e308,
        -1e308,
        np.finfo(float).max,
        -np.finfo(float).max,
        5e-324,
        -5e-324,
        2.2250738585072014e-308,
        1e-300,
        np.inf,
        -np.inf,
        np.nan,
        SECRET,
    ]
)
FLOATS = st.one_of(EXTREME_FLOATS, st.floats(allow_nan=True, allow_infinity=True, width=64))
WEIRD = st.sampled_from(
    [
        None,
        "1",
        "x",
        b"1",
        True,
        False,
        [],
        [1.0],
        [[1.0]],
        {"a": 1},
        1j,
        math.nan,
        math.inf,
        -math.inf,
        1e308,
        -1e308,
        5e-324,
        -5e-324,
        0,
        -1,
        0.0,
        -0.0,
        2**70,
        np.float32(1.5),
        np.int64(3),
        np.array([1.0, 2.0]),
    ]
)


def _box(dim: int) -> st.SearchStrategy:
    lo = st.floats(-1e3, 1e3)
    width = st.floats(1e-3, 1e3)
    return st.tuples(
        st.lists(lo, min_size=dim, max_size=dim), st.lists(width, min_size=dim, max_size=dim)
    ).map(lambda t: (t[0], [a + w for a, w in zip(*t)]))


SEEDS = st.integers(0, 2**32)
BANDWIDTH = st.floats(1e-2, 1e2)


@st.composite
def map_params(draw: Any, weird: bool) -> tuple[type, dict[str, Any]]:
    """A feature-map class and constructor arguments (with ``weird``: often one of them wrong)."""
    kind = draw(
        st.sampled_from(
            [
                "RFF",
                "QuantizedRFF",
                "RACE",
                "Histogram",
                "DyadicTrees",
                "Moments",
                "RandomQuadratic",
                "ByClass",
            ]
        )
    )
    dim = draw(st.integers(1, 3))
    if kind == "RFF":
        params = {
            "dim": st.just(dim),
            "num_features": st.sampled_from([2, 4, 8]),
            "bandwidth": BANDWIDTH,
            "kernel": st.sampled_from(["gaussian", "laplacian"]),
            "seed": SEEDS,
        }
    elif kind == "QuantizedRFF":
        params = {
            "dim": st.just(dim),
            "num_features": st.integers(1, 8),
            "bandwidth": BANDWIDTH,
            "kernel": st.sampled_from(["gaussian", "laplacian"]),
            "seed": SEEDS,
        }
    elif kind == "RACE":
        params = {
            "dim": st.just(dim),
            "rows": st.integers(1, 4),
            "buckets": st.integers(1, 12),
            "family": st.sampled_from(["l2", "srp"]),
            "bucket_width": BANDWIDTH,
            "hashes_per_row": (st.one_of(st.none(), st.integers(1, 8))),
            "seed": SEEDS,
        }
    elif kind == "Histogram":
        params = {"bounds": _box(dim), "bins": st.integers(1, 6)}
    elif kind == "DyadicTrees":
        params = {"bounds": _box(dim), "levels": st.integers(1, 6)}
    elif kind == "Moments":
        params = {
            "dim": st.just(dim),
            "radius": st.floats(2**-10, 2**10),
            "center": (st.one_of(st.none(), st.lists(st.floats(-10, 10), min_size=dim, max_size=dim))),
            "squared_norm": st.booleans(),
        }
    elif kind == "RandomQuadratic":
        params = {
            "dim": st.just(dim),
            "num_features": st.integers(1, 8),
            "radius": st.floats(0.1, 10),
            "seed": SEEDS,
        }
    else:
        inner = (
            dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=dim)
            if draw(st.booleans())
            else dps.RFF(dim=dim, num_features=4, seed=draw(SEEDS))
        )
        params = {"feature_map": st.just(inner), "num_classes": st.integers(1, 4)}
    drawn = {k: draw(v) for k, v in params.items()}
    if weird and draw(st.booleans()):
        drawn[draw(st.sampled_from(sorted(drawn)))] = draw(WEIRD)
    return getattr(dps, kind), drawn


def _small(fm: dps.FeatureMap) -> bool:
    return fm.num_features <= 4096


# -- feature maps ------------------------------------------------------------------------------------


@examples(120)
@given(
    spec=map_params(weird=True),
    rows=st.lists(st.lists(FLOATS, min_size=4, max_size=4), min_size=1, max_size=6),
)
def test_feature_map_constructors_and_extreme_rows(spec, rows, case_log):
    """Any constructor arguments give a map or a ValueError; a map's summed integers stay within
    its stated bound on any float row (NaN, ±inf, ±1e308, subnormals), and it survives a JSON round
    trip."""
    cls, params = spec
    with np.errstate(all="ignore"):
        outcome, fm = attempt(lambda: cls(**params))
    case_log("feature map constructor", outcome, False)
    if outcome == "error" or not _small(fm):
        return
    X = np.array([r[: fm.input_dim] + [0.0] * (fm.input_dim - len(r[: fm.input_dim])) for r in rows])
    with np.errstate(all="ignore"):
        check_row_norms(fm, X)
        q = fm.fixed_features(X)
    assert q.dtype == np.int64 and q.shape == (X.shape[0], fm.num_features)
    check_roundtrip(fm, np.zeros((2, fm.input_dim)))
    case_log("feature map extreme rows", "ok", False)


@examples(40)
@given(
    spec=map_params(weird=False),
    base=st.lists(st.lists(st.floats(-2, 2), min_size=4, max_size=4), max_size=5),
    extra=st.lists(st.lists(FLOATS, min_size=4, max_size=4), min_size=1, max_size=4),
    p=st.sampled_from([1, 2]),
)
def test_neighbour_sums_respect_sensitivity(spec, base, extra, p, case_log):
    """Adding an extreme row to (or removing a row from) a dataset moves the exact integer sum by at
    most ``int_sensitivity(p)``, after the public box clip a release applies."""
    cls, params = spec
    fm = cls(**params)
    d = fm.input_dim
    X = np.array([r[:d] + [0.0] * (d - len(r[:d])) for r in base]).reshape(-1, d)
    rows = np.array([r[:d] + [0.0] * (d - len(r[:d])) for r in extra]).reshape(-1, d)
    with np.errstate(all="ignore"):
        check_neighbour_sensitivity(fm, X, (-1.5, 1.5), p, rows=rows)
    case_log("neighbour sensitivity", "ok", False)


@examples(60)
@given(
    shape=st.one_of(
        st.tuples(st.integers(1, 3), st.just(2)),
        st.tuples(st.integers(0, 3)),
        st.tuples(st.integers(0, 3), st.integers(0, 4)),
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 2)),
    ),
    dtype=st.sampled_from(["f8", "f4", "i8", "u1", "?", "c16", "U3", "O", "M8[D]"]),
)
def test_feature_map_bad_shapes_and_dtypes(shape, dtype, case_log):
    """``fixed_features``/``fixed_sum``/``transform`` take ``(n, input_dim)`` numbers or raise ValueError."""
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=2)
    X = np.zeros(shape, dtype=dtype)
    ok_shape = len(shape) == 2 and shape[1] == 2
    for fn in (fm.fixed_features, fm.transform, fm.fixed_sum):
        with np.errstate(all="ignore"), _no_complex_warning():
            outcome, _ = attempt(lambda f=fn: f(X))
        case_log("feature map input shape/dtype", outcome, False)
        if not ok_shape:
            assert outcome == "error"
        elif dtype in ("f8", "f4", "i8", "u1", "?"):
            assert outcome == "ok"


@contextlib.contextmanager
def _no_complex_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        yield


def _spec_mutations() -> st.SearchStrategy:
    keys = st.sampled_from(["kind", "params", "fingerprint", "params.*", "params.+", "params.-"])
    return st.lists(st.tuples(keys, WEIRD | st.text(max_size=4)), min_size=0, max_size=3)


@examples(120)
@given(spec=map_params(weird=False), mutations=_spec_mutations(), pick=st.integers(0, 10))
def test_feature_map_from_dict_on_tampered_specs(spec, mutations, pick, case_log):
    """Specs with wrong types, missing or extra keys give a map or a ValueError."""
    cls, params = spec
    d = json.loads(json.dumps(cls(**params).to_dict()))
    for key, value in mutations:
        names = sorted(d["params"]) if isinstance(d.get("params"), dict) else []
        if key == "params.*" and names:
            d["params"][names[pick % len(names)]] = value
        elif key == "params.-" and names:
            del d["params"][names[pick % len(names)]]
        elif key == "params.+" and isinstance(d.get("params"), dict):
            d["params"][str(value)] = value
        elif key in ("kind", "params", "fingerprint"):
            d[key] = value
    with np.errstate(all="ignore"):
        outcome, fm = attempt(lambda: dps.features.feature_map_from_dict(d))
    case_log("feature map spec", outcome, False)
    if outcome == "ok":
        assert isinstance(fm, dps.FeatureMap)


# -- the release path --------------------------------------------------------------------------------

HIST = dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=2)


def _valid_numpy(X: Any) -> bool:
    return (
        isinstance(X, np.ndarray)
        and X.dtype.kind in "biuf"
        and X.ndim == 2
        and X.shape[1] == 2
        and X.shape[0] >= 1
        and bool(np.isfinite(X.astype(np.float64)).all())
    )


@st.composite
def arrays_of_any_kind(draw: Any) -> Any:
    dtype = draw(st.sampled_from(["f8", "f8", "f8", "f4", "i8", "u8", "i1", "?", "c16", "U4", "O"]))
    shape = draw(
        st.one_of(
            st.tuples(st.integers(1, 4), st.just(2)),
            st.tuples(st.integers(0, 4)),
            st.tuples(st.integers(0, 4), st.integers(0, 3)),
            st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2)),
        )
    )
    if dtype in ("f8", "f4"):
        # half the arrays finite (extreme magnitudes included), half with NaN/±inf among them
        finite = draw(st.booleans())
        elements = (
            st.floats(allow_nan=False, allow_infinity=False, width=64 if dtype == "f8" else 32)
            if finite
            else FLOATS
            if dtype == "f8"
            else st.floats(width=32)
        )
        X = draw(hnp.arrays(dtype, shape, elements=elements))
    elif dtype == "O":
        X = np.empty(shape, dtype=object)
        X.fill(SECRET)
    else:
        X = draw(hnp.arrays(dtype, shape))
    if draw(st.booleans()) and X.size and X.dtype.kind == "f":
        X.flat[0] = SECRET
    return X if draw(st.integers(0, 9)) else X.tolist()


@examples(80)
@given(X=arrays_of_any_kind(), impute=st.sampled_from([None, 0.5]))
def test_release_sketch_numpy_input(X, impute, case_log, invocations):
    """release_sketch on any array: a sketch exactly when the input is valid (2-D, numeric, right
    columns, at least one row, finite — NaN allowed with ``impute``); otherwise a ValueError before
    any measurement is invoked."""
    with invocations() as calls, np.errstate(all="ignore"):
        outcome, sk = attempt(
            lambda: dps.release_sketch(X, HIST, bounds=(0.0, 1.0), epsilon=1.0, impute=impute)
        )
    case_log("release_sketch numpy data", outcome, outcome == "ok")
    if impute is not None and isinstance(X, np.ndarray) and X.dtype.kind == "f":
        valid = _valid_numpy(np.where(np.isnan(X), 0.5, X))
    else:
        valid = _valid_numpy(X)
    assert outcome == ("ok" if valid else "error")
    if outcome == "error":
        assert calls.count == 0
    else:
        assert calls.count == 1 and sk.sum_units.shape == (HIST.num_features,)


def _frame_columns(draw: Any, n: int) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=0, max_size=3, unique=True)):
        kind = draw(st.sampled_from(["f64", "f32", "i64", "u64", "bool", "str", "null", "list"]))
        if kind in ("f64", "f32"):
            vals = draw(st.lists(st.one_of(FLOATS, st.none()), min_size=n, max_size=n))
            cols[name] = pl.Series(
                name, vals, dtype=pl.Float64 if kind == "f64" else pl.Float32, strict=False
            )
        elif kind in ("i64", "u64"):
            lo = 0 if kind == "u64" else -(2**63)
            vals = draw(st.lists(st.integers(lo, 2**63 - 1), min_size=n, max_size=n))
            cols[name] = pl.Series(name, vals, dtype=pl.Int64 if kind == "i64" else pl.UInt64)
        elif kind == "bool":
            cols[name] = pl.Series(name, draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        elif kind == "str":
            cols[name] = pl.Series(name, [str(SECRET)] * n)
        elif kind == "null":
            cols[name] = pl.Series(name, [None] * n, dtype=pl.Float64)
        else:
            cols[name] = pl.Series(name, [[SECRET]] * n)
    return cols


@st.composite
def frames(draw: Any) -> tuple[Any, Any]:
    n = draw(st.integers(0, 4))
    if draw(st.booleans()):  # half the frames valid but extreme: finite values of any magnitude
        col = st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=n, max_size=n)
        return pl.DataFrame({"a": draw(col), "b": draw(col)}), draw(
            st.sampled_from([None, ["a", "b"], ["b", "a"]])
        )
    df = pl.DataFrame(_frame_columns(draw, n))
    names = draw(
        st.one_of(st.none(), st.lists(st.sampled_from(["a", "b", "c", "zz"]), min_size=1, max_size=3), WEIRD)
    )
    return (df.lazy() if draw(st.booleans()) else df), names


@examples(60)
@given(frame=frames(), impute=st.sampled_from([None, 0.25]))
def test_release_sketch_polars_input(frame, impute, case_log, invocations):
    """Polars frames with wrong, missing, duplicate or non-numeric columns, nulls, NaN, ±inf and
    huge integers: a sketch or a ValueError before any measurement is invoked."""
    data, names = frame
    with invocations() as calls, np.errstate(all="ignore"):
        outcome, sk = attempt(
            lambda: dps.release_sketch(
                data, HIST, bounds=(0.0, 1.0), epsilon=1.0, impute=impute, column_names=names
            )
        )
    case_log("release_sketch Polars data", outcome, outcome == "ok")
    assert calls.count == (1 if outcome == "ok" else 0)


PARAMS = {
    "epsilon": st.one_of(st.floats(1e-3, 1e3), WEIRD),
    "delta": st.one_of(st.none(), st.floats(1e-12, 0.5), WEIRD),
    "rho": st.one_of(st.none(), WEIRD),
    "bounds": st.one_of(st.just((0.0, 1.0)), st.tuples(FLOATS, FLOATS), st.tuples(WEIRD, WEIRD), WEIRD),
    "contributions": st.one_of(st.integers(1, 3), WEIRD),
    "count_fraction": st.one_of(st.floats(0.01, 0.5), WEIRD),
    "impute": st.one_of(st.none(), WEIRD),
    "column_names": st.one_of(st.none(), st.just(["x", "y"]), st.just(["x", "x"]), WEIRD),
    "chunk_rows": st.one_of(st.integers(1, 5000), WEIRD),
    "n_jobs": st.one_of(st.none(), st.integers(1, 3), WEIRD),
    "feature_map": st.one_of(st.just(HIST), st.just(dps.Histogram(bounds=(0, 1), bins=2, dim=3)), WEIRD),
}


@examples(60)
@given(
    changes=st.dictionaries(st.sampled_from(sorted(PARAMS)), st.none(), min_size=1, max_size=3),
    data=st.data(),
    source=st.sampled_from(["numpy", "polars", "lazy"]),
)
def test_release_sketch_bad_parameters(changes, data, source, case_log, invocations):
    """Wrong types and ranges of every parameter (budget, bounds, impute, names, chunking, map):
    a sketch within the asked budget, or a ValueError before any measurement is invoked."""
    kwargs: dict[str, Any] = {"feature_map": HIST, "bounds": (0.0, 1.0), "epsilon": 1.0}
    for name in changes:
        kwargs[name] = data.draw(PARAMS[name], label=name)
    X = np.random.default_rng(0).uniform(0.0, 1.0, (20, 2))
    frame = pl.DataFrame({"x": X[:, 0], "y": X[:, 1]})
    source_data = {"numpy": X, "polars": frame, "lazy": frame.lazy()}[source]
    with invocations() as calls, np.errstate(all="ignore"):
        outcome, sk = attempt(lambda: dps.release_sketch(source_data, **kwargs))
    case_log("release_sketch parameters", outcome, outcome == "ok")
    if outcome == "error":
        assert calls.count == 0
        return
    assert calls.count == 1
    asked = kwargs.get("epsilon") if kwargs.get("rho") is None else kwargs["rho"]
    spent = sk.privacy.get("rho", sk.privacy.get("epsilon"))
    assert spent <= float(asked) * (1 + 1e-9)


@examples(60)
@given(
    scale=st.one_of(st.floats(0, 1e6), st.floats(0, 1e6), WEIRD),
    count_fraction=st.one_of(st.floats(0.001, 0.999), st.floats(0.001, 0.999), WEIRD),
    measure=st.sampled_from(["laplace", "gaussian", "laplace", "gaussian", "approx", "wrong"]),
    domain=st.sampled_from(["box2", "box2", "box2", "box3", "numpy", "frame"]),
    metric=st.sampled_from(["sym", "sym", "sym", "l1"]),
)
def test_make_private_sketch_construction(scale, count_fraction, measure, domain, metric, case_log):
    """make_private_sketch validates every argument at construction: a measurement whose loss at
    ``d_in=1`` is a finite non-negative number (or ``inf`` at ``scale=0``), or a ValueError."""
    output = {
        "laplace": dp.max_divergence(),
        "gaussian": dp.zero_concentrated_divergence(),
        "approx": dp.approximate(dp.max_divergence()),
        "wrong": dp.renyi_divergence(),
    }[measure]
    in_domain = {
        "box2": dps.box_domain((0.0, 1.0), num_columns=2),
        "box3": dps.box_domain((0.0, 1.0), num_columns=3),
        "numpy": dp.numpy.array2_domain(num_columns=2, T=float),
        "frame": dps.backends.streaming.frame_box_domain((0.0, 1.0), ["x", "y"]),
    }[domain]
    in_metric = dp.symmetric_distance() if metric == "sym" else dp.l1_distance(T=float)
    outcome, m = attempt(
        lambda: dps.make_private_sketch(
            in_domain, in_metric, output, HIST, scale=scale, count_fraction=count_fraction
        )
    )
    case_log("make_private_sketch construction", outcome, False)
    if outcome == "ok":
        loss = m.map(1)
        assert loss >= 0 and (math.isfinite(loss) or scale == 0)


@examples(40)
@given(
    base=hnp.arrays("f8", st.tuples(st.integers(0, 4), st.just(2)), elements=FLOATS),
    row=st.lists(FLOATS, min_size=2, max_size=2),
    spec=map_params(weird=False).filter(lambda s: s[0] is not dps.ByClass),
    p=st.sampled_from([1, 2]),
)
def test_exact_release_of_extreme_neighbours(base, row, spec, p, case_log):
    """The whole chain ``make_box_clip >> then_private_sketch(scale=0)`` (the release measurement
    without noise) on ``D`` and ``D + {x}`` with extreme values: the released integer sums differ by
    at most the stated sensitivity, and the counts by one."""
    cls, params = spec
    params = {**params, "dim": 2} if "dim" in params else params
    if params.get("center") is not None:
        params["center"] = [params["center"][0]] * 2
    if "bounds" in params:
        params["bounds"] = (params["bounds"][0][:1] * 2, params["bounds"][1][:1] * 2)
    fm = cls(**params)
    assume(fm.input_dim == 2)
    base = np.where(np.isnan(base), 0.0, base)
    row = np.nan_to_num(np.array([row]), nan=0.0, posinf=np.inf, neginf=-np.inf)
    lo, hi = (-2.0, 3.0)
    measure = dp.max_divergence() if p == 1 else dp.zero_concentrated_divergence()
    chain = dps.make_box_clip(
        dp.numpy.array2_domain(num_columns=2, T=float, nan=False), dp.symmetric_distance(), (lo, hi)
    ) >> dps.then_private_sketch(measure, fm, 0.0)
    with np.errstate(all="ignore"):
        a, b = chain(base), chain(np.vstack([base, row]))
    diff = [int(u) - int(v) for u, v in zip(b.sum_units, a.sum_units)]
    norm = sum(abs(v) for v in diff) if p == 1 else math.sqrt(sum(v * v for v in diff))
    assert norm <= fm.int_sensitivity(p)
    assert b.count - a.count == 1
    case_log("exact release of extreme neighbours", "ok", False)


# -- dp.Context with a privacy filter ----------------------------------------------------------------


@examples(12)
@given(
    bad=st.sampled_from(["nan", "inf", "ok", "wrong map", "bad bounds", "too much"]),
    value=EXTREME_FLOATS,
    measure=st.sampled_from(["laplace", "gaussian"]),
)
def test_context_refusals_spend_nothing(bad, value, measure, case_log):
    """In a ``dp.Context`` with a privacy filter (odometer), a refused ``private_sketch`` query
    leaves the spent budget unchanged and an accepted one spends exactly its share. Extreme finite
    values and ±inf are clipped into the box (valid); a NaN, though outside the declared domain,
    is released and charged too (it reads as the lower bound: a data-dependent refusal would be
    an uncharged oracle). A query above the remaining budget is refused by the filter, which
    then stays closed (OpenDP 0.16)."""
    X = np.random.default_rng(1).uniform(0.0, 1.0, (30, 2))
    X[4, 0] = np.nan_to_num(value, nan=0.5)
    if bad in ("nan", "inf"):
        X[3, 1] = np.nan if bad == "nan" else np.inf
    gaussian = measure == "gaussian"
    ctx = dp.Context.compositor(
        data=X,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(rho=0.5) if gaussian else dp.loss_of(epsilon=1.0),
        domain=dp.numpy.array2_domain(num_columns=2, T=float, nan=False),
    )
    share = (0.125 if gaussian else 0.25) * (8 if bad == "too much" else 1)
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=3, dim=3) if bad == "wrong map" else HIST
    bounds = (1.0, 0.0) if bad == "bad bounds" else (0.0, 1.0)
    kwargs = {"output_measure": dp.zero_concentrated_divergence()} if gaussian else {}
    query = ctx.query(**({"rho": share} if gaussian else {"epsilon": share}))
    try:
        sk = query.box_clip(bounds=bounds).private_sketch(fm, **kwargs).release()
        outcome = "ok"
    except (ValueError, dp.OpenDPException) as e:
        # refused at construction (ValueError), or by the filter (OpenDPException)
        assert SECRET_TEXT not in str(e)
        outcome = "error"
    case_log("dp.Context private_sketch", outcome, outcome == "ok")
    assert outcome == ("ok" if bad in ("ok", "inf", "nan") else "error")
    if bad == "too much":
        with pytest.raises(dp.OpenDPException, match="exhausted"):
            ctx.current_privacy_loss()
    elif outcome == "error":
        assert ctx.current_privacy_loss() == 0.0
    else:
        assert isinstance(sk, dps.Sketch) and ctx.current_privacy_loss() == pytest.approx(share)


# -- sketch files ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_sketch(tmp_path_factory):
    X = np.random.default_rng(2).uniform(0.0, 1.0, (100, 2))
    sk = dps.release_sketch(
        X, dps.RFF(dim=2, num_features=6, seed=1), bounds=(0.0, 1.0), epsilon=1.0, column_names=["u", "v"]
    )
    path = tmp_path_factory.mktemp("sketch") / "s.npz"
    sk.save(path)
    return sk, path.read_bytes()


def _same(a: dps.Sketch, b: dps.Sketch) -> bool:
    return (
        a.feature_map == b.feature_map
        and np.array_equal(a.sum_units, b.sum_units)
        and a.count == b.count
        and a.noise == b.noise
        and a.privacy == b.privacy
        and a.bounds == b.bounds
        and a.column_names == b.column_names
    )


@examples(80)
@given(
    how=st.sampled_from(["truncate", "flip", "overwrite", "append"]),
    where=st.floats(0, 1),
    bit=st.integers(0, 7),
    junk=st.binary(min_size=1, max_size=16),
)
def test_corrupted_sketch_files(saved_sketch, tmp_path_factory, how, where, bit, junk, case_log):
    """Truncated, bit-flipped, overwritten or extended files: SketchFormatError, or — when the
    damage misses everything the checksum covers — exactly the saved sketch."""
    sk, raw = saved_sketch
    b = bytearray(raw)
    i = min(int(where * len(b)), len(b) - 1)
    if how == "truncate":
        b = b[:i]
    elif how == "flip":
        b[i] ^= 1 << bit
    elif how == "overwrite":
        b[i : i + len(junk)] = junk
    else:
        b += junk
    path = tmp_path_factory.mktemp("bad") / "s.npz"
    path.write_bytes(bytes(b))
    outcome, back = attempt(lambda: dps.Sketch.load(path))
    case_log("sketch file corrupted", outcome, False)
    if outcome == "error":
        assert isinstance(back, dps.SketchFormatError)
    else:
        assert _same(back, sk)


HEADER_FIELDS = [
    "format",
    "version",
    "feature_map",
    "count",
    "noise",
    "privacy",
    "bounds",
    "column_names",
    "feature_map.params",
    "feature_map.kind",
    "feature_map.fingerprint",
    "sum_units",
]


@examples(80)
@given(
    field=st.sampled_from(HEADER_FIELDS),
    value=st.one_of(WEIRD, st.integers(-(2**70), 2**70)),
    recompute=st.booleans(),
)
def test_tampered_sketch_headers(saved_sketch, tmp_path_factory, field, value, recompute, case_log):
    """Header fields (or the sum array) replaced by values of the wrong type, range or version, with
    the checksum left stale or recomputed: SketchFormatError, or a valid Sketch."""
    sk, raw = saved_sketch
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        meta = json.loads(np.load(io.BytesIO(z.read("meta.npy")), allow_pickle=False).tobytes())
    sum_units = sk.sum_units
    as_json = json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))
    if field == "sum_units":
        sum_units = np.asarray(
            value if isinstance(value, (list, int)) and not isinstance(value, bool) else [1.5]
        )
        if sum_units.dtype == object:
            sum_units = sum_units.astype(str)
    elif "." in field:
        outer, inner = field.split(".")
        meta[outer][inner] = as_json
    else:
        meta[field] = as_json
    if recompute and sum_units.dtype.kind in "iu" and sum_units.ndim == 1:
        with contextlib.suppress(OverflowError, ValueError):
            meta["sha256"] = _digest(meta, sum_units)
    path = tmp_path_factory.mktemp("tamper") / "s.npz"
    header = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, meta=header, sum_units=sum_units)
    outcome, back = attempt(lambda: dps.Sketch.load(path))
    case_log("sketch file tampered header", outcome, False)
    if outcome == "error":
        assert isinstance(back, dps.SketchFormatError)
    else:
        assert isinstance(back, dps.Sketch) and back.sum_units.shape == (back.feature_map.num_features,)


# -- the command line --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(3)
    df = pl.DataFrame({"a": rng.uniform(0, 1, 40), "b": rng.uniform(0, 1, 40), "s": ["t"] * 40})
    df.write_csv(d / "ok.csv")
    df.write_parquet(d / "ok.parquet")
    parquet = (d / "ok.parquet").read_bytes()
    (d / "trunc.parquet").write_bytes(parquet[: len(parquet) // 2])
    (d / "empty.csv").write_text("")
    (d / "header.csv").write_text("a,b\n")
    (d / "ragged.csv").write_text("a,b\n0.1,0.2\n0.3\n0.1,0.2,0.5\n")
    (d / "text.csv").write_text(f"a,b\n0.1,x{SECRET}\n0.3,0.4\n")
    (d / "nan.csv").write_text("a,b\n0.1,NaN\n0.3,0.4\n")
    (d / "inf.csv").write_text("a,b\n0.1,inf\n0.3,0.4\n")
    (d / "huge.csv").write_text("a,b\n1e308,-1e308\n5e-324,0.4\n1e400,0.2\n")
    (d / "garbage.csv").write_bytes(bytes(range(256)))
    (d / "x.txt").write_text("a,b\n0.1,0.2\n")
    return d


SCHEMAS = st.one_of(
    st.just('{"columns": {"a": [0, 1], "b": [0, 1]}}'),
    st.just('{"columns": {"a": [0, 1], "b": [0, 1]}}'),
    st.builds(
        lambda lo, hi: json.dumps({"columns": {"a": [lo, hi], "b": [0, 1]}}),
        st.one_of(
            st.floats(allow_nan=False), WEIRD.map(lambda v: v if isinstance(v, (int, float, str)) else 0)
        ),
        st.one_of(st.floats(allow_nan=False), st.just(1)),
    ),
    st.sampled_from(
        [
            '{"columns": {"a": [NaN, 1]}}',
            '{"columns": {"a": [0, 1e400]}}',
            '{"columns": {}}',
            "[1, 2]",
            '{"columns": {"a": [0, 1], "zz": [0, 1]}}',
            '{"columns": {"s": [0, 1]}}',
            '{"columns": {"a": [',
            '{"columns": {"a": [[0], [1]]}}',
            '{"columns": {"a": [1, 0]}}',
            '{"columns": {"": [0, 1]}}',
            "\udcff",
        ]
    ),
)
OPTIONS = st.lists(
    st.sampled_from(
        [
            ["--epsilon", "1"],
            ["--epsilon", "nan"],
            ["--epsilon", "-1"],
            ["--epsilon", "1e-320"],
            ["--epsilon", "x"],
            ["--rho", "1e-320"],
            ["--rho", "0.5"],
            ["--delta", "1e-6"],
            ["--delta", "2"],
            ["--features", "3"],
            ["--features", "0"],
            ["--bandwidth", "0"],
            ["--bins", "-2"],
            ["--levels", "40"],
            ["--radius", "1e9"],
            ["--rows", "0"],
            ["--buckets", "1"],
            ["--seed", "-1"],
            ["--impute", "nan"],
            ["--impute", "0.5"],
            ["--map", "rff"],
            ["--map", "race"],
            ["--map", "histogram"],
            ["--map", "dyadic"],
            ["--map", "moments"],
            ["--map", "nope"],
            ["--unknown"],
        ]
    ),
    max_size=2,
)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli_main(argv)
        except SystemExit as e:  # argparse's documented usage error
            code = e.code
    return code, err.getvalue()


@examples(60)
@given(
    data=st.sampled_from(
        [
            "ok.csv",
            "ok.parquet",
            "ok.csv",
            "ok.parquet",
            "trunc.parquet",
            "empty.csv",
            "header.csv",
            "ragged.csv",
            "text.csv",
            "nan.csv",
            "inf.csv",
            "huge.csv",
            "garbage.csv",
            "x.txt",
            "missing.csv",
        ]
    ),
    schema=SCHEMAS,
    options=OPTIONS,
)
def test_cli_release_on_bad_input(cli_dir, data, schema, options, case_log):
    """``opendp-sketch release`` on bad files, schemas and options exits 0 having written a
    loadable sketch, or exits 2 with a message and without writing anything."""
    out = cli_dir / "out.sketch"
    out.unlink(missing_ok=True)
    schema_path = cli_dir / "schema.json"
    schema_path.write_bytes(schema.encode("utf-8", "surrogateescape"))
    argv = ["release", str(cli_dir / data), "--schema", str(schema_path), "--out", str(out)]
    argv += [a for opt in options for a in opt]
    if not any(a in ("--epsilon", "--rho") for a in argv):
        argv += ["--epsilon", "1"]
    with np.errstate(all="ignore"):
        code, err = run_cli(argv)
    case_log("CLI release", "ok" if code == 0 else "error", out.exists())
    assert code in (0, 2)
    if code == 2:
        assert not out.exists() and err.strip() and SECRET_TEXT not in err
    else:
        assert dps.Sketch.load(out).count is not None


@examples(30)
@given(
    query=st.lists(
        st.sampled_from(
            [
                ["--mean"],
                ["--cdf", "a=0.5"],
                ["--cdf", "zz=1"],
                ["--cdf", "a=x"],
                ["--quantile", "a=0.5"],
                ["--quantile", "a=7"],
                ["--count", "a > 0.5"],
                ["--count", "zz > 1"],
                ["--count", "a >"],
                ["--kde", "0.5,0.5"],
                ["--kde", "1"],
                ["--kde", "x"],
                ["--format", "json"],
                ["--format", "csv"],
                ["--n-samples", "0"],
                ["--n-samples", "-5"],
                ["--n-samples", "500"],
            ]
        ),
        max_size=3,
    ),
    file=st.sampled_from(["good", "garbage", "missing", "directory"]),
)
def test_cli_query_on_bad_input(cli_dir, query, file, case_log):
    """``opendp-sketch query``/``inspect`` on bad files and options: exit 0 or 2, never a crash."""
    path = {
        "good": cli_dir / "good.sketch",
        "garbage": cli_dir / "garbage.csv",
        "missing": cli_dir / "none.sketch",
        "directory": cli_dir,
    }[file]
    if file == "good" and not path.exists():
        X = np.random.default_rng(4).uniform(0, 1, (50, 2))
        dps.release_sketch(
            X, dps.RFF(dim=2, num_features=8, seed=2), bounds=(0.0, 1.0), epsilon=1.0, column_names=["a", "b"]
        ).save(path)
    argv = ["query", str(path), *[a for q in query for a in q]]
    if not any(a.startswith("--n-samples") for a in argv):
        argv += ["--n-samples", "500"]
    code, _ = run_cli(argv)
    case_log("CLI query", "ok" if code == 0 else "error", False)
    assert code in (0, 2)
    code, _ = run_cli(["inspect", str(path)])
    case_log("CLI inspect", "ok" if code == 0 else "error", False)
    assert code in (0, 2)


@pytest.mark.parametrize("target", ["missing_dir/out.sketch", "."])
def test_cli_unwritable_out_is_refused_before_release(cli_dir, target):
    code, _ = run_cli(
        [
            "release",
            str(cli_dir / "ok.csv"),
            "--schema",
            str(cli_dir / "ok.json"),
            "--out",
            str(cli_dir / target),
            "--map",
            "histogram",
            "--epsilon",
            "1",
        ]
    )
    assert code == 2


@pytest.fixture(scope="module", autouse=True)
def _ok_schema(cli_dir):
    (cli_dir / "ok.json").write_text('{"columns": {"a": [0, 1], "b": [0, 1]}}')


# -- more of the same, behind the slow marker -----------------------------------------------------------


@pytest.mark.slow
def test_everything_with_five_times_the_examples(tmp_path):
    """Re-runs this module with ``HARDENING_SCALE=5`` (several minutes)."""
    import subprocess
    import sys

    env = {**os.environ, "HARDENING_SCALE": "5"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            str(Path(__file__)),
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
