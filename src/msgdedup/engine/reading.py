"""Reading one raw batch: its files, and every line with the position it had in its file.

Position matters twice: it breaks arrival-order ties (file path, then line number), and it is
how a data engineer finds a quarantined line again. Spark's text reader splits large files
across tasks and does not number lines, so the line number is rebuilt from each split's start
offset (``_metadata.file_block_start``) and the rows' order inside the split: rows of one split
are contiguous in one task, so ``monotonically_increasing_id`` minus the split's smallest id is
the line's index in the split, and the lines of earlier splits of the same file come before it.
That keeps reading fully parallel without collecting anything but per-split counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from msgdedup.engine.filesystem import HadoopFS

JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)

# Column names of the raw-lines frame.
RAW = "raw"
FILE_URI = "file_uri"
FILE_INDEX = "file_index"
SOURCE_FILE = "source_file"
LINE_NUMBER = "line_number"


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
    """The batch's data files, sorted by path (the tie-break order of arrival)."""
    if fs.is_glob(input_path):
        candidates = [f for f in fs.glob(input_path) if not f.is_dir]
        if not candidates:
            raise InputError(f"no files match {input_path}")
    elif not fs.exists(input_path):
        raise InputError(f"input path does not exist: {input_path}")
    elif fs.is_dir(input_path):
        candidates = [f for f in fs.list(input_path) if not f.is_dir]
    else:
        candidates = [fs.stat(input_path)]

    files = []
    for info in candidates:
        if _is_hidden(info.name):
            continue
        lower = info.name.lower()
        if lower.endswith(JSON_SUFFIXES):
            files.append(InputFile(info.path, info.size, "json"))
        elif lower.endswith(PARQUET_SUFFIXES):
            files.append(InputFile(info.path, info.size, "parquet"))
        else:
            raise InputError(
                f"unsupported input file {info.path}: expected *.jsonl, *.json (optionally .gz) or *.parquet"
            )
    return sorted(files, key=lambda f: f.path)


def file_key(uri: str) -> str:
    """Spark reports file paths URL-encoded; Hadoop's listing does not. This is the common form."""
    return unquote(uri)


def _file_table(uris: list[str], files: list[InputFile]) -> dict[str, tuple[int, str]]:
    """Spark's uri of each file -> (rank of its path, path as listed): the tie-break and the name
    a data engineer sees."""
    ranks = {f.path: i for i, f in enumerate(files)}
    return {uri: (ranks[file_key(uri)], file_key(uri)) for uri in uris}


def _json_lines(spark: SparkSession, files: list[InputFile], listing: list[InputFile]) -> DataFrame:
    lines = (
        spark.read.format("text").load([f.path for f in files])
        .select(
            F.col("value").cast("binary").alias(RAW),
            F.col("_metadata.file_path").alias(FILE_URI),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.monotonically_increasing_id().alias("row_in_task"),
        )
    )
    # One row per split: small, so the running line count per file is done here in Python.
    blocks = (
        lines.groupBy(FILE_URI, "block_start")
        .agg(F.min("row_in_task").alias("first_row"), F.count(F.lit(1)).alias("rows"))
        .collect()
    )
    table = _file_table(sorted({b[FILE_URI] for b in blocks}), listing)
    rows, before = [], {}
    for b in sorted(blocks, key=lambda b: (b[FILE_URI], b["block_start"])):
        index, path = table[b[FILE_URI]]
        seen = before.get(b[FILE_URI], 0)
        rows.append((b[FILE_URI], b["block_start"], b["first_row"], seen, index, path))
        before[b[FILE_URI]] = seen + b["rows"]
    block_table = spark.createDataFrame(
        rows, f"{FILE_URI} string, block_start long, first_row long, lines_before long, "
              f"{FILE_INDEX} int, {SOURCE_FILE} string")
    return (
        lines.join(F.broadcast(block_table), [FILE_URI, "block_start"])
        .select(
            RAW, FILE_INDEX, SOURCE_FILE,
            (F.col("lines_before") + F.col("row_in_task") - F.col("first_row") + 1).alias(LINE_NUMBER),
        )
    )


def _parquet_rows(spark: SparkSession, files: list[InputFile], listing: list[InputFile]) -> DataFrame:
    # Parquet rows go through the same validation as JSON lines: each row becomes its JSON text.
    rows = spark.read.option("mergeSchema", "true").parquet(*[f.path for f in files])
    data_columns = [c for c in rows.columns]
    rows = rows.select(
        F.to_json(
            F.struct(*[F.col(f"`{c}`") for c in data_columns]),
            {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"},  # keep microseconds
        ).cast("binary").alias(RAW),
        F.col("_metadata.file_path").alias(FILE_URI),
        (F.col("_metadata.row_index") + 1).alias(LINE_NUMBER),
    )
    uris = [r[0] for r in rows.select(FILE_URI).distinct().collect()]
    table = _file_table(uris, listing)
    file_table = spark.createDataFrame(
        [(uri, *table[uri]) for uri in uris], f"{FILE_URI} string, {FILE_INDEX} int, {SOURCE_FILE} string")
    return rows.join(F.broadcast(file_table), FILE_URI).select(RAW, FILE_INDEX, SOURCE_FILE, LINE_NUMBER)


def read_lines(spark: SparkSession, files: list[InputFile]) -> DataFrame | None:
    """Every input line as (raw bytes, file index, source file, line number); None for an empty
    batch. ``files`` is the sorted listing: the file index is the rank of the file's path."""
    frames = []
    json_files = [f for f in files if f.format == "json" and f.size > 0]
    parquet_files = [f for f in files if f.format == "parquet" and f.size > 0]
    if json_files:
        frames.append(_json_lines(spark, json_files, files))
    if parquet_files:
        frames.append(_parquet_rows(spark, parquet_files, files))
    if not frames:
        return None
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
