"""The library version one run measures.

The parent copies ``opendp_sketch/`` to a temporary directory at start and imports it from there
(children too, via ``PYTHONPATH``), so one run measures one version even if the working tree
changes meanwhile; the report records the git commit, any uncommitted library changes and a hash
of the measured sources.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .paths import BENCH_DIR, REPO_ROOT

SNAPSHOT_ENV = "OPENDP_SKETCH_BENCH_SNAPSHOT"
_SNAPSHOT_INFO: str | None = None


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


def git_commit() -> str:
    """The short HEAD commit (``?`` without git)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH_DIR, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "?"


def snapshot_info() -> str | None:
    """What :func:`pin_library_snapshot` recorded (commit, changes, sources hash), if it ran here."""
    return _SNAPSHOT_INFO


def pin_library_snapshot() -> str:
    """Copy ``opendp_sketch/`` to a temporary directory and import it from there, here and in
    every child process (via ``PYTHONPATH``), so one run measures one version of the library even
    if the working tree is edited meanwhile. Returns the snapshot directory."""
    snap = os.environ.get(SNAPSHOT_ENV)
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
    os.environ[SNAPSHOT_ENV] = snap
    os.environ["PYTHONPATH"] = os.pathsep.join([snap, *filter(None, [os.environ.get("PYTHONPATH")])])
    sys.path.insert(1, snap)  # after the script's own directory, before site-packages
    atexit.register(shutil.rmtree, snap, True)
    return snap
