"""Resolve the run's partition, then wait until it is complete without holding a worker slot.

"Complete" means: the partition directory contains the marker file ``_SUCCESS``
(:data:`msgdedup.orchestration.settings.SUCCESS_MARKER`). Whoever writes the raw partition
writes all its data files first and the marker last; the batch command is only started once the
marker is there, so it never reads a half-written hour.

Its first look also resolves the run (:func:`.partitions.resolve_from_context`: Variables, params,
data interval, all validated); the run spec is its XCom, which ``process_batch`` and ``publish``
read. The sensor runs in ``reschedule`` mode: between two looks the task is put back in the
``up_for_reschedule`` state and frees its slot. After ``timeout`` it fails with a message that
names the partition and the missing marker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from msgdedup.orchestration import settings
from msgdedup.orchestration.partitions import describe, resolve_from_context


def partition_complete(partition: str) -> bool:
    """True iff ``<partition>/_SUCCESS`` exists (``partition`` is a validated local path)."""
    return (Path(partition) / settings.SUCCESS_MARKER).is_file()


class PartitionCompleteSensor(BaseSensorOperator):
    """Resolves the run and succeeds, returning the run spec, once its partition has its
    ``_SUCCESS`` marker."""

    ui_color = "#e6f1f2"

    def __init__(
        self,
        *,
        poke_interval: float = settings.SENSOR_POKE_INTERVAL.total_seconds(),
        timeout: float = settings.SENSOR_TIMEOUT.total_seconds(),
        mode: str = "reschedule",
        **kwargs: Any,
    ) -> None:
        super().__init__(poke_interval=poke_interval, timeout=timeout, mode=mode, **kwargs)

    def poke(self, context: Any) -> PokeReturnValue:
        spec = resolve_from_context(context)
        for line in describe(spec):
            self.log.info("%s", line)
        done = partition_complete(spec.partition)
        if spec.dry_run:
            raise AirflowSkipException(
                f"dry run: partition {spec.partition} is {'complete' if done else 'NOT complete yet'}"
            )
        self.log.info(
            "partition %s: %s", spec.partition,
            "complete" if done else f"waiting for {settings.SUCCESS_MARKER}",
        )
        return PokeReturnValue(is_done=done, xcom_value=spec.to_dict() if done else None)

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowSensorTimeout as exc:
            spec = resolve_from_context(context)
            raise AirflowSensorTimeout(
                f"partition {spec.partition} is not complete: no {settings.SUCCESS_MARKER} marker "
                f"after {self.timeout:.0f}s ({exc})"
            ) from exc
