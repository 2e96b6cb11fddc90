"""The one noise step: from a backend's exact pair to a noisy :class:`~opendp_sketch.Sketch`.

:func:`make_noisy_sketch` adds OpenDP's discrete Laplace (ε-DP) or discrete Gaussian (zCDP)
noise to both halves of a backend's exact ``(Σ q(x_i), n)`` (OpenDP's ``make_composition``) and
packs the sketch; :func:`make_private_sketch` chains it after the backend the input domain
names. No noise is drawn anywhere else in this package. :func:`release_once` runs a measurement
once and records in each sketch what was spent.

Proof sketch (docs/design/privacy.md): the pair is 1-stable under the symmetric distance, its
halves ``d_in·Δ_p``- and ``d_in``-stable for the map's integer sensitivity ``Δ_p``; OpenDP's
Laplace/Gaussian measurements are ε/ρ-DP for those stabilities, and the composition adds them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from ._validate import check_fraction, check_number
from .backends.domains import TableDomain, descriptor_of
from .backends.memory import pair_parts
from .backends.protocol import cached_sum_and_count
from .budget import DEFAULT_COUNT_FRACTION, Budget, mechanism_of
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .sketch import Sketch, discrete_laplace_variance

__all__ = [
    "make_noisy_sketch",
    "make_private_sketch",
    "then_private_sketch",
    "release_once",
    "forget_input",
    "warn_if_noise_swamps",
    "check_release_arguments",
]


def _count_scale(mechanism: str, scale: float, count_fraction: float, fm: FeatureMap) -> float:
    """Count noise scale giving the count ``count_fraction`` of the total loss (ε or ρ)."""
    c = count_fraction
    if mechanism == "laplace":
        # ε_sum = Δ₁/scale, ε_count = 1/count_scale, ε_count/ε_sum = c/(1-c)
        return scale * (1 - c) / (c * fm.sensitivity(1))
    # ρ_sum = Δ₂²/(2σ²), ρ_count = 1/(2σ_c²), ρ_count/ρ_sum = c/(1-c)
    return scale * math.sqrt((1 - c) / c) / fm.sensitivity(2)


# -- the one noise step --------------------------------------------------------------------


def make_noisy_sketch(
    pair: dp.Transformation,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    bounds: tuple[list[float], list[float]] | None = None,
    column_names: Sequence[str] | None = None,
) -> dp.Measurement:
    r"""From a backend's exact ``(Σ q(x_i), n)`` pair to a noisy :class:`~opendp_sketch.Sketch`.

    ``pair`` is any backend's sum-and-count transformation (1-stable under the symmetric
    distance, its halves ``d_in·Δ_p``- and ``d_in``-stable). The sum gets OpenDP's discrete
    Laplace (pure ε, L1) or discrete Gaussian (zCDP, L2) noise at ``scale`` (feature units), the
    count the share ``count_fraction`` of the loss; OpenDP's ``make_composition`` accounts both.
    The result takes the pair's *output* (chain it: ``pair >> make_noisy_sketch(pair, ...)``);
    it is the only place this package draws noise. Since the pair is 1-stable, its privacy map
    at ``d_in`` is that of the whole chain.

    :param pair: a backend's sum-and-count transformation (its output is the input here)
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map the pair sums
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)`` (0: no noise, infinite loss)
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param bounds: the public box recorded in the sketch (default: the input domain's)
    :param column_names: the names recorded in the sketch (default: the input domain's)
    :return: a Measurement from the pair's output to a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.measurements import make_noisy_sketch
    >>> from opendp_sketch.backends.memory import make_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> pair = make_sum_and_count(dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance(), fm)
    >>> m = pair >> make_noisy_sketch(pair, dp.max_divergence(), fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    """
    dp.assert_features("contrib", "honest-but-curious")
    mechanism = mechanism_of(output_measure)
    p: Literal[1, 2] = 1 if mechanism == "laplace" else 2
    t_sum, t_count = pair_parts(pair, feature_map, p)
    # scale 0 is accepted like OpenDP's own mechanisms (infinite loss); parameter searches probe it
    scale = check_number(scale, "scale", allow_zero=True)
    count_fraction = check_fraction(count_fraction)
    int_scale = math.ldexp(scale, feature_map.frac_bits)
    count_scale = _count_scale(mechanism, scale, count_fraction, feature_map)
    # the noise variances (scale²) are recorded in the sketch: they must be finite floats too
    if not all(math.isfinite(v * v) for v in (int_scale, count_scale)):
        raise ValueError(
            f"scale ({scale!r}) with count_fraction ({count_fraction!r}) gives a noise scale too large to represent"
        )
    if scale == 0:
        # no noise: an honest measurement with infinite loss. OpenDP's composition refuses to
        # add two infinite losses, and a raising predicate sends parameter searches down a
        # ~20x slower path, so this case is built directly.
        noisy = dp.m.make_user_measurement(
            pair.output_domain,
            pair.output_metric,
            output_measure,
            lambda v: [t_sum(v), t_count(v)],
            lambda d_in: math.inf if d_in else 0.0,
        )
    else:
        noise = dp.m.then_laplace if mechanism == "laplace" else dp.m.then_gaussian
        try:
            noisy = dp.c.make_composition([t_sum >> noise(int_scale), t_count >> noise(count_scale)])
        except dp.OpenDPException as e:  # e.g. a loss that overflows at a subnormal scale
            raise ValueError(
                f"scale ({scale!r}) is outside the range OpenDP can account for ({e.variant})"
            ) from None
    desc = descriptor_of(pair.input_domain) if bounds is None else None
    unit = feature_map.unit
    if mechanism == "laplace":
        sum_var = discrete_laplace_variance(int_scale) * unit**2
        count_var = discrete_laplace_variance(count_scale)
    else:
        sum_var, count_var = int_scale**2 * unit**2, count_scale**2
    noise_info = {
        "mechanism": mechanism,
        "sum_scale": int_scale * unit,
        "count_scale": count_scale,
        "sum_variance": sum_var,
        "count_variance": count_var,
        "count_fraction": count_fraction,
    }
    composed = noisy
    # the loss is recorded in every sketch: computed once here, so a loss that overflows is refused
    # at construction instead of failing after the noise was drawn
    try:
        loss = composed.map(1)
    except dp.OpenDPException as e:
        raise ValueError(
            f"the privacy loss at noise scale {int_scale * unit!r} is not representable ({e.variant})"
        ) from None
    record = {
        "measure": "MaxDivergence" if mechanism == "laplace" else "ZeroConcentratedDivergence",
        "d_in": 1,
        "loss": loss,
    }
    if desc is not None:
        bounds = (list(desc.lower), list(desc.upper))
        column_names = desc.column_names
    names = None if column_names is None else list(column_names)
    schema = desc.schema.to_dict() if isinstance(desc, TableDomain) else None

    def pack(released: list[Any]) -> Sketch:
        return Sketch(
            feature_map=feature_map,
            sum_units=np.asarray(released[0], dtype=np.int64),
            count=int(released[1]),
            noise=dict(noise_info),
            privacy=dict(record),
            bounds=bounds,
            column_names=names,
            schema=schema,
        )

    return composed >> dp.new_function(pack, TO="ExtrinsicObject")


def make_private_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    *,
    impute: float | Sequence[float] | None = None,
) -> dp.Measurement:
    r"""Release ``Σ Φ(x_i) + ξ`` and ``n + ζ`` as a :class:`~opendp_sketch.Sketch`.

    ``ξ`` is OpenDP's discrete Laplace (``output_measure=dp.max_divergence()``, L1 sensitivity)
    or discrete Gaussian (``dp.zero_concentrated_divergence()``, L2 sensitivity) noise added to the
    exact integer feature sum; ``scale`` is its scale in feature units. The count gets
    ``count_fraction`` of the privacy loss (paper default 2%) and the sum the rest, so the loss
    at ``d_in`` is ``d_in·Δ₁/(scale·(1-c))`` (Laplace) or ``(d_in·Δ₂)²/(2·scale²·(1-c))``
    (Gaussian). The input domain's descriptor picks the backend
    (:func:`~opendp_sketch.backends.make_sum_and_count`): a :func:`~opendp_sketch.box_domain`
    (numpy in memory), a ``frame_box_domain`` (Polars frames, streamed), a ``table_domain(schema)``,
    or a Dask or Spark domain (one pass over the cluster).

    :param input_domain: any sketch domain (see :mod:`opendp_sketch.backends`)
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)`` (the implemented map, whose
        sensitivity is ``feature_map.sensitivity(p)``); the :class:`~opendp_sketch.Sketch`
        reports it in units of ``Φ`` as ``scale / γ``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param chunk_rows: rows per chunk of the feature sum
    :param n_jobs: threads for the feature sum (result identical for any value; on a cluster,
        threads inside each task)
    :param impute: public value(s) replacing NaN, for the Dask and Spark box domains (numpy
        arrays take it in :func:`~opendp_sketch.make_box_clip`, Polars in ``frame_box_domain``)
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_sketch(dps.box_domain((0.0, 1.0), num_columns=1),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    >>> type(m(np.random.default_rng(0).random((100, 1)))).__name__
    'Sketch'
    """
    dp.assert_features("contrib", "honest-but-curious")
    mechanism_of(output_measure)
    pair = cached_sum_and_count(input_domain, input_metric, feature_map, chunk_rows, n_jobs, impute)
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_sketch = to_then(make_private_sketch)


def warn_if_noise_swamps(budget: Budget, d_in: int, feature_map: FeatureMap, rows: int) -> None:
    """Warn the curator, before anything is released, when the noise of the planned release
    would exceed the largest signal ``rows`` rows can give (``‖Σ Φ(x_i)‖₂ ≤ n·Δ₂``): every
    estimate would then be mostly noise. Runs on the curator's side only; ``rows`` is never
    released."""
    scale = budget.reference_scale(d_in, feature_map.sensitivity(budget.p))
    per_coordinate = scale * math.sqrt(2.0) if budget.p == 1 else scale  # Laplace std = √2·scale
    noise = per_coordinate * math.sqrt(feature_map.num_features)
    signal = rows * feature_map.sensitivity(2)
    if noise > signal:
        import warnings

        warnings.warn(
            f"at this budget the noise (norm ≈ {noise:.3g}) exceeds the largest signal {rows} rows can give "
            f"(≤ {signal:.3g}): every estimate will be mostly noise. Raise the budget or release a smaller "
            "map (plan with dps.suggest_sketch_size); with warnings as errors the release is refused here",
            stacklevel=3,
        )


def forget_input(out: Any) -> Any:
    """``out`` without the record of the call OpenDP attaches to a measurement's output.

    ``Measurement.__call__`` sets ``out.__opendp_dict__ = {..., "arg": data}`` on any output that
    takes attributes (for ``dp.serialize``): a released object would then hold the sensitive
    data. :class:`~opendp_sketch.Sketch` refuses the attribute; this drops it from anything else
    (a post-processed estimator, a list of sketches is walked).
    """
    for item in out if isinstance(out, list) else [out]:
        try:
            del item.__opendp_dict__
        except AttributeError:
            pass
    return out


def release_once(meas: dp.Measurement, data: Any, budget: Budget, d_in: int) -> Any:
    """Run ``meas`` on ``data`` once and record, in each released sketch, what was spent."""
    out = forget_input(meas(data))
    spent = {"measure": str(meas.output_measure), "d_in": d_in, **budget.record(meas.map(d_in))}
    for sk in out if isinstance(out, list) else [out]:
        sk.privacy = {
            **spent,
            **{
                k: v
                for k, v in sk.privacy.items()
                if k in ("joint_release", "share", "pair_selection", "rows_estimate")
            },
        }
    return out


def check_release_arguments(feature_map: Any, contributions: Any, count_fraction: Any) -> float:
    """Checks shared by every one-call release; returns the checked ``count_fraction``."""
    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    return check_fraction(count_fraction)
