"""A small batch of plain JSON lines is read and parsed on the driver (reading.read_on_driver,
parsing.parse_on_driver; planning.reads_on_driver): every line, its file, number, raw bytes,
values or error, and the batch's census must be what Spark's reading and parsing give.

The files hold what the line splitting can get wrong: CRLF endings and lone CRs, a byte order
mark on the first line and one on a later line, blank lines, a last line without its newline,
an empty file, a file in a subdirectory and one whose name has glob characters, bytes that are
not UTF-8, and the parser's curated and generated lines (tests/engine/test_parsing.py).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from msgdedup.config import AddressSettings, parse_settings
from msgdedup.engine import driver_decide, parsing, transforms
from msgdedup.engine.batch import _domain_frame, _domains, _parse
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.planning import DRIVER_READ_BYTES_CONF
from msgdedup.engine.reading import InputError, list_input_files, plain_json_lines, read_on_driver

from tests.engine.test_parsing import CURATED, _generated

KEYED = [
    b'{"message_id":"k1","address":"orders","received_at":1,"properties":{"_AMQ_DUPL_ID":"k"}}',
    b'{"message_id":"k2","address":"orders","received_at":1,"properties":{"_AMQ_BRIDGE_DUP":"b"}}',
    b'{"message_id":"k3","address":"bad","received_at":"never","properties":{"_AMQ_DUPL_ID":"k"}}',
    b'{"message_id":"k4","address":"plain","received_at":1}',
]
LINE = b'{"message_id":"m","address":"a","received_at":1}'


def _files(root):
    root.mkdir()
    curated = [line.encode() for line in CURATED] + _generated(random.Random(7), 400) + KEYED
    (root / "a.jsonl").write_bytes(b"\n".join(curated) + b"\n")
    (root / "crlf.jsonl").write_bytes(LINE + b"\r\n" + LINE[:-1] + b',\r"x":1}\r\n' + b"\r\r\n" + LINE + b"\r")
    (root / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + LINE + b"\n\xef\xbb\xbf" + LINE + b"\n")
    (root / "bom-only.json").write_bytes(b"\xef\xbb\xbf")                     # no line at all
    (root / "bom-newline.json").write_bytes(b"\xef\xbb\xbf\r\n")              # one empty line
    (root / "bom-bom.jsonl").write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + LINE)  # Hadoop drops one, we the other
    (root / "cr-only.jsonl").write_bytes(b"\r")
    (root / "blank.jsonl").write_bytes(b"\n\n  \n\t")
    (root / "empty.jsonl").write_bytes(b"")
    (root / "no-newline.jsonl").write_bytes(LINE)
    (root / "a[1].jsonl").write_bytes(LINE.replace(b'"m"', b'"\xff\xfe"') + b"\n" + LINE.replace(b'"a"', b'"\x00"'))
    (root / "sub").mkdir()
    (root / "sub" / "z.jsonl").write_bytes(LINE + b"\n" + b"\n".join(KEYED))
    return root


def _rows(parsed) -> dict[int, dict]:
    """Rows by row_id (of a frame, or of the table the driver parsed), maps as dicts (their entries'
    order is not part of a line's value)."""
    table: pa.Table = parsed if isinstance(parsed, pa.Table) else parsed.toArrow()
    maps = [name for name in table.column_names if pa.types.is_map(table.schema.field(name).type)]
    return {row["row_id"]: {k: dict(v) if k in maps and v is not None else v for k, v in row.items()}
            for row in table.to_pylist()}


def _parsed(spark, files, on_driver: bool):
    spark.conf.set(DRIVER_READ_BYTES_CONF, str(16 << 20) if on_driver else "-1")
    kept = []
    try:
        staging = files[0].path.rsplit("/", 2)[0] + "/_staging"  # beside the batch's folder
        parsed, lines, addresses, keyed, table, _ = _parse(spark, HadoopFS(spark), files, AddressSettings(), kept,
                                                           staging)
        assert (parsed is None) == on_driver == (table is not None), "read on the driver: not yet in Spark"
        return _rows(table if on_driver else parsed), lines, addresses, keyed
    finally:
        spark.conf.unset(DRIVER_READ_BYTES_CONF)


def test_the_driver_reads_and_parses_a_batch_as_spark_does(spark, tmp_path):
    files = list_input_files(HadoopFS(spark), str(_files(tmp_path / "raw")))
    assert plain_json_lines(files)
    in_spark, on_driver = _parsed(spark, files, on_driver=False), _parsed(spark, files, on_driver=True)
    assert on_driver[1:] == in_spark[1:]  # lines, addresses, keyed
    assert on_driver[2] >= {"orders", "plain", "a"} and "bad" not in on_driver[2]  # an invalid line has no address
    assert {("orders", True), ("orders", False)} <= on_driver[3]
    assert on_driver[1] == len(on_driver[0]) == len(in_spark[0])
    assert on_driver[0] == in_spark[0]
    by_place = {(row["source_file"].rsplit("/", 1)[-1], row["line_number"]): row for row in on_driver[0].values()}
    assert by_place[("crlf.jsonl", 4)]["message_id"] == "m"      # a last line ending in \r, no \n
    assert by_place[("bom.jsonl", 1)]["error"] is None           # the file's byte order mark
    assert by_place[("bom.jsonl", 2)]["error"] is not None       # a later line's is part of it
    assert by_place[("blank.jsonl", 4)]["raw_line"] == "\t"
    assert ("empty.jsonl", 1) not in by_place and ("bom-only.json", 1) not in by_place
    assert by_place[("bom-newline.json", 1)]["raw_line"] == ""
    assert by_place[("bom-bom.jsonl", 1)]["error"] is None


def test_only_uncompressed_json_lines_are_read_on_the_driver(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.jsonl").write_bytes(LINE)
    (tmp_path / "raw" / "b.jsonl.gz").write_bytes(b"")
    fs = HadoopFS(spark)
    assert not plain_json_lines(list_input_files(fs, str(tmp_path / "raw")))
    (tmp_path / "raw" / "b.jsonl.gz").unlink()
    assert plain_json_lines(list_input_files(fs, str(tmp_path / "raw")))


def test_a_file_gone_before_it_is_read_stops_the_batch(spark, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.jsonl").write_bytes(LINE)
    fs = HadoopFS(spark)
    files = list_input_files(fs, str(tmp_path / "raw"))
    (tmp_path / "raw" / "a.jsonl").unlink()
    with pytest.raises(InputError, match="cannot read input file .*a.jsonl"):
        read_on_driver(fs, files)


def test_parse_on_driver_keeps_the_parsed_schema(tmp_path):
    assert parsing.parse_on_driver(read_on_driver(None, [])).schema == parsing.PARSED_SCHEMA  # no line
    lines = pa.table({"raw": pa.array([LINE], pa.binary()), "file_index": pa.array([3], pa.int32()),
                      "source_file": ["f"], "line_number": pa.array([9], pa.int64())})
    table = parsing.parse_on_driver(lines)
    assert table.schema == parsing.PARSED_SCHEMA
    assert table["row_id"].to_pylist() == [(3 << parsing.LINE_BITS) + 9]


def test_the_driver_keys_a_batch_as_spark_does(spark, tmp_path):
    """driver_decide.key_columns, for a batch the driver parsed, against parsing.with_cache_keys
    in Spark: a producer's id, a bridge's (its own cache, and ahead of the producer's), an address
    in a domain, one with detection off, a message with no id, and invalid lines left out."""
    (tmp_path / "raw").mkdir()
    lines = [*KEYED, LINE,
             b'{"message_id":"b1","address":"orders","received_at":1,'
             b'"properties":{"_AMQ_DUPL_ID":"p","_AMQ_BRIDGE_DUP":"q"}}',
             b'{"message_id":"d1","address":"orders.eu","received_at":1,"properties":{"_AMQ_DUPL_ID":"k"}}',
             b'{"message_id":"d2","address":"orders.us","received_at":1,"properties":{"_AMQ_BRIDGE_DUP":"k"}}',
             b'{"message_id":"o1","address":"off","received_at":1,"properties":{"_AMQ_DUPL_ID":"k"}}',
             b'{"message_id":"e1","address":"orders","received_at":1,"properties":{"_AMQ_DUPL_ID":""}}']
    (tmp_path / "raw" / "a.jsonl").write_bytes(b"\n".join(lines))
    settings = parse_settings({"address_settings": {
        "orders.*": {"domain": "shop", "id_cache_size": 5}, "off": {"id_cache_size": 0}}})
    table = parsing.parse_on_driver(read_on_driver(HadoopFS(spark), list_input_files(
        HadoopFS(spark), str(tmp_path / "raw"))))
    domains = _domains(parsing.census_on_driver(table)[1], settings)
    on_driver = driver_decide.key_columns(table, domains)
    in_spark = (parsing.with_cache_keys(transforms.split_valid(spark.createDataFrame(table))[0],
                                        _domain_frame(spark, domains))
                .select(*transforms.KEY_COLUMNS).toArrow())
    assert on_driver.column_names == transforms.KEY_COLUMNS
    assert on_driver.sort_by("row_id").to_pylist() == in_spark.sort_by("row_id").to_pylist()
    keys = {row["message_id"]: (row["cache"], row["dedup_key"]) for row in on_driver.to_pylist()}
    assert keys["k1"] == ("orders", "k") and keys["k2"] == ("BRIDGE.orders", "b")
    assert keys["b1"] == ("BRIDGE.orders", "q")  # the bridge's id first
    assert keys["d1"] == ("shop", "k") and keys["d2"] == ("BRIDGE.shop", "k") and keys["e1"] == ("orders", "")
    assert keys["o1"] == keys["m"] == keys["k4"] == (None, None) and "k3" not in keys  # k3: an invalid line


def test_the_driver_reads_a_snapshot_as_spark_does(spark, tmp_path):
    """HadoopFS.read_parquet, which reads a small parent snapshot for a batch decided on the
    driver (planning.snapshot_on_driver), against Spark's reading of it with the declared schema:
    every row of every part file, Spark's markers skipped, and the columns a snapshot written
    before policies existed lacks read as null."""
    rows = [("c", f"k{i}", i, f"m{i}", "a", "b0", i * 1000 if i % 2 else None, "S1" if i % 3 else None,
             "S1" if i % 3 == 1 else None) for i in range(50)]
    now = spark.createDataFrame(rows, transforms.SNAPSHOT_SCHEMA).repartition(3)
    older = now.select(*transforms.SNAPSHOT_COLUMNS[:6])
    fs = HadoopFS(spark)
    for name, frame in (("now", now), ("older", older)):
        path = str(tmp_path / name)
        frame.write.parquet(path)
        assert len(list((tmp_path / name).glob("part-*.parquet"))) > 1 and (tmp_path / name / "_SUCCESS").exists()
        on_driver = fs.read_parquet(path, transforms.SNAPSHOT_ARROW_SCHEMA)
        in_spark = spark.read.schema(transforms.SNAPSHOT_SCHEMA).parquet(path).toArrow()
        assert on_driver.schema == transforms.SNAPSHOT_ARROW_SCHEMA
        assert on_driver.sort_by("cache_seq").to_pylist() == in_spark.sort_by("cache_seq").to_pylist()
        assert on_driver.num_rows == 50
    assert fs.read_parquet(str(tmp_path / "older"), transforms.SNAPSHOT_ARROW_SCHEMA)["queue"].null_count == 50
