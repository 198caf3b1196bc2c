"""A search's attempts followed from its run: their logs read as they grow.

An attempt is a run of its own, and its model calls and notices (a text-tool-call
fallback, a window learned from the server, a doubted prompt count, a wait for the
server) are written once, in its own log (`attempts/<id>/events.jsonl`). The run's
displays (the headless transcript, the console's) read them there rather than have the
run copy them into its log: one record of each fact, and a replay or an attached
console reads what the live run read.

Each read is bounded by the wall clock (`ts`) of the run's event being shown, so what an
attempt said is shown between the run's events as it happened, and a replay of the run
shows it at the same place; an attempt's log is read to its end before the run's
`attempt_finished` for it is shown. A notice said already, by the run or an attempt, is
not said again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from mlra import events as ev
from mlra.agent.record.eventlog import EVENTS_FILE
from mlra.agent.record.log_refs import Resolver, Unresolved

NEWS = frozenset(
    {"model_call", "notice", "context_window_learned", "model_retry", "history_summarized"}
)
"""The kinds of an attempt's events its run shows (console/text/event_lines.attempt_news)."""
READ_BYTES = 1 << 20
"""The most of an attempt's log one read takes (a console's replay or resume reads each
attempt's log on the thread that draws it): a longer log is read on at the run's next
reads, and to its end, chunk by chunk, only at the attempt's (or the run's) end."""
READ_EVERY_S = 1.0
"""The attempts' logs are read at most this often (wall clock of the run's events): the
run samples its resources every second, so a search whose own agent only waits still
reads its attempts that often."""


class GrowingLog:
    """A log read on from where the last read left it: each line parsed once however
    long the run it records goes on. `types`: only events of these kinds are read (a
    line of another kind is passed over unparsed, so a flood of command output costs
    a scan, not a parse); None: every event, whole (references resolved)."""

    def __init__(self, path: Path, types: frozenset[str] | None = None) -> None:
        self.path = path
        self.offset = 0
        self.chunk = READ_BYTES
        self.types = types
        self._marks = [f'"type":"{kind}"'.encode() for kind in sorted(types or ())]
        self._resolve = Resolver() if types is None else None
        self.held: list[ev.Event] = []
        """Read, but written after the time last asked for: given when it comes."""
        self.damaged = False

    def read(self, until_ts: float = 0.0, *, to_end: bool = False) -> list[ev.Event]:
        """The events written since the last read, up to wall clock `until_ts` (0: all
        there are); nothing once a line would not parse (a damaged log). One chunk of
        `chunk` bytes is read (a whole line at least), or, `to_end`, chunk after chunk
        to the log's end; reading stops early at an event written after `until_ts`,
        which is not due yet. The offset moves only past whole lines: a half-written
        last line waits for its newline."""
        if self.damaged:
            return []
        chunk, taken = self.chunk, 0
        try:
            with open(self.path, "rb") as f:
                while (to_end or not taken) and not self._ahead(until_ts):
                    f.seek(self.offset)
                    data = f.read(chunk)
                    whole = data.rfind(b"\n") + 1
                    if not whole and len(data) == chunk:
                        data += f.readline()  # one line longer than a chunk: all of it
                        whole = len(data) if data.endswith(b"\n") else 0
                    if not whole:
                        break  # the log's end, or a line not yet written whole
                    self.offset += whole
                    taken += whole
                    if not self._take(data[:whole]):
                        return []
        except OSError:  # not written yet
            pass
        due: list[ev.Event] = []
        later: list[ev.Event] = []
        for event in self.held:
            (due if not until_ts or not event.ts or event.ts <= until_ts else later).append(event)
        self.held = later
        return due

    def _ahead(self, until_ts: float) -> bool:
        """An event written after `until_ts` is held: what comes after it is later still."""
        return bool(until_ts) and bool(self.held) and (self.held[-1].ts or 0) > until_ts

    def _take(self, data: bytes) -> bool:
        """Parse the whole lines in `data` into `held`; False for a damaged log."""
        for line in data.split(b"\n"):
            if not line.strip() or (self._marks and not any(m in line for m in self._marks)):
                continue
            try:
                event = ev.parse_event(line)
                if self._resolve is not None:
                    event = self._resolve(event)
            except (ValidationError, ValueError, Unresolved):
                self.damaged = True
                self.held = []
                return False
            if self.types is None or event.type in self.types:
                self.held.append(event)
        return True


class AttemptLogs:
    """The running attempts' logs, followed from the run's own events: an attempt is
    followed from its `attempt_started` on, and let go once its `attempt_finished` was
    read. `run_dir`: the run's folder; None: no attempt is read (a run shown without it)."""

    def __init__(self, run_dir: Path | None = None, *, every_s: float = READ_EVERY_S) -> None:
        self.run_dir = run_dir
        self.every_s = every_s
        self._logs: dict[str, GrowingLog] = {}
        self._read_ts = 0.0
        self._told: set[str] = set()
        """The notices shown: one an attempt repeats (each says the isolation, an unknown
        window...) is shown once, not once per attempt."""
        self.local = False
        """The model runs on a server the user gave (`--base-url`, from `run_started`):
        each of its calls' time is worth showing (console/text/event_lines.attempt_news)."""

    def news(self, event: ev.Event) -> list[tuple[str, ev.Event]]:
        """Fed each of the run's events in order: what its attempts wrote up to this
        event's wall clock and was not yet given, as (attempt id, event), oldest first."""
        if self.run_dir is None:
            return []
        if isinstance(event, ev.RunStarted):
            self.local = bool(event.config.get("base_url"))
        elif isinstance(event, ev.Notice):
            self._told.add(event.message)
        if isinstance(event, ev.AttemptStarted):
            self._follow(event)
            return []
        ending = isinstance(event, ev.AttemptFinished | ev.RunFinished)
        if (
            not self._logs
            or not event.ts
            or (not ending and event.ts - self._read_ts < self.every_s)
        ):
            return []
        self._read_ts = event.ts
        found = [(a, e) for a, log in self._logs.items() for e in log.read(event.ts, to_end=ending)]
        if isinstance(event, ev.AttemptFinished):
            self._logs.pop(event.attempt, None)
        news: list[tuple[str, ev.Event]] = []
        for attempt, said in sorted(found, key=lambda found: found[1].ts):
            if isinstance(said, ev.Notice):
                if said.message in self._told:
                    continue
                self._told.add(said.message)
            news.append((attempt, said))
        return news

    def resumed(self, recorded: Iterable[ev.Event]) -> None:
        """A resumed run's past (`recorded`, which its display does not see): its
        attempts still running are followed from where their logs end now, what they
        wrote before having been shown by the process that ran them then."""
        if self.run_dir is None:
            return
        running: dict[str, ev.AttemptStarted] = {}
        for event in recorded:
            if isinstance(event, ev.AttemptStarted):
                running[event.attempt] = event
            elif isinstance(event, ev.AttemptFinished):
                running.pop(event.attempt, None)
            elif isinstance(event, ev.Notice):
                self._told.add(event.message)
        for started in running.values():
            self._follow(started)
            log = self._logs.get(started.attempt)
            with contextlib.suppress(OSError):
                if log is not None:
                    log.offset = log.path.stat().st_size

    def _follow(self, started: ev.AttemptStarted) -> None:
        assert self.run_dir is not None
        root = self.run_dir.resolve()
        folder = (root / started.folder).resolve()
        if folder.is_relative_to(root) and folder != root:  # as the run's log names it
            self._logs[started.attempt] = GrowingLog(folder / EVENTS_FILE, NEWS)
