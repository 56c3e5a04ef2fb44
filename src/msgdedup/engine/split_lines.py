"""How many lines each split of a batch's JSON-lines files holds, counted by the driver.

reading.py numbers the lines from per-split counts: for every split Spark's text scan reads (a
file and the offset it starts at), its lines and the smallest ``monotonically_increasing_id`` of
its rows. Spark counts them in a job of its own, a pass over every byte before the parse: at 1M
messages about 2.5 s of the driver's time in a cold application, the job and the query planned
and compiled for it; without them the parse step took 0.3-1.6 s less (docs/benchmarks.md, "The
splits' lines counted by the driver"). For plain files on the local file system the driver finds
the same numbers without a job:

* the splits and the tasks that read them are the scan's own (its ``FilePartition``s, read from
  the planned query through py4j: the layout the parse's query plans again from the same
  relation and settings), so each split's first id is its task's index shifted as
  ``monotonically_increasing_id`` shifts it, plus the lines of the splits before it in that task;
* each split's lines are counted by Hadoop's line reader's rule for a one-byte separator (its
  ``LineRecordReader``): a split that starts at 0 owns the lines that start in ``[0, end]``, any
  other split those that start in ``(start, end]``, where a line starts at 0 or right after a
  ``\\n`` that is not the file's last byte. So a split owns a line for each ``\\n`` in
  ``[start, end - 1]`` (but the file's last byte), and one more if it starts the file.

Anything else is left to Spark's job (``None``): more than ``MOST_SPLITS`` splits, a compressed
file, a file on another file system, a file that starts with a byte order mark (Hadoop's reader
treats a file of a mark alone apart), a split inside a single line (Hadoop's reader gives that
split a piece of the line), and any error reading a file (the job is where an unreadable file
shows, reading.py probes it).
tests/engine/test_split_lines.py holds the counts to Spark's job's over random files and splits.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

# The most splits the driver counts: each costs it some ten py4j calls (about half a millisecond
# each), so a batch of many small files is left to the job, which reads them in a few tasks.
MOST_SPLITS = 128
# ``monotonically_increasing_id``: a task's index in the upper 31 bits, its row's in the lower 33.
_TASK_SHIFT = 33
# Bytes read at a time: what the driver holds of a file while counting its lines.
_CHUNK = 16 << 20
_BOM = b"\xef\xbb\xbf"


def counted_on_driver(lines: DataFrame, most_splits: int = MOST_SPLITS) -> list[tuple[str, int, int, int]] | None:
    """(file uri as ``_metadata.file_path`` gives it, split start, first row id, lines) of every
    split of ``lines`` (reading._text's frame) that has a line, as Spark's job over them would
    count them; None where the driver cannot (the module's docstring), or where the scan reads
    more than ``most_splits`` splits."""
    splits = _splits(lines, most_splits)
    if splits is None:
        return None
    counts: list[tuple[str, int, int, int]] = []
    in_task: dict[int, int] = {}  # lines of each task's splits so far
    try:
        for task, uri, path, start, length, size in splits:
            rows = _lines_in_split(path, start, length, size)
            if rows is None:
                return None
            before = in_task.get(task, 0)
            in_task[task] = before + rows
            if rows:
                counts.append((uri, start, (task << _TASK_SHIFT) + before, rows))
    except OSError:  # the job reads it again, and tells a file system's failure from the content's
        return None
    return counts


def _splits(lines: DataFrame, most_splits: int = MOST_SPLITS) -> list[tuple[int, str, str, int, int, int]] | None:
    """(task index, uri, local path, start, length, file size) of each split the scan of ``lines``
    reads, in each task's order; None unless every file is a plain file on the local file system
    and there are at most ``most_splits`` splits."""
    jvm = lines.sparkSession._jvm
    plan = lines._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    if leaves.size() != 1 or leaves.apply(0).getClass().getSimpleName() != "FileSourceScanExec":
        return None
    scan = leaves.apply(0)
    conf = lines.sparkSession._jsc.hadoopConfiguration()
    codecs = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(conf)
    partitions = scan.inputRDD().filePartitions()
    tasks = [(partition.index(), partition.files())
             for partition in (partitions.apply(i) for i in range(partitions.size()))]
    if sum(len(files) for _, files in tasks) > most_splits:
        return None
    splits, files = [], {}
    for task, in_task in tasks:
        for file in in_task:
            path = file.filePath().toPath()
            key = path.toString()
            if key not in files:
                uri = path.toUri()
                if uri.getScheme() != "file" or codecs.getCodec(path) is not None:
                    return None
                # as Spark's _metadata.file_path is made (FileFormat.BASE_METADATA_EXTRACTORS)
                files[key] = (jvm.org.apache.hadoop.fs.Path(key).toUri().toString(), uri.getPath(),
                              file.fileSize())
            uri_text, local, size = files[key]
            splits.append((task, uri_text, local, file.start(), file.length(), size))
    return splits


def _lines_in_split(path: str, start: int, length: int, size: int) -> int | None:
    """The lines the split ``[start, start + length)`` of the file at ``path`` (``size`` bytes)
    owns, by Hadoop's line reader's rule; None where that rule is not this simple one."""
    end = min(start + length, size)
    newlines, last = 0, b""
    with open(path, "rb") as file:
        if start == 0 and file.read(len(_BOM)) == _BOM:
            return None
        file.seek(start)
        at = start
        while at < end:
            chunk = file.read(min(_CHUNK, end - at))
            if not chunk:  # the file is shorter than Spark listed it: let the job read it
                return None
            newlines += chunk.count(b"\n")
            at += len(chunk)
            last = chunk[-1:]
    if start > 0 and newlines == 0:
        return None  # the split lies inside one line: Hadoop's reader gives it a piece of it
    if end == size and last == b"\n":
        newlines -= 1  # the file's last byte ends its last line; no line starts after it
    return newlines + (1 if start == 0 else 0)
