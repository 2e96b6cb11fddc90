"""Code the benchmark scripts share (not part of the library). Scripts run as
``python benchmarks/bench_x.py`` have ``benchmarks/`` on ``sys.path`` and ``import lib as C``.

Modules, by job:

* :mod:`lib.paths` — the benchmarks folder, the repository root, ``results/``;
* :mod:`lib.snapshot` — the library version a run measures (a copy of ``opendp_sketch/`` pinned
  at start), the git commit;
* :mod:`lib.cli` — the shared command line (``--quick``, ``--out-dir``, ``--repeats``,
  ``--wait-quiet``, ``--max-attempts``) and where results go;
* :mod:`lib.timing` — wall-clock timing and the CPU other processes used meanwhile;
* :mod:`lib.memory` — peak extra RSS of one call in a fresh subprocess;
* :mod:`lib.machine` — machine and environment information for a report's header;
* :mod:`lib.report` — numbers, markdown tables and the report file;
* :mod:`lib.peers` — a local Spark session for peers, a failing peer's reason;
* :mod:`lib.tables` — the real tables of the tabular benchmarks, their public boxes and questions;
* :mod:`lib.variants` — the same schema releases decoded by each of several decoder variants;
* :mod:`lib.simulated` — simulated releases on common noise for design comparisons;
* :mod:`lib.random10` — the M2M paper's Random10 setting and the M2M speed measurement.

The package itself re-exports the helpers of the first eight modules, so ``C.parse_args``,
``C.write_report`` and so on read as before. Nothing here imports ``opendp_sketch`` at import
time: :func:`pin_library_snapshot` (called by :func:`parse_args`) must run first.
"""

from __future__ import annotations

from .cli import command_line, out_dir, out_stem, parse_args, pop_positive_int
from .machine import machine_info
from .memory import child_main, measure_in_child, run_child, run_child_quietly
from .paths import BENCH_DIR, REPO_ROOT, RESULTS_DIR
from .peers import failure_reason, local_spark
from .report import fmt, machine_table, md_table, write_report
from .snapshot import git_commit, git_state, pin_library_snapshot
from .timing import (
    BUSY_CORES,
    Probe,
    background_load,
    median,
    progress,
    quiet_measure,
    run_background_load,
    time_call,
    time_repeats,
    wait_for_quiet,
)

__all__ = [
    "BENCH_DIR",
    "BUSY_CORES",
    "REPO_ROOT",
    "RESULTS_DIR",
    "Probe",
    "background_load",
    "child_main",
    "command_line",
    "failure_reason",
    "fmt",
    "git_commit",
    "git_state",
    "local_spark",
    "machine_info",
    "machine_table",
    "md_table",
    "measure_in_child",
    "median",
    "out_dir",
    "out_stem",
    "parse_args",
    "pin_library_snapshot",
    "pop_positive_int",
    "progress",
    "quiet_measure",
    "run_background_load",
    "run_child",
    "run_child_quietly",
    "time_call",
    "time_repeats",
    "wait_for_quiet",
    "write_report",
]
