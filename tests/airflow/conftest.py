"""Airflow tests: an isolated AIRFLOW_HOME for in-process imports (set before airflow loads)."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
DAGS = PROJECT / "dags"
PLUGINS = PROJECT / "plugins"

if "AIRFLOW_HOME" not in os.environ or not os.environ.get("MSGDEDUP_KEEP_AIRFLOW_HOME"):
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="msgdedup-airflow-home-")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(PLUGINS)


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


# ------------------------------------------------------------------ a live Airflow (slow tests)
# One Airflow (api-server + scheduler + dag-processor, SQLite, LocalExecutor) for the tests of
# this package, on a free port with a temporary AIRFLOW_HOME; the e2e and browser tests share it.
# Package scope: it stops once they are done instead of polling beside the rest of the suite.

E2E_HOURS = ("2026-11-20T00", "2026-11-20T01")


class LiveAirflow:
    def __init__(self, af, raw, warehouse):
        self.af, self.raw, self.warehouse = af, raw, warehouse
        self._token = None

    @property
    def token(self):
        if self._token is None:
            self._token = self.af.token()
        return self._token

    def api(self, method, path, body=None, token=None):
        return self.af.api(method, path, body, token=token or self.token)

    def runs(self):
        status, body = self.api("GET", "/api/v2/dags/message_dedup/dagRuns?limit=100&order_by=id")
        assert status == 200, body
        return body["dag_runs"]

    def task_instances(self, run_id):
        status, body = self.api("GET", f"/api/v2/dags/message_dedup/dagRuns/{run_id}/taskInstances")
        assert status == 200, body
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def wait_run(self, run_id, timeout=900):
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, run = self.api("GET", f"/api/v2/dags/message_dedup/dagRuns/{run_id}")
            assert status == 200, run
            if run["state"] in ("success", "failed"):
                return run
            time.sleep(3)
        raise AssertionError(f"run {run_id} did not finish in {timeout}s: {self.task_instances(run_id)}")

    def backfill(self, first, last, reprocess="failed", conf=None):
        """A backfill created the way ``make demo`` creates it (REST, lock retries)."""
        from msgdedup.orchestration.demo import backfill, read_back_paused, wait_backfills_done

        wait_backfills_done(self.af)
        created = backfill(self.af, first, last, reprocess=reprocess, conf=conf)
        # paused only while creating (read back within seconds: the API can read its writes late)
        status, dag = read_back_paused(self.af, False, timeout=10)
        assert status == 200 and dag["is_paused"] is False, dag
        return created

    def backfill_runs(self, batch_ids):
        """The runs (by batch id) whose logical date is one of ``batch_ids``."""
        out = {}
        for run in self.runs():
            if run.get("logical_date"):
                bid = run["logical_date"][:13]
                if bid in batch_ids:
                    out[bid] = run
        return out

    def wait_batches(self, batch_ids, timeout=1200):
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.backfill_runs(batch_ids)
            if len(runs) == len(batch_ids) and all(r["state"] in ("success", "failed") for r in runs.values()):
                return runs
            time.sleep(3)
        raise AssertionError(f"runs not finished in {timeout}s: {self.backfill_runs(batch_ids)}")

    def task_log(self, run_id, task_id, try_number):
        status, body = self.api(
            "GET", f"/api/v2/dags/message_dedup/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        )
        assert status == 200, body
        return json.dumps(body)


@pytest.fixture(scope="session")
def e2e_hours():
    return E2E_HOURS


@pytest.fixture(scope="package")
def live_airflow(tmp_path_factory):
    from msgdedup.orchestration.demo import check_pool, configure_airflow_objects, demo_config, wait_for_dag
    from msgdedup.orchestration.local_airflow import BATCH_SERVICE, LocalAirflow, free_port
    from msgdedup.sample_data import write_partitions

    root = tmp_path_factory.mktemp("live-airflow")
    raw, warehouse = root / "raw", root / "warehouse"
    start = datetime.strptime(E2E_HOURS[0], "%Y-%m-%dT%H").replace(tzinfo=timezone.utc)
    write_partitions(raw, start, hours=len(E2E_HOURS), seed=11, messages_per_hour=60, files_per_partition=1)
    af = LocalAirflow(
        root / "home", free_port(),
        # No producer writes new hours here: only backfills and manual runs (as in the demo).
        extra_config={"scheduler": {"use_job_schedule": "False"}},
        batch_service=True,  # process_batch runs in a warm batch service, as in the demo
    )
    # The demo's windows: count, an Apama domain (orders.*) and a time window (payments.*), with the
    # window-miss audit on
    config = demo_config(root)
    af.configure()
    af.migrate()
    configure_airflow_objects(af, raw, warehouse, config)
    try:
        af.start(components=("api-server", "scheduler", "dag-processor", BATCH_SERVICE))
        af.wait_api()
        af.wait_batch_service()
        live = LiveAirflow(af, raw, warehouse)
        wait_for_dag(af, live.token)
        check_pool(af, live.token)  # created by configure_airflow_objects, as in the demo
        yield live
    finally:
        af.stop()


@pytest.fixture(scope="package")
def backfilled(live_airflow):
    """E2E_HOURS processed by a backfill (``POST /api/v2/backfills``) through the scheduler."""
    from msgdedup.orchestration.demo import set_paused

    live = live_airflow
    set_paused(live.af, False)  # RuntimeError with the API's answer if it refuses or never reads back
    live.backfill(E2E_HOURS[0], E2E_HOURS[-1])
    runs = live.wait_batches(list(E2E_HOURS))
    return live, runs
