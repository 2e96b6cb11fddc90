"""Count the bad-input cases the property tests try, and how each ended.

Runs ``tests/property/test_hardening.py`` under pytest with ``OPENDP_SKETCH_HARDENING_LOG`` set,
so every case hypothesis tries appends ``{"category", "outcome", "released"}`` to a log, then
tabulates per category: cases tried, cases refused with a clean error (``ValueError`` /
``SketchFormatError`` / CLI exit 2), valid results, and **releases that followed a refusal**
(must be 0: a refused case never invokes a measurement, spends budget or writes a sketch file).
The baseline in the same run is the set of valid inputs: they must all release (or load), so
"ok" and "released" agree for the release paths.

Also reruns the privacy audit (``tests/privacy/test_audit.py``) and reports its pass/fail.

Usage: ``python benchmarks/bench_hardening.py [--quick] [--out-dir DIR]`` — full mode multiplies
hypothesis' examples by 5 (``HARDENING_SCALE=5``, a few minutes); ``--quick`` uses the default
examples (under a minute).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib as C  # noqa: E402

NAME = "bench_hardening"


def run_pytest(paths: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:logging",
            "-m",
            "not slow",
            *paths,
        ],
        cwd=C.REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return proc.returncode, tail, time.perf_counter() - t0


def main() -> None:
    args = C.parse_args(__doc__)
    scale = 1 if args.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "cases.jsonl"
        env = {**os.environ, "OPENDP_SKETCH_HARDENING_LOG": str(log), "HARDENING_SCALE": str(scale)}
        C.progress(f"property tests with HARDENING_SCALE={scale}")
        code, summary, seconds = run_pytest(["tests/property/test_hardening.py"], env)
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    C.progress(f"{len(records)} cases, pytest: {summary}")
    audit_env = {k: v for k, v in os.environ.items() if k != "OPENDP_SKETCH_HARDENING_LOG"}
    C.progress("privacy audit")
    audit_code, audit_summary, audit_seconds = run_pytest(["tests/privacy/test_audit.py"], audit_env)

    by_cat: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        c = by_cat[r["category"]]
        c["tried"] += 1
        c[r["outcome"]] += 1
        c["released"] += bool(r["released"])
        c["released after error"] += bool(r["released"]) and r["outcome"] == "error"
    rows = []
    total: collections.Counter = collections.Counter()
    for cat in sorted(by_cat):
        c = by_cat[cat]
        total.update(c)
        rows.append([cat, c["tried"], c["error"], c["ok"], c["released"], c["released after error"]])
    rows.append(
        [
            "**all**",
            total["tried"],
            total["error"],
            total["ok"],
            total["released"],
            total["released after error"],
        ]
    )
    table = C.md_table(
        [
            "category",
            "cases tried",
            "clean errors",
            "valid results",
            "released",
            "released after an error (must be 0)",
        ],
        rows,
    )
    body = "\n".join(
        [
            "Every case hypothesis drew in `tests/property/test_hardening.py` (bad shapes and dtypes, NaN/±inf, "
            "±1e308 and subnormal values, empty data, wrong or duplicate column names, wrong parameter types, "
            "truncated/bit-flipped/tampered sketch files, tampered feature-map specs, bad CLI files, schemas and "
            "options), by category. *Clean error* = `ValueError`/`SketchFormatError` (CLI: exit code 2 with a "
            "message); any other exception fails the test run. *Released* = a sketch was returned by a release "
            "call, a `dp.Context` query was answered, or the CLI wrote a sketch file. For errors the tests also "
            "check that no OpenDP measurement was invoked (or the Context budget is unchanged, or no file exists).",
            "",
            f"Command: `{C.command_line()}`; hypothesis examples × {scale}.",
            "",
            table,
            "",
            f"- property tests: exit code {code} — `{summary}` ({seconds:.0f} s)",
            f"- privacy audit (`tests/privacy/test_audit.py`, not slow): exit code {audit_code} — "
            f"`{audit_summary}` ({audit_seconds:.0f} s)",
            "",
            "The comparison of the same run: valid inputs of the release paths all released (`valid results` = "
            "`released` for `release_sketch …`, `dp.Context …` and `CLI release`), refused inputs never did.",
        ]
    )
    info = C.machine_info()
    out = C.out_dir(args) / f"{NAME}.md"
    C.write_report(out, "Hardening: bad-input cases and how they ended", info, body, args.quick)
    if code != 0 or audit_code != 0 or total["released after error"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
