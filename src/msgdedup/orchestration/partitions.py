"""Which partition a DAG run processes, validated before anything touches a path or a process.

One run per hourly raw partition ``<raw_root>/dt=YYYY-MM-DD/hour=HH/``; its batch id is
``YYYY-MM-DDTHH``. A scheduled or backfill run takes the hour from its data interval
(``CronDataIntervalTimetable("0 * * * *", timezone="UTC")``: the run for 05:00-06:00 processes
``hour=05``); a manual run may name the partition with the ``partition`` param.

Nothing typed by a user reaches a shell or a path without passing :func:`validate_partition_id`
(the trigger form checks the same pattern with JSON schema first). This is the DAG's rule (an
hourly partition); the warehouse's own, wider batch-id rule is :func:`msgdedup.layout.validate_batch_id`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

from msgdedup.orchestration import settings

# JSON schema of the trigger form (checked by the API before a run exists, and by the UI form).
# Month/day/hour ranges are checked here; the task checks the calendar (validate_partition_id).
PARTITION_ID_PATTERN = r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3])$"
PARTITION_ID_LENGTH = 13  # with the pattern: no trailing newline (Python's "$" accepts one)
_PARTITION_ID_RE = re.compile(r"\A(\d{4})-(\d{2})-(\d{2})T(\d{2})\Z")


class InvalidRunRequest(ValueError):
    """A parameter or setting that must not be used (bad batch id, unsafe path, ...)."""


def validate_partition_id(value: Any) -> str:
    """Return ``value`` if it names a real hourly partition ``YYYY-MM-DDTHH``, else raise InvalidRunRequest."""
    if not isinstance(value, str) or not _PARTITION_ID_RE.match(value):
        raise InvalidRunRequest(
            f"invalid partition {value!r}: expected an hour as YYYY-MM-DDTHH, e.g. 2026-11-21T05"
        )
    y, m, d, h = (int(g) for g in _PARTITION_ID_RE.match(value).groups())
    try:
        datetime(y, m, d, h)
    except ValueError as exc:
        raise InvalidRunRequest(f"invalid partition {value!r}: {exc}") from None
    return value


def batch_id_for(instant: datetime) -> str:
    """The batch id of the hour that starts at ``instant`` (converted to UTC)."""
    if instant.tzinfo is None:
        raise InvalidRunRequest("a data interval must be timezone-aware")
    utc = instant.astimezone(timezone.utc)
    if (utc.minute, utc.second, utc.microsecond) != (0, 0, 0):
        raise InvalidRunRequest(f"{instant.isoformat()} is not the start of an hour")
    return utc.strftime("%Y-%m-%dT%H")


def partition_relpath(batch_id: str) -> str:
    validate_partition_id(batch_id)
    return f"dt={batch_id[:10]}/hour={batch_id[11:13]}"


def validate_root(value: Any, what: str) -> str:
    """An absolute local path or ``file://`` URL without ``..``/control characters, normalised.

    Variables are set by admins, but they still end up in argv and file-system calls: refuse
    anything that is not a plain absolute path.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidRunRequest(f"{what} is empty")
    value = value.strip()
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise InvalidRunRequest(f"{what} {value!r} contains control characters")
    if value.startswith("file:"):
        parsed = urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidRunRequest(f"{what} {value!r}: only local file:// URLs are supported")
        path = parsed.path
    elif "://" in value:
        raise InvalidRunRequest(f"{what} {value!r}: only local paths or file:// URLs are supported")
    else:
        path = value
    pure = PurePosixPath(path)
    if not pure.is_absolute():
        raise InvalidRunRequest(f"{what} {value!r} must be an absolute path")
    if ".." in pure.parts:
        raise InvalidRunRequest(f"{what} {value!r} must not contain '..'")
    return str(pure)


def partition_path(raw_root: str, batch_id: str) -> str:
    return str(PurePosixPath(validate_root(raw_root, "raw root")) / partition_relpath(batch_id))


@dataclass(frozen=True)
class RunSpec:
    """Everything the tasks of one DAG run need; the XCom of the task :data:`SPEC_TASK_ID`."""

    batch_id: str
    partition: str
    warehouse: str
    config: str | None
    dry_run: bool
    invalidate_later: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        spec = cls(**data)
        # Re-validate: an XCom is data like any other.
        validate_partition_id(spec.batch_id)
        validate_root(spec.partition, "partition")
        validate_root(spec.warehouse, "warehouse")
        if spec.config is not None:
            validate_root(spec.config, "config file")
        return spec

    def batch_args(self) -> list[str]:
        """``process_batch.py`` takes the batch command's arguments unchanged: one list serves both apps."""
        args = ["--input", self.partition, "--warehouse", self.warehouse, "--batch-id", self.batch_id]
        if self.config:
            args += ["--config", self.config]
        if self.invalidate_later:
            args.append("--invalidate-later")
        return args


def _as_bool(value: Any, name: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise InvalidRunRequest(f"param {name} must be true or false, got {value!r}")


def resolve(
    *,
    params: dict[str, Any],
    data_interval_start: datetime | None,
    data_interval_end: datetime | None,
    raw_root: str,
    warehouse: str,
    config: str | None,
) -> RunSpec:
    """The validated RunSpec of a run (pure: the caller supplies Variables and the interval)."""
    override = params.get("partition")
    if override not in (None, ""):
        batch_id = validate_partition_id(override)
    else:
        if data_interval_start is None:
            raise InvalidRunRequest(
                "this run has no data interval: trigger it with the partition param (YYYY-MM-DDTHH)"
            )
        batch_id = batch_id_for(data_interval_start)
        if data_interval_end is not None and data_interval_end - data_interval_start != timedelta(hours=1):
            raise InvalidRunRequest(
                f"data interval {data_interval_start.isoformat()} - {data_interval_end.isoformat()} "
                "is not one hour: the DAG must use the hourly CronDataIntervalTimetable"
            )
    return RunSpec(
        batch_id=batch_id,
        partition=partition_path(raw_root, batch_id),
        warehouse=validate_root(warehouse, "warehouse"),
        config=validate_root(config, "config file") if config else None,
        dry_run=_as_bool(params.get("dry_run"), "dry_run"),
        invalidate_later=_as_bool(params.get("invalidate_later"), "invalidate_later"),
    )


# The task whose XCom is the run spec: the partition sensor resolves the run as it first looks
# (a task of its own cost a task start-up per partition, about 2 s; docs/benchmarks.md).
SPEC_TASK_ID = "wait_for_partition"


def resolve_from_context(context: Any) -> RunSpec:
    """The run's validated RunSpec: Variables + params + data interval. A refused request fails the
    task without retry (the same request fails the same way)."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        return resolve(
            params=dict(context.get("params") or {}),
            data_interval_start=context.get("data_interval_start"),
            data_interval_end=context.get("data_interval_end"),
            raw_root=settings.get_variable(settings.VAR_RAW_ROOT, settings.default_raw_root()),
            warehouse=settings.get_variable(settings.VAR_WAREHOUSE, settings.default_warehouse()),
            config=settings.get_variable(settings.VAR_CONFIG, "") or None,
        )
    except InvalidRunRequest as exc:
        raise AirflowFailException(f"refused: {exc}") from None


def describe(spec: RunSpec) -> list[str]:
    """What a run will do, for its log (and a dry run's answer)."""
    lines = [f"batch {spec.batch_id}: partition {spec.partition}, warehouse {spec.warehouse}"]
    if spec.dry_run:
        lines += ["dry run: the following would run, nothing is written",
                  "  process_batch.py " + " ".join(spec.batch_args())]
    return lines


def spec_from_context(context: Any, task_id: str = SPEC_TASK_ID) -> RunSpec:
    data = context["ti"].xcom_pull(task_ids=task_id)
    if not data:
        raise InvalidRunRequest(f"no run spec from task {task_id!r}")
    return RunSpec.from_dict(data)
