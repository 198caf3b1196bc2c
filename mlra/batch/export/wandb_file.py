"""A W&B offline run file (`run-<id>.wandb`) left as W&B's own client leaves one whose
process was killed: without its `exit` record.

W&B tells how a run ended by that record alone: exit code 0 is Finished, any other
Failed, and a run whose file has none is one whose process never finished it (Running
while it still writes; Crashed once it has stopped, which is what a killed run is).
wandb's Python API cannot end a run without writing one (`finish()` always does, and a
process that exits without it leaves the file unwritten), so the record is cut off the
finished file: the framing is LevelDB's log (a 7-byte `:W&B` header, 32 KiB blocks,
each chunk a crc32, a length and a type), and cutting at a record's first chunk leaves
a file W&B reads whole up to there.
"""

from __future__ import annotations

import importlib
import struct
from pathlib import Path
from typing import Any

_HEADER, _BLOCK, _CHUNK = 7, 32768, 7
_FULL, _FIRST, _LAST = 1, 2, 4


def _records(data: bytes) -> list[tuple[int, bytes]]:
    """Each record's offset (its first chunk's) and its bytes."""
    records: list[tuple[int, bytes]] = []
    pos, start, pending = _HEADER, _HEADER, b""
    while pos + _CHUNK <= len(data):
        if _BLOCK - pos % _BLOCK < _CHUNK:  # the block's tail is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _CHUNK])
        if kind == 0 and length == 0:
            break
        if kind in (_FULL, _FIRST):
            start, pending = pos, b""
        pending += data[pos + _CHUNK : pos + _CHUNK + length]
        pos += _CHUNK + length
        if kind in (_FULL, _LAST):
            records.append((start, pending))
    return records


def drop_exit(path: Path) -> bool:
    """Cut the run's `exit` record (and anything after it) off its file; False where the
    file has none (not yet written whole: the caller waits for wandb's teardown)."""
    record_type: Any = importlib.import_module("wandb.proto.wandb_internal_pb2").Record
    data = path.read_bytes()
    for offset, raw in _records(data):
        record = record_type()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "exit":
            with open(path, "rb+") as f:
                f.truncate(offset)
            return True
    return False
