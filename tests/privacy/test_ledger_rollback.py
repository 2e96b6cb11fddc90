"""A rolled-back signed ledger leaves evidence (issue 37, item 5).

The audit's two attacks, with plain SQLite (what anyone with write access can do), on a ledger
whose dataset was created with the curator's key:

* restore an older copy of the dataset's row and delete the later releases: every row and its
  signature are genuine, just old (the remaining budget went from 0.10 back to 0.70);
* delete the dataset's rows: ``Session.open(..., epsilon=1, key=key)`` used to create it again
  at full budget.

Both are caught by the ledger's signed heads (every signed dataset's release count and head
hash, signed, in the same file). A rollback of the *whole* file to an older copy is caught only
against something kept elsewhere: a sketch released after that copy (its signed witness).
"""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import opendp.prelude as dp
import pytest

import opendp_sketch as dps
from opendp_sketch.ledger import LedgerError, verify_ledger
from opendp_sketch.session import Session

KEY = b"curator secret key, 32 bytes...!"
SPACE = (dp.vector_domain(dp.atom_domain(bounds=(0.0, 10.0), nan=False)), dp.symmetric_distance())
X = np.full((50, 2), 0.5)
FM = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=2)


def fixed_loss(loss: float) -> dp.Measurement:
    return dp.m.make_user_measurement(*SPACE, dp.max_divergence(), lambda x: 0.0, lambda d_in: loss * d_in)


def sql(path, statement, params=()):
    with sqlite3.connect(path) as con:
        return con.execute(statement, params).fetchall()


@pytest.fixture
def signed(tmp_path):
    """Dataset ``ds`` (ε = 1, signed): one release of 0.3; the row as it was then; two more
    releases (0.3, then a sketch of 0.3). Remaining: 0.1."""
    path = tmp_path / "ledger.db"
    with Session.open(path, "ds", epsilon=1.0, key=KEY) as s:
        s.release(fixed_loss(0.3), [1.0])
        old_row = sql(path, "SELECT * FROM datasets WHERE dataset_id = 'ds'")[0]
        s.release(fixed_loss(0.3), [1.0])
        sketch = s.release_sketch(X, FM, (0.0, 1.0), epsilon=0.3)
        assert abs(s.remaining - 0.1) < 1e-9
    assert verify_ledger(path, key=KEY)["ok"]
    return path, old_row, sketch


def test_an_older_copy_of_a_dataset_row_with_later_releases_deleted_is_caught(signed):
    path, old_row, _ = signed
    sql(path, "DELETE FROM sketches")
    sql(path, "DELETE FROM releases WHERE seq > 1")
    columns = [r[1] for r in sql(path, "PRAGMA table_info(datasets)")]
    sql(path, "DELETE FROM datasets WHERE dataset_id = 'ds'")
    sql(
        path, f"INSERT INTO datasets ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", old_row
    )
    assert verify_ledger(path)["ok"]  # without the key: every row is genuine, the chain consistent
    report = verify_ledger(path, key=KEY)
    assert not report["ok"]
    assert any("rolled back" in p for p in report["problems"]), report["problems"]
    with pytest.raises(LedgerError, match="rolled back"):
        Session.open(path, "ds", key=KEY)


def test_a_deleted_dataset_is_not_created_again_at_full_budget(signed):
    path, _, _ = signed
    sql(path, "DELETE FROM sketches")
    sql(path, "DELETE FROM releases")
    sql(path, "DELETE FROM datasets")
    report = verify_ledger(path, key=KEY)
    assert any("its record is gone: it was deleted" in p for p in report["problems"]), report["problems"]
    with pytest.raises(LedgerError, match="deleted, and is not created again"):
        Session.open(path, "ds", epsilon=1.0, key=KEY)


def test_edited_or_dropped_signed_heads_are_caught(signed):
    path, _, _ = signed
    heads = sql(path, "SELECT value FROM meta WHERE key = 'signed_heads'")[0][0]
    sql(path, "UPDATE meta SET value = replace(value, '[3,', '[2,') WHERE key = 'signed_heads'")
    with pytest.raises(LedgerError, match="signed heads do not match the key"):
        Session.open(path, "ds", key=KEY)
    sql(path, "UPDATE meta SET value = ? WHERE key = 'signed_heads'", (heads,))
    assert verify_ledger(path, key=KEY)["ok"]
    sql(path, "DELETE FROM meta WHERE key = 'signed_heads'")
    with pytest.raises(LedgerError, match="missing from the ledger's signed heads"):
        Session.open(path, "ds", key=KEY)


def test_a_downgrade_to_version_2_cannot_drop_the_heads(signed):
    """Claiming the file is version 2 (which had no heads) fails: its records are signed under
    the version-3 tag, so the upgrade's audit refuses them."""
    path, old_row, _ = signed
    sql(path, "UPDATE meta SET value = '2' WHERE key = 'version'")
    sql(path, "DELETE FROM meta WHERE key = 'signed_heads'")
    with pytest.raises(LedgerError, match="signature is missing or does not match"):
        Session.open(path, "ds", key=KEY)


def test_a_whole_file_rollback_is_caught_by_a_sketch_released_after_it(tmp_path):
    """What an attacker with write access to every file can still do: restore all of them from
    an older copy. The file is then consistent; a sketch released after the copy is not."""
    path = tmp_path / "ledger.db"
    with Session.open(path, "ds", epsilon=1.0, key=KEY) as s:
        first = s.release_sketch(X, FM, (0.0, 1.0), epsilon=0.2)
    backup = tmp_path / "backup.db"
    shutil.copy(path, backup)
    with Session.open(path, "ds", key=KEY) as s:
        later = s.release_sketch(X, FM, (0.0, 1.0), epsilon=0.5)
        later.save(tmp_path / "later.sketch")
    assert later.privacy["ledger"]["after"] == 1
    shutil.copy(backup, path)
    with Session.open(path, "ds", key=KEY) as s:  # consistent: the documented limit
        assert abs(s.remaining - 0.8) < 1e-9
    assert verify_ledger(path, key=KEY, witnesses=[first])["ok"]
    report = verify_ledger(path, key=KEY, witnesses=[first, tmp_path / "later.sketch"])
    assert not report["ok"]
    assert any("no longer holds that release" in p for p in report["problems"]), report["problems"]
    # released from again after the rollback: the chain there follows another history
    with Session.open(path, "ds", key=KEY) as s:
        s.release(fixed_loss(0.1), [1.0])
    report = verify_ledger(path, key=KEY, witnesses=[later.privacy["ledger"]])
    assert any("follows another history" in p for p in report["problems"]), report["problems"]


def test_witnesses_need_the_key_and_a_forged_one_is_refused(signed):
    path, _, sketch = signed
    with pytest.raises(ValueError, match="give the key"):
        verify_ledger(path, witnesses=[sketch])
    forged = {**sketch.privacy["ledger"], "after": 0}
    report = verify_ledger(path, key=KEY, witnesses=[forged])
    assert any("signature does not match" in p for p in report["problems"])
    assert verify_ledger(path, key=KEY, witnesses=[sketch])["ok"]


def test_without_a_key_nothing_is_signed_and_nothing_changes(tmp_path):
    path = tmp_path / "plain.db"
    with Session.open(path, "ds", epsilon=1.0) as s:
        sk = s.release_sketch(X, FM, (0.0, 1.0), epsilon=0.2)
    assert "ledger" not in sk.privacy
    assert verify_ledger(path)["ok"]
