"""The batch service as the DAG uses it: one real ``spark-submit spark_apps/batch_service.py``
serving real batches over its socket, with the exit codes and log lines of ``process_batch.py``;
plus the socket's rules (owner only, one service per socket) on the transport alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from msgdedup import batch_service, exit_codes
from msgdedup.quality.project import PROJECT_ENV
from tests.engine.support import message, write_batch
from tests.spark_submit import SPARK_SUBMIT, user_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "spark_apps" / "batch_service.py"
H5, H6, H7 = "2026-11-21T05", "2026-11-21T06", "2026-11-21T07"


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def run(sock: Path, *args: str) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = batch_service.submit(sock, list(args), lines.append)
    return code, lines


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("raw")
    write_batch(root / "h5", {"a.jsonl": [message("m1", key="x"), message("m2", key="x", at=2), "oops"]})
    write_batch(root / "h6", {"a.jsonl": [message("n1", key="y"), message("n2", key="x", at=3)]})
    write_batch(root / "h7", {f"p{i}.jsonl": [message(f"b{i}-{j}", key=f"k{j % 900}", at=j) for j in range(3000)]
                              for i in range(2)})
    return root


def start_service(root: Path):
    """A batch service as ``make demo`` starts it (from a clean environment, like the DAG's)."""
    sock = root / "run" / "service.sock"
    env = user_env(PROJECT_ENV)
    log = (root / "service.log").open("w")
    proc = subprocess.Popen(
        [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=4", str(APP), "--socket", str(sock)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while not batch_service.available(sock):
        assert proc.poll() is None, (root / "service.log").read_text()
        assert time.monotonic() < deadline, "the batch service did not start listening"
        time.sleep(0.5)
    return sock, proc, root / "service.log"


def stop_service(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the JVM and the Python driver, whatever a test did
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    started = start_service(tmp_path_factory.mktemp("service"))
    yield started
    stop_service(started[1])


@pytest.fixture()
def own_service(tmp_path):
    """A service of the test's own, for the tests that end it."""
    started = start_service(tmp_path)
    yield started
    stop_service(started[1])


def test_batches_run_one_after_another_in_one_application(service, raw, tmp_path):
    sock, proc, _ = service
    wh = tmp_path / "wh"
    code, lines = run(sock, "--input", str(raw / "h5"), "--warehouse", str(wh), "--batch-id", H5)
    assert code == exit_codes.OK, lines
    assert lines[0] == f"batch_service: running process_batch --input {raw / 'h5'} --warehouse {wh} --batch-id {H5}"
    # then the lines of a spark-submit of process_batch.py
    assert lines[1] == f"dedup_batch: committed batch {H5}: 3 lines, 1 delivered, 1 dropped, 1 quarantined"
    assert lines[2].startswith(f"gx_gate: gate passed for batch {H5}: "), lines
    assert lines[3].startswith(f"process_batch: batch {H5} timings (s): "), lines
    code, lines = run(sock, "--input", str(raw / "h6"), "--warehouse", str(wh), "--batch-id", H6)
    assert code == exit_codes.OK, lines
    # the cache persisted between the two batches: n2 repeats key x, delivered in H5
    assert lines[1] == f"dedup_batch: committed batch {H6}: 2 lines, 1 delivered, 1 dropped, 0 quarantined"
    m5, m6 = read(wh / "runs" / f"{H5}.json"), read(wh / "runs" / f"{H6}.json")
    assert m6["parent"] == {"batch_id": H5, "snapshot_fingerprint": m5["snapshot_fingerprint"]}
    assert read(wh / "quality" / H6 / "result.json")["run_id"] == m6["run_id"]
    assert proc.poll() is None, "one application served both"


def test_user_errors_keep_their_exit_codes_and_messages(service, raw, tmp_path):
    sock, proc, _ = service
    code, lines = run(sock, "--input", str(raw / "h5"), "--warehouse", str(tmp_path / "wh"))
    assert code == exit_codes.USER_ERROR
    assert any("the following arguments are required: --batch-id" in line for line in lines), lines
    code, lines = run(sock, "--input", str(raw / "h5"), "--warehouse", str(tmp_path / "wh"),
                      "--batch-id", H5, "--config", str(tmp_path / "missing.yaml"))
    assert code == exit_codes.USER_ERROR
    assert lines[-1].startswith("dedup_batch: error: ") and "missing.yaml" in lines[-1], lines
    assert not (tmp_path / "wh").exists()
    assert proc.poll() is None, "a bad request does not stop the service"


def test_a_client_that_goes_away_cancels_its_batch(service, raw, tmp_path):
    """The task was killed (timeout, a user marked it failed): the batch stops, commits nothing,
    and gives the warehouse back, so the retry runs at once."""
    sock, proc, log = service
    wh = tmp_path / "wh"
    args = ["--input", str(raw / "h7"), "--warehouse", str(wh), "--batch-id", H7]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(sock))
        client.sendall(json.dumps({"argv": args}).encode() + b"\n")
        client.recv(1)  # the first line of its log: the batch is running
    code, lines = run(sock, *args)  # served once the abandoned one has ended
    assert code == exit_codes.OK, lines
    assert "client gone: cancelled" in log.read_text()
    assert len(list((wh / "_commits").iterdir())) == 1, "the abandoned run committed nothing"
    assert not (wh / "_WRITER.json").exists()


def _drivers(sock: Path) -> list[int]:
    """The Python driver processes serving ``sock``."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        try:
            if proc_dir.name.isdigit() and str(sock) in (proc_dir / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(proc_dir.name))
        except OSError:
            pass
    return found


def test_a_service_whose_jvm_died_stops(own_service):
    """Not a service that accepts requests it can only fail: it exits, callers fall back."""
    sock, proc, log = own_service
    (driver,) = [pid for pid in _drivers(sock) if pid != proc.pid]
    os.kill(proc.pid, signal.SIGKILL)  # the JVM only (an OOM kill, say)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while driver in _drivers(sock) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert driver not in _drivers(sock), "the Python driver exited by itself"
    assert not batch_service.available(sock)
    with pytest.raises(batch_service.ServiceUnavailable):
        run(sock, "--batch-id", H5)


def test_make_stop_stops_the_service(service):
    """``make stop`` signals the service's process group (spark-submit's JVM and the Python driver);
    a socket file it may leave is replaced by the next service (test below). (Last of the tests
    on the shared service.)"""
    sock, proc, _ = service
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    deadline = time.monotonic() + 60
    while _drivers(sock) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _drivers(sock), "no process of the service is left"
    assert not batch_service.available(sock)
    with pytest.raises(batch_service.ServiceUnavailable):
        run(sock, "--batch-id", H5)


# -- the transport alone ------------------------------------------------------------------------------
def _serving(sock: Path, run_request) -> tuple[batch_service.BatchService, threading.Thread]:
    service = batch_service.BatchService(sock, run_request, cancel=lambda: None)
    service.bind()
    thread = threading.Thread(target=service.serve_forever, daemon=True)
    thread.start()
    return service, thread


def test_only_the_owner_can_reach_the_socket_and_one_service_holds_it(tmp_path):
    sock = tmp_path / "run" / "service.sock"
    service, thread = _serving(sock, lambda argv: print("ran", *argv) or 0)
    try:
        assert sock.stat().st_mode & 0o777 == 0o600 and sock.parent.stat().st_mode & 0o777 == 0o700
        with pytest.raises(RuntimeError, match="another batch service is listening"):
            batch_service.BatchService(sock, lambda argv: 0, cancel=lambda: None).bind()
        assert run(sock, "--batch-id", "x") == (
            0, ["batch_service: running process_batch --batch-id x", "ran --batch-id x"])
    finally:
        service.stop()
        thread.join(timeout=10)
    assert not sock.exists()


def test_a_socket_left_by_a_dead_service_is_replaced(tmp_path):
    sock = tmp_path / "service.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()  # the file stays, nobody listens
    with pytest.raises(batch_service.ServiceUnavailable, match="no batch service listens on"):
        run(sock, "--batch-id", "x")
    service, thread = _serving(sock, lambda argv: 3)
    try:
        assert run(sock)[0] == 3
    finally:
        service.stop()
        thread.join(timeout=10)


def test_a_malformed_request_is_refused_with_a_line(tmp_path):
    sock = tmp_path / "service.sock"
    service, thread = _serving(sock, lambda argv: 0)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(sock))
            client.sendall(b'{"argv": "--input /etc"}\n')
            answers = [json.loads(line) for line in client.makefile().read().splitlines()]
        assert answers[-1] == {"exit": exit_codes.USER_ERROR}
        assert "refused request" in answers[0]["out"]
    finally:
        service.stop()
        thread.join(timeout=10)


def test_a_socket_past_the_address_limit_is_served(tmp_path):
    """A Unix socket's address holds about 100 bytes; a checkout deep in a home directory (or
    pytest's numbered temporary directories) gives a longer path, which bind() refused: the
    service is reached there all the same, and its directory keeps its permissions."""
    sock = tmp_path / ("x" * 60) / ("y" * 60) / "run" / "service.sock"
    assert len(str(sock)) > 108
    service, thread = _serving(sock, lambda argv: 5)
    try:
        assert batch_service.available(sock)
        assert sock.is_socket() and sock.stat().st_mode & 0o777 == 0o600
        assert sock.parent.stat().st_mode & 0o777 == 0o700
        assert run(sock)[0] == 5
    finally:
        service.stop()
        thread.join(timeout=10)
    assert not sock.exists()
