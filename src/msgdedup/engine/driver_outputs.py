"""A batch read and decided on the driver, its outputs made there too: Arrow tables, no Spark job.

A batch of plain JSON lines small enough (planning.reads_on_driver) is parsed by the driver
(parsing.parse_on_driver) and, when its lines are few enough (planning.decides_on_driver),
decided there (driver_decide.py): the driver holds every parsed row and every verdict. Its
outputs were still Spark's joins of the two, each a job with its planning, after the parsed rows
had been shipped to the JVM and kept there for them: of a 20,000-message batch's 8.9 s in a cold
application, the two writes took 3.6 s, shipping and keeping the rows 1.7 s more
(docs/benchmarks.md). Here the same rows are picked with pyarrow, in the order Spark's joins
give them (the messages' order: the verdicts are the broadcast side), and batch._write_table
writes them as Spark's writer does (INT96 instants, the same columns without a dictionary).

Each function gives the rows of its namesake in transforms.py, column for column;
tests/engine/test_driver_outputs.py holds them to Spark's on generated batches.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from msgdedup.engine import kernel
from msgdedup.engine.transforms import (
    DELIVERED_VERDICT, DROPPED_VERDICT, KEYS, MESSAGE_COLUMNS, QUARANTINE_COLUMNS,
)


def delivered(parsed: pa.Table, verdicts: pa.Table) -> pa.Table:
    """transforms.delivered's rows: ``parsed`` (parsing.PARSED_SCHEMA) with its ``verdicts``
    (driver_decide.VERDICT_SCHEMA) of outcome DELIVERED."""
    return _judged(parsed, verdicts, kernel.DELIVERED, DELIVERED_VERDICT)


def dropped(parsed: pa.Table, verdicts: pa.Table) -> pa.Table:
    """transforms.dropped's rows, as ``delivered``'s."""
    return _judged(parsed, verdicts, kernel.DROPPED, DROPPED_VERDICT)


def quarantine(parsed: pa.Table, copies: pa.Table) -> pa.Table:
    """transforms.quarantine's rows: the invalid lines and the repeated message ids (``copies``,
    driver_decide.COPY_SCHEMA: their row_ids and errors), with their raw lines, in input order."""
    invalid = parsed.filter(pc.is_valid(parsed["error"]))
    at = pc.index_in(parsed["row_id"], value_set=copies["row_id"])
    copied = parsed.filter(pc.and_(pc.is_null(parsed["error"]), pc.is_valid(at)))
    errors = copies["error"].take(pc.drop_null(at.filter(pc.is_null(parsed["error"]))))
    rows = pa.concat_tables([
        invalid.select([*QUARANTINE_COLUMNS, "row_id"]),
        copied.select([*QUARANTINE_COLUMNS, "row_id"]).set_column(
            QUARANTINE_COLUMNS.index("error"), parsed.schema.field("error"), errors)])
    return rows.take(pc.sort_indices(rows["row_id"])).drop_columns("row_id")


def _judged(parsed: pa.Table, verdicts: pa.Table, outcome: str, taken: Mapping[str, str]) -> pa.Table:
    """transforms.judge's rows of one output: the valid messages of ``parsed``, in their order,
    whose row_id has a verdict of ``outcome``, their columns and keys, and ``taken`` of it (output
    column -> verdict column)."""
    chosen = verdicts.filter(pc.equal(verdicts["outcome"], outcome))
    valid = parsed.filter(pc.is_null(parsed["error"]))
    at = pc.index_in(valid["row_id"], value_set=chosen["row_id"])  # a row_id has one verdict at most
    judged, picked = valid.filter(pc.is_valid(at)), chosen.take(pc.drop_null(at))
    columns = {name: judged[name] for name in MESSAGE_COLUMNS}
    columns |= {name: picked[name] for name in KEYS}
    columns |= {name: picked[column] for name, column in taken.items()}
    return pa.table(columns)
