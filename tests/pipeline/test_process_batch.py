"""``spark_apps/process_batch.py`` as the DAG runs it (real spark-submit processes on tiny batches):
its exit code is what Airflow maps to success, final failure or retry, so each code is checked
together with what the warehouse holds afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from msgdedup.orchestration.publish import PublishRefused, audit
from msgdedup.quality.project import PROJECT_ENV

from tests.engine.support import message, write_batch
from tests.spark_submit import SPARK_SUBMIT, user_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "spark_apps" / "process_batch.py"
H5, H6 = "2026-11-21T05", "2026-11-21T06"
# Spark's launcher always adds this JDK module, and the JDK always says so.
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def process_batch(*args, env=None, timeout=600) -> tuple[int, list[str]]:
    """Run the app from a clean environment; the console lines (spark-submit merges stderr)."""
    clean = user_env(PROJECT_ENV, **(env or {}))
    command = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=4", str(APP), *args]
    done = subprocess.run(command, env=clean, capture_output=True, text=True, timeout=timeout)
    console = [line for line in (done.stdout + done.stderr).splitlines()
               if line.strip() and line.strip() != JVM_NOTICE]
    return done.returncode, console


def read(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("raw")
    write_batch(root / "h5", {"a.jsonl": [message("m1", key="x"), message("m2", key="x", at=2), "oops"]})
    write_batch(root / "h6", {"a.jsonl": [message("n1", key="y"), message("n2", key="z", at=3)]})
    return root


def test_exit_0_commits_and_gates_in_one_run_then_stale_history_is_exit_2(raw, tmp_path):
    wh = tmp_path / "wh"
    code, console = process_batch("--input", str(raw / "h6"), "--warehouse", str(wh), "--batch-id", H6)
    assert code == 0, console
    assert console[0] == f"dedup_batch: committed batch {H6}: 2 lines, 2 delivered, 0 dropped, 0 quarantined"
    assert console[1].startswith(f"gx_gate: gate passed for batch {H6}: "), console
    assert console[2].startswith(f"process_batch: batch {H6} timings (s): spark session "), console
    assert len(console) == 3, console
    manifest = read(wh / "runs" / f"{H6}.json")
    gate = read(wh / "quality" / H6 / "result.json")
    assert gate["success"] is True and gate["run_id"] == manifest["run_id"]
    assert audit(wh, H6)["run_id"] == manifest["run_id"], "publishable as committed"

    # An older hour that would change the history H6 was built on: refused, nothing gated.
    code, console = process_batch("--input", str(raw / "h5"), "--warehouse", str(wh), "--batch-id", H5)
    assert code == 2, console
    assert len(console) == 1 and console[0].startswith("dedup_batch: error: "), console
    assert "--invalidate-later" in console[0]
    assert not (wh / "runs" / f"{H5}.json").exists() and not (wh / "quality" / H5).exists()


def test_exit_2_for_a_bad_batch_id_before_spark_starts(raw, tmp_path):
    code, console = process_batch("--input", str(raw / "h5"), "--warehouse", str(tmp_path / "wh"),
                                  "--batch-id", "../../etc")
    assert code == 2, console
    assert len(console) == 1 and console[0].startswith("dedup_batch: error: invalid batch id"), console
    assert not (tmp_path / "wh").exists()


def test_exit_3_when_the_gate_fails_leaves_the_batch_committed_but_not_publishable(raw, tmp_path):
    """A GX project whose messages suite demands the opposite of the truth (message_id null)."""
    project = tmp_path / "gx"
    shutil.copytree(ROOT / "expectations", project, ignore=shutil.ignore_patterns("uncommitted"))
    suite_path = project / "expectations" / "messages.json"
    suite = read(suite_path)
    (flipped,) = [e for e in suite["expectations"] if e["type"] == "expect_column_values_to_not_be_null"
                  and e["kwargs"] == {"column": "message_id"}]
    flipped["type"] = "expect_column_values_to_be_null"
    suite_path.write_text(json.dumps(suite, indent=2))

    wh = tmp_path / "wh"
    code, console = process_batch("--input", str(raw / "h5"), "--warehouse", str(wh), "--batch-id", H5,
                                  env={PROJECT_ENV: str(project)})
    assert code == 3, console
    assert console[0] == f"dedup_batch: committed batch {H5}: 3 lines, 1 delivered, 1 dropped, 1 quarantined"
    failed = [line for line in console if line.startswith("gx_gate: gate failed")]
    assert len(failed) == 1 and failed[0].startswith(
        f"gx_gate: gate failed for batch {H5}: 1 expectation(s) failed: "
        f"messages.expect_column_values_to_be_null(message_id) unexpected="), console
    assert any(line.startswith(f"process_batch: batch {H5} timings") for line in console), console
    manifest = read(wh / "runs" / f"{H5}.json")
    gate = read(wh / "quality" / H5 / "result.json")
    assert gate["success"] is False and gate["run_id"] == manifest["run_id"]
    with pytest.raises(PublishRefused, match="quality gate failed"):
        audit(wh, H5)
