"""message_dedup: one run per hourly raw partition -> wait for it -> dedup + GX gate (one Spark app) -> publish.

Structure only: every step's logic lives in ``msgdedup.orchestration`` (see docs/airflow.md).

Needs the pool ``msgdedup_warehouse`` with 1 slot (one writer per warehouse):
``airflow pools set msgdedup_warehouse 1 "message_dedup warehouse writer"``. Without it
``process_batch`` stays *scheduled* and never runs (the scheduler logs "Tasks using
non-existent pool 'msgdedup_warehouse' will not be scheduled").
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, Param

from msgdedup.orchestration import settings
from msgdedup.orchestration.partitions import PARTITION_ID_LENGTH, PARTITION_ID_PATTERN, SPEC_TASK_ID
from msgdedup.orchestration.publish import publish_task
from msgdedup.orchestration.sensors import PartitionCompleteSensor
from msgdedup.orchestration.spark import ProcessBatchOperator

# A stable name and URI: nothing is read from the metadata database while this file is parsed.
published = Asset(name=settings.PUBLISHED_ASSET_NAME, uri=settings.PUBLISHED_ASSET_URI)

with DAG(
    dag_id=settings.DAG_ID,
    description="Exactly-once export of one hourly partition: dedup, quality gate, publish",
    # Each run covers exactly its hour: data_interval_start 05:00 -> partition dt=…/hour=05.
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,  # older hours are processed with `airflow backfill create` (oldest first)
    # a partition's sensor runs beside its predecessor's Spark step; the order is depends_on_past's
    max_active_runs=settings.MAX_ACTIVE_RUNS,
    max_active_tasks=settings.MAX_ACTIVE_RUNS,
    # A run stuck in a way the task timeouts do not catch gives its slot back (settings.py).
    dagrun_timeout=settings.DAGRUN_TIMEOUT,
    default_args={
        # Each task after the same task of the predecessor succeeded: partitions are committed,
        # gated and published in order, and a failed one stops the ones after it.
        "depends_on_past": True,
        # Safe: the engine reruns a batch idempotently; user errors fail without retry.
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
    },
    params={
        "partition": Param(
            None,
            type=["null", "string"],
            pattern=PARTITION_ID_PATTERN,
            minLength=PARTITION_ID_LENGTH,
            maxLength=PARTITION_ID_LENGTH,
            title="Partition (batch id)",
            description="Hour to process as YYYY-MM-DDTHH (UTC). Empty: the run's data interval.",
        ),
        "dry_run": Param(
            False, type="boolean", title="Dry run",
            description="Validate and show the commands, write nothing.",
        ),
        "invalidate_later": Param(
            False, type="boolean", title="Invalidate later batches",
            description="Reprocess an older partition: later batches become stale and must be "
            "re-run in order (backfill --reprocess-behavior completed).",
        ),
    },
    tags=["msgdedup"],
    doc_md=__doc__,
) as dag:
    # Resolves the run (its XCom is the run spec) and waits for the partition's _SUCCESS marker.
    wait = PartitionCompleteSensor(task_id=SPEC_TASK_ID)
    # One writer per warehouse: a pool of one slot across scheduled, backfill and manual runs;
    # a hung Spark application is killed after the timeout (then retried).
    process = ProcessBatchOperator(
        task_id="process_batch",
        pool=settings.WAREHOUSE_POOL,
        execution_timeout=settings.PROCESS_BATCH_TIMEOUT,
    )
    publish = PythonOperator(task_id="publish", python_callable=publish_task, outlets=[published])

    wait >> process >> publish
