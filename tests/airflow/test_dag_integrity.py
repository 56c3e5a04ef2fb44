"""The DAG folder imports cleanly and message_dedup has the contracted structure."""

from __future__ import annotations

import ast
from datetime import timedelta

from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"

EXPECTED_ORDER = ["wait_for_partition", "process_batch", "publish"]


def test_dag_folder_is_not_empty_and_imports_without_errors(dagbag):
    assert list(DAGS.glob("*.py")), f"no DAG files in {DAGS}"
    assert dagbag.import_errors == {}, dagbag.import_errors
    assert dagbag.size() >= 1, "the DagBag is empty"
    assert "message_dedup" in dagbag.dags, f"message_dedup missing; found {list(dagbag.dags)}"


def test_structure_is_a_chain_in_contract_order(dagbag):
    dag = dagbag.dags["message_dedup"]
    assert [t.task_id for t in dag.topological_sort()] == EXPECTED_ORDER
    for upstream, downstream in zip(EXPECTED_ORDER, EXPECTED_ORDER[1:], strict=False):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}


def test_scheduling_and_ordering_guarantees(dagbag):
    dag = dagbag.dags["message_dedup"]
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    assert dag.timetable.expression == "0 * * * *"
    assert str(dag.timetable.timezone) == "UTC"
    # two runs at once: a partition's sensor runs beside its predecessor's Spark step and its Spark
    # step beside its predecessor's publish (settings.MAX_ACTIVE_RUNS); the order is each task's
    # depends_on_past (a task after the same task of the predecessor; test_e2e checks it live)
    assert dag.max_active_runs == dag.max_active_tasks == 2
    for task in dag.tasks:
        assert task.depends_on_past, task.task_id
        assert not task.wait_for_downstream, task.task_id
        assert task.retries >= 1, task.task_id


def test_sensor_frees_its_slot_and_times_out(dagbag):
    sensor = dagbag.dags["message_dedup"].get_task("wait_for_partition")
    assert sensor.mode == "reschedule"
    assert 0 < sensor.timeout <= timedelta(days=1).total_seconds()


def test_one_spark_task_runs_dedup_and_gate_in_one_application(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    dag = dagbag.dags["message_dedup"]
    spark_tasks = [t for t in dag.tasks if isinstance(t, SparkSubmitOperator)]
    assert [t.task_id for t in spark_tasks] == ["process_batch"], "one spark-submit per partition"
    (task,) = spark_tasks
    assert task._conn_id == "spark_default"
    assert task.application.endswith("spark_apps/process_batch.py")
    assert Path(task.application).is_file()


def test_a_hung_spark_application_cannot_hold_the_run_slot_forever(dagbag):
    from msgdedup.orchestration import settings

    dag = dagbag.dags["message_dedup"]
    process = dag.get_task("process_batch")
    assert process.execution_timeout == settings.PROCESS_BATCH_TIMEOUT
    assert timedelta(minutes=10) <= process.execution_timeout <= timedelta(hours=6)
    assert dag.dagrun_timeout == settings.DAGRUN_TIMEOUT
    # the run timeout only ends runs the task timeouts did not: above the sensor's wait plus
    # every try of process_batch with its retry delays
    sensor = dag.get_task("wait_for_partition")
    tries = process.retries + 1
    longest_run = (timedelta(seconds=sensor.timeout) + tries * process.execution_timeout
                   + process.retries * process.retry_delay)
    assert dag.dagrun_timeout > longest_run


def test_one_writer_per_warehouse_the_spark_task_takes_a_one_slot_pool(dagbag):
    from msgdedup.orchestration import settings

    dag = dagbag.dags["message_dedup"]
    process = dag.get_task("process_batch")
    assert process.pool == settings.WAREHOUSE_POOL == "msgdedup_warehouse"
    assert process.pool_slots == 1 and settings.WAREHOUSE_POOL_SLOTS == 1
    # the other tasks do not write the warehouse's batches and must not wait for the slot
    assert {t.pool for t in dag.tasks if t.task_id != "process_batch"} == {"default_pool"}


def test_publish_emits_the_published_asset(dagbag):
    publish = dagbag.dags["message_dedup"].get_task("publish")
    (asset,) = publish.outlets
    assert asset.name == "msgdedup_published"
    # stable: not built from a Variable when the file is parsed (the warehouse is in the extra)
    assert asset.uri == "x-msgdedup://message_dedup/published"


def test_trigger_form_params(dagbag):
    params = dagbag.dags["message_dedup"].params
    assert set(params.keys()) == {"partition", "dry_run", "invalidate_later"}
    schema = params.get_param("partition").schema
    assert schema["pattern"].startswith("^\\d{4}-") and schema["maxLength"] == 13


def test_dag_file_only_declares_structure():
    """No function definitions, no Variable access (not even through a helper), no paths."""
    source = (DAGS / "message_dedup.py").read_text()
    tree = ast.parse(source)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    assert "Variable" not in source and "get_variable" not in source and "parse_time" not in source
    assert "/work" not in source and "/tmp" not in source


def test_the_asset_does_not_depend_on_the_warehouse_variable(tmp_path):
    """Parse the DAG folder with the warehouse Variable set (Airflow reads ``AIRFLOW_VAR_*``
    first): the Asset must be the same, so parsing never needs to read it."""
    import os
    import subprocess
    import sys

    code = ("from airflow.dag_processing.dagbag import DagBag; "
            f"bag = DagBag(dag_folder={str(DAGS)!r}); assert not bag.import_errors, bag.import_errors; "
            "print(bag.dags['message_dedup'].get_task('publish').outlets[0].uri)")
    env = {**os.environ, "AIRFLOW_VAR_MSGDEDUP_WAREHOUSE": str(tmp_path / "elsewhere"),
           "AIRFLOW_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "x-msgdedup://message_dedup/published"
