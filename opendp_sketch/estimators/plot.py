"""Plots of a decoded distribution: one column's shares per public cell, with their intervals,
and two columns' joint shares as a heat map.

``est`` below is an :class:`~opendp_sketch.M2M` estimator, used through its public methods
only (typed ``Any``: this module sits below ``m2m`` in the import graph, which calls it).
Everything drawn is post-processing of the released sketch (the decoder's weights and the
released cells' intervals), so plotting costs no privacy budget. ``matplotlib`` is optional:
``pip install "opendp-sketch[plot]"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from ..schema import Numeric
from .intervals import partitions


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError(
            'plotting needs matplotlib: pip install "opendp-sketch[plot]" (from a checkout: pip install -e ".[plot]")'
        ) from None
    return plt


def column_shares(est: Any, column: str | int, *, interval: float | None = 0.95) -> pl.DataFrame:
    """The decoded share of rows in each public cell (numeric column) or label (categorical or
    boolean column), as a frame; with ``interval`` also ``low``, ``high`` and ``supported``
    (bounds from the released cells, see :meth:`M2M.expect`).

    A numeric column gets ``low_edge`` and ``high_edge`` (cells are ``[low_edge, high_edge)``,
    the last one closed). Intervals need a map of marginal tables or histograms; other maps
    (RFF, RACE, dyadic trees) give the shares alone.
    """
    name = est.columns[est.column_index(column)]
    if est.schema is not None and not isinstance(est.schema[name], Numeric):
        out = est.shares(name, interval=interval).rename({name: "label"})
        if "low" in out.columns:  # shares lie in [0, 1]; the interval still holds the share
            out = out.with_columns(
                pl.min_horizontal(pl.col("low").clip(0.0, 1.0), "share"),
                pl.max_horizontal(pl.col("high").clip(0.0, 1.0), "share"),
            )
        return out
    edges, own = est.cell_edges(name)
    col = pl.col(name)
    exprs = [
        ((col >= a) & ((col <= b) if k == edges.size - 2 else (col < b))).alias(f"_{k}")
        for k, (a, b) in enumerate(zip(edges[:-1], edges[1:]))
    ]
    out = pl.DataFrame({"low_edge": edges[:-1], "high_edge": edges[1:]})
    if interval is None or not own or partitions(est.feature_map) is None:  # e.g. dyadic trees
        return out.with_columns(share=pl.Series(np.atleast_1d(est.expect(exprs)), dtype=pl.Float64))
    iv = est.expect(exprs, interval=interval)
    share = np.atleast_1d(iv.value)
    # shares lie in [0, 1]; the interval still holds the share (a ridge share may be negative)
    low = np.minimum(np.clip(np.atleast_1d(iv.low), 0.0, 1.0), share)
    high = np.maximum(np.clip(np.atleast_1d(iv.high), 0.0, 1.0), share)
    return out.with_columns(
        share=pl.Series(share, dtype=pl.Float64),
        low=pl.Series(low, dtype=pl.Float64),
        high=pl.Series(high, dtype=pl.Float64),
        supported=pl.Series(np.atleast_1d(iv.supported), dtype=pl.Boolean),
    )


#: more labels than this on an axis: only every k-th is written, so at most about this many show
MAX_TICK_LABELS = 30


def label_ticks(ax: Any, labels: list[str], which: str = "x") -> None:
    """Label ticks ``0 … k−1`` of an axis with ``labels``, readable however many there are: x
    labels are slanted beyond 6 and upright (vertical) beyond 12, and beyond
    :data:`MAX_TICK_LABELS` only every ``⌈k/30⌉``-th label is written (the ticks stay, one per bar).

    >>> import matplotlib; _ = matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> _, ax = plt.subplots()
    >>> label_ticks(ax, [f"state {i}" for i in range(53)])
    >>> shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    >>> len(ax.get_xticks()), len(shown), shown[:3], ax.get_xticklabels()[0].get_rotation()
    (53, 27, ['state 0', 'state 2', 'state 4'], 90.0)
    >>> plt.close("all")
    """
    k = len(labels)
    step = -(-k // MAX_TICK_LABELS)
    shown = [label if i % step == 0 else "" for i, label in enumerate(labels)]
    ticks = np.arange(k)
    if which == "y":
        ax.set_yticks(ticks, shown, fontsize=8 if k > 12 else None)
        return
    if k > 12:
        ax.set_xticks(ticks, shown, rotation=90, ha="center", fontsize=8)
    elif k > 6:
        ax.set_xticks(ticks, shown, rotation=30, ha="right")
    else:
        ax.set_xticks(ticks, shown)


def _per_value(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``1 / (whole values in [a_k, b_k))`` per cell (the last cell closed), 0 for a cell without one."""
    count = np.floor(b) - np.ceil(a) + 1 - ((b == np.floor(b)) & (np.arange(b.size) < b.size - 1))
    return np.where(count > 0, 1.0 / np.maximum(count, 1), 0.0)


class _Axis:
    """One axis of a joint plot: the cell (or label) index of each decoded point, and how to draw it."""

    def __init__(self, est: Any, column: str | int) -> None:
        self.name = est.columns[est.column_index(column)]
        values = est.weighted_frame()[self.name]
        spec = est.schema[self.name] if est.schema is not None else None
        self.labels: list[str] | None = None
        self.log = isinstance(spec, Numeric) and spec.scale == "log"
        if spec is not None and not isinstance(spec, Numeric):
            cats = est.shares(self.name)[self.name].to_list()
            self.labels = ["(null)" if v is None else str(v) for v in cats]
            lookup = {v: k for k, v in enumerate(cats)}
            self.index = np.array([lookup.get(v, 0) for v in values.to_list()], dtype=np.int64)
            self.edges = np.arange(len(cats) + 1) - 0.5
            self.per = np.ones(len(cats))
        else:
            self.edges = est.cell_edges(self.name)[0]
            x = values.to_numpy().astype(np.float64)
            k = np.searchsorted(self.edges, x, side="right") - 1
            self.index = np.clip(k, 0, self.edges.size - 2)
            integer = isinstance(spec, Numeric) and spec.integer
            a, b = self.edges[:-1], self.edges[1:]
            self.per = _per_value(a, b) if integer else np.ones(a.size)

    def draw(self, ax: Any, which: str) -> None:
        set_label = ax.set_xlabel if which == "x" else ax.set_ylabel
        set_label(self.name)
        if self.labels is not None:
            label_ticks(ax, self.labels, which)
        elif self.log:
            _log_axis(ax.set_xscale if which == "x" else ax.set_yscale, self.edges)


def _log_axis(set_scale: Any, edges: np.ndarray) -> None:
    """A log axis for a log-scale column, linear below its first positive cell edge (it may hold 0)."""
    positive = edges[edges > 0]
    set_scale("symlog", linthresh=float(positive.min()) if positive.size else 1.0)


def _joint(est: Any, ax_x: _Axis, ax_y: _Axis) -> np.ndarray:
    """Shares of the decoded weights in each (x cell, y cell), summing to 1."""
    out = np.zeros((ax_x.edges.size - 1, ax_y.edges.size - 1))
    np.add.at(out, (ax_x.index, ax_y.index), np.clip(np.asarray(est.weights, dtype=np.float64), 0.0, None))
    total = out.sum()
    return out / total if total > 0 else out


def pair_shares(est: Any, x: str | int, y: str | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decoded share of rows in each (x cell or label, y cell or label): ``(x edges, y edges,
    shares)`` with ``shares[i, k]`` for x cell ``i`` and y cell ``k`` (labels at edges ``k ± ½``).
    The shares sum to 1; post-processing of the decoder's weights, without intervals."""
    ax_x, ax_y = _Axis(est, x), _Axis(est, y)
    return ax_x.edges, ax_y.edges, _joint(est, ax_x, ax_y)


def plot_pair(est: Any, x: str | int, y: str | int, *, ax: Any = None) -> Any:
    """A heat map of :func:`pair_shares` (integer columns per whole value) on a matplotlib
    ``Axes``, with a colour bar; returns the ``Axes``."""
    plt = _pyplot()
    ax_x, ax_y = _Axis(est, x), _Axis(est, y)
    if ax_x.name == ax_y.name:
        raise ValueError(f"a joint plot needs two different columns, got {ax_x.name!r} twice")
    shown = _joint(est, ax_x, ax_y) * ax_x.per[:, None] * ax_y.per[None, :]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 4.8))
    mesh = ax.pcolormesh(ax_x.edges, ax_y.edges, shown.T, cmap="viridis", shading="flat")
    per = " per value" if (ax_x.per != 1).any() or (ax_y.per != 1).any() else ""
    ax.figure.colorbar(mesh, ax=ax, label=f"share of rows{per}")
    ax_x.draw(ax, "x")
    ax_y.draw(ax, "y")
    ax.set_title(f"{ax_x.name} × {ax_y.name}: decoded from the sketch", fontsize=10)
    return ax


def plot_column(est: Any, column: str | int, *, interval: float | None = 0.95, ax: Any = None) -> Any:
    """Draw :func:`column_shares` on a matplotlib ``Axes`` (a new figure without ``ax``) and
    return it: bars of the decoded share per cell or label, and the interval as a vertical line
    (hatched bars: no released block holds the cell, the bounds are what the cells allow).
    A log-scale column is drawn on a log axis (symmetric near 0), where its cells look equal;
    an integer column's bars give the share per whole value in the cell."""
    plt = _pyplot()
    name = est.columns[est.column_index(column)]
    frame = column_shares(est, name, interval=interval)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    share = frame["share"].to_numpy()
    ylabel = "share of rows"
    has_iv = "low" in frame.columns
    hatch = None
    if has_iv:
        # the bounds come from one released block, the bar from the joint fit; the interval is
        # widened to hold the bar (M2M.expect), so draw the interval itself, not an error bar
        low, high = frame["low"].to_numpy(), frame["high"].to_numpy()
        hatch = ["" if s else "//" for s in frame["supported"].to_list()]
    if "label" in frame.columns:
        labels = ["(null)" if v is None else str(v) for v in frame["label"].to_list()]
        x = np.arange(len(labels))
        bars = ax.bar(x, share, color="tab:blue", alpha=0.75, edgecolor="tab:blue")
        label_ticks(ax, labels)
        centres = x
    else:
        a, b = frame["low_edge"].to_numpy(), frame["high_edge"].to_numpy()
        spec = est.schema[name] if est.schema is not None else None
        if isinstance(spec, Numeric) and spec.integer:
            # cells of an integer column hold 2 or 3 whole values each: per value, or the bars
            # would alternate with the cells' sizes
            per = _per_value(a, b)
            share = share * per
            if has_iv:
                low, high = low * per, high * per
            ylabel = "share of rows per value"
        bars = ax.bar(a, share, width=b - a, align="edge", color="tab:blue", alpha=0.75, edgecolor="white")
        centres = (a + b) / 2
        if isinstance(spec, Numeric) and spec.scale == "log":
            _log_axis(ax.set_xscale, a)
        ax.set_xlim(a[0], b[-1])
        if isinstance(spec, Numeric) and spec.time is not None:  # ticks as dates, not day numbers
            from matplotlib.ticker import FuncFormatter

            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: str(spec.as_time(v))))
            ax.tick_params(axis="x", labelrotation=30)
    if has_iv:
        for bar, h in zip(bars, hatch or []):
            bar.set_hatch(h)
        ax.vlines(centres, low, high, color="black", linewidth=1)
        ax.scatter(np.r_[centres, centres], np.r_[low, high], marker="_", color="black", s=12, linewidths=1)
    ax.set_xlabel(name)
    ax.set_ylabel(ylabel)
    level = f", {interval:.0%} intervals" if has_iv else ""
    ax.set_title(f"{name}: decoded from the sketch{level}", fontsize=10)
    ax.set_ylim(bottom=0)
    return ax
