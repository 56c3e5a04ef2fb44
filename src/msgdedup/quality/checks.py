"""What the gate checks: one GX suite per checked table, named like the table.

These definitions are the source the committed GX project (``expectations/``) is generated
from (``python -m msgdedup.quality.project``); a test keeps the two in step, so a reviewer
reads the gate here, in one page, and GX users still find ordinary suites and checkpoints.

Each checked table becomes a Spark dataframe asset, a suite, a validation definition and a
checkpoint of the same name. One checkpoint per table, because a GX checkpoint passes the
same batch parameters (here: the dataframe) to all its validation definitions. The
checkpoints have no Data Docs action: the gate builds the Data Docs once for all five results
(``gate.run_gate``), since every build also rewrites the site's index over all batches.

The result format is SUMMARY with a bounded sample: the driver receives at most
``SAMPLE_ROWS`` offending rows per expectation, identified by the table's index columns,
whatever the batch size. The gate validates each table with the same counts and no samples
first (``counted_format``), and as its checkpoint says only where an expectation fails: a
sample is a query per expectation, asked even where no row is unexpected.

Every expectation is a per-row condition (not null, null, a pair of columns), never a window
such as uniqueness: GX evaluates an expectation's condition again for each metric it needs
(count, sample values, sample rows), so the windows are computed once in ``tables.py`` and
checked here as "this description column is null".

GX is imported when an expectation is built, not with this module: the import takes seconds,
which the ``gx_gate.py`` command spends while the JVM starts (``gate.main``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation

SAMPLE_ROWS = 20


def _notes(text: str) -> dict:
    return {"notes": {"format": "markdown", "content": [text]}}


# The keyword arguments by which a GX expectation names the columns it reads.
_COLUMN_ARGUMENTS = ("column", "column_A", "column_B")


@dataclass(frozen=True)
class _Expect:
    """A factory of the GX expectation class ``kind`` with ``kwargs`` and a note for readers."""

    kind: str
    note: str
    kwargs: dict

    def __call__(self) -> "Expectation":
        import great_expectations as gx

        return getattr(gx.expectations, self.kind)(**self.kwargs, meta=_notes(self.note))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.kwargs[name] for name in _COLUMN_ARGUMENTS if name in self.kwargs)


def _expect(kind: str, note: str, **kwargs: Any) -> _Expect:
    return _Expect(kind, note, kwargs)


@dataclass(frozen=True)
class CheckedTable:
    name: str
    description: str
    index_columns: tuple[str, ...]
    expectations: tuple[_Expect, ...] = field(default_factory=tuple)

    def build_expectations(self) -> list["Expectation"]:
        return [factory() for factory in self.expectations]

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns GX reads of the table: its index columns (which name an offending row in
        the results) and those its expectations check. The rest of a checked table only builds
        the descriptions those hold (gaps, limits, counts), and is not kept with it."""
        return tuple(dict.fromkeys([*self.index_columns, *(c for e in self.expectations for c in e.columns)]))

    def result_format(self) -> dict:
        return {
            "result_format": "SUMMARY",
            "partial_unexpected_count": SAMPLE_ROWS,
            "unexpected_index_column_names": list(self.index_columns),
        }


def counted_format(result_format: dict) -> dict:
    """``result_format`` (a checkpoint's, as ``CheckedTable.result_format`` made it) with every count
    it reports but no sample rows: a table with no unexpected row gets the same result from it, but
    for GX's empty lists of samples. BASIC, not SUMMARY: GX asks a SUMMARY result the unexpected rows'
    index list and index query too, per expectation, even with no sample wanted (no Spark job,
    but the driver plans each, 0.05-0.2 s apiece beside the gate's other work at 1M messages,
    docs/benchmarks.md); BASIC has the same counts."""
    return {**result_format, "result_format": "BASIC", "partial_unexpected_count": 0}


def _required(column: str) -> _Expect:
    return _expect("ExpectColumnValuesToNotBeNull",
                   f"`{column}` is required by the envelope; a message without it cannot be published.",
                   column=column)


CHECKED_TABLES: tuple[CheckedTable, ...] = (
    CheckedTable(
        name="messages",
        description="Delivered and dropped messages, one row each, labelled with their output.",
        index_columns=("output", "source_file", "line_number", "message_id"),
        expectations=(
            _required("message_id"),
            _required("address"),
            _required("received_at"),
            _expect("ExpectColumnValuesToBeNull",
                    "A message_id names one delivery attempt: it is in exactly one output, once (never "
                    "both delivered and dropped). The column says how often, and where, a repeated "
                    "message_id occurs.",
                    column="duplicate_message_id"),
        ),
    ),
    CheckedTable(
        name="key_window",
        description="Each delivered, checked message next to the previous acceptance of its key "
                    "(this batch or the parent's ID-cache snapshot).",
        index_columns=("cache", "dedup_key", "message_id", "cache_seq", "prev_message_id", "prev_cache_seq"),
        expectations=(
            _expect("ExpectColumnValuesToBeNull",
                    "No duplicate delivered within the window: two deliveries of one (cache, key) "
                    "must be more than id_cache_size accepted keys apart (count), or more than "
                    "duplicate_window apart or past the cap (time).",
                    column="duplicate_within_window"),
            _expect("ExpectColumnValuesToNotBeNull",
                    "Every cache a message was checked in is declared in the manifest with its window.",
                    column="policy"),
            _expect("ExpectColumnValuesToNotBeNull",
                    "A checked delivered message has its acceptance sequence number.",
                    column="cache_seq"),
            _expect("ExpectColumnValuesToBeNull",
                    "cache_seq numbers acceptances: two deliveries of one cache never share one. The "
                    "column names the deliveries that do.",
                    column="shared_cache_seq"),
        ),
    ),
    CheckedTable(
        name="transactions",
        description="Per txn_id: delivered and dropped counts, and duplicates of messages outside the transaction.",
        index_columns=("txn_id", "delivered", "transaction_rejected", "duplicates_of_outside"),
        expectations=(
            _expect("ExpectColumnValuesToBeNull",
                    "No transaction partly delivered: delivered messages next to transaction_rejected "
                    "ones, or next to a duplicate of a message outside the transaction.",
                    column="partial_delivery"),
        ),
    ),
    CheckedTable(
        name="accounting",
        description="One row per count: what the manifest declares against what the outputs hold.",
        index_columns=("batch_id", "count"),
        expectations=(
            _expect("ExpectColumnPairValuesToBeEqual",
                    "Every input line is delivered, dropped or quarantined (input_lines = delivered + "
                    "dropped + quarantined rows), and the manifest's counts are the outputs' row counts.",
                    column_A="declared", column_B="actual"),
        ),
    ),
    CheckedTable(
        name="id_cache",
        description="Per cache: entries of this batch's ID-cache snapshot against the cache size.",
        index_columns=("cache", "id_cache_size", "entries"),
        expectations=(
            _expect("ExpectColumnPairValuesAToBeGreaterThanB",
                    "A cache holds at most id_cache_size entries.",
                    column_A="id_cache_size", column_B="entries", or_equal=True,
                    ignore_row_if="either_value_is_missing"),
            _expect("ExpectColumnValuesToBeNull",
                    "Every cache is declared in the manifest with the entry count it has, "
                    "and holds a key at most once (a held key is a duplicate, never accepted).",
                    column="snapshot_problem"),
        ),
    ),
)

DATASOURCE = "msgdedup_batch"
# The same suites on pandas frames, for a small batch's tables collected to the driver
# (gate.run_gate): GX asks a Spark frame several Spark jobs per expectation, which were most of
# a small batch's gate; a pandas frame answers in the driver.
PANDAS_DATASOURCE = "msgdedup_batch_pandas"
BATCH_DEFINITION = "whole_batch"
DATA_DOCS_SITE = "warehouse_site"


def checkpoint_name(table: str, pandas: bool = False) -> str:
    """The checkpoint that validates ``table`` on a Spark frame, or on a pandas frame."""
    return f"{table}_pandas" if pandas else table
