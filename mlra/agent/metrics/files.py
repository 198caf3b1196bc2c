"""Metric files in the workspace (`metrics.jsonl`, TensorBoard event files), read as the
agent could read them.

The files are the agent's and mlra reads them host-side, so each is opened through
the sandbox's `open_beneath` (never a link out of the workspace; a FIFO or a device is
not read), a read takes at most `READ_BYTES` of a file, and each file's offset is kept
so only what was appended since is read. A file that is not what its name says gives
one notice and is not read again; nothing here raises into the run.

Which files there are comes from the workspace walk the resource sampler already makes
for the disk figure (agent/loop/resources.py), not from a walk of its own.

What is held of a file is bounded (its offset, its first `HEAD_BYTES`, the reader's
capped state) and starts over when the file is rewritten: shorter than what was read,
another inode, or other first bytes (a script that truncates and rewrites between two
scans). A fault in one file's reading, whatever it is, stops that file alone, with a
notice; every cap that leaves something out says so once.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mlra.agent.metrics.jsonl import JsonlReader, is_metrics_file
from mlra.agent.metrics.recorder import Kind, Reading
from mlra.agent.metrics.tensorboard import (
    MAX_TAG_BYTES,
    MAX_TAGS,
    Malformed,
    TensorBoardReader,
    is_event_file,
)

READ_BYTES = 4 * 1024 * 1024
"""Read of one file per scan; the rest waits for the next scan."""
MAX_FILES = 64
"""Metric files followed in one run."""
HEAD_BYTES = 256
"""A file's first bytes, kept to tell a rewritten file from one that grew."""

Opener = Callable[[str, int], tuple[int, str]]
"""The sandbox's `open_beneath(path, flags)`: a descriptor and the workspace path."""


def metric_file_kind(name: str) -> Kind | None:
    if is_metrics_file(name):
        return "jsonl"
    if is_event_file(name):
        return "tensorboard"
    return None


@dataclass
class FileReading:
    """What one scan read of one file."""

    path: str
    kind: Kind
    readings: list[Reading] = field(default_factory=lambda: [])
    offset: int = 0
    """The file's bytes read so far."""


@dataclass
class _File:
    kind: Kind
    reader: JsonlReader | TensorBoardReader
    broken: bool = False
    identity: tuple[int, int] | None = None
    """The file's device and inode as last read."""
    head: bytes | None = None
    """Its first bytes (up to HEAD_BYTES) as last read."""
    told: set[str] = field(default_factory=lambda: set[str]())
    """The notices this file has given (each once, whatever it becomes)."""


def _new_reader(kind: Kind) -> JsonlReader | TensorBoardReader:
    return JsonlReader() if kind == "jsonl" else TensorBoardReader()


class MetricFiles:
    """`open_beneath` opens a workspace path confined; `clock` is the run clock."""

    def __init__(self, open_beneath: Opener, clock: Callable[[], float]) -> None:
        self._open = open_beneath
        self._clock = clock
        self._files: dict[str, _File] = {}
        self._over_told = False
        self.notices: list[str] = []

    def follow(self, path: str) -> bool:
        """Whether `path` is one of the files followed, taking it on where fewer than
        MAX_FILES are; past that a new one is not, which is told once."""
        if path in self._files:
            return True
        kind = metric_file_kind(path.rsplit("/", 1)[-1])
        if kind is None:
            return False
        if len(self._files) >= MAX_FILES:
            if not self._over_told:
                self._over_told = True
                self.notices.append(
                    f"metrics: more than {MAX_FILES} metric files; {path} and any later "
                    "ones are not read"
                )
            return False
        self._files[path] = _File(kind, _new_reader(kind))
        return True

    def held_bytes(self) -> int:
        """About what is held of the files read (paths, first bytes, readers' state)."""
        total = 0
        for path, known in self._files.items():
            total += len(path) + len(known.head or b"") + 256
            if isinstance(known.reader, TensorBoardReader):
                total += known.reader.held_bytes()
        return total

    def resume(self, path: str, offset: int) -> bool:
        """Read `path` on from `offset` (where the run's log says an earlier process got)."""
        if not self.follow(path):
            return False
        reader = self._files[path].reader
        reader.offset = max(0, offset)
        if isinstance(reader, JsonlReader):
            reader.numbered = False
        return True

    def read(self, paths: Iterable[str]) -> list[FileReading]:
        """What the files at `paths` (workspace-relative) hold since the last read."""
        out: list[FileReading] = []
        for path in paths:
            if not self.follow(path):
                continue
            known = self._files[path]
            try:
                readings = self._read_one(path, known)
            except Malformed as exc:
                known.broken = True
                self._tell(known, "malformed", f"{path} is not a TensorBoard event file ({exc})")
                continue
            except Exception as exc:  # a fault of this file's reading: this file alone
                known.broken = True
                self._tell(
                    known, "fault", f"{path} could not be read ({type(exc).__name__}); left out"
                )
                continue
            self._tell_skipped(path, known)
            if readings:
                out.append(FileReading(path, known.kind, readings, known.reader.offset))
        return out

    def _tell(self, known: _File, key: str, message: str) -> None:
        if key not in known.told:
            known.told.add(key)
            self.notices.append(f"metrics: {message}")

    def _tell_skipped(self, path: str, known: _File) -> None:
        reader = known.reader
        if isinstance(reader, JsonlReader):
            if reader.bad_lines:
                self._tell(
                    known,
                    "lines",
                    f"{path} has lines that are not JSON objects of numbers; they are "
                    f"skipped (the first, {reader.first_bad})",
                )
            return
        if reader.bad_records:
            self._tell(
                known,
                "records",
                f"{path} has records that are not TensorBoard events; they are skipped "
                f"(the first: {reader.first_bad})",
            )
        if reader.dropped_values:
            self._tell(
                known,
                "tags",
                f"{path} has more than {MAX_TAGS:,} tags or tags longer than "
                f"{MAX_TAG_BYTES} bytes; their values are not read",
            )

    def _rewritten(self, known: _File, fd: int, info: os.stat_result) -> bool:
        """Whether the file is another than the one read so far (and note this one)."""
        identity = (info.st_dev, info.st_ino)
        head = os.pread(fd, HEAD_BYTES, 0)
        other = (
            (known.identity is not None and known.identity != identity)
            or info.st_size < known.reader.offset
            or (known.head is not None and head[: len(known.head)] != known.head)
        )
        known.identity, known.head = identity, head
        return other

    def _read_one(self, path: str, known: _File) -> list[Reading]:
        try:
            fd, _ = self._open(path, os.O_RDONLY | os.O_NONBLOCK)
        except Exception:  # gone, a link out of the workspace, unreadable: nothing
            return []
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return []
            if self._rewritten(known, fd, info):  # read from the start, as a new file
                known.reader, known.broken = _new_reader(known.kind), False
            if known.broken:
                return []
            reader = known.reader
            if info.st_size == reader.offset:
                return []
            data = os.pread(fd, READ_BYTES, reader.offset)
        except OSError:
            return []
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        now = self._clock()
        if isinstance(reader, JsonlReader):
            points = reader.read(data)
            return [(p.name, p.value, p.step, round(now, 3)) for p in points]
        scalars = reader.read(data, info.st_size)
        # The event's own time, moved onto the run clock (an estimate across pauses).
        since = time.time()
        return [
            (s.tag, s.value, s.step, round(max(0.0, now - max(0.0, since - s.wall_time)), 3))
            for s in scalars
            if s.value == s.value and abs(s.value) != float("inf")
        ]


__all__ = ["MAX_FILES", "READ_BYTES", "FileReading", "MetricFiles", "metric_file_kind"]
