"""The fold from a run's events to the curves the Curves view draws (console/
curves_screen.py): each series by (where it came from, its name) with its points, and
the validation scores beside them.

Apart from the widget so tests check it without a terminal, and fed the way every
pane is (the console's batched event path: live, attached, or a replay's events up to
its cursor). Memory stays bounded however long the run: a series past `MAX_POINTS`
keeps every other point (and then takes every other new one), always with its
newest; past `MAX_SERIES` new series are counted, not kept.
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlra import events as ev
from mlra.agent.metrics.one_off import is_curve
from mlra.agent.record.log_refs import Unresolved, resolve

FOLDED = ("metrics", "validation", "job_started", "tool_call")
"""The events the curves are folded from, wherever they are read (the console's events,
a replay's, an attempt's own log): the points, the validations, and the jobs and calls
whose commands name the series (`train.py loss`)."""
MAX_POINTS = 2000
"""Points kept per series (a terminal plot is a few hundred cells wide)."""
MAX_SERIES = 200
MAX_VALIDATIONS = 2000


@dataclass(frozen=True)
class CurvePoint:
    wall: float
    """Run-clock seconds (of the log it was read from)."""
    step: int | None
    value: float
    seq: int
    """The event that carried it (its log's numbering): a replay cuts at the cursor's."""


@dataclass
class Series:
    source: str
    """`job:<id>`, `command:<call_id>`, `file:<path>`; an attempt's prefixed `a2 `."""
    name: str
    points: list[CurvePoint] = field(default_factory=list)
    stride: int = 1
    """Every `stride`-th new point is kept (doubles each time the series is thinned)."""
    seen: int = 0
    last: CurvePoint | None = None
    """The newest point, kept whether or not the stride keeps it."""

    @property
    def label(self) -> str:
        return f"{self.source} {self.name}"

    def add(self, point: CurvePoint) -> None:
        self.seen += 1
        self.last = point
        if (self.seen - 1) % self.stride:
            return
        self.points.append(point)
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
            self.stride *= 2

    def shown(self) -> list[CurvePoint]:
        """Its points as drawn: the kept ones and the newest."""
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            return [*self.points, self.last]
        return list(self.points)

    @property
    def has_steps(self) -> bool:
        return all(p.step is not None for p in self.shown())

    @property
    def is_curve(self) -> bool:
        """Its values change (agent/metrics/one_off.py's rule, the report's and the
        exports' too): else a one-off number (`d=128` printed once), listed, not picked."""
        return is_curve(p.value for p in self.shown())


@dataclass(frozen=True)
class ValidationPoint:
    wall: float
    score: float
    metric: str
    seq: int
    origin: str
    """"" for the run's own, an attempt's id for its."""


class CurveSet:
    """Series by (source, name) and the validation points, folded from events."""

    def __init__(self, origin: str = "") -> None:
        self.origin = origin
        """An attempt's id: its series are named `<id> <source>` to tell them apart."""
        self.series: dict[tuple[str, str], Series] = {}
        self.validations: list[ValidationPoint] = []
        self.left_out_series = 0
        self.version = 0
        """Bumped by every change: a view redraws only when it moved."""
        self.last_source: str | None = None
        """The source of the newest points: the view's default selection."""
        self.commands: dict[str, str] = {}
        """A job's or a command's source to the command it ran: what a series is named
        after (`train.py loss`), not the id the log knows it by."""

    def _source(self, source: str) -> str:
        return f"{self.origin} {source}" if self.origin else source

    def feed(self, event: ev.Event) -> bool:
        """Take one event; whether it changed the curves."""
        if isinstance(event, ev.JobStarted):
            self.commands[self._source(f"job:{event.job}")] = event.command
            return False
        if isinstance(event, ev.ToolCall):
            command = (event.arguments or {}).get("command")
            if isinstance(command, str):
                self.commands[self._source(f"command:{event.call_id}")] = command
            return False
        if isinstance(event, ev.Metrics):
            source = f"{self.origin} {event.source}" if self.origin else event.source
            taken = 0
            for p in event.points:
                if not math.isfinite(p.value):
                    continue
                key = (source, p.name)
                series = self.series.get(key)
                if series is None:
                    if len(self.series) >= MAX_SERIES:
                        self.left_out_series += 1
                        continue
                    series = self.series[key] = Series(source, p.name)
                series.add(CurvePoint(p.wall, p.step, p.value, event.seq))
                taken += 1
            if taken:
                self.last_source = source
                self.version += 1
                return True
            return False
        if isinstance(event, ev.Validation) and event.ok and event.score is not None:
            if math.isfinite(event.score) and len(self.validations) < MAX_VALIDATIONS:
                self.validations.append(
                    ValidationPoint(event.t, event.score, event.metric, event.seq, self.origin)
                )
                self.version += 1
                return True
        return False

    def one_offs_only(self) -> int:
        """How many series were read where none is a curve yet (0 where one is, or none
        was read): a script's sizes printed before its first loss, which the view lists
        but does not draw (agent/metrics/one_off.py)."""
        if any(s.is_curve for s in self.series.values()):
            return 0
        return len(self.series)

    def feed_all(self, events: Iterable[ev.Event]) -> CurveSet:
        for event in events:
            self.feed(event)
        return self

    def merged(self, others: Iterable[CurveSet]) -> CurveSet:
        """This set and others' (attempts') side by side, as one to draw."""
        out = CurveSet(self.origin)
        for part in [self, *others]:
            out.series.update(part.series)
            out.validations.extend(part.validations)
            out.left_out_series += part.left_out_series
            out.version += part.version
            out.last_source = part.last_source or out.last_source
            out.commands.update(part.commands)
        return out

    def names(self) -> dict[str, str]:
        """Each series' label to the name a person reads: the run's own named after the
        program its job or command ran (`train.py loss`), an attempt's after the
        attempt (`a2 loss`, with the program where the attempt has two of that name);
        where two would still read the same, the source's id tells them apart."""
        by_name: dict[tuple[str, str], int] = {}
        for s in self.series.values():
            key = (origin_of(s), s.name)
            by_name[key] = by_name.get(key, 0) + 1
        out: dict[str, str] = {}
        for s in self.series.values():
            origin = origin_of(s)
            own = s.source.split(" ", 1)[1] if origin else s.source
            program = _program(own, self.commands.get(s.source))
            if origin and by_name[(origin, s.name)] == 1:
                out[s.label] = f"{origin} {s.name}"
            else:
                out[s.label] = " ".join(p for p in (origin, program, s.name) if p)
        seen: dict[str, int] = {}
        for name in out.values():
            seen[name] = seen.get(name, 0) + 1
        for s in self.series.values():
            if seen[out[s.label]] > 1:  # the same program twice: its id says which
                out[s.label] = f"{out[s.label]} ({s.source.rsplit(':', 1)[-1]})"
        return out


def origin_of(series: Series) -> str:
    """The attempt a series is of (`a2`), "" for the run's own."""
    return series.source.split(" ", 1)[0] if " " in series.source else ""


_SCRIPTS = {".py", ".sh", ".jl", ".R", ".lua", ".js"}
_SHELL = {"for", "while", "until", "if", "cd", "set", "export", "source", "time", "exec"}
_LAUNCHERS = {"python", "python3", "uv", "run", "poetry", "env", "bash", "sh", "torchrun", "-m"}


def _program(source: str, command: str | None) -> str:
    """What a person calls the thing that printed a series: the script its command ran
    (`python train.py --steps 600`: `train.py`), a file's name, else a job's id."""
    kind, _, rest = source.partition(":")
    if kind == "file":
        return Path(rest).name or rest
    if command:
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        scripts = [w for w in words if Path(w).suffix in _SCRIPTS]
        if scripts:
            return Path(scripts[0]).name[:32]
        for word in words:
            if word in _LAUNCHERS or word.startswith("-") or ("=" in word and "/" not in word):
                continue
            if word not in _SHELL and word.isprintable() and not set(word) & set("$;&|(){}"):
                return Path(word).name[:32] or kind
            break
    return rest if kind == "job" else kind


def curves_upto(events: Iterable[ev.Event], seq: int, origin: str = "") -> CurveSet:
    """The curves as the run's displays showed them once event `seq` was in."""
    out = CurveSet(origin)
    for event in events:
        if event.seq > seq:
            break
        out.feed(event)
    return out


# --- what is drawn ---------------------------------------------------------------------


@dataclass(frozen=True)
class Drawn:
    """One series as it is plotted: its x and y, and what the axis left out."""

    label: str
    x: list[float]
    y: list[float]
    left_out: int = 0
    """Points a log scale cannot show (zero or below)."""


def x_axis_is_step(series: Sequence[Series]) -> bool:
    """The step axis is offered only when every shown point states its step."""
    return bool(series) and all(s.has_steps for s in series)


def decimated(xs: list[float], ys: list[float], room: int) -> tuple[list[float], list[float]]:
    """At most `room` points: each of `room // 2` runs of points gives its lowest and
    highest (in their order), so a noisy curve keeps its envelope and spikes; plotext's
    cost grows with the points drawn, and a terminal shows a few hundred across."""
    if room < 2 or len(xs) <= room:
        return xs, ys
    buckets = room // 2
    ox: list[float] = []
    oy: list[float] = []
    n = len(xs)
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo >= hi:
            continue
        run = range(lo, hi)
        i_min = min(run, key=ys.__getitem__)
        i_max = max(run, key=ys.__getitem__)
        for i in sorted({i_min, i_max}):
            ox.append(xs[i])
            oy.append(ys[i])
    return ox, oy


def drawn(
    series: Sequence[Series],
    *,
    by_step: bool,
    log: bool,
    room: int | None = None,
    names: Callable[[Series], str] | None = None,
) -> list[Drawn]:
    """`room`: at most this many points a series (see `decimated`); None: all kept.
    `names`: the legend's name of a series (else its label)."""
    out: list[Drawn] = []
    for s in series:
        xs: list[float] = []
        ys: list[float] = []
        left_out = 0
        for p in s.shown():
            if log and p.value <= 0:
                left_out += 1
                continue
            x = float(p.step) if by_step and p.step is not None else p.wall
            xs.append(x)
            ys.append(p.value)
        if room is not None:
            xs, ys = decimated(xs, ys, room)
        out.append(Drawn(names(s) if names else s.label, xs, ys, left_out))
    return out


def validations_drawn(
    curves: CurveSet, series: Sequence[Series], *, by_step: bool, log: bool
) -> Drawn | None:
    """The validation scores of the origins shown (the run's own when nothing is), on
    the same axes: by step, each at the step the shown series had reached by then."""
    origins = {s.source.split(" ", 1)[0] if " " in s.source else "" for s in series} or {""}
    xs: list[float] = []
    ys: list[float] = []
    left_out = 0
    steps = sorted((p.wall, p.step) for s in series for p in s.shown() if p.step is not None)
    for v in curves.validations:
        if v.origin not in origins:
            continue
        if log and v.score <= 0:
            left_out += 1
            continue
        if by_step:
            reached = [step for wall, step in steps if wall <= v.wall]
            x = float(max(reached)) if reached else float(steps[0][1]) if steps else 0.0
        else:
            x = v.wall
        xs.append(x)
        ys.append(v.score)
    if not xs and not left_out:
        return None
    metric = next((v.metric for v in curves.validations if v.metric), "")
    return Drawn(f"validation {metric}".strip(), xs, ys, left_out)


NO_CURVES = (
    "No curves yet: numbers a job prints (step N loss X, key=value, JSON "
    "lines) or writes (metrics.jsonl, TensorBoard) appear here as they are read."
)


def no_curve_yet(one_offs: int) -> str:
    """Only one-off numbers read (a script's sizes before its first loss): what the view
    shows instead of a chart of them."""
    numbers = (
        "1 number read so far has" if one_offs == 1 else f"{one_offs} numbers read so far have"
    )
    return (
        f"No curve yet: {numbers} not changed (one-off values, listed with their value; "
        "Space draws one). A loss is drawn here once it has moved."
    )


# --- an attempt's own log, read as it grows ----------------------------------------------

_WANTED = tuple(
    f'"type":{gap}"{kind}"'.encode() for kind in (*FOLDED, "model_call") for gap in ("", " ")
)
"""The lines of an attempt's log parsed for its curves: what the fold reads, and the
answers a call's arguments are kept in (agent/record/log_refs.py)."""


class LogCurves:
    """The curves of a run folder's log read from the file (an attempt's), a tail at a
    time: only new complete lines are read, and only those of the event types it
    folds parsed, whole (a call's arguments put back from the answer the log names, as
    every reader of a log does), so an attempt's series are named as the run's own are
    (`a1 eval.py loss`, not `a1 command loss`). `cut_ts`: leave out events stamped after
    this (a replay's cursor)."""

    def __init__(self, path: Path, origin: str) -> None:
        self.path = path
        self.origin = origin
        self._offset = 0
        self._events: list[ev.Event] = []
        self._curves = CurveSet(origin)
        self._answers: dict[str, ev.ModelCall] = {}
        """Each agent's latest answer: the one its calls' arguments refer to."""
        self.error: str | None = None

    def _read_new(self) -> None:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                data = f.read(64_000_000)
        except OSError as exc:
            self.error = str(exc) if not isinstance(exc, FileNotFoundError) else None
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            if not any(w in line for w in _WANTED):
                continue
            try:
                event = ev.parse_event(line)
            except Exception:  # a damaged line: the rest still reads
                continue
            if isinstance(event, ev.ModelCall):
                self._answers[event.agent] = event
                continue
            with contextlib.suppress(Unresolved):  # named by its id then, as before
                event = resolve(event, self._answer)
            if len(self._events) < 50_000:
                self._events.append(event)
            self._curves.feed(event)

    def _answer(self, seq: int) -> ev.ModelCall | None:
        return next((a for a in self._answers.values() if a.seq == seq), None)

    def curves(self, cut_ts: float | None = None) -> CurveSet:
        self._read_new()
        if cut_ts is None:
            return self._curves
        out = CurveSet(self.origin)
        for event in self._events:
            if event.ts > cut_ts:
                break
            out.feed(event)
        return out
