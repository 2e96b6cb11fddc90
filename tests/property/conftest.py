"""Helpers of the property tests: a per-case log and a counter of measurement invocations.

Set ``OPENDP_SKETCH_HARDENING_LOG=<file>`` and every case tried by ``test_hardening.py`` appends one
JSON line ``{"category", "outcome", "released"}`` to that file; ``benchmarks/bench_hardening.py``
counts them. Without the variable nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import opendp.prelude as dp
import pytest

LOG_ENV = "OPENDP_SKETCH_HARDENING_LOG"


class CaseLog:
    """Callable ``log(category, outcome, released)``; a no-op unless :data:`LOG_ENV` is set."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def __call__(self, category: str, outcome: str, released: bool) -> None:
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"category": category, "outcome": outcome, "released": released}) + "\n")


@pytest.fixture(scope="session")
def case_log() -> CaseLog:
    return CaseLog(os.environ.get(LOG_ENV))


class Invocations:
    """Number of OpenDP measurement invocations (each one is a release that draws noise)."""

    count = 0


@contextlib.contextmanager
def counting_invocations() -> Iterator[type[Invocations]]:
    """Count calls of ``dp.Measurement.__call__`` inside the block (the class attribute is restored)."""
    original = dp.Measurement.__call__

    def counted(self, arg):  # noqa: ANN001 - same signature as OpenDP's
        Invocations.count += 1
        return original(self, arg)

    Invocations.count = 0
    dp.Measurement.__call__ = counted
    try:
        yield Invocations
    finally:
        dp.Measurement.__call__ = original


@pytest.fixture(scope="session")
def invocations():
    """The :func:`counting_invocations` context manager (session-scoped, so hypothesis accepts it)."""
    return counting_invocations
