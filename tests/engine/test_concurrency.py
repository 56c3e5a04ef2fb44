"""Two writers on one warehouse (issue 9 §1): real spark-submits ordered with pause failpoints.

Whatever the ordering, no batch may be lost (every refusal is a non-zero exit with one line),
doubled, or built on a parent that was not the latest committed batch before it.

Batches: T00 keys a, b; T01 key c; T02 keys c and d. T02 built on T01 drops its c as a duplicate
of T01's message; built on T00 (the bug) it delivers c a second time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from msgdedup import exit_codes, layout
from msgdedup.engine.batch import StaleHistoryError, run_batch
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.lease import TTL_ENV, WarehouseBusy
from msgdedup.engine.warehouse import PAUSE_ENV, CommitConflict, Warehouse
from msgdedup.quality.gate import main as gate_main

from tests.engine.support import manifest, message, read_output, write_batch
from tests.engine.test_batch_command import JVM_NOTICE, batch_command

T00, T01, T02 = "2026-11-21T00", "2026-11-21T01", "2026-11-21T02"
WAIT_S = 600  # generous bound for a spark-submit to reach a step on a loaded 2-core machine


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("raw")
    write_batch(root / T00, {"a.jsonl": [message("m-a", key="a"), message("m-b", key="b", at=2)]})
    write_batch(root / T01, {"a.jsonl": [message("m-c1", key="c")]})
    write_batch(root / T02, {"a.jsonl": [message("m-c2", key="c"), message("m-d", key="d", at=2)]})
    return root


@pytest.fixture(scope="module")
def after_t00(spark, raw, tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("t00") / "wh"
    run_batch(spark, str(raw / T00), str(wh), T00)
    return wh


@pytest.fixture()
def wh(after_t00, tmp_path) -> Path:
    shutil.copytree(after_t00, tmp_path / "wh")
    return tmp_path / "wh"


def start(raw: Path, wh: Path, batch_id: str, **env: str) -> subprocess.Popen:
    return batch_command("--input", str(raw / batch_id), "--warehouse", str(wh), "--batch-id", batch_id,
                         env=env)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"writer exited {process.returncode} before {path.name}: "
                                 f"{process.stdout.read()} {process.stderr.read()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def finish(process: subprocess.Popen) -> tuple[int, str]:
    out, err = process.communicate(timeout=WAIT_S)
    return process.returncode, out + err


def one_line(console: str) -> str:
    lines = [line for line in console.splitlines() if line.strip() and line.strip() != JVM_NOTICE]
    assert len(lines) == 1, console
    return lines[0]


def wait_until_lease_expired(wh: Path) -> None:
    expires = datetime.fromisoformat(json.loads((wh / layout.LEASE).read_text())["expires_at"])
    deadline = time.monotonic() + WAIT_S
    while datetime.now(timezone.utc) <= expires:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def staged_files(wh: Path) -> list[str]:
    staging = wh / layout.STAGING
    return sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()
                  and not p.name.startswith(layout.OWNER)) if staging.exists() else []


def commit_log(wh: Path) -> list[tuple[str, str | None]]:
    return [(e["batch_id"], e["parent"]) for e in
            (json.loads(p.read_text()) for p in sorted((wh / layout.COMMITS).glob("*.json")))]


def parent(wh: Path, batch_id: str) -> str | None:
    return (manifest(wh, batch_id)["parent"] or {}).get("batch_id")


def assert_history_consistent(wh: Path) -> None:
    """Every committed batch was built on the committed batch just before it, on its snapshot."""
    committed = sorted(p.name[:-len(".json")] for p in (wh / "runs").glob("*.json") if ".stale." not in p.name)
    for previous, batch_id in zip([None, *committed[:-1]], committed, strict=True):
        recorded = manifest(wh, batch_id)["parent"]
        assert (recorded or {}).get("batch_id") == previous, (batch_id, recorded)
        if previous is not None:
            assert recorded["snapshot_fingerprint"] == manifest(wh, previous)["snapshot_fingerprint"]


def assert_t02_built_on_t01(wh: Path) -> None:
    assert_history_consistent(wh)
    assert parent(wh, T01) == T00 and parent(wh, T02) == T01
    assert [r["message_id"] for r in read_output(wh, "delivered", T02)] == ["m-d"]
    assert [(r["message_id"], r["duplicate_of"]) for r in read_output(wh, "dropped", T02)] == [("m-c2", "m-c1")]
    assert staged_files(wh) == []
    assert not (wh / layout.LEASE).exists()


def test_second_writer_is_busy_and_recovery_leaves_the_live_run_alone(spark, raw, wh, tmp_path):
    """The user's case: T01 running, T02 started beside it. T02 learns at once (exit 4), and a
    recover() beside the live T01 touches neither its undecided nor its decided run."""
    undecided, decided = tmp_path / "release-undecided", tmp_path / "release-decided"
    first = start(raw, wh, T01, **{PAUSE_ENV: f"before_commit_point={undecided};after_commit_point={decided}"})
    try:
        wait_for(Path(f"{undecided}.reached"), first)
        holder = json.loads((wh / layout.LEASE).read_text())
        assert (holder["batch_id"], holder["host"]) == (T01, socket.gethostname())

        code, console = finish(start(raw, wh, T02))
        line = one_line(console)
        assert code == exit_codes.WAREHOUSE_BUSY, console
        assert line.startswith("dedup_batch: error: warehouse ") and "is busy" in line
        assert f"run {holder['run_id']} of batch {T01}" in line and "expires " in line and "retry later" in line
        with pytest.raises(WarehouseBusy):
            run_batch(spark, str(raw / T02), str(wh), T02)

        staged = staged_files(wh)
        assert any(f.endswith(f"{holder['run_id']}/manifest.json") for f in staged)
        assert Warehouse(HadoopFS(spark), str(wh)).recover() == []
        assert staged_files(wh) == staged  # the undecided live run is untouched

        undecided.touch()
        wait_for(Path(f"{decided}.reached"), first)
        assert Warehouse(HadoopFS(spark), str(wh)).recover() == []  # not rolled forward under its writer
        assert staged_files(wh) == staged and not (wh / "runs" / f"{T01}.json").exists()
        decided.touch()
        code, console = finish(first)
        assert code == 0, console
    finally:
        undecided.touch(), decided.touch()
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    run_batch(spark, str(raw / T02), str(wh), T02)
    assert_t02_built_on_t01(wh)
    assert commit_log(wh) == [(T00, None), (T01, T00), (T02, T01)]


def _paused_with_expired_lease(raw: Path, wh: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """T01 stopped (SIGSTOP: its lease renewals too) just before its commit point, its lease expired:
    the way a writer stalls longer than its lease, so that a second writer is let in."""
    release = tmp_path / "release-t01"
    first = start(raw, wh, T01, **{PAUSE_ENV: f"before_commit_point={release}", TTL_ENV: "8"})
    wait_for(Path(f"{release}.reached"), first)
    os.killpg(first.pid, signal.SIGSTOP)
    wait_until_lease_expired(wh)
    return first, release


def _resume(process: subprocess.Popen, release: Path) -> tuple[int, str]:
    release.touch()
    os.killpg(process.pid, signal.SIGCONT)
    return finish(process)


def _kill_leftovers(*processes: subprocess.Popen) -> None:
    """A failed test must not leave a stopped (SIGSTOPped) writer behind."""
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGCONT)
            os.killpg(process.pid, signal.SIGKILL)


def test_commit_conflict_when_the_other_writer_commits_first(spark, raw, wh, tmp_path):
    first, release = _paused_with_expired_lease(raw, wh, tmp_path)
    try:
        code, console = finish(start(raw, wh, T02))  # breaks the expired lease, builds on T00, commits
        assert code == 0, console
        assert parent(wh, T02) == T00  # legitimately: T01 was not committed
        code, console = _resume(first, release)
    finally:
        _kill_leftovers(first)
    line = one_line(console)
    assert code == exit_codes.USER_ERROR, console
    assert line.startswith(f"dedup_batch: error: commit of batch {T01} refused: batch {T02} (run ")
    assert "was committed by another writer after this run started" in line and "nothing was committed" in line
    assert not (wh / "runs" / f"{T01}.json").exists() and staged_files(wh) == []
    assert commit_log(wh) == [(T00, None), (T02, T00)]
    # Nothing is lost: T01 is older than T02 now, so it goes in as a reprocessing, T02 after it.
    with pytest.raises(StaleHistoryError):
        run_batch(spark, str(raw / T01), str(wh), T01)
    run_batch(spark, str(raw / T01), str(wh), T01, invalidate_later=True)
    run_batch(spark, str(raw / T02), str(wh), T02)
    assert_t02_built_on_t01(wh)


def test_commit_conflict_when_the_stalled_writer_commits_first(spark, raw, wh, tmp_path):
    first, release = _paused_with_expired_lease(raw, wh, tmp_path)
    second_release = tmp_path / "release-t02"
    second = start(raw, wh, T02, **{PAUSE_ENV: f"before_commit_point={second_release}"})
    try:
        wait_for(Path(f"{second_release}.reached"), second)  # T02 holds the lease, built on T00
        code, console = _resume(first, release)  # its checks passed before it stalled; the log is free
        assert code == 0, console
        second_release.touch()
        code, console = finish(second)
    finally:
        second_release.touch()
        _kill_leftovers(first, second)
    line = one_line(console)
    assert code == exit_codes.USER_ERROR, console
    assert line.startswith(f"dedup_batch: error: commit of batch {T02} refused: batch {T01} (run ")
    assert not (wh / "runs" / f"{T02}.json").exists() and staged_files(wh) == []
    assert commit_log(wh) == [(T00, None), (T01, T00)]
    run_batch(spark, str(raw / T02), str(wh), T02)
    assert_t02_built_on_t01(wh)


def test_two_writers_in_threads_one_is_busy_or_they_run_in_turn(spark, raw, wh):
    """Two in-process writers started together: never both at work, never a stale parent."""
    outcomes: dict[str, str] = {}

    def write(batch_id: str) -> None:
        try:
            run_batch(spark, str(raw / batch_id), str(wh), batch_id)
            outcomes[batch_id] = "committed"
        except (WarehouseBusy, StaleHistoryError) as error:
            outcomes[batch_id] = type(error).__name__

    threads = [threading.Thread(target=write, args=(b,)) for b in (T01, T02)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert sorted(outcomes.values()) in (["WarehouseBusy", "committed"], ["committed", "committed"],
                                         ["StaleHistoryError", "committed"]), outcomes
    assert_history_consistent(wh)
    assert staged_files(wh) == [] and not (wh / layout.LEASE).exists()
    assert len(commit_log(wh)) == 1 + list(outcomes.values()).count("committed")


# -- the commit point, in process ----------------------------------------------------------------------
def _stage_whole_run(wh: Path, txn) -> dict:
    """What a run has staged when it reaches its commit: the four outputs (tiny stand-ins) and a manifest."""
    staging = wh / layout.STAGING / txn.batch_id / txn.run_id
    for name in layout.OUTPUTS:
        (staging / name).mkdir(parents=True)
        (staging / name / "_SUCCESS").write_text("")
    return {"batch_id": txn.batch_id, "run_id": txn.run_id,
            "parent": {"batch_id": txn.parent, "snapshot_fingerprint": manifest(wh, T00)["snapshot_fingerprint"]}}


@pytest.mark.parametrize("meanwhile,reason", [
    # another writer took the next log entry (whatever its lease said): the atomic check
    (lambda wh: (wh / layout.COMMITS / f"{2:020d}.json").write_text(
        json.dumps({"seq": 2, "batch_id": T01, "run_id": "other", "parent": T00, "invalidate": []})),
     f"batch {T01} \\(run other\\) was committed by another writer after this run started on commit 1"),
    # a tool that bypasses the log committed a batch between the parent and this one
    (lambda wh: shutil.copy(wh / "runs" / f"{T00}.json", wh / "runs" / f"{T01}.json"),
     f"the latest committed batch before it is now {T01}, not {T00}"),
], ids=["log_moved_on", "bypassing_tool"])
def test_commit_is_refused_when_the_world_moved_on(spark, wh, meanwhile, reason):
    warehouse = Warehouse(HadoopFS(spark), str(wh))
    with pytest.raises(CommitConflict, match=f"commit of batch {T02} refused: {reason}"):
        with warehouse.writer(T02, "this-run") as txn:
            staged = _stage_whole_run(wh, txn)
            meanwhile(wh)
            warehouse.commit(txn, staged, [])
    assert not (wh / "runs" / f"{T02}.json").exists()
    assert staged_files(wh) == [] and not (wh / layout.LEASE).exists()


# -- leases, without a second process ---------------------------------------------------------------
def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _lease(**fields) -> dict:
    now = datetime.now(timezone.utc)
    return {"owner": "someone", "host": socket.gethostname(), "pid": os.getpid(), "run_id": "other-run",
            "batch_id": T01, "acquired_at": now.isoformat(),
            "expires_at": (now + timedelta(minutes=10)).isoformat(), **fields}


@pytest.mark.parametrize("make_holder,busy", [
    (lambda: _lease(host="another-host"), True),  # live, elsewhere
    (lambda: _lease(pid=os.getppid()), True),  # live, another process of this host
    (lambda: _lease(host="another-host", expires_at="2026-01-01T00:00:00+00:00"), False),  # expired
    (lambda: _lease(pid=_dead_pid()), False),  # unexpired, but its process on this host is gone
    (lambda: _lease(run_id="finished-run"), False),  # this process, but no run of it is at work
    (lambda: "{truncated", False),  # torn by a power loss: no holder to wait for
], ids=["live_elsewhere", "live_here", "expired", "dead_here", "finished_run_here", "torn"])
def test_a_live_lease_is_never_broken_a_dead_one_is(spark, raw, wh, make_holder, busy):
    holder = make_holder()
    (wh / layout.LEASE).write_text(holder if isinstance(holder, str) else json.dumps(holder))
    if busy:
        with pytest.raises(WarehouseBusy, match=r"another writer holds its lease \(someone@.* run other-run of batch"):
            run_batch(spark, str(raw / T01), str(wh), T01)
        assert (wh / layout.LEASE).read_text() == json.dumps(holder)
        assert staged_files(wh) == []
    else:
        run_batch(spark, str(raw / T01), str(wh), T01)
        assert parent(wh, T01) == T00 and not (wh / layout.LEASE).exists()


def test_recovery_discards_only_runs_of_writers_that_are_gone(spark, raw, wh):
    """Staging runs tagged with their owner: a dead one is discarded, a live one on another host kept."""
    for run_id, owner in (("dead-run", _lease(pid=_dead_pid(), run_id="dead-run")),
                          ("live-run", _lease(host="another-host", run_id="live-run"))):
        run_dir = wh / layout.STAGING / T01 / run_id
        (run_dir / "delivered").mkdir(parents=True)
        (run_dir / "delivered" / "part-0.parquet").write_bytes(b"x")
        (run_dir / layout.OWNER).write_text(json.dumps(owner))
    assert Warehouse(HadoopFS(spark), str(wh)).recover() == []
    assert staged_files(wh) == [f"{T01}/live-run/delivered/part-0.parquet"]


# -- a torn commit record ------------------------------------------------------------------------------
@pytest.mark.parametrize("torn", ["", '{"seq": 2, "batch_id": "2026-11-21T0'], ids=["empty", "truncated"])
def test_a_torn_commit_entry_is_not_committed_and_does_not_block_later_runs(spark, raw, wh, caplog, torn):
    """A power loss that empties or truncates the entry of a crashed run: that run is not committed,
    the next run says so in one log line and commits after it."""
    (wh / layout.COMMITS / f"{2:020d}.json").write_text(torn)
    crashed = wh / layout.STAGING / T01 / "crashed-run"
    (crashed / "delivered").mkdir(parents=True)
    (crashed / layout.OWNER).write_text(json.dumps(_lease(pid=_dead_pid(), run_id="crashed-run")))
    with caplog.at_level("WARNING", logger="msgdedup.engine.warehouse"):
        run_batch(spark, str(raw / T01), str(wh), T01)
    assert any("is torn or unreadable" in r.getMessage() and "treated as not committed" in r.getMessage()
               for r in caplog.records)
    assert parent(wh, T01) == T00 and staged_files(wh) == []
    assert json.loads((wh / layout.COMMITS / f"{3:020d}.json").read_text())["batch_id"] == T01


# -- the gate on the warehouse the race of issue 9 left ----------------------------------------------
def test_gate_fails_a_batch_built_on_a_stale_parent(spark, raw, after_t00, tmp_path, capsys):
    """Recreate, with the real engine, what two unguarded writers produced: T01 and T02 both built on
    T00, both committed. The gate of T02 fails (exit 3) and result.json says why."""
    wh, other = tmp_path / "wh", tmp_path / "other"
    shutil.copytree(after_t00, wh), shutil.copytree(after_t00, other)
    run_batch(spark, str(raw / T02), str(wh), T02)
    run_batch(spark, str(raw / T01), str(other), T01)
    for name in layout.OUTPUTS:
        shutil.copytree(other / name / f"batch_id={T01}", wh / name / f"batch_id={T01}")
    shutil.copy(other / "runs" / f"{T01}.json", wh / "runs" / f"{T01}.json")

    assert gate_main(["--warehouse", str(wh), "--batch-id", T02]) == exit_codes.GATE_FAILED
    assert "lineage.expect_parent_to_be_latest_committed_batch(parent)" in capsys.readouterr().err
    result = json.loads((wh / "quality" / T02 / "result.json").read_text())
    assert result["success"] is False
    (check,) = [e for e in result["expectations"] if not e["success"]]
    assert check["suite"] == "lineage"
    assert check["observed"]["observed_value"].startswith(
        f"batch {T02} was built on {T00}, but the latest committed batch before it is {T01}")


def test_syncing_a_staging_run_tolerates_its_owner_file_being_renewed(spark, tmp_path):
    """The commit fsyncs the staged run (HadoopFS.sync_tree) while the lease's thread may be
    renewing the run's owner file, a temporary sibling renamed over it: a file that vanishes
    between the listing and its fsync must not fail the batch (it failed a 1M-message run once,
    with "No such file or directory: .../_OWNER.json.<hex>.tmp")."""
    fs = HadoopFS(spark)
    staging = tmp_path / "_staging" / T00 / "run"
    (staging / "delivered").mkdir(parents=True)
    for i in range(200):
        (staging / "delivered" / f"part-{i:05d}.parquet").write_bytes(b"x")
    owner = str(staging / layout.OWNER)
    stop, renewals = threading.Event(), []

    def renew() -> None:
        while not stop.is_set():
            fs.write_text_atomic(owner, json.dumps({"renewed": len(renewals)}))
            renewals.append(1)

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    syncs, deadline = 0, time.monotonic() + 120
    try:  # the tree synced, over and over, until the owner file was renewed often meanwhile
        while (syncs < 300 or len(renewals) < 300) and time.monotonic() < deadline:
            fs.sync_tree(str(staging))
            syncs += 1
    finally:
        stop.set()
        thread.join(timeout=30)
    # how many renewals a sync overlaps depends on the machine's load (272 in 300 syncs on a busy CI machine)
    assert syncs >= 300 and len(renewals) >= 300, "the owner file was not renewed while the tree was synced"
