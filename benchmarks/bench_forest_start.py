"""The decoder's defaults of issue 16's last steps, each against the one before, on the same sketches.

Round 1 along the released pairs (against independent draws), the raking threshold, and integer
values placed by their cells' profile.

Two parts, both decoding the same sketches both ways (common noise):

1. **The user's path.** ``bench_real_tables``' schema releases (a Polars frame and a
   ``dps.Schema``, every default), ``--reps`` per table and ε, each decoded by ``dps.M2M`` with
   round 1 drawn along the maximum spanning forest of the released pair tables (the default)
   and with every column drawn independently (``_FOREST_START = False``, the previous default),
   with the 1-way marginals raked above a quarter (the previous threshold) or a twentieth
   (the default) of a noise variance per cell (``_RAKE_EXCESS``), and with integer columns'
   values spread evenly within a cell (before) or drawn by the cell's profile, a pile at a bound
   on the bound value (``_DISCRETE_PROFILE``, the default).
   Errors as in ``bench_synthetic_points``.
2. **A tree of nearly noise-free pairs** (countymurders): 16-bin 1-way marginals and the 7 pairs
   of the data's Chow–Liu tree (16 × 16, the pairs of largest mutual information that span the
   columns; chosen from the data: this part tests the decoder, it is no release), released at
   ε = 1000. Range counts over 2 and 3 columns from both decoders, and from the tree model
   itself (ancestral sampling of 400 000 rows from the exact pair tables), which is what a
   decoder of these tables can at best give for pairs it was not given.

Run: ``python benchmarks/bench_forest_start.py`` (``--quick``: CPSSW8 at ε = 3, 2 releases, and
the tree). Writes ``benchmarks/results/bench_forest_start.md`` and ``.csv``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib import tables as real  # noqa: E402
from lib import variants as points  # noqa: E402

FOREST, INDEPENDENT = "along the forest", "independent"
#: the previous default (independent, raked above a quarter of a noise variance per cell,
#: integer values spread evenly in a cell), the forest with that threshold, the forest raked above
#: a twentieth, and the default (that, with integer values drawn by the cells' profile)
VARIANTS = {
    "independent, rake ¼ (before)": (False, 0.25, False),
    "along the forest, rake ¼": (True, 0.25, False),
    "along the forest, rake 1/20": (True, 0.05, False),
    "along the forest, rake 1/20, integer profile (default)": (True, 0.05, True),
}


@contextmanager
def forest(on: bool, rake: float | None = None, profile: bool | None = None) -> Iterator[None]:
    import opendp_sketch.estimators.synthetic as synthetic

    # the switches this benchmark measures
    before = synthetic._FOREST_START, synthetic._RAKE_EXCESS, synthetic._DISCRETE_PROFILE  # noqa: SLF001
    synthetic._FOREST_START = on  # noqa: SLF001
    synthetic._RAKE_EXCESS = before[1] if rake is None else rake  # noqa: SLF001
    synthetic._DISCRETE_PROFILE = before[2] if profile is None else profile  # noqa: SLF001
    try:
        yield
    finally:
        synthetic._FOREST_START, synthetic._RAKE_EXCESS, synthetic._DISCRETE_PROFILE = before  # noqa: SLF001


def decode(on: bool, rake: float | None = None, profile: bool | None = None) -> Any:
    import opendp_sketch as dps

    def run(sk: Any, rep: int) -> Any:
        with forest(on, rake, profile):
            return dps.M2M(sk, seed=rep)

    return run


def tree_part(seeds: int) -> list[str]:
    """Part 2: the errors of both decoders and of the tree model on nearly noise-free pairs."""
    import opendp.prelude as dp
    import scipy.sparse
    import scipy.sparse.csgraph

    import opendp_sketch as dps
    from opendp_sketch.features.composite import Composite
    from opendp_sketch.features.marginals import MarginalTables

    dp.enable_features("contrib", "honest-but-curious")
    name, bins = "countymurders", real.BINS
    X, cols, lo, hi = real.load_table(name)
    n, d = X.shape
    E = real.edges(lo, hi)
    queries = real.make_queries(lo, hi, np.random.default_rng(12345))
    truth = np.array([real.in_range(X, q, E).sum() for q in queries], dtype=np.float64) / n
    ncol = np.array([len(q[0]) for q in queries])
    B = np.column_stack(
        [np.clip(((X[:, j] - lo[j]) / (hi[j] - lo[j]) * bins).astype(int), 0, bins - 1) for j in range(d)]
    )

    def table(u: int, v: int) -> np.ndarray:
        t = np.zeros((bins, bins))
        np.add.at(t, (B[:, u], B[:, v]), 1.0)
        return t / n

    mi = np.zeros((d, d))
    for u in range(d):
        for v in range(u + 1, d):
            t = table(u, v)
            outer = np.outer(t.sum(1), t.sum(0))
            ok = t > 0
            mi[u, v] = -float(np.sum(t[ok] * np.log(t[ok] / outer[ok]))) - 1e-12
    tree = scipy.sparse.csgraph.minimum_spanning_tree(scipy.sparse.csr_matrix(mi)).tocoo()
    edges = sorted(zip(tree.row.tolist(), tree.col.tolist()))
    box = (lo.tolist(), hi.tolist())
    fm = Composite(
        [MarginalTables(box, list(range(d)), bins), MarginalTables(box, edges, bins)],
        weights=[3.0, 1.0],
    )

    def errors(Z: np.ndarray, w: np.ndarray | None = None) -> list[float]:
        est = np.array(
            [
                (w if w is not None else np.full(Z.shape[0], 1 / Z.shape[0])) @ real.in_range(Z, q, E)
                for q in queries
            ]
        )
        err = np.abs(est - truth)
        return [float(err[ncol == k].mean()) for k in (2, 3)]

    rows: dict[str, list[list[float]]] = {FOREST: [], INDEPENDENT: []}
    for seed in range(seeds):
        sk = dps.release_sketch(X, fm, bounds=box, epsilon=1000.0, column_names=cols)
        for label, on in ((FOREST, True), (INDEPENDENT, False)):
            est = decode(on)(sk, seed)
            rows[label].append(errors(np.asarray(est.samples), np.asarray(est.weights)))
    # the tree model: ancestral sampling along the tree from the exact pair tables
    rng = np.random.default_rng(5)
    m = 400_000
    Z = np.zeros((m, d), dtype=int)
    adj: dict[int, list[int]] = {j: [] for j in range(d)}
    for u, v in edges:
        adj[u].append(v)
        adj[v].append(u)
    seen = {0}
    Z[:, 0] = rng.choice(bins, size=m, p=np.bincount(B[:, 0], minlength=bins) / n)
    queue = [0]
    while queue:
        u = queue.pop(0)
        for v in adj[u]:
            if v in seen:
                continue
            seen.add(v)
            queue.append(v)
            t = table(u, v) + 1e-12
            cum = np.cumsum(t / t.sum(1, keepdims=True), axis=1)
            Z[:, v] = np.minimum((cum[Z[:, u]] < rng.uniform(size=m)[:, None]).sum(1), bins - 1)
    centres = lo + (Z + 0.5) * (hi - lo) / bins
    model = errors(centres)
    lines = [
        "",
        "## A tree of nearly noise-free pairs (countymurders)",
        "",
        f"16-bin 1-way marginals (weight 3) and the 7 pairs of the data's Chow–Liu tree {edges} at "
        f"16 × 16, released at ε = 1000, {seeds} releases; mean |err|/n of the grid's 2- and 3-column "
        "range counts (× 10⁻³). The tree model answers from the exact pair tables.",
        "",
        "| decoder | 2-column counts | 3-column counts |",
        "|---|---|---|",
    ]
    for label in (INDEPENDENT, FOREST):
        a = np.mean(rows[label], axis=0) * 1e3
        lines.append(f"| {label} | {a[0]:.3f} | {a[1]:.3f} |")
    lines.append(f"| the tree model (exact pair tables) | {model[0] * 1e3:.3f} | {model[1] * 1e3:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    args, out = points.variants_main(
        argv,
        __doc__,
        "bench_forest_start",
        {label: decode(on, rake, profile) for label, (on, rake, profile) in VARIANTS.items()},
        title="Round 1 along the released pairs, on the same schema releases (issue 16)",
        what="each decoded with round 1 drawn independently and along the forest of released pairs, "
        "with 1-way marginals raked above a quarter or a twentieth of a noise variance per cell, and with "
        "integer columns' values spread evenly in a cell or drawn by the cell's profile (same seed)",
        column="round 1",
    )
    text = out.with_suffix(".md").read_text() + "\n".join(tree_part(2 if args.quick else 3)) + "\n"
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
