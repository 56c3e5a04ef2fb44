"""Reading one raw batch: its files, and every line with the position it had in its file.

Position matters twice: it breaks arrival-order ties (file path, then line number), and it is
how a data engineer finds a quarantined line again. Spark's text reader splits large files
across tasks and does not number lines, so the line number is rebuilt from each split's start
offset (``_metadata.file_block_start``) and the rows' order inside the split: rows of one split
are contiguous in one task, so ``monotonically_increasing_id`` minus the split's smallest id is
the line's index in the split, and the lines of earlier splits of the same file come before it.
That keeps reading fully parallel without collecting anything but per-split counts.

What the listing and the reader promise (docs/semantics.md §1, "Files"):

* every data file under the input is read, at any depth, in path order; a symbolic link inside
  the partition is refused (``InputError``), never followed, so no file from outside the
  partition can end up in the outputs;
* file names are taken literally: Spark is given escaped paths, so ``a[1].jsonl`` is not a glob;
* a line ends at ``\n`` (a ``\r`` right before it belongs to the line ending, a lone ``\r`` to
  the line), and a UTF-8 byte order mark at the start of a file is not part of its first line;
* a file whose content cannot be read (a truncated ``.gz``, a corrupt Parquet file) becomes one
  row with ``READ_ERROR`` set, line number 0, and none of its lines: the books still balance
  and the batch goes on. Only failures of the file system itself (a missing or forbidden file)
  stop the run, because a retry can fix them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from msgdedup.engine import split_lines
from msgdedup.engine.filesystem import HadoopFS
from msgdedup.engine.planning import counts_lines_on_driver
from msgdedup.local_frames import local_frame

JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)

# Column names of the raw-lines frame.
RAW = "raw"
FILE_URI = "file_uri"
FILE_INDEX = "file_index"
SOURCE_FILE = "source_file"
LINE_NUMBER = "line_number"
READ_ERROR = "read_error"  # why a whole file could not be read; null on every line of a readable file

# The line number of the one row that stands for an unreadable file: the file as a whole.
WHOLE_FILE = 0
_BOM = b"\xef\xbb\xbf"
_LINE_SEPARATOR = "\n"
# Hadoop reads these as glob syntax in any path it is given; a backslash makes them literal.
_GLOB_SYNTAX = re.compile(r"([\\\[\]{}*?])")
# Root causes that mean the file system failed, not the file's content: a retry can succeed.
_FILE_SYSTEM_ERRORS = ("java.io.FileNotFoundException", "org.apache.hadoop.security.AccessControlException",
                       "java.nio.file.AccessDeniedException")


class InputError(ValueError):
    """The input cannot be read as a batch (missing path, unsupported file type, ...)."""


@dataclass(frozen=True)
class InputFile:
    path: str
    size: int
    format: str  # "json" or "parquet"


def _is_hidden(name: str) -> bool:
    # _SUCCESS markers, .crc files and the like are not data.
    return name.startswith("_") or name.startswith(".")


def list_input_files(fs: HadoopFS, input_path: str) -> list[InputFile]:
    """The batch's data files, at any depth under the input, sorted by path (the tie-break order
    of arrival). The input itself may be a link; no entry below it (or matched by it, for a glob)
    may be one."""
    if fs.is_glob(input_path):
        roots = [f for f in fs.glob(input_path) if not _is_hidden(f.name)]
        # The glob's matches must not be links either, including links to nothing, which the
        # glob itself does not return: look in every directory a match can be in.
        directory, _, last = input_path.rstrip("/").rpartition("/")
        parents = {root.path.rstrip("/").rsplit("/", 1)[0] for root in roots}
        if directory and not fs.is_glob(directory) and fs.is_dir(directory):
            parents.add(fs.qualify(directory))
        for parent in sorted(parents):
            _refuse_links(fs, parent, lambda name, last=last: fs.glob_matches(last, name))
        if not roots:
            raise InputError(f"no files match {input_path}")
    elif not fs.exists(input_path):
        raise InputError(f"input path does not exist: {input_path}")
    else:
        roots = [fs.stat(input_path)]

    files = {}
    for info in (found for root in roots for found in _walk(fs, root)):
        lower = info.name.lower()
        if lower.endswith(JSON_SUFFIXES):
            files[info.path] = InputFile(info.path, info.size, "json")
        elif lower.endswith(PARQUET_SUFFIXES):
            files[info.path] = InputFile(info.path, info.size, "parquet")
        else:
            raise InputError(
                f"unsupported input file {info.path}: expected *.jsonl, *.json (optionally .gz) or *.parquet"
            )
    return [files[path] for path in sorted(files)]  # once each, even if two glob matches overlap


def _walk(fs: HadoopFS, info):
    """``info`` if it is a file, else every non-hidden file below it; links are refused."""
    if not info.is_dir:
        yield info
        return
    _refuse_links(fs, info.path)
    for child in fs.list(info.path):
        if not _is_hidden(child.name):
            yield from _walk(fs, child)


def _refuse_links(fs: HadoopFS, directory: str, chosen: Callable[[str], bool] = lambda name: True) -> None:
    """InputError for the first data entry of ``directory`` (that ``chosen`` accepts) that is a
    link. Hadoop's listing follows links silently: reading one would put a file from anywhere
    (another partition, /etc/...) into this batch's outputs and the Data quality page, and a link
    to nothing would vanish from the batch without a word."""
    for name, target in sorted(fs.links_in(directory).items()):
        if not _is_hidden(name) and chosen(name):
            raise InputError(
                f"input file {directory.rstrip('/')}/{name} is a symbolic link (to {target}); links inside a "
                f"partition are not followed: put the file itself there")


def literal(path: str) -> str:
    """``path`` as Spark (Hadoop) must be given it to read exactly that file, glob characters and all."""
    return _GLOB_SYNTAX.sub(r"\\\1", path)


def file_key(uri: str) -> str:
    """Spark reports file paths URL-encoded; Hadoop's listing does not. This is the common form."""
    return unquote(uri)


def _file_table(uris: list[str], files: list[InputFile]) -> dict[str, tuple[int, str]]:
    """Spark's uri of each file -> (rank of its path, path as listed): the tie-break and the name
    a data engineer sees."""
    ranks = {f.path: i for i, f in enumerate(files)}
    return {uri: (ranks[file_key(uri)], file_key(uri)) for uri in uris}


def _text(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The lines of JSON-lines files (decompressed by their suffix), each with its file and split."""
    lines = spark.read.format("text").option("lineSep", _LINE_SEPARATOR).load([literal(p) for p in paths])
    raw = F.col("value").cast("binary")
    # CRLF files: the \r is part of the line ending. (Spark's default separator would also end a
    # line at a lone \r, which JSON allows as whitespace inside a line.)
    without_cr = F.when(F.substring(raw, -1, 1) == F.lit(b"\r"),
                        F.expr("substr(cast(value as binary), 1, octet_length(value) - 1)"))
    return lines.select(
        without_cr.otherwise(raw).alias(RAW),
        F.col("_metadata.file_path").alias(FILE_URI),
        F.col("_metadata.file_block_start").alias("block_start"),
        F.monotonically_increasing_id().alias("row_in_task"),
    )


def counted_by_spark(lines: DataFrame) -> list[tuple[str, int, int, int]]:
    """(file uri, split start, first row id, lines) of each split of ``lines`` (``_text``'s) that
    has a line: a job over every byte."""
    return [tuple(row) for row in (
        lines.groupBy(FILE_URI, "block_start")
        .agg(F.min("row_in_task").alias("first_row"), F.count(F.lit(1)).alias("rows"))
        .collect())]


def _json_lines(spark: SparkSession, files: list[InputFile], listing: list[InputFile],
                counted: list[int] | None = None) -> DataFrame:
    """The lines of JSON-lines ``files``, numbered; their count is appended to ``counted``."""
    lines = _text(spark, [f.path for f in files])
    # One row per split: small, so the running line count per file is done here in Python. Counted
    # by the driver where it can (split_lines.py), else by a job: the pass that reads every byte,
    # so it is also where an unreadable file shows.
    blocks = split_lines.counted_on_driver(lines) if counts_lines_on_driver(spark) else None
    if blocks is None:
        blocks = counted_by_spark(lines)
    table = _file_table(sorted({uri for uri, *_ in blocks}), listing)
    rows, before = [], {}
    for uri, block_start, first_row, count in sorted(blocks):
        index, path = table[uri]
        seen = before.get(uri, 0)
        rows.append((uri, block_start, first_row, seen, index, path))
        before[uri] = seen + count
    if counted is not None:
        counted.append(sum(before.values()))
    block_table = local_frame(
        spark, rows, f"{FILE_URI} string, block_start long, first_row long, lines_before long, "
              f"{FILE_INDEX} int, {SOURCE_FILE} string")
    line_number = F.col("lines_before") + F.col("row_in_task") - F.col("first_row") + 1
    raw = F.col(RAW)
    # a byte order mark starts a file, not its first line
    bom = (line_number == 1) & (F.substring(raw, 1, len(_BOM)) == F.lit(_BOM))
    return (
        lines.join(F.broadcast(block_table), [FILE_URI, "block_start"])
        .select(
            F.when(bom, F.expr(f"substr({RAW}, {len(_BOM) + 1})")).otherwise(raw).alias(RAW),
            FILE_INDEX, SOURCE_FILE, line_number.alias(LINE_NUMBER),
            F.lit(None).cast("string").alias(READ_ERROR),
        )
    )


# -- a small batch of plain JSON lines: read here --------------------------------------------------
def plain_json_lines(files: list[InputFile]) -> bool:
    """Whether every file is an uncompressed JSON-lines file: what ``read_on_driver`` reads. (A
    gzip file can be truncated, and Hadoop's codec words that differently from Python's; Parquet
    rows are rendered as JSON by Spark.)"""
    return all(f.format == "json" and not f.path.lower().endswith(".gz") for f in files)


def read_on_driver(fs: HadoopFS, files: list[InputFile]) -> pa.Table:
    r"""Every line of ``files`` (the sorted listing, ``plain_json_lines``) as ``read_lines`` gives
    them (``RAW``, ``FILE_INDEX``, ``SOURCE_FILE``, ``LINE_NUMBER``; no file of this kind has a
    ``READ_ERROR``), read by the driver: a batch of a few MiB is read and split in a fraction of a
    second, where Spark's reading costs a job for the line numbers and one to parse, each planned
    first (seconds in a JVM that has not planned them yet). The same rules as ``_json_lines``: a
    line ends at ``\n``, a ``\r`` right before it belongs to the ending, a byte order mark at the
    start of a file is not part of its first line; empty files have no lines. And as Hadoop's line
    reader, under ``_json_lines``, does: it drops a byte order mark that starts a file before
    ``_json_lines`` drops one more, and a file that is nothing but one has no line at all."""
    columns: dict[str, list] = {RAW: [], FILE_INDEX: [], SOURCE_FILE: [], LINE_NUMBER: []}
    for index, file in enumerate(files):
        data = _file_bytes(fs, file) if file.size else b""
        data = data[len(_BOM):] if data.startswith(_BOM) else data  # Hadoop's LineRecordReader
        if not data:
            continue
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the last line's ending, not a line
        if lines[0].startswith(_BOM):
            lines[0] = lines[0][len(_BOM):]
        columns[RAW] += [line[:-1] if line.endswith(b"\r") else line for line in lines]
        columns[FILE_INDEX] += [index] * len(lines)
        columns[SOURCE_FILE] += [file.path] * len(lines)
        columns[LINE_NUMBER] += range(1, len(lines) + 1)
    return pa.table({RAW: pa.array(columns[RAW], pa.binary()), FILE_INDEX: pa.array(columns[FILE_INDEX], pa.int32()),
                     SOURCE_FILE: pa.array(columns[SOURCE_FILE], pa.string()),
                     LINE_NUMBER: pa.array(columns[LINE_NUMBER], pa.int64())})


def _file_bytes(fs: HadoopFS, file: InputFile) -> bytes:
    """A file's bytes; a failure of the file system is an InputError, as in Spark's reading."""
    try:
        return fs.read_bytes(file.path)
    except OSError as error:  # a local file, read by Python
        raise InputError(f"cannot read input file {file.path}: {error}") from None
    except Exception as error:  # noqa: BLE001 - classified by its root cause
        _raise_if_file_system_error(file, error)
        raise


def _parquet_text(frame: DataFrame) -> DataFrame:
    # Parquet rows go through the same validation as JSON lines: each row becomes its JSON text.
    return frame.select(
        F.to_json(
            F.struct(*[F.col(f"`{c}`") for c in frame.columns]),
            {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"},  # keep microseconds
        ).cast("binary").alias(RAW),
        F.col("_metadata.file_path").alias(FILE_URI),
        (F.col("_metadata.row_index") + 1).alias(LINE_NUMBER),
    )


def _decoded_files(rows: DataFrame) -> list[str]:
    """Decode every value of every row (the JSON text's length needs them all), keeping nothing
    but the files' uris: a corrupt page fails here, where its file can be found, rather than in
    the middle of the batch."""
    return [r[0] for r in rows.groupBy(FILE_URI).agg(F.sum(F.length(RAW))).collect()]


def _parquet_rows(spark: SparkSession, files: list[InputFile], listing: list[InputFile]) -> DataFrame:
    """The rows of Parquet files as JSON text: read together when their schemas merge (the usual
    case), else in groups of one schema each, so that files disagreeing on a column's type (a
    ``message_id`` that is a string in one file and a number in another) are each read as they
    are and their rows validated one by one."""
    paths = [literal(f.path) for f in files]
    try:
        frames = [_parquet_text(spark.read.option("mergeSchema", "true").parquet(*paths))]
        uris = _decoded_files(frames[0])
    except Exception:  # noqa: BLE001 - a conflict is resolved below; anything else fails there again
        groups: dict[str, list[str]] = {}
        for path in paths:
            groups.setdefault(spark.read.parquet(path).schema.json(), []).append(path)
        frames = [_parquet_text(spark.read.parquet(*group)) for group in groups.values()]
        uris = [uri for frame in frames for uri in _decoded_files(frame)]
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    table = _file_table(uris, listing)
    file_table = local_frame(
        spark, [(uri, *table[uri]) for uri in uris], f"{FILE_URI} string, {FILE_INDEX} int, {SOURCE_FILE} string")
    return rows.join(F.broadcast(file_table), FILE_URI).select(
        RAW, FILE_INDEX, SOURCE_FILE, LINE_NUMBER, F.lit(None).cast("string").alias(READ_ERROR))


# -- unreadable files --------------------------------------------------------------------------------
def _probe(spark: SparkSession, file: InputFile) -> str | None:
    """None if ``file`` reads to its end on its own, else why not (as the quarantine says it).
    A failure of the file system rather than of the content is an InputError: the run stops and
    a retry can succeed, where quarantining would leave the file's lines out for good."""
    try:
        if file.format == "json":
            _text(spark, [file.path]).agg(F.count(F.lit(1))).collect()
        else:
            _decoded_files(_parquet_text(spark.read.parquet(literal(file.path))))
        return None
    except Exception as error:  # noqa: BLE001 - classified by its root cause
        cause, message = _raise_if_file_system_error(file, error)
        message = message if len(message) <= 300 else message[:300] + "…"
        return f"unreadable file ({cause}: {message}): none of its lines are in this batch"


def _raise_if_file_system_error(file: InputFile, error: BaseException) -> tuple[str, str]:
    """InputError if ``error`` is the file system's (a missing or forbidden file), not the
    content's; else its root cause (``_root_cause``)."""
    cause, message = _root_cause(error)
    if cause in _FILE_SYSTEM_ERRORS:
        raise InputError(f"cannot read input file {file.path}: {message}") from None
    return cause, message


def _root_cause(error: BaseException) -> tuple[str, str]:
    """The innermost Java exception behind a Spark error: its class name and message."""
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    if java is None:
        return type(error).__name__, str(error).strip().splitlines()[0] if str(error).strip() else ""
    while java.getCause() is not None and not java.getCause().equals(java):
        java = java.getCause()
    return java.getClass().getName(), str(java.getMessage() or "").strip()


def _readable(spark: SparkSession, read, files: list[InputFile], listing: list[InputFile],
              unreadable: dict[str, str]) -> DataFrame | None:
    """``read(files)``; if that fails, each file is probed on its own, the unreadable ones are
    added to ``unreadable`` (path -> reason) and the others read. Nothing extra is read unless
    something failed."""
    try:
        return read(spark, files, listing)
    except InputError:
        raise
    except Exception:
        found = {f.path: reason for f in files if (reason := _probe(spark, f)) is not None}
        if not found:
            raise  # not a file's fault: an internal error
    unreadable.update(found)
    rest = [f for f in files if f.path not in found]
    return read(spark, rest, listing) if rest else None


def _unreadable_rows(spark: SparkSession, unreadable: dict[str, str], listing: list[InputFile]) -> DataFrame:
    """One row per unreadable file, standing for the whole file (line number 0, no raw bytes)."""
    ranks = {f.path: i for i, f in enumerate(listing)}
    return local_frame(
        spark, [(None, ranks[path], path, WHOLE_FILE, reason) for path, reason in sorted(unreadable.items())],
        f"{RAW} binary, {FILE_INDEX} int, {SOURCE_FILE} string, {LINE_NUMBER} long, {READ_ERROR} string")


def read_lines(spark: SparkSession, files: list[InputFile]) -> tuple[DataFrame | None, int | None]:
    """Every input line as (raw bytes, file index, source file, line number, read error), None for
    an empty batch; and how many there are where the reading counted them already (JSON lines
    only: their numbering counts each split's lines; else None). ``files`` is the sorted listing:
    the file index is the rank of the file's path."""
    unreadable: dict[str, str] = {}
    counted: list[int] = []
    frames = []
    for file_format, read in (("json", functools.partial(_json_lines, counted=counted)), ("parquet", _parquet_rows)):
        chosen = [f for f in files if f.format == file_format and f.size > 0]
        if chosen:
            frames.append(_readable(spark, read, chosen, files, unreadable))
    lines = sum(counted) + len(unreadable) if all(f.format == "json" for f in files) else None
    frames = [frame for frame in frames if frame is not None]
    if unreadable:
        frames.append(_unreadable_rows(spark, unreadable, files))
    if not frames:
        return None, 0
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result, lines
