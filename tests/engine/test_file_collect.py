"""collect_through_files: a frame's rows on the driver through Parquet files, as toArrow gives them."""

from __future__ import annotations

import pytest

from msgdedup import layout
from msgdedup.engine import parsing, unit_ranks
from msgdedup.engine.file_collect import collect_through_files
from msgdedup.engine.filesystem import HadoopFS


def _census_like(spark, partitions: int):
    """Rows of the census's column types (parsing.CENSUS_COLUMNS, unit_ranks.census_columns(True)),
    nulls among them, over ``partitions`` partitions: the order of eleven and more part files is
    the order of the partitions."""
    return spark.range(0, 3000, numPartitions=partitions).selectExpr(
        "id % 7 = 0 as slow", "id % 5 <> 0 as valid",
        "if(id % 11 = 0, null, concat('address-', id % 13)) as address_seen", "id % 3 = 0 as bridge",
        "(id % 4) << 40 | id as row_id", "xxhash64(id) as id_hash", "if(id % 6 = 0, null, xxhash64(id, 1)) as key_hash",
        "hash(id % 13) as cache_hash", "hash(id % 17) as address_hash", "id * 1000 as received_us",
        "if(id % 2 = 0, null, concat('T', id)) as txn_id", "if(id % 9 = 0, null, xxhash64(id, 2)) as sender_hash")


@pytest.mark.parametrize("partitions", [1, 12])
def test_the_rows_are_what_to_arrow_gives_in_its_order(spark, tmp_path, partitions):
    frame = _census_like(spark, partitions)
    assert frame.columns == [*parsing.CENSUS_COLUMNS, *unit_ranks.COLLECTED, unit_ranks.SENDER]
    scratch = layout.scratch_dir(str(tmp_path / "staging"), "census")
    table = collect_through_files(frame, scratch, HadoopFS(spark))
    expected = frame.toArrow()
    assert table.schema == expected.schema
    assert table.to_pylist() == expected.to_pylist()
    assert not (tmp_path / "staging" / layout.SCRATCH / "census").exists(), "deleted once read"


def test_no_rows_keep_their_schema(spark, tmp_path):
    frame = _census_like(spark, 3).filter("false")
    table = collect_through_files(frame, str(tmp_path / "empty"), HadoopFS(spark))
    assert table.num_rows == 0 and table.schema == frame.toArrow().schema


def test_a_directory_that_exists_is_refused_and_left_as_it_was(spark, tmp_path):
    """A scratch directory is the run's own: one that exists is not this collect's, so it is
    neither written into nor deleted."""
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "someone.txt").write_text("not ours")
    with pytest.raises(Exception, match="already exists"):
        collect_through_files(_census_like(spark, 2), str(taken), HadoopFS(spark))
    assert (taken / "someone.txt").read_text() == "not ours"
