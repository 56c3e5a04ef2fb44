"""More kinds of bad input, through the real engine (run_batch, local Spark): each line is
quarantined with a readable reason, or (CRLF, a BOM, gzip, years 1 and 9999) read as the valid
line it is, and ``input lines = delivered + dropped + quarantined`` always holds. Also what a
partition may hold: subdirectories, file names with glob characters, symbolic links, unreadable
files (docs/semantics.md §1, "Files")."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from msgdedup.engine.batch import run_batch
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.reading import InputError, list_input_files
from msgdedup.envelope import MAX_RECEIVED_US, MIN_RECEIVED_US

from tests.engine.support import manifest, read_output, write_batch
from tests.engine.test_bad_input import _assert_accounting, _placement
from tests.engine.test_batch_command import _assert_one_line_error, run_command

BATCH = "2026-11-21T05"


def _line(mid, **fields):
    return json.dumps({"message_id": mid, "address": "a", "received_at": 1795237200000, **fields}).encode()


def _errors(warehouse, batch_id=BATCH):
    return {(r["source_file"].rsplit("/", 1)[-1], r["line_number"]): r["error"]
            for r in read_output(warehouse, "quarantine", batch_id)}


def _delivered(warehouse, batch_id=BATCH):
    return {r["message_id"]: r for r in read_output(warehouse, "delivered", batch_id)}


@pytest.fixture(scope="module")
def line_kinds(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    lines = [
        _line("ok"),                                                              # 1
        b'{"message_id":"utf8-\xc3\x28","address":"a","received_at":1}',          # 2 invalid UTF-8
        b'{"message_id":"nul-\x00","address":"a","received_at":1}',               # 3 NUL in a string
        b'{"message_id":"nul","address":"a","received_at":1}\x00',                # 4 NUL after the object
        b'{"message_id":"dup","address":"a","received_at":1,"address":"b"}',      # 5 duplicate key
        _line("seq-big", seq=2**63),                                              # 6 seq beyond a long
        b'{"message_id":"seq-huge","address":"a","received_at":1,"seq":' + b"9" * 5000 + b"}",  # 7
        _line("year-1", received_at="0001-01-01T00:00:00Z"),                      # 8 valid
        _line("year-9999", received_at="9999-12-31T23:59:59.999999Z"),            # 9 valid
        _line("year-0", received_at="0001-01-01T00:00:00+01:00"),                 # 10 year 0 in UTC
        _line("year-10000", received_at="9999-12-31T23:59:59-01:00"),             # 11 year 10000 in UTC
        b'{"x":' * 10_000 + b"1" + b"}" * 10_000,                                 # 12 nested 10,000 deep
        b'{"message_id":"cr-in-string\rx","address":"a","received_at":1}',        # 13 lone CR in a string
        b'{"message_id":"cr-between",\r"address":"a","received_at":1}',           # 14 lone CR: whitespace
        _line("last"),                                                            # 15
    ]
    raw = root / "raw"
    write_batch(raw, {"a.jsonl": lines})
    (raw / "crlf.jsonl").write_bytes(_line("crlf-1") + b"\r\n" + _line("crlf-2") + b"\r\n")
    (raw / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + _line("bom-1") + b"\n\xef\xbb\xbf" + _line("bom-2") + b"\n")
    (raw / "empty.jsonl").write_bytes(b"")
    run_batch(spark, str(raw), str(root / "wh"), BATCH)
    return root / "wh", len(lines) + 4


def test_bad_lines_are_quarantined_with_readable_reasons(line_kinds):
    warehouse, n_lines = line_kinds
    errors = _errors(warehouse)
    assert errors[("a.jsonl", 2)] == "invalid UTF-8 at byte 20"
    assert errors[("a.jsonl", 3)] == "not valid JSON: Invalid control character at column 20"
    assert errors[("a.jsonl", 4)].startswith("not valid JSON: Extra data")
    assert errors[("a.jsonl", 5)] == "not valid JSON: duplicate key 'address'"
    assert errors[("a.jsonl", 6)] == "seq 9223372036854775808 does not fit in 64 bits"
    assert errors[("a.jsonl", 7)] == "not valid JSON: a number with more than 4300 digits"
    assert errors[("a.jsonl", 10)] == "received_at: '0001-01-01T00:00:00+01:00' is outside the years 1 to 9999 in UTC"
    assert errors[("a.jsonl", 11)] == "received_at: '9999-12-31T23:59:59-01:00' is outside the years 1 to 9999 in UTC"
    assert errors[("a.jsonl", 12)] == "not valid JSON: nested too deeply"
    assert errors[("a.jsonl", 13)] == "not valid JSON: Invalid control character at column 28"
    assert errors[("bom.jsonl", 2)].startswith("not valid JSON: Unexpected UTF-8 BOM")
    assert set(errors) == {("a.jsonl", n) for n in (2, 3, 4, 5, 6, 7, 10, 11, 12, 13)} | {("bom.jsonl", 2)}
    _assert_accounting(warehouse, BATCH, n_lines)


def test_valid_edges_are_delivered(line_kinds):
    warehouse, _ = line_kinds
    delivered = _delivered(warehouse)
    assert set(delivered) == {"ok", "last", "year-1", "year-9999", "cr-between", "crlf-1", "crlf-2", "bom-1"}
    placed = _placement(warehouse, BATCH)
    assert placed[("crlf.jsonl", 1)][0] == placed[("crlf.jsonl", 2)][0] == "delivered"
    assert placed[("bom.jsonl", 1)][0] == "delivered"
    assert delivered["crlf-2"]["line_number"] == 2
    # the lone CR did not split its line: line 15 is still line 15
    assert delivered["last"]["line_number"] == 15


def test_years_1_and_9999_keep_their_instants(spark, line_kinds):
    # read with Spark: the outputs' timestamps are INT96, which pyarrow reads as nanoseconds
    warehouse, _ = line_kinds
    rows = (spark.read.parquet(str(warehouse / "delivered" / f"batch_id={BATCH}"))
            .filter("message_id like 'year-%'").select("message_id", F.unix_micros("received_at").alias("us"))
            .collect())
    assert {r.message_id: r.us for r in rows} == {"year-1": MIN_RECEIVED_US, "year-9999": MAX_RECEIVED_US}
    assert MIN_RECEIVED_US == -62135596800000000 and MAX_RECEIVED_US == 253402300799999999


def test_a_50_mb_line_is_quarantined_whole(tmp_path):
    """Generated here, never committed: one broken line of 50 MB beside a valid one. Run as the
    documented command, in a JVM of its own with Spark's default driver memory (the memory a
    user's batch has), not in the test session, whose heap holds what the whole suite left."""
    huge = b'{"message_id":"huge","address":"a","received_at":1,"body":"' + b"y" * 50_000_000
    write_batch(tmp_path / "raw", {"a.jsonl": [_line("before"), huge, _line("after")]})
    code, out, err = run_command("--input", str(tmp_path / "raw"), "--warehouse", str(tmp_path / "wh"),
                                 "--batch-id", BATCH)
    assert code == 0, out + err
    (row,) = read_output(tmp_path / "wh", "quarantine", BATCH)
    assert (row["line_number"], len(row["raw_line"])) == (2, len(huge))
    assert row["error"].startswith("not valid JSON: Unterminated string")
    assert set(_delivered(tmp_path / "wh")) == {"before", "after"}
    _assert_accounting(tmp_path / "wh", BATCH, 3)


# -- files ------------------------------------------------------------------------------------------
def _parquet(path, **columns):
    pq.write_table(pa.table(columns), path)


@pytest.fixture(scope="module")
def file_kinds(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    raw = root / "raw"
    raw.mkdir()
    (raw / "a.jsonl.gz").write_bytes(gzip.compress(b"".join(_line(f"gz-{i}") + b"\n" for i in range(3))))
    big = gzip.compress(b"".join(_line(f"t-{i}", body="z" * 100) + b"\n" for i in range(5000)))
    (raw / "b-truncated.jsonl.gz").write_bytes(big[: len(big) // 2])
    (raw / "c-corrupt.parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    received = pa.array([1795237200000], type=pa.timestamp("ms", tz="UTC"))
    _parquet(raw / "d-string-ids.parquet", message_id=["p-1"], address=["a"], received_at=received)
    _parquet(raw / "e-number-ids.parquet", message_id=[42], address=["a"], received_at=received)
    write_batch(raw, {"f.jsonl": [_line("plain")]})
    run_batch(spark, str(raw), str(root / "wh"), BATCH)
    return root / "wh"


def test_gzip_files_are_read(file_kinds):
    assert {"gz-0", "gz-1", "gz-2", "plain", "p-1"} == set(_delivered(file_kinds))


def test_an_unreadable_file_is_one_quarantine_row(file_kinds):
    rows = {r["source_file"].rsplit("/", 1)[-1]: r for r in read_output(file_kinds, "quarantine", BATCH)}
    truncated, corrupt = rows["b-truncated.jsonl.gz"], rows["c-corrupt.parquet"]
    assert (truncated["line_number"], truncated["raw_line"]) == (0, "")
    assert truncated["error"] == ("unreadable file (java.io.EOFException: Unexpected end of input stream): "
                                  "none of its lines are in this batch")
    assert corrupt["line_number"] == 0
    assert corrupt["error"].startswith("unreadable file (java.lang.RuntimeException: ")
    assert corrupt["error"].endswith("none of its lines are in this batch")


def test_conflicting_parquet_types_are_validated_row_by_row(file_kinds):
    errors = _errors(file_kinds)
    assert errors[("e-number-ids.parquet", 1)] == "message_id must be a string, got number"
    # 3 gzip lines + the truncated file + the corrupt file + 2 Parquet rows + 1 plain line
    assert set(errors) == {("b-truncated.jsonl.gz", 0), ("c-corrupt.parquet", 0), ("e-number-ids.parquet", 1)}
    _assert_accounting(file_kinds, BATCH, 8)


def test_subdirectories_are_read_in_path_order(spark, tmp_path):
    raw = tmp_path / "raw"
    write_batch(raw / "b", {"x.jsonl": [_line("b-x")]})
    write_batch(raw / "a" / "deeper", {"y.jsonl": [_line("a-y")]})
    write_batch(raw, {"c.jsonl": [_line("c")]})
    write_batch(raw / "_temporary", {"z.jsonl": [_line("hidden")]})
    files = list_input_files(HadoopFS(spark), str(raw))
    assert [f.path.split("/raw/", 1)[1] for f in files] == ["a/deeper/y.jsonl", "b/x.jsonl", "c.jsonl"]
    # a glob's matching directories are read the same way, once each even where matches overlap
    assert list_input_files(HadoopFS(spark), str(raw / "*")) == files
    assert list_input_files(HadoopFS(spark), str(raw / "{a,a/deeper,b,c.jsonl}")) == files
    run_batch(spark, str(raw), str(tmp_path / "wh"), BATCH)
    assert set(_delivered(tmp_path / "wh")) == {"b-x", "a-y", "c"}
    _assert_accounting(tmp_path / "wh", BATCH, 3)


def test_only_a_subdirectory_is_not_an_empty_success(spark, tmp_path):
    write_batch(tmp_path / "raw" / "hour=05", {"part-0.jsonl": [_line("m1"), _line("m2")]})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    assert manifest(tmp_path / "wh", BATCH)["counts"]["input_lines"] == 2


def test_file_names_with_glob_characters_are_read_literally(spark, tmp_path):
    names = ["a[1].jsonl", "a1.jsonl", "b{x,y}.jsonl", "bx.jsonl", "c*.jsonl", "d?.jsonl", "e\\f.jsonl"]
    write_batch(tmp_path / "raw", {name: [_line(f"m-{name}")] for name in names})
    run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    delivered = _delivered(tmp_path / "wh")
    assert {r["source_file"].rsplit("/", 1)[-1] for r in delivered.values()} == set(names)
    assert all(r["source_file"].endswith(r["message_id"][2:]) for r in delivered.values())
    _assert_accounting(tmp_path / "wh", BATCH, len(names))


def test_symbolic_links_in_a_partition_are_refused(spark, tmp_path):
    secret = tmp_path / "outside" / "secret.jsonl"
    write_batch(secret.parent, {"secret.jsonl": [_line("from-outside")]})
    write_batch(tmp_path / "raw", {"a.jsonl": [_line("m1")]})
    os.symlink(secret, tmp_path / "raw" / "b.jsonl")
    with pytest.raises(InputError, match=r"b.jsonl is a symbolic link \(to .*secret.jsonl\)"):
        run_batch(spark, str(tmp_path / "raw"), str(tmp_path / "wh"), BATCH)
    assert not (tmp_path / "wh" / "runs" / f"{BATCH}.json").exists()
    # a linked directory too, however deep
    os.remove(tmp_path / "raw" / "b.jsonl")
    (tmp_path / "raw" / "sub").mkdir()
    os.symlink(secret.parent, tmp_path / "raw" / "sub" / "more")
    with pytest.raises(InputError, match="more is a symbolic link"):
        list_input_files(HadoopFS(spark), str(tmp_path / "raw"))


def test_the_input_itself_may_be_a_link(spark, tmp_path):
    write_batch(tmp_path / "raw", {"a.jsonl": [_line("m1")]})
    os.symlink(tmp_path / "raw", tmp_path / "current")
    run_batch(spark, str(tmp_path / "current"), str(tmp_path / "wh"), BATCH)
    assert set(_delivered(tmp_path / "wh")) == {"m1"}


def test_the_batch_command_quarantines_a_huge_number_and_refuses_a_link(tmp_path):
    """The reported failures, as users meet them: a 5,000-digit integer used to fail the batch
    with exit 1 (and block every later hour); a link is refused with exit 2 and one line."""
    huge = b'{"message_id":"m2","address":"a","received_at":1,"seq":' + b"9" * 5000 + b"}"
    write_batch(tmp_path / "raw" / "hour=05", {"part-0.jsonl": [_line("m1"), huge]})
    args = ("--input", str(tmp_path / "raw"), "--warehouse", str(tmp_path / "wh"), "--batch-id", BATCH)
    code, out, err = run_command(*args)
    assert code == 0, out + err
    assert f"committed batch {BATCH}: 2 lines, 1 delivered, 0 dropped, 1 quarantined" in out
    os.symlink("/etc/hostname", tmp_path / "raw" / "hour=05" / "part-1.jsonl")
    code, out, err = run_command(*args)
    _assert_one_line_error(code, out + err, 2, "part-1.jsonl is a symbolic link (to /etc/hostname)")


def test_a_dangling_link_is_refused_not_skipped(spark, tmp_path):
    """Hadoop's local listing leaves a link to nothing out: it must not vanish from the batch."""
    write_batch(tmp_path / "raw", {"a.jsonl": [_line("m1")]})
    os.symlink(tmp_path / "gone.jsonl", tmp_path / "raw" / "b.jsonl")
    with pytest.raises(InputError, match=r"b.jsonl is a symbolic link \(to .*gone.jsonl\)"):
        list_input_files(HadoopFS(spark), str(tmp_path / "raw"))
    with pytest.raises(InputError, match=r"b.jsonl is a symbolic link"):
        list_input_files(HadoopFS(spark), str(tmp_path / "raw" / "*.jsonl"))
