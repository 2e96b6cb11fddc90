"""Ledger witnesses held against a ledger file: evidence of a rollback of the whole file.

With a curator's key each released sketch carries a signed witness (made by
:meth:`~opendp_sketch.ledger.Ledger.witness`): its dataset, the release count and head hash of
the chain its release was appended to, and a random nonce. :func:`check_witnesses` finds each
such release in the chain again, so a ledger restored from an older copy is reported.
"""

from __future__ import annotations

import io
import os
import sqlite3
from typing import Any

from .ledger_format import witness_message
from .signing import signature_matches


def _witness_of(item: Any) -> Any:
    """A witness dict from a ``Sketch``, a sketch file or the dict itself."""
    if isinstance(item, dict):
        return item
    if isinstance(item, (str, os.PathLike)):
        from .sketch import Sketch

        item = Sketch.load(item)
    privacy = getattr(item, "privacy", None)
    return privacy.get("ledger") if isinstance(privacy, dict) else None


def _stored_nonce(blob: Any) -> str | None:
    """The witness nonce inside a stored sketch's bytes (``None`` if it has none)."""
    if blob is None:
        return None
    try:
        from .sketch import Sketch

        found = Sketch.load(io.BytesIO(bytes(blob))).privacy.get("ledger")  # type: ignore[arg-type]
        return str(found["nonce"]) if isinstance(found, dict) else None
    except Exception:  # noqa: BLE001 - unreadable bytes hold no nonce (verify reports them)
        return None


def check_witnesses(con: sqlite3.Connection, witnesses: Any, key: bytes | None) -> list[str]:
    """Problems shown by released sketches' ledger witnesses: each must be signed with ``key``,
    and its release must be in the chain (the row after ``after`` releases follows ``head``)."""
    items = list(witnesses or ())
    if items and key is None:
        raise ValueError("witnesses are signed: give the key (key=...) to check them")
    problems = []
    for n, item in enumerate(items, 1):
        w = _witness_of(item)
        label = f"witness {n}"
        try:
            ds, after, head, nonce = str(w["dataset"]), int(w["after"]), str(w["head"]), str(w["nonce"])
            mac = w.get("mac")
        except (TypeError, KeyError, ValueError):
            problems.append(
                f"{label}: not a ledger witness (a sketch released by a signed Session carries one)"
            )
            continue
        if key is None or not signature_matches(key, witness_message(ds, after, head, nonce), mac):
            problems.append(f"{label}: its signature does not match the key")
            continue
        row = con.execute(
            "SELECT r.prev_hash, s.blob FROM releases r LEFT JOIN sketches s ON s.release_id = r.id "
            "WHERE r.dataset_id = ? AND r.seq = ?",
            (ds, after + 1),
        ).fetchone()
        if row is not None and _stored_nonce(row[1]) != nonce:
            row = (None, None)  # another release at that place
        if row is None:
            problems.append(
                f"{label}: dataset {ds!r} released this sketch as its release {after + 1}, but the ledger no longer "
                "holds that release: the ledger was rolled back (restored from an older copy) or the dataset deleted"
            )
        elif row[0] != head:
            problems.append(
                f"{label}: dataset {ds!r} released this sketch as its release {after + 1}, but the chain there "
                "follows another history: the ledger was rolled back and released from again"
            )
    return problems
