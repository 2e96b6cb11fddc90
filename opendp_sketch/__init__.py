"""opendp_sketch: release a dataset once as a differentially private sketch, then analyse it freely.

Data flow, one place each: **schema** (:mod:`.schema`, :mod:`.columns`, :mod:`.readers`) →
**plan** (:mod:`.plan`, :mod:`.adaptive`, :mod:`.budget`) → **backends** (:mod:`.backends`:
numpy, Polars and files, tables, Dask, Spark; one protocol, one dispatch on the input domain)
→ **one noisy release** (:mod:`.measurements`, :mod:`.release`) → :class:`.Sketch` →
**estimators** (:mod:`.estimators`; OpenDP post-processing wrappers in :mod:`.postprocessors`).

Importing the package registers ``box_clip``, ``feature_sum``, ``jl_projection``,
``private_sketch`` and ``m2m`` with ``dp.register`` so they can be used in ``dp.Context`` queries. The plugin API needs the OpenDP
features ``"contrib"`` and ``"honest-but-curious"``::

    import opendp.prelude as dp
    dp.enable_features("contrib", "honest-but-curious")
"""

from __future__ import annotations

from typing import Any

from . import (
    backends,
    report,  # noqa: F401 - registers the writer of Sketch.report (dps.report.write_report)
)
from .backends import dask as _dask_backend  # noqa: F401 - registers the Dask backend
from .backends import memory as _memory_backend  # noqa: F401 - registers the numpy backend
from .backends import projections as _projections  # noqa: F401 - the JL projection (numpy rows)
from .backends import spark as _spark_backend  # noqa: F401 - registers the Spark backend (pyspark loads on use)
from .backends import streaming as _streaming_backend  # noqa: F401 - registers the Polars frame backend
from .backends import tables as _tables_backend  # noqa: F401 - registers the table backend
from .backends.domains import box_domain
from .backends.memory import make_box_clip, then_box_clip
from .backends.projections import JLProjection
from .backends.protocol import make_feature_sum, make_sum_and_count, then_feature_sum
from .budget import Budget
from .context import register as _register_context
from .context import release_sketch_in_context
from .estimators import (
    KDE,
    M2M,
    CompressiveGMM,
    CompressiveKMeans,
    CompressivePCA,
    KDEClassifier,
    L1DistanceSum,
    NearestMeanClassifier,
    RACELinearRegression,
    SketchLinearRegression,
    SketchLogisticRegression,
    SquaredL2DistanceSum,
    SyntheticDecoder,
)
from .estimators.smooth import SmoothKDE, SmoothKernelPlan
from .features import (
    RACE,
    RFF,
    ByClass,
    Composite,
    DyadicTrees,
    FeatureMap,
    Histogram,
    MarginalTables,
    Moments,
    QuantizedRFF,
    RandomQuadratic,
    SubsampledRFF,
)
from .measurements import make_private_sketch, then_private_sketch
from .plan import Plan, auto_feature_map
from .planning import suggest_sketch_size
from .postprocessors import make_m2m, then_m2m
from .release import release_sketch
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
from .smooth_release import release_smooth_sketches

__version__ = "0.1.0"

__all__ = [
    # feature maps
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
    "MarginalTables",
    "Composite",
    # schema and plan
    "Schema",
    "Numeric",
    "Date",
    "Datetime",
    "Categorical",
    "Boolean",
    "auto_feature_map",
    "Plan",
    "suggest_sketch_size",
    "Budget",
    # backends: OpenDP-style constructors, one dispatch on the input domain
    "box_domain",
    "make_box_clip",
    "then_box_clip",
    "make_feature_sum",
    "then_feature_sum",
    "make_sum_and_count",
    "make_private_sketch",
    "then_private_sketch",
    # releases
    "release_sketch",
    "release_sketch_in_context",
    "release_smooth_sketches",
    "JLProjection",
    "Sketch",
    "SketchFormatError",
    "SketchSignatureError",
    "Session",
    "PrivacyBudgetError",
    "ReleaseFailedError",
    "LedgerError",
    "LedgerBusyError",
    "verify_ledger",
    # estimators (post-processing)
    "M2M",
    "SyntheticDecoder",
    "SketchLogisticRegression",
    "SketchLinearRegression",
    "KDE",
    "KDEClassifier",
    "NearestMeanClassifier",
    "L1DistanceSum",
    "SquaredL2DistanceSum",
    "CompressiveKMeans",
    "CompressiveGMM",
    "CompressivePCA",
    "RACELinearRegression",
    "SmoothKDE",
    "SmoothKernelPlan",
    "make_m2m",
    "then_m2m",
]


def __getattr__(name: str) -> Any:
    """Old names (moved or merged by the redesign) resolve for one release, with a warning."""
    from ._deprecated import MOVED, moved

    if name in MOVED:
        return moved(name)
    raise AttributeError(f"module 'opendp_sketch' has no attribute {name!r}")


_register_context()

# the modules the redesign moved into backends/, importable at their old paths for one release
for _old, _new in (
    ("domains", backends.domains),
    ("transformations", _memory_backend),
    ("streaming", _streaming_backend),
    ("tables", _tables_backend),
    ("dask", _dask_backend),
    ("spark", _spark_backend),
    ("projections", backends.projections),
):
    __import__("sys").modules.setdefault(f"{__name__}.{_old}", _new)
