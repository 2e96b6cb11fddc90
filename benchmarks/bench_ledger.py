"""The SQLite privacy ledger under crashes and concurrency: SIGKILL during releases, and 2 or 8
processes spending one budget, against one process and against releases without a ledger.

Every child is a fresh interpreter (``python bench_ledger.py --worker <json>``) that imports the
library, opens a :class:`~opendp_sketch.session.Session` on the shared ledger, prints ``READY``,
and then releases Histogram sketches (d = 2, 4 bins per column, ``rows`` uniform rows, a fixed ε
share each) in a loop, printing ``R <release id>`` (flushed) after each release *returned*.

1. **SIGKILL** (budget never runs out): the parent starts a child, waits for ``READY``, then after
   a random number (0 to ``max_before_kill``) of returned releases and a random delay (0 to 3×
   the typical release time) sends SIGKILL; then it checks the ledger (``verify_ledger``: ``PRAGMA integrity_check``,
   recorded spent == exact sum of recorded releases, spent ≤ total, every sketch stored) and that
   every release the child printed is recorded and the recorded spent is at least the sum of
   their losses; it restarts children until ``target`` releases are recorded.
2. **Concurrency**: 1, 2 and 8 children release against one ledger until the budget is
   exhausted (they start together on a signal file). Reported: releases, wall time from the
   signal to the last exit, releases/s and its ratio to one process, time spent waiting for the
   write lock (``Ledger.lock_wait``), spent vs budget, releases printed but missing from the
   ledger (must be 0). Baseline in the same run: one process calling ``dps.release_sketch``
   (no ledger, no filter) the same number of times.

Usage: ``python benchmarks/bench_ledger.py [--quick] [--out-dir DIR]`` (full: 200 releases under
SIGKILL and 120 per concurrency run, about 10 minutes; ``--quick``: 6 and 12 with 1 and 2
processes, about a minute on a busy 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_ledger"
SEED = 20240611
SHARE = 0.01  # ε per release
FULL = {
    "kill_target": 200,
    "kill_rows": 200_000,
    "max_before_kill": 10,
    "releases": 120,
    "rows": 20_000,
    "procs": [1, 2, 8],
}
QUICK = {
    "kill_target": 6,
    "kill_rows": 2_000,
    "max_before_kill": 3,
    "releases": 12,
    "rows": 2_000,
    "procs": [1, 2],
}


# -- child ----------------------------------------------------------------------------------------


def worker(config: dict[str, Any]) -> None:
    """Release until the budget is exhausted (or SIGKILL); print each returned release id."""
    C.pin_library_snapshot()
    import numpy as np
    import opendp.prelude as dp

    import opendp_sketch as dps
    from opendp_sketch.ledger import PrivacyBudgetError
    from opendp_sketch.session import Session

    dp.enable_features("contrib", "honest-but-curious")
    X = np.random.default_rng(config["seed"]).uniform(0.0, 1.0, size=(config["rows"], 2))
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)
    session = None if config["plain"] else Session.open(config["path"], "bench", timeout=600.0)
    print("READY", flush=True)
    while config["go"] and not os.path.exists(config["go"]):
        time.sleep(0.002)
    done, t0 = 0, time.perf_counter()
    while config["limit"] is None or done < config["limit"]:
        if session is None:
            dps.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=SHARE)
            rid = done
        else:
            try:
                rid = session.release_sketch(X, fm, bounds=(0.0, 1.0), epsilon=SHARE).privacy["release_id"]
            except PrivacyBudgetError:
                break
        done += 1
        print(f"R {rid}", flush=True)
    lock = (
        {"lock_wait": 0.0, "lock_waits": 0, "lock_held": 0.0}
        if session is None
        else {
            "lock_wait": session.ledger.lock_wait,
            "lock_waits": session.ledger.lock_waits,
            "lock_held": session.ledger.lock_held,
        }
    )
    print("DONE " + json.dumps({"releases": done, "seconds": time.perf_counter() - t0, **lock}), flush=True)


class Child:
    """A worker subprocess whose stdout lines are collected by a thread."""

    def __init__(self, config: dict[str, Any]) -> None:
        cmd = ["nice", "-n", "10", sys.executable, __file__, "--worker", json.dumps(config)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=C.REPO_ROOT
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line.strip())
            if line.startswith("READY"):
                self.ready.set()
        self.ready.set()

    def ids(self) -> list[int]:
        return [int(s.split()[1]) for s in list(self.lines) if s.startswith("R ")]

    def summary(self) -> dict[str, Any]:
        done = [s for s in self.lines if s.startswith("DONE ")]
        if not done:
            raise RuntimeError(
                f"worker failed (exit {self.proc.returncode}): {self.proc.stderr.read()[-2000:]}"
            )
        return json.loads(done[0][5:])

    def finish(self, timeout: float = 1800.0) -> None:
        self.proc.wait(timeout)
        self._thread.join(timeout)


# -- parent ---------------------------------------------------------------------------------------


def ledger_losses(path: Path) -> dict[int, Fraction]:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {i: Fraction(loss) for i, loss in con.execute("SELECT id, loss FROM releases")}
    finally:
        con.close()


def kill_run(root: Path, cfg: dict[str, Any], rng: Any) -> dict[str, Any]:
    from opendp_sketch.ledger import verify_ledger
    from opendp_sketch.session import Session

    path = root / "kill.db"
    Session.open(path, "bench", epsilon=1e9).close()
    stats = {
        "kills": 0,
        "children": 0,
        "returned": 0,
        "checks": 0,
        "checks_ok": 0,
        "lost": 0,
        "recorded_not_returned": 0,
        "min_margin": None,
        "kills_before_first_release": 0,
    }
    seen: set[int] = set()
    per_release: list[float] = []
    while True:
        losses = ledger_losses(path)
        if len(losses) >= cfg["kill_target"]:
            break
        child = Child(
            {
                "path": str(path),
                "seed": int(rng.integers(1 << 30)),
                "rows": cfg["kill_rows"],
                "plain": False,
                "go": None,
                "limit": None,
            }
        )
        stats["children"] += 1
        child.ready.wait(300)
        t_ready = time.perf_counter()
        wait_for = int(rng.integers(0, cfg["max_before_kill"] + 1))
        while len(child.ids()) < wait_for and child.proc.poll() is None:
            time.sleep(0.002)
        if child.ids():
            per_release.append((time.perf_counter() - t_ready) / len(child.ids()))
        typical = sorted(per_release)[len(per_release) // 2] if per_release else 0.2
        time.sleep(rng.uniform(0.0, 3.0 * typical))
        child.proc.send_signal(signal.SIGKILL)
        child.finish()
        stats["kills"] += 1
        ids = child.ids()
        stats["kills_before_first_release"] += not ids
        seen.update(ids)
        check = verify_ledger(path)
        losses = ledger_losses(path)
        lost = seen - set(losses)
        spent = Fraction(check["datasets"]["bench"]["spent"][0])
        margin = spent - sum((losses[i] for i in seen if i in losses), Fraction(0))
        stats["checks"] += 1
        stats["checks_ok"] += bool(check["ok"] and not lost and margin >= 0)
        stats["lost"] += len(lost)
        stats["min_margin"] = margin if stats["min_margin"] is None else min(stats["min_margin"], margin)
    # share of a release loop spent inside the write lock, from one child that is not killed
    cal = root / "calibration.db"
    Session.open(cal, "bench", epsilon=1.0).close()
    child = Child(
        {"path": str(cal), "seed": SEED, "rows": cfg["kill_rows"], "plain": False, "go": None, "limit": 5}
    )
    child.finish()
    summary = child.summary()
    stats["held_share"] = summary["lock_held"] / summary["seconds"]
    stats["recorded"] = len(losses)
    stats["returned"] = len(seen)
    stats["recorded_not_returned"] = len(set(losses) - seen)
    return stats


def concurrent_run(root: Path, cfg: dict[str, Any], procs: int, plain: bool = False) -> dict[str, Any]:
    from opendp_sketch.ledger import verify_ledger
    from opendp_sketch.session import Session

    path, go = root / f"conc{procs}{'plain' if plain else ''}.db", root / f"go{procs}{plain}"
    if go.exists():
        go.unlink()
    total = SHARE * cfg["releases"] + SHARE / 2  # room for exactly `releases` shares
    Session.open(path, "bench", epsilon=total).close()
    limit = cfg["releases"] if plain else None
    with C.Probe(include_children=True) as probe:
        children = [
            Child(
                {
                    "path": str(path),
                    "seed": SEED + k,
                    "rows": cfg["rows"],
                    "plain": plain,
                    "go": str(go),
                    "limit": limit,
                }
            )
            for k in range(procs)
        ]
        for c in children:
            c.ready.wait(300)
        t0 = time.perf_counter()
        go.touch()
        for c in children:
            c.finish()
        wall = time.perf_counter() - t0
    summaries = [c.summary() for c in children]
    releases = sum(s["releases"] for s in summaries)
    out = {
        "procs": procs,
        "plain": plain,
        "releases": releases,
        "wall": wall,
        "rate": releases / wall,
        "lock_wait": sum(s["lock_wait"] for s in summaries),
        "lock_waits": sum(s["lock_waits"] for s in summaries),
        "held_share": sum(s["lock_held"] for s in summaries)
        / max(sum(s["seconds"] for s in summaries), 1e-9),
        "background": probe.background_cores,
    }
    if not plain:
        check = verify_ledger(path)
        seen = [i for c in children for i in c.ids()]
        losses = ledger_losses(path)
        out.update(
            ok=check["ok"],
            spent=check["datasets"]["bench"]["spent"][0],
            total=total,
            lost=len(set(seen) - set(losses)),
            duplicates=len(seen) - len(set(seen)),
        )
    return out


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
        return
    args = C.parse_args(__doc__.splitlines()[0])
    import numpy as np

    cfg = QUICK if args.quick else FULL
    info = C.machine_info()
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory(prefix="bench_ledger_") as tmp:
        root = Path(tmp)
        C.progress("SIGKILL during releases")
        kill = kill_run(root, cfg, rng)
        C.progress(f"  {kill}")
        runs = []
        for procs in cfg["procs"]:
            C.wait_for_quiet(args.wait_quiet)
            runs.append(concurrent_run(root, cfg, procs))
            C.progress(f"  {procs} processes: {runs[-1]}")
        C.wait_for_quiet(args.wait_quiet)
        plain = concurrent_run(root, cfg, 1, plain=True)
        C.progress(f"  baseline: {plain}")

    one = runs[0]["rate"]
    kill_rows = [
        ["children started / SIGKILLed", f"{kill['children']} / {kill['kills']}"],
        ["kills before the child's first returned release", kill["kills_before_first_release"]],
        ["releases recorded in the ledger", kill["recorded"]],
        ["releases the children saw returned (printed)", kill["returned"]],
        [
            "recorded but never returned (killed between commit and print: spent, conservatively)",
            kill["recorded_not_returned"],
        ],
        ["returned but missing from the ledger (must be 0)", kill["lost"]],
        [
            "share of the release loop spent inside the write-lock transaction (child not killed)",
            C.fmt(kill["held_share"]),
        ],
        [
            "kills expected inside a transaction (kills after READY × that share)",
            C.fmt(kill["kills"] * kill["held_share"]),
        ],
        [
            "ledger checks passed / run (integrity, spent == Σ recorded, spent ≤ total, sketches stored, "
            "returned ⊆ recorded, spent ≥ Σ returned)",
            f"{kill['checks_ok']} / {kill['checks']}",
        ],
        [
            "min over checks of spent − Σ loss of returned releases (ε, must be ≥ 0)",
            C.fmt(float(kill["min_margin"] or 0)),
        ],
    ]
    conc_rows = [
        [
            "plain `dps.release_sketch`, no ledger (baseline)",
            1,
            plain["releases"],
            C.fmt(plain["wall"]),
            C.fmt(plain["rate"]),
            C.fmt(plain["rate"] / one),
            "–",
            "–",
            "–",
            "–",
            C.fmt(plain["background"]),
        ]
    ]
    for r in runs:
        conc_rows.append(
            [
                f"session, {r['procs']} process{'es' if r['procs'] > 1 else ''}",
                r["procs"],
                r["releases"],
                C.fmt(r["wall"]),
                C.fmt(r["rate"]),
                C.fmt(r["rate"] / one),
                f"{r['lock_waits']} / {C.fmt(r['lock_wait'])} s ({C.fmt(1e3 * r['lock_wait'] / max(r['releases'], 1))} ms per release)",
                f"{r['spent']:.6g} / {r['total']:.6g}"
                + (" ✓" if r["spent"] <= r["total"] and r["ok"] else " ✗"),
                f"{r['lost']} lost, {r['duplicates']} duplicated",
                C.fmt(r["held_share"]),
                C.fmt(r["background"]),
            ]
        )
    body = f"""## Setting

Each child is a fresh interpreter (`nice -n 10`) releasing Histogram sketches (d = 2, 4 bins per
column, {cfg["rows"]:,} rows, ε = {SHARE} per release, discrete Laplace, scale found by OpenDP's
binary search in every release) through `Session.release_sketch` on one SQLite ledger (WAL,
`synchronous=FULL`, `BEGIN IMMEDIATE` around filter → release → record → commit). It prints each
release id after the release returned. Ledger checks use `verify_ledger` (read-only).

## 1. SIGKILL at random points until {cfg["kill_target"]} releases are recorded

{C.md_table(["", "count"], kill_rows)}

## 2. Concurrent processes spending one budget until exhausted

Budget ε = {SHARE} × {cfg["releases"]} + {SHARE / 2} (room for exactly {cfg["releases"]} releases).
Wall time runs from the start signal (all children imported and ready) to the last exit. "Lock
waits" counts transactions that waited more than 1 ms for another process's write lock, and their
total wait; "lock-held share" is the children's time inside the write-lock transaction over their
time in the release loop. Ratios are releases/s relative to the one-process session in this run.

{
        C.md_table(
            [
                "configuration",
                "processes",
                "releases",
                "wall s",
                "releases/s",
                "ratio to 1 process",
                "lock waits / total wait",
                "spent / budget (ε)",
                "lost releases",
                "lock-held share",
                "other CPU (cores)",
            ],
            conc_rows,
        )
    }

The machine has {os.cpu_count()} cores, so with 8 processes they share the CPU and wait on one
write lock; the ledger serialises releases by design (see `docs/sessions.md`).
"""
    C.write_report(
        C.out_dir(args) / f"{NAME}.md", "Privacy ledger: crashes and concurrency", info, body, args.quick
    )


if __name__ == "__main__":
    main()
