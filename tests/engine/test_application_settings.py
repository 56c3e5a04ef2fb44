"""The static settings an application that runs batches starts with (planning.application_settings),
checked in real spark-submit processes: they can only be set when a JVM starts."""

from __future__ import annotations

import subprocess

from msgdedup.engine.planning import APPLICATION_DEFAULTS

from tests.spark_submit import SPARK_SUBMIT, user_env

CODEGEN_CACHE = "spark.sql.codegen.cache.maxEntries"
PRINT_SETTINGS = """
import sys
from msgdedup.engine import batch
spark = batch.spark_session("settings")
print("VALUE", spark.conf.get(sys.argv[1]))
spark.stop()
"""


def _setting_seen(tmp_path, *submit_args: str, key: str = CODEGEN_CACHE) -> str:
    app = tmp_path / "print_settings.py"
    app.write_text(PRINT_SETTINGS)
    done = subprocess.run([str(SPARK_SUBMIT), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           *submit_args, str(app), key],
                          env=user_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("VALUE "))


def test_an_application_keeps_the_compiled_code_of_a_batchs_stages(tmp_path):
    """Spark's default of 100 entries made a warm application recompile most stages every batch."""
    assert int(APPLICATION_DEFAULTS[CODEGEN_CACHE]) >= 1000
    assert _setting_seen(tmp_path) == APPLICATION_DEFAULTS[CODEGEN_CACHE]


def test_spark_submits_conf_wins_over_the_applications_default(tmp_path):
    assert _setting_seen(tmp_path, "--conf", f"{CODEGEN_CACHE}=250") == "250"


def test_an_application_schedules_its_jobs_fairly_between_pools(tmp_path):
    """The gate's validations have a pool of their own (quality.gate.VALIDATION_POOL)."""
    assert _setting_seen(tmp_path, key="spark.scheduler.mode") == "FAIR"


def test_an_application_keeps_no_idle_python_worker(tmp_path):
    """The kernel's worker, kept idle, sat beside the JVM through a large batch's writes."""
    assert _setting_seen(tmp_path, key="spark.python.worker.reuse") == "false"
