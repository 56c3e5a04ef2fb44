#!/usr/bin/env python
"""Soak test of ``make demo``'s start-up: N times from a clean home, then an interrupted demo resumed.

Issue 9 §2: ``make demo`` failed in one of two fresh clones with ``backfill create failed``
(SQLite's ``database is locked``: see ``msgdedup.orchestration.demo.backfill``). This runs the
demo's own steps (``msgdedup.orchestration.demo``: sample partitions, configure + migrate + start
Airflow, wait for the DAG and the pool, create the backfill) ``--runs`` times in a row, each in a
new home on a free port, at the moment of most contention (right after the start), and checks
that exactly one backfill with one run per sample hour exists, and how many lock retries it took.
The DAG stays paused here, so no
Spark application runs; the backfill's creation is what failed.

Then (unless ``--no-resume``) it runs ``python -m msgdedup.orchestration.demo --hours 2``,
interrupts it (SIGINT, as Ctrl-C does) once its backfill exists, runs it again and checks that
the second run finishes both hours without creating a second backfill.

    .venv/bin/python scripts/demo_startup_soak.py [--runs 5] [--no-resume] [--keep DIR]

Exit 0 when every start-up (and the resume) passed. Stops every Airflow it started.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from msgdedup.orchestration import demo, settings
from msgdedup.orchestration.local_airflow import free_port


def say(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


def backfills(af) -> list[dict]:
    status, body = af.api("GET", f"/api/v2/backfills?dag_id={settings.DAG_ID}")
    assert status == 200, (status, body)
    return body["backfills"]


def backfill_runs(af) -> list[dict]:
    status, body = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}/dagRuns?limit=1000&run_type=backfill")
    assert status == 200, (status, body)
    return body["dag_runs"]


def startup_once(home: Path, hours: int) -> str:
    """The demo's start-up and backfill creation in a clean home; returns a one-line result."""
    af = demo.demo_airflow(home, free_port())
    t0 = time.monotonic()
    try:
        raw, warehouse, batch_ids = demo.sample_batches(af, hours)
        token = demo.start_airflow(af, raw, warehouse)
        started = time.monotonic() - t0
        said: list[str] = []

        def record(message: str) -> None:
            said.append(message)
            demo.log(message)

        demo.ensure_backfill(af, token, batch_ids, say=record)
        created = backfills(af)
        runs = backfill_runs(af)
        if len(created) != 1 or len(runs) != hours:
            raise AssertionError(f"expected 1 backfill with {hours} runs, got {len(created)} backfills "
                                 f"and {len(runs)} backfill runs")
        retries = sum("retrying in" in m for m in said)
        return (f"ok: started in {started:.0f}s, backfill {created[0]['id']} with {len(runs)} runs "
                f"after {time.monotonic() - t0:.0f}s; lock retries: {retries}")
    finally:
        af.stop()


def resume_once(home: Path, timeout: float) -> str:
    """``make demo`` interrupted once its backfill exists, then run again to the end."""
    port = free_port()
    cmd = [sys.executable, "-m", "msgdedup.orchestration.demo", "--home", str(home),
           "--port", str(port), "--hours", "2", "--timeout", str(timeout)]
    af = demo.demo_airflow(home, port)
    try:
        first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in first.stdout:
            lines.append(line)
            print("  1st | " + line, end="", flush=True)
            if "backfill" in line and line.rstrip().endswith("created"):
                first.send_signal(signal.SIGINT)  # Ctrl-C while the demo waits for the runs
                break
        first.stdout.read()
        first.wait(timeout=60)
        assert any(line.rstrip().endswith("created") for line in lines), "the first demo created no backfill"
        second = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=timeout + 600)
        for line in second.stdout.splitlines():
            print("  2nd | " + line, flush=True)
        assert second.returncode == 0, f"the resumed demo exited {second.returncode}"
        assert "Airflow already running" in second.stdout
        assert "creating a backfill" not in second.stdout, "the resumed demo created a second backfill"
        assert len(backfills(af)) == 1
        return "ok: interrupted after its backfill was created; the rerun reused Airflow and the backfill, 2/2 batches"
    finally:
        af.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hours", type=int, default=12, help="sample hours per start-up (the demo's)")
    parser.add_argument("--no-resume", action="store_true")
    parser.add_argument("--resume-timeout", type=float, default=1800)
    parser.add_argument("--keep", type=Path, help="keep the homes under this directory")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="msgdedup-demo-soak-", dir=args.keep))
    failures = 0
    try:
        for i in range(1, args.runs + 1):
            say(f"start-up {i}/{args.runs} from a clean home")
            try:
                result = startup_once(root / f"startup-{i}", args.hours)
            except Exception as exc:  # noqa: BLE001 - count it, report it, go on
                failures += 1
                result = f"FAILED: {type(exc).__name__}: {exc}"
            say(f"start-up {i}/{args.runs}: {result}")
        if not args.no_resume:
            say("interrupted demo, run again")
            try:
                result = resume_once(root / "resume", args.resume_timeout)
            except Exception as exc:  # noqa: BLE001
                failures += 1
                result = f"FAILED: {type(exc).__name__}: {exc}"
            say(f"resume: {result}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    say(f"{'all passed' if failures == 0 else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
