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

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from msgdedup.engine.filesystem import HadoopFS

JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)

# Column names of the raw-lines frame.
RAW = "raw"
FILE_URI = "file_uri"
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


def _json_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    lines = (
        spark.read.format("text").load(paths)
        .select(
            F.col("value").cast("binary").alias(RAW),
            F.col("_metadata.file_path").alias(FILE_URI),
            F.col("_metadata.file_block_start").alias("block_start"),
            F.monotonically_increasing_id().alias("row_in_task"),
        )
    )
    blocks = (
        lines.groupBy(FILE_URI, "block_start")
        .agg(F.min("row_in_task").alias("first_row"), F.count(F.lit(1)).alias("rows"))
        .withColumn(
            "lines_before",
            F.coalesce(
                F.sum("rows").over(
                    Window.partitionBy(FILE_URI).orderBy("block_start")
                    .rowsBetween(Window.unboundedPreceding, -1)
                ),
                F.lit(0),
            ),
        )
        .select(FILE_URI, "block_start", "first_row", "lines_before")
    )
    return (
        lines.join(F.broadcast(blocks), [FILE_URI, "block_start"])
        .select(
            RAW,
            FILE_URI,
            (F.col("lines_before") + F.col("row_in_task") - F.col("first_row") + 1).alias(LINE_NUMBER),
        )
    )


def _parquet_rows(spark: SparkSession, paths: list[str]) -> DataFrame:
    # Parquet rows go through the same validation as JSON lines: each row becomes its JSON text.
    rows = spark.read.option("mergeSchema", "true").parquet(*paths)
    data_columns = [c for c in rows.columns]
    return rows.select(
        F.to_json(
            F.struct(*[F.col(f"`{c}`") for c in data_columns]),
            {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"},  # keep microseconds
        ).cast("binary").alias(RAW),
        F.col("_metadata.file_path").alias(FILE_URI),
        (F.col("_metadata.row_index") + 1).alias(LINE_NUMBER),
    )


def read_lines(spark: SparkSession, files: list[InputFile]) -> DataFrame | None:
    """Every input line as (raw bytes, file uri, line number); None for an empty batch."""
    frames = []
    json_paths = [f.path for f in files if f.format == "json" and f.size > 0]
    parquet_paths = [f.path for f in files if f.format == "parquet" and f.size > 0]
    if json_paths:
        frames.append(_json_lines(spark, json_paths))
    if parquet_paths:
        frames.append(_parquet_rows(spark, parquet_paths))
    if not frames:
        return None
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
