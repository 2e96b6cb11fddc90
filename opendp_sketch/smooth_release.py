"""The release of a :class:`~opendp_sketch.SmoothKernelPlan`'s sketches in one composed
measurement (the estimator that reads them is :class:`~opendp_sketch.SmoothKDE`, in
:mod:`opendp_sketch.estimators.smooth`; post-processing never imports this module)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp

from ._validate import check_bounds, check_fraction
from .backends.memory import check_finite, make_box_clip, to_array
from .budget import DEFAULT_COUNT_FRACTION, Budget, search_measurement
from .features.base import DEFAULT_CHUNK_ROWS
from .measurements import make_private_sketch, release_once
from .sketch import Sketch

__all__ = ["release_smooth_sketches"]


def release_smooth_sketches(
    data: Any,
    plan: Any,
    bounds: Any,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    split: Literal["optimal", "even"] | Sequence[float] = "optimal",
    projection: Any = None,
    contributions: int = 1,
    count_fraction: float | None = None,
    impute: float | Sequence[float] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> list[Sketch]:
    r"""Release the ``J`` sketches of ``plan`` as one composed measurement within one budget.

    The measurement is ``clip [>> jl_projection] >> make_composition([private_sketch(fm_j, s·b_j)])``
    (OpenDP's composition; one clip and projection, then one feature-sum pass per sketch). The per-sketch scales ``b_j`` are set so
    that sketch ``j`` spends the share ``w_j`` of the loss (:meth:`SmoothKernelPlan.budget_weights`,
    or your own weights), and the common factor ``s`` is the smallest one OpenDP certifies for
    the whole budget (binary search on the composed privacy map):

    * ``epsilon``: pure ε-DP, discrete Laplace, ``ε_j = w_j ε`` (basic composition);
    * ``rho``: ρ-zCDP, discrete Gaussian, ``ρ_j = w_j ρ``;
    * ``epsilon`` and ``delta``: zCDP composition of the ``J`` Gaussian sketches, converted once
      to (ε, δ) — tighter than splitting ε and δ.

    Every returned sketch records the loss of the **joint** release (do not add them up) and its
    share. Data is validated first: a refused call releases and spends nothing.

    :param data: numpy ``(n, d)`` array or Polars frame (``d = plan.dim``, or
        ``projection.input_dim``)
    :param plan: the :class:`~opendp_sketch.SmoothKernelPlan`
    :param bounds: public box of the data columns
    :param split: ``"optimal"``, ``"even"`` or ``J`` non-negative weights
    :param projection: an optional :class:`~opendp_sketch.backends.projections.JLProjection` applied after
        clipping (then ``plan.dim`` must equal its ``output_dim``)
    :param count_fraction: share of each sketch's loss spent on its count (default as
        :func:`~opendp_sketch.release_sketch`)
    :return: the ``J`` sketches, in the plan's order
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> plan = dps.SmoothKernelPlan(dim=1, bandwidth=0.2, num_features=100, num_terms=3, t_max=50.0)
    >>> X = np.random.default_rng(0).normal(0.5, 0.1, size=(2000, 1))
    >>> sks = dps.release_smooth_sketches(X, plan, (0, 1), epsilon=1.0)
    >>> len(sks), sks[0].privacy["epsilon"] <= 1.0, round(sum(s.privacy["share"] for s in sks), 6)
    (3, True, 1.0)
    """
    from .estimators.smooth import SmoothKernelPlan

    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(plan, SmoothKernelPlan):
        raise ValueError(f"plan ({plan!r}) must be a SmoothKernelPlan")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    budget = Budget.of(epsilon, delta, rho)
    frac = check_fraction(DEFAULT_COUNT_FRACTION if count_fraction is None else count_fraction)
    if isinstance(split, str):
        w = plan.budget_weights(budget.mechanism, split)  # type: ignore[arg-type]
    else:
        w = np.asarray(split, dtype=np.float64).ravel()
        if w.size != len(plan.feature_maps) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(
                f"split weights must be {len(plan.feature_maps)} non-negative numbers, not all 0"
            )
        w = w / w.sum()
    if (w <= 0).any():
        raise ValueError("every sketch needs a positive share of the budget (drop zero-weight terms)")
    if projection is not None:
        from .backends.projections import JLProjection

        if not isinstance(projection, JLProjection):
            raise ValueError(f"projection ({projection!r}) must be a JLProjection")
        if projection.output_dim != plan.dim:
            raise ValueError(
                f"projection outputs {projection.output_dim} columns but the plan expects {plan.dim}"
            )
    d = plan.dim if projection is None else projection.input_dim

    X, _ = to_array(data, None)
    if X.shape[1] != d:
        raise ValueError(f"data has {X.shape[1]} columns but {d} are expected")
    if X.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")
    lo, hi = check_bounds(bounds, d)
    check_finite(X, impute)
    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute)
    if projection is not None:
        from .backends.projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    p = budget.p
    # scale_j = s · Δ_p(fm_j) / w_j^(1/p): sketch j then spends the share w_j of the loss
    base = [fm.sensitivity(p) / wj ** (1.0 / p) for fm, wj in zip(plan.feature_maps, w)]

    def build(s: float) -> dp.Measurement:
        parts = [
            make_private_sketch(
                source.output_domain,
                source.output_metric,
                budget.measure,
                fm,
                s * b,
                frac,
                chunk_rows,
                n_jobs,
            )
            for fm, b in zip(plan.feature_maps, base)
        ]
        # the clip (and projection) run once, before the composition; each part re-reads their output
        return source >> dp.c.make_composition(parts)

    # the common factor s multiplies sensitivity-normalised scales: unit sensitivity brackets it
    meas = search_measurement(build, budget, contributions, 1.0)
    sketches = release_once(meas, X, budget, contributions)
    for sk, wj in zip(sketches, w):
        sk.privacy["joint_release"] = (
            f"one of {len(sketches)} smooth-kernel sketches released together; the loss is the total"
        )
        sk.privacy["share"] = float(wj)
    return sketches
