"""Smoke runs of the benchmark scripts (``--quick``): they run and write a results table.

Marked slow: they take a minute or two and measure nothing a test should assert on.
"""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "bench_feature_sum",
        "bench_race",
        "bench_noise",
        "bench_m2m",
        "bench_m2m_speed",
        "bench_kde",
        "bench_classify",
        "bench_distance",
        "bench_jl",
        "bench_stream",
        "bench_dask",
        "bench_cli",
        "bench_schema_cli",
        "bench_ckm",
        "bench_ledger",
        "bench_subsampling",
        "bench_hardening",
        "bench_pca",
        "bench_race_regression",
        "bench_decoder_pgm",
        "bench_rows_fraction",
        "bench_report",
        "bench_tall",
        "bench_wide",
    ],
)
def test_benchmark_quick_run_writes_its_table(name, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick", "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (tmp_path / f"{name}.md").read_text()
    assert "| configuration" in table or "| family" in table or "| m " in table or "|---" in table
    assert "numpy" in table and "opendp" in table
