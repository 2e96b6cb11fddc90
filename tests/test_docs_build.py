"""The documentation site builds with ``mkdocs build --strict``: every page in the nav exists,
every internal link and anchor resolves, and every API docstring parses (mkdocstrings)."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs and mkdocstrings[python] are not installed (they are in the test extra)",
)
def test_docs_build_strict(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "\n".join(warnings) or done.stderr[-3000:]
    for page in ("index.html", "getting_started.html", "examples.html", "api.html"):
        assert (tmp_path / "site" / page).is_file()
