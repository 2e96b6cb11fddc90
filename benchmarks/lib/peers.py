"""Peers and their failures: a local Spark session, and the reason a failing peer gives."""

from __future__ import annotations

import os
import sys
from typing import Any

from .snapshot import SNAPSHOT_ENV


def local_spark(app: str) -> Any:
    """A ``local[2]`` Spark session for a benchmark (UI off, loopback, 6g driver memory), its
    Python workers importing the library snapshot this run measures (the JVM's working
    directory comes first on their ``sys.path``)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    cwd = os.getcwd()
    os.chdir(os.environ.get(SNAPSHOT_ENV, cwd))
    try:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", "6g")
            .getOrCreate()
        )
    finally:
        os.chdir(cwd)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def failure_reason(e: BaseException) -> str:
    """The most specific line of an error (OpenDP wraps a Python failure's message in a trace)."""
    lines = [ln.strip().strip('")') for ln in str(e).splitlines() if ln.strip().strip('")')]
    inner = [ln for ln in lines if "FailedFunction(" in ln or "Error" in ln or "budget" in ln]
    return ((inner or lines or [""])[-1])[:120].replace("|", "/")
