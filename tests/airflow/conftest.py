"""Airflow tests: an isolated AIRFLOW_HOME for in-process imports (set before airflow loads)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
DAGS = PROJECT / "dags"
PLUGINS = PROJECT / "plugins"

if "AIRFLOW_HOME" not in os.environ or not os.environ.get("MSGDEDUP_KEEP_AIRFLOW_HOME"):
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="msgdedup-airflow-home-")
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(PLUGINS)


@pytest.fixture(scope="session")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))
