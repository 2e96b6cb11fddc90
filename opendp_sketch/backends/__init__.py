"""Backends: where the rows live, and the one protocol that turns them into an exact pair.

Every backend gives the release layer a transformation to the exact integer pair
``(Σ q(x_i), n)``, 1-stable under the symmetric distance, and the curator's checks of a
one-call release (:class:`~opendp_sketch.backends.protocol.Backend`). Each registers itself for
the descriptor classes of its domains; :func:`make_sum_and_count` and :func:`make_feature_sum`
dispatch on ``input_domain.descriptor`` as OpenDP's constructors do.

================  ====================================  =============================================
module            data                                  domains
================  ====================================  =============================================
``memory``        numpy arrays                          ``box_domain`` (``NPArray2BoxDomain``)
``streaming``     Polars LazyFrames and files (numeric)  ``frame_box_domain`` (``FrameBoxDomain``)
``tables``        any table under a public schema        ``table_domain(schema)`` (``TableDomain``)
``dask``          Dask arrays and DataFrames             ``dask_box_domain``, ``dask_table_domain``
``spark``         Spark DataFrames                       ``spark_box_domain``, ``spark_table_domain``
================  ====================================  =============================================

The package ``opendp_sketch`` imports every backend, so each is registered before any dispatch.
"""

from __future__ import annotations

from .domains import box_domain
from .protocol import (
    Backend,
    backend_for,
    backend_of_data,
    cached_sum_and_count,
    make_feature_sum,
    make_sum_and_count,
    register_backend,
)

__all__ = [
    "Backend",
    "register_backend",
    "backend_for",
    "backend_of_data",
    "make_sum_and_count",
    "make_feature_sum",
    "cached_sum_and_count",
    "box_domain",
]
