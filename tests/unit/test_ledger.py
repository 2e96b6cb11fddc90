"""``opendp_sketch.ledger`` used directly (``Session`` is tested in ``tests/unit/test_session.py``):
the connection's refusals, creating and reopening a dataset, exact accounting of recorded
releases and the budget refusal, rollback of a failed transaction, stored sketches and the
post-processing log, witnesses, and ``verify_ledger``'s report."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from opendp_sketch.ledger import (
    BUDGET_KINDS,
    Ledger,
    LedgerBusyError,
    LedgerError,
    PrivacyBudgetError,
    read_only_uri,
    verify_ledger,
)
from opendp_sketch.ledger_format import genesis_hash

KEY = b"curator-key-0123456789abcdef"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    L = Ledger(tmp_path / "l.db")
    yield L
    L.close()


def _release(L: Ledger, ds: str, loss: float, delta: float = 0.0, kind: str = "measurement") -> int:
    with L.transaction() as con:
        rec = L.dataset(ds, con)
        assert rec is not None
        return L.record_release(
            con, rec, kind, rec.unit, (Fraction(loss), Fraction(delta)), "test", None, None
        )


# -- the connection -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"timeout": 0}, r"^timeout \(0\) must be a positive finite number of seconds$"),
        ({"timeout": float("inf")}, r"^timeout \(inf\) must be a positive finite number of seconds$"),
        ({"timeout": True}, r"^timeout \(True\) must be"),
        ({"timeout": "5"}, r"^timeout \('5'\) must be"),
        ({"key": b"short"}, r"^key must have at least 16 bytes \(got 5\)"),
        ({"key": 1234}, r"^key must be bytes or str, got int$"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Ledger(tmp_path / "l.db", **kwargs)
    assert not (tmp_path / "l.db").exists()


def test_bad_paths_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^ledger path \(3\) must be a str or os\.PathLike$"):
        Ledger(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^the directory of the ledger path \(.*\) does not exist$"):
        Ledger(tmp_path / "missing" / "l.db")


def test_foreign_sqlite_files_are_not_ledgers(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a)")
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match=r"an SQLite file that is not an opendp_sketch ledger$"):
        Ledger(path)
    (tmp_path / "text.db").write_bytes(b"not a database " * 100)
    with pytest.raises(LedgerError, match=r"not a readable SQLite ledger"):
        Ledger(tmp_path / "text.db")


def test_a_fresh_ledger_is_version_3_and_unsigned(ledger: Ledger) -> None:
    meta = dict(ledger.query("SELECT key, value FROM meta"))
    assert meta["format"] == "opendp_sketch.ledger" and meta["version"] == "3"
    assert ledger.signing is False and ledger.witness("ds", 0, "h") is None
    assert BUDGET_KINDS == ("epsilon", "epsilon_delta", "rho")


# -- datasets ---------------------------------------------------------------------------------------
def test_create_then_reopen_a_dataset(tmp_path: Path) -> None:
    L = Ledger(tmp_path / "l.db")
    rec = L.ensure_dataset("ds", "epsilon_delta", (1.0, 1e-6), contributions=2)
    assert (rec.budget, rec.total, rec.spent, rec.unit, rec.releases) == (
        "epsilon_delta",
        (Fraction(1.0), Fraction(1e-6)),
        (0, 0),
        2,
        0,
    )
    assert rec.head == rec.genesis and len(rec.genesis) == 64
    L.close()
    L = Ledger(tmp_path / "l.db")
    assert L.ensure_dataset("ds", None, None) == rec  # reopened without restating anything
    assert L.ensure_dataset("ds", "epsilon_delta", (1.0, 1e-6), contributions=2) == rec
    assert L.dataset("missing") is None
    L.close()


def test_reopening_with_another_budget_or_unit_is_refused(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    with pytest.raises(
        LedgerError, match=r"already has a total budget of ε = 1 in .*; it cannot be reopened with ρ = 1$"
    ):
        ledger.ensure_dataset("ds", "rho", (1.0, 0.0))
    with pytest.raises(LedgerError, match=r"cannot be reopened with ε = 2$"):
        ledger.ensure_dataset("ds", "epsilon", (2.0, 0.0))
    with pytest.raises(LedgerError, match=r"has the privacy unit contributions=1 .* with contributions=3$"):
        ledger.ensure_dataset("ds", None, None, contributions=3)


def test_an_unknown_dataset_needs_its_budget(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match=r"^dataset 'new' is not in the ledger .*: give its total budget"):
        ledger.ensure_dataset("new", None, None)
    assert ledger.query("SELECT COUNT(*) FROM datasets") == [(0,)]


def test_a_signed_dataset_needs_its_key(tmp_path: Path) -> None:
    signed = Ledger(tmp_path / "l.db", key=KEY)
    rec = signed.ensure_dataset("ds", "rho", (0.5, 0.0))
    assert rec.signed and signed.signing
    signed.close()
    plain = Ledger(tmp_path / "l.db")
    with pytest.raises(LedgerError, match=r"is signed: open it with its key \(key=\.\.\.\)"):
        plain.ensure_dataset("ds", None, None)
    with pytest.raises(LedgerError, match=r"^dataset 'ds' is signed: releases need its key$"):
        with plain.transaction() as con:
            plain.record_release(con, rec, "measurement", 1, (Fraction(0.1), Fraction(0)), "s", None, None)
    plain.close()


# -- releases ---------------------------------------------------------------------------------------
def test_spent_budget_is_the_exact_sum_of_the_recorded_losses(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    ids = [_release(ledger, "ds", v) for v in (0.1, 0.2, 0.3)]
    assert ids == [1, 2, 3]
    rec = ledger.dataset("ds", full=True)
    assert rec is not None and rec.releases == 3
    assert rec.spent == (Fraction(0.1) + Fraction(0.2) + Fraction(0.3), 0)
    assert rec.remaining == (1 - rec.spent[0], 0)
    assert ledger.query("SELECT seq, d_in, loss FROM releases ORDER BY id") == [
        (1, "1", 0.1),
        (2, "1", 0.2),
        (3, "1", 0.3),
    ]


def test_a_release_over_the_budget_is_refused_and_nothing_is_spent(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon_delta", (1.0, 1e-6))
    _release(ledger, "ds", 0.75, 5e-7)
    with pytest.raises(
        PrivacyBudgetError, match=r"would exceed the remaining budget \(ε, δ\) = \(0\.25, 5e-07\); nothing"
    ):
        _release(ledger, "ds", 0.5, 0.0)
    with pytest.raises(PrivacyBudgetError):
        _release(ledger, "ds", 0.1, 6e-7)  # δ alone over
    rec = ledger.dataset("ds")
    assert rec is not None and rec.releases == 1 and rec.spent == (Fraction(0.75), Fraction(5e-7))
    _release(ledger, "ds", 0.25, 5e-7)  # exactly the rest
    assert ledger.dataset("ds").remaining == (0, Fraction(1e-6) - 2 * Fraction(5e-7))  # type: ignore[union-attr]


def test_a_failed_transaction_records_nothing(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    with pytest.raises(RuntimeError, match="^boom$"):
        with ledger.transaction() as con:
            rec = ledger.dataset("ds", con)
            assert rec is not None
            ledger.record_release(con, rec, "measurement", 1, (Fraction(0.5), Fraction(0)), "s", None, None)
            raise RuntimeError("boom")
    assert ledger.query("SELECT COUNT(*) FROM releases") == [(0,)]
    assert ledger.dataset("ds", full=True).spent == (0, 0)  # type: ignore[union-attr]


def test_next_release_id_counts_across_datasets(ledger: Ledger) -> None:
    ledger.ensure_dataset("a", "epsilon", (1.0, 0.0))
    ledger.ensure_dataset("b", "epsilon", (1.0, 0.0))
    with ledger.transaction() as con:
        assert ledger.next_release_id(con) == 1
    _release(ledger, "a", 0.1)
    _release(ledger, "b", 0.1)
    with ledger.transaction() as con:
        assert ledger.next_release_id(con) == 3
    assert ledger.dataset("b").releases == 1  # type: ignore[union-attr]


def test_a_busy_ledger_raises_after_its_timeout(tmp_path: Path) -> None:
    holder = Ledger(tmp_path / "l.db")
    holder.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    waiter = Ledger(tmp_path / "l.db", timeout=0.05)
    with holder.transaction():
        with pytest.raises(
            LedgerBusyError, match=r"stayed locked by another release for 0\.05 s .*nothing was spent$"
        ):
            with waiter.transaction():
                pass
    with waiter.transaction():  # free again
        pass
    holder.close()
    waiter.close()


# -- stored sketches, post-processing ----------------------------------------------------------------
def test_stored_sketches_and_the_postprocessing_log(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    ledger.ensure_dataset("other", "epsilon", (1.0, 0.0))
    blob = b"PK\x03\x04 sketch bytes"
    with ledger.transaction() as con:
        rec = ledger.dataset("ds", con)
        assert rec is not None
        rid = ledger.record_release(
            con,
            rec,
            "sketch",
            1,
            (Fraction(0.5), Fraction(0)),
            "s",
            None,
            None,
            sketch=("Histogram", "f" * 32, 8, blob),
        )
    stored, digest = ledger.stored_sketch("ds", rid)
    assert stored == blob == ledger.sketch_blob("ds", rid)
    assert digest == hashlib.sha256(blob).hexdigest()
    with pytest.raises(ValueError, match=rf"^release {rid} is not a stored sketch of dataset 'other'$"):
        ledger.stored_sketch("other", rid)
    assert ledger.log_postprocessing("ds", rid, "mean") == 1
    assert ledger.log_postprocessing("ds", rid, "cdf") == 2
    with pytest.raises(ValueError, match=rf"^release {rid} is not a release of dataset 'other'$"):
        ledger.log_postprocessing("other", rid, "mean")
    assert ledger.query("SELECT release_id, description FROM postprocessing ORDER BY id") == [
        (rid, "mean"),
        (rid, "cdf"),
    ]
    assert ledger.dataset("ds", full=True).spent == (Fraction(0.5), 0)  # type: ignore[union-attr]


def test_witnesses_are_signed_and_fresh(tmp_path: Path) -> None:
    L = Ledger(tmp_path / "l.db", key=KEY)
    a, b = L.witness("ds", 2, "h"), L.witness("ds", 2, "h")
    assert a is not None and b is not None
    assert {k: a[k] for k in ("dataset", "after", "head")} == {"dataset": "ds", "after": 2, "head": "h"}
    assert len(a["nonce"]) == 32 and a["nonce"] != b["nonce"] and a["mac"] != b["mac"]
    L.close()


# -- verify_ledger and read_only_uri ---------------------------------------------------------------
def test_verify_ledger_reports_each_dataset(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "rho", (0.5, 0.0), contributions=2)
    _release(ledger, "ds", 0.125)
    out = verify_ledger(ledger.path)
    assert out["ok"] is True and out["integrity"] == "ok" and out["version"] == "3" and out["problems"] == []
    report = out["datasets"]["ds"]
    assert report == {
        "budget": "rho",
        "unit": 2,
        "releases": 1,
        "spent": (0.125, 0.0),
        "total": (0.5, 0.0),
        "spent_matches": True,
        "within_budget": True,
        "sketches_missing": 0,
        "signatures": "unsigned",
        "head": ledger.dataset("ds").head,  # type: ignore[union-attr]
        "problems": [],
    }
    assert report["head"] != genesis_hash("ds", "rho", 0.5, 0.0, 2, 0, "t")


def test_verify_ledger_reports_a_sketch_release_without_its_sketch(ledger: Ledger) -> None:
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    _release(ledger, "ds", 0.5, kind="sketch")
    out = verify_ledger(ledger.path)
    assert out["ok"] is False and out["datasets"]["ds"]["sketches_missing"] == 1
    assert out["problems"] == ["dataset 'ds', release row id 1: its sketch is missing from the store"]


def test_verify_ledger_refusals(tmp_path: Path, ledger: Ledger) -> None:
    with pytest.raises(ValueError, match=r"^ledger file \(.*nothing\.db'\) does not exist$"):
        verify_ledger(tmp_path / "nothing.db")
    with pytest.raises(ValueError, match=r"^key must have at least 16 bytes"):
        verify_ledger(ledger.path, key=b"k")
    with pytest.raises(ValueError, match=r"^witnesses are signed: give the key"):
        verify_ledger(ledger.path, witnesses=[{"dataset": "ds"}])


def test_verify_with_a_key_reports_signatures(tmp_path: Path) -> None:
    L = Ledger(tmp_path / "l.db", key=KEY)
    L.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    _release(L, "ds", 0.5)
    L.close()
    assert verify_ledger(tmp_path / "l.db", key=KEY)["datasets"]["ds"]["signatures"] == "valid"
    assert verify_ledger(tmp_path / "l.db")["datasets"]["ds"]["signatures"] == "not checked (no key)"
    wrong = verify_ledger(tmp_path / "l.db", key=b"w" * 32)
    assert wrong["ok"] is False and wrong["datasets"]["ds"]["signatures"] == "invalid"


@pytest.mark.parametrize(
    "path, uri",
    [
        ("/data/l.db", "file:///data/l.db?mode=ro"),
        ("/data/a b/l?.db", "file:///data/a%20b/l%3F.db?mode=ro"),
        ("/data/%41#.db", "file:///data/%2541%23.db?mode=ro"),
    ],
)
def test_read_only_uri_escapes_every_special_character(path: str, uri: str) -> None:
    assert read_only_uri(path) == uri


def test_read_only_uri_opens_read_only(ledger: Ledger) -> None:
    con = sqlite3.connect(read_only_uri(ledger.path), uri=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == ("3",)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        con.execute("INSERT INTO meta VALUES ('x', 'y')")
    con.close()


def test_a_loss_that_is_not_a_double_keeps_the_dataset_readable(ledger: Ledger) -> None:
    """A loss given as an exact fraction (1/10, 1/3) is recorded as the double at or above it,
    in the row and in the spent total alike: the dataset passes its own audit."""
    ledger.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    with ledger.transaction() as con:
        rec = ledger.dataset("ds", con)
        assert rec is not None
        ledger.record_release(con, rec, "measurement", 1, (Fraction(1, 10), Fraction(0)), "s", None, None)
    rec = ledger.dataset("ds", full=True)
    assert rec is not None and rec.spent[0] >= Fraction(1, 10)
