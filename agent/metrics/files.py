"""Metric files in the workspace (`metrics.jsonl`, TensorBoard event files), read as the
agent could read them.

The files are the agent's and mlra reads them host-side, so each is opened through
the sandbox's `open_beneath` (never a link out of the workspace; a FIFO or a device is
not read), a read takes at most `READ_BYTES` of a file, and each file's offset is kept
so only what was appended since is read. A file that is not what its name says gives
one notice and is not read again; nothing here raises into the run.

Which files there are comes from the workspace walk the resource sampler already makes
for the disk figure (agent/resources.py), not from a walk of its own.
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
from mlra.agent.metrics.tensorboard import Malformed, TensorBoardReader, is_event_file

READ_BYTES = 4 * 1024 * 1024
"""Read of one file per scan; the rest waits for the next scan."""
MAX_FILES = 64
"""Metric files followed in one run."""

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
    bad_told: bool = False


class MetricFiles:
    """`open_beneath` opens a workspace path confined; `clock` is the run clock."""

    def __init__(self, open_beneath: Opener, clock: Callable[[], float]) -> None:
        self._open = open_beneath
        self._clock = clock
        self._files: dict[str, _File] = {}
        self.notices: list[str] = []

    def resume(self, path: str, offset: int) -> None:
        """Read `path` on from `offset` (where the run's log says an earlier process got)."""
        kind = metric_file_kind(path.rsplit("/", 1)[-1])
        if kind is None or len(self._files) >= MAX_FILES:
            return
        reader = JsonlReader() if kind == "jsonl" else TensorBoardReader()
        reader.offset = max(0, offset)
        self._files[path] = _File(kind, reader)

    def read(self, paths: Iterable[str]) -> list[FileReading]:
        """What the files at `paths` (workspace-relative) hold since the last read."""
        out: list[FileReading] = []
        for path in paths:
            kind = metric_file_kind(path.rsplit("/", 1)[-1])
            if kind is None:
                continue
            known = self._files.get(path)
            if known is None:
                if len(self._files) >= MAX_FILES:
                    continue
                reader = JsonlReader() if kind == "jsonl" else TensorBoardReader()
                known = self._files[path] = _File(kind, reader)
            if known.broken:
                continue
            try:
                readings = self._read_one(path, known)
            except Malformed as exc:
                known.broken = True
                self.notices.append(f"metrics: {path} is not a TensorBoard event file ({exc})")
                continue
            if readings:
                out.append(FileReading(path, kind, readings, known.reader.offset))
        return out

    def _read_one(self, path: str, known: _File) -> list[Reading]:
        try:
            fd, _ = self._open(path, os.O_RDONLY | os.O_NONBLOCK)
        except Exception:  # gone, a link out of the workspace, unreadable: nothing
            return []
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return []
            reader = known.reader
            if info.st_size < reader.offset:  # rewritten from the start
                reader.offset = 0
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
            bad_before = reader.bad_lines
            points = reader.read(data)
            if reader.bad_lines > bad_before and not known.bad_told:
                known.bad_told = True
                self.notices.append(
                    f"metrics: {path} has lines that are not JSON objects; they are skipped"
                )
            return [(p.name, p.value, p.step, round(now, 3)) for p in points]
        scalars = reader.read(data, info.st_size)
        # The event's own time, moved onto the run clock (an estimate across pauses).
        since = time.time()
        return [
            (s.tag, s.value, s.step, round(max(0.0, now - max(0.0, since - s.wall_time)), 3))
            for s in scalars
            if s.value == s.value and abs(s.value) != float("inf")
        ]


__all__ = ["READ_BYTES", "FileReading", "MetricFiles", "metric_file_kind"]
