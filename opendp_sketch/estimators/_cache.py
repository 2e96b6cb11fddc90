"""A persistent cache of fitted decoders, so one sketch is decoded once.

Decoding is post-processing of a released sketch (it costs no budget) but takes seconds; every
``M2M(sk)``, CLI ``query`` and ``plot`` of the same file would otherwise refit it. The fitted points
and weights are stored in one SQLite file, keyed by the SHA-256 of the sketch (its header and
sums) and of every decoder parameter, so a changed sketch, option or package version is a new
entry. Arrays are stored as ``.npz`` bytes (numpy, ``allow_pickle=False``), never pickled.

Where: the directory ``$OPENDP_SKETCH_CACHE``, else ``$XDG_CACHE_HOME/opendp_sketch``, else
``~/.cache/opendp_sketch``; ``OPENDP_SKETCH_CACHE=off`` turns it off. At most
:data:`MAX_BYTES` are kept (the least recently used entries go first).

The cache runs inside post-processors that may be chained into measurements, so it never raises
or warns: any failure (a read-only directory, a corrupted file, a full disk) is a cache miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cache_dir", "decoder_key", "lookup", "store", "MAX_BYTES"]

#: the most bytes of fitted decoders kept (least recently used first out)
MAX_BYTES = 512 * 2**20
#: a new layout of what is stored gets a new tag (old entries are then never read)
_TAG = "opendp_sketch.decoder-cache/1"


def cache_dir() -> Path | None:
    """The cache's directory, or ``None`` when ``OPENDP_SKETCH_CACHE=off``."""
    given = os.environ.get("OPENDP_SKETCH_CACHE")
    if given is not None:
        return None if given.strip().lower() in ("off", "0", "false", "") else Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opendp_sketch"


def decoder_key(sketch: Any, params: dict[str, Any]) -> str:
    """SHA-256 of the sketch (header and sums) and the decoder's parameters."""
    h = hashlib.sha256()
    h.update(json.dumps([_TAG, _version(), params], sort_keys=True, default=_plain).encode())
    h.update(json.dumps(sketch.to_dict(), sort_keys=True, default=_plain).encode())
    h.update(np.ascontiguousarray(sketch.sum_units, dtype="<i8").tobytes())
    return h.hexdigest()


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("opendp-sketch")
    except Exception:  # noqa: BLE001 - not installed as a distribution: the tag alone
        return "unknown"


def _plain(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    return str(x)


@contextlib.contextmanager
def _connect() -> Any:
    folder = cache_dir()
    if folder is None:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(folder / "decoders.sqlite", timeout=5.0)
    try:
        con.execute(
            "CREATE TABLE IF NOT EXISTS decoders (key TEXT PRIMARY KEY, arrays BLOB NOT NULL, "
            "meta TEXT NOT NULL, size INTEGER NOT NULL, used REAL NOT NULL)"
        )
        yield con
        con.commit()
    finally:
        con.close()


def lookup(key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The arrays and metadata stored under ``key``, or ``None`` (a miss, or any failure)."""
    try:
        with _connect() as con:
            if con is None:
                return None
            row = con.execute("SELECT arrays, meta FROM decoders WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            con.execute("UPDATE decoders SET used = ? WHERE key = ?", (time.time(), key))
            with np.load(io.BytesIO(row[0]), allow_pickle=False) as z:
                arrays = {name: z[name] for name in z.files}
            return arrays, json.loads(row[1])
    except Exception:  # noqa: BLE001 - a cache failure is a miss, never an error
        return None


def store(key: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Keep ``arrays`` and ``meta`` under ``key`` (evicting the least recently used entries
    beyond :data:`MAX_BYTES`); any failure is ignored."""
    try:
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]  # names are array entries
        blob = buffer.getvalue()
        if len(blob) > MAX_BYTES:
            return
        with _connect() as con:
            if con is None:
                return
            con.execute(
                "INSERT OR REPLACE INTO decoders VALUES (?, ?, ?, ?, ?)",
                (key, blob, json.dumps(meta), len(blob), time.time()),
            )
            total = con.execute("SELECT COALESCE(SUM(size), 0) FROM decoders").fetchone()[0]
            while total > MAX_BYTES:
                old = con.execute("SELECT key, size FROM decoders ORDER BY used LIMIT 1").fetchone()
                if old is None or old[0] == key:
                    break
                con.execute("DELETE FROM decoders WHERE key = ?", (old[0],))
                total -= old[1]
    except Exception:  # noqa: BLE001 - a cache failure leaves nothing behind but a miss
        return
