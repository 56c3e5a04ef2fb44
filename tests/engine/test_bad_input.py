"""Bad input never crashes a batch and is never lost: quarantined with a readable reason, and
``input lines = delivered + dropped + quarantined`` with every line in exactly one output."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgdedup.engine import audit
from msgdedup.engine.batch import run_batch
from msgdedup.engine.planning import DRIVER_READ_BYTES_CONF

from tests.engine.support import manifest, message, read_output, write_batch

BATCH = "2026-11-21T05"
LONG_BODY = "x" * 3_000_000


def _placement(warehouse, batch_id):
    """(file name, line) -> output it landed in, asserting no line is in two outputs."""
    placed = {}
    for name in ("delivered", "dropped", "quarantine"):
        for row in read_output(warehouse, name, batch_id):
            where = (row["source_file"].rsplit("/", 1)[-1], row["line_number"])
            assert where not in placed, f"{where} in {placed[where]} and {name}"
            placed[where] = (name, row.get("error"))
    return placed


def _assert_accounting(warehouse, batch_id, expected_lines):
    counts = manifest(warehouse, batch_id)["counts"]
    assert counts["input_lines"] == expected_lines
    assert counts["input_lines"] == counts["delivered"] + counts["dropped"] + counts["quarantined"]
    assert len(_placement(warehouse, batch_id)) == expected_lines


@pytest.fixture(scope="module")
def bad_batch(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    lines = [
        message("ok-1", key="k1"),                                            # 1 delivered
        b'{"message_id": "broken", ',                                         # 2 malformed JSON
        json.dumps({"address": "a", "received_at": "2026-11-21T05:00:00Z"}),  # 3 missing message_id
        json.dumps({"message_id": 42, "address": "a", "received_at": 1}),     # 4 wrong type
        json.dumps({"message_id": "t1", "address": "a", "received_at": "yesterday"}),            # 5
        json.dumps({"message_id": "t2", "address": "a", "received_at": "2026-11-21T05:00:00"}),  # 6 no offset
        b'{"message_id": "bad-\xff-utf8", "address": "a", "received_at": 1}',                    # 7
        message("long-ok", key="k2", body=LONG_BODY),                         # 8 very long, valid
        b'{"message_id": "long-bad", "body": "' + b"y" * 2_000_000,           # 9 very long, broken
        message("ok-1", key="k9"),                                            # 10 repeated message_id
        b"",                                                                  # 11 empty line
        json.dumps({"message_id": "p", "address": "a", "received_at": 1, "properties": {"k": None}}),  # 12
        json.dumps({"message_id": "s", "address": "a", "received_at": 1, "seq": "3"}),               # 13
        json.dumps(["not", "an", "object"]),                                  # 14
        message("ok-1-dup-key", key="k1"),                                    # 15 dropped duplicate
        json.dumps({"message_id": "n", "address": "a", "received_at": 1e3}),  # 16 float epoch
    ]
    write_batch(root / "raw", {"a.jsonl": lines, "b-empty.jsonl": []})
    (root / "raw" / "_SUCCESS").write_text("")
    run_batch(spark, str(root / "raw"), str(root / "wh"), BATCH)
    return root / "wh", len(lines)


def test_every_bad_line_is_quarantined_with_a_readable_reason(bad_batch):
    warehouse, n_lines = bad_batch
    placed = _placement(warehouse, BATCH)
    errors = {line: error for (name, line), (output, error) in placed.items() if output == "quarantine"}
    assert errors[2].startswith("not valid JSON")
    assert errors[3] == "missing required field message_id"
    assert errors[4] == "message_id must be a string, got number"
    assert errors[5].startswith("received_at: not an ISO-8601 timestamp")
    assert errors[6].startswith("received_at: no UTC offset")
    assert errors[7] == "invalid UTF-8 at byte 20"
    assert errors[9].startswith("not valid JSON")
    assert errors[10] == f"duplicate message_id 'ok-1' (first at {_source(warehouse, 'a.jsonl')}:1)"
    assert errors[11] == "empty line"
    assert errors[12] == "properties.k must be a string or a number, got null"
    assert errors[13] == "seq must be an integer, got string"
    assert errors[14] == "a message must be a JSON object, got array"
    assert errors[16].startswith("received_at must be")
    assert set(errors) == {2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 16}
    assert placed[("a.jsonl", 8)][0] == "delivered"
    assert placed[("a.jsonl", 15)][0] == "dropped"
    _assert_accounting(warehouse, BATCH, n_lines)


def _source(warehouse, name):
    rows = read_output(warehouse, "delivered", BATCH)
    return next(r["source_file"] for r in rows if r["source_file"].endswith(name))


def test_quarantine_keeps_the_raw_line(bad_batch):
    warehouse, _ = bad_batch
    rows = {r["line_number"]: r for r in read_output(warehouse, "quarantine", BATCH)}
    assert rows[2]["raw_line"] == '{"message_id": "broken", '
    assert rows[7]["raw_line"] == '{"message_id": "bad-\\xff-utf8", "address": "a", "received_at": 1}'
    assert len(rows[9]["raw_line"]) > 2_000_000


def test_long_valid_line_is_delivered_whole(bad_batch):
    warehouse, _ = bad_batch
    long_ok = [r for r in read_output(warehouse, "delivered", BATCH) if r["message_id"] == "long-ok"]
    assert len(long_ok) == 1 and long_ok[0]["body"] == LONG_BODY


def test_outputs_the_books_show_empty_read_like_spark_written_ones(spark, bad_batch, tmp_path):
    """A clean batch's quarantine and (audit off) left_keys are written from the driver
    (batch._write_empty): they must read back with the schema Spark gives a written output."""
    write_batch(tmp_path / "raw", {"a.jsonl": [message("m1", key="k"), message("m2", key="k")]})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    counts = manifest(tmp_path / "wh", BATCH)["counts"]
    assert (counts["input_lines"], counts["delivered"], counts["dropped"], counts["quarantined"]) == (2, 1, 1, 0)
    bad_warehouse, _ = bad_batch
    assert read_output(bad_warehouse, "quarantine", BATCH), "the bad batch's quarantine was written by Spark"
    expected = {"quarantine": spark.read.parquet(str(bad_warehouse / "quarantine" / f"batch_id={BATCH}")).schema,
                "left_keys": spark.createDataFrame([], audit.ENTRY_SCHEMA).schema}
    for name, schema in expected.items():
        empty = spark.read.parquet(str(tmp_path / "wh" / name / f"batch_id={BATCH}"))
        assert empty.count() == 0
        assert [(f.name, f.dataType) for f in empty.schema] == [(f.name, f.dataType) for f in schema], name


def test_unknown_fields_are_carried(spark, tmp_path):
    write_batch(tmp_path / "raw", {"a.jsonl": [message("m1", key="k", x_custom={"a": [1, 2]}, tenant="t-1")]})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    (row,) = read_output(tmp_path / "wh", "delivered", BATCH)
    assert dict(row["extra_fields"]) == {"x_custom": '{"a":[1,2]}', "tenant": '"t-1"'}


def test_empty_first_batch_commits(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    write_batch(tmp_path / "raw", {"empty.jsonl": []})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    _assert_accounting(tmp_path / "wh", BATCH, 0)
    assert manifest(tmp_path / "wh", BATCH)["caches"] == {}
    assert read_output(tmp_path / "wh", "id_cache", BATCH) == []


def test_empty_batch_commits_and_carries_the_cache(spark, tmp_path):
    write_batch(tmp_path / "raw1", {"a.jsonl": [message("m1", key="k")]})
    run_batch(spark, str(tmp_path / "raw1"), str(tmp_path / "wh"), "2026-11-21T05")
    (tmp_path / "raw2").mkdir()
    (tmp_path / "raw2" / "_SUCCESS").write_text("")
    run_batch(spark, str(tmp_path / "raw2"), str(tmp_path / "wh"), "2026-11-21T06")
    _assert_accounting(tmp_path / "wh", "2026-11-21T06", 0)
    snapshot = read_output(tmp_path / "wh", "id_cache", "2026-11-21T06")
    assert [(r["cache"], r["dedup_key"], r["message_id"]) for r in snapshot] == [("a", "k", "m1")]
    # and the carried cache still catches the duplicate one batch later
    write_batch(tmp_path / "raw3", {"a.jsonl": [message("m2", key="k")]})
    run_batch(spark, str(tmp_path / "raw3"), str(tmp_path / "wh"), "2026-11-21T07")
    (dropped,) = read_output(tmp_path / "wh", "dropped", "2026-11-21T07")
    assert (dropped["reason"], dropped["duplicate_of"]) == ("duplicate", "m1")


def test_parquet_input_is_validated_like_json_lines(spark, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    table = pa.table({
        "message_id": ["p1", "p2", None, "p4"],
        "address": ["a", "a", "a", "a"],
        "received_at": pa.array([1795237200000, 1795237201000, 1795237202000, 1795237203000],
                                type=pa.timestamp("ms", tz="UTC")),
        "properties": pa.array([[("_AMQ_DUPL_ID", "k")], [("_AMQ_DUPL_ID", "k")], [], []],
                               type=pa.map_(pa.string(), pa.string())),
    })
    pq.write_table(table, raw / "part-0.parquet")
    write_batch(raw, {"part-1.jsonl": [message("j1", at=30, key="k")]})
    run_batch(spark, str(raw), str(tmp_path / "wh"), BATCH)
    placed = _placement(tmp_path / "wh", BATCH)
    assert placed[("part-0.parquet", 1)][0] == "delivered"
    assert placed[("part-0.parquet", 2)][0] == "dropped"
    assert placed[("part-0.parquet", 3)] == ("quarantine", "missing required field message_id")
    assert placed[("part-0.parquet", 4)][0] == "delivered"
    assert placed[("part-1.jsonl", 1)][0] == "dropped"
    _assert_accounting(tmp_path / "wh", BATCH, 5)


@pytest.mark.parametrize("marked", [True, False], ids=["byte order marks: Spark counts", "the driver counts"])
def test_line_numbers_survive_split_files(spark, tmp_path, marked):
    """Files larger than Spark's split size are read by several tasks, and numbered after the
    parse from each split's counts (reading._json_lines): numbering stays exact in every file, and a
    byte order mark is taken off the first line only. Without one, the driver counts the splits'
    lines (engine/split_lines.py); with one, Spark's job does."""
    lines = [message(f"m{i}", key=f"k{i % 50}", at=i % 7, body="z" * 200) for i in range(4000)]
    later = [message(f"n{i}", key=f"n{i % 50}", at=i % 7, body="y" * 200) for i in range(3000)]
    write_batch(tmp_path / "raw", {"big.jsonl": lines, "later.jsonl": later})
    later_file = tmp_path / "raw" / "later.jsonl"
    if marked:
        later_file.write_bytes(b"\xef\xbb\xbf" * 2 + later_file.read_bytes())  # Hadoop drops one, we the other
    # read in Spark (not on the driver, as a batch this small would be), 128 KiB a split
    conf = {"spark.sql.files.maxPartitionBytes": str(128 * 1024), DRIVER_READ_BYTES_CONF: "-1"}
    for name, value in conf.items():
        spark.conf.set(name, value)
    try:
        run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    finally:
        for name in conf:
            spark.conf.unset(name)
    rows = read_output(tmp_path / "wh", "delivered", BATCH) + read_output(tmp_path / "wh", "dropped", BATCH)
    assert sorted((r["source_file"].rsplit("/", 1)[-1], r["message_id"], r["line_number"]) for r in rows) == sorted(
        [("big.jsonl", f"m{i}", i + 1) for i in range(4000)] + [("later.jsonl", f"n{i}", i + 1) for i in range(3000)])
    _assert_accounting(tmp_path / "wh", BATCH, 7000)
