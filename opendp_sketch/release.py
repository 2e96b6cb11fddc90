"""The release layer: the one place noise is added.

Every path — numpy and Polars in memory, streamed LazyFrames and files, Dask, Spark,
``dp.Context`` queries, sessions and smooth-kernel sketches — goes through this module:

1. a **backend** turns the data into a transformation producing the *exact* pair
   ``(Σ q(x_i), n)`` (integer feature sum and row count), 1-stable in the rows
   (:func:`~opendp_sketch.transformations.make_sum_and_count` for numpy,
   :func:`~opendp_sketch.streaming.make_frame_sum_and_count` for Polars frames,
   :func:`~opendp_sketch.dask.make_dask_sum_and_count` for Dask, the Spark backend likewise);
2. :func:`make_noisy_sketch` adds OpenDP's discrete Laplace or discrete Gaussian noise to both
   halves (``make_composition``) and packs a :class:`~opendp_sketch.Sketch`;
3. a :class:`Budget` (ε, (ε, δ) or ρ) and :func:`search_measurement` find the smallest scale
   OpenDP certifies for it;
4. optionally (:func:`make_spanning_sketch`, ``release_sketch(pair_selection=)``), OpenDP's
   ``make_noisy_max`` first chooses the 2-way marginals joining the columns from exact
   independence scores (:mod:`opendp_sketch.selection`), composed with the release by
   ``make_adaptive_composition``.

No noise is drawn anywhere else in this package. Backends never import this module, and
post-processing (``estimators/``) never does either.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import opendp.prelude as dp
from opendp.extras._utilities import to_then

from ._validate import (
    check_bounds,
    check_chunking,
    check_column_names,
    check_fraction,
    check_number,
    require_symmetric,
)
from .domains import (
    DaskTableDomain,
    FrameBoxDomain,
    SparkTableDomain,
    TableDomain,
    box_data_bounds,
    descriptor_of,
)
from .features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .features.byclass import ByClass
from .features.composite import Composite
from .features.marginals import Marginals
from .schema import Schema
from .selection import Forest, make_independence_scores
from .sketch import Sketch, discrete_laplace_variance
from .streaming import bad_value_counts, frame_box_domain, make_frame_sum_and_count, report_progress, scan
from .transformations import (
    I64_MAX,
    make_box_clip,
    make_clamped_sum_and_count,
    make_sum_and_count,
    pair_parts,
)

__all__ = [
    "Budget",
    "DEFAULT_COUNT_FRACTION",
    "make_private_sketch",
    "then_private_sketch",
    "make_noisy_sketch",
    "search_measurement",
    "search_scale",
    "make_spanning_sketch",
    "make_row_estimated_sketch",
    "make_table_row_count",
    "DEFAULT_ROWS_FRACTION",
    "make_private_dask_sketch",
    "then_private_dask_sketch",
    "make_private_spark_sketch",
    "then_private_spark_sketch",
    "release_sketch",
    "release_dask_sketch",
    "release_spark_sketch",
    "release_smooth_sketches",
    "memory_source",
    "auto_feature_map",
    "as_schema",
]

#: bins of a numeric column's 1-way marginal in the automatic map
AUTO_FINE_BINS = 32
#: ... and with a public row estimate and a budget that leave an average cell of that many bins
#: ``AUTO_FINE_SNR`` noise std's of rows (benchmarks/results/bench_fine_bins.md: off-grid queries)
AUTO_FINER_BINS = 64
AUTO_FINE_SNR = 8.0
#: bins of a numeric column in the automatic 2-way marginals without a row estimate
AUTO_PAIR_BINS = 8
#: which 2-way marginals the automatic map measures: ``"rule"`` (the row-estimate rule), ``"all"``
#: or ``"none"`` (``auto_marginals(pairs=)``)
PairsRule = Literal["rule", "all", "none"]
AUTO_PAIRS: tuple[str, ...] = ("rule", "all", "none")
#: the finest 2-way resolution the automatic map picks (decoding cost grows with the cells)
AUTO_MAX_PAIR_BINS = 16
#: 2-way marginals are measured when an average cell holds this many noise std's of rows
AUTO_PAIR_SNR = 3 * math.sqrt(2)
#: weight of the 1-way blocks against the 2-way blocks in the automatic marginals (a composite):
#: 1-way cells see a third of the noise of 2-way cells (benchmarks/results/bench_one_way_weight.md,
#: weights 3 and 4 against 2 on common noise; real_tables*.md, weight 2 against 1)
AUTO_ONE_WAY_WEIGHT = 3.0
#: a numeric column whose automatic 1-way cells are finer than the pairs' (64 or 32 bins with
#: 2-way marginals) is also measured at the pairs' 16 bins, a two-level tree: the coarse level at
#: ``one_way_weight + AUTO_TREE_EXTRA_WEIGHT``, the fine one at ``AUTO_TREE_FINE_WEIGHT``
#: (:func:`auto_marginals`; benchmarks/results/bench_one_way_tree.md)
AUTO_TREE_EXTRA_WEIGHT = 1.0
AUTO_TREE_FINE_WEIGHT = 1.0
#: the pair rule reads the noise of the map whose 1-way blocks weigh at most this much: the
#: weight ``AUTO_PAIR_SNR`` was measured at, so a heavier 1-way weight keeps the same pairs
AUTO_RULE_ONE_WAY_WEIGHT = 2.0
#: a width (share of the range) for the cells at each bound of a numeric column's 1-way marginal,
#: ``auto_marginals(bound_cells=AUTO_BOUND_CELL)``: not the default (see auto_marginals)
AUTO_BOUND_CELL = 1e-6
#: share of the privacy budget spent on the count (the rest goes to the feature sum)
DEFAULT_COUNT_FRACTION = 0.02
#: share of the budget spent choosing the 2-way marginals of a spanning tree (make_spanning_sketch)
DEFAULT_SELECTION_FRACTION = 0.1
#: share of the budget a schema release without a public ``rows`` estimate spends on a noisy row
#: count first, to plan its map from (:func:`make_row_estimated_sketch`; measured in
#: ``benchmarks/results/bench_rows_fraction.md``)
DEFAULT_ROWS_FRACTION = 0.03
#: ``release_sketch(pair_selection="auto")``, the default: choose a tree (at
#: ``DEFAULT_SELECTION_FRACTION``) when the rule leaves columns apart and :func:`auto_tree` says it pays
AUTO_SELECTION = "auto"
#: ``release_sketch(pair_selection=)`` warns when an average cell of the candidate pairs holds fewer
#: noise std's of (estimated) rows than this: on three real tables the tree lowered multi-column
#: counts from a ratio of 1.6 up and raised every error at 0.87 and below
#: (benchmarks/results/real_tables_selection*.md)
AUTO_TREE_SNR = 1.2

BudgetKind = Literal["epsilon", "epsilon_delta", "rho"]


@dataclass(frozen=True)
class Budget:
    """A privacy budget in the one form every release uses: pure ε, (ε, δ), or ρ-zCDP.

    Build it with :meth:`of` from the keyword arguments users give (``epsilon=``, ``delta=``,
    ``rho=``). It knows the OpenDP measure the noise is calibrated in, the ``d_out`` a search
    targets, the mechanism (discrete Laplace for ε, discrete Gaussian otherwise) and the norm
    ``p`` of the sensitivity that mechanism uses.

    :example:

    >>> from opendp_sketch.release import Budget
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
    >>> from opendp_sketch.release import make_noisy_sketch
    >>> from opendp_sketch.transformations import make_sum_and_count
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
) -> dp.Measurement:
    r"""Release ``Σ Φ(x_i) + ξ`` and ``n + ζ`` as a :class:`~opendp_sketch.Sketch`.

    ``ξ`` is OpenDP's discrete Laplace (``output_measure=dp.max_divergence()``, L1 sensitivity)
    or discrete Gaussian (``dp.zero_concentrated_divergence()``, L2 sensitivity) noise added to the
    exact integer feature sum; ``scale`` is its scale in feature units. The count gets
    ``count_fraction`` of the privacy loss (paper default 2%) and the sum the rest, so the loss
    at ``d_in`` is ``d_in·Δ₁/(scale·(1-c))`` (Laplace) or ``(d_in·Δ₂)²/(2·scale²·(1-c))``
    (Gaussian). The input domain picks the backend: a :func:`~opendp_sketch.box_domain` (numpy
    in memory) or a :func:`~opendp_sketch.frame_box_domain` (Polars frames, streamed); Dask
    has :func:`~opendp_sketch.make_private_dask_sketch`.

    :param input_domain: a :func:`~opendp_sketch.box_domain` or :func:`~opendp_sketch.frame_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)`` (the implemented map, whose
        sensitivity is ``feature_map.sensitivity(p)``); the :class:`~opendp_sketch.Sketch`
        reports it in units of ``Φ`` as ``scale / γ``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param chunk_rows: rows per chunk of the feature sum
    :param n_jobs: threads for the feature sum (result identical for any value)
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
    check_chunking(chunk_rows, n_jobs)  # before they become part of a cache key
    pair = _pair_source(input_domain, input_metric, feature_map, chunk_rows, n_jobs)
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_sketch = to_then(make_private_sketch)


def _pair_source(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    chunk_rows: int,
    n_jobs: int | None,
) -> dp.Transformation:
    """The backend's scale-independent sum-and-count transformation, cached on the feature map.

    OpenDP's parameter search (``dp.Context``, ``binary_search``) rebuilds the measurement
    hundreds of times; only the noise depends on the scale. Domains compare equal exactly when
    their identifiers do, so the identifier is a sound cache key.
    """
    key = (str(input_domain), str(input_metric), chunk_rows, n_jobs)
    cache = feature_map.__dict__.setdefault("_source_cache", {})
    if key not in cache:
        desc = getattr(input_domain, "descriptor", None)
        if isinstance(desc, SparkTableDomain):  # before TableDomain: a subclass of it
            from .spark import make_spark_table_sum_and_count

            pair = make_spark_table_sum_and_count(input_domain, input_metric, feature_map, n_jobs=n_jobs)
        elif isinstance(desc, DaskTableDomain):
            from .dask import make_dask_table_sum_and_count

            pair = make_dask_table_sum_and_count(input_domain, input_metric, feature_map, n_jobs=n_jobs)
        elif isinstance(desc, TableDomain):
            from .tables import make_table_sum_and_count

            pair = make_table_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        elif isinstance(getattr(input_domain, "descriptor", None), FrameBoxDomain):
            pair = make_frame_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        else:
            pair = make_sum_and_count(
                input_domain, input_metric, feature_map, chunk_rows=chunk_rows, n_jobs=n_jobs
            )
        cache[key] = pair
    return cache[key]


def make_private_dask_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Measurement:
    r""":func:`make_private_sketch` for a Dask collection: one pass over the cluster for the exact
    ``(sum, count)`` pair (:func:`~opendp_sketch.make_dask_sum_and_count`), then the same noise,
    budget split and privacy map at the same ``scale``.

    :param input_domain: a :func:`~opendp_sketch.dask_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param impute: public value(s) replacing NaN (without: the lower bound)
    :param n_jobs: threads inside each partition task
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_dask_sketch(dps.dask_box_domain((0.0, 1.0), num_columns=1),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)
    0.510204...
    >>> X = da.random.default_rng(0).random((100, 1), chunks=(30, 1))
    >>> with dask.config.set(scheduler="synchronous"):
    ...     type(m(X)).__name__
    'Sketch'
    """
    from .dask import make_dask_sum_and_count

    pair = _cluster_pair(
        make_dask_sum_and_count, input_domain, input_metric, output_measure, feature_map, impute, n_jobs
    )
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_dask_sketch = to_then(make_private_dask_sketch)


def make_private_spark_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    scale: float,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
) -> dp.Measurement:
    r""":func:`make_private_sketch` for a Spark DataFrame: one Spark job for the exact
    ``(sum, count)`` pair (:func:`~opendp_sketch.make_spark_sum_and_count`), then the same noise,
    budget split and privacy map at the same ``scale``.

    :param input_domain: a :func:`~opendp_sketch.spark_box_domain`
    :param input_metric: ``dp.symmetric_distance()``
    :param output_measure: ``dp.max_divergence()`` or ``dp.zero_concentrated_divergence()``
    :param feature_map: the public feature map
    :param scale: noise scale of each coordinate of ``Σ Φ̃(x_i)``
    :param count_fraction: share of the loss spent on the count, in ``(0, 1)``
    :param impute: public value(s) replacing null/NaN (without: the lower bound)
    :param n_jobs: threads inside each partition task
    :return: a Measurement whose release is a :class:`~opendp_sketch.Sketch`
    :example:

    >>> import opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=1)
    >>> m = dps.make_private_spark_sketch(dps.spark_box_domain((0.0, 1.0), ["x"]),
    ...     dp.symmetric_distance(), dp.max_divergence(), feature_map=fm, scale=2.0)
    >>> m.map(1)  # Δ₁ = 1, scale 2, 2% for the count: 0.5 / 0.98
    0.510204...
    """
    from .spark import make_spark_sum_and_count

    pair = _cluster_pair(
        make_spark_sum_and_count, input_domain, input_metric, output_measure, feature_map, impute, n_jobs
    )
    return pair >> make_noisy_sketch(pair, output_measure, feature_map, scale, count_fraction)


then_private_spark_sketch = to_then(make_private_spark_sketch)


def _cluster_pair(
    make: Callable[..., dp.Transformation],
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    output_measure: dp.Measure,
    feature_map: FeatureMap,
    impute: Any,
    n_jobs: int | None,
) -> dp.Transformation:
    """A cluster backend's ``(sum, count)`` transformation, cached on the feature map like
    :func:`_pair_source` (it does not depend on the scale a search varies)."""
    dp.assert_features("contrib", "honest-but-curious")
    mechanism_of(output_measure)
    key = (make.__name__, str(input_domain), str(input_metric), repr(impute), n_jobs)
    cache = feature_map.__dict__.setdefault("_source_cache", {})
    if key not in cache:
        cache[key] = make(input_domain, input_metric, feature_map, impute=impute, n_jobs=n_jobs)
    return cache[key]


# -- the one scale search ------------------------------------------------------------------


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


# -- one-call releases (curator side: validate, then build, then release once) -------------


def check_release_arguments(feature_map: Any, contributions: Any, count_fraction: Any) -> float:
    """Checks shared by every one-call release; returns the checked ``count_fraction``."""
    dp.assert_features("contrib", "honest-but-curious")
    if not isinstance(feature_map, FeatureMap):
        raise ValueError(f"feature_map ({feature_map!r}) must be an opendp_sketch feature map")
    if isinstance(contributions, bool) or not isinstance(contributions, int) or contributions < 1:
        raise ValueError(f"contributions ({contributions!r}) must be a positive integer")
    return check_fraction(count_fraction)


def to_array(data: Any, column_names: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """numpy 2-D float64 view of numpy or Polars input; errors never echo data values."""
    import polars as pl

    if isinstance(data, (pl.DataFrame, pl.LazyFrame)):
        frame = data.collect() if isinstance(data, pl.LazyFrame) else data
        cols = list(column_names) if column_names is not None else frame.columns
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in the data (columns: {frame.columns})")
        bad = [c for c in cols if not frame.schema[c].is_numeric()]
        if bad:
            raise ValueError(f"columns {bad} must be numeric")
        return frame.select(cols).cast(pl.Float64).to_numpy(), cols
    if not isinstance(data, np.ndarray):
        raise ValueError(
            f"data must be a numpy array or a Polars DataFrame/LazyFrame, got {type(data).__name__}"
        )
    if data.dtype.kind not in "biuf":
        raise ValueError(f"data dtype ({data.dtype}) must be numeric (bool, int or float)")
    if data.ndim != 2:
        raise ValueError(f"data must be 2-dimensional (rows × columns), got {data.ndim} dimension(s)")
    return data.astype(np.float64, copy=False), None if column_names is None else list(column_names)


def _check_rows(X: np.ndarray, d: int, what: str) -> None:
    if X.shape[1] != d:
        raise ValueError(f"data has {X.shape[1]} columns but {what} expects {d}")
    if X.shape[0] == 0:
        raise ValueError("data is empty (0 rows)")


def check_finite(X: np.ndarray, impute: Any, block_rows: int = 1 << 16) -> None:
    """The curator-side rule for in-memory data: NaN needs ``impute``; ±inf is refused.
    Checked in blocks of rows, so no full-size temporary is made."""
    for s in range(0, X.shape[0], block_rows):
        block = X[s : s + block_rows]
        if impute is None and not np.isfinite(block).all():
            raise ValueError("data contains NaN or infinite values; clean it or pass impute=<public value>")
        if impute is not None and np.isinf(block).any():
            raise ValueError("data contains infinite values; impute replaces NaN only")


def memory_source(
    data: Any,
    feature_map: FeatureMap,
    bounds: Any,
    impute: Any,
    column_names: Sequence[str] | None,
    projection: Any,
) -> tuple[np.ndarray, dp.Transformation]:
    """In-memory data checked (nothing released yet) and its clip (and projection) transformation."""
    X, names = to_array(data, column_names)
    if projection is not None:
        from .projections import JLProjection

        if not isinstance(projection, JLProjection):
            raise ValueError(f"projection ({projection!r}) must be a JLProjection")
        if isinstance(feature_map, ByClass):
            raise ValueError(
                "a projection cannot be combined with ByClass (it would mix the label into the features)"
            )
        if projection.output_dim != feature_map.input_dim:
            raise ValueError(
                f"the projection outputs {projection.output_dim} columns but the feature map expects {feature_map.input_dim}"
            )
    d = feature_map.input_dim if projection is None else projection.input_dim
    _check_rows(X, d, "the feature map" if projection is None else "the projection")
    lo, hi = box_data_bounds(bounds, feature_map) if projection is None else check_bounds(bounds, d)
    check_finite(X, impute)
    in_domain = dp.numpy.array2_domain(num_columns=d, T=float, nan=impute is not None)
    source = make_box_clip(in_domain, dp.symmetric_distance(), (lo, hi), impute=impute, column_names=names)
    if projection is not None:
        from .projections import then_jl_projection

        source = source >> then_jl_projection(projection.output_dim, seed=projection.seed)
    return X, source


def release_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    column_names: Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    projection: Any = None,
    progress: Callable[[int, int], None] | None = None,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
    rows_fraction: float | None = None,
) -> Sketch:
    r"""Release a sketch of ``data`` in one call, spending exactly the given budget.

    * ``epsilon`` alone: pure ε-DP with discrete Laplace noise;
    * ``epsilon`` and ``delta > 0``: (ε, δ)-DP with discrete Gaussian noise (zCDP converted by
      OpenDP's ``make_zCDP_to_approxDP``);
    * ``rho``: ρ-zCDP with discrete Gaussian noise.

    **With a public** ``schema`` (a :class:`~opendp_sketch.Schema`, its dict, or a JSON path),
    any table works — numpy, Polars, pandas, PyArrow, Parquet/CSV/IPC files, with numeric,
    integer, categorical and boolean columns and nulls — streamed in batches. Columns are
    encoded unit-free by the schema (numeric to ``[0, 1]`` by its public range, categories to
    codes), ``bounds`` come from the schema, and without a ``feature_map`` the map is chosen
    from the schema alone (:func:`auto_feature_map`). The sketch records the schema, so every
    estimator answers in the table's units and labels.

    The noise scale is the smallest one OpenDP certifies for that budget (binary search over
    the measurement's privacy map). Data is validated *before* anything is released: a refused
    call releases nothing and spends nothing, and its error never shows a data value.

    :param data: numpy array ``(n, d)``, Polars DataFrame, or — streamed in batches with memory
        independent of ``n`` — a Polars LazyFrame or the path of a Parquet/CSV/IPC file; with a
        ``schema`` also pandas DataFrames and PyArrow tables and datasets
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (see above)
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing NaN; without it NaN/inf are refused
    :param column_names: columns to use (Polars) or names to record (numpy)
    :param projection: a :class:`~opendp_sketch.JLProjection` applied to every clipped row before
        the feature map (row-wise, 1-stable): the data and ``bounds`` have
        ``projection.input_dim`` columns, the map ``projection.output_dim``. Keep the projection
        (it is public and seeded) to project query points the same way.
    :param progress: for a file or LazyFrame, called as ``progress(rows_done, rows_total)`` after
        each streamed batch of the release pass (on the curator's machine; never released)
    :param pair_selection: with a ``schema`` and the automatic map, the share of the budget
        (e.g. ``0.1``) spent choosing, from the data, the 2-way marginals that join the columns
        the automatic rule leaves apart (:func:`make_spanning_sketch`: MST's selection); the
        pairs chosen are in ``sketch.privacy["pair_selection"]``. ``"auto"`` (default): a
        share of ``DEFAULT_SELECTION_FRACTION = 0.1`` when the rule leaves columns apart and the
        tree's cells would stand above the noise (:func:`auto_tree`: public inputs only), else
        none. ``None``: the public rule alone
    :param fine_bins: with a ``schema`` and the automatic map, the bins of every numeric 1-way
        marginal (:func:`auto_feature_map`; e.g. 16 when questions are asked on a known grid of
        16 equal cells). ``None`` (default): the rule's 16, 32 or 64
    :param pairs: with a ``schema`` and the automatic map, the 2-way marginals it measures:
        ``"rule"`` (default; where the schema's row estimate says an average cell stands above
        the noise, :func:`auto_marginals`), ``"all"`` (every pair: for regression and
        classifiers, which read how the columns vary together; counts and CDFs pay) or
        ``"none"`` (1-way marginals only)
    :param rows_fraction: with a ``schema`` without a ``rows`` estimate and the automatic map
        (in memory or in files), the share of the budget spent first on a noisy row count that
        plans the map as a given ``rows`` would (:func:`make_row_estimated_sketch`; recorded in
        ``sk.privacy["rows_estimate"]``). ``None`` (default): ``DEFAULT_ROWS_FRACTION = 0.03``;
        ``0``: no count (the map is planned without a row estimate). A schema's ``rows``
        always wins, and costs nothing
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    A mixed-type table under a public schema, then analyses in its own units and labels:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> table = pl.DataFrame({"age": rng.integers(18, 90, 5000), "cut": rng.choice(["Fair", "Ideal"], 5000)})
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"]})
    >>> sk = dps.release_sketch(table, schema=schema, epsilon=1.0)
    >>> sk.privacy["epsilon"], sk.column_names
    (1.0, ['age', 'cut'])
    >>> est = dps.M2M(sk)
    >>> bool(45 < est.mean()[0] < 63), sorted(est.shares("cut")["cut"].to_list())
    (True, ['Fair', 'Ideal'])

    A numeric array in a public box, with a map of your choice:

    >>> X = np.random.default_rng(0).uniform(0, 1, size=(1000, 2))
    >>> sk = dps.release_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=2),
    ...                         bounds=(0, 1), epsilon=1.0)
    >>> sk.privacy["epsilon"] <= 1.0, sk.sum.shape
    (True, (8,))
    """
    if progress is not None and not callable(progress):
        raise ValueError(
            f"progress ({progress!r}) must be a callable progress(rows_done, rows_total) or None"
        )
    check_chunking(chunk_rows, n_jobs)  # here too: inside the scale search an error would be swallowed
    if schema is not None:
        _no_box_arguments(bounds, impute, column_names, projection)
        return _release_table(
            data,
            as_schema(schema),
            feature_map,
            Budget.of(epsilon, delta, rho),
            contributions,
            count_fraction,
            chunk_rows,
            n_jobs,
            progress,
            pair_selection,
            fine_bins,
            pairs,
            rows_fraction=rows_fraction,
        )
    if rows_fraction is not None:
        raise ValueError("rows_fraction plans the automatic map of a schema release: give schema= or drop it")
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)
    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    column_names = check_column_names(column_names)

    if isinstance(data, (str, os.PathLike)):
        data = scan(data)
    elif type(data).__module__.split(".")[0] in ("pandas", "pyarrow"):  # as Polars, by name
        from .tables import as_frame

        data = as_frame(data).collect()
    import polars as pl

    if isinstance(data, pl.LazyFrame):
        if projection is not None:
            raise ValueError("projection= needs in-memory data (a numpy array or a Polars DataFrame)")
        return _release_frame(
            data,
            feature_map,
            bounds,
            budget,
            contributions,
            count_fraction,
            impute,
            column_names,
            chunk_rows,
            n_jobs,
            progress,
        )
    if projection is not None:
        X, source = memory_source(data, feature_map, bounds, impute, column_names, projection)

        def build(scale: float) -> dp.Measurement:
            return source >> then_private_sketch(
                budget.measure, feature_map, scale, count_fraction, chunk_rows, n_jobs
            )

    else:
        # no clipped copy of the table: every chunk is clipped inside the exact sum
        X, names = to_array(data, column_names)
        lo, hi = box_data_bounds(bounds, feature_map)
        _check_rows(X, feature_map.input_dim, "the feature map")
        if names is not None and len(names) != X.shape[1]:  # the sketch records them: checked before building
            raise ValueError(f"column_names ({list(names)}) must be {X.shape[1]} distinct names")
        check_finite(X, impute)
        in_domain = dp.numpy.array2_domain(num_columns=X.shape[1], T=float, nan=impute is not None)
        pair = make_clamped_sum_and_count(
            in_domain,
            dp.symmetric_distance(),
            feature_map,
            (lo, hi),
            impute=impute,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        record = ([float(v) for v in lo], [float(v) for v in hi])

        def build(scale: float) -> dp.Measurement:
            return pair >> make_noisy_sketch(
                pair, budget.measure, feature_map, scale, count_fraction, record, names
            )

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    warn_if_noise_swamps(budget, contributions, feature_map, X.shape[0])
    return release_once(meas, X, budget, contributions)


def _no_box_arguments(bounds: Any, impute: Any, column_names: Any, projection: Any = None) -> None:
    """With a schema, the box, the null rules and the columns are the schema's."""
    if bounds is not None or impute is not None or column_names is not None or projection is not None:
        raise ValueError(
            "with a schema, bounds, null rules and columns come from the schema: "
            "drop bounds=, impute=, column_names= and projection="
        )


def _map_and_bounds(
    feature_map: FeatureMap | None, bounds: Any, pair_selection: Any, fine_bins: Any, pairs: Any
) -> FeatureMap:
    """Without a schema: the release needs a map and its bounds, and takes none of the options
    that shape a schema's automatic map."""
    if pair_selection not in (None, AUTO_SELECTION) or fine_bins is not None or pairs != "rule":
        raise ValueError(
            "pair_selection, fine_bins and pairs shape the automatic map of a schema: give "
            "schema=dps.Schema({...}) and no feature_map"
        )
    if feature_map is None or bounds is None:
        raise ValueError("give a schema (schema=dps.Schema({...})), or a feature_map and its public bounds")
    return feature_map


def as_schema(schema: Any) -> Schema:
    """A :class:`~opendp_sketch.Schema` from itself, its dict, or a JSON file path / text."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema) if "columns" in schema else Schema(schema)
    if isinstance(schema, (str, os.PathLike)):
        return Schema.from_json(schema)
    raise ValueError(f"schema ({schema!r}) must be a dps.Schema, a dict or a JSON file path")


def auto_marginals(
    bounds: Any,
    *,
    categorical: Sequence[int] | None = None,
    levels: dict[int, int] | None = None,
    fine_bins: int | None = None,
    rows: int | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    bound_cells: float | None = None,
    pairs: PairsRule = "rule",
) -> FeatureMap:
    r"""Every 1-way marginal, and the 2-way marginals when a public row estimate says they pay.

    Without ``rows`` or a budget: every 1-way and every 2-way marginal, the 2-way ones with
    ``AUTO_PAIR_BINS = 8`` bins per numeric column (categories keep theirs, integer columns with
    at most 16 values theirs). With both, the 2-way marginals get
    ``AUTO_MAX_PAIR_BINS = 16`` bins per numeric column (at most ``fine_bins``), and a pair is
    measured only if its average cell holds at least ``AUTO_PAIR_SNR = 3√2 ≈ 4.2`` noise
    standard deviations of rows:

    ``rows / (cells of the pair) ≥ 3√2 · σ``, with ``σ`` the noise std of one cell for the map
    with every pair (L1/L2 sensitivity: the number of blocks / its square root) and the sum's
    share of the budget. Pairs with a categorical or boolean column have few cells, so they stay
    longest (a classifier's label keeps its pairs).

    Why: every block shares the budget, so pairs make every cell noisier, 1-way ones included,
    and a multi-column answer without them falls back on independence within the decoder's
    fit. On three real tables (``benchmarks/results/real_tables*.md``; 1 000 random 1–3-column
    counts) pairs at 16 × 16 won where this ratio was 4 or more (CPSSW8 at ε = 0.3 and 1, movies
    at ε = 1), 1-way marginals alone won or tied at 2 and below (countymurders at ε ≤ 1,
    movies at ε ≤ 0.3, CPSSW8 at ε = 0.1), and coarser pairs (8 × 8, 4 × 4) lost to 1-way
    marginals alone wherever they were tried. Everything read is public: the box, the column
    kinds, the budget and the estimate ``rows`` (never the data's row count).

    With pairs, the map is a :class:`~opendp_sketch.Composite` of the 1-way and the 2-way
    marginals at weights ``(a, 1)``, ``a = one_way_weight`` (default ``AUTO_ONE_WAY_WEIGHT = 3``;
    ``1`` gives one plain :class:`~opendp_sketch.features.marginals.Marginals`): the budget split,
    so 1-way cells see ``1/a`` of the noise of 2-way cells. Means, CDFs and 1-column counts lean
    on the 1-way cells; with every block at the same weight 1-way cells were the noisiest part of
    the answer where pairs outnumber columns. Weight 2 against 1 (5 releases each,
    ``benchmarks/results/real_tables*.md`` of commit d73a840), CDF errors at ε = 1: 0.68 against
    0.94 (× 10⁻³, movies), 0.28 against 0.31 (CPSSW8), range counts 0.48 against 0.52 and 0.28
    against 0.27. Weight 3 against 2, decoded from the same noise draws (12 each,
    ``benchmarks/results/bench_one_way_weight.md``): CDF errors 5–20 % lower in every (table, ε)
    with pairs (movies at ε = 1: 0.51 against 0.61; countymurders at ε = 3: 0.36 against 0.45),
    range counts from 4 % lower to 16 % higher (2-column counts pay, 1-column counts gain), all
    still below MST's and AIM's where that is a target. Weight 4 lowers CDFs further but raises
    counts by up to 40 %. With the schema path's 32-bin 1-way marginals
    (``benchmarks/results/bench_one_way_weight_fine32.md``), weight 3 against 2 lowers CDF errors
    in every (table, ε) with pairs (15–24 % at ε = 1) and moves range counts from 8 % lower to
    9 % higher.

    The pair rule reads the noise at 1-way weight ``min(a, AUTO_RULE_ONE_WAY_WEIGHT = 2)``, the
    weight its threshold was measured at: a heavier ``a`` keeps the pairs weight 2 keeps (when
    the rule read the map at ``a = 3`` itself it dropped movies' pairs at ε = 1 and lost on
    2-column counts).

    ``bound_cells=δ`` (e.g. ``AUTO_BOUND_CELL = 1e-6``) cuts a cell of width ``δ·(hi − lo)`` at
    each bound of every numeric 1-way marginal (``Marginals.auto(bound_cells=)``): rows sitting
    on a bound (clipped values, the zeros of a count) are then measured apart from the rest of
    their bin, and decoded there. Measured at ε = 1 over 3 releases: countymurders' column means
    0.23 relative error against 0.42 and second moments 0.25 against 0.33, but range counts
    0.67 against 0.56 (× 10⁻³) there and 0.63 against 0.53 on movies (two more noisy cells per
    column): an option for means of clipped or zero-heavy columns, not the default.

    ``pairs``: ``"rule"`` (default) is the rule above; ``"all"`` keeps every 2-way marginal (at
    the rule's bins) and ``"none"`` none. A fitted model reads how the columns vary together: an
    aggregate over many cells, which noisy pairs carry even where no single cell stands above
    its noise. Logistic regression of gender on CPSSW8 at ε = 0.1 (the split of
    ``benchmarks/bench_binary.py``, 8 releases each): mean test AUC 0.637 with every pair against
    0.630 with the rule's (non-private 0.648; the best peer 0.583); a later run of the same split
    read 0.629 against 0.631, so the two are level within their spread. Range counts rose from
    0.0020 to 0.0026 (mean |err| / n, 3 releases): an option, not the default.

    Integer columns with more than ``AUTO_MAX_PAIR_BINS = 16`` values keep one bin per value in
    their 1-way marginal and take the pairs' 16 equal bins in their 2-way marginals
    (``Marginals.auto(pair_levels=16)``): a pair then has the cells of any 16-bin pair. CPSSW8's
    education (21 values) made its pair with gender 42 cells, left out at ε = 0.1; at 32 it is
    kept, and the rule's logistic-regression AUC rose from 0.610 to 0.630 (12 and 8 releases).

    ``fine_bins``: bins of every numeric 1-way marginal. ``None`` (default): ``AUTO_FINE_BINS =
    32``; with ``rows`` and a budget, ``AUTO_MAX_PAIR_BINS = 16`` (the pairs' bins) when the
    map leaves 2-way marginals out, and ``AUTO_FINER_BINS = 64`` when it keeps every one and an
    average cell of 64 still holds ``AUTO_FINE_SNR = 8`` noise standard deviations of rows,
    ``rows / 64 ≥ 8 · σ₁`` (``σ₁``: the noise std of a 1-way cell in the chosen map, in rows).
    Without every pair, 2- and 3-column counts lean on the 1-way cells (and, in
    :func:`release_sketch`, on a tree of pairs chosen from the data), and every 64-bin cell adds
    its noise to the count of a grid's cell: on a 16-bin grid the noisy 1-way sums alone are
    twice as far off at 64 bins as at 16 (countymurders at ε = 1: 0.00093 against 0.00046 of n;
    the decoder 0.00087 against 0.00034). With 16 bins and the tree the schema path met MST's
    and AIM's grid counts on every table at ε = 0.1 and 1 (``real_tables.md``,
    ``real_tables_eps0_1.md``: 1.06–1.66× lower); the price is
    paid between the grid's edges (a CDF at a user's point: 0.0075 against 0.0022 on
    countymurders at ε = 1, still a third of MST's 0.025).
    Answers between the cells' edges (a CDF at any point, a range count in the user's units, a
    mean) lean on finer 1-way cells. Measured on off-grid queries from common noise
    (``benchmarks/results/bench_fine_bins.md``): 64 bins against 32 lowered range-count, CDF and
    mean errors on movies and CPSSW8 at ε = 0.1, 1 and 3 (ratio ``rows / 64 / σ₁`` from 9.1 to
    238), and counts and means on countymurders at ε = 1 and 3 (CDFs level; ratio 50 and 69),
    and raised every error on countymurders at ε = 0.1 (ratio 5.0). ``fine_bins=64`` (with
    ``release_sketch(pair_selection=None)``) keeps that for thresholds anywhere at every budget.

    With 64-bin 1-way cells and every pair kept, each numeric column with equal bins is also
    measured at the pairs' 16 bins (``Marginals.auto(coarse_one_way=16)``; categories and integer
    columns with one bin per value keep one level): a two-level tree, the 16 coarse cells at
    weight ``one_way_weight + AUTO_TREE_EXTRA_WEIGHT = 4`` and the 64 fine ones at
    ``AUTO_TREE_FINE_WEIGHT = 1``. Why: a CDF point or count on the 16-bin grid sums ``4k`` noisy
    cells of a 64-bin marginal and ``k`` of a 16-bin one, so with one 64-bin level no split of a
    pure-DP budget reaches MST's 1-way noise there (``docs/schema.md``), while a 16-bin level alone
    loses the answers between its edges. The decoder estimates the fine cells from both levels
    (generalised least squares) and keeps each coarse cell's share
    (:func:`~opendp_sketch.estimators.synthetic._one_way_estimates`). Every block still takes one
    cell per row: ``Δ₁`` grows by 2 per tree column (5 instead of 3) and the pairs see that much
    more noise. Decoded from the same noise draws (``benchmarks/results/bench_one_way_tree.md``, 8
    each), against the one 64-bin level: grid CDF errors 0.44–0.84× (movies at ε = 1: 0.00048
    against 0.00094; countymurders at ε = 3: 0.00029 against 0.00069), as low as ``fine_bins=16``
    gives, while CDF errors at a user's thresholds stay at 0.92–1.02× (``fine_bins=16``:
    1.4–4.0×); grid counts 0.69–0.98×, off-grid counts within +5 %, column means closer in every
    (table, ε).

    :example:

    >>> from opendp_sketch.release import auto_marginals
    >>> box = ([0.0] * 6, [1.0] * 6)
    >>> def pairs(fm):
    ...     return [b.shape for m in getattr(fm, "maps", [fm]) for b in m.blocks if len(b.subset) == 2]
    >>> [len(pairs(auto_marginals(box, rows=60_000, epsilon=e))) for e in (0.1, 0.3, 1.0, 3.0)]
    [0, 0, 15, 15]
    >>> pairs(auto_marginals(box, rows=60_000, epsilon=1.0))[-1], pairs(auto_marginals(box))[-1]
    ((16, 16), (8, 8))
    >>> fm = auto_marginals(box, rows=60_000, epsilon=3.0)
    >>> type(fm).__name__, fm.weights, [len(m.blocks) for m in fm.maps]
    ('Composite', (4.0, 1.0, 1.0), [6, 6, 15])
    >>> [len(pairs(auto_marginals(box, rows=60_000, epsilon=0.1, pairs=p))) for p in ("rule", "all", "none")]
    [0, 15, 0]
    """
    full, keep = _auto_blocks(
        bounds,
        categorical=categorical,
        levels=levels,
        fine_bins=fine_bins,
        rows=rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        bound_cells=bound_cells,
        pairs=pairs,
    )
    return _kept(full, keep, one_way_weight)


def _kept(full: Marginals, keep: Sequence[int], weight: float) -> FeatureMap:
    """The blocks ``keep`` of ``full``, weighted by :func:`_weighted`."""
    return _weighted(full if len(keep) == len(full.blocks) else full.take(keep), weight)


def _weighted(fm: Marginals, weight: float) -> FeatureMap:
    """The 1-way blocks of ``fm`` at ``weight`` against its 2- and 3-way blocks at 1 (a
    :class:`~opendp_sketch.Composite`), or ``fm`` itself at weight 1 or without pairs.

    A column with two 1-way blocks (a tree: ``Marginals.auto(coarse_one_way=)``) has its coarse
    block at ``weight + AUTO_TREE_EXTRA_WEIGHT`` and its fine block at ``AUTO_TREE_FINE_WEIGHT``,
    parts of their own (see :func:`auto_marginals`); at ``weight`` 1 every block, the tree's too,
    stays at weight 1 in ``fm`` itself.

    >>> from opendp_sketch.features.marginals import Marginals
    >>> fm = Marginals.auto(([0.0] * 3, [1.0] * 3), fine_bins=8, coarse_bins=2, coarse_one_way=2)
    >>> w = _weighted(fm, 3.0)
    >>> w.weights, [[(b.subset, b.shape) for b in m.blocks] for m in w.maps][:2]
    ((4.0, 1.0, 1.0), [[((0,), (2,)), ((1,), (2,)), ((2,), (2,))], [((0,), (8,)), ((1,), (8,)), ((2,), (8,))]])
    >>> w.sensitivity(1) == 3 * (4 + 1) + 3
    True
    """
    ones = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]
    pairs = [i for i, b in enumerate(fm.blocks) if len(b.subset) > 1]
    if weight == 1.0 or not pairs:
        return fm
    levels: dict[int, list[int]] = {}  # each column's 1-way blocks
    for i in ones:
        levels.setdefault(fm.blocks[i].subset[0], []).append(i)
    fine = [max(blocks, key=lambda i: fm.blocks[i].size) for blocks in levels.values() if len(blocks) > 1]
    if not fine:
        return Composite([fm.take(ones), fm.take(pairs)], weights=[float(weight), 1.0])
    single = [i for i in ones if len(levels[fm.blocks[i].subset[0]]) == 1]
    coarse = [i for i in ones if i not in fine and i not in single]
    parts = [
        (coarse, float(weight) + AUTO_TREE_EXTRA_WEIGHT),
        (single, float(weight)),
        (fine, AUTO_TREE_FINE_WEIGHT),
        (pairs, 1.0),
    ]
    parts = [(p, w) for p, w in parts if p]
    return Composite([fm.take(p) for p, _ in parts], weights=[w for _, w in parts])


def _check_pairs(pairs: Any) -> str:
    """``pairs`` of the automatic map, checked: ``"rule"``, ``"all"`` or ``"none"``.

    >>> _check_pairs("all")
    'all'
    """
    if isinstance(pairs, str) and pairs in AUTO_PAIRS:
        return pairs
    raise ValueError(
        f"pairs ({pairs!r}) must be 'rule' (the row-estimate rule, the default), 'all' (every 2-way "
        "marginal) or 'none' (1-way marginals only)"
    )


def _auto_blocks(
    bounds: Any,
    *,
    categorical: Sequence[int] | None,
    levels: dict[int, int] | None,
    fine_bins: int | None,
    rows: int | None,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    count_fraction: float,
    one_way_weight: float,
    bound_cells: float | None,
    pairs: str = "rule",
    targets: Sequence[int] = (),
) -> tuple[Marginals, list[int]]:
    """:func:`auto_marginals` before the weighting: every 1-way and 2-way block at the chosen
    bins, and the indices of the blocks the rule keeps (every 1-way block among them). With
    ``targets`` (a schema's declared model targets), the rule also keeps every pair holding a
    target, whatever its cells' signal: a model needs how each feature varies with it."""
    pairs = _check_pairs(pairs)
    if not (isinstance(one_way_weight, (int, float)) and not isinstance(one_way_weight, bool)) or not (
        1.0 <= one_way_weight <= 1024.0
    ):
        raise ValueError(f"one_way_weight ({one_way_weight!r}) must be a number in [1, 1024]")

    chosen_bins: int = AUTO_FINE_BINS if fine_bins is None else fine_bins

    def build(c: int, fine: int = chosen_bins) -> Marginals:
        return Marginals.auto(
            bounds,
            categorical=categorical,
            fine_bins=fine,
            coarse_bins=c,
            levels=levels,
            bound_cells=bound_cells,
            pair_levels=AUTO_MAX_PAIR_BINS,
        )

    def ones(fm: Marginals) -> list[int]:
        return [i for i, b in enumerate(fm.blocks) if len(b.subset) == 1]

    wanted = set(targets)

    def with_targets(fm: Marginals, keep: list[int]) -> list[int]:
        extra = [i for i, b in enumerate(fm.blocks) if len(b.subset) == 2 and wanted & set(b.subset)]
        return sorted(set(keep) | set(extra))

    given = [epsilon, delta, rho]
    if rows is None or all(v is None for v in given):
        fm = build(min(AUTO_PAIR_BINS, chosen_bins))
        return fm, with_targets(fm, ones(fm) if pairs == "none" else list(range(len(fm.blocks))))
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows ({rows!r}) must be a positive integer: a public estimate of the row count")
    budget = Budget.of(epsilon, delta, rho)
    share = 1.0 - check_fraction(count_fraction)

    def by_rule(fine: int) -> tuple[Marginals, list[int]]:
        """``fine``-bin 1-way blocks and the 2-way blocks the row-estimate rule keeps."""
        fm = build(min(AUTO_MAX_PAIR_BINS, fine), fine)
        # the noise of the map with every pair, its 1-way blocks at weight min(a, 2): dropping blocks
        # only lowers it, so up to weight 2 a kept pair's cells hold at least this many noise std's of
        # rows in the final map too; a heavier 1-way weight keeps the pairs weight 2 keeps
        rule = _weighted(fm, min(float(one_way_weight), AUTO_RULE_ONE_WAY_WEIGHT))
        if pairs != "rule":
            return fm, with_targets(fm, ones(fm) if pairs == "none" else list(range(len(fm.blocks))))
        std = budget.coordinate_std(rule.sensitivity(1), rule.sensitivity(2), share)
        keep = [
            i
            for i, b in enumerate(fm.blocks)
            if len(b.subset) == 1 or rows / math.prod(b.shape) >= AUTO_PAIR_SNR * std
        ]
        return fm, with_targets(fm, keep)

    fm, keep = by_rule(chosen_bins)
    if fine_bins is None:
        if any(len(b.subset) == 2 and i not in keep for i, b in enumerate(fm.blocks)):
            # the budget leaves pairs out: multi-column counts lean on the 1-way cells (and on a
            # tree, release_sketch(pair_selection=)), so they take the pairs' resolution; the
            # sensitivity and the pairs kept do not depend on the 1-way bins
            return by_rule(AUTO_MAX_PAIR_BINS)
        chosen = _kept(fm, keep, one_way_weight)
        # the 1-way cells' noise in rows: the map's coordinate noise over the 1-way blocks' weight
        weight = float(one_way_weight) if isinstance(chosen, Composite) else 1.0
        one_way_std = budget.coordinate_std(chosen.sensitivity(1), chosen.sensitivity(2), share) / weight
        if rows / AUTO_FINER_BINS >= AUTO_FINE_SNR * one_way_std:
            # the same blocks with finer 1-way cells: every block still takes one cell per row, so
            # the sensitivity, the noise and the pairs the rule keeps are the same
            fm, keep = by_rule(AUTO_FINER_BINS)
            # four 1-way cells to a pair's bin: the numeric columns also get a 1-way block at the
            # pairs' bins (a two-level tree, weighted by _weighted); the pairs the rule kept stay
            numeric = [j for j in range(fm.dim) if j not in fm.categories and j not in (levels or {})]
            if any(len(fm.blocks[i].subset) > 1 for i in keep):
                return _with_coarse_one_way(fm, keep, numeric, AUTO_MAX_PAIR_BINS)
    return fm, keep


def _with_coarse_one_way(
    fm: Marginals, keep: list[int], columns: Sequence[int], bins: int
) -> tuple[Marginals, list[int]]:
    """``fm`` with a second 1-way block of ``bins`` equal bins for each of ``columns`` whose 1-way
    block has more cells (a multiple of ``bins``), after the 1-way blocks; the indices of ``keep``
    moved to match, the new blocks kept. ``fm`` itself when no column qualifies."""
    one = {b.subset[0]: b for b in fm.blocks if len(b.subset) == 1}
    tree = [
        j
        for j in columns
        if j in one and one[j].size > bins and (one[j].size - (2 if one[j].cuts else 0)) % bins == 0
    ]
    if not tree:
        return fm, keep
    first = sum(1 for b in fm.blocks if len(b.subset) == 1)  # the 1-way blocks come first
    out = fm.insert(first, [(j,) for j in tree], [[bins] for _ in tree])
    moved = [i if i < first else i + len(tree) for i in keep]
    return out, sorted(moved + list(range(first, first + len(tree))))


def auto_feature_map(
    schema: Schema,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> FeatureMap:
    """The map :func:`release_sketch` uses with a schema and no ``feature_map``: public
    information only (the schema's columns, kinds and row estimate, and the budget), and
    unit-free, since it acts on encoded coordinates.

    The rule (:func:`~opendp_sketch.release.auto_marginals` on the encoded box): every column's
    1-way marginal (32 equal bins of a numeric column's public range, one cell per category, and
    one bin per value of a linear integer column with at most 32 values) and every 2-way marginal
    at 8×8 bins (an integer column keeps one bin per value there up to 16 values); when the schema carries a public ``rows`` estimate, the 2-way marginals are
    measured at 16×16 if the budget leaves an average cell well above its noise, and left out
    otherwise. Numeric 1-way marginals then get 64 bins when every pair is measured and an average
    cell of 64 still holds 8 noise std's of rows (with a second 1-way level at the pairs' 16 bins,
    a two-level tree: see :func:`auto_marginals`), and the pairs' 16 bins when the budget leaves
    pairs out (multi-column counts then lean on the 1-way cells). Categories and small integer
    columns keep their cells. With pairs, the 1-way and
    2-way marginals are blocks of a :class:`~opendp_sketch.Composite` at weights
    ``(one_way_weight, 1)``: 1-way cells see a third of the noise of 2-way cells by default (a
    tree's coarse level a quarter, its fine level as much as the pairs). Means,
    shares, CDFs, group statistics and 2-way counts are then averages over cells the sketch
    measures.

    >>> import opendp_sketch as dps
    >>> fm = auto_feature_map(dps.Schema({"age": (18, 90), "cut": ["Fair", "Ideal"]}))
    >>> fm.weights, [[(b.subset, b.shape) for b in m.blocks] for m in fm.maps]
    ((3.0, 1.0), [[((0,), (32,)), ((1,), (2,))], [((0, 1), (8, 2))]])
    >>> s = dps.Schema({"age": (18, 90), "income": (0, 1e6), "cut": ["Fair", "Ideal"]}, rows=50_000)
    >>> [b.shape for m in auto_feature_map(s, epsilon=1.0).maps for b in m.blocks]
    [(16,), (16,), (2,), (64,), (64,), (16, 16), (16, 2), (16, 2)]
    >>> fm = auto_feature_map(s, epsilon=0.01)   # no pair pays at this budget: the pairs' 16 bins
    >>> type(fm).__name__, [b.shape for b in fm.blocks]
    ('Marginals', [(16,), (16,), (2,)])

    With a map like this, :func:`release_sketch` also spends a tenth of the budget choosing a
    tree of pairs from the data when that pays (``pair_selection="auto"``, :func:`auto_tree`).

    ``fine_bins`` fixes the bins of every numeric 1-way marginal instead of the rule (e.g. 16 when
    the questions are asked on a known grid of 16 equal cells: each grid-aligned answer then sums
    one cell's noise per grid cell, not four):

    >>> [b.shape for m in auto_feature_map(s, epsilon=1.0, fine_bins=16).maps for b in m.blocks][:3]
    [(16,), (16,), (2,)]

    ``pairs="all"`` measures every 2-way marginal whatever the rule says (for regression and
    classifiers), ``pairs="none"`` none:

    >>> [b.shape for m in auto_feature_map(s, epsilon=0.01, pairs="all").maps for b in m.blocks]
    [(32,), (32,), (2,), (16, 16), (16, 2), (16, 2)]
    >>> [b.shape for b in auto_feature_map(s, epsilon=0.01, pairs="none").blocks]
    [(16,), (16,), (2,)]
    """
    full, keep = _schema_blocks(
        schema,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        fine_bins=fine_bins,
        pairs=pairs,
    )
    return _kept(full, keep, one_way_weight)


def _schema_blocks(
    schema: Schema,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    fine_bins: int | None = None,
    pairs: str = "rule",
) -> tuple[Marginals, list[int]]:
    """:func:`auto_feature_map` before the weighting (see :func:`_auto_blocks`)."""
    levels = {
        j: v.size
        for j, v in schema.integer_levels.items()
        if v.size <= AUTO_FINE_BINS and getattr(schema[schema.columns[j]], "scale", None) == "linear"
    }
    return _auto_blocks(
        schema.bounds,
        categorical=schema.categorical,
        levels=levels,
        fine_bins=fine_bins,
        rows=schema.rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        count_fraction=count_fraction,
        one_way_weight=one_way_weight,
        bound_cells=None,
        pairs=pairs,
        targets=[schema.columns.index(t) for t in getattr(schema, "targets", [])],
    )


# -- a spanning tree of 2-way marginals, chosen privately (MST-style) ----------------------


def _as_rho(budget: Budget, d_in: int) -> float:
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


def _tree_rounds(marginals: Marginals, measured: Sequence[int]) -> tuple[list[int], int]:
    """The candidate pairs (2-way blocks not in ``measured``) and the number of rounds Kruskal
    takes: as many as the candidates can join components of the measured blocks. While fewer are
    picked, some candidate joins two components, so no round is ever without a choice."""
    blocks = marginals.blocks
    kept = set(measured)
    joins = [blocks[i].subset for i in measured if len(blocks[i].subset) > 1]
    candidates = [i for i, b in enumerate(blocks) if len(b.subset) == 2 and i not in kept]
    rounds = (
        Forest(marginals.input_dim, joins).components
        - Forest(marginals.input_dim, joins + [blocks[i].subset for i in candidates]).components
    )
    return candidates, rounds


def make_spanning_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    marginals: Marginals,
    measured: Sequence[int],
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    one_way_weight: float = AUTO_ONE_WAY_WEIGHT,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> tuple[dp.Measurement, FeatureMap, int]:
    r"""A release that first chooses, privately, the 2-way marginals joining the columns, then
    measures them with ``measured`` (MST's selection, in one OpenDP measurement).

    ``marginals`` holds every candidate block; ``measured`` indexes the ones measured in any case
    (every 1-way block, the 2- and 3-way blocks a public rule kept). When those leave the columns
    in ``c`` connected components, each of ``k`` rounds picks the 2-way candidate of highest
    :mod:`independence score <opendp_sketch.selection>` among those joining two components
    (Kruskal on noisy scores: OpenDP's ``make_noisy_max``, ``4·d_in``-stable scores); ``k`` is
    the number of components the candidates can join (``c − 1`` when every pair is a candidate,
    as in the automatic map). The pairs picked then join ``measured`` in the sketch's map (1-way
    blocks at ``one_way_weight``), released by :func:`make_private_sketch`. OpenDP's
    ``make_adaptive_composition`` composes the ``k`` choices (``selection_fraction`` of the
    budget, split evenly) and the release (the rest), with every loss fixed before the data is
    read; each query is a measurement on the same input, chosen from earlier answers only.

    Every choice gives a map of the same sensitivity (each block, whatever its shape, takes one
    cell per row), so the release's noise scale is fixed up front and each query meets its
    share. Nothing raises on the data: while fewer than ``k`` pairs are picked some candidate
    joins two components, so every round has a choice, and the scores read exact counts.
    ``k = 0`` (a connected rule, or no candidate joining anything) needs no choice: the plain
    release of ``measured`` at the whole budget.

    :return: the measurement (data → :class:`~opendp_sketch.Sketch`), a map of the shape the
        release will have (its first ``k`` candidates: the same sensitivity and noise), and the
        number of rounds ``k``
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.release import Budget, make_spanning_sketch
    >>> from opendp_sketch.features.marginals import Marginals
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = Marginals.auto(([0.0] * 3, [1.0] * 3), fine_bins=8, coarse_bins=4)
    >>> m, shape, rounds = make_spanning_sketch(dps.box_domain(([0.0] * 3, [1.0] * 3)), dp.symmetric_distance(),
    ...     Budget.of(epsilon=1.0), 1, fm, measured=[0, 1, 2])
    >>> rounds, m.map(1) <= 1.0
    (2, True)
    >>> x = np.random.default_rng(0).random((2000, 1))
    >>> X = np.hstack([x, 1 - x, np.random.default_rng(1).random((2000, 1))])
    >>> tree = m(X).privacy["pair_selection"]["pairs"]   # 2 pairs join 3 columns: (0, 1) is almost sure
    >>> len(tree), [0, 1] in tree
    (2, True)
    """
    selection_fraction = check_fraction(selection_fraction, "selection_fraction")
    if not isinstance(marginals, Marginals):
        raise ValueError(f"marginals ({marginals!r}) must be a Marginals map holding every candidate block")
    blocks = marginals.blocks
    given = list(measured)
    if not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < len(blocks) for i in given
    ):
        raise ValueError(f"measured ({given!r}) must be indices of the {len(blocks)} blocks of marginals")
    measured = sorted({int(i) for i in given})
    pairs_of = [b.subset for b in blocks]
    joins = [pairs_of[i] for i in measured if len(pairs_of[i]) > 1]
    candidates, rounds = _tree_rounds(marginals, measured)

    def final_map(chosen: Sequence[int]) -> FeatureMap:
        return _weighted(marginals.take(sorted(measured + [candidates[c] for c in chosen])), one_way_weight)

    def sketch_of(fm: FeatureMap, measure: dp.Measure) -> Callable[[float], dp.Measurement]:
        return lambda scale: make_private_sketch(
            input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    if rounds == 0:
        fm = final_map([])
        return (
            search_measurement(sketch_of(fm, budget.measure), budget, d_in, fm.sensitivity(budget.p)),
            fm,
            0,
        )
    # the loss in the measure the noise is calibrated in: ε, or ρ (an (ε, δ) budget converts at the end)
    total = float(budget.d_out) if budget.kind == "epsilon" else _as_rho(budget, d_in)
    measure = budget.measure
    template = final_map(range(rounds))
    other = final_map(range(len(candidates) - rounds, len(candidates)))
    if (template.sensitivity(1), template.sensitivity(2), template.unit) != (
        other.sensitivity(1),
        other.sensitivity(2),
        other.unit,
    ):  # not expected: every marginal block takes one cell per row
        raise ValueError("the candidate 2-way marginals give maps of different sensitivities")
    candidate_map = marginals.take(candidates)
    if candidate_map.unit != 1.0:  # the scores read the exact sums as cell counts
        raise ValueError("the candidate 2-way marginals must sum one integer per row and cell")
    counts = _pair_source(input_domain, input_metric, candidate_map, chunk_rows, n_jobs)
    cand_blocks = candidate_map.blocks
    cand_pairs = [b.subset for b in cand_blocks]

    def choose(subset: Sequence[int], memo: dict[str, Any], noise: float) -> dp.Measurement:
        return (
            make_independence_scores(input_domain, input_metric, counts, cand_blocks, subset, memo)
            >> dp.m.then_noisy_max(measure, noise)
            >> dp.new_function(int, TO="ExtrinsicObject")
        )

    per_round = total * selection_fraction / rounds
    noise = dp.binary_search_param(
        lambda v: choose(range(len(candidates)), {}, v), d_in=d_in, d_out=per_round, T=float
    )
    round_loss = choose(range(len(candidates)), {}, noise).map(d_in)
    # the release gets what the rounds left: the largest share whose sum with theirs, as OpenDP
    # adds the losses (rounding up), stays within the total (so ε = 1 is recorded as 1.0)
    rest = total - rounds * round_loss
    for _ in range(64):
        check = dp.c.make_adaptive_composition(
            input_domain, input_metric, measure, d_in=d_in, d_mids=[round_loss] * rounds + [rest]
        )
        if check.map(d_in) <= total:
            break
        rest = math.nextafter(rest, 0.0)
    base = Budget.of(epsilon=rest) if budget.kind == "epsilon" else Budget.of(rho=rest)
    # the final release at the smallest scale certified for its share; every choice has this map
    scale = search_scale(sketch_of(template, measure), base, d_in, template.sensitivity(base.p))
    d_mids = [round_loss] * rounds + [sketch_of(template, measure)(scale).map(d_in)]
    adaptive = dp.c.make_adaptive_composition(input_domain, input_metric, measure, d_in=d_in, d_mids=d_mids)

    names = getattr(getattr(input_domain, "descriptor", None), "column_names", None)
    spent = adaptive.map(d_in)  # every query's loss, fixed up front

    def drive(queryable: Any) -> Sketch:
        memo: dict[str, Any] = {}  # the candidate counts of this release's one dataset
        joined = Forest(marginals.input_dim, joins)
        chosen: list[int] = []
        for _ in range(rounds):
            open_ = joined.crossing(cand_pairs)  # never empty while fewer than k are picked
            c = open_[queryable(choose(open_, memo, noise))]
            chosen.append(c)
            joined.join(cand_pairs[c])
        memo.clear()
        fm = final_map(chosen)
        sk = queryable(
            make_private_sketch(
                input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
            )
        )
        record: dict[str, Any] = {
            "fraction": selection_fraction,
            "pairs": [list(cand_pairs[c]) for c in chosen],
        }
        if names is not None:
            record["columns"] = [[names[j] for j in cand_pairs[c]] for c in chosen]
        sk.privacy["pair_selection"] = record
        sk.privacy["loss"] = spent  # the choice's and the release's (release_sketch renames it)
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject")), template, rounds


def make_table_row_count(input_domain: dp.Domain, input_metric: dp.Metric) -> dp.Transformation:
    """The number of rows of a table under a schema (``table_domain``), 1-stable: each row
    read as a release reads it (a CSV file's line), so no value can make it fail.

    :example:

    >>> import polars as pl, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.tables import table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> t = make_table_row_count(table_domain(dps.Schema({"x": (0, 1)})), dp.symmetric_distance())
    >>> t(pl.DataFrame({"x": [0.5, None, 7.0]}))
    3
    """
    from .tables import as_frame

    desc = getattr(input_domain, "descriptor", None)
    if not isinstance(desc, TableDomain) or isinstance(desc, (DaskTableDomain, SparkTableDomain)):
        raise ValueError("make_table_row_count needs table_domain(schema) (a table in memory or in files)")
    require_symmetric(input_metric)
    names = list(desc.schema.columns)

    def count(data: Any) -> int:
        import polars as pl

        lf = as_frame(data, names, text_csv=True)
        return min(int(lf.select(pl.len()).collect(engine="streaming").item()), I64_MAX)

    return dp.t.make_user_transformation(
        input_domain, input_metric, dp.atom_domain(T="i64"), dp.absolute_distance(T="i64"), count, lambda d: d
    )


def make_row_estimated_sketch(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    budget: Budget,
    d_in: int,
    schema: Schema,
    rows_fraction: float = DEFAULT_ROWS_FRACTION,
    *,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    fine_bins: int | None = None,
    pairs: str = "rule",
    pair_selection: float | str | None = AUTO_SELECTION,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
) -> dp.Measurement:
    r"""A schema release that first counts the rows privately, then plans its map from the count.

    Without a public ``rows`` estimate, the automatic map cannot know whether 2-way marginals
    at 16 bins stand above the noise, nor where a tree of pairs pays. This measurement spends
    ``rows_fraction`` of the budget on a noisy row count (OpenDP's discrete Laplace or Gaussian
    on the table's 1-stable row count), and the rest on the sketch whose map
    (:func:`auto_feature_map`, with the pair rule and tree) is planned from that count as if it
    were the schema's ``rows``. OpenDP's ``make_adaptive_composition`` composes the two, both
    losses fixed before the data is read; the plan reads only the released count, so it is
    post-processing. The sketch records ``privacy["rows_estimate"]``.

    :return: a measurement from the table to the :class:`~opendp_sketch.Sketch`
    :example:

    >>> import polars as pl, numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.tables import table_domain
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> schema = dps.Schema({"x": (0, 1), "c": ["a", "b"]})
    >>> m = make_row_estimated_sketch(table_domain(schema), dp.symmetric_distance(), Budget.of(epsilon=1.0), 1, schema)
    >>> m.map(1) <= 1.0
    True
    >>> rng = np.random.default_rng(0)
    >>> sk = m(pl.DataFrame({"x": rng.random(20_000), "c": rng.choice(["a", "b"], 20_000)}))
    >>> abs(sk.privacy["rows_estimate"]["rows"] - 20_000) < 2_000
    True
    """
    rows_fraction = check_fraction(rows_fraction, "rows_fraction")
    measure = budget.measure
    total = float(budget.d_out) if budget.kind == "epsilon" else _as_rho(budget, d_in)
    counter = make_table_row_count(input_domain, input_metric)

    def count_of(scale: float) -> dp.Measurement:
        noise = dp.m.then_laplace(scale) if budget.kind == "epsilon" else dp.m.then_gaussian(scale)
        return counter >> noise

    count_scale = dp.binary_search_param(count_of, d_in=d_in, d_out=total * rows_fraction, T=float)
    count_loss = count_of(count_scale).map(d_in)
    # the sketch gets what the count left: the largest share whose sum with the count's, as
    # OpenDP adds them (rounding up), is still within the total (so ε = 1 is recorded as 1.0)
    rest = total - count_loss
    for _ in range(64):
        adaptive = dp.c.make_adaptive_composition(
            input_domain, input_metric, measure, d_in=d_in, d_mids=[count_loss, rest]
        )
        if adaptive.map(d_in) <= total:
            break
        rest = math.nextafter(rest, 0.0)
    base = Budget.of(epsilon=rest) if budget.kind == "epsilon" else Budget.of(rho=rest)
    spent = adaptive.map(d_in)
    auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION

    def drive(queryable: Any) -> Sketch:
        noisy = int(queryable(count_of(count_scale)))
        rows = max(1, noisy)  # post-processing of the released count
        planned = Schema({c: schema[c] for c in schema.columns}, rows=rows, targets=schema.targets)
        full, keep = _schema_blocks(
            planned,
            **base.kwargs(),
            count_fraction=count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=fine_bins,
            pairs=pairs,
        )
        selection = pair_selection
        if auto:
            selection = auto_tree(base, full, keep, rows, count_fraction) if pairs == "rule" else None
        if selection is not None:
            meas, _, _ = make_spanning_sketch(
                input_domain,
                input_metric,
                base,
                d_in,
                full,
                keep,
                float(selection),
                one_way_weight=AUTO_ONE_WAY_WEIGHT,
                count_fraction=count_fraction,
                chunk_rows=chunk_rows,
                n_jobs=n_jobs,
            )
        else:
            fm = _kept(full, keep, AUTO_ONE_WAY_WEIGHT)

            def sketch_at(scale: float) -> dp.Measurement:
                return make_private_sketch(
                    input_domain, input_metric, measure, fm, scale, count_fraction, chunk_rows, n_jobs
                )

            meas = sketch_at(search_scale(sketch_at, base, d_in, fm.sensitivity(base.p)))
        sk = queryable(meas)
        sk.privacy["rows_estimate"] = {"rows": rows, "fraction": rows_fraction, "noisy_count": noisy}
        sk.privacy["loss"] = spent
        return sk

    return budget.finish(adaptive >> dp.new_function(drive, TO="ExtrinsicObject"))


def _release_table(
    data: Any,
    schema: Schema,
    feature_map: FeatureMap | None,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    chunk_rows: int,
    n_jobs: int | None,
    progress: Callable[[int, int], None] | None,
    pair_selection: float | str | None = None,
    fine_bins: int | None = None,
    pairs: str = "rule",
    backend: Literal["local", "dask", "spark"] = "local",
    rows_fraction: float | None = None,
) -> Sketch:
    """A table under a public schema: checked by the schema (one pass), then released once.
    ``backend``: where the table lives (any table :func:`~opendp_sketch.tables.as_frame`
    reads, a Dask DataFrame, a Spark DataFrame); everything else is the same."""

    if fine_bins is not None and feature_map is not None:
        raise ValueError("fine_bins shapes the automatic map: drop feature_map= or fine_bins=")
    pairs = _check_pairs(pairs)
    if pairs != "rule" and feature_map is not None:
        raise ValueError("pairs shapes the automatic map: drop feature_map= or pairs=")
    auto = isinstance(pair_selection, str) and pair_selection == AUTO_SELECTION
    if auto:  # decided below from the blocks; a given map, or pairs="all"/"none", has no tree to add
        pair_selection = None
    if pairs == "all" and pair_selection is not None:
        raise ValueError(
            "pairs='all' measures every 2-way marginal, so pair_selection has nothing to choose: "
            "drop one of them"
        )
    if pair_selection is not None:
        if feature_map is not None:
            raise ValueError(
                "pair_selection chooses 2-way marginals of the automatic map: drop feature_map= or pair_selection="
            )
        pair_selection = check_fraction(pair_selection, "pair_selection")
    no_count = rows_fraction is not None and not isinstance(rows_fraction, bool) and rows_fraction == 0
    if rows_fraction is not None and not no_count:
        check_fraction(rows_fraction, "rows_fraction")
    estimate = feature_map is None and schema.rows is None and backend == "local" and not no_count
    if rows_fraction is not None and not no_count and not estimate:
        raise ValueError(
            "rows_fraction counts the rows to plan the automatic map of a table in memory or in files "
            "whose schema has no rows estimate (and no feature_map): drop it here"
        )
    if estimate:
        smallest = auto_feature_map(schema, **budget.kwargs(), pairs="none")  # for the checks only
        check_release_arguments(smallest, contributions, count_fraction)
        frame, domain, rows = _checked_table(data, schema, backend)
        meas = make_row_estimated_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            schema,
            DEFAULT_ROWS_FRACTION if rows_fraction is None else rows_fraction,
            count_fraction=count_fraction,
            fine_bins=fine_bins,
            pairs=pairs,
            pair_selection=AUTO_SELECTION if auto else pair_selection,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        # the count, then the release (and a tree's choices): the data is read twice or more
        return _release_measured(meas, frame, smallest, budget, contributions, rows, progress, 2)
    if feature_map is None:  # auto_feature_map's blocks: the selection also reads the ones it left out
        full, keep = _schema_blocks(
            schema,
            **budget.kwargs(),
            count_fraction=count_fraction,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            fine_bins=fine_bins,
            pairs=pairs,
        )
        if auto and pairs == "rule":
            pair_selection = auto_tree(budget, full, keep, schema.rows, count_fraction)
        fm = _kept(full, keep, AUTO_ONE_WAY_WEIGHT)
    else:
        fm = feature_map
    count_fraction = check_release_arguments(fm, contributions, count_fraction)
    if fm.input_dim != len(schema):
        raise ValueError(f"the feature map expects {fm.input_dim} columns but the schema has {len(schema)}")
    if backend != "local" and pair_selection is None:
        return _release_cluster_table_once(
            data, schema, fm, budget, contributions, count_fraction, n_jobs, backend
        )
    frame, domain, rows = _checked_table(data, schema, backend)
    if pair_selection is not None:
        meas, fm, rounds = make_spanning_sketch(
            domain,
            dp.symmetric_distance(),
            budget,
            contributions,
            full,
            keep,
            pair_selection,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            count_fraction=count_fraction,
            chunk_rows=chunk_rows,
            n_jobs=n_jobs,
        )
        if rounds and schema.rows is not None and not auto:
            ratio = _tree_ratio(budget, fm, full, keep, schema.rows, count_fraction, pair_selection)
            _warn_if_tree_is_noise(ratio, schema.rows)
        # with a choice to make, the data is read twice: the candidates' counts, then the release
        return _release_measured(meas, frame, fm, budget, contributions, rows, progress, 2 if rounds else 1)

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain, dp.symmetric_distance(), budget.measure, fm, scale, count_fraction, chunk_rows, n_jobs
        )

    return _release_streamed(build, frame, fm, budget, contributions, rows, progress)


def _release_cluster_table_once(
    data: Any,
    schema: Schema,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    n_jobs: int | None,
    backend: str,
) -> Sketch:
    """A schema release on a cluster without a choice to make, in **one** pass: the column types
    checked from the collection's schema (nothing computed), the scale searched, then one job
    computing the exact pair and, per column, the nulls, ±inf and unknown labels the schema's
    rules do not cover; those (and an empty table) are refused on the client **before** the
    noise is drawn, as the numeric cluster path refuses NaN (:func:`_release_on_cluster`). The
    pair is 1-stable in the rows, so noising the computed pair is the chained measurement."""
    if backend == "spark":
        from .spark import check_spark_table_types as check_types
        from .spark import make_spark_table_sum_and_count as make_pair
        from .spark import spark_table_domain as table_domain_of
        from .spark import table_sum_and_count_spark as compute
    else:
        from .dask import check_dask_table_types as check_types
        from .dask import dask_table_domain as table_domain_of
        from .dask import make_dask_table_sum_and_count as make_pair
        from .dask import table_sum_and_count_dask as compute
    check_types(data, schema)
    domain = table_domain_of(schema)
    pair = make_pair(domain, dp.symmetric_distance(), feature_map, n_jobs=n_jobs)

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, Any] = {}
    value = compute(data, domain, feature_map, n_jobs, found)
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    schema.refuse(found["problems"])
    warn_if_noise_swamps(budget, contributions, feature_map, value[1])
    return release_once(meas, value, budget, contributions)


def _checked_table(data: Any, schema: Schema, backend: str) -> tuple[Any, dp.Domain, int]:
    """The curator's side of a schema release, before any measurement is built: the table
    checked by the schema (dtypes, then one pass refusing nulls, ±inf and unknown labels the
    rules do not cover), its domain and its row count (never released)."""
    if backend == "spark":
        from .spark import check_spark_table, spark_table_domain

        return data, spark_table_domain(schema), check_spark_table(data, schema)
    if backend == "dask":
        from .dask import check_dask_table, dask_table_domain

        return data, dask_table_domain(schema), check_dask_table(data, schema)
    import polars as pl

    from .tables import as_frame, table_domain

    # the curator reads the table as the measurement will (a CSV file line by line, as text)
    frame = as_frame(data, schema.columns, text_csv=True)
    if isinstance(data, (str, os.PathLike)) and str(data).lower().endswith(".csv"):
        from .streaming import csv_quoted_lines

        split = csv_quoted_lines(data)
        if split:
            raise ValueError(
                f"{split} line{'s' if split != 1 else ''} of the CSV file {'hold' if split != 1 else 'holds'} a "
                "quoted field with a separator or a line break; a "
                "release reads a CSV file one row per line, so save the table as Parquet (for example "
                "pl.read_csv(path).write_parquet(...)) and release that"
            )
    try:
        if frame.head(1).collect().height == 0:  # a header-only file
            raise ValueError("data is empty (0 rows)")
        schema.check(frame)  # the curator's side: dtypes, then nulls/inf/labels the rules do not cover
        rows = int(frame.select(pl.len()).collect().item())
    except pl.exceptions.PolarsError as e:  # the message may quote file contents: show its type only
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    return frame, table_domain(schema), rows


def _tree_ratio(
    budget: Budget,
    fm: FeatureMap,
    full: Marginals,
    keep: Sequence[int],
    rows: int,
    count_fraction: float,
    selection_fraction: float,
) -> float:
    """Noise std's of ``rows`` in an average cell of the candidate pairs (the 2-way blocks of
    ``full`` not in ``keep``), for the released map ``fm`` (a tree's shape): public inputs only."""
    cells = [math.prod(b.shape) for i, b in enumerate(full.blocks) if len(b.subset) == 2 and i not in keep]
    share = (1 - count_fraction) * (1 - selection_fraction)
    std = budget.coordinate_std(fm.sensitivity(1), fm.sensitivity(2), share)
    return rows * len(cells) / sum(cells) / std


def auto_tree(
    budget: Budget,
    full: Marginals,
    keep: Sequence[int],
    rows: int | None,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
) -> float | None:
    """``release_sketch(pair_selection="auto")``: the share of the budget to spend on a tree of
    2-way marginals (:func:`make_spanning_sketch`), or ``None`` for none.

    A tree is chosen when the public rule left the columns in more than one connected piece and
    an average cell of the candidate pairs holds at least ``AUTO_TREE_SNR = 1.2`` noise standard
    deviations of the schema's ``rows`` in the released map (the 1-way blocks, the rule's pairs
    and the tree's pairs; every block takes one cell per row, so which pairs win does not change
    the noise). Everything read is public: the budget, the blocks and the row estimate, so
    neighbouring tables get the same choice. Measured on three real tables
    (``benchmarks/results/real_tables_selection*.md``): the tree lowered 2- and 3-column counts by
    25–50 % from a ratio of 1.6 up and raised every error at 0.87 and below.

    :param budget: the release's budget
    :param full: every candidate block (:func:`auto_marginals` before the rule)
    :param keep: the blocks the rule keeps
    :param rows: the schema's public row estimate (``None``: no tree)
    :param count_fraction: the count's share of the budget
    :example:

    >>> from opendp_sketch.release import Budget, _auto_blocks, auto_tree
    >>> box = ([0.0] * 6, [1.0] * 6)
    >>> def tree(e):
    ...     full, keep = _auto_blocks(box, categorical=None, levels=None, fine_bins=None, rows=40_000,
    ...         epsilon=e, delta=None, rho=None, count_fraction=0.02, one_way_weight=3.0, bound_cells=None)
    ...     return auto_tree(Budget.of(epsilon=e), full, keep, 40_000)
    >>> [tree(e) for e in (0.1, 1.0, 10.0)]   # too noisy / columns apart / every pair kept
    [None, 0.1, None]
    """
    if rows is None:
        return None
    candidates, rounds = _tree_rounds(full, keep)
    if rounds == 0:
        return None
    shape = _weighted(full.take(sorted([*keep, *candidates[:rounds]])), AUTO_ONE_WAY_WEIGHT)
    ratio = _tree_ratio(budget, shape, full, keep, rows, count_fraction, DEFAULT_SELECTION_FRACTION)
    return DEFAULT_SELECTION_FRACTION if ratio >= AUTO_TREE_SNR else None


def _warn_if_tree_is_noise(ratio: float, rows: int) -> None:
    """Curator side, public inputs only (:func:`_tree_ratio` of the budget, the map and the
    schema's row estimate): warn when the pairs a tree would add are mostly noise at this budget."""
    if ratio < AUTO_TREE_SNR:
        import warnings

        warnings.warn(
            f"pair_selection: at this budget an average cell of the candidate 2-way marginals holds {ratio:.2g} "
            f"noise std's of the schema's {rows} rows (below {AUTO_TREE_SNR}): the tree would likely cost more "
            "accuracy than it adds (benchmarks/results/real_tables_selection*.md). Consider pair_selection=None "
            "or a larger budget",
            stacklevel=4,
        )


def _release_streamed(
    build: Callable[[float], dp.Measurement],
    frame: Any,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    rows: int,
    progress: Callable[[int, int], None] | None,
) -> Sketch:
    """Search the scale, warn if the noise would swamp ``rows`` rows, then release the streamed
    ``frame`` once, reporting ``progress(rows_done, rows)`` after each batch."""
    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    return _release_measured(meas, frame, feature_map, budget, contributions, rows, progress)


def _release_measured(
    meas: dp.Measurement,
    frame: Any,
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    rows: int,
    progress: Callable[[int, int], None] | None,
    passes: int = 1,
) -> Sketch:
    """Warn if the noise would swamp ``rows`` rows, then run ``meas`` on the streamed ``frame``
    once, reporting ``progress(rows_done, passes · rows)`` after each batch of its ``passes``."""
    warn_if_noise_swamps(budget, contributions, feature_map, rows)
    if progress is None:
        return release_once(meas, frame, budget, contributions)
    done = 0

    def advance(batch: int) -> None:
        nonlocal done
        done += batch
        progress(done, passes * rows)

    with report_progress(advance):
        return release_once(meas, frame, budget, contributions)


def _release_frame(
    frame: Any,
    feature_map: FeatureMap,
    bounds: Any,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    impute: Any,
    column_names: Sequence[str] | None,
    chunk_rows: int,
    n_jobs: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> Sketch:
    """Streamed release of a LazyFrame: validated by streaming queries first, released once."""
    import polars as pl

    try:
        schema = frame.collect_schema()
    except pl.exceptions.PolarsError as e:  # the message may quote file contents: show its type only
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    names = list(column_names) if column_names is not None else list(schema.names())
    missing = [c for c in names if c not in schema]
    if missing:
        raise ValueError(f"columns {missing} are not in the data (columns: {list(schema.names())})")
    bad = [c for c in names if not schema[c].is_numeric()]
    if bad:
        # a header-only CSV has text-typed columns: say what is really wrong
        if frame.head(1).collect().height == 0:
            raise ValueError("data is empty (0 rows)")
        raise ValueError(f"columns {bad} must be numeric")
    d = feature_map.input_dim
    if len(names) != d:
        raise ValueError(f"data has {len(names)} columns but the feature map expects {d}")
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = frame_box_domain((lo, hi), names, impute=impute)  # checks impute before any pass
    try:  # one full pass before releasing: unreadable rows are refused here, not mid-release
        rows = int(frame.select(pl.len()).collect().item())
        nulls, infs = bad_value_counts(frame, names)
    except pl.exceptions.PolarsError as e:
        raise ValueError(f"the data could not be read ({type(e).__name__})") from None
    if rows == 0:
        raise ValueError("data is empty (0 rows)")
    if impute is None and any(nulls.values()):
        raise ValueError(
            f"columns {[c for c, v in nulls.items() if v]} contain null or NaN values; clean them or pass impute=<public value>"
        )
    if any(infs.values()):
        raise ValueError(f"columns {[c for c, v in infs.items() if v]} contain infinite values")

    def build(scale: float) -> dp.Measurement:
        return make_private_sketch(
            domain,
            dp.symmetric_distance(),
            budget.measure,
            feature_map,
            scale,
            count_fraction,
            chunk_rows,
            n_jobs,
        )

    return _release_streamed(build, frame, feature_map, budget, contributions, rows, progress)


def release_dask_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    column_names: Sequence[str] | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> Sketch:
    r""":func:`release_sketch` for a Dask array or DataFrame, in one pass over the cluster.

    Same budgets (``epsilon``; ``epsilon`` + ``delta``; ``rho``), same noise, same scale search,
    and the sketch equals in distribution the one ``release_sketch`` gives on the same rows.
    The collection's structure (type, columns, dtypes, bounds, budget) is checked before
    anything runs. The single pass computes the exact ``(sum, count)`` pair and whether the data
    holds NaN (without ``impute``) or ``±inf``; such data is refused on the client **before**
    the noise is drawn. A refused call releases nothing, and no error shows a data value.
    Runs on the current Dask scheduler (a ``distributed.Client`` if one is active).

    **With a public** ``schema``, a Dask DataFrame of any column kinds (numbers, integers, text
    labels, booleans, nulls) is released as :func:`release_sketch` releases a table with a
    schema: the automatic map (or ``feature_map`` on the encoded columns), its bin rule and,
    where it pays, its private tree of pairs (``pair_selection``, ``fine_bins``, ``pairs``).
    Each worker encodes its partition with the schema. One pass computes the exact sum and,
    per column, the nulls, ``±inf`` and unknown labels the schema's rules do not cover, refused
    on the client before the noise is drawn (with a tree of pairs: a check pass, then the
    candidates' counts and the release, :func:`~opendp_sketch.dask.check_dask_table`).

    :param data: ``dask.array.Array`` ``(n, d)`` or ``dask.dataframe.DataFrame``
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (a :class:`~opendp_sketch.Schema`, its dict, or a
        JSON path); the sketch records it, so every estimator answers in the table's units
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param column_names: DataFrame columns to use (default: all), or names to record (arrays)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing NaN; without it NaN/inf are refused
    :param n_jobs: threads inside each partition task
    :param pair_selection: with a ``schema``: as in :func:`release_sketch`
    :param fine_bins: with a ``schema``: as in :func:`release_sketch`
    :param pairs: with a ``schema``: as in :func:`release_sketch`
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    :example:

    >>> import dask, dask.array as da, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> X = da.random.default_rng(0).uniform(0, 1, size=(1000, 2), chunks=(300, 2))
    >>> with dask.config.set(scheduler="synchronous"):
    ...     sk = dps.release_dask_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=2),
    ...                                  bounds=(0, 1), epsilon=1.0)
    >>> sk.privacy["epsilon"] <= 1.0, sk.sum.shape
    (True, (8,))

    A mixed-type Dask DataFrame under a schema, answered in its units and labels:

    >>> import numpy as np, pandas as pd, dask.dataframe as dd
    >>> rng = np.random.default_rng(1)
    >>> pdf = pd.DataFrame({"age": rng.integers(18, 90, 4000),
    ...                     "cut": rng.choice(["Fair", "Ideal"], 4000, p=[0.3, 0.7])})
    >>> schema = dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["Fair", "Ideal"]},
    ...                     rows=4000)
    >>> with dask.config.set(scheduler="synchronous"):
    ...     sk = dps.release_dask_sketch(dd.from_pandas(pdf, npartitions=3), schema=schema, epsilon=1.0)
    >>> shares = dps.M2M(sk, seed=0).shares("cut")
    >>> shares["cut"].to_list(), 0.6 < shares["share"][1] < 0.8
    (['Fair', 'Ideal'], True)
    """
    from .dask import check_dask_collection, dask_box_domain, make_dask_sum_and_count, sum_and_count_dask

    if schema is not None:
        _no_box_arguments(bounds, impute, column_names)
        check_chunking(DEFAULT_CHUNK_ROWS, n_jobs)
        budget = Budget.of(epsilon, delta, rho)
        return _release_table(
            data, as_schema(schema), feature_map, budget, contributions, count_fraction, DEFAULT_CHUNK_ROWS,
            n_jobs, None, pair_selection, fine_bins, pairs, backend="dask",
        )  # fmt: skip
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)

    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    d = feature_map.input_dim
    names = check_dask_collection(data, d, column_names)
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = dask_box_domain((lo, hi), num_columns=d, column_names=names, nan=impute is not None, inf=False)
    pair = make_dask_sum_and_count(domain, dp.symmetric_distance(), feature_map, impute=impute, n_jobs=n_jobs)

    def compute(found: dict[str, bool]) -> tuple[np.ndarray, int]:
        return sum_and_count_dask(data, domain, feature_map, impute, n_jobs, found)

    return _release_on_cluster(pair, compute, feature_map, budget, contributions, count_fraction, impute)


def release_spark_sketch(
    data: Any,
    feature_map: FeatureMap | None = None,
    bounds: Any = None,
    *,
    schema: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    column_names: Sequence[str] | None = None,
    contributions: int = 1,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    impute: float | Sequence[float] | None = None,
    n_jobs: int | None = 1,
    pair_selection: float | Literal["auto"] | None = "auto",
    fine_bins: int | None = None,
    pairs: PairsRule = "rule",
) -> Sketch:
    r""":func:`release_sketch` for a Spark DataFrame, in one Spark job.

    Same budgets (``epsilon``; ``epsilon`` + ``delta``; ``rho``), same noise, same scale search,
    and the sketch equals in distribution the one ``release_sketch`` gives on the same rows.
    Everything is checked on the driver from the DataFrame's schema before any job runs: the
    type, the columns (present, numeric or boolean, as many as the map expects), the bounds,
    ``impute`` and the budget. The single job computes the exact ``(sum, count)`` pair and
    whether the data holds null/NaN (without ``impute``) or ``±inf``; such data, and an empty
    DataFrame, are refused on the driver **before** the noise is drawn. A refused call releases
    nothing, and no error shows a data value.

    **With a public** ``schema``, a Spark DataFrame of any column kinds (numbers, integers,
    string labels, booleans, nulls) is released as :func:`release_sketch` releases a table with
    a schema: the automatic map (or ``feature_map`` on the encoded columns), its bin rule and,
    where it pays, its private tree of pairs (``pair_selection``, ``fine_bins``, ``pairs``).
    Each executor reads its partition as Arrow batches and encodes them with the schema (sent as
    JSON). One job computes the exact sum and, per column, the nulls, ``±inf`` and unknown labels
    the schema's rules do not cover, refused on the driver before the noise is drawn (with a
    tree of pairs: a check job, :func:`~opendp_sketch.spark.check_spark_table`, then the
    candidates' counts and the release). The sketch records the schema, so every estimator
    answers in the table's units and labels.

    :param data: a ``pyspark.sql.DataFrame``
    :param feature_map: the public feature map (``ByClass`` expects the label as last column);
        with a ``schema`` optional (chosen from it)
    :param bounds: public ``(lower, upper)`` per column; values outside are clipped (not with a
        ``schema``, which holds them)
    :param schema: the public table schema (a :class:`~opendp_sketch.Schema`, its dict, or a
        JSON path)
    :param epsilon: ε
    :param delta: δ (switches to Gaussian noise)
    :param rho: ρ for zCDP (Gaussian noise)
    :param column_names: the columns to use, in the map's order (default: all columns)
    :param contributions: rows one individual may contribute (the privacy unit)
    :param count_fraction: share of the budget for the count
    :param impute: public value(s) replacing null/NaN; without it null/NaN/inf are refused
    :param n_jobs: threads inside each partition task
    :param pair_selection: with a ``schema``: as in :func:`release_sketch`
    :param fine_bins: with a ``schema``: as in :func:`release_sketch`
    :param pairs: with a ``schema``: as in :func:`release_sketch`
    :return: the released :class:`~opendp_sketch.Sketch`
    :raises ValueError: on bad parameters or data (nothing is released)
    """
    from .spark import check_spark_frame, make_spark_sum_and_count, spark_box_domain, sum_and_count_spark

    if schema is not None:
        _no_box_arguments(bounds, impute, column_names)
        check_chunking(DEFAULT_CHUNK_ROWS, n_jobs)
        budget = Budget.of(epsilon, delta, rho)
        return _release_table(
            data, as_schema(schema), feature_map, budget, contributions, count_fraction, DEFAULT_CHUNK_ROWS,
            n_jobs, None, pair_selection, fine_bins, pairs, backend="spark",
        )  # fmt: skip
    feature_map = _map_and_bounds(feature_map, bounds, pair_selection, fine_bins, pairs)

    count_fraction = check_release_arguments(feature_map, contributions, count_fraction)
    budget = Budget.of(epsilon, delta, rho)
    names = check_spark_frame(data, feature_map.input_dim, column_names)
    lo, hi = box_data_bounds(bounds, feature_map)
    domain = spark_box_domain((lo, hi), column_names=names, nan=impute is not None, inf=False)
    pair = make_spark_sum_and_count(
        domain, dp.symmetric_distance(), feature_map, impute=impute, n_jobs=n_jobs
    )

    def compute(found: dict[str, bool]) -> tuple[np.ndarray, int]:
        return sum_and_count_spark(data, domain, feature_map, impute, n_jobs, found)

    return _release_on_cluster(pair, compute, feature_map, budget, contributions, count_fraction, impute)


def _release_on_cluster(
    pair: dp.Transformation,
    compute: Callable[[dict[str, bool]], tuple[np.ndarray, int]],
    feature_map: FeatureMap,
    budget: Budget,
    contributions: int,
    count_fraction: float,
    impute: Any,
) -> Sketch:
    """The one-call release on a cluster: search the scale (every parameter is checked before
    the data is touched), run the one pass, refuse null/NaN without ``impute``, ``±inf`` and an
    empty table on the client before the noise is drawn, then noise the computed pair."""

    def build(scale: float) -> dp.Measurement:
        return make_noisy_sketch(pair, budget.measure, feature_map, scale, count_fraction)

    meas = search_measurement(build, budget, contributions, feature_map.sensitivity(budget.p))
    found: dict[str, bool] = {}
    value = compute(found)
    if found["nan"] and impute is None:
        raise ValueError("data contains null or NaN values; clean them or pass impute=<public value>")
    if found["inf"]:
        raise ValueError("data contains infinite values; clean them (impute replaces null/NaN only)")
    if value[1] == 0:
        raise ValueError("data is empty (0 rows)")
    # the pair is 1-stable in the rows: noising the computed pair is the chained measurement
    return release_once(meas, value, budget, contributions)


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
    :param projection: an optional :class:`~opendp_sketch.projections.JLProjection` applied after
        clipping (then ``plan.dim`` must equal its ``output_dim``)
    :param count_fraction: share of each sketch's loss spent on its count (default as
        :func:`~opendp_sketch.release_sketch`)
    :return: the ``J`` sketches, in the plan's order
    :raises ValueError: on bad parameters or data (nothing is released)
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
        from .projections import JLProjection

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
        from .projections import then_jl_projection

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
