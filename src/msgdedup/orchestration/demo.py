"""``make demo``: sample partitions through a local Airflow, then a summary per batch.

Steps (each safe to repeat: a second ``make demo`` reuses the running Airflow, the generated
partitions and the finished runs):

1. generate sample raw partitions (``msgdedup.sample_data``) for the 12 hours before the last
   complete hour, once; the window is remembered in ``.airflow/demo/window.json``;
2. configure and start Airflow in ``.airflow/`` (``local_airflow``) with a batch service (one warm
   Spark application that runs every partition's dedup and gate: ``msgdedup.batch_service``),
   create the ``spark_default`` connection (``local[*]``), the Variables (``msgdedup_batch_service``
   names the service's socket) and the one-slot pool ``msgdedup_warehouse``;
3. create a backfill (``--reprocess-behavior failed``) over the window (oldest first: each
   partition's Spark step after its predecessor's, each publish after its predecessor's) through
   the REST API of the running API server (``POST /api/v2/backfills``), unpause the DAG and wait
   for the real scheduler, printing progress;
4. print a summary per batch and, last, ``UI: http://localhost:8080 user: admin password: …``.

The demo has no producer writing new hours, so the scheduler does not create hourly runs
(``[scheduler] use_job_schedule = False``); backfills and manual triggers run as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from msgdedup import reports, sample_data
from msgdedup.orchestration import settings
from msgdedup.orchestration.local_airflow import BATCH_SERVICE, PROJECT_ROOT, ComponentExited, LocalAirflow
from msgdedup.orchestration.partitions import batch_id_for
from msgdedup.review.screenshots import write_demo_screenshots

TERMINAL = {"success", "failed"}


def log(message: str) -> None:
    print(f"[demo {datetime.now():%H:%M:%S}] {message}", flush=True)


def demo_airflow(home: Path, port: int) -> LocalAirflow:
    return LocalAirflow(home, port, extra_config={"scheduler": {"use_job_schedule": "False"}}, batch_service=True)


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
    """The spark_default connection, the msgdedup Variables (the batch service's socket, if the
    home runs one) and the warehouse pool (overwritten if they exist). Run before the components
    start (nothing else writes the DB then)."""
    with tempfile.TemporaryDirectory() as tmp:
        variables = {settings.VAR_RAW_ROOT: str(raw), settings.VAR_WAREHOUSE: str(warehouse),
                     settings.VAR_CONFIG: str(config) if config else "",
                     settings.VAR_BATCH_SERVICE: str(af.batch_service_socket) if af.batch_service else ""}
        (Path(tmp) / "variables.json").write_text(json.dumps(variables))
        af.airflow("variables", "import", str(Path(tmp) / "variables.json"))
        conns = {settings.SPARK_CONN_ID: {"conn_type": "spark", "host": "local[*]",
                                          "description": "Spark master for message_dedup"}}
        (Path(tmp) / "connections.json").write_text(json.dumps(conns))
        af.airflow("connections", "import", "--overwrite", str(Path(tmp) / "connections.json"))
    af.airflow("pools", "set", settings.WAREHOUSE_POOL, str(settings.WAREHOUSE_POOL_SLOTS),
               settings.WAREHOUSE_POOL_DESCRIPTION)


def wait_for_dag(af: LocalAirflow, token: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        af.check_running()
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


def _running_backfills(af: LocalAirflow, token: str) -> list[dict[str, Any]]:
    """The DAG's backfills not completed yet (none where the API does not answer)."""
    status, body = af.api("GET", f"/api/v2/backfills?dag_id={settings.DAG_ID}", token=token)
    return [b for b in body.get("backfills", []) if b.get("completed_at") is None] if status == 200 else []


def active_backfill(af: LocalAirflow, token: str) -> bool:
    return bool(_running_backfills(af, token))


def wait_backfills_done(af: LocalAirflow, timeout: float = 300) -> None:
    """Airflow allows one running backfill per DAG; it is marked completed shortly after its runs."""
    deadline = time.monotonic() + timeout
    while active_backfill(af, af.token()):
        af.check_running()
        if time.monotonic() > deadline:
            raise TimeoutError(f"a backfill of {settings.DAG_ID} is still running after {timeout}s")
        time.sleep(2)


class BackfillError(RuntimeError):
    """The backfill could not be created (the message says why, with the API's answer)."""


# Transient SQLite lock (503 from the API server, or 500 "Database error" when the request's audit-log
# write met it): retry after these delays (about 70 s in all).
# Each attempt fails with a probability of roughly 1/3 right after start-up (measured: 1 lock in
# 3 fresh start-ups), so 10 retries leave well under one failure in 10,000 start-ups.
BACKFILL_RETRY_DELAYS = (1, 2, 3, 5, 8, 10, 10, 10, 10, 10)
# An attempt that failed on a lock may leave its backfill row behind (Airflow cleans it up
# best-effort); the scheduler marks such an empty backfill complete after 2 minutes.
ORPHAN_BACKFILL_WAIT_S = 180


def backfill_request(first: str, last: str, reprocess: str = "failed",
                     conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """The body of ``POST /api/v2/backfills`` over first..last (batch ids, inclusive), oldest
    first, each run after its predecessor (``settings.MAX_ACTIVE_RUNS``); the same as ``airflow
    backfill create --dag-id message_dedup --from-date <first>:00:00+00:00 --to-date
    <last>:00:00+00:00 --reprocess-behavior <reprocess> --max-active-runs 2 [--dag-run-conf <conf>]``."""
    return {
        "dag_id": settings.DAG_ID,
        "from_date": f"{first}:00:00+00:00",
        "to_date": f"{last}:00:00+00:00",
        "reprocess_behavior": reprocess,
        "max_active_runs": settings.MAX_ACTIVE_RUNS,
        "run_backwards": False,
        "dag_run_conf": conf or {},
    }


@contextmanager
def dag_paused(af: LocalAirflow) -> Iterator[None]:
    """The DAG paused for the duration (unless it was already), then as it was.

    Why, around a backfill's creation on SQLite: a SAVEPOINT outside a transaction commits when
    it is released, so Airflow's create commits each backfill run as it makes it, and when a
    later run's insert fails on the lock, its clean-up deletes the runs made so far. A scheduler
    that has started one of them meanwhile then fails to update it (``StaleDataError: UPDATE
    statement on table 'dag_run' expected to update 1 row(s); 0 were matched``) and exits: the
    bench met it once (apache/airflow#68699 is the partial-commit bug, #67900 the clean-up). The
    scheduler starts no run of a paused DAG, so it never sees a run that may be deleted."""
    token = af.token()
    status, dag = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}", token=token)
    if status != 200:
        raise RuntimeError(f"reading {settings.DAG_ID} failed: {status} {dag}")
    if dag.get("is_paused"):
        yield
        return
    set_paused(af, True)
    try:
        yield
    finally:
        set_paused(af, False)


# How long set_paused waits for the API to read back the state it wrote (half of it before
# writing it again).
PAUSE_CONFIRM_S = 20


def set_paused(af: LocalAirflow, paused: bool, confirm_s: float = PAUSE_CONFIRM_S) -> None:
    """Pause or unpause the DAG (PATCH /api/v2/dags/<id>), and wait until the API reads it back
    so; RuntimeError with the API's answer if it refuses, or if the state never reads back.

    Why read it back: on SQLite, right after a backfill's create met the lock, the API answered
    200 to the unpause and then, 35 ms later, read the DAG as paused (CI, December 4; the
    scheduler started the backfill's queued run a second later, which it does for unpaused DAGs
    only, and nothing paused it in between). A DAG left paused after a backfill silently stops
    its hourly runs, and a caller that reads it paused would not restore it."""
    doing = "pausing" if paused else "unpausing"
    for _ in range(2):  # the first write itself may have been lost: written again, once
        status, body = af.api("PATCH", f"/api/v2/dags/{settings.DAG_ID}", {"is_paused": paused}, token=af.token())
        if status != 200:
            raise RuntimeError(f"{doing} {settings.DAG_ID} failed: {status} {body}")
        status, body = read_back_paused(af, paused, confirm_s / 2)
        if status == 200 and body.get("is_paused") is paused:
            return
    raise RuntimeError(f"{doing} {settings.DAG_ID}: the API still reads "
                       f"{'is_paused=' + str(body.get('is_paused')) if status == 200 else body} after {confirm_s}s")


def read_back_paused(af: LocalAirflow, paused: bool, timeout: float) -> tuple[int, Any]:
    """GET the DAG until the API reads its ``is_paused`` as ``paused`` or ``timeout`` passes;
    the last answer (status, body). The API can read a state it has just written late
    (``set_paused``)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}", token=af.token())
        if (status == 200 and body.get("is_paused") is paused) or time.monotonic() > deadline:
            return status, body
        time.sleep(0.5)


def backfill(af: LocalAirflow, first: str, last: str, reprocess: str = "failed",
             conf: dict[str, Any] | None = None, say=log) -> dict[str, Any]:
    """Create a backfill through the running API server, the DAG paused meanwhile
    (:func:`dag_paused` says why); return the API's backfill object.

    Why a create can fail on SQLite, with any busy timeout: Airflow creates each backfill run in
    a SAVEPOINT that first reads (is there a run for this date?) and then inserts the run. On
    SQLite a SAVEPOINT outside a transaction starts a *deferred* transaction, so the read takes a
    WAL snapshot; if another component (the scheduler's heartbeat, the dag-processor) commits
    before the insert, SQLite refuses the insert at once (SQLITE_BUSY_SNAPSHOT, "database is
    locked"): waiting cannot help, the transaction must start again. That was ``make demo``'s
    ``backfill create failed`` (then from ``airflow backfill create``, the same code). Airflow
    removes the half-created backfill and the API answers 503, so the cure is to try again:
    after BACKFILL_RETRY_DELAYS, with a message saying so. A 409 after such an attempt is that
    attempt's backfill, if Airflow's clean-up failed: wait until the scheduler has completed it
    (it does so for an empty backfill after 2 min), then retry. Anything else fails at once with
    the API's answer. REST rather than the CLI: the API server is running already, no fifth
    process has to start Airflow, and the 503 is a clear signal to retry on.
    """
    with dag_paused(af):
        return _create_backfill(af, backfill_request(first, last, reprocess, conf), say)


def _create_backfill(af: LocalAirflow, body: dict[str, Any], say) -> dict[str, Any]:
    delays = list(BACKFILL_RETRY_DELAYS)
    locked_before = False
    attempt = 0
    while True:
        attempt += 1
        status, answer = af.api("POST", "/api/v2/backfills", body, token=af.token())
        if status == 200:
            return answer
        if status == 409 and locked_before:
            say(f"backfill create: a backfill of {settings.DAG_ID} is active, probably the half-created one "
                f"of the locked attempt; waiting up to {ORPHAN_BACKFILL_WAIT_S}s for the scheduler to end it")
            try:
                wait_backfills_done(af, timeout=ORPHAN_BACKFILL_WAIT_S)
            except TimeoutError as exc:
                raise BackfillError(f"backfill create failed: {exc}") from None
            locked_before = False
            continue
        if status == 500 and _refused_write(answer):
            # The API's own audit-log write (after the handler committed the backfill) met the
            # lock: the backfill may well exist. Retrying would meet it as a 409 and wait for all
            # its runs, so take it when it is ours; else the create itself failed: try again.
            created = _active_backfill_of(af, body)
            if created is not None:
                say("backfill create: the API answered 500 for its audit log's write, but the backfill "
                    f"was created (id {created.get('id')})")
                return created
        if (status == 503 or status == 500 and _refused_write(answer)) and delays:
            delay = delays.pop(0)
            locked_before = True
            say(f"backfill create: SQLite refused the write (another Airflow component wrote to the "
                f"metadata database meanwhile: {answer.get('detail') if isinstance(answer, dict) else answer}); "
                f"retrying in {delay}s (attempt {attempt}/{len(BACKFILL_RETRY_DELAYS) + 1})")
            time.sleep(delay)
            continue
        raise BackfillError(f"backfill create failed after {attempt} attempt(s): "
                            f"POST /api/v2/backfills -> {status} {answer}")


def _refused_write(answer: Any) -> bool:
    """An API answer that says the metadata database refused a write (the SQLite lock)."""
    detail = answer.get("detail") if isinstance(answer, dict) else None
    return isinstance(detail, dict) and detail.get("reason") == "Database error"


def _active_backfill_of(af: LocalAirflow, body: dict[str, Any]) -> dict[str, Any] | None:
    """The running backfill of ``body``'s dates (``backfill_request``), if there is one."""
    wanted = (datetime.fromisoformat(body["from_date"]), datetime.fromisoformat(body["to_date"]))
    for found in _running_backfills(af, af.token()):
        dates = tuple(datetime.fromisoformat(found[key].replace("Z", "+00:00")) for key in ("from_date", "to_date"))
        if dates == wanted:
            return found
    return None


def wait_for_runs(af: LocalAirflow, batch_ids: list[str], timeout: float, every: float = 2) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    last_line = ""
    last_print = 0.0
    while True:
        af.check_running()  # a dead scheduler would leave the runs "running" until the timeout
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
             f"{'quarantined':>11s} {'window misses':>13s}  {'gate':8s} published"
    lines = [header, "-" * len(header)]
    missed: dict[str, dict[str, Any]] = {}  # cache -> misses, its findings (reports.audit_finding) oldest first
    for b in batch_ids:
        r = reports.batch_report(warehouse, b, max_rows=0)
        c = r["counts"]
        gate = (r["gate"] or {}).get("status", "not run")
        audit = r.get("window_audit")
        off = audit is None or r["audit_horizon"] == 0  # not recorded, or the audit was off: "-", not 0
        misses = None if off else sum(a["misses"] for a in audit.values())
        for name, a in (audit or {}).items():
            if a["misses"]:
                seen = missed.setdefault(name, {"misses": 0, "findings": []})
                seen["misses"] += a["misses"]
                seen["findings"].append(reports.audit_finding(a))
        lines.append(
            f"{b:14s} {(runs.get(b) or {}).get('state') or '-':8s} {_n(c['delivered']):>9s} "
            f"{_n(c['by_reason'].get('duplicate')):>10s} {_n(c['by_reason'].get('transaction_rejected')):>12s} "
            f"{_n(c['quarantined']):>11s} {_n(misses):>13s}  {gate:8s} {'yes' if r['published'] else 'no'}"
        )
    for name, seen in sorted(missed.items()):
        lines.append(_audit_line(name, seen["misses"], reports.largest_finding(seen["findings"])))
    return lines


def _audit_line(cache: str, misses: int, f: dict[str, Any]) -> str:
    """The closing line for a cache whose window let resends through, in its own setting and unit
    (``reports.largest_finding`` over the batches); a miss inside today's window is not blamed on
    its size (§9: the window grew since, or a time window's cap evicted the key)."""
    window = f"its window ({f['setting']} {f['current']})"
    if f["too_small"]:
        verdict = f"because {window} was too small; recommended {f['setting']}: {f['recommended']}"
    else:
        verdict = f"although {window} is big enough now (grown since, or a time window's id_cache_size cap)"
    return f"Window-miss audit: {misses} resend(s) on {cache} got through {verdict} (the batch pages say which " \
           "and by how much)"


def _n(value: Any) -> str:
    return "-" if value is None else str(value)


def sample_batches(af: LocalAirflow, hours: int) -> tuple[Path, Path, list[str]]:
    """Step 1: the sample partitions (raw root, warehouse, batch ids), generated once per home."""
    state = af.home / "demo"
    raw, warehouse = state / "raw", state / "warehouse"
    start, hours = window(state, hours)
    ensure_partitions(raw, start, hours)
    return raw, warehouse, [batch_id_for(start + timedelta(hours=h)) for h in range(hours)]


def check_pool(af: LocalAirflow, token: str) -> None:
    """The warehouse pool exists with one slot; without it process_batch would wait forever."""
    status, body = af.api("GET", f"/api/v2/pools/{settings.WAREHOUSE_POOL}", token=token)
    if status != 200 or body.get("slots") != settings.WAREHOUSE_POOL_SLOTS:
        raise RuntimeError(
            f"pool {settings.WAREHOUSE_POOL} must exist with {settings.WAREHOUSE_POOL_SLOTS} slot "
            f"(GET /api/v2/pools/{settings.WAREHOUSE_POOL} -> {status} {body}): without it "
            "process_batch stays scheduled forever"
        )


def demo_config(state_dir: Path) -> Path:
    """The demo's address settings file (``sample_data.DEMO_ADDRESS_SETTINGS``: one window too
    small for the sample's late resends, so the window-miss audit has something to show)."""
    path = state_dir / "address-settings.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(sample_data.DEMO_ADDRESS_SETTINGS, sort_keys=False))
    return path


def start_airflow(af: LocalAirflow, raw: Path, warehouse: Path) -> str:
    """Step 2: configure and start Airflow (or reuse the running one); return an API token once
    the DAG is parsed and the warehouse pool is there."""
    if not all(af.running().values()):
        log(f"configuring Airflow in {af.home} (SQLite, LocalExecutor, parallelism {af.parallelism})")
        af.configure()  # even when the batch service still runs from before (a new port, say)
        # The batch service first: its JVM and Spark application start on the other core while
        # the metadata DB is made, some 15 s of one Python process.
        af.start((BATCH_SERVICE,))
        af.migrate()
        configure_airflow_objects(af, raw, warehouse, demo_config(af.home / "demo"))
        log("starting " + ", ".join(af.components))
        af.start()
    else:
        configure_airflow_objects(af, raw, warehouse, demo_config(af.home / "demo"))
        log(f"Airflow already running in {af.home}")
    af.wait_api()
    token = af.token()
    wait_for_dag(af, token)
    check_pool(af, token)
    if af.batch_service:
        af.wait_batch_service()
        log(f"batch service listening on {af.batch_service_socket} (one warm Spark application for every partition)")
    return token


def ensure_backfill(af: LocalAirflow, token: str, batch_ids: list[str], say=log) -> None:
    """Step 3: a backfill over the batches that have not succeeded yet, unless one is running
    (an interrupted ``make demo`` resumes: its backfill carries on, nothing is created twice).
    Raises BackfillError."""
    runs = runs_by_batch(af, token)
    todo = [b for b in batch_ids if (runs.get(b) or {}).get("state") != "success"]
    if not todo:
        log("every sample batch already ran")
    elif active_backfill(af, token):
        log("a backfill is already running; waiting for it")
    else:
        say(f"creating a backfill of {settings.DAG_ID} from {batch_ids[0]} to {batch_ids[-1]} "
            f"(POST /api/v2/backfills, reprocess_behavior failed, max_active_runs {settings.MAX_ACTIVE_RUNS})")
        created = backfill(af, batch_ids[0], batch_ids[-1], say=say)
        say(f"backfill {created['id']} created")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msgdedup.orchestration.demo")
    parser.add_argument("--home", type=Path, default=PROJECT_ROOT / ".airflow")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", "8080")))
    parser.add_argument("--hours", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds to wait for the runs")
    args = parser.parse_args(argv)

    af = demo_airflow(args.home, args.port)
    raw, warehouse, batch_ids = sample_batches(af, args.hours)
    try:
        token = start_airflow(af, raw, warehouse)
        ensure_backfill(af, token, batch_ids)
        try:
            set_paused(af, False)
        except RuntimeError as exc:  # the API refused: say so, as for a failed backfill
            log(str(exc))
            return 1
        started = time.monotonic()
        runs = wait_for_runs(af, batch_ids, timeout=args.timeout)
    except BackfillError as exc:
        log(str(exc))
        return 1
    except ComponentExited as exc:
        log(f"{exc}. `make stop`, then `make demo` again resumes where this one stopped.")
        return 1
    log(f"{len(batch_ids)} partitions in {time.monotonic() - started:.0f} s after the backfill was created "
        "(set-up and Airflow's start-up not included)")
    print()
    for line in summary(warehouse, batch_ids, runs):
        print(line)
    write_demo_screenshots(af, warehouse, af.home / "demo", log)
    failed = [b for b in batch_ids if (runs.get(b) or {}).get("state") != "success"]
    print()
    print(f"Data quality view: {af.base_url}/plugin/data-quality  warehouse: {warehouse}")
    print("Stop everything with: make stop")
    print(f"UI: {af.base_url} user: admin password: {af.password()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
