"""line_lookup.py on tiny frames: the delivered output by line number has transforms.delivered's
rows, whatever the files, gaps, nulls and instants; the engine-vs-model property tests run it on
whole batches ("by line")."""

import pyarrow as pa
import pytest

from msgdedup.engine import line_lookup, transforms
from msgdedup.engine.parsing import LINE_BITS

MESSAGES = ("row_id long, message_id string, address string, received_at timestamp, properties map<string,string>, "
            "txn_id string, source_id string, seq long, body string, extra_fields map<string,string>, "
            "source_file string, line_number long, error string, raw_line string, cache string, dedup_key string")
VERDICTS = pa.schema([("row_id", pa.int64()), ("cache_seq", pa.int64()), ("received_at_us", pa.int64()),
                      ("cache", pa.string())])
STARTS = "cache string, last_seq long"
# numbered_in_batch's rows, as by_line reads them
NUMBERED = pa.schema([("row_id", pa.int64()), ("seq_in_batch", pa.int64()), ("received_at_us", pa.int64())])


def _message(file_index: int, line: int, cache: str | None = "c") -> tuple:
    return ((file_index << LINE_BITS) | line, f"m{file_index}-{line}", "a", None, {"k": "v"}, None, None, line,
            f"body {line}", {}, f"f{file_index}.jsonl", line, None, None, cache, None if cache is None else f"k{line}")


def _verdicts(verdicts: list[tuple]) -> pa.Table:
    """(row_id, cache_seq, received_at_us[, cache]) rows; the cache is "c" where a cache_seq is given."""
    return pa.Table.from_pylist([dict(zip(VERDICTS.names, (*v, "c" if v[1] is not None else None)[:4], strict=True))
                                 for v in verdicts], VERDICTS)


def _lookup(spark, table: pa.Table, starts, instants: bool = True) -> pa.Table | None:
    return line_lookup.by_line(line_lookup.numbered_in_batch(spark.createDataFrame(table), starts, instants).toArrow())


def _both(spark, messages: list[tuple], verdicts: list[tuple], instants: bool = True,
          counters: tuple = (("c", 0),)) -> tuple[list, list]:
    """(transforms.delivered's rows, line_lookup.delivered's rows), in the order each writes them;
    ``counters``: each cache's last_seq before the batch."""
    frame = spark.createDataFrame(messages, MESSAGES)
    table = _verdicts(verdicts)
    starts = spark.createDataFrame(list(counters), STARTS)
    joined = transforms.delivered(frame, spark.createDataFrame(table.drop_columns("cache")))
    lookup = _lookup(spark, table, starts, instants)
    by_line = line_lookup.delivered(frame, spark.createDataFrame(lookup, line_lookup.LOOKUP_SPARK_SCHEMA), starts)
    assert by_line.schema == joined.schema
    return sorted(joined.collect()), by_line.collect()


def test_each_delivered_line_gets_its_own_verdict_in_every_file(spark):
    """Three files, one without a delivered line; lines with no verdict (an invalid line, a
    dropped message) between and after delivered ones; a message without a key (no cache_seq);
    instants on some verdicts only."""
    messages = [_message(0, 1), _message(0, 2), _message(0, 4, cache=None), _message(0, 5),
                _message(1, 1), _message(1, 2), _message(1, 3), _message(2, 7)]
    verdicts = [((0 << LINE_BITS) | 1, 11, None), ((0 << LINE_BITS) | 4, None, None), ((0 << LINE_BITS) | 2, 12, 900),
                ((1 << LINE_BITS) | 2, 3, 1_000_000_000_000_000)]  # (0, 5), (1, 1), (1, 3), (2, 7): not delivered
    joined, by_line = _both(spark, messages, verdicts, counters=(("c", 2), ("other", 40)))
    assert [(r["line_number"], r["cache_seq"], r["entered_at_us"]) for r in joined] == \
        [(1, 11, None), (2, 12, 900), (4, None, None), (2, 3, 1_000_000_000_000_000)]
    assert sorted(by_line) == joined
    # read once, in the messages' order: no shuffle put them out of it
    assert [r["message_id"] for r in by_line] == ["m0-1", "m0-2", "m0-4", "m1-2"]


def test_a_count_window_needs_no_instants(spark):
    """Without a time or Apama cache no verdict has an instant: no array for them, and every
    delivered row's entered_at_us is null, as the join gives it."""
    messages = [_message(0, line) for line in range(1, 6)]
    verdicts = [((0 << LINE_BITS) | line, 100 + line, None) for line in (5, 1, 3)]
    starts = spark.createDataFrame([("c", 100)], STARTS)
    lookup = _lookup(spark, _verdicts(verdicts), starts, instants=False)
    assert lookup["entered_at_us"].null_count == 1
    [seqs] = lookup["seq_in_batch"].to_pylist()
    assert seqs[:7] == [None, 1, None, 3, None, 5, None], "4 bytes a line: cache_seq - last_seq"
    assert _lookup(spark, _verdicts(verdicts), starts)["entered_at_us"].null_count == 1  # nulls: no instant either
    joined, by_line = _both(spark, messages, verdicts, instants=False, counters=(("c", 100),))
    assert sorted(by_line) == joined
    assert [r["cache_seq"] for r in by_line] == [101, 103, 105]


@pytest.mark.parametrize("verdicts", [[], [(7, 1, None)]])
def test_the_arrays_hold_one_row_per_block_with_a_delivered_line(verdicts):
    table = pa.Table.from_pylist([{"row_id": v[0], "seq_in_batch": v[1], "received_at_us": v[2]} for v in verdicts],
                                 NUMBERED)
    lookup = line_lookup.by_line(table)
    assert lookup.num_rows == len(verdicts)
    if verdicts:
        seqs = [None] * line_lookup.BLOCK_LINES
        seqs[7] = 1
        assert lookup.to_pylist() == [{"block": 0, "seq_in_batch": seqs, "entered_at_us": None}]


def test_lines_on_either_side_of_a_block_boundary_find_their_own_verdicts(spark):
    """Lines around the first blocks' edges of two files, a block with no delivered line between
    two that have some, and a file whose only delivered line is far into it: each message finds
    its verdict in the right block at the right place, and the others none."""
    edge = line_lookup.BLOCK_LINES
    lines = {0: [1, edge - 1, edge, edge + 1, 2 * edge - 1, 3 * edge + 2], 1: [edge - 1, edge], 2: [5 * edge + 3]}
    messages = [_message(f, line) for f, ls in lines.items() for line in ls]
    delivered = [(0, edge - 1), (0, edge), (0, 3 * edge + 2), (1, edge), (2, 5 * edge + 3)]
    verdicts = [((f << LINE_BITS) | line, 10 + n, 1000 + n if n % 2 else None) for n, (f, line) in enumerate(delivered)]
    joined, by_line = _both(spark, messages, verdicts)
    assert sorted((r["source_file"], r["line_number"]) for r in joined) == \
        [(f"f{f}.jsonl", line) for f, line in delivered]
    assert sorted(by_line) == joined
    lookup = _lookup(spark, _verdicts(verdicts), spark.createDataFrame([("c", 0)], STARTS))
    assert lookup["block"].to_pylist() == [0, 1, 3, (1 << (LINE_BITS - line_lookup.BLOCK_BITS)) + 1,
                                           (2 << (LINE_BITS - line_lookup.BLOCK_BITS)) + 5]


@pytest.mark.parametrize("seq_in_batch", [line_lookup.NO_SEQ, -3, 2**31])
def test_a_number_the_arrays_cannot_hold_is_joined_instead(seq_in_batch):
    """NO_SEQ marks a delivered message without a cache_seq, and an int holds the rest; a verdict
    numbered NO_SEQ or below (never, by §3: an acceptance counts up from its cache's counter) or
    past an int makes by_line decline rather than deliver it with another number."""
    table = pa.Table.from_pylist([{"row_id": 1, "seq_in_batch": seq_in_batch, "received_at_us": None}], NUMBERED)
    assert line_lookup.by_line(table) is None
