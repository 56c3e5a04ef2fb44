"""The quality gate: validate one committed batch with GX before anything is published.

``run_gate(spark, warehouse, batch_id, settings)`` reads the batch's outputs and its
parent's ID-cache snapshot, derives the checked tables (``tables.py``), runs one GX
checkpoint per table (``checks.py``, ``expectations/``), updates the Data Docs site under
``<warehouse>/quality/data_docs/`` and writes a summary to
``<warehouse>/quality/<batch_id>/result.json``. It only needs a SparkSession, so the dedup
step and the gate can share one Spark application.

The driver receives aggregates and bounded samples (``checks.SAMPLE_ROWS`` rows per failed
expectation), and what is proportional to the data only where it fits set limits: a small batch's
checked tables (validated on pandas) and a hash per output row (``materialise.SmallFrames``);
a larger batch's stay in Spark.

Cost: GX asks several questions of each table per expectation (counts, sample values, sample rows),
each a Spark job, so every checked table is computed once and cached before GX sees it
(``materialise.py``), and asked for samples only where it fails (``_counted``); GX validates each
table as soon as it is cached, while the others are still being computed, several Spark tables at
once (``_validate``). The few exceptions the tables join back to their rows (repeated message_ids,
hashes of keys accepted again, shared cache_seqs, keys the snapshot holds twice) are computed first
(their repeated hashes found on the driver, in one pass over the outputs and the snapshots, which
also counts the outputs' rows) and, when small, handed over as local tables
(``materialise.SmallFrames``), so no batch row is shuffled. The GX project (context, checkpoints,
suites) is opened once per process and quality directory and reused by later gate calls (a
long-lived driver gates batch after batch). The Data Docs site is built once per batch rather than
once per checkpoint. ``result.json`` records the seconds each step took (``timings``; ``derive_s``
overlaps ``validate_s``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import shutil
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

import pandas as pd
from pyspark.sql import DataFrame, Row, SparkSession

from msgdedup import exit_codes, layout
from msgdedup.timing import StepTimer
from msgdedup.engine.filesystem import HadoopFS, local_directory
from msgdedup.engine.planning import application_settings, decides_on_driver, driver_decide_lines, small_plan
from msgdedup.quality import tables
from msgdedup.quality.checks import CHECKED_TABLES, DATA_DOCS_SITE, checkpoint_name, counted_format
from msgdedup.quality.materialise import (
    MaterialisedTables, Scanned, SmallFrames, cache_settings, gate_session, hashes_on_driver, rows_when_small,
    local_to_pandas,
)
from msgdedup.quality.project import default_project_dir, open_context

log = logging.getLogger(__name__)



class GateInputError(Exception):
    """The gate cannot run on what it was given (batch not committed, outputs missing, ...)."""


# GX's queries (the validations) run in a scheduler pool of their own, so that under fair scheduling
# (``planning.APPLICATION_DEFAULTS``) they need not wait for the tasks of the tables still being
# computed; under FIFO scheduling the pool is ignored.
SCHEDULER_POOL = "spark.scheduler.pool"
VALIDATION_POOL = "gx-gate-validate"

# Exit 2 in every app that runs the gate: the batch is not committed or its outputs are missing,
# or there is no GX project.
USER_ERRORS = (GateInputError, FileNotFoundError)


@dataclass(frozen=True)
class GateSettings:
    """How the gate runs; the checks themselves are fixed by the committed GX project.

    ``project_dir``: the GX project (default: ``$MSGDEDUP_GX_PROJECT`` or this checkout's
    ``expectations/``). ``quality_dir``: where results and Data Docs go (default
    ``<warehouse>/quality``); GX writes them with local file functions, so for a warehouse on
    another file system the Data Docs are built in a local scratch directory and copied over.
    """

    project_dir: Path | None = None
    quality_dir: str | None = None

    @classmethod
    def from_config(cls, path: str | None) -> "GateSettings":
        """Settings from the optional ``--config`` YAML: the address-settings file of the
        batch command. It is validated (a broken file is a user error here too) but the
        gate takes cache sizes from the manifest, which records what the batch really used."""
        if path is not None:
            from msgdedup.config import load_settings

            load_settings(path)
        return cls()


@dataclass
class ExpectationOutcome:
    suite: str
    expectation: str
    success: bool
    observed: dict[str, Any]
    sample_rows: list[dict[str, Any]]
    kwargs: dict[str, Any] = field(default_factory=dict)
    data_docs_page: str | None = None

    @property
    def label(self) -> str:
        target = self.kwargs.get("column") or self.kwargs.get("column_list")
        if target is None and "column_A" in self.kwargs:
            target = f"{self.kwargs['column_A']},{self.kwargs['column_B']}"
        if isinstance(target, list):
            target = ",".join(target)
        return f"{self.suite}.{self.expectation}({target})"


@dataclass
class GateResult:
    batch_id: str
    run_id: str | None
    success: bool
    expectations: list[ExpectationOutcome]
    data_docs_path: str | None
    result_path: str
    checked_at: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]

    def summary_line(self) -> str:
        if self.success:
            return f"gate passed for batch {self.batch_id}: {len(self.expectations)} expectations met"
        failed = "; ".join(
            f"{e.label} unexpected={e.observed.get('unexpected_count', e.observed.get('observed_value'))}"
            for e in self.failed
        )
        return f"gate failed for batch {self.batch_id}: {len(self.failed)} expectation(s) failed: {failed}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "run_id": self.run_id,
            "success": self.success,
            "checked_at": self.checked_at,
            "expectations": [asdict(e) for e in self.expectations],
            "data_docs_path": self.data_docs_path,
            "timings": self.timings,
        }


def _input_bytes(manifest: dict) -> float:
    """The batch's input size as its manifest lists it; infinite (planned as large) if the
    manifest does not say: the gate also checks manifests it cannot trust."""
    try:
        return sum(int(f["size"]) for f in manifest["input"]["files"])
    except (KeyError, TypeError, ValueError):
        return float("inf")


def read_manifest(spark: SparkSession, warehouse: str, batch_id: str) -> dict:
    """The committed batch's manifest; a missing one means "not committed" (a user error)."""
    if not layout.is_batch_id(batch_id):
        raise GateInputError(f"bad batch id {batch_id!r}")
    text = HadoopFS(spark).read_text(layout.manifest(warehouse, batch_id), missing_ok=True)
    if text is None:
        raise GateInputError(f"batch {batch_id} is not committed in {warehouse} (no runs/{batch_id}.json)")
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GateInputError(f"runs/{batch_id}.json is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise GateInputError(f"runs/{batch_id}.json is not a JSON object")
    return manifest


def _read_output(spark: SparkSession, path: str, what: str) -> DataFrame:
    if not HadoopFS(spark).exists(path):
        raise GateInputError(f"{what} output missing: {path}")
    return spark.read.parquet(path)


@dataclass
class BatchOutputs:
    """The DataFrames of one committed batch (lazy: nothing is read until GX asks)."""

    manifest: dict
    delivered: DataFrame
    dropped: DataFrame
    quarantine: DataFrame
    id_cache: DataFrame
    parent_id_cache: DataFrame


def read_batch(spark: SparkSession, warehouse: str, batch_id: str) -> BatchOutputs:
    """The committed batch's outputs and its parent's ID-cache snapshot, as lazy DataFrames.

    Opening a Parquet directory lists it and reads a footer for the schema (a Spark job each);
    the five are opened concurrently. A missing one is reported as before: the first missing
    output in ``layout.GATED_OUTPUTS`` order, then the parent's snapshot.
    """
    manifest = read_manifest(spark, warehouse, batch_id)
    parent = (manifest.get("parent") or {}).get("batch_id")
    paths = {name: layout.output_dir(warehouse, name, batch_id) for name in layout.GATED_OUTPUTS}
    if parent:
        paths["parent_id_cache"] = layout.output_dir(warehouse, "id_cache", parent)

    def open_output(name: str) -> DataFrame:
        if name == "parent_id_cache":
            if not HadoopFS(spark).exists(paths[name]):
                raise GateInputError(f"parent batch {parent}'s id_cache snapshot is missing: {paths[name]}")
            return spark.read.parquet(paths[name])
        return _read_output(spark, paths[name], name)

    with ThreadPoolExecutor(max_workers=len(paths), thread_name_prefix="gx-gate-read") as pool:
        futures = {name: pool.submit(open_output, name) for name in paths}
        outputs = {name: future.result() for name, future in futures.items()}
    parent_id_cache = outputs.pop("parent_id_cache", None)
    if parent_id_cache is None:
        parent_id_cache = outputs["id_cache"].limit(0)
    return BatchOutputs(manifest=manifest, parent_id_cache=parent_id_cache, **outputs)


LINEAGE_SUITE = "lineage"
LINEAGE_EXPECTATION = "expect_parent_to_be_latest_committed_batch"


def lineage(spark: SparkSession, warehouse: str, batch_id: str, manifest: dict) -> ExpectationOutcome:
    """The recorded parent must be the latest committed batch before this one, with the snapshot
    fingerprint that batch's manifest records.

    The engine refuses to commit on a stale parent, but a warehouse can be changed by other tools
    (a copy, an older engine, a hand-made repair). A batch built on the wrong ID cache lets
    duplicates through that no check of its own rows can see, so the gate looks at the history too.
    """
    from msgdedup.engine.warehouse import Warehouse

    history = Warehouse(HadoopFS(spark), warehouse)
    earlier = [b for b in history.committed_batches() if b < batch_id]
    latest = earlier[-1] if earlier else None
    recorded = manifest.get("parent") or {}
    recorded_parent = recorded.get("batch_id")
    observed: dict[str, Any] = {"recorded_parent": recorded_parent, "latest_committed_before": latest}
    reason = None
    if recorded_parent != latest:
        reason = (f"batch {batch_id} was built on {recorded_parent or 'no parent'}, but the latest committed "
                  f"batch before it is {latest or 'none'}: its ID cache misses that batch's keys, so "
                  f"duplicates may have been delivered; re-run {batch_id} (and the batches after it)")
    elif latest is not None:
        fingerprint = history.read_manifest(latest).get("snapshot_fingerprint")
        observed.update(recorded_fingerprint=recorded.get("snapshot_fingerprint"), parent_fingerprint=fingerprint)
        if fingerprint != recorded.get("snapshot_fingerprint"):
            reason = (f"batch {batch_id} was built on a snapshot of {latest} other than the committed one "
                      f"(fingerprint {recorded.get('snapshot_fingerprint')} recorded, {fingerprint} committed): "
                      f"{latest} was re-committed after {batch_id}; re-run {batch_id}")
    observed["observed_value"] = reason or f"parent {recorded_parent or 'none'} is the latest committed batch before it"
    return ExpectationOutcome(suite=LINEAGE_SUITE, expectation=LINEAGE_EXPECTATION, success=reason is None,
                              observed=observed, sample_rows=[], kwargs={"column": "parent"})


def small_frames(batch: BatchOutputs, batch_id: str) -> dict[str, Callable[[DataFrame | None], DataFrame]]:
    """The exceptions the big checked tables join back to their rows (``materialise.SmallFrames``),
    each a function of its repeated hashes (None: found by an aggregation of its own)."""
    return {
        tables.REPEATED_MESSAGE_IDS: lambda hashes: tables.repeated_message_ids(batch.delivered, batch.dropped, hashes),
        tables.REPEATED_KEY_HASHES: lambda hashes: hashes if hashes is not None
        else tables.repeated_key_hashes(batch.delivered, batch.parent_id_cache, batch_id),
        tables.SHARED_CACHE_SEQ_COUNTS: lambda hashes: tables.shared_cache_seq_counts(batch.delivered, hashes),
        tables.REPEATED_HELD_KEYS: lambda hashes: tables.held_key_excess(batch.id_cache, hashes),
    }


@dataclass(frozen=True)
class ExceptionHashes:
    """The gate's one pass over the outputs' hashes (``tables.exception_hashes``): what plans it,
    and whether it carries this batch's snapshot, whose entries per cache it then tallies too
    (``tables.entries_by_cache``)."""

    plan: Callable[[], DataFrame]
    with_snapshot: bool


def exception_hashes(spark: SparkSession, warehouse: str, batch: BatchOutputs) -> ExceptionHashes | None:
    """``tables.exception_hashes`` of the batch, for ``SmallFrames`` to find their repeats on the
    driver, where its rows fit there by the manifests (the batch's lines and its parent snapshot's
    entries, and this batch's entries where they fit too: else its own keys held twice are found
    by an aggregation, and its entries counted by one); else None, and each exception is found by
    an aggregation in Spark. A manifest that does not say counts as too many rows: the gate checks
    manifests it cannot trust."""
    try:
        rows = int(batch.manifest["counts"]["input_lines"])
        own = sum(int(cache["entries"]) for cache in batch.manifest["caches"].values())
        parent = (batch.manifest.get("parent") or {}).get("batch_id")
        if parent:
            rows += sum(int(cache["entries"]) for cache in read_manifest(spark, warehouse, parent)["caches"].values())
    except (GateInputError, KeyError, TypeError, ValueError, AttributeError):
        return None
    kinds = len(tables.EXCEPTIONS)
    if hashes_on_driver(spark, rows + own, kinds):
        caches = tables.manifest_caches(batch.manifest)
        return ExceptionHashes(lambda: tables.exception_hashes(batch.delivered, batch.dropped, batch.parent_id_cache,
                                                               batch.id_cache, caches), True)
    if hashes_on_driver(spark, rows, kinds - 1):
        return ExceptionHashes(lambda: tables.exception_hashes(batch.delivered, batch.dropped, batch.parent_id_cache),
                               False)
    return None


def checked_tables(spark: SparkSession, batch: BatchOutputs, batch_id: str, small: SmallFrames | None = None,
                   entries_tallied: bool = False) -> dict[str, Callable[[], DataFrame | Scanned | pd.DataFrame]]:
    """How to build each checked table of ``checks.CHECKED_TABLES``, by name (lazy DataFrames, or a
    pandas frame made on the driver).

    With ``small`` (the exceptions of ``small_frames``, computed first), messages and key_window
    take them from there instead of computing them inside their own plans, and id_cache its keys
    held twice; where those they join are all empty (the normal case), each of the two is a plain
    scan of the outputs, and is validated as such (``materialise.Scanned``). The accounting
    table counts the outputs when it is built: the delivered and dropped rows as ``small``'s pass
    over them counted them, where it ran (``SmallFrames.tally``: a pass less over a million rows),
    and the quarantined ones by a query; else all three by one query (three numbers reach the
    driver). The id_cache table takes the snapshot's entries per cache from that tally too, where
    the pass carried the snapshot (``entries_tallied``) and every entry's cache is declared.
    """
    sizes = tables.cache_sizes(spark, batch.manifest)

    def get(name: str) -> DataFrame | None:
        return small.get(name) if small is not None else None

    def accounting() -> DataFrame:
        # the delivered and dropped rows as the exceptions' hash pass counted them, where it ran
        tally = small.tally() if small is not None else None
        if tally is None:
            counts = tables.output_counts(batch.delivered, batch.dropped, batch.quarantine).first().asDict()
        else:
            counts = {output: tally.get(code, 0) for code, output in enumerate(tables.OUTPUTS)}
            counts["quarantined"] = batch.quarantine.count()
        return tables.accounting_from_counts(spark, batch.manifest, counts)

    def none_of(*exceptions: str) -> bool:
        """Whether each of these exceptions was counted and found empty: then the joins to them are
        dropped from a table's plan."""
        return small is not None and all(small.rows.get(e) == 0 for e in exceptions)

    def plain_scan(frame: DataFrame, scan: bool) -> DataFrame | Scanned:
        return Scanned(frame) if scan else frame

    def messages() -> DataFrame | Scanned:
        table = tables.messages(batch.delivered, batch.dropped, get(tables.REPEATED_MESSAGE_IDS))
        return plain_scan(table, none_of(tables.REPEATED_MESSAGE_IDS))

    def key_window() -> DataFrame | Scanned:
        again = get(tables.REPEATED_KEY_HASHES)
        repeats = small.rows.get(tables.REPEATED_KEY_HASHES) if small is not None else None  # None: not counted
        shared = tables.shared_cache_seqs(batch.delivered, get(tables.SHARED_CACHE_SEQ_COUNTS))
        settled = []  # whether each settle of the keys accepted again brought back their rows

        def settle(repeated: DataFrame) -> list[Row] | None:
            # the acceptances of the keys accepted again (and, with Apama caches, those deliveries with
            # their sender gaps): normally few (232 deliveries of a million with a hot address),
            # computed once rather than in each GX query
            rows = rows_when_small(repeated)
            settled.append(rows is not None)
            return rows

        table = tables.key_window(batch.delivered, batch.dropped, batch.parent_id_cache, sizes, batch_id,
                                  again, shared, repeats=repeats,
                                  sender_queues=tables.keeps_sender_queues(batch.manifest),
                                  settle=settle if repeats else None)
        keys_settled = none_of(tables.REPEATED_KEY_HASHES) or (bool(settled) and settled[-1])
        return plain_scan(table, keys_settled and none_of(tables.SHARED_CACHE_SEQ_COUNTS))

    def id_cache() -> DataFrame | pd.DataFrame:
        apama = tables.has_apama_caches(batch.manifest)
        excess = get(tables.REPEATED_HELD_KEYS)
        held = None
        counted = small is not None and small.rows.get(tables.REPEATED_HELD_KEYS) is not None  # excess: local
        if counted and entries_tallied and not apama:
            held = tables.entries_by_cache(small.tally(), tables.manifest_caches(batch.manifest))
        if held is None:
            return tables.id_cache_occupancy(batch.id_cache, sizes, apama=apama, excess=excess)
        # every count on the driver already: the table made there, with no Spark job
        repeats = {row["cache"]: row["_excess"] for row in excess.collect()}  # a local table
        return local_to_pandas(tables.id_cache_occupancy_of_counts(spark, batch.manifest, held, repeats))

    builds = {
        "messages": messages,
        "key_window": key_window,
        "transactions": lambda: tables.transactions(batch.delivered, batch.dropped),
        "accounting": accounting,
        "id_cache": id_cache,
    }
    # Each with the columns GX reads of it only (CheckedTable.columns): the same rows, the same
    # checked values and the same row names in the results, and no intermediate column kept in
    # the cache or collected (key_window's gaps and limits: about half its columns)
    return {table.name: functools.partial(_checked, builds[table.name], table.columns) for table in CHECKED_TABLES}


def _checked(build: Callable[[], DataFrame | Scanned | pd.DataFrame],
             columns: tuple[str, ...]) -> DataFrame | Scanned | pd.DataFrame:
    built = build()
    if isinstance(built, Scanned):
        return Scanned(built.frame.select(*columns))
    if isinstance(built, pd.DataFrame):
        return built[list(columns)]
    return built.select(*columns)


def _jsonable(value: Any) -> Any:
    """A result's values as JSON, the same whether GX validated a Spark or a pandas frame (whose
    values are numpy scalars, and whose nulls are pandas' NA or NaT)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, bool)) or value is None:
        return value
    if _missing(value):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "item"):  # a numpy scalar
        return _jsonable(value.item())
    return str(value)


def _missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # not a scalar
        return False


_OBSERVED_KEYS = ("observed_value", "element_count", "unexpected_count", "unexpected_percent", "missing_count")


def _outcomes(suite: str, validation, page: str | None) -> list[ExpectationOutcome]:
    outcomes = []
    for item in validation.results:
        config = item.expectation_config
        result = item.result or {}
        kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
        samples = result.get("partial_unexpected_index_list") or []
        if not samples and not item.success:
            samples = [{"value": v} for v in result.get("partial_unexpected_list") or []]
        observed = {k: result[k] for k in _OBSERVED_KEYS if k in result}
        if item.exception_info and item.exception_info.get("raised_exception"):
            observed["exception"] = item.exception_info.get("exception_message")
        outcomes.append(
            ExpectationOutcome(
                suite=suite,
                expectation=config.type,
                success=bool(item.success),
                observed=_jsonable(observed),
                sample_rows=_jsonable(samples),
                kwargs=_jsonable(kwargs),
                data_docs_page=page,
            )
        )
    return outcomes


def _local_url_to_path(url: str | None) -> str | None:
    if url and url.startswith("file://"):
        return unquote(urlparse(url).path)
    return url


@dataclass
class _OpenProject:
    """A GX project opened for one quality directory: its context and its checkpoints (each
    table's, on Spark and on pandas)."""

    key: tuple | None
    context: Any
    checkpoints: dict[str, Any]


# Projects opened by earlier gate calls of this process, by (application, project directory and
# its files' state, quality directory). A long-lived driver gates batch after batch: opening the
# context and loading five checkpoints and their suites each time is pure Python work that gives
# the same objects again. A project is taken out while a gate uses it (a concurrent gate of the
# same warehouse opens its own) and put back after; the few most recent are kept.
_PROJECTS: dict[tuple, _OpenProject] = {}
_PROJECTS_LOCK = threading.Lock()
_PROJECTS_KEPT = 4 * len(CHECKED_TABLES)  # four gates of SPARK_VALIDATORS contexts each


def _project_state(project_dir: Path) -> tuple:
    """What the committed project's files are now: an edited suite or checkpoint opens it again."""
    files = [project_dir / "great_expectations.yml"]
    for sub in ("expectations", "validation_definitions", "checkpoints"):
        files.extend(sorted((project_dir / sub).glob("*.json")))
    return tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())


def _take_project(spark: SparkSession, project_dir: Path, gx_dir: str, reusable: bool, slot: int = 0) -> _OpenProject:
    """The GX project for ``gx_dir``: one an earlier gate of this application left, or a new one.
    ``slot`` tells apart the contexts of one gate that validate at once (``_validators``).

    Not reused for a scratch directory (a warehouse on another file system: the directory is
    new each time) nor across Spark applications (GX's Spark engine holds the session it found).
    Opened in the calling thread only: a checkpoint loaded from its store binds its validation
    definition to GX's current context, which opening another context changes.
    """
    project_dir = Path(project_dir).resolve()
    key = None
    if reusable and (project_dir / "great_expectations.yml").is_file():
        key = (spark.sparkContext.applicationId, str(project_dir), _project_state(project_dir), slot, gx_dir)
        with _PROJECTS_LOCK:
            project = _PROJECTS.pop(key, None)
        if project is not None:
            return project
    context = open_context(project_dir, gx_dir)
    checkpoints = {name: context.checkpoints.get(name) for table in CHECKED_TABLES
                   for name in (checkpoint_name(table.name), checkpoint_name(table.name, pandas=True))}
    return _OpenProject(key=key, context=context, checkpoints=checkpoints)


def _give_back(project: _OpenProject) -> None:
    """Keep ``project`` for the next gate of this process (the most recent few only)."""
    if project.key is None:
        return
    with _PROJECTS_LOCK:
        _PROJECTS[project.key] = project
        while len(_PROJECTS) > _PROJECTS_KEPT:
            _PROJECTS.pop(next(iter(_PROJECTS)))


# How many checked tables GX validates at once when it validates Spark tables, once every table is
# cached: all of them (a table validated as it is, ``Scanned``, brings its own work: it gets a
# context as soon as it is built). Each validation is a dozen queries of a cached table with a few
# milliseconds of task time each, whose cost is the driver's planning and scheduling, one query
# after another: validated one table at a time, the last tables' validations were about 4 s of a 1M batch's 15 s
# gate with the cores nearly idle; three at a time, the table cached last (``key_window``) waited
# for one of the three to finish, and its validation ended the gate 2.2-2.4 s after the last table
# was cached, against 1.7-1.9 s with a context for every table (docs/benchmarks.md). While tables
# are still being computed, the cores are theirs, and validations run one at a time: more at once
# (their queries go first, in a pool of their own) delayed the last table as much as they saved.
# GX's Spark data source holds the batch it validates in its execution engine, so each validation
# at once needs a context (and data source) of its own. A small batch's tables are validated by
# GX's pandas engine, pure Python under one lock: one context.
SPARK_VALIDATORS = len(CHECKED_TABLES)


def _validators(on_driver: bool) -> int:
    return 1 if on_driver else SPARK_VALIDATORS


def _validate(spark: SparkSession, projects: list[_OpenProject], checked: MaterialisedTables,
              batch_id: str, run_id: Any) -> dict[str, list[tuple[Any, Any]]]:
    """Each checked table's checkpoint run on it as soon as it is cached, one at a time while tables
    are still being computed, then on as many at once as there are ``projects`` (a validation takes
    one and gives it back); ``{table: run results}``. A table the driver holds as a pandas frame
    (``MaterialisedTables``) is validated by GX's pandas engine, with the same suite."""
    free: queue.SimpleQueue = queue.SimpleQueue()
    free.put(projects[0])
    spare = list(projects[1:])
    context = spark.sparkContext

    def validate(name: str, frame: Any) -> list[tuple[Any, Any]]:
        project = free.get()
        try:
            # Local properties are per thread: GX's queries go to their own pool, grouped by table
            # so that the Spark UI shows what the gate does.
            context.setLocalProperty(SCHEDULER_POOL, VALIDATION_POOL)
            context.setJobGroup(f"gx-gate-{name}", f"GX gate of batch {batch_id}: {name}")
            checkpoint = project.checkpoints[checkpoint_name(name, pandas=isinstance(frame, pd.DataFrame))]
            counted = _counted(checkpoint, frame, run_id)
            if all(validation.success for _, validation in counted):
                return counted
            # a failed table again, as its checkpoint asks: with the offending rows' samples,
            # whose results replace the counted ones (the same keys in GX's store); a query per
            # expectation, so a table validated as it is is cached first
            if name in checked.scanned:
                frame = checked.keep(frame)
            return list(checkpoint.run(batch_parameters={"dataframe": frame}, run_id=run_id).run_results.items())
        finally:
            for key in ("spark.jobGroup.id", "spark.job.description", SCHEDULER_POOL):
                context.setLocalProperty(key, None)
            free.put(project)

    with ThreadPoolExecutor(max_workers=len(projects), thread_name_prefix="gx-gate-validate") as pool:
        futures = {}
        for name, frame in checked.as_cached():
            if name in checked.scanned and spare:  # its validation is its computation
                free.put(spare.pop())
            futures[name] = pool.submit(validate, name, frame)
        for project in spare:  # every table is cached: the cores are the validations' now
            free.put(project)
        return {name: future.result() for name, future in futures.items()}


def _counted(checkpoint: Any, frame: Any, run_id: Any) -> list[tuple[Any, Any]]:
    """``checkpoint``'s validations of ``frame`` with every count its result format gives but no
    sample rows (checks.counted_format): what a table that passes is reported with. GX asks each
    expectation's sample values and sample rows with a query of its own even when it has no
    unexpected row, each a scan of the whole cached table (0.07-0.3 s apiece on a 1M batch,
    eight to ten a large table); asked for none (``limit 0``), Spark answers them without a job.
    What ``Checkpoint.run`` does with its own result format, but with another one: the checkpoint
    (its result format included) is the committed project's, run as it is for a failed table."""
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier, ValidationResultIdentifier,
    )

    result_format = counted_format(checkpoint.result_format)
    results = []
    for definition in checkpoint.validation_definitions:
        validation = definition.run(checkpoint_id=checkpoint.id, batch_parameters={"dataframe": frame},
                                    result_format=result_format, run_id=run_id)
        suite = ExpectationSuiteIdentifier(name=definition.suite.name)
        key = ValidationResultIdentifier(expectation_suite_identifier=suite, run_id=run_id,
                                         batch_identifier=validation.batch_id)
        results.append((key, validation))
    return results


def run_gate(
    spark: SparkSession, warehouse: str, batch_id: str, settings: GateSettings | None = None
) -> GateResult:
    """Validate committed batch ``batch_id`` of ``warehouse``; write Data Docs and result.json.

    Raises GateInputError when the batch cannot be checked (not committed, outputs missing).
    A failed check is not an exception: it is ``result.success == False``.
    """
    timer = StepTimer()
    settings = settings or GateSettings()
    warehouse = warehouse.rstrip("/")
    session = gate_session(spark)
    with timer.step("read"):
        batch = read_batch(session, warehouse, batch_id)
        parent_check = lineage(session, warehouse, batch_id, batch.manifest)
    # A small batch's checks are planned as its dedup was (engine/planning.py); the session is the gate's own.
    for key, value in small_plan(session, _input_bytes(batch.manifest)).items():
        session.conf.set(key, value)
    # ... and a batch small enough to be decided on the driver is checked there too: its tables
    # collected as pandas frames and validated by GX's pandas engine with the same suites.
    on_driver = decides_on_driver(session, batch.manifest["counts"]["input_lines"])
    for key, value in cache_settings(session, batch.manifest["counts"]["input_lines"]).items():
        session.conf.set(key, value)
    quality_dir = (settings.quality_dir or layout.quality_dir(warehouse)).rstrip("/")
    local_quality = local_directory(quality_dir)
    if local_quality is not None:
        # GX resolves relative store paths against the project directory, not the cwd.
        local_quality = quality_dir = os.path.abspath(local_quality)
    scratch = None if local_quality is not None else tempfile.mkdtemp(prefix="msgdedup-gx-")
    gx_dir = local_quality if local_quality is not None else scratch

    now = datetime.now(timezone.utc)
    checked: MaterialisedTables | None = None
    small: SmallFrames | None = None
    try:
        hashes = exception_hashes(session, warehouse, batch)
        small = SmallFrames(session, small_frames(batch, batch_id), hashes=hashes.plan if hashes else None,
                            tallied=tables.OUTPUT_OF_ROW)
        checked = MaterialisedTables(
            session, checked_tables(session, batch, batch_id, small,
                                    entries_tallied=hashes is not None and hashes.with_snapshot),
            on_driver, driver_rows=driver_decide_lines(session))
        with timer.step("import_gx"):
            # Usually done already (``preload_gx``); otherwise this is where the seconds go. Wait
            # for a preload still running: two threads importing GX at once can meet a partially
            # initialised module (ImportError).
            if _preloading is not None:
                _preloading.join()
            from great_expectations.core.run_identifier import RunIdentifier
            from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier
        with timer.step("open_context"):
            # Also while the tables are computed: loading the checkpoints (and their suites).
            projects = [_take_project(spark, settings.project_dir or default_project_dir(), gx_dir,
                                      reusable=scratch is None, slot=slot) for slot in range(_validators(on_driver))]
            context = projects[0].context
        run_id = RunIdentifier(run_name=batch_id, run_time=now)
        with timer.step("validate"):
            # As the tables are cached; the others are computed meanwhile.
            results = _validate(spark, projects, checked, batch_id, run_id)
    finally:
        # Cancel what still runs before waiting for any of it (a table may wait for a small frame).
        for running in (small, checked):
            if running is not None:
                running.cancel()
        for running in (checked, small):
            if running is not None:
                running.close()
    # Overlaps validate: the tables are computed while GX validates those already cached.
    timer.steps["derive_s"] = checked.seconds()
    validated = [(table.name, identifier, validation)
                 for table in CHECKED_TABLES for identifier, validation in results[table.name]]

    with timer.step("data_docs"):
        # One build for the batch's five results: each build also rewrites the site's index.
        context.build_data_docs(
            site_names=[DATA_DOCS_SITE],
            resource_identifiers=[identifier for _, identifier, _ in validated]
            + [ExpectationSuiteIdentifier(name=name) for name in dict.fromkeys(name for name, _, _ in validated)],
        )
        outcomes: list[ExpectationOutcome] = [parent_check]
        for name, identifier, validation in validated:
            urls = context.get_docs_sites_urls(resource_identifier=identifier, site_name=DATA_DOCS_SITE)
            page = _local_url_to_path(urls[0]["site_url"]) if urls else None
            if scratch is not None and page:
                page = layout.data_docs_dir(quality_dir) + page[len(layout.data_docs_dir(scratch)):]
            outcomes.extend(_outcomes(name, validation, page))
        if scratch is not None:
            HadoopFS(spark).copy_from_local(layout.data_docs_dir(scratch), layout.data_docs_dir(quality_dir))
            shutil.rmtree(scratch, ignore_errors=True)

    for project in projects:
        _give_back(project)
    gate = GateResult(
        batch_id=batch_id,
        run_id=batch.manifest.get("run_id"),
        success=all(o.success for o in outcomes),
        expectations=outcomes,
        data_docs_path=f"{layout.data_docs_dir(quality_dir)}/index.html",
        result_path=layout.gate_result(quality_dir, batch_id),
        checked_at=now.isoformat(),
    )
    gate.timings = timer.as_dict()
    HadoopFS(spark).write_text_atomic(gate.result_path, json.dumps(gate.to_dict(), indent=2, sort_keys=False) + "\n")
    return gate


_preloading: threading.Thread | None = None


def preload_gx() -> threading.Thread:
    """Import Great Expectations in a background thread and return it.

    The import takes several seconds of pure Python; started before the SparkSession, it runs
    while the JVM starts instead of after it. ``run_gate`` waits for it where it needs GX.
    """
    def load() -> None:
        try:
            import great_expectations  # noqa: F401
        except Exception:  # noqa: BLE001 - run_gate's own import reports the error properly
            log.debug("background import of great_expectations failed", exc_info=True)

    global _preloading
    thread = threading.Thread(target=load, name="preload-great-expectations", daemon=True)
    thread.start()
    _preloading = thread
    return thread


def _fail(code: int, message: str) -> int:
    print(f"gx_gate: error: {message}", file=sys.stderr, flush=True)
    return code


def gate_and_report(spark: SparkSession, warehouse: str, batch_id: str,
                    settings: GateSettings) -> tuple[int, GateResult | None]:
    """Run the gate and print its outcome in one ``gx_gate: …`` line; the exit code, and the result
    if the gate ran. ``gx_gate.py`` and ``process_batch.py`` both call it, so a log reads the same
    whichever app gated the batch."""
    try:
        result = run_gate(spark, warehouse, batch_id, settings)
    except USER_ERRORS as exc:
        return _fail(exit_codes.USER_ERROR, str(exc)), None
    except Exception as exc:  # noqa: BLE001 - anything unexpected is exit 1, in one line
        log.exception("gx_gate failed")
        return _fail(exit_codes.INTERNAL_ERROR,
                     f"internal error: {type(exc).__name__}: {exc}".replace("\n", " ")), None
    if result.success:
        print(f"gx_gate: {result.summary_line()}; data docs: {result.data_docs_path}", flush=True)
        return exit_codes.OK, result
    print(f"gx_gate: {result.summary_line()}", file=sys.stderr, flush=True)
    return exit_codes.GATE_FAILED, result


def main(argv: list[str] | None = None) -> int:
    """The ``spark_apps/gx_gate.py`` CLI: exit 0 passed, 3 failed, 2 user error, 1 internal."""
    import argparse

    from msgdedup.config import ConfigError

    parser = argparse.ArgumentParser(prog="gx_gate", description="Validate a committed batch with Great Expectations.")
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--batch-id", required=True)
    parser.add_argument("--config", help="the batch command's address-settings YAML (validated)")
    parser.add_argument("--gx-project", help="GX project directory (default: the checkout's expectations/)")
    args = parser.parse_args(argv)

    try:
        settings = GateSettings.from_config(args.config)
    except ConfigError as exc:
        return _fail(exit_codes.USER_ERROR, str(exc))
    if args.gx_project:
        settings = GateSettings(project_dir=Path(args.gx_project), quality_dir=settings.quality_dir)
    preload_gx()
    try:
        spark = (SparkSession.builder.appName(f"msgdedup-gx-gate-{args.batch_id}")
                 .config(map=application_settings()).getOrCreate())
    except Exception as exc:  # noqa: BLE001 - no JVM: exit 1 in one line
        log.exception("gx_gate failed")
        return _fail(exit_codes.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}".replace("\n", " "))
    code, _ = gate_and_report(spark, args.warehouse, args.batch_id, settings)
    return code
