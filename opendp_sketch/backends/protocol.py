"""One protocol for every backend, and the one dispatch on the input domain's descriptor.

A backend is where the rows live (numpy in memory, Polars frames and files, tables under a
schema, Dask, Spark). Whatever it is, it gives the release layer the same thing: a
transformation from its data to the **exact** integer pair ``(Σ q(x_i), n)``, 1-stable under
the symmetric distance (:func:`make_sum_and_count`), and, for a one-call release, the curator's
checks that run before any measurement is built. Each backend module registers a
:class:`Backend` for the descriptor classes of the domains it reads
(:func:`register_backend`); :func:`backend_for` finds it by the descriptor's type, the way
OpenDP's own constructors read ``input_domain.descriptor``. The release layer never names a
backend.

The two cluster backends compute in **one pass**: their table checks read only the
collection's schema (:attr:`Backend.check_types`), and the pass that computes the pair also
counts the values the public rules do not cover (:attr:`Backend.compute_table`,
:attr:`Backend.compute_box`), refused on the client before the noise is drawn. A schema release with a
private choice (a tree of pairs) reads the data once where the backend can gather every block
the choice could take in the checking pass (:attr:`Backend.gather_table`: Dask and Spark;
:mod:`opendp_sketch.backends.gathered`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import opendp.prelude as dp
from opendp.extras._utilities import to_then

from .._validate import check_chunking
from ..features.base import DEFAULT_CHUNK_ROWS, FeatureMap
from .domains import BoxDescriptor

__all__ = [
    "Backend",
    "register_backend",
    "backend_for",
    "backend_of_data",
    "make_sum_and_count",
    "make_feature_sum",
    "then_sum_and_count",
    "then_feature_sum",
    "cached_sum_and_count",
]


@dataclass(frozen=True)
class Backend:
    """What a backend provides, registered for the descriptor classes it reads.

    Required: ``sum_and_count(input_domain, input_metric, feature_map, **options)``, the exact
    ``(Σ q(x_i), n)`` pair, taking the keyword ``options`` named in :attr:`options`. The other
    fields are the curator-side steps of a one-call release (``None`` where the backend has
    none: the release then refuses the data with a message naming what it accepts).
    """

    name: str
    """a short name for messages ("numpy", "polars", "dask", "spark")"""
    sum_and_count: Callable[..., dp.Transformation]
    """the exact pair ``(Σ q(x_i), n)``"""
    options: frozenset[str] = frozenset({"chunk_rows", "n_jobs"})
    """the keyword options ``sum_and_count`` and ``feature_sum`` take"""
    feature_sum: Callable[..., dp.Transformation] | None = None
    """the exact feature sum alone (``None``: not offered)"""
    accepts: Callable[[Any], bool] | None = None
    """whether a one-call release reads ``data`` with this backend"""
    table_domain: Callable[[Any], dp.Domain] | None = None
    """``schema → domain`` of the tables it reads under a schema"""
    check_table: Callable[[Any, Any], tuple[Any, int]] | None = None
    """``(data, schema) → (input, rows)``: the curator's full check of a table, before any
    measurement (a pass over the data); ``input`` is what the measurement reads"""
    gather_table: Callable[..., tuple[Any, int]] | None = None
    """``(data, schema, blocks, n_jobs) → (input, rows)``: ``check_table``'s checks and, in the same
    pass, the exact sums of every block of ``blocks`` (a ``MarginalTables``: all a release with a
    choice to make could measure), so that release reads the data once; ``input`` is what the
    measurement reads (``None``: ``check_table``, and each step reads the data again)"""
    check_types: Callable[[Any, Any], None] | None = None
    """``(data, schema)``: the types alone, from the collection's schema (one-pass backends)"""
    compute_table: Callable[..., tuple[Any, int]] | None = None
    """``(data, domain, feature_map, n_jobs, found) → (sum, count)``: the one pass of a
    one-pass backend; ``found["problems"]`` gets the values the schema's rules do not cover"""
    box_names: Callable[[Any, int, Sequence[str] | None], Any] | None = None
    """``(data, d, column_names) → names``: a numeric collection's structure, checked"""
    box_domain: Callable[..., dp.Domain] | None = None
    """``(bounds, names, nan) → domain`` of a numeric collection"""
    compute_box: Callable[..., tuple[Any, int]] | None = None
    """``(data, domain, feature_map, impute, n_jobs, found) → (sum, count)``: the one pass over
    a numeric collection; ``found`` gets ``"nan"`` and ``"inf"``"""

    @property
    def one_pass(self) -> bool:
        """Whether a one-call release computes the pair and the checks in one pass."""
        return self.compute_table is not None


_REGISTRY: dict[type, Backend] = {}


def register_backend(descriptor: type, backend: Backend) -> None:
    """Register ``backend`` for domains whose descriptor is a ``descriptor`` (or a subclass
    without its own registration)."""
    if not (isinstance(descriptor, type) and issubclass(descriptor, BoxDescriptor)):
        raise ValueError(f"descriptor ({descriptor!r}) must be a BoxDescriptor subclass")
    _REGISTRY[descriptor] = backend


def backend_for(input_domain: dp.Domain) -> Backend:
    """The backend registered for ``input_domain``'s descriptor (the nearest class in its MRO).

    :raises ValueError: for a domain no backend reads, naming the ones that exist
    """
    desc = getattr(input_domain, "descriptor", None)
    for kind in type(desc).__mro__ if desc is not None else ():
        if kind in _REGISTRY:
            return _REGISTRY[kind]
    raise ValueError(
        f"input_domain ({input_domain}) must be one of the sketch domains: box_domain (numpy), "
        "frame_box_domain (Polars), table_domain(schema), or the Dask and Spark domains "
        "(opendp_sketch.backends.dask / .spark)"
    )


def backend_of_data(data: Any) -> Backend | None:
    """The registered backend whose ``accepts`` recognises ``data`` first (clusters), or None."""
    for backend in _REGISTRY.values():
        if backend.accepts is not None and backend.accepts(data):
            return backend
    return None


def _options(backend: Backend, chunk_rows: int, n_jobs: int | None, impute: Any) -> dict[str, Any]:
    check_chunking(chunk_rows, n_jobs)
    options: dict[str, Any] = {}
    if "chunk_rows" in backend.options:
        options["chunk_rows"] = chunk_rows
    if "n_jobs" in backend.options:
        options["n_jobs"] = 1 if n_jobs is None and backend.one_pass else n_jobs
    if "impute" in backend.options:
        options["impute"] = impute
    elif impute is not None:
        raise ValueError(
            f"impute= is not an option of the {backend.name} backend: its domain holds the null rule "
            "(make_box_clip(impute=) for numpy, frame_box_domain(impute=) for Polars, the schema for tables)"
        )
    return options


def make_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    *,
    impute: Any = None,
) -> dp.Transformation:
    r"""The exact pair ``(Σ q(x_i), n)`` of any sketch domain, by the backend its descriptor
    names (1-stable under the symmetric distance; the release layer adds the noise).

    :param input_domain: a sketch domain (``box_domain``, ``frame_box_domain``,
        ``table_domain(schema)``, a Dask or Spark domain)
    :param input_metric: ``dp.symmetric_distance()``
    :param feature_map: the public feature map
    :param chunk_rows: rows per chunk (backends that read in chunks)
    :param n_jobs: threads (``None``: all cores in memory, one per task on a cluster)
    :param impute: public value(s) replacing NaN (the Dask and Spark box domains only)
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> from opendp_sketch.backends import make_sum_and_count
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = make_sum_and_count(dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance(), fm)
    >>> s, n = t(np.array([[0.1], [0.2], [0.9]]))
    >>> s.tolist(), n
    ([2, 1], 3)
    """
    backend = backend_for(input_domain)
    options = _options(backend, chunk_rows, n_jobs, impute)
    return backend.sum_and_count(input_domain, input_metric, feature_map, **options)


def make_feature_sum(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    p: Literal[1, 2] = 1,
    fixed_point: bool = False,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    *,
    impute: Any = None,
) -> dp.Transformation:
    """The exact feature sum ``Σ Φ̃(x_i)`` of any sketch domain, by its backend.

    :param p: the norm whose sensitivity the output metric carries (1 or 2)
    :param fixed_point: return the integer sum ``Σ q(x_i)`` (the cluster and Polars backends
        give only this one)
    :raises ValueError: for a backend that offers only the pair (tables under a schema: use
        :func:`make_sum_and_count`), or ``fixed_point=False`` where only the integer sum exists
    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    >>> t = dps.make_feature_sum(dps.box_domain((0.0, 1.0), num_columns=1), dp.symmetric_distance(), fm)
    >>> t(np.array([[0.1], [0.9], [0.8]]))
    [1.0, 2.0]
    """
    backend = backend_for(input_domain)
    if backend.feature_sum is None:
        raise ValueError(
            f"the {backend.name} backend releases the sum with its count: use make_sum_and_count "
            "(or make_private_sketch)"
        )
    options = _options(backend, chunk_rows, n_jobs, impute)
    if "fixed_point" in backend.options:
        options["fixed_point"] = fixed_point
    elif not fixed_point:
        raise ValueError(f"the {backend.name} backend sums in integers: pass fixed_point=True")
    return backend.feature_sum(input_domain, input_metric, feature_map, p, **options)


then_feature_sum = to_then(make_feature_sum)
then_sum_and_count = to_then(make_sum_and_count)


#: the pairs of the last few (map, domain) a scale search asked for: OpenDP's searches rebuild a
#: measurement hundreds of times and only its noise depends on the scale
_CACHE: OrderedDict[tuple[Any, ...], tuple[FeatureMap, dp.Transformation]] = OrderedDict()
_CACHE_SIZE = 16


def cached_sum_and_count(
    input_domain: dp.Domain,
    input_metric: dp.Metric,
    feature_map: FeatureMap,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    n_jobs: int | None = None,
    impute: Any = None,
) -> dp.Transformation:
    """:func:`make_sum_and_count`, remembered for the last few calls (nothing is written into
    the feature map). Domains compare equal exactly when their identifiers do, so the identifier
    is a sound key; the map is held with its pair, so its ``id`` cannot be reused meanwhile."""
    key = (id(feature_map), str(input_domain), str(input_metric), chunk_rows, n_jobs, repr(impute))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is feature_map:
        _CACHE.move_to_end(key)
        return hit[1]
    pair = make_sum_and_count(input_domain, input_metric, feature_map, chunk_rows, n_jobs, impute=impute)
    _CACHE[key] = (feature_map, pair)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return pair
