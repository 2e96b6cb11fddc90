"""The privacy ledger: one SQLite file recording each dataset's budget, every release and its sketch.

The ledger is the durable half of a :class:`~opendp_sketch.session.Session`. It stores

* ``datasets``: the total budget of each dataset, its privacy unit (``contributions``), and a
  cache of the budget spent so far as **exact** fractions;
* ``releases``: one row per release (kind, time, ``d_in``, loss, a summary, the released value
  when it is small and JSON-serialisable), each carrying a SHA-256 **hash chained** to the
  previous release of its dataset (and, with a curator's key, an HMAC-SHA256 signature);
* ``sketches``: released sketches as the bytes of :meth:`~opendp_sketch.Sketch.save` (a zip of
  JSON and integer arrays, never pickle), bound to their release row by a SHA-256 digest;
* ``postprocessing``: a log of analyses read from released sketches (they cost nothing).

The spent budget is always **recomputed from the chained release rows**; the stored total is
only a cache that must agree. Any edited, deleted, reordered or replayed row, an edited budget or
unit, or a stored total that disagrees makes :meth:`Ledger.dataset` raise :class:`LedgerError`
naming the problem and the row, and :func:`verify_ledger` report it.

Writers serialise on SQLite's write lock: :meth:`Ledger.transaction` is ``BEGIN IMMEDIATE`` …
``COMMIT``, so *read remaining budget → release → record* is atomic across processes. The file is
in WAL mode with ``synchronous=FULL``: a committed release survives a crash or power loss, and an
uncommitted one is rolled back when the file is next opened. See ``docs/sessions.md``.

This module is the connection that writes and audits the ledger, and :func:`verify_ledger`; the
file's tables and the chain's encoding are :mod:`opendp_sketch.ledger_format`, and the check of
released sketches' witnesses is :mod:`opendp_sketch.ledger_witness`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import pathlib
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

from .ledger_format import (  # noqa: F401 - float_down is re-exported for older imports
    DATASET_COLUMNS,
    FORMAT,
    HEADS,
    RELEASE_COLUMNS,
    SCHEMA,
    V2_COLUMNS,
    VERSION,
    Checkpoint,
    DatasetRecord,
    Loss,
    describe,
    float_down,
    float_up,
    head_message,
    heads_message,
    read_heads,
    release_message,
    unit_of,
    witness_message,
)

# the chain's two hashes, under module-level names that the audit and the writer look up (a test
# intercepts the hashing through them)
from .ledger_format import genesis_hash as _genesis
from .ledger_format import release_hash as _release_hash
from .ledger_witness import check_witnesses
from .signing import check_key, sign, signature_matches

__all__ = [
    "Ledger",
    "LedgerError",
    "LedgerBusyError",
    "PrivacyBudgetError",
    "ReleaseFailedError",
    "verify_ledger",
    "BUDGET_KINDS",
    "DEFAULT_TIMEOUT",
]

#: budget conventions of :func:`opendp_sketch.release_sketch`: pure ε, (ε, δ), ρ-zCDP
BUDGET_KINDS = ("epsilon", "epsilon_delta", "rho")
#: seconds a writer waits for another process's release before giving up
DEFAULT_TIMEOUT = 600.0


class LedgerError(ValueError):
    """The ledger file is not an opendp_sketch ledger, was tampered with, or a dataset's record
    contradicts a request."""


class LedgerBusyError(RuntimeError):
    """Another process held the ledger's write lock longer than the timeout; nothing was spent."""


class PrivacyBudgetError(ValueError):
    """A release was refused because it would exceed the remaining budget; nothing was spent."""


class ReleaseFailedError(RuntimeError):
    """A release's computation failed after the budget accepted it: nothing was released, and its
    loss was charged (the data had been read, so a free failure would be an oracle)."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def _audit(
    con: sqlite3.Connection,
    dataset_id: str,
    key: bytes | None,
    since: Checkpoint | None = None,
    version: str = VERSION,
) -> tuple[DatasetRecord | None, list[str], int]:
    """``dataset_id``'s record with the spent budget recomputed from its chained rows, every
    problem found (an empty list when the chain, the stored cache and, with ``key``, the
    signatures all agree), and the id of the last row checked. Reads inside the caller's
    transaction (one snapshot).

    With ``since``, the rows up to its id are not re-hashed: their count and last hash must be
    unchanged, and the spent budget continues from the checkpoint's (computed, never stored)."""
    row = con.execute(
        f"SELECT {DATASET_COLUMNS} FROM datasets WHERE dataset_id = ?", (dataset_id,)
    ).fetchone()
    if row is None:
        return None, [], 0
    ds, budget, tl, td, sl, sd, created, unit, signed, head, mac = row
    where = f"dataset {ds!r}"
    try:
        genesis = _genesis(ds, budget, tl, td, unit, signed, created)
        total = (Fraction(tl), Fraction(td))
    except (TypeError, ValueError) as e:
        return None, [f"{where}: the dataset record is not valid ({e})"], 0
    problems: list[str] = []
    if key is not None and signed != 1:
        problems.append(f"{where} was created without a key: it has no signatures to check against one")
    last_id, prev, checked, spent, seen = 0, genesis, 0, [Fraction(0), Fraction(0)], set()
    if since is not None:
        last_id, known = since
        count, last_hash = con.execute(
            "SELECT COUNT(*), (SELECT hash FROM releases WHERE id = ?) FROM releases "
            "WHERE dataset_id = ? AND id <= ?",
            (last_id, ds, last_id),
        ).fetchone()
        if known.genesis != genesis:
            problems.append(f"{where}: the dataset record (budget, unit or creation) was modified")
        if count != known.releases or (known.releases and last_hash != known.head):
            problems.append(
                f"{where}: rows checked earlier (ids up to {last_id}) were deleted or changed since"
            )
        prev, checked, spent = known.head, known.releases, list(known.spent)
    rows = con.execute(
        f"SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset_id = ? AND id > ? ORDER BY id", (ds, last_id)
    ).fetchall()
    for position, (rid, seq, prev_hash, row_hash, row_mac, *content) in enumerate(rows, start=checked + 1):
        last_id = rid
        label = f"{where}, release row id {rid} (seq {seq})"
        if seq in seen:
            problems.append(f"{label}: repeats seq {seq}: a replayed (duplicated) row")
        elif seq != position:
            problems.append(
                f"{label}: found at position {position} of the chain: rows were deleted or reordered"
            )
        seen.add(seq)
        if prev_hash != prev:
            start = (
                "the dataset record (budget, unit or creation) was modified"
                if position == 1
                else ("a row before it was deleted, inserted or reordered")
            )
            problems.append(f"{label}: does not follow the previous hash of the chain: {start}")
        try:
            expected = _release_hash(
                prev_hash if isinstance(prev_hash, str) else prev, ds, seq, rid, tuple(content)
            )
            loss, delta = Fraction(content[3]), Fraction(content[4])
        except (TypeError, ValueError) as e:
            problems.append(f"{label}: its contents are not valid ({e})")
            continue
        if row_hash != expected:
            problems.append(f"{label}: its contents do not match its hash: the row was modified")
        if key is not None and signed == 1 and not signature_matches(key, release_message(expected), row_mac):
            problems.append(f"{label}: its signature is missing or does not match the key")
        if unit_of(content[2]) != unit:
            problems.append(
                f"{label}: released at d_in={content[2]}, not at the dataset's privacy unit ({unit}): "
                "its loss is not a loss of the unit (a version-1 ledger mixing units under-records)"
            )
        spent[0] += loss
        spent[1] += delta
        prev = row_hash if isinstance(row_hash, str) else expected
    if head != prev:
        problems.append(
            f"{where}: its head hash does not match the end of its chain: the last release(s) were deleted, "
            "or the dataset record was modified"
            if checked + len(rows)
            else f"{where}: the dataset record (budget, unit or creation) was modified"
        )
    try:
        stored = (Fraction(sl), Fraction(sd))
    except (TypeError, ValueError, ZeroDivisionError):
        stored = None
    if stored != tuple(spent):
        problems.append(
            f"{where}: the stored spent budget ({sl}, {sd}) is not the sum of its chained releases "
            f"({spent[0]}, {spent[1]}): the stored total was edited"
        )
    if spent[0] > total[0] or spent[1] > total[1]:
        problems.append(f"{where}: its chained releases spend {describe(budget, spent)}, over the total")
    if (
        key is not None
        and signed == 1
        and not signature_matches(
            key, head_message(ds, genesis, head, checked + len(rows), sl, sd, version), mac
        )
    ):
        problems.append(f"{where}: the dataset record's signature is missing or does not match the key")
    count = checked + len(rows)
    if key is not None and signed == 1 and version != "2":
        heads, trouble = read_heads(con, key)
        problems += trouble
        kept = (heads or {}).get(ds)
        if kept is None:
            problems.append(
                f"{where}: it is missing from the ledger's signed heads: the meta table was modified"
            )
        elif kept != [count, prev]:
            problems.append(
                f"{where}: the ledger's signed heads record {kept[0]} release(s) ending in {kept[1][:12]}…, "
                f"the dataset {count} ending in {str(prev)[:12]}…: the dataset was rolled back (an older copy "
                "of its record restored, later releases deleted) or its record edited"
            )
    record = DatasetRecord(ds, budget, total, (spent[0], spent[1]), unit, signed == 1, prev, count, genesis)
    return record, problems, last_id


def _tamper_error(path: str, problems: list[str]) -> LedgerError:
    more = f" (and {len(problems) - 3} more problems)" if len(problems) > 3 else ""
    return LedgerError(
        f"{path}: the ledger was tampered with or is inconsistent: {'; '.join(problems[:3])}{more}"
    )


class Ledger:
    """A connection to a ledger file (created, in WAL mode, if missing; a version-1 file is
    upgraded to the hash-chained version 2 when opened).

    :param path: the SQLite file; its directory must exist
    :param timeout: seconds to wait for another process's write lock before
        :class:`LedgerBusyError`
    :param key: a curator's secret key: datasets created with it sign every release row, and
        their records are checked against it
    :raises LedgerError: if the file exists but is not an opendp_sketch ledger, or a version-1
        file cannot be upgraded
    :raises ValueError: for a bad path, timeout or key
    """

    def __init__(
        self, path: str | os.PathLike[str], timeout: float = DEFAULT_TIMEOUT, key: bytes | str | None = None
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"ledger path ({path!r}) must be a str or os.PathLike")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout ({timeout!r}) must be a positive finite number of seconds")
        self._key = None if key is None else check_key(key)
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise ValueError(f"the directory of the ledger path ({self.path!r}) does not exist")
        self.timeout = float(timeout)
        self._checked: dict[str, Checkpoint] = {}
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
        try:
            with self.transaction() as con:
                self._init_schema(con)
        except BaseException:
            self._con.close()
            raise

    @property
    def signing(self) -> bool:
        """Whether this connection holds a key."""
        return self._key is not None

    def _init_schema(self, con: sqlite3.Connection) -> None:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise LedgerError(f"{self.path}: an SQLite file that is not an opendp_sketch ledger")
        meta = dict(con.execute("SELECT key, value FROM meta")) if tables else {}
        if meta.get("format") == FORMAT and meta.get("version") == "1":
            self._upgrade_from_v1(con)
            meta["version"] = "2"
        if meta.get("format") == FORMAT and meta.get("version") == "2":
            self._upgrade_from_v2(con)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                con.execute(statement)
        fresh = not tables
        con.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?), ('version', ?)", (FORMAT, VERSION))
        if fresh:
            con.execute("INSERT INTO meta VALUES (?, ?)", (HEADS, json.dumps({"heads": {}, "mac": None})))
        meta = dict(con.execute("SELECT key, value FROM meta"))
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise LedgerError(
                f"{self.path}: ledger format {meta.get('format')!r} version {meta.get('version')!r} "
                f"is not supported (expected {FORMAT!r} version {VERSION})"
            )

    def _upgrade_from_v1(self, con: sqlite3.Connection) -> None:
        """Add the version-2 columns and chain each dataset's existing rows (in id order).

        A version-1 file has no chain: its rows are taken as they are (signed with the key, if one
        is given), after checking that each stored spent total is the sum of its releases. The
        unit becomes the largest ``d_in`` recorded; a dataset whose releases used several units
        then fails its audit (its losses under-record) and cannot be released from.
        """
        for table, columns in V2_COLUMNS.items():
            for column in columns:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
        signed = int(self._key is not None)
        for ds, tl, td, sl, sd, created, budget in con.execute(
            "SELECT dataset_id, total_loss, total_delta, spent_loss, spent_delta, created, budget FROM datasets"
        ).fetchall():
            rows = con.execute(
                "SELECT r.id, r.kind, r.created, r.d_in, r.loss, r.delta, r.summary, r.description, r.result, s.blob "
                "FROM releases r LEFT JOIN sketches s ON s.release_id = r.id WHERE r.dataset_id = ? ORDER BY r.id",
                (ds,),
            ).fetchall()
            summed = (
                sum((Fraction(r[4]) for r in rows), Fraction(0)),
                sum((Fraction(r[5]) for r in rows), Fraction(0)),
            )
            if (Fraction(sl), Fraction(sd)) != summed:
                raise LedgerError(
                    f"{self.path}: version-1 dataset {ds!r} records spent ({sl}, {sd}) but its releases sum to "
                    f"({summed[0]}, {summed[1]}); the file is inconsistent and is not upgraded"
                )
            unit = max([u for u in (unit_of(r[3]) for r in rows) if u is not None], default=1)
            prev = genesis = _genesis(ds, budget, tl, td, unit, signed, created)
            for seq, (
                rid,
                kind,
                rcreated,
                d_in,
                loss,
                delta,
                summary,
                description,
                result,
                blob,
            ) in enumerate(rows, 1):
                digest = None if blob is None else hashlib.sha256(blob).hexdigest()
                content = (kind, rcreated, d_in, loss, delta, summary, description, result, digest)
                row_hash = _release_hash(prev, ds, seq, rid, content)
                con.execute(
                    "UPDATE releases SET seq = ?, prev_hash = ?, hash = ?, mac = ?, sketch_sha256 = ? WHERE id = ?",
                    (seq, prev, row_hash, self._sign(release_message(row_hash)), digest, rid),
                )
                prev = row_hash
            mac = self._sign(head_message(ds, genesis, prev, len(rows), sl, sd, "2"))
            con.execute(
                "UPDATE datasets SET unit = ?, signed = ?, head = ?, mac = ? WHERE dataset_id = ?",
                (unit, signed, prev, mac, ds),
            )
        con.execute("UPDATE meta SET value = '2' WHERE key = 'version'")

    def _upgrade_from_v2(self, con: sqlite3.Connection) -> None:
        """Keep every signed dataset's release count and head hash in the ledger's signed heads.

        A version-2 file has none. Its signed datasets are audited against the key first (so a
        tampered file is not blessed), then re-signed under the version-3 tag with the heads
        written: from then on a dataset rolled back or deleted inside the file leaves evidence.

        :raises LedgerError: if the file has signed datasets and this connection has no key, or an
            audit finds a problem
        """
        signed = [
            r[0] for r in con.execute("SELECT dataset_id FROM datasets WHERE signed = 1 ORDER BY dataset_id")
        ]
        if signed and self._key is None:
            raise LedgerError(
                f"{self.path}: a version-2 ledger with signed datasets ({signed}); open it once with its key "
                "(key=...) to upgrade it to version 3"
            )
        heads: dict[str, list[Any]] = {}
        for ds in signed:
            record, problems, _ = _audit(con, ds, self._key, version="2")
            if problems or record is None:
                raise _tamper_error(self.path, problems or [f"dataset {ds!r} could not be read"])
            sl, sd = con.execute(
                "SELECT spent_loss, spent_delta FROM datasets WHERE dataset_id = ?", (ds,)
            ).fetchone()
            mac = self._sign(head_message(ds, record.genesis, record.head, record.releases, sl, sd))
            con.execute("UPDATE datasets SET mac = ? WHERE dataset_id = ?", (mac, ds))
            heads[ds] = [record.releases, record.head]
        value = {"heads": heads, "mac": self._sign(heads_message(heads)) if heads else None}
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HEADS, json.dumps(value)))
        con.execute("UPDATE meta SET value = ? WHERE key = 'version'", (VERSION,))

    def _keep_head(self, con: sqlite3.Connection, ds: str, count: int, head: str) -> None:
        """Record a signed dataset's new release count and head in the ledger's signed heads."""
        heads, _ = read_heads(con, None)
        heads = dict(heads or {})
        heads[ds] = [int(count), str(head)]
        value = {"heads": heads, "mac": self._sign(heads_message(heads))}
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HEADS, json.dumps(value)))

    def witness(self, ds: str, after: int, head: str) -> dict[str, Any] | None:
        """A released sketch's ledger witness (with a key): it was appended to ``ds``'s chain
        after ``after`` releases ending in ``head``; :func:`verify_ledger` checks it."""
        if self._key is None:
            return None
        nonce = secrets.token_hex(16)
        return {
            "dataset": ds,
            "after": int(after),
            "head": str(head),
            "nonce": nonce,
            "mac": self._sign(witness_message(ds, after, head, nonce)),
        }

    def _sign(self, message: bytes) -> str | None:
        return None if self._key is None else sign(self._key, message)

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

    @contextmanager
    def _snapshot(self, con: sqlite3.Connection | None) -> Iterator[sqlite3.Connection]:
        """``con`` if given (the caller's transaction), else a read transaction: one consistent
        snapshot, so a release committed by another process between two reads is never half-seen."""
        if con is not None or self._con.in_transaction:
            yield con or self._con
            return
        self._con.execute("BEGIN")
        try:
            yield self._con
        finally:
            self._con.execute("COMMIT")

    # -- datasets -------------------------------------------------------------------------------
    def dataset(
        self, dataset_id: str, con: sqlite3.Connection | None = None, *, full: bool = False
    ) -> DatasetRecord | None:
        """The record of ``dataset_id`` (``None`` if the ledger has none), its spent budget
        recomputed from its hash chain.

        This connection remembers where it last checked the chain: later calls hash only the
        rows appended since (and check that the earlier ones are still there, unchanged at the
        end), so a release costs time in the new rows, not in the ledger's length.

        :param full: check the whole chain again (``Session.open`` and :func:`verify_ledger` do)
        :raises LedgerError: if the chain, the stored total or (with a key) a signature shows
            that the dataset's record or rows were modified, deleted, reordered or replayed
        """
        since = None if full else self._checked.get(dataset_id)
        with self._snapshot(con) as c:
            record, problems, last_id = _audit(c, dataset_id, self._key, since)
        if problems:
            self._checked.pop(dataset_id, None)
            raise _tamper_error(self.path, problems)
        if record is not None:
            self._checked[dataset_id] = (last_id, record)
        return record

    def ensure_dataset(
        self,
        dataset_id: str,
        budget: str | None,
        total: tuple[float, float] | None,
        contributions: int | None = None,
    ) -> DatasetRecord:
        """Create ``dataset_id`` with ``total`` and privacy unit ``contributions`` (default 1), or
        check that its stored total and unit are the same.

        :param budget: one of :data:`BUDGET_KINDS`, or ``None`` to reopen without restating it
        :param total: ``(ε or ρ, δ)``; δ is 0 except for ``"epsilon_delta"``
        :param contributions: rows one individual may contribute; ``None`` to reopen without
            restating it
        :raises LedgerError: if the dataset exists with another budget or unit, does not exist
            and no budget is given, is signed and this connection has no key, or was tampered with
        """
        with self.transaction() as con:
            rec = self.dataset(dataset_id, con, full=True)
            if rec is None and self._key is not None:
                heads, trouble = read_heads(con, self._key)
                if trouble:
                    raise _tamper_error(self.path, trouble)
                if dataset_id in (heads or {}):
                    count = (heads or {})[dataset_id][0]
                    raise _tamper_error(
                        self.path,
                        [
                            f"dataset {dataset_id!r} is in the ledger's signed heads ({count} release(s)) but its "
                            "record is gone: it was deleted, and is not created again at a full budget"
                        ],
                    )
            if rec is None:
                if budget is None or total is None:
                    raise LedgerError(
                        f"dataset {dataset_id!r} is not in the ledger {self.path}: give its total budget "
                        "(epsilon=, epsilon= and delta=, or rho=) to create it"
                    )
                unit, signed, created = contributions or 1, int(self.signing), _now()
                genesis = _genesis(
                    dataset_id, budget, float(total[0]), float(total[1]), unit, signed, created
                )
                con.execute(
                    f"INSERT INTO datasets ({DATASET_COLUMNS}) VALUES (?, ?, ?, ?, '0', '0', ?, ?, ?, ?, ?)",
                    (
                        dataset_id,
                        budget,
                        float(total[0]),
                        float(total[1]),
                        created,
                        unit,
                        signed,
                        genesis,
                        self._sign(head_message(dataset_id, genesis, genesis, 0, "0", "0")),
                    ),
                )
                if signed:
                    self._keep_head(con, dataset_id, 0, genesis)
                return self.dataset(dataset_id, con)  # type: ignore[return-value]
        if (
            budget is not None
            and total is not None
            and (rec.budget != budget or rec.total != (Fraction(total[0]), Fraction(total[1])))
        ):
            raise LedgerError(
                f"dataset {dataset_id!r} already has a total budget of {describe(rec.budget, rec.total)} in "
                f"{self.path}; it cannot be reopened with {describe(budget, total)}"
            )
        if contributions is not None and contributions != rec.unit:
            raise LedgerError(
                f"dataset {dataset_id!r} has the privacy unit contributions={rec.unit} in {self.path}, fixed when "
                f"it was created; it cannot be reopened with contributions={contributions}"
            )
        if rec.signed and not self.signing:
            raise LedgerError(
                f"dataset {dataset_id!r} in {self.path} is signed: open it with its key (key=...) so that its "
                "signatures are checked and new releases signed"
            )
        return rec

    def next_release_id(self, con: sqlite3.Connection) -> int:
        """The id the next release will get (inside the open write transaction ``con``)."""
        row = con.execute(
            "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'releases'), 0), "
            "COALESCE((SELECT MAX(id) FROM releases), 0))"
        ).fetchone()
        return int(row[0]) + 1

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
        *,
        release_id: int | None = None,
        sketch: tuple[str, str, int, bytes] | None = None,
    ) -> int:
        """Append a release to ``rec``'s hash chain and add its loss to the spent budget, inside
        the open transaction ``con`` (where ``rec`` was read).

        :param release_id: the row id (default :meth:`next_release_id`)
        :param sketch: ``(map kind, fingerprint, num_features, file bytes)`` of a released sketch,
            stored and bound to the row by its SHA-256
        :raises PrivacyBudgetError: if the exact spent budget would exceed the total
        :raises LedgerError: if the dataset is signed and this connection has no key
        """
        if rec.signed and not self.signing:
            raise LedgerError(f"dataset {rec.dataset_id!r} is signed: releases need its key")
        # the row stores doubles: record the double at or above each exact loss, and add that same
        # double to the spent total, so the audit's sum of rows equals it and nothing is under-recorded
        loss = (_double_up(loss[0]), _double_up(loss[1]))
        spent = (rec.spent[0] + loss[0], rec.spent[1] + loss[1])
        if spent[0] > rec.total[0] or spent[1] > rec.total[1]:
            raise PrivacyBudgetError(
                f"dataset {rec.dataset_id!r}: a release of {describe(rec.budget, loss)} would exceed the "
                f"remaining budget {describe(rec.budget, rec.remaining)}; nothing was released"
            )
        rid = self.next_release_id(con) if release_id is None else int(release_id)
        seq = rec.releases + 1
        digest = None if sketch is None else hashlib.sha256(sketch[3]).hexdigest()
        content = (
            kind,
            _now(),
            str(d_in),
            float(loss[0]),
            float(loss[1]),
            summary,
            description,
            result,
            digest,
        )
        row_hash = _release_hash(rec.head, rec.dataset_id, seq, rid, content)
        con.execute(
            f"INSERT INTO releases (dataset_id, {RELEASE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.dataset_id, rid, seq, rec.head, row_hash, self._sign(release_message(row_hash)), *content),
        )
        if sketch is not None:
            con.execute("INSERT INTO sketches VALUES (?, ?, ?, ?, ?)", (rid, *sketch))
        sl, sd = str(spent[0]), str(spent[1])
        con.execute(
            "UPDATE datasets SET spent_loss = ?, spent_delta = ?, head = ?, mac = ? WHERE dataset_id = ?",
            (
                sl,
                sd,
                row_hash,
                self._sign(head_message(rec.dataset_id, rec.genesis, row_hash, seq, sl, sd)),
                rec.dataset_id,
            ),
        )
        if rec.signed:
            self._keep_head(con, rec.dataset_id, seq, row_hash)
        return rid

    # -- sketches and post-processing -----------------------------------------------------------
    def stored_sketch(self, dataset_id: str, release_id: int) -> tuple[bytes, str | None]:
        """The stored bytes of release ``release_id`` of ``dataset_id`` and the SHA-256 its chained
        release row records for them.

        :raises ValueError: if that release is not a stored sketch of this dataset
        """
        row = self._con.execute(
            "SELECT s.blob, r.sketch_sha256 FROM sketches s JOIN releases r ON r.id = s.release_id "
            "WHERE s.release_id = ? AND r.dataset_id = ?",
            (release_id, dataset_id),
        ).fetchone()
        if row is None:
            raise ValueError(f"release {release_id!r} is not a stored sketch of dataset {dataset_id!r}")
        return bytes(row[0]), row[1]

    def sketch_blob(self, dataset_id: str, release_id: int) -> bytes:
        """The stored bytes of release ``release_id`` of ``dataset_id`` (see :meth:`stored_sketch`)."""
        return self.stored_sketch(dataset_id, release_id)[0]

    def log_postprocessing(self, dataset_id: str, release_id: int, description: str) -> int:
        """Log an analysis of release ``release_id`` (free: no budget changes)."""
        with self.transaction() as con:
            if (
                con.execute(
                    "SELECT 1 FROM releases WHERE id = ? AND dataset_id = ?", (release_id, dataset_id)
                ).fetchone()
                is None
            ):
                raise ValueError(f"release {release_id!r} is not a release of dataset {dataset_id!r}")
            cur = con.execute(
                "INSERT INTO postprocessing (release_id, created, description) VALUES (?, ?, ?)",
                (release_id, _now(), description),
            )
            assert cur.lastrowid is not None  # an INSERT always sets it
            return int(cur.lastrowid)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query (for tables and reports)."""
        return self._con.execute(sql, params).fetchall()


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """An SQLite URI opening ``path`` read-only, every special character percent-encoded.

    >>> read_only_uri("/data/a#b%41?.db")
    'file:///data/a%23b%2541%3F.db?mode=ro'
    """
    return pathlib.Path(os.path.abspath(os.fspath(path))).as_uri() + "?mode=ro"


def verify_ledger(
    path: str | os.PathLike[str], *, key: bytes | str | None = None, witnesses: Any = ()
) -> dict[str, Any]:
    """Check a ledger file: SQLite integrity, and for every dataset its hash chain (no row edited,
    deleted, reordered or replayed; budget and unit as created), that the stored spent budget
    equals the exact sum of its chained releases and is within its total, that every stored
    sketch is the one its release row records, and with ``key`` every signature.

    Opens the file read-only (``mode=ro``), so it can run while other processes release.

    :param key: the curator's secret key; without it signatures are not checked (the chain is).
        With it, the ledger's signed heads are checked too: a dataset rolled back inside the file
        (an older copy of its record restored, later releases deleted) or deleted is reported.
    :param witnesses: sketches released from the ledger with a key (``Sketch`` objects or sketch
        files), or their ``privacy["ledger"]`` dicts: each records the release count and head
        hash its release was appended to, so a ledger rolled back *as a whole* (every file
        restored from an older copy) to before any of them is reported. Needs ``key``.
    :raises ValueError: if the file does not exist, for a bad key, or witnesses without a key
    :return: ``{"ok": bool, "integrity": str, "version": str, "problems": [str], "datasets": {id:
        {"budget", "unit", "releases", "spent", "total", "spent_matches", "within_budget",
        "sketches_missing", "signatures", "head", "problems"}}}``; ``spent`` is recomputed from
        the chain, and ``head`` (the last row's hash) can be kept elsewhere to detect a rollback
        of the whole file
    :example:

    >>> import os, tempfile, numpy as np, opendp.prelude as dp, opendp_sketch as dps
    >>> dp.enable_features("contrib", "honest-but-curious")
    >>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
    >>> s = dps.Session.open(path, "survey", epsilon=1.0)
    >>> X = np.random.default_rng(0).uniform(0, 1, size=(200, 1))
    >>> _ = s.release_sketch(X, dps.Histogram(bounds=(0, 1), bins=4, dim=1), (0, 1), epsilon=0.5)
    >>> report = dps.verify_ledger(path)
    >>> report["ok"], report["datasets"]["survey"]["releases"], report["datasets"]["survey"]["spent_matches"]
    (True, 1, True)
    """
    secret = None if key is None else check_key(key)
    if not os.path.isfile(path):
        raise ValueError(f"ledger file ({os.fspath(path)!r}) does not exist")
    con = sqlite3.connect(read_only_uri(path), uri=True, timeout=DEFAULT_TIMEOUT)
    try:
        con.execute("BEGIN")  # one snapshot for every read below
        integrity = con.execute("PRAGMA integrity_check").fetchone()[0]
        version = dict(con.execute("SELECT key, value FROM meta")).get("version")
        out: dict[str, Any] = {"integrity": integrity, "version": version, "datasets": {}, "problems": []}
        if version != VERSION:
            out["problems"].append(
                f"ledger version {version!r} has no hash chain to verify: open it once with Session.open to "
                f"upgrade it to version {VERSION}"
            )
        else:
            names = [
                r[0] for r in con.execute("SELECT dataset_id FROM datasets ORDER BY dataset_id").fetchall()
            ]
            for ds in names:
                out["datasets"][ds] = _verify_dataset(con, ds, secret)
                out["problems"] += out["datasets"][ds]["problems"]
            if secret is not None:
                heads, trouble = read_heads(con, secret)
                out["problems"] += trouble
                if heads is None:
                    out["problems"].append(
                        "the ledger's signed heads are missing: the meta table was modified"
                    )
                for ds in sorted(set(heads or {}) - set(names)):
                    out["problems"].append(
                        f"dataset {ds!r} is in the ledger's signed heads ({(heads or {})[ds][0]} release(s)) but "
                        "its record is gone: it was deleted"
                    )
            out["problems"] += check_witnesses(con, witnesses, secret)
        out["ok"] = integrity == "ok" and not out["problems"]
        return out
    finally:
        con.close()


def _verify_dataset(con: sqlite3.Connection, ds: str, key: bytes | None) -> dict[str, Any]:
    """:func:`verify_ledger`'s report on one dataset."""
    record, problems, _ = _audit(con, ds, key)
    if record is None:
        return {"problems": problems}
    stored = con.execute(
        "SELECT spent_loss, spent_delta FROM datasets WHERE dataset_id = ?", (ds,)
    ).fetchone()
    sketches = con.execute(
        "SELECT r.id, r.sketch_sha256, s.blob FROM releases r LEFT JOIN sketches s ON s.release_id = r.id "
        "WHERE r.dataset_id = ? AND r.kind = 'sketch' ORDER BY r.id",
        (ds,),
    ).fetchall()
    missing = 0
    for rid, digest, blob in sketches:
        if blob is None:
            missing += 1
            problems.append(f"dataset {ds!r}, release row id {rid}: its sketch is missing from the store")
        elif hashlib.sha256(blob).hexdigest() != digest:
            problems.append(
                f"dataset {ds!r}, release row id {rid}: the stored sketch is not the one released"
            )
    try:
        spent_matches = (Fraction(stored[0]), Fraction(stored[1])) == record.spent
    except (TypeError, ValueError, ZeroDivisionError):
        spent_matches = False
    if not record.signed:
        signatures = "unsigned"
    elif key is None:
        signatures = "not checked (no key)"
    else:
        signatures = "invalid" if any("signature" in p for p in problems) else "valid"
    return {
        "budget": record.budget,
        "unit": record.unit,
        "releases": record.releases,
        "spent": (float_up(record.spent[0]), float_up(record.spent[1])),
        "total": (float(record.total[0]), float(record.total[1])),
        "spent_matches": spent_matches,
        "within_budget": record.spent[0] <= record.total[0] and record.spent[1] <= record.total[1],
        "sketches_missing": missing,
        "signatures": signatures,
        "head": record.head,
        "problems": problems,
    }


def _double_up(x: Any) -> Fraction:
    """The least double at or above ``x``, exactly.

    >>> _double_up(Fraction(1, 3)) > Fraction(1, 3), float(_double_up(Fraction(1, 10))) == 0.1
    (True, True)
    """
    f = float(x)
    if Fraction(f) < Fraction(x):
        f = math.nextafter(f, math.inf)
    return Fraction(f)
