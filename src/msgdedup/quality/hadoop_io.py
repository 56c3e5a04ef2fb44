"""Small text I/O on Hadoop paths, through the JVM of the running Spark application.

The warehouse is a Hadoop path (local directory, ``hdfs://``, ...), so the gate reads the
manifest and writes its summary with Hadoop's FileSystem, the same way Spark reads the
Parquet outputs: the gate then works on whatever file system the engine wrote to, without a
second client library.
"""

from __future__ import annotations

from urllib.parse import urlparse

from pyspark.sql import SparkSession


def _fs_and_path(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return fs, hadoop_path


def exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _fs_and_path(spark, path)
    return bool(fs.exists(hadoop_path))


def read_text(spark: SparkSession, path: str) -> str | None:
    """The whole file as UTF-8 text, or None when it does not exist (manifests are small)."""
    fs, hadoop_path = _fs_and_path(spark, path)
    if not fs.exists(hadoop_path):
        return None
    jvm = spark.sparkContext._jvm
    stream = fs.open(hadoop_path)
    try:
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file renamed over the target.

    Readers (the Airflow view) may read the summary while a rerun of the gate rewrites it;
    a rename means they see the old or the new file, never half of one.
    """
    fs, hadoop_path = _fs_and_path(spark, path)
    jvm = spark.sparkContext._jvm
    tmp = jvm.org.apache.hadoop.fs.Path(hadoop_path.getParent(), "." + hadoop_path.getName() + ".tmp")
    stream = fs.create(tmp, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    if fs.exists(hadoop_path):
        fs.delete(hadoop_path, False)
    if not fs.rename(tmp, hadoop_path):
        raise OSError(f"cannot rename {tmp.toString()} to {path}")


def local_directory(path: str) -> str | None:
    """The local file-system path of ``path``, or None when it lives on another file system.

    GX writes Data Docs and its validation store with Python's own file functions, so they
    can only go to a local (or mounted) directory.
    """
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else path
    return None
