"""The batch command on a real Spark standalone cluster (master + worker started from the
pip-installed Spark on loopback) gives exactly the local-mode outputs, batch after batch."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from msgdedup.engine.batch import run_batch

from tests.engine.support import message, outcome_view, write_batch
from tests.spark_submit import BIN, SPARK_SUBMIT, user_env

ROOT = Path(__file__).resolve().parents[2]
BATCHES = ["2026-11-21T05", "2026-11-21T06"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_env(tmp_path: Path) -> dict:
    return user_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "logs"),
                    SPARK_WORKER_DIR=str(tmp_path / "work"))


def _start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "spark-class"), *args], env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture()
def cluster(tmp_path):
    env = _loopback_env(tmp_path)
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], env, tmp_path / "master.log")
    worker = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
                     str(worker_ui), "--cores", "2", "--memory", "2g", f"spark://127.0.0.1:{port}"],
                    env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 120
        while True:
            assert master.poll() is None, (tmp_path / "master.log").read_text()
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            try:
                state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2))
                if state.get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the worker never registered with the master"
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}", env
    finally:
        _stop(worker)
        _stop(master)
    assert master.poll() is not None and worker.poll() is not None


def test_two_batches_on_a_standalone_cluster_equal_local_mode(spark, cluster, tmp_path):
    master_url, env = cluster
    raws = []
    for n in range(len(BATCHES)):
        raw = tmp_path / f"raw{n}"
        write_batch(raw, {
            "a.jsonl": [message(f"{n}-m{i}", address=["a", "b"][i % 2], key=f"k{(i + n * 3) % 7}", at=i,
                                txn="T1" if i in (4, 5) else None) for i in range(20)],
            "b.jsonl": [message(f"{n}-x{i}", address="a", bridge=f"k{i % 3}", at=i) for i in range(5)] + ["{bad"],
        })
        raws.append(raw)
    for raw, batch_id in zip(raws, BATCHES, strict=True):
        result = subprocess.run(
            [str(SPARK_SUBMIT), "--master", master_url, "--conf", "spark.ui.enabled=false",
             "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
             "--conf", "spark.executor.memory=1g", str(ROOT / "spark_apps" / "dedup_batch.py"),
             "--input", str(raw), "--warehouse", str(tmp_path / "cluster_wh"), "--batch-id", batch_id],
            env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        run_batch(spark, str(raw), str(tmp_path / "local_wh"), batch_id)
    for batch_id in BATCHES:
        assert outcome_view(tmp_path / "cluster_wh", batch_id) == outcome_view(tmp_path / "local_wh", batch_id)
    # the app really ran on the cluster: the worker launched executors for it
    assert any((tmp_path / "work").glob("app-*/*/stderr"))
