"""The command line every benchmark script shares (``--quick``, ``--out-dir``, ``--repeats``,
``--wait-quiet``, ``--max-attempts``) and where its results go."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .paths import REPO_ROOT, RESULTS_DIR
from .snapshot import pin_library_snapshot
from .timing import BUSY_CORES, start_run_probe


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


def parse_args(
    description: str, argv: Sequence[str] | None = None, default_repeats: int = 3
) -> argparse.Namespace:
    """The shared options; also pins the library snapshot this run measures and starts the
    probe of other processes' CPU use over the whole run."""
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
    start_run_probe()
    return args


def out_dir(args: argparse.Namespace) -> Path:
    """``--out-dir``, else ``benchmarks/results`` (``benchmarks/results/quick`` with ``--quick``)."""
    if args.out_dir is not None:
        d = Path(args.out_dir)
    else:
        d = RESULTS_DIR / "quick" if args.quick else RESULTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def out_stem(out: str | None, quick: bool, name: str) -> Path:
    """The path (without suffix) of a script taking ``--out``: the given one, else
    ``benchmarks/results/<name>`` (``benchmarks/results/quick/<name>`` with ``--quick``, so a
    smoke run never overwrites a full result)."""
    if out is not None:
        return Path(out)
    return RESULTS_DIR / "quick" / name if quick else RESULTS_DIR / name


def command_line() -> str:
    """The command that started this run, relative to the repository root when possible."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_s = str(script.relative_to(REPO_ROOT))
    except ValueError:
        script_s = str(script)
    return shlex.join([sys.executable, script_s, *sys.argv[1:]])
