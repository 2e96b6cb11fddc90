"""Dask release vs single-process release: wall time, and identical exact integer sums.

Setting (full mode): n = 10^7 rows × d = 10 columns uniform on [0, 1]^10, generated chunk-wise
(chunk ``i`` from its own seeded generator, so numpy and Dask hold the same rows without either
side copying the other), ``RFF(dim=10, num_features=1000)``, ε = 1.

* single process: ``release_sketch(X, fm, bounds=(0, 1), epsilon=1)`` on the numpy array (the
  feature sum's default threads);
* Dask: ``release_sketch`` on the same rows as a Dask array persisted on a
  ``LocalCluster(n_workers=2, threads_per_worker=1)`` (worker processes), one partition per chunk.

Each release is timed in-process, ``--repeats`` times (median). Data generation, cluster start-up
and persisting are not timed. Exactness: the Dask pair transformation's combined integer sum
(``make_sum_and_count`` on a ``dask_box_domain``) is compared with ``fm.fixed_sum`` of the numpy
array (both exact, so they must be equal); noisy releases are never compared.

Usage: ``python benchmarks/bench_dask.py [--quick] [--out-dir DIR]``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_dask"
DATA_SEED = 20240611
FULL = {"n": 10_000_000, "chunk": 250_000}
QUICK = {"n": 100_000, "chunk": 25_000}
D, M, EPS = 10, 1000, 1.0


def _block(i: int, rows: int) -> np.ndarray:
    """Rows of chunk ``i``: its own generator, so any process can make them."""
    return np.random.default_rng([DATA_SEED, i]).uniform(size=(rows, D))


def _sizes(n: int, chunk: int) -> list[int]:
    return [min(chunk, n - s) for s in range(0, n, chunk)]


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0])
    import dask
    import dask.array as da
    import distributed
    import opendp.prelude as dp

    import opendp_sketch as dps
    from opendp_sketch.backends.dask import dask_box_domain

    dp.enable_features("contrib", "honest-but-curious")
    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    info["dask / distributed"] = f"{dask.__version__} / {distributed.__version__}"
    fm = dps.RFF(dim=D, num_features=M, bandwidth=1.0, seed=0)
    sizes = _sizes(cfg["n"], cfg["chunk"])
    warmup = 1 if args.quick else 0  # a full release takes about a minute: no untimed warm-up

    C.progress(f"generating {cfg['n']:,} rows × {D} in {len(sizes)} chunks")
    X = np.concatenate([_block(i, r) for i, r in enumerate(sizes)])

    C.progress("single process: release_sketch")
    C.wait_for_quiet(args.wait_quiet)
    with C.Probe() as p_np:
        t_np = C.time_repeats(
            lambda: dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=EPS), args.repeats, warmup
        )
    bg_np = p_np.read().background_cores

    C.progress("starting LocalCluster(n_workers=2, threads_per_worker=1)")
    t0 = time.perf_counter()
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        t_start = time.perf_counter() - t0
        blocks = [
            da.from_delayed(dask.delayed(_block)(i, r), shape=(r, D), dtype=np.float64)
            for i, r in enumerate(sizes)
        ]
        t0 = time.perf_counter()
        Xd = client.persist(da.concatenate(blocks))
        distributed.wait(Xd)
        t_persist = time.perf_counter() - t0

        C.progress("Dask: release_sketch on the Dask array")
        C.wait_for_quiet(args.wait_quiet)
        with C.Probe() as p_dk:
            t_dk = C.time_repeats(
                lambda: dps.release_sketch(Xd, fm, (0.0, 1.0), epsilon=EPS), args.repeats, warmup
            )
        bg_dk = p_dk.read().background_cores

        C.progress("exactness: Dask combined sum vs fm.fixed_sum")
        pair = dps.make_sum_and_count(dask_box_domain((0.0, 1.0), num_columns=D), dp.symmetric_distance(), fm)
        dask_sum, dask_count = pair(Xd)
    numpy_sum = fm.fixed_sum(np.clip(X, 0.0, 1.0))
    equal = dask_sum.tolist() == numpy_sum and dask_count == X.shape[0]

    med_np, med_dk = C.median(t_np), C.median(t_dk)
    rows = [
        [
            "single process `release_sketch` (numpy, feature-sum threads)",
            f"{cfg['n']:,}",
            1,
            C.fmt(med_np),
            " / ".join(C.fmt(t) for t in t_np),
            "1",
            C.fmt(bg_np),
        ],
        [
            "Dask `release_sketch` (Dask array), LocalCluster 2 workers × 1 thread",
            f"{cfg['n']:,}",
            len(sizes),
            C.fmt(med_dk),
            " / ".join(C.fmt(t) for t in t_dk),
            C.fmt(med_dk / med_np),
            C.fmt(bg_dk),
        ],
    ]
    body = f"""## Setting

n = {cfg["n"]:,} rows × d = {D} uniform on [0, 1]^{D}, generated in {len(sizes)} chunks of up to
{cfg["chunk"]:,} rows (one Dask partition each); `RFF(dim={D}, num_features={M}, bandwidth=1, seed=0)`;
ε = {EPS} (discrete Laplace, 2% of the budget for the count). {args.repeats} timed releases per
configuration ({warmup} untimed warm-up), median. Not timed: data generation, cluster start-up
({t_start:.1f} s) and persisting the Dask array on the workers ({t_persist:.1f} s).

## Result

{C.md_table(["configuration", "rows", "partitions", "median s", "all runs s", "time ÷ single process", "other processes' cores (†)"], rows)}

**Exact integer sums equal:** {"yes" if equal else "**NO**"} — the Dask combined `Σ q(x)`
({M} Python integers, summed per partition on the workers and added on the client) equals
`fm.fixed_sum` of the same rows in one process, and the counts agree ({dask_count:,} rows).

(†) CPU cores used meanwhile by processes other than this one; for the Dask row this includes
the two worker processes doing the work, so only the single-process row measures disturbance.

The Dask timing includes the scale search (identical on both sides, client only), building the
graph, shipping the public feature map to the workers, and gathering {len(sizes)} partition
results of {M} integers each; the noise is drawn once on the client.
"""
    C.write_report(
        C.out_dir(args) / f"{NAME}.md", "Dask release vs single-process release", info, body, args.quick
    )
    if not equal:
        raise SystemExit("the Dask and single-process integer sums differ")


if __name__ == "__main__":
    main()
