"""The feature-map interface every map follows.

A feature map ``Φ: R^d → R^m`` is public: its random draws come from its own ``seed`` and never
from the data. It is evaluated two ways:

* :meth:`FeatureMap.transform` — float64 ``Φ(x)`` for post-processing (estimators evaluate it on
  public points, never on private rows);
* :meth:`FeatureMap.fixed_features` / :meth:`FeatureMap.fixed_sum` — the *implemented* map
  ``Φ̃(x) = q(x) · 2^-k ≈ γ·Φ(x)`` with integer ``q(x)``, summed exactly in integers (``γ ≤ 1`` is
  a public shrink factor; the :class:`~opendp_sketch.Sketch` divides it back out). The sensitivity a
  map states is a bound on ``‖q(x)‖_p`` that the code **enforces** on the integers it sums (see
  :mod:`opendp_sketch._fixed`), so it holds for the arithmetic that runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, Literal

import numpy as np

from .._fixed import Accumulator, sqrt_up
from .._validate import check_positive_int

__all__ = ["FeatureMap", "chunk_memo", "feature_map_from_dict", "register_feature_map", "scratch_array"]

_REGISTRY: dict[str, type[FeatureMap]] = {}

#: Rows per chunk when summing features (at most; see :data:`CHUNK_ENTRIES`): bounds the
#: working memory independently of n.
DEFAULT_CHUNK_ROWS = 1 << 14
#: Working-array entries per chunk and thread: ``chunk_rows · _row_width()`` is capped at this,
#: so working memory stays bounded whatever ``m`` is.
CHUNK_ENTRIES = 1 << 22
#: Entries per tile of dense per-row work that should stay in cache: RFF runs its ``m'``-wide
#: arrays on tiles of ``TILE_ENTRIES // m'`` rows (524 for m = 1000; tiles of about 512 rows
#: measured fastest of 256 to 4096, ``benchmarks/results/feature_sum.md``).
TILE_ENTRIES = 1 << 18

_THREAD_STATE = threading.local()


class _Scratch:
    """Named work arrays of one thread, reused by every chunk of one feature sum."""

    def __init__(self) -> None:
        self._arrays: dict[Hashable, np.ndarray] = {}

    def array(self, name: Hashable, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        size = math.prod(shape)
        buf = self._arrays.get(name)
        if buf is None or buf.dtype != dtype or buf.size < size:
            buf = self._arrays[name] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)


def scratch_array(name: Hashable, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """An uninitialised C-contiguous work array for a feature-map kernel.

    Inside :meth:`FeatureMap.fixed_sum` (and every release path built on it) each worker thread
    keeps one array per ``name`` and hands it out again for the next chunk, so the hot loop
    neither allocates nor page-faults; elsewhere a fresh array is returned. Its contents are
    garbage, and it is only valid until the same thread asks for ``name`` again.

    :example:

    >>> scratch_array("demo", (2, 3)).shape
    (2, 3)
    """
    pool = getattr(_THREAD_STATE, "scratch", None)
    if pool is None:
        return np.empty(shape, dtype=dtype)
    return pool.array(name, shape, np.dtype(dtype))


def chunk_memo(X: np.ndarray) -> dict[Any, Any] | None:
    """A dict shared, for one chunk, by every map that reads the chunk ``X`` a sum's worker made
    (the parts of a :class:`~opendp_sketch.Composite` read the same rows), or ``None`` for any
    other array. Maps keep there what is a pure function of the chunk and public parameters
    (e.g. a column's bins), keyed by those parameters, so the parts compute it once. The worker
    starts a fresh dict for each chunk and never changes a chunk once filled (maps only read it).
    When the sum clips (``clip=``), ``memo["clip"]`` is that box, one ``(lower, upper)`` value per
    column: every value of the chunk's column ``j`` lies in it (NaN went to the lower bound).

    :example:

    >>> import numpy as np
    >>> chunk_memo(np.zeros((2, 2))) is None   # outside a sum's worker
    True
    """
    memo = getattr(_THREAD_STATE, "memo", None)
    return memo[1] if memo is not None and memo[0] is X else None


def register_feature_map(cls: type[FeatureMap]) -> type[FeatureMap]:
    """Class decorator: make ``cls`` loadable by :func:`feature_map_from_dict` (also under the
    names it had before a rename, ``cls.former_names``, so saved sketches keep loading)."""
    for name in (cls.__name__, *getattr(cls, "former_names", ())):
        _REGISTRY[name] = cls
    return cls


def feature_map_from_dict(spec: dict[str, Any]) -> FeatureMap:
    """Rebuild a feature map from :meth:`FeatureMap.to_dict` output.

    :raises ValueError: if the kind is unknown or the regenerated random draws do not match the
        stored fingerprint (e.g. a numpy release changed its random stream).
    """
    if not isinstance(spec, dict) or "kind" not in spec or not isinstance(spec.get("params"), dict):
        raise ValueError("feature map spec must be a dict with 'kind' and a dict 'params'")
    kind = spec["kind"]
    if not isinstance(kind, str) or kind not in _REGISTRY:
        raise ValueError(f"feature map kind ({kind!r}) must be one of {sorted(set(_REGISTRY))}")
    params = dict(spec["params"])
    if "feature_map" in params and isinstance(params["feature_map"], dict):
        params["feature_map"] = feature_map_from_dict(params["feature_map"])
    try:
        fm = _REGISTRY[kind](**params)
    except TypeError as e:  # missing or unknown parameter names (constructors check the values)
        raise ValueError(
            f"feature map {kind} parameters {sorted(params)} do not match its constructor: {e}"
        ) from None
    expected = spec.get("fingerprint")
    if expected is not None and expected != fm.fingerprint():
        raise ValueError(
            f"feature map {kind} regenerated from its seed does not match the stored fingerprint; "
            "the random draws differ (numpy version change?)"
        )
    return fm


def _usable_cpus() -> int:
    """CPUs this process may run on (respects affinity masks, unlike ``os.cpu_count``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_BLAS_CONTROLLER: Any = None


def single_threaded_blas() -> Any:
    """Context manager limiting BLAS to one thread (the controller is built once: it is slow)."""
    global _BLAS_CONTROLLER
    if _BLAS_CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _BLAS_CONTROLLER = ThreadpoolController()
    return _BLAS_CONTROLLER.limit(limits=1, user_api="blas")


class FeatureMap(ABC):
    """Base class of public random feature maps.

    Subclasses set ``dim`` (input columns), ``num_features`` (``m``), ``frac_bits`` (``k``),
    ``gain`` (``γ``) and implement :meth:`transform`, :meth:`_fixed_block` and
    :meth:`_int_bound`.
    """

    #: number of data columns a row must have
    dim: int
    #: output dimension ``m``
    num_features: int
    #: fixed-point fraction bits ``k``: one integer unit is ``2^-k``
    frac_bits: int = 0
    #: public shrink factor ``γ`` applied before quantization (1 for integer-valued maps)
    gain: float = 1.0
    #: human-readable kernel or structure the sketch estimates
    kernel_name: ClassVar[str] = ""

    # -- parameters -----------------------------------------------------------------------
    @abstractmethod
    def _params(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments."""

    def _draws(self) -> list[np.ndarray]:
        """The public random draws (for the fingerprint)."""
        return []

    @property
    def input_dim(self) -> int:
        """Number of columns a data row has (``dim``; ``ByClass`` adds the label column)."""
        return self.dim

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description; :func:`feature_map_from_dict` inverts it."""
        return {"kind": type(self).__name__, "params": self._params(), "fingerprint": self.fingerprint()}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> FeatureMap:
        """Inverse of :meth:`to_dict`."""
        fm = feature_map_from_dict(spec)
        if not isinstance(fm, cls):
            raise ValueError(f"spec describes a {type(fm).__name__}, not a {cls.__name__}")
        return fm

    def fingerprint(self) -> str:
        """SHA-256 of the parameters and random draws; identical maps have identical prints."""
        h = hashlib.sha256(json.dumps(self._params(), sort_keys=True, default=str).encode())
        for a in self._draws():
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:32]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FeatureMap)
            and type(self) is type(other)
            and self.fingerprint() == other.fingerprint()
        )

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    # -- evaluation -----------------------------------------------------------------------
    @abstractmethod
    def transform(self, X: np.ndarray) -> np.ndarray:
        """Float64 features ``Φ(X)`` of shape ``(n, m)`` for public points ``X`` of shape ``(n, dim)``."""

    @abstractmethod
    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        """Integer features ``q(X)`` (``int64``, shape ``(n, m)``) of a chunk, norms enforced."""

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        """``Σ_rows q(x)`` of one chunk as ``int64``. One-hot maps override this with a bincount."""
        return self._fixed_block(X).sum(axis=0, dtype=np.int64)

    @abstractmethod
    def _int_bound(self, p: Literal[1, 2]) -> int:
        """Integer bound: ``max_x ‖q(x)‖_1`` for ``p=1``, ``max_x ‖q(x)‖_2²`` for ``p=2``."""

    def _as_rows(self, X: Any, copy: bool = True) -> np.ndarray:
        """``X`` as an ``(n, input_dim)`` array; float64 unless ``copy=False`` and ``X`` is already a
        real numeric array (then it is returned as is, for chunk-wise conversion)."""
        if not (copy is False and isinstance(X, np.ndarray) and X.dtype.kind in "biuf"):
            X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1 and self.input_dim == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"X must have shape (n, {self.input_dim}), got {X.shape}")
        return X

    def fixed_features(self, X: Any) -> np.ndarray:
        """The integers ``q(x)`` that are summed, one row per data row (``int64``, ``(n, m)``).

        Exposed for tests and audits: ``‖q(x)‖_p`` never exceeds the stated bound.
        """
        return self._fixed_block(self._as_rows(X))

    def fixed_sum(
        self,
        X: Any,
        *,
        clip: tuple[np.ndarray, np.ndarray] | None = None,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        n_jobs: int | None = None,
    ) -> list[int]:
        """Exact ``Σ_i q(x_i)`` as Python ints, evaluated in chunks of ``chunk_rows`` rows.

        :param clip: optional public box ``(lower, upper)`` applied to each chunk first (NaN
            goes to the lower bound), so the sum is defined for any float input
        :param chunk_rows: rows per chunk at most (chunks are also capped at
            :data:`CHUNK_ENTRIES` work-array entries); working memory is ``O(chunk_rows · m)`` per
            thread, independent of ``n``
        :param n_jobs: threads (default: up to 4, one per core, for maps whose kernels release
            the GIL; one for index-counting maps, see :meth:`_threads_pay`); integer accumulation
            makes the result identical for every ``chunk_rows`` and ``n_jobs``
        """
        return self._accumulate(X, clip, chunk_rows, n_jobs).total()

    def _accumulate(
        self,
        X: Any,
        clip: tuple[np.ndarray, np.ndarray] | None,
        chunk_rows: int,
        n_jobs: int | None,
    ) -> Accumulator:
        """The chunked, threaded exact sum behind :meth:`fixed_sum`, as an :class:`Accumulator`.

        ``X`` is read chunk by chunk and never copied whole: each chunk is clipped into the box
        (NaN to the lower corner, ``±inf`` to the faces) or converted to float64 in a per-thread
        buffer, and every kernel reuses its per-thread work arrays (:func:`scratch_array`).
        """
        X = self._as_rows(X, copy=False)
        chunk_rows = self._chunk_rows(chunk_rows)
        if clip is not None:
            clip = (np.asarray(clip[0], dtype=np.float64), np.asarray(clip[1], dtype=np.float64))
        n = X.shape[0]
        starts = iter(range(0, n, chunk_rows))
        box = None
        if clip is not None:
            box = tuple(np.broadcast_to(c, (X.shape[1],)) for c in clip)
        lock = threading.Lock()

        def next_start() -> int | None:
            with lock:
                return next(starts, None)

        def worker() -> Accumulator:
            acc = Accumulator(self.num_features)
            # a fresh pool per call (a nested sum must not reuse the arrays this one is using)
            outer, _THREAD_STATE.scratch = getattr(_THREAD_STATE, "scratch", None), _Scratch()
            outer_memo = getattr(_THREAD_STATE, "memo", None)
            try:
                with np.errstate(all="ignore"):  # errstate is per thread: set it in the worker
                    while (s := next_start()) is not None:
                        rows = min(chunk_rows, n - s)
                        chunk = scratch_array("base.chunk", (rows, X.shape[1]))
                        if clip is None:
                            np.copyto(chunk, X[s : s + rows], casting="unsafe")
                        else:  # fmax/fmin send NaN to the lower bound and clip ±inf
                            np.fmax(X[s : s + rows], clip[0], out=chunk)
                            np.fmin(chunk, clip[1], out=chunk)
                        _THREAD_STATE.memo = (chunk, {} if box is None else {"clip": box})  # see chunk_memo
                        acc.add(self._fixed_block_sum(chunk))
            finally:
                _THREAD_STATE.scratch, _THREAD_STATE.memo = outer, outer_memo
            return acc

        threads_pay = self._threads_pay()
        jobs = n_jobs if n_jobs is not None else (min(_usable_cpus(), 4) if threads_pay else 1)
        jobs = max(1, min(jobs, -(-n // chunk_rows)))
        # chunk products are small: BLAS threads would only oversubscribe the cores our own
        # workers use (measured: 2x slower on 2 cores), so BLAS runs single-threaded here; a map
        # that runs no BLAS skips the limit (0.1 ms a call, once per streamed batch)
        with single_threaded_blas() if threads_pay or jobs > 1 else contextlib.nullcontext():
            if jobs == 1:
                return worker()
            # numpy releases the GIL in its kernels; each thread pulls chunks and keeps its own
            # exact partial sum, and integer addition makes the order of the parts irrelevant
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                parts = [pool.submit(worker) for _ in range(jobs)]
                total = Accumulator(self.num_features)
                for part in parts:
                    total.merge(part.result())
        return total

    def _threads_pay(self) -> bool:
        """Whether more than one worker thread is the default (``n_jobs=None``): yes for maps whose
        chunk work is long calls that release the GIL (BLAS products, large ufuncs); a map made
        of parts (``maps`` or ``feature_map``) asks its parts. ``MarginalTables`` says no when
        it counts indices (see :meth:`~opendp_sketch.MarginalTables._threads_pay`)."""
        parts = [getattr(self, "feature_map", None), *getattr(self, "maps", ())]
        inner = [p for p in parts if isinstance(p, FeatureMap)]
        return any(p._threads_pay() for p in inner) if inner else True

    def _chunk_rows(self, chunk_rows: int) -> int:
        """``chunk_rows`` capped so chunk sums cannot overflow and work arrays stay in cache."""
        chunk_rows = check_positive_int(chunk_rows, "chunk_rows")
        # a chunk's int64 column sums stay below 2^62, whatever the map's integer range
        chunk_rows = min(chunk_rows, max(1, (1 << 62) // max(1, self._int_bound(1))))
        # and a chunk's working arrays stay near CHUNK_ENTRIES entries per thread, whatever m is
        return min(chunk_rows, max(16, CHUNK_ENTRIES // max(1, self._row_width())))

    def _row_width(self) -> int:
        """Entries of working memory per row in a chunk (dense maps: ``m``)."""
        return self.num_features

    # -- sensitivity ----------------------------------------------------------------------
    @property
    def unit(self) -> float:
        """Value of one integer unit in feature units: ``2^-k / γ``."""
        return math.ldexp(1.0, -self.frac_bits) / self.gain

    def int_sensitivity(self, p: Literal[1, 2]) -> float:
        """Sensitivity of ``Σ q(x_i)`` in integer units under add/remove of one row.

        ``p=1`` returns an integer; ``p=2`` a float rounded up from the square root.
        """
        if p == 1:
            return self._int_bound(1)
        if p == 2:
            return sqrt_up(self._int_bound(2))
        raise ValueError(f"p ({p!r}) must be 1 or 2")

    def sensitivity(self, p: Literal[1, 2]) -> float:
        """Upper bound on ``‖Φ̃(x)‖_p`` (feature units, implemented map), i.e. the L``p``
        sensitivity of ``Σ Φ̃(x_i)`` when one row is added or removed."""
        b = self.int_sensitivity(p)
        s = math.ldexp(float(b), -self.frac_bits)
        # power-of-two scaling is exact; only int -> float above 2**53 may round down
        return math.nextafter(s, math.inf) if float(b) < b else s


class OneHotFeatureMap(FeatureMap):
    """A map whose features are 0/1 with a fixed number of ones per row (RACE, histograms, trees).

    Subclasses implement :meth:`_flat` (indices of the ones) and :meth:`_ones_per_row`. Values
    are integers, so ``q(x) = Φ(x)`` with no rounding, and ``‖Φ(x)‖₁ = ‖Φ(x)‖₂² = ones per row``.
    """

    @abstractmethod
    def _flat(self, X: np.ndarray) -> np.ndarray:
        """``int64`` array ``(n, s)`` of the feature indices set to 1 for each row."""

    @abstractmethod
    def _ones_per_row(self) -> int:
        """``s``, the number of ones in every row."""

    def transform(self, X: Any) -> np.ndarray:
        flat = self._flat(self._as_rows(X))
        out = np.zeros((flat.shape[0], self.num_features))
        np.put_along_axis(out, flat, 1.0, axis=1)
        return out

    def _fixed_block(self, X: np.ndarray) -> np.ndarray:
        flat = self._flat(X)
        out = np.zeros((flat.shape[0], self.num_features), dtype=np.int64)
        np.put_along_axis(out, flat, 1, axis=1)
        return out

    def _fixed_block_sum(self, X: np.ndarray) -> np.ndarray:
        return np.bincount(self._flat(X).ravel(), minlength=self.num_features).astype(np.int64)

    def _int_bound(self, p: Literal[1, 2]) -> int:
        return self._ones_per_row()

    def _row_width(self) -> int:
        # chunks hold indices of the ones (RACE: one per LSH row), never a dense row
        return self._ones_per_row() * 4
