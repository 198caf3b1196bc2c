"""Points read from a job's or a command's output and from metric files, batched per
source into `metrics` events and thinned past a bound.

A trainer may print a line per step for a day: logging a point per line would grow
the run's log without end and bury its events. So each source's points wait in memory
and go to the log as one `metrics` event every `FLUSH_S` seconds (and when the job or
command ends), and each series keeps every point up to `FULL_POINTS`, then every 2nd,
every 4th... (the stride doubling each time `LEVEL_POINTS` more are kept), so n points
read leave about FULL + LEVEL * log2(n / FULL) in the log: ~2,000 for 100,000 lines,
~2,500 for a million. A source's `thinned` counts what was read and left out.

What a source holds is bounded too, whatever the agent prints or writes: `MAX_SERIES`
series of names up to `MAX_NAME_CHARS`, an unfinished line up to MAX_LINE_CHARS. A
name past either cap is left out (counted in `thinned`) and a line that cannot be read
is skipped; each is said once in `notices`, which the run turns into notice events.

Reading costs time on the run's event loop (tens of microseconds a line), which the
console shares: a command printing 10,000 lines a second would spend half of every
second in the line reader, and keys would wait behind it. So each output source may
spend at most `READ_S_PER_S` of a second reading lines; past that, the second's lines
are counted in `thinned` and not read, but the last line of each piece of output
always is, so a curve still reaches its end (a trainer's metrics come a few lines a
second, and a flood is thinned past `FULL_POINTS` all the same).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from mlra import events as ev
from mlra.agent.metrics.log_lines import MAX_LINE_CHARS, LinePoint, parse_line

FLUSH_S = 5.0
READ_S_PER_S = 0.1
"""Seconds of reading one output source may take in a second (the docstring: why)."""
"""How often a source's waiting points go to the log (monotonic seconds)."""
FULL_POINTS = 1000
"""A series keeps every point up to this many."""
LEVEL_POINTS = 125
"""Past FULL_POINTS, the stride doubles each time this many more are kept."""
MAX_SERIES_POINTS = 4000
"""A hard bound per series, whatever the doubling leaves."""
MAX_SERIES = 64
"""Series per source: a log that names a new key on every line (ids, hashes) is not
a set of curves, and its points past this are left out."""
MAX_NAME_CHARS = 256
"""A longer series name (a TensorBoard tag, a JSON key) is not a curve's: left out."""

_BREAK = re.compile(r"[\r\n]")
Reading = tuple[str, float, int | None, float]
"""A point as read: name, value, step (or None) and run-clock seconds."""
Kind = Literal["log", "jsonl", "tensorboard"]


@dataclass
class _Series:
    read: int = 0
    kept: int = 0
    stride: int = 1
    next_double: int = FULL_POINTS
    last: tuple[float, int | None] | None = None
    last_wall: float = 0.0
    last_kept: bool = False
    """Whether the latest point read was kept: when its source ends, a curve that the
    stride thinned still gets its last point, so it reaches its end."""

    def keep(self) -> bool:
        """Whether the point just read is kept (every `stride`-th of those read)."""
        index = self.read
        self.read += 1
        if self.kept >= MAX_SERIES_POINTS or index % self.stride:
            return False
        self.kept += 1
        if self.kept >= self.next_double:
            self.stride *= 2
            self.next_double += LEVEL_POINTS
        return True


@dataclass
class _Source:
    source: str
    kind: Kind
    job: str | None = None
    call_id: str | None = None
    path: str | None = None
    partial: str = ""
    overlong: bool = False
    """The unfinished line is past MAX_LINE_CHARS: its rest is skipped to its end."""
    after_cr: bool = False
    """The last segment ended with a `\r`: what follows redraws the same line."""
    series: dict[str, _Series] = field(default_factory=lambda: {})
    waiting: list[ev.MetricPoint] = field(default_factory=lambda: [])
    thinned: int = 0
    offset: int | None = None
    second: float = 0.0
    """When this source's current second of line reading began (monotonic)."""
    spent: float = 0.0
    """Seconds spent reading its lines in that second."""


class MetricsRecorder:
    """`append` writes the run's own observation to its log; `clock` is the run clock."""

    def __init__(
        self,
        append: Callable[[ev.Event], object],
        clock: Callable[[], float],
        *,
        flush_s: float = FLUSH_S,
    ) -> None:
        self._append = append
        self._clock = clock
        self._flush_s = flush_s
        self._sources: dict[str, _Source] = {}
        self._flushed_at = time.monotonic()
        self._told: set[str] = set()
        self.notices: list[str] = []
        """What was left out for a cap or a fault, each kind said once a run."""
        self.closed = False

    # --- what is fed ------------------------------------------------------------------

    def job_output(self, job: str, text: str) -> None:
        self.output(f"job:{job}", text, job=job)

    def job_ended(self, job: str) -> None:
        self.end(f"job:{job}")

    def command_output(self, call_id: str, text: str) -> None:
        self.output(f"command:{call_id}", text, call_id=call_id)

    def command_ended(self, call_id: str) -> None:
        self.end(f"command:{call_id}")

    def output(
        self, source: str, text: str, *, job: str | None = None, call_id: str | None = None
    ) -> None:
        """Output as it comes: whole lines are read at once, the unfinished one waits.
        A `\\r` ends a segment as a terminal redraws it (a tqdm bar): each redraw is
        read, and one that repeats the last value of a series adds no point."""
        if self.closed:
            return
        src = self._source(source, "log", job=job, call_id=call_id)
        start = 0
        buffered = src.partial + text if not src.overlong else text
        wall = round(self._clock(), 3)
        now = time.monotonic()
        if now - src.second >= 1.0:
            src.second, src.spent = now, 0.0
        breaks = list(_BREAK.finditer(buffered))
        for i, found in enumerate(breaks):
            cut = found.start()
            segment = buffered[start:cut]
            ends_redraw = buffered[cut] == "\r"
            if src.overlong:
                src.overlong = ends_redraw  # a redraw's end is not the line's end
            elif src.spent >= READ_S_PER_S and i < len(breaks) - 1:
                src.thinned += 1
                self._tell(
                    "rate",
                    f"{src.source} prints faster than its lines can be read beside the "
                    "console; past that, only the last line of each piece of output is read",
                )
            else:
                begun = time.perf_counter()
                self._read_line(src, segment, wall, redraw=ends_redraw or src.after_cr)
                src.spent += time.perf_counter() - begun
            src.after_cr = ends_redraw
            start = cut + 1
        rest = buffered[start:]
        if src.overlong or len(rest) > MAX_LINE_CHARS:
            src.partial, src.overlong = "", True
        else:
            src.partial = rest
        self.flush(due_only=True)

    def add(
        self,
        source: str,
        kind: Kind,
        readings: Iterable[Reading],
        *,
        path: str | None = None,
        offset: int | None = None,
    ) -> None:
        """Points read exactly (a metric file's, read up to byte `offset`), thinned as any."""
        if self.closed:
            return
        src = self._source(source, kind, path=path)
        src.offset = offset
        for name, value, step, wall in readings:
            self._take(src, name, value, step, wall)

    def end(self, source: str) -> None:
        """The source is done (a job ended, a command returned): its unfinished line is
        read, and its points go to the log now."""
        src = self._sources.get(source)
        if src is None or self.closed:
            return
        if src.partial and not src.overlong:
            self._read_line(src, src.partial, round(self._clock(), 3), redraw=False)
        src.partial, src.overlong = "", False
        for name, series in src.series.items():
            if series.last is not None and not series.last_kept:  # the curve's end
                value, step = series.last
                src.waiting.append(
                    ev.MetricPoint(name=name, value=value, step=step, wall=series.last_wall)
                )
                src.thinned -= 1
                series.last_kept = True
        self._flush_source(src)
        del self._sources[source]

    # --- to the log ---------------------------------------------------------------------

    def flush(self, *, due_only: bool = False) -> None:
        """Every source's waiting points to the log: now, or only once FLUSH_S has passed."""
        now = time.monotonic()
        if due_only and now - self._flushed_at < self._flush_s:
            return
        self._flushed_at = now
        for src in list(self._sources.values()):
            self._flush_source(src)

    def close(self) -> None:
        """The run is ending: everything waiting goes to the log, and nothing after."""
        if self.closed:
            return
        for source in list(self._sources):
            self.end(source)
        self.closed = True

    # --- inside -------------------------------------------------------------------------

    def _source(
        self,
        source: str,
        kind: Kind,
        *,
        job: str | None = None,
        call_id: str | None = None,
        path: str | None = None,
    ) -> _Source:
        src = self._sources.get(source)
        if src is None:
            src = _Source(source=source, kind=kind, job=job, call_id=call_id, path=path)
            self._sources[source] = src
        return src

    def _tell(self, key: str, message: str) -> None:
        if key not in self._told:
            self._told.add(key)
            self.notices.append(f"metrics: {message}")

    def _read_line(self, src: _Source, line: str, wall: float, *, redraw: bool) -> None:
        try:
            points: list[LinePoint] = parse_line(line)
        except Exception as exc:  # any fault of one line skips that line only
            self._tell(
                "line", f"a line of {src.source} could not be read ({type(exc).__name__}); skipped"
            )
            return
        for point in points:
            if redraw:
                series = src.series.get(point.name)
                if series is not None and series.last == (point.value, point.step):
                    continue
            self._take(src, point.name, point.value, point.step, wall)

    def _take(self, src: _Source, name: str, value: float, step: int | None, wall: float) -> None:
        series = src.series.get(name)
        if series is None:
            if len(src.series) >= MAX_SERIES or len(name) > MAX_NAME_CHARS:
                src.thinned += 1
                if len(name) > MAX_NAME_CHARS:
                    self._tell(
                        "name",
                        f"{src.source} names a series in more than {MAX_NAME_CHARS} "
                        "characters; such series are not read",
                    )
                else:
                    self._tell(
                        "series",
                        f"{src.source} has more than {MAX_SERIES} series; the later ones "
                        "are not read",
                    )
                return
            series = src.series[name] = _Series()
        series.last, series.last_wall = (value, step), wall
        series.last_kept = series.keep()
        if not series.last_kept:
            src.thinned += 1
            return
        src.waiting.append(ev.MetricPoint(name=name, value=value, step=step, wall=wall))

    def _flush_source(self, src: _Source) -> None:
        if not src.waiting and not src.thinned:
            return
        event = ev.Metrics(
            source=src.source,
            kind=src.kind,
            job=src.job,
            call_id=src.call_id,
            path=src.path,
            points=src.waiting,
            thinned=src.thinned,
            offset=src.offset,
        )
        src.waiting, src.thinned = [], 0
        with contextlib.suppress(Exception):  # a closed log: the run is already over
            self._append(event)


__all__ = [
    "FLUSH_S",
    "FULL_POINTS",
    "MAX_NAME_CHARS",
    "MAX_SERIES",
    "MAX_SERIES_POINTS",
    "MetricsRecorder",
    "Reading",
]
