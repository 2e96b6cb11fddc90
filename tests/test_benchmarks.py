"""The benchmark suite (``benchmarks/manifest.toml``, run by ``benchmarks/run.py``).

The default tests check the suite's shape without running a benchmark: every script is in the
manifest, every result file is claimed by an entry, and no script imports another. The smoke runs
(``--quick``, marked slow: a minute or two each, and they measure nothing a test should assert
on) run every manifest entry that has a quick run and needs no extras.
"""

import ast
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"


def _runner():
    spec = importlib.util.spec_from_file_location("benchmarks_run", BENCH / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


RUN = _runner()
MANIFEST = RUN.load_manifest()
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name.startswith(("bench_", "plot_")))


def test_every_script_is_in_the_manifest():
    in_manifest = {e.script for e in MANIFEST.entries}
    assert sorted(set(SCRIPTS) - in_manifest) == []
    assert sorted(in_manifest - set(SCRIPTS)) == []


def test_every_result_file_is_claimed_by_an_entry():
    claimed = {r for e in MANIFEST.entries for r in e.results}
    present = {p.name for p in RESULTS.iterdir() if p.is_file()}
    assert sorted(present - claimed) == []


def test_every_claimed_result_exists_or_is_written_by_a_quick_run():
    absent = [
        (e.name, r) for e in MANIFEST.entries for r in e.results if not (RESULTS / r).exists() and not e.quick
    ]
    assert absent == []


def test_no_result_is_claimed_twice():
    results = [r for e in MANIFEST.entries for r in e.results]
    assert sorted({r for r in results if results.count(r) > 1}) == []


def test_every_script_has_a_quick_entry_or_is_a_figure():
    quick = {e.script for e in MANIFEST.entries if e.quick}
    assert sorted(s for s in SCRIPTS if s.startswith("bench_") and s not in quick) == []


def _imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_script_imports_another(script):
    """Scripts share code through ``benchmarks/lib/`` only."""
    local = {p.stem for p in BENCH.glob("*.py")}
    assert sorted(_imported_modules(BENCH / script) & local) == []


def test_lib_imports_no_script():
    local = {p.stem for p in BENCH.glob("*.py")}
    for path in (BENCH / "lib").glob("*.py"):
        assert sorted(_imported_modules(path) & local) == [], path.name


def test_the_runner_lists_the_manifest_and_dry_runs_the_quick_pass(capsys):
    assert RUN.main(["--list", "--markdown"]) == 0
    table = capsys.readouterr().out
    assert all(f"| `{e.name}` |" in table for e in MANIFEST.entries)
    assert RUN.main(["--quick", "--dry-run", "--only", "report", "real_tables_eps3"]) == 0
    out = capsys.readouterr().out
    assert "bench_report.py --out-dir benchmarks/results/quick --quick" in out
    assert "real_tables_eps3: skipped: no quick run" in out


def test_the_readme_table_is_the_manifest():
    """``benchmarks/README.md`` holds ``run.py --list --markdown`` (regenerate it when this fails)."""
    assert RUN.markdown_table(MANIFEST) in (BENCH / "README.md").read_text()


SMOKE = [e for e in MANIFEST.entries if e.quick and not e.needs]


@pytest.mark.slow
@pytest.mark.parametrize("entry", SMOKE, ids=[e.name for e in SMOKE])
def test_benchmark_quick_run_writes_its_results(entry, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--only", entry.name, "--out-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name in entry.results:
        assert (tmp_path / name).exists(), name
    table = (tmp_path / entry.results[0]).read_text()
    assert "|---" in table
    if "--out-dir" in entry.command:  # written by lib.write_report: the machine header
        assert "numpy" in table and "opendp" in table
