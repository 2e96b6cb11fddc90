"""The tall table of ``bench_tall.py`` and ``bench_compiled_counting.py``: one seeded Parquet file
of seven skewed numeric columns (gamma, public range [0, 200]) and three text columns with 8, 40
and 5 public labels, written in row groups; its schema is written here by hand, never read from
the rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SEED = 20261128
LABELS = {
    "region": [f"r{i}" for i in range(8)],
    "sector": [f"sector_{i:02d}" for i in range(40)],
    "grade": list("ABCDE"),
}
#: the public schema (``Schema.from_dict``)
SCHEMA: dict[str, Any] = {
    "columns": {
        **{f"x{i}": {"type": "numeric", "range": [0, 200]} for i in range(7)},
        **{k: {"type": "categorical", "labels": v} for k, v in LABELS.items()},
    }
}


def write_tall(path: Path, n: int, part: int) -> None:
    """Write ``n`` rows to the Parquet file ``path`` in row groups of ``part`` rows."""
    import polars as pl
    import pyarrow.parquet as pq

    rng = np.random.default_rng(SEED)
    writer = None
    for start in range(0, n, part):
        rows = min(part, n - start)
        cols: dict[str, Any] = {f"x{i}": rng.gamma(2.0, 10.0, rows) for i in range(7)}
        for name, labels in LABELS.items():
            cols[name] = np.array(labels)[rng.integers(0, len(labels), rows)]
        table = pl.DataFrame(cols).to_arrow()
        if writer is None:
            writer = pq.ParquetWriter(str(path), table.schema)
        writer.write_table(table, row_group_size=part)
    assert writer is not None
    writer.close()
