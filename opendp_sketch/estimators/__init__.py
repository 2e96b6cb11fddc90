"""Post-processors: everything here reads a released :class:`~opendp_sketch.Sketch` and public draws."""

from .classify import KDEClassifier, NearestMeanClassifier
from .compressive import CompressiveGMM, CompressiveKMeans, compressive_feature_map, compressive_kmeans
from .distance import L1DistanceSum, SquaredL2DistanceSum
from .intervals import Interval
from .kde import KDE
from .learn import SketchLinearRegression, SketchLogisticRegression
from .m2m import M2M
from .pca import CompressivePCA, compressive_pca
from .race_regression import RACELinearRegression
from .smooth import SmoothKDE, SmoothKernelPlan, smooth_kernel_terms
from .synthetic import SyntheticDecoder

__all__ = [
    "M2M",
    "Interval",
    "SyntheticDecoder",
    "SketchLogisticRegression",
    "SketchLinearRegression",
    "KDE",
    "KDEClassifier",
    "NearestMeanClassifier",
    "L1DistanceSum",
    "SquaredL2DistanceSum",
    "SmoothKDE",
    "SmoothKernelPlan",
    "smooth_kernel_terms",
    "CompressiveKMeans",
    "CompressiveGMM",
    "compressive_kmeans",
    "compressive_feature_map",
    "CompressivePCA",
    "compressive_pca",
    "RACELinearRegression",
]
