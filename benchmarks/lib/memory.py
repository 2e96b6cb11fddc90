"""Peak memory of one call, measured in a fresh subprocess.

The script re-invokes itself with ``--child <json config>``; the child imports, builds its data,
resets the kernel's peak-RSS watermark, runs the measured call once and prints one JSON line with
the wall time and the **peak extra RSS** = peak RSS during the call − RSS just before the call.

On Linux the child writes ``5`` to ``/proc/self/clear_refs`` (resets ``VmHWM``) right before the
call and reads ``VmHWM`` from ``/proc/self/status`` after it, so peaks reached while importing or
generating data do not mask the call's own peak. Where that is unavailable it falls back to
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (a lower bound on the extra memory if the set-up
peaked higher than the call). RSS counts everything the process touches (numpy buffers, Python
objects, thread stacks, BLAS buffers), not only numpy allocations.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .paths import REPO_ROOT
from .timing import Probe, quiet_measure, time_call

_CHILD_TAG = "BENCH_CHILD_RESULT:"


# -- child side -------------------------------------------------------------------------------


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _ru_maxrss_bytes() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024


def _current_rss_bytes() -> int:
    kb = _status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import psutil

    return psutil.Process().memory_info().rss


def measure_in_child(fn: Callable[[], Any]) -> dict[str, Any]:
    """Run ``fn`` once; return wall time, RSS before, peak RSS during and peak extra RSS."""
    gc.collect()
    reset = _reset_peak() and _status_kb("VmHWM") is not None
    before = _current_rss_bytes()
    ru_before = _ru_maxrss_bytes()
    with Probe() as probe:
        result = fn()
    elapsed = probe.wall
    if reset:
        peak = _status_kb("VmHWM") * 1024  # type: ignore[operator]
        method = "VmHWM after clear_refs reset"
    else:
        peak = max(_ru_maxrss_bytes(), ru_before)
        method = "ru_maxrss (no reset; lower bound)"
    return {
        "time_s": elapsed,
        "cpu_s": probe.cpu,
        "background_cores": probe.background_cores,
        "rss_before_mb": before / 2**20,
        "peak_rss_mb": peak / 2**20,
        "peak_extra_mb": max(peak - before, 0) / 2**20,
        "mem_method": method,
        "result": result,
    }


def child_main(
    config_json: str,
    setup: Callable[[dict[str, Any]], Callable[[], Any]],
    post: Callable[[dict[str, Any], Any], Any] | None = None,
) -> None:
    """Entry point of ``--child``: ``setup(config)`` builds data and returns the measured call."""
    config = json.loads(config_json)
    fn = setup(config)
    out = measure_in_child(fn)
    out["result"] = post(config, out["result"]) if post is not None else None
    # optional warm timings after the (cold) memory-measured call
    out["warm_times"] = [time_call(fn)[0] for _ in range(int(config.get("warm_repeats", 0)))]
    print(_CHILD_TAG + json.dumps(out), flush=True)


# -- parent side ------------------------------------------------------------------------------


def run_child(script: str | Path, config: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    """Run ``script --child config`` in a fresh interpreter and return its JSON report.

    ``config["env"]`` (optional) adds environment variables for that child only.
    """
    cmd = [sys.executable, str(script), "--child", json.dumps(config)]
    env = {**os.environ, **config.get("env", {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, env=env)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_CHILD_TAG):
            return json.loads(line[len(_CHILD_TAG) :])
    raise RuntimeError(
        f"child {config} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )


def run_child_quietly(script: str | Path, config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """:func:`run_child` under :func:`quiet_measure` (retried if other processes disturbed it)."""

    def measure():
        r = run_child(script, config)
        return r, r["background_cores"]

    return quiet_measure(measure, args)[0]
