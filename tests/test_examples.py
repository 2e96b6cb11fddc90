"""Smoke runs of the paper-figure scripts in ``examples/``: each one with ``--quick`` in a
subprocess, writing into a temporary directory; the PNG and the CSV must be written and the CSV
must have the documented columns, at least one row, and finite numbers."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys

import pytest

pl = pytest.importorskip("polars")
pytest.importorskip(
    "matplotlib", reason="the examples plot with matplotlib (pip install 'opendp-sketch[plot]')"
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = {
    "ckm_fig1_kmeans": ["method", "epsilon", "relative_sse_median", "relative_sse_worst", "trials"],
    "race_regression": ["noise", "epsilon", "test_mse", "mse_ratio", "releases"],
    "m2m_fig3_statistics": ["dataset", "sketch", "epsilon", "mean_mre", "moment2_mre", "cdf_emd", "releases"],
    "m2m_fig4_logistic": ["sketch", "epsilon", "auc_mean", "auc_min", "auc_max", "releases"],
    "race_fig2_kde": ["dataset", "sketch", "epsilon", "l2_error", "mean_relative_error", "releases"],
    "race_classification": [
        "dataset",
        "method",
        "epsilon",
        "accuracy_mean",
        "accuracy_min",
        "accuracy_max",
        "releases",
    ],
    "similarity_l1_distance": ["dim", "method", "epsilon", "mean_relative_error", "releases"],
    "similarity_classification": [
        "method",
        "epsilon",
        "accuracy_mean",
        "accuracy_min",
        "accuracy_max",
        "build_seconds",
        "predict_seconds",
        "build_ratio",
        "releases",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_quick_run(name: str, tmp_path: pathlib.Path) -> None:
    script = ROOT / "examples" / f"{name}.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    png, csv = tmp_path / f"{name}.png", tmp_path / f"{name}.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pl.read_csv(csv)
    assert table.columns == EXAMPLES[name]
    assert table.height > 0
    numbers = [v for col in table.columns if table[col].dtype.is_numeric() for v in table[col].to_list()]
    assert numbers and all(v is not None and math.isfinite(v) for v in numbers)
    assert all(e > 0 for e in table["epsilon"].to_list())


@pytest.mark.slow
def test_kde_from_sketch_quick_run(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "kde_from_sketch.py"), "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = pl.read_csv(tmp_path / "kde_from_sketch.csv")
    assert table.columns[:3] == ["x", "exact kernel average", "sketch without noise"]
    assert table.height == 201 and (tmp_path / "kde_from_sketch.png").stat().st_size > 0
    assert all(math.isfinite(v) for col in table.columns for v in table[col].to_list())


def test_examples_are_standalone() -> None:
    """The scripts import only the package, OpenDP, numpy, Polars, SciPy, matplotlib, the
    standard library and their shared ``_setup`` (they must run from a plain install with the
    plot extra)."""
    allowed = {"opendp_sketch", "opendp", "numpy", "polars", "scipy", "matplotlib", "_setup"}
    for script in sorted((ROOT / "examples").glob("*.py")):
        for line in script.read_text().splitlines():
            words = line.split()
            if line.startswith(("import ", "from ")) and words[1] != "__future__":
                top = words[1].split(".")[0]
                assert top in allowed or top in sys.stdlib_module_names, f"{script.name}: {line}"


def test_examples_write_outside_the_repository_by_default(tmp_path) -> None:
    """Without --out a script writes to ./opendp-sketch-output, never into examples/output."""
    before = sorted(p.name for p in (ROOT / "examples" / "output").iterdir())
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "race_regression.py"), "--quick"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert (tmp_path / "opendp-sketch-output").is_dir()
    assert sorted(p.name for p in (ROOT / "examples" / "output").iterdir()) == before
