"""The DAG's Spark task: the exit code of ``process_batch.py`` decides whether Airflow retries.

A wrong mapping costs either retries that cannot succeed (a refused reprocessing, a failed gate
run twice more) or no retry after a lost executor. In most tests spark-submit itself is stood in
for: the parent ``SparkSubmitOperator.execute`` fails the way the provider does on a non-zero
exit (AirflowException, the process on the hook); ``test_the_real_hook_reports_the_exit_code``
runs the provider's real hook on a real spark-submit, so a provider upgrade that changes how the
exit code is kept fails here; the e2e tests run the whole task.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowRescheduleException,
    AirflowSkipException,
)

from msgdedup import exit_codes
from msgdedup.orchestration import settings
from msgdedup.orchestration.partitions import resolve
from msgdedup.orchestration.spark import ProcessBatchOperator, submit_returncode
from tests.airflow.support import ResolvedTaskInstance

BATCH = "2026-11-21T05"


def _context(first_reschedule_date=None, **params):
    spec = resolve(params={"partition": BATCH, **params}, data_interval_start=None,
                   data_interval_end=None, raw_root="/raw", warehouse="/wh", config=None)
    return {"ti": ResolvedTaskInstance(spec, first_reschedule_date)}, spec


@pytest.fixture()
def submitted(monkeypatch):
    """What the stand-in spark-submit was given; ``exit`` sets its return code."""
    seen = {"exit": 0}

    def execute(self, context):
        seen.update(application=self.application, args=list(self.application_args), env=self.env_vars)
        # what the provider's hook keeps after spark-submit ran (see the real-hook test below)
        self._hook = SimpleNamespace(_submit_sp=SimpleNamespace(returncode=seen["exit"]))
        if seen["exit"] != 0:
            raise AirflowException(f"Cannot execute: spark-submit. Error code is: {seen['exit']}.")

    monkeypatch.setattr(SparkSubmitOperator, "execute", execute)
    return seen


def test_exit_0_runs_process_batch_with_the_run_spec(submitted):
    context, spec = _context(invalidate_later=True)
    ProcessBatchOperator(task_id="process_batch").execute(context)
    assert submitted["application"].endswith("spark_apps/process_batch.py")
    assert submitted["args"] == spec.batch_args() and "--invalidate-later" in submitted["args"]
    assert "PYSPARK_PYTHON" in submitted["env"]


def test_the_final_exits_are_the_user_error_and_the_failed_gate():
    assert set(exit_codes.FINAL) == {exit_codes.USER_ERROR, exit_codes.GATE_FAILED} == {2, 3}


@pytest.mark.parametrize("code,fragment", [
    (2, "invalidate_later=true"),
    (3, "gate failed"),
])
def test_user_error_and_failed_gate_are_final(submitted, code, fragment):
    submitted["exit"] = code
    with pytest.raises(AirflowFailException, match=f"process_batch.py exited with {code}: .*{fragment}"):
        ProcessBatchOperator(task_id="process_batch").execute(_context()[0])


def test_busy_warehouse_waits_without_using_a_retry(submitted, capsys):
    """Exit 4: another writer holds the lease; reschedule (up_for_reschedule), not fail."""
    submitted["exit"] = exit_codes.WAREHOUSE_BUSY
    before = datetime.now(timezone.utc)
    with pytest.raises(AirflowRescheduleException) as raised:
        ProcessBatchOperator(task_id="process_batch").execute(_context()[0])
    assert raised.value.reschedule_date >= before + settings.WAREHOUSE_BUSY_POKE
    logged = capsys.readouterr().out  # the task log (Airflow's structlog writes to stdout here)
    assert "exited with 4: another writer holds the lease of warehouse /wh" in logged
    assert "waiting, trying again at" in logged


def test_busy_warehouse_fails_retryably_after_the_maximum_wait(submitted):
    submitted["exit"] = exit_codes.WAREHOUSE_BUSY
    first = datetime.now(timezone.utc) - settings.WAREHOUSE_BUSY_MAX_WAIT - timedelta(seconds=1)
    with pytest.raises(AirflowException, match="another writer holds the lease.*still did after waiting") as raised:
        ProcessBatchOperator(task_id="process_batch").execute(_context(first_reschedule_date=first)[0])
    assert not isinstance(raised.value, (AirflowFailException, AirflowRescheduleException))


@pytest.mark.parametrize("code", [1, 86, 137])
def test_other_exits_are_retried(submitted, code):
    submitted["exit"] = code
    with pytest.raises(AirflowException) as raised:
        ProcessBatchOperator(task_id="process_batch").execute(_context()[0])
    assert not isinstance(raised.value, AirflowFailException), "must stay retryable"


def test_dry_run_submits_nothing(submitted):
    with pytest.raises(AirflowSkipException, match="would run process_batch.py --input /raw/"):
        ProcessBatchOperator(task_id="process_batch").execute(_context(dry_run=True)[0])
    assert "application" not in submitted


def test_the_real_hook_reports_the_exit_code(tmp_path, monkeypatch):
    """The provider's SparkSubmitHook on the real spark-submit (local, no SparkSession: a JVM
    start and a Python exit): ``submit_returncode`` must see the app's exit code, 4 here."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    app = tmp_path / "exit4.py"
    app.write_text("import sys\nsys.exit(4)\n")
    monkeypatch.setenv("AIRFLOW_CONN_MSGDEDUP_TEST_SPARK", '{"conn_type": "spark", "host": "local[1]"}')
    hook = SparkSubmitHook(conn_id="msgdedup_test_spark", env_vars=settings.spark_env(), name="exit4")
    assert submit_returncode(hook) is None, "no process before submit"
    with pytest.raises(AirflowException, match="Error code is: 4"):
        hook.submit(str(app))
    assert submit_returncode(hook) == 4
