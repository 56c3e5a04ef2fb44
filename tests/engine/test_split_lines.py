"""The splits' line counts found by the driver (engine/split_lines.py) against Spark's own job
over the same scan: the same splits, first row ids and lines, or no answer at all."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgdedup.engine import reading, split_lines

_LINE = st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"x"))
_ENDING = st.sampled_from([b"\n", b"\r\n"])
_FILE = st.tuples(st.lists(st.tuples(_LINE, _ENDING), min_size=1, max_size=60), st.booleans())


def _spark_counts(lines):
    return sorted(reading.counted_by_spark(lines))


def _write(directory, files):
    paths = []
    for i, (file_lines, last_ended) in enumerate(files):
        data = b"".join(line + ending for line, ending in file_lines)
        if not last_ended:
            data = data[:-len(file_lines[-1][1])]  # the last line without its ending
        path = directory / f"part {i}%[x].jsonl"  # a name Spark escapes and encodes
        path.write_bytes(data or b"x")
        paths.append(str(path))
    return paths


@pytest.fixture
def small_splits(spark):
    """Splits of a few hundred bytes, several to a task: every boundary case comes up."""
    def use(split_bytes, open_cost):
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(split_bytes))
        spark.conf.set("spark.sql.files.openCostInBytes", str(open_cost))
    yield use
    spark.conf.unset("spark.sql.files.maxPartitionBytes")
    spark.conf.unset("spark.sql.files.openCostInBytes")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(_FILE, min_size=1, max_size=4), split_bytes=st.integers(64, 4000),
       open_cost=st.sampled_from([1, 100, 4 << 20]))
def test_the_driver_counts_each_split_as_spark_does(spark, tmp_path_factory, small_splits, files, split_bytes,
                                                     open_cost):
    small_splits(split_bytes, open_cost)
    lines = reading._text(spark, _write(tmp_path_factory.mktemp("raw"), files))
    counted = split_lines.counted_on_driver(lines, most_splits=1 << 20)
    if counted is None:  # only for a file that starts with a byte order mark, or a split (not a
        # file's first) that lies inside one line
        apart = []
        for _, _, path, start, length, _ in split_lines._splits(lines, most_splits=1 << 20):
            with open(path, "rb") as file:
                apart.append(file.read(3) == b"\xef\xbb\xbf")
                file.seek(start)
                apart.append(start > 0 and b"\n" not in file.read(length))
        assert any(apart)
        return
    assert sorted(counted) == _spark_counts(lines)


def test_a_large_file_in_many_splits(spark, tmp_path, small_splits):
    """Lines of many lengths, a last line without its ending, an empty line and a lone CR."""
    body = b"".join(b"y" * (i % 97) + (b"\r" if i % 11 == 0 else b"") + b"\n" for i in range(5000)) + b"\n" + b"tail"
    (tmp_path / "big.jsonl").write_bytes(body)
    (tmp_path / "small.jsonl").write_bytes(b"one\ntwo\n")
    small_splits(16 * 1024, 1)
    lines = reading._text(spark, [str(tmp_path / "big.jsonl"), str(tmp_path / "small.jsonl")])
    counted = split_lines.counted_on_driver(lines)
    assert counted is not None and len(counted) > 10
    assert sorted(counted) == _spark_counts(lines)
    assert sum(rows for *_, rows in counted) == 5000 + 1 + 1 + 2
    # a scan of more splits than the driver takes on is left to the job
    assert split_lines.counted_on_driver(lines, most_splits=len(counted) - 1) is None


@pytest.mark.parametrize("name, content", [
    ("bom.jsonl", b"\xef\xbb\xbf{}\n{}\n"),   # Hadoop's reader treats a file's byte order mark apart
    ("packed.jsonl.gz", gzip.compress(b"{}\n{}\n", mtime=0)),  # a compressed file is read by its codec
], ids=["byte order mark", "gzip"])
def test_left_to_spark_where_the_rule_is_not_the_simple_one(spark, tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    (tmp_path / "plain.jsonl").write_bytes(b"{}\n")
    lines = reading._text(spark, [str(tmp_path / name), str(tmp_path / "plain.jsonl")])
    assert split_lines.counted_on_driver(lines) is None


def test_left_to_spark_when_a_file_cannot_be_read(spark, tmp_path):
    """The job is where an unreadable file shows (reading._readable probes it): the driver does
    not answer for a file it cannot read."""
    path = tmp_path / "gone.jsonl"
    path.write_bytes(b"{}\n")
    lines = reading._text(spark, [str(path)])
    lines._jdf.queryExecution().executedPlan()  # planned while the file was there
    path.unlink()
    assert split_lines.counted_on_driver(lines) is None
