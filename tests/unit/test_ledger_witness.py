"""``opendp_sketch.ledger_witness.check_witnesses`` against a ledger built directly: a witness
found in its chain, the forms a witness is read from (dict, Sketch, file), and every problem it
reports — no key, not a witness, a bad signature, a release no longer held, another history at
its place. A whole-file rollback through ``Session`` is in ``tests/privacy/test_ledger_rollback.py``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opendp_sketch as dps
from opendp_sketch.ledger import Ledger
from opendp_sketch.ledger_format import witness_message
from opendp_sketch.ledger_witness import check_witnesses
from opendp_sketch.signing import sign

KEY = b"witness-key-0123456789abcdef"


@dataclass
class Built:
    path: Path
    witness: dict[str, Any]
    sketch: dps.Sketch
    sketch_file: Path


def _sketch(witness: dict[str, Any]) -> dps.Sketch:
    fm = dps.Histogram(bounds=(0.0, 1.0), bins=2, dim=1)
    return dps.Sketch(fm, np.array([3, 1], dtype=np.int64), 4, privacy={"ledger": witness})


def _append(L: Ledger, tmp_path: Path, name: str) -> tuple[dict[str, Any], dps.Sketch, Path]:
    """One sketch release of ``ds`` carrying its witness, stored in the ledger."""
    with L.transaction() as con:
        rec = L.dataset("ds", con)
        assert rec is not None
        witness = L.witness("ds", rec.releases, rec.head)
        assert witness is not None
        sk = _sketch(witness)
        file = tmp_path / f"{name}.sketch"
        sk.save(file)
        blob = file.read_bytes()
        L.record_release(
            con, rec, "sketch", 1, (Fraction(0.25), Fraction(0)), "s", None, None,
            sketch=(type(sk.feature_map).__name__, sk.feature_map.fingerprint(), 2, blob),
        )  # fmt: skip
    return witness, sk, file


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Built]:
    L = Ledger(tmp_path / "l.db", key=KEY)
    L.ensure_dataset("ds", "epsilon", (1.0, 0.0))
    witness, sk, file = _append(L, tmp_path, "first")
    L.close()
    yield Built(tmp_path / "l.db", witness, sk, file)


def _check(path: Path, witnesses: Any, key: bytes | None = KEY) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return check_witnesses(con, witnesses, key)
    finally:
        con.close()


def _signed(ds: str, after: int, head: str, nonce: str, key: bytes = KEY) -> dict[str, Any]:
    return {
        "dataset": ds,
        "after": after,
        "head": head,
        "nonce": nonce,
        "mac": sign(key, witness_message(ds, after, head, nonce)),
    }


def test_a_witness_in_its_chain_passes_in_every_form(built: Built) -> None:
    assert built.witness["after"] == 0
    assert _check(built.path, [built.witness]) == []
    assert _check(built.path, [built.sketch]) == []
    assert _check(built.path, [built.sketch_file, str(built.sketch_file)]) == []
    assert _check(built.path, []) == [] and _check(built.path, None) == []
    assert _check(built.path, (), key=None) == []  # nothing to check needs no key


def test_witnesses_need_the_key(built: Built) -> None:
    with pytest.raises(
        ValueError, match=r"^witnesses are signed: give the key \(key=\.\.\.\) to check them$"
    ):
        _check(built.path, [built.witness], key=None)


def test_a_wrong_key_or_an_edited_witness_fails_its_signature(built: Built) -> None:
    assert _check(built.path, [built.witness], key=b"o" * 32) == [
        "witness 1: its signature does not match the key"
    ]
    for field, value in (
        ("after", 1),
        ("head", "0" * 64),
        ("nonce", "f" * 32),
        ("dataset", "other"),
        ("mac", None),
    ):
        edited = {**built.witness, field: value}
        assert _check(built.path, [edited]) == ["witness 1: its signature does not match the key"], field


@pytest.mark.parametrize(
    "item",
    [{}, {"dataset": "ds", "after": "x", "head": "h", "nonce": "n"}, 7, ["ds", 0], {"dataset": "ds"}],
)
def test_anything_but_a_witness_is_named(built: Built, item: Any) -> None:
    assert _check(built.path, [built.witness, item]) == [
        "witness 2: not a ledger witness (a sketch released by a signed Session carries one)"
    ]


def test_a_sketch_without_a_witness_is_not_one(built: Built, tmp_path: Path) -> None:
    plain = dps.Sketch(built.sketch.feature_map, np.array([1, 1], dtype=np.int64), 2)
    assert _check(built.path, [plain])[0].startswith("witness 1: not a ledger witness")
    plain.save(tmp_path / "plain.sketch")
    assert _check(built.path, [tmp_path / "plain.sketch"])[0].startswith("witness 1: not a ledger witness")


def test_a_release_the_ledger_no_longer_holds(built: Built) -> None:
    later = _signed("ds", 1, built.witness["head"], built.witness["nonce"])
    assert _check(built.path, [later]) == [
        "witness 1: dataset 'ds' released this sketch as its release 2, but the ledger no longer holds that "
        "release: the ledger was rolled back (restored from an older copy) or the dataset deleted"
    ]
    gone = _signed("gone", 0, built.witness["head"], built.witness["nonce"])
    assert "dataset 'gone' released this sketch as its release 1" in _check(built.path, [gone])[0]


def test_another_release_at_the_same_place_is_told_apart_by_its_nonce(built: Built) -> None:
    """Same dataset, count and head, another nonce: the release there is not this sketch."""
    other = _signed("ds", 0, built.witness["head"], "0" * 32)
    assert _check(built.path, [other]) == [
        "witness 1: dataset 'ds' released this sketch as its release 1, but the chain there follows "
        "another history: the ledger was rolled back and released from again"
    ]


def test_the_same_place_reached_by_another_history(built: Built) -> None:
    other_head = _signed("ds", 0, "e" * 64, built.witness["nonce"])
    assert _check(built.path, [other_head]) == [
        "witness 1: dataset 'ds' released this sketch as its release 1, but the chain there follows "
        "another history: the ledger was rolled back and released from again"
    ]


def test_each_witness_is_numbered_and_a_later_release_keeps_the_first_valid(
    built: Built, tmp_path: Path
) -> None:
    L = Ledger(built.path, key=KEY)
    second, _, _ = _append(L, tmp_path, "second")
    L.close()
    assert second["after"] == 1
    assert _check(built.path, [built.witness, second]) == []
    problems = _check(built.path, [second, {}, {**built.witness, "mac": "0"}])
    assert [p.split(":")[0] for p in problems] == ["witness 2", "witness 3"]
