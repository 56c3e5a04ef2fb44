"""A local Airflow for the demo and the end-to-end tests: one home directory, real components.

``LocalAirflow(home, port)`` writes ``<home>/airflow.cfg`` (SQLite, LocalExecutor, low
parallelism for a 2-core machine, SimpleAuthManager with one ``admin`` user whose random password
is generated into ``<home>/simple_auth_manager_passwords.json.generated``, random JWT/API/Fernet
secrets in ``<home>/secrets/``), migrates the metadata DB, and starts the components as background processes:
``api-server`` (UI + REST + our plugin), ``scheduler``, ``dag-processor`` and ``triggerer``, and
with ``batch_service=True`` a ``batch-service`` (:mod:`msgdedup.batch_service`, master ``local[*]``)
whose socket the demo gives the DAG in the Variable ``msgdedup_batch_service``.
Each writes ``<home>/run/<component>.pid`` and ``<home>/logs/<component>.log``; :meth:`stop`
stops exactly those processes (their process groups). Everything is idempotent: starting a
running Airflow does nothing, stopping a stopped one does nothing.

Secrets: ``airflow.cfg`` (it holds the Fernet key and the API/JWT secrets), the password file and
``secrets/*`` are created with mode 0600 (``secrets/`` and the home itself 0700) in the ``open``
call itself, so they are never readable by others, whatever the umask, not even for a moment.

SQLite and several processes: every component (and every ``airflow`` CLI call) waits up to
:data:`SQLITE_BUSY_TIMEOUT_S` for the database's write lock instead of sqlite3's default 5 s
(``[database] sql_alchemy_connect_args``): while the components start, one of them can hold the
lock for seconds on a busy 2-core machine. This does not cure every ``database is locked``: a
transaction that read before it writes fails at once if another process committed in between
(``demo.backfill`` explains the one ``make demo`` met, and retries it).

CLI (used by ``make demo`` / ``make stop``)::

    python -m msgdedup.orchestration.local_airflow {start,stop,status} --home .airflow --port 8080
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# The warm Spark application of msgdedup.batch_service, when a home runs one (the demo does).
BATCH_SERVICE = "batch-service"
# Every component a home may have started (and so a pid file of).
EVERY_COMPONENT = COMPONENTS + (BATCH_SERVICE,)
PROJECT_ROOT = Path(__file__).resolve().parents[3]
ADMIN_USER = "admin"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"

# sqlite3's busy timeout for every Airflow process of a local home (see the module docstring).
# Airflow imports these dicts by name ([database] sql_alchemy_connect_args[_async]) and adds
# its own keys to them, so each engine gets its own.
SQLITE_BUSY_TIMEOUT_S = 60
SQLITE_CONNECT_ARGS = {"timeout": SQLITE_BUSY_TIMEOUT_S}
SQLITE_CONNECT_ARGS_ASYNC = {"timeout": SQLITE_BUSY_TIMEOUT_S}


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600) from the moment it exists.

    ``os.open`` with the mode creates it 0600 (a umask can only remove bits); an existing file
    (an older home) is made 0600 before its content is replaced.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        os.fchmod(fd, 0o600)
        fh.write(text)


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (0700), created so."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # mkdir's mode is filtered by the umask; an existing one may be wider
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


class ComponentExited(RuntimeError):
    """A component this home started is no longer running, so whatever a caller waits for (a DAG
    run's end, a backfill's) cannot come: the wait stops at once instead of at its timeout."""


def _last_line(path: Path, tail_bytes: int = 8192) -> str:
    """The last non-blank line of a log (its exception, when a component died of one)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - tail_bytes))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:400] if lines else ""


@dataclass
class LocalAirflow:
    home: Path
    port: int = 8080
    dags_folder: Path = PROJECT_ROOT / "dags"
    plugins_folder: Path = PROJECT_ROOT / "plugins"
    parallelism: int = 2
    extra_config: dict[str, dict[str, str]] = field(default_factory=dict)
    # Also run a batch service as a component, at :attr:`batch_service_socket`, on this master.
    batch_service: bool = False
    batch_service_master: str = "local[*]"

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()

    # ------------------------------------------------------------ paths / environment
    @property
    def base_url(self) -> str:
        return f"http://localhost:{self.port}"

    @property
    def bin(self) -> Path:
        return Path(sys.executable).parent

    @property
    def components(self) -> tuple[str, ...]:
        return COMPONENTS + ((BATCH_SERVICE,) if self.batch_service else ())

    @property
    def batch_service_socket(self) -> Path:
        return self.home / "run" / "batch-service" / "service.sock"

    def pid_file(self, component: str) -> Path:
        return self.home / "run" / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.home / "logs" / f"{component}.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
        env["AIRFLOW_HOME"] = str(self.home)
        env["AIRFLOW_CONFIG"] = str(self.home / "airflow.cfg")
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env.setdefault("PYSPARK_PYTHON", str(self.bin / "python"))
        env.setdefault("PYSPARK_DRIVER_PYTHON", str(self.bin / "python"))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def airflow(self, *args: str, check: bool = True, capture: bool = True,
                timeout: float = 300) -> subprocess.CompletedProcess:
        """Run an ``airflow`` CLI command against this home."""
        return subprocess.run(
            [str(self.bin / "airflow"), *args], env=self.env(), check=check, text=True,
            capture_output=capture, timeout=timeout, cwd=self.home,
        )

    # ------------------------------------------------------------ configuration
    def password(self) -> str:
        data = json.loads((self.home / PASSWORDS_FILE).read_text())
        return data[ADMIN_USER]

    def _secret(self, name: str, nbytes: int = 32) -> str:
        path = private_dir(self.home / "secrets") / name
        if not path.exists():
            # random bytes, url-safe base64 (32 bytes: a valid Fernet key).
            write_private(path, base64.urlsafe_b64encode(secrets.token_bytes(nbytes)).decode())
        return path.read_text().strip()

    def configure(self) -> None:
        """Write airflow.cfg and the admin password (random, generated once per home).

        The home is 0700: besides these files it holds the metadata DB (connections, variables)
        and the task logs, which Airflow creates with the process's umask.
        """
        private_dir(self.home)
        (self.home / "logs").mkdir(exist_ok=True)
        (self.home / "run").mkdir(exist_ok=True)
        pw_file = self.home / PASSWORDS_FILE
        if not pw_file.exists():
            write_private(pw_file, json.dumps({ADMIN_USER: secrets.token_urlsafe(12)}) + "\n")
        config: dict[str, dict[str, Any]] = {
            "core": {
                "dags_folder": self.dags_folder,
                "plugins_folder": self.plugins_folder,
                "executor": "LocalExecutor",
                "parallelism": self.parallelism,
                "max_active_tasks_per_dag": self.parallelism,
                "load_examples": "False",
                "dags_are_paused_at_creation": "True",
                "auth_manager": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
                "simple_auth_manager_users": f"{ADMIN_USER}:admin",
                "simple_auth_manager_passwords_file": pw_file,
                "execution_api_server_url": f"http://127.0.0.1:{self.port}/execution/",
                "lazy_load_plugins": "False",
                "fernet_key": self._secret("fernet_key"),
            },
            "database": {
                "sql_alchemy_conn": f"sqlite:///{self.home / 'airflow.db'}",
                "sql_alchemy_connect_args": "msgdedup.orchestration.local_airflow.SQLITE_CONNECT_ARGS",
                "sql_alchemy_connect_args_async": "msgdedup.orchestration.local_airflow.SQLITE_CONNECT_ARGS_ASYNC",
            },
            "logging": {"base_log_folder": self.home / "logs" / "tasks"},
            "api": {
                "host": "127.0.0.1",
                "port": self.port,
                "base_url": self.base_url,
                "workers": 1,
                "secret_key": self._secret("api_secret_key"),
                "expose_config": "False",
            },
            "api_auth": {"jwt_secret": self._secret("jwt_secret", 64)},
            "scheduler": {
                "scheduler_heartbeat_sec": 2,
                "parsing_processes": 1,
                "use_job_schedule": "True",
            },
            "dag_processor": {"parsing_processes": 1, "refresh_interval": 30, "min_file_process_interval": 30},
            # A task's supervisor (Airflow 3.3) waits on its pipes for up to min_heartbeat_interval
            # at a time, and notices that the task process exited only when it wakes: when the
            # pipes close just before the exit, the executor slot stays taken that long after
            # the task ended (5 s, the default, for about one task in two in a backfill: the next
            # task waited for it). 1 s bounds that; the price is one heartbeat a second per
            # running task (at most `parallelism` of them).
            "workers": {"min_heartbeat_interval": 1},
        }
        for section, values in self.extra_config.items():
            config.setdefault(section, {}).update(values)
        lines = ["# Written by msgdedup.orchestration.local_airflow; runtime state, not in git."]
        for section, values in config.items():
            lines.append(f"\n[{section}]")
            lines += [f"{key} = {value}" for key, value in values.items()]
        write_private(self.home / "airflow.cfg", "\n".join(lines) + "\n")

    def migrate(self) -> None:
        self.airflow("db", "migrate", timeout=600)
        self._migrated = True

    # ------------------------------------------------------------ processes
    def pid(self, component: str) -> int | None:
        try:
            pid = int(self.pid_file(component).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def running(self) -> dict[str, int | None]:
        return {c: self.pid(c) for c in self.components}

    def exited(self) -> list[str]:
        """The components this home started and did not stop (their pid file is there) whose
        process has gone."""
        return [c for c in EVERY_COMPONENT if self.pid_file(c).exists() and self.pid(c) is None]

    def check_running(self) -> None:
        """Raise :class:`ComponentExited` naming each component that exited, the last line of
        its log and the log's path. Every loop that waits on Airflow calls it each round."""
        gone = self.exited()
        if gone:
            raise ComponentExited("; ".join(
                f"the {c} exited (its log ends: {_last_line(self.log_file(c)) or 'nothing'}; "
                f"see {self.log_file(c)})" for c in gone))

    def command(self, component: str) -> list[str]:
        if component == BATCH_SERVICE:
            return [str(self.bin / "spark-submit"), "--master", self.batch_service_master,
                    "--name", "msgdedup batch service", str(PROJECT_ROOT / "spark_apps" / "batch_service.py"),
                    "--socket", str(self.batch_service_socket)]
        args = [str(self.bin / "airflow"), component]
        if component == "api-server":
            args += ["--port", str(self.port), "--host", "127.0.0.1", "--workers", "1"]
        return args

    def wait_batch_service(self, timeout: float = 180) -> None:
        """Until the batch service accepts requests (its SparkSession is up)."""
        from msgdedup.batch_service import available

        deadline = time.monotonic() + timeout
        while not available(self.batch_service_socket):
            if self.pid(BATCH_SERVICE) is None:
                raise RuntimeError(f"the batch service exited; see {self.log_file(BATCH_SERVICE)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the batch service is not listening after {timeout}s; "
                                   f"see {self.log_file(BATCH_SERVICE)}")
            time.sleep(0.5)

    def start(self, components: tuple[str, ...] | None = None) -> None:
        """Start the components that are not running (configure + migrate first; the batch
        service alone needs no metadata DB, so it starts without)."""
        components = self.components if components is None else components
        if all(self.pid(c) for c in components):
            return
        if self.pid("api-server") is None and _port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is in use by another program")
        if not getattr(self, "_migrated", False):
            self.configure()
            if set(components) - {BATCH_SERVICE}:
                self.migrate()
        for component in components:
            if self.pid(component):
                continue
            log = self.log_file(component).open("ab")
            proc = subprocess.Popen(
                self.command(component), env=self.env(), cwd=self.home, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
            self.pid_file(component).write_text(f"{proc.pid}\n")

    def stop(self, timeout: float = 30) -> list[str]:
        """Stop the processes this home started (by their pid files); return what was stopped."""
        stopped = []
        for component in reversed(EVERY_COMPONENT):  # whatever has a pid file
            pid = self.pid(component)
            if pid is None:
                self.pid_file(component).unlink(missing_ok=True)
                continue
            try:
                os.killpg(pid, signal.SIGTERM)  # its own session/group: the component and its children
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and _group_alive(pid):
                time.sleep(0.2)
                _reap(pid)
            if _group_alive(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _reap(pid)
            self.pid_file(component).unlink(missing_ok=True)
            stopped.append(component)
        return stopped

    # ------------------------------------------------------------ REST API
    def wait_api(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.pid("api-server") is None:
                raise RuntimeError(f"api-server exited; see {self.log_file('api-server')}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/api/v2/monitor/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(1)
        raise TimeoutError(f"API server not up after {timeout}s ({last})")

    def token(self) -> str:
        body = json.dumps({"username": ADMIN_USER, "password": self.password()}).encode()
        req = urllib.request.Request(f"{self.base_url}/auth/token", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def api(self, method: str, path: str, body: Any = None, token: str | None = None,
            timeout: float = 60) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token or self.token()}"}
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # only zombies left?
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(") ", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msgdedup.orchestration.local_airflow")
    parser.add_argument("action", choices=["start", "stop", "status", "password"])
    parser.add_argument("--home", type=Path, default=PROJECT_ROOT / ".airflow")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--batch-service", action="store_true",
                        help="start: also start a batch service (msgdedup.batch_service)")
    args = parser.parse_args(argv)
    af = LocalAirflow(args.home, args.port,
                      batch_service=args.batch_service or LocalAirflow(args.home).pid(BATCH_SERVICE) is not None)
    if args.action == "start":
        af.start()
        af.wait_api()
        if af.batch_service:
            af.wait_batch_service()
        print(f"Airflow running at {af.base_url} (home {af.home})")
    elif args.action == "stop":
        stopped = af.stop()
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    elif args.action == "status":
        for component, pid in af.running().items():
            print(f"{component:14s} {'running, pid ' + str(pid) if pid else 'stopped'}")
    else:
        print(af.password())
    return 0


if __name__ == "__main__":
    sys.exit(main())
