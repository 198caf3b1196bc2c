"""The words an event is said in, one line each: a tool call, a job's end, an attempt and
what its own log says, a score with its marks (SELF-REPORTED, UNISOLATED); a model
call's (its speed, a retry's cause) are console/text/model_lines.py's.

Shared by every display (the headless transcript, the console's transcript pane and
status line, the replay, `mlra eval`), so a run reads the same wherever it is shown;
apart from the headless printers (console/text/headless.py) because these only phrase,
they never print. What the run wrote is escaped here (mlra/terminal_text.py).
"""

from __future__ import annotations

import json
from typing import Any

from mlra import events as ev
from mlra.agent.record.state import PAUSED_AFTER_ATTEMPTS
from mlra.console.text.model_lines import learned_window_line, model_call_line, retry_line
from mlra.durations import format_duration
from mlra.scores import format_normalized
from mlra.terminal_text import printable, printable_line
from mlra.tools.attempts import AttemptStartArgs, wait_bound
from mlra.tools.plan import UpdatePlanArgs
from mlra.tools.submission import artifact_words

START_DEFAULT_OPERATOR = str(AttemptStartArgs.model_fields["operator"].default)
SUBMITTED_BY = frozenset({"agent", "user"})
"""A `submission`'s `by` that handed something in; any other grades what there was."""


def time_warning_line(event: ev.TimeWarning) -> str:
    left, limit = format_duration(event.left_s), format_duration(event.limit_s)
    return f"time warning: {left} left of the {limit} limit"


def time_limit_raised_line(event: ev.TimeLimitRaised) -> str:
    """`time limit raised from 35s to 1m05s (attempt a3 started with a larger share); the
    time-out of running call c7 raised with it, to 1m02s`: a command that would have been
    killed at the old deadline runs on."""
    was, now = format_duration(event.was_s), format_duration(event.limit_s)
    line = f"time limit raised from {was} to {now}"
    if event.why:
        line += f" ({printable_line(event.why)})"
    if event.commands:
        calls = ", ".join(printable_line(c) for c in event.commands)
        to = ", ".join(format_duration(s) for s in event.commands.values())
        s = "s" if len(event.commands) > 1 else ""
        line += f"; the time-out{s} of running call{s} {calls} raised with it, to {to}"
    return line


def one_line(text: str, limit: int = 160) -> str:
    """`text` on one line, cut at `limit`, with its control characters escaped."""
    flat = " ".join(text.split())
    return printable_line(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def preview_line(line: str, limit: int = 200) -> str:
    """A line of a tool's output as it was laid out: its indentation (a listing's depth,
    a file read's line numbers) kept, tabs as spaces, cut at `limit`, controls escaped."""
    text = line.rstrip().expandtabs()
    return printable_line(text if len(text) <= limit else text[: limit - 1] + "…")


def describe_call(
    tool: str,
    arguments: dict[str, Any] | None,
    raw: str | None = None,
    *,
    refused: bool = False,
    left_s: float | None = None,
) -> str:
    """A tool call as a person would read it: `$ ls -la` rather than JSON; whatever the
    model put in it is shown, not obeyed (a command keeps its line breaks). `refused`:
    the tool refused these arguments (`tool_call` `refused`), so the call is shown as
    written: a readable form would say what the tool would run, and it ran nothing.
    `left_s`: the run's time left as it was called (agent/record/run_limits.py
    `RunLimits.left_at`), which bounds a wait."""
    if refused and arguments is not None:
        name = printable_line(tool)
        return printable(f"{name} {one_line(json.dumps(arguments, ensure_ascii=False), 200)}")
    return printable(_describe_call(printable_line(tool), arguments, raw, left_s))


def said_call(
    call: ev.ToolCall, left_s: float | None = None, ran_with: dict[str, Any] | None = None
) -> str:
    """A recorded call as `describe_call` says it, as written where its tool refused it.
    `ran_with`: the arguments an edit at its breakpoint ran it with (`RunState.edited_calls`:
    the `tool_call` keeps what the model asked for), said instead."""
    if ran_with is not None:
        return describe_call(call.tool, ran_with, left_s=left_s)
    return describe_call(
        call.tool,
        call.arguments,
        call.raw_arguments,
        refused=call.refused is not None,
        left_s=left_s,
    )


def _wait_words(timeout: object, left_s: float | None) -> str | None:
    """A wait's bound, as the tool keeps it (tools/attempts.py `wait_bound`); None for a
    timeout that is no number (the tool refused it)."""
    if not isinstance(timeout, int | float) or isinstance(timeout, bool):
        return None
    left = None if left_s is None else float(round(left_s))
    return limit_words(wait_bound(float(timeout), left))


def _describe_call(
    tool: str, arguments: dict[str, Any] | None, raw: str | None, left_s: float | None
) -> str:
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
        steps = UpdatePlanArgs.loosely(a).get("steps")  # as the tool reads them
        return f"update_plan ({len(steps) if isinstance(steps, list) else '?'} steps)"
    if tool == "attempt_wait":
        whom = printable_line(str(a["attempt"])) if a.get("attempt") else "any attempt"
        bound = _wait_words(a.get("timeout", 600.0), left_s) or "?"
        return f"attempt_wait for {whom}, up to {bound}"
    if tool == "attempt_start":
        # Left out, it is what the tool takes it to be ("chosen"), never "draft".
        op = printable_line(str(a.get("operator") or START_DEFAULT_OPERATOR))
        parent = f" from {printable_line(str(a['parent']))}" if a.get("parent") else ""
        what = one_line(str(a.get("instructions") or ""), 100)
        return f"attempt_start {op}{parent}" + (f": {what}" if what else "")
    if tool == "attempt_stop" and a.get("attempt"):
        return f"attempt_stop {printable_line(str(a['attempt']))}"
    if tool == "submit" and a.get("attempt"):
        return f"submit attempt {printable_line(str(a['attempt']))}"
    if tool == "submit":
        return f"submit {printable_line(str(a.get('path') or '(default artifact)'))}"
    return f"{tool} {one_line(json.dumps(a, ensure_ascii=False), 120)}"


def submission_line(event: ev.Submission) -> str:
    """A submission as the Worker pane and the headless lines say it, one sentence for
    both: who handed in what, or what a deadline or budget grades (what is there)."""
    what = artifact_words(event.path) if event.path else "(default artifact)"
    if event.attempt is not None:  # a search hands in an attempt's copy
        what = f"attempt {event.attempt}'s {what.removeprefix('the ')}"
    said = f"{event.by}: grading {what}"
    if event.by in SUBMITTED_BY:
        said = f"submitted {what}" + (" (by the user)" if event.by == "user" else "")
    return said + (f" — {event.note}" if event.note else "")


def decider(event: ev.Control) -> str:
    """Who decided a call at its breakpoint: you, `mlra ctl`..., or, in a replay, the
    recorded run's user, whose decision the replay applied."""
    if event.source == ev.REPLAYED:
        return "the recorded user (replayed)"
    return "you" if event.source == "user" else event.source


def decided_line(event: ev.Control) -> str:
    """Said under a call approved or rejected at its breakpoint, above its output (the
    action's name plus "d" read "rejectd")."""
    return f"{'approved' if event.action == 'approve' else 'rejected'} by {decider(event)}"


def replayed_line(event: ev.Control, ran: str = "") -> str:
    """A replay's `control` (`ev.REPLAYED`): the recorded user's edit or rejection of a
    call, applied as it was then; `ran`: the edited call, as said."""
    if event.action == "reject":
        why = event.text or "no reason given"
        return f"replayed the user's rejection of call {event.call_id}: {why}"
    return f"replayed the user's edit of call {event.call_id}" + (f", runs: {ran}" if ran else "")


def control_line(event: ev.Control) -> str:
    """A control as the console's transcript says it: who did what (`you: paused`, a
    pause the run made itself with the keys that go on from it)."""
    words = {
        "pause": "paused",
        "resume": "resumed",
        "step": (printable_line(event.text) if event.text else "stepped one action")
        + (f" of attempt {printable_line(event.target)}" if event.target else ""),
        "approve": "approved the call",
        "reject": f"rejected the call: {event.text or ''}",
        "stop": "stopped the run to evaluate it",
        "quit": "quit the run",
        "breakpoints": f"set breakpoints: {event.text}",
        "edit": "edited the call",
        "inject": f"to the {event.target}: {event.text}",
        "attempt_stop": f"stopped attempt {event.target}",
        "promote": f"promoted attempt {event.target}: the run ends and grades it",
    }
    if event.source == "user":
        return f"you: {words.get(event.action, event.action)}"
    if event.source == ev.REPLAYED:
        return replayed_line(event)
    if event.source == "step" and event.text == PAUSED_AFTER_ATTEMPTS:  # a search's step over
        return f"{PAUSED_AFTER_ATTEMPTS}: n steps again, Space resumes"
    return {
        "start": "paused before the first action (--paused): n steps, Space resumes",
        "step": "paused after one action: n steps again, Space resumes",
        "system": "paused: the model provider keeps failing; Space retries",
        "resume": "paused again, as it was when mlra stopped: n steps, Space resumes",
    }.get(event.source, f"{event.source}: {words.get(event.action, event.action)}")


def limit_words(seconds: float) -> str:
    """A wait's bound as said: `60m` for an hour (a round number of minutes up to an
    hour reads so), else as a duration."""
    if seconds % 60 == 0 and 0 < seconds <= 3600:
        return f"{int(seconds // 60)}m"
    return format_duration(seconds)


def waiting_words(
    arguments: dict[str, Any] | None,
    running: list[str],
    took_s: float,
    left_s: float | None = None,
) -> str:
    """An `attempt_wait` under way in words: `waiting for a1 (1m59s of up to 60m)`;
    `running`: the attempts running now, which a wait for any one of them waits on;
    `left_s`: the run's time left when the wait began, which bounds it as the tool does
    (the greedy policy asks an hour of a run with 18 minutes left)."""
    a = arguments or {}
    named = a.get("attempt")
    if isinstance(named, str) and named:
        whom = printable_line(named)
    elif len(running) == 1:
        whom = printable_line(running[0])
    elif running:
        whom = "any of " + ", ".join(printable_line(r) for r in running)
    else:
        whom = "an attempt"
    bound = _wait_words(a.get("timeout", 600.0), left_s)
    bound = f" of up to {bound}" if bound is not None else ""
    return f"waiting for {whom} ({format_duration(took_s)}{bound})"


def limits_words(settings: dict[str, Any]) -> str:
    """The limits a resume or a fork set (`RunResumed.settings`), and `--paused`, as the
    flags that set them: "--time-limit 9m00s --max-steps 8"; empty where it set none."""
    words = []
    for key, value in settings.items():
        if not isinstance(value, int | float):
            continue
        if key == "time_limit_s":
            words.append(f"--time-limit {format_duration(float(value))}")
        elif key == "max_steps":
            words.append(f"--max-steps {int(value)}")
        elif key == "max_cost_usd":
            words.append(f"--max-cost {float(value):.2f}")
        elif key == "max_tokens":
            words.append(f"--max-tokens {int(value)}")
        elif key == "start_paused" and value is True:
            words.append("--paused")
    return " ".join(words)


def resumed_line(e: ev.RunResumed) -> str:
    limits = limits_words(e.settings)
    return "── the run was resumed here" + (f" with {limits}" if limits else "") + " ──"


def fork_line(e: ev.RunForked) -> str:
    """Where a fork's own events begin: what it is, and what it changed."""
    parts = [f"⑂ this is run {e.run_id}, forked from {e.source_run} at worker step {e.at_step}"]
    parts.append(f"model {e.model}")
    if limits := limits_words(e.settings):
        parts.append(f"given {limits}")
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


def attempt_news(e: ev.Event, *, calls: bool) -> tuple[str, str] | None:
    """What a run shows of one of its attempts' own events (read from the attempt's log,
    console/text/attempt_logs.py) in the words it says its own: each model call's time
    and speed where the model runs on the user's server (`calls`), a notice, a window
    learned from the server, a retry or a wait for it, a history summarized. The line
    and its style; None: not shown."""
    match e:
        case ev.ModelCall() if calls:
            return model_call_line(e), "dim"
        case ev.ContextWindowLearned():
            return learned_window_line(e), "yellow"
        case ev.ModelRetry() if e.in_wait is None:  # else its wait's line said it
            return retry_line(e), "yellow"
        case ev.Notice():
            return f"! {e.message}", "red" if e.level == "error" else "yellow"
        case ev.HistorySummarized():
            return f"{e.agent} history summarized (turns {e.first_turn}–{e.last_turn})", "dim"
        case _:
            return None


def job_ok(e: ev.JobEnded) -> bool:
    return e.end == "exited" and e.exit_code == 0


def job_end_line(e: ev.JobEnded) -> str:
    took = format_duration(e.duration_s)
    if e.end == "exited":
        return f"job {e.job} exited {e.exit_code} after {took}"
    why = f": {e.reason}" if e.reason else ""
    return f"job {e.job} {e.end} after {took}{why}"


def ending_words(e: ev.RunFinished, *, attempt: bool) -> str:
    """`finished (submitted)`: how a run ended, as its last line says it; an attempt's own
    run `finished (attempt ended)`, also from a log that says "submitted" (ev.as_read):
    only the attempt the search picks is handed in."""
    reason = ev.as_read(e, attempt=attempt).reason
    return f"{e.status} ({'attempt ended' if reason == 'attempt_ended' else reason})"


def unknown_line(e: ev.UnknownEvent) -> str:
    return f"unknown event {e.original_type!r} (written by a newer mlra; kept as it is)"


def isolation_words(box: ev.SandboxInfo) -> str:
    """How the commands were confined, with what: "bwrap 0.8.0 at /usr/bin/bwrap",
    "docker 20.10.24 at unix:///var/run/docker.sock"."""
    if box.isolated_by is None:
        return box.isolation
    version = f" {printable_line(box.isolated_by_version)}" if box.isolated_by_version else ""
    return f"{box.isolation}{version} at {printable_line(box.isolated_by)}"


def evaluation_started_line(e: ev.EvaluationStarted) -> str:
    """The run's own grading, or a later `mlra eval` of it (appended to its log after its
    ending, so a replay would otherwise show the run graded twice)."""
    what = f"{printable_line(artifact_words(e.artifact))} with {printable_line(e.evaluator)}"
    if e.regrade_by is None:
        return f"evaluating {what}…"
    by = f" by {printable_line(e.regrade_by)}" if e.regrade_by else ""
    return f"re-grading {what} (mlra eval{by}, after the run)…"


def score_words(e: ev.EvaluationFinished, *, regrade: bool) -> str:
    """`score: ...`, or `re-graded: ...` for an `mlra eval` (the run's score stands)."""
    return f"{'re-graded' if regrade else 'score'}: {score_line(e)}"


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
        refs.append(f"normalized {format_normalized(e.normalized)}")
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
