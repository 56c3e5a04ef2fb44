"""The local Airflow home of ``make demo`` and the e2e tests: secrets are private from the start,
and every Airflow process of the home waits for SQLite's write lock instead of failing."""

from __future__ import annotations

import configparser
import importlib
import os
import stat
import subprocess
import sys

import pytest

from msgdedup.orchestration.demo import wait_for_runs
from msgdedup.orchestration.local_airflow import (
    BATCH_SERVICE,
    PASSWORDS_FILE,
    PROJECT_ROOT,
    SQLITE_BUSY_TIMEOUT_S,
    ComponentExited,
    LocalAirflow,
    write_private,
)


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture()
def open_umask():
    """The most permissive umask: a file created without an explicit mode would be 0666."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_every_secret_bearing_file_is_owner_only_whatever_the_umask(tmp_path, open_umask):
    af = LocalAirflow(tmp_path / "home", 18123)
    af.configure()
    home = af.home
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(home / "airflow.cfg")
    secrets = home / "secrets"
    # the cfg holds the secrets themselves, not only paths to them
    assert cfg["core"]["fernet_key"] == (secrets / "fernet_key").read_text()
    assert cfg["api_auth"]["jwt_secret"] == (secrets / "jwt_secret").read_text()
    assert cfg["api"]["secret_key"] == (secrets / "api_secret_key").read_text()
    assert sorted(p.name for p in secrets.iterdir()) == ["api_secret_key", "fernet_key", "jwt_secret"]
    for path in [home / "airflow.cfg", home / PASSWORDS_FILE, *secrets.iterdir()]:
        assert _mode(path) == 0o600, path
    assert _mode(secrets) == 0o700 and _mode(home) == 0o700
    assert af.password()


def test_configure_again_keeps_the_secrets_and_tightens_an_old_home(tmp_path, open_umask):
    af = LocalAirflow(tmp_path / "home", 18123)
    af.configure()
    key, password = (af.home / "secrets" / "fernet_key").read_text(), af.password()
    for path in (af.home, af.home / "secrets"):
        path.chmod(0o755)
    (af.home / "airflow.cfg").chmod(0o644)  # as written before this fix
    af.configure()
    assert (af.home / "secrets" / "fernet_key").read_text() == key and af.password() == password
    assert _mode(af.home / "airflow.cfg") == 0o600
    assert _mode(af.home) == _mode(af.home / "secrets") == 0o700


def test_write_private_does_not_follow_a_symlink(tmp_path, open_umask):
    target = tmp_path / "elsewhere"
    target.write_text("not yours")
    (tmp_path / "secret").symlink_to(target)
    with pytest.raises(OSError):
        write_private(tmp_path / "secret", "key")
    assert target.read_text() == "not yours"


def test_sqlite_writers_wait_for_the_lock(tmp_path):
    """The connect args airflow.cfg names exist and set sqlite3's busy timeout (default 5 s)."""
    af = LocalAirflow(tmp_path / "home", 18123)
    af.configure()
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(af.home / "airflow.cfg")
    for key in ("sql_alchemy_connect_args", "sql_alchemy_connect_args_async"):
        module, _, name = cfg["database"][key].rpartition(".")
        assert getattr(importlib.import_module(module), name)["timeout"] == SQLITE_BUSY_TIMEOUT_S >= 30


def test_a_wait_on_airflow_stops_at_once_when_a_component_exited(tmp_path):
    """A scheduler that died (the bench once met a StaleDataError that ended its loop) leaves
    every run 'running': the demo's wait names the component and its log's last line instead of
    polling until its timeout. A component never started (no pid file) is not 'exited'."""
    af = LocalAirflow(tmp_path / "home", 18124)
    af.pid_file("scheduler").parent.mkdir(parents=True)
    af.log_file("scheduler").parent.mkdir(parents=True)
    af.log_file("scheduler").write_text(
        "Traceback (most recent call last):\n  ...\nsqlalchemy.orm.exc.StaleDataError: UPDATE statement on "
        "table 'dag_run' expected to update 1 row(s); 0 were matched.\n\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    af.pid_file("scheduler").write_text(f"{gone.pid}\n")
    af.pid_file("api-server").write_text(f"{os.getpid()}\n")  # alive
    assert af.exited() == ["scheduler"]
    with pytest.raises(ComponentExited, match=r"the scheduler exited \(its log ends: .*StaleDataError.*"
                                              r"see .*logs/scheduler\.log"):
        # No API server is there: without the check, the wait's first request would fail otherwise.
        wait_for_runs(af, ["2026-11-21T00"], timeout=3600)

    af.pid_file("scheduler").unlink()  # as stop() leaves it
    af.check_running()


def test_the_batch_service_starts_before_the_metadata_db_is_made(tmp_path):
    """``make demo`` starts the batch service first, so that its JVM starts while ``airflow db
    migrate`` runs: started alone, it needs no metadata DB, and the home gets none yet."""
    af = LocalAirflow(tmp_path / "home", 18126, batch_service=True, batch_service_master="local[1]")
    try:
        af.start((BATCH_SERVICE,))
        af.wait_batch_service()
        assert [c for c, pid in af.running().items() if pid] == [BATCH_SERVICE]
        assert not (af.home / "airflow.db").exists()
    finally:
        af.stop()
    assert not any(af.running().values())


def test_a_finished_tasks_executor_slot_is_freed_within_a_second(tmp_path):
    """Airflow's task supervisor notices a task process's exit only when its wait on the pipes
    ends, up to [workers] min_heartbeat_interval (5 s by default) after the task ended; the next
    partition's task waited for that slot (docs/benchmarks.md, the hand-overs). The local Airflow
    and docker-compose.yml both bound it to 1 s."""
    import yaml

    af = LocalAirflow(tmp_path / "home", 18125)
    af.configure()
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(af.home / "airflow.cfg")
    assert cfg["workers"]["min_heartbeat_interval"] == "1"
    compose = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
    assert compose["x-airflow-common"]["environment"]["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"] == "1"
