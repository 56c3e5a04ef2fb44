"""What the gate checks: one GX suite per checked table, named like the table.

These definitions are the source the committed GX project (``expectations/``) is generated
from (``python -m msgdedup.quality.project``); a test keeps the two in step, so a reviewer
reads the gate here, in one page, and GX users still find ordinary suites and checkpoints.

Each checked table becomes a Spark dataframe asset, a suite, a validation definition and a
checkpoint of the same name. One checkpoint per table, because a GX checkpoint passes the
same batch parameters (here: the dataframe) to all its validation definitions.

The result format is SUMMARY with a bounded sample: the driver receives at most
``SAMPLE_ROWS`` offending rows per expectation, identified by the table's index columns,
whatever the batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import great_expectations as gx
from great_expectations.expectations import Expectation

SAMPLE_ROWS = 20


def _notes(text: str) -> dict:
    return {"notes": {"format": "markdown", "content": [text]}}


@dataclass(frozen=True)
class CheckedTable:
    name: str
    description: str
    index_columns: tuple[str, ...]
    expectations: tuple = field(default_factory=tuple)

    def build_expectations(self) -> list[Expectation]:
        return [factory() for factory in self.expectations]

    def result_format(self) -> dict:
        return {
            "result_format": "SUMMARY",
            "partial_unexpected_count": SAMPLE_ROWS,
            "unexpected_index_column_names": list(self.index_columns),
        }


def _required(column: str):
    return lambda: gx.expectations.ExpectColumnValuesToNotBeNull(
        column=column, meta=_notes(f"`{column}` is required by the envelope; a message without it cannot be published.")
    )


CHECKED_TABLES: tuple[CheckedTable, ...] = (
    CheckedTable(
        name="messages",
        description="Delivered and dropped messages, one row each, labelled with their output.",
        index_columns=("output", "source_file", "line_number"),
        expectations=(
            _required("message_id"),
            _required("address"),
            _required("received_at"),
            lambda: gx.expectations.ExpectColumnValuesToBeUnique(
                column="message_id",
                meta=_notes("A message_id names one delivery attempt: it is in exactly one output, once "
                            "(never both delivered and dropped)."),
            ),
        ),
    ),
    CheckedTable(
        name="key_window",
        description="Each delivered, checked message next to the previous acceptance of its key "
                    "(this batch or the parent's ID-cache snapshot).",
        index_columns=("cache", "dedup_key", "message_id", "cache_seq", "prev_message_id", "prev_cache_seq"),
        expectations=(
            lambda: gx.expectations.ExpectColumnValuesToBeNull(
                column="duplicate_within_window",
                meta=_notes("No duplicate delivered within the window: two deliveries of one (cache, key) "
                            "must be more than id_cache_size accepted keys apart."),
            ),
            lambda: gx.expectations.ExpectColumnValuesToNotBeNull(
                column="id_cache_size",
                meta=_notes("Every cache a message was checked in is declared in the manifest with its size."),
            ),
            lambda: gx.expectations.ExpectColumnValuesToNotBeNull(
                column="cache_seq",
                meta=_notes("A checked delivered message has its acceptance sequence number."),
            ),
            lambda: gx.expectations.ExpectCompoundColumnsToBeUnique(
                column_list=["cache", "cache_seq"],
                meta=_notes("cache_seq numbers acceptances: two deliveries never share one."),
            ),
        ),
    ),
    CheckedTable(
        name="transactions",
        description="Per txn_id: delivered and dropped counts, and duplicates of messages outside the transaction.",
        index_columns=("txn_id", "delivered", "transaction_rejected", "duplicates_of_outside"),
        expectations=(
            lambda: gx.expectations.ExpectColumnValuesToBeNull(
                column="partial_delivery",
                meta=_notes("No transaction partly delivered: delivered messages next to transaction_rejected "
                            "ones, or next to a duplicate of a message outside the transaction."),
            ),
        ),
    ),
    CheckedTable(
        name="accounting",
        description="One row per count: what the manifest declares against what the outputs hold.",
        index_columns=("batch_id", "count"),
        expectations=(
            lambda: gx.expectations.ExpectColumnPairValuesToBeEqual(
                column_A="declared", column_B="actual",
                meta=_notes("Every input line is delivered, dropped or quarantined (input_lines = delivered + "
                            "dropped + quarantined rows), and the manifest's counts are the outputs' row counts."),
            ),
        ),
    ),
    CheckedTable(
        name="id_cache",
        description="Per cache: entries of this batch's ID-cache snapshot against the cache size.",
        index_columns=("cache", "id_cache_size", "entries"),
        expectations=(
            lambda: gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="id_cache_size", column_B="entries", or_equal=True,
                ignore_row_if="either_value_is_missing",
                meta=_notes("A cache holds at most id_cache_size entries."),
            ),
            lambda: gx.expectations.ExpectColumnValuesToBeNull(
                column="snapshot_problem",
                meta=_notes("Every cache is declared in the manifest with the entry count it has, "
                            "and holds a key at most once (a held key is a duplicate, never accepted)."),
            ),
        ),
    ),
)

DATASOURCE = "msgdedup_batch"
BATCH_DEFINITION = "whole_batch"
DATA_DOCS_SITE = "warehouse_site"


def by_name() -> dict[str, CheckedTable]:
    return {table.name: table for table in CHECKED_TABLES}
