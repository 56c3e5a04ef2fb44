"""driver_outputs.py against transforms.py: a batch read and decided on the driver gets, from
pyarrow, the outputs Spark's joins give the same rows and verdicts, column for column, in input
order, and batch._write_table writes them as Spark's writer does. The engine-vs-model property
tests (test_properties.py, the "driver" and "collected" plans) run it on whole batches."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrameReader, SparkSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgdedup.config import parse_settings
from msgdedup.engine import batch, driver_decide, driver_outputs, kernel, parsing, transforms, windows
from msgdedup.engine.batch import run_batch
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.reading import list_input_files, read_on_driver

from tests.engine.scenarios import CONFIGS, MALFORMED, batch_files
from tests.engine.support import manifest, message, write_batch
from tests.engine.test_parsing import CURATED


def _both(spark, root, config: dict) -> dict[str, tuple[pa.Table, pa.Table]]:
    """Per output, (Spark's rows, the driver's) of the batch in ``root`` decided on the driver."""
    files = list_input_files(HadoopFS(spark), str(root))
    table = parsing.parse_on_driver(read_on_driver(HadoopFS(spark), files))
    _, _, keyed = parsing.census_on_driver(table)
    settings_ = parse_settings(config)
    caches = windows.resolve(settings_, {}, keyed)
    addresses = {a for a in table["address"].to_pylist() if a is not None}
    keys = driver_decide.key_columns(table, batch._domains(addresses, settings_))
    decision = driver_decide.decide(keys, None, caches, "b1", [f.path for f in files])
    parsed = spark.createDataFrame(table, parsing.PARSED_SPARK_SCHEMA)
    valid, invalid = transforms.split_valid(parsed)
    verdicts = spark.createDataFrame(decision.verdicts)
    copies = spark.createDataFrame(decision.copies) if decision.copies.num_rows else None
    in_spark = {
        "delivered": transforms.delivered(valid, transforms.verdicts_for(verdicts, kernel.DELIVERED, keys=True)),
        "dropped": transforms.dropped(valid, transforms.verdicts_for(verdicts, kernel.DROPPED, keys=True)),
        "quarantine": transforms.quarantine(invalid, valid, copies),
    }
    on_driver = {
        "delivered": driver_outputs.delivered(table, decision.verdicts),
        "dropped": driver_outputs.dropped(table, decision.verdicts),
        "quarantine": driver_outputs.quarantine(table, decision.copies),
    }
    return {name: (frame.toArrow(), on_driver[name]) for name, frame in in_spark.items()}


def _assert_same(spark_rows: pa.Table, driver_rows: pa.Table) -> None:
    assert driver_rows.schema.names == spark_rows.schema.names
    assert [f.type for f in driver_rows.schema] == [f.type for f in spark_rows.schema]
    place = list(zip(driver_rows["source_file"].to_pylist(), driver_rows["line_number"].to_pylist(), strict=True))
    assert place == sorted(place), "input order"
    by_place = lambda rows: sorted(  # noqa: E731 - maps as entry lists: their order is the line's
        (tuple(sorted(v) if isinstance(v, list) else v for v in row.values()) for row in rows.to_pylist()),
        key=repr)
    assert by_place(driver_rows) == by_place(spark_rows)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(files=batch_files(0), config=st.integers(0, len(CONFIGS) - 1))
def test_the_driver_makes_the_outputs_spark_makes(spark, tmp_path_factory, files, config):
    root = tmp_path_factory.mktemp("raw")
    write_batch(root, files)
    for spark_rows, driver_rows in _both(spark, root, CONFIGS[config]).values():
        _assert_same(spark_rows, driver_rows)


def test_every_kind_of_line_and_a_repeated_message_id(spark, tmp_path):
    """The parser's curated lines (properties, extra fields, bad lines), malformed ones, a repeated
    message id (quarantined), duplicates by key (dropped) and a transaction, in two files."""
    first = [message("m1", key="k", at=1), message("m2", key="k", at=2), message("m1", key="j", at=3),
             message("t1", key="x", at=4, txn="T"), message("t2", key="k", at=5, txn="T"), *MALFORMED]
    write_batch(tmp_path / "raw", {"a.jsonl": first, "b.jsonl": [line.encode() for line in CURATED]})
    both = _both(spark, tmp_path / "raw", CONFIGS[0])
    for spark_rows, driver_rows in both.values():
        _assert_same(spark_rows, driver_rows)
    assert {name: rows.num_rows > 0 for name, (_, rows) in both.items()} == \
        {"delivered": True, "dropped": True, "quarantine": True}
    assert "duplicate message_id" in " ".join(both["quarantine"][1]["error"].to_pylist())


def test_written_by_the_driver_as_spark_writes_them(spark, tmp_path):
    """The same Parquet columns, types and rows as Spark's writer gives (instants as INT96)."""
    write_batch(tmp_path / "raw", {"a.jsonl": [message(f"m{i}", key=f"k{i % 3}", at=i) for i in range(9)]})
    spark_rows, driver_rows = _both(spark, tmp_path / "raw", CONFIGS[0])["delivered"]
    fs = HadoopFS(spark)
    by_spark = batch._write_counted(spark.createDataFrame(spark_rows), str(tmp_path / "spark"))
    by_driver = batch._write_table(fs, driver_rows, str(tmp_path / "driver"))
    assert by_spark == by_driver == 3  # one delivered message per key
    read = {name: spark.read.parquet(str(tmp_path / name)) for name in ("spark", "driver")}
    assert read["driver"].schema == read["spark"].schema
    assert sorted(read["driver"].collect()) == sorted(read["spark"].collect())
    [part] = (tmp_path / "driver").glob("*.parquet")
    kinds = {c.name: c.physical_type for c in pq.ParquetFile(part).schema}
    assert kinds["received_at"] == "INT96" and (tmp_path / "driver" / "_SUCCESS").exists()


def test_a_batch_made_on_the_driver_makes_no_spark_frame(spark, tmp_path, monkeypatch):
    """Read, decided and written by the driver, with no parent and the audit off, a batch needs no
    Spark frame of the driver's tables: each is a transfer to the JVM, and the first one of an
    application starts its Arrow reader (batch._MadeWhenRead). Its child, whose parent the driver
    reads, needs none either, nor a Spark frame of that snapshot (in a fresh application, Spark's
    Parquet source took 0.5-0.6 s to make it); with the audit on, the frames the audit reads are made."""
    write_batch(tmp_path / "raw1", {"a.jsonl": [message(f"m{i}", key=f"k{i % 4}", at=i) for i in range(8)]})
    write_batch(tmp_path / "raw2", {"a.jsonl": [message(f"n{i}", key=f"k{i % 6}", at=20 + i) for i in range(8)]})
    made = []
    create = SparkSession.createDataFrame

    def counted(self, *args, **kwargs):
        made.append(args[0] if args else kwargs.get("data"))
        return create(self, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "createDataFrame", counted)
    read = []
    parquet = DataFrameReader.parquet

    def read_counted(self, *paths, **options):
        read.extend(paths)
        return parquet(self, *paths, **options)

    monkeypatch.setattr(DataFrameReader, "parquet", read_counted)
    run_batch(spark, str(tmp_path / "raw1"), str(tmp_path / "wh"), "2026-11-21T00")
    run_batch(spark, str(tmp_path / "raw2"), str(tmp_path / "wh"), "2026-11-21T01")
    assert made == [] and read == []
    counts = manifest(tmp_path / "wh", "2026-11-21T01")["counts"]
    assert (counts["delivered"], counts["dropped"]) == (2, 6)  # k4 and k5 are new, k0-k3 in the parent's cache

    audited = parse_settings({"address_settings": {"#": {"id_cache_size": 100}}, "window_audit": {"horizon": 2}})
    run_batch(spark, str(tmp_path / "raw1"), str(tmp_path / "wh-audit"), "2026-11-21T00", audited)
    assert made, "the audit reads the decided frames"
