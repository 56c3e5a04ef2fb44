"""``make demo``: sample partitions through a local Airflow, then a summary per batch.

Steps (each safe to repeat: a second ``make demo`` reuses the running Airflow, the generated
partitions and the finished runs):

1. generate sample raw partitions (``msgdedup.sample_data``) for the 12 hours before the last
   complete hour, once; the window is remembered in ``.airflow/demo/window.json``;
2. configure and start Airflow in ``.airflow/`` (``local_airflow``), create the
   ``spark_default`` connection (``local[*]``) and the Variables;
3. ``airflow backfill create --reprocess-behavior failed`` over the window (oldest first, one run
   at a time) through the real scheduler, unpause the DAG and wait, printing progress;
4. print a summary per batch and, last, ``UI: http://localhost:8080 user: admin password: …``.

The demo has no producer writing new hours, so the scheduler does not create hourly runs
(``[scheduler] use_job_schedule = False``); backfills and manual triggers run as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from msgdedup import reports, sample_data
from msgdedup.orchestration import settings
from msgdedup.orchestration.local_airflow import PROJECT_ROOT, LocalAirflow
from msgdedup.orchestration.partitions import batch_id_for

TERMINAL = {"success", "failed"}


def log(message: str) -> None:
    print(f"[demo {datetime.now():%H:%M:%S}] {message}", flush=True)


def demo_airflow(home: Path, port: int) -> LocalAirflow:
    return LocalAirflow(home, port, extra_config={"scheduler": {"use_job_schedule": "False"}})


def window(state_dir: Path, hours: int) -> tuple[datetime, int]:
    path = state_dir / "window.json"
    if path.exists():
        data = json.loads(path.read_text())
        return datetime.fromisoformat(data["start"]), int(data["hours"])
    start = sample_data.default_start(hours)
    state_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"start": start.isoformat(), "hours": hours}) + "\n")
    return start, hours


def ensure_partitions(raw: Path, start: datetime, hours: int) -> None:
    missing = [
        h for h in range(hours)
        if not (raw / (start + timedelta(hours=h)).strftime("dt=%Y-%m-%d/hour=%H") / "_SUCCESS").exists()
    ]
    if not missing:
        log(f"sample partitions already in {raw}")
        return
    result = sample_data.write_partitions(raw, start, hours)
    kinds = ", ".join(f"{k}={v}" for k, v in result["kinds"].items())
    log(f"generated {hours} partitions in {raw} ({kinds})")


def configure_airflow_objects(af: LocalAirflow, raw: Path, warehouse: Path, config: Path | None) -> None:
    """The spark_default connection and the msgdedup Variables (overwritten if they exist)."""
    with tempfile.TemporaryDirectory() as tmp:
        variables = {settings.VAR_RAW_ROOT: str(raw), settings.VAR_WAREHOUSE: str(warehouse),
                     settings.VAR_CONFIG: str(config) if config else ""}
        (Path(tmp) / "variables.json").write_text(json.dumps(variables))
        af.airflow("variables", "import", str(Path(tmp) / "variables.json"))
        conns = {settings.SPARK_CONN_ID: {"conn_type": "spark", "host": "local[*]",
                                          "description": "Spark master for message_dedup"}}
        (Path(tmp) / "connections.json").write_text(json.dumps(conns))
        af.airflow("connections", "import", "--overwrite", str(Path(tmp) / "connections.json"))


def wait_for_dag(af: LocalAirflow, token: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}", token=token)
        if status == 200:
            return
        time.sleep(2)
    status, errors = af.api("GET", "/api/v2/importErrors", token=token)
    raise TimeoutError(f"{settings.DAG_ID} was not parsed in {timeout}s; import errors: {errors}")


def runs_by_batch(af: LocalAirflow, token: str) -> dict[str, dict[str, Any]]:
    """Latest DAG run per batch id (by logical date; manual runs without one are left out)."""
    status, body = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}/dagRuns?limit=1000&order_by=start_date",
                          token=token)
    if status != 200:
        raise RuntimeError(f"listing runs failed: {status} {body}")
    out: dict[str, dict[str, Any]] = {}
    for run in body["dag_runs"]:
        if run.get("logical_date"):
            out[batch_id_for(datetime.fromisoformat(run["logical_date"].replace("Z", "+00:00")))] = run
    return out


def active_backfill(af: LocalAirflow, token: str) -> bool:
    status, body = af.api("GET", f"/api/v2/backfills?dag_id={settings.DAG_ID}", token=token)
    return status == 200 and any(b.get("completed_at") is None for b in body.get("backfills", []))


def wait_backfills_done(af: LocalAirflow, timeout: float = 300) -> None:
    """Airflow allows one running backfill per DAG; it is marked completed shortly after its runs."""
    deadline = time.monotonic() + timeout
    while active_backfill(af, af.token()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"a backfill of {settings.DAG_ID} is still running after {timeout}s")
        time.sleep(2)


def backfill(af: LocalAirflow, first: str, last: str, reprocess: str = "failed",
             conf: dict[str, Any] | None = None) -> subprocess.CompletedProcess:
    """``airflow backfill create`` over first..last (batch ids, inclusive), oldest first."""
    args = ["backfill", "create", "--dag-id", settings.DAG_ID,
            "--from-date", f"{first}:00:00+00:00", "--to-date", f"{last}:00:00+00:00",
            "--reprocess-behavior", reprocess, "--max-active-runs", "1"]
    if conf:
        args += ["--dag-run-conf", json.dumps(conf)]
    return af.airflow(*args, check=False)


def wait_for_runs(af: LocalAirflow, batch_ids: list[str], timeout: float, every: float = 15) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    last_line = ""
    last_print = 0.0
    while True:
        token = af.token()
        runs = runs_by_batch(af, token)
        states = {b: (runs.get(b) or {}).get("state") for b in batch_ids}
        done = sum(1 for s in states.values() if s == "success")
        failed = [b for b, s in states.items() if s == "failed"]
        running = [b for b, s in states.items() if s == "running"]
        line = f"{done}/{len(batch_ids)} batches done"
        if running:
            line += f", running {', '.join(running)}"
        if failed:
            line += f", FAILED {', '.join(failed)}"
        if line != last_line or time.monotonic() - last_print > 60:
            log(line)
            last_line, last_print = line, time.monotonic()
        if all(s in TERMINAL for s in states.values()):
            return runs
        if time.monotonic() > deadline:
            log(f"gave up waiting after {timeout:.0f}s")
            return runs
        time.sleep(every)


def summary(warehouse: Path, batch_ids: list[str], runs: dict[str, dict]) -> list[str]:
    header = f"{'batch':14s} {'run':8s} {'delivered':>9s} {'duplicates':>10s} {'txn rejected':>12s} " \
             f"{'quarantined':>11s}  {'gate':8s} published"
    lines = [header, "-" * len(header)]
    for b in batch_ids:
        r = reports.batch_report(warehouse, b, max_rows=0)
        c = r["counts"]
        gate = (r["gate"] or {}).get("status", "not run")
        lines.append(
            f"{b:14s} {(runs.get(b) or {}).get('state') or '-':8s} {_n(c['delivered']):>9s} "
            f"{_n(c['by_reason'].get('duplicate')):>10s} {_n(c['by_reason'].get('transaction_rejected')):>12s} "
            f"{_n(c['quarantined']):>11s}  {gate:8s} {'yes' if r['published'] else 'no'}"
        )
    return lines


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msgdedup.orchestration.demo")
    parser.add_argument("--home", type=Path, default=PROJECT_ROOT / ".airflow")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", "8080")))
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds to wait for the runs")
    args = parser.parse_args(argv)

    af = demo_airflow(args.home, args.port)
    state = af.home / "demo"
    raw, warehouse = state / "raw", state / "warehouse"
    start, hours = window(state, args.hours)
    batch_ids = [batch_id_for(start + timedelta(hours=h)) for h in range(hours)]
    ensure_partitions(raw, start, hours)

    if not all(af.running().values()):
        log(f"configuring Airflow in {af.home} (SQLite, LocalExecutor, parallelism {af.parallelism})")
        af.configure()
        af.migrate()
        configure_airflow_objects(af, raw, warehouse, None)
        log("starting api-server, scheduler, dag-processor, triggerer")
        af.start()
    else:
        configure_airflow_objects(af, raw, warehouse, None)
        log(f"Airflow already running in {af.home}")
    af.wait_api()
    token = af.token()
    wait_for_dag(af, token)

    runs = runs_by_batch(af, token)
    todo = [b for b in batch_ids if (runs.get(b) or {}).get("state") != "success"]
    if not todo:
        log("every sample batch already ran")
    elif active_backfill(af, token):
        log("a backfill is already running; waiting for it")
    else:
        log(f"airflow backfill create --dag-id {settings.DAG_ID} --from-date {batch_ids[0]} "
            f"--to-date {batch_ids[-1]} --reprocess-behavior failed --max-active-runs 1")
        result = backfill(af, batch_ids[0], batch_ids[-1])
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:], file=sys.stderr)
            log("backfill create failed")
            return 1
    status, body = af.api("PATCH", f"/api/v2/dags/{settings.DAG_ID}", {"is_paused": False}, token=token)
    if status != 200:
        log(f"could not unpause {settings.DAG_ID}: {status} {body}")
        return 1
    runs = wait_for_runs(af, batch_ids, timeout=args.timeout)
    print()
    for line in summary(warehouse, batch_ids, runs):
        print(line)
    failed = [b for b in batch_ids if (runs.get(b) or {}).get("state") != "success"]
    print()
    print(f"Data quality view: {af.base_url}/plugin/data-quality  warehouse: {warehouse}")
    print("Stop everything with: make stop")
    print(f"UI: {af.base_url} user: admin password: {af.password()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
