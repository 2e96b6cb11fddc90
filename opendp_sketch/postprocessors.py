r"""OpenDP post-processing functions: chain a sketch-release measurement with an estimate.

``meas >> dps.then_m2m("mean")`` is a measurement whose release is the M2M mean; the privacy map is
the sketch's (post-processing is free). In a ``dp.Context`` the same constructor is registered as
``m2m``::

    ctx.query().private_sketch(fm).m2m("mean").release()
    ctx.query().private_sketch(fm).m2m("cdf", query_args=("age", [30, 40])).release()
    ctx.query().private_sketch(fm).m2m(None).release()    # the M2M estimator itself
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import opendp.prelude as dp
import polars as pl

from .estimators.m2m import M2M, Prior, check_options
from .sketch import Sketch

__all__ = ["make_m2m", "then_m2m", "m2m_estimate", "FailedEstimate"]


@dataclass(frozen=True)
class FailedEstimate:
    """What a chained post-processor releases when the sketch cannot support the estimate (e.g.
    a noisy count ≤ 0): falsy, with the reason. The release was charged like any other; the
    reason is a function of the released sketch only, so showing it costs nothing more.
    """

    reason: str

    def __bool__(self) -> bool:
        return False


_QUERIES = ("mean", "moment", "covariance", "cdf", "quantile", "expect", "count", "weighted_frame")


def make_m2m(
    query: str | None,
    query_args: Sequence[Any] = (),
    *,
    bounds: Any = None,
    prior: Prior | None = None,
    n_samples: int | None = None,
    seed: int = 0,
    lam: str | float = "auto",
    discrete: dict[str | int, Any] | None = None,
) -> dp.Function:
    r"""A post-processing :class:`opendp.mod.Function` from a released :class:`Sketch` to an estimate.

    :param query: ``None`` to return the :class:`M2M` estimator itself, or the name of one of its
        methods (``"mean"``, ``"moment"``, ``"covariance"``, ``"cdf"``, ``"quantile"``,
        ``"expect"``, ``"count"``, ``"weighted_frame"``)
    :param query_args: positional arguments of that method, e.g. ``("age", [30, 40])`` for ``"cdf"``
    :param bounds: as for :class:`M2M`
    :param prior: as for :class:`M2M`
    :param n_samples: as for :class:`M2M`
    :param seed: as for :class:`M2M`
    :param lam: as for :class:`M2M`
    :param discrete: as for :class:`M2M`
    :raises ValueError: for an unknown query name or bad options (checked here, before any
        release). Problems only the released sketch can reveal (a noisy count ≤ 0, a column
        name it lacks) neither raise nor warn — the release is spent either way — but give a
        falsy :class:`FailedEstimate` holding the reason.

    OpenDP records each call of a measurement on its output, input data included
    (``__opendp_dict__``, for ``dp.serialize``). A released :class:`Sketch` or :class:`M2M`
    refuses that record, numbers cannot hold it, and the frame of ``"weighted_frame"`` is a
    :class:`ReleasedFrame` (a Polars ``DataFrame`` that refuses it too).

    :example:

    >>> import numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> fm = dps.Histogram(bounds=(0, 1), bins=8, dim=1)
    >>> domain = dps.box_domain(bounds=(0, 1), num_columns=1)
    >>> meas = dps.make_private_sketch(domain, dp.symmetric_distance(), dp.max_divergence(), fm, scale=1.0)
    >>> chained = meas >> dps.then_m2m("mean", n_samples=10_000)
    >>> chained.map(1) == meas.map(1)
    True
    >>> chained(np.random.default_rng(0).uniform(size=(1000, 1))).shape
    (1,)
    """
    options = {
        "bounds": bounds,
        "prior": prior,
        "n_samples": n_samples,
        "seed": seed,
        "lam": lam,
        "discrete": discrete,
    }
    return dp.new_function(m2m_estimate(query, query_args, options), TO="ExtrinsicObject")


class ReleasedFrame(pl.DataFrame):
    """A Polars ``DataFrame`` released by a measurement: it refuses OpenDP's record of the call
    (``__opendp_dict__``, which holds the input data), so the frame does not keep the table
    alive or reachable. Everything else is a ``DataFrame``'s; operations return plain frames.

    >>> f = ReleasedFrame({"a": [1.0]})
    >>> f.__opendp_dict__ = {"arg": "the data"}
    >>> hasattr(f, "__opendp_dict__"), isinstance(f, pl.DataFrame)
    (False, True)
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "__opendp_dict__":
            return
        super().__setattr__(name, value)


def m2m_estimate(
    query: str | None, query_args: Sequence[Any], options: dict[str, Any]
) -> Callable[[Sketch], Any]:
    """The plain post-processing callable ``Sketch -> estimate``, arguments checked before any
    release; it never raises or warns (a failure is a :class:`FailedEstimate`)."""
    if query is not None and query not in _QUERIES:
        raise ValueError(f"query ({query!r}) must be None or one of {_QUERIES}")
    if not isinstance(query_args, (list, tuple)):
        raise ValueError(f"query_args ({query_args!r}) must be a tuple of arguments")
    check_options(options["n_samples"], options["seed"], options["lam"])

    def estimate(sketch: Sketch) -> Any:
        # runs after the noise is drawn: it must neither raise nor warn (under ``-W error`` a
        # warning raises), or a failed query would go uncharged — a free, repeatable oracle
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                est = M2M(sketch, **options)
                out = est if query is None else getattr(est, query)(*tuple(query_args))
                return ReleasedFrame(out) if isinstance(out, pl.DataFrame) else out
            except Exception as e:  # noqa: BLE001 - any failure becomes a flagged result
                return FailedEstimate(f"{type(e).__name__}: {e}")

    return estimate


then_m2m = make_m2m
