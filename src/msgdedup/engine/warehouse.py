"""The warehouse: where a batch's outputs live, and how they are committed all-or-nothing, by one
writer at a time, never on a stale parent.

A batch is *committed* iff its manifest ``runs/<batch_id>.json`` exists; readers look only at the
``batch_id=<ID>`` directories of committed batches. A run writes everything under
``_staging/<batch_id>/<run_id>/`` first.

**Commit point: the commit log.** ``_commits/`` holds one entry per commit, numbered 1, 2, ...
A writer notes the latest entry (its *base*) when it starts, after recovery, and reads the history
it builds on (parent, later batches) only then. Its commit point is the exclusive creation of
entry base+1 (``HadoopFS.create_exclusive``: atomic create-if-absent). If that entry exists,
another writer committed since this run started: the world it was computed on may be gone, so the
commit is refused (``CommitConflict``, exit 2), nothing is published and the staged work is
removed. This is optimistic concurrency as in Delta Lake's transaction log: the check and the
commit are one atomic step, and no check made at start is trusted. Only the latest entry can be
unfinished: a writer that starts while it is finishing is told the warehouse is busy.

**Roll-forward.** From the commit point on the run is decided, and publishing it (un-commit the
old run of the batch, swap each output directory into place, then move the manifest into
``runs/``) is a roll-forward that can be repeated after a crash at any step. Every run starts with
``recover()``: the decided run, if unfinished, is rolled forward; undecided runs of writers that are
gone are discarded; runs of live writers are left alone. So a crash anywhere, followed by a re-run,
leaves exactly the outputs of one clean run.

**Lease.** ``lease.py``: a second writer is refused at start (``WarehouseBusy``, exit 4) instead of
after its work; the commit log above is what keeps the history right if a lease ever fails
(an expired lease of a writer that was paused, clocks that disagree).

This needs a file system whose directory rename is atomic (local, HDFS); object stores without it
need a table format instead.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from msgdedup import layout
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.lease import OTHER_HOST_GRACE_S, Lease, LeaseLost, WarehouseBusy, describe, owner_is_alive
from msgdedup.layout import OUTPUTS, STAGED_MANIFEST

log = logging.getLogger(__name__)

FAILPOINT_ENV = "MSGDEDUP_FAILPOINT"
FAILPOINT_EXIT_CODE = 86
# ``name=release_file[;name=release_file...]``: at failpoint ``name`` the run creates
# ``release_file.reached`` and waits until ``release_file`` exists (local paths).
PAUSE_ENV = "MSGDEDUP_PAUSE"
PAUSE_LIMIT_S = 900


def failpoint(name: str) -> None:
    """Crash here, hard, or pause here, when the crash and concurrency tests ask for it.

    ``MSGDEDUP_FAILPOINT=<name>``: a real kill at a chosen step is the only way to prove the commit
    protocol; os._exit skips every cleanup handler, as a killed process would.
    ``MSGDEDUP_PAUSE=<name>=<file>``: wait at the step until ``<file>`` exists, so a test can
    order two real writers (the lease keeps being renewed meanwhile, as in a long step).
    """
    if os.environ.get(FAILPOINT_ENV) == name:
        os._exit(FAILPOINT_EXIT_CODE)
    for pause in filter(None, os.environ.get(PAUSE_ENV, "").split(";")):
        point, _, release = pause.partition("=")
        if point == name and release:
            with open(f"{release}.reached", "w"):
                pass
            deadline = time.monotonic() + PAUSE_LIMIT_S
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)


class CommitConflict(RuntimeError):
    """The world this run was computed on changed before its commit point: nothing was committed."""


@dataclass
class Transaction:
    """One writer's run: the commit-log entry it builds on and the history it read then."""

    batch_id: str
    run_id: str
    lease: Lease
    base: int  # the latest commit-log entry when the run started (0: none)
    parent: str | None
    later: list[str] = field(default_factory=list)
    decided: bool = False


class Warehouse:
    def __init__(self, fs: HadoopFS, root: str) -> None:
        self.fs = fs
        self.root = fs.qualify(root).rstrip("/")

    # -- layout (msgdedup.layout, on this warehouse's qualified root) ---------------------------
    def output_dir(self, name: str, batch_id: str) -> str:
        return layout.output_dir(self.root, name, batch_id)

    def manifest_path(self, batch_id: str) -> str:
        return layout.manifest(self.root, batch_id)

    def stale_manifest_path(self, batch_id: str) -> str:
        return layout.stale_manifest(self.root, batch_id)

    def published_path(self, batch_id: str) -> str:
        return layout.published(self.root, batch_id)

    def staging_dir(self, batch_id: str, run_id: str) -> str:
        return layout.staging_dir(self.root, batch_id, run_id)

    # -- history --------------------------------------------------------------------------------
    def _manifests(self) -> list[tuple[str, bool]]:
        """(batch id, stale) of every manifest in ``runs/``, sorted."""
        found = (layout.batch_id_of_manifest(f.name) for f in self.fs.list(layout.runs_dir(self.root))
                 if not f.is_dir)
        return sorted(filter(None, found))

    def committed_batches(self) -> list[str]:
        return [batch_id for batch_id, stale in self._manifests() if not stale]

    def read_manifest(self, batch_id: str) -> dict:
        return json.loads(self.fs.read_text(self.manifest_path(batch_id)))

    def parent_of(self, batch_id: str) -> str | None:
        earlier = [b for b in self.committed_batches() if b < batch_id]
        return earlier[-1] if earlier else None

    def later_than(self, batch_id: str) -> list[str]:
        return [b for b in self.committed_batches() if b > batch_id]

    # -- the commit log -------------------------------------------------------------------------
    def commit_log_head(self) -> int:
        """The number of the latest commit-log entry (0 for an empty log)."""
        seqs = [layout.seq_of_commit_entry(f.name) for f in self.fs.list(layout.commit_log_dir(self.root))]
        return max((s for s in seqs if s is not None), default=0)

    def read_commit_entry(self, seq: int) -> dict | None:
        """Entry ``seq``, or None when it is missing or torn (empty, truncated, not an object).

        Entries are written whole before they appear, so a torn one means the disk lost what it had
        acknowledged: the run it names is treated as not committed, and said so.
        """
        path = layout.commit_entry(self.root, seq)
        text = self.fs.read_text(path, missing_ok=True)
        if text is None:
            return None
        try:
            entry = json.loads(text)
            if isinstance(entry, dict) and isinstance(entry.get("batch_id"), str) \
                    and isinstance(entry.get("run_id"), str) and isinstance(entry.get("invalidate"), list):
                return entry
        except json.JSONDecodeError:
            pass
        log.warning("commit log entry %s is torn or unreadable (%d bytes: %r): its run is treated as "
                    "not committed", path, len(text), text[:60])
        return None

    # -- one writer ----------------------------------------------------------------------------
    @contextmanager
    def writer(self, batch_id: str, run_id: str) -> Iterator[Transaction]:
        """Take the lease, recover, note the base: the run inside may then compute and ``commit``.

        Raises WarehouseBusy when another writer is at work. If the run fails before its commit
        point, its staged work is removed; the lease is released whatever happens.
        """
        lease = Lease(self.fs, self.root, run_id, batch_id)
        lease.acquire()
        try:
            lease.add_owner_path(layout.staging_owner(self.root, batch_id, run_id))
            lease.start_renewing()
            self.recover()
            txn = None
            try:
                txn = self._begin(batch_id, run_id, lease)
                yield txn
            except BaseException:
                if txn is None or not txn.decided:
                    self.discard(batch_id, run_id)  # a refused or failed run leaves nothing behind
                raise
        finally:
            lease.release()

    def _begin(self, batch_id: str, run_id: str, lease: Lease) -> Transaction:
        base = self.commit_log_head()
        entry = self.read_commit_entry(base) if base else None
        if entry is not None and self.fs.exists(self.staging_dir(entry["batch_id"], entry["run_id"])):
            # Recovery left it: its writer is alive and still publishing it. The history is not
            # settled yet, so nothing can be built on it.
            raise WarehouseBusy(
                f"warehouse {self.root} is busy: batch {entry['batch_id']} (run {entry['run_id']}) "
                f"is being published by {describe(entry.get('writer') or {})}; retry later")
        self._check_place_in_history(batch_id)
        return Transaction(batch_id=batch_id, run_id=run_id, lease=lease, base=base,
                           parent=self.parent_of(batch_id), later=self.later_than(batch_id))

    def _check_place_in_history(self, batch_id: str) -> None:
        """The batch must sort among the warehouse's ids (one format), and no batch before it may
        be stale: built on the stale batches' predecessor it would skip their keys, and re-running
        them afterwards would find it built on a history that changed (StaleHistoryError)."""
        manifests = self._manifests()
        layout.check_batch_id_format(batch_id, [b for b, _ in manifests])
        stale_before = [b for b, stale in manifests if stale and b < batch_id]
        if stale_before:
            raise WarehouseBusy(
                f"batch {batch_id} must wait: earlier batch(es) {', '.join(stale_before)} are stale "
                f"(an older batch was reprocessed) and must be re-run first, in order; retry after them")

    # -- commit protocol ------------------------------------------------------------------------
    def commit(self, txn: Transaction, manifest: dict, invalidate: list[str]) -> None:
        """Commit ``txn``'s staged run iff nothing was committed since it started; else CommitConflict
        (``writer()`` then removes the staged work)."""
        batch_id, run_id = txn.batch_id, txn.run_id
        staging = self.staging_dir(batch_id, run_id)
        self._check_staged(staging, batch_id)
        self.fs.sync_tree(staging)
        self.fs.write_text_atomic(f"{staging}/{STAGED_MANIFEST}", json.dumps(manifest, indent=2, sort_keys=True))
        try:
            self._check_world(txn, manifest)
            txn.lease.confirm()
        except LeaseLost as lost:
            raise CommitConflict(f"commit of batch {batch_id} refused: {lost}; nothing was committed, "
                                 f"re-run batch {batch_id}") from None
        failpoint("before_commit_point")
        seq = txn.base + 1
        entry = {
            "seq": seq,
            "batch_id": batch_id,
            "run_id": run_id,
            "parent": txn.parent,
            "invalidate": invalidate,
            "committed_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "writer": {k: v for k, v in txn.lease.document().items()
                       if k in ("owner", "host", "pid", "pid_started", "run_id", "batch_id")},
        }
        if not self.fs.create_exclusive(layout.commit_entry(self.root, seq), json.dumps(entry, indent=2)):
            other = self.read_commit_entry(seq) or {}
            raise CommitConflict(
                f"commit of batch {batch_id} refused: batch {other.get('batch_id', '?')} (run "
                f"{other.get('run_id', '?')}) was committed by another writer after this run started "
                f"on commit {txn.base}, so its parent may be stale; nothing was committed, re-run batch {batch_id}")
        txn.decided = True
        failpoint("after_commit_point")
        self._roll_forward(staging, entry)

    def _check_staged(self, staging: str, batch_id: str) -> None:
        """Every output must be staged whole (Spark's ``_SUCCESS``) before the run may be decided."""
        missing = [name for name in OUTPUTS if not self.fs.exists(f"{staging}/{name}/_SUCCESS")]
        if missing:
            raise CommitConflict(
                f"commit of batch {batch_id} refused: staged output(s) {', '.join(missing)} of this run "
                f"are missing (removed by another process?); nothing was committed, re-run batch {batch_id}")

    def _check_world(self, txn: Transaction, manifest: dict) -> None:
        """The history read at start still stands (catches writers that bypass the commit log; the log
        entry's exclusive creation is the check that cannot race)."""
        batch_id = txn.batch_id
        parent, later = self.parent_of(batch_id), self.later_than(batch_id)
        recorded = manifest.get("parent") or {}
        reason = None
        if parent != txn.parent:
            reason = f"the latest committed batch before it is now {parent}, not {txn.parent}"
        elif parent is not None and \
                self.read_manifest(parent).get("snapshot_fingerprint") != recorded.get("snapshot_fingerprint"):
            reason = f"its parent {parent} was re-committed with another ID cache"
        elif later != txn.later:
            reason = f"the committed batches after it changed ({', '.join(txn.later) or 'none'} -> " \
                     f"{', '.join(later) or 'none'})"
        if reason:
            raise CommitConflict(f"commit of batch {batch_id} refused: {reason} since this run started; "
                                 f"nothing was committed, re-run batch {batch_id}")

    def recover(self) -> list[str]:
        """Finish the decided run, discard undecided runs of writers that are gone, and leave every
        live writer's run alone; returns the batch ids rolled forward."""
        finished = []
        head = self.commit_log_head()
        decided = self.read_commit_entry(head) if head else None
        staging_root = layout.staging_dir(self.root)
        for batch_dir in self.fs.list(staging_root):
            if batch_dir.name.startswith(layout.TRASH):
                self.fs.delete(batch_dir.path)  # left by a crash between a discard's rename and delete
                continue
            for run_dir in self.fs.list(batch_dir.path):
                alive, why = self._owner_alive(batch_dir.name, run_dir)
                if alive:
                    log.info("recover: leaving run %s of batch %s alone: its writer is alive (%s)",
                             run_dir.name, batch_dir.name, why)
                    continue
                if decided is not None and (decided["batch_id"], decided["run_id"]) == (batch_dir.name, run_dir.name):
                    log.warning("recover: rolling forward run %s of batch %s (commit %d; %s)",
                                run_dir.name, batch_dir.name, head, why)
                    self._roll_forward(run_dir.path, decided)
                    finished.append(decided["batch_id"])
                else:
                    log.warning("recover: discarding undecided run %s of batch %s (%s)",
                                run_dir.name, batch_dir.name, why)
                    self.fs.remove_atomically(run_dir.path, layout.staging_trash(self.root))
            if not self.fs.list(batch_dir.path):
                self.fs.delete(batch_dir.path)
        return finished

    def _owner_alive(self, batch_id: str, run_dir) -> tuple[bool, str]:
        text = self.fs.read_text(layout.staging_owner(self.root, batch_id, run_dir.name), missing_ok=True)
        try:
            owner = json.loads(text) if text else None
        except json.JSONDecodeError:
            owner = None
        if isinstance(owner, dict):
            return owner_is_alive(owner, grace_s=OTHER_HOST_GRACE_S)
        # No readable owner: not written by a writer of this version, or torn by a power loss.
        # Time is the only evidence left; give it as long as a writer on another host.
        age_s = time.time() - run_dir.modified_ms / 1000
        if age_s < OTHER_HOST_GRACE_S:
            return True, f"no owner file, modified {age_s:.0f} s ago"
        return False, f"no owner file, untouched for {age_s:.0f} s"

    def discard(self, batch_id: str, run_id: str) -> None:
        self.fs.remove_atomically(self.staging_dir(batch_id, run_id), layout.staging_trash(self.root))
        batch_dir = layout.staging_dir(self.root, batch_id)
        if not self.fs.list(batch_dir):
            self.fs.delete(batch_dir)

    def _roll_forward(self, staging: str, entry: dict) -> None:
        """Idempotent: every step checks what is left to do, so it can be repeated after a crash."""
        batch_id = entry["batch_id"]
        staged_manifest = f"{staging}/{STAGED_MANIFEST}"
        if self.fs.exists(staged_manifest):
            lost = [name for name in OUTPUTS
                    if not self.fs.exists(f"{staging}/{name}") and not self.fs.exists(self.output_dir(name, batch_id))]
            if lost:
                # Never publish a manifest without its outputs (or over the previous run's).
                log.error("run %s of batch %s is decided but its staged output(s) %s are gone: not published",
                          entry["run_id"], batch_id, ", ".join(lost))
                self.fs.delete(staging)
                return
            for later in entry["invalidate"]:
                if self.fs.exists(self.manifest_path(later)):
                    self.fs.delete(self.stale_manifest_path(later))
                    self.fs.rename(self.manifest_path(later), self.stale_manifest_path(later))
                self.fs.delete(self.published_path(later))
            # The old run of this batch stops being committed (and published) before its data moves.
            self.fs.delete(self.manifest_path(batch_id))
            self.fs.delete(self.published_path(batch_id))
            for index, name in enumerate(OUTPUTS):
                staged = f"{staging}/{name}"
                if self.fs.exists(staged):
                    target = self.output_dir(name, batch_id)
                    self.fs.delete(target)
                    self.fs.rename(staged, target)
                if index == 1:
                    failpoint("mid_publish")
            failpoint("before_manifest")
            self.fs.delete(self.stale_manifest_path(batch_id))
            self.fs.rename(staged_manifest, self.manifest_path(batch_id))
        failpoint("before_cleanup")
        self.fs.delete(staging)
        parent = staging.rsplit("/", 1)[0]
        if not self.fs.list(parent):
            self.fs.delete(parent)
