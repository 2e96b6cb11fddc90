"""Public random feature maps ``Φ: R^d → R^m`` with proven L1/L2 sensitivities.

One module per family: :mod:`.rff` (RFF, QuantizedRFF), :mod:`.subsampled` (SubsampledRFF), :mod:`.race` (RACE),
:mod:`.histogram` (Histogram, DyadicTrees), :mod:`.moments` (Moments, RandomQuadratic),
:mod:`.byclass` (ByClass), :mod:`.marginals` (MarginalTables), :mod:`.composite` (Composite).
The common interface is :class:`.base.FeatureMap`.
"""

from .base import FeatureMap, OneHotFeatureMap, feature_map_from_dict
from .byclass import ByClass
from .composite import Composite, CompositeBlock
from .histogram import DyadicTrees, Histogram
from .marginals import MarginalBlock, MarginalTables
from .moments import Moments, RandomQuadratic
from .race import RACE
from .rff import RFF, QuantizedRFF
from .subsampled import SubsampledRFF

__all__ = [
    "FeatureMap",
    "OneHotFeatureMap",
    "feature_map_from_dict",
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
    "MarginalBlock",
    "Composite",
    "CompositeBlock",
]
