"""The partition sensor: it resolves the run (its XCom is the run spec), `_SUCCESS` means
complete, an incomplete partition fails with a clear timeout. The sensor class is the shipped one;
the Variables come from the environment (``AIRFLOW_VAR_*``), as Airflow's own secrets backend
reads them."""

from __future__ import annotations


import pytest

from msgdedup.orchestration.partitions import SPEC_TASK_ID, resolve
from msgdedup.orchestration.sensors import PartitionCompleteSensor, partition_complete


@pytest.fixture(autouse=True)
def _variables(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_VAR_MSGDEDUP_RAW_ROOT", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_VAR_MSGDEDUP_WAREHOUSE", "/wh")


def _context(raw_root, batch_id, **params):
    spec = resolve(params={"partition": batch_id, **params}, data_interval_start=None, data_interval_end=None,
                   raw_root=str(raw_root), warehouse="/wh", config=None)
    return {"params": {"partition": batch_id, **params}}, spec


def test_the_dag_sensor_resolves_the_run_first(dagbag):
    dag = dagbag.dags["message_dedup"]
    assert SPEC_TASK_ID == "wait_for_partition" and not dag.get_task(SPEC_TASK_ID).upstream_task_ids


def test_the_dag_sensor_is_reschedule_mode(dagbag):
    sensor = dagbag.dags["message_dedup"].get_task("wait_for_partition")
    assert isinstance(sensor, PartitionCompleteSensor) and sensor.mode == "reschedule"


def test_complete_means_success_marker(tmp_path):
    context, spec = _context(tmp_path, "2026-11-21T05")
    sensor = PartitionCompleteSensor(task_id="wait", timeout=5, poke_interval=1, mode="poke")
    (tmp_path / "dt=2026-11-21" / "hour=05").mkdir(parents=True)
    (tmp_path / "dt=2026-11-21" / "hour=05" / "part-00000.jsonl").write_text("{}\n")
    first = sensor.poke(context)
    assert not partition_complete(spec.partition) and first.is_done is False and first.xcom_value is None
    (tmp_path / "dt=2026-11-21" / "hour=05" / "_SUCCESS").write_text("")
    done = sensor.poke(context)
    assert done.is_done is True and done.xcom_value == spec.to_dict()


def test_timeout_names_the_partition_and_the_marker(tmp_path):
    from airflow.sdk.exceptions import AirflowSensorTimeout

    context, spec = _context(tmp_path, "2026-11-21T06")
    sensor = PartitionCompleteSensor(task_id="wait", timeout=1, poke_interval=0.2, mode="poke")
    with pytest.raises(AirflowSensorTimeout,
                       match=r"partition .*dt=2026-11-21/hour=06 is not complete: no _SUCCESS marker"):
        sensor.execute(context)


def test_dry_run_skips(tmp_path):
    from airflow.sdk.exceptions import AirflowSkipException

    context, _ = _context(tmp_path, "2026-11-21T07", dry_run=True)
    with pytest.raises(AirflowSkipException, match="NOT complete"):
        PartitionCompleteSensor(task_id="wait", mode="poke").poke(context)


def test_a_refused_request_fails_without_retry(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="refused: invalid partition '2026-02-30T05'"):
        PartitionCompleteSensor(task_id="wait", mode="poke").poke({"params": {"partition": "2026-02-30T05"}})
