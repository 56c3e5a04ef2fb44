"""End to end through a real Airflow: REST API (JWT from /auth/token), backfills (the demo's code), scheduler,
LocalExecutor, spark-submit of the real engine and GX gate (one application), publish, the Data quality plugin.

Slow (Spark JVMs): ~5 spark-submits in all (one per partition run) on a 2-core machine.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
T0, T1 = "2026-11-20T00", "2026-11-20T01"  # conftest.E2E_HOURS


def test_hours_match_the_fixture(e2e_hours):
    assert e2e_hours == (T0, T1)


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _get(url: str, headers: dict | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _trigger(live, conf: dict) -> tuple[int, dict]:
    return live.api("POST", "/api/v2/dags/message_dedup/dagRuns", {"logical_date": None, "conf": conf})


@pytest.mark.parametrize("conf", [
    {"partition": "2026-11-21T05; rm -rf /"},
    {"partition": "../../etc"},
    {"partition": "2026-11-20T00", "dry_run": "yes"},
])
def test_trigger_form_refuses_hostile_params(live_airflow, conf):
    before = len(live_airflow.runs())
    status, body = _trigger(live_airflow, conf)
    assert status == 400, body
    assert "Invalid input for param" in json.dumps(body)
    assert len(live_airflow.runs()) == before, "no run was created"


def test_backfill_processes_partitions_oldest_first_and_publishes(backfilled):
    live, runs = backfilled
    wh = live.warehouse
    assert {b: r["state"] for b, r in runs.items()} == {T0: "success", T1: "success"}
    assert all(r["run_type"] == "backfill" for r in runs.values())
    # oldest first, task by task: T1's Spark step once T0's was committed and gated, its publish
    # once T0 was published (its sensor may run beside T0's Spark step)
    ti0, ti1 = live.task_instances(runs[T0]["dag_run_id"]), live.task_instances(runs[T1]["dag_run_id"])
    assert ti1["wait_for_partition"]["start_date"] >= ti0["wait_for_partition"]["end_date"]
    assert ti1["process_batch"]["start_date"] >= ti0["process_batch"]["end_date"]
    assert ti1["publish"]["start_date"] >= ti0["publish"]["end_date"]
    assert all(ti["state"] == "success" for ti in [*ti0.values(), *ti1.values()])
    # the Spark step ran in the demo's warm batch service, not a spark-submit of its own
    assert "in the batch service on" in live.task_log(runs[T1]["dag_run_id"], "process_batch", 1)
    # one writer per warehouse: the Spark step ran in the one-slot pool
    assert ti0["process_batch"]["pool"] == ti1["process_batch"]["pool"] == "msgdedup_warehouse"
    # the same outputs the hourly runs produce: one committed batch per hour, chained
    m0, m1 = _read(wh / "runs" / f"{T0}.json"), _read(wh / "runs" / f"{T1}.json")
    assert m0["parent"] is None and m1["parent"]["batch_id"] == T0
    assert m1["parent"]["snapshot_fingerprint"] == m0["snapshot_fingerprint"]
    assert m0["input"]["path"].endswith("dt=2026-11-20/hour=00")
    for batch, manifest in ((T0, m0), (T1, m1)):
        counts = manifest["counts"]
        assert counts["input_lines"] == counts["delivered"] + counts["dropped"] + counts["quarantined"]
        assert counts["quarantined"] > 0 and counts["by_reason"]["duplicate"] > 0
        gate = _read(wh / "quality" / batch / "result.json")
        assert gate["success"] is True and gate["run_id"] == manifest["run_id"]
        published = _read(wh / "published" / f"{batch}.json")
        assert published["run_id"] == manifest["run_id"] and published["batch_id"] == batch
        assert published["gate_result"] == str(wh / "quality" / batch / "result.json")
    assert (wh / "quality" / "data_docs" / "index.html").is_file()
    # the Asset event of each publish
    status, events = live.api("GET", "/api/v2/assets/events?source_dag_id=message_dedup")
    assert status == 200, events
    extras = [e["extra"] for e in events["asset_events"]]
    assert {e["batch_id"] for e in extras} == {T0, T1}
    assert {e["warehouse"] for e in extras} == {str(wh)}
    assert {e["uri"] for e in events["asset_events"]} == {"x-msgdedup://message_dedup/published"}


def test_manual_dry_run_with_partition_param(backfilled):
    live, _ = backfilled
    published_before = (live.warehouse / "published" / f"{T0}.json").read_text()
    status, run = _trigger(live, {"partition": T0, "dry_run": True})
    assert status == 200, run
    assert live.wait_run(run["dag_run_id"])["state"] == "success"
    tis = live.task_instances(run["dag_run_id"])
    assert {tis[t]["state"] for t in ("wait_for_partition", "process_batch", "publish")} == {"skipped"}
    assert "dry run: the following would run" in live.task_log(run["dag_run_id"], "wait_for_partition", 1)
    assert (live.warehouse / "published" / f"{T0}.json").read_text() == published_before


def test_reprocessing_an_older_partition(backfilled):
    """Changed input of T0: refused without invalidate_later; with it T1 goes stale; re-run T1."""
    live, runs = backfilled
    wh = live.warehouse
    old0, old1 = _read(wh / "runs" / f"{T0}.json"), _read(wh / "runs" / f"{T1}.json")
    late = {"message_id": "late-arrival-1", "address": "orders.eu", "received_at": "2026-11-20T00:59:59Z",
            "properties": {"_AMQ_DUPL_ID": "late-producer:1"}, "body": "a line the exporter missed"}
    part = next((live.raw / "dt=2026-11-20" / "hour=00").glob("*.jsonl"))
    with part.open("a") as fh:
        fh.write(json.dumps(late) + "\n")

    # 1. a manual run of the older partition is refused by the engine (exit 2), without retries
    status, run = _trigger(live, {"partition": T0})
    assert status == 200, run
    assert live.wait_run(run["dag_run_id"])["state"] == "failed"
    process = live.task_instances(run["dag_run_id"])["process_batch"]
    assert process["state"] == "failed" and process["try_number"] == 1
    log = live.task_log(run["dag_run_id"], "process_batch", 1)
    assert "exited with 2" in log and "invalidate-later" in log and "invalidate_later=true" in log
    assert _read(wh / "runs" / f"{T0}.json")["run_id"] == old0["run_id"], "nothing was committed"

    # 2. reprocess T0 with invalidate_later: T1 becomes stale and is no longer published
    live.backfill(T0, T0, reprocess="completed", conf={"invalidate_later": True})
    time.sleep(5)
    assert live.wait_run(runs[T0]["dag_run_id"])["state"] == "success"
    new0 = _read(wh / "runs" / f"{T0}.json")
    assert new0["run_id"] != old0["run_id"] and new0["invalidated"] == [T1]
    assert (wh / "runs" / f"{T1}.stale.json").exists() and not (wh / "runs" / f"{T1}.json").exists()
    assert not (wh / "published" / f"{T1}.json").exists()
    assert _read(wh / "published" / f"{T0}.json")["run_id"] == new0["run_id"]
    status, report = _get(f"{live.af.base_url}/data-quality/api/batches",
                          {"Authorization": f"Bearer {live.token}"})
    assert status == 200 and {b["batch_id"]: b["stale"] for b in json.loads(report)}[T1] is True

    # 3. the later partition re-runs in order (documented: backfill --reprocess-behavior completed)
    live.backfill(T1, T1, reprocess="completed")
    time.sleep(5)
    assert live.wait_run(runs[T1]["dag_run_id"])["state"] == "success"
    new1 = _read(wh / "runs" / f"{T1}.json")
    assert not (wh / "runs" / f"{T1}.stale.json").exists()
    assert new1["run_id"] != old1["run_id"]
    assert new1["parent"] == {"batch_id": T0, "snapshot_fingerprint": new0["snapshot_fingerprint"]}
    assert _read(wh / "published" / f"{T1}.json")["run_id"] == new1["run_id"]
    assert _read(wh / "quality" / T1 / "result.json")["run_id"] == new1["run_id"]


def test_data_quality_plugin_requires_airflow_login(backfilled):
    live, _ = backfilled
    base = f"{live.af.base_url}/data-quality"
    for headers in ({}, {"Authorization": "Bearer not-a-jwt"},
                    {"Authorization": "Bearer " + live.token[:-4] + "AAAA"},
                    {"Cookie": "_token=forged"}):
        for path in ("/", f"/batches/{T0}", f"/api/batches/{T0}", "/data-docs/index.html"):
            status, _ = _get(base + path, headers)
            assert status == 401, (path, headers, status)
    auth = {"Authorization": f"Bearer {live.token}"}
    status, page = _get(f"{base}/batches/{T0}", auth)
    assert status == 200 and "Dedup report" in page and "orders.eu" in page
    status, page = _get(f"{base}/", {"Cookie": f"_token={live.token}"})  # the UI's cookie works too
    assert status == 200 and T0 in page
    status, body = _get(f"{base}/api/batches/{T0}", auth)
    report = json.loads(body)
    assert min(report["counts"]["quarantined"], 50) == len(report["quarantine"]) > 0
    assert all(q["error"] for q in report["quarantine"])
    assert report["gate"]["status"] == "passed"
    status, _ = _get(f"{base}/data-docs/index.html", auth)
    assert status == 200
    status, _ = _get(f"{base}/data-docs/..%2F..%2Fruns%2F{T0}.json", auth)
    assert status == 404
    status, _ = _get(f"{base}/batches/..%2F..%2Fetc", auth)
    assert status == 404


def test_a_failed_partition_stops_the_ones_after_it(backfilled):
    """Two runs may be active at once (settings.MAX_ACTIVE_RUNS), yet a partition whose Spark step
    failed stops the next one: its Spark step and publish wait for the failed ones (depends_on_past;
    its sensor may have found the partition). Last in the module: it leaves two partitions behind,
    the later one never processed."""
    from datetime import datetime, timezone

    from msgdedup.sample_data import write_partitions

    live, _ = backfilled
    t2, t3 = "2026-11-20T02", "2026-11-20T03"
    write_partitions(live.raw, datetime(2026, 11, 20, 2, tzinfo=timezone.utc), hours=2, seed=12,
                     messages_per_hour=60, files_per_partition=1)
    (live.raw / "dt=2026-11-20" / "hour=02" / "notes.txt").write_text("not a message file\n")
    created = live.backfill(t2, t3)
    failed = live.wait_batches([t2])[t2]
    assert failed["state"] == "failed"
    process = live.task_instances(failed["dag_run_id"])["process_batch"]
    assert process["state"] == "failed" and process["try_number"] == 1  # a user error: no retry
    assert "unsupported input file" in live.task_log(failed["dag_run_id"], "process_batch", 1)
    time.sleep(8)  # several scheduler loops, in which nothing of t3 may start
    later = live.backfill_runs([t3])[t3]
    started = {ti["task_id"]: ti["start_date"] for ti in live.task_instances(later["dag_run_id"]).values()}
    assert started["process_batch"] is None and started["publish"] is None, started
    assert not (live.warehouse / "runs" / f"{t3}.json").exists()
    # the run of t3 would wait for its dagrun_timeout: end it and the backfill
    status, body = live.api("PUT", f"/api/v2/backfills/{created['id']}/cancel")
    assert status == 200, body
    status, body = live.api("PATCH", f"/api/v2/dags/message_dedup/dagRuns/{later['dag_run_id']}", {"state": "failed"})
    assert status == 200, body
