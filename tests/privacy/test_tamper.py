"""Tamper evidence: a ledger or a sketch file altered behind the curator's back is detected.

Each test alters a file with plain SQLite or numpy (what anyone with write access can do) and
checks that ``verify_ledger`` reports the problem, naming the row, and that ``Session.open``
refuses the ledger with a ``LedgerError`` (nothing more can be released from it). Signatures
(HMAC-SHA256 under the curator's key) also catch an attacker who recomputes every hash.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import sqlite3

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.cli import main
from opendp_sketch.ledger import LedgerError, verify_ledger
from opendp_sketch.session import Session
from opendp_sketch.sketch import SketchFormatError, SketchSignatureError, _digest

KEY = b"curator secret key, 32 bytes...!"
SPACE = (dp.vector_domain(dp.atom_domain(bounds=(0.0, 10.0), nan=False)), dp.symmetric_distance())


def fixed_loss(loss: float) -> dp.Measurement:
    return dp.m.make_user_measurement(*SPACE, dp.max_divergence(), lambda x: 0.0, lambda d_in: loss * d_in)


@pytest.fixture
def ledger(tmp_path):
    """A ledger with dataset ``ds`` (ε = 1): releases of ε 0.1, 0.2, 0.3 and one stored sketch."""
    path = tmp_path / "ledger.db"
    with Session.open(path, "ds", epsilon=1.0) as s:
        for loss in (0.1, 0.2, 0.3):
            s.release(fixed_loss(loss), [1.0])
        s.release_sketch(
            np.full((50, 2), 0.5), dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=2), (0.0, 1.0), epsilon=0.1
        )
    assert verify_ledger(path)["ok"]
    return path


def sql(path, statement, params=()):
    with sqlite3.connect(path) as con:
        return con.execute(statement, params).fetchall()


def refused(path, match, **open_kwargs):
    """``verify_ledger`` reports ``match`` and ``Session.open`` refuses with it."""
    key = open_kwargs.get("key")
    report = verify_ledger(path, key=key)
    assert not report["ok"]
    assert any(__import__("re").search(match, p) for p in report["problems"]), report["problems"]
    with pytest.raises(LedgerError, match=match):
        Session.open(path, "ds", **open_kwargs)
    return report


# -- rows -------------------------------------------------------------------------------------------


def test_an_edited_row_is_detected(ledger):
    sql(ledger, "UPDATE releases SET loss = 0.001 WHERE id = 2")
    refused(ledger, r"release row id 2 \(seq 2\): its contents do not match its hash: the row was modified")


def test_an_edited_description_is_detected(ledger):
    sql(ledger, "UPDATE releases SET description = 'nothing to see' WHERE id = 1")
    refused(ledger, r"release row id 1 .*the row was modified")


def test_a_deleted_row_is_detected(ledger):
    sql(ledger, "DELETE FROM releases WHERE id = 2")
    refused(ledger, r"release row id 3 \(seq 3\): found at position 2 of the chain: rows were deleted")


def test_a_deleted_last_row_is_detected(ledger):
    sql(ledger, "DELETE FROM sketches")
    sql(ledger, "DELETE FROM releases WHERE id = 4")
    refused(ledger, r"head hash does not match the end of its chain: the last release\(s\) were deleted")


def test_reordered_rows_are_detected(ledger):
    sql(ledger, "UPDATE releases SET id = 100 WHERE id = 1")
    sql(ledger, "UPDATE releases SET id = 1 WHERE id = 2")
    sql(ledger, "UPDATE releases SET id = 2 WHERE id = 100")
    refused(
        ledger,
        r"release row id 1 \(seq 2\): found at position 1 of the chain: rows were deleted or reordered",
    )


def test_a_replayed_row_is_detected(ledger):
    columns = "dataset_id, kind, created, d_in, loss, delta, summary, description, result, seq, prev_hash, hash, mac"
    sql(ledger, f"INSERT INTO releases ({columns}) SELECT {columns} FROM releases WHERE id = 2")
    refused(ledger, r"repeats seq 2: a replayed \(duplicated\) row")


def test_edited_stored_totals_are_detected_and_never_trusted(ledger):
    sql(ledger, "UPDATE datasets SET spent_loss = '-100'")
    report = refused(ledger, r"the stored spent budget \(-100, 0\) is not the sum of its chained releases")
    # the reported spent budget is recomputed from the chain, not read from the edited cache
    assert report["datasets"]["ds"]["spent"][0] == pytest.approx(0.7, abs=0.01)
    assert not report["datasets"]["ds"]["spent_matches"]


def test_an_edited_total_budget_or_unit_is_detected(ledger):
    sql(ledger, "UPDATE datasets SET total_loss = 50")
    refused(ledger, r"the dataset record \(budget, unit or creation\) was modified")
    sql(ledger, "UPDATE datasets SET total_loss = 1, unit = 3")
    refused(ledger, r"the dataset record \(budget, unit or creation\) was modified")


def test_a_replaced_stored_sketch_is_detected(ledger, tmp_path):
    (rid,) = sql(ledger, "SELECT release_id FROM sketches")[0]
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=2)
    forged = dps.Sketch(fm, np.array([50, 0, 50, 0]), 50, privacy={"epsilon": 0.1, "release_id": rid})
    forged.save(tmp_path / "forged.sketch")  # a valid file with a correct SHA-256: only the chain can tell
    blob = (tmp_path / "forged.sketch").read_bytes()
    sql(ledger, "UPDATE sketches SET blob = ? WHERE release_id = ?", (blob, rid))
    report = verify_ledger(ledger)
    assert not report["ok"] and "the stored sketch is not the one released" in report["problems"][0]
    with (
        Session.open(ledger, "ds") as s,
        pytest.raises(SketchFormatError, match="not those its release row records"),
    ):
        s.load_sketch(rid)


# -- keys -----------------------------------------------------------------------------------------


@pytest.fixture
def signed(tmp_path):
    path = tmp_path / "signed.db"
    with Session.open(path, "ds", epsilon=1.0, key=KEY) as s:
        s.release(fixed_loss(0.1), [1.0])
        s.release(fixed_loss(0.2), [1.0])
    report = verify_ledger(path, key=KEY)
    assert report["ok"] and report["datasets"]["ds"]["signatures"] == "valid"
    return path


def rewrite_chain(path):
    """What an attacker without the key can do: edit a loss and recompute every hash."""
    from opendp_sketch import ledger as lg

    sql(path, "UPDATE releases SET loss = 0.01 WHERE id = 1")
    with sqlite3.connect(path) as con:
        ds, budget, tl, td, created, unit, signed = con.execute(
            "SELECT dataset_id, budget, total_loss, total_delta, created, unit, signed FROM datasets"
        ).fetchone()
        prev = lg._genesis(ds, budget, tl, td, unit, signed, created)
        total = 0
        for rid, seq, *content in con.execute(
            "SELECT id, seq, kind, created, d_in, loss, delta, summary, description, result, sketch_sha256 "
            "FROM releases ORDER BY id"
        ).fetchall():
            row_hash = lg._release_hash(prev, ds, seq, rid, tuple(content))
            con.execute("UPDATE releases SET prev_hash = ?, hash = ? WHERE id = ?", (prev, row_hash, rid))
            prev, total = row_hash, total + __import__("fractions").Fraction(content[3])
        con.execute("UPDATE datasets SET head = ?, spent_loss = ?", (prev, str(total)))


def test_without_a_key_a_rewritten_chain_passes_and_a_key_catches_it(tmp_path, signed):
    plain = tmp_path / "plain.db"
    with Session.open(plain, "ds", epsilon=1.0) as s:
        s.release(fixed_loss(0.1), [1.0])
    rewrite_chain(plain)
    assert verify_ledger(plain)["ok"]  # documented limit: no key, no authenticity
    rewrite_chain(signed)
    assert verify_ledger(signed)["ok"]  # the chain alone is consistent again
    report = refused(
        signed, r"release row id 1 \(seq 1\): its signature is missing or does not match", key=KEY
    )
    assert report["datasets"]["ds"]["signatures"] == "invalid"


def test_wrong_key_is_refused(signed):
    other = secrets.token_bytes(32)
    refused(signed, r"its signature is missing or does not match the key", key=other)


def test_a_signed_dataset_needs_its_key(signed):
    with pytest.raises(LedgerError, match="'ds' in .* is signed: open it with its key"):
        Session.open(signed, "ds")
    report = verify_ledger(signed)  # the chain is still checked without the key
    assert report["ok"] and report["datasets"]["ds"]["signatures"] == "not checked (no key)"


def test_an_unsigned_dataset_opened_with_a_key_is_refused(ledger):
    refused(ledger, r"was created without a key: it has no signatures to check", key=KEY)


def test_stripped_signatures_are_refused(signed):
    sql(signed, "UPDATE releases SET mac = NULL WHERE id = 2")
    refused(signed, r"release row id 2 \(seq 2\): its signature is missing", key=KEY)


def test_a_signed_session_signs_its_stored_sketches(tmp_path):
    path = tmp_path / "l.db"
    with Session.open(path, "ds", epsilon=1.0, key=KEY) as s:
        sk = s.release_sketch(
            np.full((50, 2), 0.5), dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=2), (0.0, 1.0), epsilon=0.5
        )
        rid = sk.privacy["release_id"]
        assert s.load_sketch(rid).count == sk.count
    (blob,) = sql(path, "SELECT blob FROM sketches")[0]
    assert dps.Sketch.load(io.BytesIO(blob), key=KEY).count == sk.count  # exportable, verifiable file
    with pytest.raises(SketchSignatureError):
        dps.Sketch.load(io.BytesIO(blob), key=secrets.token_bytes(32))


def test_bad_keys_are_refused_without_showing_them(tmp_path):
    for bad, match in ((b"short", "at least 16 bytes"), (12345, "bytes or str")):
        with pytest.raises(ValueError, match=match) as err:
            Session.open(tmp_path / "l.db", "ds", epsilon=1.0, key=bad)
        assert "short'" not in str(err.value)


# -- sketch files -------------------------------------------------------------------------------------


@pytest.fixture
def sketch_file(tmp_path):
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=4, dim=2)
    sk = dps.Sketch(fm, np.arange(8), 100, privacy={"measure": "MaxDivergence", "d_in": 1, "epsilon": 1.0})
    path = tmp_path / "signed.sketch"
    sk.save(path, key=KEY)
    return path, sk


def forge_header(path, change):
    """Edit the header and recompute its SHA-256 (anyone can)."""
    with np.load(path, allow_pickle=False) as z:
        meta, sums = json.loads(z["meta"].tobytes()), z["sum_units"]
    change(meta)
    meta["sha256"] = _digest(meta, sums)
    with open(path, "wb") as f:  # a file object: numpy would append .npz to the name
        np.savez_compressed(f, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), sum_units=sums)


def test_a_forged_header_is_caught_only_with_the_key(sketch_file):
    path, sk = sketch_file
    forge_header(path, lambda meta: meta["privacy"].update(epsilon=0.01))
    assert dps.Sketch.load(path).privacy["epsilon"] == 0.01  # checksum recomputed: no key, no defence
    with pytest.raises(SketchSignatureError, match="the signature does not match the key"):
        dps.Sketch.load(path, key=KEY)


def test_sketch_wrong_and_missing_key(sketch_file, tmp_path):
    path, sk = sketch_file
    assert dps.Sketch.load(path, key=KEY).privacy == sk.privacy
    with pytest.raises(SketchSignatureError, match="signed with another key, or modified"):
        dps.Sketch.load(path, key=secrets.token_bytes(32))
    unsigned = tmp_path / "unsigned.sketch"
    sk.save(unsigned)
    with pytest.raises(SketchSignatureError, match="the file is not signed"):
        dps.Sketch.load(unsigned, key=KEY)
    forge_header(path, lambda meta: meta.pop("hmac_sha256"))  # stripping the signature
    with pytest.raises(SketchSignatureError, match="the file is not signed"):
        dps.Sketch.load(path, key=KEY)


def test_cli_inspect_checks_a_key_file(sketch_file, tmp_path, capsys):
    path, _ = sketch_file
    (tmp_path / "key").write_bytes(KEY)
    assert main(["inspect", str(path), "--key-file", str(tmp_path / "key")]) == 0
    assert json.loads(capsys.readouterr().out)["signature"].startswith("valid")
    (tmp_path / "other").write_bytes(hashlib.sha256(b"x").digest())
    assert main(["inspect", str(path), "--key-file", str(tmp_path / "other")]) == 2
    assert "does not match the key" in capsys.readouterr().err


# -- during a session ---------------------------------------------------------------------------------


def test_a_session_checks_only_new_rows_and_never_trusts_edits_made_under_it(ledger, monkeypatch):
    from opendp_sketch import ledger as lg

    hashed = []
    real = lg._release_hash
    monkeypatch.setattr(lg, "_release_hash", lambda *a: hashed.append(a[3]) or real(*a))
    with Session.open(ledger, "ds") as s:
        assert sorted(hashed) == [1, 2, 3, 4]  # open: the whole chain
        hashed.clear()
        spent = s.spent
        s.release(fixed_loss(0.01), [1.0])
        assert hashed == [5]  # the new row only (hashed when appended; earlier rows are checkpointed)
        sql(ledger, "UPDATE releases SET loss = 0.0 WHERE id = 1")  # edited behind the session's back
        assert s.spent == pytest.approx(spent + 0.01)  # from the rows it checked, not the edited one
    with pytest.raises(LedgerError, match=r"release row id 1 \(seq 1\): its contents do not match"):
        Session.open(ledger, "ds")


def test_a_session_notices_rows_deleted_under_it(ledger):
    with Session.open(ledger, "ds") as s:
        sql(ledger, "DELETE FROM postprocessing")
        sql(ledger, "DELETE FROM sketches")
        sql(ledger, "DELETE FROM releases WHERE id = 4")
        with pytest.raises(
            LedgerError, match=r"rows checked earlier \(ids up to 4\) were deleted or changed since"
        ):
            s.release(fixed_loss(0.01), [1.0])
