"""A file's data with its holes: where the data lies, hashed and copied without the holes.

The agent may make a sparse file as large as it likes (`truncate -s 40G`); read or
written as plain bytes it would cost minutes and as much disk as it claims. Here holes
are skipped when copying (and stay holes) and fed as zeros from memory when hashing, and
at most a chunk is held in memory, whatever the file's size.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from mlra.tools.sandbox.trees import CHUNK


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) spans of `fd` that hold data, holes left out; the whole file
    where the file system cannot say."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from here on
                break
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return [*spans, (pos, size)]
            raise
        if start >= size:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        spans.append((start, end))
        pos = end
    return spans


_ZEROS = bytes(CHUNK)


def hash_into(fd: int, digest: Any) -> int:
    """Feed an open file's bytes to a hashlib object, holes as zeros from memory (the
    kernel makes them slowly: a sparse 2 GB file read at a third of a GB a second);
    returns the bytes fed. At most a chunk is held."""
    size = os.fstat(fd).st_size
    spans = data_extents(fd, size) if is_sparse(os.fstat(fd)) else [(0, size)]
    pos = 0
    for start, end in [*spans, (size, size)]:
        while pos < start:  # a hole
            n = min(CHUNK, start - pos)
            digest.update(_ZEROS[:n] if n < CHUNK else _ZEROS)
            pos += n
        while pos < end:
            chunk = os.pread(fd, min(CHUNK, end - pos), pos)
            if not chunk:
                return pos  # shrank while read
            digest.update(chunk)
            pos += len(chunk)
    return pos


def is_sparse(st: os.stat_result) -> bool:
    """Whether the file takes less disk than its size says (holes), by more than a block's slack."""
    return st.st_blocks * 512 + 64 * 1024 < st.st_size


def copy_sparse(src: int, dst: int) -> int:
    """Copy an open file's data into another, holes left as holes (a sparse file as large
    as the agent liked is never written out as that many zeros); returns its size."""
    size = os.fstat(src).st_size
    for start, end in data_extents(src, size):
        pos = start
        while pos < end:
            chunk = os.pread(src, min(CHUNK, end - pos), pos)
            if not chunk:
                break
            os.pwrite(dst, chunk, pos)
            pos += len(chunk)
    os.ftruncate(dst, size)
    return size
