"""The DAG's Spark task: the exit code of ``process_batch.py`` decides whether Airflow retries.

A wrong mapping costs either retries that cannot succeed (a refused reprocessing, a failed gate
run twice more) or no retry after a lost executor. spark-submit itself is stood in for: the
parent ``SparkSubmitOperator.execute`` fails the way the provider does on a non-zero exit
(AirflowException, the process's return code on the hook); the e2e tests run the real one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from msgdedup.orchestration.partitions import resolve
from tests.airflow.support import ResolvedTaskInstance
from msgdedup.orchestration.spark import ProcessBatchOperator

BATCH = "2026-11-21T05"


def _context(**params):
    spec = resolve(params={"partition": BATCH, **params}, data_interval_start=None,
                   data_interval_end=None, raw_root="/raw", warehouse="/wh", config=None)
    return {"ti": ResolvedTaskInstance(spec)}, spec


@pytest.fixture()
def submitted(monkeypatch):
    """What the stand-in spark-submit was given; ``exit`` sets its return code."""
    seen = {"exit": 0}

    def execute(self, context):
        seen.update(application=self.application, args=list(self.application_args), env=self.env_vars)
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


@pytest.mark.parametrize("code,fragment", [
    (2, "invalidate_later=true"),
    (3, "gate failed"),
])
def test_user_error_and_failed_gate_are_final(submitted, code, fragment):
    submitted["exit"] = code
    with pytest.raises(AirflowFailException, match=f"process_batch.py exited with {code}: .*{fragment}"):
        ProcessBatchOperator(task_id="process_batch").execute(_context()[0])


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
