"""The whole ``message_dedup`` DAG run for one partition, measured, on the project's local Airflow.

Uses the Airflow helper's lifecycle (:class:`msgdedup.orchestration.local_airflow.LocalAirflow`)
and the demo's setup of the Variables (:func:`msgdedup.orchestration.demo.configure_airflow_objects`)
rather than a lifecycle of its own: the benchmark must measure the deployment users run. Airflow
gets a private home and a free port, and is stopped (exactly the processes it started) at the end.

What is measured: from the manual trigger (REST API, ``conf={"partition": ...}``) until the run is
terminal, polled every ``poll`` seconds; plus the run's own start/end dates and every task's
duration as Airflow records them. The Spark application's own time (``spark_app_s``) is how long
its spark-submit ran, sampled in the same run (Airflow's duration of the ``process_batch`` task if
sampling saw none: that duration also holds the task runner's start-up, which is Airflow's); the
Airflow overhead per partition is ``wall_s - spark_app_s``. The seconds the app recorded itself
(the engine's ``timings`` in the manifest, the gate's in its result.json when it records them)
exclude JVM start-up and are reported next to it. Peak memory is the sampled RSS of all Airflow
components' process trees (scheduler, its LocalExecutor workers and their spark-submits,
api-server, dag-processor), so it includes Airflow's idle footprint, reported separately as
``baseline_rss_bytes``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from msgdedup.bench.measure import PeakSampler, recorded_seconds, tree_rss

COMPONENTS = ("api-server", "scheduler", "dag-processor")
SPARK_TASK = "process_batch"  # the DAG's one spark-submit task: dedup and GX gate in one application
SPARK_MARKERS = ("spark-submit", "org.apache.spark.deploy.SparkSubmit")


def spark_pids(roots: list[int]) -> set[int]:
    """Processes under ``roots`` that are a spark-submit (its launcher script or its JVM)."""
    found: set[int] = set()
    for pid in roots:
        try:
            procs = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            continue
        for proc in procs:
            try:
                cmd = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if any(m in cmd for m in SPARK_MARKERS):
                found.add(proc.pid)
    return found


class SparkTimeSampler(PeakSampler):
    """Peak RSS, plus for how long any spark-submit was running under the roots.

    This is "the Spark apps' own time" inside the DAG run, measured in the same run (sampling
    granularity: ``interval``), so the Airflow overhead does not depend on a second, separately
    timed run of the apps on a machine whose load may have changed in between.
    """

    def __init__(self, roots, interval: float = 0.25) -> None:
        super().__init__(roots, interval)
        self.spark_s = 0.0
        self.spark_apps: set[int] = set()
        self._last: tuple[float, bool] | None = None

    def sample(self) -> None:
        super().sample()
        now = time.perf_counter()
        pids = spark_pids(list(self.roots()))
        if self._last is not None and self._last[1]:
            self.spark_s += now - self._last[0]
        self._last = (now, bool(pids))
        self.spark_apps |= pids


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return round((parse(end) - parse(start)).total_seconds(), 3)


def link_partition(batch_dir: Path, raw_root: Path, batch_id: str) -> Path:
    """Expose a workload batch as the hourly partition the DAG expects, with hard links (no copy)."""
    from msgdedup.orchestration.partitions import partition_relpath

    target = raw_root / partition_relpath(batch_id)
    target.mkdir(parents=True, exist_ok=True)
    for f in sorted(batch_dir.iterdir()):
        if f.is_file() and not (target / f.name).exists():
            try:
                os.link(f, target / f.name)
            except OSError:  # another file system: copy
                (target / f.name).write_bytes(f.read_bytes())
    return target


@dataclass
class DagRunResult:
    ok: bool
    state: str | None = None
    wall_s: float | None = None            # trigger -> terminal state seen
    run_s: float | None = None             # Airflow's start_date -> end_date of the run
    peak_rss_bytes: int = 0
    baseline_rss_bytes: int = 0
    startup_s: float | None = None         # configure + migrate + start + DAG parsed (not in wall_s)
    spark_in_dag_s: float | None = None    # time during which a spark-submit ran inside the DAG run
    spark_task_s: float | None = None      # Airflow's duration of the SPARK_TASK task
    app_recorded_s: dict[str, float | None] = field(default_factory=dict)  # engine_s, gate_s
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None

    @property
    def spark_app_s(self) -> float | None:
        return self.spark_in_dag_s or self.spark_task_s

    @property
    def overhead_s(self) -> float | None:
        """Airflow overhead per partition; only for a successful run (a failed one did less work)."""
        if not self.ok or self.wall_s is None or not self.spark_app_s:
            return None
        return round(self.wall_s - self.spark_app_s, 3)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "spark_app_s": self.spark_app_s, "overhead_s": self.overhead_s}


def run_dag_once(batch_dir: Path, work: Path, batch_id: str, *, master: str = "local[2]",
                 config: Path | None = None, timeout: float = 3600, poll: float = 1.0) -> DagRunResult:
    """Start a private local Airflow, run ``message_dedup`` for ``batch_id`` once, stop Airflow."""
    try:
        from msgdedup.orchestration import settings
        from msgdedup.orchestration.demo import configure_airflow_objects, set_paused, wait_for_dag
        from msgdedup.orchestration.local_airflow import LocalAirflow, free_port
    except Exception as exc:  # noqa: BLE001 - report, never build another lifecycle
        return DagRunResult(ok=False, error=f"local Airflow lifecycle not importable: {exc!r}")

    raw, warehouse = work / "raw", work / "warehouse"
    link_partition(batch_dir, raw, batch_id)
    af = LocalAirflow(work / "home", free_port(),
                      extra_config={"scheduler": {"use_job_schedule": "False"}})
    result = DagRunResult(ok=False)
    t0 = time.perf_counter()
    try:
        af.configure()
        af.migrate()
        configure_airflow_objects(af, raw, warehouse, config)
        _set_master(af, settings.SPARK_CONN_ID, master)
        af.start(components=COMPONENTS)
        af.wait_api()
        token = af.token()
        wait_for_dag(af, token, timeout=600)
        set_paused(af, False)
        result.startup_s = round(time.perf_counter() - t0, 3)
        roots = lambda: [p for p in af.running().values() if p]  # noqa: E731
        time.sleep(2)
        result.baseline_rss_bytes = tree_rss(roots())
        with SparkTimeSampler(roots, 0.25) as sampler:
            start = time.perf_counter()
            status, run = af.api("POST", f"/api/v2/dags/{settings.DAG_ID}/dagRuns",
                                 {"logical_date": None, "conf": {"partition": batch_id}}, token=token)
            if status != 200:
                raise RuntimeError(f"trigger failed: {status} {run}")
            run_id = run["dag_run_id"]
            deadline = start + timeout
            while True:
                af.check_running()
                status, run = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}/dagRuns/{run_id}", token=token)
                if status == 401:
                    token = af.token()
                    continue
                if status == 200 and run["state"] in ("success", "failed"):
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"DAG run {run_id} not finished after {timeout}s")
                time.sleep(poll)
            result.wall_s = round(time.perf_counter() - start, 3)
        result.peak_rss_bytes = sampler.peak
        result.spark_in_dag_s = round(sampler.spark_s, 3)
        result.state = run["state"]
        result.run_s = _seconds(run.get("start_date"), run.get("end_date"))
        status, body = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}/dagRuns/{run_id}/taskInstances",
                              token=token)
        if status == 200:
            for ti in body["task_instances"]:
                result.tasks[ti["task_id"]] = {
                    "state": ti["state"], "duration_s": ti.get("duration"),
                    "try_number": ti.get("try_number"),
                }
        result.spark_task_s = (result.tasks.get(SPARK_TASK) or {}).get("duration_s")
        result.app_recorded_s = {
            "engine_s": recorded_seconds(warehouse / "runs" / f"{batch_id}.json"),
            "gate_s": recorded_seconds(warehouse / "quality" / batch_id / "result.json"),
        }
        result.ok = result.state == "success"
        if not result.ok:
            result.error = f"DAG run ended {result.state}; logs under {af.home / 'logs'}"
    except Exception as exc:  # noqa: BLE001 - the benchmark reports it and goes on
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        af.stop()
    return result


def _set_master(af: Any, conn_id: str, master: str) -> None:
    """The DAG's Spark connection on the same master as every other contender."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "connections.json"
        path.write_text(json.dumps({conn_id: {"conn_type": "spark", "host": master,
                                              "description": "msgdedup bench"}}))
        af.airflow("connections", "import", "--overwrite", str(path))


# -- a backfill through Airflow ---------------------------------------------------------------------
@dataclass
class BackfillResult:
    ok: bool
    partitions: int = 0
    wall_s: float | None = None            # backfill create -> the last run's end
    per_partition_s: float | None = None   # wall_s / partitions
    create_s: float | None = None          # how long `airflow backfill create` took (in wall_s)
    run_s: list[float | None] = field(default_factory=list)   # each run's start -> end
    gap_s: list[float | None] = field(default_factory=list)   # a run's end -> the next run's start
    states: dict[str, str | None] = field(default_factory=dict)
    in_service: bool | None = None         # process_batch ran in the batch service (task log)
    peak_rss_bytes: int = 0
    startup_s: float | None = None         # configure + migrate + start + service + DAG parsed
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# `airflow backfill create` on SQLite may meet a write another component made meanwhile
# ("database is locked"; msgdedup.orchestration.demo.backfill explains it): try again.
BACKFILL_CREATE_ATTEMPTS = 6


def run_backfill(partitions: list[tuple[str, Path]], work: Path, *, master: str = "local[2]",
                 config: Path | None = None, timeout: float = 3600, poll: float = 0.5) -> BackfillResult:
    """Start a private local Airflow with a batch service (as ``make demo`` does), backfill the
    hourly ``partitions`` ``[(batch_id, directory)]`` oldest first with ``airflow backfill
    create`` (as docs/airflow.md tells users), measure create -> last success, stop Airflow."""
    from msgdedup.orchestration import settings
    from msgdedup.orchestration.demo import configure_airflow_objects, runs_by_batch, set_paused, wait_for_dag
    from msgdedup.orchestration.local_airflow import BATCH_SERVICE, LocalAirflow, free_port

    raw, warehouse = work / "raw", work / "warehouse"
    for batch_id, directory in partitions:
        link_partition(directory, raw, batch_id)
    batch_ids = [b for b, _ in partitions]
    af = LocalAirflow(work / "home", free_port(), extra_config={"scheduler": {"use_job_schedule": "False"}},
                      batch_service=True, batch_service_master=master)
    result = BackfillResult(ok=False, partitions=len(batch_ids))
    t0 = time.perf_counter()
    try:
        af.configure()
        af.migrate()
        configure_airflow_objects(af, raw, warehouse, config)
        _set_master(af, settings.SPARK_CONN_ID, master)
        af.start(components=(*COMPONENTS, BATCH_SERVICE))
        af.wait_api()
        af.wait_batch_service()
        token = af.token()
        wait_for_dag(af, token, timeout=600)
        result.startup_s = round(time.perf_counter() - t0, 3)
        roots = lambda: [p for p in af.running().values() if p]  # noqa: E731
        with PeakSampler(roots, 0.5) as sampler:
            created_at = time.time()
            # Created while the DAG is paused, as the demo does (demo.dag_paused says why: a
            # create that fails on SQLite's lock deletes runs a running scheduler may have started).
            _backfill_create(af, settings.DAG_ID, batch_ids[0], batch_ids[-1])
            result.create_s = round(time.time() - created_at, 3)
            set_paused(af, False)
            deadline = time.perf_counter() + timeout
            while True:
                af.check_running()
                runs = runs_by_batch(af, af.token())
                states = {b: (runs.get(b) or {}).get("state") for b in batch_ids}
                if any(s == "failed" for s in states.values()) or all(s == "success" for s in states.values()):
                    break
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"backfill not finished after {timeout}s: {states}")
                time.sleep(poll)
        result.peak_rss_bytes = sampler.peak
        result.states = states
        ends = [_epoch((runs.get(b) or {}).get("end_date")) for b in batch_ids]
        starts = [_epoch((runs.get(b) or {}).get("start_date")) for b in batch_ids]
        result.run_s = [round(e - s, 3) if s and e else None for s, e in zip(starts, ends, strict=True)]
        result.gap_s = [round(s - e, 3) if s and e else None for e, s in zip(ends[:-1], starts[1:], strict=True)]
        result.ok = all(s == "success" for s in states.values())
        if result.ok:
            result.wall_s = round(max(ends) - created_at, 3)
            result.per_partition_s = round(result.wall_s / len(batch_ids), 3)
            last = runs[batch_ids[-1]]["dag_run_id"]
            status, text = af.api("GET", f"/api/v2/dags/{settings.DAG_ID}/dagRuns/{last}/taskInstances/"
                                  "process_batch/logs/1", token=af.token())
            result.in_service = status == 200 and "in the batch service on" in json.dumps(text)
        else:
            result.error = f"backfill ended with {states}; logs under {af.home / 'logs'}"
    except Exception as exc:  # noqa: BLE001 - the benchmark reports it and goes on
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        af.stop()
    return result


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def _backfill_create(af: Any, dag_id: str, first: str, last: str) -> None:
    from msgdedup.orchestration import settings

    for attempt in range(1, BACKFILL_CREATE_ATTEMPTS + 1):
        done = af.airflow("backfill", "create", "--dag-id", dag_id, "--from-date", f"{first}:00:00+00:00",
                          "--to-date", f"{last}:00:00+00:00", "--reprocess-behavior", "failed",
                          "--max-active-runs", str(settings.MAX_ACTIVE_RUNS), check=False)
        if done.returncode == 0:
            return
        if "database is locked" not in done.stdout + done.stderr or attempt == BACKFILL_CREATE_ATTEMPTS:
            raise RuntimeError(f"airflow backfill create failed: {(done.stderr or done.stdout)[-2000:]}")
        time.sleep(attempt)


# -- make demo ---------------------------------------------------------------------------------------
@dataclass
class DemoResult:
    ok: bool
    wall_s: float | None = None            # the whole command, from a fresh home (after make setup)
    partitions_s: float | None = None      # what the demo says the 12 partitions took
    peak_rss_bytes: int = 0
    output_tail: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_demo(work: Path, *, timeout: float = 3600) -> DemoResult:
    """``make demo``'s command (``python -m msgdedup.orchestration.demo``) from a fresh home on a
    free port, timed; then ``make stop``'s."""
    import re
    import sys

    from msgdedup.bench.measure import measure
    from msgdedup.orchestration.local_airflow import free_port

    home = work / "home"
    python = str(Path(sys.executable))
    m = measure([python, "-m", "msgdedup.orchestration.demo", "--home", str(home), "--port", str(free_port())],
                log_path=work / "demo.log", timeout=timeout)
    subprocess_stop = measure([python, "-m", "msgdedup.orchestration.local_airflow", "stop", "--home", str(home)],
                              log_path=work / "stop.log", timeout=300)
    text = (work / "demo.log").read_text(errors="replace")
    found = re.search(r"(\d+) partitions in (\d+) s after the backfill was created", text)
    result = DemoResult(ok=m.returncode == 0, wall_s=m.wall_s, peak_rss_bytes=m.peak_rss_bytes,
                        partitions_s=float(found.group(2)) if found else None, output_tail=m.output_tail)
    if not result.ok:
        result.error = f"demo exited {m.returncode}, see {work / 'demo.log'}"
    if subprocess_stop.returncode != 0:
        result.error = (result.error or "") + f"; make stop's command exited {subprocess_stop.returncode}"
    return result
