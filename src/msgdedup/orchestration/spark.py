"""The DAG's Spark step: one SparkSubmitOperator subclass running ``spark_apps/process_batch.py``.

The dedup and then the GX gate (``msgdedup.pipeline``) run in one Spark application. Where the
Airflow Variable ``msgdedup_batch_service`` names the socket of a running batch service
(:mod:`msgdedup.batch_service`, one warm Spark application for every partition: ``make demo``
starts one), the task sends the batch there and streams its log; otherwise, or when nothing
listens there (a warning says so), it runs ``spark-submit`` as below and the partition pays JVM and
Python-worker start-up.

The master (``local[*]``, ``spark://…``, ``yarn``) comes from the Airflow connection
``spark_default``, so the same DAG runs locally or on a cluster. The application arguments are
built at execution time from the validated RunSpec of the ``resolve`` task (never from a template
string), and spark-submit runs with the venv's ``bin/`` first on PATH and
``PYSPARK_PYTHON`` set to the venv's interpreter (``spark.pyspark.python`` too).

Exit codes of the app, either way (:mod:`msgdedup.exit_codes`), become task outcomes: 0 committed and gate
passed; the codes in ``exit_codes.FINAL`` (2 user error: bad input/config, stale history,
a commit conflict; 3 gate failed: committed, not published) fail *without retry*, since a rerun
would fail the same way; 4 (another writer holds the warehouse's lease, e.g. a manual
spark-submit: inside this Airflow the ``msgdedup_warehouse`` pool already allows one writer)
makes the task wait: it is rescheduled (``up_for_reschedule``, no retry used, no slot held) every
``settings.WAREHOUSE_BUSY_POKE`` until the other writer is done, and after
``settings.WAREHOUSE_BUSY_MAX_WAIT`` it fails like an internal error (with retries). Anything else
(internal error, lost executor, a timeout, ...) fails with retries, safe because the engine
reruns a batch idempotently. A retry redoes the dedup too, not only the gate.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
)

from msgdedup import batch_service, exit_codes
from msgdedup.orchestration import settings
from msgdedup.orchestration.partitions import RunSpec, spec_from_context

# spark_apps/ next to src/ in the project checkout.
PROCESS_BATCH_APP = Path(__file__).resolve().parents[3] / "spark_apps" / "process_batch.py"


def submit_returncode(hook: SparkSubmitHook) -> int | None:
    """The exit code of the spark-submit process the hook ran (None if it never started one).

    The provider (apache-spark 6.3) has no public accessor: ``SparkSubmitHook.submit`` keeps its
    ``subprocess.Popen`` in ``_submit_sp`` and only puts the code into an exception message. This
    is the one place that reads it; ``tests/airflow/test_spark_operator.py`` runs the real hook
    on a real spark-submit, so a provider release that renames it fails that test, and at run
    time the task fails (retryable) with this message instead of silently retrying a final exit.
    """
    if not hasattr(hook, "_submit_sp"):
        raise RuntimeError(
            "apache-airflow-providers-apache-spark changed: SparkSubmitHook has no _submit_sp, "
            "so the exit code of process_batch.py is unknown (see msgdedup.orchestration.spark)"
        )
    proc = hook._submit_sp
    return None if proc is None else proc.returncode


class ProcessBatchOperator(SparkSubmitOperator):
    """Runs ``spark_apps/process_batch.py --input … --warehouse … --batch-id … [--config …]``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", settings.SPARK_CONN_ID)
        kwargs.setdefault("application", str(PROCESS_BATCH_APP))
        kwargs.setdefault("name", "msgdedup-process_batch")
        super().__init__(**kwargs)

    def execute(self, context: Any) -> None:
        spec = spec_from_context(context)
        if spec.dry_run:
            raise AirflowSkipException(f"dry run: would run {PROCESS_BATCH_APP.name} {' '.join(spec.batch_args())}")
        service = settings.batch_service_socket()
        if service:
            self.log.info("running %s in the batch service on %s", PROCESS_BATCH_APP.name, service)
            try:
                code = batch_service.submit(service, spec.batch_args(), self.log.info)
            except batch_service.ServiceUnavailable as exc:
                self.log.warning("%s: running spark-submit instead (start the service, or clear the "
                                 "Variable %s to silence this)", exc, settings.VAR_BATCH_SERVICE)
            else:
                # ServiceLost propagates: an internal error, retried like a lost spark-submit.
                self._outcome(code, spec, context, f"batch service on {service}")
                return
        self._spark_submit(spec, context)

    def _spark_submit(self, spec: RunSpec, context: Any) -> None:
        env = settings.spark_env()
        self.application_args = spec.batch_args()
        self.env_vars = {**env, **(self.env_vars or {})}
        self.conf = {
            "spark.pyspark.python": env["PYSPARK_PYTHON"],
            "spark.pyspark.driver.python": env["PYSPARK_DRIVER_PYTHON"],
            **(self.conf or {}),
        }
        self._hook = None  # rebuild the hook with the arguments above
        try:
            super().execute(context)
        except AirflowException as exc:
            code = submit_returncode(self._hook) if self._hook is not None else None
            self._outcome(code, spec, context, "spark-submit", exc)
            raise

    def _outcome(self, code: int | None, spec: RunSpec, context: Any, how: str,
                 error: BaseException | None = None) -> None:
        """Exit code -> task outcome (the module docstring); returns only for exit 0."""
        if code == exit_codes.OK:
            return
        app = f"{PROCESS_BATCH_APP.name} exited with {code}"
        if code in exit_codes.FINAL:
            raise AirflowFailException(
                f"{app}: {exit_codes.FINAL[code]} (batch {spec.batch_id}, {how}; the app's error line is in the "
                "log above)"
            ) from error
        if code == exit_codes.WAREHOUSE_BUSY:
            self._wait_for_warehouse(context, f"{app}: another writer holds the lease of warehouse "
                                     f"{spec.warehouse}; nothing was written for batch {spec.batch_id}")
        if error is None:
            raise AirflowException(f"{app} ({how}): will be retried (batch {spec.batch_id}; the log above says why)")

    def _wait_for_warehouse(self, context: Any, why: str) -> None:
        """Reschedule the task (a clean wait) while the warehouse is busy, up to the maximum wait."""
        now = datetime.now(timezone.utc)
        first = context["ti"].get_first_reschedule_date(context)
        waited = now - (first or now)
        if waited < settings.WAREHOUSE_BUSY_MAX_WAIT:
            again = now + settings.WAREHOUSE_BUSY_POKE
            self.log.warning("%s: waiting, trying again at %s (waited %s so far)", why,
                             again.isoformat(timespec="seconds"), waited)
            raise AirflowRescheduleException(again)
        raise AirflowException(
            f"{why}, and it still did after waiting {waited} (settings.WAREHOUSE_BUSY_MAX_WAIT): "
            "is a writer outside Airflow stuck? Its lease names its host and pid"
        )
