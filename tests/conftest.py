"""Shared fixtures: one real local Spark session for the whole run."""

import os
import sys

import pytest

# Spark's Python workers must run this interpreter (the venv, where msgdedup is installed).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from msgdedup.engine.planning import APPLICATION_DEFAULTS

    session = (
        SparkSession.builder.master("local[2]")
        .appName("msgdedup-tests")
        .config(map=APPLICATION_DEFAULTS)  # as the apps start (fair scheduling, the codegen cache)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_xdist_make_scheduler(config, log):
    """``make test`` runs two pytest-xdist workers (pyproject.toml: ``-n 2``): most of a test's
    time here is a JVM starting, a spark-submit's driver planning on one thread, or Airflow's
    scheduler polling, so a second worker uses the second core. Each test file runs whole on one
    worker, so its module fixtures are built once, and tests/airflow as one, so one live Airflow
    (its package fixture) serves all of it. (xdist's ``loadgroup`` would say this with markers,
    but with pytest 9 its group never reaches the scheduler: it rewrites ``item._nodeid``, which
    ``nodeid`` no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/airflow" if path.startswith("tests/airflow/") else path

    return ByFile(config, log)
