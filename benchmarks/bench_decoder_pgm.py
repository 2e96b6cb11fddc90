"""Two decoders of the same released measurements: this project's synthetic decoder and the
estimator of OpenDP's ``dp.mbi`` (Private-PGM's mirror descent), on real tables.

``bench_real_tables`` compares whole systems: what each one measures *and* how it decodes. This
benchmark holds the measurements fixed to compare the decoders alone. Each release is a schema
release of a real table (the user's path: a Polars frame and a ``dps.Schema``, as in
``bench_real_tables``) in one of two designs:

* ``schema``: every default (32- or 64-bin 1-way marginals, 16 × 16 pairs by the row-estimate rule);
* ``tree``: 16-bin 1-way marginals and a private spanning tree of 16 × 16 pairs
  (``fine_bins=16, pair_selection=0.1``: the measurements of MST's design).

The released sketch is then decoded twice, with no further privacy cost:

* ``M2M(sketch)``, the default decoder (weighted synthetic points);
* Private-PGM's mirror descent (``mbi.estimation.mirror_descent``, 1 000 iterations: the
  estimator behind ``opendp.extras.mbi.mirror_descent``, which OpenDP's MST and AIM use) on the
  same blocks (its own estimate of the row count, from the tables it reads as they are): each 1-way and 2-way table divided by its
  weight, with its noise standard deviation, over attributes with the finest cells of each column
  (a pair's coarser bins are sums of them). Private-PGM infers on a junction tree of the
  measured pairs; when that tree needs more than ``MAX_MODEL_MB`` (80 MB, the model-size limit
  AIM uses by default) the fit is not attempted and the table says so.

Questions: 1 000 random range counts over 1–3 columns whose endpoints are edges of the finest
released cells (so neither decoder is asked where rows sit inside a cell), truth from the same
cells of the real rows. Error: mean |err| / n, also split by the number of columns. Time: the
decoder's fit (Private-PGM's includes JAX compilation, as it does inside MST).

Run: ``python benchmarks/bench_decoder_pgm.py`` (``--quick``: CPSSW8 at ε = 1, 1 release).
Writes ``benchmarks/results/bench_decoder_pgm.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

C.pin_library_snapshot()

from lib import peers  # noqa: E402
from lib import tables as R  # noqa: E402

DESIGNS: dict[str, tuple[dict[str, Any], str]] = {
    "schema": ({}, "schema default (32/64-bin 1-way, 16 × 16 pairs by the row-estimate rule)"),
    "tree": (
        {"fine_bins": 16, "pair_selection": 0.1},
        "16-bin 1-way + a private spanning tree of 16 × 16 pairs (fine_bins=16, pair_selection=0.1)",
    ),
}
DECODERS = {
    "ours": "M2M(sketch): synthetic decoder (default)",
    "pgm": "OpenDP dp.mbi estimator (Private-PGM mirror descent)",
}
MAX_MODEL_MB = 80.0
N_QUERIES = 1000


def flat_blocks(fm: Any) -> list[tuple[Any, float, int]]:
    """``(block, weight, offset in the sketch)`` of every marginal table of a schema map."""
    maps = getattr(fm, "maps", None) or [fm]
    weights = getattr(fm, "weights", None) or [1.0]
    out, base = [], 0
    for m, w in zip(maps, weights):
        out.extend((b, float(w), base + b.offset) for b in m.blocks)
        base += m.num_features
    return out


def one_way_map(fm: Any) -> Any:
    """The map of the 1-way tables alone (every column's finest cells)."""
    maps = getattr(fm, "maps", None) or [fm]
    return maps[0]


def cell_columns(one_way: Any, U: np.ndarray) -> np.ndarray:
    """``(n, d)``: each row's cell in its column's 1-way table."""
    cells = one_way.cells(U)
    offsets = np.array([b.offset for b in one_way.blocks])
    order = np.argsort([b.subset[0] for b in one_way.blocks])
    return (cells - offsets)[:, order]


def make_queries(sizes: list[int], rng: np.random.Generator) -> list[tuple[list[int], list[int], list[int]]]:
    d = len(sizes)
    out = []
    for _ in range(N_QUERIES):
        cols = sorted(rng.choice(d, size=int(rng.integers(1, min(d, 3) + 1)), replace=False).tolist())
        a = [int(rng.integers(0, sizes[c])) for c in cols]
        b = [int(rng.integers(i + 1, sizes[c] + 1)) for c, i in zip(cols, a)]
        out.append((cols, a, b))
    return out


def answer_points(cells: np.ndarray, mass: np.ndarray, queries: list) -> np.ndarray:
    out = np.empty(len(queries))
    for k, (cols, a, b) in enumerate(queries):
        keep = np.ones(cells.shape[0], dtype=bool)
        for c, i, j in zip(cols, a, b):
            keep &= (cells[:, c] >= i) & (cells[:, c] < j)
        out[k] = mass[keep].sum()
    return out


def pgm_measurements(sk: Any, sizes: list[int]) -> tuple[list[Any], list[tuple[str, ...]]]:
    """The sketch's tables as Private-PGM measurements (a coarser pair is a sum of fine cells)."""
    from mbi import LinearMeasurement

    sd = float(np.sqrt(sk.noise["sum_variance"]))
    meas, cliques = [], []
    for blk, w, off in flat_blocks(sk.feature_map):
        if blk.cuts:
            raise ValueError("cut-point bins are not aligned with equal cells")
        clique = tuple(f"c{j}" for j in blk.subset)
        factors = []
        for j, s in zip(blk.subset, blk.shape):
            if sizes[j] % s:
                raise ValueError(f"column {j}: {s} bins do not group its {sizes[j]} cells")
            factors.append(sizes[j] // s)
        values = np.asarray(sk.sum[off : off + blk.size], dtype=np.float64) / w

        def query(f: Any, shape: tuple = blk.shape, k: list = factors) -> Any:
            v = f.datavector(flatten=False)
            grouped = v.reshape([x for s, g in zip(shape, k) for x in (s, g)])
            return grouped.sum(axis=tuple(range(1, 2 * len(shape), 2))).flatten()

        if all(g == 1 for g in factors):  # Private-PGM estimates its total from identity queries
            meas.append(LinearMeasurement(values, clique, stddev=sd / w))
        else:
            meas.append(LinearMeasurement(values, clique, stddev=sd / w, query=query))
        cliques.append(clique)
    return meas, cliques


def run_pgm(sk: Any, sizes: list[int], queries: list) -> tuple[np.ndarray | None, float, str]:
    from mbi import Domain
    from mbi.estimation import mirror_descent
    from mbi.junction_tree import hypothetical_model_size

    meas, cliques = pgm_measurements(sk, sizes)
    domain = Domain([f"c{j}" for j in range(len(sizes))], sizes)
    mb = float(hypothetical_model_size(domain, cliques))
    if mb > MAX_MODEL_MB:
        return None, float("nan"), f"junction tree of {mb:,.0f} MB, above {MAX_MODEL_MB:.0f} MB"
    t0 = time.perf_counter()
    model = mirror_descent(domain, meas)
    seconds = time.perf_counter() - t0
    out = np.empty(len(queries))
    for k, (cols, a, b) in enumerate(queries):
        table = np.asarray(model.project(tuple(f"c{j}" for j in cols)).datavector(flatten=False))
        out[k] = table[tuple(slice(i, j) for i, j in zip(a, b))].sum()
    return out, seconds, ""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CPSSW8 at ε = 1, 1 release")
    p.add_argument("--releases", type=int, default=3)
    p.add_argument("--epsilons", default="0.1,1,3")
    p.add_argument("--tables", default=",".join(R.TABLES))
    p.add_argument("--out-dir", default=None, help="where to write bench_decoder_pgm.md/.csv")
    args = p.parse_args(argv)
    out = C.out_dir(args) / "bench_decoder_pgm"
    import opendp.prelude as dp

    import opendp_sketch as dps

    dp.enable_features("contrib", "honest-but-curious")
    tables, epsilons, releases = (
        args.tables.split(","),
        [float(e) for e in args.epsilons.split(",")],
        args.releases,
    )
    if args.quick:
        tables, epsilons, releases = ["CPSSW8"], [1.0], 1
    rows: list[dict[str, Any]] = []
    for name in tables:
        X, cols, lo, hi = R.load_table(name)
        frame, schema = R.schema_frame(name, X, cols, lo, hi)
        U = schema.encode(frame)
        n = U.shape[0]
        for eps in epsilons:
            for design, (kw, _) in DESIGNS.items():
                for r in range(releases):
                    C.progress(f"{name} ε={eps:g} {design} release {r}")
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # the tree's low-signal warning is a result here
                        sk = dps.release_sketch(frame, schema=schema, epsilon=eps, **kw)
                    one = one_way_map(sk.feature_map)
                    sizes = [0] * U.shape[1]
                    for b in one.blocks:
                        sizes[b.subset[0]] = b.shape[0]
                    queries = make_queries(sizes, np.random.default_rng(1000 + r))
                    truth = answer_points(cell_columns(one, U), np.ones(n), queries)
                    arity = np.array([len(q[0]) for q in queries])
                    pairs = sum(len(b.subset) == 2 for b, _, _ in flat_blocks(sk.feature_map))
                    base = {
                        "table": name,
                        "n": n,
                        "epsilon": eps,
                        "design": design,
                        "release": r,
                        "pairs": pairs,
                    }

                    t0 = time.perf_counter()
                    est = dps.M2M(sk, seed=r)
                    ours_s = time.perf_counter() - t0
                    ours = answer_points(cell_columns(one, est.samples), est.weights * est.n_hat, queries)
                    try:
                        pgm, pgm_s, failure = run_pgm(sk, sizes, queries)
                    except Exception as e:  # noqa: BLE001 - a failing peer is a result, recorded in the table
                        pgm, pgm_s, failure = (
                            None,
                            float("nan"),
                            f"{type(e).__name__}: {peers.failure_reason(e)}",
                        )
                    for decoder, ans, sec, fail in (("ours", ours, ours_s, ""), ("pgm", pgm, pgm_s, failure)):
                        row = {**base, "decoder": decoder, "seconds": sec, "failure": fail}
                        if ans is not None:
                            err = np.abs(ans - truth) / n
                            row["count_err"] = float(err.mean())
                            for k in (1, 2, 3):
                                row[f"count_err_{k}"] = float(err[arity == k].mean())
                            row["negative"] = int((ans < -1e-9).sum())
                        rows.append(row)
                        print(f"    {row}", flush=True)
                    write(rows, out, args)
    write(rows, out, args)
    print(out.with_suffix(".md").read_text())


def _mean(rs: list[dict[str, Any]], key: str) -> str:
    vals = [r[key] for r in rs if key in r]
    return C.fmt(float(np.mean(vals))) if vals else "–"


def write(rows: list[dict[str, Any]], out: Path, args: argparse.Namespace) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
    with out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["table"], r["epsilon"], r["design"], r["decoder"]), []).append(r)
    table = []
    for (name, eps, design, decoder), rs in groups.items():
        fails = sorted({r["failure"] for r in rs if r["failure"]})
        secs = [r["seconds"] for r in rs if np.isfinite(r["seconds"])]
        table.append(
            [
                f"{name} (n={rs[0]['n']})",
                f"{eps:g}",
                design,
                f"{min(r['pairs'] for r in rs)}–{max(r['pairs'] for r in rs)}",
                DECODERS[decoder],
                _mean(rs, "count_err"),
                _mean(rs, "count_err_1"),
                _mean(rs, "count_err_2"),
                _mean(rs, "count_err_3"),
                _mean(rs, "negative"),
                f"{min(secs):.1f}–{max(secs):.1f}" if secs else "–",
                f"{len(fails and [r for r in rs if r['failure']])} of {len(rs)}: " + "; ".join(fails)
                if fails
                else "–",
            ]
        )
    body = "\n".join(
        [
            f"Command: `{C.command_line()}` — {time.strftime('%Y-%m-%d %H:%M')}.",
            "",
            "Designs: " + "; ".join(f"*{k}*: {v[1]}" for k, v in DESIGNS.items()) + ".",
            "",
            f"Each release decoded by both decoders (no further privacy cost). {N_QUERIES} range counts "
            "over 1–3 columns with endpoints at edges of the finest released cells; mean |err| / n over "
            "the releases; decoder fit time min–max in seconds.",
            "",
            C.md_table(
                [
                    "table",
                    "ε",
                    "design",
                    "pairs measured",
                    "decoder",
                    "counts: mean |err|/n",
                    "1-col",
                    "2-col",
                    "3-col",
                    "negative counts",
                    "fit s",
                    "not fitted",
                ],
                table,
            ),
        ]
    )
    C.write_report(
        out.with_suffix(".md"),
        "Two decoders of the same measurements: synthetic points vs Private-PGM (issue 16)",
        C.machine_info(),
        body,
        args.quick,
    )


if __name__ == "__main__":
    main()
