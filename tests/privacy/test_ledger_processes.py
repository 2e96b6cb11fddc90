"""The privacy ledger under real concurrent processes and SIGKILL.

Children are forked ``multiprocessing`` processes (so they do not pay the import time again); each
opens its own :class:`Session` on the shared SQLite file and, after every release that returned,
appends the release id to its own report file with an unbuffered ``os.write``, so a report line
exists only for a release the child actually saw returned. ``benchmarks/bench_ledger.py`` repeats
this at scale with fresh interpreters.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.ledger import PrivacyBudgetError, verify_ledger
from opendp_sketch.session import Session

FORK = multiprocessing.get_context("fork")
BOUNDS = (0.0, 1.0)


def release_loop(
    path: str, dataset: str, epsilon: float, report: str, seed: int, rows: int = 200, key: bytes | None = None
) -> None:
    """Child: release small Histogram sketches until the budget is exhausted (or it is killed)."""
    X = np.random.default_rng(seed).uniform(0.0, 1.0, size=(rows, 2))
    fm = dps.Histogram(bounds=BOUNDS, bins=4, dim=2)
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with Session.open(path, dataset, timeout=120.0, key=key) as s:
        while True:
            try:
                sk = s.release_sketch(X, fm, bounds=BOUNDS, epsilon=epsilon)
            except PrivacyBudgetError:
                return
            os.write(fd, f"{sk.privacy['release_id']}\n".encode())


def reported(report: Path) -> list[int]:
    return [int(line) for line in report.read_text().split()] if report.exists() else []


def recorded(path: Path, dataset: str) -> dict[int, float]:
    with Session.open(path, dataset) as s:
        frame = s.releases()
    return dict(zip(frame["id"].to_list(), frame["epsilon"].to_list()))


def test_four_processes_cannot_overspend_and_lose_no_release(tmp_path):
    path, total, share = tmp_path / "ledger.db", 0.5, 0.05
    Session.open(path, "shared", epsilon=total).close()
    procs = [
        FORK.Process(target=release_loop, args=(str(path), "shared", share, str(tmp_path / f"r{i}.txt"), i))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]

    seen = [i for k in range(4) for i in reported(tmp_path / f"r{k}.txt")]
    ledger = recorded(path, "shared")
    assert len(seen) == len(set(seen))  # no release returned twice
    assert sorted(seen) == sorted(ledger)  # every returned release recorded, nothing recorded unreturned
    assert sum(bool(reported(tmp_path / f"r{k}.txt")) for k in range(4)) >= 2  # they competed
    report = verify_ledger(path)
    assert report["ok"], report
    spent = sum((Fraction(v) for v in ledger.values()), Fraction(0))
    assert spent <= Fraction(total)
    # exhausted, not stopped early: one more release of the same loss would not have fitted
    loss = Fraction(max(ledger.values()))
    assert spent + loss > Fraction(total) and len(ledger) == int(Fraction(total) / loss)


def test_signing_processes_keep_one_valid_chain(tmp_path):
    """Two processes append to one signed dataset: the rows form one hash chain, every signature
    checks, and the chain's spent budget is the sum of the releases the children saw."""
    key = b"a curator key of 32 bytes, fixed"
    path, total, share = tmp_path / "ledger.db", 0.3, 0.05
    Session.open(path, "signed", epsilon=total, key=key).close()
    procs = [
        FORK.Process(
            target=release_loop, args=(str(path), "signed", share, str(tmp_path / f"s{i}.txt"), i, 200, key)
        )
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    seen = [i for k in range(2) for i in reported(tmp_path / f"s{k}.txt")]
    report = verify_ledger(path, key=key)
    assert report["ok"], report
    info = report["datasets"]["signed"]
    assert info["signatures"] == "valid" and info["releases"] == len(seen) == len(set(seen))
    with Session.open(path, "signed", key=key) as s:
        frame = s.releases()
        assert sorted(frame["id"].to_list()) == sorted(seen)
        assert Fraction(s.spent) >= sum((Fraction(v) for v in frame["epsilon"].to_list()), Fraction(0))


def wait_for_reports(report: Path, count: int, child: multiprocessing.process.BaseProcess) -> None:
    deadline = time.monotonic() + 60
    while len(reported(report)) < count and child.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)


def sigkill_cycles(tmp_path: Path, kills: int, seed: int, rows: int) -> list[int]:
    """Start a releasing child, SIGKILL it at a random point of its release loop (after 0 to 2
    returned releases, then a random delay), check the ledger; repeat."""
    path = tmp_path / "ledger.db"
    Session.open(path, "ds", epsilon=1e6).close()
    rng = np.random.default_rng(seed)
    seen: list[int] = []
    for k in range(kills):
        report = tmp_path / f"kill{k}.txt"
        p = FORK.Process(target=release_loop, args=(str(path), "ds", 0.01, str(report), k, rows))
        p.start()
        wait_for_reports(report, int(rng.integers(0, 3)), p)
        time.sleep(rng.uniform(0.0, 0.3))
        p.kill()
        p.join(30)
        assert p.exitcode == -9
        seen += reported(report)
        check = verify_ledger(path)  # integrity ok, spent == exact sum of recorded releases
        assert check["ok"], check
        ledger = recorded(path, "ds")
        assert set(seen) <= set(ledger)  # nothing returned was lost
        with Session.open(path, "ds") as s:
            assert Fraction(s.spent) >= sum((Fraction(ledger[i]) for i in seen), Fraction(0))
            assert s.spent == check["datasets"]["ds"]["spent"][0]
    return seen


def test_sigkill_mid_release_leaves_a_consistent_ledger(tmp_path):
    seen = sigkill_cycles(tmp_path, kills=3, seed=1, rows=20_000)
    assert seen  # some releases returned before the kills


@pytest.mark.slow
def test_many_sigkills_leave_a_consistent_ledger(tmp_path):
    seen = sigkill_cycles(tmp_path, kills=30, seed=2, rows=100_000)
    assert len(seen) >= 10
