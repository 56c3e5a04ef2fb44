"""The warehouse: where a batch's outputs live, and how they are committed all-or-nothing.

A batch is *committed* iff its manifest ``runs/<batch_id>.json`` exists; readers look only at the
``batch_id=<ID>`` directories of committed batches. A run writes everything under
``_staging/<batch_id>/<run_id>/`` first. Its commit point is the atomic creation of the intent
file ``_COMMITTING.json`` there; from then on the run is decided, and publishing it (un-commit the
old run of the batch, swap each output directory into place, then move the manifest into
``runs/``) is a roll-forward that can be repeated after a crash at any step. Every run starts with
``recover()``: decided runs are rolled forward, undecided ones discarded. So a crash anywhere,
followed by a re-run, leaves exactly the outputs of one clean run.

This needs a file system whose directory rename is atomic (local, HDFS); object stores without it
need a table format instead. One writer per warehouse at a time (the DAG runs one batch at once).
"""

from __future__ import annotations

import json
import os

from msgdedup import layout
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.layout import INTENT, OUTPUTS, STAGED_MANIFEST

FAILPOINT_ENV = "MSGDEDUP_FAILPOINT"
FAILPOINT_EXIT_CODE = 86


def failpoint(name: str) -> None:
    """Crash here, hard, when the crash tests ask for it (``MSGDEDUP_FAILPOINT=<name>``).

    A real kill at a chosen step is the only way to prove the commit protocol; os._exit skips
    every cleanup handler, as a killed process would.
    """
    if os.environ.get(FAILPOINT_ENV) == name:
        os._exit(FAILPOINT_EXIT_CODE)


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
    def committed_batches(self) -> list[str]:
        found = (layout.batch_id_of_manifest(f.name) for f in self.fs.list(layout.runs_dir(self.root))
                 if not f.is_dir)
        return sorted(batch_id for batch_id, stale in filter(None, found) if not stale)

    def read_manifest(self, batch_id: str) -> dict:
        return json.loads(self.fs.read_text(self.manifest_path(batch_id)))

    def parent_of(self, batch_id: str) -> str | None:
        earlier = [b for b in self.committed_batches() if b < batch_id]
        return earlier[-1] if earlier else None

    def later_than(self, batch_id: str) -> list[str]:
        return [b for b in self.committed_batches() if b > batch_id]

    # -- commit protocol ------------------------------------------------------------------------
    def commit(self, batch_id: str, run_id: str, manifest: dict, invalidate: list[str]) -> None:
        staging = self.staging_dir(batch_id, run_id)
        self.fs.write_text_atomic(f"{staging}/{STAGED_MANIFEST}", json.dumps(manifest, indent=2, sort_keys=True))
        failpoint("before_commit_point")
        intent = {"batch_id": batch_id, "run_id": run_id, "invalidate": invalidate}
        self.fs.write_text_atomic(f"{staging}/{INTENT}", json.dumps(intent))
        failpoint("after_commit_point")
        self._roll_forward(staging, intent)

    def recover(self) -> list[str]:
        """Finish decided runs, discard undecided ones; returns the batch ids rolled forward."""
        finished = []
        for batch_dir in self.fs.list(layout.staging_dir(self.root)):
            for run_dir in self.fs.list(batch_dir.path):
                intent_path = f"{run_dir.path}/{INTENT}"
                if self.fs.exists(intent_path):
                    intent = json.loads(self.fs.read_text(intent_path))
                    self._roll_forward(run_dir.path, intent)
                    finished.append(intent["batch_id"])
                else:
                    self.fs.delete(run_dir.path)
            if not self.fs.list(batch_dir.path):
                self.fs.delete(batch_dir.path)
        return finished

    def discard(self, batch_id: str, run_id: str) -> None:
        self.fs.delete(self.staging_dir(batch_id, run_id))

    def _roll_forward(self, staging: str, intent: dict) -> None:
        """Idempotent: every step checks what is left to do, so it can be repeated after a crash."""
        batch_id = intent["batch_id"]
        staged_manifest = f"{staging}/{STAGED_MANIFEST}"
        if self.fs.exists(staged_manifest):
            for later in intent["invalidate"]:
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
