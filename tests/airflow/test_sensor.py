"""The partition sensor: `_SUCCESS` means complete; an incomplete partition fails with a clear
timeout. The sensor class is the shipped one; only Airflow's task instance is stood in for (it
hands the sensor the run spec of the ``resolve`` task, as XCom does)."""

from __future__ import annotations


import pytest

from msgdedup.orchestration.partitions import resolve
from tests.airflow.support import ResolvedTaskInstance
from msgdedup.orchestration.sensors import PartitionCompleteSensor, partition_complete


def _context(raw_root, batch_id, **params):
    spec = resolve(params={"partition": batch_id, **params}, data_interval_start=None, data_interval_end=None,
                   raw_root=str(raw_root), warehouse="/wh", config=None)
    return {"ti": ResolvedTaskInstance(spec), "params": {}}, spec


def test_the_dag_sensor_is_reschedule_mode(dagbag):
    sensor = dagbag.dags["message_dedup"].get_task("wait_for_partition")
    assert isinstance(sensor, PartitionCompleteSensor) and sensor.mode == "reschedule"


def test_complete_means_success_marker(tmp_path):
    context, spec = _context(tmp_path, "2026-11-21T05")
    sensor = PartitionCompleteSensor(task_id="wait", timeout=5, poke_interval=1, mode="poke")
    (tmp_path / "dt=2026-11-21" / "hour=05").mkdir(parents=True)
    (tmp_path / "dt=2026-11-21" / "hour=05" / "part-00000.jsonl").write_text("{}\n")
    assert not partition_complete(spec.partition) and sensor.poke(context) is False
    (tmp_path / "dt=2026-11-21" / "hour=05" / "_SUCCESS").write_text("")
    assert sensor.poke(context) is True


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
