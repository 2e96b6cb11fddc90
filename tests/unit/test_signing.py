"""``opendp_sketch.signing``: key checks (never echoing the key), HMAC-SHA256 signatures against
the standard's test vectors, and verification refusing anything but the exact signature."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from opendp_sketch.signing import MIN_KEY_BYTES, SignatureError, check_key, sign, signature_matches

KEY = bytes(range(32))


# -- check_key ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key, expected",
    [
        (KEY, KEY),
        (bytearray(KEY), KEY),
        (memoryview(KEY), KEY),
        ("a" * 16, b"a" * 16),
        ("é" * 8, "é".encode() * 8),  # 8 characters, 16 UTF-8 bytes
    ],
)
def test_keys_are_returned_as_bytes(key: Any, expected: bytes) -> None:
    out = check_key(key)
    assert type(out) is bytes and out == expected


def test_the_shortest_key_is_sixteen_bytes() -> None:
    assert MIN_KEY_BYTES == 16
    assert check_key(b"k" * 16) == b"k" * 16
    with pytest.raises(ValueError, match=r"^key must have at least 16 bytes \(got 15\), e\.g\."):
        check_key(b"k" * 15)
    with pytest.raises(ValueError, match=r"\(got 14\)"):  # counted in UTF-8 bytes, not characters
        check_key("é" * 7)
    with pytest.raises(ValueError, match=r"\(got 0\)"):
        check_key("")


@pytest.mark.parametrize("key", [None, 12345678901234567890, 1.5, ["k"] * 16, object()])
def test_other_types_are_refused_by_name(key: Any) -> None:
    with pytest.raises(ValueError, match=rf"^key must be bytes or str, got {type(key).__name__}$"):
        check_key(key)


def test_a_short_key_is_never_shown() -> None:
    secret = "hunter2-secret"
    with pytest.raises(ValueError) as info:
        check_key(secret)
    assert secret not in str(info.value) and "hunter2" not in repr(info.value)


def test_signature_error_is_a_value_error() -> None:
    assert issubclass(SignatureError, ValueError)


# -- sign and signature_matches -----------------------------------------------------------------
def test_sign_matches_rfc_4231_test_case_2() -> None:
    """RFC 4231, test case 2 (HMAC-SHA-256 with a short key)."""
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign(b"Jefe", b"what do ya want for nothing?") == expected


def test_sign_is_64_lowercase_hex_digits_of_hmac_sha256() -> None:
    for message in (b"", b"a", b"\x00" * 1000, "ρ = 0.5".encode()):
        out = sign(KEY, message)
        assert len(out) == 64 and out == out.lower() and int(out, 16) >= 0
        assert out == hmac.new(KEY, message, hashlib.sha256).hexdigest()
        assert out != hashlib.sha256(message).hexdigest()  # keyed, not a bare checksum


def test_signature_matches_only_the_same_key_and_message() -> None:
    message = b"release 1"
    mac = sign(KEY, message)
    assert signature_matches(KEY, message, mac)
    assert not signature_matches(KEY[::-1], message, mac)
    assert not signature_matches(KEY, b"release 2", mac)
    assert not signature_matches(KEY, message + b" ", mac)
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    assert not signature_matches(KEY, message, flipped)


@pytest.mark.parametrize("signature", [None, b"", 0, "", "00", ["x"]])
def test_signature_matches_refuses_missing_or_non_text_signatures(signature: Any) -> None:
    assert signature_matches(KEY, b"m", signature) is False


def test_signature_matches_refuses_the_bytes_and_upper_case_of_a_good_signature() -> None:
    mac = sign(KEY, b"m")
    assert signature_matches(KEY, b"m", mac) is True
    assert signature_matches(KEY, b"m", mac.encode()) is False
    assert mac != mac.upper()  # the key and message are fixed: this signature has hex letters
    assert signature_matches(KEY, b"m", mac.upper()) is False
