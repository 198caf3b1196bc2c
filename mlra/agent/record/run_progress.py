"""How far a running command or job has got, as far as its events tell: its newest
metric (`step 200 loss 4.62`), a count it printed (`step 200/600`, a tqdm bar's
`45/100`) and, where a total is known, the time left at the pace so far.

Read from the run's events alone (`metrics` and `tool_output`), so the headless
transcript's heartbeats and a batch's lines say what the log says, the same while the
run goes and on a replay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlra import events as ev
from mlra.agent.metrics.log_lines import parse_line as metric_points
from mlra.durations import format_duration
from mlra.tasks.evaluators.progress import parse_line, progress_words
from mlra.terminal_text import printable_line

MAX_METRICS = 3
"""A heartbeat names this many of the newest step's series at most."""
_COUNT = re.compile(
    r"(?<![\w./-])(?P<key>step|steps|iter|iteration|it|epoch|batch)\s*[:=]?\s*"
    r"(?P<done>\d+)\s*/\s*(?P<total>\d+)(?![\d.])",
    re.IGNORECASE,
)
"""A count the process states against its total: `step 200/600`, `Epoch 3/10`."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
SERVER_ABSENCE = {
    "connection_lost": "the connection was lost mid-answer",
    "not_answering": "the server is not answering",
    "loading_model": "the server is still loading its model",
    "not_ready": "the server is not ready",
}
"""Why a run waits for its model server, by `model_retry`'s cause."""


WAIT_OVER_S = 0.5
"""The run clock stands still while the run waits for its model server: once an event's
clock is past the retry's by more than this, the wait is over and the call is asked
again (the server back, reading the prompt), however long its answer then takes."""


@dataclass
class Count:
    done: int
    total: int
    what: str = "step"
    at: float = 0.0
    """The run clock when it was printed."""


@dataclass
class Newest:
    """A source's newest points: those of its latest step (or its latest line)."""

    step: int | None
    values: dict[str, float]
    at: float


def latest_count(text: str, after: Count | None = None) -> Count | None:
    """The last count `text` states: a tqdm bar's (`45%|###  | 45/100 [...]`) or a
    step's against its total; None where it states none. A count of steps (or epochs,
    `after` one, or one earlier in `text`) is the process's own progress, which a bar
    does not replace: a training that printed `step 300/300` and then saved its model
    under a `Writing model shards 1/1` bar was said to be at `1/1`."""
    found: Count | None = None
    for raw in re.split(r"[\r\n]", _ANSI.sub("", text)):
        line = raw.strip()
        if not line:
            continue
        bar = parse_line(line)
        if bar.done is not None and bar.total:
            own = found if found is not None else after
            if own is None or not own.what:
                found = Count(bar.done, bar.total, "")
            continue
        for match in _COUNT.finditer(line):
            total = int(match["total"])
            if total > 0:
                found = Count(int(match["done"]), total, match["key"].lower())
    return found


class ProgressWatch:
    """Folded from the events: each source's newest metric and count, by source
    (`command:<call_id>`, `job:<id>`, as `metrics` names them)."""

    def __init__(self) -> None:
        self.newest: dict[str, Newest] = {}
        self.counts: dict[str, Count] = {}

    def apply(self, event: ev.Event) -> None:
        match event:
            case ev.Metrics(kind="log") if all(p.step is None for p in event.points):
                pass  # numbers a line printed with no step: a model's size, a count of tokens
            case ev.Metrics() if event.points and not self._older(event):
                step = max((p.step for p in event.points if p.step is not None), default=None)
                last = event.points[-1]
                chosen = [p for p in event.points if p.step == step] if step is not None else []
                if not chosen:
                    chosen = [p for p in event.points if p.wall == last.wall]
                values: dict[str, float] = {}
                for point in chosen:
                    values[point.name] = point.value
                self.newest[event.source] = Newest(step, values, event.t)
            case ev.ToolOutput():
                source = f"command:{event.call_id}"
                count = latest_count(event.text, self.counts.get(source))
                if count is not None:
                    count.at = event.t
                    self.counts[source] = count
                # The line's own numbers, read as `metrics` reads them: those events are
                # flushed a few times a minute, so the output is the fresher.
                for line in reversed(re.split(r"[\r\n]", event.text)):
                    points = [p for p in metric_points(line) if p.step is not None]
                    if points:
                        values = {p.name: p.value for p in points}
                        self.newest[source] = Newest(points[0].step, values, event.t)
                        break
            case _:
                pass

    def _older(self, event: ev.Metrics) -> bool:
        """Its points were read before what the output already showed."""
        newest = self.newest.get(event.source)
        return newest is not None and max(p.wall for p in event.points) < newest.at

    def words(self, source: str, started: float, now: float) -> str:
        """`step 200/600 loss 4.62 · ETA 3m00s`, or "" where nothing was read yet.
        `started`, `now`: run-clock seconds, for the time left at the pace so far."""
        newest, count = self.newest.get(source), self.counts.get(source)
        parts: list[str] = []
        if count is not None:
            what = f"{count.what} " if count.what else ""
            parts.append(f"{what}{count.done}/{count.total}")
        elif newest is not None and newest.step is not None:
            parts.append(f"step {newest.step}")
        if newest is not None and (newest.step is not None or count is None):
            # A count beside numbers of no step (a model's size at its start) would
            # read as its progress: those are left out.
            shown = list(newest.values.items())[-MAX_METRICS:]
            parts += [f"{printable_line(name)} {value:.4g}" for name, value in shown]
        words = " ".join(parts)
        took = count.at - started if count is not None else 0.0
        if count is not None and 0 < count.done < count.total and took > 0:
            left = took / count.done * (count.total - count.done) - (now - count.at)
            words += f" · ETA {format_duration(max(0.0, left))}"
        return words


class Glance:
    """A running run in a few words, folded event by event (so a log read as it grows is
    never read twice): its run clock and the newest progress of what it runs."""

    def __init__(self) -> None:
        self.watch = ProgressWatch()
        self.started: dict[str, float] = {}
        self.ended: set[str] = set()
        self.calls: dict[str, tuple[str, float]] = {}
        """Other calls running (`validate`...), by call id, with when each began (wall
        clock): named, with how long it has run, where nothing is counted (a validation
        graded for minutes prints nothing, and its time ticking is what says it goes on;
        an attempt's closing validation runs past its own end, its log quiet and its run
        clock stopped, so the wall clock is what moves)."""
        self.grading: ev.EvaluationStarted | ev.EvaluationProgress | None = None
        self.last_t = 0.0
        self.last_ts = 0.0
        self.server_wait: tuple[float, ev.ModelRetry] | None = None
        """Since when (wall clock) the run has waited for a model server that went away,
        and its latest retry; None once the server answered or the wait gave up."""

    def apply(self, event: ev.Event) -> None:
        self.watch.apply(event)
        self.last_t = max(self.last_t, event.t)
        self.last_ts = max(self.last_ts, event.ts)
        match event:
            case ev.ModelRetry(cause=cause) if cause is not None:
                since = self.server_wait[0] if self.server_wait else event.ts
                self.server_wait = (since, event)
            case ev.ModelError(cut_off="connection_lost"):
                pass  # an answer cut off by the server's going: the wait goes on
            case ev.ModelCall() | ev.ModelAnswering() | ev.ModelError() | ev.RunFinished():
                self.server_wait = None
            case ev.EvaluationStarted() | ev.EvaluationProgress():
                self.grading = event
            case ev.EvaluationFinished():
                self.grading = None
            case ev.ToolCall(tool="bash" | "python"):
                self.started[f"command:{event.call_id}"] = event.t
            case ev.ToolCall(tool="attempt_wait"):
                pass  # a wait for attempts, whose own logs say how they go
            case ev.ToolCall():
                self.calls[event.call_id] = (event.tool, event.ts)
            case ev.ToolResult():
                self.ended.add(f"command:{event.call_id}")
                self.calls.pop(event.call_id, None)
            case ev.JobStarted():
                self.started[f"job:{event.job}"] = event.t
            case ev.JobEnded():
                self.ended.add(f"job:{event.job}")
            case _:
                pass

    def words(self, elapsed_s: float, now_ts: float | None = None) -> str:
        """`4m18s · step 200/600 loss 4.62 · ETA 3m00s`. `now_ts`: the wall clock now,
        for how long a wait for the model server or a call that counts nothing has
        lasted (the newest event's, if not given)."""
        words = format_duration(elapsed_s)
        if self.server_wait is not None and self.last_t <= self.server_wait[1].t + WAIT_OVER_S:
            # Its clock stands still while it waits: without this, a run whose server
            # died read as a run going on, its clock stuck, for the whole wait.
            since, retry = self.server_wait
            waited = format_duration(max(0.0, (now_ts or self.last_ts) - since))
            return (
                f"{words} (clock paused) · waiting {waited} for its model server: "
                f"{SERVER_ABSENCE[retry.cause or 'not_answering']} (retry {retry.attempt})"
            )
        grading = self.grading
        if grading is not None:  # the run clock stands still while it grades
            done = (
                f": {progress_words(grading)}" if isinstance(grading, ev.EvaluationProgress) else ""
            )
            return f"{words} · grading{done}"
        running = [(t, source) for source, t in self.started.items() if source not in self.ended]
        for t, source in sorted(running, reverse=True):
            progress = self.watch.words(source, t, elapsed_s)
            if progress:
                return f"{words} · {progress}"
        if self.calls:
            tool, began = list(self.calls.values())[-1]
            took = format_duration(max(0.0, (now_ts or self.last_ts) - began))
            return f"{words} · {printable_line(tool)} {took}"
        return words


def glance(events: list[ev.Event], elapsed_s: float, now_ts: float | None = None) -> str:
    """A running run in a few words for a batch's line: its run clock and the newest
    progress of what it runs (`4m18s · step 200/600 loss 4.62 · ETA 3m00s`), or the wait
    for its model server. `now_ts`: the wall clock now (the newest event's, if not given)."""
    folded = Glance()
    for event in events:
        folded.apply(event)
    return folded.words(elapsed_s, now_ts)
