"""Write-audit-publish: the last step of a run.

The engine *writes* the batch (``runs/<ID>.json`` = committed), the GX gate *audits* it
(``quality/<ID>/result.json``), and this module *publishes* it: it atomically writes
``<warehouse>/published/<ID>.json``::

    {"batch_id": …, "run_id": <run_id of runs/<ID>.json>, "published_at": <UTC ISO-8601>,
     "gate_result": <path of the gate result>, "manifest": <path of the manifest>}

only if the gate passed for exactly that engine ``run_id`` (a gate result of an earlier run of
the same batch does not count) and the batch is not stale. The Airflow task then emits an event
on the ``msgdedup_published`` Asset (``x-msgdedup://message_dedup/published``) whose extra is the
record plus ``warehouse`` and ``path`` (of the published record).
A rerun of a batch overwrites its record; consumers read ``published/<ID>.json`` to know which
engine run of a batch is the published one.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from msgdedup import json_files, layout
from msgdedup.layout import validate_batch_id


class PublishRefused(RuntimeError):
    """The batch must not be published (not committed, stale, gate missing/failed/other run)."""


def manifest_path(warehouse: str | Path, batch_id: str) -> Path:
    return Path(layout.manifest(warehouse, batch_id))


def stale_path(warehouse: str | Path, batch_id: str) -> Path:
    return Path(layout.stale_manifest(warehouse, batch_id))


def gate_result_path(warehouse: str | Path, batch_id: str) -> Path:
    return Path(layout.gate_result(layout.quality_dir(warehouse), batch_id))


def published_dir(warehouse: str | Path) -> Path:
    return Path(layout.published_dir(warehouse))


def published_path(warehouse: str | Path, batch_id: str) -> Path:
    return Path(layout.published(warehouse, batch_id))


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        return json_files.read_object(path, what)
    except json_files.DocumentError as exc:
        raise PublishRefused(str(exc)) from None


def gate_passed(result: dict[str, Any]) -> bool:
    """The gate's verdict in ``quality/<ID>/result.json`` (``success``: true/false)."""
    return result.get("success") is True


def audit(warehouse: str | Path, batch_id: str) -> dict[str, Any]:
    """Check that ``batch_id`` may be published; return the record to publish."""
    validate_batch_id(batch_id)
    if stale_path(warehouse, batch_id).exists():
        raise PublishRefused(
            f"batch {batch_id} is stale (an older batch was reprocessed): re-run it before publishing"
        )
    manifest = _read_json(manifest_path(warehouse, batch_id), "manifest")
    run_id = manifest.get("run_id")
    if not run_id:
        raise PublishRefused(f"manifest of {batch_id} has no run_id")
    gpath = gate_result_path(warehouse, batch_id)
    gate = _read_json(gpath, "gate result")
    if gate.get("run_id") != run_id:
        raise PublishRefused(
            f"gate result of {batch_id} is for run {gate.get('run_id')!r}, "
            f"but the committed run is {run_id!r}: run the gate again"
        )
    if not gate_passed(gate):
        raise PublishRefused(f"the quality gate failed for {batch_id} (run {run_id}): not publishing")
    return {
        "batch_id": batch_id,
        "run_id": run_id,
        "published_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gate_result": str(gpath),
        "manifest": str(manifest_path(warehouse, batch_id)),
    }


def publish(warehouse: str | Path, batch_id: str) -> dict[str, Any]:
    """Audit, then atomically write ``published/<ID>.json``; return the record."""
    record = audit(warehouse, batch_id)
    json_files.write_atomic(published_path(warehouse, batch_id), record)
    return record


def read_published(warehouse: str | Path, batch_id: str) -> dict[str, Any] | None:
    path = published_path(warehouse, batch_id)
    if not path.exists():
        return None
    return _read_json(path, "published record")


def publish_task(**context: Any) -> dict[str, Any] | None:
    """PythonOperator callable of the ``publish`` task (its ``outlets`` hold the Asset)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from msgdedup.orchestration.partitions import spec_from_context

    spec = spec_from_context(context)
    if spec.dry_run:
        raise AirflowSkipException(f"dry run: would publish {spec.batch_id}")
    try:
        record = publish(spec.warehouse, spec.batch_id)
    except PublishRefused as exc:
        raise AirflowFailException(f"not published: {exc}") from None
    print(f"published {spec.batch_id} (engine run {record['run_id']}) -> "
          f"{published_path(spec.warehouse, spec.batch_id)}")
    task = context.get("task")
    outlet_events = context.get("outlet_events")
    if task is not None and outlet_events is not None:
        for outlet in task.outlets or []:
            # The Asset's URI names the dataset, not a path; where it was written is here.
            outlet_events[outlet].extra = {**record, "warehouse": spec.warehouse,
                                           "path": str(published_path(spec.warehouse, spec.batch_id))}
    return record
