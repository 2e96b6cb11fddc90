r"""Oblivious Johnson–Lindenstrauss projection ``x ↦ Gx/√k`` as an OpenDP transformation.

The matrix ``G ∈ R^{k×d}`` has i.i.d. standard normal entries drawn from a public ``seed``, never
from the data, so the projection is a fixed public row-wise map: it costs no privacy budget and
is 1-stable under the symmetric distance. Chaining it before a sketch of a ``k``-dimensional map
makes the sketch's size and cost independent of ``d``:

``make_box_clip(...) >> then_jl_projection(k) >> then_private_sketch(..., feature_map=RFF(dim=k, ...))``

Queries must go through the same projection (:meth:`JLProjection.transform`) before they are
compared with the sketch. Proofs (1-stability, soundness of the output box under floating-point
rounding) and the accuracy guarantee are in ``docs/projections.md``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from .._fixed import exact_bits, exact_matmul, quantize_columns
from .._validate import check_bounds, check_positive_int, check_seed, require_symmetric
from .domains import box_descriptor, box_domain

__all__ = ["JLProjection", "make_jl_projection", "then_jl_projection"]

#: second seed word: keeps G independent of a feature map drawn with the same ``seed``
_JL_STREAM = 0x4A4C
#: accepted input-box magnitudes lie in [1/_MAX_BOUND, _MAX_BOUND]: far from where row rounding
#: clips (2^300) or zeroes rows (2^-300)
_MAX_BOUND = 2.0**200
#: rows ``quantize_rows`` zeroes (peak below 2^-300) move by less than this
_ZERO_ROW = 2.0**-300
_U = 2.0**-53
#: working-set target of one chunk (float64 entries of the input block)
_CHUNK_ENTRIES = 1 << 21


@functools.lru_cache(maxsize=8)
def _draw_weights(input_dim: int, output_dim: int, seed: int) -> np.ndarray:
    """``W = Gᵀ/√k`` (``d × k``), each column rounded to ``exact_bits(d)`` significant bits."""
    g = np.random.default_rng([seed, _JL_STREAM]).standard_normal((output_dim, input_dim))
    w = quantize_columns(g.T / math.sqrt(output_dim), exact_bits(input_dim))
    w.setflags(write=False)
    return w


def _round_rows(X: np.ndarray, bits: int) -> np.ndarray:
    """:func:`~opendp_sketch._fixed.quantize_rows` for finite rows (no NaN/inf handling needed),
    about 4x faster: the same element-wise operations, so the same values, for rows whose
    largest magnitude is at most ``2^300`` (where ``quantize_rows`` starts clipping)."""
    peak = np.maximum(X.max(axis=1, initial=0.0), -X.min(axis=1, initial=0.0))
    _, e = np.frexp(peak)  # peak = m·2^e, m in [0.5, 1): |x| ≤ 2^e
    keep = peak >= _ZERO_ROW  # smaller rows become 0, as in quantize_rows
    shift = np.where(keep, bits - e, 0)
    q = X * np.ldexp(1.0, shift)[:, None]  # exact: scaling by a power of two
    np.rint(q, out=q)
    q *= np.ldexp(1.0, -shift)[:, None]
    if not keep.all():
        q[~keep] = 0.0
    return q


def _rows(X: Any, dim: int, what: str) -> np.ndarray:
    """``X`` as a finite float64 ``(n, dim)`` array (a 1-D array is one row unless ``dim == 1``)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None] if dim == 1 else X[None, :]
    if X.ndim != 2 or X.shape[1] != dim:
        raise ValueError(f"{what} must have shape (n, {dim}), got {np.shape(X)}")
    if not np.isfinite(X).all():
        raise ValueError(f"{what} contain NaN or infinite values")
    return X


class JLProjection:
    r"""The public projection ``x ↦ Wᵀx`` with ``W = Gᵀ/√k`` rounded, ``G ~ N(0, 1)^{k×d}``.

    ``G`` comes from ``numpy.random.default_rng([seed, 0x4A4C])`` (the second word keeps it
    independent of a feature map drawn with the same seed). Each column of ``Gᵀ/√k`` is stored
    rounded to ``t = exact_bits(d)`` significant bits, and each input row is rounded to ``t``
    significant bits relative to its largest entry before the product; the product is then
    **exact** in float64, so a row's projection depends on that row alone, whatever BLAS does
    (``docs/projections.md``). The rounding moves each entry by at most ``2^-t`` (``t = 20`` for
    ``d = 2048``) relative to the row's or column's largest entry: negligible for the guarantee.

    **Guarantee** (paper Thm 7.2). For a fixed query ``q`` and a dimension ``k`` that depends on
    the target error ``α`` only (of order ``α⁻²·log(1/α)``; never on ``n`` or ``d``), the Gaussian and exponential KDE values
    ``(1/n)Σ_i exp(-‖x_i - q‖²/σ²)``, ``(1/n)Σ_i exp(-‖x_i - q‖/σ)`` computed on the projected
    data and query are within expected additive error ``α`` of the original ones. Distances are
    preserved in expectation, ``E‖Wᵀx‖² = ‖x‖²``: choose the kernel bandwidth in original units
    and use it unchanged for the map of the projected space (``dim = k``).

    :param input_dim: ``d``
    :param output_dim: ``k``
    :param seed: seed of ``G`` (public; record it with the sketch)
    :example:

    >>> import numpy as np
    >>> from opendp_sketch.backends.projections import JLProjection
    >>> proj = JLProjection(input_dim=100, output_dim=16, seed=0)
    >>> proj.matrix.shape
    (16, 100)
    >>> proj.transform(np.ones((3, 100))).shape
    (3, 16)
    >>> lower, upper = proj.output_bounds((0.0, 1.0))
    >>> lower.shape, bool((lower < upper).all())
    ((16,), True)
    """

    def __init__(self, input_dim: int, output_dim: int, seed: int = 0) -> None:
        self.input_dim = check_positive_int(input_dim, "input_dim")
        self.output_dim = check_positive_int(output_dim, "output_dim")
        self.seed = check_seed(seed)
        self.bits = exact_bits(self.input_dim)
        self._weights = _draw_weights(self.input_dim, self.output_dim, self.seed)

    @property
    def matrix(self) -> np.ndarray:
        """The ``k × d`` matrix actually applied (``G/√k`` after rounding), read-only."""
        return self._weights.T

    def _chunk(self, chunk_rows: int | None) -> int:
        return chunk_rows or max(1, min(4096, _CHUNK_ENTRIES // self.input_dim))

    def _project(self, X: np.ndarray, chunk_rows: int | None = None) -> np.ndarray:
        """Exact chunked projection of float64 rows (no validation)."""
        step = self._chunk(chunk_rows)
        out = np.empty((X.shape[0], self.output_dim))
        for s in range(0, X.shape[0], step):
            # exact product of row-rounded data and column-rounded weights: row-wise deterministic
            out[s : s + step] = exact_matmul(_round_rows(X[s : s + step], self.bits), self._weights)
        return out

    def transform(self, X: Any, chunk_rows: int | None = None) -> np.ndarray:
        """Project public points (e.g. KDE queries) exactly as the transformation projects data rows.

        :param X: ``(n, d)`` finite values (a 1-D array of length ``d`` is one point)
        :param chunk_rows: rows per block (default: about 2^21 input entries per block)
        :return: ``(n, k)`` float64; for points inside the input box it equals the
            transformation's output bit for bit
        :raises ValueError: on a wrong shape or non-finite values
        """
        if chunk_rows is not None:
            check_positive_int(chunk_rows, "chunk_rows")
        return self._project(_rows(X, self.input_dim, "points"), chunk_rows)

    def output_bounds(self, bounds: Any) -> tuple[np.ndarray, np.ndarray]:
        r"""Per-coordinate bounds valid for every projected point of the input box, as computed.

        In exact arithmetic coordinate ``i`` of ``Wᵀx`` lies in ``cᵢ ± Σ_j |W_ji|·h_j`` with
        ``c``, ``h`` the box's centre and half-widths. This widens every input interval by the
        row-rounding error ``η = M·2^-t + 2^-300`` (``M`` the box's largest magnitude), bounds the
        float64 rounding of the bound computation itself (``γ_{d+1}·Σ|terms|`` plus an underflow
        allowance) and rounds outward (``docs/projections.md``).

        :param bounds: the input box ``(lower, upper)`` (scalars or one value per column)
        :return: ``(lower, upper)`` float64 vectors of length ``k``
        :raises ValueError: on malformed bounds, or a largest magnitude outside ``[2^-200, 2^200]``
        """
        lo, hi = check_bounds(bounds, self.input_dim)
        big = float(max(np.abs(lo).max(), np.abs(hi).max()))
        if not 1 / _MAX_BOUND <= big <= _MAX_BOUND:
            raise ValueError(
                f"bounds ({bounds!r}) must have a largest magnitude between 2^-200 and 2^200 for the "
                "JL projection; rescale the data by a public factor"
            )
        eta = math.nextafter(math.ldexp(big, -self.bits) + _ZERO_ROW, math.inf)
        a = np.nextafter(lo - eta, -np.inf)  # below the exact lo - η
        b = np.nextafter(hi + eta, np.inf)  # above the exact hi + η
        w = self._weights  # (d, k)
        low_terms = np.minimum(w * a[:, None], w * b[:, None])
        high_terms = np.maximum(w * a[:, None], w * b[:, None])
        lower = low_terms.sum(axis=0)
        upper = high_terms.sum(axis=0)
        d = self.input_dim
        # |fl(Σ fl(products)) - Σ products| ≤ γ_{d+1} Σ|products| (any summation order), γ_n ≤ 1.01·n·u
        gamma = 1.01 * (d + 1) * _U
        slack_lo = 2 * gamma * np.abs(low_terms).sum(axis=0) + (d + 1) * 2.0**-1021
        slack_hi = 2 * gamma * np.abs(high_terms).sum(axis=0) + (d + 1) * 2.0**-1021
        return np.nextafter(lower - slack_lo, -np.inf), np.nextafter(upper + slack_hi, np.inf)

    # -- serialization ---------------------------------------------------------------------------
    def _params(self) -> dict[str, int]:
        return {"input_dim": self.input_dim, "output_dim": self.output_dim, "seed": self.seed}

    def fingerprint(self) -> str:
        """SHA-256 of the parameters and the matrix; equal projections have equal prints."""
        h = hashlib.sha256(json.dumps(self._params(), sort_keys=True).encode())
        h.update(np.ascontiguousarray(self._weights).tobytes())
        return h.hexdigest()[:32]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready spec: kind, parameters and fingerprint (the matrix is regenerated)."""
        return {"kind": "JLProjection", "params": self._params(), "fingerprint": self.fingerprint()}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> JLProjection:
        """Rebuild from :meth:`to_dict`; refuses a spec whose regenerated matrix differs."""
        if (
            not isinstance(spec, dict)
            or spec.get("kind") != "JLProjection"
            or not isinstance(spec.get("params"), dict)
        ):
            raise ValueError("spec must be a dict with kind 'JLProjection' and 'params'")
        proj = cls(**spec["params"])
        if spec.get("fingerprint") not in (None, proj.fingerprint()):
            raise ValueError(
                "JLProjection regenerated from its seed does not match the stored fingerprint "
                "(numpy version change?)"
            )
        return proj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JLProjection) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        return f"JLProjection(input_dim={self.input_dim}, output_dim={self.output_dim}, seed={self.seed})"


def make_jl_projection(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_dim: int,
    seed: int = 0,
    chunk_rows: int | None = None,
) -> dp.Transformation:
    r"""Project each row of a bounded array with a public Gaussian matrix: ``x ↦ Gx/√k``.

    The output is a :func:`~opendp_sketch.box_domain` of ``k`` columns whose bounds
    (:meth:`JLProjection.output_bounds`) contain every projected point of the input box as
    computed; the function also clips to them, so its output is in the output domain even if
    the BLAS broke the exactness assumption. Each output row is a function of its input row
    alone, so adding or removing one row adds or removes one output row: the stability map is
    ``d_out = d_in`` (proof in ``docs/projections.md``). Memory beyond the output is bounded by
    the chunk size.

    Guarantee (paper Thm 7.2): Gaussian and exponential KDE values are preserved to expected
    additive error ``α`` with ``k`` a function of ``α`` alone, independent of ``n`` and ``d``. Choose the
    bandwidth of the downstream map in original distance units (``E‖Gx/√k‖² = ‖x‖²``), and project
    queries with ``JLProjection(d, k, seed).transform`` before asking the sketch.

    :param input_domain: a :func:`~opendp_sketch.box_domain` with ``d`` columns
    :param input_metric: ``dp.symmetric_distance()``
    :param output_dim: ``k``, a positive integer
    :param seed: public seed of ``G``
    :param chunk_rows: rows per block (default: about 2^21 input entries per block)
    :return: a Transformation into a ``k``-column ``box_domain``
    :raises ValueError: on a wrong domain or metric, ``output_dim ≤ 0``, a bad seed, or an input
        box whose largest magnitude is outside ``[2^-200, 2^200]``
    :example:

    >>> import numpy as np, opendp.prelude as dp
    >>> from opendp_sketch.backends.domains import box_domain
    >>> from opendp_sketch.backends.projections import make_jl_projection
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = make_jl_projection(box_domain((0.0, 1.0), num_columns=50), dp.symmetric_distance(),
    ...                        output_dim=8, seed=1)
    >>> t(np.full((4, 50), 0.5)).shape, t.map(3)
    ((4, 8), 3)
    >>> t.output_domain.descriptor.num_columns
    8
    """
    dp.assert_features("contrib", "honest-but-curious")
    desc = box_descriptor(input_domain)
    require_symmetric(input_metric)
    proj = JLProjection(desc.num_columns, output_dim, seed)
    if chunk_rows is not None:
        check_positive_int(chunk_rows, "chunk_rows")
    lower, upper = proj.output_bounds(desc.bounds)
    in_lower, in_upper = (np.asarray(b, dtype=np.float64) for b in desc.bounds)
    output_domain = box_domain((lower, upper))
    d = desc.num_columns

    def function(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"data must have shape (n, {d})")
        # into the input box first, as make_box_clip does (NaN to the lower bound): a value the
        # box excludes must not raise or warn here, or one row would be an uncharged oracle
        x = np.fmin(np.fmax(x, in_lower), in_upper)
        with np.errstate(all="ignore"):
            y = proj._project(x, chunk_rows)
        return np.fmin(np.fmax(y, lower), upper)

    return dp.t.make_user_transformation(
        input_domain, input_metric, output_domain, input_metric, function, lambda d_in: d_in
    )


then_jl_projection = to_then(make_jl_projection)
