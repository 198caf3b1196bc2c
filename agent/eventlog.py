"""The append-only event log (`events.jsonl`) and its readers.

Each event is written as one JSON line and flushed before `append` returns, so a
crash of the process loses nothing that any display has already shown. Readers
tolerate a half-written last line (a process killed mid-write) and report it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from mlra.agent.events import Event, parse_event

Subscriber = Callable[[Event], None]

EVENTS_FILE = "events.jsonl"


class RunInUse(Exception):
    """Another process is appending to this run's log."""


class EventLog:
    """Stamps, writes and fans out events; the only way events come into being.

    The writer holds an exclusive lock on the file while it is open, so two
    processes (a running console and `mlra eval`, say) can never interleave
    events in one log.
    """

    def __init__(self, path: Path, *, start_seq: int = 0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            self._file = None
            raise RunInUse(f"{path} is being written by another mlra process") from None
        self._seq = start_seq
        self._subscribers: list[Subscriber] = []

    @property
    def last_seq(self) -> int:
        return self._seq

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def append(self, event: Event) -> Event:
        if self._file is None:
            raise RuntimeError(f"event log {self.path} is closed")
        self._seq += 1
        event.seq = self._seq
        event.ts = time.time()
        self._file.write(event.model_dump_json(exclude_none=True) + "\n")
        self._file.flush()
        for subscriber in list(self._subscribers):
            subscriber(event)
        return event

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def log_is_live(path: Path) -> bool:
    """Whether a process holds the run's log open for writing (`EventLog` locks it):
    how a running run is told from a dead one without asking any process."""
    try:
        with open(path, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    except FileNotFoundError:
        return False
    return False


class LogDamage(Exception):
    """A line in the middle of a log is not a valid event (not just a torn tail)."""


def read_events(path: Path, *, on_torn_tail: Callable[[str], None] | None = None) -> list[Event]:
    return list(iter_events(path, on_torn_tail=on_torn_tail))


def iter_events(
    path: Path, *, on_torn_tail: Callable[[str], None] | None = None
) -> Iterator[Event]:
    """Yield the events of a log; a torn last line is dropped and reported, not raised.

    A process killed while writing leaves a last line without its newline. That
    line was never flushed whole, so no display showed it: dropping it loses
    nothing anyone saw. Damage anywhere else is an error.
    """
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield parse_event(line)
        except ValidationError as exc:
            raise LogDamage(
                f"{path}:{number}: not a valid event: {exc.errors()[0]['msg']}"
            ) from exc
    if tail.strip():
        if on_torn_tail is not None:
            on_torn_tail(f"{path}: dropped a half-written last line ({len(tail)} bytes)")
