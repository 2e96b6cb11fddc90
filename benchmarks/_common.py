"""Shared helpers of the benchmark scripts (not part of the library).

* machine / environment information for the report header;
* in-process wall-clock timing (median of repeats);
* peak-memory measurement of one call in a fresh subprocess: the script re-invokes itself with
  ``--child <json config>``; the child imports, builds its data, resets the kernel's peak-RSS
  watermark, runs the measured call once and prints one JSON line with the wall time and the
  **peak extra RSS** = peak RSS during the call − RSS just before the call;
* markdown report writing.

Library version: the parent copies ``opendp_sketch/`` to a temporary directory at start and
imports it from there (children too, via ``PYTHONPATH``), so one run measures one version even if
the working tree changes meanwhile; the report records the git commit, any uncommitted library
changes and a hash of the measured sources.

Machine load: every measurement also records the CPU used by *other* processes meanwhile
(:class:`Probe`), and full runs wait (``--wait-quiet``) for the machine to go idle first.

Memory method: on Linux the child writes ``5`` to ``/proc/self/clear_refs`` (resets ``VmHWM``)
right before the call and reads ``VmHWM`` from ``/proc/self/status`` after it, so peaks reached
while importing or generating data do not mask the call's own peak. Where that is unavailable it
falls back to ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (a lower bound on the extra memory if
the set-up peaked higher than the call). RSS counts everything the process touches (numpy
buffers, Python objects, thread stacks, BLAS buffers), not only numpy allocations.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
_CHILD_TAG = "BENCH_CHILD_RESULT:"
_RUN_PROBE = None
#: other processes using more CPU than this (cores) during a measurement count as a disturbance
BUSY_CORES = 0.3
_SNAPSHOT_ENV = "OPENDP_SKETCH_BENCH_SNAPSHOT"
_SNAPSHOT_INFO: str | None = None


# -- command line -----------------------------------------------------------------------------


def pop_positive_int(argv: list[str], flag: str) -> int | None:
    """Remove ``flag N`` from ``argv`` (an option the shared parser does not know) and return
    ``N``, a positive integer, or ``None`` without the flag."""
    if flag not in argv:
        return None
    k = argv.index(flag)
    try:
        value = int(argv[k + 1])
    except (IndexError, ValueError):
        raise SystemExit(f"{flag} needs a positive integer") from None
    if value <= 0:
        raise SystemExit(f"{flag} needs a positive integer")
    del argv[k : k + 2]
    return value


def local_spark(app: str) -> Any:
    """A ``local[2]`` Spark session for a benchmark (UI off, loopback, 6g driver memory), its
    Python workers importing the library snapshot this run measures (the JVM's working
    directory comes first on their ``sys.path``)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    cwd = os.getcwd()
    os.chdir(os.environ.get(_SNAPSHOT_ENV, cwd))
    try:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "6g")
            .getOrCreate()
        )
    finally:
        os.chdir(cwd)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parse_args(
    description: str, argv: Sequence[str] | None = None, default_repeats: int = 3
) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small smoke run (seconds, not representative)")
    p.add_argument(
        "--out-dir",
        default=None,
        help="where to write <name>.md / <name>.png (default: benchmarks/results, "
        "or benchmarks/results/quick with --quick)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=default_repeats,
        help=f"measurements per configuration (>= 3, default {default_repeats})",
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        help="before each measurement wait up to this many seconds for other processes to go "
        "idle (default 120, 0 with --quick)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        help=f"repeat a measurement disturbed by other processes (> {BUSY_CORES} cores) up to this many "
        "times, keeping the least disturbed one (default 3, 1 with --quick)",
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats < 3:
        p.error("--repeats must be at least 3")
    if args.wait_quiet is None:
        args.wait_quiet = 0.0 if args.quick else 120.0
    if args.max_attempts is None:
        args.max_attempts = 1 if args.quick else 3
    if args.max_attempts < 1:
        p.error("--max-attempts must be at least 1")
    pin_library_snapshot()
    global _RUN_PROBE
    _RUN_PROBE = Probe(include_children=True).__enter__()
    return args


def pin_library_snapshot() -> str:
    """Copy ``opendp_sketch/`` to a temporary directory and import it from there, here and in
    every child process (via ``PYTHONPATH``), so one run measures one version of the library even
    if the working tree is edited meanwhile. Returns the snapshot directory."""
    snap = os.environ.get(_SNAPSHOT_ENV)
    if snap:  # a child, or already pinned
        if snap not in sys.path:
            sys.path.insert(1, snap)
        return snap
    if "opendp_sketch" in sys.modules:
        raise RuntimeError("pin_library_snapshot() must run before opendp_sketch is imported")
    global _SNAPSHOT_INFO
    _SNAPSHOT_INFO = git_state()
    snap = tempfile.mkdtemp(prefix="opendp_sketch_bench_")
    shutil.copytree(
        REPO_ROOT / "opendp_sketch",
        Path(snap) / "opendp_sketch",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    digest = hashlib.sha256()
    for f in sorted((Path(snap) / "opendp_sketch").rglob("*.py")):
        digest.update(f.relative_to(snap).as_posix().encode())
        digest.update(f.read_bytes())
    _SNAPSHOT_INFO += f"; measured a snapshot copied at start, sources sha256 {digest.hexdigest()[:12]}"
    os.environ[_SNAPSHOT_ENV] = snap
    os.environ["PYTHONPATH"] = os.pathsep.join([snap, *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(1, snap)  # after the script's own directory, before site-packages
    atexit.register(shutil.rmtree, snap, True)
    return snap


def run_background_load() -> float | None:
    """Average CPU cores used by other processes since :func:`parse_args`."""
    return None if _RUN_PROBE is None else _RUN_PROBE.read().background_cores


def out_dir(args: argparse.Namespace) -> Path:
    if args.out_dir is not None:
        d = Path(args.out_dir)
    else:
        d = RESULTS_DIR / "quick" if args.quick else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def command_line() -> str:
    """The command that started this run, relative to the repository root when possible."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_s = str(script.relative_to(REPO_ROOT))
    except ValueError:
        script_s = str(script)
    return shlex.join([sys.executable, script_s, *sys.argv[1:]])


# -- environment ------------------------------------------------------------------------------


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


def git_state() -> str:
    """HEAD commit and any uncommitted changes to the library (what was actually measured)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "opendp_sketch", "pyproject.toml"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "n/a"
    files = [ln[3:] for ln in dirty if ln.strip()]
    return f"{head}" + (f" + uncommitted changes to {', '.join(files)}" if files else " (clean library tree)")


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
        "opendp-sketch": f"{_pkg_version('opendp-sketch')}, git {_SNAPSHOT_INFO or git_state()}",
        "platform": platform.platform(),
        "BLAS thread env": json.dumps(blas) if blas else "(not set)",
    }


# -- timing and machine load ------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


# -- memory (child side) ----------------------------------------------------------------------


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


# -- memory (parent side) ---------------------------------------------------------------------


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


# -- reporting --------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    """Compact number: 3 significant digits, thousands separators, scientific when tiny."""
    if x is None:
        return "–"
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 100:
        return f"{x:,.0f}"
    if ax >= 1e-3:
        return f"{x:.3g}"
    return f"{x:.2e}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def machine_table(info: dict[str, str]) -> str:
    return md_table(["", ""], [[k, v] for k, v in info.items()])


def write_report(path: Path, title: str, info: dict[str, str], body: str, quick: bool) -> None:
    parts = [f"# {title}", ""]
    if quick:
        parts += ["> **QUICK smoke run** (`--quick`): tiny sizes, numbers are not representative.", ""]
    info = dict(info)
    load = run_background_load()
    info["other processes' CPU use during the run"] = (
        "n/a" if load is None else f"{load:.2f} cores on average (0 = quiet machine)"
    )
    info["load average at end (1/5/15 min)"] = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    parts += ["## Machine and run", "", machine_table(info), "", body.rstrip(), ""]
    path.write_text("\n".join(parts))
    print(f"wrote {path}")


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)
