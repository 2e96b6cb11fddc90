"""The privacy ledger: one SQLite file recording each dataset's budget, every release and its sketch.

The ledger is the durable half of a :class:`~opendp_sketch.session.Session`. It stores

* ``datasets``: the total budget of each dataset and the budget spent so far, as **exact**
  fractions (sums of the IEEE doubles OpenDP reported, in :class:`fractions.Fraction` arithmetic);
* ``releases``: one row per release (kind, time, ``d_in``, loss, a summary, the released value
  when it is small and JSON-serialisable);
* ``sketches``: released sketches as the bytes of :meth:`~opendp_sketch.Sketch.save` (a zip of
  JSON and integer arrays, never pickle);
* ``postprocessing``: a log of analyses read from released sketches (they cost nothing).

Writers serialise on SQLite's write lock: :meth:`Ledger.transaction` is ``BEGIN IMMEDIATE`` …
``COMMIT``, so *read remaining budget → release → record* is atomic across processes. The file is
in WAL mode with ``synchronous=FULL``: a committed release survives a crash or power loss, and an
uncommitted one is rolled back when the file is next opened. See ``docs/sessions.md``.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = [
    "Ledger",
    "LedgerError",
    "LedgerBusyError",
    "PrivacyBudgetError",
    "verify_ledger",
    "BUDGET_KINDS",
    "DEFAULT_TIMEOUT",
]

#: budget conventions of :func:`opendp_sketch.release_sketch`: pure ε, (ε, δ), ρ-zCDP
BUDGET_KINDS = ("epsilon", "epsilon_delta", "rho")
#: seconds a writer waits for another process's release before giving up
DEFAULT_TIMEOUT = 600.0
_FORMAT = "opendp_sketch.ledger"
_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id TEXT PRIMARY KEY,
    budget TEXT NOT NULL CHECK (budget IN ('epsilon', 'epsilon_delta', 'rho')),
    total_loss REAL NOT NULL CHECK (total_loss > 0),
    total_delta REAL NOT NULL CHECK (total_delta >= 0 AND total_delta < 1),
    spent_loss TEXT NOT NULL,
    spent_delta TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset_id TEXT NOT NULL REFERENCES datasets(dataset_id),
    kind TEXT NOT NULL,
    created TEXT NOT NULL,
    d_in TEXT NOT NULL,
    loss REAL NOT NULL CHECK (loss >= 0),
    delta REAL NOT NULL CHECK (delta >= 0),
    summary TEXT NOT NULL,
    description TEXT,
    result TEXT
);
CREATE TABLE IF NOT EXISTS sketches (
    release_id INTEGER PRIMARY KEY REFERENCES releases(id),
    map_kind TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    num_features INTEGER NOT NULL,
    blob BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS postprocessing (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    release_id INTEGER NOT NULL REFERENCES releases(id),
    created TEXT NOT NULL,
    description TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS releases_by_dataset ON releases(dataset_id);
"""

#: a loss as exact fractions: ``(ε or ρ, δ)``; δ is 0 unless the budget is (ε, δ)
Loss = tuple[Fraction, Fraction]


class LedgerError(ValueError):
    """The ledger file is not an opendp_sketch ledger, or a dataset's record contradicts a request."""


class LedgerBusyError(RuntimeError):
    """Another process held the ledger's write lock longer than the timeout; nothing was spent."""


class PrivacyBudgetError(ValueError):
    """A release was refused because it would exceed the remaining budget; nothing was spent."""


def float_down(q: Fraction) -> float:
    """The largest double ``≤ q`` (never reports more budget left than there is)."""
    f = float(q)
    return math.nextafter(f, -math.inf) if Fraction(f) > q else f


def float_up(q: Fraction) -> float:
    """The smallest double ``≥ q`` (never reports less budget spent than there was)."""
    f = float(q)
    return math.nextafter(f, math.inf) if Fraction(f) < q else f


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class DatasetRecord:
    """One row of ``datasets``: the budget kind, its total and what has been spent (exact)."""

    dataset_id: str
    budget: str
    total: Loss
    spent: Loss

    @property
    def remaining(self) -> Loss:
        return (self.total[0] - self.spent[0], self.total[1] - self.spent[1])


class Ledger:
    """A connection to a ledger file (created, in WAL mode, if missing).

    :param path: the SQLite file; its directory must exist
    :param timeout: seconds to wait for another process's write lock before
        :class:`LedgerBusyError`
    :raises LedgerError: if the file exists but is not an opendp_sketch ledger
    :raises ValueError: for a bad path or timeout
    """

    def __init__(self, path: str | os.PathLike[str], timeout: float = DEFAULT_TIMEOUT) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"ledger path ({path!r}) must be a str or os.PathLike")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout ({timeout!r}) must be a positive finite number of seconds")
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise ValueError(f"the directory of the ledger path ({self.path!r}) does not exist")
        self.timeout = float(timeout)
        #: total seconds this connection waited for other processes' write locks
        self.lock_wait = 0.0
        #: number of transactions that had to wait more than a millisecond for the lock
        self.lock_waits = 0
        #: total seconds this connection held the write lock (other writers wait meanwhile)
        self.lock_held = 0.0
        try:
            # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE) below
            self._con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            self._con.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"{self.path}: not a readable SQLite ledger ({e})") from None
        # FULL: a commit is on disk before a release is returned, even across power loss
        self._con.execute("PRAGMA synchronous=FULL")
        self._con.execute("PRAGMA foreign_keys=ON")
        with self.transaction() as con:
            self._init_schema(con)

    def _init_schema(self, con: sqlite3.Connection) -> None:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise LedgerError(f"{self.path}: an SQLite file that is not an opendp_sketch ledger")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                con.execute(statement)
        con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?), ('version', ?)", (_FORMAT, _VERSION))
        meta = dict(con.execute("SELECT key, value FROM meta"))
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise LedgerError(
                f"{self.path}: ledger format {meta.get('format')!r} version {meta.get('version')!r} "
                f"is not supported (expected {_FORMAT!r} version {_VERSION})"
            )

    def close(self) -> None:
        """Close the connection (committed releases are already on disk)."""
        self._con.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls everything back.

        IMMEDIATE takes the write lock before the first read, so what a transaction reads (the
        remaining budget) cannot change before it commits.

        :raises LedgerBusyError: if the lock is not obtained within ``timeout`` seconds
        """
        t0 = time.perf_counter()
        try:
            self._con.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise LedgerBusyError(
                f"{self.path}: the ledger stayed locked by another release for {self.timeout:g} s ({e}); "
                "nothing was spent"
            ) from None
        t1 = time.perf_counter()
        self.lock_wait += t1 - t0
        self.lock_waits += t1 - t0 > 1e-3
        try:
            yield self._con
            self._con.execute("COMMIT")
        except BaseException:
            if self._con.in_transaction:  # a failed COMMIT may already have ended it
                self._con.execute("ROLLBACK")
            raise
        finally:
            self.lock_held += time.perf_counter() - t1

    # -- datasets -------------------------------------------------------------------------------
    def dataset(self, dataset_id: str, con: sqlite3.Connection | None = None) -> DatasetRecord | None:
        """The record of ``dataset_id`` (``None`` if the ledger has none)."""
        row = (con or self._con).execute(
            "SELECT budget, total_loss, total_delta, spent_loss, spent_delta FROM datasets WHERE dataset_id = ?",
            (dataset_id,),
        ).fetchone()
        if row is None:
            return None
        budget, tl, td, sl, sd = row
        return DatasetRecord(dataset_id, budget, (Fraction(tl), Fraction(td)), (Fraction(sl), Fraction(sd)))

    def ensure_dataset(self, dataset_id: str, budget: str | None, total: tuple[float, float] | None) -> DatasetRecord:
        """Create ``dataset_id`` with ``total`` or check that its stored total is the same.

        :param budget: one of :data:`BUDGET_KINDS`, or ``None`` to reopen without restating it
        :param total: ``(ε or ρ, δ)``; δ is 0 except for ``"epsilon_delta"``
        :raises LedgerError: if the dataset exists with another budget, or does not exist and no
            budget is given
        """
        with self.transaction() as con:
            rec = self.dataset(dataset_id, con)
            if rec is None:
                if budget is None or total is None:
                    raise LedgerError(
                        f"dataset {dataset_id!r} is not in the ledger {self.path}: give its total budget "
                        "(epsilon=, epsilon= and delta=, or rho=) to create it"
                    )
                con.execute(
                    "INSERT INTO datasets VALUES (?, ?, ?, ?, '0', '0', ?)",
                    (dataset_id, budget, float(total[0]), float(total[1]), _now()),
                )
                return DatasetRecord(dataset_id, budget, (Fraction(total[0]), Fraction(total[1])), (Fraction(0),) * 2)
        if budget is not None and (rec.budget != budget or rec.total != (Fraction(total[0]), Fraction(total[1]))):
            raise LedgerError(
                f"dataset {dataset_id!r} already has a total budget of {describe(rec.budget, rec.total)} in "
                f"{self.path}; it cannot be reopened with {describe(budget, total)}"
            )
        return rec

    def record_release(
        self,
        con: sqlite3.Connection,
        rec: DatasetRecord,
        kind: str,
        d_in: Any,
        loss: Loss,
        summary: str,
        description: str | None,
        result: str | None,
    ) -> int:
        """Add a release and its loss to ``rec``'s spent budget inside the open transaction ``con``.

        :raises PrivacyBudgetError: if the exact spent budget would exceed the total
        """
        spent = (rec.spent[0] + loss[0], rec.spent[1] + loss[1])
        if spent[0] > rec.total[0] or spent[1] > rec.total[1]:
            raise PrivacyBudgetError(
                f"dataset {rec.dataset_id!r}: a release of {describe(rec.budget, loss)} would exceed the "
                f"remaining budget {describe(rec.budget, rec.remaining)}; nothing was released"
            )
        cur = con.execute(
            "INSERT INTO releases (dataset_id, kind, created, d_in, loss, delta, summary, description, result) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.dataset_id, kind, _now(), str(d_in), float(loss[0]), float(loss[1]), summary, description, result),
        )
        con.execute(
            "UPDATE datasets SET spent_loss = ?, spent_delta = ? WHERE dataset_id = ?",
            (str(spent[0]), str(spent[1]), rec.dataset_id),
        )
        return int(cur.lastrowid)

    # -- sketches and post-processing -----------------------------------------------------------
    def store_sketch(
        self, con: sqlite3.Connection, release_id: int, map_kind: str, fingerprint: str, num_features: int, blob: bytes
    ) -> None:
        """Store a released sketch's file bytes under its release id (inside the open transaction)."""
        con.execute(
            "INSERT INTO sketches VALUES (?, ?, ?, ?, ?)", (release_id, map_kind, fingerprint, num_features, blob)
        )

    def sketch_blob(self, dataset_id: str, release_id: int) -> bytes:
        """The stored bytes of release ``release_id`` of ``dataset_id``.

        :raises ValueError: if that release is not a stored sketch of this dataset
        """
        row = self._con.execute(
            "SELECT s.blob FROM sketches s JOIN releases r ON r.id = s.release_id "
            "WHERE s.release_id = ? AND r.dataset_id = ?",
            (release_id, dataset_id),
        ).fetchone()
        if row is None:
            raise ValueError(f"release {release_id!r} is not a stored sketch of dataset {dataset_id!r}")
        return bytes(row[0])

    def log_postprocessing(self, dataset_id: str, release_id: int, description: str) -> int:
        """Log an analysis of release ``release_id`` (free: no budget changes)."""
        with self.transaction() as con:
            if con.execute(
                "SELECT 1 FROM releases WHERE id = ? AND dataset_id = ?", (release_id, dataset_id)
            ).fetchone() is None:
                raise ValueError(f"release {release_id!r} is not a release of dataset {dataset_id!r}")
            cur = con.execute(
                "INSERT INTO postprocessing (release_id, created, description) VALUES (?, ?, ?)",
                (release_id, _now(), description),
            )
            return int(cur.lastrowid)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query (for tables and reports)."""
        return self._con.execute(sql, params).fetchall()


def describe(budget: str, loss: tuple[Any, Any]) -> str:
    """``ε = 0.5``, ``(ε, δ) = (0.5, 1e-06)`` or ``ρ = 0.1``; fractions shown rounded up."""

    def up(v: Any) -> float:
        return v if isinstance(v, float) and not math.isfinite(v) else float_up(Fraction(v))

    if budget == "epsilon":
        return f"ε = {up(loss[0]):g}"
    if budget == "rho":
        return f"ρ = {up(loss[0]):g}"
    return f"(ε, δ) = ({up(loss[0]):g}, {up(loss[1]):g})"


def verify_ledger(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Check a ledger file: SQLite integrity, and for every dataset that the recorded spent budget
    equals the exact sum of its releases' losses and is within its total.

    Opens the file read-only (``mode=ro``), so it can run while other processes release.

    :raises ValueError: if the file does not exist
    :return: ``{"ok": bool, "integrity": str, "datasets": {id: {"releases", "spent", "total",
        "spent_matches", "within_budget", "sketches_missing"}}}``
    """
    if not os.path.isfile(path):
        raise ValueError(f"ledger file ({os.fspath(path)!r}) does not exist")
    con = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True, timeout=DEFAULT_TIMEOUT)
    try:
        con.execute("BEGIN")  # one snapshot for every read below
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        out: dict[str, Any] = {"integrity": integrity, "datasets": {}}
        ok = integrity == "ok"
        for ds, budget, tl, td, sl, sd in con.execute(
            "SELECT dataset_id, budget, total_loss, total_delta, spent_loss, spent_delta FROM datasets"
        ).fetchall():
            rows = con.execute("SELECT loss, delta FROM releases WHERE dataset_id = ?", (ds,)).fetchall()
            summed = (sum((Fraction(r[0]) for r in rows), Fraction(0)), sum((Fraction(r[1]) for r in rows), Fraction(0)))
            spent, total = (Fraction(sl), Fraction(sd)), (Fraction(tl), Fraction(td))
            missing = con.execute(
                "SELECT COUNT(*) FROM releases r LEFT JOIN sketches s ON s.release_id = r.id "
                "WHERE r.dataset_id = ? AND r.kind = 'sketch' AND s.release_id IS NULL",
                (ds,),
            ).fetchone()[0]
            info = {
                "budget": budget,
                "releases": len(rows),
                "spent": (float_up(spent[0]), float_up(spent[1])),
                "total": (float(total[0]), float(total[1])),
                "spent_matches": spent == summed,
                "within_budget": spent[0] <= total[0] and spent[1] <= total[1],
                "sketches_missing": int(missing),
            }
            ok = ok and info["spent_matches"] and info["within_budget"] and not missing
            out["datasets"][ds] = info
        out["ok"] = ok
        return out
    finally:
        con.close()
