"""The digests of an ID-cache snapshot the driver holds, computed there: Spark's ``xxhash64`` in numpy.

A batch decided on the driver writes its new snapshot from an Arrow table without a Spark job
(``driver_decide.snapshot``), and its manifest records each cache's digest of it
(``transforms.entry_digests``, folded by ``manifest.cache_digests``). Read back and aggregated by
Spark, those digests cost a small batch a job and about a second of its nine (a 20,000-message
batch, docs/benchmarks.md), more than the rest of its checks. So the driver computes them from
the table it wrote, with the same hash: a snapshot's fingerprint must not depend on the plan that
wrote it (a batch re-run under the other plan would otherwise look changed and invalidate the
batches after it). ``tests/engine/test_driver_digests.py`` holds the two to the same digests.

Why our own hash rather than a library's: the ``xxhash`` package hashes one value per call, and a
small batch's snapshot can hold a few hundred thousand entries of six columns each (the history
bench's 200,000); here every column is hashed for all rows at once, rows of one byte length
together. The algorithm is Spark's ``org.apache.spark.sql.catalyst.expressions.XXH64`` (which is
XXH64 read little-endian), chained over the columns as Spark's ``XxHash64`` expression does: each
non-null value hashed with the hash so far as its seed, from 42; a null leaves the hash as it is.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from msgdedup.engine import transforms

SPARK_SEED = 42  # Spark's xxhash64(): XxHash64(children, 42)
_GATHERED = 1 << 21  # bytes of one length hashed at once: a snapshot can hold a million entries

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def _round(acc: np.ndarray, word: np.ndarray) -> np.ndarray:
    return _rotl(acc + word * _P2, 31) * _P1


def _hash_int(value: int, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashInt: a 32-bit value (Spark's int literals)."""
    h = seed + _P5 + np.uint64(4)
    h = h ^ (np.uint64(value & 0xFFFFFFFF) * _P1)
    return _fmix(_rotl(h, 23) * _P2 + _P3)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashLong of each of ``values`` (uint64, the longs' bits) with its row's seed."""
    h = seed + _P5 + np.uint64(8)
    h = h ^ (_rotl(values * _P2, 31) * _P1)
    return _fmix(_rotl(h, 27) * _P1 + _P4)


def _hash_bytes(rows: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64.hashUnsafeBytes of each row of ``rows`` (n × length bytes) with its row's seed."""
    length = rows.shape[1]
    words = np.ascontiguousarray(rows[:, :length // 8 * 8]).view("<u8").astype(np.uint64)
    offset = 0
    if length >= 32:
        v1, v2, v3, v4 = seed + _P1 + _P2, seed + _P2, seed.copy(), seed - _P1
        while offset <= length - 32:
            w = offset // 8
            v1, v2 = _round(v1, words[:, w]), _round(v2, words[:, w + 1])
            v3, v4 = _round(v3, words[:, w + 2]), _round(v4, words[:, w + 3])
            offset += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for v in (v1, v2, v3, v4):
            h = (h ^ _round(np.zeros_like(v), v)) * _P1 + _P4
    else:
        h = seed + _P5
    h = h + np.uint64(length)
    while offset <= length - 8:
        h = _rotl(h ^ _round(np.zeros_like(h), words[:, offset // 8]), 27) * _P1 + _P4
        offset += 8
    if offset + 4 <= length:
        k = np.ascontiguousarray(rows[:, offset:offset + 4]).view("<u4")[:, 0].astype(np.uint64)
        h = _rotl(h ^ (k * _P1), 23) * _P2 + _P3
        offset += 4
    while offset < length:
        h = _rotl(h ^ (rows[:, offset].astype(np.uint64) * _P5), 11) * _P1
        offset += 1
    return _fmix(h)


def _hash_strings(column: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Each value's UTF-8 bytes hashed with its row's seed; the rows of one byte length at once."""
    column = pc.cast(column, pa.large_string())
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(column.buffers()[2], np.uint8) if column.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    hashed = seed.copy()
    for length in np.unique(lengths):
        same = np.flatnonzero(lengths == length)
        step = max(1, _GATHERED // max(int(length), 1))  # the bytes gathered at once (and 8 per index)
        for start in range(0, len(same), step):
            rows = same[start:start + step]
            matrix = data[offsets[rows][:, None] + np.arange(length)]
            hashed[rows] = _hash_bytes(matrix, seed[rows])
    return hashed


def xxhash64(columns: list[pa.Array], first_int: int | None = None) -> np.ndarray:
    """Spark's ``xxhash64(*columns)`` (string and 64-bit integer columns) as uint64, one per row;
    ``first_int``: an int literal hashed before the columns (``xxhash64(lit(first_int), *columns)``)."""
    rows = len(columns[0]) if columns else 0
    with np.errstate(over="ignore"):
        h = np.full(rows, SPARK_SEED, np.uint64)
        if first_int is not None:
            h = _hash_int(first_int, h)
        for column in columns:
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            if pa.types.is_int64(column.type):  # (Spark hashes a narrower integer as an int: not here)
                values = pc.fill_null(column, 0).to_numpy().view(np.uint64)
                hashed = _hash_long(values, h)
            elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                hashed = _hash_strings(column, h)
            else:
                raise TypeError(f"xxhash64 on the driver hashes strings and 64-bit integers, not {column.type}")
            h = np.where(valid, hashed, h)
    return h


def entry_digests(snapshot: pa.Table) -> list[dict]:
    """``transforms.entry_digests`` of a snapshot the driver holds: per (cache, address) of its
    entries, their count and the two XORs (as unsigned 64-bit ints: ``manifest.cache_digests``
    reads their bits)."""
    if snapshot.num_rows == 0:
        return []
    digested = [snapshot[name] for name in transforms.DIGESTED]
    xor_a, xor_b = xxhash64(digested), xxhash64(digested, first_int=1)
    cache = pc.dictionary_encode(snapshot["cache"].combine_chunks())
    address = pc.dictionary_encode(snapshot["address"].combine_chunks())
    width = len(address.dictionary) + 1  # the last code: no address
    code = (cache.indices.fill_null(len(cache.dictionary)).to_numpy().astype(np.int64) * width
            + address.indices.fill_null(width - 1).to_numpy().astype(np.int64))
    order = np.argsort(code, kind="stable")
    groups, starts, counts = np.unique(code[order], return_index=True, return_counts=True)
    a, b = np.bitwise_xor.reduceat(xor_a[order], starts), np.bitwise_xor.reduceat(xor_b[order], starts)
    caches, addresses = cache.dictionary.to_pylist() + [None], address.dictionary.to_pylist() + [None]
    return [{"cache": caches[g // width], "address": addresses[g % width], "entries": int(n),
             "xor_a": int(x), "xor_b": int(y)}
            for g, n, x, y in zip(groups.tolist(), counts, a, b, strict=True)]
