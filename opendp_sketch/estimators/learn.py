r"""Learning from a sketch by weighted empirical risk minimisation (implicit-M2M, M2M paper §3.5).

The M2M weights ``w`` turn the sketch into a weighted synthetic dataset ``(x̃_i, w_i)``; a model is
fitted by minimising ``Σ_i w_i ℓ(θ; x̃_i)``. Weights may be negative (the estimate is linear in the
noisy sketch), so a small ridge ``penalty`` keeps the objective bounded below. Features are
mapped to ``[-1, 1]`` by the public box before fitting and coefficients are reported in the data's
units.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.special

from ..backends.tables import encode_rows
from ..features.base import FeatureMap
from ..features.byclass import ByClass
from ..features.composite import Composite
from ..features.histogram import DyadicTrees, Histogram
from ..features.marginals import MarginalTables
from ..schema import Numeric
from ..sketch import Sketch
from .contract import default_column_names, renamed_keyword
from .m2m import M2M

__all__ = ["SketchLogisticRegression", "SketchLinearRegression"]


class _SketchRegressor:
    """Shared parts: resolve the target, build the weighted design, map coefficients back."""

    def __init__(
        self,
        target: str | int | None = None,
        penalty: float = 1e-4,
        fit_intercept: bool = True,
        m2m_options: dict[str, Any] | None = None,
        *,
        alpha: float | None = None,
    ) -> None:
        # the old name, for one release (alpha is an interval's level elsewhere)
        penalty = renamed_keyword(type(self).__name__, "alpha", alpha, "penalty", penalty)
        self.target = target
        self.penalty = penalty
        self.fit_intercept = fit_intercept
        self.m2m_options = m2m_options

    def _resolve_target(self, source: Any) -> None:
        """``target=None``: the schema's first declared target, else the last column."""
        if self.target is not None:
            self._target: str | int = self.target
            return
        schema = getattr(source, "schema", None)
        targets = schema.get("targets", []) if isinstance(schema, dict) else getattr(schema, "targets", [])
        self._target = targets[0] if targets else -1

    def _m2m(self, source: Sketch | M2M, discrete_target: bool) -> M2M:
        self._resolve_target(source)
        a = self.penalty
        if (
            isinstance(a, bool)
            or not isinstance(a, (int, float, np.integer, np.floating))
            or not (np.isfinite(a) and a >= 0)
        ):
            raise ValueError(f"penalty ({a!r}) must be a finite number ≥ 0")
        if isinstance(source, M2M):
            self._check_joint(source.feature_map, source.columns)
            return source
        if not isinstance(source, Sketch):
            raise ValueError(f"fit needs a Sketch or an M2M estimator, got {type(source).__name__}")
        self._check_joint(
            source.feature_map,
            list(source.column_names) if source.column_names else default_column_names(source.feature_map),
        )
        options = dict(self.m2m_options or {})
        if discrete_target:
            names = (
                list(source.column_names) if source.column_names else default_column_names(source.feature_map)
            )
            j = _target_index(self._target, names, source.feature_map.input_dim)
            discrete = dict(options.get("discrete") or {})
            given = {names.index(k) if isinstance(k, str) and k in names else k for k in discrete}
            if j not in given and not (_is_byclass(source) and j == source.feature_map.dim):
                lo, hi = _column_bounds(source, options.get("bounds"), j)
                discrete[j] = [lo, hi]  # the two classes: the label's public bounds
            options["discrete"] = discrete
        return M2M(source, **options)

    def _check_joint(self, fm: FeatureMap, names: list[str]) -> None:
        """Refuse, before any decoding, a map that never measures the target together with a
        feature: its sketch holds no trace of how the target varies with them."""
        j = _target_index(self._target, names, fm.input_dim)
        if not _measures_jointly(fm, j):
            raise ValueError(
                f"a {type(fm).__name__} sketch measures column {names[j]!r} only on its own, so it cannot "
                f"carry how it depends on the features; release a map that holds it jointly with them: "
                'with a schema, release_sketch(..., pairs="all") (every 2-way marginal), or '
                f"dps.MarginalTables with 2-way subsets containing column {j} (dps.MarginalTables.auto does), "
                "dps.ByClass(...) for a label, or dps.RFF over all columns"
            )

    def _design(self, est: M2M) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        j = _target_index(self._target, est.columns, est.lower.size)
        keep = [c for c in range(est.lower.size) if c != j]
        # centring on the box needs an intercept to absorb it; without one, only scale
        self._center = (est.upper[keep] + est.lower[keep]) / 2 if self.fit_intercept else np.zeros(len(keep))
        self._half = (
            (est.upper[keep] - est.lower[keep]) / 2
            if self.fit_intercept
            else np.maximum(np.abs(est.upper[keep]), np.abs(est.lower[keep]))
        )
        self.feature_names_in_ = [est.columns[c] for c in keep]
        self.target_index_ = j
        #: the sketch's public schema (``None`` without one): rows are then read in its units
        self.schema_ = est.schema
        Z = (est.samples[:, keep] - self._center) / self._half
        if self.fit_intercept:
            Z = np.column_stack([Z, np.ones(Z.shape[0])])
        return Z, est.samples[:, j], est.weights, j

    def _set_coef(self, theta: np.ndarray) -> None:
        beta = theta[: self._half.size] / self._half
        self.coef_ = beta
        self.intercept_ = float(theta[-1] - beta @ self._center) if self.fit_intercept else 0.0

    def _check_X(self, X: Any) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise ValueError("the model is not fitted; call fit(sketch) first")
        schema = getattr(self, "schema_", None)
        if schema is not None:  # rows in the table's own units and labels, read through the schema
            return encode_rows(schema, X, self.feature_names_in_)
        if hasattr(X, "columns") and not isinstance(X, np.ndarray):  # a frame: columns by name
            missing = [c for c in self.feature_names_in_ if c not in list(X.columns)]
            if missing:
                raise ValueError(
                    f"the rows lack columns {missing} (the model reads {self.feature_names_in_})"
                )
            X = X[self.feature_names_in_]
            X = X.to_numpy() if hasattr(X, "to_numpy") else X
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1 and self.coef_.size == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[1] != self.coef_.size:
            raise ValueError(
                f"X must have shape (n, {self.coef_.size}) (columns {self.feature_names_in_}), got {X.shape}"
            )
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        return X

    def decision_function(self, X: Any) -> np.ndarray:
        """``X·coef_ + intercept_``."""
        return self._check_X(X) @ self.coef_ + self.intercept_

    def _penalty(self, p: int) -> np.ndarray:
        pen = np.full(p, float(self.penalty))
        if self.fit_intercept:
            pen[-1] = 0.0
        return pen


class SketchLogisticRegression(_SketchRegressor):
    r"""Binary logistic regression trained from a sketch of ``(features, label)``.

    ``fit`` minimises ``Σ_i w_i [log(1 + e^{η_i}) − y_i η_i] + (penalty/2)‖β‖²`` over the M2M
    weighted samples with L-BFGS. The target column's two bound values are the classes (the prior
    draws it from ``{lower, upper}``); for a two-class :class:`~opendp_sketch.ByClass` sketch the
    label column is the target.

    :param target: the label column (name or index); ``None`` (default): the first target the
        sketch's schema declares (``dps.Schema(..., targets="y")``), else the last column
    :param penalty: ridge penalty on the standardised coefficients (keeps the objective bounded)
    :param fit_intercept: fit an intercept
    :param m2m_options: keyword arguments for :class:`M2M` when ``fit`` is given a sketch
    :param max_iter: L-BFGS iterations

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(20_000, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(float)
    >>> fm = dps.RFF(dim=3, num_features=200, bandwidth=1.0, seed=0)
    >>> sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=([-1, -1, 0], [1, 1, 1]), epsilon=10.0)
    >>> clf = dps.SketchLogisticRegression(m2m_options={"n_samples": 20_000}).fit(sk)
    >>> clf.coef_.shape, clf.predict([[0.5, 0.5], [-0.5, -0.5]]).tolist()
    ((2,), [1.0, 0.0])
    """

    def __init__(
        self,
        target: str | int | None = None,
        penalty: float = 1e-4,
        fit_intercept: bool = True,
        m2m_options: dict[str, Any] | None = None,
        max_iter: int = 500,
        *,
        alpha: float | None = None,
    ) -> None:
        super().__init__(target, penalty, fit_intercept, m2m_options, alpha=alpha)
        self.max_iter = max_iter

    def fit(self, source: Sketch | M2M) -> SketchLogisticRegression:
        """Fit from a sketch (an :class:`M2M` is built with ``m2m_options``) or a ready M2M."""
        est = self._m2m(source, discrete_target=True)
        fm = est.feature_map
        if isinstance(fm, ByClass) and fm.num_classes != 2:
            raise ValueError(
                f"the target column has {fm.num_classes} classes; SketchLogisticRegression is binary"
            )
        Z, t, w, j = self._design(est)
        values = np.unique(t)
        if values.size == 2:
            self.classes_ = self._labels(values, j)
            y = (t == values[1]).astype(np.float64)
        elif values.size == 1 or est.upper[j] == est.lower[j]:
            raise ValueError("the target column has a single value; nothing to classify")
        elif j in est.discrete:
            raise ValueError(
                f"the target column has {values.size} classes; SketchLogisticRegression is binary"
            )
        else:  # continuous prior on the label column: soft labels in [0, 1]
            self.classes_ = self._labels(np.array([est.lower[j], est.upper[j]]), j)
            y = (t - est.lower[j]) / (est.upper[j] - est.lower[j])
        pen = self._penalty(Z.shape[1])

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            eta = Z @ theta
            value = w @ (np.logaddexp(0.0, eta) - y * eta) + 0.5 * pen @ (theta * theta)
            grad = Z.T @ (w * (scipy.special.expit(eta) - y)) + pen * theta
            return float(value), grad

        res = scipy.optimize.minimize(
            loss, np.zeros(Z.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": self.max_iter}
        )
        self.n_iter_ = int(res.nit)
        self._set_coef(res.x)
        return self

    def _labels(self, values: np.ndarray, j: int) -> np.ndarray:
        """The target's two class values in the table's labels (with a schema) or as they are."""
        if self.schema_ is None:
            return values
        U = np.zeros((values.size, len(self.schema_)))
        U[:, j] = values
        return np.array(self.schema_.decode(U).get_column(self.schema_.columns[j]).to_list(), dtype=object)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``(n, 2)`` probabilities of ``classes_[0]`` and ``classes_[1]``. ``X``: rows in the
        table's units and labels for a schema sketch (a DataFrame with the feature columns, or an
        array of them in order), else an ``(n, features)`` array."""
        p = scipy.special.expit(self.decision_function(X))
        return np.column_stack([1 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """The more probable class of each row (values from ``classes_``)."""
        return np.where(self.decision_function(X) > 0, self.classes_[1], self.classes_[0])


class SketchLinearRegression(_SketchRegressor):
    r"""Least squares (ridge with ``penalty > 0``) of one column on the others, from a sketch.

    Solves ``(Zᵀ W Z + penalty·I) θ = Zᵀ W y`` on the M2M weighted samples (standardised features,
    intercept not penalised).

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 1, size=(20_000, 2)); y = 0.5 * X[:, 0] + 0.25
    >>> fm = dps.RFF(dim=3, num_features=200, bandwidth=1.0, seed=0)
    >>> sk = dps.release_sketch(np.column_stack([X, y]), fm, bounds=(0, 1), epsilon=50.0)
    >>> reg = dps.SketchLinearRegression(m2m_options={"n_samples": 20_000}).fit(sk)
    >>> np.round(reg.coef_, 1).tolist(), round(reg.intercept_, 1)
    ([0.5, 0.0], 0.2)
    """

    def fit(self, source: Sketch | M2M) -> SketchLinearRegression:
        """Fit from a sketch (an :class:`M2M` is built with ``m2m_options``) or a ready M2M."""
        est = self._m2m(source, discrete_target=False)
        Z, y, w, _ = self._design(est)
        A = (Z * w[:, None]).T @ Z + np.diag(self._penalty(Z.shape[1]))
        rhs = Z.T @ (w * y)
        try:
            theta = scipy.linalg.solve(A, rhs, assume_a="sym")
        except np.linalg.LinAlgError:  # singular weighted design (e.g. penalty = 0, a constant column)
            theta = scipy.linalg.lstsq(A, rhs)[0]
        self._set_coef(theta)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted target values (in the target's units for a schema sketch, whose rows are
        read in the table's units and labels)."""
        y = self.decision_function(X)
        if self.schema_ is None:
            return y
        name = self.schema_.columns[self.target_index_]
        return self.schema_.from_unit(name, y) if isinstance(self.schema_[name], Numeric) else y


def _measures_jointly(fm: FeatureMap, j: int) -> bool:
    """Whether some feature of ``fm`` depends on column ``j`` together with another column.

    Maps of one column at a time (Histogram, DyadicTrees, MarginalTables whose blocks never hold ``j``
    with another column, composites of those) cannot; every other map (RFF, RACE, Moments, ByClass
    and MarginalTables with a block over ``j`` and another column) can.
    """
    if isinstance(fm, (Histogram, DyadicTrees)):
        return fm.input_dim == 1
    if isinstance(fm, MarginalTables):
        return any(j in b.subset and len(b.subset) > 1 for b in fm.blocks)
    if isinstance(fm, Composite):
        return any(_measures_jointly(m, j) for m in fm.maps)
    return True


def _is_byclass(sketch: Sketch) -> bool:
    return isinstance(sketch.feature_map, ByClass)


def _target_index(target: str | int, names: list[str] | None, d: int) -> int:
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        j = int(target) + d if target < 0 else int(target)
        if not 0 <= j < d:
            raise ValueError(f"target index ({target}) must be in [-{d}, {d})")
        return j
    if isinstance(target, str) and names and target in names:
        return names.index(target)
    raise ValueError(f"target ({target!r}) is not a column of the sketch; its columns are {names}")


def _column_bounds(sketch: Sketch, bounds: Any, j: int) -> tuple[float, float]:
    from .contract import resolve_box

    lo, hi = resolve_box(bounds, sketch, sketch.feature_map.input_dim)
    return float(lo[j]), float(hi[j])
