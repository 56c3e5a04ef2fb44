"""Hadoop FileSystem access from the driver.

The warehouse and the input may live on any Hadoop-compatible file system (local, HDFS, ...), so
all driver-side file operations go through Hadoop's own FileSystem API (via the Spark JVM) rather
than Python's ``os``: whatever path Spark can read, the commit protocol can manage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyspark.sql import SparkSession

_GLOB_CHARS = set("*?[{")


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    is_dir: bool

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


class HadoopFS:
    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()

    def _path(self, path: str):
        return self._jvm.org.apache.hadoop.fs.Path(path)

    def _fs(self, jpath):
        return jpath.getFileSystem(self._conf)

    @staticmethod
    def _info(status) -> FileInfo:
        return FileInfo(status.getPath().toString(), int(status.getLen()), bool(status.isDirectory()))

    def qualify(self, path: str) -> str:
        """The fully qualified form (``file:/...``) Spark reports for a path."""
        jpath = self._path(path)
        return self._fs(jpath).makeQualified(jpath).toString()

    def exists(self, path: str) -> bool:
        jpath = self._path(path)
        return bool(self._fs(jpath).exists(jpath))

    def is_dir(self, path: str) -> bool:
        jpath = self._path(path)
        return bool(self._fs(jpath).isDirectory(jpath))

    def list(self, path: str) -> list[FileInfo]:
        """Direct children of a directory, sorted by path; [] when it does not exist."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        if not fs.exists(jpath):
            return []
        return sorted((self._info(s) for s in fs.listStatus(jpath)), key=lambda f: f.path)

    def glob(self, pattern: str) -> list[FileInfo]:
        jpath = self._path(pattern)
        found = self._fs(jpath).globStatus(jpath)
        return sorted((self._info(s) for s in (found or [])), key=lambda f: f.path)

    def stat(self, path: str) -> FileInfo:
        jpath = self._path(path)
        return self._info(self._fs(jpath).getFileStatus(jpath))

    @staticmethod
    def is_glob(path: str) -> bool:
        return any(ch in _GLOB_CHARS for ch in path)

    def mkdirs(self, path: str) -> None:
        jpath = self._path(path)
        self._fs(jpath).mkdirs(jpath)

    def delete(self, path: str) -> None:
        jpath = self._path(path)
        fs = self._fs(jpath)
        if fs.exists(jpath):
            fs.delete(jpath, True)

    def rename(self, source: str, target: str) -> None:
        """Rename, creating the target's parent; raise if the file system refuses."""
        src, dst = self._path(source), self._path(target)
        fs = self._fs(src)
        fs.mkdirs(dst.getParent())
        if not fs.rename(src, dst):
            raise OSError(f"rename {source} -> {target} failed")

    def read_text(self, path: str) -> str:
        jpath = self._path(path)
        stream = self._fs(jpath).open(jpath)
        try:
            reader = self._jvm.java.io.BufferedReader(
                self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(line)
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()

    def write_text_atomic(self, path: str, text: str) -> None:
        """Write to a temporary sibling, then rename: readers see the old file or the new one."""
        temporary = f"{path}.tmp"
        jtmp = self._path(temporary)
        fs = self._fs(jtmp)
        fs.setWriteChecksum(False)  # no .crc side files next to manifests
        stream = fs.create(jtmp, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        jpath = self._path(path)
        if fs.exists(jpath):
            fs.delete(jpath, False)
        self.rename(temporary, path)

    # -- symbolic links: kept apart from the rest, for the input listing (reading.py) -------------
    def links_in(self, directory: str) -> dict[str, str]:
        """The entries of ``directory`` that are symbolic links: name -> target, dangling ones too.

        Hadoop's listings follow links silently, and the local file system's leaves a link to
        nothing out altogether, so links are listed on their own: on the local file system with
        ``os.scandir`` (which does not follow them; Hadoop's ``getFileLinkStatus`` misreads
        qualified ``file:`` paths), elsewhere from the listing's statuses (HDFS lists a link as a
        link). A file system without links (S3A, ...) is not asked at all.
        """
        jpath = self._path(directory)
        fs = self._fs(jpath)
        if not fs.supportsSymlinks():
            return {}
        if fs.getUri().getScheme() == "file":
            with os.scandir(fs.makeQualified(jpath).toUri().getPath()) as entries:
                return {e.name: os.readlink(e.path) for e in entries if e.is_symlink()}
        return {s.getPath().getName(): s.getSymlink().toString() for s in fs.listStatus(jpath) if s.isSymlink()}

    def glob_matches(self, pattern: str, name: str) -> bool:
        """Whether one path component of a Hadoop glob matches ``name``, as ``glob`` would."""
        return bool(self._jvm.org.apache.hadoop.fs.GlobPattern(pattern).matches(name))
