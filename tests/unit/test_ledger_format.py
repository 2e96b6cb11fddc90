"""``opendp_sketch.ledger_format``: directed rounding of exact losses, the hash chain's records
(each field bound, numbers exact, bools refused), the signed messages' tags, the signed heads as
read back from the meta table, privacy units of recorded ``d_in`` and the budget's text. Tampering
with a real ledger is tested in ``tests/privacy/test_tamper.py`` and ``test_ledger_rollback.py``."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from opendp_sketch.ledger_format import (
    FORMAT,
    HEADS,
    SCHEMA,
    VERSION,
    DatasetRecord,
    describe,
    float_down,
    float_up,
    genesis_hash,
    head_message,
    heads_message,
    read_heads,
    release_hash,
    release_message,
    unit_of,
    witness_message,
)
from opendp_sketch.signing import sign

KEY = b"k" * 32
GENESIS = ("ds", "epsilon", 1.0, 0.0, 1, 0, "2026-01-01T00:00:00+00:00")
ROW = ("sketch", "2026-01-01T00:00:01+00:00", "1", 0.25, 0.0, "sum", None, None, "ab" * 32)


# -- directed rounding ------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [Fraction(1, 10), Fraction(1, 3), Fraction(2, 3), Fraction(10**30 + 1, 7)])
def test_float_down_and_up_bracket_an_inexact_fraction_by_one_ulp(q: Fraction) -> None:
    lo, hi = float_down(q), float_up(q)
    assert Fraction(lo) < q < Fraction(hi)
    assert math.nextafter(lo, math.inf) == hi


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(3), Fraction(0.1), Fraction(-5, 8)])
def test_float_down_and_up_are_exact_on_doubles(q: Fraction) -> None:
    assert float_down(q) == float_up(q) == float(q) and Fraction(float(q)) == q


def test_spent_budgets_round_outwards() -> None:
    spent = Fraction(0.1) + Fraction(0.2)  # exactly the sum of the two doubles
    assert Fraction(float_up(spent)) >= spent and Fraction(float_down(spent)) <= spent
    assert float_up(spent) == 0.30000000000000004 and float_down(spent) == 0.3


# -- the hash chain ---------------------------------------------------------------------------------
def test_genesis_hash_is_stable_and_binds_every_field() -> None:
    h = genesis_hash(*GENESIS)
    assert len(h) == 64 and int(h, 16) >= 0 and h == genesis_hash(*GENESIS)
    changed = [
        ("ds2", *GENESIS[1:]),
        (GENESIS[0], "rho", *GENESIS[2:]),
        (*GENESIS[:2], 2.0, *GENESIS[3:]),
        (*GENESIS[:2], math.nextafter(1.0, 2.0), *GENESIS[3:]),  # one ulp: floats are written exactly
        (*GENESIS[:3], 1e-9, *GENESIS[4:]),
        (*GENESIS[:4], 2, *GENESIS[5:]),
        (*GENESIS[:5], 1, GENESIS[6]),
        (*GENESIS[:6], "2026-01-01T00:00:00.000001+00:00"),
    ]
    hashes = {genesis_hash(*g) for g in changed}
    assert len(hashes) == len(changed) and h not in hashes


def test_integer_and_float_totals_hash_alike_but_bools_and_text_are_refused() -> None:
    assert genesis_hash("ds", "epsilon", 1, 0, 1, 0, "t") == genesis_hash(
        "ds", "epsilon", 1.0, 0.0, 1, 0, "t"
    )
    for bad in (True, "1.0", None):
        with pytest.raises(TypeError, match=r"is not a number$"):
            genesis_hash("ds", "epsilon", bad, 0.0, 1, 0, "t")


def test_release_hash_binds_the_previous_hash_position_and_contents() -> None:
    prev = genesis_hash(*GENESIS)
    h = release_hash(prev, "ds", 1, 1, ROW)
    assert h == release_hash(prev, "ds", 1, 1, ROW) and h != prev
    variants = [
        release_hash("0" * 64, "ds", 1, 1, ROW),
        release_hash(prev, "other", 1, 1, ROW),
        release_hash(prev, "ds", 2, 1, ROW),
        release_hash(prev, "ds", 1, 2, ROW),
    ]
    for i in range(len(ROW)):
        row = list(ROW)
        row[i] = 0.5 if isinstance(row[i], float) else f"x{row[i]}"
        variants.append(release_hash(prev, "ds", 1, 1, tuple(row)))
    assert len(set(variants)) == len(variants) and h not in variants
    with pytest.raises(ValueError):  # a row has exactly nine fields
        release_hash(prev, "ds", 1, 1, ROW[:-1])
    with pytest.raises(TypeError, match=r"is not a number$"):
        release_hash(prev, "ds", 1, 1, (*ROW[:3], "0.25", *ROW[4:]))


def test_messages_are_canonical_and_tagged_by_kind() -> None:
    g = genesis_hash(*GENESIS)
    v3 = head_message("ds", g, g, 0, "0", "0")
    assert v3 == head_message("ds", g, g, 0, "0", "0", VERSION) and VERSION == "3"
    v2 = head_message("ds", g, g, 0, "0", "0", "2")
    assert v2 != v3 and b'"head/3"' in v3 and b'"head"' in v2
    assert json.loads(v3)[1:] == ["head/3", "ds", g, g, 0, "0", "0"]
    assert json.loads(witness_message("ds", 3, "h", "n"))[1:] == ["witness", "ds", 3, "h", "n"]
    assert json.loads(release_message("abc"))[1:] == ["release-signature", "abc"]
    assert len({v3, witness_message("ds", 0, g, g), release_message(g)}) == 3


def test_heads_message_does_not_depend_on_insertion_order() -> None:
    a = heads_message({"x": [1, "h1"], "y": [2, "h2"]})
    b = heads_message({"y": [2, "h2"], "x": [1, "h1"]})
    assert a == b and a != heads_message({"x": [1, "h1"], "y": [3, "h2"]})
    assert json.loads(a)[2] == [["x", 1, "h1"], ["y", 2, "h2"]]


# -- read_heads ---------------------------------------------------------------------------------------
@pytest.fixture
def con() -> Iterator[sqlite3.Connection]:
    c = sqlite3.connect(":memory:")
    c.executescript(SCHEMA)
    yield c
    c.close()


def _store(con: sqlite3.Connection, value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value)
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (HEADS, text))


def test_absent_heads_read_as_none(con: sqlite3.Connection) -> None:
    assert read_heads(con, KEY) == (None, [])


def test_signed_heads_read_back_and_check_their_signature(con: sqlite3.Connection) -> None:
    heads = {"ds": [2, "abc"]}
    _store(con, {"heads": heads, "mac": sign(KEY, heads_message(heads))})
    assert read_heads(con, KEY) == (heads, [])
    assert read_heads(con, None) == (heads, [])
    assert read_heads(con, b"o" * 32) == (
        heads,
        ["the ledger's signed heads do not match the key: the meta table was modified"],
    )
    _store(con, {"heads": {"ds": [3, "abc"]}, "mac": sign(KEY, heads_message(heads))})
    assert read_heads(con, KEY)[1] == [
        "the ledger's signed heads do not match the key: the meta table was modified"
    ]


def test_empty_heads_need_no_signature(con: sqlite3.Connection) -> None:
    _store(con, {"heads": {}, "mac": None})
    assert read_heads(con, KEY) == ({}, [])


@pytest.mark.parametrize(
    "stored",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"mac": "x"}),
        json.dumps({"heads": {"ds": [1]}}),
        json.dumps({"heads": {"ds": ["x", "h"]}}),
    ],
)
def test_malformed_heads_are_a_problem(con: sqlite3.Connection, stored: str) -> None:
    _store(con, stored)
    assert read_heads(con, KEY) == (
        {},
        ["the ledger's signed heads are not valid: the meta table was modified"],
    )


# -- units, records, text -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "d_in, unit",
    [
        ("1", 1),
        ("3", 3),
        ("2.0", 2),
        (" 4 ", 4),
        ("0", None),
        ("-2", None),
        ("1.5", None),
        ("inf", None),
        ("nan", None),
        ("x", None),
        (None, None),
    ],
)
def test_unit_of(d_in: Any, unit: int | None) -> None:
    assert unit_of(d_in) == unit


def test_remaining_is_exact() -> None:
    rec = DatasetRecord(
        "ds", "epsilon_delta", (Fraction(1), Fraction(1, 10**6)), (Fraction(0.1) * 3, Fraction(0))
    )
    assert rec.remaining == (1 - 3 * Fraction(0.1), Fraction(1, 10**6))
    assert rec.unit == 1 and rec.signed is False and rec.releases == 0


@pytest.mark.parametrize(
    "budget, loss, text",
    [
        ("epsilon", (0.5, 0.0), "ε = 0.5"),
        ("rho", (Fraction(1, 10), 0), "ρ = 0.1"),
        ("epsilon_delta", (1.0, 1e-6), "(ε, δ) = (1, 1e-06)"),
        ("epsilon", (math.inf, 0.0), "ε = inf"),
    ],
)
def test_describe(budget: str, loss: Any, text: str) -> None:
    assert describe(budget, loss) == text


def test_describe_shows_six_significant_digits_of_the_value_rounded_up() -> None:
    """Six significant digits, rounded up: a recorded loss is never shown below its value."""
    assert describe("epsilon", (Fraction(1, 3), 0)) == "ε = 0.333334"  # rounded up, never below
    assert describe("rho", (Fraction(1, 10) + Fraction(1, 10**12), 0)) == "ρ = 0.100001"
    assert describe("rho", (Fraction(1, 10), 0)) == "ρ = 0.1"
    assert describe("epsilon_delta", (Fraction(2), Fraction(1, 3 * 10**7))) == "(ε, δ) = (2, 3.33334e-08)"


def test_the_file_format_names() -> None:
    assert FORMAT == "opendp_sketch.ledger" and HEADS == "signed_heads"
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "datasets", "releases", "sketches", "postprocessing"} <= tables
    with pytest.raises(sqlite3.IntegrityError):  # the schema's own checks: a budget kind, a positive total
        con.execute(
            "INSERT INTO datasets (dataset_id, budget, total_loss, total_delta, spent_loss, spent_delta, created) "
            "VALUES ('d', 'delta', 1.0, 0.0, '0', '0', 't')"
        )
    with pytest.raises(sqlite3.IntegrityError):
        con.execute(
            "INSERT INTO datasets (dataset_id, budget, total_loss, total_delta, spent_loss, spent_delta, created) "
            "VALUES ('d', 'epsilon', 0.0, 0.0, '0', '0', 't')"
        )
    con.close()
