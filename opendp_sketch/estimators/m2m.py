"""Moment-to-moment (M2M) estimation: any average of a function from one released sketch.

:class:`M2M` decodes a sketch into weighted points, by the synthetic decoder (a distribution
fitted to every released block, :mod:`~opendp_sketch.estimators.synthetic`, the default) or by
the M2M paper's ridge estimator on prior samples (:mod:`~opendp_sketch.estimators.ridge`, which
says how its ``λ`` is chosen), and answers every query as an average over those points: means,
moments, counts, CDFs, quantiles, shares and group means, in the table's units, with intervals
from the released cells where asked. Everything here is post-processing of the released sketch
and public draws.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from .._compat import ForgetsCallInput
from ..features.byclass import ByClass
from ..schema import Categorical, Numeric, Schema
from ..sketch import Sketch
from .contract import SketchEstimator, default_column_names, fitted, resolve_box
from .intervals import CellIndex, Interval, cell_intervals, probe_points, quantile_bounds, require_cells
from .queries import as_expressions, label_shares
from .ridge import DEFAULT_PRIOR_SAMPLES, RidgeDesign, draw_prior, reference_queries
from .synthetic import DEFAULT_SYNTHETIC_POINTS, SyntheticDecoder, cell_edges

__all__ = ["M2M", "Prior"]

_METHODS = ("synthetic", "ridge")

#: A user prior: ``prior(n, rng) -> (n, d)`` array of public points inside the box.
Prior = Callable[[int, np.random.Generator], np.ndarray]
Query = Callable[[np.ndarray], Any] | pl.Expr | str | Sequence[pl.Expr | str]

_DESIGN_CACHE: OrderedDict[tuple, RidgeDesign] = OrderedDict()
_DESIGN_CACHE_BYTES = 1 << 30


def check_options(n_samples: Any, seed: Any, lam: Any, method: Any = "synthetic") -> None:
    """Validate the sketch-independent options (done before any release when chained)."""
    if not isinstance(method, str) or method not in _METHODS:
        raise ValueError(f"method ({method!r}) must be one of {_METHODS}")
    if n_samples is not None and (
        isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 100
    ):
        raise ValueError(f"n_samples ({n_samples!r}) must be an integer ≥ 100 (or None for the default)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed ({seed!r}) must be a non-negative integer")
    if isinstance(lam, str):
        if lam not in ("auto", "paper", "theorem"):
            raise ValueError(f"lam ({lam!r}) must be 'auto', 'paper', 'theorem' or a number ≥ 0")
    elif (
        isinstance(lam, bool)
        or not isinstance(lam, (int, float, np.floating, np.integer))
        or not (math.isfinite(lam) and lam >= 0)
    ):
        raise ValueError(f"lam ({lam!r}) must be 'auto', 'paper', 'theorem' or a finite number ≥ 0")


class M2M(SketchEstimator, ForgetsCallInput):
    r"""Weighted synthetic data from a sketch: every average of a function, at no privacy cost.

    Two decoders give the weighted points ``(samples, weights)`` every query averages over:

    * ``method="synthetic"`` (default): a distribution — points that adapt to the data and
      weights in the probability simplex, fitted to the sketch under its recorded noise
      (:class:`~opendp_sketch.estimators.synthetic.SyntheticDecoder`). Answers are feasible by construction (counts in
      ``[0, n̂]``, CDFs monotone in ``[0, 1]``, means inside the box), ``n̂`` combines the count
      with what one-hot maps say about it, and it never raises on a released sketch: a sketch
      whose count estimate is not positive gives a flagged degenerate fit (``degenerate``,
      ``reason``) whose counts are 0.
    * ``method="ridge"``: the M2M paper's linear estimator on prior samples (weights may be
      negative; ``λ`` chosen by ``lam``; error bars with ``return_std``).

    Fitted like every estimator of the package, ``dps.M2M(**params).fit(sketch)``;
    ``dps.M2M(sketch, **params)`` is the short form of exactly that.

    :param sketch: a released :class:`~opendp_sketch.Sketch` to fit now (the short form), or
        ``None`` to call :meth:`fit` later
    :param bounds: public box ``(lower, upper)`` of the data columns; defaults to the sketch's
    :param prior: ``None`` for uniform on the box, or ``prior(n, rng) -> (n, d)`` array of points in
        the box (public: it must not be fitted to the private data); the synthetic decoder starts
        from it
    :param n_samples: number of prior samples ``ns`` (ridge; default 100 000) or synthetic points
        (synthetic; default 30 000, capped for dense maps, see
        :class:`~opendp_sketch.estimators.synthetic.SyntheticDecoder`)
    :param seed: seed of the prior samples and of every draw of the decoder
    :param lam: ridge only: ``"auto"`` (default), ``"paper"`` (``σ_ξ²/n̂``), ``"theorem"``
        (``σ_ξ²/n̂²``) or a number ``≥ 0``
    :param discrete: columns (name or index) whose prior is uniform over a finite set of values,
        e.g. ``{"label": [0, 1]}``. For :class:`~opendp_sketch.ByClass` sketches the label column is
        discrete over the classes automatically.
    :param method: ``"synthetic"`` (default) or ``"ridge"``
    :param progress: synthetic only: ``progress(rounds_done, rounds)`` after each of the decoder's
        rounds (e.g. a ``tqdm`` bar's update), ``(rounds, rounds)`` when it stops
    :raises ValueError: for bad bounds, a prior that returns points of the wrong shape or outside
        the box, an unknown ``lam`` or ``method``; with ``method="ridge"`` also for a sketch whose
        noisy count is ``≤ 0``

    :example:

    >>> import numpy as np, opendp_sketch as dps
    >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=1)
    >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array([10, 20, 30, 40]), count=100,
    ...                 bounds=([0.0], [1.0]), column_names=["x"])
    >>> est = dps.M2M(sk, n_samples=20_000, method="ridge", lam=0.0)
    >>> est.mean().round(2).tolist()            # bin centres 1/8, 3/8, 5/8, 7/8 weighted
    [0.62]
    >>> est.cdf("x", [0.5]).round(2).tolist()
    [0.3]
    >>> syn = dps.M2M(sk, n_samples=20_000)     # the default: a distribution
    >>> syn.cdf("x", [0.5]).round(2).tolist(), bool((syn.weights >= 0).all())
    ([0.3], True)
    >>> syn.weighted_frame().columns, syn.sample(5).shape
    (['x', 'weight'], (5, 1))
    >>> dps.M2M(n_samples=20_000).fit(sk).cdf("x", [0.5]).round(2).tolist()   # the same, as a fit
    [0.3]
    """

    def __init__(
        self,
        sketch: Sketch | None = None,
        bounds: Any = None,
        prior: Prior | None = None,
        n_samples: int | None = None,
        seed: int = 0,
        lam: str | float = "auto",
        discrete: Mapping[str | int, Sequence[float]] | None = None,
        method: str = "synthetic",
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        check_options(n_samples, seed, lam, method)
        self._start(
            sketch,
            bounds=bounds,
            prior=prior,
            n_samples=n_samples,
            seed=seed,
            lam=lam,
            discrete=discrete,
            method=method,
            progress=progress,
        )

    def __getattr__(self, name: str) -> Any:  # only for attributes not set: before the fit
        if not name.startswith("__") and "_params" in self.__dict__ and "sketch" not in self.__dict__:
            raise AttributeError(f"this M2M is not fitted yet: call .fit(sketch) first (no {name!r})")
        raise AttributeError(name)

    #: the fitted points, weights and row-count estimate under the contract's names
    samples_ = property(lambda self: self.samples)
    weights_ = property(lambda self: self.weights)
    n_hat_ = property(lambda self: float(self.n_hat))
    sketch_ = fitted("sketch")
    decoder_ = fitted("decoder")
    columns_ = fitted("columns")
    lower_ = fitted("lower")
    upper_ = fitted("upper")
    noise_var_ = fitted("noise_var")

    def fit(self, sketch: Sketch) -> M2M:
        """Decode ``sketch`` into the weighted points every query averages over, and return
        ``self``: ``dps.M2M(**params).fit(sketch)``, as every estimator of the package is fitted;
        ``dps.M2M(sketch, **params)`` is exactly that, in one call. Post-processing: no budget.

        :raises ValueError: as the class says
        """
        if not isinstance(sketch, Sketch):
            raise ValueError(f"sketch must be a Sketch, got {type(sketch).__name__}")
        p = self._params
        bounds, prior, n_samples, seed = p["bounds"], p["prior"], p["n_samples"], p["seed"]
        lam, discrete, method, progress = p["lam"], p["discrete"], p["method"], p["progress"]
        if n_samples is None:
            n_samples = DEFAULT_PRIOR_SAMPLES if method == "ridge" else DEFAULT_SYNTHETIC_POINTS
        if method == "ridge" and sketch.count <= 0:
            raise ValueError(
                f"the sketch's noisy count ({sketch.count}) is not positive: too little data for its "
                "privacy budget to estimate averages"
            )
        self.sketch = sketch
        self.method = method
        fm = sketch.feature_map
        self.feature_map = fm
        d = fm.input_dim
        self.columns = list(sketch.column_names) if sketch.column_names else default_column_names(fm)
        self.lower, self.upper = resolve_box(bounds, sketch, d)
        if sketch.schema is not None and bounds is None:  # small integer columns sit on their integers
            levels = Schema.from_dict(sketch.schema).integer_levels
            given = {self._column_index(k) for k in (discrete or {})}
            discrete = {**{j: v.tolist() for j, v in levels.items() if j not in given}, **(discrete or {})}
        self.discrete = self._resolve_discrete(discrete)
        self.n_samples = int(n_samples)
        self.seed = int(seed)
        self.noise_var = sketch.sum_variance
        self.degenerate = False
        self.reason: str | None = None
        if method == "synthetic":
            self.decoder = SyntheticDecoder(
                self.n_samples,
                seed=self.seed,
                bounds=(self.lower, self.upper),
                discrete=self.discrete,
                prior=prior,
                progress=progress,
            ).fit(sketch)
            self.samples = self.decoder.samples_
            self.weights = self.decoder.weights_
            self.n_samples = self.samples.shape[0]
            self.n_hat = self.decoder.n_hat_
            self.lam: float | None = None
            self.degenerate, self.reason = self.decoder.degenerate_, self.decoder.reason_
        else:
            self.n_hat = sketch.n_hat
            if self.n_samples < 10 * fm.num_features:
                warnings.warn(
                    f"n_samples ({self.n_samples}) is below 10× the sketch size ({fm.num_features}); "
                    "estimates may overfit the prior samples",
                    stacklevel=2,
                )
            self._design = self._get_design(prior)
            self.samples = self._design.samples
            self.lam = self._design.choose_lam(lam, self.noise_var, self.n_hat)
            self.weights = self._design.weights(fm, sketch.mean, self.lam)
        self._frame: pl.DataFrame | None = None
        self._probe_points: np.ndarray | None = None
        self._probe_cache: tuple[pl.DataFrame, np.ndarray] | None = None
        self._cells: CellIndex | None = None
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # a sketch of a table under a public schema: answers in its units and labels
        self.schema = Schema.from_dict(sketch.schema) if sketch.schema is not None else None
        self._user, self._lo_user, self._hi_user = self._user_view()
        return self

    def _user_view(self, points: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The samples (or ``points``) and box in the table's units: numeric columns mapped back
        from ``[0, 1]`` by their public ranges (unrounded, so averages are unbiased), coded columns
        as codes."""
        X = self.samples if points is None else points
        if self.schema is None:
            return X, self.lower, self.upper
        X, lo, hi = X.copy(), self.lower.copy(), self.upper.copy()
        for j, name in enumerate(self.schema.columns):
            col = self.schema[name]
            if isinstance(col, Numeric):
                X[:, j] = col.value(X[:, j])
                lo[j], hi[j] = col.lower, col.upper
        return X, lo, hi

    def _kept(self, j: int, user: np.ndarray | None = None) -> np.ndarray | None:
        """``1`` where column ``j``'s value is present, ``0`` where its null state is on (rows of
        ``user``, default the samples); ``None`` for a column without a null state. A column's
        numbers, CDF, quantiles and group means are among its non-null rows."""
        if self.schema is None:
            return None
        companion = self.schema.null_states.get(self.columns[j])
        if companion is None:
            return None
        X = self._user if user is None else user
        return (X[:, self.schema.columns.index(companion)] < 0.5).astype(np.float64)

    def _ratio(
        self, num: np.ndarray, den: np.ndarray, shape: tuple[int, ...], interval: float, probe: Any
    ) -> Interval:
        """An answer ``E[num]/E[den]`` (a statistic among the rows ``den`` selects) with an interval:
        each expectation is bracketed at level ``1 − α/2`` (so both hold with probability
        ``≥ 1 − α``) and the ratio lies between the least over the greatest and the greatest over
        the least."""
        _check_level(interval)
        half = 1 - (1 - float(interval)) / 2
        F = np.column_stack([num.reshape(num.shape[0], -1), den[:, None]])
        k = F.shape[1] - 1
        ans = self._answer(F, 1.0, (k + 1,), False, half, probe=probe)
        with np.errstate(divide="ignore", invalid="ignore"):
            value = ans.value[:k] / ans.value[k]
            low = np.where(ans.high[k] > 0, np.maximum(ans.low[:k], 0) / ans.high[k], 0.0)
            high = np.where(ans.low[k] > 0, ans.high[:k] / ans.low[k], np.inf)
        low, high = _around(value, low, high)
        sup = np.broadcast_to(ans.supported[:k] & ans.supported[k], value.shape)
        return Interval(value.reshape(shape), low.reshape(shape), high.reshape(shape), sup.reshape(shape))

    def _probes(self) -> np.ndarray:
        """Public probe points for intervals: uniform in the box (public values for discrete
        columns), drawn from the public seed."""
        if self._probe_points is None:
            require_cells(self.feature_map)
            discrete = self.decoder.discrete_ if self.method == "synthetic" else self.discrete
            n = max(10_000, self.samples.shape[0])
            rng = np.random.default_rng([self.seed, 1])
            self._probe_points = probe_points(self.feature_map, self.lower, self.upper, discrete, n, rng)
        return self._probe_points

    def _probe_view(self) -> tuple[pl.DataFrame, np.ndarray]:
        """The probe points as a frame and in the table's units (computed once)."""
        if self._probe_cache is None:
            P = self._probes()
            self._probe_cache = (self._decode(P), self._user_view(P)[0])
        return self._probe_cache

    def _cell_index(self) -> CellIndex:
        if self._cells is None:
            P = self._probes()
            mass = np.concatenate([self.weights * max(self.n_hat, 0.0), np.zeros(P.shape[0])])
            self._cells = CellIndex(self.feature_map, np.vstack([self.samples, P]), mass)
        return self._cells

    # -- construction ---------------------------------------------------------------------------
    def _resolve_discrete(
        self, discrete: Mapping[str | int, Sequence[float]] | None
    ) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        if isinstance(self.feature_map, ByClass):
            out[self.feature_map.dim] = np.arange(self.feature_map.num_classes, dtype=np.float64)
        for key, values in (discrete or {}).items():
            j = self._column_index(key)
            v = np.unique(np.asarray(values, dtype=np.float64))
            if v.size == 0 or not np.isfinite(v).all() or v.min() < self.lower[j] or v.max() > self.upper[j]:
                raise ValueError(
                    f"discrete values of column {self.columns[j]!r} must be finite and inside its bounds"
                )
            out[j] = v
        return out

    def _get_design(self, prior: Prior | None) -> RidgeDesign:
        key = (
            self.feature_map.fingerprint(),
            tuple(self.lower),
            tuple(self.upper),
            tuple((j, tuple(v)) for j, v in sorted(self.discrete.items())),
            self.n_samples,
            self.seed,
        )
        if prior is None and key in _DESIGN_CACHE:
            _DESIGN_CACHE.move_to_end(key)
            return _DESIGN_CACHE[key]
        rng = np.random.default_rng(self.seed)
        samples = draw_prior(prior, self.n_samples, rng, self.lower, self.upper, self.discrete)
        design = RidgeDesign(
            self.feature_map, samples, reference_queries(self.lower, self.upper, set(self.discrete))
        )
        if prior is None:
            _DESIGN_CACHE[key] = design
            while (
                sum(v.nbytes() for v in _DESIGN_CACHE.values()) > _DESIGN_CACHE_BYTES
                and len(_DESIGN_CACHE) > 1
            ):
                _DESIGN_CACHE.popitem(last=False)
        return design

    # -- queries --------------------------------------------------------------------------------
    def column_index(self, column: str | int) -> int:
        """The index of a column given by name or index; ``ValueError`` naming the columns otherwise."""
        return self._column_index(column)

    def cell_edges(self, column: str | int) -> tuple[np.ndarray, bool]:
        """Edges of a column's public cells in its units, the ends of its range included, and
        whether they are the sketch's own cells (every resolution its blocks use). A column the
        map is smooth in (RFF, RACE, moments) gets ``False`` and 32 equal bins of its range.

        >>> import numpy as np, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=1)
        >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(np.full((10, 1), 0.3))), 10, bounds=([0.0], [1.0]))
        >>> edges, own = dps.M2M(sk, n_samples=100).cell_edges(0)
        >>> edges.tolist(), own
        ([0.0, 0.25, 0.5, 0.75, 1.0], True)
        """
        j = self._column_index(column)
        lo, hi = float(self._lo_user[j]), float(self._hi_user[j])
        edges = cell_edges(self.feature_map, self.lower, self.upper)[j]
        if edges is None:
            return np.linspace(lo, hi, 33), False
        P = np.tile(self.lower, (np.asarray(edges).size, 1))
        P[:, j] = edges
        t = np.clip(self._user_view(P)[0][:, j], lo, hi)
        return np.unique(np.concatenate([[lo], t, [hi]])), True

    def _column_index(self, column: str | int) -> int:
        if isinstance(column, (int, np.integer)) and not isinstance(column, bool):
            if not 0 <= column < len(self.columns):
                raise ValueError(f"column index ({column}) must be in [0, {len(self.columns)})")
            return int(column)
        if isinstance(column, str) and column in self.columns:
            return self.columns.index(column)
        raise ValueError(f"column ({column!r}) is not in the sketch; its columns are {self.columns}")

    def _values(self, f: Query, probes: bool = False) -> np.ndarray:
        """``f`` evaluated on the samples (or on the probe points) as an ``(ns, k)`` float array."""
        frame, user = self._probe_view() if probes else (self._sample_frame(), self._user)
        ns = user.shape[0]
        f = as_expressions(f, self.columns, self.schema)  # SQL text; labels checked against the schema
        if isinstance(f, pl.Expr) or (
            isinstance(f, (list, tuple)) and f and all(isinstance(e, pl.Expr) for e in f)
        ):
            exprs = [f] if isinstance(f, pl.Expr) else list(f)
            try:
                out = frame.select(exprs)
            except pl.exceptions.PolarsError as e:
                hint = (
                    "; compare a date column with a date: pl.col('day') < date(2020, 7, 1), or in SQL "
                    "day < DATE '2020-07-01'"
                    if "date/datetime" in str(e)
                    else ""
                )
                raise ValueError(
                    f"the Polars expression could not be evaluated on columns {self.columns}: {e}{hint}"
                ) from None
            if out.height != ns:
                raise ValueError(
                    f"a Polars query must give one value per row (an elementwise expression), got {out.height} rows"
                )
            # a predicate on a null (a null category) is not true, as in SQL
            out = out.with_columns(pl.col(pl.Boolean).fill_null(False))
            try:
                F = out.cast(pl.Float64).to_numpy()
            except pl.exceptions.PolarsError:
                raise ValueError("a Polars query must produce numeric or boolean values") from None
        elif callable(f):
            F = np.asarray(f(user.copy()))
            if F.dtype == bool:
                F = F.astype(np.float64)
            if not np.issubdtype(F.dtype, np.number):
                raise ValueError(f"f must return numbers, got dtype {F.dtype}")
            if F.ndim == 1 and F.shape[0] == ns:
                F = F[:, None]
            elif not (F.ndim == 2 and F.shape[0] == ns):
                raise ValueError(
                    f"f must be vectorised: called with an ({ns}, {self.lower.size}) array it must return "
                    f"({ns},) or ({ns}, k) values, got shape {F.shape}"
                )
            F = F.astype(np.float64)
        else:
            raise ValueError(
                "a query must be a vectorised function of an (ns, d) array, a Polars expression or "
                "SQL text such as \"region = 'South'\""
            )
        if not np.isfinite(F).all():
            raise ValueError("the query returned NaN or infinite values on points inside the bounds")
        return F

    def _answer(
        self,
        F: np.ndarray,
        scale: float,
        shape: tuple[int, ...],
        return_std: bool,
        interval: float | None = None,
        kind: str = "mean",
        probe: Callable[[], np.ndarray] | None = None,
    ) -> Any:
        value = (self.weights @ F).reshape(shape) * scale
        if interval is not None:
            if return_std:
                raise ValueError("ask for return_std or interval, not both")
            if probe is None:
                raise ValueError("this answer has no interval")
            index = self._cell_index()
            Fp = np.vstack([F, probe()])
            low, high, supported = cell_intervals(self.sketch, index, Fp, level=interval, kind=kind)
            low, high = _around(value, low.reshape(shape), high.reshape(shape))
            return Interval(value, low, high, supported.reshape(shape))
        if not return_std:
            return value
        if self.method != "ridge":
            raise ValueError("return_std needs method='ridge' (the linear estimate's noise term)")
        assert self.lam is not None  # the ridge decoder's
        std = self._design.noise_std(self.feature_map, F, self.lam, self.noise_var, self.n_hat)
        return value, (std * abs(scale)).reshape(shape)

    def expect(self, f: Query, *, return_std: bool = False, interval: float | None = None) -> Any:
        r"""Estimate of ``(1/n) Σ f(x_i)``.

        :param f: a vectorised function (``(ns, d)`` array → ``(ns,)`` or ``(ns, k)``), a Polars
            expression over the sketch's column names, SQL text (``"age * (region = 'South')"``,
            read by ``pl.sql_expr`` as the CLI does), or a list of expressions or SQL texts. With a
            schema, a string compared with a categorical column (``==``, ``!=``, ``is_in``; SQL
            ``=``, ``<>``, ``IN``) must be one of its labels: a typo raises instead of counting
            nothing (:mod:`~opendp_sketch.estimators.queries` says which forms are checked)
        :param return_std: ridge only: also return the standard deviation of the DP-noise term
        :param interval: a level such as ``0.95``: return an :class:`Interval` (value, low, high,
            supported) bracketing the answer by the released cells (marginal and histogram
            sketches; see :mod:`~opendp_sketch.estimators.intervals`). The interval always holds
            ``value``: the bounds come from one released block and the value from all of them,
            so where that block's noise put its bounds past the value, the side that misses it is
            moved out to the value (coverage can only rise)
        :return: a float (one output) or an array of ``k``; with ``return_std`` a pair
        :raises ValueError: for a query that cannot be evaluated, SQL Polars cannot parse,
            unknown columns, or a label not among a categorical column's labels
        """
        F = self._values(f)
        shape: tuple[int, ...] = () if F.shape[1] == 1 else (F.shape[1],)
        return _scalar(
            self._answer(F, 1.0, shape, return_std, interval, probe=lambda: self._values(f, probes=True))
        )

    def count(self, predicate: Query, *, return_std: bool = False, interval: float | None = None) -> Any:
        """Estimated number of rows satisfying ``predicate`` (``n̂`` times its estimated frequency).

        :param predicate: vectorised boolean function of an ``(ns, d)`` array, a Polars
            expression, or a SQL predicate such as ``"region = 'South' AND age > 30"`` (read by
            ``pl.sql_expr``, as the CLI's ``--count``); labels are checked as in :meth:`expect`
        :param interval: a level such as ``0.95``: return an :class:`Interval` whose bounds count
            rows from the released cells (no row count needed); ``supported=False`` flags a count
            no released block holds (e.g. three columns when only pairs were measured): its
            interval is the range the cells allow, not a noise band. The interval always holds
            the value (see :meth:`expect`)

        >>> import numpy as np, polars as pl, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=1)
        >>> sk = dps.Sketch(feature_map=fm, sum_units=np.array([10, 20, 30, 40]), count=100,
        ...                 bounds=([0.0], [1.0]), column_names=["x"],
        ...                 noise={"sum_variance": 4.0, "count_variance": 4.0})
        >>> est = dps.M2M(sk, n_samples=2_000)
        >>> iv = est.count(pl.col("x") < 0.5, interval=0.95)   # two whole bins: noise only
        >>> round(iv.value), round(iv.low, 1), round(iv.high, 1), iv.supported
        (30, 24.5, 35.5, True)
        >>> iv = est.count(pl.col("x") < 0.6, interval=0.95)   # cuts a bin: 30 to 60 rows, ± noise
        >>> round(iv.low, 1), round(iv.high, 1), iv.supported
        (24.5, 66.8, False)
        >>> round(est.count("x < 0.5"))                         # SQL text works too
        30
        """
        F = self._values(predicate)
        shape: tuple[int, ...] = () if F.shape[1] == 1 else (F.shape[1],)
        probe = lambda: self._values(predicate, probes=True)  # noqa: E731
        return _scalar(self._answer(F, self.n_hat, shape, return_std, interval, kind="count", probe=probe))

    def moment(self, k: int, *, return_std: bool = False, interval: float | None = None) -> Any:
        """Raw moment ``E[x_j^k]`` of every column (array of ``d``; ``interval``: see :meth:`expect`)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"k ({k!r}) must be a non-negative integer")
        probe = lambda: self._probe_view()[1] ** k  # noqa: E731
        return self._answer(self._user**k, 1.0, (self.lower.size,), return_std, interval, probe=probe)

    def mean(self, *, return_std: bool = False, interval: float | None = None) -> Any:
        """Mean of every column (array of ``d``, in the data's units; ``interval``: see
        :meth:`expect`: a mean is bracketed by its cells' ends, so a numeric column's interval is
        at least about a bin wide).

        With a schema: numeric columns in their units, boolean columns the share of ``True``,
        categorical columns ``NaN`` (see :meth:`shares`).
        """
        out = self.moment(1, return_std=return_std, interval=interval)
        if self.schema is not None:
            nominal = [
                j for j, c in enumerate(self.schema.columns) if isinstance(self.schema[c], Categorical)
            ]
            for arr in out[:3] if isinstance(out, Interval) else out if isinstance(out, tuple) else (out,):
                arr[nominal] = np.nan
            for name in self.schema.null_states:  # a column with a null state: among its non-null rows
                j = self.columns.index(name)
                kept = self._kept(j)
                assert kept is not None
                lo = float(self._lo_user[j])
                if interval is not None:
                    probe = lambda j=j, lo=lo: self._probe_columns(j, lambda x, k: np.c_[(x - lo) * k, k])  # noqa: E731
                    ratio = self._ratio((self._user[:, j] - lo) * kept, kept, (1,), interval, probe=probe)
                    assert isinstance(out, Interval)
                    for arr, v in zip(out[:3], ratio[:3]):
                        arr[j] = lo + float(np.asarray(v)[0])
                    out.supported[j] = bool(np.asarray(ratio.supported)[0])
                elif return_std:
                    out[0][j], out[1][j] = self._nonnull_mean(j, kept), np.nan
                else:
                    out[j] = self._nonnull_mean(j, kept)
        return out

    def _nonnull_mean(self, j: int, kept: np.ndarray) -> float:
        w, total = self.weights * kept, float((self.weights * kept).sum())
        return float(w @ self._user[:, j] / total) if total > 0 else float("nan")

    def _probe_columns(self, j: int, f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
        """``f(values, kept)`` of column ``j`` on the probe points (intervals of null-state columns)."""
        user = self._probe_view()[1]
        kept = self._kept(j, user)
        assert kept is not None
        return f(user[:, j], kept)

    def covariance(self) -> np.ndarray:
        """Covariance matrix ``E[(x - μ)(x - μ)ᵀ]`` with the M2M mean ``μ`` (``d × d``; with a
        schema in the columns' units, coded columns as codes)."""
        mu = self.moment(1)
        C = self._user - mu
        return (C * self.weights[:, None]).T @ C

    def shares(self, column: str | int, *, interval: float | None = None) -> pl.DataFrame:
        """Estimated share of each public label of a categorical or boolean column (schema
        sketches), as a frame ``(column, share)``; shares are non-negative and sum to 1 for the
        synthetic decoder. With ``interval=0.95`` the frame also has ``low``, ``high`` and
        ``supported`` (see :meth:`expect`).

        :raises ValueError: for a sketch without a schema or a numeric column
        """
        j = self._column_index(column)
        name = self.columns[j]
        if self.schema is None or isinstance(self.schema[name], Numeric):
            raise ValueError(
                f"shares() needs a categorical or boolean column of a schema sketch; {name!r} is not one"
            )
        out = label_shares(self._sample_frame()[name], self.weights)
        if interval is None:
            return out
        exprs = [
            (pl.col(name).is_null() if label is None else pl.col(name) == label).alias(f"_{i}")
            for i, label in enumerate(out[name].to_list())
        ]
        iv = self.expect(exprs, interval=interval)
        return out.with_columns(
            low=pl.Series(np.atleast_1d(iv.low)),
            high=pl.Series(np.atleast_1d(iv.high)),
            supported=pl.Series(np.atleast_1d(iv.supported)),
        )

    def group_mean(self, by: str, column: str, *, interval: float | None = None) -> pl.DataFrame:
        """Weighted mean of ``column`` (in its units) within each category of ``by``, with the
        category's share: a frame ``(by, column, "share")``.

        With ``interval=0.95`` the frame also has ``low``, ``high`` and ``supported``: the group's
        sum of ``column − lower`` and its row count are each bracketed at level ``1 − α/2``
        (:meth:`count` intervals, so both hold with probability ``≥ 1 − α``), and the mean lies
        between the least sum over the greatest count and the greatest sum over the least count
        (then within the column's box). ``supported`` when both brackets are.

        :raises ValueError: for unknown columns
        """
        for c in (by, column):
            self._column_index(c)
        j = self._column_index(column)
        kept = self._kept(j)
        present = np.ones(self._user.shape[0]) if kept is None else kept  # among non-null values
        frame = self.weighted_frame().with_columns(
            pl.Series(column, self._user[:, j]), pl.Series("_kept", self.weights * present)
        )
        out = (
            frame.group_by(by)
            .agg(
                ((pl.col(column) * pl.col("_kept")).sum() / pl.col("_kept").sum()).alias(column),
                pl.col("weight").sum().alias("share"),
            )
            .sort(by, nulls_last=True)
        )
        if interval is None:
            return out
        if isinstance(interval, bool) or not (isinstance(interval, float | int) and 0 < interval < 1):
            raise ValueError(f"level ({interval!r}) must be in (0, 1), e.g. 0.95")
        half = 1 - (1 - interval) / 2
        lo, hi = float(self._lo_user[j]), float(self._hi_user[j])
        labels = out[by].to_list()

        def member(points: pl.DataFrame) -> np.ndarray:  # one column per label: rows in the group
            codes = points[by]
            return np.column_stack(
                [(codes.is_null() if g is None else codes == g).fill_null(False).to_numpy() for g in labels]
            ).astype(np.float64)

        probe_frame, probe_user = self._probe_view()
        probe_kept = self._kept(j, probe_user)
        probe_member = member(probe_frame) * (1.0 if probe_kept is None else probe_kept[:, None])

        G = member(self._sample_frame()) * present[:, None]
        shape = (len(labels),)
        num = self._answer(
            (self._user[:, j] - lo)[:, None] * G,
            self.n_hat,
            shape,
            False,
            half,
            kind="count",
            probe=lambda: (probe_user[:, j] - lo)[:, None] * probe_member,
        )
        den = self._answer(G, self.n_hat, shape, False, half, kind="count", probe=lambda: probe_member)
        with np.errstate(divide="ignore", invalid="ignore"):
            low = np.where(den.high > 0, lo + np.maximum(num.low, 0) / den.high, lo)
            high = np.where(den.low > 0, lo + num.high / den.low, hi)
        low, high = _around(out[column].to_numpy(), np.clip(low, lo, hi), np.clip(high, lo, hi))
        return out.with_columns(
            low=pl.Series(low, dtype=pl.Float64),
            high=pl.Series(high, dtype=pl.Float64),
            supported=pl.Series(num.supported & den.supported),
        )

    def cdf(
        self, column: str | int, points: Any, *, return_std: bool = False, interval: float | None = None
    ) -> Any:
        """Estimated ``P(x_column ≤ t)`` at each point ``t`` (ridge: raw linear estimates, not clipped;
        ``interval``: see :meth:`expect`). A date or datetime column takes dates (ISO text,
        ``datetime``, ``numpy.datetime64``); a column with a null state gives its CDF among the
        non-null rows.

        A point below the column's public range gets exactly 0 and one above it exactly 1 (every
        row lies in the range; with ``interval``, a supported point interval; with
        ``return_std``, a std of 0).

        >>> import numpy as np, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=4, dim=1)
        >>> sk = dps.Sketch(fm, np.array([10, 20, 30, 40]), 100, bounds=([0.0], [1.0]))
        >>> dps.M2M(sk, n_samples=1000).cdf(0, [-5, 0.5, 7]).round(2).tolist()
        [0.0, 0.3, 1.0]

        :raises ValueError: for a NaN point
        """
        j = self._column_index(column)
        if self.schema is not None and getattr(self.schema[self.columns[j]], "time", None):
            t = self.schema.as_numbers(self.columns[j], points)  # dates as days, datetimes as seconds
        else:
            t = np.atleast_1d(np.asarray(points, dtype=np.float64))
        lo, hi = self._lo_user[j], self._hi_user[j]
        if t.ndim != 1 or np.isnan(t).any():
            raise ValueError(f"points of {self.columns[j]!r} must be numbers (not NaN), in a flat list")
        below, above = t < lo, t > hi
        kept = self._kept(j)
        if return_std or interval is not None:
            F = (self._user[:, j][:, None] <= t).astype(np.float64)
            if kept is not None:  # among the non-null rows: a ratio of two released answers
                if return_std or interval is None:
                    raise ValueError(
                        f"column {self.columns[j]!r} has a null state: its CDF among non-null rows has an "
                        "interval (interval=0.95), not a return_std"
                    )
                probe = lambda: self._probe_columns(  # noqa: E731
                    j, lambda x, k: np.column_stack([(x[:, None] <= t) * k[:, None], k])
                )
                ans = self._ratio(F * kept[:, None], kept, t.shape, interval, probe)
                ans = Interval(ans.value, np.clip(ans.low, 0, 1), np.clip(ans.high, 0, 1), ans.supported)
            else:
                probe = lambda: (self._probe_view()[1][:, j][:, None] <= t).astype(np.float64)  # noqa: E731
                ans = self._answer(F, 1.0, t.shape, return_std, interval, probe=probe)
            outside = below | above
            if not outside.any():
                return ans
            exact = np.where(above, 1.0, 0.0)
            if isinstance(ans, Interval):  # every row is at or below a point above the range
                return Interval(
                    np.where(outside, exact, ans.value),
                    np.where(outside, exact, ans.low),
                    np.where(outside, exact, ans.high),
                    np.where(outside, True, ans.supported),
                )
            value, std = ans
            return np.where(outside, exact, value), np.where(outside, 0.0, std)
        xs, cw = self._sorted_column(j)
        out = cw[np.searchsorted(xs, t, side="right")]
        # a distribution's CDF: rounding of the cumulative sum may not leave [0, 1]
        out = np.clip(out, 0.0, 1.0) if self.method == "synthetic" else out
        return np.where(below, 0.0, np.where(above, 1.0, out))

    def _sorted_column(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        if j not in self._sorted:
            order = np.argsort(self._user[:, j], kind="stable")
            xs = self._user[order, j]
            w = self.weights
            kept = self._kept(j)
            if kept is not None:  # the distribution among the non-null rows
                nonnull = float((w * kept).sum())
                w = w * kept * (float(w.sum()) / nonnull if nonnull > 0 else 0.0)
            self._sorted[j] = (xs, np.concatenate([[0.0], np.cumsum(w[order])]))
        return self._sorted[j]

    def quantile(self, column: str | int, qs: Any, *, interval: float | None = None) -> Any:
        """Quantiles of a column from the monotone, normalised weighted CDF (post-processing).

        A column whose values sit on a public lattice (a schema's integer column, categories,
        ``discrete=``) gets the smallest lattice value whose CDF reaches ``q`` (numpy's
        ``method="inverted_cdf"``): the median of ages in whole years is a whole year. Other
        columns interpolate the CDF.

        ``interval=level`` returns an :class:`~opendp_sketch.estimators.Interval` per level: the CDF is
        bracketed at the column's public cell edges ``t₁ < … < t_k`` (``cdf(..., interval=)``,
        released cells only), simultaneously by a union bound (each edge at ``1 − α/(2k)`` on each
        side). If every upper CDF bound holds, the first edge whose upper bound reaches ``q`` is
        at or above the true quantile's next edge, so the quantile lies above the edge before it;
        if every lower bound holds, no edge below the quantile has a lower bound reaching ``q``,
        so the quantile lies at or below the first edge that does. Both hold with probability at
        least ``level``; ``supported`` is ``False`` (a bound at the cells' resolution).

        A categorical column is refused (its labels have no order): :meth:`shares` gives each
        label's share and :meth:`count` its rows.

        >>> import numpy as np, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=10, dim=1)
        >>> X = np.random.default_rng(0).beta(2, 5, (4000, 1))
        >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), 4000, bounds=([0.0], [1.0]),
        ...                 noise={"sum_variance": 25.0, "count_variance": 25.0})
        >>> iv = dps.M2M(sk, n_samples=5000).quantile(0, 0.5, interval=0.95)
        >>> bool(iv.low <= np.median(X) <= iv.high), round(float(iv.high - iv.low), 1)
        (True, 0.2)

        :raises ValueError: for levels outside ``[0, 1]`` or a categorical column
        """
        j = self._column_index(column)
        name = self.columns[j]
        if self.schema is not None and isinstance(self.schema[name], Categorical):
            raise ValueError(
                f"column {name!r} is categorical: its labels have no order, so it has no quantiles; "
                f"use shares({name!r}) for each label's share, or count(pl.col({name!r}) == label) for its rows"
            )
        q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
        if not (np.isfinite(q).all() and (q >= 0).all() and (q <= 1).all()):
            raise ValueError("quantile levels must be in [0, 1]")
        if j in self.discrete and self.method == "synthetic":
            # values on a public lattice (integers, categories): the smallest value whose CDF
            # reaches q (numpy's method="inverted_cdf"), so an integer column's median is an integer
            xs, cw = self._sorted_column(j)
            total = float(cw[-1])
            if not total > 0:
                raise ValueError("the estimated distribution has no positive mass; the sketch is too noisy")
            reach = np.maximum(q * total * (1.0 - 1e-12), total * 1e-15)
            value = xs[np.minimum(np.searchsorted(cw[1:], reach, side="left"), xs.size - 1)]
        else:
            grid = np.linspace(self._lo_user[j], self._hi_user[j], 2049)
            F = np.maximum.accumulate(np.clip(self.cdf(j, grid), 0.0, None))
            if F[-1] <= 0:
                raise ValueError("the estimated distribution has no positive mass; the sketch is too noisy")
            F = F / F[-1]
            Fu, idx = np.unique(F, return_index=True)
            value = np.interp(q, Fu, grid[idx])
        if interval is None:
            out = self._as_time(j, value)
            return out[0] if np.ndim(qs) == 0 else out
        _check_level(interval)
        t, own = self.cell_edges(j)
        if not own:
            require_cells(self.feature_map)  # a map without cells: its refusal names the fix
            raise ValueError(f"column {self.columns[j]!r} has no public cells to bracket a quantile at")
        k = t.size
        ci = self.cdf(j, t, interval=1.0 - (1.0 - float(interval)) / k)  # two sides at α/(2k)
        low, high = quantile_bounds(ci.low, ci.high, t, q, value, self._lo_user[j], self._hi_user[j])
        sup = np.zeros(q.size, dtype=bool)
        if np.ndim(qs) == 0:
            one = [self._as_time(j, float(v[0])) for v in (value, low, high)]
            return Interval(one[0], one[1], one[2], False)
        return Interval(self._as_time(j, value), self._as_time(j, low), self._as_time(j, high), sup)

    def _as_time(self, j: int, values: Any) -> Any:
        """Values of a date/datetime column as ``numpy.datetime64`` (days or microseconds); other
        columns' values as they are."""
        col = self.schema[self.columns[j]] if self.schema is not None else None
        return col.as_time(values) if isinstance(col, Numeric) else values

    # -- views ----------------------------------------------------------------------------------
    def _sample_frame(self) -> pl.DataFrame:
        if self._frame is None:
            self._frame = self._decode(self.samples)
        return self._frame

    def _decode(self, X: np.ndarray) -> pl.DataFrame:
        """Points as a frame: the schema's units and labels, or the raw columns."""
        if self.schema is not None:
            return self.schema.decode(X)
        return pl.DataFrame({c: X[:, j] for j, c in enumerate(self.columns)})

    def weighted_frame(self) -> pl.DataFrame:
        """The samples with a ``weight`` column: ``Σ weight·f`` estimates the mean of ``f``.

        Synthetic: weights are non-negative and sum to 1. Ridge: they sum to about 1 and may be
        negative (the estimate is linear in the sketch).
        """
        return self._sample_frame().with_columns(pl.Series("weight", self.weights))

    def sample(self, n: int, seed: int = 0) -> pl.DataFrame:
        """An ordinary synthetic frame of ``n`` rows drawn with replacement ``∝`` the weights.

        Any Polars query (filters, group-bys, joins) runs on it. Ridge weights are clipped at 0
        first (they may be negative); a sample from public weights and a public seed is
        post-processing.

        :param n: number of rows (``≥ 0``)
        :param seed: seed of the draw
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n ({n!r}) must be a non-negative integer")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed ({seed!r}) must be a non-negative integer")
        p = np.clip(self.weights, 0.0, None)
        total = p.sum()
        p = p / total if total > 0 else np.full(p.size, 1.0 / p.size)
        idx = np.random.default_rng(seed).choice(p.size, size=int(n), p=p)
        return self._decode(self.samples[idx])

    def plot(
        self,
        column: str | int,
        other: str | int | None = None,
        *,
        interval: float | None = 0.95,
        ax: Any = None,
    ) -> Any:
        """Draw one column of the decoded distribution (or two, as a heat map) and return the
        matplotlib ``Axes``.

        Bars: the share of rows in each public cell or label, lines: the ``interval`` from the
        released cells (:func:`~opendp_sketch.estimators.plot.plot_column` says how each kind of
        column and map is drawn); with ``other``, a heat map of the two columns' joint shares
        (:func:`~opendp_sketch.estimators.plot.plot_pair`). Post-processing: free. Needs
        matplotlib (``pip install "opendp-sketch[plot]"``).

        :param column: a column name or index
        :param other: a second column for a joint heat map
        :param interval: the intervals' level, or ``None`` for bars alone
        :param ax: the ``Axes`` to draw on (default: a new figure)

        >>> import numpy as np, opendp_sketch as dps
        >>> fm = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
        >>> X = np.random.default_rng(0).beta(2, 5, (4000, 1))
        >>> sk = dps.Sketch(fm, np.asarray(fm.fixed_sum(X)), 4000, bounds=([0.0], [1.0]),
        ...                 noise={"sum_variance": 25.0, "count_variance": 25.0})
        >>> ax = dps.M2M(sk, n_samples=5000).plot("x0")
        >>> len(ax.patches), ax.get_ylabel()
        (8, 'share of rows')
        """
        from .plot import plot_column, plot_pair

        if interval is not None:
            _check_level(interval, ", or None")
        if other is not None:
            return plot_pair(self, column, other, ax=ax)
        return plot_column(self, column, interval=interval, ax=ax)

    @property
    def fit_ratio(self) -> float:
        """How well the synthetic distribution explains the sketch: the residual ``‖Pᵀw − ẑ‖``
        over the residual the recorded noise alone would leave (``√Σσ_k² / n̂``). About 1 or
        less: the fit explains the sketch up to its noise; well above 1 (say 2): the decoder could
        not reconcile the released blocks, and answers deserve less trust than their intervals
        say. ``NaN`` for the ridge estimator, a degenerate fit or a noise-free sketch. Public:
        read from the sketch and the fit.
        """
        if self.method != "synthetic" or self.degenerate:
            return float("nan")
        noise = self.decoder.noise_norm_
        return float(self.decoder.residual_ / noise) if noise > 0 else float("nan")

    def _repr_html_(self) -> str:
        """The sketch's card for notebooks, with the decoder's size and fit."""
        ratio = self.fit_ratio
        fit = f"; fit residual {ratio:.2f}× what the noise explains" if np.isfinite(ratio) else ""
        return (
            self.sketch._repr_html_()
            + f"<p style='font-family:system-ui,sans-serif'>decoded by {self.method}: "
            f"{self.samples.shape[0]:,} weighted points{fit}</p>"
        )

    def __repr__(self) -> str:
        fit = f"lam={self.lam:.3g}" if self.lam is not None else f"method={self.method!r}"
        if self.method == "synthetic" and math.isfinite(self.fit_ratio):
            fit += f", fit_ratio={self.fit_ratio:.2f}"
        return (
            f"M2M({type(self.feature_map).__name__}, m={self.feature_map.num_features}, "
            f"n_samples={self.n_samples}, {fit}, n_hat={self.n_hat:g})"
        )


def _scalar(out: Any) -> Any:
    if isinstance(out, Interval):
        return Interval(*(_scalar(o) for o in out))
    if isinstance(out, tuple):
        return tuple(_scalar(o) for o in out)
    if isinstance(out, np.ndarray) and out.ndim == 0:
        return out.item()
    if isinstance(out, np.floating):
        return float(out)
    if isinstance(out, np.bool_):
        return bool(out)
    return out


def _around(value: Any, low: Any, high: Any) -> tuple[Any, Any]:
    """Bounds widened to hold the value. The value draws on every released block and the bounds
    on one, so a large noise draw in that block can leave the value outside them; moving the side
    that misses it out to the value can only raise the coverage (a NaN value leaves them as is).

    >>> [v.tolist() for v in _around(np.array([2.0, 5.0]), np.array([3.0, 1.0]), np.array([4.0, 4.0]))]
    [[2.0, 1.0], [4.0, 5.0]]
    """
    return np.fmin(low, value), np.fmax(high, value)


def _check_level(interval: Any, alternative: str = "") -> None:
    """Refuse an interval level outside ``(0, 1)``, naming the fix."""
    if isinstance(interval, bool) or not (isinstance(interval, (float, int)) and 0 < interval < 1):
        raise ValueError(f"interval ({interval!r}) must be a level in (0, 1), e.g. 0.95{alternative}")
