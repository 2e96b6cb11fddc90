"""Names the redesign moved or merged (issue 38), kept one release as deprecated aliases.

``opendp_sketch.<old name>`` still works and warns (``DeprecationWarning``) with the name to
use. The per-backend constructors became one dispatch on the input domain's descriptor
(:func:`~opendp_sketch.make_sum_and_count`, :func:`~opendp_sketch.make_feature_sum`,
:func:`~opendp_sketch.make_private_sketch`), and :func:`~opendp_sketch.release_sketch`
recognises Dask and Spark collections as it recognises a LazyFrame.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from typing import Any

import opendp.prelude as dp
from opendp.extras._utilities import to_then

from .budget import DEFAULT_COUNT_FRACTION
from .features.base import FeatureMap
from .measurements import make_private_sketch

__all__ = ["MOVED", "moved", "make_private_dask_sketch", "make_private_spark_sketch"]


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
    """Deprecated: ``make_private_sketch(dask_domain, ..., n_jobs=, impute=)``."""
    return make_private_sketch(
        input_domain,
        input_metric,
        output_measure,
        feature_map,
        scale,
        count_fraction,
        n_jobs=n_jobs,
        impute=impute,
    )


make_private_spark_sketch = make_private_dask_sketch

#: old top-level name → (module, name) it now is; the module is imported on first use
MOVED: dict[str, tuple[str, str]] = {
    "release_dask_sketch": ("opendp_sketch.release", "release_sketch"),
    "release_spark_sketch": ("opendp_sketch.release", "release_sketch"),
    "make_private_dask_sketch": ("opendp_sketch._deprecated", "make_private_dask_sketch"),
    "make_private_spark_sketch": ("opendp_sketch._deprecated", "make_private_spark_sketch"),
    "then_private_dask_sketch": ("opendp_sketch._deprecated", "then_private_dask_sketch"),
    "then_private_spark_sketch": ("opendp_sketch._deprecated", "then_private_spark_sketch"),
    "make_dask_sum_and_count": ("opendp_sketch.backends.dask", "make_dask_sum_and_count"),
    "make_dask_feature_sum": ("opendp_sketch.backends.dask", "make_dask_feature_sum"),
    "then_dask_feature_sum": ("opendp_sketch.backends.dask", "then_dask_feature_sum"),
    "make_dask_table_sum_and_count": ("opendp_sketch.backends.dask", "make_dask_table_sum_and_count"),
    "dask_box_domain": ("opendp_sketch.backends.dask", "dask_box_domain"),
    "dask_table_domain": ("opendp_sketch.backends.dask", "dask_table_domain"),
    "DaskBoxDomain": ("opendp_sketch.backends.domains", "DaskBoxDomain"),
    "make_spark_sum_and_count": ("opendp_sketch.backends.spark", "make_spark_sum_and_count"),
    "make_spark_feature_sum": ("opendp_sketch.backends.spark", "make_spark_feature_sum"),
    "then_spark_feature_sum": ("opendp_sketch.backends.spark", "then_spark_feature_sum"),
    "make_spark_table_sum_and_count": ("opendp_sketch.backends.spark", "make_spark_table_sum_and_count"),
    "spark_box_domain": ("opendp_sketch.backends.spark", "spark_box_domain"),
    "spark_table_domain": ("opendp_sketch.backends.spark", "spark_table_domain"),
    "SparkBoxDomain": ("opendp_sketch.backends.domains", "SparkBoxDomain"),
    "frame_box_domain": ("opendp_sketch.backends.streaming", "frame_box_domain"),
    "FrameBoxDomain": ("opendp_sketch.backends.domains", "FrameBoxDomain"),
    "make_frame_feature_sum": ("opendp_sketch.backends.streaming", "make_frame_feature_sum"),
    "make_frame_sum_and_count": ("opendp_sketch.backends.streaming", "make_frame_sum_and_count"),
    "make_frame_row_count": ("opendp_sketch.backends.streaming", "make_frame_row_count"),
    "make_lazyframe_to_frame_box": ("opendp_sketch.backends.streaming", "make_lazyframe_to_frame_box"),
    "NPArray2BoxDomain": ("opendp_sketch.backends.domains", "NPArray2BoxDomain"),
    "make_row_count": ("opendp_sketch.backends.memory", "make_row_count"),
    "make_jl_projection": ("opendp_sketch.backends.projections", "make_jl_projection"),
    "then_jl_projection": ("opendp_sketch.backends.projections", "then_jl_projection"),
    "smooth_kernel": ("opendp_sketch.estimators.smooth", "smooth_kernel"),
    "smooth_kernel_terms": ("opendp_sketch.estimators.smooth", "smooth_kernel_terms"),
    "exp_sum_error_bound": ("opendp_sketch.estimators.smooth", "exp_sum_error_bound"),
    "compressive_feature_map": ("opendp_sketch.estimators", "compressive_feature_map"),
    "compressive_pca": ("opendp_sketch.estimators", "compressive_pca"),
    "compressive_kmeans": ("opendp_sketch.estimators", "compressive_kmeans"),
    "feature_map_from_dict": ("opendp_sketch.features", "feature_map_from_dict"),
    "write_report": ("opendp_sketch.report", "write_report"),
    "SketchSizePlan": ("opendp_sketch.planning", "SketchSizePlan"),
    "noise_to_signal": ("opendp_sketch.planning", "noise_to_signal"),
    "FailedEstimate": ("opendp_sketch.postprocessors", "FailedEstimate"),
    "Interval": ("opendp_sketch.estimators", "Interval"),
    # renamed: OpenDP 0.16 has dp.mbi.Marginals
    "Marginals": ("opendp_sketch.features.marginals", "MarginalTables"),
    # renamed: scikit-learn's LogisticRegression fits rows; this one fits a sketch
    "LogisticRegression": ("opendp_sketch.estimators.learn", "SketchLogisticRegression"),
}

then_private_dask_sketch = to_then(make_private_dask_sketch)
then_private_spark_sketch = then_private_dask_sketch


def moved(name: str) -> Any:
    """The object an old top-level name now is, with a ``DeprecationWarning`` naming it."""
    module, attr = MOVED[name]
    if module == "opendp_sketch.release" or module == "opendp_sketch._deprecated":
        hint = "opendp_sketch.release_sketch (it recognises Dask and Spark collections)"
        if name.startswith(("make_private", "then_private")):
            hint = "opendp_sketch.make_private_sketch (it dispatches on the input domain)"
    else:
        hint = f"{module}.{attr}"
    warnings.warn(
        f"opendp_sketch.{name} is deprecated and goes in the next release: use {hint}",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module(module), attr)
