"""Reusable test helpers: adversarial rows and empirical checks of a feature map's stated bounds.

A feature map states integer bounds on ``‖q(x)‖_p`` for the integers ``q(x)`` it actually sums
(:mod:`opendp_sketch.features.base`). The helpers here try hard to break those statements on
concrete inputs — box corners, points that maximise the feature norm, out-of-box, infinite and
NaN values that the public clipping must absorb — and compare the *exact* integer sums of
neighbouring datasets (one row added or removed) with :meth:`FeatureMap.int_sensitivity`.
They never prove a bound; they find counterexamples. Every check raises ``AssertionError`` with
the offending row when a bound is exceeded, so they can be called directly from tests.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np

from ._fixed import sqrt_up
from ._validate import check_bounds
from .features.base import FeatureMap, feature_map_from_dict
from .features.byclass import ByClass
from .features.histogram import DyadicTrees, Histogram
from .features.moments import Moments, RandomQuadratic
from .features.race import RACE
from .features.rff import RFF

__all__ = [
    "assert_within_sensitivity",
    "SensitivityCheck",
    "RowNorms",
    "resolve_bounds",
    "adversarial_rows",
    "check_neighbour_sensitivity",
    "check_row_norms",
    "check_sum_invariance",
    "check_roundtrip",
]

#: finite values far outside any reasonable box (clipping must absorb them)
_HUGE = (1e300, -1e300, np.finfo(np.float64).max, -np.finfo(np.float64).max)
#: tiny magnitudes, including subnormals and a negative zero
_TINY = (5e-324, -5e-324, 1e-300, -0.0)


class SensitivityCheck(NamedTuple):
    """Result of :func:`check_neighbour_sensitivity`, both in integer units of ``2^-k``."""

    observed: float
    """largest ``‖Σq(X) - Σq(X')‖_p`` over the neighbours tried"""
    stated: float
    """``feature_map.int_sensitivity(p)``"""


class RowNorms(NamedTuple):
    """Result of :func:`check_row_norms`: exact per-row maxima of the summed integers."""

    max_l1: int
    """``max_x ‖q(x)‖₁``"""
    max_l2_squared: int
    """``max_x ‖q(x)‖₂²``"""


def resolve_bounds(feature_map: FeatureMap, bounds: Any) -> tuple[np.ndarray, np.ndarray]:
    """The public box ``(lower, upper)`` over all ``feature_map.input_dim`` columns.

    For :class:`~opendp_sketch.ByClass`, ``bounds`` may describe only the ``dim`` feature columns
    (scalars included); the label column then gets ``[0, C - 1]``.

    :param feature_map: the map whose rows the box describes
    :param bounds: ``(lower, upper)``, scalars or one value per column
    :return: two float64 vectors of length ``feature_map.input_dim``
    :raises ValueError: on malformed bounds
    :example:

    >>> import opendp_sketch as dps
    >>> fm = dps.ByClass(dps.Histogram(bounds=(0, 1), bins=2, dim=2), num_classes=3)
    >>> [v.tolist() for v in resolve_bounds(fm, (0.0, 1.0))]
    [[0.0, 0.0, 0.0], [1.0, 1.0, 2.0]]
    """
    if isinstance(feature_map, ByClass) and check_bounds(bounds)[0].size != feature_map.input_dim:
        lo, hi = check_bounds(bounds, feature_map.dim)
        return np.append(lo, 0.0), np.append(hi, float(feature_map.num_classes - 1))
    return check_bounds(bounds, feature_map.input_dim)


def _corners(lo: np.ndarray, hi: np.ndarray, max_corners: int, rng: np.random.Generator) -> np.ndarray:
    d = lo.size
    if d <= math.log2(max_corners):
        pattern = np.array(list(itertools.product((0, 1), repeat=d)), dtype=bool)
    else:  # too many corners: a random subset, plus the all-lower and all-upper corners
        pattern = rng.integers(0, 2, (max_corners, d)).astype(bool)
        pattern = np.vstack([pattern, np.zeros(d, bool), np.ones(d, bool)])
    return np.where(pattern, hi, lo)


def _generic_rows(lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Midpoints, faces, bound edges (and one ulp beyond), far-out, infinite, NaN, tiny rows."""
    d = lo.size
    mid = (lo + hi) / 2
    width = hi - lo
    cols = np.arange(d) if d <= 32 else rng.choice(d, 32, replace=False)
    faces = []
    for j in cols:
        for v in (lo[j], hi[j], np.nextafter(lo[j], -np.inf), np.nextafter(hi[j], np.inf), np.inf, -np.inf):
            row = mid.copy()
            row[j] = v
            faces.append(row)
    alternating = np.where(np.arange(d) % 2 == 0, np.inf, -np.inf)
    rows = [
        mid,
        np.nextafter(lo, -np.inf),
        np.nextafter(hi, np.inf),
        np.nextafter(lo, np.inf),
        np.nextafter(hi, -np.inf),
        lo - 10 * width,
        hi + 10 * width,
        np.full(d, np.inf),
        np.full(d, -np.inf),
        alternating,
        -alternating,
        np.full(d, np.nan),
        *(np.full(d, v) for v in _HUGE + _TINY),
        *faces,
    ]
    return np.array(rows, dtype=np.float64)


def _special_rows(
    fm: FeatureMap, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator
) -> list[np.ndarray]:
    """Map-specific rows that push ``‖Φ(x)‖`` to its extremes or sit on rounding boundaries."""
    d = lo.size
    out: list[np.ndarray] = []
    if isinstance(fm, RFF):
        # ‖Φ‖₁ is largest when every phase is an odd multiple of π/4 (|cos| = |sin|)
        omega_t = fm.frequencies.T
        pinv = np.linalg.pinv(omega_t)
        for x0 in rng.uniform(lo, hi, (6, d)):
            z = omega_t @ x0
            target = np.pi / 4 + np.round((z - np.pi / 4) / (np.pi / 2)) * (np.pi / 2)
            out.append(x0 + pinv @ (target - z))
    elif isinstance(fm, Moments):
        r, c = fm.radius, fm.center
        signs = rng.choice([-1.0, 1.0], (6, d))
        signs[0] = 1.0
        for s in signs:  # the diagonal of the ball maximises ‖y‖₁; 1 + 1e-12 sits just outside
            out.extend([c + r * s / math.sqrt(d), c + (1 + 1e-12) * r * s / math.sqrt(d)])
        for j in range(min(d, 8)):
            out.extend([c + r * np.eye(d)[j], c - r * np.eye(d)[j]])
        out.append(c.copy())
        # lattice points v·2^-k with R² < ‖v‖² ≤ (2^k·r)², R = ⌊2^k·r⌋: inside the ball, yet their
        # truncation exceeds R, so only the integer enforcement keeps ‖q_y‖ ≤ R
        k, R = fm.frac_bits, fm._R
        limit = (Fraction(r) * Fraction(2) ** k) ** 2
        dirs = rng.standard_normal((512, d))
        lattice = np.round(dirs / np.linalg.norm(dirs, axis=1, keepdims=True) * math.ldexp(r, k))
        hits = [v for v in lattice if R * R < sum(int(a) ** 2 for a in v) <= limit]
        out.extend(c + np.ldexp(v, -k) for v in hits[:8])
    elif isinstance(fm, RandomQuadratic):
        u = np.linalg.svd(fm.projections)[0][:, 0]  # top left singular vector maximises ‖Ωᵀy‖
        for s in (1.0, -1.0, 1 + 1e-12, -(1 + 1e-12)):
            out.append(s * fm.radius * u)
    elif isinstance(fm, (Histogram, DyadicTrees)):
        bins = fm.bins if isinstance(fm, Histogram) else np.full(d, 1 << fm.levels)
        for _ in range(12):  # rows exactly on an interior bin edge, and one ulp either side
            edge = lo + (hi - lo) * rng.integers(1, np.maximum(bins, 2)) / bins
            out.extend([edge, np.nextafter(edge, -np.inf), np.nextafter(edge, np.inf)])
    elif isinstance(fm, RACE):
        out.extend([np.zeros(d), np.full(d, -0.0)])  # SRP sign of an exact zero projection
    return [np.asarray(r, dtype=np.float64) for r in out]


def _norm_maximisers(
    fm: FeatureMap, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator, n_pool: int, n_top: int
) -> np.ndarray:
    """The ``n_top`` rows of a random pool (interior and surface) with the largest ‖q‖₁ and ‖q‖₂."""
    pool = rng.uniform(lo, hi, (n_pool, lo.size))
    snap = rng.random(pool.shape) < 0.5  # half the pool: random coordinates moved onto a face
    snap[n_pool // 2 :] = False
    pool = np.where(snap, np.where(rng.random(pool.shape) < 0.5, lo, hi), pool)
    q = fm.fixed_features(pool).astype(np.float64)
    l1 = np.abs(q).sum(axis=1)
    l2 = (q * q).sum(axis=1)
    keep = np.unique(np.concatenate([np.argsort(-l1)[:n_top], np.argsort(-l2)[:n_top]]))
    return pool[keep]


def _label_values(num_classes: int) -> list[float]:
    c = float(num_classes)
    return [0.0, c - 1, -1.0, c, 0.5, 1.5, c - 0.5, -0.5, 1e300, -1e300, np.inf, -np.inf, np.nan]


def adversarial_rows(
    feature_map: FeatureMap,
    bounds: Any,
    *,
    n_random: int = 32,
    seed: int = 0,
    max_corners: int = 1024,
    n_pool: int = 512,
    n_top: int = 8,
) -> np.ndarray:
    """Rows chosen to break a stated sensitivity: ``(n, feature_map.input_dim)`` float64.

    Included: box corners (all ``2^d`` when ``2^d ≤ max_corners``, else a random subset plus the
    all-lower and all-upper corners); the midpoint and its face points; values exactly on the
    bounds and one ulp outside or inside; far-out, ``±inf``, mixed ``+inf/-inf``, NaN, huge
    (``±1e300``, ``±float max``) and tiny (subnormal, ``-0.0``) rows that clipping must absorb;
    the ``n_top`` rows of a random pool with the largest ``‖q(x)‖₁`` and ``‖q(x)‖₂``; map-specific
    extremes (RFF phases at odd multiples of ``π/4``, which maximise ``‖Φ‖₁``; points on and just
    outside the Moments ball, and lattice points whose truncation exceeds the integer radius; the
    top singular direction of RandomQuadratic; rows on histogram and dyadic bin edges); and
    ``n_random`` uniform rows of the box. For
    :class:`~opendp_sketch.ByClass`, the inner map's rows are paired with extreme labels
    (``-1``, ``C``, ``±0.5`` rounding cases, ``±inf``, NaN, ``±1e300``).

    :param feature_map: the map under test
    :param bounds: the public box, see :func:`resolve_bounds`
    :param n_random: uniform rows drawn from the box
    :param seed: seed of every random choice (the result is deterministic)
    :param max_corners: at most this many box corners
    :param n_pool: size of the random pool searched for large feature norms
    :param n_top: rows kept from the pool per norm
    :return: the rows, many of them outside the box
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)
    >>> rows = adversarial_rows(fm, (0.0, 1.0), n_random=5)
    >>> rows.shape[1], bool(np.isinf(rows).any()), bool(np.isnan(rows).any())
    (2, True, True)
    >>> [0.0, 1.0] in rows.tolist() and [1.0, 0.0] in rows.tolist()   # corners
    True
    """
    lo, hi = resolve_bounds(feature_map, bounds)
    rng = np.random.default_rng(seed)
    if isinstance(feature_map, ByClass):
        inner = adversarial_rows(
            feature_map.feature_map,
            (lo[:-1], hi[:-1]),
            n_random=n_random,
            seed=seed,
            max_corners=max_corners,
            n_pool=n_pool,
            n_top=n_top,
        )
        labels = _label_values(feature_map.num_classes)
        cycled = np.resize(np.array(labels), inner.shape[0])
        crossed = [np.append(x, y) for x in inner[:4] for y in labels]
        return np.vstack([np.column_stack([inner, cycled]), np.array(crossed)])
    parts = [
        _corners(lo, hi, max_corners, rng),
        _generic_rows(lo, hi, rng),
        _norm_maximisers(feature_map, lo, hi, rng, n_pool, n_top),
        rng.uniform(lo, hi, (n_random, lo.size)),
    ]
    special = _special_rows(feature_map, lo, hi, rng)
    if special:
        parts.append(np.array(special))
    return np.vstack(parts)


def _exact_norm(diff: Sequence[int], p: Literal[1, 2]) -> int:
    """``‖diff‖₁`` for ``p=1``, ``‖diff‖₂²`` for ``p=2`` (exact Python ints)."""
    return sum(abs(v) for v in diff) if p == 1 else sum(v * v for v in diff)


def _within(norm: int, stated: float, p: Literal[1, 2]) -> bool:
    return Fraction(norm) <= (Fraction(stated) if p == 1 else Fraction(stated) ** 2)


def assert_within_sensitivity(
    feature_map: FeatureMap, sum_a: Sequence[Any], sum_b: Sequence[Any], p: Literal[1, 2]
) -> int:
    """Assert two exact integer sums (``Σq``, e.g. a release path's sums on neighbouring datasets)
    differ by at most ``feature_map.int_sensitivity(p)``; compared exactly (``Fraction``).

    :return: ``‖Δ‖₁`` for ``p=1``, ``‖Δ‖₂²`` for ``p=2``
    :raises AssertionError: if the difference exceeds the stated sensitivity
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)
    >>> a, b = fm.fixed_sum(np.zeros((3, 2))), fm.fixed_sum(np.zeros((4, 2)))
    >>> assert_within_sensitivity(fm, a, b, p=1)
    2
    """
    norm = _exact_norm([int(x) - int(y) for x, y in zip(sum_a, sum_b, strict=True)], p)
    stated = feature_map.int_sensitivity(p)
    if not _within(norm, stated, p):
        raise AssertionError(
            f"{feature_map!r}: the sums differ by {norm} (p={p}), above int_sensitivity({p}) = {stated}"
        )
    return norm


def check_neighbour_sensitivity(
    feature_map: FeatureMap,
    X: Any,
    bounds: Any,
    p: Literal[1, 2],
    *,
    rows: np.ndarray | None = None,
    seed: int = 0,
    max_removals: int = 16,
    chunk_rows: int | None = None,
    n_jobs: int | None = None,
) -> SensitivityCheck:
    """Largest ``‖Σq(X) - Σq(X')‖_p`` over neighbours ``X'`` of ``X``, in integer units.

    Neighbours are ``X ∪ {r}`` for every adversarial row ``r`` (alternately appended and
    prepended, so ``r`` lands in different chunks) and ``X`` minus one of its rows (all rows, or
    ``max_removals`` random ones). Sums are :meth:`FeatureMap.fixed_sum` with
    ``clip=(lower, upper)``, i.e. exact Python integers computed by the code path a release
    runs; the comparison with the bound is exact (``Fraction``) for both norms.

    :param feature_map: the map under test
    :param X: base dataset, shape ``(n, feature_map.input_dim)``; may itself hold extreme rows
    :param bounds: the public box, see :func:`resolve_bounds`
    :param p: 1 or 2
    :param rows: rows to add (default :func:`adversarial_rows` with ``seed``)
    :param seed: seed of the default rows and of the removed rows
    :param max_removals: at most this many single-row removals
    :param chunk_rows: passed to :meth:`FeatureMap.fixed_sum` (default: the library's)
    :param n_jobs: passed to :meth:`FeatureMap.fixed_sum`
    :return: ``(observed, stated)``; for ``p=2`` ``observed`` is ``‖Δ‖₂`` rounded up like ``stated``
    :raises AssertionError: if some neighbour moves the sum by more than
        ``feature_map.int_sensitivity(p)``, naming the row
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)
    >>> X = np.random.default_rng(0).uniform(0, 1, (10, 2))
    >>> check_neighbour_sensitivity(fm, X, (0.0, 1.0), p=1)
    SensitivityCheck(observed=2.0, stated=2)
    """
    if p not in (1, 2):
        raise ValueError(f"p ({p!r}) must be 1 or 2")
    lo, hi = resolve_bounds(feature_map, bounds)
    X = np.asarray(X, dtype=np.float64).reshape(-1, feature_map.input_dim)
    if rows is None:
        rows = adversarial_rows(feature_map, (lo, hi), seed=seed)
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, feature_map.input_dim)
    kwargs: dict[str, Any] = {"clip": (lo, hi), "n_jobs": n_jobs}
    if chunk_rows is not None:
        kwargs["chunk_rows"] = chunk_rows
    stated = feature_map.int_sensitivity(p)
    with np.errstate(all="ignore"):  # extreme rows overflow on purpose
        base = feature_map.fixed_sum(X, **kwargs)

    neighbours: list[tuple[str, np.ndarray, np.ndarray]] = []
    for i, r in enumerate(rows):
        stacked = np.vstack([X, r[None]]) if i % 2 == 0 else np.vstack([r[None], X])
        neighbours.append(("adding", r, stacked))
    n = X.shape[0]
    removed = (
        range(n) if n <= max_removals else np.random.default_rng(seed).choice(n, max_removals, replace=False)
    )
    for i in removed:
        neighbours.append(("removing", X[i], np.delete(X, i, axis=0)))

    worst = 0
    for action, row, data in neighbours:
        with np.errstate(all="ignore"):
            other = feature_map.fixed_sum(data, **kwargs)
        norm = _exact_norm([a - b for a, b in zip(other, base)], p)
        if not _within(norm, stated, p):
            shown = norm if p == 1 else f"sqrt({norm}) = {math.sqrt(norm)}"
            raise AssertionError(
                f"{feature_map!r}: {action} row {row.tolist()} changes the exact integer sum by "
                f"‖Δ‖_{p} = {shown} units, above int_sensitivity({p}) = {stated}"
            )
        worst = max(worst, norm)
    return SensitivityCheck(float(worst) if p == 1 else sqrt_up(worst), stated)


def check_row_norms(feature_map: FeatureMap, X: Any, clip: tuple[Any, Any] | None = None) -> RowNorms:
    """Exact per-row norms of :meth:`FeatureMap.fixed_features`, checked against the map's bound.

    ``‖q(x)‖₁`` is compared with ``int_sensitivity(1)`` and ``‖q(x)‖₂²`` with the integer bound
    ``_int_bound(2)``, both with Python integers (no float rounding).

    :param feature_map: the map under test
    :param X: rows, shape ``(n, feature_map.input_dim)``; extreme values are welcome
    :param clip: optional public box applied first (as :meth:`FeatureMap.fixed_sum` does)
    :return: the largest norms seen
    :raises AssertionError: on the first row above a bound
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Moments(dim=2, radius=1.0)
    >>> check_row_norms(fm, np.array([[1.0, 0.0], [np.inf, 0.0]]))   # q = [2^26, 0, 2^26], 0
    RowNorms(max_l1=134217728, max_l2_squared=9007199254740992)
    """
    X = np.asarray(X, dtype=np.float64).reshape(-1, feature_map.input_dim)
    if clip is not None:
        X = np.fmin(np.fmax(X, clip[0]), clip[1])
    with np.errstate(all="ignore"):  # extreme rows overflow on purpose
        q = feature_map.fixed_features(X)
    if q.dtype != np.int64 or q.shape != (X.shape[0], feature_map.num_features):
        raise AssertionError(f"{feature_map!r}: fixed_features returned {q.dtype} {q.shape}")
    bound1, bound2 = feature_map.int_sensitivity(1), feature_map._int_bound(2)
    max1 = max2 = 0
    for x, row in zip(X, q.tolist()):
        l1, l2 = _exact_norm(row, 1), _exact_norm(row, 2)
        if l1 > bound1 or l2 > bound2:
            raise AssertionError(
                f"{feature_map!r}: row {x.tolist()} has ‖q‖₁ = {l1} (bound {bound1}), "
                f"‖q‖₂² = {l2} (bound {bound2})"
            )
        max1, max2 = max(max1, l1), max(max2, l2)
    return RowNorms(max1, max2)


def check_sum_invariance(
    feature_map: FeatureMap,
    X: Any,
    *,
    clip: tuple[Any, Any] | None = None,
    chunk_rows: Sequence[int] = (1, 3, 4096),
    n_jobs: Sequence[int] = (1, 3),
) -> list[int]:
    """:meth:`FeatureMap.fixed_sum` for every ``chunk_rows`` × ``n_jobs``, all equal to the exact
    Python-integer sum of :meth:`FeatureMap.fixed_features` of the (clipped) rows.

    :param feature_map: the map under test
    :param X: rows, shape ``(n, feature_map.input_dim)``
    :param clip: optional public box, passed to ``fixed_sum`` and applied to the reference
    :param chunk_rows: chunk sizes to try
    :param n_jobs: thread counts to try
    :return: the common sum
    :raises AssertionError: if any two disagree
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> check_sum_invariance(fm, np.array([[0.1], [0.7], [2.0]]))
    [1, 2]
    """
    X = np.asarray(X, dtype=np.float64).reshape(-1, feature_map.input_dim)
    clipped = X if clip is None else np.fmin(np.fmax(X, clip[0]), clip[1])
    with np.errstate(all="ignore"):  # extreme rows overflow on purpose
        expected = [sum(col) for col in zip(*feature_map.fixed_features(clipped).tolist())]
        sums = {
            (c, j): feature_map.fixed_sum(X, clip=clip, chunk_rows=c, n_jobs=j)
            for c, j in itertools.product(chunk_rows, n_jobs)
        }
    expected = expected or [0] * feature_map.num_features
    for (c, j), got in sums.items():
        if got != expected:
            diff = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
            raise AssertionError(
                f"{feature_map!r}: fixed_sum(chunk_rows={c}, n_jobs={j}) differs from the exact sum "
                f"of fixed_features at features {diff[:10]}"
            )
    return expected


def check_roundtrip(feature_map: FeatureMap, X: Any) -> FeatureMap:
    """Rebuild ``feature_map`` from ``to_dict`` through JSON text and check it is the same map.

    Both :func:`~opendp_sketch.features.feature_map_from_dict` and ``type(feature_map).from_dict`` are
    used; the copies must have the same fingerprint, compare equal, and give identical
    ``transform`` and ``fixed_features`` on ``X``.

    :param feature_map: the map under test
    :param X: probe rows, shape ``(n, feature_map.input_dim)``
    :return: the rebuilt map
    :raises AssertionError: if the copy differs
    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.RFF(dim=2, num_features=4, seed=3)
    >>> check_roundtrip(fm, np.zeros((1, 2))) == fm
    True
    """
    spec = json.loads(json.dumps(feature_map.to_dict()))
    copies = [feature_map_from_dict(spec), type(feature_map).from_dict(spec)]
    for copy in copies:
        if type(copy) is not type(feature_map) or copy.fingerprint() != feature_map.fingerprint():
            raise AssertionError(f"{feature_map!r} rebuilt as {copy!r} with another fingerprint")
        if copy != feature_map or copy.to_dict() != feature_map.to_dict():
            raise AssertionError(f"{feature_map!r} and its rebuilt copy differ")
        if not np.array_equal(copy.transform(X), feature_map.transform(X), equal_nan=True):
            raise AssertionError(f"{feature_map!r}: rebuilt map has another transform")
        if not np.array_equal(copy.fixed_features(X), feature_map.fixed_features(X)):
            raise AssertionError(f"{feature_map!r}: rebuilt map has other fixed_features")
    return copies[0]
