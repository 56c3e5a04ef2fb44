"""The writer's lease (``_WRITER.json``) and who is alive: one writer per warehouse, told early.

The commit log (``warehouse.py``) is what makes a commit on a stale parent impossible; the lease
is what makes a second writer learn it at once instead of after an hour of work, and what lets
recovery tell a crashed run from a live one.

A lease is a small JSON document: ``owner`` (user), ``host``, ``pid`` (and the process's start
time, so a reused pid is not mistaken for the holder), ``run_id``, ``batch_id``, ``acquired_at``,
``renewed_at``, ``expires_at`` (UTC). It is taken by creating the file exclusively, renewed by its
holder every third of its time to live by a daemon thread of the driver, confirmed again just
before the commit point, and deleted at the end of the run.

A lease can be broken only when its holder can no longer be at work: it has expired (the holder has
not renewed it for a whole time to live, so it will find it lost at its next renewal or at commit,
and refuse to commit), or the holder ran on this host and its process is gone (a killed writer's
lease is broken at once). A live holder's lease is never broken. Breaking renames the lease out of
the way and checks that it moved the very document it judged dead; if another writer took the lease
in between, that lease is put back.

Every staging run carries the same document as ``_OWNER.json``, renewed with the lease, so recovery
can leave the runs of live writers alone (``owner_is_alive``).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import uuid
from datetime import datetime, timedelta, timezone

from msgdedup import layout
from msgdedup.engine.filesystem import HadoopFS

log = logging.getLogger(__name__)

TTL_ENV = "MSGDEDUP_LEASE_TTL_S"
DEFAULT_TTL_S = 120.0
# A staging run whose owner ran on another host is given up only this long after its owner's
# lease expired: recovery must never delete the work of a writer that is merely slow to renew.
OTHER_HOST_GRACE_S = 3600.0

# The runs this process is working on (run ids): another thread of this process (tests run
# batches in threads) must not take them for a crashed process's runs.
_ACTIVE_RUNS: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


class WarehouseBusy(RuntimeError):
    """Another writer holds the warehouse's lease (exit 4: retry later)."""


class LeaseLost(RuntimeError):
    """This run's lease was broken (it had expired) or taken: the run must not commit."""


def ttl_seconds() -> float:
    value = os.environ.get(TTL_ENV)
    return float(value) if value else DEFAULT_TTL_S


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def _stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux); [] if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return []
    return stat.rsplit(")", 1)[-1].split()


def _process_start(pid: int) -> str | None:
    """The start time of a process in clock ticks since boot, to tell a reused pid apart."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else None


def _process_state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def process_is_running(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` of this host runs (not a zombie), and is the one that started at ``started``."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    if _process_state(pid) in ("Z", "X"):
        return False  # killed, waiting to be reaped: it will never write again
    return started is None or _process_start(pid) in (None, started)


def describe(document: dict) -> str:
    """One line naming a lease's holder and expiry, for messages."""
    return (f"{document.get('owner', '?')}@{document.get('host', '?')} pid {document.get('pid', '?')}, "
            f"run {document.get('run_id', '?')} of batch {document.get('batch_id', '?')}, "
            f"expires {document.get('expires_at', '?')}")


def _expires(document: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(document["expires_at"])
    except (KeyError, TypeError, ValueError):
        return None


def owner_is_alive(document: dict, grace_s: float = 0.0) -> tuple[bool, str]:
    """(alive, why) for the writer a lease or staging-owner document names.

    On this host the process itself answers (this process: its active runs). On another host only
    time does: alive until ``grace_s`` after its ``expires_at``.
    """
    host, pid = document.get("host"), document.get("pid")
    if host == socket.gethostname() and isinstance(pid, int):
        if pid == os.getpid():
            with _ACTIVE_LOCK:
                active = document.get("run_id") in _ACTIVE_RUNS
            return active, "a run of this process" if active else "a finished run of this process"
        if process_is_running(pid, document.get("pid_started")):
            return True, f"pid {pid} is running on this host"
        return False, f"pid {pid} is gone from this host"
    expires = _expires(document)
    if expires is None:
        return False, "its lease document has no readable expiry"
    if _now() < expires + timedelta(seconds=grace_s):
        return True, f"its lease expires at {_iso(expires)} (+{grace_s:.0f} s grace)"
    return False, f"its lease expired at {_iso(expires)}"


def holder_is_live(document: dict) -> tuple[bool, str]:
    """Whether a lease still binds: unexpired, and (on this host) its process still runs."""
    expires = _expires(document)
    if expires is None:
        return False, "unreadable expiry"
    if _now() >= expires:
        return False, f"it expired at {_iso(expires)}"
    alive, why = owner_is_alive(document)
    return alive, why


class Lease:
    """The lease of one run on one warehouse: acquire, renew in the background, confirm, release."""

    def __init__(self, fs: HadoopFS, root: str, run_id: str, batch_id: str, ttl_s: float | None = None,
                 owner_paths: tuple[str, ...] = ()) -> None:
        self.fs = fs
        self.path = layout.lease(root)
        self.root = root
        self.run_id = run_id
        self.batch_id = batch_id
        self.ttl_s = ttl_s if ttl_s is not None else ttl_seconds()
        self.owner_paths = list(owner_paths)
        self.acquired_at: datetime | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # renewals from the thread and from confirm() never interleave

    # -- the document -------------------------------------------------------------------------------
    def document(self) -> dict:
        now = _now()
        return {
            "owner": getpass.getuser(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_started": _process_start(os.getpid()),
            "run_id": self.run_id,
            "batch_id": self.batch_id,
            "acquired_at": _iso(self.acquired_at or now),
            "renewed_at": _iso(now),
            "expires_at": _iso(now + timedelta(seconds=self.ttl_s)),
        }

    def read(self) -> dict | None:
        """The lease on the warehouse now; an unreadable one reads as an expired, anonymous lease."""
        try:
            text = self.fs.read_text(self.path, missing_ok=True)
        except Exception:  # noqa: BLE001 - vanished between exists and open: no lease
            return None
        if text is None:
            return None
        try:
            document = json.loads(text)
            if isinstance(document, dict):
                return document
        except json.JSONDecodeError:
            pass
        log.warning("lease %s is unreadable (%r...): treated as expired", self.path, text[:80])
        return {"unreadable": text[:200]}

    # -- acquire / release ----------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lease, breaking a dead holder's; raise WarehouseBusy if a live writer holds it."""
        with _ACTIVE_LOCK:
            _ACTIVE_RUNS.add(self.run_id)
        try:
            for _ in range(5):
                self.acquired_at = _now()
                if self.fs.create_exclusive(self.path, json.dumps(self.document(), indent=2)):
                    self._write_owner_files(self.document())
                    return
                held = self.read()
                if held is None:
                    continue  # released between our attempt and the read: try again
                live, why = holder_is_live(held) if "unreadable" not in held else (False, "unreadable")
                if live:
                    raise WarehouseBusy(
                        f"warehouse {self.root} is busy: another writer holds its lease ({describe(held)}); "
                        f"retry later")
                self._break(held, why)
            raise WarehouseBusy(f"warehouse {self.root}: could not take its lease after 5 attempts; retry later")
        except BaseException:
            with _ACTIVE_LOCK:
                _ACTIVE_RUNS.discard(self.run_id)
            raise

    def _break(self, held: dict, why: str) -> None:
        """Move a dead holder's lease aside; if what moved is not that lease (taken meanwhile), put it back."""
        aside = f"{self.path}.broken-{uuid.uuid4().hex}"
        try:
            self.fs.rename(self.path, aside)
        except Exception:  # noqa: BLE001 - OSError, or Hadoop's FileNotFoundException through py4j
            return  # someone else broke or released it first
        moved = self.fs.read_text(aside, missing_ok=True)
        try:
            moved_doc = json.loads(moved) if moved else None
        except json.JSONDecodeError:
            moved_doc = None
        same = moved_doc == held or ("unreadable" in held and moved is not None and moved[:200] == held["unreadable"])
        if not same and moved is not None and moved_doc is not None:
            # A writer took the lease between our read and our rename: give it back untouched.
            self.fs.create_exclusive(self.path, moved)
            self.fs.delete(aside)
            return
        self.fs.delete(aside)
        # INFO: the run's own console keeps to its one line; the broken lease is not an error.
        log.info("broke the lease of %s: %s", describe(held), why)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            held = self.read()
            if held is not None and held.get("run_id") == self.run_id:
                self.fs.delete(self.path)
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE_RUNS.discard(self.run_id)

    # -- renew / confirm ------------------------------------------------------------------------
    def add_owner_path(self, path: str) -> None:
        """Tag a staging run with this lease's document (and keep it renewed with the lease)."""
        self.owner_paths.append(path)
        self.fs.write_text_atomic(path, json.dumps(self.document(), indent=2))

    def _write_owner_files(self, document: dict) -> None:
        for path in self.owner_paths:
            try:
                self.fs.write_text_atomic(path, json.dumps(document, indent=2))
            except Exception:  # noqa: BLE001 - a discarded run's owner file may be gone
                log.debug("could not renew owner file %s", path, exc_info=True)

    def renew(self) -> None:
        """Extend the lease if it is still ours and unexpired; raise LeaseLost otherwise."""
        with self._lock:
            if self.lost:
                raise LeaseLost(self.lost)
            held = self.read()
            if held is None or held.get("run_id") != self.run_id:
                self.lost = ("this run lost the warehouse lease"
                             + (f" to {describe(held)}" if held and "unreadable" not in held else ""))
                raise LeaseLost(self.lost)
            expires = _expires(held)
            if expires is None or _now() >= expires:
                # It may have been broken already or be broken any moment: never write over it.
                self.lost = f"this run's warehouse lease expired at {held.get('expires_at')} before it was renewed"
                raise LeaseLost(self.lost)
            document = self.document()
            self.fs.write_text_atomic(self.path, json.dumps(document, indent=2))
            self._write_owner_files(document)

    def confirm(self) -> None:
        """At the commit: the lease must still be ours (renewing it proves it)."""
        self.renew()

    def start_renewing(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.ttl_s / 3):
                try:
                    self.renew()
                except LeaseLost as lost:
                    # Not an error yet: the commit refuses, with the one-line message users see.
                    log.info("%s; the run will not commit", lost)
                    return
                except Exception:  # noqa: BLE001 - a failed renewal is retried; expiry is the limit
                    log.warning("could not renew the warehouse lease", exc_info=True)

        self._thread = threading.Thread(target=loop, name=f"lease-{self.run_id[:8]}", daemon=True)
        self._thread.start()

