"""Machine and environment information for a report's header."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .cli import command_line
from .snapshot import git_state, snapshot_info


def _pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _total_ram_gb() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().total / 2**30
    except ImportError:
        return None


def machine_info() -> dict[str, str]:
    import numpy as np

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    ram = _total_ram_gb()
    try:
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        load = "n/a"
    blas = {
        k: os.environ[k]
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
        if k in os.environ
    }
    return {
        "date (UTC)": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "command": f"`{command_line()}` (run from the repository root)",
        "cpu count": f"{os.cpu_count()} (os.cpu_count), {affinity} usable (sched_getaffinity)",
        "cpu model": _cpu_model(),
        "RAM": f"{ram:.1f} GiB" if ram is not None else "n/a",
        "load average at start (1/5/15 min)": load,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "opendp": _pkg_version("opendp"),
        "opendp-sketch": f"{_pkg_version('opendp-sketch')}, git {snapshot_info() or git_state()}",
        "platform": platform.platform(),
        "BLAS thread env": json.dumps(blas) if blas else "(not set)",
    }
