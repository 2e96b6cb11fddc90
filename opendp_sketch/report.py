"""A release people can look at: one self-contained HTML page from a sketch.

:func:`write_report` decodes a sketch (:class:`~opendp_sketch.M2M`) and writes a page that a
person opens in a browser: the privacy record, every column's distribution with its 95 %
intervals and a small table of its answers, in the table's units and labels, and how the
columns relate (which pairs were released, which are inferred). Everything on it is
post-processing of the released sketch: it costs no budget and can be regenerated at will.

The page is one file: figures are inline SVG (matplotlib), the style is inline, and nothing is
fetched (no script, font, image or style sheet from anywhere). A column the sketch's map holds no
cells of (RFF, RACE, moments) gets a note instead of a figure: such a map does not show a
column's distribution, and its answers come without intervals. Needs matplotlib, in the
``plot`` extra (``pip install "opendp-sketch[plot]"``).

Cost: most of the time goes to the intervals (one pass over the released cells per batch of
questions, :func:`~opendp_sketch.estimators.intervals.cell_intervals`). The page asks each
question once (a label's shares serve its figure and its table), asks them on two worker
threads while the calling thread draws, and draws every column on one reused figure; each
answer is the one the estimator gives when asked alone. ``benchmarks/bench_report.py``
measures it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import html
import io
import json
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import polars as pl

from .estimators.m2m import M2M
from .estimators.plot import column_shares, plot_column
from .features.composite import Composite
from .features.histogram import DyadicTrees, Histogram
from .features.marginals import MarginalTables
from .features.moments import Moments
from .schema import Categorical, Numeric, Schema
from .sketch import Sketch

__all__ = ["write_report", "report_html"]

_LEVEL = 0.95

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;
color:#1b1f23;line-height:1.45;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
h3{font-size:1.05rem;margin:1.2rem 0 .3rem}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.92rem}
td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:right}th{background:#f5f5f5}
td:first-child,th:first-child{text-align:left}
.card{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:.6rem}
.card div{background:#f6f8fa;border-radius:6px;padding:.5rem .8rem}
.card b{display:block;font-size:.8rem;color:#57606a;font-weight:600}
.column{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1rem;align-items:start}
.note{color:#57606a;font-size:.9rem}.flag{color:#9a6700}
svg{max-width:100%;height:auto}
"""


#: what to install when matplotlib is missing (the ``plot`` extra of pyproject.toml)
MISSING_MATPLOTLIB = (
    'the report needs matplotlib, in the "plot" extra: pip install "opendp-sketch[plot]" '
    '(from a checkout: pip install -e ".[plot]")'
)


def _figure_class() -> Any:
    """matplotlib's ``Figure`` (no pyplot: the page's figures never touch a notebook's backend),
    or a ``ValueError`` naming the extra to install."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError(MISSING_MATPLOTLIB) from None
    return Figure


def _svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG (no external references)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


class _Answers:
    """The decoded estimator, answering each question once: a label's shares and a column's cell
    shares (lists of Polars expressions to :meth:`~opendp_sketch.M2M.expect`) are kept, so the
    figures' questions can be asked ahead, on worker threads, and each figure and table reads the
    same answers. Everything else is the estimator's own attribute."""

    def __init__(self, est: Any) -> None:
        self._est = est
        self._shares: dict[tuple[Any, Any], Any] = {}
        self._expected: list[tuple[list[pl.Expr], Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._est, name)

    def shares(self, column: Any, *, interval: float | None = None) -> Any:
        key = (column, interval)
        if key not in self._shares:
            self._shares[key] = self._est.shares(column, interval=interval)
        return self._shares[key]

    def expect(self, f: Any, *, return_std: bool = False, interval: float | None = None) -> Any:
        if return_std or not (isinstance(f, list) and f and all(isinstance(e, pl.Expr) for e in f)):
            return self._est.expect(f, return_std=return_std, interval=interval)
        for asked, level, answer in self._expected:  # the same expressions, exactly
            if level == interval and len(asked) == len(f) and all(a.meta.eq(b) for a, b in zip(asked, f)):
                return answer
        answer = self._est.expect(f, interval=interval)
        self._expected.append((f, interval, answer))
        return answer


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return html.escape(str(x))
    if not math.isfinite(v):
        return "—"
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:,.4g}"


def _count_text(sk: Sketch) -> str:
    """The released count with its 95 % noise interval (from the recorded noise variance)."""
    var = sk.noise.get("count_variance")
    if isinstance(var, (int, float)) and math.isfinite(var) and var > 0:
        half = 1.96 * math.sqrt(var)
        return f"{_fmt(sk.count)} (95 %: {_fmt(sk.count - half)} to {_fmt(sk.count + half)})"
    return _fmt(sk.count)


def _privacy_rows(sk: Sketch) -> list[tuple[str, str]]:
    p = sk.privacy or {}
    loss = ", ".join(f"{k} = {_fmt(p[k])}" for k in ("epsilon", "delta", "rho") if k in p) or "not recorded"
    rows = [
        ("privacy loss", loss),
        ("privacy unit", f"{p.get('d_in', 1)} row(s) per individual"),
        ("noise", str(sk.noise.get("mechanism", p.get("measure", "—")))),
        ("released row count", _count_text(sk)),
    ]
    estimate = p.get("rows_estimate")
    if isinstance(estimate, dict):
        rows.append(
            (
                "row estimate that planned the map",
                f"{_fmt(estimate.get('rows'))} (a share of {estimate.get('fraction')} of the budget)",
            )
        )
    if sk.schema is not None:
        digest = hashlib.sha256(json.dumps(sk.schema, sort_keys=True).encode()).hexdigest()[:16]
        rows.append(("schema digest", digest))
    if "ledger" in p:
        rows.append(
            (
                "ledger witness",
                f"release {int(p['ledger'].get('after', 0)) + 1} of dataset {p['ledger'].get('dataset')!r} (signed)",
            )
        )
    return rows


def _measured_pairs(sk: Sketch) -> set[tuple[int, int]]:
    """Column pairs some released block holds jointly: a marginal table's columns; none for maps
    of one column at a time (histograms, dyadic trees, moments ``[x, ‖x‖²]``); every pair for
    the other maps (RFF, RACE, …), which mix all columns."""
    fm = sk.feature_map
    maps = list(fm.maps) if isinstance(fm, Composite) else [fm]
    pairs: set[tuple[int, int]] = set()
    for m in maps:
        if isinstance(m, MarginalTables):
            for b in m.blocks:
                s = sorted(b.subset)
                pairs |= {(s[i], s[j]) for i in range(len(s)) for j in range(i + 1, len(s))}
        elif isinstance(m, (Histogram, DyadicTrees, Moments)):
            continue
        else:
            d = fm.input_dim
            pairs |= {(i, j) for i in range(d) for j in range(i + 1, d)}
    return pairs


def _association(est: Any) -> np.ndarray:
    """A ``d × d`` association from the decoded distribution: |correlation| between numeric
    columns, Cramér's V where a categorical column is involved (its codes' joint weights; a
    numeric column binned at its points' quintiles). Each column's codes are computed once."""
    X, w = est._user, est.weights  # noqa: SLF001 - the decoded points in the table's units
    d = X.shape[1]
    schema = est.schema
    nominal = {
        j for j, c in enumerate(est.columns) if schema is not None and isinstance(schema[c], Categorical)
    }
    out = np.eye(d)
    mu = w @ X
    C = X - mu
    var = w @ (C * C)
    codes: dict[int, np.ndarray] = {}

    def coded(j: int) -> np.ndarray:
        if j not in codes:
            codes[j] = _codes(X[:, j], j in nominal)
        return codes[j]

    for i in range(d):
        for j in range(i + 1, d):
            if i in nominal or j in nominal:
                out[i, j] = out[j, i] = _cramers_v(coded(i), coded(j), w)
            else:
                denom = math.sqrt(var[i] * var[j])
                out[i, j] = out[j, i] = abs(float(w @ (C[:, i] * C[:, j])) / denom) if denom > 0 else 0.0
    return out


def _codes(x: np.ndarray, nominal: bool) -> np.ndarray:
    """A column's codes for Cramér's V: its values' ranks (categorical), or its quintile bin."""
    if nominal:
        return np.unique(np.rint(x), return_inverse=True)[1]
    edges = np.quantile(x, [0.2, 0.4, 0.6, 0.8])
    return np.searchsorted(np.unique(edges), x)


def _cramers_v(ca: np.ndarray, cb: np.ndarray, w: np.ndarray) -> float:
    """Cramér's V of two coded columns under the weights ``w`` (the weights of each cell summed
    in the points' order, as ``np.add.at`` does)."""
    na, nb = int(ca.max()) + 1, int(cb.max()) + 1
    table = np.bincount(ca * nb + cb, weights=w, minlength=na * nb).reshape(na, nb)
    total = table.sum()
    if total <= 0 or min(table.shape) < 2:
        return 0.0
    expected = np.outer(table.sum(1), table.sum(0)) / total
    with np.errstate(divide="ignore", invalid="ignore"):
        chi2 = np.nansum((table - expected) ** 2 / np.where(expected > 0, expected, np.nan))
    return float(math.sqrt(max(chi2 / total, 0.0) / (min(table.shape) - 1)))


def _means(est: Any, numeric: list[str]) -> dict[str, tuple[Any, Any, Any, bool]] | None:
    """Each numeric column's mean, with its interval, from one pass over the released cells:
    ``{name: (value, low, high, supported)}``, or ``None`` for a map without cells. The same
    answers as ``est.mean(interval=)`` (up to the last bits of a sum), which would also bound
    the coded columns' means, that the page does not show: about half the cost at 20 columns."""
    if not numeric:
        return {}
    idx = [est.columns.index(n) for n in numeric]
    try:
        iv = est.expect(lambda X: X[:, idx], interval=_LEVEL)
    except ValueError:  # a map without cells: each table falls back on the values alone
        return None
    value, low, high, supported = (np.atleast_1d(a) for a in iv)
    out = {n: (value[k], low[k], high[k], bool(supported[k])) for k, n in enumerate(numeric)}
    states = getattr(est.schema, "null_states", {}) if est.schema is not None else {}
    if any(n in states for n in numeric):  # means among the non-null rows: M2M.mean's ratio
        full = est.mean(interval=_LEVEL)
        for n in numeric:
            if n in states:
                j = est.columns.index(n)
                out[n] = (full.value[j], full.low[j], full.high[j], bool(full.supported[j]))
    return out


def _column_table(est: Any, name: str, means: dict[str, tuple[Any, Any, Any, bool]] | None = None) -> str:
    """A small table of a column's answers with their intervals (``means``: :func:`_means`)."""
    col = est.schema[name] if est.schema is not None else None
    rows: list[str] = []
    if col is not None and not isinstance(col, Numeric):
        try:
            frame = est.shares(name, interval=_LEVEL)
        except ValueError:  # a map without cells: the decoder's shares alone
            frame = est.shares(name)
        for r in frame.iter_rows(named=True):
            label = "(null)" if r[name] is None else r[name]
            flag = "" if r.get("supported", True) else ' <span class="flag">a bound</span>'
            bounds = "—" if r.get("low") is None else f"[{_fmt(r['low'])}, {_fmt(r['high'])}]"
            rows.append(
                f"<tr><td>{html.escape(str(label))}</td><td>{_fmt(r['share'])}</td><td>{bounds}{flag}</td></tr>"
            )
        head = "<tr><th>label</th><th>share</th><th>95 % interval</th></tr>"
    else:
        j = est.columns.index(name)
        answers: list[tuple[str, Any, Any, Any, bool]] = []
        if means is not None:
            try:
                q = est.quantile(name, [0.25, 0.5, 0.75], interval=_LEVEL)
                answers = [("mean", *means[name])]
                answers += [
                    (label, q.value[k], q.low[k], q.high[k], bool(np.atleast_1d(q.supported)[k]))
                    for k, label in enumerate(("lower quartile", "median", "upper quartile"))
                ]
            except ValueError:  # a column without cells of its own
                pass
        if not answers:  # no intervals: the decoder's values alone
            answers = [("mean", est.mean()[j], None, None, False)]
            answers += [
                (lbl, v, None, None, False)
                for lbl, v in zip(
                    ("lower quartile", "median", "upper quartile"), est.quantile(name, [0.25, 0.5, 0.75])
                )
            ]
        spec = est.schema[name] if est.schema is not None else None
        if isinstance(spec, Numeric) and spec.time is not None:  # a date column's answers as dates
            answers = [
                (
                    lbl,
                    spec.as_time(v),
                    None if lo is None else spec.as_time(lo),
                    None if hi is None else spec.as_time(hi),
                    ok,
                )
                for lbl, v, lo, hi, ok in answers
            ]
        for label, v, lo, hi, ok in answers:
            flag = "" if ok or lo is None else ' <span class="flag">a bound</span>'
            bounds = "—" if lo is None else f"[{_fmt(lo)}, {_fmt(hi)}]"
            rows.append(f"<tr><td>{label}</td><td>{_fmt(v)}</td><td>{bounds}{flag}</td></tr>")
        head = "<tr><th>answer</th><th>value</th><th>95 % interval</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def report_html(sk: Sketch, est: Any = None, *, title: str | None = None) -> str:
    """The report of ``sk`` as one HTML document (see :func:`write_report`).

    :raises ValueError: without matplotlib (naming the extra to install)
    """
    Figure = _figure_class()
    est = M2M(sk) if est is None else est
    answers = _Answers(est)
    names = list(est.columns)
    title = title or "A differentially private release"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='note'>Generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC by opendp_sketch from "
        f"the released sketch alone: post-processing, no further privacy cost.</p>",
        "<h2>The release</h2><div class='card'>",
        "".join(f"<div><b>{html.escape(k)}</b>{html.escape(v)}</div>" for k, v in _privacy_rows(sk)),
        f"<div><b>decoder fit</b>residual {_fmt(est.fit_ratio)}× what the noise explains</div>",
        "</div>",
        "<h2>Every column</h2>",
        "<p class='note'>Bars: the decoded share of rows in each public cell or label. Lines: 95 % intervals "
        "from the released cells; a hatched bar, or <span class='flag'>a bound</span> in a table, is an answer no "
        "released block holds exactly, so its interval is what the cells allow rather than a noise band.</p>",
    ]
    numeric = [n for n in names if est.schema is None or isinstance(est.schema[n], Numeric)]
    means = _means(est, numeric)
    answers.weighted_frame()  # the decoded points' frame, built once before the workers start
    fig = Figure(figsize=(6.4, 3.0))  # one figure, cleared for every column
    with ThreadPoolExecutor(max_workers=2) as workers:
        # the questions behind each column's figure (its cell or label shares) and table (a numeric
        # column's quartiles read the CDF at every cell edge) are asked on two worker threads while
        # this one draws: the passes over the released cells run in numpy, which releases the GIL,
        # and each answer is the one asked alone
        shown: dict[str, Any] = {}
        tables: dict[str, Any] = {}
        for name in names:
            if est.cell_edges(name)[1]:
                shown[name] = workers.submit(column_shares, answers, name, interval=_LEVEL)
            if name in numeric:
                tables[name] = workers.submit(_column_table, est, name, means)
        for name in names:
            if name in shown:  # wait for its answers; an error is met again, and noted, while drawing
                shown[name].exception()
            figure = _column_figure(answers, name, fig)
            table = tables[name].result() if name in tables else _column_table(answers, name, means)
            parts.append(
                f"<section class='column' id='column-{html.escape(str(name))}'><div><h3>{html.escape(str(name))}</h3>"
                f"{figure}</div><div>{table}</div></section>"
            )
    parts.append(_relations(sk, est, names, Figure))
    parts.append(
        "<h2>How to read this page</h2><ul class='note'>"
        "<li>Every number comes from one differentially private release; the noise that protects each "
        "individual is part of every answer, and the intervals cover it together with the decoder's fit.</li>"
        "<li>An answer marked <span class='flag'>a bound</span> (hatched in a figure) spans several released "
        "cells or a pair that was not released: its interval is the range those cells allow.</li>"
        "<li>Small groups are the least certain: a share within a few noise standard deviations of zero may "
        "be noise alone.</li>"
        "<li>Relations between columns whose pair was not released are the decoder's inference from the "
        "released marginals, not measurements.</li></ul></body></html>"
    )
    return "".join(parts)


def _column_figure(est: Any, name: str, fig: Any) -> str:
    """A column's figure as inline SVG, drawn on ``fig`` (cleared first), or a note where the
    sketch's map holds no cells of the column (RFF, RACE, moments: it does not show the
    column's distribution) or the figure cannot be drawn."""
    if not est.cell_edges(name)[1]:
        return (
            f"<p class='note'>No figure for this column: the sketch's map ({html.escape(type(est.feature_map).__name__)}) "
            "releases no cells of it, so the release does not show its distribution; the answers beside are "
            "the decoder's estimates, without intervals.</p>"
        )
    fig.clf()
    try:
        plot_column(est, name, interval=_LEVEL, ax=fig.add_subplot())
    except ValueError as e:
        return f"<p class='note'>No figure for this column: {html.escape(str(e))}</p>"
    return _svg(fig)


def _relations(sk: Sketch, est: Any, names: list[str], Figure: Any) -> str:
    d = len(names)
    if d < 2:
        return ""
    assoc = _association(est)
    measured = _measured_pairs(sk)
    fig = Figure(figsize=(0.55 * d + 2.5, 0.55 * d + 2))
    ax = fig.add_subplot()
    im = ax.imshow(assoc, vmin=0, vmax=1, cmap="Blues")
    ax.set_xticks(range(d), labels=names, rotation=60, ha="right")
    ax.set_yticks(range(d), labels=names)
    inferred = [
        (j, i) for i in range(d) for j in range(d) if i != j and (min(i, j), max(i, j)) not in measured
    ]
    if inferred:  # one marker per inferred pair, drawn as one artist
        xs, ys = zip(*inferred)
        ax.scatter(xs, ys, s=6, marker="o", color="#9a6700", linewidths=0)
    fig.colorbar(im, ax=ax, fraction=0.046, label="association (|correlation| or Cramér's V)")
    ax.set_title("how the columns relate (·: pair not released, inferred)")
    out = ["<h2>Relations between columns</h2>", "<div id='relations'>", _svg(fig), "</div>"]
    targets = list(Schema.from_dict(sk.schema).targets) if sk.schema is not None else []
    for t in targets:
        j = names.index(t)
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{_fmt(assoc[i, j])}</td><td>{'released' if (min(i, j), max(i, j)) in measured else 'inferred'}</td></tr>"
            for i, n in enumerate(names)
            if i != j
        )
        out.append(
            f"<h3>The target {html.escape(t)}</h3><table><tr><th>feature</th><th>association</th><th>pair</th></tr>{rows}</table>"
        )
    return "".join(out)


def write_report(
    sk: Sketch, path: str | os.PathLike[str], est: Any = None, *, title: str | None = None
) -> str:
    """Write the report of ``sk`` to ``path`` (one self-contained HTML file) and return the path.

    :param est: an :class:`~opendp_sketch.M2M` of ``sk`` already decoded (default: decoded here)
    :raises ValueError: without matplotlib (naming the extra to install)
    :example:

    >>> import numpy as np, polars as pl, tempfile, os, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> rng = np.random.default_rng(0)
    >>> t = pl.DataFrame({"age": rng.integers(18, 90, 3000), "cut": rng.choice(["a", "b"], 3000)})
    >>> sk = dps.release_sketch(t, schema=dps.Schema({"age": dps.Numeric(18, 90, integer=True), "cut": ["a", "b"]}), epsilon=1.0)
    >>> path = write_report(sk, os.path.join(tempfile.mkdtemp(), "report.html"))
    >>> page = open(path).read()
    >>> "id='column-age'" in page and "id='column-cut'" in page, any(t in page for t in ("<script", "<link", " src="))
    (True, False)
    """
    text = report_html(sk, est, title=title)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return os.fspath(path)


Sketch.register_report_writer(write_report)  # sk.report(path) writes through this module
