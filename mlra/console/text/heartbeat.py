"""The headless transcript's heartbeats: while a command, a job or a wait for attempts
runs with nothing printed for a while, a line saying what runs, for how long, and the
latest progress the log holds (`step 200/600 loss 4.62 · ETA 3m00s`); while only a
model call runs, how it goes (reading the prompt, or writing at about N tok/s).

Timed by the events themselves: each event carries the run clock (`t`), and the run
samples its resources every second (`resource_sample`), so the log ticks while a
silent command runs. A heartbeat is due when the run clock has moved `every_s` past
the last printed line; no clock of its own, so a replay prints the same heartbeats at
the same run-clock times, and a paused run (its clock stopped) prints none. A grading
says its own progress (`evaluation_progress`) while the run clock stands still.

A search's attempts each have a log of their own (`attempts/<id>/events.jsonl`):
waiting for them, the line gives each one's progress as its log held it at the time
of the event (wall clock `ts`), so a replay reads what the run read then.
"""

from __future__ import annotations

import time
from pathlib import Path

from mlra import events as ev
from mlra.agent.record.run_progress import Glance, ProgressWatch
from mlra.agent.record.state import RunState
from mlra.console.text.attempt_logs import GrowingLog
from mlra.console.text.event_lines import one_line, said_call, waiting_words
from mlra.console.text.model_wait import model_call_line
from mlra.durations import format_duration
from mlra.terminal_text import printable_line

EVERY_S = 30.0
"""A line at least this often (run-clock seconds) while something runs."""
QUIET_TOOLS = frozenset({"assign_subtask"})
"""Calls that only wait on the calls of another agent, which have heartbeats of their own."""


class Heartbeat:
    """Fed every event; `due` returns the lines to print now (none most of the time)."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.every_s = every_s
        self.state = RunState()
        self.progress = ProgressWatch()
        self.run_dir: Path | None = None
        """The run's folder, where its attempts' logs are; None: attempts unread."""
        self._quiet_since: float | None = None
        self._ts = 0.0
        self._attempt_logs: dict[str, AttemptProgress] = {}

    def apply(self, event: ev.Event) -> None:
        self._ts = event.ts
        self.state.apply(event)
        self.progress.apply(event)
        if self._quiet_since is None:
            self._quiet_since = event.t

    def took_up(self, event: ev.Event) -> None:
        """An event of a resumed run's past, folded with no line due from it: what runs
        and the run's limits as the run knows them (console/text/headless.py `took_up`)."""
        self._ts = event.ts
        self.state.apply(event)
        self.progress.apply(event)

    def printed(self, t: float) -> None:
        """A line was printed at run-clock `t`: the next heartbeat counts from it."""
        self._quiet_since = t

    def due(self, now: float) -> list[str]:
        state = self.state
        if state.paused or state.evaluating or state.finished is not None:
            self._quiet_since = now  # the clock stands still, or nothing runs any more
            return []
        lines = self.running_lines(now) or list(filter(None, [model_call_line(state, now)]))
        if not lines:
            self._quiet_since = now
            return []
        if self._quiet_since is not None and now - self._quiet_since < self.every_s:
            return []
        self._quiet_since = now
        return lines

    def running_lines(self, now: float) -> list[str]:
        """What runs now, one line each: a command or call, a job."""
        state = self.state
        lines: list[str] = []
        waiting = state.pending_approval.call_id if state.pending_approval else None
        waited = False
        for call in sorted(state.running.values(), key=lambda c: c.seq):
            if call.tool in QUIET_TOOLS or call.call_id == waiting:
                continue
            took = max(0.0, now - call.t)
            if call.tool == "attempt_wait":
                waited = True
                running = [n.id for n in state.attempts.running]
                left = state.run_limits.left_at(call.t)
                words = waiting_words(call.arguments, running, took, left)
                best, each = self._attempts_words(now)
                lines.append(f"… {words}{best}" + (f" · running: {each}" if each else ""))
                continue
            # The command that runs: the user's, where they edited it at its breakpoint.
            what = one_line(said_call(call, ran_with=state.edited_calls.get(call.call_id)), 80)
            line = f"… {what} still running, {format_duration(took)}"
            progress = self.progress.words(f"command:{call.call_id}", call.t, now)
            lines.append(line + (f" · {progress}" if progress else ""))
        for job in state.running_jobs:
            started = job.started
            name = f" ({printable_line(started.name)})" if started.name else ""
            took = format_duration(max(0.0, now - started.t))
            line = f"… job {printable_line(started.job)}{name} running, {took}"
            progress = self.progress.words(f"job:{started.job}", started.t, now)
            lines.append(line + (f" · {progress}" if progress else ""))
        if state.attempts.running and not waited:
            # The supervisor thinks (or runs something else) while its attempts run on.
            best, each = self._attempts_words(now)
            lines.append(f"… attempts running: {each}{best}")
        return lines

    def _attempts_words(self, now: float) -> tuple[str, str]:
        """(` · best a1 0.78`, `a2 1m01s (step 200/600 ...)`): the search as it stands."""
        tree = self.state.attempts
        best = tree.best
        words = f" · best {printable_line(best.id)} {tree.score_text(best)}" if best else ""
        each = ", ".join(
            self._attempt_words(n.id, n.started.folder, n.elapsed_s(now)) for n in tree.running
        )
        return words, each

    def _attempt_words(self, attempt: str, folder: str, running_s: float) -> str:
        """`a1 2m10s` and, where its log is read, its progress then (`step 200/600 ...`)."""
        words = f"{printable_line(attempt)} {format_duration(running_s)}"
        if self.run_dir is None:
            return words
        log = self._attempt_logs.get(folder)
        if log is None:
            log = self._attempt_logs[folder] = AttemptProgress(
                self.run_dir / folder / "events.jsonl"
            )
        progress = log.progress(self._ts)
        return f"{words} ({progress})" if progress else words


class AttemptProgress:
    """An attempt's log, read on from where the last reading left it
    (console/text/attempt_logs.py), and folded up to the wall clock asked for: the
    heartbeats' and the console's Attempts pane's word on how a running attempt does."""

    def __init__(self, path: Path) -> None:
        self.log = GrowingLog(path)
        self.glance = Glance()
        self.folded = False

    def progress(self, until_ts: float) -> str:
        """Its newest progress as the log held it at wall clock `until_ts` (0: now)."""
        for event in self.log.read(until_ts):
            self.glance.apply(event)
            self.folded = True
        if not self.folded or self.log.damaged:
            return ""
        now_ts = until_ts or time.time()
        return self.glance.words(self.glance.last_t, now_ts).partition(" · ")[2]
