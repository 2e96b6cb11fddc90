"""A curator's secret key and HMAC-SHA256 signatures for sketch files and ledger rows.

Only the standard library is used (:mod:`hmac`, :mod:`hashlib`). A signature proves that whoever
made it held the key; a SHA-256 checksum alone proves nothing, since anyone can recompute it. See
``docs/sessions.md`` ("Tamper evidence") for what signing does and does not protect against.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

__all__ = ["MIN_KEY_BYTES", "SignatureError", "check_key", "sign", "signature_matches"]

#: shortest key accepted: 128 bits (``secrets.token_bytes(32)`` gives 256)
MIN_KEY_BYTES = 16


class SignatureError(ValueError):
    """A signature is missing, or does not match the given key (another key, or modified content)."""


def check_key(key: Any) -> bytes:
    """The key as bytes, or a clear error that never shows the key.

    :param key: ``bytes`` (or a ``str``, taken as UTF-8) of at least :data:`MIN_KEY_BYTES` bytes
    :raises ValueError: for another type or a short key
    :example:

    >>> import secrets
    >>> len(check_key(secrets.token_bytes(32)))
    32
    >>> check_key(b"short")
    Traceback (most recent call last):
    ...
    ValueError: key must have at least 16 bytes (got 5), e.g. secrets.token_bytes(32)
    """
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise ValueError(f"key must be bytes or str, got {type(key).__name__}")
    key = bytes(key)
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"key must have at least {MIN_KEY_BYTES} bytes (got {len(key)}), e.g. secrets.token_bytes(32)"
        )
    return key


def sign(key: bytes, message: bytes) -> str:
    """HMAC-SHA256 of ``message`` under ``key``, as 64 hex digits."""
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def signature_matches(key: bytes, message: bytes, signature: Any) -> bool:
    """Whether ``signature`` is the HMAC-SHA256 of ``message`` under ``key`` (constant-time)."""
    return isinstance(signature, str) and hmac.compare_digest(sign(key, message), signature)
