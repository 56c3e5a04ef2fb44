"""A warm Spark application that runs ``process_batch`` requests one after another.

Why: run through ``spark-submit``, every partition pays the JVM's start-up, the SparkContext, the
Python workers' start-up and a cold JIT again, which is most of an hourly batch's cost
(docs/benchmarks.md): an hourly DAG, a week's backfill (168 partitions) and a reprocessing of
history (every later batch, in order) pay it per partition. The service pays it once. It holds one
SparkSession and runs each request (the same arguments as ``spark_apps/process_batch.py``) in it,
with the same code (:func:`msgdedup.pipeline.run_in_session`), exit codes and log lines, streamed
back to the caller: the DAG's ``process_batch`` task (:mod:`msgdedup.orchestration.spark`), or a
user with ``python -m msgdedup.batch_service submit -- --input … --warehouse … --batch-id …``.
Every partition is still its own DAG run and its own commit, gated and published on its own.

Why not Spark Connect (its server ships with pyspark): the engine's commit protocol runs in the
driver against Hadoop's FileSystem API (the commit log's exclusive create, hsync, the writer's
lease: engine/warehouse.py, engine/lease.py), which a Spark Connect client cannot call, and the
gate runs Great Expectations' Spark engine on a classic session. Moving them would rewrite the
commit protocol, the part of the engine that must not change. A Unix socket to a driver of our
own keeps them where they are, in about 200 lines.

Protocol: newline-delimited JSON over a Unix stream socket. The client sends one line
``{"argv": [...]}``; the service answers ``{"out": "<line>"}`` for each line the batch prints and
last ``{"exit": <code>}`` (:mod:`msgdedup.exit_codes`). It serves one request at a time (the
engine allows one writer per warehouse anyway; a second client waits in the socket's backlog). A
client that disconnects (its Airflow task was killed or timed out) cancels its request's Spark
jobs, so the run fails, rolls back and releases the warehouse's lease as any failed run does.

Security: the socket is created 0600 in a directory only its owner can enter (0700), so only the
OS user that runs the pipeline, who can ``spark-submit`` anyway, can send it a request. It is not
a network endpoint and serves no UI.

If the service's JVM dies, the service notices within a second (its parent process, the JVM
spark-submit started, is gone, or the SparkContext is stopped) and exits non-zero; a client then
finds nobody listening (:class:`ServiceUnavailable`) and the DAG's task runs ``spark-submit``
instead, with a warning.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from msgdedup import exit_codes

PROG = "batch_service"
log = logging.getLogger(__name__)

# A request line is a few hundred bytes (paths and flags); refuse anything absurd.
MAX_REQUEST_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10
# How often a cancelled request's Spark jobs are cancelled again (the request may start new ones
# between the first cancel and its failure).
CANCEL_EVERY_S = 1.0


class ServiceUnavailable(ConnectionError):
    """Nothing listens on the socket: the caller may run the batch some other way."""


class ServiceLost(ConnectionError):
    """The service went away while it ran the request: the outcome is unknown (retry the batch)."""


# -- the socket's address --------------------------------------------------------------------------
# A Unix socket's address holds at most 107 bytes on Linux (103 on macOS), and a project checked
# out deep in a home directory, or a test's temporary directory, puts the service's socket past
# that: bind() and connect() fail ("AF_UNIX path too long"). The socket stays where it is, since
# its 0700 directory is what keeps other users out (an abstract socket would have no permissions);
# a longer path is reached through a symlink to that directory, in a fresh private temporary one.
UNIX_PATH_MAX = 100


@contextlib.contextmanager
def _address(socket_path: Path) -> Iterator[str]:
    """An address of ``socket_path`` that bind() and connect() take, while the block runs."""
    path = str(socket_path)
    if len(os.fsencode(path)) <= UNIX_PATH_MAX:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="msgdedup-", dir="/tmp" if os.path.isdir("/tmp") else None) as short:
        link = os.path.join(short, "d")
        os.symlink(socket_path.parent.absolute(), link)
        yield os.path.join(link, socket_path.name)


# -- client ----------------------------------------------------------------------------------------
def submit(socket_path: str | Path, argv: list[str], on_line: Callable[[str], None] = print) -> int:
    """Run one batch in the service at ``socket_path``; each line it prints goes to ``on_line``.

    Returns the batch's exit code. Raises ServiceUnavailable if nothing listens there (nothing was
    run), ServiceLost if the connection broke before the exit code came (the batch may or may not
    have committed; rerunning it is safe, a batch reruns idempotently).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        with _address(Path(socket_path)) as address:
            sock.connect(address)
    except (FileNotFoundError, ConnectionRefusedError, socket.timeout) as exc:
        sock.close()
        raise ServiceUnavailable(f"no batch service listens on {socket_path} ({exc})") from None
    with sock:
        sock.settimeout(None)  # a batch takes as long as it takes; the task's timeout bounds it
        sock.sendall(json.dumps({"argv": list(argv)}).encode() + b"\n")
        with sock.makefile("r", encoding="utf-8", newline="\n") as answers:
            for raw in answers:
                message = json.loads(raw)
                if "out" in message:
                    on_line(message["out"])
                elif "exit" in message:
                    return int(message["exit"])
    raise ServiceLost(f"the batch service on {socket_path} closed the connection before the batch "
                      "ended (did it stop or crash? see its log); the batch's outcome is unknown")


def available(socket_path: str | Path) -> bool:
    """Something accepts connections on ``socket_path`` (it is not left over from a dead service)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            with _address(Path(socket_path)) as address:
                sock.connect(address)
        except OSError:
            return False
    return True


# -- service ---------------------------------------------------------------------------------------
class _Connection(io.TextIOBase):
    """The request's stdout and stderr: every complete line goes to the client as ``{"out": …}``.

    After the client went away, writes are dropped (the request is being cancelled)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._pending = ""
        self._lock = threading.Lock()
        self.gone = threading.Event()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._pending += text
            *lines, self._pending = self._pending.split("\n")
            for line in lines:
                self._send({"out": line})
        return len(text)

    def flush(self) -> None:
        pass

    def finish(self, code: int) -> None:
        with self._lock:
            if self._pending:
                self._send({"out": self._pending})
                self._pending = ""
            self._send({"exit": code})

    def _send(self, message: dict) -> None:
        if self.gone.is_set():
            return
        try:
            self._conn.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.gone.set()


def _read_request(conn: socket.socket) -> list[str]:
    conn.settimeout(CONNECT_TIMEOUT_S)
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ValueError("the client closed the connection before sending a request")
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    conn.settimeout(None)
    request = json.loads(data)
    argv = request.get("argv") if isinstance(request, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError('a request is one JSON line {"argv": ["--input", …]}')
    return argv


class BatchService:
    """Serves requests on ``socket_path`` with ``run(argv) -> exit code`` until :meth:`stop`."""

    def __init__(self, socket_path: str | Path, run: Callable[[list[str]], int],
                 cancel: Callable[[], None], alive: Callable[[], bool] = lambda: True) -> None:
        self.socket_path = Path(socket_path)
        self._run = run
        self._cancel = cancel
        # Checked every second and before each request: a service whose JVM died must not keep
        # accepting requests it can only fail; it stops, and callers fall back to spark-submit.
        self._alive = alive
        self.died = False
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._serving: _Connection | None = None  # the request being run (one at a time)

    def client_gone(self) -> bool:
        """Whether the client of the request being run went away: ``run`` asks before it commits."""
        serving = self._serving
        return serving is not None and serving.gone.is_set()

    def bind(self) -> None:
        """Create the socket (0600, in a 0700 directory); refuse if a live service holds it."""
        directory = self.socket_path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if directory.stat().st_mode & 0o077:
            directory.chmod(0o700)
        if self.socket_path.exists() or self.socket_path.is_symlink():
            if available(self.socket_path):
                raise RuntimeError(f"another batch service is listening on {self.socket_path}")
            self.socket_path.unlink()  # left over from a service that died
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            with _address(self.socket_path) as address:
                listener.bind(address)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        listener.listen(16)
        listener.settimeout(1.0)
        self._listener = listener

    def serve_forever(self) -> None:
        if self._listener is None:
            self.bind()
        try:
            while not self._stopping.is_set():
                if not self._alive():
                    self.died = True
                    log.error("the Spark application is gone: the batch service stops")
                    break
                try:
                    conn, _ = self._listener.accept()
                except socket.timeout:
                    continue
                except OSError:
                    if self._stopping.is_set():
                        break
                    raise
                with conn:
                    if not self._alive():  # died since the last look: refuse, then stop
                        out = _Connection(conn)
                        out.write(f"{PROG}: the Spark application of this service is gone; not run\n")
                        out.finish(exit_codes.INTERNAL_ERROR)
                        continue
                    self._serve(conn)
        finally:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()

    def stop(self) -> None:
        self._stopping.set()

    def _serve(self, conn: socket.socket) -> None:
        out = _Connection(conn)
        try:
            argv = _read_request(conn)
        except (ValueError, OSError) as exc:
            out.write(f"{PROG}: refused request: {exc}\n")
            out.finish(exit_codes.USER_ERROR)
            return
        log.info("request: %s", " ".join(argv))
        out.write(f"{PROG}: running process_batch {' '.join(argv)}\n")
        started = time.monotonic()
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(conn, out, done), daemon=True)
        watcher.start()
        self._serving = out
        try:
            code = self._run_captured(argv, out)
        finally:
            self._serving = None
        done.set()
        watcher.join()
        out.finish(code)
        log.info("exit %s after %.1f s%s", code, time.monotonic() - started,
                 " (client gone: cancelled)" if out.gone.is_set() else "")

    def _run_captured(self, argv: list[str], out: _Connection) -> int:
        handler = logging.StreamHandler(out)
        handler.setLevel(logging.WARNING)  # what a spark-submit of process_batch.py shows
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    return self._run(argv)
                except SystemExit as exc:  # argparse: bad arguments (its message is printed)
                    return exc.code if isinstance(exc.code, int) else exit_codes.USER_ERROR
                except Exception as exc:  # noqa: BLE001 - one line to the client, the trace to our log
                    log.exception("request failed")
                    print(f"{PROG}: internal error ({type(exc).__name__}): {exc}".splitlines()[0])
                    return exit_codes.INTERNAL_ERROR
        finally:
            root.removeHandler(handler)

    def _watch(self, conn: socket.socket, out: _Connection, done: threading.Event) -> None:
        """Cancel the request's Spark jobs once its client has gone (end of stream on the socket)."""
        while not done.is_set():
            readable, _, _ = select.select([conn], [], [], 0.5)
            if readable and not out.gone.is_set():
                try:
                    gone = conn.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    out.gone.set()
            if out.gone.is_set():
                self._cancel()
                done.wait(CANCEL_EVERY_S)


def serve(socket_path: str | Path) -> int:
    """The ``serve`` command: a SparkSession (master from spark-submit) serving requests."""
    from msgdedup import pipeline
    from msgdedup.engine import batch
    from msgdedup.quality import gate

    gate.preload_gx()  # while the JVM starts, not in the first request
    spark = batch.spark_session(PROG)

    def run(argv: list[str]) -> int:
        request = pipeline.prepare(argv)
        if isinstance(request, int):
            return request
        return pipeline.run_in_session(spark, request, cancelled=service.client_gone)

    parent = os.getppid()  # under spark-submit: the JVM that started this Python driver

    def alive() -> bool:
        if os.getppid() != parent:
            return False
        try:
            return not spark.sparkContext._jsc.sc().isStopped()
        except Exception:  # noqa: BLE001 - py4j: the gateway to the JVM is gone
            return False

    service = BatchService(socket_path, run, cancel=spark.sparkContext.cancelAllJobs, alive=alive)
    service.bind()

    def stop(*_) -> None:
        # py4j is not re-entrant from a signal handler: cancel from a thread of its own.
        service.stop()
        threading.Thread(target=spark.sparkContext.cancelAllJobs, daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    print(f"{PROG}: Spark {spark.version}, master {spark.sparkContext.master}, "
          f"listening on {socket_path}", flush=True)
    try:
        service.serve_forever()
    finally:
        if not service.died:  # stopping a SparkContext whose JVM is gone could wait forever
            spark.stop()
    print(f"{PROG}: {'the Spark application died' if service.died else 'stopped'}", flush=True)
    return exit_codes.INTERNAL_ERROR if service.died else exit_codes.OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run process_batch requests in one warm Spark application.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="serve requests (run it with spark-submit: "
                             "spark_apps/batch_service.py --socket PATH)")
    p_serve.add_argument("--socket", required=True, type=Path, help="path of the Unix socket to create")
    p_submit = sub.add_parser("submit", help="run one batch in a running service and print its log")
    p_submit.add_argument("--socket", required=True, type=Path)
    p_submit.add_argument("batch_args", nargs=argparse.REMAINDER,
                          help="-- then process_batch.py's arguments (--input … --warehouse … --batch-id …)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=logging.WARNING, format=f"{PROG} %(asctime)s %(levelname)s %(message)s")
        log.setLevel(logging.INFO)  # one line per request in the service's own log
        return serve(args.socket)
    batch_args = args.batch_args[1:] if args.batch_args[:1] == ["--"] else args.batch_args
    try:
        return submit(args.socket, batch_args)
    except ServiceUnavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exit_codes.USER_ERROR
    except ServiceLost as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return exit_codes.INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
