"""The ledger file's format: its tables, the exact loss records, and the hash chain's encoding.

A dataset's chain starts from a hash of its record (:func:`genesis_hash`: budget, unit, signing
mode) and each release row is hashed after the previous one (:func:`release_hash`); with a
curator's key the rows, the dataset record, the ledger's signed heads and each released sketch's
witness are signed over the messages built here. Every record is one canonical byte string (JSON
of a flat list, floats as exact hex) under a tag naming the encoding. The connection that writes
and audits these rows is :class:`~opendp_sketch.ledger.Ledger`.
"""

from __future__ import annotations

import decimal
import hashlib
import json
import math
import sqlite3
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .signing import signature_matches

#: the meta table's ``format`` and ``version`` of a ledger file
FORMAT = "opendp_sketch.ledger"
VERSION = "3"
#: the meta row holding every signed dataset's release count and head hash, signed (version 3)
HEADS = "signed_heads"
#: first element of every hashed record: a new encoding gets a new tag
_CHAIN_TAG = "opendp_sketch.ledger/2"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id TEXT PRIMARY KEY,
    budget TEXT NOT NULL CHECK (budget IN ('epsilon', 'epsilon_delta', 'rho')),
    total_loss REAL NOT NULL CHECK (total_loss > 0),
    total_delta REAL NOT NULL CHECK (total_delta >= 0 AND total_delta < 1),
    spent_loss TEXT NOT NULL,
    spent_delta TEXT NOT NULL,
    created TEXT NOT NULL,
    unit INTEGER NOT NULL DEFAULT 1 CHECK (unit >= 1),
    signed INTEGER NOT NULL DEFAULT 0,
    head TEXT NOT NULL DEFAULT '',
    mac TEXT
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
    result TEXT,
    seq INTEGER,
    prev_hash TEXT,
    hash TEXT,
    mac TEXT,
    sketch_sha256 TEXT
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

#: columns a version-1 ledger lacks, in the order of the schema above
V2_COLUMNS = {
    "datasets": [
        "unit INTEGER NOT NULL DEFAULT 1 CHECK (unit >= 1)",
        "signed INTEGER NOT NULL DEFAULT 0",
        "head TEXT NOT NULL DEFAULT ''",
        "mac TEXT",
    ],
    "releases": ["seq INTEGER", "prev_hash TEXT", "hash TEXT", "mac TEXT", "sketch_sha256 TEXT"],
}
#: the columns a dataset row and a release row are read and written in
DATASET_COLUMNS = (
    "dataset_id, budget, total_loss, total_delta, spent_loss, spent_delta, created, unit, signed, head, mac"
)
RELEASE_COLUMNS = "id, seq, prev_hash, hash, mac, kind, created, d_in, loss, delta, summary, description, result, sketch_sha256"

#: a loss as exact fractions: ``(ε or ρ, δ)``; δ is 0 unless the budget is (ε, δ)
Loss = tuple[Fraction, Fraction]


def float_down(q: Fraction) -> float:
    """The largest double ``≤ q`` (never reports more budget left than there is)."""
    f = float(q)
    return math.nextafter(f, -math.inf) if Fraction(f) > q else f


def float_up(q: Fraction) -> float:
    """The smallest double ``≥ q`` (never reports less budget spent than there was)."""
    f = float(q)
    return math.nextafter(f, math.inf) if Fraction(f) < q else f


# -- the hash chain ------------------------------------------------------------------------------
def _canonical(values: list[Any]) -> bytes:
    """One byte string per record: JSON of a flat list, floats written exactly as hex."""
    return json.dumps(values, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()


def _hex(x: Any) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{x!r} is not a number")
    return float(x).hex()


def genesis_hash(
    ds: str, budget: str, total_loss: Any, total_delta: Any, unit: Any, signed: Any, created: str
) -> str:
    """The hash a dataset's chain starts from: it binds the budget, the unit and the signing mode."""
    record = [_CHAIN_TAG, "dataset", ds, budget, _hex(total_loss), _hex(total_delta), unit, signed, created]
    return hashlib.sha256(_canonical(record)).hexdigest()


def release_hash(prev: str, ds: str, seq: int, rid: int, row: tuple[Any, ...]) -> str:
    """SHA-256 of a release row (``kind, created, d_in, loss, delta, summary, description, result,
    sketch_sha256``) after the previous row's hash."""
    kind, created, d_in, loss, delta, summary, description, result, sketch_sha = row
    record = [_CHAIN_TAG, "release", prev, ds, seq, rid, kind, created, d_in, _hex(loss), _hex(delta)]
    record += [summary, description, result, sketch_sha]
    return hashlib.sha256(_canonical(record)).hexdigest()


def head_message(
    ds: str, genesis: str, head: str, count: int, spent_loss: str, spent_delta: str, version: str = VERSION
) -> bytes:
    """What a dataset row's signature covers: its chain's start and end, length and spent cache.
    Version 3 signs a different tag: a version-3 record kept in the ledger's signed heads cannot
    pass for a version-2 one (which had none), so the heads cannot be dropped by a downgrade."""
    kind = "head" if version == "2" else "head/3"
    return _canonical([_CHAIN_TAG, kind, ds, genesis, head, count, spent_loss, spent_delta])


def heads_message(heads: dict[str, list[Any]]) -> bytes:
    """What the ledger's signed heads cover: every signed dataset's ``[release count, head hash]``."""
    return _canonical([_CHAIN_TAG, "heads", sorted([ds, int(c), str(h)] for ds, (c, h) in heads.items())])


def witness_message(ds: str, after: int, head: str, nonce: str) -> bytes:
    """What a released sketch's ledger witness covers: its dataset, the release count and head
    hash of the chain it was appended to, and a random nonce (kept in the stored sketch too, so
    another release appended at the same place after a rollback is told apart)."""
    return _canonical([_CHAIN_TAG, "witness", ds, int(after), str(head), str(nonce)])


def read_heads(con: sqlite3.Connection, key: bytes | None) -> tuple[dict[str, list[Any]] | None, list[str]]:
    """The ledger's signed heads (``None`` if the row is absent) and, with ``key``, any problem
    with their signature."""
    row = con.execute("SELECT value FROM meta WHERE key = ?", (HEADS,)).fetchone()
    if row is None:
        return None, []
    try:
        stored = json.loads(row[0])
        heads = {str(k): [int(v[0]), str(v[1])] for k, v in stored["heads"].items()}
        mac = stored.get("mac")
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return {}, ["the ledger's signed heads are not valid: the meta table was modified"]
    if key is not None and heads and not signature_matches(key, heads_message(heads), mac):
        return heads, ["the ledger's signed heads do not match the key: the meta table was modified"]
    return heads, []


def release_message(row_hash: str) -> bytes:
    return _canonical([_CHAIN_TAG, "release-signature", row_hash])


def unit_of(d_in: str) -> int | None:
    """The integer privacy unit a recorded ``d_in`` stands for (``None`` if it is not one)."""
    try:
        value = float(d_in)
    except (TypeError, ValueError):
        return None
    return int(value) if value.is_integer() and value >= 1 else None


@dataclass(frozen=True)
class DatasetRecord:
    """A dataset's budget kind, total, privacy unit and spent budget (exact, from its hash chain)."""

    dataset_id: str
    budget: str
    total: Loss
    spent: Loss
    unit: int = 1
    signed: bool = False
    head: str = ""
    releases: int = 0
    genesis: str = ""

    @property
    def remaining(self) -> Loss:
        return (self.total[0] - self.spent[0], self.total[1] - self.spent[1])


#: where an earlier audit stopped: the id of the last row it checked and the record it computed
Checkpoint = tuple[int, "DatasetRecord"]


def describe(budget: str, loss: Any) -> str:
    """``ε = 0.5``, ``(ε, δ) = (0.5, 1e-06)`` or ``ρ = 0.1``; never shown below the loss (six
    significant digits, rounded up).

    >>> describe("epsilon", (Fraction(1, 3), 0)), describe("epsilon", (0.5, 0))
    ('ε = 0.333334', 'ε = 0.5')
    """

    def up(v: Any) -> str:
        if isinstance(v, float) and not math.isfinite(v):
            return f"{v:g}"
        exact = Fraction(v)
        ceiling = decimal.Context(prec=6, rounding=decimal.ROUND_CEILING)
        shown = ceiling.divide(decimal.Decimal(exact.numerator), decimal.Decimal(exact.denominator))
        return f"{float(shown):g}"  # six digits: the double nearest them prints them back

    if budget == "epsilon":
        return f"ε = {up(loss[0])}"
    if budget == "rho":
        return f"ρ = {up(loss[0])}"
    return f"(ε, δ) = ({up(loss[0])}, {up(loss[1])})"
