"""Data interval -> partition path and batch id; the trigger form refuses unsafe input."""

from __future__ import annotations

import copy

from datetime import datetime, timedelta, timezone

import pendulum
import pytest

from msgdedup.orchestration.partitions import (
    InvalidRunRequest,
    RunSpec,
    batch_id_for,
    resolve,
    validate_partition_id,
    validate_root,
)

UTC = timezone.utc
HOSTILE = [
    "2026-11-21T05; rm -rf /",
    "../../etc",
    "2026-11-21T05/../../x",
    "2026-11-21T05\n",
    "$(reboot)",
    "2026-13-01T00",
    "2026-11-21T24",
    "2026-11-21 05",
    "",
]


def _resolve(params=None, start=None, end=None, **kw):
    args = dict(raw_root="/data/raw", warehouse="/data/wh", config=None)
    args.update(kw)
    return resolve(params=params or {}, data_interval_start=start, data_interval_end=end, **args)


@pytest.fixture(scope="module")
def core_timetable(dagbag):
    from airflow.serialization.encoders import coerce_to_core_timetable

    return coerce_to_core_timetable(dagbag.dags["message_dedup"].timetable)


def test_each_scheduled_run_covers_exactly_its_hour(core_timetable):
    from airflow.timetables.base import DataInterval, TimeRestriction

    prev = DataInterval(pendulum.datetime(2026, 11, 21, 4), pendulum.datetime(2026, 11, 21, 5))
    info = core_timetable.next_dagrun_info(
        last_automated_data_interval=prev,
        restriction=TimeRestriction(earliest=pendulum.datetime(2026, 1, 1), latest=None, catchup=True),
    )
    start, end = info.data_interval.start, info.data_interval.end
    assert (start, end) == (pendulum.datetime(2026, 11, 21, 5), pendulum.datetime(2026, 11, 21, 6))
    assert info.run_after == end  # the 05:00 hour runs once it is over
    spec = _resolve(start=start, end=end)
    assert spec.batch_id == "2026-11-21T05"
    assert spec.partition == "/data/raw/dt=2026-11-21/hour=05"


def test_manual_run_without_partition_takes_the_last_complete_hour(core_timetable):
    interval = core_timetable.infer_manual_data_interval(run_after=pendulum.datetime(2026, 11, 21, 5, 23))
    spec = _resolve(start=interval.start, end=interval.end)
    assert spec.batch_id == "2026-11-21T04"


def test_interval_in_another_timezone_is_converted_to_utc():
    start = datetime(2026, 11, 21, 6, tzinfo=timezone(timedelta(hours=1)))
    assert batch_id_for(start) == "2026-11-21T05"
    with pytest.raises(InvalidRunRequest):
        batch_id_for(datetime(2026, 11, 21, 5, 30, tzinfo=UTC))
    with pytest.raises(InvalidRunRequest, match="not one hour"):
        _resolve(start=datetime(2026, 11, 21, 5, tzinfo=UTC), end=datetime(2026, 11, 22, 5, tzinfo=UTC))


def test_partition_param_overrides_the_interval_and_builds_the_commands():
    spec = _resolve(
        params={"partition": "2026-11-20T23", "invalidate_later": True},
        start=datetime(2026, 11, 21, 5, tzinfo=UTC), config="/etc/msgdedup/addresses.yaml",
    )
    assert spec.partition == "/data/raw/dt=2026-11-20/hour=23"
    assert spec.batch_args() == [
        "--input", "/data/raw/dt=2026-11-20/hour=23", "--warehouse", "/data/wh",
        "--batch-id", "2026-11-20T23", "--config", "/etc/msgdedup/addresses.yaml", "--invalidate-later",
    ]
    assert RunSpec.from_dict(spec.to_dict()) == spec


def test_run_without_interval_needs_the_partition_param():
    with pytest.raises(InvalidRunRequest, match="partition param"):
        _resolve()


@pytest.mark.parametrize("value", HOSTILE)
def test_task_refuses_hostile_partition(value):
    with pytest.raises(InvalidRunRequest, match="invalid partition"):
        validate_partition_id(value)


@pytest.mark.parametrize("value", ["relative/raw", "/data/../etc", "ftp://x/raw", "/data/raw\nx", "file://host/x"])
def test_unsafe_roots_are_refused(value):
    with pytest.raises(InvalidRunRequest):
        validate_root(value, "raw root")
    assert validate_root("file:///data/raw/", "raw root") == "/data/raw"


def _merged(dagbag, conf):
    params = copy.deepcopy(dagbag.dags["message_dedup"].params)
    params.update(conf)
    return params


@pytest.mark.parametrize("value", [v for v in HOSTILE if v != ""])
def test_trigger_form_schema_refuses_hostile_partition(dagbag, value):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        _merged(dagbag, {"partition": value}).validate()


def test_trigger_form_accepts_valid_values(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    assert _merged(dagbag, {"partition": "2026-11-21T05", "dry_run": True}).validate()["partition"] == "2026-11-21T05"
    assert _merged(dagbag, {}).validate()["partition"] is None
    with pytest.raises(ParamValidationError):
        _merged(dagbag, {"dry_run": "yes; rm -rf /"}).validate()
