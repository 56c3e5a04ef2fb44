"""Deployment settings of the ``message_dedup`` DAG: Airflow Variables with documented defaults.

| Variable              | meaning                                  | default                              |
|-----------------------|------------------------------------------|--------------------------------------|
| ``msgdedup_raw_root`` | root of the raw partitions               | ``$AIRFLOW_HOME/msgdedup/raw``       |
| ``msgdedup_warehouse``| the warehouse (docs/architecture.md)     | ``$AIRFLOW_HOME/msgdedup/warehouse`` |
| ``msgdedup_config``   | address-settings YAML passed as --config | empty: the engine's defaults         |
| ``msgdedup_batch_service`` | socket of a batch service (warm Spark app) | empty: a ``spark-submit`` per batch |

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
VAR_BATCH_SERVICE = "msgdedup_batch_service"

# The partition is complete when this marker exists in its directory (written last by the
# producer / exporter, like Hadoop's FileOutputCommitter does).
SUCCESS_MARKER = "_SUCCESS"

# Sensor: how often to look, and when to give up (the task then fails with a clear message).
SENSOR_POKE_INTERVAL = timedelta(seconds=30)
SENSOR_TIMEOUT = timedelta(hours=6)

SPARK_CONN_ID = "spark_default"

# One writer per warehouse, on the Airflow side: every ``process_batch`` task instance (scheduled,
# backfill or manual run) takes the one slot of this pool. Airflow does not serialise a backfill's
# runs against the scheduled runs (``max_active_runs`` counts per backfill, and a backfill's first
# run passes ``depends_on_past``), so without it two Spark applications could write the warehouse
# at once. Deployers create it once: ``airflow pools set msgdedup_warehouse 1 "…"`` (the demo and
# the e2e tests do). Missing pool: the scheduler never queues the task (it logs "Tasks using
# non-existent pool 'msgdedup_warehouse' will not be scheduled" and the task stays ``scheduled``);
# the dag-processor warns about it on the DAG (a DAG warning shown in the UI).
WAREHOUSE_POOL = "msgdedup_warehouse"
WAREHOUSE_POOL_SLOTS = 1
WAREHOUSE_POOL_DESCRIPTION = "message_dedup: one process_batch (warehouse writer) at a time"

# Exit 4 of process_batch.py (another writer, e.g. a manual spark-submit, holds the warehouse's
# lease): the task is rescheduled every POKE (no retry used, no slot held) for up to MAX_WAIT,
# then fails like an internal error (with retries).
WAREHOUSE_BUSY_POKE = timedelta(minutes=2)
WAREHOUSE_BUSY_MAX_WAIT = timedelta(hours=2)

# Runs of one kind (the scheduled runs, or one backfill's) active at once, and tasks of the DAG
# running at once. Two, so that a partition's run is already running while its predecessor's
# ``process_batch`` runs: its ``wait_for_partition`` is done by then, and its ``process_batch``
# starts as soon as the predecessor's succeeded, beside the predecessor's ``publish``, instead of
# after two more task hand-overs (about 1 s each on a local Airflow).
# The order does not come from here: every task ``depends_on_past``, so each of the three runs
# after the same task of the predecessor succeeded (one ``process_batch`` at a time, publishes in
# partition order); the pool ``WAREHOUSE_POOL`` keeps other kinds of runs apart.
MAX_ACTIVE_RUNS = 2

# Timeouts, so that a hung Spark application (e.g. a standalone master without workers waits for
# resources forever) cannot hold the DAG's run slots (MAX_ACTIVE_RUNS) forever.
# process_batch: 1M messages take about 2 min on 2 cores (docs/benchmarks.md); 2 h leaves a
# wide margin for a large hour on a busy cluster. On timeout Airflow kills spark-submit
# (on_kill) and the task is retried like any other non-final failure.
PROCESS_BATCH_TIMEOUT = timedelta(hours=2)
# A whole run: the sensor may wait up to SENSOR_TIMEOUT for the partition, then process_batch may
# take up to 3 tries of PROCESS_BATCH_TIMEOUT (+ retry delays); the run timeout is above that sum
# so it only ends runs that are stuck in a way the task timeouts do not catch.
DAGRUN_TIMEOUT = timedelta(hours=14)

# Name and URI (both stable across deployments: no Variable read when the DAG file is parsed) of
# the Asset updated by every publish. ``x-`` marks a custom scheme, which Airflow accepts without
# normalising it; the warehouse a publish wrote to is in the event's extra (``warehouse``, ``path``).
PUBLISHED_ASSET_NAME = "msgdedup_published"
PUBLISHED_ASSET_URI = "x-msgdedup://message_dedup/published"


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


def batch_service_socket() -> str | None:
    """The batch service's socket from the Variable, validated like every path; None when unset."""
    from msgdedup.orchestration.partitions import validate_root

    value = get_variable(VAR_BATCH_SERVICE, "")
    return validate_root(value, "batch service socket") if value else None


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
