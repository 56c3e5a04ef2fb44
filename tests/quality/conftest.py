"""Shared fixtures of the quality-gate tests: one local SparkSession per test module."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = str(REPO / ".venv" / "bin" / "python")
os.environ.setdefault("PYSPARK_PYTHON", VENV_PYTHON)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", VENV_PYTHON)
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("msgdedup-quality-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()
