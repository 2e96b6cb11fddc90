"""Sessions and the SQLite privacy ledger (single process; see tests/privacy/test_ledger_processes.py
for concurrent processes and crashes)."""

from __future__ import annotations

import io
import json
import math
import sqlite3

import numpy as np
import opendp.prelude as dp
import polars as pl
import pytest

import opendp_sketch as dps
from opendp_sketch.ledger import Ledger, LedgerBusyError, LedgerError, PrivacyBudgetError, verify_ledger
from opendp_sketch.session import Session, sketch_from_bytes, sketch_to_bytes
from opendp_sketch.sketch import SketchFormatError

BOUNDED = (dp.vector_domain(dp.atom_domain(bounds=(0.0, 10.0), nan=False)), dp.symmetric_distance())


def constant_loss(loss, measure=None, calls=None):
    """A measurement on float vectors with a fixed privacy loss; ``calls`` counts invocations."""

    def function(x):
        if calls is not None:
            calls.append(1)
        return 0.0

    def privacy_map(d_in):
        return loss if isinstance(loss, tuple) else loss * d_in

    return dp.m.make_user_measurement(*BOUNDED, measure or dp.max_divergence(), function, privacy_map)


def failing(loss):
    def function(x):
        raise RuntimeError("computation failed")

    return dp.m.make_user_measurement(*BOUNDED, dp.max_divergence(), function, lambda d_in: loss)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.db"


def rows(path, sql):
    with sqlite3.connect(path) as con:
        return con.execute(sql).fetchall()


# -- open, spend, reopen -------------------------------------------------------------------------


def test_release_then_reopen_keeps_the_remaining_budget(path, data2d, hist2d):
    with Session.open(path, "ds", epsilon=1.0) as s:
        sk = s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=0.3)
        spent = sk.privacy["epsilon"]
        assert 0.29 < spent <= 0.3 and s.spent == spent
    with Session.open(path, "ds", epsilon=1.0) as again, Session.open(path, "ds") as plain:
        assert again.spent == plain.spent == spent
        assert again.remaining <= 1.0 - spent and again.remaining > 0.69
        assert again.releases()["id"].to_list() == [sk.privacy["release_id"]]
    assert verify_ledger(path)["ok"]


def test_reopen_with_another_total_or_kind_is_refused(path):
    Session.open(path, "ds", epsilon=1.0).close()
    for kwargs in ({"epsilon": 2.0}, {"epsilon": 1.0, "delta": 1e-6}, {"rho": 1.0}):
        with pytest.raises(LedgerError, match="already has a total budget of ε = 1"):
            Session.open(path, "ds", **kwargs)
    with pytest.raises(LedgerError, match="give its total budget"):
        Session.open(path, "unknown")
    with pytest.raises(ValueError, match="dataset_id"):
        Session.open(path, "", epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        Session.open(path, "new", epsilon=-1.0)
    assert rows(path, "SELECT dataset_id FROM datasets") == [("ds",)]


def test_sessions_of_one_ledger_see_each_others_spending(path):
    a, b = Session.open(path, "ds", epsilon=1.0), Session.open(path, "ds")
    a.release(constant_loss(0.25), [1.0])
    assert b.spent == 0.25 and b.remaining == 0.75
    other = Session.open(path, "other", rho=0.5)
    assert other.spent == 0.0 and other.remaining == 0.5
    for s in (a, b, other):
        s.close()


# -- refusals spend nothing ----------------------------------------------------------------------


def test_the_filter_refuses_an_over_budget_release_before_computing(path):
    calls = []
    with Session.open(path, "ds", epsilon=0.5) as s:
        s.release(constant_loss(0.25, calls=calls), [1.0])
        with pytest.raises(PrivacyBudgetError, match="needs ε = 0.3, but only ε = 0.25 is left"):
            s.release(constant_loss(0.3, calls=calls), [1.0])
        assert calls == [1]  # the refused measurement never ran
        assert s.spent == 0.25 and len(s.releases()) == 1
        s.release(constant_loss(0.25, calls=calls), [1.0])  # exactly the rest is allowed
        assert s.remaining == 0.0
        with pytest.raises(PrivacyBudgetError, match="nothing was released"):
            s.release(constant_loss(1e-12), [1.0])
    assert len(rows(path, "SELECT * FROM releases")) == 2 and verify_ledger(path)["ok"]


def test_the_filter_is_built_from_the_remaining_budget(path, monkeypatch):
    budgets = []
    real = dp.c.make_privacy_filter

    def spy(odometer, d_in, d_out):
        budgets.append(d_out)
        return real(odometer, d_in, d_out)

    with Session.open(path, "ds", epsilon=1.0) as s:
        s.release(constant_loss(0.375), [1.0])
        monkeypatch.setattr(dp.c, "make_privacy_filter", spy)
        s.release(constant_loss(0.5), [1.0])
        with pytest.raises(PrivacyBudgetError, match="privacy filter refused"):
            s.release(constant_loss(0.25), [1.0])
        with pytest.raises(PrivacyBudgetError):
            s.release(constant_loss(math.inf), [1.0])
    # the release: a data-free probe and the measurement itself, each against what was left
    assert budgets == [0.625, 0.625, 0.125, 0.125]


def test_exact_accounting_never_rounds_into_overspending(path):
    # three doubles 0.1 sum to 0.3000000000000000166 > double(0.3): the third must be refused
    with Session.open(path, "ds", epsilon=0.3) as s:
        s.release(constant_loss(0.1), [1.0])
        s.release(constant_loss(0.1), [1.0])
        with pytest.raises(PrivacyBudgetError):
            s.release(constant_loss(0.1), [1.0])
        assert s.remaining < 0.1 and s.spent == 0.2
    (spent,) = rows(path, "SELECT spent_loss FROM datasets")[0]
    assert spent == "3602879701896397/18014398509481984"  # exactly 2 × double(0.1)


def test_a_computation_that_fails_after_the_filter_is_charged_and_recorded(path):
    """The data was read: a free failure would be a repeatable oracle (did this data make it
    fail?). The loss is spent, the release row says it failed, the error quotes nothing."""
    with Session.open(path, "ds", epsilon=1.0) as s:
        with pytest.raises(dps.ReleaseFailedError, match="is charged") as err:
            s.release(failing(0.1), [1.0])
        assert "computation failed" not in str(err.value) and err.value.__cause__ is None
        assert s.spent == pytest.approx(0.1)
        log = s.releases()
        assert log.height == 1 and "failed" in log["summary"][0]
        with pytest.raises(dps.ReleaseFailedError):  # again: charged again, so never free
            s.release(failing(0.1), [1.0])
        assert s.spent == pytest.approx(0.2)
    assert rows(path, "SELECT COUNT(*) FROM releases") == [(2,)]


def test_refusals_before_the_filter_spend_and_record_nothing(path, data2d, hist2d, secret):
    bad = np.array(data2d)
    bad[5, 1] = np.nan
    bad[6, 0] = secret
    with Session.open(path, "ds", epsilon=1.0) as s:
        with pytest.raises(ValueError, match="NaN") as err:
            s.release_sketch(bad, hist2d, bounds=(0.0, 1.0), epsilon=0.5)
        assert str(secret) not in str(err.value) and "123456" not in str(err.value)
        with pytest.raises(ValueError, match="columns"):
            s.release_sketch(data2d[:, :1], hist2d, bounds=(0.0, 1.0), epsilon=0.5)
        with pytest.raises(ValueError, match="must be a numpy array"):
            s.release_sketch(data2d.tolist(), hist2d, bounds=(0.0, 1.0), epsilon=0.5)
        with pytest.raises(ValueError, match="not a member"):  # the input's kind: curator side
            s.release(constant_loss(0.1), "not a vector")
        assert s.spent == 0.0 and s.releases().height == 0
    assert rows(path, "SELECT COUNT(*) FROM releases") == [(0,)]


def test_a_busy_ledger_times_out_without_spending(path):
    s = Session.open(path, "ds", epsilon=1.0, timeout=0.05)
    holder = Ledger(path)
    with holder.transaction():
        with pytest.raises(LedgerBusyError, match="nothing was spent"):
            s.release(constant_loss(0.1), [1.0])
    assert s.spent == 0.0
    holder.close()
    s.close()


# -- measures --------------------------------------------------------------------------------------


def test_any_opendp_measurement_through_the_session(path):
    meas = BOUNDED >> dp.t.then_sum() >> dp.m.then_laplace(20.0)
    with Session.open(path, "ds", epsilon=1.0) as s:
        value = s.release(meas, [1.0, 2.0, 3.0], description="total")
        assert isinstance(value, float) and s.spent == meas.map(1)
        frame = s.releases()
        assert frame.columns == ["id", "kind", "time", "d_in", "epsilon", "summary", "description"]
        assert frame.row(0, named=True)["kind"] == "measurement" and frame["description"][0] == "total"
        assert frame.schema["time"] == pl.Datetime("us", "UTC")
    assert json.loads(rows(path, "SELECT result FROM releases")[0][0]) == value


def test_a_measurement_of_another_measure_is_rejected(path):
    gauss = BOUNDED >> dp.t.then_sum() >> dp.m.then_gaussian(20.0)
    with Session.open(path, "pure", epsilon=1.0) as s:
        with pytest.raises(ValueError, match="does not match this session"):
            s.release(gauss, [1.0])
        with pytest.raises(ValueError, match="Measurement"):
            s.release(lambda x: 0.0, [1.0])
        for bad in (0, -1, True):
            with pytest.raises(ValueError, match="positive distance"):
                s.release(constant_loss(0.1), [1.0], d_in=bad)
        with pytest.raises(ValueError, match=r"must be the privacy unit of dataset 'pure': contributions=1"):
            s.release(BOUNDED >> dp.t.then_sum() >> dp.m.then_laplace(1.0), [1.0], d_in=1.5)

        def unbounded(d_in):
            raise ValueError("no bound")

        with pytest.raises(ValueError, match="undefined"):
            s.release(
                dp.m.make_user_measurement(*BOUNDED, dp.max_divergence(), lambda x: 0.0, unbounded), [1.0]
            )
        assert s.spent == 0.0
    with Session.open(path, "zcdp", rho=1.0) as s:
        with pytest.raises(ValueError, match="zCDP measurement"):
            s.release(constant_loss(0.1), [1.0])
        s.release(gauss, [1.0])
        assert s.spent == gauss.map(1)


def test_approximate_session_composes_delta_and_accepts_pure_measurements(path, data2d, hist2d):
    with Session.open(path, "ds", epsilon=2.0, delta=1e-6) as s:
        assert s.measure == dp.approximate(dp.max_divergence())
        s.release(constant_loss(0.5), [1.0])  # lifted with δ = 0
        sk = s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=1.0, delta=5e-7)
        eps, delta = s.spent
        assert delta == 5e-7 and 1.49 < eps <= 1.5 and sk.privacy["delta"] == 5e-7
        with pytest.raises(PrivacyBudgetError, match="δ"):  # ε fits, δ does not
            s.release(constant_loss((0.1, 6e-7), dp.approximate(dp.max_divergence())), [1.0])
        s.release(constant_loss((0.1, 5e-7), dp.approximate(dp.max_divergence())), [1.0])
        assert s.remaining[1] == 0.0
        assert set(s.releases().columns) >= {"epsilon", "delta"}


def test_release_sketch_budget_kind_must_match(path, data2d, hist2d):
    with Session.open(path, "ds", rho=0.5) as s:
        with pytest.raises(ValueError, match="accounts ρ"):
            s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=0.1)
        sk = s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), rho=0.2)
        assert sk.noise["mechanism"] == "gaussian" and s.spent == sk.privacy["rho"] <= 0.2


# -- the sketch store ------------------------------------------------------------------------------


def test_sketch_store_round_trip_and_log(path, data2d, rff2d):
    frame = pl.DataFrame(data2d, schema=["a", "b"], orient="row")
    with Session.open(path, "ds", epsilon=1.0) as s:
        sk = s.release_sketch(frame, rff2d, bounds=(0.0, 1.0), epsilon=0.5, description="first look")
        rid = sk.privacy["release_id"]
        back = s.load_sketch(rid)
        assert back.feature_map == rff2d and back.column_names == ["a", "b"]
        np.testing.assert_array_equal(back.sum_units, sk.sum_units)
        assert back.count == sk.count and back.noise == sk.noise and back.privacy == sk.privacy
        assert back.privacy["dataset_id"] == "ds" and s.last_release_id == rid
        spent = s.spent
        mean = s.analyze(rid, lambda k: k.mean, "mean of the features")
        np.testing.assert_array_equal(mean, sk.mean)
        s.log_postprocessing(rid, "KDE at 10 points")
        assert s.spent == spent  # post-processing is free
        log = s.postprocessing()
        assert log["description"].to_list() == ["mean of the features", "KDE at 10 points"]
        assert log["release_id"].to_list() == [rid, rid]
        row = s.releases().row(0, named=True)
        assert row["kind"] == "sketch" and row["summary"].startswith("RFF m=16 laplace fingerprint=")
        with pytest.raises(ValueError, match="not a stored sketch"):
            s.load_sketch(rid + 1)
        with pytest.raises(ValueError, match="not a release"):
            s.log_postprocessing(rid + 1, "x")
    with (
        Session.open(path, "other", epsilon=1.0) as o,
        pytest.raises(ValueError, match="not a stored sketch"),
    ):
        o.load_sketch(rid)  # the store is per dataset
    assert rows(path, "SELECT map_kind, num_features FROM sketches") == [("RFF", 16)]


def test_a_sketch_measurement_released_through_the_session_is_stored(path, hist2d):
    meas = dps.make_private_sketch(
        dps.box_domain((0.0, 1.0), num_columns=2),
        dp.symmetric_distance(),
        dp.max_divergence(),
        hist2d,
        scale=8.0,
    )
    with Session.open(path, "ds", epsilon=1.0) as s:
        sk = s.release(meas, np.full((10, 2), 0.5))
        assert s.load_sketch(s.last_release_id).count == sk.count


def test_tampered_blobs_raise_sketch_format_error(path, data2d, hist2d):
    with Session.open(path, "ds", epsilon=1.0) as s:
        rid = s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=0.5).privacy["release_id"]
        blob = rows(path, "SELECT blob FROM sketches")[0][0]
        # same header, different sums: the checksum no longer matches
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            meta, sums = z["meta"], z["sum_units"]
        forged = io.BytesIO()
        np.savez_compressed(forged, meta=meta, sum_units=sums + 1)
        for bad in (forged.getvalue(), blob[: len(blob) // 2], b"\x00" * 64):
            with sqlite3.connect(path) as con:
                con.execute("UPDATE sketches SET blob = ? WHERE release_id = ?", (bad, rid))
            with pytest.raises(SketchFormatError, match=f"sketch {rid}"):
                s.load_sketch(rid)


def test_sketch_bytes_round_trip(hist2d):
    sk = dps.Sketch(feature_map=hist2d, sum_units=np.arange(8), count=5)
    back = sketch_from_bytes(sketch_to_bytes(sk))
    assert back.feature_map == hist2d and back.sum_units.tolist() == list(range(8)) and back.count == 5


# -- the file ----------------------------------------------------------------------------------------


def test_foreign_files_are_not_ledgers(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    with pytest.raises(LedgerError, match="not an opendp_sketch ledger"):
        Session.open(other, "ds", epsilon=1.0)
    text = tmp_path / "notes.txt"
    text.write_text("this is not a database, " * 100)
    with pytest.raises(LedgerError, match="not a readable SQLite ledger"):
        Session.open(text, "ds", epsilon=1.0)
    with pytest.raises(ValueError, match="does not exist"):
        Session.open(tmp_path / "missing" / "l.db", "ds", epsilon=1.0)


def test_verify_ledger_detects_an_inconsistent_record(path):
    with Session.open(path, "ds", epsilon=1.0) as s:
        s.release(constant_loss(0.25), [1.0])
    report = verify_ledger(path)
    assert report["ok"] and report["integrity"] == "ok" and report["datasets"]["ds"]["releases"] == 1
    with sqlite3.connect(path) as con:
        con.execute("UPDATE datasets SET spent_loss = '1/8'")
    report = verify_ledger(path)
    assert not report["ok"] and not report["datasets"]["ds"]["spent_matches"]
    assert rows(path, "PRAGMA journal_mode") == [("wal",)]


# -- the privacy unit (finding 4 of issue 13) -------------------------------------------------------


def test_the_privacy_unit_is_fixed_when_the_dataset_is_created(path, data2d, hist2d):
    with Session.open(path, "ds", epsilon=10.0, contributions=3) as s:
        assert s.contributions == 3
        sk = s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=1.0)  # at the dataset's unit
        assert sk.privacy["d_in"] == 3 and "loss" not in sk.privacy and 0.99 < sk.privacy["epsilon"] <= 1.0
        with pytest.raises(
            ValueError,
            match=r"contributions \(1\) must be the privacy unit of dataset 'ds': "
            r"contributions=3",
        ):
            s.release_sketch(data2d, hist2d, bounds=(0.0, 1.0), epsilon=1.0, contributions=1)
        with pytest.raises(ValueError, match=r"d_in \(1\) must be the privacy unit .* contributions=3"):
            s.release(constant_loss(0.1), [1.0], d_in=1)
        s.release(constant_loss(0.5), [1.0])  # charged at d_in = 3: 1.5
        assert s.spent == pytest.approx(sk.privacy["epsilon"] + 1.5)
        assert s.releases()["d_in"].to_list() == ["3", "3"]
    with pytest.raises(
        LedgerError, match="has the privacy unit contributions=3 .* cannot be reopened with contributions=1"
    ):
        Session.open(path, "ds", contributions=1)
    with Session.open(path, "ds") as again, Session.open(path, "ds", epsilon=10.0, contributions=3) as same:
        assert again.contributions == same.contributions == 3
    with Session.open(path, "other", epsilon=1.0) as default:
        assert default.contributions == 1
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="contributions"):
            Session.open(path, "new", epsilon=1.0, contributions=bad)


# -- the file -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a#b.db", "c%41.db", "d?mode=rw.db", "e f.db"])
def test_verify_ledger_opens_exactly_the_named_file(tmp_path, name):
    """Finding 8: the read-only URI is percent-encoded, so '#', '%41' or '?' open this file only."""
    path = tmp_path / name
    with Session.open(path, "ds", epsilon=1.0) as s:
        s.release(constant_loss(0.25), [1.0])
    report = verify_ledger(path)
    assert report["ok"] and report["datasets"]["ds"]["releases"] == 1
    # no other file opened or created (SQLite's WAL companions of this file only)
    assert {p.name for p in tmp_path.iterdir()} <= {name, f"{name}-wal", f"{name}-shm"}


_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (dataset_id TEXT PRIMARY KEY, budget TEXT NOT NULL, total_loss REAL NOT NULL,
    total_delta REAL NOT NULL, spent_loss TEXT NOT NULL, spent_delta TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE releases (id INTEGER PRIMARY KEY AUTOINCREMENT, dataset_id TEXT NOT NULL, kind TEXT NOT NULL,
    created TEXT NOT NULL, d_in TEXT NOT NULL, loss REAL NOT NULL, delta REAL NOT NULL, summary TEXT NOT NULL,
    description TEXT, result TEXT);
CREATE TABLE sketches (release_id INTEGER PRIMARY KEY, map_kind TEXT NOT NULL, fingerprint TEXT NOT NULL,
    num_features INTEGER NOT NULL, blob BLOB NOT NULL);
CREATE TABLE postprocessing (id INTEGER PRIMARY KEY AUTOINCREMENT, release_id INTEGER NOT NULL,
    created TEXT NOT NULL, description TEXT NOT NULL);
INSERT INTO meta VALUES ('format', 'opendp_sketch.ledger'), ('version', '1');
"""


def _v1_ledger(path, releases, spent):
    """A version-1 ledger file (no chain, no unit) with dataset 'ds' at ε = 1."""
    with sqlite3.connect(path) as con:
        con.executescript(_V1_SCHEMA)
        con.execute(
            "INSERT INTO datasets VALUES ('ds', 'epsilon', 1.0, 0.0, ?, '0', '2024-01-01T00:00:00+00:00')",
            (spent,),
        )
        for d_in, loss in releases:
            con.execute(
                "INSERT INTO releases (dataset_id, kind, created, d_in, loss, delta, summary) "
                "VALUES ('ds', 'measurement', '2024-01-02T00:00:00+00:00', ?, ?, 0.0, 'x')",
                (d_in, loss),
            )


def test_a_version_1_ledger_is_upgraded_when_opened(path):
    _v1_ledger(path, [("2", 0.25), ("2", 0.25)], "1/2")
    assert not verify_ledger(path)["ok"]  # nothing chained to verify yet
    with Session.open(path, "ds") as s:
        assert s.spent == 0.5 and s.contributions == 2
        s.release(constant_loss(0.125), [1.0])  # at d_in = 2: 0.25
        assert s.spent == 0.75
    report = verify_ledger(path)
    assert report["ok"] and report["version"] == "3" and report["datasets"]["ds"]["releases"] == 3


def test_a_version_1_ledger_that_mixed_units_is_refused(path):
    _v1_ledger(path, [("3", 0.25), ("1", 0.25)], "1/2")
    with pytest.raises(LedgerError, match=r"released at d_in=1, not at the dataset's privacy unit \(3\)"):
        Session.open(path, "ds")


def test_an_inconsistent_version_1_ledger_is_not_upgraded(path):
    _v1_ledger(path, [("1", 0.25)], "-100")
    with pytest.raises(LedgerError, match=r"records spent \(-100, 0\) but its releases sum to"):
        Session.open(path, "ds")
    assert rows(path, "SELECT value FROM meta WHERE key = 'version'") == [("1",)]  # rolled back
