"""Deployment settings of the ``message_dedup`` DAG: Airflow Variables with documented defaults.

| Variable              | meaning                                  | default                              |
|-----------------------|------------------------------------------|--------------------------------------|
| ``msgdedup_raw_root`` | root of the raw partitions               | ``$AIRFLOW_HOME/msgdedup/raw``       |
| ``msgdedup_warehouse``| the warehouse (docs/architecture.md)     | ``$AIRFLOW_HOME/msgdedup/warehouse`` |
| ``msgdedup_config``   | address-settings YAML passed as --config | empty: the engine's defaults         |

Values are plain local paths or ``file://`` URLs (the publish step and the partition sensor
use the local file system). They are validated before use (:mod:`.partitions`).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

DAG_ID = "message_dedup"

VAR_RAW_ROOT = "msgdedup_raw_root"
VAR_WAREHOUSE = "msgdedup_warehouse"
VAR_CONFIG = "msgdedup_config"

# The partition is complete when this marker exists in its directory (written last by the
# producer / exporter, like Hadoop's FileOutputCommitter does).
SUCCESS_MARKER = "_SUCCESS"

# Sensor: how often to look, and when to give up (the task then fails with a clear message).
SENSOR_POKE_INTERVAL = timedelta(seconds=30)
SENSOR_TIMEOUT = timedelta(hours=6)

SPARK_CONN_ID = "spark_default"

# Name (stable across deployments) of the Asset updated by every publish.
PUBLISHED_ASSET_NAME = "msgdedup_published"


def airflow_home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")


def default_raw_root() -> str:
    return str(airflow_home() / "msgdedup" / "raw")


def default_warehouse() -> str:
    return str(airflow_home() / "msgdedup" / "warehouse")


def get_variable(key: str, default: str) -> str:
    """An Airflow Variable (through the Task SDK), or ``default`` when it is not set."""
    from airflow.sdk import Variable

    value = Variable.get(key, default=default)
    return default if value is None else str(value).strip()


def parse_time_warehouse() -> str:
    """The warehouse as known when the DAG file is parsed (for the Asset URI).

    Reading a Variable at parse time is supported by the dag-processor; anywhere else (a plain
    ``DagBag`` in a test) it may be unavailable, then the documented default is used.
    """
    try:
        return get_variable(VAR_WAREHOUSE, default_warehouse())
    except Exception:  # noqa: BLE001 - no Variable access outside the dag-processor/worker
        return default_warehouse()


def venv_bin() -> Path:
    """The bin/ directory of the interpreter running Airflow (the project's venv)."""
    return Path(sys.executable).parent


def spark_env() -> dict[str, str]:
    """Environment for spark-submit: the venv's spark-submit first on PATH, its python for workers."""
    bin_dir = venv_bin()
    python = str(bin_dir / "python")
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{path}",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or python,
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON") or python,
    }
