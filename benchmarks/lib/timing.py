"""Wall-clock timing and machine load.

Every measurement also records the CPU used by *other* processes meanwhile (:class:`Probe`), and
full runs wait (``--wait-quiet``) for the machine to go idle first, and measure again when other
processes disturbed a measurement (:func:`quiet_measure`).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: other processes using more CPU than this (cores) during a measurement count as a disturbance
BUSY_CORES = 0.3
_RUN_PROBE: Probe | None = None
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _busy_cpu_s() -> float | None:
    """CPU-seconds all processes have used so far (all cores; ``None`` without /proc/stat)."""
    try:
        vals = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = vals
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


def _own_cpu_s(include_children: bool = False) -> float:
    t = os.times()
    own = t.user + t.system
    return own + t.children_user + t.children_system if include_children else own


class Probe:
    """Wall time, this process's CPU time, and the CPU used meanwhile by *other* processes.

    ``background_cores`` = (machine-wide busy CPU-seconds − this process's CPU-seconds) / wall
    time: about 0 on a quiet machine, 1 when another process keeps one core busy. It tells
    whether a timing was disturbed (jiffy resolution, so only meaningful over ≳ 0.1 s).
    ``include_children`` also counts waited-for subprocesses as "this process".
    """

    def __init__(self, include_children: bool = False) -> None:
        self.include_children = include_children
        self.wall = self.cpu = 0.0
        self.background_cores: float | None = None

    def __enter__(self) -> Probe:
        self._busy0, self._own0 = _busy_cpu_s(), _own_cpu_s(self.include_children)
        self._t0 = time.perf_counter()
        return self

    def read(self) -> Probe:
        """Update ``wall``, ``cpu`` and ``background_cores`` to now (the probe keeps running)."""
        self.wall = time.perf_counter() - self._t0
        own1, busy1 = _own_cpu_s(self.include_children), _busy_cpu_s()
        self.cpu = own1 - self._own0
        if self._busy0 is None or busy1 is None or self.wall <= 0:
            self.background_cores = None
        else:
            self.background_cores = round(max(0.0, (busy1 - self._busy0) - self.cpu) / self.wall, 3)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.read()


def start_run_probe() -> None:
    """Start the probe of the whole run (read by :func:`run_background_load`)."""
    global _RUN_PROBE
    _RUN_PROBE = Probe(include_children=True).__enter__()


def run_background_load() -> float | None:
    """Average CPU cores used by other processes since the run's start (``lib.parse_args``)."""
    return None if _RUN_PROBE is None else _RUN_PROBE.read().background_cores


def background_load(seconds: float = 1.0) -> float | None:
    """CPU cores used by other processes over the next ``seconds`` (this process sleeps)."""
    with Probe() as p:
        time.sleep(seconds)
    return p.background_cores


def wait_for_quiet(max_wait_s: float, threshold_cores: float = 0.3) -> float | None:
    """Sleep (up to ``max_wait_s``) until other processes use < ``threshold_cores`` for 1 s.

    Returns the last background reading. With ``max_wait_s <= 0`` it returns at once.
    """
    if max_wait_s <= 0:
        return None
    deadline = time.monotonic() + max_wait_s
    announced = False
    while True:
        bg = background_load(1.0)
        if bg is None or bg < threshold_cores or time.monotonic() >= deadline:
            return bg
        if not announced:
            progress(
                f"machine busy ({bg:.2f} cores used by other processes); waiting up to {max_wait_s:.0f} s"
            )
            announced = True


def quiet_measure(
    measure: Callable[[], tuple[Any, float | None]], args: argparse.Namespace
) -> tuple[Any, float | None]:
    """Run ``measure()`` -> ``(value, background_cores)`` after waiting for a quiet machine; if
    other processes used more than :data:`BUSY_CORES` meanwhile, try again (up to
    ``args.max_attempts`` in all) and keep the least disturbed attempt."""
    best: tuple[Any, float | None] | None = None
    for attempt in range(args.max_attempts):
        wait_for_quiet(args.wait_quiet, BUSY_CORES)
        value, bg = measure()
        if best is None or (bg is not None and (best[1] is None or bg < best[1])):
            best = (value, bg)
        if bg is None or bg <= BUSY_CORES:
            break
        if attempt + 1 < args.max_attempts:
            progress(f"disturbed ({bg:.2f} cores used by other processes); measuring again")
    assert best is not None
    return best


def time_call(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def time_repeats(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    return [time_call(fn)[0] for _ in range(repeats)]


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))
