"""opendp_sketch: release a dataset once as a differentially private sketch, then analyse it freely.

Data flow: feature maps (:mod:`.features`) → transformations (:mod:`.transformations`) →
measurements (:mod:`.measurements`) → :class:`.Sketch` (:mod:`.sketch`) → estimators
(:mod:`.estimators`; OpenDP post-processing wrappers in :mod:`.postprocessors`).

Importing the package registers ``box_clip``, ``feature_sum``, ``jl_projection``,
``private_sketch`` and ``m2m`` with ``dp.register`` so they can be used in ``dp.Context`` queries. The plugin API needs the OpenDP
features ``"contrib"`` and ``"honest-but-curious"``::

    import opendp.prelude as dp
    dp.enable_features("contrib", "honest-but-curious")
"""

from __future__ import annotations

from .context import register as _register_context
from .context import release_sketch_in_context
from .dask import (
    DaskBoxDomain,
    dask_box_domain,
    dask_table_domain,
    make_dask_feature_sum,
    make_dask_sum_and_count,
    make_dask_table_sum_and_count,
    then_dask_feature_sum,
)
from .domains import NPArray2BoxDomain, box_domain
from .estimators import (
    KDE,
    M2M,
    CompressiveGMM,
    CompressiveKMeans,
    CompressivePCA,
    Interval,
    KDEClassifier,
    L1DistanceSum,
    LogisticRegression,
    NearestMeanClassifier,
    RACELinearRegression,
    SketchLinearRegression,
    SquaredL2DistanceSum,
    SyntheticDecoder,
    compressive_feature_map,
    compressive_kmeans,
    compressive_pca,
)
from .estimators.smooth import (
    SmoothKDE,
    SmoothKernelPlan,
    exp_sum_error_bound,
    smooth_kernel,
    smooth_kernel_terms,
)
from .features import (
    RACE,
    RFF,
    ByClass,
    Composite,
    DyadicTrees,
    FeatureMap,
    Histogram,
    Marginals,
    Moments,
    QuantizedRFF,
    RandomQuadratic,
    SubsampledRFF,
    feature_map_from_dict,
)
from .planning import SketchSizePlan, noise_to_signal, suggest_sketch_size
from .postprocessors import FailedEstimate, make_m2m, then_m2m
from .projections import JLProjection, make_jl_projection, then_jl_projection
from .release import (
    Budget,
    auto_feature_map,
    make_private_dask_sketch,
    make_private_sketch,
    make_private_spark_sketch,
    release_dask_sketch,
    release_sketch,
    release_smooth_sketches,
    release_spark_sketch,
    then_private_dask_sketch,
    then_private_sketch,
    then_private_spark_sketch,
)
from .report import write_report
from .schema import Boolean, Categorical, Date, Datetime, Numeric, Schema
from .session import (
    LedgerBusyError,
    LedgerError,
    PrivacyBudgetError,
    ReleaseFailedError,
    Session,
    verify_ledger,
)
from .sketch import Sketch, SketchFormatError, SketchSignatureError
from .spark import (  # pyspark itself is imported only when a Spark function runs
    SparkBoxDomain,
    make_spark_feature_sum,
    make_spark_sum_and_count,
    make_spark_table_sum_and_count,
    spark_box_domain,
    spark_table_domain,
    then_spark_feature_sum,
)
from .streaming import (
    FrameBoxDomain,
    frame_box_domain,
    make_frame_feature_sum,
    make_frame_row_count,
    make_frame_sum_and_count,
    make_lazyframe_to_frame_box,
)
from .transformations import (
    make_box_clip,
    make_feature_sum,
    make_row_count,
    then_box_clip,
    then_feature_sum,
)

__version__ = "0.1.0"

__all__ = [
    "FeatureMap",
    "RFF",
    "QuantizedRFF",
    "SubsampledRFF",
    "RACE",
    "Histogram",
    "DyadicTrees",
    "Moments",
    "RandomQuadratic",
    "ByClass",
    "Marginals",
    "Composite",
    "feature_map_from_dict",
    "box_domain",
    "NPArray2BoxDomain",
    "make_box_clip",
    "then_box_clip",
    "make_feature_sum",
    "then_feature_sum",
    "make_row_count",
    "make_private_sketch",
    "then_private_sketch",
    "release_sketch",
    "Sketch",
    "Schema",
    "write_report",
    "Numeric",
    "Date",
    "Datetime",
    "Categorical",
    "Boolean",
    "auto_feature_map",
    "SketchFormatError",
    "SketchSignatureError",
    "Session",
    "PrivacyBudgetError",
    "ReleaseFailedError",
    "LedgerError",
    "LedgerBusyError",
    "verify_ledger",
    "suggest_sketch_size",
    "SketchSizePlan",
    "noise_to_signal",
    "M2M",
    "Interval",
    "SyntheticDecoder",
    "LogisticRegression",
    "SketchLinearRegression",
    "KDE",
    "KDEClassifier",
    "NearestMeanClassifier",
    "L1DistanceSum",
    "SquaredL2DistanceSum",
    "CompressiveKMeans",
    "CompressiveGMM",
    "compressive_kmeans",
    "compressive_feature_map",
    "CompressivePCA",
    "compressive_pca",
    "RACELinearRegression",
    "make_m2m",
    "FailedEstimate",
    "then_m2m",
    "dask_box_domain",
    "dask_table_domain",
    "make_dask_table_sum_and_count",
    "DaskBoxDomain",
    "make_dask_sum_and_count",
    "make_dask_feature_sum",
    "then_dask_feature_sum",
    "make_private_dask_sketch",
    "then_private_dask_sketch",
    "release_dask_sketch",
    "spark_box_domain",
    "spark_table_domain",
    "make_spark_table_sum_and_count",
    "SparkBoxDomain",
    "make_spark_sum_and_count",
    "make_spark_feature_sum",
    "then_spark_feature_sum",
    "make_private_spark_sketch",
    "then_private_spark_sketch",
    "release_spark_sketch",
    "frame_box_domain",
    "FrameBoxDomain",
    "make_frame_feature_sum",
    "make_frame_row_count",
    "make_lazyframe_to_frame_box",
    "make_frame_sum_and_count",
    "Budget",
    "release_sketch_in_context",
    "JLProjection",
    "make_jl_projection",
    "then_jl_projection",
    "SmoothKDE",
    "SmoothKernelPlan",
    "release_smooth_sketches",
    "smooth_kernel",
    "smooth_kernel_terms",
    "exp_sum_error_bound",
]


_register_context()
