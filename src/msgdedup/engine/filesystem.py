"""Hadoop FileSystem access from the driver: the one wrapper the engine and the gate share.

The warehouse and the input may live on any Hadoop-compatible file system (local, HDFS, ...), so
driver-side file operations go through Hadoop's own FileSystem API (via the Spark JVM) rather
than Python's ``os``: whatever path Spark can read, the commit protocol can manage.

Two operations the commit protocol relies on are done with the operating system's own calls for
``file:`` paths, because Hadoop's local file system does not give them:

- **create-if-absent** (``create_exclusive``): RawLocalFileSystem's ``create(path, false)`` checks
  for the file and then opens it (two steps: two writers can both "create" it), and its
  ``rename`` overwrites an existing file (``File.renameTo``). Locally a fully written temporary is
  hard-linked to the name instead (``link(2)`` fails if the name exists, atomically). Elsewhere
  the temporary is renamed: HDFS (like Azure) refuses to rename a file onto an existing one,
  atomically in the NameNode (HADOOP-13823 lists ``file://`` as the exception).
- **durability**: Hadoop's local streams do not reach ``fsync``; a commit whose files are only in
  the page cache can come back empty after a power loss. Local files are written, fsynced, renamed
  and their directory fsynced; Hadoop streams elsewhere are ``hsync()``ed before they are closed.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

_GLOB_CHARS = set("*?[{")


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    is_dir: bool
    modified_ms: int = 0

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def local_directory(path: str) -> str | None:
    """The local file-system path of ``path``, or None when it lives on another file system.

    GX writes Data Docs and its validation store with Python's own file functions, so they
    can only go to a local (or mounted) directory.
    """
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else path
    return None


def _fsync_directory(directory: str) -> None:
    """Make a rename or link inside ``directory`` durable (POSIX: the entry lives in the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: str, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


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
        return FileInfo(status.getPath().toString(), int(status.getLen()), bool(status.isDirectory()),
                        int(status.getModificationTime()))

    def qualify(self, path: str) -> str:
        """The fully qualified form (``file:/...``) Spark reports for a path."""
        jpath = self._path(path)
        return self._fs(jpath).makeQualified(jpath).toString()

    def local_path(self, path: str) -> str | None:
        """The operating-system path of a ``file:`` path (decoded), None on any other file system."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        if fs.getScheme() != "file":
            return None
        return str(fs.makeQualified(jpath).toUri().getPath())

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
        local = self.local_path(target)
        if local is not None:
            _fsync_directory(os.path.dirname(local))

    def read_text(self, path: str, missing_ok: bool = False) -> str | None:
        """The whole file as UTF-8 text (manifests are small); None for a missing file if ``missing_ok``."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        if missing_ok and not fs.exists(jpath):
            return None
        return self.read_bytes(path).decode("utf-8")

    def read_bytes(self, path: str) -> bytes:
        """The whole file's bytes (a small file: it is held in memory). A local file is read by
        Python itself; bytes through py4j would be copied and encoded on the way."""
        local = self.local_path(path)
        if local is not None:
            with open(local, "rb") as handle:
                return handle.read()
        jpath = self._path(path)
        stream = self._fs(jpath).open(jpath)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_parquet(self, directory: str, schema: pa.Schema) -> pa.Table:
        """The rows of a Parquet directory Spark wrote (its part files; hidden files and markers
        such as ``_SUCCESS`` are not data), read by the driver and held in memory: a small output
        without a Spark job. With ``schema``'s columns, as Spark reads with a declared schema: a
        column a file lacks (written by an older version) reads as null."""
        tables = []
        for file in self.list(directory):
            if file.is_dir or file.name.startswith(("_", ".")):
                continue
            table = pq.read_table(pa.BufferReader(self.read_bytes(file.path)))
            tables.append(pa.table([table[field.name].cast(field.type) if field.name in table.column_names
                                    else pa.nulls(table.num_rows, field.type) for field in schema], schema=schema))
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _write_hadoop(self, path: str, data: bytes):
        """Write a whole file through Hadoop and hsync it before closing; returns its Hadoop path."""
        jpath = self._path(path)
        fs = self._fs(jpath)
        fs.setWriteChecksum(False)  # no .crc side files next to manifests
        stream = fs.create(jpath, True)
        try:
            stream.write(bytearray(data))
            stream.hsync()
        finally:
            stream.close()
        return jpath

    def write_file(self, path: str, data: bytes) -> None:
        """Write a whole new file durably (its directory is created)."""
        local = self.local_path(path)
        if local is not None:
            os.makedirs(os.path.dirname(local), exist_ok=True)
            _write_durably(local, data)
            return
        self._write_hadoop(path, data)

    def write_text_atomic(self, path: str, text: str) -> None:
        """Write durably to a temporary sibling, then rename: readers see the old file or the new one."""
        temporary = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        self.write_file(temporary, text.encode("utf-8"))
        local = self.local_path(path)
        if local is not None:
            os.replace(self.local_path(temporary), local)
            _fsync_directory(os.path.dirname(local))
            return
        jpath = self._path(path)
        fs = self._fs(jpath)
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

    def create_exclusive(self, path: str, text: str) -> bool:
        """Create ``path`` with ``text`` iff it does not exist, atomically; False if it existed.

        The content is written and synced under a temporary name first, so the file appears whole
        or not at all (no reader ever sees a torn or empty one).
        """
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        local = self.local_path(path)
        if local is not None:
            directory = os.path.dirname(local)
            os.makedirs(directory, exist_ok=True)
            local_tmp = self.local_path(temporary)
            _write_durably(local_tmp, text.encode("utf-8"))
            try:
                os.link(local_tmp, local)
            except FileExistsError:
                return False
            finally:
                os.unlink(local_tmp)
            _fsync_directory(directory)
            return True
        jtmp = self._write_hadoop(temporary, text.encode("utf-8"))
        jpath = self._path(path)
        fs = self._fs(jpath)
        fs.mkdirs(jpath.getParent())
        created = bool(fs.rename(jtmp, jpath))
        if not created:
            fs.delete(jtmp, False)
            if not fs.exists(jpath):
                raise OSError(f"cannot create {path}: rename of {temporary} refused")
        return created

    def remove_atomically(self, path: str, trash_prefix: str) -> bool:
        """Move a directory out of sight in one rename (to ``<trash_prefix>-<random>``), then delete
        it; False if it was gone already.

        A concurrent reader of ``path`` sees all of it or none of it, never a half-deleted tree.
        """
        trash = f"{trash_prefix}-{uuid.uuid4().hex}"
        src, dst = self._path(path), self._path(trash)
        fs = self._fs(src)
        if not fs.exists(src):
            return False
        if not fs.rename(src, dst):
            if not fs.exists(src):
                return False
            raise OSError(f"rename {path} -> {trash} failed")
        fs.delete(dst, True)
        return True

    def sync_tree(self, path: str) -> None:
        """fsync every file and directory under a local ``path`` (Spark's writers close files without
        it); a no-op elsewhere: HDFS has the blocks of a closed file on its datanodes."""
        local = self.local_path(path)
        if local is None or not os.path.isdir(local):
            return
        for directory, _, files in os.walk(local):
            for name in files:
                try:
                    fd = os.open(os.path.join(directory, name), os.O_RDONLY)
                except FileNotFoundError:
                    # Renamed since the listing: the lease renews a staging run's owner file by
                    # writing a temporary sibling and renaming it (write_text_atomic, which syncs
                    # it itself). Failing here failed a whole batch at its commit.
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            _fsync_directory(directory)

    def copy_from_local(self, local_dir: str, target: str) -> None:
        """Copy every file under a local directory to ``target`` (any Hadoop path), overwriting."""
        for path in Path(local_dir).rglob("*"):
            if path.is_file():
                relative = path.relative_to(local_dir).as_posix()
                destination = self._path(f"{target}/{relative}")
                self._fs(destination).copyFromLocalFile(False, True, self._path(str(path)), destination)
