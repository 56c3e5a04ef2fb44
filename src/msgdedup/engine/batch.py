"""One batch, end to end: read, decide, stage, check the books, commit. And the CLI around it.

The intermediate results (parsed lines, verdicts) are cached, not written and read back: each is
computed once, by the first Spark job that needs it, and a batch runs a job only where the driver
needs an answer (the census of the parse, a few counts, the tally of the verdicts) or writes an
output. Every intermediate is a deterministic function of the input, so a cached block Spark
loses is recomputed to the same rows. Outputs are counted by their own writes (``Observation``).
"""

from __future__ import annotations

import argparse
import functools
import sys
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from msgdedup import __version__, driver_memory, exit_codes, layout
from msgdedup.config import APAMA, TIME, AddressSettings, ConfigError, load_settings
from msgdedup.engine import audit, driver_audit, driver_decide, driver_digests, driver_outputs, driver_verdicts, \
    kernel, line_lookup, manifest as manifests, parsing, transforms, unit_ranks, windows as cache_windows
from msgdedup.engine.file_collect import collect_through_files
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.planning import (
    BROADCAST_ROW_BYTES, KEY_HASH_BYTES, OUTPUT_VERDICT_BYTES, application_settings, broadcast_rows,
    decides_on_driver, id_hashes_on_driver, kernel_on_driver, looks_up_by_line, ranks_on_driver, reads_on_driver,
    session_for, snapshot_on_driver,
)
from msgdedup.engine.reading import InputError, list_input_files, plain_json_lines, read_lines, read_on_driver
from msgdedup.engine.lease import WarehouseBusy
from msgdedup.engine.warehouse import CommitConflict, Transaction, Warehouse, failpoint
from msgdedup.layout import LEFT_KEYS, OUTPUTS, BatchIdError, validate_batch_id
from msgdedup.local_frames import batches_frame, local_frame
from msgdedup.repeats import repeated_values, values_frame
from msgdedup.sql_text import is_in
from msgdedup.timing import StepTimer

PROG = "dedup_batch"


class StaleHistoryError(RuntimeError):
    """Committing this batch would silently change the history later batches were built on."""


class AccountingError(RuntimeError):
    """input lines != delivered + dropped + quarantined: never commit such a batch."""


class Cancelled(RuntimeError):
    """Whoever asked for the batch went away (the batch service's client: its Airflow task was
    killed or timed out): the batch stops before its commit, and the retry runs it again."""


# The outputs' columns whose values are nearly all distinct: ids, keys, bodies, instants, line
# numbers. Parquet's writer builds a dictionary of every column until the dictionary outgrows its
# page (1 MiB), then writes the values plain after all: for these columns that dictionary was work
# thrown away, in every output. They are written plain from the start (parquet-java's per-column
# ``parquet.enable.dictionary#<column>``; a column an output lacks is no matter): a 1M batch's
# write step 6.6-7.4 s against 7.8-8.0 s, its files the same size (docs/benchmarks.md). The
# columns whose values repeat (addresses, caches, senders, property names, ``cache_seq``, which
# restarts in every cache) keep their dictionaries. The driver's pyarrow writes (``_write_table``)
# do the same.
PLAIN_COLUMNS = ("message_id", "received_at", "properties.key_value.value", "txn_id", "seq", "body",
                 "line_number", "raw_line", "dedup_key", "duplicate_of", "entered_at_us", "received_at_us")


def _write_counted(frame: DataFrame, path: str) -> int:
    """Write ``frame`` as Parquet; returns the rows the write itself counted (an observed metric
    of the write's own job, so the books need no second pass over the output)."""
    written = Observation(f"rows written to {path}")
    plain = {f"parquet.enable.dictionary#{column}": "false" for column in PLAIN_COLUMNS}
    frame.observe(written, F.count(F.lit(1)).alias("rows")).write.mode("overwrite").options(**plain).parquet(path)
    return written.get["rows"]


def _write_empty(fs: HadoopFS, frame: DataFrame, path: str) -> int:
    """Write ``frame``, which the books already show empty, as Spark writes an empty frame (one
    Parquet file of the schema alone, and ``_SUCCESS``), from the driver: a Spark job that writes
    nothing costs about what a small output's write does (planning, scheduling, a task)."""
    return _write_table(fs, to_arrow_schema(frame.schema).empty_table(), path)


def _write_table(fs: HadoopFS, table: pa.Table, path: str) -> int:
    """Write an output the driver holds as Spark writes one (a Parquet part file and
    ``_SUCCESS``; instants as INT96, PLAIN_COLUMNS without a dictionary), without a Spark job;
    returns its rows."""
    sink = pa.BufferOutputStream()
    dictionary = [column for field in table.schema for column in _leaf_paths(field.name, field.type)
                  if column not in PLAIN_COLUMNS]
    pq.write_table(table, sink, use_dictionary=dictionary, use_deprecated_int96_timestamps=True)
    fs.delete(path)
    fs.write_file(f"{path}/part-00000-driver.parquet", sink.getvalue().to_pybytes())
    fs.write_file(f"{path}/_SUCCESS", b"")
    return table.num_rows


def _leaf_paths(name: str, kind: pa.DataType) -> list[str]:
    """The Parquet column paths of a field (PLAIN_COLUMNS names them so): a map's keys and values."""
    if pa.types.is_map(kind):
        return [f"{name}.key_value.key", f"{name}.key_value.value"]
    if pa.types.is_struct(kind):
        return [path for field in kind for path in _leaf_paths(f"{name}.{field.name}", field.type)]
    return [name]


def run_batch(spark: SparkSession, input_path: str, warehouse_root: str, batch_id: str,
              settings: AddressSettings | None = None, invalidate_later: bool = False,
              cancelled: Callable[[], bool] | None = None) -> dict:
    """Dedup one raw batch into the warehouse and commit it; returns the manifest.

    Raises WarehouseBusy at once if another writer holds the warehouse, CommitConflict if another
    writer committed while this run worked, Cancelled if ``cancelled()`` says so right before the
    commit (nothing is committed then). Cancelling the application's Spark jobs stops a batch
    only while one runs; this check stops one whose last job ended first.
    """
    settings = settings or AddressSettings()
    validate_batch_id(batch_id)
    timer = StepTimer()
    fs = HadoopFS(spark)
    warehouse = Warehouse(fs, warehouse_root)
    run_id = uuid.uuid4().hex
    with warehouse.writer(batch_id, run_id) as txn:
        return _dedup_and_commit(spark, fs, warehouse, txn, input_path, settings, invalidate_later, timer,
                                 cancelled or (lambda: False))


def _dedup_and_commit(spark: SparkSession, fs: HadoopFS, warehouse: Warehouse, txn: Transaction,
                      input_path: str, settings: AddressSettings, invalidate_later: bool, timer: StepTimer,
                      cancelled: Callable[[], bool]) -> dict:
    batch_id, run_id = txn.batch_id, txn.run_id
    files = list_input_files(fs, input_path)
    parent = txn.parent
    parent_manifest = warehouse.read_manifest(parent) if parent else None
    staging = warehouse.staging_dir(batch_id, run_id)
    timer.lap("plan")

    kept: list[DataFrame] = []  # intermediate frames, cached until the batch is checked
    try:
        staged = _decide_and_stage(session_for(spark, sum(f.size for f in files)), warehouse, txn, files,
                                   parent_manifest, staging, settings, invalidate_later, timer, kept)
    finally:
        _release(kept)
    timer.lap("check")

    manifest = {
        "manifest_version": manifests.MANIFEST_VERSION,
        "batch_id": batch_id,
        "run_id": run_id,
        "engine_version": __version__,
        "committed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "parent": {"batch_id": parent, "snapshot_fingerprint": parent_manifest["snapshot_fingerprint"]}
        if parent_manifest else None,
        "input": manifests.input_fingerprint(input_path, files),
        "config": {"address_settings": settings.as_dict(), "fingerprint": settings.fingerprint(),
                   "window_audit": {"horizon": settings.audit_horizon}},
        "counts": staged.counts,
        "caches": staged.caches,
        "snapshot_fingerprint": staged.fingerprint,
        "invalidated": staged.invalidate,
        "window_audit": staged.window_audit,
        "timings": timer.as_dict(),
    }
    if cancelled():
        raise Cancelled(f"batch {batch_id}: its caller went away; nothing was committed")
    warehouse.commit(txn, manifest, staged.invalidate)
    return manifest


@dataclass(frozen=True)
class Staged:
    """What a staged batch adds to its manifest."""

    counts: dict
    caches: dict
    fingerprint: str
    invalidate: list[str]
    window_audit: dict


def _decide_and_stage(spark: SparkSession, warehouse: Warehouse, txn: Transaction, files: list,
                      parent_manifest: dict | None, staging: str, settings: AddressSettings,
                      invalidate_later: bool, timer: StepTimer, kept: list[DataFrame]) -> Staged:
    """Parse, decide and stage the outputs. Every intermediate frame is cached (and listed in
    ``kept``) instead of written and read back: each is computed once, by the first action that
    needs it, and a Spark job is only run where the driver needs an answer (a count, a tally) or
    an output is written."""
    # 1. parse every line once
    parsed, input_lines, addresses, keyed, parsed_on_driver, keys_found = _parse(spark, warehouse.fs, files,
                                                                                 settings, kept, staging)
    on_driver = decides_on_driver(spark, input_lines)
    # read and decided on the driver, a batch's outputs are made there too (driver_outputs.py):
    # Spark never sees its rows. Else the rows the driver read go to Spark, kept for every reader
    rows_on_driver = parsed_on_driver is not None and on_driver
    if parsed is None and not rows_on_driver:
        parsed = _kept(spark.createDataFrame(parsed_on_driver, parsing.PARSED_SPARK_SCHEMA), kept,
                       StorageLevel.MEMORY_AND_DISK_DESER)  # a few MiB (planning.DRIVER_READ_BYTES): in memory
    failpoint("after_parse")
    timer.lap("parse")

    # 2. order and decide, on the key columns only: on the driver for a small batch, else in Spark
    windows = cache_windows.resolve(settings, parent_manifest["caches"] if parent_manifest else {}, keyed)
    apama = cache_windows.of_policy(windows, APAMA)
    valid, invalid = transforms.split_valid(parsed) if parsed is not None else (None, None)
    domains = _domains(addresses, settings)
    if on_driver:
        with_keys = None
        if parsed_on_driver is not None:  # keyed from the rows the driver holds, without a Spark job
            keys = driver_decide.key_columns(parsed_on_driver, domains)
        else:
            keys = parsing.with_cache_keys(valid, _domain_frame(spark, domains)).select(*transforms.KEY_COLUMNS)
            keys = keys.toArrow()
    else:
        with_keys = parsing.with_cache_keys(valid, _domain_frame(spark, domains))
        keys = with_keys.select(*transforms.KEY_COLUMNS) if keys_found is None else keys_found.keys
    # The parent's snapshot as a Spark frame is made when a step first reads it: a small batch whose
    # driver read the snapshot never does, and Spark's Parquet source cost it 0.5-0.6 s in a fresh
    # application (docs/benchmarks.md)
    snapshot = functools.cache(functools.partial(_parent_snapshot, spark, warehouse, txn.parent, windows))
    parent = _Parent(
        found=txn.parent is not None,
        counted=lambda: None if snapshot() is None else snapshot().filter(~is_in("cache", apama or [""])),
        apama=lambda: snapshot().filter(is_in("cache", apama)) if apama and snapshot() is not None else None,
        left=_parent_left_keys(spark, warehouse, txn.parent, windows) if settings.audit_horizon else None,
        on_driver=_parent_snapshot_on_driver(spark, warehouse, txn.parent, parent_manifest, windows)
        if on_driver else None)
    source_files = [f.path for f in files]
    decided = (_decide_on_driver(spark, keys, parent, windows, txn.batch_id, source_files, kept) if on_driver
               else _decide_in_spark(spark, keys, parent, windows, txn.batch_id, source_files, kept, input_lines,
                                     addresses, bool(settings.audit_horizon), keys_found))
    tally = decided.tally
    accepted = tally.accepted_per_cache()
    caches = manifests.cache_counters(windows, accepted, tally.clocks(windows, decided.apama_clocks))
    # the audit's record of keys that left reads the batch's acceptances only where one can have
    # left already (usually none: a count cache holds more than a batch accepts)
    leaving = bool(settings.audit_horizon) and audit.acceptances_may_leave(caches, accepted)

    # The verdicts and the entries are made when a step first reads them: a batch decided on the
    # driver whose outputs and snapshot the driver makes reads neither (no Spark frame at all).
    # Where the driver tallied them, only a delivered output not looked up by line reads the
    # verdicts (the snapshot's acceptances and the record of keys that left read the delivered
    # output, ``_acceptances``): never kept
    def verdicts() -> DataFrame:
        return decided.verdicts  # made once, when first read (``_MadeWhenRead``)

    paths = {name: f"{staging}/{name}" for name in OUTPUTS}  # the warehouse's check of the staged run reads the same
    written: dict[str, int] = {}
    outputs: dict[str, DataFrame | pa.Table] = {}  # as each was written

    @functools.cache
    def entries() -> DataFrame:  # the parent's entries and the batch's acceptances
        return _union(_acceptances(spark, outputs["delivered"], paths["delivered"], apama, verdicts,
                                   decided.driver, txn.batch_id), parent.counted)
    timer.lap("decide")

    # the window-miss audit (§9): misses among the keys that can have an earlier acceptance
    window_audit, bounds = {}, None
    if settings.audit_horizon:
        bound_rows = audit.bounds_rows(caches, settings.audit_horizon)
        bounds = local_frame(spark, bound_rows, audit.BOUNDS_SCHEMA)
        met = [frame.select(*audit.ENTRY_COLUMNS) for frame in (decided.entries_met, decided.left_met)
               if frame is not None]
        earlier = met[0].unionByName(met[1]) if len(met) == 2 else (
            met[0] if met else local_frame(spark, [], audit.ENTRY_SCHEMA))
        if decided.audited_on_driver is not None:  # the parent's entries met are few: collected
            found = driver_audit.summary(decided.audited_on_driver, earlier.toArrow(), bound_rows)
        else:
            candidates = audit.audit_candidates(verdicts(),
                                                audit.audit_keys(decided.repeated_keys, decided.left_met))
            if not on_driver:  # read twice, and found by a pass over every verdict: kept
                candidates = _kept(candidates, kept)
            found = audit.summary(audit.window_misses(candidates, earlier, bounds, txn.batch_id)).collect()
        window_audit = audit.report(caches, found)
    timer.lap("audit")

    # 3. stage the outputs: each output joins the verdicts it keeps to the wide rows. A batch
    # decided in Spark joins narrow verdicts (a million fit a broadcast) to messages that bring
    # their own cache keys, or gives the delivered ones their verdicts by line number; the
    # driver's plan has its verdicts in local tables, which bring the keys along where the
    # messages' would be a join, and a Spark job, per output; where the driver also holds the
    # rows (it read them), it picks the outputs' rows itself (driver_outputs.py).
    keys_in_verdicts = on_driver
    messages = valid if keys_in_verdicts else with_keys

    def verdicts_of(outcome: str) -> DataFrame:
        of = (transforms.verdicts_for(verdicts(), outcome, keys=keys_in_verdicts)
              if decided.driver is None or outcome != kernel.DROPPED  # else the kernel's, few
              else decided.driver.dropped)
        return _broadcast_if_small(of, tally.of(outcome), BROADCAST_ROW_BYTES if keys_in_verdicts
                                   else OUTPUT_VERDICT_BYTES, otherwise="shuffle_hash")

    # the entries that can have left (None: none); made when written, after the delivered output
    left_from = entries if leaving else lambda: parent.counted
    if rows_on_driver:
        message_outputs = {
            "delivered": driver_outputs.delivered(parsed_on_driver, decided.on_driver.verdicts),
            "dropped": driver_outputs.dropped(parsed_on_driver, decided.on_driver.verdicts),
            "quarantine": driver_outputs.quarantine(parsed_on_driver, decided.on_driver.copies)}
    else:
        # A batch decided in Spark gives its messages their delivered verdicts by line number, where
        # the arrays fit the driver (line_lookup.py); else they are joined, broadcast when they fit.
        instants = any(w.timed for w in windows.values())
        starts = _starts(spark, windows)
        if decided.driver is not None:  # numbered by the driver where looks_up_by_line let it (else None)
            lookup = decided.driver.lookup
        elif not keys_in_verdicts and looks_up_by_line(spark, input_lines, instants):
            lookup = _lookup(spark, verdicts(), starts, instants)
        else:
            lookup = None
        message_outputs = {
            "delivered": transforms.delivered(messages, verdicts_of(kernel.DELIVERED)) if lookup is None
            else line_lookup.delivered(messages, lookup, starts),
            "dropped": transforms.dropped(messages, verdicts_of(kernel.DROPPED)),
            "quarantine": transforms.quarantine(
                invalid, valid, decided.copies if tally.of(transforms.QUARANTINED) else None)}
    remembers = bool(settings.audit_horizon) and (leaving or parent.found or parent.left is not None)
    # in the order they are written: the snapshot and the record of keys that left are made when
    # written, as they may read the delivered output (``_acceptances``)
    staged: dict[str, DataFrame | pa.Table | Callable[[], DataFrame | pa.Table]] = {
        **message_outputs,
        "id_cache": lambda: _new_snapshot(spark, decided, parent, entries, caches, apama, txn.batch_id),
        LEFT_KEYS: (lambda: audit.left_keys(left_from(), parent.left, bounds)) if remembers
        else audit.ENTRY_ARROW_SCHEMA.empty_table(),  # nothing is remembered (or the audit is off)
    }
    # Outputs the books show empty without a pass (no invalid line, no repeated message_id; the
    # audit off, or no entry that can have left) are written from the driver. The books still
    # add up: every line is counted by the census and the other outputs' writes.
    empty = {"quarantine": tally.quarantined(input_lines) == 0, LEFT_KEYS: not remembers}
    for name, frame in staged.items():
        path = paths[name]
        frame = outputs[name] = frame() if callable(frame) else frame
        if isinstance(frame, pa.Table):  # held by the driver
            written[name] = _write_table(warehouse.fs, frame, path)
        else:
            written[name] = _write_empty(warehouse.fs, frame, path) if empty.get(name) else _write_counted(frame, path)
        if name == "delivered":
            failpoint("while_staging")
    timer.lap("write")

    # 4. check the books
    counts = _counts(input_lines, tally, written)
    digests = {}  # of the snapshot as written: what the next batch reads
    if isinstance(outputs["id_cache"], pa.Table):  # the driver wrote it: digested there, not read back
        parts = driver_digests.entry_digests(outputs["id_cache"])
    else:
        parts = transforms.entry_digests(
            spark.read.schema(transforms.SNAPSHOT_SCHEMA).parquet(paths["id_cache"])).collect()
    for name, cache in manifests.cache_digests(parts).items():
        caches[name].update(entries=cache.entries, addresses=cache.addresses)
        digests[name] = cache.digest
    fingerprint = manifests.snapshot_fingerprint(caches, digests)
    invalidate = _check_history(warehouse, txn, fingerprint, invalidate_later)
    return Staged(counts, caches, fingerprint, invalidate, window_audit)


def _parse(spark: SparkSession, fs: HadoopFS, files: list, settings: AddressSettings, kept: list[DataFrame],
           staging: str) -> tuple[DataFrame | None, int, set, set, pa.Table | None, _KeysFound | None]:
    """Every line of the batch parsed (parsing.PARSED_COLUMNS), and its census: (parsed, lines,
    addresses, keyed, and the parsed rows as an Arrow table when the driver parsed them, then
    not yet in Spark: parsed is None; and the valid messages' keys where the census found them,
    ``_census_with_keys``). In the JVM where a line is certainly valid, else in Python
    (parsing.py); a small batch of plain JSON lines all in Python, on the driver, without a Spark
    job (planning.reads_on_driver). ``staging``: the run's staging directory, where the census's
    rows pass through files (``_find_keys``)."""
    if plain_json_lines(files) and reads_on_driver(spark, sum(f.size for f in files)):
        table = parsing.parse_on_driver(read_on_driver(fs, files))
        return None, *parsing.census_on_driver(table), table, None
    lines, counted = read_lines(spark, files)
    if lines is None:
        return local_frame(spark, [], parsing.PARSED_SPARK_SCHEMA), 0, set(), set(), None, None
    fast = _kept(parsing.fast_parse(lines), kept)
    found = (_find_keys(fast, kept, settings.has_apama, fs, layout.scratch_dir(staging, "census"))
             if counted is not None and _census_with_keys(spark, counted, settings) else None)
    input_lines, slow, addresses, keyed = found.census if found is not None else _census(fast)
    slow_rows = None
    if slow:
        slow_rows = _kept(parsing.slow_parse(fast.filter("slow")), kept)
        if found is not None:  # the keys of the lines Python decided, found as those of the others
            slow_keys = _find_keys(slow_rows, kept, settings.has_apama, fs,
                                   layout.scratch_dir(staging, "census_python"))
            found.add(slow_keys)
            _, _, more_addresses, more_keyed = slow_keys.census
        else:
            _, _, more_addresses, more_keyed = _census(slow_rows)
        addresses |= more_addresses
        keyed |= more_keyed
    return parsing.parsed_lines(fast, slow_rows), input_lines, addresses, keyed, None, found


def _census(parsed: DataFrame) -> tuple[int, int, set[str], set[tuple[str, bool]]]:
    """parsing.census of ``parsed`` (a job): (lines, slow, addresses, keyed)."""
    seen = parsing.census(parsed).first()
    return seen["lines"], seen["slow"], set(seen["addresses"]), set(map(tuple, seen["keyed"]))


@dataclass
class _KeysFound:
    """The valid messages' key columns (transforms.KEY_COLUMNS, kept) and what the driver ranks
    their units by (unit_ranks.COLLECTED), found by the parse's first pass (``_find_keys``) with
    its census (parsing.census_of_keys: lines, slow, addresses, keyed)."""

    keys: DataFrame
    rows: pa.Table | None  # None once taken (``_decide_in_spark``)
    census: tuple[int, int, set[str], set[tuple[str, bool]]]

    def add(self, other: _KeysFound) -> None:
        """Add ``other``'s keys and rows (of other lines: those Python parsed)."""
        self.keys = self.keys.unionByName(other.keys)
        self.rows = pa.concat_tables([self.rows, other.rows])


def _find_keys(parsed: DataFrame, kept: list[DataFrame], senders: bool, fs: HadoopFS, scratch: str) -> _KeysFound:
    """The keys of ``parsed`` (fast_parse's or slow_parse's rows; every address its own cache:
    ``_census_with_keys``), kept, and the census and the ranks' rows collected by the one pass
    that computes and keeps them (with their senders' hashes where ``senders``: an Apama entry).
    A row per line: collected through files in ``scratch`` rather than through the driver's heap
    (file_collect.py)."""
    keys = _kept(parsing.with_own_cache_keys(parsed).select(*parsing.census_columns(parsed), *transforms.KEY_COLUMNS),
                 kept)
    *census, rows = parsing.census_of_keys(collect_through_files(
        keys.select(*parsing.CENSUS_COLUMNS, *unit_ranks.census_columns(senders)), scratch, fs))
    return _KeysFound(keys.filter("valid").select(*transforms.KEY_COLUMNS), rows, tuple(census))


def _census_with_keys(spark: SparkSession, lines: int, settings: AddressSettings) -> bool:
    """Whether the parse's first pass finds the keys with the census (``_KeysFound``): where the
    batch is decided in Spark and its units ranked on the driver, which collects their key
    columns anyway, and every address is its own cache (``settings.own_caches``), so no address
    has to be known to compute its keys. Then that pass hands the driver the census's rows and
    the ranks' together, and the key columns are kept by it: one pass over the parsed lines
    instead of two (a census, then the key columns read back from the kept wide rows: about 2 s
    more of a 1M batch, docs/benchmarks.md)."""
    return (settings.own_caches and not decides_on_driver(spark, lines)
            and ranks_on_driver(spark, lines, senders=settings.has_apama))


class _MadeWhenRead:
    """A frame field of _Decided or _Parent given as a frame, None, or a function that makes it the
    first time it is read. The driver's plan gives functions: a Spark frame of one of its tables is
    a transfer to the JVM, and the first one an application makes starts the JVM's Arrow reader
    (with the rest, 2.5 s of a cold 20K batch on a quiet machine: docs/benchmarks.md), which a
    batch whose outputs the driver makes too never needs unless the audit or a snapshot in Spark
    reads them.
    A data descriptor, so that the frozen dataclass's ``__init__`` sets it; read from the class it
    has no value, so the dataclass sees no default."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, instance, owner=None):
        if instance is None:
            raise AttributeError(self.slot)
        value = instance.__dict__[self.slot]
        if callable(value):
            value = instance.__dict__[self.slot] = value()
        return value

    def __set__(self, instance, value) -> None:
        instance.__dict__[self.slot] = value


@dataclass(frozen=True)
class _Parent:
    """The parent batch's state this batch reads (None: no parent, or none of that kind)."""

    found: bool
    """Whether there is a parent snapshot: ``counted`` is None exactly when there is not, and
    asking it makes the frame."""
    counted: DataFrame | None = _MadeWhenRead()
    """The snapshot's entries of count and time caches (SNAPSHOT_COLUMNS)."""
    apama: DataFrame | None = _MadeWhenRead()
    """The snapshot's entries of Apama caches: all of them go to the kernel."""
    left: DataFrame | None
    """Its record of keys that left their window (the audit, §9)."""
    on_driver: pa.Table | None = None
    """The snapshot's entries of every carried cache (transforms.SNAPSHOT_ARROW_SCHEMA) read by the
    driver, for a batch decided there when they are few (planning.snapshot_on_driver)."""


@dataclass(frozen=True)
class _Decided:
    """Every valid message's verdict, and what the audit, the snapshot and the manifest need of
    the deciding; the same whichever plan decided."""

    verdicts: DataFrame = _MadeWhenRead()      # transforms.VERDICT_COLUMNS
    copies: DataFrame = _MadeWhenRead()        # row_id, error: repeated message ids (transforms.copies)
    # What only the window-miss audit reads (None where it is off and the plan needs none of them):
    repeated_keys: DataFrame | None = _MadeWhenRead()  # cache, dedup_key
    entries_met: DataFrame | None = _MadeWhenRead()  # the parent's count and time entries the batch's keys meet
    left_met: DataFrame | None = _MadeWhenRead()     # the parent's left keys the batch's keys meet
    apama_entries: DataFrame = _MadeWhenRead()  # the Apama caches' queues after the batch (SNAPSHOT_COLUMNS)
    apama_clocks: dict
    tally: _Tally
    on_driver: driver_decide.Decision | None = None  # the driver's plan: its tables
    driver: _DriverVerdicts | None = None  # a batch ranked on the driver whose kernel ran there
    # the audit on, where the driver holds the verdicts it reads (all, or the contested messages'):
    # driver_audit.VERDICT_COLUMNS; None: audit.py reads ``verdicts`` in Spark
    audited_on_driver: pa.Table | None = None


@dataclass(frozen=True)
class _DriverVerdicts:
    """What the driver found of the verdicts it tallied (driver_verdicts.py), as frames of its
    tables (no job to read them; the driver keeps none of them while the outputs are written)."""

    lookup: DataFrame | None  # the delivered ones by line (line_lookup.LOOKUP_SCHEMA); None: they do not fit
    dropped: DataFrame        # the dropped ones, the kernel's (driver_verdicts.DROPPED_SCHEMA)
    # With Apama caches, what tells their quiet senders' acceptances among the delivered
    # (unit_ranks.queued_acceptances): the quiet senders' hashes and the kernel's acceptances
    quiet_hashes: DataFrame | None = None
    kernel_seqs: DataFrame | None = None


def _decide_in_spark(spark: SparkSession, keys: DataFrame, parent: _Parent, windows: dict, batch_id: str,
                     source_files: list[str], kept: list[DataFrame], input_lines: int, addresses: set[str],
                     audited: bool, found: _KeysFound | None = None) -> _Decided:
    """transforms.py's plan: uncontested units by joins and windows, in parallel; contested ones
    through the kernel, on the driver when they are few (planning.kernel_on_driver), else in one
    Spark task. Where the units are, which are contested, their ranks in their caches and the
    Apama caches' quiet senders, the driver finds where they fit it (``_ranks``,
    planning.ranks_on_driver); else a window over the transactions, an aggregation of the keys, a
    window over every keyed message and one of the senders do. ``audited``: the window-miss audit
    is on (only it reads the repeated keys of a batch ranked on the driver). ``found``: the
    rows the units are ranked by, where the parse's census collected them (``keys`` are kept
    then); taken from it, so that they are not held once ranked."""
    apama = cache_windows.of_policy(windows, APAMA)
    # the key columns, computed once from the parsed rows (kept on disk, wide) by the first pass
    # and read from here by the next ones
    collected = None
    if found is None:
        keys = _kept(keys, kept)
    else:
        collected, found.rows = found.rows, None
    # the units placed and ranked on the driver (unit_ranks.py), where they fit: the pass that
    # computes the key columns collects what that needs, the ids' hashes with it
    caches = _names_by_hash(spark, list(windows), unit_ranks.cache_hash(), "cache")
    ranked = ranks_on_driver(spark, input_lines, bool(apama)) and caches is not None
    if ranked:
        # the census's rows have a sender column where the config has an Apama entry; a cache the
        # parent carries can still be an Apama cache (windows.resolve) where it has none
        if collected is not None and unit_ranks.SENDER in collected.column_names:
            rows = unit_ranks.of_sequential(collected, [h for h, name in caches.items() if name in apama])
        elif collected is not None and not apama:
            rows = collected
        else:
            rows = keys.select(*unit_ranks.columns(apama)).toArrow()
        collected = None
        repeated = repeated_values(rows["id_hash"])
        suspects, suspected = values_frame(spark, repeated, "id_hash"), len(repeated)
    else:
        # the ids that may repeat, by their hashes (usually none: then no pass joins or looks for copies)
        suspects, suspected = _suspects(spark, keys, input_lines, kept)
    copied = 0
    if suspected:
        repeated_ids = _kept(transforms.repeated_message_ids(
            transforms.with_repeated_hash(keys, _broadcast_if_small(suspects, suspected))), kept)
        copied = repeated_ids.count()
    flagged = (_kept(transforms.flag_duplicate_message_ids(keys, _broadcast_if_small(repeated_ids, copied),
                                                           source_files), kept)
               if copied else transforms.flag_duplicate_message_ids(keys, None, source_files))
    messages = transforms.messages(flagged)
    copies = (transforms.copies(flagged) if copied
              else local_frame(spark, [], from_arrow_schema(driver_decide.COPY_SCHEMA)))
    if ranked:
        copy_rows = 0
        if copied:  # a copy is no message (it may have closed a transaction): placed again without them
            copy_rows = len(rows)
            rows = messages.select(*unit_ranks.columns(apama)).toArrow()
            copy_rows -= len(rows)
        found = _ranks(spark, rows, parent, windows, caches, kept)
        del rows  # 40 bytes a message and more (planning.RANK_ROW_BYTES): not held while the outputs are written
        driver_memory.release()
        if found is not None:
            by_line = looks_up_by_line(spark, input_lines, any(w.timed for w in windows.values()))
            decided = _decide_ranked(spark, messages, found, windows, batch_id, copies, kept, copy_rows,
                                     _names_by_hash(spark, sorted(addresses), unit_ranks.address_hash(), "address"),
                                     by_line, audited)
            del found  # each message's ranks (unit_ranks.Ranks): not held while the outputs are written
            driver_memory.release()
            return decided
    batch_keys = _kept(transforms.batch_keys(messages), kept)
    keys_side = batch_keys
    if parent.counted is not None or parent.left is not None:
        keys_side = _broadcast_if_small(batch_keys, batch_keys.count())
    # the parent's entries the batch's keys can meet: in its snapshot, and in its record of keys
    # that left their window (§9, the window-miss audit); every entry of an Apama cache
    entries_met, left_met = (None if entries is None else _kept(transforms.entries_met(entries, keys_side), kept)
                             for entries in (parent.counted, parent.left))
    repeated_keys = _kept(transforms.repeated_keys(batch_keys, entries_met), kept)
    # Apama caches: their queues move with every acceptance (kernel.py), but a quiet sender's
    # queue only grows: its uncontested messages and the parent's entries the batch never names
    # stay in it without the kernel (resting)
    contested_keys, quiet, apama_entries, resting = repeated_keys, None, parent.apama, None
    if apama:
        quiet = _kept(transforms.quiet_senders(messages, parent.apama, _sender_windows(spark, windows)), kept)
        quiet = _broadcast_if_small(quiet, quiet.count())
    if parent.apama is not None:  # a key an Apama queue holds is contested too (its entries are not entries_met)
        named = _kept(transforms.named_entries(parent.apama, keys_side, quiet), kept)
        apama_met = named.filter("named").select("cache", "dedup_key")
        contested_keys = _kept(repeated_keys.unionByName(apama_met).distinct(), kept)
        apama_entries = named.filter(~F.col("resting")).select(*transforms.SNAPSHOT_COLUMNS)
        resting = named.filter("resting").select(*transforms.SNAPSHOT_COLUMNS)
    kernel_entries = _union(entries_met, apama_entries) if entries_met is not None else None
    marked = transforms.mark_repeated(messages, _broadcast_if_small(contested_keys, contested_keys.count()), apama,
                                      quiet)
    units = _kept(transforms.rank_in_caches(transforms.assign_units(marked)), kept)
    verdicts, decisions, held = _verdicts(spark, units, kernel_entries, copies, windows, batch_id, kept)
    verdicts = _kept(verdicts(), kept)  # the tally, the outputs and the snapshot read them
    tally = _Tally(transforms.verdict_counts(verdicts).collect())
    return _Decided(verdicts, copies, repeated_keys, entries_met, left_met,
                    *_queues(spark, decisions, apama, resting, held), tally)


def _queues(spark: SparkSession, decisions: DataFrame, apama: list[str], resting: DataFrame | None,
            held: _KernelOnDriver | None) -> tuple[DataFrame, dict]:
    """The Apama caches' queues after the batch (SNAPSHOT_COLUMNS): the kernel's entries
    (``decisions``) and the parent's ``resting`` ones; and their time. Where the kernel ran on the
    driver (``held``), both are read from its output there: the entries become a local relation,
    whose exact size the snapshot's plan is chosen by (``_verdicts``). Else the time is collected
    (a job, only where the batch has such caches)."""
    if not apama:
        return local_frame(spark, [], transforms.SNAPSHOT_SCHEMA), {}
    if held is not None:
        clocks = kernel.clocks_of(held.decisions)
        queued = kernel.rows_of(held.decisions, kernel.ENTRY).select(transforms.SNAPSHOT_COLUMNS)
        entries = spark.createDataFrame(queued, transforms.SNAPSHOT_SCHEMA)
    else:
        clocks = {r["cache"]: r["received_at_us"] for r in transforms.kernel_rows(decisions, kernel.CLOCK).collect()}
        entries = transforms.kernel_rows(decisions, kernel.ENTRY).select(*transforms.SNAPSHOT_COLUMNS)
    return (entries if resting is None else _union(entries, resting)), clocks


@dataclass(frozen=True)
class _KernelOnDriver:
    """The kernel's stream (transforms.decision_stream, in unit order) and its output
    (kernel.OUTPUT_SCHEMA), where it ran on the driver."""

    stream: pa.Table
    decisions: pa.Table


def _verdicts(spark: SparkSession, units: DataFrame, kernel_entries: DataFrame | None, copies: DataFrame,
              windows: dict, batch_id: str, kept: list[DataFrame], stream_rows: int | None = None
              ) -> tuple[Callable[[], DataFrame], DataFrame, _KernelOnDriver | None]:
    """Every valid message's verdict (a function that plans them, once: a batch whose driver tallied
    them may never read them; not kept: the caller keeps them where more than one pass reads
    them), the kernel's output, and its stream and output where the driver holds them (else None):
    the contested ``units`` through the kernel with the parent's
    ``kernel_entries``, on the driver when they are few (planning.kernel_on_driver), else in one
    Spark task; the others by ``transforms.verdicts``. ``stream_rows``: the stream's rows, where
    the caller knows them (else counted, which computes kept units)."""
    stream = transforms.decision_stream(units, kernel_entries)
    if stream_rows is None:
        stream_rows = stream.count()
    held = None
    if kernel_on_driver(spark, stream_rows):
        ordered = transforms.in_unit_order_on_driver(stream.toArrow())
        held = _KernelOnDriver(ordered, kernel.decide_table(ordered.to_batches(), windows, batch_id))
        # broadcast to every unit as Arrow batches (local_frames.batches_frame: 7-11 MiB at 1M)
        decisions = batches_frame(spark, held.decisions, transforms.OUTPUT_SPARK_SCHEMA)
    else:
        decisions = _kept(transforms.decide(stream, windows, batch_id), kept)
    @functools.cache
    def verdicts() -> DataFrame:  # the kernel's verdicts (at most a row per row of its stream) meet every unit
        return transforms.verdicts(units, _broadcast_if_small(decisions, stream_rows), copies, _starts(spark, windows))
    return verdicts, decisions, held


@dataclass(frozen=True)
class _Ranked:
    """The units' ranks the driver found (``_ranks``), and the parent's state the batch's key
    hashes meet, kept (None: the parent has none of that kind)."""

    by_line: DataFrame  # unit_ranks.RANKS_SCHEMA
    ranks: unit_ranks.Ranks
    caches: dict[int, str]  # the batch's caches by unit_ranks.cache_hash
    stream_rows: int | None  # rows of the kernel's stream, where the driver knows them (no parent Apama queue)
    counted: DataFrame | None  # its count and time entries
    left: DataFrame | None     # its record of keys that left their window (§9)
    queued: DataFrame | None   # its Apama entries the kernel needs: named, or not resting
    resting: DataFrame | None  # its Apama entries that stay as they are
    quiet_senders: DataFrame | None = None  # the Apama caches' quiet senders' hashes (SENDER), small


def _ranks(spark: SparkSession, rows: pa.Table, parent: _Parent, windows: dict, caches: dict[int, str],
           kept: list[DataFrame]) -> _Ranked | None:
    """The units' ranks (unit_ranks.rank of ``rows``, unit_ranks.COLLECTED; None where they do
    not fit Spark's arrays; ``caches``: the batch's, by their hash), and the parent's entries,
    left keys and Apama entries whose key hash the batch's keys have. Those hashes are collected
    (a job each), so that the units of their keys are contested: an entry of another key with the
    same hash is never looked up by the kernel, and a key that left its window is accepted there.
    Apama caches' quiet senders are found by unit_ranks.quiet_senders, from the parent's entries
    in their queues (a job)."""
    apama = cache_windows.of_policy(windows, APAMA)
    known = None  # the batch's key hashes, shipped to Spark only to meet a parent's entries
    if any(entries is not None for entries in (parent.counted, parent.left, parent.apama)):
        batch_hashes = rows["key_hash"].drop_null().unique()
        known = _broadcast_if_small(values_frame(spark, batch_hashes.to_numpy(), "key_hash"), len(batch_hashes),
                                    KEY_HASH_BYTES)
    counted, left = (None if entries is None else _kept(
        entries.join(known, unit_ranks.key_hash() == known["key_hash"], "left_semi"), kept)
        for entries in (parent.counted, parent.left))
    counted_met, left_met = (None if hit is None else hit.select(unit_ranks.key_hash()).toArrow().column(0)
                             for hit in (counted, left))
    met = [hashes for hashes in (counted_met, left_met) if hashes is not None]
    quiet = quiet_frame = queued = resting = None
    # the Apama caches' per_source_window, by their hash
    per_source = {h: windows[name].setting.per_source_window for h, name in caches.items() if name in apama}
    if apama:
        quiet, quiet_hashes = unit_ranks.quiet_senders(rows, per_source, _held(spark, parent))
        quiet_frame = _broadcast_if_small(values_frame(spark, quiet_hashes, unit_ranks.SENDER),
                                          len(quiet_hashes), KEY_HASH_BYTES)
        if parent.apama is not None:
            named = _kept(unit_ranks.named_entries(parent.apama, known, quiet_frame), kept)
            met.append(named.filter("named").select(unit_ranks.key_hash()).toArrow().column(0))
            queued = named.filter(~F.col("resting")).select(*transforms.SNAPSHOT_COLUMNS)
            resting = named.filter("resting").select(*transforms.SNAPSHOT_COLUMNS)
    met_hashes = np.unique(np.concatenate([np.empty(0, np.int64), *(hit.to_numpy() for hit in met)]))
    found = unit_ranks.rank(rows, met_hashes, quiet)
    if found is None:
        return None
    # the ranks by line, in the JVM at once (the driver keeps each message's for its verdicts only)
    by_line, ranks = batches_frame(spark, found[0], unit_ranks.RANKS_SPARK_SCHEMA), found[1]
    del found
    # the kernel's stream (transforms.decision_stream): the contested messages, the entries met and
    # Apama's passive messages (uncontested, of a sender that is not quiet); the parent's queue
    # entries it needs would need a count
    stream_rows = ranks.contested + (0 if counted_met is None else len(counted_met))
    if apama:
        sequential = np.isin(ranks.cache_hash, list(per_source))
        passive = int(np.count_nonzero(ranks.keyed & sequential & ~ranks.in_contested & ~quiet))
        stream_rows = None if queued is not None else stream_rows + passive
    return _Ranked(by_line, ranks, caches, stream_rows, counted, left, queued, resting, quiet_frame)


def _kernel_seqs(spark: SparkSession, decisions: pa.Table) -> DataFrame:
    """The kernel's acceptances (its ``decisions``, kernel.OUTPUT_SCHEMA) by cache and cache_seq, a
    small frame: what tells the contested messages among the delivered ones
    (unit_ranks.queued_acceptances)."""
    verdicts = kernel.rows_of(decisions, kernel.VERDICT)
    accepted = verdicts.filter(verdicts["cache_seq"].is_valid())
    seqs = accepted.select(["cache", "cache_seq"])
    return _broadcast_if_small(spark.createDataFrame(seqs, "cache string, cache_seq long"), len(seqs))


def _held(spark: SparkSession, parent: _Parent) -> pa.Table:
    """The parent's entries in each Apama sender queue (unit_ranks.quiet_senders' ``held``)."""
    if parent.apama is None:
        return unit_ranks.HELD_SCHEMA.empty_table()
    return unit_ranks.held(parent.apama).toArrow()


def _decide_ranked(spark: SparkSession, messages: DataFrame, ranked: _Ranked, windows: dict, batch_id: str,
                   copies: DataFrame, kept: list[DataFrame], copy_rows: int, addresses: dict[int, str] | None,
                   by_line: bool, audited: bool) -> _Decided:
    """``_decide_in_spark`` for a batch whose units the driver placed and ranked (``_ranks``):
    ``messages`` (transforms.messages, from kept rows); ``copies``: its repeated message ids
    (transforms.copies), ``copy_rows`` of them. Where the kernel runs on the driver too and the
    batch's ``addresses`` are told apart by their hash (else None), the driver tallies the
    verdicts, and numbers the delivered ones by line if ``by_line`` (planning.looks_up_by_line).
    The repeated keys and the parent's entries and left keys they meet are found only if
    ``audited`` (the window-miss audit is on): nothing else reads them."""
    apama = cache_windows.of_policy(windows, APAMA)
    units = unit_ranks.units(messages, ranked.by_line, apama)
    # Read once, by the kernel's stream, where the driver runs the kernel and tallies its verdicts
    # and no audit reads them again (the snapshot reads the delivered output, ``_acceptances``);
    # else kept, computed by the first pass that reads them
    tallied_on_driver = (ranked.stream_rows is not None and kernel_on_driver(spark, ranked.stream_rows)
                         and addresses is not None)
    if not (tallied_on_driver and not audited):
        units = _kept(units, kept)
    kernel_entries = None if ranked.counted is None else _union(ranked.counted, ranked.queued)
    verdicts, decisions, held = _verdicts(spark, units, kernel_entries, copies, windows, batch_id, kept,
                                          ranked.stream_rows)
    driver = tally = None
    if held is not None and addresses is not None:
        found = driver_verdicts.decide(ranked.ranks, held.decisions, windows, ranked.caches, addresses, copy_rows,
                                       by_line)
        tally = _Tally(found.tally)
        driver = _DriverVerdicts(
            None if found.lookup is None else batches_frame(spark, found.lookup, line_lookup.LOOKUP_SPARK_SCHEMA),
            spark.createDataFrame(found.dropped, driver_verdicts.DROPPED_SPARK_SCHEMA),
            *((ranked.quiet_senders, _kernel_seqs(spark, held.decisions)) if apama else ()))
        del found
    else:  # the tally, the outputs and the snapshot read them
        verdicts = _kept(verdicts(), kept)
        tally = _Tally(transforms.verdict_counts(verdicts).collect())
    queues = _queues(spark, decisions, apama, ranked.resting, held)
    if not audited:
        return _Decided(verdicts, copies, None, None, None, *queues, tally, driver=driver)
    stream = None if held is None else held.stream
    # What the audit reads of the deciding (what it reads twice is kept, computed once, by its
    # first pass), exact: every message of a key that repeats, or that the parent's entries or
    # record hold, is contested. The contested messages' keys are in the kernel's stream, where
    # the driver holds it: else a pass over the units finds them.
    contested_keys = (_kept(transforms.batch_keys(units.filter("contested")), kept) if stream is None
                      else spark.createDataFrame(unit_ranks.contested_keys(stream), unit_ranks.KEY_COUNTS_SPARK_SCHEMA))
    met = [None if hit is None else hit.join(
        _broadcast_if_small(contested_keys.select("cache", "dedup_key"), ranked.ranks.contested),
        ["cache", "dedup_key"], "left_semi") for hit in (ranked.counted, ranked.left)]
    if held is not None:
        # The audit runs on the driver (driver_audit.py), from the contested messages' verdicts,
        # which hold every one it reads, and the parent's entries met, collected once
        return _Decided(verdicts, copies, None, *met, *queues, tally, driver=driver,
                        audited_on_driver=unit_ranks.contested_verdicts(stream, held.decisions, windows))
    entries_met, left_met = (None if frame is None else _kept(frame, kept) for frame in met)
    repeated_keys = transforms.repeated_keys(contested_keys, entries_met)  # read once, by the audit's candidates
    return _Decided(verdicts, copies, repeated_keys, entries_met, left_met, *queues, tally, driver=driver)


def _names_by_hash(spark: SparkSession, names: list[str], hashed: Column, column: str) -> dict[int, str] | None:
    """``names`` (values of ``column``) by their ``hashed`` (unit_ranks.cache_hash, address_hash),
    or None where two share a hash; computed by Spark on a local relation, without a job."""
    frame = local_frame(spark, [(name,) for name in names], f"{column} string")
    by_hash = {r[1]: r[0] for r in frame.select(column, hashed).collect()}
    return by_hash if len(by_hash) == len(names) else None


def _suspects(spark: SparkSession, keys: DataFrame, input_lines: int, kept: list[DataFrame]) -> tuple[DataFrame, int]:
    """The hashes of the ids that may repeat (transforms.repeated_id_hashes) and how many. Where
    they fit the driver (planning.id_hashes_on_driver), the pass that computes and keeps ``keys``
    also collects them and numpy finds the repeats (msgdedup.repeats); else an aggregation does,
    a shuffle and two jobs more (about 1 s of a 1M batch, docs/benchmarks.md)."""
    if id_hashes_on_driver(spark, input_lines):
        repeated = repeated_values(keys.select(transforms.id_hash().alias("id_hash")).toArrow()["id_hash"])
        driver_memory.release()  # the collected hashes: 8 bytes a message
        return values_frame(spark, repeated, "id_hash"), len(repeated)
    suspects = _kept(transforms.repeated_id_hashes(keys), kept)
    return suspects, suspects.count()


def _decide_on_driver(spark: SparkSession, key_rows: pa.Table, parent: _Parent, windows: dict, batch_id: str,
                      source_files: list[str], kept: list[DataFrame]) -> _Decided:
    """driver_decide.py's plan for a small batch: its key columns (transforms.KEY_COLUMNS, held
    by the driver), the parent's entries they meet (from the snapshot the driver read, else
    collected: one job), every unit through the kernel here. The results are frames of the
    driver's Arrow tables (no job to read them)."""
    apama = cache_windows.of_policy(windows, APAMA)
    key_table = driver_decide.batch_keys(key_rows)

    def made(table: pa.Table) -> DataFrame:  # a Spark frame of one of the driver's tables
        return spark.createDataFrame(table, from_arrow_schema(table.schema))

    @functools.cache  # read by the parent's entries met and its left keys met: shipped once
    def batch_keys() -> DataFrame:
        return F.broadcast(made(key_table))

    if not parent.found:
        kernel_entries = None
    elif parent.on_driver is not None:
        kernel_entries = driver_decide.entries_met(parent.on_driver, key_table, apama)
    else:
        entries_met = transforms.entries_met(parent.counted, batch_keys())
        kernel_entries = _union(entries_met, parent.apama).toArrow()
    decision = driver_decide.decide(key_rows, kernel_entries, windows, batch_id, source_files)

    # Each frame is made when a step reads it (_MadeWhenRead): none where the driver makes the outputs too
    def met() -> DataFrame | None:
        return None if kernel_entries is None else made(kernel_entries).filter(~is_in("cache", apama or [""]))

    def left_met() -> DataFrame | None:
        return None if parent.left is None else transforms.entries_met(parent.left, batch_keys())

    def apama_entries() -> DataFrame:
        return made(decision.apama_entries).select(*transforms.SNAPSHOT_COLUMNS)

    return _Decided(functools.partial(made, decision.verdicts), functools.partial(made, decision.copies),
                    functools.partial(made, decision.repeated_keys), met, left_met, apama_entries,
                    decision.apama_clocks, _Tally(decision.tally), decision, audited_on_driver=decision.verdicts)


def _parent_snapshot(spark: SparkSession, warehouse: Warehouse, parent: str | None,
                     windows: dict[str, cache_windows.CacheWindow]) -> DataFrame | None:
    """The parent's entries that still count in this batch (those of caches whose policy did not
    change, §8.5), with every column of SNAPSHOT_COLUMNS (a snapshot written before policies
    existed has the first six only)."""
    if parent is None:
        return None
    # Read with the declared schema: no Spark job to read a footer for it, and the columns an
    # older snapshot lacks read as null.
    snapshot = spark.read.schema(transforms.SNAPSHOT_SCHEMA).parquet(warehouse.output_dir("id_cache", parent))
    return _carried(snapshot, windows).select(*transforms.SNAPSHOT_COLUMNS)


def _changed(windows: dict[str, cache_windows.CacheWindow]) -> list[str]:
    """The parent's caches whose policy changed (§8.5: they start empty); usually none. Every
    cache of the parent's entries is one of its caches, so ``windows`` names it."""
    return [name for name, w in windows.items() if w.inherited and not w.carried]


def _carried(entries: DataFrame, windows: dict[str, cache_windows.CacheWindow]) -> DataFrame:
    """The parent's ``entries`` of the caches that carry them: all but the ``_changed`` ones,
    named by those, so the usual batch has no filter. (A filter naming the carried caches cost a
    py4j call per cache: 0.25 s of a warm 20K batch with 400 caches, docs/benchmarks.md.)"""
    changed = _changed(windows)
    return entries.filter(~is_in("cache", changed)) if changed else entries


def _parent_snapshot_on_driver(spark: SparkSession, warehouse: Warehouse, parent: str | None,
                               parent_manifest: dict | None, windows: dict[str, cache_windows.CacheWindow]
                               ) -> pa.Table | None:
    """``_parent_snapshot`` as the driver's Arrow table (transforms.SNAPSHOT_ARROW_SCHEMA), when its
    manifest counts few enough entries in the carried caches (planning.snapshot_on_driver); else None."""
    if parent is None:
        return None
    counted = [parent_manifest["caches"].get(name, {}).get("entries") for name, w in windows.items() if w.carried]
    if None in counted or not snapshot_on_driver(spark, sum(counted)):  # an entry count missing: not known small
        return None
    snapshot = warehouse.fs.read_parquet(warehouse.output_dir("id_cache", parent), transforms.SNAPSHOT_ARROW_SCHEMA)
    changed = pa.array(_changed(windows), pa.string())
    return snapshot.filter(pc.invert(pc.is_in(snapshot["cache"], value_set=changed)))


def _parent_left_keys(spark: SparkSession, warehouse: Warehouse, parent: str | None,
                      windows: dict[str, cache_windows.CacheWindow]) -> DataFrame | None:
    """The parent's record of keys that left their window, of the caches whose policy did not
    change (§8.5: another policy starts empty, its record too); None without a parent, or for a
    parent committed before the audit existed (its misses are then not seen: the record starts
    with this batch). A record written before time windows were audited has no instants."""
    if parent is None:
        return None
    path = warehouse.output_dir(LEFT_KEYS, parent)
    if not warehouse.fs.exists(path):
        return None
    left = spark.read.schema(audit.ENTRY_SCHEMA).parquet(path)  # as _parent_snapshot
    return _carried(left, windows).select(*audit.ENTRY_COLUMNS)


def _new_snapshot(spark: SparkSession, decided: _Decided, parent: _Parent, entries: Callable[[], DataFrame],
                  caches: dict[str, dict], apama: list[str], batch_id: str) -> DataFrame | pa.Table:
    """The new ID cache (transforms.snapshot): this batch's acceptances and the parent's entries
    (``entries()``) within their limits, and the Apama caches' queues. A batch decided on the driver
    whose parent's snapshot the driver read (or that has no parent) gets it as an Arrow table
    (driver_decide.snapshot), written without a Spark job: with a full cache, the parent's entries
    are most of a small batch's rows, and filtering and writing the history bench's 200,000 took
    a job of 1.3-1.5 s, which made the batches after the cache filled 1.15x the first
    (docs/benchmarks.md)."""
    if decided.on_driver is not None and (not parent.found or parent.on_driver is not None):
        return driver_decide.snapshot(decided.on_driver.verdicts, parent.on_driver, apama, snapshot_limits(caches),
                                      decided.on_driver.apama_entries, batch_id)
    return transforms.snapshot(entries(), _limits(spark, caches), decided.apama_entries, queued=bool(apama))


def _acceptances(spark: SparkSession, delivered: DataFrame | pa.Table, path: str, apama: list[str],
                 verdicts: Callable[[], DataFrame], driver: _DriverVerdicts | None, batch_id: str) -> DataFrame:
    """The batch's acceptances as cache entries (transforms.acceptances), as the snapshot and the
    record of keys that left read them. Where Spark wrote the ``delivered`` output (at ``path``),
    read from that output's narrow columns (transforms.delivered_acceptances): every acceptance is
    a delivered message with its cache_seq, and Parquet reads those columns alone. With Apama
    caches, only where the driver tallied the verdicts (``driver``), which tells the acceptances
    that stay in a quiet sender's queue (unit_ranks.queued_acceptances); their caches' others are
    left out, as the snapshot takes the kernel's queues and the record is of count and time
    caches. Made from the ``verdicts`` again instead, the snapshot re-planned the kernel's verdicts
    over every unit (about ten broadcasts), and a batch whose driver tallied the verdicts kept its
    units only for that (docs/benchmarks.md)."""
    if not isinstance(delivered, DataFrame) or (apama and driver is None):
        return transforms.acceptances(verdicts(), batch_id)
    written = spark.read.schema(delivered.schema).parquet(path)
    if not apama:
        return transforms.delivered_acceptances(written, batch_id)
    return (transforms.delivered_acceptances(written.filter(~is_in("cache", apama)), batch_id)
            .unionByName(unit_ranks.queued_acceptances(written, apama, driver.quiet_hashes, driver.kernel_seqs,
                                                       batch_id)))


def _lookup(spark: SparkSession, verdicts: DataFrame, starts: DataFrame, instants: bool) -> DataFrame | None:
    """The delivered ``verdicts`` as line_lookup.by_line's arrays (collected: a job, and 16 bytes
    a message on the driver, 24 with ``instants``), or None where they do not fit them."""
    chosen = line_lookup.numbered_in_batch(transforms.verdicts_for(verdicts, kernel.DELIVERED, keys=True),
                                           starts, instants)
    table = line_lookup.by_line(chosen.toArrow())
    lookup = None if table is None else batches_frame(spark, table, line_lookup.LOOKUP_SPARK_SCHEMA)
    del table  # the JVM has the arrays now; the driver keeps neither them nor the verdicts for the writes
    driver_memory.release()
    return lookup


def _union(first: DataFrame, *others: DataFrame | None) -> DataFrame:
    for other in others:
        if other is not None:
            first = first.unionByName(other.select(*first.columns))
    return first


class _Tally:
    """The verdicts counted by (address, cache, outcome, reason): few rows, collected once."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    def of(self, outcome: str) -> int:
        return sum(r["count"] for r in self.rows if r["outcome"] == outcome)

    def quarantined(self, input_lines: int) -> int:
        """The quarantine's rows by the books: every line neither delivered nor dropped (invalid
        lines have no verdict, repeated message_ids the verdict QUARANTINED)."""
        return input_lines - self.of(kernel.DELIVERED) - self.of(kernel.DROPPED)

    def accepted_per_cache(self) -> dict[str, int]:
        """cache -> keys accepted, for every cache the batch met."""
        accepted: dict[str, int] = {}
        for r in self.rows:
            if r["cache"] is not None:
                n = r["count"] if r["outcome"] == kernel.DELIVERED else 0
                accepted[r["cache"]] = accepted.get(r["cache"], 0) + n
        return accepted

    def clocks(self, windows: dict[str, cache_windows.CacheWindow],
               reported: dict[str, int | None]) -> dict[str, int | None]:
        """The time of every time and Apama cache after the batch (§8.4): the latest of the time it
        had, its latest entry's and, for an Apama cache, the time the kernel ``reported`` (which
        also moves with a resend, and misses the acceptances of quiet senders it never saw)."""
        latest: dict[str, int] = {}
        for r in self.rows:
            if r["clock_us"] is not None:
                latest[r["cache"]] = max(r["clock_us"], latest.get(r["cache"], r["clock_us"]))
        return {name: max((t for t in (w.clock_us, latest.get(name), reported.get(name)) if t is not None),
                          default=None)
                for name, w in windows.items() if w.policy in (TIME, APAMA)}

    def by_address(self) -> dict[str, dict[str, int]]:
        by_address: dict[str, dict[str, int]] = {}
        for r in self.rows:
            if r["outcome"] == transforms.QUARANTINED:
                continue  # repeated message_ids: counted with the quarantine output
            bucket = by_address.setdefault(r["address"], {"delivered": 0, kernel.DUPLICATE: 0,
                                                          kernel.TRANSACTION_REJECTED: 0})
            bucket["delivered" if r["outcome"] == kernel.DELIVERED else r["reason"]] += r["count"]
        return dict(sorted(by_address.items()))


def _counts(input_lines: int, tally: _Tally, written: dict[str, int]) -> dict:
    """The books: every input line is in exactly one staged output, as the verdicts say.
    ``written``: the rows each output's write reported (``_write_counted``)."""
    delivered, dropped, quarantined = (written[name] for name in ("delivered", "dropped", "quarantine"))
    expected = (tally.of(kernel.DELIVERED), tally.of(kernel.DROPPED), tally.quarantined(input_lines))
    # The verdicts sum to the input by construction, so matching them balances the books.
    if (delivered, dropped, quarantined) != expected:
        raise AccountingError(
            f"input lines {input_lines} != delivered {delivered} + dropped {dropped} "
            f"+ quarantined {quarantined} (verdicts: {expected[0]} delivered, {expected[1]} dropped); "
            f"nothing was committed")
    by_address = tally.by_address()
    return {
        "input_lines": input_lines,
        "delivered": delivered,
        "dropped": dropped,
        "quarantined": quarantined,
        "by_reason": {reason: sum(b[reason] for b in by_address.values())
                      for reason in (kernel.DUPLICATE, kernel.TRANSACTION_REJECTED)},
        "by_address": by_address,
    }


def _domains(addresses: set[str], settings: AddressSettings) -> dict[str, tuple[str, bool]]:
    """The cache (domain) of every address in the batch and whether it checks at all: few,
    matched by config.py once each (parsing.with_cache_keys, driver_decide.key_columns)."""
    return {a: (s.domain_of(a), s.checks) for a, s in ((a, settings.setting_for(a)) for a in sorted(addresses))}


def _domain_frame(spark: SparkSession, domains: dict[str, tuple[str, bool]]) -> DataFrame:
    return local_frame(spark, [(a, *d) for a, d in domains.items()], "address string, domain string, checks boolean")


def _kept(frame: DataFrame, kept: list[DataFrame], level: StorageLevel = StorageLevel.DISK_ONLY) -> DataFrame:
    """``frame``, computed once by the first job that needs it and kept (listed in ``kept`` for
    ``_release``), so every later use of it (a count, a join, an output) reads it.

    A local checkpoint rather than ``persist``: it also cuts the lineage, so each later query
    plans over a leaf instead of the whole chain. Persisted frames nested in one another made
    Spark's planning (matching every subtree against every cached plan) cost seconds per query,
    more than the work.

    On local disk, not in the heap, unless the caller says otherwise: a batch decided in Spark
    keeps a few rows per message (key columns, units, verdicts), and kept as rows in memory
    (``MEMORY_AND_DISK_DESER``) they filled the storage share of a 1g driver's heap, and
    execution memory with it: an aggregation has to spill when its task can get no memory, and
    gets none at all while another task holds it to unroll a block it is caching (two runs of
    three of a 5M batch failed so, ``AGGREGATE_OUT_OF_MEMORY``). On disk, a block is written as
    it is computed and read back as a stream, and its pages stay in the operating system's
    cache: a 1M batch's decide step took 18.6-24.0 s against 22.1-32.1 s in memory, at a lower
    peak (1,484-1,632 MiB against 1,648-1,660), a 5M batch's 69-70 s against 99 s
    (docs/benchmarks.md). Not PySpark's serialized ``MEMORY_AND_DISK`` either: a serialized
    block that spilled to disk is read back into one heap buffer of its whole size
    (``maybeCacheDiskBytesInMemory``)."""
    frame = frame.localCheckpoint(eager=False, storageLevel=level)
    kept.append(frame)
    return frame


def _release(kept: list[DataFrame]) -> None:
    """Drop the blocks of ``_kept`` frames now: a warm batch service runs batch after batch, and
    Spark would only clean them when the JVM's garbage collector gets to them."""
    for frame in kept:
        plan = frame._jdf.queryExecution().analyzed()  # a LogicalRDD: the checkpointed rows
        if plan.getClass().getSimpleName() == "LogicalRDD":
            plan.rdd().unpersist(False)
    kept.clear()


def _broadcast_if_small(frame: DataFrame, rows: int, row_bytes: int = BROADCAST_ROW_BYTES,
                        otherwise: str | None = None) -> DataFrame:
    """``frame`` as the broadcast side of a join if its ``rows`` fit the driver's broadcast budget
    (planning.broadcast_rows). The callers count a kept frame for this even where the batch's
    line count would bound it: without the count, the frame is first computed inside the
    broadcast's job, and in about one run in four Spark then logged "Failed to update accumulator"
    stack traces when the application stopped (seen after a refused batch's one-line error).

    ``otherwise``: the join hint for a frame too large to broadcast. The outputs' verdicts take
    ``shuffle_hash``: each task hashes its share of the narrow verdicts and streams the wide rows
    past them, where Spark's default sort-merge join sorts (and spills) the wide rows too (a 5M
    batch's delivered output: 32.6-34.8 s of task time against 34.3-40.3, docs/benchmarks.md). A share
    is small, as adaptive execution sizes the partitions (planning.APPLICATION_DEFAULTS)."""
    if rows <= broadcast_rows(frame.sparkSession, row_bytes):
        return F.broadcast(frame)
    return frame.hint(otherwise) if otherwise else frame


def _starts(spark: SparkSession, windows: dict[str, cache_windows.CacheWindow]) -> DataFrame:
    """Per cache, where it starts: its counter and time, and whether it keeps instants."""
    return local_frame(spark, [(name, w.last_seq, w.clock_us, w.timed) for name, w in windows.items()],
                       "cache string, last_seq long, clock_us long, timed boolean")


def _sender_windows(spark: SparkSession, windows: dict[str, cache_windows.CacheWindow]) -> DataFrame:
    """Per Apama cache, the size of each sender's queue (``transforms.quiet_senders``)."""
    return local_frame(spark, [(name, w.setting.per_source_window) for name, w in windows.items()
                               if w.policy == APAMA], "cache string, per_source_window long")


def snapshot_limits(caches: dict[str, dict]) -> dict[str, tuple[int | None, int | None]]:
    """Per count or time cache (``caches``: the manifest's, after the batch), the limits of its
    snapshot (``transforms.snapshot``): the highest cache_seq that has left it by count, the
    oldest instant it still holds by time (None: no such limit). Apama caches are not listed: the
    kernel reports their queues."""
    return {name: transforms.snapshot_limits(c) for name, c in caches.items() if c["policy"] != APAMA}


def _limits(spark: SparkSession, caches: dict[str, dict]) -> DataFrame:
    """``snapshot_limits`` as a frame: ``cache``, ``floor``, ``oldest_us``."""
    rows = [(name, *limits) for name, limits in snapshot_limits(caches).items()]
    return local_frame(spark, rows, "cache string, floor long, oldest_us long")


def _check_history(warehouse: Warehouse, txn: Transaction, fingerprint: str, invalidate_later: bool) -> list[str]:
    """Later committed batches stand only if the cache state they started from is unchanged.

    ``txn.later`` is the history as the run found it; the commit refuses if it changed since."""
    batch_id, later = txn.batch_id, txn.later
    if not later:
        return []
    recorded = (warehouse.read_manifest(later[0]).get("parent") or {}).get("snapshot_fingerprint")
    if recorded == fingerprint:
        return []
    if invalidate_later:
        return later
    raise StaleHistoryError(
        f"batch {batch_id} is older than committed batch(es) {', '.join(later)} and changes the "
        f"ID cache they were built on; nothing was committed. Re-run with --invalidate-later to "
        f"mark them stale, then re-run them in order")


# -- CLI -------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Deduplicate one raw message batch into the warehouse (all-or-nothing).")
    parser.add_argument("--input", required=True,
                        help="directory or glob of *.jsonl / *.json / *.parquet files of one batch")
    parser.add_argument("--warehouse", required=True, help="warehouse root directory (any Hadoop path)")
    parser.add_argument("--batch-id", required=True, help="batch id, sortable in time order, e.g. 2026-11-21T05")
    parser.add_argument("--config", help="YAML address settings (default: id_cache_size 20000 everywhere)")
    parser.add_argument("--invalidate-later", action="store_true",
                        help="when re-running an older batch changes history, mark later batches stale")
    return parser


USER_ERRORS = (ConfigError, InputError, BatchIdError, StaleHistoryError, CommitConflict)


def exit_code(error: BaseException) -> int:
    """What the user can fix (Spark's AnalysisException too: an unreadable input), a busy warehouse
    (retry later), else internal.

    Shared with ``msgdedup.pipeline`` so the DAG's app and this CLI never disagree on a code.
    """
    from pyspark.errors import AnalysisException

    if isinstance(error, WarehouseBusy):
        return exit_codes.WAREHOUSE_BUSY
    if isinstance(error, (*USER_ERRORS, AnalysisException)):
        return exit_codes.USER_ERROR
    return exit_codes.INTERNAL_ERROR


def spark_session(app_name: str) -> SparkSession:
    """The session settings the engine's results depend on, in one place for every app that runs
    it, and the application's static ones (``planning.application_settings``)."""
    spark = (SparkSession.builder.appName(app_name).config(map=application_settings())
             .config("spark.sql.session.timeZone", "UTC")
             # lets adaptive execution merge the shuffle partitions of a persisted frame (see
             # _broadcast_if_small) as it does everywhere else, instead of 200 tiny tasks
             .config("spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def summary_line(batch_id: str, manifest: dict) -> str:
    counts = manifest["counts"]
    return (f"{PROG}: committed batch {batch_id}: {counts['input_lines']} lines, "
            f"{counts['delivered']} delivered, {counts['dropped']} dropped, "
            f"{counts['quarantined']} quarantined")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        validate_batch_id(args.batch_id)
    except USER_ERRORS as error:
        return report_error(error, exit_codes.USER_ERROR)

    spark = spark_session(f"{PROG} {args.batch_id}")
    try:
        manifest = run_batch(spark, args.input, args.warehouse, args.batch_id, settings,
                             invalidate_later=args.invalidate_later)
    except Exception as error:  # Spark's errors carry a JVM trace; users get one line.
        return report_error(error, exit_code(error))
    finally:
        spark.stop()
    print(summary_line(args.batch_id, manifest))
    return exit_codes.OK


def report_error(error: BaseException, code: int) -> int:
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    kind = f"internal error ({type(error).__name__})" if code == exit_codes.INTERNAL_ERROR else "error"
    if code == exit_codes.INTERNAL_ERROR:  # a bug: its trace is what a bug report needs
        traceback.print_exception(error, file=sys.stderr)
    print(f"{PROG}: {kind}: {message}", file=sys.stderr)
    return code
