"""Result tables: compact numbers, markdown tables and the report file with its machine header."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .timing import run_background_load


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
