"""Memory the driver's Python process freed, given back to the operating system.

The driver collects a batch's narrow columns (hashes, ranks, verdicts: tens of MiB at 1M
messages) and numpy sorts them. Once they are freed, pyarrow's allocator keeps its pages until it
is told to release them, and glibc's malloc keeps numpy's temporaries in its heap: the size above
which a freed block goes straight back to the system rises with each large block freed (up to 32
MiB). At 1M messages that held some 80 MiB of the driver's memory while the outputs were written,
when the batch's memory peaks (docs/benchmarks.md). glibc's ``malloc_trim`` gives it back; with
another C library only pyarrow's pool is released.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import pyarrow as pa


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def release() -> None:
    """Give the memory pyarrow and malloc hold unused back to the operating system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
