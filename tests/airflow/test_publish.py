"""Write-audit-publish: published/<ID>.json only for the committed run whose gate passed."""

from __future__ import annotations

import json

import pytest

from msgdedup.orchestration.publish import PublishRefused, publish, published_path, read_published

BATCH = "2026-11-21T05"


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def warehouse(tmp_path):
    _write(tmp_path / "runs" / f"{BATCH}.json", {"batch_id": BATCH, "run_id": "run-2"})
    return tmp_path


def test_publishes_when_the_gate_passed_for_the_committed_run(warehouse):
    _write(warehouse / "quality" / BATCH / "result.json", {"batch_id": BATCH, "run_id": "run-2", "success": True})
    record = publish(warehouse, BATCH)
    assert read_published(warehouse, BATCH) == record
    assert record["run_id"] == "run-2" and record["gate_result"].endswith(f"quality/{BATCH}/result.json")
    assert [p.name for p in published_path(warehouse, BATCH).parent.iterdir()] == [f"{BATCH}.json"]


@pytest.mark.parametrize(
    "gate, message",
    [
        (None, "does not exist"),
        ({"run_id": "run-1", "success": True}, "is for run 'run-1'"),
        ({"run_id": "run-2", "success": False}, "gate failed"),
    ],
)
def test_refuses_without_a_passing_gate_for_this_run(warehouse, gate, message):
    if gate is not None:
        _write(warehouse / "quality" / BATCH / "result.json", gate)
    with pytest.raises(PublishRefused, match=message):
        publish(warehouse, BATCH)
    assert read_published(warehouse, BATCH) is None


def test_refuses_uncommitted_and_stale_batches(warehouse):
    with pytest.raises(PublishRefused, match="manifest"):
        publish(warehouse, "2026-11-21T06")
    _write(warehouse / "runs" / f"{BATCH}.stale.json", {})
    with pytest.raises(PublishRefused, match="stale"):
        publish(warehouse, BATCH)
