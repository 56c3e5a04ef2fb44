"""The DAG's Spark step: one SparkSubmitOperator subclass running ``spark_apps/process_batch.py``.

One application per partition does the dedup and then the GX gate (``msgdedup.pipeline``), so a
run pays JVM and Python-worker start-up once instead of once per step.

The master (``local[*]``, ``spark://…``, ``yarn``) comes from the Airflow connection
``spark_default``, so the same DAG runs locally or on a cluster. The application arguments are
built at execution time from the validated RunSpec of the ``resolve`` task (never from a template
string), and spark-submit runs with the venv's ``bin/`` first on PATH and
``PYSPARK_PYTHON`` set to the venv's interpreter (``spark.pyspark.python`` too).

Exit codes of the app become task outcomes: 0 committed and gate passed; 2 user error (bad
input/config, stale history: reprocessing an older batch needs ``invalidate_later``) and 3 gate
failed (committed, not published) fail *without retry*, since a rerun would fail the same way;
anything else (internal error, lost executor, ...) fails with retries, safe because the engine
reruns a batch idempotently. A retry redoes the dedup too, not only the gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from msgdedup.orchestration import settings
from msgdedup.orchestration.partitions import RunSpec, spec_from_context

# spark_apps/ next to src/ in the project checkout.
SPARK_APPS_DIR = Path(__file__).resolve().parents[3] / "spark_apps"


def spark_apps_dir() -> Path:
    return SPARK_APPS_DIR


class ProcessBatchOperator(SparkSubmitOperator):
    """Runs ``spark_apps/process_batch.py --input … --warehouse … --batch-id … [--config …]``."""

    app_name = "process_batch.py"
    # exit code -> explanation; those exits are final (no retry)
    final_exit_codes: dict[int, str] = {
        2: "user error (bad input, config or batch id, or stale history: to reprocess an older "
        "batch trigger it with invalidate_later=true, then re-run the later partitions in order)",
        3: "the Great Expectations gate failed: the batch is committed but not published "
        "(see the Data quality view)",
    }

    def __init__(self, *, resolve_task_id: str = "resolve", **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", settings.SPARK_CONN_ID)
        kwargs.setdefault("application", str(spark_apps_dir() / self.app_name))
        kwargs.setdefault("name", f"msgdedup-{Path(self.app_name).stem}")
        super().__init__(**kwargs)
        self.resolve_task_id = resolve_task_id

    def build_args(self, spec: RunSpec) -> list[str]:
        return spec.batch_args()

    def execute(self, context: Any) -> None:
        spec = spec_from_context(context, self.resolve_task_id)
        if spec.dry_run:
            raise AirflowSkipException(f"dry run: would run {self.app_name} {' '.join(self.build_args(spec))}")
        env = settings.spark_env()
        self.application_args = self.build_args(spec)
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
            code = self._exit_code()
            if code in self.final_exit_codes:
                raise AirflowFailException(
                    f"{self.app_name} exited with {code}: {self.final_exit_codes[code]} "
                    f"(batch {spec.batch_id}; the app's error line is in the log above)"
                ) from exc
            raise

    def _exit_code(self) -> int | None:
        proc = getattr(self._hook, "_submit_sp", None) if self._hook else None
        return None if proc is None else proc.returncode
