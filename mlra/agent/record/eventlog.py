"""The append-only event log (`events.jsonl`) and its readers.

Each event is written as one JSON line and flushed before `append` returns, so a
crash of the process loses nothing that any display has already shown. Readers
tolerate a half-written last line (a process killed mid-write) and report it.

Scores are derived from this log, so the readers also refuse a log that is not
what `EventLog` wrote: `seq` runs 1, 2, 3... without a gap or a repeat, and every
line parses. A line removed, repeated, moved or forged is `LogDamage`, naming
the file and the line, never a quietly different run.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ValidationError

from mlra.agent.record.log_refs import Referrer, Resolver, Unresolved, stored_form
from mlra.events import Event, parse_event, stamped

Subscriber = Callable[[Event], None]

EVENTS_FILE = "events.jsonl"


class RunInUse(Exception):
    """Another process is appending to this run's log."""


class LogMoved(RunInUse):
    """The log grew between a reading of it and its lock (the run it belongs to was
    still writing): what was read is not all of it, and going on from it would repeat
    its numbering."""


TAIL_CHUNK = 1 << 16


class UnwritableEvent(ValueError):
    """An event JSON has no form for (an object in `arguments`, say): nothing was
    written and no `seq` was used, so the log stays whole and contiguous."""


def _finite(value: Any) -> Any:
    """Non-finite floats as null, as pydantic writes them (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dump_json(
    model: BaseModel,
    *,
    indent: int | None = None,
    exclude_none: bool = False,
    exclude: set[str] | None = None,
    surrogates: Literal["escape", "replace"] = "escape",
) -> str:
    """`model_dump_json` that survives text holding lone surrogates.

    pydantic writes only valid UTF-8, so a file name that is not UTF-8 (which
    os.fsdecode turns into a str with lone surrogates) would make it raise, and
    with it the run. Such a model is written through the json module instead:
    with `escape` each surrogate becomes its `\\udcXX` escape, which
    `parse_event` reads back to the very same str (lossless, for the log); with
    `replace` it becomes U+FFFD (for derived files read by strict parsers).
    Anything else JSON cannot hold is `UnwritableEvent`.
    """
    try:
        return model.model_dump_json(indent=indent, exclude_none=exclude_none, exclude=exclude)
    except (ValueError, TypeError) as exc:  # PydanticSerializationError is a ValueError
        if "surrogates not allowed" not in str(exc):
            raise UnwritableEvent(f"cannot write {type(model).__name__} as JSON: {exc}") from None
    try:
        data = _finite(model.model_dump(mode="python", exclude_none=exclude_none, exclude=exclude))
        text = json.dumps(
            data,
            ensure_ascii=False,
            indent=indent,
            separators=(",", ": ") if indent is not None else (",", ":"),
            allow_nan=False,
        )
    except (ValueError, TypeError) as exc:
        raise UnwritableEvent(f"cannot write {type(model).__name__} as JSON: {exc}") from None
    if surrogates == "replace":
        return _SURROGATE.sub("\ufffd", text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_event(event: Event) -> bytes:
    """The event whole as one JSON line, newline included (see `dump_json`): what
    `--json` prints, for readers that know nothing of the log's references."""
    return dump_json(event, exclude_none=True).encode("utf-8") + b"\n"


def encode_stored(event: Event) -> bytes:
    """The event's line in the log: as `encode_event`, with a text or arguments
    another event holds left out for a reference to it (`agent/record/log_refs.py`)."""
    stored, left_out = stored_form(event)
    return dump_json(stored, exclude_none=True, exclude=left_out).encode("utf-8") + b"\n"


class EventLog:
    """Stamps, writes and fans out events; the only way events come into being.

    The writer holds an exclusive lock on the file while it is open, so two
    processes (a running console and `mlra eval`, say) can never interleave
    events in one log.
    """

    def __init__(self, path: Path, *, start_seq: int = 0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a line is on disk or, if writing it failed, cut away (see append).
        self._file: IO[bytes] | None = open(path, "ab", buffering=0)
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            self._file = None
            raise RunInUse(f"{path} is being written by another mlra process") from None
        with open(path, "rb") as reading:  # the writer's own file is write-only
            found = _last_seq(reading.fileno())
        if found is not None and found > start_seq:
            self._file.close()
            self._file = None
            raise LogMoved(
                f"{path} was written to (up to seq {found}) after it was read (up to seq "
                f"{start_seq}): the run was still going"
            )
        self._seq = start_seq
        self._size = os.fstat(self._file.fileno()).st_size
        self._subscribers: list[Subscriber] = []
        self._refs = Referrer()

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def size(self) -> int:
        """The log's bytes now (what a run's log budget counts: agent/record/log_budget.py)."""
        return self._size

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def append(self, event: Event) -> Event:
        """Write the event and hand it to the subscribers.

        The `seq` is taken only once the line is whole on disk: an event that
        cannot be written (`UnwritableEvent`, a full disk) leaves no partial
        line and no gap in the numbering, so the log still reads as undamaged.
        """
        if self._file is None:
            raise RuntimeError(f"event log {self.path} is closed")
        stamps = event.seq, event.ts
        event.seq, event.ts = self._seq + 1, time.time()
        self._refs.link(event)
        try:
            line = encode_stored(event)
            fd = self._file.fileno()
            end = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                os.ftruncate(fd, end)
                raise
        except BaseException:
            event.seq, event.ts = stamps
            self._refs.unlink(event)
            raise
        self._seq = event.seq
        self._size = end + len(line)
        self._refs.written(event)
        for subscriber in list(self._subscribers):
            subscriber(event)
        return event

    def close(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None


def _last_seq(fd: int) -> int | None:
    """The `seq` of the log's last whole line, read from its end (0 for an empty log);
    None where it cannot be read from the line's stamps."""
    end = os.fstat(fd).st_size
    data = b""
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        data = os.pread(fd, end - start, start) + data
        end = start
        last = data.rfind(b"\n")
        if last < 0:
            continue  # a torn line so far, no whole one yet
        begin = data.rfind(b"\n", 0, last) + 1
        if begin > 0 or end == 0:
            found = _STAMPS.match(data, begin)
            return int(found.group(1)) if found is not None else None
    return 0  # no whole line: nothing was written whole


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
    """A log that is not what `EventLog` wrote (a torn last line is not damage).

    `line` is the 1-based line of the file where the damage shows; `problem`
    says what is wrong there. The message names both with the file.
    """

    def __init__(self, path: Path, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.line, self.problem)


def _out_of_sequence(seq: int, expected: int) -> str:
    if seq > expected:
        missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}–{seq - 1}"
        return f"seq {seq} where {expected} was due: {missing} is missing"
    return f"seq {seq} where {expected} was due: a repeated or moved line"


def _what_is_wrong(exc: ValidationError) -> str:
    error = exc.errors()[0]
    if error["type"] == "union_tag_invalid":
        return f"no event type {error.get('ctx', {}).get('tag')!r}"
    where = ".".join(str(part) for part in error["loc"][1:])  # [0] is the event type
    return f"{error['msg']} ({where})" if where else error["msg"]


def read_events(path: Path, *, on_torn_tail: Callable[[str], None] | None = None) -> list[Event]:
    return list(iter_events(path, on_torn_tail=on_torn_tail))


def iter_events(
    path: Path, *, on_torn_tail: Callable[[str], None] | None = None
) -> Iterator[Event]:
    """Yield the events of a log; a torn last line is dropped and reported, not raised.

    A process killed while writing leaves a last line without its newline. That
    line was never flushed whole, so no display showed it: dropping it loses
    nothing anyone saw. Damage anywhere else (a line that is not an event, a
    `seq` out of its 1, 2, 3... order) is `LogDamage`.
    """
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    expected = 1
    resolve = Resolver()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = parse_event(line)
        except ValidationError as exc:
            raise LogDamage(path, number, f"not a valid event: {_what_is_wrong(exc)}") from None
        if event.seq != expected:
            raise LogDamage(path, number, _out_of_sequence(event.seq, expected))
        expected += 1
        try:
            event = resolve(event)
        except Unresolved as exc:
            raise LogDamage(path, number, f"not a valid event: {exc}") from None
        yield event
    if tail.strip():
        if on_torn_tail is not None:
            on_torn_tail(f"{path}: dropped a half-written last line ({len(tail)} bytes)")


_STAMPS = re.compile(
    rb'\{"v":\d+,"seq":(\d+),"ts":[-+0-9.eE]+,"t":[-+0-9.eE]+,"type":"[a-z][a-z0-9_]*"'
)
"""The stamps `EventLog` writes at the start of every line, in this order."""


def check_lines(path: Path, lines: list[bytes]) -> None:
    """Check a log's numbering without parsing its events (`LogDamage` if broken).

    A replay of 100,000 events opens in well under a second because it parses
    events only as it shows them; this reads each line's `seq` from its first
    bytes (where `EventLog` writes it) instead. A line that passes here and still
    fails to parse shows as an error where it is; a type this mlra does not know
    is a newer mlra's and reads as unknown.
    """
    expected = 1
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        found = _STAMPS.match(line)
        if found is not None:
            seq: Any = int(found.group(1))
        else:
            try:
                data = json.loads(line)
            except ValueError:
                raise LogDamage(path, number, "not a valid event: not a JSON object") from None
            if not stamped(data):
                raise LogDamage(
                    path, number, "not a valid event: it lacks the stamps of every event "
                    "(v, seq, ts, t and a type)",
                )  # fmt: skip
            seq = data["seq"]
        if seq != expected:
            raise LogDamage(path, number, _out_of_sequence(seq, expected))
        expected += 1
