"""Headless displays: a concise live transcript, and JSON lines.

The transcript uses rich on a terminal and plain lines otherwise (a batch log,
a pipe), from the same events the console renders. Whatever a run's text holds, what
is printed holds no control character a terminal would obey (mlra/terminal_text.py):
the transcript escapes them where it prints, the JSON lines write them as JSON escapes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mlra import events as ev
from mlra.agent.eventlog import encode_event
from mlra.durations import format_duration
from mlra.tasks.evaluators.progress import progress_words
from mlra.terminal_text import printable, printable_json, printable_line
from mlra.tools.plan import render_plan


def time_warning_line(event: ev.TimeWarning) -> str:
    left, limit = format_duration(event.left_s), format_duration(event.limit_s)
    return f"time warning: {left} left of the {limit} limit"


def one_line(text: str, limit: int = 160) -> str:
    """`text` on one line, cut at `limit`, with its control characters escaped."""
    flat = " ".join(text.split())
    return printable_line(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def describe_call(tool: str, arguments: dict[str, Any] | None, raw: str | None = None) -> str:
    """A tool call as a person would read it: `$ ls -la` rather than JSON; whatever the
    model put in it is shown, not obeyed (a command keeps its line breaks)."""
    return printable(_describe_call(printable_line(tool), arguments, raw))


def _describe_call(tool: str, arguments: dict[str, Any] | None, raw: str | None) -> str:
    if arguments is None:
        return f"{tool} <unreadable arguments: {one_line(raw or '', 80)}>"
    a = arguments
    if tool == "bash" and "command" in a:
        return f"$ {a['command']}"
    if tool == "python":
        if a.get("script"):
            return f"python {a['script']} {' '.join(map(str, a.get('args') or []))}".rstrip()
        return "python <<< " + one_line(str(a.get("code", "")), 100)
    if tool in ("read_file", "write_file", "edit_file", "list_files") and "path" in a:
        extra = ""
        if tool == "write_file":
            extra = f" ({len(str(a.get('content', '')))} chars)"
        return f"{tool} {printable_line(str(a['path']))}{extra}"
    if tool == "assign_subtask":
        return f"assign_subtask [{a.get('step_id')}]"
    if tool == "update_plan":
        return f"update_plan ({len(a.get('steps') or [])} steps)"
    if tool == "submit" and a.get("attempt"):
        return f"submit attempt {printable_line(str(a['attempt']))}"
    if tool == "submit":
        return f"submit {printable_line(str(a.get('path') or '(default artifact)'))}"
    return f"{tool} {one_line(json.dumps(a, ensure_ascii=False), 120)}"


def fork_line(e: ev.RunForked) -> str:
    """Where a fork's own events begin: what it is, and what it changed."""
    parts = [f"⑂ this is run {e.run_id}, forked from {e.source_run} at worker step {e.at_step}"]
    parts.append(f"model {e.model}")
    if e.edited_action:
        tool = str(e.edited_action.get("tool", ""))
        arguments = e.edited_action.get("arguments")
        parts.append(
            "the step's action edited: "
            + describe_call(tool, arguments if isinstance(arguments, dict) else None)
        )
    if e.missing_files:
        parts.append(f"{len(e.missing_files)} workspace file(s) could not be restored")
    if e.not_recorded:
        parts.append(
            f"{len(e.not_recorded)} workspace snapshot(s) left changes unrecorded, which the "
            "restored workspace lacks"
        )
    return " · ".join(parts)


def retry_cause(status: int | None) -> str:
    """What a `model_retry` retries after: an HTTP status, a failed connection, or (200)
    an answer that was none (an HTML page, a stream that broke off)."""
    if status == 200:
        return "after an invalid answer"
    return f"after {status}" if status else "after a failed connection"


def model_speed(e: ev.ModelCall) -> str:
    """A model call's time, told apart: how long the server read the prompt and how fast it
    wrote the answer ("prompt read in 3.1s, 120 tokens at 38 tok/s"); counts the server did
    not send are estimates, marked "~"."""
    mark = "~" if e.tokens_estimated else ""
    parts = []
    writing = e.latency_s
    if e.first_token_s is not None:
        parts.append(f"prompt read in {e.first_token_s:.1f}s")
        writing -= e.first_token_s
    tokens = f"{mark}{e.output_tokens:,} tokens"
    if writing > 0 and e.output_tokens:
        tokens += f" at {mark}{e.output_tokens / writing:.0f} tok/s"
    parts.append(tokens)
    return ", ".join(parts)


def job_ok(e: ev.JobEnded) -> bool:
    return e.end == "exited" and e.exit_code == 0


def job_end_line(e: ev.JobEnded) -> str:
    took = format_duration(e.duration_s)
    if e.end == "exited":
        return f"job {e.job} exited {e.exit_code} after {took}"
    why = f": {e.reason}" if e.reason else ""
    return f"job {e.job} {e.end} after {took}{why}"


def attempt_started_line(e: ev.AttemptStarted) -> str:
    """`attempt a2 started: improve from a1 (5m budget): <instructions>`: what a search
    began, as every text display shows it."""
    origin = f"from {printable_line(e.parent)}" if e.parent else "from the starter"
    what = e.operator
    if e.variant:
        what += " " + " ".join(f"{k}={v}" for k, v in e.variant.items())
    budget = f" ({format_duration(e.time_limit_s)} budget)" if e.time_limit_s > 0 else ""
    line = f"attempt {printable_line(e.attempt)} started: {one_line(what, 120)} {origin}{budget}"
    if e.instructions.strip() and not e.variant:
        line += f": {one_line(e.instructions, 200)}"
    return line


def attempt_finished_line(e: ev.AttemptFinished) -> str:
    """`attempt a2 validated: accuracy 0.7812 after 4m 10s` (a validation score, never the
    test split's), `attempt a3 buggy: <why>`; what it changed after a dash."""
    line = f"attempt {printable_line(e.attempt)} {e.status}"
    if e.score is not None:
        line += f": {printable_line(e.metric or 'validation')} {e.score:.4g}"
        if e.status != "validated" and e.why:
            line += f" ({one_line(e.why, 160)})"
    elif e.why:
        line += f": {one_line(e.why, 200)}"
    line += f" after {format_duration(e.duration_s)}"
    if e.summary.strip():
        line += f" — {one_line(e.summary, 160)}"
    return line


def attempt_ok(e: ev.AttemptFinished) -> bool:
    return e.status == "validated"


def graded_attempt_words(
    submission: ev.Submission | None, validation: float | None, test: float | None
) -> str:
    """What follows a search's score: the attempt graded, its validation score and the
    gap (test minus validation), and, where nothing was submitted, that the best validated
    attempt was graded instead. Empty where no attempt was graded."""
    if submission is None or submission.attempt is None:
        return ""
    attempt = printable_line(submission.attempt)
    words = f"attempt {attempt}"
    if submission.by != "agent":  # a deadline, a budget, a stop: nothing was submitted
        words += ", the best validated: nothing was submitted"
    if validation is not None:
        words += f"; validation {validation:.4g}"
        if test is not None:
            words += f", gap {test - validation:+.3g}"
    return f"({words})"


def unknown_line(e: ev.UnknownEvent) -> str:
    return f"unknown event {e.original_type!r} (written by a newer mlra; kept as it is)"


def isolation_words(box: ev.SandboxInfo) -> str:
    """How the commands were confined, with what: "bwrap 0.8.0 at /usr/bin/bwrap",
    "docker 20.10.24 at unix:///var/run/docker.sock"."""
    if box.isolated_by is None:
        return box.isolation
    version = f" {printable_line(box.isolated_by_version)}" if box.isolated_by_version else ""
    return f"{box.isolation}{version} at {printable_line(box.isolated_by)}"


def score_line(e: ev.EvaluationFinished, *, unisolated: bool = True) -> str:
    """The score with its references; `unisolated=False` where a badge says it already."""
    if not e.ok or e.score is None:
        reason = "; ".join(e.violations) or e.error or "no score"
        return f"no score: {printable_line(reason)}"  # the evaluator's words
    parts = [f"{printable_line(e.metric)} = {e.score:.4g}"]
    refs = []
    if e.baseline is not None:
        refs.append(f"baseline {e.baseline:.4g}")
    if e.top is not None:
        refs.append(f"top {e.top:.4g}")
    if e.normalized is not None:
        refs.append(f"normalized {e.normalized:+.3f}")
    if refs:
        parts.append("(" + ", ".join(refs) + ")")
    if e.success is not None:
        verdict = "success" if e.success else "below the success bar"
        bar = printable_line(e.success_bar or "")
        parts.append(f"{verdict} ({bar})" if bar else verdict)
    elif not e.direction_known:
        parts.append(f"(success {printable_line(e.success_bar or 'not judged')})")
    if e.self_reported:
        parts.append("· SELF-REPORTED")  # the workspace's own number, not a measurement
    if e.agent_isolation == "none" and unisolated:
        parts.append("· UNISOLATED")  # the agent ran unconfined: see the Security model
    return " ".join(parts)


def _silence(stream: IO[str]) -> bool:
    """Point the stream's file descriptor at /dev/null, so that what is still buffered,
    the final line and the interpreter's last flush go nowhere instead of failing again.
    True when stderr was the same pipe (`2>&1 | head`) and was silenced with it."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a StringIO: nothing to point elsewhere
        return False
    try:
        same = fd != 2 and os.path.samestat(os.fstat(fd), os.fstat(2))
    except OSError:
        same = False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        if same:
            os.dup2(devnull, 2)
    finally:
        os.close(devnull)
    return same


def tell_stderr(text: str) -> None:
    """A line for the person at the terminal; a stderr nobody reads is not an error."""
    try:
        sys.stderr.write(printable(text) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _Printer:
    """What both displays share: they print until the reader goes away.

    `mlra run ... | head` closes the pipe after a few lines. The run must not die
    of that (a display is an event subscriber, and a subscriber that raises ends the
    run): from the first failed write the display prints nothing more, the run goes
    on, and its event log, the record of the run, is written in full.
    """

    stream: IO[str]
    reader_gone: bool = False
    stderr_gone: bool = False
    on_reader_gone: Callable[[], None] | None = None
    """Told once, when the reader has gone and stderr still reaches someone."""

    def _print(self, write: Callable[[], None]) -> bool:
        """Run one write; False (and nothing further printed) once the reader has gone."""
        if self.reader_gone:
            return False
        try:
            write()
            return True
        except (OSError, ValueError):  # BrokenPipeError; EIO on a closed terminal
            self.reader_gone = True
            self.stderr_gone = _silence(self.stream)
            if not self.stderr_gone and self.on_reader_gone is not None:
                self.on_reader_gone()
            return False

    def line(self, text: str) -> bool:
        """One line as it is (the final line); False when it could not be printed."""

        def write() -> None:
            self.stream.write(text + "\n")
            self.stream.flush()

        return self._print(write)

    def close(self) -> None:
        self._print(self.stream.flush)


class TranscriptDisplay(_Printer):
    """A concise transcript: one or a few lines per meaningful event."""

    def __init__(
        self, stream: IO[str] | None = None, *, rich: bool | None = None, verbose: bool = False
    ) -> None:
        self.stream = stream or sys.stdout
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
        self._waiting: dict[str, str] = {}
        """The tool of each call that waited for approval, by call id (an edit names it)."""
        self._state_limit = 0.0
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

    def read_ahead(self, events: list[ev.Event], run_dir: Path) -> None:
        """A replay knows the whole log: a fork's begins with its source's events, and
        its header names the fork (its id, its workspace), not the source."""
        self._fork = next((e for e in reversed(events) if isinstance(e, ev.RunForked)), None)
        self._fork_dir = run_dir

    def _out(self, text: str, style: str = "") -> None:
        """Print a line (or a few); whatever the run put in it is shown, never obeyed."""
        text = printable(text)
        console = self._console
        if console is not None:
            self._print(lambda: console.print(text, style=style or None, markup=False))
        else:
            self.line(text)

    def on_event(self, event: ev.Event) -> None:
        t = format_duration(event.t)
        match event:
            case ev.RunStarted():
                self._local = bool(event.config.get("base_url"))
                self._state_limit = event.limits.time_limit_s
                box = event.sandbox
                net = "network" if box.network else "no network"
                run, workspace, model = event.run_id, box.workspace, event.model
                fork = self._fork
                if fork is not None:
                    run = (
                        f"{fork.run_id} (a fork of {fork.source_run} at worker step {fork.at_step})"
                    )
                    model = fork.model
                    if fork.sandbox is not None:
                        workspace = fork.sandbox.workspace
                    elif self._fork_dir is not None:
                        workspace = str(self._fork_dir / "workspace")
                self._out(
                    f"▶ {event.task} · {model} · run {run}\n"
                    f"  sandbox {box.kind} ({isolation_words(box)}, {net}) · "
                    f"workspace {workspace} · "
                    f"limit {format_duration(event.limits.time_limit_s)}",
                    "bold",
                )
            case ev.RunForked():
                self._out(f"[{t}] {fork_line(event)}", "bold cyan")
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
                what = "" if event.purpose == "turn" else f"'s {event.purpose}"
                self._out(
                    f"[{t}] {event.agent}{what} answered in {event.latency_s:.1f}s: "
                    + model_speed(event),
                    "dim",
                )
            case ev.ContextWindowLearned():
                self._out(
                    f"[{t}] the model's window is taken as {event.context_window:,} tokens from "
                    f"the server's answer (was {event.assumed or 0:,}); pass --context-window "
                    f"{event.context_window} to start from it",
                    "yellow",
                )
            case ev.ModelRetry():
                after = retry_cause(event.status)
                of = f"/{event.max_retries}" if event.max_retries else ""
                self._out(f"[{t}] {event.agent} model retry {event.attempt}{of} {after}", "yellow")
            case ev.Notice():
                self._out(f"! {event.message}", "yellow" if event.level != "error" else "red")
            case ev.TimeWarning():
                self._out(f"[{t}] ! {time_warning_line(event)}", "yellow")
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
                    f"[{t}] → subtask {event.subtask} [{event.step_id}]: {one_line(event.instructions, 240)}",
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
                    f"[{t}] {who}{describe_call(event.tool, event.arguments, event.raw_arguments)}",
                    "bold blue",
                )
            case ev.ApprovalRequested():
                self._waiting[event.call_id] = event.tool
                self._out(
                    f"[{t}] ? waiting for approval of {event.tool} ({event.reason})", "yellow"
                )
            case ev.ToolOutput():
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
                what = event.path or "(default artifact)"
                if event.attempt is not None:
                    what = f"attempt {event.attempt}'s {what}"
                # Only the agent submits; a deadline or budget grades what is there.
                done = f"submitted {what}" if event.by == "agent" else f"{event.by}: grading {what}"
                self._out(f"[{t}] {done}" + (f" — {event.note}" if event.note else ""), "bold")
            case ev.EvaluationStarted():
                self._regrading = event.regrade_by is not None
                self._out(f"[{t}] evaluating {event.artifact} with {event.evaluator}…")
            case ev.EvaluationProgress():
                self._out(f"[{t}] grading: {progress_words(event)}", "dim")
            case ev.EvaluationFinished():
                line = f"[{t}] score: {score_line(event)}"
                if not self._regrading and self._submission is not None:
                    attempt = self._submission.attempt
                    validation = self._attempt_scores.get(attempt) if attempt else None
                    test = event.score if event.ok else None
                    words = graded_attempt_words(self._submission, validation, test)
                    line += f" {words}" if words else ""
                self._out(line, "bold green" if event.ok else "bold red")
            case ev.RunFinished():
                self._out(f"■ {event.status} ({event.reason}) after {t}: {event.message}", "bold")
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
        if not self.verbose or not event.ok:
            lines = [ln for ln in event.output.rstrip().splitlines() if ln.strip()]
            if lines and lines[-1].startswith(("[exit code", "[timed out")):
                lines.pop()  # the status line repeats what the ✓/✗ line says
            shown = lines[-4:] if event.ok else lines[-8:]
            for line in shown:
                self._out(f"    │ {one_line(line, 200)}", "dim")

    def close(self) -> None:
        if self._console is None:
            super().close()


class JsonDisplay(_Printer):
    """Every event as one JSON line, the same JSON value as in the log: the characters
    the encoder leaves raw that a terminal would obey (C1, bidirectional controls) are
    written as `\\uXXXX` escapes, which any JSON reader reads back to the same text."""

    def __init__(self, stream: IO[str] | None = None, *, include_samples: bool = True) -> None:
        self.stream = stream or sys.stdout
        self.include_samples = include_samples

    def on_event(self, event: ev.Event) -> None:
        self.line(printable_json(encode_event(event).decode("utf-8").removesuffix("\n")))
