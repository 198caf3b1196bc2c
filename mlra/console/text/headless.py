"""Headless displays: a concise live transcript, and JSON lines.

The transcript uses rich on a terminal and plain lines otherwise (a batch log,
a pipe), from the same events the console renders. Whatever a run's text holds, what
is printed holds no control character a terminal would obey (mlra/terminal_text.py):
the transcript escapes them where it prints, the JSON lines write them as JSON escapes.
What each event is said in (a call, a score, an attempt) is console/text/event_lines.py,
shared with the console's panes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from mlra import events as ev
from mlra.agent.record.eventlog import encode_event
from mlra.agent.record.run_limits import RunLimits
from mlra.agent.record.state import PAUSED_AFTER_ATTEMPTS
from mlra.console.text.attempt_lines import (
    attempt_finished_line,
    attempt_ok,
    attempt_started_line,
    graded_attempt_words,
)
from mlra.console.text.attempt_logs import AttemptLogs
from mlra.console.text.event_lines import (
    attempt_news,
    describe_call,
    ending_words,
    evaluation_started_line,
    fork_line,
    isolation_words,
    job_end_line,
    job_ok,
    one_line,
    preview_line,
    replayed_line,
    resumed_line,
    said_call,
    score_words,
    submission_line,
    time_limit_raised_line,
    time_warning_line,
    unknown_line,
)
from mlra.console.text.heartbeat import EVERY_S, Heartbeat
from mlra.console.text.model_lines import learned_window_line, model_call_line, retry_line
from mlra.console.text.printer import Printer
from mlra.console.text.written_calls import AnswerNotes
from mlra.durations import format_duration
from mlra.tasks.evaluators.progress import progress_words
from mlra.terminal_text import as_drawn, printable, printable_json, printable_line
from mlra.tools.plan import render_plan

if TYPE_CHECKING:
    from mlra.agent.record.annotations import Annotation


HELD_BY = {
    "start": "paused before the first action (--paused): mlra ctl {run} step runs one, "
    "mlra ctl {run} resume goes on",
    "step": "paused after one action: mlra ctl {run} step runs the next, "
    "mlra ctl {run} resume goes on",
    "system": "paused: the model provider keeps failing; mlra ctl {run} resume retries",
    "resume": "paused again, as it was when mlra stopped: mlra ctl {run} step runs one "
    "action, mlra ctl {run} resume goes on",
}
"""The pauses the run makes itself, by their `control` source (a user's is `user pause`)."""
HEAD_FIRST_TOOLS = frozenset({"attempt_wait", "attempts"})
"""Answered with the search's table, best first: its head (what ended, the best) is shown."""
HEAD_LINES = 5


class TranscriptDisplay(Printer):
    """A concise transcript: one or a few lines per meaningful event."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        rich: bool | None = None,
        verbose: bool = False,
        heartbeat_s: float | None = EVERY_S,
    ) -> None:
        self.stream = stream or sys.stdout
        self._heartbeat = Heartbeat(heartbeat_s) if heartbeat_s else None
        """While something runs with nothing printed, a line every `heartbeat_s` of run
        clock (console/text/heartbeat.py); None: none."""
        self._now = 0.0
        use_rich = self.stream.isatty() if rich is None else rich
        self.verbose = verbose
        self._console = None
        if use_rich:
            from rich.console import Console

            # Text as it is: no markup, no :emoji: codes, no highlighting.
            self._console = Console(
                file=self.stream, highlight=False, soft_wrap=True, emoji=False, markup=False
            )
        self._calls: dict[str, ev.ToolCall] = {}
        self._streamed: set[str] = set()
        """The calls whose output came as it was written (a command's): `-v` has shown
        it; a result that came whole (a file read, a listing) is shown with the result."""
        self._limits = RunLimits()
        """The run's time limit: a wait's line says no more than the run had left."""
        self._attempts = AttemptLogs()
        self._attempt = False
        """This log is an attempt's own run (its `run_started` says so)."""
        """A search's attempts' own logs, followed (the run's folder is told: attempts_in)."""
        self._waiting: dict[str, str] = {}
        """The tool of each call that waited for approval, by call id (an edit names it)."""
        self._fork: ev.RunForked | None = None
        self._fork_dir: Path | None = None
        self._local = False
        """The model runs on a server the user gave (`--base-url`): its calls are slow
        enough, and the prompt's reading long enough, that each call's time is shown."""
        self._submission: ev.Submission | None = None
        self._attempt_scores: dict[str, float | None] = {}
        """Each finished attempt's validation score: the score line sets the graded
        attempt's beside its test score."""
        self._regrading = False
        self._answer_notes = AnswerNotes()
        self.muted = False
        """Fold events without printing them: a replay's before its `--at` step."""
        self._grading_since: float | None = None
        """When the grading began (its start event's wall clock): the run clock stands
        still while it grades, so its progress lines say how long it has been at it."""

    def read_ahead(self, events: list[ev.Event], run_dir: Path) -> None:
        """A replay knows the whole log: a fork's begins with its source's events, and
        its header names the fork (its id, its workspace), not the source."""
        self._fork = next((e for e in reversed(events) if isinstance(e, ev.RunForked)), None)
        self._fork_dir = run_dir
        self.attempts_in(run_dir)

    def attempts_in(self, run_dir: Path, resumed: Iterable[ev.Event] = ()) -> None:
        """The run's folder: its attempts' logs are read for their model calls and notices
        (shown prefixed with the attempt's id), and by heartbeats for their progress;
        `resumed`: the past of a resumed run (`took_up`), whose running attempts are
        followed on."""
        past = list(resumed)
        self._attempts.run_dir = run_dir
        if self._heartbeat is not None:
            self._heartbeat.run_dir = run_dir
        self.took_up(past)

    def took_up(self, past: list[ev.Event]) -> None:
        """A resumed (or forked) run's past, which this printer, subscribed as the run
        goes on, never sees: folded as if printed, nothing said. A resume without
        `--time-limit` writes no limit: its wait lines and heartbeats said "up to 60m"
        though the run had recorded 5 minutes, and a wait taken up again under its call
        id had no heartbeat, its call never seen."""
        self._attempts.resumed(past)
        for event in past:
            self._limits.apply(event)
            if self._heartbeat is not None:
                self._heartbeat.took_up(event)
            match event:  # what the lines to come name: a call, an attempt's score
                case ev.ToolCall():
                    self._calls[event.call_id] = event
                case ev.ApprovalRequested():
                    self._waiting[event.call_id] = event.tool
                case ev.AttemptFinished():
                    self._attempt_scores[event.attempt] = event.score
                case ev.Submission():
                    self._submission = event
                case _:
                    pass

    def annotation(self, note: Annotation) -> None:
        """A person's note on a step (a replay prints them; the run never sees them)."""
        self._out(f"  ✎ note on step {note.step}: {printable_line(note.summary())}", "magenta")

    def from_step(self, step: int) -> None:
        """A replay printed from worker step `step` (`mlra replay --at`): the events before
        it are fed in muted (`muted`), so what follows names their calls and limits."""
        self.muted = False
        self._out(f"── from worker step {step}; the steps before it are not printed ──", "dim")

    def _out(self, text: str, style: str = "") -> None:
        """Print a line (or a few); whatever the run put in it is shown, never obeyed."""
        if self.muted:
            return
        text = printable(text)
        if self._heartbeat is not None:
            self._heartbeat.printed(self._now)
        console = self._console
        if console is not None:
            self._print(lambda: console.print(text, style=style or None, markup=False))
        else:
            self.line(text)

    def on_event(self, event: ev.Event) -> None:
        self._now = event.t
        self._limits.apply(event)
        if self._heartbeat is not None:
            self._heartbeat.apply(event)
        for attempt, said in self._attempts.news(event):
            self._attempt_said(attempt, said, event.t)
        self._say(event)
        if said := self._answer_notes.line(event):
            self._out(f"[{format_duration(event.t)}] {said[0]}", said[1])
        if self._heartbeat is not None:
            for line in self._heartbeat.due(event.t):
                self._out(f"[{format_duration(event.t)}] {line}", "dim")

    def time_calls(self, local: bool) -> None:
        """Show each model call's time and speed (a model on the user's own server), as
        `run_started` would tell a printer that saw it."""
        self._local = local

    def _attempt_said(self, attempt: str, event: ev.Event, now: float) -> None:
        """An attempt's model call or notice, from its own log, at the run's clock."""
        said = attempt_news(event, calls=self._local)
        if said is not None:
            text, style = said
            self._out(f"[{format_duration(now)}] {printable_line(attempt)} · {text}", style)

    def _say(self, event: ev.Event) -> None:
        t = format_duration(event.t)
        match event:
            case ev.RunStarted():
                self._local = bool(event.config.get("base_url"))
                self._attempt = event.is_attempt
                box = event.sandbox
                net = "network" if box.network else "no network"
                if box.network and box.network_via:  # "slirp4netns 1.2.0", "host", ...
                    net = f"network: {box.network_via.split(':')[0]}"
                run, workspace, model = event.run_id, box.workspace, event.model
                limit = event.limits.time_limit_s
                fork = self._fork
                if fork is not None:
                    run = (
                        f"{fork.run_id} (a fork of {fork.source_run} at worker step {fork.at_step})"
                    )
                    model = fork.model
                    limit = float(fork.settings.get("time_limit_s", limit))  # its --time-limit
                    if fork.sandbox is not None:
                        workspace = fork.sandbox.workspace
                    elif self._fork_dir is not None:
                        workspace = str(self._fork_dir / "workspace")
                self._out(
                    f"▶ {event.task} · {model} · run {run}\n"
                    f"  sandbox {box.kind} ({isolation_words(box)}, {net}) · "
                    f"workspace {workspace} · "
                    f"limit {format_duration(limit)}",
                    "bold",
                )
            case ev.RunForked():
                self._out(f"[{t}] {fork_line(event)}", "bold cyan")
            case ev.RunResumed():  # as the console's transcript marks it
                self._out(f"[{t}] {resumed_line(event)}", "bold cyan")
            case ev.JobStarted():
                name = f" ({printable_line(event.name)})" if event.name else ""
                self._out(
                    f"[{t}] job {event.job}{name} started: $ {one_line(event.command, 160)}"
                    f" · log {printable_line(event.log)}",
                    "blue",
                )
            case ev.JobEnded():
                self._out(f"[{t}] {job_end_line(event)}", "green" if job_ok(event) else "yellow")
            case ev.ModelCall() if self._local:
                self._out(f"[{t}] {model_call_line(event)}", "dim")
            case ev.ContextWindowLearned():
                self._out(f"[{t}] {learned_window_line(event)}", "yellow")
            case ev.ModelRetry() if event.in_wait is None:  # else its wait's line said it
                self._out(f"[{t}] {retry_line(event)}", "yellow")
            case ev.Notice() if not self._answer_notes.hides(event):  # stamped, as the console's
                self._out(f"[{t}] ! {event.message}", "yellow" if event.level != "error" else "red")
            case ev.TimeWarning():
                self._out(f"[{t}] ! {time_warning_line(event)}", "yellow")
            case ev.TimeLimitRaised():
                self._out(f"[{t}] {time_limit_raised_line(event)}", "cyan")
            case ev.WorkspaceSnapshot(left_out=ev.SnapshotLeftOut() as gaps):
                self._out(
                    f"! the workspace snapshot after step {event.step} left out: "
                    + one_line("; ".join(gaps.notes), 400),
                    "yellow",
                )
            case ev.PlanUpdated():
                self._out(f"[{t}] plan ({event.reason or 'updated'}):", "cyan")
                for line in render_plan(event.steps).splitlines():
                    self._out(f"    {line}", "cyan")
            case ev.SupervisorMessage():
                self._out(f"[{t}] supervisor: {one_line(event.text, 300)}", "magenta")
            case ev.SubtaskStarted():
                self._out(
                    f"[{t}] → subtask {event.subtask}{f' [{event.step_id}]' if event.step_id else ''}: {one_line(event.instructions, 240)}",
                    "magenta",
                )
            case ev.SubtaskFinished():
                self._out(
                    f"[{t}] ← subtask {event.subtask} {ev.subtask_outcome_words(event.outcome)}: {one_line(event.report, 240)}",
                    "magenta",
                )
            case ev.Review():
                if event.guidance:
                    self._out(f"[{t}] review: {one_line(event.guidance, 240)}", "magenta")
            case ev.WorkerThought():
                self._out(f"[{t}] worker: {one_line(event.text, 300)}")
            case ev.ToolCall():
                self._calls[event.call_id] = event
                who = "" if event.agent in ("worker", "baseline") else f"{event.agent} "
                self._out(
                    f"[{t}] {who}{said_call(event, self._limits.left_at(event.t))}",
                    "bold blue",
                )
            case ev.ApprovalRequested():
                self._waiting[event.call_id] = event.tool
                run = str(self._attempts.run_dir or "RUN")  # what decides it, from a shell
                self._out(
                    f"[{t}] ? waiting for approval of {event.tool} (breakpoint: {event.reason}): "
                    f"mlra ctl {run} approve, edit JSON or reject MESSAGE decides it",
                    "yellow",
                )
            case ev.ToolOutput():
                self._streamed.add(event.call_id)
                if self.verbose:
                    for line in event.text.rstrip("\n").splitlines():
                        self._out(f"    {line}", "dim")
            case ev.ToolResult():
                self._tool_result(event)
            case ev.ModelError() if event.cut_off:
                self._out(f"[{t}] {one_line(event.error, 300)}", "yellow")
            case ev.ModelError():
                self._out(
                    f"[{t}] model error{' (fatal)' if event.fatal else ''}: {one_line(event.error, 300)}",
                    "red",
                )
            case ev.HistorySummarized():
                self._out(
                    f"[{t}] {event.agent} history summarized (turns {event.first_turn}–{event.last_turn})",
                    "dim",
                )
            case ev.Control(action="pause") if event.source in HELD_BY:
                # As the console says it, with the commands that go on from a shell.
                run = str(self._attempts.run_dir or "RUN")
                held = HELD_BY[event.source]
                if event.source == "step" and event.text == PAUSED_AFTER_ATTEMPTS:
                    held = f"{PAUSED_AFTER_ATTEMPTS}: " + held.split(": ", 1)[1]
                self._out(f"[{t}] {held.format(run=run)}", "yellow")
            case ev.Control(source=ev.REPLAYED):
                call = self._calls.get(event.call_id or "")
                ran = describe_call(call.tool, event.arguments) if call and event.arguments else ""
                self._out(f"[{t}] {one_line(replayed_line(event, ran), 300)}", "yellow")
            case ev.Control():
                detail = f": {one_line(event.text, 120)}" if event.text else ""
                if event.action in ("attempt_stop", "promote") and event.target:
                    detail = f" {printable_line(event.target)}{detail}"
                if event.action == "edit" and event.arguments is not None:
                    # What ran instead of what the model asked for.
                    call = self._calls.get(event.call_id or "")
                    tool = self._waiting.get(event.call_id or "") or (call.tool if call else "")
                    detail = f", runs: {describe_call(tool, event.arguments)}"
                self._out(f"[{t}] {event.source} {event.action}{detail}", "yellow")
            case ev.AttemptStarted():
                self._out(f"[{t}] {attempt_started_line(event)}", "cyan")
            case ev.AttemptFinished():
                self._attempt_scores[event.attempt] = event.score
                style = "green" if attempt_ok(event) else "red" if event.status == "buggy" else ""
                self._out(f"[{t}] {attempt_finished_line(event)}", style or "yellow")
            case ev.Submission():
                self._submission = event
                self._out(f"[{t}] {submission_line(event)}", "bold")
            case ev.EvaluationStarted():
                self._regrading = event.regrade_by is not None
                self._grading_since = event.ts or None
                self._out(f"[{t}] {evaluation_started_line(event)}")
            case ev.EvaluationProgress():
                since = self._grading_since
                took = f" +{format_duration(event.ts - since)}" if since and event.ts else ""
                self._out(f"[{t}{took}] grading: {progress_words(event)}", "dim")
            case ev.EvaluationFinished():
                line = f"[{t}] {score_words(event, regrade=self._regrading)}"
                if not self._regrading and self._submission is not None:
                    attempt = self._submission.attempt
                    validation = self._attempt_scores.get(attempt) if attempt else None
                    test = event.score if event.ok else None
                    words = graded_attempt_words(self._submission, validation, test)
                    line += f" {words}" if words else ""
                self._out(line, "bold green" if event.ok else "bold red")
            case ev.RunFinished():
                ended = ending_words(event, attempt=self._attempt)
                self._out(f"■ {ended} after {t}: {event.message}", "bold")
            case ev.UnknownEvent():
                self._out(f"[{t}] {unknown_line(event)}", "dim")
            case _:
                pass

    def _tool_result(self, event: ev.ToolResult) -> None:
        status = "✓" if event.ok else "✗"
        bits = []
        if event.exit_code is not None:
            bits.append(f"exit {event.exit_code}")
        bits.append(f"{event.duration_s:.1f}s")
        if event.timed_out:
            bits.append("timed out")
        if event.truncated:
            bits.append("output cut")
        if event.tool in ("assign_subtask", "update_plan"):
            if not event.ok:
                self._out(f"    {status} {one_line(event.output, 200)}", "red")
            return
        self._out(f"    {status} {' · '.join(bits)}", "green" if event.ok else "red")
        if self.verbose and event.ok and event.call_id in self._streamed:
            return  # shown line by line as it came
        drawn = as_drawn(event.output)  # a bar's last state, not each redraw a line
        lines = [ln for ln in drawn.rstrip().splitlines() if ln.strip()]
        if lines and lines[-1].startswith(("[exit code", "[timed out")):
            lines.pop()  # the status line repeats what the ✓/✗ line says
        if self.verbose and event.call_id not in self._streamed:
            shown = lines  # -v: all of what came whole, as it came
        elif event.ok and (event.tool in HEAD_FIRST_TOOLS or event.tool == "list_files"):
            # Its head: a table is best first, a listing's folders come before their
            # files (a tail would show a folder's files at the top level).
            shown = lines if len(lines) <= HEAD_LINES + 1 else lines[:HEAD_LINES]
            if len(shown) < len(lines):  # a "… 1 more" would take the line it hides
                shown.append(f"… {len(lines) - HEAD_LINES} more")
        else:
            shown = lines[-4:] if event.ok else lines[-8:]
        for line in shown:
            self._out(f"    │ {preview_line(line)}", "dim")

    def close(self) -> None:
        if self._console is None:
            super().close()


class JsonDisplay(Printer):
    """Every event as one JSON line, the same JSON value as in the log: the characters
    the encoder leaves raw that a terminal would obey (C1, bidirectional controls) are
    written as `\\uXXXX` escapes, which any JSON reader reads back to the same text."""

    def __init__(self, stream: IO[str] | None = None, *, include_samples: bool = True) -> None:
        self.stream = stream or sys.stdout
        self.include_samples = include_samples

    def on_event(self, event: ev.Event) -> None:
        self.line(printable_json(encode_event(event).decode("utf-8").removesuffix("\n")))
